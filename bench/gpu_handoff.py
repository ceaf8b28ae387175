"""ResNet-50 trained from conveyor's CPU path on a GPU, against the same
model trained on synthetic data already on the GPU: is the GPU fed?

    python3 bench/gpu_handoff.py --json handoff.json

Measures, in one run, on a generated ImageNet-like JPEG folder (made with
conveyor.dataset.make_dataset unless ``--data`` is given):

* the loader alone: the ImageNet train chain (RandomResizedCrop 224, flip,
  Normalize; float32, channels_last) on every usable CPU, images/s;
* synthetic: torchvision's ResNet-50 (random weights), bf16 autocast,
  channels_last, SGD with momentum, ``cudnn.benchmark``, batch 256, on a
  fixed batch already on the GPU, images/s;
* fed: the same training fed by ``Loader(device="cuda")``: images/s, its
  ratio to synthetic, and the input stall (the share of the wall time the
  loop spent waiting in ``next()``); ``torch.cuda.memory_allocated()`` after
  the warm-up and at the end (flat means nothing accumulates).

``--device cpu --smoke`` runs every path with a tiny model and tiny sizes on
the CPU (the timings mean nothing): how ``make gpu-check`` keeps this script
working on machines without a GPU. It never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from typing import Any

import torch
from torch import nn

import conveyor
from conveyor import transforms as T
from conveyor.dataset import make_dataset
from conveyor.sources import FileList, ImageFolder

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def train_chain(size: int) -> list[Any]:
    return [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]


def make_model(smoke: bool, device: torch.device) -> nn.Module:
    if smoke:
        model: nn.Module = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)
        )
    else:
        import torchvision

        model = torchvision.models.resnet50(weights=None)
    return model.to(device, memory_format=torch.channels_last)


class Trainer:
    """One training step of the model: bf16 autocast on CUDA, SGD with momentum."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        fused = {"fused": True} if device.type == "cuda" else {}
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **fused)
        self.loss = nn.CrossEntropyLoss()

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            loss = self.loss(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def source(data: str, args: argparse.Namespace) -> FileList:
    """The folder's files listed ``--repeat`` times: epochs long enough that
    the timed steps see no epoch boundary, without generating more images."""
    folder = ImageFolder(data)
    return FileList(folder.paths * args.repeat, list(folder.labels) * args.repeat)


def loader_alone(data: str, args: argparse.Namespace) -> dict[str, Any]:
    loader = conveyor.Loader(
        source(data, args),
        train_chain(args.size),
        batch_size=args.batch_size,
        shuffle=True,
        seed=0,
        memory_format=torch.channels_last,
    )
    images, start = 0, 0.0
    for epoch in range(args.loader_epochs):
        loader.set_epoch(epoch)
        for step, (batch, _) in enumerate(loader):
            if epoch == 0 and step == 1:
                images, start = 0, time.perf_counter()  # From the second batch: threads started.
            images += len(batch)
    if start == 0.0:
        raise ValueError(f"the loader gave fewer than 2 batches of {args.batch_size}: use more --images")
    seconds = time.perf_counter() - start
    stats = loader.stats()
    loader.close()
    return {
        "images_per_s": images / seconds,
        "images": images,
        "seconds": seconds,
        "threads": stats.get("threads"),
    }


def synthetic(trainer: Trainer, args: argparse.Namespace) -> dict[str, Any]:
    device = trainer.device
    images = torch.randn(args.batch_size, 3, args.size, args.size, device=device)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (args.batch_size,), device=device)
    for _ in range(args.warmup):
        trainer.step(images, labels)
    sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        trainer.step(images, labels)
    sync(device)
    seconds = time.perf_counter() - start
    return {"images_per_s": args.steps * args.batch_size / seconds, "seconds": seconds}


def parse_variant(text: str) -> dict[str, Any]:
    """``"auto"`` or comma-separated Loader arguments: ``"threads=8,prefetch=4"``,
    ``"dtype=uint8"`` (the chain then ends before Normalize, which the step
    does on the GPU), ``"decode_device=cuda"``; and ``"cores=2"``: the
    loader's threads run on that many cores (the process's affinity while
    they start), as on a GPU node whose cores are shared by 8 GPUs."""
    if text == "auto":
        return {}
    options: dict[str, Any] = {}
    for item in text.split(","):
        key, value = item.split("=")
        options[key] = int(value) if value.isdigit() else value
    return options


def fed(trainer: Trainer, data: str, args: argparse.Namespace, variant: str) -> dict[str, Any]:
    options = parse_variant(variant)
    everywhere = os.sched_getaffinity(0)
    cores = options.pop("cores", None)
    if cores is not None:
        os.sched_setaffinity(0, sorted(everywhere)[:cores])
    try:
        return {"variant": variant, **fed_on(trainer, data, args, options)}
    finally:
        os.sched_setaffinity(0, everywhere)


def fed_on(trainer: Trainer, data: str, args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    device = trainer.device
    chain = train_chain(args.size)
    normalize = None
    if options.get("dtype") == "uint8":
        chain = chain[:-1]
        mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

        def normalize(images: torch.Tensor) -> torch.Tensor:
            return (images.float() - mean) / std

    loader = conveyor.Loader(
        source(data, args),
        chain,
        batch_size=args.batch_size,
        shuffle=True,
        seed=0,
        drop_last=True,
        device=device,
        memory_format=torch.channels_last,
        **options,
    )
    engine = loader._engine = TimedEngine(loader._engine)
    trace = AutotuneTrace()
    steps, waited, start, epoch = 0, 0.0, 0.0, 0
    engine_wait_at_start = 0.0
    memory: dict[str, int] = {}
    total = args.fed_warmup + args.steps
    while steps < total:
        if len(loader) == 0:
            raise ValueError(f"no full batch of {args.batch_size} in an epoch: use more --images or --repeat")
        loader.set_epoch(epoch)
        batches = iter(loader)
        while steps < total:
            before = time.perf_counter()
            try:
                images, labels = next(batches)
            except StopIteration:
                break
            if steps >= args.fed_warmup:
                waited += time.perf_counter() - before
            trainer.step(normalize(images) if normalize else images, labels)
            steps += 1
            if steps == args.fed_warmup:
                sync(device)
                if device.type == "cuda":
                    memory["after_warmup"] = torch.cuda.memory_allocated(device)
                    memory["reserved_after_warmup"] = torch.cuda.memory_reserved(device)
                engine_wait_at_start = engine.seconds
                start = time.perf_counter()
        epoch += 1
    sync(device)
    seconds = time.perf_counter() - start
    if device.type == "cuda":
        memory["at_end"] = torch.cuda.memory_allocated(device)
        memory["reserved_at_end"] = torch.cuda.memory_reserved(device)
    stats = loader.stats()
    loader.close()
    trace.close()
    return {
        "autotune_trace": trace.lines[-40:],
        "cores": len(os.sched_getaffinity(0)),
        "images_per_s": args.steps * args.batch_size / seconds,
        "seconds": seconds,
        # The share of the wall time spent in next(): waiting for the engine,
        # plus the hand-over (pinning labels, queuing copies, waiting for the
        # previous copy's event).
        "input_stall": waited / seconds,
        "engine_wait_share": (engine.seconds - engine_wait_at_start) / seconds,
        "memory_allocated": memory,
        "stats_at_end": {k: v for k, v in stats.items() if isinstance(v, (int, float, str))},
        "device_decode": stats.get("device_decode"),
    }


class AutotuneTrace(logging.Handler):
    """Collects the "conveyor.autotune" log lines (autotune's decisions) while open."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.logger = logging.getLogger("conveyor.autotune")
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{time.perf_counter():.2f} {record.getMessage()}")

    def close(self) -> None:
        self.logger.removeHandler(self)
        super().close()


class TimedEngine:
    """The Loader's engine with the time its consumer spends in ``next()``
    counted (a diagnosis: how much of the input stall is waiting for a batch
    the CPU threads have not finished, and how much is the hand-over)."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.seconds = engine, 0.0

    def next(self, timeout: float) -> Any:
        began = time.perf_counter()
        try:
            return self.engine.next(timeout)
        finally:
            self.seconds += time.perf_counter() - began

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--data", help="image folder (default: generated in a temporary folder)")
    parser.add_argument("--images", type=int, default=3072, help="images to generate (default 3072)")
    parser.add_argument("--repeat", type=int, default=10, help="times each file is listed (default 10)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=10, help="synthetic steps before timing (default 10)")
    parser.add_argument(
        "--fed-warmup", type=int, default=40, help="fed steps before timing, autotune settling (default 40)"
    )
    parser.add_argument(
        "--fed",
        help="';'-separated fed variants (parse_variant); default: auto;threads=12;dtype=uint8, "
        "and on CUDA decode_device=cuda,cores=2;decode_device=cuda (the GPU decode on 2 cores and on all)",
    )
    parser.add_argument("--steps", type=int, default=50, help="timed steps (default 50)")
    parser.add_argument("--loader-epochs", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="tiny model and sizes: checks the paths only")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if args.smoke:
        args.images, args.batch_size, args.size, args.warmup, args.fed_warmup, args.steps = 24, 4, 32, 1, 1, 2
        args.repeat = 1
    device = torch.device(args.device)
    if args.fed is None:
        args.fed = "auto;threads=12;dtype=uint8"
        if device.type == "cuda":
            args.fed += ";decode_device=cuda,cores=2;decode_device=cuda"
    torch.backends.cudnn.benchmark = True
    results: dict[str, Any] = {
        "torch": torch.__version__,
        "conveyor": conveyor.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "batch_size": args.batch_size,
        "size": args.size,
        "steps": args.steps,
        "smoke": args.smoke,
    }
    with tempfile.TemporaryDirectory() as scratch:
        data = args.data
        if data is None:
            data = os.path.join(scratch, "data")
            began = time.perf_counter()
            make_dataset(data, args.images)
            results["dataset"] = {"images": args.images, "seconds": time.perf_counter() - began}
        trainer = Trainer(make_model(args.smoke, device), device)
        parts: list[tuple[str, Any]] = [
            ("loader_alone", lambda: loader_alone(data, args)),
            ("synthetic", lambda: synthetic(trainer, args)),
        ]
        for variant in args.fed.split(";"):
            parts.append((f"fed_{variant}", lambda variant=variant: fed(trainer, data, args, variant)))
        for name, run in parts:
            began = time.perf_counter()
            try:
                results[name] = run()
            except Exception as error:  # Recorded; the other parts still run.
                results[name] = {"error": f"{type(error).__name__}: {error}"}
            print(f"{name}: {results[name]} ({time.perf_counter() - began:.1f} s)", flush=True)
    for name, _ in parts:
        if (
            name.startswith("fed_")
            and "images_per_s" in results[name]
            and "images_per_s" in results["synthetic"]
        ):
            ratio = results[name]["images_per_s"] / results["synthetic"]["images_per_s"]
            results[name]["over_synthetic"] = ratio
            print(f"{name} / synthetic: {ratio:.3f}, input stall {results[name]['input_stall']:.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all("error" not in results[name] for name, _ in parts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
