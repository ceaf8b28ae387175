"""The colour ops of the functional API, as torchvision.transforms.v2.functional
(v2's uint8 arithmetic): each runs the registered C++ image function of the
same name, the kernel the random transforms use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

from conveyor._checks import is_int
from conveyor.errors import ConfigError
from conveyor.transforms.color import _bits, _kernel_size, _real, _sigma_pair
from conveyor.transforms.functional._image import ImageLike, apply

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "adjust_sharpness",
    "autocontrast",
    "equalize",
    "gaussian_blur",
    "invert",
    "posterize",
    "rgb_to_grayscale",
    "solarize",
    "to_grayscale",
]


def adjust_brightness(inpt: ImageLike, brightness_factor: float) -> ImageLike:
    """``x * brightness_factor``, clamped (0 gives black, 1 the original)."""
    factor = _real("adjust_brightness", "brightness_factor", brightness_factor)
    return apply("adjust_brightness", "adjust_brightness", inpt, {"brightness_factor": factor})


def adjust_contrast(inpt: ImageLike, contrast_factor: float) -> ImageLike:
    """Blend with the mean gray level (0 gives a uniform gray image, 1 the original)."""
    factor = _real("adjust_contrast", "contrast_factor", contrast_factor)
    return apply("adjust_contrast", "adjust_contrast", inpt, {"contrast_factor": factor})


def adjust_saturation(inpt: ImageLike, saturation_factor: float) -> ImageLike:
    """Blend each pixel with its gray level (0 gives grayscale, 1 the original);
    a one-channel image is returned unchanged."""
    factor = _real("adjust_saturation", "saturation_factor", saturation_factor)
    return apply("adjust_saturation", "adjust_saturation", inpt, {"saturation_factor": factor})


def adjust_hue(inpt: ImageLike, hue_factor: float) -> ImageLike:
    """Shift the hue by ``hue_factor`` turns (in [-0.5, 0.5]) in HSV space; a
    one-channel image is returned unchanged."""
    factor = _real("adjust_hue", "hue_factor", hue_factor)
    return apply("adjust_hue", "adjust_hue", inpt, {"hue_factor": factor})


def rgb_to_grayscale(inpt: ImageLike, num_output_channels: int = 1) -> ImageLike:
    """``0.2989 R + 0.587 G + 0.114 B`` (truncated), as 1 or 3 equal channels."""
    channels = num_output_channels
    if not is_int(channels):
        raise ConfigError(f"rgb_to_grayscale: num_output_channels must be 1 or 3, got {channels!r}")
    return apply("rgb_to_grayscale", "rgb_to_grayscale", inpt, {"num_output_channels": int(channels)})


#: torchvision's alias (v1's name for rgb_to_grayscale).
to_grayscale = rgb_to_grayscale


def gaussian_blur(
    inpt: ImageLike,
    kernel_size: Union[int, Sequence[int]],
    sigma: Optional[Union[float, Sequence[float]]] = None,
) -> ImageLike:
    """Gaussian blur with reflect padding.

    Args:
        kernel_size: an odd positive int, or a pair (x, y) of them.
        sigma: a positive number, or a pair (x, y); None gives
            ``0.15 * kernel_size + 0.35`` per axis (torchvision's default).
    """
    params: dict[str, Any] = {"kernel_size": list(_kernel_size("gaussian_blur", kernel_size))}
    if sigma is not None:
        params["sigma"] = list(_sigma_pair("gaussian_blur", sigma))
    return apply("gaussian_blur", "gaussian_blur", inpt, params)


def invert(inpt: ImageLike) -> ImageLike:
    """``255 - x``."""
    return apply("invert", "invert", inpt, {})


def posterize(inpt: ImageLike, bits: int) -> ImageLike:
    """Keep the top ``bits`` bits (an int in [0, 8]) of each value."""
    return apply("posterize", "posterize", inpt, {"bits": _bits("posterize", bits)})


def solarize(inpt: ImageLike, threshold: float) -> ImageLike:
    """Invert every value >= ``threshold`` (at most 255)."""
    return apply("solarize", "solarize", inpt, {"threshold": _real("solarize", "threshold", threshold)})


def adjust_sharpness(inpt: ImageLike, sharpness_factor: float) -> ImageLike:
    """Blend with a 3×3-smoothed image (0 blurs, 1 keeps, 2 sharpens); the
    one-pixel border is unchanged."""
    factor = _real("adjust_sharpness", "sharpness_factor", sharpness_factor)
    return apply("adjust_sharpness", "adjust_sharpness", inpt, {"sharpness_factor": factor})


def autocontrast(inpt: ImageLike) -> ImageLike:
    """Stretch each channel's [min, max] to [0, 255]."""
    return apply("autocontrast", "autocontrast", inpt, {})


def equalize(inpt: ImageLike) -> ImageLike:
    """Equalize each channel's histogram (PIL's rule, as v2)."""
    return apply("equalize", "equalize", inpt, {})
