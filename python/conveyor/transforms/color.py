"""Colour transforms: Normalize (pointwise, fused into the output pass) and
torchvision's photometric augmentations (run on the decoded image with
per-sample parameters, by the C++ kernels of cpp/conveyor/ops/transforms/
color.cc, blur.cc and histogram.cc)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Optional, Union

from conveyor._checks import is_int, is_real, warn_once
from conveyor.errors import ConfigError
from conveyor.transforms.base import Transform, engine_defaults

__all__ = [
    "ColorJitter",
    "GaussianBlur",
    "Grayscale",
    "Normalize",
    "RandomAdjustSharpness",
    "RandomAutocontrast",
    "RandomEqualize",
    "RandomGrayscale",
    "RandomInvert",
    "RandomPosterize",
    "RandomSolarize",
]


class Normalize(Transform, name="normalize"):
    """``(x / 255 - mean) / std`` per channel, as torchvision's ToTensor then
    Normalize (computed in float32). Must come after every resize and crop.

    Args:
        mean: one value per output channel.
        std: one non-zero value per output channel.

    A mean or std above 1 (the 0–255 scale, e.g. 123.7) warns once: the
    values apply to pixels in [0, 1].
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = self._values("mean", mean)
        self.std = self._values("std", std)
        self._check()
        if any(abs(v) > 1 for v in (*self.mean, *self.std)):
            warn_once(
                "normalize-255",
                f"Normalize(mean={self.mean}, std={self.std}): values > 1 look like the 0-255 scale, but "
                "Normalize works on pixels scaled to [0, 1] (as after ToTensor); divide them by 255",
            )

    @staticmethod
    def _values(arg: str, values: Any) -> list[float]:
        try:
            out = [float(v) for v in values]
        except (TypeError, ValueError):
            raise ConfigError(f"Normalize: {arg} must be a sequence of numbers, got {values!r}") from None
        return out

    def _params(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std}

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


def _real(name: str, arg: str, value: Any) -> float:
    """A real number (never a bool), else ConfigError naming the argument;
    the engine checks its range."""
    if not is_real(value):
        raise ConfigError(f"{name}: {arg} must be a number, got {value!r}")
    return float(value)


class _ColorTransform(Transform):
    """Shared repr of the colour transforms: their arguments in order."""

    _fields: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        args = ", ".join(f"{field}={getattr(self, field)!r}" for field in self._fields)
        return f"{type(self).__name__}({args})"


class ColorJitter(_ColorTransform, name="color_jitter"):
    """Randomly change the brightness, contrast, saturation and hue, as
    ``torchvision.transforms.v2.ColorJitter``: per image, the four adjustments
    in a random order, each factor uniform in its range (v2's uint8
    arithmetic).

    Args:
        brightness: a number b (factor in [max(0, 1 - b), 1 + b]) or a range
            (min, max) of non-negative numbers; None leaves brightness alone.
        contrast: as brightness.
        saturation: as brightness.
        hue: a number h in [0, 0.5] (factor in [-h, h]) or a range (min, max)
            within [-0.5, 0.5].
    """

    _fields = ("brightness", "contrast", "saturation", "hue")

    def __init__(
        self,
        brightness: Optional[Union[float, Sequence[float]]] = None,
        contrast: Optional[Union[float, Sequence[float]]] = None,
        saturation: Optional[Union[float, Sequence[float]]] = None,
        hue: Optional[Union[float, Sequence[float]]] = None,
    ) -> None:
        self.brightness = self._check_input(brightness, "brightness")
        self.contrast = self._check_input(contrast, "contrast")
        self.saturation = self._check_input(saturation, "saturation")
        self.hue = self._check_input(hue, "hue", center=0, clip_first_on_zero=False)
        self._check()

    @staticmethod
    def _check_input(
        value: Any, arg: str, center: float = 1.0, clip_first_on_zero: bool = True
    ) -> Optional[tuple[float, float]]:
        # torchvision's ColorJitter._check_input, with ConfigErrors; the
        # engine checks the range's bounds.
        if value is None:
            return None
        if is_real(value):
            if value < 0:
                raise ConfigError(
                    f"ColorJitter: {arg} must be non-negative when a single number, got {value!r}"
                )
            lo, hi = center - float(value), center + float(value)
            if clip_first_on_zero:
                lo = max(lo, 0.0)
        elif (
            isinstance(value, Sequence)
            and not isinstance(value, str)
            and len(value) == 2
            and all(is_real(v) for v in value)
        ):
            lo, hi = float(value[0]), float(value[1])
        else:
            raise ConfigError(
                f"ColorJitter: {arg} must be a single number or a pair (min, max), got {value!r}"
            )
        return None if lo == hi == center else (lo, hi)

    def _params(self) -> dict[str, Any]:
        return {arg: value for arg in self._fields if (value := getattr(self, arg)) is not None}


class Grayscale(_ColorTransform, name="grayscale"):
    """Convert to grayscale, as ``torchvision.transforms.v2.Grayscale``
    (0.2989 R + 0.587 G + 0.114 B, truncated, as v2 on uint8 tensors).

    The batch's channel count is fixed by the loader's ``channels=``, so
    ``num_output_channels`` must equal it: ``Grayscale(1)`` needs
    ``channels=1`` (the image is then decoded to one channel and this
    transform leaves it as it is, as torchvision does with a one-channel
    image), ``Grayscale(3)`` gives three equal channels with ``channels=3``.
    Any other pairing is a ConfigError when the pipeline is built.

    Args:
        num_output_channels: 1 or 3.
    """

    _fields = ("num_output_channels",)

    def __init__(
        self, num_output_channels: int = int(engine_defaults("grayscale")["num_output_channels"])
    ) -> None:
        if not is_int(num_output_channels):
            raise ConfigError(f"Grayscale: num_output_channels must be 1 or 3, got {num_output_channels!r}")
        self.num_output_channels = int(num_output_channels)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"num_output_channels": self.num_output_channels}


class RandomGrayscale(_ColorTransform, name="random_grayscale"):
    """Convert to grayscale with probability ``p``, keeping the channel count,
    as ``torchvision.transforms.v2.RandomGrayscale``.

    Args:
        p: probability of converting an image.
    """

    _fields = ("p",)

    def __init__(self, p: float = engine_defaults("random_grayscale")["p"]) -> None:
        self.p = _real("RandomGrayscale", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"p": self.p}


class GaussianBlur(_ColorTransform, name="gaussian_blur"):
    """Blur with a Gaussian kernel whose sigma is drawn per image, as
    ``torchvision.transforms.v2.GaussianBlur`` (reflect padding; v2's kernel
    and rounding on uint8).

    Args:
        kernel_size: an odd positive int, or a pair (x, y) of them.
        sigma: a positive number (fixed) or a range (min, max) drawn uniformly.
    """

    _fields = ("kernel_size", "sigma")

    def __init__(
        self,
        kernel_size: Union[int, Sequence[int]],
        sigma: Union[float, Sequence[float]] = engine_defaults("gaussian_blur", kernel_size=3)["sigma"],
    ) -> None:
        self.kernel_size = _kernel_size("GaussianBlur", kernel_size)
        self.sigma = _sigma_pair("GaussianBlur", sigma)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"kernel_size": list(self.kernel_size), "sigma": list(self.sigma)}


def _kernel_size(name: str, kernel_size: Any) -> tuple[int, int]:
    """(x, y) from an int or one or two ints (the engine checks that each is
    odd and positive)."""
    if is_int(kernel_size):
        pair = (int(kernel_size), int(kernel_size))
    elif (
        isinstance(kernel_size, Sequence)
        and not isinstance(kernel_size, str)
        and len(kernel_size) in (1, 2)
        and all(is_int(k) for k in kernel_size)
    ):
        pair = (int(kernel_size[0]), int(kernel_size[-1]))
    else:
        raise ConfigError(f"{name}: kernel_size must be an int or a pair of ints, got {kernel_size!r}")
    return pair


def _sigma_pair(name: str, sigma: Any) -> tuple[float, float]:
    """(x, y) or (min, max) from a number or one or two numbers (the engine
    checks that each is positive)."""
    if is_real(sigma):
        pair = (float(sigma), float(sigma))
    elif (
        isinstance(sigma, Sequence)
        and not isinstance(sigma, str)
        and len(sigma) in (1, 2)
        and all(is_real(s) for s in sigma)
    ):
        pair = (float(sigma[0]), float(sigma[-1]))
    else:
        raise ConfigError(f"{name}: sigma must be a number or a pair of numbers, got {sigma!r}")
    return pair


def _bits(name: str, bits: Any) -> int:
    if not is_int(bits):
        raise ConfigError(f"{name}: bits must be an int in [0, 8], got {bits!r}")
    return int(bits)


class RandomInvert(_ColorTransform, name="random_invert"):
    """Invert (255 - x) with probability ``p``, as ``torchvision.transforms.v2.RandomInvert``.

    Args:
        p: probability of inverting an image.
    """

    _fields = ("p",)

    def __init__(self, p: float = engine_defaults("random_invert")["p"]) -> None:
        self.p = _real("RandomInvert", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"p": self.p}


class RandomPosterize(_ColorTransform, name="random_posterize"):
    """Keep the top ``bits`` bits of each value with probability ``p``, as
    ``torchvision.transforms.v2.RandomPosterize``.

    Args:
        bits: bits to keep, an int in [0, 8].
        p: probability of posterizing an image.
    """

    _fields = ("bits", "p")

    def __init__(self, bits: int, p: float = engine_defaults("random_posterize", bits=8)["p"]) -> None:
        self.bits = _bits("RandomPosterize", bits)
        self.p = _real("RandomPosterize", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"bits": self.bits, "p": self.p}


class RandomSolarize(_ColorTransform, name="random_solarize"):
    """Invert every value >= ``threshold`` with probability ``p``, as
    ``torchvision.transforms.v2.RandomSolarize``.

    Args:
        threshold: values at or above it are inverted (at most 255).
        p: probability of solarizing an image.
    """

    _fields = ("threshold", "p")

    def __init__(
        self, threshold: float, p: float = engine_defaults("random_solarize", threshold=128)["p"]
    ) -> None:
        self.threshold = _real("RandomSolarize", "threshold", threshold)
        self.p = _real("RandomSolarize", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "p": self.p}


class RandomAdjustSharpness(_ColorTransform, name="random_adjust_sharpness"):
    """Adjust the sharpness with probability ``p``, as
    ``torchvision.transforms.v2.RandomAdjustSharpness`` (0 blurs, 1 keeps, 2
    sharpens twice as much; the one-pixel border is unchanged).

    Args:
        sharpness_factor: a non-negative number.
        p: probability of adjusting an image.
    """

    _fields = ("sharpness_factor", "p")

    def __init__(
        self,
        sharpness_factor: float,
        p: float = engine_defaults("random_adjust_sharpness", sharpness_factor=1)["p"],
    ) -> None:
        self.sharpness_factor = _real("RandomAdjustSharpness", "sharpness_factor", sharpness_factor)
        self.p = _real("RandomAdjustSharpness", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"sharpness_factor": self.sharpness_factor, "p": self.p}


class RandomAutocontrast(_ColorTransform, name="random_autocontrast"):
    """Stretch each channel to [0, 255] with probability ``p``, as
    ``torchvision.transforms.v2.RandomAutocontrast``.

    Args:
        p: probability of autocontrasting an image.
    """

    _fields = ("p",)

    def __init__(self, p: float = engine_defaults("random_autocontrast")["p"]) -> None:
        self.p = _real("RandomAutocontrast", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"p": self.p}


class RandomEqualize(_ColorTransform, name="random_equalize"):
    """Equalize each channel's histogram with probability ``p``, as
    ``torchvision.transforms.v2.RandomEqualize``.

    Args:
        p: probability of equalizing an image.
    """

    _fields = ("p",)

    def __init__(self, p: float = engine_defaults("random_equalize")["p"]) -> None:
        self.p = _real("RandomEqualize", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"p": self.p}
