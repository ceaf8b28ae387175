"""The forms torchvision accepts for the geometric transforms' arguments
(and their functional forms), converted to the engine's numbers; a form the
engine cannot take raises ConfigError naming the argument, as torchvision
raises ValueError. The rules on the values (ranges, signs, counts) are the
engine's: its factories check them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor._checks import is_int, is_real
from conveyor.errors import ConfigError

#: torchvision's padding modes, in the engine's numbering.
PADDING_MODES = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}

#: torchvision's InterpolationMode values the warps support, in the engine's
#: numbering (conveyor::Interpolation).
INTERPOLATIONS = {"nearest": 0, "bilinear": 1}

#: Those the resizes support: every mode of torchvision's tensor path (BOX,
#: HAMMING and LANCZOS are for PIL images only there).
RESIZE_INTERPOLATIONS = {"nearest": 0, "bilinear": 1, "bicubic": 2, "nearest-exact": 3}

#: PIL's integer constants, which torchvision accepts for the modes.
_PIL_INTERPOLATIONS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def interpolation(name: str, value: Any, modes: dict[str, int] = INTERPOLATIONS) -> int:
    """torchvision's InterpolationMode (an enum member, its string value, or
    PIL's integer constant) as the engine's number, among ``modes`` (the
    warps': nearest and bilinear, what torchvision supports on tensors)."""
    mode = value
    if type(value).__name__ == "InterpolationMode":
        mode = value.value
    elif is_int(value) and int(value) in _PIL_INTERPOLATIONS:
        mode = _PIL_INTERPOLATIONS[int(value)]
    if isinstance(mode, str) and mode in modes:
        return modes[mode]
    allowed = ", ".join(f"InterpolationMode.{m.upper().replace('-', '_')}" for m in modes)
    strings = ", ".join(repr(m) for m in modes)
    resize_pil_only = modes is RESIZE_INTERPOLATIONS and mode in ("box", "hamming", "lanczos")
    pil_only = " (torchvision has it for PIL images only)" if resize_pil_only else ""
    raise ConfigError(
        f"{name}: interpolation must be one of {allowed} (or {strings}), got {value!r}{pil_only}"
    )


def interpolation_name(number: float) -> str:
    """The InterpolationMode value ("bicubic") of a resize's engine number."""
    return next(name for name, n in RESIZE_INTERPOLATIONS.items() if n == number)


def fill(name: str, value: Any) -> list[float]:
    """A fill: None (zeros), a number, or a sequence of numbers (one per channel)."""
    if value is None:
        return [0.0]
    values = [value] if is_real(value) else list(value) if isinstance(value, (tuple, list)) else None
    if values is None or not all(is_real(v) for v in values):
        raise ConfigError(f"{name}: fill must be a number or a sequence of 1 or 3 numbers, got {value!r}")
    return [float(v) for v in values]


def padding(name: str, value: Any) -> list[int]:
    """torchvision's padding (an int, or 1, 2 or 4 ints) as [left, top, right, bottom]."""
    if is_int(value):
        items = [int(value)]
    elif is_sequence(value) and len(value) in (1, 2, 4) and all(is_int(v) for v in value):
        items = [int(v) for v in value]
    else:
        raise ConfigError(
            f"{name}: padding must be an int or a 1, 2, or 4 element tuple or list, got {value!r}"
        )
    if len(items) == 1:
        return items * 4
    if len(items) == 2:
        return [items[0], items[1], items[0], items[1]]
    return items


def padding_mode(name: str, value: Any) -> int:
    if value not in PADDING_MODES:
        raise ConfigError(
            f"{name}: padding_mode must be 'constant', 'edge', 'reflect' or 'symmetric', got {value!r}"
        )
    return PADDING_MODES[value]


def angle_range(name: str, arg: str, value: Any, sizes: tuple[int, ...] = (2,)) -> list[float]:
    """torchvision's _setup_angle: a number d >= 0 is (-d, d); else a sequence
    of `sizes` numbers, each (min, max) pair with min <= max."""
    if is_real(value):
        if float(value) < 0:
            raise ConfigError(f"{name}: if {arg} is a single number, it must be positive, got {value!r}")
        values = [-float(value), float(value)]
    elif is_sequence(value) and len(value) in sizes and all(is_real(v) for v in value):
        values = [float(v) for v in value]
    else:
        lengths = " or ".join(str(s) for s in sizes)
        raise ConfigError(f"{name}: {arg} must be a number or a sequence of length {lengths}, got {value!r}")
    return values


def pair(name: str, arg: str, value: Any) -> list[float]:
    if not (is_sequence(value) and len(value) == 2 and all(is_real(v) for v in value)):
        raise ConfigError(f"{name}: {arg} must be a sequence of 2 numbers, got {value!r}")
    return [float(v) for v in value]


def real(name: str, arg: str, value: Any) -> float:
    """A number (not a bool); the engine checks its range."""
    if not is_real(value):
        raise ConfigError(f"{name}: {arg} must be a number, got {value!r}")
    return float(value)
