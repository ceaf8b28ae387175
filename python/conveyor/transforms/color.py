"""Pointwise (colour) transforms, fused into the output pass."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from conveyor._checks import warn_once
from conveyor.errors import ConfigError
from conveyor.transforms.base import Transform

__all__ = ["Normalize"]


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
        if len(self.mean) != len(self.std):
            raise ConfigError(f"Normalize: mean has {len(self.mean)} values but std has {len(self.std)}")
        if any(s == 0 for s in self.std):
            raise ConfigError(f"Normalize: std must be non-zero, got {list(std)!r}")
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
        if not out or not all(math.isfinite(v) for v in out):
            raise ConfigError(f"Normalize: {arg} must be non-empty and finite, got {values!r}")
        return out

    def _params(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std}

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"
