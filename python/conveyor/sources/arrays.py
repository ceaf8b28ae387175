"""Samples held in numpy arrays or ``.npy`` files."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np

from conveyor import _conveyor
from conveyor.errors import ConfigError, ReadError, _printable_path
from conveyor.sources.base import PathLike, Source

#: Element types a tensor sample may have: those of the engine's batches.
TENSOR_DTYPES = ("uint8", "int64", "float16", "float32")


def _load_npy(path: str, what: str) -> np.ndarray:
    """The ``.npy`` file at ``path``, memory-mapped (nothing is read but its header)."""
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError as e:
        raise ReadError(f"{_printable_path(path)}: not found", key=path, cause="not found") from e
    except (OSError, ValueError, EOFError) as e:
        raise ReadError(f"{_printable_path(path)}: not a .npy file ({e})", key=path, cause=str(e)) from e
    if not isinstance(array, np.memmap):
        raise ConfigError(
            f"ArraySource: {what} {_printable_path(path)} is not a .npy file (an .npz archive?)"
        )
    return array


def _as_labels(labels: Any, count: int) -> list[int]:
    if labels is None:
        return []
    if isinstance(labels, (str, bytes, os.PathLike)):
        labels = _load_npy(os.fsdecode(labels), "labels")
    array = np.asarray(labels)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ConfigError(
            f"ArraySource: labels must be a 1-D integer array, got {array.dtype} of shape {array.shape}"
        )
    if len(array) != count:
        raise ConfigError(f"ArraySource: labels has {len(array)} entries for {count} images")
    return array.astype(np.int64).tolist()


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

    A path opens the ``.npy`` file with ``numpy.load(mmap_mode="r")`` to read
    its header (``images`` is that memmap); the Loader then reads each sample
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
            an object or Fortran-order ``.npy`` file, or labels that are not 1-D
            integers with one entry per sample.
        ReadError: a path that does not exist or is not a ``.npy`` file, naming it.
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
        label_list = _as_labels(labels, len(images))
        sample_bytes = int(np.prod(self.sample_shape, dtype=np.int64)) * images.dtype.itemsize
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
        if transforms:
            raise ConfigError(
                f"ArraySource: samples are {self.dtype} tensors of shape {self.sample_shape}, not images "
                "(uint8 N×H×W×C, C = 1 or 3): image transforms do not apply; pass transforms=None"
            )
        return _conveyor.TensorCopyTransform(list(self.sample_shape), self.dtype.name)
