"""docs/migrating.md's torchvision table against the code: every transform
class of torchvision.transforms.v2 has a row, and a row says "no
equivalent" exactly when conveyor has no converter for it."""

import inspect
import pathlib
import re

import torchvision.transforms.v2 as v2

from conveyor.transforms.torchvision import CONVERTERS

MIGRATING = pathlib.Path(__file__).parents[2] / "docs" / "migrating.md"
TABLE = MIGRATING.read_text().split("## torchvision transforms", 1)[1]


def rows() -> list[tuple[list[str], str]]:
    """(the torchvision class names of a row, its conveyor column)."""
    found = []
    for line in TABLE.splitlines():
        if not line.startswith("| `"):
            continue
        first, second = line.split("|")[1:3]
        found.append((re.findall(r"`([A-Z]\w*)", first), second))
    return found


def test_every_v2_transform_class_has_a_row():
    documented = {name for names, _ in rows() for name in names}
    classes = {
        name
        for name, value in vars(v2).items()
        if inspect.isclass(value) and issubclass(value, v2.Transform) and value is not v2.Transform
    }
    assert classes - documented == set()


def test_a_row_says_no_equivalent_exactly_when_there_is_no_converter():
    for names, conveyor in rows():
        converted = [name for name in names if name in CONVERTERS]
        if "no equivalent" in conveyor:
            assert converted == [], (names, conveyor)
    documented = {name for names, _ in rows() for name in names}
    assert set(CONVERTERS) - documented == set()
