"""Geometric ops with fixed parameters, as torchvision.transforms.v2.functional's
(same names, arguments and defaults), run by the engine's kernels: the crops,
pads and flips of the pipeline, its PIL-parity resampler, and the OpenCV
warps of RandomRotation / RandomAffine / RandomPerspective."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

from conveyor._checks import check_bool, is_int, is_real
from conveyor.errors import ConfigError
from conveyor.transforms import _geometry_args as args
from conveyor.transforms.functional._image import ImageLike, apply

__all__ = [
    "affine",
    "center_crop",
    "crop",
    "horizontal_flip",
    "pad",
    "perspective",
    "resize",
    "resized_crop",
    "rotate",
    "vertical_flip",
]


def _int(op: str, arg: str, value: Any) -> int:
    if not is_int(value):
        raise ConfigError(f"{op}: {arg} must be an int, got {value!r}")
    return int(value)


def _size(image: Any) -> tuple[int, int]:
    """(height, width) of a numpy HWC / HW array or a torch CHW / HW tensor."""
    shape = tuple(image.shape)
    if type(image).__module__.startswith("torch"):
        return (shape[-2], shape[-1]) if len(shape) >= 2 else (0, 0)
    return (shape[0], shape[1]) if len(shape) >= 2 else (0, 0)


def horizontal_flip(inpt: ImageLike) -> ImageLike:
    """Mirror left-right."""
    return apply("horizontal_flip", "horizontal_flip", inpt, {})


def vertical_flip(inpt: ImageLike) -> ImageLike:
    """Mirror top-bottom."""
    return apply("vertical_flip", "vertical_flip", inpt, {})


def crop(inpt: ImageLike, top: int, left: int, height: int, width: int) -> ImageLike:
    """Rows [top, top + height) and columns [left, left + width); zeros where the window leaves the image."""
    params = {"top": _int("crop", "top", top), "left": _int("crop", "left", left)}
    height, width = _int("crop", "height", height), _int("crop", "width", width)
    return apply("crop", "crop", inpt, {**params, "size": [height, width]})


def center_crop(inpt: ImageLike, output_size: Union[int, Sequence[int]]) -> ImageLike:
    """The central output_size (an int or (h, w)) window; a smaller image is padded with zeros."""
    if is_int(output_size):
        size = [int(output_size)] * 2
    elif args.is_sequence(output_size) and len(output_size) in (1, 2) and all(is_int(v) for v in output_size):
        size = [int(output_size[0]), int(output_size[-1])]
    else:
        raise ConfigError(f"center_crop: output_size must be an int or a pair of ints, got {output_size!r}")
    return apply("center_crop", "center_crop", inpt, {"output_size": size})


def _resized_size(op: str, h: int, w: int, size: Any, max_size: Optional[int]) -> list[int]:
    # torchvision's _compute_resized_output_size (v2: size may be None with max_size).
    if max_size is not None and (not is_int(max_size) or max_size <= 0):
        raise ConfigError(f"{op}: max_size must be a positive int, got {max_size!r}")
    if is_int(size):
        size = [int(size)]
    if size is None:
        if max_size is None:
            raise ConfigError(f"{op}: max_size must be an integer when size is None")
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = int(max_size * short / long), max_size
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        return [new_h, new_w]
    if not (args.is_sequence(size) and len(size) in (1, 2) and all(is_int(v) and v > 0 for v in size)):
        raise ConfigError(
            f"{op}: size must be a positive int or a sequence of 1 or 2 positive ints, got {size!r}"
        )
    if len(size) == 2:
        if max_size is not None:
            raise ConfigError(f"{op}: max_size should only be passed if size is None or an int")
        return [int(size[0]), int(size[1])]
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = int(size[0]), int(int(size[0]) * long / short) if short else 0
    if max_size is not None:
        if max_size <= new_short:
            raise ConfigError(
                f"{op}: max_size = {max_size} must be strictly greater than the requested size for the "
                f"smaller edge size = {size}"
            )
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return [new_h, new_w]


def resize(
    inpt: ImageLike,
    size: Union[int, Sequence[int], None],
    interpolation: Any = "bilinear",
    max_size: Optional[int] = None,
    antialias: Optional[bool] = True,
) -> ImageLike:
    """Resize, with the interpolations of the Resize transform (bilinear,
    antialiased when shrinking like PIL and torchvision's uint8 path; bicubic,
    nearest and nearest-exact as torchvision's): an int or (s,) sets the
    shorter side (the longer one is truncated, optionally capped by max_size),
    (h, w) the exact size."""
    mode = args.interpolation("resize", interpolation, args.RESIZE_INTERPOLATIONS)
    out = _resized_size("resize", *_size(inpt), size, max_size)
    aa = True if antialias is None else check_bool(antialias, "resize: antialias")
    return apply("resize", "resize", inpt, {"size": out, "interpolation": mode, "antialias": aa})


def resized_crop(
    inpt: ImageLike,
    top: int,
    left: int,
    height: int,
    width: int,
    size: Union[int, Sequence[int]],
    interpolation: Any = "bilinear",
    antialias: Optional[bool] = True,
) -> ImageLike:
    """crop(top, left, height, width), then resize(size)."""
    op = "resized_crop"
    mode = args.interpolation(op, interpolation, args.RESIZE_INTERPOLATIONS)
    params: dict[str, Any] = {arg: _int(op, arg, v) for arg, v in (("top", top), ("left", left))}
    params["height"], params["width"] = _int(op, "height", height), _int(op, "width", width)
    if params["height"] <= 0 or params["width"] <= 0:
        raise ConfigError(f"{op}: height and width must be positive, got {height}, {width}")
    params["size"] = _resized_size(op, params["height"], params["width"], size, None)
    params["interpolation"] = mode
    params["antialias"] = True if antialias is None else check_bool(antialias, f"{op}: antialias")
    return apply(op, op, inpt, params)


def pad(
    inpt: ImageLike,
    padding: Union[int, Sequence[int]],
    fill: Union[float, Sequence[float], None] = None,
    padding_mode: str = "constant",
) -> ImageLike:
    """Pad by padding (an int, (left/right, top/bottom) or (left, top, right,
    bottom)) with fill (constant) or by "edge", "reflect", "symmetric"."""
    return apply(
        "pad",
        "pad",
        inpt,
        {
            "padding": args.padding("pad", padding),
            "fill": args.fill("pad", fill),
            "padding_mode": args.padding_mode("pad", padding_mode),
        },
    )


def _angle(op: str, angle: Any) -> float:
    if not is_real(angle):
        raise ConfigError(f"{op}: angle must be a number, got {angle!r}")
    return float(angle)


def rotate(
    inpt: ImageLike,
    angle: float,
    interpolation: Any = "nearest",
    expand: bool = False,
    center: Optional[Sequence[float]] = None,
    fill: Union[float, Sequence[float], None] = None,
) -> ImageLike:
    """Rotate anticlockwise by angle degrees (multiples of 90 about the center are exact)."""
    params: dict[str, Any] = {
        "angle": _angle("rotate", angle),
        "interpolation": args.interpolation("rotate", interpolation),
        "expand": check_bool(expand, "rotate: expand"),
        "fill": args.fill("rotate", fill),
    }
    if center is not None:
        params["center"] = args.pair("rotate", "center", center)
    return apply("rotate", "rotate", inpt, params)


def affine(
    inpt: ImageLike,
    angle: float,
    translate: Sequence[float],
    scale: float,
    shear: Union[float, Sequence[float]],
    interpolation: Any = "nearest",
    fill: Union[float, Sequence[float], None] = None,
    center: Optional[Sequence[float]] = None,
) -> ImageLike:
    """The affine map torchvision builds (rotation angle, translate (x, y),
    scale, shear: a number is an x shear, (x, y) both), about the center."""
    op = "affine"
    if is_real(shear):
        shear_xy = [float(shear), 0.0]
    elif args.is_sequence(shear) and len(shear) == 1 and is_real(shear[0]):
        shear_xy = [float(shear[0])] * 2
    else:
        shear_xy = args.pair(op, "shear", shear)
    if not is_real(scale):
        raise ConfigError(f"{op}: scale must be a number, got {scale!r}")
    params: dict[str, Any] = {
        "angle": _angle(op, angle),
        "translate": args.pair(op, "translate", translate),
        "scale": float(scale),
        "shear": shear_xy,
        "interpolation": args.interpolation(op, interpolation),
        "fill": args.fill(op, fill),
    }
    if center is not None:
        params["center"] = args.pair(op, "center", center)
    return apply(op, op, inpt, params)


def _points(op: str, arg: str, value: Any) -> list[float]:
    if not (
        args.is_sequence(value)
        and len(value) == 4
        and all(args.is_sequence(p) and len(p) == 2 and all(is_real(v) for v in p) for p in value)
    ):
        raise ConfigError(f"{op}: {arg} must be four (x, y) points, got {value!r}")
    return [float(v) for p in value for v in p]


def perspective(
    inpt: ImageLike,
    startpoints: Optional[Sequence[Sequence[int]]],
    endpoints: Optional[Sequence[Sequence[int]]],
    interpolation: Any = "bilinear",
    fill: Union[float, Sequence[float], None] = None,
    coefficients: Optional[Sequence[float]] = None,
) -> ImageLike:
    """The perspective warp taking startpoints (top-left, top-right,
    bottom-right, bottom-left) to endpoints, or given by its 8 coefficients."""
    op = "perspective"
    params: dict[str, Any] = {
        "interpolation": args.interpolation(op, interpolation),
        "fill": args.fill(op, fill),
    }
    if coefficients is not None:
        if startpoints is not None and endpoints is not None:
            raise ConfigError(
                f"{op}: the startpoints/endpoints and the coefficients shouldn't be defined concurrently"
            )
        if not (
            args.is_sequence(coefficients)
            and len(coefficients) == 8
            and all(is_real(v) for v in coefficients)
        ):
            raise ConfigError(f"{op}: coefficients must be 8 numbers, got {coefficients!r}")
        params["coefficients"] = [float(v) for v in coefficients]
    elif startpoints is not None and endpoints is not None:
        params["startpoints"] = _points(op, "startpoints", startpoints)
        params["endpoints"] = _points(op, "endpoints", endpoints)
    else:
        raise ConfigError(f"{op}: either the startpoints/endpoints or the coefficients must be given")
    return apply(op, op, inpt, params)
