"""The base class of sources and what they share."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional, Union

from conveyor import _conveyor

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: File extensions of the image formats the decoders read (JPEG, PNG, WebP):
#: what ImageFolder takes, the image member of a tar sample and what
#: ``conveyor pack`` packs. One list, defined in C++ (io/image_formats.h).
IMG_EXTENSIONS: tuple[str, ...] = tuple("." + extension for extension in _conveyor.IMAGE_EXTENSIONS)

#: torchvision's ImageFolder extensions that the decoders do not read yet.
UNSUPPORTED_IMG_EXTENSIONS: tuple[str, ...] = tuple(
    e
    for e in (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    if e not in IMG_EXTENSIONS
)


def fs_paths(paths: Sequence[str]) -> list[bytes]:
    """The paths as the engine takes them: raw bytes (``os.fsencode``), so that
    names that are not UTF-8 round-trip."""
    return [os.fsencode(path) for path in paths]


class Source:
    """Base class of conveyor's sources.

    A subclass provides the engine-side source (``_engine_source``) and may
    override how samples are turned into tensors (``_sample_transform``); by
    default samples are encoded images run through the image pipeline.
    """

    #: True when samples carry boxes (detection): the Loader then returns targets.
    has_boxes = False
    #: With Loader(shuffle=True): None shuffles the whole epoch uniformly; N
    #: shuffles the shard order, then through a buffer of N samples.
    shuffle_buffer: Optional[int] = None
    #: True when some samples are read from URLs (remote storage): the Loader
    #: then defaults to more reads in flight (REMOTE_IO_THREADS).
    _remote = False

    def _image_id(self, label: int) -> int:
        """The id reported in a detection target for a sample with ``label``."""
        return label

    def __len__(self) -> int:
        return len(self._engine_source())

    def _engine_source(self) -> _conveyor.Source:
        raise NotImplementedError

    def _sample_transform(self, transforms: Sequence[Any], **output: Any) -> _conveyor.SampleTransform:
        """The engine transform for this source's samples; ``output`` holds
        dtype, layout and max_pixels as given to the Loader."""
        from conveyor.transforms import compile_pipeline

        return compile_pipeline(transforms, **output)
