"""What the wheel's metadata says agrees with the package: its name in the
messages that say what to install, and one version everywhere (CMakeLists.txt's
project(), which pyproject.toml reads). `make wheel-check` installs the wheel
itself on a bare system (packaging/wheel_check.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import conveyor
from conveyor._distribution import DISTRIBUTION, pip_install

tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later.

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_messages_name_the_distribution_of_pyproject():
    assert PYPROJECT["project"]["name"] == DISTRIBUTION
    assert pip_install("bench") == "pip install 'conveyor-loader[bench]'"
    assert "bench" in PYPROJECT["project"]["optional-dependencies"]
    assert "remote" in PYPROJECT["project"]["optional-dependencies"]


def test_the_version_is_the_one_cmakelists_declares_and_the_wheel_reads():
    settings = PYPROJECT["tool"]["scikit-build"]["metadata"]["version"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    found = re.search(settings["regex"], (REPO / settings["input"]).read_text())
    assert found is not None
    assert found.group("value") == conveyor.__version__
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", conveyor.__version__)


def test_conveyor_version_says_the_packages_version():
    result = subprocess.run(
        [sys.executable, "-m", "conveyor", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout == f"conveyor {conveyor.__version__}\n"
