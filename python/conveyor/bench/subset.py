"""Which images a benchmark run takes from a folder: the same ones on every
side (conveyor, DataLoader, the peers), so each reads the same bytes."""

from __future__ import annotations

from typing import Optional


def spread(count: int, limit: Optional[int]) -> list[int]:
    """``limit`` indices spread evenly over ``range(count)`` (all when None)."""
    if limit is None or limit >= count:
        return list(range(count))
    return [i * count // limit for i in range(limit)]
