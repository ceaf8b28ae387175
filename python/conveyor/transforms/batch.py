"""Batch transforms: torchvision.transforms.v2's MixUp and CutMix, run by the
engine on each whole batch, in place, before it is handed out.

``Loader(batch_transforms=[T.RandomChoice([T.MixUp(), T.CutMix()])])`` is
torchvision's reference training recipe. The labels of a mixed batch are an
N×num_classes float32 tensor (one-hot, then mixed as torchvision mixes them).
Every random choice of a batch (which mix, lambda ~ Beta(alpha, alpha), the
CutMix box) comes from (seed, epoch, batch index): the same for any thread
count and after resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

from conveyor import _conveyor
from conveyor._checks import check_int, is_real
from conveyor.errors import ConfigError
from conveyor.transforms.base import Transform

__all__ = ["BatchTransform", "CutMix", "MixUp", "RandomChoice"]


class BatchTransform:
    """Base class of the batch transforms the engine runs (MixUp, CutMix,
    RandomChoice of them)."""

    def _options(self) -> list[_conveyor.MixOption]:
        raise NotImplementedError

    def _num_classes(self) -> Optional[int]:
        raise NotImplementedError

    def _probabilities(self) -> list[float]:
        return []

    def _spec(self, default_classes: Optional[int], channels_last: bool) -> _conveyor.BatchMixSpec:
        """The engine's BatchMixSpec, num_classes defaulting to ``default_classes``."""
        num_classes = self._num_classes()
        if num_classes is None:
            num_classes = default_classes
        if num_classes is None:
            raise ConfigError(
                f"{type(self).__name__}: num_classes is required (the source has no .classes to take it from)"
            )
        return self._engine_spec(num_classes, channels_last)

    def _engine_spec(self, num_classes: int, channels_last: bool) -> _conveyor.BatchMixSpec:
        spec = _conveyor.BatchMixSpec()
        spec.options = self._options()
        spec.p = self._probabilities()
        spec.num_classes = num_classes
        spec.channels_last = channels_last
        return spec

    def _check(self) -> None:
        """Hands the arguments to the engine's rules now (as torchvision's
        constructors raise): ConfigError naming the transform and argument."""
        num_classes = self._num_classes()
        spec = self._engine_spec(0 if num_classes is None else num_classes, False)
        _conveyor.check_batch_mix_arguments(spec, num_classes is not None)


class _Mix(BatchTransform):
    _kind: _conveyor.MixKind

    def __init__(self, alpha: float = 1.0, num_classes: Optional[int] = None) -> None:
        name = type(self).__name__
        if not is_real(alpha):
            raise ConfigError(f"{name}: alpha must be a finite number > 0, got {alpha!r}")
        self.alpha = float(alpha)
        self.num_classes = None if num_classes is None else check_int(num_classes, f"{name}: num_classes")
        self._check()

    def _options(self) -> list[_conveyor.MixOption]:
        return [_conveyor.MixOption(self._kind, self.alpha)]

    def _num_classes(self) -> Optional[int]:
        return self.num_classes

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes})"


class MixUp(_Mix):
    """torchvision.transforms.v2.MixUp: each image becomes
    ``lambda * image + (1 - lambda) * previous image`` (the batch rolled by
    one), lambda ~ Beta(alpha, alpha) per batch; the labels likewise.

    Args:
        alpha: the Beta distribution's parameter, > 0.
        num_classes: columns of the one-hot labels; None takes
            ``len(source.classes)``.

    Needs a float output dtype (torchvision refuses uint8 too).
    """

    _kind = _conveyor.MixKind.MIXUP


class CutMix(_Mix):
    """torchvision.transforms.v2.CutMix: a box of each image is replaced by
    the same box of the previous image (the batch rolled by one); its size
    comes from lambda ~ Beta(alpha, alpha) per batch, its centre is uniform,
    and the labels are mixed by the box's share of the image exactly as
    torchvision computes it. Works with every output dtype (uint8 too).

    Args:
        alpha: the Beta distribution's parameter, > 0.
        num_classes: columns of the one-hot labels; None takes
            ``len(source.classes)``.
    """

    _kind = _conveyor.MixKind.CUTMIX


class RandomChoice(BatchTransform):
    """torchvision's RandomChoice over batch mixes: one of ``transforms``
    (MixUp or CutMix) per batch, with probabilities ``p`` (normalised; None:
    equal), drawn from (seed, epoch, batch index).

    Given per-sample transforms instead (``RandomChoice([ColorJitter(...),
    GaussianBlur(3)])``), it makes the per-sample step,
    ``conveyor.transforms.compose.RandomChoice``."""

    def __new__(cls, transforms: Sequence[Any], p: Optional[Sequence[float]] = None) -> Any:
        """Of per-sample transforms, the per-sample step (compose.RandomChoice);
        of batch mixes, this batch transform."""
        if (
            isinstance(transforms, Sequence)
            and not isinstance(transforms, (str, bytes))
            and transforms
            and all(isinstance(t, Transform) for t in transforms)
        ):
            from conveyor.transforms.compose import RandomChoice as PerSample

            return PerSample(transforms, p)
        return super().__new__(cls)

    def __init__(self, transforms: Sequence[Any], p: Optional[Sequence[float]] = None) -> None:
        if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Sequence) or not transforms:
            raise ConfigError(
                "RandomChoice: transforms must be a non-empty list of batch mixes (MixUp, CutMix) or of "
                f"per-sample transforms, got {transforms!r}"
            )
        for i, t in enumerate(transforms):
            if not isinstance(t, _Mix):
                raise ConfigError(
                    f"RandomChoice: transforms[{i}] is {type(t).__name__}; RandomChoice picks between batch "
                    "mixes (MixUp, CutMix) or between per-sample transforms, not both"
                )
        classes = {t.num_classes for t in transforms if t.num_classes is not None}
        if len(classes) > 1:
            raise ConfigError(f"RandomChoice: the transforms' num_classes differ ({sorted(classes)})")
        if p is not None and (
            isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or not all(is_real(v) for v in p)
        ):
            raise ConfigError(f"RandomChoice: p must be a sequence of numbers, one per transform, got {p!r}")
        self.transforms = list(transforms)
        self.p = None if p is None else [float(v) for v in p]
        self._check()

    def __getnewargs__(self) -> tuple[Any, ...]:
        # copy and pickle call __new__ with these (it needs the transforms to choose the class).
        return (self.transforms, self.p)

    def _options(self) -> list[_conveyor.MixOption]:
        return [option for t in self.transforms for option in t._options()]

    def _num_classes(self) -> Optional[int]:
        return next((t.num_classes for t in self.transforms if t.num_classes is not None), None)

    def _probabilities(self) -> list[float]:
        return [] if self.p is None else list(self.p)

    def __repr__(self) -> str:
        return f"RandomChoice({self.transforms!r}, p={self.p!r})"


BatchFunction = Callable[[Any, Any], tuple[Any, Any]]


def split_batch_transforms(
    batch_transforms: Union[BatchTransform, Sequence[Union[BatchTransform, BatchFunction]], None],
) -> tuple[Optional[BatchTransform], list[tuple[int, BatchFunction]]]:
    """(the engine's batch mix or None, the Python callables after it with
    their positions in ``batch_transforms``).

    Raises:
        ConfigError: an item that is neither, or an engine transform that is
            not first (the engine mixes before Python sees the batch).
    """
    if batch_transforms is None:
        return None, []
    if isinstance(batch_transforms, BatchTransform) or (
        callable(batch_transforms) and not isinstance(batch_transforms, Sequence)
    ):
        batch_transforms = [batch_transforms]  # type: ignore[list-item]
    if isinstance(batch_transforms, (str, bytes)) or not isinstance(batch_transforms, Sequence):
        raise ConfigError(f"batch_transforms must be a list, got {type(batch_transforms).__name__}")
    engine: Optional[BatchTransform] = None
    functions: list[tuple[int, BatchFunction]] = []
    for i, item in enumerate(batch_transforms):
        if isinstance(item, BatchTransform):
            if i > 0:
                raise ConfigError(
                    f"batch_transforms[{i}]: {type(item).__name__} must come first, and only one "
                    "(the engine mixes the batch before Python sees it; use RandomChoice([...]) to pick one "
                    "mix per batch)"
                )
            engine = item
        elif callable(item):
            functions.append((i, item))
        elif isinstance(item, Transform):
            raise ConfigError(
                f"batch_transforms[{i}]: {type(item).__name__} runs on each sample: pass it in transforms= "
                "(batch_transforms takes MixUp, CutMix, RandomChoice of them, and batch functions)"
            )
        else:
            raise ConfigError(
                f"batch_transforms[{i}]: {type(item).__name__} is neither a batch transform (MixUp, CutMix, "
                "RandomChoice) nor a callable taking and returning (images, labels)"
            )
    return engine, functions
