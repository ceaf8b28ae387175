"""Geometric transforms: crops, pads, resizes and flips (composed into one
source box and one resample per sample), rotations, affine and perspective
warps (one warp each on the decoded image)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

from conveyor._checks import check_bool, is_int
from conveyor.transforms import _geometry_args as args
from conveyor.transforms.base import SizeArg, Transform, _pair, _range, engine_defaults

__all__ = [
    "CenterCrop",
    "Pad",
    "RandomAffine",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomPerspective",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomVerticalFlip",
    "Resize",
]


_RESIZE = engine_defaults("resize", size=1)
_RESIZE_INTERPOLATION = args.interpolation_name(_RESIZE["interpolation"])


def _interpolation_repr(given: Any, number: int) -> str:
    """``, interpolation=...`` for a repr, or nothing for the default (bilinear)."""
    return "" if number == args.RESIZE_INTERPOLATIONS["bilinear"] else f", interpolation={given!r}"


class Resize(Transform, name="resize"):
    """Resize the image, as ``torchvision.transforms.Resize``.

    Args:
        size: an int resizes the shorter side to it (the longer side becomes
            ``int(size * long / short)``); a pair (h, w) resizes to exactly that.
        interpolation: InterpolationMode.BILINEAR (default: PIL's antialiased
            bilinear, close to torchvision's: docs/migrating.md gives the
            differences), BICUBIC, NEAREST or NEAREST_EXACT (torchvision's
            uint8 result exactly; bicubic shrinks past 64x are approximated),
            or the same as strings or PIL's constants. BOX, HAMMING and
            LANCZOS are PIL-only in torchvision and refused.
        antialias: antialias when downscaling (torchvision's default, True;
            nearest never antialiases).
    """

    def __init__(
        self,
        size: SizeArg,
        interpolation: Any = _RESIZE_INTERPOLATION,
        antialias: bool = bool(_RESIZE["antialias"]),
    ) -> None:
        if is_int(size) or (isinstance(size, Sequence) and not isinstance(size, str) and len(size) == 1):
            self.size: Union[int, tuple[int, int]] = _pair("Resize", size)[0]
        else:
            self.size = _pair("Resize", size)
        self.interpolation = interpolation
        self._interpolation = args.interpolation("Resize", interpolation, args.RESIZE_INTERPOLATIONS)
        self.antialias = check_bool(antialias, "Resize: antialias")
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"size": self.size, "interpolation": self._interpolation, "antialias": self.antialias}

    def __repr__(self) -> str:
        interpolation = _interpolation_repr(self.interpolation, self._interpolation)
        return f"Resize(size={self.size}{interpolation}, antialias={self.antialias})"


class CenterCrop(Transform, name="center_crop"):
    """Crop the center, as ``torchvision.transforms.CenterCrop`` (an image
    smaller than the crop is padded with zeros).

    Args:
        size: an int (square) or a pair (h, w).
    """

    def __init__(self, size: SizeArg) -> None:
        self.size = _pair("CenterCrop", size)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"size": self.size}

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


_RESIZED_CROP = engine_defaults("random_resized_crop", size=1)
_RESIZED_CROP_INTERPOLATION = args.interpolation_name(_RESIZED_CROP["interpolation"])


class RandomResizedCrop(Transform, name="random_resized_crop"):
    """Crop a random box and resize it, as ``torchvision.transforms.RandomResizedCrop``:
    the box's area is a uniform fraction ``scale`` of the image and its aspect
    ratio log-uniform in ``ratio`` (10 attempts, then a central crop).

    Args:
        size: output size, an int (square) or a pair (h, w).
        scale: range of the box's area as a fraction of the image's.
        ratio: range of the box's aspect ratio (width / height).
        interpolation: as Resize's.
        antialias: antialias when downscaling.
    """

    def __init__(
        self,
        size: SizeArg,
        scale: Sequence[float] = _RESIZED_CROP["scale"],
        ratio: Sequence[float] = _RESIZED_CROP["ratio"],
        interpolation: Any = _RESIZED_CROP_INTERPOLATION,
        antialias: bool = bool(_RESIZED_CROP["antialias"]),
    ) -> None:
        self.size = _pair("RandomResizedCrop", size)
        self.scale = _range("RandomResizedCrop", "scale", scale)
        self.ratio = _range("RandomResizedCrop", "ratio", ratio)
        self.interpolation = interpolation
        self._interpolation = args.interpolation(
            "RandomResizedCrop", interpolation, args.RESIZE_INTERPOLATIONS
        )
        self.antialias = check_bool(antialias, "RandomResizedCrop: antialias")
        self._check()

    def _params(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "scale": self.scale,
            "ratio": self.ratio,
            "interpolation": self._interpolation,
            "antialias": self.antialias,
        }

    def __repr__(self) -> str:
        return (
            f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio}"
            f"{_interpolation_repr(self.interpolation, self._interpolation)})"
        )


class RandomHorizontalFlip(Transform, name="horizontal_flip"):
    """Mirror the image left-right with probability ``p``."""

    def __init__(self, p: float = engine_defaults("horizontal_flip")["p"]) -> None:
        self.p = args.real("RandomHorizontalFlip", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"p": self.p}

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class RandomVerticalFlip(Transform, name="vertical_flip"):
    """Mirror the image top-bottom with probability ``p``, as
    ``torchvision.transforms.v2.RandomVerticalFlip`` (free: the output pass
    reads the rows in reverse)."""

    def __init__(self, p: float = engine_defaults("vertical_flip")["p"]) -> None:
        self.p = args.real("RandomVerticalFlip", "p", p)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"p": self.p}

    def __repr__(self) -> str:
        return f"RandomVerticalFlip(p={self.p})"


class Pad(Transform, name="pad"):
    """Pad the image on every side, as ``torchvision.transforms.v2.Pad``.

    Args:
        padding: an int (all sides), (left/right, top/bottom) or (left, top,
            right, bottom); non-negative.
        fill: the constant padding's value: a number or one per channel, in [0, 255].
        padding_mode: "constant" (fused into the crop/resize group: no pass of
            its own), "edge", "reflect" or "symmetric" (a pass on the image).
    """

    def __init__(
        self, padding: Union[int, Sequence[int]], fill: Any = 0, padding_mode: str = "constant"
    ) -> None:
        self.padding = args.padding("Pad", padding)
        self.fill = args.fill("Pad", fill)
        self.padding_mode = padding_mode
        self._mode = args.padding_mode("Pad", padding_mode)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {"padding": self.padding, "fill": self.fill, "padding_mode": self._mode}

    def __repr__(self) -> str:
        return f"Pad(padding={self.padding}, fill={self.fill}, padding_mode={self.padding_mode!r})"


class RandomCrop(Transform, name="random_crop"):
    """Crop at a random position, as ``torchvision.transforms.v2.RandomCrop``:
    optionally pad first, then draw the top (if the padded image is taller than
    the crop) and the left (if wider) uniformly. ``RandomCrop(32, padding=4)``
    with a constant fill costs no pass of its own (it is a crop of the fused
    decode and resample).

    Args:
        size: output size, an int (square) or a pair (h, w).
        padding: as Pad's, applied before cropping (None: none).
        pad_if_needed: pad the sides that are smaller than the crop (by the
            missing amount on both sides).
        fill: the constant padding's value: a number or one per channel, in [0, 255].
        padding_mode: "constant", "edge", "reflect" or "symmetric".

    An image smaller than the crop (after padding) fails with a ConfigError
    naming the sample, as torchvision raises.
    """

    def __init__(
        self,
        size: SizeArg,
        padding: Union[int, Sequence[int], None] = None,
        pad_if_needed: bool = False,
        fill: Any = 0,
        padding_mode: str = "constant",
    ) -> None:
        self.size = _pair("RandomCrop", size)
        # torchvision: a falsy padding (None, 0) is no padding.
        self.padding = args.padding("RandomCrop", padding) if padding else None
        self.pad_if_needed = check_bool(pad_if_needed, "RandomCrop: pad_if_needed")
        self.fill = args.fill("RandomCrop", fill)
        self.padding_mode = padding_mode
        self._mode = args.padding_mode("RandomCrop", padding_mode)
        self._check()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "size": self.size,
            "pad_if_needed": self.pad_if_needed,
            "fill": self.fill,
            "padding_mode": self._mode,
        }
        if self.padding is not None:
            params["padding"] = self.padding
        return params

    def __repr__(self) -> str:
        return (
            f"RandomCrop(size={self.size}, padding={self.padding}, pad_if_needed={self.pad_if_needed}, "
            f"fill={self.fill}, padding_mode={self.padding_mode!r})"
        )


class RandomRotation(Transform, name="random_rotation"):
    """Rotate by an angle drawn uniformly from ``degrees``, as
    ``torchvision.transforms.v2.RandomRotation`` (anticlockwise; one warp on
    the decoded image).

    Args:
        degrees: a number d >= 0 for (-d, d), or (min, max).
        interpolation: InterpolationMode.NEAREST (default) or BILINEAR (the
            enum, its string value, or PIL's constant).
        expand: enlarge the output to hold the whole rotated image (its size
            then depends on the angle: follow with a crop or a Resize((h, w))).
        center: (x, y) of the rotation's center in pixels; default the image's center.
        fill: the value outside the rotated image: a number or one per channel.
    """

    def __init__(
        self,
        degrees: Union[float, Sequence[float]],
        interpolation: Any = "nearest",
        expand: bool = False,
        center: Optional[Sequence[float]] = None,
        fill: Any = 0,
    ) -> None:
        self.degrees = args.angle_range("RandomRotation", "degrees", degrees)
        self.interpolation = interpolation
        self._interpolation = args.interpolation("RandomRotation", interpolation)
        self.expand = check_bool(expand, "RandomRotation: expand")
        self.center = None if center is None else args.pair("RandomRotation", "center", center)
        self.fill = args.fill("RandomRotation", fill)
        self._check()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "degrees": self.degrees,
            "interpolation": self._interpolation,
            "expand": self.expand,
            "fill": self.fill,
        }
        if self.center is not None:
            params["center"] = self.center
        return params

    def __repr__(self) -> str:
        return (
            f"RandomRotation(degrees={self.degrees}, interpolation={self.interpolation!r}, "
            f"expand={self.expand}, center={self.center}, fill={self.fill})"
        )


class RandomAffine(Transform, name="random_affine"):
    """A random affine transformation keeping the center, as
    ``torchvision.transforms.v2.RandomAffine`` (one warp on the decoded image).

    Args:
        degrees: rotation range: a number d >= 0 for (-d, d), or (min, max).
        translate: (a, b) in [0, 1]: horizontal shift drawn in (-a * width,
            a * width), vertical in (-b * height, b * height), rounded; None: none.
        scale: (min, max), positive; None: 1.
        shear: a number s >= 0 for an x shear in (-s, s), (min, max) for x, or
            (xmin, xmax, ymin, ymax); None: none.
        interpolation: InterpolationMode.NEAREST (default) or BILINEAR.
        fill: the value outside the transformed image: a number or one per channel.
        center: (x, y) in pixels; default the image's center.
    """

    def __init__(
        self,
        degrees: Union[float, Sequence[float]],
        translate: Optional[Sequence[float]] = None,
        scale: Optional[Sequence[float]] = None,
        shear: Union[float, Sequence[float], None] = None,
        interpolation: Any = "nearest",
        fill: Any = 0,
        center: Optional[Sequence[float]] = None,
    ) -> None:
        name = "RandomAffine"
        self.degrees = args.angle_range(name, "degrees", degrees)
        self.translate = None if translate is None else args.pair(name, "translate", translate)
        self.scale = None if scale is None else args.pair(name, "scale", scale)
        self.shear = None if shear is None else args.angle_range(name, "shear", shear, (2, 4))
        self.interpolation = interpolation
        self._interpolation = args.interpolation(name, interpolation)
        self.fill = args.fill(name, fill)
        self.center = None if center is None else args.pair(name, "center", center)
        self._check()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "degrees": self.degrees,
            "interpolation": self._interpolation,
            "fill": self.fill,
        }
        for arg in ("translate", "scale", "shear", "center"):
            if getattr(self, arg) is not None:
                params[arg] = getattr(self, arg)
        return params

    def __repr__(self) -> str:
        return (
            f"RandomAffine(degrees={self.degrees}, translate={self.translate}, scale={self.scale}, "
            f"shear={self.shear}, interpolation={self.interpolation!r}, fill={self.fill}, "
            f"center={self.center})"
        )


_PERSPECTIVE = engine_defaults("random_perspective")


class RandomPerspective(Transform, name="random_perspective"):
    """With probability ``p``, a random perspective warp, as
    ``torchvision.transforms.v2.RandomPerspective`` (each corner moves inward
    by up to ``distortion_scale`` of half the image's side).

    Args:
        distortion_scale: in [0, 1].
        p: probability of warping.
        interpolation: InterpolationMode.BILINEAR (default) or NEAREST.
        fill: the value outside the warped image: a number or one per channel.
    """

    def __init__(
        self,
        distortion_scale: float = _PERSPECTIVE["distortion_scale"],
        p: float = _PERSPECTIVE["p"],
        interpolation: Any = "bilinear",
        fill: Any = 0,
    ) -> None:
        name = "RandomPerspective"
        self.distortion_scale = args.real(name, "distortion_scale", distortion_scale)
        self.p = args.real(name, "p", p)
        self.interpolation = interpolation
        self._interpolation = args.interpolation(name, interpolation)
        self.fill = args.fill(name, fill)
        self._check()

    def _params(self) -> dict[str, Any]:
        return {
            "distortion_scale": self.distortion_scale,
            "p": self.p,
            "interpolation": self._interpolation,
            "fill": self.fill,
        }

    def __repr__(self) -> str:
        return (
            f"RandomPerspective(distortion_scale={self.distortion_scale}, p={self.p}, "
            f"interpolation={self.interpolation!r}, fill={self.fill})"
        )
