"""Where the loader's CPU time goes, per thread group, on a loaded machine.

Wall-clock figures on a shared machine mostly measure the other jobs; CPU time
per thread (Linux ``/proc/self/task/*/schedstat``, ns resolution) does not.
Two measurements of the train chain (RandomResizedCrop 224 + flip + Normalize,
batch 64) over an image folder:

``first-batch``: in this (fresh) process, construct a Loader and take its
first batch; print the wall time, the CPU time and run-queue wait of each cpu
thread until then, and how many samples were decoded (64 when the first
batch's samples went first).

``scaling``: loaders with ``threads`` 1 and 2 (alternating), one warm-up epoch
each, then one measured epoch: images/s and CPU ms per image of the cpu pool,
the io pool and the Python consumer thread.

    .venv/bin/python bench/loader_cpu.py first-batch demo-data --threads 2
    .venv/bin/python bench/loader_cpu.py scaling demo-data --repeats 2

Linux only (schedstat). Not a test: figures for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import conveyor
from conveyor import transforms as T
from conveyor.bench.reference import IMAGENET_MEAN, IMAGENET_STD


def _threads() -> dict[str, tuple[str, float, float]]:
    """Per thread id: (group, CPU seconds, run-queue wait seconds)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu_ns, wait_ns = (int(v) for v in f.read().split()[:2])
        except OSError:
            continue  # The thread ended.
        if name.startswith("conveyor-cpu"):
            group = "cpu"
        elif name.startswith("conveyor-io"):
            group = "io"
        else:
            group = "main" if int(tid) == os.getpid() else "other"
        out[tid] = (group, cpu_ns / 1e9, wait_ns / 1e9)
    return out


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """(CPU, wait) seconds per thread between two _threads() snapshots, by group."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for tid, (group, cpu, wait) in after.items():
        _, cpu0, wait0 = before.get(tid, (group, 0.0, 0.0))
        groups.setdefault(group, []).append((cpu - cpu0, wait - wait0))
    return groups


def _loader(folder: str, threads: Any) -> Any:
    source = conveyor.sources.ImageFolder(folder)
    chain = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return conveyor.Loader(source, chain, batch_size=64, shuffle=True, seed=0, threads=threads)


def first_batch(args: argparse.Namespace) -> None:
    """Prints one JSON line: the first batch of a new loader."""
    threads = args.threads if args.threads == "auto" else int(args.threads)
    before = _threads()
    loader = _loader(args.folder, threads)
    start = time.perf_counter()
    next(iter(loader))
    wall = time.perf_counter() - start
    groups = _delta(before, _threads())
    stats = loader.stats()
    loader.close()
    cpu = groups.get("cpu", [])
    print(
        json.dumps(
            {
                "wall_s": round(wall, 4),
                "cpu_thread_ms": sorted(round(1e3 * c, 1) for c, _ in cpu),
                "cpu_thread_run_queue_ms": sorted(round(1e3 * w, 1) for _, w in cpu),
                "samples_decoded": stats["samples_processed"],
                "threads": stats["threads"],
                "load": os.getloadavg()[0],
            }
        )
    )


def scaling(args: argparse.Namespace) -> None:
    """Prints one line per loader and epoch measured."""
    for repeat in range(args.repeats):
        for threads in (1, 2) if repeat % 2 == 0 else (2, 1):
            loader = _loader(args.folder, threads)
            for _ in loader:  # Warm-up: page cache, buffers, autotune.
                pass
            before, start, images = _threads(), time.perf_counter(), 0
            for _, labels in loader:
                images += len(labels)
            seconds = time.perf_counter() - start
            groups = _delta(before, _threads())
            loader.close()
            ms = {g: 1e3 * sum(c for c, _ in v) / images for g, v in groups.items()}
            print(
                f"threads={threads} images/s={images / seconds:.0f} "
                f"CPU ms/image: total {sum(ms.values()):.3f} cpu pool {ms.get('cpu', 0):.3f} "
                f"io pool {ms.get('io', 0):.3f} consumer {ms.get('main', 0):.3f} "
                f"load={os.getloadavg()[0]:.1f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    first = commands.add_parser("first-batch")
    first.add_argument("folder")
    first.add_argument("--threads", default="2", help='an int or "auto" (default 2, as conveyor bench)')
    scale = commands.add_parser("scaling")
    scale.add_argument("folder")
    scale.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.command == "first-batch":
        first_batch(args)
    else:
        scaling(args)


if __name__ == "__main__":
    main()
