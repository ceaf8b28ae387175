"""conveyor's GPU decode against what it has to beat, measured on the GPU
machine: the ImageNet train chain with ``decode_device="cuda"`` on 2 cores
and on every core, on conveyor's CPU path with every core and with 2, and
torchvision's batched ``decode_jpeg(device="cuda")`` followed by v2
transforms on the GPU tensors. Also the GPU batches' mean difference from
the CPU path's (uint8), and a profile of the GPU decode's device work.

    python3 bench/gpu_decode_baseline.py --json decode.json

Figures: images/s and CPU seconds per image of each (the process's user +
system time over the run), so that images/s per CPU core can be compared:
GPU nodes share few cores among 8 GPUs. torchvision reads the files into
memory before the clock starts (its most favourable case). Also lists the
CUDA image libraries the machine has (nvJPEG, nvImageCodec), which GPU
decode will load at run time.

``--device cpu --smoke`` runs the conveyor part with tiny sizes on the CPU
(the torchvision GPU part is skipped): how ``make gpu-check`` keeps this
script working without a GPU. It never asserts on time.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import tempfile
import time
from typing import Any, Callable

import torch

import conveyor
from conveyor import transforms as T
from conveyor.dataset import make_dataset
from conveyor.sources import ImageFolder

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
LIBRARY_DIRS = [
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/lib/x86_64-linux-gnu",
]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(run: Callable[[], int]) -> dict[str, Any]:
    """Runs ``run`` (which returns the images it timed after its own warm-up)
    and reports images/s and CPU seconds per image."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    images = run()
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    return {
        "images": images,
        "seconds": wall,
        "images_per_s": images / wall,
        "cpu_seconds_per_image": cpu / images,
        "images_per_s_per_cpu_core": images / cpu,
    }


def conveyor_path(
    data: str, threads: int, args: argparse.Namespace, decode_device: Any = None
) -> dict[str, Any]:
    """The train chain's epochs on ``threads`` cpu threads; with
    ``decode_device``, on that many cores too (the process's affinity while
    the loader's threads start and run), decoding on the GPU."""
    chain = [T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
    everywhere = os.sched_getaffinity(0)
    if decode_device is not None:
        os.sched_setaffinity(0, sorted(everywhere)[:threads])
    try:
        loader = conveyor.Loader(
            ImageFolder(data),
            chain,
            batch_size=args.batch_size,
            shuffle=True,
            seed=0,
            threads=threads,
            decode_device=decode_device,
        )
        next(iter(loader))  # Warm-up: threads started, files in the page cache, the kernel compiled.

        def run() -> int:
            images = 0
            for epoch in range(1, 1 + args.epochs):
                loader.set_epoch(epoch)
                images += sum(len(batch) for batch, _ in loader)
            if decode_device is not None:
                torch.cuda.synchronize()
            return images

        result = timed(run)
        result["threads"] = threads
        stats = loader.stats()  # The last epoch's: the engine's threads' share of the CPU.
        engine_cpu = stats["process_cpu_seconds"] + stats["read_cpu_seconds"]
        result["engine_cpu_seconds_per_image"] = engine_cpu / max(1, stats["samples_processed"])
        if decode_device is not None:
            result["cores"] = len(os.sched_getaffinity(0))
            result["device_decode"] = stats["device_decode"]
            result["decode_call_seconds_per_image"] = stats["device_decode"]["decode_seconds"] / (
                result["images"] + args.batch_size
            )
        loader.close()
    finally:
        os.sched_setaffinity(0, everywhere)
    return result


def baseline_only(data: str, folder: str) -> str:
    """``folder``: links to the JPEGs of ``data`` that nvJPEG's hardware
    decoder takes (no progressive ones: the CPU path finishes those); made
    at the first call."""
    from conveyor import _conveyor

    if os.path.isdir(folder):
        return folder
    for path in sorted(glob.glob(os.path.join(data, "*", "*"))):
        with open(path, "rb") as f:
            if _conveyor.DevicePlanTransform.jpeg_unsupported(f.read()) == "":
                label = os.path.join(folder, os.path.basename(os.path.dirname(path)))
                os.makedirs(label, exist_ok=True)
                os.symlink(path, os.path.join(label, os.path.basename(path)))
    return folder


def gpu_vs_cpu_pixels(data: str, args: argparse.Namespace) -> dict[str, Any]:
    """Mean and largest |difference| of the GPU decode's uint8 batches from
    the CPU path's, over two batches of the train chain (crop, resize, flip)."""
    chain = [T.RandomResizedCrop(args.size), T.RandomHorizontalFlip()]
    made = [
        conveyor.Loader(
            ImageFolder(data), chain, batch_size=args.batch_size, seed=0, dtype="uint8", **options
        )
        for options in ({"decode_device": "cuda"}, {})
    ]
    total, most, values = 0.0, 0, 0
    for (gpu, _), (cpu, _), _ in zip(made[0], made[1], range(2)):
        difference = (gpu.cpu().int() - cpu.int()).abs()
        total += float(difference.sum())
        most = max(most, int(difference.max()))
        values += difference.numel()
    for loader in made:
        loader.close()
    return {"mean_abs_difference": total / values, "max_abs_difference": most, "values": values}


def gpu_decode_profile(data: str, args: argparse.Namespace) -> dict[str, Any]:
    """The device work of 4 batches of the GPU decode (2 cpu threads): time
    per kernel and copy as torch's profiler (CUPTI) sees them."""
    from torch.profiler import ProfilerActivity, profile

    chain = [T.RandomResizedCrop(args.size), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
    loader = conveyor.Loader(
        ImageFolder(data), chain, batch_size=args.batch_size, seed=0, threads=2, decode_device="cuda"
    )
    batches = iter(loader)
    next(batches)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiled:
        for _ in range(4):
            next(batches)
        torch.cuda.synchronize()
    loader.close()
    rows = []
    for event in profiled.key_averages():
        device_us = getattr(event, "device_time_total", 0) or getattr(event, "cuda_time_total", 0)
        if device_us > 0:
            rows.append(
                {"name": event.key[:80], "count": event.count, "device_ms": round(device_us / 1000, 3)}
            )
    rows.sort(key=lambda row: -row["device_ms"])
    return {"batches": 4, "device_work": rows[:12]}


def torchvision_gpu(data: str, args: argparse.Namespace) -> dict[str, Any]:
    import torchvision
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2

    files = sorted(glob.glob(os.path.join(data, "*", "*.jpg")))
    encoded = [torchvision.io.read_file(f) for f in files]
    per_image = v2.Compose([v2.RandomResizedCrop(args.size, antialias=True), v2.RandomHorizontalFlip()])
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1)
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1)
    batches = [encoded[i : i + args.batch_size] for i in range(0, len(encoded), args.batch_size)]

    def one(batch: list[torch.Tensor]) -> torch.Tensor:
        decoded = decode_jpeg(batch, device="cuda")
        stacked = torch.stack([per_image(image) for image in decoded]).float().div_(255)
        return stacked.sub_(mean).div_(std)

    for batch in batches[:2]:
        one(batch)
    torch.cuda.synchronize()

    def run() -> int:
        images = 0
        for _ in range(args.epochs):
            for batch in batches:
                one(batch)
                images += len(batch)
        torch.cuda.synchronize()
        return images

    result = timed(run)
    result["torchvision"] = torchvision.__version__
    return result


def cuda_image_libraries() -> list[str]:
    found = set()
    for folder in LIBRARY_DIRS:
        for pattern in ("libnvjpeg*.so*", "libnvimgcodec*.so*"):
            found.update(glob.glob(os.path.join(folder, pattern)))
    try:
        import site

        for folder in site.getsitepackages():
            found.update(glob.glob(os.path.join(folder, "nvidia", "**", "libnv*jpeg*.so*"), recursive=True))
            found.update(
                glob.glob(os.path.join(folder, "nvidia", "**", "libnvimgcodec*.so*"), recursive=True)
            )
    except AttributeError:
        pass
    return sorted(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--data", help="image folder (default: generated in a temporary folder)")
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs of each (default 2)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, CPU parts only")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.batch_size, args.size, args.epochs = 24, 8, 32, 1
    cores = len(os.sched_getaffinity(0))
    results: dict[str, Any] = {
        "torch": torch.__version__,
        "cpus": cores,
        "smoke": args.smoke,
        "cuda_image_libraries": cuda_image_libraries(),
    }
    if args.device == "cuda":
        results["gpu"] = torch.cuda.get_device_name()
    parts: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        ("conveyor_cpu_all_threads", lambda data: conveyor_path(data, cores, args)),
        ("conveyor_cpu_2_threads", lambda data: conveyor_path(data, 2, args)),
    ]
    if args.device == "cuda":
        parts = [
            ("conveyor_gpu_decode_2_cores", lambda data: conveyor_path(data, 2, args, "cuda")),
            ("conveyor_gpu_decode_all_cores", lambda data: conveyor_path(data, cores, args, "cuda")),
            (
                "conveyor_gpu_decode_2_cores_baseline_jpegs_only",
                lambda data: conveyor_path(baseline_only(data, args.baseline), 2, args, "cuda"),
            ),
            (
                "conveyor_cpu_all_threads_baseline_jpegs_only",
                lambda data: conveyor_path(baseline_only(data, args.baseline), cores, args),
            ),
            *parts,
            ("torchvision_gpu_decode", lambda data: torchvision_gpu(data, args)),
            ("gpu_vs_cpu_pixels", lambda data: gpu_vs_cpu_pixels(data, args)),
            ("gpu_decode_profile", lambda data: gpu_decode_profile(data, args)),
        ]
    with tempfile.TemporaryDirectory() as scratch:
        args.baseline = os.path.join(scratch, "baseline")
        data = args.data or os.path.join(scratch, "data")
        if args.data is None:
            make_dataset(data, args.images)
        for name, run in parts:
            began = time.perf_counter()
            try:
                results[name] = run(data)
            except Exception as error:  # Recorded; the other parts still run.
                results[name] = {"error": f"{type(error).__name__}: {error}"}
            print(f"{name}: {results[name]} ({time.perf_counter() - began:.1f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all("error" not in results[name] for name, _ in parts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
