"""Memory of a process tree, sampled from /proc (Linux) in a background thread.

Two sums over the process and all its descendants, keeping the peak:

* ``peak_rss_mb``: the sum of resident set sizes, every ``interval`` seconds.
  Pages shared between processes (a forked worker's copy-on-write pages,
  shared libraries) count once per process, so this overstates a
  multi-process tree.
* ``peak_pss_mb``: the sum of proportional set sizes (``smaps_rollup``): each
  shared page is split between the processes sharing it, so the sum is the
  memory the tree really occupies. This is the fair comparison of one process
  against a process plus its workers.

Reading ``smaps_rollup`` walks a process's page tables: ~2.8 ms of CPU for a
process that has imported torch on the 2-core machine of docs/benchmarks.md.
Read every 20 ms for every process of the tree, it took 12 % of a core beside
one process and ~30 % beside a DataLoader's three, and slowed the measured
side by 14-20 %. So PSS is read when a process came or went, when the tree's
RSS has grown by ``pss_growth`` since the last read (at most every
``pss_min_interval`` seconds), and otherwise every ``pss_interval`` seconds.
Peaks shorter than ``interval`` can be missed, and a PSS peak that RSS does
not show (pages becoming unshared) is seen only if it lasts ``pss_interval``.
"""

from __future__ import annotations

import os
import threading
import time
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

    def __init__(
        self,
        pid: int,
        interval: float = 0.02,
        pss_interval: float = 1.0,
        pss_growth: float = 0.05,
        pss_min_interval: float = 0.2,
    ):
        self.pid = pid
        self.interval = interval
        self.pss_interval = pss_interval
        self.pss_min_interval = pss_min_interval
        self.pss_growth = pss_growth
        self.available = os.path.exists(f"/proc/{pid}/statm")
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_processes = 0
        #: How many times the tree's PSS was read (each read costs the machine ms of CPU).
        self.pss_reads = 0
        self._pss_seen = False
        self._pss_tree: list[int] = []
        self._pss_rss = 0
        self._pss_time = -float("inf")
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
        tree, rss = [], 0
        for pid in process_tree(self.pid):
            try:
                rss += _rss_bytes(pid)
            except OSError:
                continue  # Exited meanwhile.
            tree.append(pid)
        tree.sort()
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_processes = max(self.peak_processes, len(tree))
        since = time.monotonic() - self._pss_time
        grown = rss > self._pss_rss * (1 + self.pss_growth) and since >= self.pss_min_interval
        if tree != self._pss_tree or grown or since >= self.pss_interval:
            self._sample_pss(tree)
            self._pss_tree, self._pss_rss, self._pss_time = tree, rss, time.monotonic()

    def _sample_pss(self, tree: list[int]) -> None:
        self.pss_reads += 1
        pss = 0
        for pid in tree:
            share = _pss_bytes(pid)
            if share is not None:
                pss += share
                self._pss_seen = True
        self.peak_pss = max(self.peak_pss, pss)

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
