"""Sources: where samples come from. A source maps a sample index to a record
(encoded bytes, a label, and a key naming the sample in errors); the Loader
reads many records at once on its io threads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional, Union

from conveyor import _conveyor
from conveyor.errors import ConfigError

__all__ = ["IMG_EXTENSIONS", "FileList", "ImageFolder", "Source"]

PathLike = Union[str, "os.PathLike[str]"]

#: File extensions ImageFolder accepts: torchvision's IMG_EXTENSIONS.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class Source:
    """Base class of conveyor's sources.

    A subclass provides the engine-side source (``_engine_source``) and may
    override how samples are turned into tensors (``_sample_transform``); by
    default samples are encoded images run through the image pipeline.
    """

    def __len__(self) -> int:
        return len(self._engine_source())

    def _engine_source(self) -> _conveyor.Source:
        raise NotImplementedError

    def _sample_transform(self, transforms: Sequence[Any], **output: Any) -> _conveyor.SampleTransform:
        """The engine transform for this source's samples; ``output`` holds
        dtype, layout and max_pixels as given to the Loader."""
        from conveyor.transforms import compile_pipeline

        return compile_pipeline(transforms, **output)


class FileList(Source):
    """Image files given as a list of paths, with optional integer labels.

    Args:
        paths: image file paths.
        labels: one class index per path, or None (every label is -1).
    """

    def __init__(self, paths: Sequence[PathLike], labels: Optional[Sequence[int]] = None) -> None:
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise ConfigError("FileList: paths is empty")
        if labels is not None and len(labels) != len(self.paths):
            raise ConfigError(f"FileList: labels has {len(labels)} entries for {len(self.paths)} paths")
        self.labels = None if labels is None else [int(label) for label in labels]
        self._source = _conveyor.FileSource(self.paths, self.labels or [])

    def __len__(self) -> int:
        return len(self.paths)

    def _engine_source(self) -> _conveyor.Source:
        return self._source


class ImageFolder(FileList):
    """Images stored as ``root/<class>/**/<image>``, with torchvision's rules:
    classes are the sorted sub-folder names, ``class_to_idx`` maps each to its
    index, files with IMG_EXTENSIONS (case-insensitive) are taken in sorted
    order, following symbolic links.

    Raises:
        ConfigError: root does not exist, has no class folders, or no images.
    """

    def __init__(self, root: PathLike, extensions: Sequence[str] = IMG_EXTENSIONS) -> None:
        self.root = os.fspath(root)
        if not os.path.isdir(self.root):
            raise ConfigError(f"ImageFolder: {self.root} is not a directory")
        self.classes = sorted(entry.name for entry in os.scandir(self.root) if entry.is_dir())
        if not self.classes:
            raise ConfigError(f"ImageFolder: no class folders found in {self.root}")
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        allowed = tuple(e.lower() for e in extensions)
        paths: list[str] = []
        labels: list[int] = []
        for name in self.classes:
            class_dir = os.path.join(self.root, name)
            for folder, _, files in sorted(os.walk(class_dir, followlinks=True)):
                for file in sorted(files):
                    if file.lower().endswith(allowed):
                        paths.append(os.path.join(folder, file))
                        labels.append(self.class_to_idx[name])
        if not paths:
            raise ConfigError(
                f"ImageFolder: found no images in {self.root} (extensions: {', '.join(allowed)})"
            )
        super().__init__(paths, labels)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(path, class index) pairs in sample order, as torchvision's ImageFolder."""
        assert self.labels is not None
        return list(zip(self.paths, self.labels))
