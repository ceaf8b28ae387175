"""torchvision's RandomApply, RandomChoice and RandomOrder, per sample: one
step on the image holding other steps on the image (colour, blur, rotations,
policies, ``T.Lambda``), run by cpp/conveyor/ops/transforms/compose.cc with
their draws from the sample's (seed, epoch, index) stream.

``T.RandomChoice`` of batch mixes (MixUp, CutMix) is the batch transform of
``conveyor.transforms.batch``; of per-sample transforms, it is this module's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from conveyor._checks import is_real
from conveyor.errors import ConfigError
from conveyor.transforms.base import Transform, engine_defaults

__all__ = ["RandomApply", "RandomChoice", "RandomOrder"]


def _transforms(name: str, transforms: Any) -> list[Transform]:
    if isinstance(transforms, Transform):
        transforms = [transforms]  # torchvision's RandomApply takes one too (wrapped in a list).
    if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Sequence):
        raise ConfigError(f"{name}: transforms must be a list of conveyor transforms, got {transforms!r}")
    for i, t in enumerate(transforms):
        if not isinstance(t, Transform):
            raise ConfigError(
                f"{name}: transforms[{i}] must be a conveyor transform (conveyor.transforms.*; "
                f"from_torchvision converts torchvision's), got {type(t).__name__}"
            )
    return list(transforms)


#: The deepest nesting of RandomApply and its kin (a deeper one, or one that
#: holds itself, is a ConfigError rather than a RecursionError).
MOST_DEPTH = 32


class _Compound(Transform):
    """What the three share: the transforms they hold, passed to the engine
    as the step's children."""

    transforms: list[Transform]

    def _spec(self) -> tuple[Any, ...]:  # type: ignore[override]
        return self._spec_within(0)

    def _spec_within(self, depth: int) -> tuple[Any, ...]:
        if depth >= MOST_DEPTH:
            raise ConfigError(
                f"{type(self).__name__}: transforms nested more than {MOST_DEPTH} deep (or one holds itself)"
            )
        name, params = super()._spec()
        children = [
            t._spec_within(depth + 1) if isinstance(t, _Compound) else t._spec() for t in self.transforms
        ]
        return name, params, None, children

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transforms!r}{self._extra_repr()})"

    def _extra_repr(self) -> str:
        return ""


# The factory's defaults (it needs a child to build: any step on the image).
_APPLY = engine_defaults("random_apply", children=[("random_invert", {})])


class RandomApply(_Compound, name="random_apply"):
    """Apply ``transforms`` in order with probability ``p``, per sample, as
    ``torchvision.transforms.v2.RandomApply`` (e.g. ``RandomApply([ColorJitter(
    0.4, 0.4, 0.4, 0.1)], p=0.8)``): one draw per sample.

    Args:
        transforms: steps on the image (colour, blur, rotations, policies,
            ``T.Lambda``); crops, resizes, flips and Normalize are refused
            (a ConfigError naming the transform).
        p: probability of applying them.
    """

    def __init__(self, transforms: Sequence[Transform], p: float = _APPLY["p"]) -> None:
        self.transforms = _transforms("RandomApply", transforms)
        if not is_real(p):
            raise ConfigError(f"RandomApply: p must be a number, got {p!r}")
        self.p = float(p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"p": self.p}

    def _extra_repr(self) -> str:
        return f", p={self.p}"


class RandomChoice(_Compound, name="random_choice"):
    """Apply one of ``transforms`` per sample, the i-th with probability
    ``p[i] / sum(p)`` (equal without ``p``), as
    ``torchvision.transforms.v2.RandomChoice``.

    Args:
        transforms: steps on the image (as RandomApply's).
        p: one non-negative weight per transform, not all 0; None: equal.
    """

    def __init__(self, transforms: Sequence[Transform], p: Optional[Sequence[float]] = None) -> None:
        self.transforms = _transforms("RandomChoice", transforms)
        if p is not None and (
            isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or not all(is_real(v) for v in p)
        ):
            raise ConfigError(f"RandomChoice: p must be a sequence of numbers, one per transform, got {p!r}")
        self.p = None if p is None else [float(v) for v in p]
        self._check()

    def _params(self) -> dict[str, Any]:
        return {} if self.p is None else {"p": self.p}

    def _extra_repr(self) -> str:
        return f", p={self.p}"


class RandomOrder(_Compound, name="random_order"):
    """Apply ``transforms`` in a random order per sample, as
    ``torchvision.transforms.v2.RandomOrder``.

    Args:
        transforms: steps on the image (as RandomApply's).
    """

    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = _transforms("RandomOrder", transforms)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {}
