"""T.Lambda: a user function (or any callable, e.g. a custom transform
object) as a step of the chain, run on the engine's threads."""

from __future__ import annotations

from typing import Any, Callable

import numpy

from conveyor.errors import ConfigError
from conveyor.transforms.base import Transform

__all__ = ["Lambda"]


class Lambda(Transform):
    """Runs ``fn`` on each sample's image, anywhere in the chain.

    ``fn`` receives the image as a uint8 H×W×C numpy array (C = the loader's
    channels) and returns one (of any size, the same channel count; anything
    ``numpy.asarray`` turns into that — a PIL image too — and for one channel
    an H×W array). It may modify the array in place and return it: then no
    copy is made. Crops and resizes before it are applied to the image it
    receives; those after it apply to what it returns; a chain ending with it
    (or with no crop or resize to (h, w) after it) gives variable-size
    samples (the batch is a list of tensors).

    It runs on the engine's cpu threads, holding the GIL only while ``fn``
    runs: Python code in ``fn`` runs one sample at a time however many
    threads there are (numpy/OpenCV calls that release the GIL overlap).
    An exception in ``fn`` fails that sample: the error (InternalError, or
    skipped and counted with ``on_error="skip"``) names its key and has the
    exception as ``__cause__``, with its traceback. ``fn`` gets no random
    stream: for identical output with any thread count, it must be a
    function of its input. Boxes (detection) are not moved by ``fn``.

    Args:
        fn: any callable taking and returning an image array.
    """

    def __init__(self, fn: Callable[[numpy.ndarray], Any]) -> None:
        if not callable(fn):
            raise ConfigError(f"Lambda: fn must be callable, got {type(fn).__name__} {fn!r}")
        self.fn = fn
        self.label = f"Lambda({getattr(fn, '__qualname__', None) or type(fn).__qualname__})"

    def _params(self) -> dict[str, Any]:
        return {}

    def _spec(self) -> tuple[str, dict[str, list[float]], Callable[[numpy.ndarray], numpy.ndarray]]:  # type: ignore[override]
        """(name, no parameters, the function the engine calls)."""
        return self.label, {}, _checked(self.fn, self.label)

    def __repr__(self) -> str:
        return self.label


def _checked(fn: Callable[[numpy.ndarray], Any], label: str) -> Callable[[numpy.ndarray], numpy.ndarray]:
    # What the engine takes back: the same array, or a C-contiguous uint8
    # H×W×C array with the input's channel count (else the sample fails,
    # saying what came back).
    def call(image: numpy.ndarray) -> numpy.ndarray:
        result = fn(image)
        if result is image:
            return image
        out = numpy.asarray(result)
        channels = image.shape[2]
        if out.ndim == 2 and channels == 1:
            out = out[:, :, None]
        if out.dtype != numpy.uint8 or out.ndim != 3 or out.shape[2] != channels or 0 in out.shape:
            raise ValueError(
                f"{label} must return a uint8 H×W×{channels} array (the chain's {channels} channel(s)), "
                f"got {type(result).__name__} of dtype {out.dtype} and shape {out.shape}"
            )
        return numpy.ascontiguousarray(out)

    return call
