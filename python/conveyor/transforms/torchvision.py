"""torchvision pipelines as conveyor chains: :func:`from_torchvision`.

A torchvision transform is recognised by its class's module
(``torchvision.transforms...``), so nothing here imports torchvision: a user
who passes no torchvision object never loads it. Each convertible class has one
entry in ``CONVERTERS`` (v1 and v2 classes of the same name share it): a
function from the torchvision object to conveyor transforms (a list, empty for
the steps conveyor does implicitly) or to the output dtype it sets.

torchvision's type conversions (``ToTensor``, ``PILToTensor``, ``ToImage``,
``ToDtype``, ``ConvertImageDtype``) are not steps in conveyor: the engine
writes each image straight into the batch in the Loader's ``dtype``. They set
the dtype the chain implies instead (``ToTensor`` → ``"float32"``, scaled to
[0, 1]; ``PILToTensor``/``ToImage`` → ``"uint8"``; ``ToDtype(d, scale=True)``
and ``ConvertImageDtype(d)`` → ``d``; the last one in the chain wins), which
:func:`from_torchvision` returns as the list's ``dtype`` and the Loader uses
(see ``Loader(dtype=)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable, Optional, Union

from conveyor.errors import ConfigError
from conveyor.transforms import _geometry_args
from conveyor.transforms.auto_augment import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
from conveyor.transforms.base import OUTPUT_DTYPES, Transform
from conveyor.transforms.color import (
    ColorJitter,
    GaussianBlur,
    Grayscale,
    Normalize,
    RandomAdjustSharpness,
    RandomAutocontrast,
    RandomEqualize,
    RandomGrayscale,
    RandomInvert,
    RandomPosterize,
    RandomSolarize,
)
from conveyor.transforms.compose import RandomApply, RandomChoice, RandomOrder
from conveyor.transforms.erase import RandomErasing
from conveyor.transforms.geometry import (
    CenterCrop,
    Pad,
    RandomAffine,
    RandomCrop,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
    Resize,
)

__all__ = ["CONVERTERS", "Converted", "from_torchvision", "is_torchvision"]

_MODULE = "torchvision.transforms"


class _Dtype:
    """What a type conversion step contributes: the output dtype, and whether
    values are scaled (uint8 → [0, 1] floats) as conveyor's float output is."""

    def __init__(self, dtype: str, scaled: bool = True) -> None:
        self.dtype = dtype
        self.scaled = scaled


#: What a converter returns: conveyor transforms, or a dtype setting.
Conversion = Union[list[Transform], _Dtype]


class Converted(list):  # type: ignore[type-arg]
    """The conveyor transforms of a torchvision pipeline: a list, plus ``dtype``,
    the output dtype its type conversions imply (None when it has none)."""

    def __init__(self, steps: Iterable[Transform], dtype: Optional[str]) -> None:
        super().__init__(steps)
        self.dtype = dtype


def is_torchvision(obj: object) -> bool:
    """Whether ``obj`` is a torchvision transform (by its class's module; no import)."""
    module = type(obj).__module__ or ""
    return module == _MODULE or module.startswith(_MODULE + ".")


class _Unconvertible(Exception):
    """A known class with parameters conveyor does not have (the reason)."""


def _interpolation(obj: Any) -> str:
    """The resize's interpolation by name ("bicubic"; from the enum or PIL's
    constants, which v1 still accepts), so the converted transform holds no
    torchvision object; a PIL-only mode is unconvertible."""
    mode = getattr(obj, "interpolation", "bilinear")
    try:
        number = _geometry_args.interpolation(type(obj).__name__, mode, _geometry_args.RESIZE_INTERPOLATIONS)
    except ConfigError as e:
        raise _Unconvertible(str(e)) from None
    return _geometry_args.interpolation_name(number)


def _antialias(obj: Any) -> bool:
    antialias = getattr(obj, "antialias", True)
    return True if antialias in (None, "warn") else bool(antialias)


def _resize(obj: Any) -> Conversion:
    interpolation = _interpolation(obj)
    if getattr(obj, "max_size", None) is not None:
        raise _Unconvertible(f"max_size={obj.max_size!r}: conveyor's Resize has no max_size")
    if obj.size is None:
        raise _Unconvertible("size=None: conveyor's Resize needs a size")
    return [Resize(obj.size, interpolation=interpolation, antialias=_antialias(obj))]


def _random_resized_crop(obj: Any) -> Conversion:
    interpolation = _interpolation(obj)
    return [
        RandomResizedCrop(
            obj.size, scale=obj.scale, ratio=obj.ratio, interpolation=interpolation, antialias=_antialias(obj)
        )
    ]


def _to_dtype(obj: Any) -> Conversion:
    dtype = obj.dtype
    if isinstance(dtype, dict):  # v2: {tv_tensors.Image: d, "others": ...}
        images = [d for key, d in dtype.items() if getattr(key, "__name__", key) in ("Image", "others")]
        dtype = images[0] if images else None
    name = str(dtype).removeprefix("torch.")
    if name not in OUTPUT_DTYPES:
        raise _Unconvertible(f"dtype={dtype!r}: conveyor outputs {', '.join(OUTPUT_DTYPES)}")
    # ConvertImageDtype always scales; ToDtype only with scale=True.
    return _Dtype(name, scaled=name == "uint8" or bool(getattr(obj, "scale", True)))


def _erasing_value(obj: Any) -> Any:
    """RandomErasing's value as torchvision keeps it: None for "random" (v1
    keeps the string), else a list of floats (v1 keeps the number or sequence)."""
    value = obj.value
    if value is None or value == "random":
        return "random"
    return value


#: torchvision class name → converter. One entry per class; torchvision's v1
#: (``torchvision.transforms``) and v2 (``torchvision.transforms.v2``) classes
#: of the same name share it. A transform added to conveyor adds its entry here.
def _inner(obj: Any) -> list[Transform]:
    """The converted transforms a RandomApply/RandomChoice/RandomOrder holds."""
    converted = from_torchvision(list(obj.transforms))
    if converted.dtype is not None:
        raise _Unconvertible("it holds a type conversion (ToTensor, ToDtype): put that outside it")
    return list(converted)


CONVERTERS: dict[str, Callable[[Any], Conversion]] = {
    "Resize": _resize,
    "CenterCrop": lambda obj: [CenterCrop(obj.size)],
    "RandomResizedCrop": _random_resized_crop,
    "RandomHorizontalFlip": lambda obj: [RandomHorizontalFlip(obj.p)],
    "RandomVerticalFlip": lambda obj: [RandomVerticalFlip(obj.p)],
    # Colour: torchvision keeps a ColorJitter factor as its (min, max) range, or None.
    "ColorJitter": lambda obj: [
        ColorJitter(brightness=obj.brightness, contrast=obj.contrast, saturation=obj.saturation, hue=obj.hue)
    ],
    "Grayscale": lambda obj: [Grayscale(obj.num_output_channels)],
    "RandomGrayscale": lambda obj: [RandomGrayscale(obj.p)],
    "GaussianBlur": lambda obj: [GaussianBlur(obj.kernel_size, sigma=obj.sigma)],
    "RandomInvert": lambda obj: [RandomInvert(obj.p)],
    "RandomPosterize": lambda obj: [RandomPosterize(obj.bits, p=obj.p)],
    "RandomSolarize": lambda obj: [RandomSolarize(obj.threshold, p=obj.p)],
    "RandomAdjustSharpness": lambda obj: [RandomAdjustSharpness(obj.sharpness_factor, p=obj.p)],
    "RandomAutocontrast": lambda obj: [RandomAutocontrast(obj.p)],
    "RandomEqualize": lambda obj: [RandomEqualize(obj.p)],
    "Pad": lambda obj: [Pad(obj.padding, fill=obj.fill, padding_mode=obj.padding_mode)],
    "RandomCrop": lambda obj: [
        RandomCrop(
            obj.size,
            padding=obj.padding,
            pad_if_needed=obj.pad_if_needed,
            fill=obj.fill,
            padding_mode=obj.padding_mode,
        )
    ],
    "RandomRotation": lambda obj: [
        RandomRotation(
            obj.degrees, interpolation=obj.interpolation, expand=obj.expand, center=obj.center, fill=obj.fill
        )
    ],
    "RandomAffine": lambda obj: [
        RandomAffine(
            obj.degrees,
            translate=obj.translate,
            scale=obj.scale,
            shear=obj.shear,
            interpolation=obj.interpolation,
            fill=obj.fill,
            center=obj.center,
        )
    ],
    "RandomPerspective": lambda obj: [
        RandomPerspective(obj.distortion_scale, p=obj.p, interpolation=obj.interpolation, fill=obj.fill)
    ],
    # Policies: torchvision keeps interpolation and fill as given (fill None: zeros).
    "TrivialAugmentWide": lambda obj: [
        TrivialAugmentWide(obj.num_magnitude_bins, interpolation=obj.interpolation, fill=obj.fill)
    ],
    "RandAugment": lambda obj: [
        RandAugment(
            obj.num_ops,
            obj.magnitude,
            obj.num_magnitude_bins,
            interpolation=obj.interpolation,
            fill=obj.fill,
        )
    ],
    "AutoAugment": lambda obj: [AutoAugment(obj.policy, interpolation=obj.interpolation, fill=obj.fill)],
    "AugMix": lambda obj: [
        AugMix(
            obj.severity,
            obj.mixture_width,
            obj.chain_depth,
            obj.alpha,
            obj.all_ops,
            interpolation=obj.interpolation,
            fill=obj.fill,
        )
    ],
    # inplace only says whether torchvision may overwrite its input.
    "Normalize": lambda obj: [Normalize(obj.mean, obj.std)],
    "RandomErasing": lambda obj: [
        RandomErasing(obj.p, obj.scale, obj.ratio, _erasing_value(obj), obj.inplace)
    ],
    # Per sample; steps on the image only (the classes name any other).
    "RandomApply": lambda obj: [RandomApply(_inner(obj), p=obj.p)],
    "RandomChoice": lambda obj: [RandomChoice(_inner(obj), p=obj.p)],
    "RandomOrder": lambda obj: [RandomOrder(_inner(obj))],
    "ToTensor": lambda obj: _Dtype("float32"),
    "PILToTensor": lambda obj: _Dtype("uint8"),
    "ToImage": lambda obj: _Dtype("uint8"),
    "ToPureTensor": lambda obj: [],  # v2: unwraps tv_tensors; the batch is plain tensors already.
    "ToDtype": _to_dtype,
    "ConvertImageDtype": _to_dtype,
}


def _describe(obj: object) -> str:
    return f"{type(obj).__name__} ({type(obj).__module__}.{type(obj).__qualname__})"


def _flatten(obj: object, where: str) -> list[tuple[str, object]]:
    """(position, transform) of each step, nested Compose flattened."""
    if is_torchvision(obj) and type(obj).__name__ == "Compose":
        steps: Any = obj.transforms  # type: ignore[attr-defined]
        return [pair for i, step in enumerate(steps) for pair in _flatten(step, f"{where}[{i}]")]
    return [(where, obj)]


def from_torchvision(obj: object) -> Converted:
    """The conveyor chain of a torchvision pipeline, with the same parameters.

    Args:
        obj: a torchvision v1 or v2 ``Compose`` (nested ones are flattened), a
            list of transforms, or one transform. conveyor transforms in a
            list are taken as they are.

    Returns:
        The conveyor transforms (a list) with ``dtype``: the output dtype the
        pipeline's type conversions imply ("float32" for ``ToTensor``, "uint8"
        for ``PILToTensor``/``ToImage``, ``d`` for ``ToDtype(d, scale=True)``
        or ``ConvertImageDtype(d)``), None without any. ``ToDtype(float,
        scale=False)`` (values 0..255) is folded into the ``Normalize`` after
        it (mean and std divided by 255).

    Raises:
        ConfigError: a transform that conveyor has no equivalent of, or a
            parameter it does not support (e.g. ``Resize(interpolation=NEAREST)``),
            naming the class, its position in the chain and the way out.
    """
    if isinstance(obj, (str, bytes)) or not (is_torchvision(obj) or isinstance(obj, Iterable)):
        raise ConfigError(
            f"from_torchvision: {_describe(obj)} is not a torchvision transform or a list of them"
        )
    items = (
        _flatten(obj, "transforms")
        if is_torchvision(obj)
        else [
            pair
            for i, step in enumerate(obj)
            for pair in _flatten(step, f"transforms[{i}]")  # type: ignore[union-attr]
        ]
    )
    steps: list[Transform] = []
    dtype: Optional[str] = None
    unscaled: Optional[str] = None  # Where a ToDtype(float, scale=False) waits for its Normalize.
    for where, step in items:
        if isinstance(step, Transform):
            steps.append(step)
            continue
        name = type(step).__name__
        converter = CONVERTERS.get(name) if is_torchvision(step) else None
        if converter is None and name in ("MixUp", "CutMix"):
            raise ConfigError(
                f"{where}: {_describe(step)} mixes whole batches: give conveyor's T.{name} (or "
                "T.RandomChoice of T.MixUp and T.CutMix) as the Loader's batch_transforms="
            )
        if converter is None:
            raise ConfigError(
                f"{where}: {_describe(step)} has no conveyor equivalent; wrap it as T.Lambda(obj) to run "
                "it in Python on each image, or leave it out (conveyor.transforms.torchvision.CONVERTERS "
                "lists the classes conveyor converts; docs/migrating.md maps each one)"
            )
        if unscaled is not None and name == "Normalize":
            # (x - m) / s on 0..255 values is (x / 255 - m / 255) / (s / 255).
            mean, std = step.mean, step.std  # type: ignore[attr-defined]
            steps.append(Normalize([float(m) / 255 for m in mean], [float(s) / 255 for s in std]))
            unscaled = None
            continue
        try:
            conversion = converter(step)
        except _Unconvertible as e:
            raise ConfigError(f"{where}: torchvision {name} cannot be converted: {e}") from None
        except ConfigError as e:  # A parameter conveyor's class refuses: say where it came from.
            raise ConfigError(f"{where}: torchvision {name}: {e}") from None
        if isinstance(conversion, _Dtype):
            dtype = conversion.dtype
            unscaled = None if conversion.scaled else where
            continue
        steps.extend(conversion)
    if unscaled is not None:
        raise ConfigError(
            f"{unscaled}: torchvision ToDtype({dtype}, scale=False) cannot be converted: conveyor's float "
            "output is scaled to [0, 1]; use scale=True, or follow it with a Normalize"
        )
    return Converted(steps, dtype)
