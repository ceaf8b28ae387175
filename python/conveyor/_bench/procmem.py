"""Memory of a process tree, sampled from /proc (Linux) in a background thread.

Two sums over the process and all its descendants, each sampled every
``interval`` seconds, keeping the peak:

* ``peak_rss_mb``: the sum of resident set sizes. Pages shared between
  processes (a forked worker's copy-on-write pages, shared libraries) count
  once per process, so this overstates a multi-process tree.
* ``peak_pss_mb``: the sum of proportional set sizes (``smaps_rollup``): each
  shared page is split between the processes sharing it, so the sum is the
  memory the tree really occupies. This is the fair comparison of one process
  against a process plus its workers.

Peaks shorter than ``interval`` can be missed.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants (via /proc/PID/task/TID/children)."""
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as f:
                    pending.extend(int(child) for child in f.read().split())
            except OSError:
                continue
    return tree


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE_BYTES


def _pss_bytes(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class TreeMemorySampler:
    """Samples the memory of ``pid``'s process tree until ``stop()``; use as a
    context manager. ``available`` is False where /proc is missing."""

    def __init__(self, pid: int, interval: float = 0.02):
        self.pid = pid
        self.interval = interval
        self.available = os.path.exists(f"/proc/{pid}/statm")
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_processes = 0
        self._pss_seen = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conveyor-bench-memory", daemon=True)

    def __enter__(self) -> TreeMemorySampler:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stops sampling (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _sample(self) -> None:
        rss = pss = 0
        tree = process_tree(self.pid)
        for pid in tree:
            try:
                rss += _rss_bytes(pid)
            except OSError:
                continue  # Exited meanwhile.
            share = _pss_bytes(pid)
            if share is not None:
                pss += share
                self._pss_seen = True
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_processes = max(self.peak_processes, len(tree))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def result(self) -> dict[str, Optional[float]]:
        """The peaks in MB (None when not measured) and the most processes seen."""
        if not self.available:
            return {"peak_rss_mb": None, "peak_pss_mb": None, "peak_processes": None}
        return {
            "peak_rss_mb": self.peak_rss / MB,
            "peak_pss_mb": self.peak_pss / MB if self._pss_seen else None,
            "peak_processes": self.peak_processes,
        }
