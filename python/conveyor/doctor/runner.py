"""Runs code or a script under the probes: ``watch()`` and ``run_script()``."""

from __future__ import annotations

import os
import runpy
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

from conveyor.doctor.observations import Observations
from conveyor.doctor.probes import Probes, StopScript
from conveyor.doctor.report import Report
from conveyor.doctor.rules import evaluate, worker_trial
from conveyor.doctor.rules.conveyor_loader import measure
from conveyor.doctor.rules.data import no_workers_load
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
    after that many optimizer steps or seconds; in the main thread, a block
    that takes no step by the time limit is stopped where it is (a signal from
    a watchdog thread, see docs/doctor.md). ``target="cuda"`` evaluates the
    device rules as if the model ran on CUDA; ``script`` is the file whose
    frames are "the user's code" (otherwise every non-library file is).
    Every hook and patch is removed when the block ends, however it ends.
    """
    pid = os.getpid()
    with _watched(steps=steps, seconds=seconds, target=target, script=script) as doctor:
        yield doctor
    if os.getpid() == pid:  # Not in a process the block forked: the trials are the parent's.
        _measure_trials(doctor.observations)


@contextmanager
def _watched(
    *, steps: Optional[int], seconds: Optional[float], target: str, script: Optional[str]
) -> Iterator[Doctor]:
    """:func:`watch` without the conveyor.Loader trials, which run after it."""
    if target not in TARGETS:
        raise ConfigError(f"target must be one of {TARGETS}, got {target!r}")
    if steps is not None and steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    if seconds is not None and seconds <= 0:
        raise ConfigError(f"seconds must be > 0, got {seconds}")
    obs = Observations(target=target, script=script)
    probes = Probes(obs, steps=steps, seconds=seconds)
    probes.install()
    ended_at_stop = False
    try:
        yield Doctor(obs)
    except StopScript:
        ended_at_stop = True  # A limit was reached: the clean stop.
    finally:
        probes.remove()
        obs.stopped = probes.describe_stop(obs.stopped, ended_at_stop)


def _measure_trials(obs: Observations) -> None:
    """Runs the trials of the fixes, the conveyor.Loader replacement
    (rules/conveyor_loader.py) and the workers dataloader-no-workers suggests
    (rules/worker_trial.py): after the probes are gone, so that a trial is
    not watched as the script's."""
    for loader in obs.loaders:
        if loader.conveyor_trial is not None:
            measure(loader.conveyor_trial)
        if loader.worker_trial is not None:
            load = no_workers_load(obs, loader)
            if load is not None:
                worker_trial.measure(loader.worker_trial, load.workers, obs.median("compute"))


def _status(ended: Optional[BaseException]) -> int:
    """The exit status Python gives a script that ended with ``ended`` (None: it ran
    to its end): a ``SystemExit``'s int is the status, None is 0, anything else
    (``sys.exit("message")``) is 1; 130 for Ctrl-C, 1 for any other exception."""
    if isinstance(ended, SystemExit):
        if ended.code is None or isinstance(ended.code, int):
            return int(ended.code or 0)  # int(): sys.exit(True) is status 1.
        return 1
    if ended is None:
        return 0
    return 130 if isinstance(ended, KeyboardInterrupt) else 1


def _duplicate(stream: Any) -> Optional[tuple[int, int]]:
    """(file descriptor, a duplicate of it) for a stream on a descriptor; None for
    one without (None, an io.StringIO, pytest's capsys): it is kept as the object."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return fd, os.dup(fd)


def _flush(stream: Any) -> None:
    try:
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass  # None, closed, or on a closed descriptor: its output has nowhere to go.


class _ProcessState:
    """What a script may change that the doctor needs back when it ends:
    ``sys.argv``, ``sys.path``, the working directory (a relative ``--json`` or
    ``--plot`` path names a file where the doctor started) and the standard
    streams (the report, a traceback, the CLI's messages)."""

    def __init__(self) -> None:
        self.argv, self.path = sys.argv, list(sys.path)
        # A descriptor, not the path: it still names the folder if the script renames it.
        self.cwd = os.open(os.curdir, os.O_RDONLY)
        # The streams' descriptors are duplicated, not only their objects kept: a
        # script can close the objects (sys.stdout.close()), replace them, and
        # close or redirect the descriptors under them (os.close(1), os.dup2(f, 1)).
        # A duplicate still refers to the file found here, so restore() puts the
        # descriptor itself back, and everything written afterwards reaches the
        # user: the report, a traceback, Python's own messages at exit, not only
        # what the doctor writes through a private copy.
        self.streams = [
            (name, getattr(sys, name), _duplicate(getattr(sys, name))) for name in ("stdout", "stderr")
        ]

    def restore(self) -> None:
        """Puts back what ``__init__`` found."""
        sys.argv, sys.path[:] = self.argv, self.path
        os.fchdir(self.cwd)
        os.close(self.cwd)
        for name, stream, fds in self.streams:
            _flush(getattr(sys, name))  # What the script wrote goes where it pointed it.
            if fds is not None:
                fd, copy = fds
                os.dup2(copy, fd)
                os.close(copy)
                if getattr(stream, "closed", False):
                    # sys.stdout.close() closes the object, not descriptor 1 (Python
                    # opens the standard streams with closefd=False): a new object.
                    stream = open(
                        fd,
                        "w",
                        encoding=getattr(stream, "encoding", None),
                        errors=getattr(stream, "errors", None),
                        buffering=1 if getattr(stream, "line_buffering", False) else -1,
                        closefd=False,
                    )
            setattr(sys, name, stream)


def _join_threads(found: set[threading.Thread]) -> None:
    """Waits for the threads that are not daemons and not in ``found``, as Python
    does before it exits: a script may leave its end while a thread trains. They
    are still watched: a limit stops them at their next step. (A thread whose
    join an exception interrupted is not alive to CPython 3.11 any more, though
    it runs: neither Python's exit nor this waits for it.)"""
    while True:
        running = [t for t in threading.enumerate() if t not in found and not t.daemon and t.is_alive()]
        if not running:
            return
        for thread in running:
            thread.join()


def run_script(
    path: str,
    args: Sequence[str] = (),
    *,
    steps: Optional[int] = 50,
    seconds: Optional[float] = None,
    target: str = "cpu",
) -> tuple[Report, int]:
    """Runs the script at ``path`` as ``__main__`` with ``sys.argv = [path, *args]``
    under :func:`watch`; returns the report and the exit status Python would give
    the script (0 when it finished or was stopped; on ``SystemExit`` an int is the
    status, None is 0, a message is printed to stderr and the status is 1; 1 when
    it raised: the traceback is printed to stderr and kept in the report).

    When the script ends on its own, the threads it started (not daemons) are
    waited for, as Python does, and still watched. ``sys.argv``, ``sys.path``,
    the working directory and the standard streams are put back as found when
    the script ends, whatever it did to them. Only the process that called it
    reports: in a process the script forked (``os.fork()``) that leaves the
    script, it raises ``SystemExit`` with that status instead of returning, so
    the child exits as it would without the doctor.
    """
    script = os.path.abspath(path)
    if not os.path.isfile(script):
        raise ConfigError(f"script not found: {path}")
    pid = os.getpid()
    found, threads = _ProcessState(), set(threading.enumerate())
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(script))  # As `python train.py` does.
    ended: Optional[BaseException] = None
    try:
        with _watched(steps=steps, seconds=seconds, target=target, script=script) as doctor:
            try:
                runpy.run_path(script, run_name="__main__")
            except StopScript:
                raise
            except BaseException as e:  # The script's own end: SystemExit, Ctrl-C, an error.
                ended = e
                if isinstance(e, SystemExit):
                    doctor.observations.stopped = f"the script exited with code {_status(e)}"
                else:
                    doctor.observations.stopped = f"the script raised {type(e).__name__}"
            _join_threads(threads)
    finally:
        found.restore()
    obs = doctor.observations
    if isinstance(ended, SystemExit):
        if not (ended.code is None or isinstance(ended.code, int)):
            print(ended.code, file=sys.stderr)  # sys.exit("message"), as Python prints it.
    elif ended is not None:
        obs.error = "".join(traceback.format_exception(type(ended), ended, ended.__traceback__))
        sys.stderr.write(obs.error)
    if os.getpid() != pid:  # A child the script forked: Python's end, no report.
        raise SystemExit(_status(ended))
    _measure_trials(obs)
    return doctor.report(), _status(ended)
