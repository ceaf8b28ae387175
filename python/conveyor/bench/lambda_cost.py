"""``conveyor bench lambda``: what an identity ``T.Lambda`` adds per image.

The same chain runs with and without ``T.Lambda(lambda image: image)`` over
small PNG images written once to a temporary folder (so decoding stays cheap
next to the cost measured), the two alternating over the repeats; the
figure is the difference of the best per-image times, in µs. It covers the
whole price of a Lambda: the image materialized before it, the GIL taken
and released, the numpy array handed to Python, the call and the checks of
the result. With several threads, Python code runs one sample at a time
(the GIL), so the cost per image holds however many threads there are.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

__all__ = ["add_command", "measure"]


def _write_images(root: str, count: int, size: int) -> None:
    import numpy
    from PIL import Image

    rng = numpy.random.default_rng(0)
    for c in ("a", "b"):
        os.makedirs(os.path.join(root, c), exist_ok=True)
        for k in range(count // 2):
            pixels = rng.integers(0, 256, (size, size, 3), dtype=numpy.uint8)
            Image.fromarray(pixels).save(os.path.join(root, c, f"{k:05d}.png"), compress_level=0)


def _seconds_per_image(
    root: str, with_lambda: bool, size: int, threads: int, batch_size: int
) -> tuple[float, float]:
    import conveyor
    from conveyor import transforms as T
    from conveyor.sources import ImageFolder

    chain: list[Any] = [T.CenterCrop(size)]
    if with_lambda:
        chain.insert(0, T.Lambda(lambda image: image))
    loader = conveyor.Loader(
        ImageFolder(root), chain, batch_size=batch_size, threads=threads, dtype="uint8", prefetch=4
    )
    images = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    for batch, _ in loader:
        images += len(batch)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    loader.close()
    return elapsed / images, cpu / images


def measure(images: int = 4096, size: int = 32, threads: int = 1, repeats: int = 5) -> dict[str, float]:
    """The best wall and CPU (the process's, every thread) seconds per image
    with and without an identity Lambda, in µs; ``lambda_cpu_us_per_image``
    is the CPU the Lambda adds (waiting for the GIL costs none), the figure
    that holds on a loaded machine; ``lambda_us_per_image`` the wall time."""
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-lambda-") as root:
        _write_images(root, images, size)
        wall = {False: float("inf"), True: float("inf")}
        cpu = dict(wall)
        _seconds_per_image(root, True, size, threads, 64)  # Warm-up: page cache, imports.
        for _ in range(repeats):
            for with_lambda in (False, True):
                w, c = _seconds_per_image(root, with_lambda, size, threads, 64)
                wall[with_lambda], cpu[with_lambda] = min(wall[with_lambda], w), min(cpu[with_lambda], c)
    return {
        "chain_us_per_image": wall[False] * 1e6,
        "with_lambda_us_per_image": wall[True] * 1e6,
        "lambda_us_per_image": (wall[True] - wall[False]) * 1e6,
        "chain_cpu_us_per_image": cpu[False] * 1e6,
        "with_lambda_cpu_us_per_image": cpu[True] * 1e6,
        "lambda_cpu_us_per_image": (cpu[True] - cpu[False]) * 1e6,
    }


def _run(args: argparse.Namespace) -> int:
    print(f"identity T.Lambda: {args.images} PNG images of {args.size}x{args.size}, best of {args.repeats}")
    for threads in args.threads:
        figures = measure(args.images, args.size, threads, args.repeats)
        print(
            f"  threads={threads}: CPU {figures['chain_cpu_us_per_image']:.1f} -> "
            f"{figures['with_lambda_cpu_us_per_image']:.1f} µs/image: the Lambda costs "
            f"{figures['lambda_cpu_us_per_image']:.1f} µs of CPU per image; wall "
            f"{figures['chain_us_per_image']:.1f} -> {figures['with_lambda_us_per_image']:.1f} µs/image "
            f"({figures['lambda_us_per_image']:+.1f})"
        )
    return 0


def add_command(benches: Any) -> None:
    """Adds ``conveyor bench lambda``."""
    from conveyor.cli import int_at_least

    help_text = "the cost of an identity T.Lambda per image, in µs"
    sub = benches.add_parser(
        "lambda", help=help_text, description=__doc__.split("\n\n")[1].replace("\n", " ")
    )
    sub.add_argument("--images", type=int_at_least(2), default=4096, help="images per epoch (default 4096)")
    sub.add_argument("--size", type=int_at_least(1), default=32, help="image side in pixels (default 32)")
    sub.add_argument(
        "--repeats", type=int_at_least(1), default=5, help="epochs per side; the best counts (default 5)"
    )
    sub.add_argument(
        "--threads",
        type=int_at_least(1),
        nargs="+",
        default=[1, 2],
        help="thread counts to run (default 1 2)",
    )
    sub.set_defaults(run=_run)
