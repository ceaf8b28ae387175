"""How long the first write to fresh memory takes, with and without
transparent huge pages: the cost behind the bimodal first batch.

Each run maps a fresh anonymous region in a new process, asks for huge pages
(``MADV_HUGEPAGE``) or not, and times the first memset of it, then a second
one (the pages are now present: the write alone). On a virtual machine whose
balloon device reports free memory to the host (virtio-balloon free page
reporting), a huge page that the kernel takes from a reported block is
faulted in again by the host on first touch, which the guest sees as a slow
``clear_page`` in the thread that wrote it.

    .venv/bin/python bench/first_touch.py --mb 40 --runs 20

Not a test: figures for docs/benchmarks.md ("The bench's own memory sampler,
and fresh memory"); why they matter: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import subprocess
import sys
import time

from conveyor.cli import int_at_least


def _touch(megabytes: int, huge: bool) -> str:
    size = megabytes << 20
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        region.madvise(mmap.MADV_HUGEPAGE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    times = []
    for value in (1, 2):
        start = time.perf_counter()
        ctypes.memset(address, value, size)
        times.append(time.perf_counter() - start)
    return f"{1e3 * times[0]:.1f} {1e3 * times[1]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int_at_least(1), default=40, help="megabytes (default 40)")
    parser.add_argument("--runs", type=int_at_least(1), default=20, help="processes per mode (default 20)")
    parser.add_argument("--child", choices=("huge", "small"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(_touch(args.mb, args.child == "huge"))
        return
    for mode in ("huge", "small"):
        first, second = [], []
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, __file__, "--mb", str(args.mb), "--child", mode],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            first.append(float(out[0]))
            second.append(float(out[1]))
        pages = "2 MiB pages (MADV_HUGEPAGE)" if mode == "huge" else "4 KiB pages"
        print(f"{args.mb} MB, {pages}: first write ms " + " ".join(f"{v:.0f}" for v in first))
        print(f"{' ' * len(str(args.mb))}    second write ms: median {sorted(second)[len(second) // 2]:.1f}")


if __name__ == "__main__":
    main()
