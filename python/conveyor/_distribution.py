"""The distribution's name on PyPI, for the messages that say what to install.

"conveyor" on PyPI is an unrelated project: the wheel is ``conveyor-loader``
(pyproject.toml's ``[project] name``; tests/test_packaging.py checks that they
agree), the import name stays ``conveyor``.
"""

DISTRIBUTION = "conveyor-loader"


def pip_install(extra: str) -> str:
    """The command that installs the optional dependencies named ``extra``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
