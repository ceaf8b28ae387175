"""The functional ``erase``, as torchvision.transforms.v2.functional.erase on
uint8 images: runs the C++ image function of the same name (erase.cc)."""

from __future__ import annotations

from typing import Any

from conveyor._checks import is_int
from conveyor.errors import ConfigError
from conveyor.transforms.erase import erase_values
from conveyor.transforms.functional._image import ImageLike, apply

__all__ = ["erase"]


def erase(inpt: ImageLike, i: int, j: int, h: int, w: int, v: Any, inplace: bool = False) -> ImageLike:
    """Set rows ``[i, i + h)`` and columns ``[j, j + w)`` (clipped to the
    image) to ``v``: a number, one number per channel, or a tensor of as
    many values (torchvision's ``v`` of shape (C, 1, 1)); values convert to
    uint8 as torch's assignment does (truncated, wrapping below 0).
    ``inplace`` is accepted for torchvision compatibility (the result is
    always a new image)."""
    for arg, value in (("i", i), ("j", j), ("h", h), ("w", w)):
        if not is_int(value) or value < 0:
            raise ConfigError(f"erase: {arg} must be an int >= 0, got {value!r}")
    if hasattr(v, "reshape") and hasattr(v, "tolist"):
        v = v.reshape(-1).tolist()
    if not isinstance(inplace, bool):
        raise ConfigError(f"erase: inplace must be a bool, got {inplace!r}")
    params = {"i": int(i), "j": int(j), "h": int(h), "w": int(w), "v": erase_values("erase", "v", v)}
    return apply("erase", "erase", inpt, params)
