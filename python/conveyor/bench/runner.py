"""Runs the measurements of ``conveyor bench`` in worker processes
(``conveyor.bench.worker``) while sampling the memory of their process tree:
``execute`` starts a fresh process per measurement; ``ReusedWorker`` runs
them one after the other in one process (``bench --quick``)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from typing import Any, Optional

from conveyor.bench.procmem import TreeMemorySampler

__all__ = ["RUN_TIMEOUT_S", "ReusedWorker", "execute"]

RUN_TIMEOUT_S = 1800


def _worker_env() -> dict[str, str]:
    """The environment of a worker process: this conveyor package first on the path."""
    import conveyor

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(conveyor.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def execute(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one measurement in a fresh process while sampling its process tree's
    memory; returns ``result``, ``memory`` and ``error`` (None or the reason)."""
    from conveyor.bench.worker import RESULT_PREFIX

    command = [sys.executable, "-m", "conveyor.bench.worker", json.dumps(spec)]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_worker_env()
    )
    with TreeMemorySampler(proc.pid) as sampler:
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\ntimed out after {RUN_TIMEOUT_S} s"
    lines = [line for line in out.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(err.strip().splitlines()[-6:])
        return {"result": None, "memory": sampler.result(), "error": f"exit code {proc.returncode}: {tail}"}
    return {"result": json.loads(lines[-1][len(RESULT_PREFIX) :]), "memory": sampler.result(), "error": None}


def _read_lines(stream: Any, lines: queue.Queue[Optional[str]]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)  # End of the stream: the process exited.


class ReusedWorker:
    """One worker process (``conveyor.bench.worker --serve``) running
    measurements one after the other, as ``bench --quick`` (a smoke test)
    does: it spares the start of a process and torch's import (1-4 s on 2
    cores) per run. Its figures are not a fresh process's: the memory of a
    run is its tree's peak on top of what the earlier runs left, and a run
    inherits what the earlier ones set in the process (torch's threads,
    the threads conveyor started, which a DataLoader's forked workers
    copy). A run that
    ends or stalls the process is reported as ``execute`` reports it, and the
    next run starts a new process. Use as a context manager."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen[str]] = None
        self._lines: queue.Queue[Optional[str]] = queue.Queue()
        self._stderr: Any = None

    def __enter__(self) -> ReusedWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[str]:
        from conveyor.bench.worker import SERVE

        self._stderr = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(
            [sys.executable, "-m", "conveyor.bench.worker", SERVE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=_worker_env(),
        )
        self._proc, self._lines = proc, queue.Queue()
        threading.Thread(target=_read_lines, args=(proc.stdout, self._lines), daemon=True).start()
        return proc

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return "\n".join(self._stderr.read().strip().splitlines()[-6:])

    def _answer(self) -> Optional[str]:
        """The worker's answer line; None when it exited; raises queue.Empty on a timeout."""
        from conveyor.bench.worker import ERROR_PREFIX, RESULT_PREFIX

        while True:
            line = self._lines.get(timeout=RUN_TIMEOUT_S)
            if line is None or line.startswith((RESULT_PREFIX, ERROR_PREFIX)):
                return line

    def execute(self, spec: dict[str, Any]) -> dict[str, Any]:
        """``execute(spec)``, in this worker process."""
        from conveyor.bench.worker import ERROR_PREFIX, RESULT_PREFIX

        if self._proc is not None and self._proc.poll() is not None:
            self.close()  # It died between runs: reap it and drop its stderr file first.
        proc = self._proc if self._proc is not None else self._start()
        assert proc.stdin is not None
        with TreeMemorySampler(proc.pid) as sampler:
            try:
                proc.stdin.write(json.dumps(spec) + "\n")
                proc.stdin.flush()
                line = self._answer()
            except OSError:  # It exited meanwhile.
                line = None
            except queue.Empty:
                proc.kill()
                self.close()
                return {
                    "result": None,
                    "memory": sampler.result(),
                    "error": f"timed out after {RUN_TIMEOUT_S} s",
                }
        if line is None:
            error = f"exit code {proc.wait()}: {self._stderr_tail()}"
            self.close()
            return {"result": None, "memory": sampler.result(), "error": error}
        if line.startswith(ERROR_PREFIX):
            error = json.loads(line[len(ERROR_PREFIX) :])
            return {"result": None, "memory": sampler.result(), "error": f"raised: {error}"}
        return {"result": json.loads(line[len(RESULT_PREFIX) :]), "memory": sampler.result(), "error": None}

    def close(self) -> None:
        """Ends the worker process (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
