"""The defaults conveyor's transform classes show are the engine's (each
written once, in its C++ factory, read through ``engine_defaults``), and they
are torchvision's."""

import inspect
import math

import pytest
import torchvision.transforms.v2 as tv

import conveyor.transforms as T
from conveyor.transforms.base import Transform


def _numbers(value):
    """A default as a tuple of floats (a bool as 0/1), or None when it is not numeric."""
    if isinstance(value, (bool, int, float)):
        return (float(value),)
    if isinstance(value, (tuple, list)) and all(isinstance(v, (bool, int, float)) for v in value):
        return tuple(float(v) for v in value)
    return None


# Every class that names a C++ transform and has a torchvision class of the same name.
CLASSES = sorted(
    (name for name in Transform.registered if hasattr(tv, name)),
)


def test_every_registered_class_but_the_policies_has_a_torchvision_namesake():
    assert len(CLASSES) >= 20, CLASSES


def _compared(name):
    """The numeric defaults of conveyor's class `name` and torchvision's, by argument."""
    ours = inspect.signature(getattr(T, name)).parameters
    theirs = inspect.signature(getattr(tv, name)).parameters
    pairs = {}
    for arg, param in ours.items():
        mine = _numbers(param.default)
        if mine is not None and arg in theirs:
            pairs[arg] = (mine, _numbers(theirs[arg].default))
    return pairs


@pytest.mark.parametrize("name", CLASSES)
def test_numeric_defaults_are_torchvisions(name):
    for arg, (mine, other) in _compared(name).items():
        assert other is not None and len(mine) == len(other), (name, arg, mine, other)
        assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(mine, other)), (name, arg, mine, other)


def test_the_comparison_covers_the_probabilities_ranges_and_counts():
    compared = {(name, arg) for name in CLASSES for arg in _compared(name)}
    for expected in [
        ("RandomResizedCrop", "scale"),
        ("RandomResizedCrop", "ratio"),
        ("RandomHorizontalFlip", "p"),
        ("RandomGrayscale", "p"),
        ("RandomErasing", "ratio"),
        ("RandomPerspective", "distortion_scale"),
        ("GaussianBlur", "sigma"),
        ("RandAugment", "num_magnitude_bins"),
        ("AugMix", "chain_depth"),
    ]:
        assert expected in compared
    assert len(compared) >= 25, sorted(compared)
