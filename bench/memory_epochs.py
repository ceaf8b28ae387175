"""Peak memory per epoch: conveyor vs torch.utils.data.DataLoader (not a test).

Runs 5 epochs (``--epochs``) of a training-style input pipeline over an image
folder (ImageFolder layout) with each loader in its own fresh process, and
samples that process's whole tree (the parent plus DataLoader's worker
processes) every 20 ms from outside: the sum of PSS (proportional set size,
from /proc/<pid>/smaps_rollup: pages shared between the parent and forked
workers are counted once) and the sum of RSS (shared pages counted in every
process). Prints one row per epoch with the peaks.

    .venv/bin/python bench/memory_epochs.py demo-data/
    .venv/bin/python bench/memory_epochs.py /tmp/mem-data --make 2000   # generate JPEGs first

Pipelines: conveyor ``Loader(ImageFolder, [RandomResizedCrop(224),
RandomHorizontalFlip(), Normalize], batch_size=64, shuffle=True, threads=2)``;
DataLoader(num_workers=2, batch_size=64, shuffle=True) over a dataset doing
the same with PIL (open, convert RGB, random crop box, resize 224, flip,
normalize) — torchvision is not required. Each batch is consumed by a small
reduction, as a training step would read it.

Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from conveyor.bench.procmem import process_tree
from conveyor.sources import IMG_EXTENSIONS

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
SAMPLE_SECONDS = 0.02


# --- measuring a process tree from outside ---------------------------------------------


def memory_of(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in bytes; (0, 0) once it is gone."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss


class TreeSampler(threading.Thread):
    """Samples the summed PSS and RSS of a process tree until stopped; the
    peaks are kept per epoch, the epoch being set by the caller."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.epoch: Optional[int] = None
        self.peaks: dict[int, list[int]] = {}  # epoch -> [peak PSS, peak RSS, max processes]
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            pids = process_tree(self.pid)
            pss = rss = 0
            for pid in pids:
                p, r = memory_of(pid)
                pss += p
                rss += r
            epoch = self.epoch
            if epoch is not None:
                peak = self.peaks.setdefault(epoch, [0, 0, 0])
                peak[0], peak[1], peak[2] = max(peak[0], pss), max(peak[1], rss), max(peak[2], len(pids))
            self._done.wait(SAMPLE_SECONDS)

    def stop(self) -> None:
        self._done.set()
        self.join()


def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Runs the ``kind`` pipeline in a child process, attributing samples to
    the epoch the child reports; returns per-epoch peaks and timings."""
    command = [sys.executable, __file__, str(args.folder), "--child", kind, "--epochs", str(args.epochs)]
    command += [
        "--batch-size",
        str(args.batch_size),
        "--workers",
        str(args.workers),
        "--size",
        str(args.size),
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    sampler = TreeSampler(child.pid)
    sampler.epoch = -1  # Start-up: imports and the loader's construction.
    sampler.start()
    epochs: dict[int, dict[str, float]] = {}
    assert child.stdout is not None
    for line in child.stdout:
        event = json.loads(line)
        if event["event"] == "start":
            sampler.epoch = event["epoch"]
        elif event["event"] == "end":
            time.sleep(2 * SAMPLE_SECONDS)  # The end of the epoch is sampled too.
            sampler.epoch = None
            epochs[event["epoch"]] = {k: v for k, v in event.items() if k not in ("event", "epoch")}
    sampler.stop()
    if child.wait() != 0:
        raise SystemExit(f"the {kind} run failed (exit code {child.returncode})")
    epochs[-1] = {"seconds": 0.0, "images": 0}
    for epoch, peaks in sampler.peaks.items():
        epochs[epoch].update(peak_pss_mb=peaks[0] / 2**20, peak_rss_mb=peaks[1] / 2**20, processes=peaks[2])
    return {"kind": kind, "epochs": epochs}


# --- the pipelines (run in the child) ----------------------------------------------------


def report(event: str, epoch: int, **extra: Any) -> None:
    """Tells the measuring parent (one JSON line on stdout) that an epoch starts or ended."""
    print(json.dumps({"event": event, "epoch": epoch, **extra}), flush=True)


def run_conveyor(args: argparse.Namespace) -> None:
    """The conveyor pipeline, epoch by epoch (runs in the child process)."""
    import conveyor
    from conveyor import transforms as T

    loader = conveyor.Loader(
        conveyor.sources.ImageFolder(args.folder),
        [T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)],
        batch_size=args.batch_size,
        shuffle=True,
        threads=args.workers,
    )
    for epoch in range(args.epochs):
        report("start", epoch)
        started, images, prefetch = time.perf_counter(), 0, 0
        for batch, labels in loader:
            batch.mean().item()  # Read the batch, as a training step would.
            images += len(labels)
            prefetch = max(prefetch, loader.stats()["prefetch"])  # Autotune may change it.
        buffers = loader.stats()["buffers_allocated"]
        seconds = time.perf_counter() - started
        report("end", epoch, seconds=seconds, images=images, buffers=buffers, prefetch=prefetch)


class PilFolder:
    """ImageFolder + RandomResizedCrop + flip + normalize with PIL and numpy
    (torchvision's rules for the crop box, simplified: one attempt then the
    whole image)."""

    def __init__(self, root: Path, size: int) -> None:
        # torchvision's ImageFolder order, over the formats conveyor reads.
        classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
        self.samples = [
            (os.path.join(folder, name), label)
            for label, cls in enumerate(classes)
            for folder, _, names in sorted(os.walk(os.path.join(root, cls)))
            for name in sorted(names)
            if name.lower().endswith(IMG_EXTENSIONS)
        ]
        self.size = size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Any:
        import math
        import random

        import numpy as np
        import torch
        from PIL import Image

        path, label = self.samples[index]
        with Image.open(path) as opened:
            image = opened.convert("RGB")
        width, height = image.size
        area = width * height * random.uniform(0.08, 1.0)
        ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
        w, h = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if not (0 < w <= width and 0 < h <= height):
            w, h = width, height
        left, top = random.randint(0, width - w), random.randint(0, height - h)
        image = image.resize(
            (self.size, self.size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
        )
        if random.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        array = (np.asarray(image, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(array.transpose(2, 0, 1).astype(np.float32)), label


def run_torch(args: argparse.Namespace) -> None:
    """The DataLoader pipeline, epoch by epoch (runs in the child process)."""
    import torch

    torch.set_num_threads(1)  # As each DataLoader worker does.
    loader = torch.utils.data.DataLoader(
        PilFolder(args.folder, args.size), batch_size=args.batch_size, shuffle=True, num_workers=args.workers
    )
    for epoch in range(args.epochs):
        report("start", epoch)
        started, images = time.perf_counter(), 0
        for batch, labels in loader:
            batch.mean().item()
            images += len(labels)
        report("end", epoch, seconds=time.perf_counter() - started, images=images)


# --- data, table, command line -------------------------------------------------------------


def make_folder(root: Path, count: int) -> None:
    """``count`` ImageNet-like JPEGs (short side 200-500 px) in 10 classes."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(count):
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        short, aspect = int(rng.integers(200, 501)), float(rng.uniform(1.0, 1.5))
        h, w = (short, int(short * aspect)) if i % 2 else (int(short * aspect), short)
        y, x = np.mgrid[0:h, 0:w]
        rgb = np.stack([(x * 3 + i) % 256, (y * 5) % 256, ((x + y) // 4 + 40 * (i % 7)) % 256], axis=-1)
        rgb = np.clip(rgb + rng.integers(-20, 21, size=rgb.shape), 0, 255).astype(np.uint8)
        Image.fromarray(rgb).save(folder / f"{i:06d}.jpg", quality=85)


def table(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row per loader and epoch."""
    lines = [
        "| loader | epoch | peak PSS (MB) | peak RSS sum (MB) | processes | batch buffers | prefetch (max) "
        "| images/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for epoch, row in sorted(result["epochs"].items()):
            rate = f"{row['images'] / row['seconds']:.0f}" if row["seconds"] > 0 else "-"
            name = "start-up" if epoch < 0 else str(epoch)
            buffers, prefetch = row.get("buffers", "-"), row.get("prefetch", "-")
            lines.append(
                f"| {result['kind']} | {name} | {row.get('peak_pss_mb', 0):.0f} | "
                f"{row.get('peak_rss_mb', 0):.0f} | {row.get('processes', 0)} | {buffers} | {prefetch} "
                f"| {rate} |"
            )
    return "\n".join(lines)


def main() -> int:
    """Parses the command line; measures each loader (or runs one as a child)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=Path("demo-data"))
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers and conveyor threads")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument(
        "--make", type=int, default=0, help="first generate this many JPEGs if the folder is missing"
    )
    parser.add_argument("--only", choices=["conveyor", "torch"], help="measure one loader")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", choices=["conveyor", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "conveyor":
        run_conveyor(args)
        return 0
    if args.child == "torch":
        run_torch(args)
        return 0
    if not args.folder.is_dir():
        if not args.make:
            parser.error(f"{args.folder} is not a folder (pass --make N to generate N JPEGs there)")
        print(f"generating {args.make} JPEGs in {args.folder}", file=sys.stderr)
        make_folder(args.folder, args.make)
    kinds = [args.only] if args.only else ["conveyor", "torch"]
    results = [measure(kind, args) for kind in kinds]
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
