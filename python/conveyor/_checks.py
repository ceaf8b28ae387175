"""Argument checks shared by the Loader, the sources and the transforms: one
rule for what counts as an int or a bool, and one wording for the errors."""

from __future__ import annotations

import numbers
import warnings

import numpy

from conveyor.errors import ConfigError

#: Bounds of the C++ types the values end up in.
INT_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1


def is_bool(value: object) -> bool:
    """Python's and numpy's bools (``numpy.bool_`` is not a ``bool``)."""
    return isinstance(value, (bool, numpy.bool_))


def is_int(value: object) -> bool:
    """A Python or numpy integer, never a bool."""
    return isinstance(value, numbers.Integral) and not is_bool(value)


def is_real(value: object) -> bool:
    """A real number (Python's, numpy's; ints included), never a bool."""
    return isinstance(value, numbers.Real) and not is_bool(value)


def check_int(value: object, what: str, *, minimum: int = INT64_MIN, maximum: int = INT64_MAX) -> int:
    """``value`` as an int in [minimum, maximum]. Anything else (a bool, a
    float, a str, a number out of range) is a ConfigError naming ``what``,
    never silently converted (``int(1.7)`` would truncate)."""
    if not is_int(value):
        raise ConfigError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    number = int(value)  # type: ignore[call-overload]
    if number < minimum:
        raise ConfigError(f"{what} must be >= {minimum}, got {number}")
    if number > maximum:
        raise ConfigError(f"{what} must be <= {maximum}, got {number}")
    return number


def check_bool(value: object, what: str) -> bool:
    """``value`` as a bool; not truthiness (``shuffle="no"`` would otherwise shuffle)."""
    if not is_bool(value):
        raise ConfigError(f"{what} must be True or False, got {value!r}")
    return bool(value)


_warned: set[str] = set()


def warn_once(key: str, message: str, stacklevel: int = 3) -> None:
    """A ``UserWarning`` the first time ``key`` is warned about in this process
    (as DataLoader's pin_memory warning: once, then silent); ``stacklevel`` as
    ``warnings.warn`` counts it from the caller of warn_once."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=stacklevel)
