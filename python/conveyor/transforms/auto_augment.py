"""Automatic augmentation policies, as ``torchvision.transforms.v2``'s
(TrivialAugmentWide, RandAugment, AutoAugment, AugMix): torchvision's op tables,
magnitude bins and draws, each op running the engine's own kernel on the
decoded image (one step on the image per sample)."""

from __future__ import annotations

from typing import Any

from conveyor._checks import check_bool, is_int
from conveyor.errors import ConfigError
from conveyor.transforms import _geometry_args as args
from conveyor.transforms.base import Transform, engine_defaults

__all__ = ["AugMix", "AutoAugment", "RandAugment", "TrivialAugmentWide"]

#: torchvision's AutoAugmentPolicy values → the engine's policy number.
POLICIES = {"imagenet": 0, "cifar10": 1, "svhn": 2}

_TRIVIAL = engine_defaults("trivial_augment_wide")
_RAND = engine_defaults("rand_augment")
_AUG_MIX = engine_defaults("aug_mix")


def _int(name: str, arg: str, value: Any) -> int:
    """An int (the engine checks its range)."""
    if not is_int(value):
        raise ConfigError(f"{name}: {arg} must be an integer, got {value!r}")
    return int(value)


class _Policy(Transform):
    """What the policies share: interpolation and fill of the geometric ops."""

    def __init__(self, name: str, interpolation: Any, fill: Any) -> None:
        self.interpolation = interpolation
        self._interpolation = args.interpolation(name, interpolation)
        self.fill = args.fill(name, fill)
        self._check()

    def _op_params(self) -> dict[str, Any]:
        return {"interpolation": self._interpolation, "fill": self.fill}


class TrivialAugmentWide(_Policy, name="trivial_augment_wide"):
    """One op per image, as ``torchvision.transforms.v2.TrivialAugmentWide``:
    an op drawn uniformly from its 14 (Identity, ShearX/Y, TranslateX/Y,
    Rotate, Brightness, Color, Contrast, Sharpness, Posterize, Solarize,
    AutoContrast, Equalize), a magnitude bin drawn uniformly, the sign drawn
    with probability 1/2 for the signed ops.

    Args:
        num_magnitude_bins: the number of magnitude values (an int >= 2).
        interpolation: of the shears, translations and rotations:
            InterpolationMode.NEAREST (default) or BILINEAR (the enum, its
            string value, or PIL's constant).
        fill: the value outside the image after a geometric op: None (zeros),
            a number, or one per channel.
    """

    def __init__(
        self,
        num_magnitude_bins: int = int(_TRIVIAL["num_magnitude_bins"]),
        interpolation: Any = "nearest",
        fill: Any = None,
    ) -> None:
        name = "TrivialAugmentWide"
        self.num_magnitude_bins = _int(name, "num_magnitude_bins", num_magnitude_bins)
        super().__init__(name, interpolation, fill)

    def _params(self) -> dict[str, Any]:
        return {"num_magnitude_bins": self.num_magnitude_bins, **self._op_params()}

    def __repr__(self) -> str:
        return (
            f"TrivialAugmentWide(num_magnitude_bins={self.num_magnitude_bins}, "
            f"interpolation={self.interpolation!r}, fill={self.fill})"
        )


class RandAugment(_Policy, name="rand_augment"):
    """``num_ops`` ops in a row, as ``torchvision.transforms.v2.RandAugment``:
    each drawn uniformly from TrivialAugmentWide's 14 ops (RandAugment's
    narrower ranges), all at magnitude bin ``magnitude``, the sign drawn with
    probability 1/2 for the signed ops.

    Args:
        num_ops: how many ops to apply (an int >= 0).
        magnitude: the magnitude bin, an int in [0, num_magnitude_bins - 1].
        num_magnitude_bins: the number of magnitude values (an int >= 2).
        interpolation: as TrivialAugmentWide's.
        fill: as TrivialAugmentWide's.
    """

    def __init__(
        self,
        num_ops: int = int(_RAND["num_ops"]),
        magnitude: int = int(_RAND["magnitude"]),
        num_magnitude_bins: int = int(_RAND["num_magnitude_bins"]),
        interpolation: Any = "nearest",
        fill: Any = None,
    ) -> None:
        name = "RandAugment"
        self.num_ops = _int(name, "num_ops", num_ops)
        self.num_magnitude_bins = _int(name, "num_magnitude_bins", num_magnitude_bins)
        self.magnitude = _int(name, "magnitude", magnitude)
        super().__init__(name, interpolation, fill)

    def _params(self) -> dict[str, Any]:
        return {
            "num_ops": self.num_ops,
            "magnitude": self.magnitude,
            "num_magnitude_bins": self.num_magnitude_bins,
            **self._op_params(),
        }

    def __repr__(self) -> str:
        return (
            f"RandAugment(num_ops={self.num_ops}, magnitude={self.magnitude}, "
            f"num_magnitude_bins={self.num_magnitude_bins}, interpolation={self.interpolation!r}, "
            f"fill={self.fill})"
        )


def _policy(value: Any) -> str:
    """torchvision's AutoAugmentPolicy (the enum member, its value or its name) as its value."""
    raw = value.value if type(value).__name__ == "AutoAugmentPolicy" else value
    if isinstance(raw, str) and raw.lower() in POLICIES:
        return raw.lower()
    raise ConfigError(
        f"AutoAugment: policy must be AutoAugmentPolicy.IMAGENET, CIFAR10 or SVHN "
        f"(or 'imagenet', 'cifar10', 'svhn'), got {value!r}"
    )


class AutoAugment(_Policy, name="auto_augment"):
    """A learned policy, as ``torchvision.transforms.v2.AutoAugment``: one of
    its 25 sub-policies drawn uniformly, each of the sub-policy's two ops
    applied with its probability at its magnitude (of 10 bins), the sign
    drawn with probability 1/2 for the signed ops.

    Args:
        policy: ``torchvision.transforms.AutoAugmentPolicy.IMAGENET`` (default),
            ``CIFAR10`` or ``SVHN``, or its string value ("imagenet", ...).
        interpolation: as TrivialAugmentWide's.
        fill: as TrivialAugmentWide's.
    """

    def __init__(self, policy: Any = "imagenet", interpolation: Any = "nearest", fill: Any = None) -> None:
        self.policy = _policy(policy)
        super().__init__("AutoAugment", interpolation, fill)

    def _params(self) -> dict[str, Any]:
        return {"policy": POLICIES[self.policy], **self._op_params()}

    def __repr__(self) -> str:
        return f"AutoAugment(policy={self.policy!r}, interpolation={self.interpolation!r}, fill={self.fill})"


class AugMix(_Policy, name="aug_mix"):
    """AugMix, as ``torchvision.transforms.v2.AugMix``: ``mixture_width``
    chains of ``chain_depth`` ops (or 1-3, drawn per chain) from AugMix's
    table, mixed with the image by Dirichlet(alpha) weights in float32 and
    truncated to uint8.

    Args:
        severity: the ops' magnitude bins are drawn from [0, severity) of 10
            (an int in [1, 10]).
        mixture_width: the number of chains (an int in [1, 100]).
        chain_depth: ops per chain (an int <= 100); -1 (or any value <= 0):
            drawn uniformly from 1..3 per chain.
        alpha: the Dirichlet / Beta concentration, > 0.
        all_ops: include Brightness, Color, Contrast and Sharpness.
        interpolation: InterpolationMode.BILINEAR (default) or NEAREST.
        fill: as TrivialAugmentWide's.
    """

    def __init__(
        self,
        severity: int = int(_AUG_MIX["severity"]),
        mixture_width: int = int(_AUG_MIX["mixture_width"]),
        chain_depth: int = int(_AUG_MIX["chain_depth"]),
        alpha: float = _AUG_MIX["alpha"],
        all_ops: bool = bool(_AUG_MIX["all_ops"]),
        interpolation: Any = "bilinear",
        fill: Any = None,
    ) -> None:
        name = "AugMix"
        self.severity = _int(name, "severity", severity)
        self.mixture_width = _int(name, "mixture_width", mixture_width)
        self.chain_depth = _int(name, "chain_depth", chain_depth)
        self.alpha = args.real(name, "alpha", alpha)
        self.all_ops = check_bool(all_ops, "AugMix: all_ops")
        super().__init__(name, interpolation, fill)

    def _params(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "mixture_width": self.mixture_width,
            "chain_depth": self.chain_depth,
            "alpha": self.alpha,
            "all_ops": self.all_ops,
            **self._op_params(),
        }

    def __repr__(self) -> str:
        return (
            f"AugMix(severity={self.severity}, mixture_width={self.mixture_width}, "
            f"chain_depth={self.chain_depth}, alpha={self.alpha}, all_ops={self.all_ops}, "
            f"interpolation={self.interpolation!r}, fill={self.fill})"
        )
