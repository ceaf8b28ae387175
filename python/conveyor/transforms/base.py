"""The base of conveyor's transforms: the Transform class (one subclass per
registered C++ transform) and argument helpers. Planning a chain into the
engine (compile_pipeline) is in transforms/pipeline.py, above the classes
and the torchvision conversion."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, ClassVar, Optional, Union

from conveyor import _conveyor
from conveyor._checks import is_int, is_real
from conveyor.errors import ConfigError

__all__ = ["DEFAULT_MAX_PIXELS", "SizeArg", "Transform"]

#: Where PIL refuses an image as a decompression bomb (twice
#: Image.MAX_IMAGE_PIXELS): images with more pixels raise TooLargeError
#: (the engine's kDefaultMaxPixels).
DEFAULT_MAX_PIXELS: int = _conveyor.DEFAULT_MAX_PIXELS
#: The element types an image batch can have (the engine's ImagePipeline writes these).
OUTPUT_DTYPES: tuple[str, ...] = tuple(_conveyor.IMAGE_DTYPES)

SizeArg = Union[int, Sequence[int]]


def _pair(name: str, size: Any) -> tuple[int, int]:
    """(h, w) from an int or a pair of ints, as torchvision accepts (the
    engine checks the values)."""
    if is_int(size):
        return (int(size), int(size))
    if (
        isinstance(size, Sequence)
        and not isinstance(size, str)
        and len(size) in (1, 2)
        and all(is_int(s) for s in size)
    ):
        return (int(size[0]), int(size[-1]))
    raise ConfigError(f"{name}: size must be an int or a pair of ints (h, w), got {size!r}")


def _range(name: str, arg: str, value: Any) -> tuple[float, float]:
    """A pair of numbers (lo, hi) (the engine checks the values)."""
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Sequence)
        or len(value) != 2
        or not all(is_real(v) for v in value)
    ):
        raise ConfigError(f"{name}: {arg} must be a pair of numbers (lo, hi), got {value!r}")
    return _number(value[0]), _number(value[1])


def _number(value: Any) -> float:
    """``float(value)``; an int beyond a double's range becomes an infinity,
    which the engine's range checks then name."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _numbers(value: Any) -> list[float]:
    """A parameter as the engine's list of numbers (a bool is 0 or 1)."""
    if isinstance(value, (bool, numbers.Real)):
        return [_number(value)]
    return [_number(v) for v in value]


def engine_defaults(name: str, *, children: Sequence[Any] = (), **given: Any) -> dict[str, Any]:
    """The defaults the engine's factory of transform ``name`` applies to the
    arguments ``given`` leaves out (give the required ones, and for a
    compound transform the ``_spec()`` of a child or more): one number as a
    float, several as a tuple. The factory is where each default is written;
    the classes' signatures show these values."""
    params = {arg: _numbers(value) for arg, value in given.items()}
    found = _conveyor.transform_defaults((name, params, None, list(children)))
    return {arg: values[0] if len(values) == 1 else tuple(values) for arg, values in found.items()}


class Transform:
    """Base class of conveyor's transforms: descriptions of a registered C++
    transform, compiled by :func:`compile_pipeline`.

    A subclass names the C++ transform it describes and returns its
    parameters; nothing else (no binding code) is needed::

        class RandomHorizontalFlip(Transform, name="horizontal_flip"):
            def __init__(self, p=0.5):
                self.p = p

            def _params(self):
                return {"p": self.p}

    Python converts the forms torchvision accepts (an int or a pair, a
    mode's name) into the engine's numbers; the engine owns every rule on the
    values and every default (``engine_defaults``). A subclass calls
    ``self._check()`` at the end of ``__init__``, so bad values raise there,
    as torchvision's constructors raise, with the engine's ConfigError naming
    the transform and the argument.
    """

    #: The name the C++ transform is registered under (``registered_transforms()``).
    name: ClassVar[str]
    #: Every subclass that names a C++ transform, by class name.
    registered: ClassVar[dict[str, type[Transform]]] = {}

    def __init_subclass__(cls, name: Optional[str] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            cls.name = name
            Transform.registered[cls.__name__] = cls

    def _params(self) -> dict[str, Any]:
        """The parameters by the C++ transform's argument names."""
        raise NotImplementedError

    def _spec(self) -> tuple[str, dict[str, list[float]]]:
        """(registered name, parameters) as the engine's ImagePipeline takes them."""
        params: dict[str, list[float]] = {}
        for arg, value in self._params().items():
            try:
                params[arg] = _numbers(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"{type(self).__name__}: {arg} must be a number or a sequence of numbers, got {value!r}"
                ) from None
        return type(self).name, params

    def _check(self) -> None:
        """Builds the engine's step from the parameters and drops it: raises
        ConfigError (the engine's message) when a value breaks its rules."""
        _conveyor.check_transform(self._spec())
