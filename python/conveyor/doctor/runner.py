"""Runs code or a script under the probes: ``watch()`` and ``run_script()``."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Optional

from conveyor.doctor.observations import Observations
from conveyor.doctor.probes import Probes, StopScript
from conveyor.doctor.report import Report
from conveyor.doctor.rules import evaluate
from conveyor.doctor.rules.conveyor_loader import measure
from conveyor.errors import ConfigError

TARGETS = ("cpu", "cuda")


class Doctor:
    """What ``watch()`` yields: the observations so far and the report on them."""

    def __init__(self, obs: Observations) -> None:
        self.observations = obs

    def report(self) -> Report:
        """Evaluates every rule on what was observed so far."""
        return Report(self.observations, evaluate(self.observations))


@contextmanager
def watch(
    *,
    steps: Optional[int] = None,
    seconds: Optional[float] = None,
    target: str = "cpu",
    script: Optional[str] = None,
) -> Iterator[Doctor]:
    """Watches the code in the ``with`` block; yields a :class:`Doctor`.

    ``steps``/``seconds`` stop the block (cleanly, from the optimizer step hook)
    after that many optimizer steps or seconds; ``target="cuda"`` evaluates the
    device rules as if the model ran on CUDA; ``script`` is the file whose
    frames are "the user's code" (otherwise every non-library file is).
    Every hook and patch is removed when the block ends, however it ends.
    """
    if target not in TARGETS:
        raise ConfigError(f"target must be one of {TARGETS}, got {target!r}")
    if steps is not None and steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    if seconds is not None and seconds <= 0:
        raise ConfigError(f"seconds must be > 0, got {seconds}")
    obs = Observations(target=target, script=script)
    probes = Probes(obs, steps=steps, seconds=seconds)
    probes.install()
    try:
        yield Doctor(obs)
    except StopScript:
        pass  # The step limit was reached; obs.stopped says so.
    finally:
        probes.remove()
    # After the probes are gone, so that the trial is not watched as the script's.
    for loader in obs.loaders:
        if loader.conveyor_trial is not None:
            measure(loader.conveyor_trial)


def _exit_status(exc: SystemExit) -> int:
    """The status Python exits with on ``exc``: an int is the status, None is 0,
    anything else (``sys.exit("message")``) is printed to stderr and the status is 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return int(exc.code)  # int(): sys.exit(True) is status 1.
    print(exc.code, file=sys.stderr)
    return 1


def run_script(
    path: str,
    args: Sequence[str] = (),
    *,
    steps: Optional[int] = 50,
    seconds: Optional[float] = None,
    target: str = "cpu",
) -> tuple[Report, int]:
    """Runs the script at ``path`` as ``__main__`` with ``sys.argv = [path, *args]``
    under :func:`watch`; returns the report and the exit code (0 when the script
    finished or was stopped, the status Python gives its ``SystemExit``, 1 when it raised:
    the traceback is printed to stderr and kept in the report)."""
    script = os.path.abspath(path)
    if not os.path.isfile(script):
        raise ConfigError(f"script not found: {path}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(script))  # As `python train.py` does.
    code = 0
    try:
        with watch(steps=steps, seconds=seconds, target=target, script=script) as doctor:
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as e:
                code = _exit_status(e)
                doctor.observations.stopped = f"the script exited with code {code}"
            except StopScript:
                raise
            except BaseException as e:
                code = 130 if isinstance(e, KeyboardInterrupt) else 1
                text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
                doctor.observations.error = text
                doctor.observations.stopped = f"the script raised {type(e).__name__}"
                sys.stderr.write(text)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return doctor.report(), code
