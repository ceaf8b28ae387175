"""Any map-style Python dataset returning encoded image bytes or decoded
images."""

from __future__ import annotations

from typing import Any

import numpy as np

from conveyor import _conveyor
from conveyor.errors import ConfigError
from conveyor.sources.base import Source


def _pixels(image: Any) -> np.ndarray:
    """A decoded image as uint8 H×W (one channel) or H×W×3 pixels."""
    kind = type(image)
    if kind.__module__.startswith("PIL.") and hasattr(image, "mode"):
        # As torchvision's folder loader: RGB, but a grayscale image stays one channel.
        return np.asarray(image if image.mode in ("L", "RGB") else image.convert("RGB"))
    if kind.__module__ == "torch" and hasattr(image, "permute"):
        if str(image.dtype) != "torch.uint8":
            raise TypeError(
                f"__getitem__ returned a {image.dtype} tensor; return uint8 images (no ToTensor in the "
                "dataset: the loader's dtype= makes float batches scaled to [0, 1])"
            )
        if image.ndim == 3:  # torchvision's C×H×W.
            image = image.permute(1, 2, 0)
        image = image.contiguous().numpy()
    if not isinstance(image, np.ndarray):
        raise TypeError(
            f"__getitem__ returned {kind.__module__}.{kind.__qualname__}; expected encoded image bytes, a "
            "decoded image (a PIL image, an H×W×C uint8 array, a C×H×W uint8 tensor) or an (image, label) "
            "pair"
        )
    if image.dtype != np.uint8:
        raise TypeError(f"__getitem__ returned a {image.dtype} array; return uint8 images")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)):
        raise TypeError(
            f"__getitem__ returned an image of shape {tuple(image.shape)}; expected H×W, H×W×1 or H×W×3 "
            "(a tensor: C×H×W)"
        )
    return image


def encode_decoded_image(image: Any) -> bytes:
    """A decoded image as PNM bytes: a text header and the raw pixels (P5 for
    one channel, P6 for three), which the engine reads back exactly, with no
    compression to undo."""
    pixels = _pixels(image)
    height, width = pixels.shape[:2]
    header = f"P{5 if pixels.ndim == 2 else 6}\n{width} {height}\n255\n".encode()
    return header + np.ascontiguousarray(pixels).tobytes()


class PythonSource(Source):
    """Samples from any map-style Python object: ``len(dataset)`` samples and
    ``dataset[i]`` returning an image or an ``(image, label)`` pair. The
    image is encoded bytes (bytes, bytearray, memoryview), which go through
    the image pipeline like files do, or a decoded image, as a DataLoader
    dataset without transforms returns it: a PIL image (converted to RGB as
    torchvision's folder loader does, grayscale kept), an H×W×C or H×W uint8
    numpy array, or a C×H×W uint8 torch tensor. A decoded image goes through
    the native transform chain with its pixels exactly (it is handed over as
    uncompressed PNM); float images (after ``ToTensor``) are refused: leave
    the transforms to the Loader.

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
        self._source = _conveyor.PythonSource(dataset, encode_decoded_image)

    def __len__(self) -> int:
        return len(self._source)

    def _engine_source(self) -> _conveyor.Source:
        return self._source
