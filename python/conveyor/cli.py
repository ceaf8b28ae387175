"""The ``conveyor`` command line: ``conveyor --help`` lists the sub-commands.

Each sub-command lives in its own module with an ``add_commands(subparsers)``
function that adds its parser and sets ``run`` (a function of the parsed
arguments returning the exit code) as the parser's default. Those modules
import their heavy dependencies (Pillow, matplotlib, scikit-image, torch)
inside the functions that use them, so the parsers, and ``--help``, work
without them; ``import conveyor`` imports none of this module's commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Optional

import conveyor
from conveyor._distribution import pip_install

_COMMAND_MODULES = ("conveyor.dataset", "conveyor.bench.cli", "conveyor.pack", "conveyor.doctor.cli")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers >= ``minimum``, with a clear message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``conveyor`` command."""
    parser = argparse.ArgumentParser(
        prog="conveyor", description="conveyor: a C++ input pipeline for PyTorch training."
    )
    parser.add_argument("--version", action="version", version=f"conveyor {conveyor.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.run(args) or 0)
    except conveyor.Error as e:
        print(f"conveyor {args.command}: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # A file the command writes or reads (a folder in its place, a full disk).
        names = [repr(name) for name in (e.filename, e.filename2) if name is not None]
        print(
            f"conveyor {args.command}: {' -> '.join(names)}{': ' if names else ''}{e.strerror or e}",
            file=sys.stderr,
        )
        return 1
    except ModuleNotFoundError as e:  # An optional dependency of the tooling.
        if not e.name or e.name.split(".")[0].startswith("conveyor"):
            raise
        print(
            f"conveyor {args.command}: needs the Python package {e.name!r}, which is not installed "
            f"({pip_install('bench')})",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 130
