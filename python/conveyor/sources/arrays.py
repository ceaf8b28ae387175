"""Samples held in numpy arrays or ``.npy`` files."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np

from conveyor import _conveyor
from conveyor._checks import INT64_MAX, INT64_MIN, check_int
from conveyor.errors import ConfigError, _printable_path
from conveyor.sources.base import PathLike, Source, open_regular_file, read_error

#: Element types a tensor sample may have: those of the engine's batches.
TENSOR_DTYPES = ("uint8", "int64", "float16", "float32")


def _load_npy(path: str, what: str) -> np.ndarray:
    """The ``.npy`` file at ``path``, memory-mapped read-only (nothing is read
    but its header). The engine opens it, as every file conveyor reads: a
    FIFO or device is refused by name, never waited on. The header's size
    (shape × item size) is checked against the file's before it is mapped."""
    _conveyor.check_path(os.fsencode(path), f"ArraySource: {what}")
    with open_regular_file(path) as f:
        try:
            version = np.lib.format.read_magic(f)
            # Version 3 differs from 2 only by a UTF-8 header, which matters
            # only for field names (structured dtypes are refused below).
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran_order, dtype = read_header(f)
        except (OSError, ValueError, EOFError) as e:
            f.seek(0)
            if f.read(4) == b"PK\x03\x04":
                raise ConfigError(
                    f"ArraySource: {what} {_printable_path(path)} is not a .npy file (an .npz archive?)"
                ) from None
            raise read_error(path, f"not a .npy file ({e})") from e
        if dtype.hasobject:
            raise ConfigError(
                f"ArraySource: {what} {_printable_path(path)} holds Python objects ({dtype}), which are "
                "never loaded (numpy's allow_pickle=False)"
            )
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
        needed = math.prod(shape) * dtype.itemsize  # Python ints: never wraps.
        if offset + needed > size:
            layout = "×".join(map(str, shape)) or "a scalar"
            raise read_error(
                path,
                f"truncated .npy file: the header says {layout} {dtype} ({needed} bytes from offset "
                f"{offset}), the file has {size} bytes",
            )
        if needed == 0:  # mmap refuses a length of 0.
            return np.empty(shape, dtype, order="F" if fortran_order else "C")
        return np.memmap(f, dtype, "r", offset, shape, "F" if fortran_order else "C")


def _as_labels(labels: Any, count: int) -> list[int]:
    """The labels as the engine takes them (int64), each checked: Python or
    numpy integers (not bools) in the int64 range, never cast (a uint64
    2**64 - 1 would become -1, "no label")."""
    if labels is None:
        return []
    if isinstance(labels, (str, bytes, os.PathLike)):
        labels = _load_npy(os.fsdecode(labels), "labels")
    if not isinstance(labels, np.ndarray):
        try:
            items = list(labels)
        except TypeError:
            what = type(labels).__name__
            raise ConfigError(
                f"ArraySource: labels must be a 1-D integer array or a list of ints, got {what}"
            ) from None
        if len(items) != count:
            raise ConfigError(f"ArraySource: labels has {len(items)} entries for {count} images")
        return [check_int(label, f"ArraySource: labels[{i}]") for i, label in enumerate(items)]
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise ConfigError(
            f"ArraySource: labels must be a 1-D integer array, got {labels.dtype} of shape {labels.shape}"
        )
    if len(labels) != count:
        raise ConfigError(f"ArraySource: labels has {len(labels)} entries for {count} images")
    if labels.dtype.kind == "u" and labels.dtype.itemsize == 8:
        beyond = np.flatnonzero(labels > np.uint64(INT64_MAX))
        if len(beyond):
            i = int(beyond[0])
            check_int(int(labels[i]), f"ArraySource: labels[{i}]", minimum=INT64_MIN, maximum=INT64_MAX)
    return labels.astype(np.int64).tolist()


class ArraySource(Source):
    """Samples from a numpy array (N×...) or a ``.npy`` file, with optional labels.

    Arrays of uint8 N×H×W×C (C = 1 or 3) or N×H×W are images: raw pixels
    that go through the image transforms without a decode, the chain starting
    from the fixed H×W (so ``transforms=[]`` batches them as they are).
    Anything else (another dtype, or C not 1 or 3) is a tensor per sample,
    batched as it is (shape ``array.shape[1:]``, the array's dtype; the
    Loader's ``dtype``/``layout`` do not apply); image transforms are then a
    ConfigError. Tensor dtypes: uint8, int64, float16, float32 (convert others
    with ``astype``).

    A path opens the ``.npy`` file to read its header, checked against the
    file's size, and maps it read-only (``images`` is that memmap); the Loader then reads each sample
    with a positional read, so a file larger than memory is never loaded and
    the resident memory stays flat. An in-memory array is read in place (a
    non-contiguous one is copied once); it must not change while a Loader
    reads it.

    Args:
        images: an array of N samples, or the path of a ``.npy`` file.
        labels: one integer label per sample (a 1-D integer array or list, or
            a ``.npy`` path), or None (every label -1).

    Raises:
        ConfigError: an array with no sample, a dtype that is not supported,
            an object or Fortran-order ``.npy`` file, image sides beyond the
            engine's int (2**31 - 1), a path holding a NUL byte, or labels
            that are not 1-D integers with one entry per sample (a label
            outside int64, e.g. a uint64 2**64 - 1, or a bool, names
            ``labels[i]``; labels are never cast).
        ReadError: a path that does not exist, is not a regular file (a FIFO
            is refused, never waited on), is not a ``.npy`` file or is shorter
            than its header says, naming it.
    """

    def __init__(
        self,
        images: Union[np.ndarray, PathLike],
        labels: Optional[Union[Sequence[int], np.ndarray, PathLike]] = None,
    ) -> None:
        path: Optional[str] = None
        if isinstance(images, (str, bytes, os.PathLike)):
            path = os.fsdecode(images)
            images = _load_npy(path, "images")
        if not isinstance(images, np.ndarray):
            raise ConfigError(
                f"ArraySource: images must be a numpy array or a .npy path, got {type(images).__name__}"
            )
        if images.ndim < 1 or len(images) == 0:
            raise ConfigError(f"ArraySource: images holds no sample (shape {images.shape})")
        #: The samples (for a path: the read-only memmap of the file).
        self.images = images
        self.sample_shape: tuple[int, ...] = tuple(int(d) for d in images.shape[1:])
        self.dtype = images.dtype
        if images.dtype == np.uint8 and images.ndim == 3:
            self.raw_shape = (*self.sample_shape, 1)  # type: ignore[assignment]
        elif images.dtype == np.uint8 and images.ndim == 4 and images.shape[3] in (1, 3):
            self.raw_shape = self.sample_shape  # type: ignore[assignment]
        elif images.dtype.name not in TENSOR_DTYPES or not images.dtype.isnative:
            raise ConfigError(
                f"ArraySource: images of dtype {images.dtype} are not supported: images are uint8 "
                f"N×H×W×C (C = 1 or 3) or N×H×W; tensors are {', '.join(TENSOR_DTYPES)} "
                "(convert with astype)"
            )
        if self.raw_shape is not None:
            try:  # The engine's rule for raw image sizes (its int sides), named here.
                _conveyor.raw_image_shape(*self.raw_shape)
            except ConfigError as e:
                where = self._name() if path is None else _printable_path(path)
                raise ConfigError(f"ArraySource: {where}: {e}") from None
        label_list = _as_labels(labels, len(images))
        sample_bytes = math.prod(self.sample_shape) * images.dtype.itemsize  # Python ints: never wraps.
        if sample_bytes == 0:
            raise ConfigError(f"ArraySource: samples of shape {self.sample_shape} hold no value")
        if path is not None:
            if not images.flags.c_contiguous:
                raise ConfigError(
                    f"ArraySource: {_printable_path(path)} is in Fortran order; save it in C order"
                )
            self._source = _conveyor.ArraySource.from_file(
                os.fsencode(path), int(images.offset), len(images), sample_bytes, label_list
            )
        else:
            data = np.ascontiguousarray(images).reshape(-1).view(np.uint8)
            self._source = _conveyor.ArraySource(data, sample_bytes, label_list, os.fsencode(self._name()))

    def _name(self) -> str:
        """What keys start with for an in-memory array: ``images[i]``."""
        return "images"

    def __len__(self) -> int:
        return len(self._source)

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    def _decode_sample(self, index: int, data: bytes, key: str) -> Any:
        if self.raw_shape is not None:
            return super()._decode_sample(index, data, key)
        return np.frombuffer(data, self.dtype).reshape(self.sample_shape).copy()

    def _sample_transform(self, transforms: Sequence[Any], **output: Any) -> _conveyor.SampleTransform:
        if self.raw_shape is not None:
            return super()._sample_transform(transforms, **output)
        if transforms or output.get("channels") is not None:
            what = "leave channels unset"
            if transforms:
                what = "image transforms do not apply; pass transforms=None"
            raise ConfigError(
                f"ArraySource: samples are {self.dtype} tensors of shape {self.sample_shape}, not images "
                f"(uint8 N×H×W×C, C = 1 or 3): {what}"
            )
        return _conveyor.TensorCopyTransform(list(self.sample_shape), self.dtype.name)
