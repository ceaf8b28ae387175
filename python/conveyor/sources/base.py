"""The base class of sources and what they share."""

from __future__ import annotations

import errno
import operator
import os
from collections.abc import Sequence
from typing import IO, Any, Optional, Union

import numpy as np

from conveyor import _conveyor
from conveyor.errors import ConfigError, DecodeError, ReadError, _printable_path

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: File extensions of the image formats the decoders read (JPEG, PNG, WebP, TIFF,
#: BMP, PPM, PGM; torchvision's IMG_EXTENSIONS): what ImageFolder takes, the image
#: member of a tar sample and what ``conveyor pack`` packs. One list, defined in
#: C++ (io/image_formats.h). GIF, not in torchvision's list, is decoded wherever
#: its bytes arrive (a FileList, a member named ``.jpg``).
IMG_EXTENSIONS: tuple[str, ...] = tuple("." + extension for extension in _conveyor.IMAGE_EXTENSIONS)


def fs_paths(paths: Sequence[str]) -> list[bytes]:
    """The paths as the engine takes them: raw bytes (``os.fsencode``), so that
    names that are not UTF-8 round-trip."""
    return [os.fsencode(path) for path in paths]


def check_index(index: Any, size: int, name: str) -> int:
    """``index`` as a position in [0, size): negative indices count from the
    end, as Python's; IndexError out of range, TypeError for a non-integer."""
    try:
        position = operator.index(index)
    except TypeError:
        raise TypeError(f"{name} indices must be integers, not {type(index).__name__}") from None
    if position < 0:
        position += size
    if not 0 <= position < size:
        raise IndexError(f"{name} index {index} is out of range for {size} samples")
    return position


def read_error(key: str, cause: str) -> ReadError:
    """A ReadError naming ``key`` (a path, or ``archive:member``) and ``cause``."""
    return ReadError(f"{_printable_path(key)}: {cause}", key=key, cause=cause)


def open_regular_file(path: str) -> IO[bytes]:
    """``path`` open for reading, opened by the engine as every file conveyor
    reads: a FIFO, socket or device is refused by name (never waited on, never
    read without end). Raises ReadError naming it ("not found" when missing)."""
    try:
        descriptor = _conveyor.open_regular_file(os.fsencode(path))
    except ReadError as e:
        if e.cause == os.strerror(errno.ENOENT):
            raise read_error(path, "not found") from None
        raise
    return os.fdopen(descriptor, "rb")


class Source:
    """Base class of conveyor's sources.

    A subclass provides the engine-side source (``_engine_source``) and may
    override how samples are turned into tensors (``_sample_transform``); by
    default samples are encoded images run through the image pipeline, or
    raw pixels of ``raw_shape`` when that is set.

    ``source[i]`` returns sample ``i`` decoded, for a look at it: ``(image,
    label)`` with ``image`` a uint8 H×W×C numpy array as stored (no
    transforms), ``(image, target)`` for sources with boxes. Negative indices
    count from the end; IndexError out of range; a sample that can't be read
    or decoded raises ReadError/DecodeError naming it.
    """

    #: True when samples carry boxes (detection): the Loader then returns targets.
    has_boxes = False
    #: With Loader(shuffle=True): None shuffles the whole epoch uniformly; N
    #: shuffles the shard order, then through a buffer of N samples.
    shuffle_buffer: Optional[int] = None
    #: (height, width, channels) when samples are raw uint8 pixels (MNIST,
    #: CIFAR, arrays) rather than encoded images: the image pipeline then
    #: takes them without a decode, and the chain starts from that size.
    raw_shape: Optional[tuple[int, int, int]] = None
    #: True when some samples are read from URLs (remote storage).
    _remote = False

    def _image_id(self, label: int) -> int:
        """The id reported in a detection target for a sample with ``label``."""
        return label

    def __len__(self) -> int:
        return len(self._engine_source())

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        position = check_index(index, len(self), type(self).__name__)
        data, label, key = self._engine_source().read(position)
        return self._decode_sample(position, data, key), self._target(position, label)

    def _decode_sample(self, index: int, data: bytes, key: str) -> Any:
        """Sample ``index``'s record bytes as an array (``source[i]``)."""
        if self.raw_shape is not None:
            return np.frombuffer(data, np.uint8).reshape(self.raw_shape).copy()
        try:
            return _conveyor.decode_image(data)
        except DecodeError as e:
            raise type(e)(f"{key}: {e.cause}", key=key, cause=e.cause) from e

    def _target(self, index: int, label: int) -> Any:
        """What ``source[i]`` returns beside the image: the label."""
        return label

    def _engine_source(self) -> _conveyor.Source:
        raise NotImplementedError

    def _sample_transform(self, transforms: Sequence[Any], **output: Any) -> _conveyor.SampleTransform:
        """The engine transform for this source's samples; ``output`` holds
        dtype, layout, max_pixels and (when given) channels as given to the Loader."""
        from conveyor.transforms import compile_pipeline

        # The Loader batches samples of any size (as lists of tensors), and
        # writes them into batch buffers its threads do not read again.
        if self.raw_shape is not None:
            channels = output.pop("channels", self.raw_shape[2])
            if channels != self.raw_shape[2]:
                raise ConfigError(
                    f"channels={channels!r}: {type(self).__name__}'s samples are raw pixels of "
                    f"{self.raw_shape[2]} channel(s), which the loader does not convert; leave channels unset"
                )
            return compile_pipeline(
                transforms,
                channels=channels,
                raw_shape=self.raw_shape,
                variable_size=True,
                stream_output=True,
                **output,
            )
        return compile_pipeline(transforms, variable_size=True, stream_output=True, **output)
