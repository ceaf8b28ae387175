"""``conveyor doctor``: the command (imports torch only when it runs)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

from conveyor.cli import int_at_least

__all__ = ["add_commands"]


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_commands(subparsers: Any) -> None:
    """Adds ``conveyor doctor`` to the CLI's sub-commands."""
    parser = subparsers.add_parser(
        "doctor",
        help="run a training script briefly and check it against the performance tuning guide",
        description=(
            "Runs SCRIPT unchanged in this process with instrumentation, stops it after --steps "
            "optimizer steps (default 50) or --seconds (or when it ends), and reports where its "
            "time went and what to change. Usage: conveyor doctor [options] -- train.py [args]"
        ),
    )
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--steps", type=int_at_least(1), help="stop after N optimizer steps (default 50)")
    limit.add_argument(
        "--seconds",
        type=_positive_seconds,
        help="stop after S seconds: at the first step end after S, or where the script is if no step ends",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON (docs/doctor.md)")
    parser.add_argument("--plot", metavar="FILE", help="also write a PNG of where each step's time went")
    parser.add_argument(
        "--target",
        choices=("cpu", "cuda"),
        default="cpu",
        help="evaluate the device rules as if the model ran on this device (default cpu)",
    )
    parser.add_argument("script", help="the training script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from conveyor.doctor.runner import run_script

    if args.plot:
        # Before the script runs, not after: a missing matplotlib is named now
        # (conveyor.cli says which package) instead of after the whole run.
        import matplotlib  # noqa: F401

    steps = None if args.seconds is not None else (args.steps or 50)
    report, code = run_script(
        args.script, args.script_args, steps=steps, seconds=args.seconds, target=args.target
    )
    print(report, flush=True)
    if args.json:
        report.write_json(args.json)
    if args.plot:
        report.plot(args.plot)
    _exit_without_threads(code)
    return code


#: Seconds the script's threads get to finish once the report is out (a thread
#: the stop reached at a step is on its way out).
_THREADS_GRACE = 1.0


def _exit_without_threads(code: int) -> None:
    """Ends the process now when threads of the script are still running.

    After a stop the script's own shutdown did not run: a thread that takes no
    step (waiting on a queue the stopped loop fed, stuck in a loop) would keep
    Python's exit, which waits for every thread that is not a daemon, forever;
    or worse, in CPython 3.11, where a join the stop interrupted marks the
    thread stopped while it runs, exit would not wait and tear the interpreter
    down under it. So the threads are found by their listing in
    threading.enumerate() (until they really end), not by is_alive() or join().
    """
    current = threading.current_thread()
    deadline = time.monotonic() + _THREADS_GRACE
    while True:
        names = [t.name for t in threading.enumerate() if not t.daemon and t is not current]
        if not names:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    print(
        "conveyor doctor: exiting without waiting for the script's threads still running "
        f"after the stop: {', '.join(names)}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(code)
