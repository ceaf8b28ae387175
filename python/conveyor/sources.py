"""Sources: where samples come from. A source maps a sample index to a record
(encoded bytes, a label, and a key naming the sample in errors); the Loader
reads many records at once on its io threads.
"""

from __future__ import annotations

import csv
import glob
import os
import re
from collections.abc import Sequence
from typing import Any, Optional, Union

from conveyor import _conveyor
from conveyor.errors import ConfigError, ReadError

__all__ = [
    "IMG_EXTENSIONS",
    "MNIST",
    "FashionMNIST",
    "CocoDetection",
    "FileList",
    "ImageFolder",
    "PythonSource",
    "Source",
    "TarShards",
    "expand_shards",
]

PathLike = Union[str, "os.PathLike[str]"]

#: File extensions ImageFolder accepts: torchvision's IMG_EXTENSIONS.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class Source:
    """Base class of conveyor's sources.

    A subclass provides the engine-side source (``_engine_source``) and may
    override how samples are turned into tensors (``_sample_transform``); by
    default samples are encoded images run through the image pipeline.
    """

    #: True when samples carry boxes (detection): the Loader then returns targets.
    has_boxes = False

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


class FileList(Source):
    """Image files given as a list of paths, with optional integer labels and
    optional boxes (for detection).

    Args:
        paths: image file paths.
        labels: one class index per path, or None (every label is -1).
        boxes: per path, its objects as ``(x, y, width, height, category)`` in
            pixels; the Loader then returns each batch's boxes moved along
            with the image's crops, resizes and flips (see ``Loader(targets=)``).
    """

    def __init__(
        self,
        paths: Sequence[PathLike],
        labels: Optional[Sequence[int]] = None,
        boxes: Optional[Sequence[Sequence[tuple[float, float, float, float, int]]]] = None,
    ) -> None:
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise ConfigError("FileList: paths is empty")
        for name, values in (("labels", labels), ("boxes", boxes)):
            if values is not None and len(values) != len(self.paths):
                raise ConfigError(f"FileList: {name} has {len(values)} entries for {len(self.paths)} paths")
        self.labels = None if labels is None else [int(label) for label in labels]
        self.has_boxes = boxes is not None
        self._source = _conveyor.FileSource(self.paths, self.labels or [], [list(b) for b in boxes or []])

    def __len__(self) -> int:
        return len(self.paths)

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    @classmethod
    def from_csv(cls, path: PathLike) -> FileList:
        """A FileList from a CSV file with a header row naming the columns
        ``path`` and ``label`` (``label`` may be absent: every label is -1;
        other columns are ignored). Relative paths are relative to the CSV
        file's folder.

        Raises:
            ReadError: the CSV file can't be read.
            ConfigError: a missing column, an empty path, a label that is not an
                integer (naming ``file:line``), or no rows.
        """
        csv_path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(csv_path))
        try:
            with open(csv_path, newline="", encoding="utf-8") as file:
                rows = list(csv.reader(file))
        except OSError as e:
            raise ReadError(f"{csv_path}: {e.strerror or e}", key=csv_path, cause=str(e.strerror or e)) from e
        except (UnicodeDecodeError, csv.Error) as e:
            raise ConfigError(f"{csv_path}: not a UTF-8 CSV file ({e})") from e
        if not rows:
            raise ConfigError(f"{csv_path}: empty file; expected a header row with the columns path,label")
        header = [name.strip().lower() for name in rows[0]]
        if "path" not in header:
            raise ConfigError(f"{csv_path}:1: the header row {rows[0]} has no 'path' column")
        path_column = header.index("path")
        label_column = header.index("label") if "label" in header else None
        paths: list[str] = []
        labels: list[int] = []
        for line, row in enumerate(rows[1:], start=2):
            if not row or all(not cell.strip() for cell in row):
                continue  # Blank lines, e.g. at the end.
            if len(row) != len(header):
                raise ConfigError(f"{csv_path}:{line}: expected {len(header)} columns, got {len(row)}")
            file = row[path_column].strip()
            if not file:
                raise ConfigError(f"{csv_path}:{line}: empty path")
            paths.append(os.path.join(folder, file))
            if label_column is not None:
                text = row[label_column].strip()
                try:
                    labels.append(int(text))
                except ValueError:
                    raise ConfigError(f"{csv_path}:{line}: label {text!r} is not an integer") from None
        if not paths:
            raise ConfigError(f"{csv_path}: no rows after the header")
        return cls(paths, labels if label_column is not None else None)


class ImageFolder(FileList):
    """Images stored as ``root/<class>/**/<image>``, with torchvision's rules:
    classes are the sorted sub-folder names, ``class_to_idx`` maps each to its
    index, files with IMG_EXTENSIONS (case-insensitive) are taken in sorted
    order, following symbolic links.

    Like torchvision (``allow_empty=False``, its default), a class folder
    without any image is an error: its index would silently match no sample.
    With ``allow_empty=True`` such classes keep their index and have no samples.

    Raises:
        ConfigError: root does not exist, has no class folders, or no images;
            or a class folder has no image and ``allow_empty`` is False.
    """

    def __init__(
        self, root: PathLike, extensions: Sequence[str] = IMG_EXTENSIONS, allow_empty: bool = False
    ) -> None:
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
        empty = sorted(set(self.classes) - {self.classes[label] for label in labels})
        if empty and not allow_empty:
            raise ConfigError(
                f"ImageFolder: found no images for the classes {', '.join(empty)} in {self.root} "
                f"(extensions: {', '.join(allowed)}); pass allow_empty=True to keep them"
            )
        super().__init__(paths, labels)

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(path, class index) pairs in sample order, as torchvision's ImageFolder."""
        assert self.labels is not None
        return list(zip(self.paths, self.labels))


# --- tar shards -------------------------------------------------------------------------

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


def _expand_braces(pattern: str) -> list[str]:
    """Expands ``{000..009}`` ranges (zero padding kept) and ``{a,b,c}`` lists,
    left to right, as webdataset's braceexpand does for shard URLs."""
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    body = match.group(1)
    range_match = _RANGE.match(body)
    if range_match is not None:
        first, last = range_match.group(1), range_match.group(2)
        width = len(first) if first.lstrip("-").startswith("0") or len(first) == len(last) else 0
        start, stop = int(first), int(last)
        step = 1 if stop >= start else -1
        choices = [str(n).zfill(width) for n in range(start, stop + step, step)]
    elif "," in body:
        choices = body.split(",")
    else:
        choices = ["{" + body + "}"]  # Not an expansion: kept literally.
        return [pattern[: match.end()] + rest for rest in _expand_braces(pattern[match.end() :])]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [head + choice + rest for choice in choices for rest in _expand_braces(tail)]


def expand_shards(shards: Union[PathLike, Sequence[PathLike]]) -> list[str]:
    """The shard paths named by a pattern or a list of them, in order: brace
    expansion (``data/shard-{000..009}.tar``, ``{train,val}``) and then glob
    patterns (``data/*.tar``, sorted); a plain path is kept as is (a missing
    file is reported when it is opened).

    Raises:
        ConfigError: no shard given, or a glob pattern matches no file.
    """
    items = [shards] if isinstance(shards, (str, os.PathLike)) else list(shards)
    paths: list[str] = []
    for item in items:
        for pattern in _expand_braces(os.fspath(item)):
            if glob.has_magic(pattern):
                matches = sorted(glob.glob(pattern))
                if not matches:
                    raise ConfigError(f"TarShards: no file matches {pattern}")
                paths.extend(matches)
            else:
                paths.append(pattern)
    if not paths:
        raise ConfigError("TarShards: no shards given")
    return paths


class TarShards(Source):
    """Samples stored WebDataset-style in tar shards (as written by
    ``conveyor pack`` or webdataset's ShardWriter): members sharing a prefix
    (the path up to the first "." of the file name) form one sample; its image
    is the ``jpg``, ``jpeg``, ``png`` or ``webp`` member, its label the integer
    in ``cls`` (-1 without one); other members (``json``, ...) are readable
    with ``field()``.

    Shards are memory-mapped and indexed once, so every sample is randomly
    accessible: ``Loader(shuffle=True)`` shuffles globally, across shards, with
    no shuffle buffer. Sample keys are ``"shard.tar:member"``.

    Args:
        shards: a pattern (``"data/shard-{000..009}.tar"``, ``"data/*.tar"``)
            or a list of paths or patterns.
        shuffle_buffer: not supported (and not needed: see above); must be None.

    Raises:
        ConfigError: no shard matches, no samples, or shuffle_buffer is given.
        ReadError: a shard is missing, unreadable, truncated or corrupt, or a
            sample has no image, a duplicate member or a malformed ``cls``
            (naming ``shard.tar:member``).
    """

    def __init__(
        self, shards: Union[PathLike, Sequence[PathLike]], shuffle_buffer: Optional[int] = None
    ) -> None:
        if shuffle_buffer is not None:
            raise ConfigError(
                "TarShards: shuffle_buffer is not supported yet; shards are random access, so "
                "Loader(shuffle=True) already shuffles globally"
            )
        self.shards = expand_shards(shards)
        self._source = _conveyor.TarShardSource(self.shards)

    def __len__(self) -> int:
        return len(self._source)

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    def fields(self, index: int) -> list[str]:
        """The member names of sample ``index`` without its prefix, e.g. ``["cls", "jpg", "json"]``."""
        return list(self._source.fields(index))

    def field(self, index: int, name: str) -> bytes:
        """The bytes of member ``name`` (e.g. ``"json"``) of sample ``index``."""
        return self._source.field(index, name)

    def key(self, index: int) -> str:
        """``"shard.tar:member"`` of sample ``index``'s image."""
        return self._source.key(index)


# --- IDX files (MNIST) ---------------------------------------------------------------------


def _find_file(folders: Sequence[str], name: str) -> str:
    for folder in folders:
        for candidate in (name, name + ".gz"):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                return path
    tried = ", ".join(os.path.join(folder, name) + "[.gz]" for folder in folders)
    raise ReadError(f"{name}: not found (tried {tried})", key=name, cause="not found")


def _raw_transform(
    sample_shape: Sequence[int], transforms: Sequence[Any], output: dict[str, Any]
) -> _conveyor.SampleTransform:
    """The engine transform of raw uint8 pixels: only Normalize is supported."""
    from conveyor.transforms import Normalize

    mean: list[float] = []
    std: list[float] = []
    for transform in transforms:
        if not isinstance(transform, Normalize):
            raise ConfigError(
                f"raw-pixel sources support only Normalize as a transform, got {type(transform).__name__}"
            )
        if mean:
            raise ConfigError("raw-pixel sources support a single Normalize")
        mean = [float(v) for v in _as_list(transform.mean)]
        std = [float(v) for v in _as_list(transform.std)]
    dtype = str(output.get("dtype", "float32")).replace("torch.", "")
    if dtype not in ("uint8", "float32"):
        raise ConfigError(f"raw-pixel sources produce uint8 or float32, not {dtype}")
    if dtype == "uint8" and mean:
        raise ConfigError("Normalize needs dtype float32, not uint8")
    layout = output.get("layout", "CHW")
    if layout not in ("CHW", "HWC"):
        raise ConfigError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
    height, width = int(sample_shape[0]), int(sample_shape[1])
    channels = int(sample_shape[2]) if len(sample_shape) > 2 else 1
    return _conveyor.RawTensorTransform(
        height, width, channels=channels, dtype=dtype, channels_first=layout == "CHW", mean=mean, std=std
    )


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class MNIST(Source):
    """The MNIST digits from their IDX files, as torchvision's MNIST: 28×28
    uint8 images and labels 0–9. Files are looked up in ``root`` and in
    ``root/MNIST/raw`` (torchvision's layout), plain or ``.gz``; plain files are
    memory-mapped, ``.gz`` files decompressed once into memory. Nothing is
    downloaded.

    Samples are raw pixels, not encoded images: the Loader's ``transforms`` may
    only hold a ``Normalize`` (``dtype="float32"``: values scaled to [0, 1] and
    normalized; ``dtype="uint8"``: pixels as stored). Batches are N×1×28×28
    (layout "CHW") or N×28×28×1 ("HWC").

    Raises:
        ReadError: a file is missing, or not a valid IDX file (naming it).
        ConfigError: the image and label files disagree on the sample count.
    """

    #: Sub-folder of ``root`` that torchvision uses.
    folder = "MNIST"
    classes = [
        "0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
        "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine",
    ]  # fmt: skip

    def __init__(self, root: PathLike, train: bool = True) -> None:
        self.root = os.fspath(root)
        self.train = bool(train)
        prefix = "train" if self.train else "t10k"
        folders = [self.root, os.path.join(self.root, self.folder, "raw")]
        self.images_path = _find_file(folders, f"{prefix}-images-idx3-ubyte")
        self.labels_path = _find_file(folders, f"{prefix}-labels-idx1-ubyte")
        self._source = _conveyor.IdxSource(self.images_path, self.labels_path)
        if len(self._source) == 0:
            raise ConfigError(f"{type(self).__name__}: {self.images_path} holds no samples")

    def __len__(self) -> int:
        return len(self._source)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Dimensions of one sample in the file: (28, 28)."""
        return tuple(self._source.sample_shape)

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    def _sample_transform(self, transforms: Sequence[Any], **output: Any) -> _conveyor.SampleTransform:
        return _raw_transform(self.sample_shape, transforms, output)


class FashionMNIST(MNIST):
    """Fashion-MNIST (same IDX files as MNIST, in ``root`` or ``root/FashionMNIST/raw``)."""

    folder = "FashionMNIST"
    classes = [
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ]  # fmt: skip


# --- Python datasets -----------------------------------------------------------------------


class PythonSource(Source):
    """Samples from any map-style Python object: ``len(dataset)`` samples and
    ``dataset[i]`` returning encoded image bytes (bytes, bytearray, memoryview)
    or a ``(bytes, label)`` pair. The bytes go through the image pipeline like
    files do.

    ``__getitem__`` is called from the Loader's io threads, each call holding
    the GIL only while it runs, so up to ``io_threads`` calls are in flight when
    it waits on I/O (network, disk, ``time.sleep``). It must be thread-safe.
    An exception it raises becomes a ``ReadError`` naming the sample
    (``"Type[index]"``), the exception type and message, with the original
    exception as ``__cause__`` (traceback included).

    The length is read once, at construction.

    Raises:
        ConfigError: ``dataset`` has no ``__len__`` or ``__getitem__``.
    """

    def __init__(self, dataset: Any) -> None:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ConfigError(
                f"PythonSource: {type(dataset).__name__} needs __len__ and __getitem__ (a map-style dataset)"
            )
        self.dataset = dataset
        self._source = _conveyor.PythonSource(dataset)

    def __len__(self) -> int:
        return len(self._source)

    def _engine_source(self) -> _conveyor.Source:
        return self._source


# --- COCO detection --------------------------------------------------------------------------


class CocoDetection(FileList):
    """Images of a COCO "instances" annotation file, with their boxes.

    Images are taken in id order (as torchvision's CocoDetection); the file is
    parsed once in C++. Through a Loader each batch is ``(images, targets)``:
    every object's box (COCO's x, y, width, height, in pixels of the
    transformed image) follows the sample's crops, resizes and flips; boxes
    cropped away are dropped, partly visible ones clipped. ``targets`` is a
    list of per-image dicts or one padded dict (``Loader(targets=...)``).
    ``targets(i)`` gives the untransformed annotations of sample ``i``.
    Segmentations (polygons, RLE) and keypoints are not parsed.

    Args:
        images_dir: folder holding the images (``file_name`` is relative to it).
        annotation_json: path of ``instances_*.json``.

    Raises:
        ReadError: the annotation file is unreadable or malformed (naming it and
            the entry, e.g. ``annotations[3].bbox``).
        ConfigError: the file lists no image.
    """

    def __init__(self, images_dir: PathLike, annotation_json: PathLike) -> None:
        self.images_dir = os.fspath(images_dir)
        self.annotation_json = os.fspath(annotation_json)
        self._images, categories = _conveyor.read_coco(self.annotation_json)
        if not self._images:
            raise ConfigError(f"CocoDetection: {self.annotation_json} lists no image")
        #: Image ids in sample order.
        self.ids: list[int] = [image["id"] for image in self._images]
        #: Category id -> name.
        self.categories: dict[int, str] = {c["id"]: c["name"] for c in categories}
        paths = [os.path.join(self.images_dir, image["file_name"]) for image in self._images]
        boxes = [
            [(*box, category) for box, category in zip(image["boxes"], image["category_ids"])]
            for image in self._images
        ]
        super().__init__(paths, list(range(len(paths))), boxes)

    def _image_id(self, label: int) -> int:
        return self.ids[label]  # The label of sample i is i.

    def targets(self, index: int) -> dict[str, Any]:
        """Annotations of sample ``index``: ``image_id``, ``width``, ``height``,
        ``boxes`` (list of (x, y, w, h) in pixels, COCO's xywh), ``category_ids``,
        ``annotation_ids``, ``iscrowd`` and ``area``, one entry per object in
        the file's order."""
        image = self._images[int(index)]
        return {
            "image_id": image["id"],
            "width": image["width"],
            "height": image["height"],
            "boxes": list(image["boxes"]),
            "category_ids": list(image["category_ids"]),
            "annotation_ids": list(image["annotation_ids"]),
            "iscrowd": list(image["iscrowd"]),
            "area": list(image["area"]),
        }
