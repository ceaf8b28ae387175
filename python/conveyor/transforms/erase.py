"""RandomErasing: erases a random rectangle of the written output (after
Normalize, in the output pass), as ``torchvision.transforms.v2.RandomErasing``;
run by cpp/conveyor/ops/transforms/erase.cc."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

from conveyor._checks import is_real
from conveyor.errors import ConfigError
from conveyor.transforms.base import Transform, _range, engine_defaults

__all__ = ["RandomErasing"]


def erase_values(name: str, arg: str, value: Any) -> list[float]:
    """A number or a non-empty sequence of numbers, as a list (the engine
    checks that they are finite)."""
    values = [value] if is_real(value) else value
    if (
        isinstance(values, (str, bytes))
        or not isinstance(values, Sequence)
        or not values
        or not all(is_real(v) for v in values)
    ):
        raise ConfigError(f"{name}: {arg} must be a number or a sequence of numbers, got {value!r}")
    return [float(v) for v in values]


_DEFAULTS = engine_defaults("random_erasing")


class RandomErasing(Transform, name="random_erasing"):
    """Erase a random rectangle with probability ``p``, as
    ``torchvision.transforms.v2.RandomErasing``: up to 10 attempts of an area
    fraction uniform in ``scale`` and an aspect ratio (h / w) log-uniform in
    ``ratio``, kept when smaller than the image, else no erase. Works on the
    written output, so it must come after every other transform (after
    Normalize: ``value`` is in the normalized space, as torchvision's on a
    normalized tensor); with a uint8 output it erases uint8 values (a value
    converts as torch's assignment: truncated, wrapping below 0). Boxes are
    left alone, as in torchvision.

    Args:
        p: probability of erasing.
        scale: range (min, max) within [0, 1] of the erased area's fraction.
        ratio: range (min, max) of positive aspect ratios.
        value: a number, one number per output channel, or "random" (standard
            normal values per element, drawn from the sample's stream).
        inplace: accepted for torchvision compatibility (the output is always
            written in place).
    """

    def __init__(
        self,
        p: float = _DEFAULTS["p"],
        scale: Sequence[float] = _DEFAULTS["scale"],
        ratio: Sequence[float] = _DEFAULTS["ratio"],
        value: Union[float, Sequence[float], str] = 0.0,
        inplace: bool = False,
    ) -> None:
        if not is_real(p):
            raise ConfigError(f"RandomErasing: p must be a number, got {p!r}")
        self.p = float(p)
        self.scale = _range("RandomErasing", "scale", scale)
        self.ratio = _range("RandomErasing", "ratio", ratio)
        if isinstance(value, str):
            if value != "random":
                raise ConfigError(f"RandomErasing: value must be numbers or 'random', got {value!r}")
            self.value: Union[float, list[float], str] = "random"
        else:
            values = erase_values("RandomErasing", "value", value)
            self.value = values[0] if is_real(value) else values
        if not isinstance(inplace, bool):
            raise ConfigError(f"RandomErasing: inplace must be a bool, got {inplace!r}")
        self.inplace = inplace
        self._check()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"p": self.p, "scale": list(self.scale), "ratio": list(self.ratio)}
        if self.value == "random":
            params["random"] = 1
        else:
            params["value"] = self.value
        return params

    def __repr__(self) -> str:
        return (
            f"RandomErasing(p={self.p!r}, scale={self.scale!r}, ratio={self.ratio!r}, value={self.value!r}, "
            f"inplace={self.inplace!r})"
        )
