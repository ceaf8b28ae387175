"""The performance tuning guide's MNIST example, naive and then with each fix
the doctor reports, one epoch each, on generated MNIST-size data (nothing is
downloaded). Also measures the doctor's own overhead on the instrumented steps.

    .venv/bin/python bench/tuning_guide_mnist.py --batches 10 --threads 1
    python bench/tuning_guide_mnist.py --device cuda --batches 100   # adds the GPU fixes

The model and loop are PyTorch's examples/mnist (two convolutions, dropout,
two linear layers, Adadelta, nll_loss, logging the loss), written the naive way
the guide starts from. Only figures this script prints are reported in
docs/doctor.md; it never asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, replace
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

#: Steps of the loop the doctor watches.
DOCTOR_STEPS = 8


class MnistLike(Dataset):
    """uint8 28x28 images and labels in memory; each sample converted the way
    ToTensor + Normalize((0.1307,), (0.3081,)) do (per sample, in Python)."""

    def __init__(self, count: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=count)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image = torch.from_numpy(self.images[index]).unsqueeze(0).float().div(255)
        return image.sub(0.1307).div(0.3081), int(self.labels[index])


class Net(nn.Module):
    """examples/mnist's model."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


@dataclass(frozen=True)
class Config:
    """One variant: which of the guide's fixes are applied."""

    name: str
    num_workers: int = 0
    persistent_workers: bool = False
    set_to_none: bool = False
    item_each_step: bool = True
    foreach: Optional[bool] = None  # examples/mnist passes nothing: a for-loop on CPU.
    autocast: bool = False
    channels_last: bool = False
    # The GPU fixes (no-ops on a CPU):
    pin_memory: bool = False
    non_blocking: bool = False
    cudnn_benchmark: bool = False


def synchronize(device: torch.device) -> None:
    """Waits for the device's queued work (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(
    config: Config,
    dataset: Dataset,
    batch_size: int,
    batches: int,
    device: Union[str, torch.device] = "cpu",
) -> list[float]:
    """One epoch of ``batches`` steps; returns each step's seconds (data wait
    included; on a GPU the last step also waits for the device to finish).

    Also sets ``train_epoch.cpu_times`` (the main thread's CPU seconds per
    step) and ``train_epoch.steady_seconds``: seconds per step after step 1
    (the loader's start), with the device synchronized at both ends."""
    device = torch.device(device)
    model = Net().to(device)
    if config.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0, foreach=config.foreach)
    loader = DataLoader(
        torch.utils.data.Subset(dataset, range(batches * batch_size)),
        batch_size=batch_size,
        shuffle=True,
        num_workers=config.num_workers,
        persistent_workers=config.persistent_workers and config.num_workers > 0,
        pin_memory=config.pin_memory,
    )
    benchmark, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, config.cudnn_benchmark
    model.train()
    times, cpu = [], []
    synchronize(device)
    start, start_cpu = time.perf_counter(), time.thread_time()
    steady_start = start
    async_copy = config.non_blocking  # the GPU fix: non_blocking copies
    for step, (data, target) in enumerate(loader, 1):
        data, target = data.to(device, non_blocking=async_copy), target.to(device, non_blocking=async_copy)
        if config.channels_last:
            data = data.contiguous(memory_format=torch.channels_last)
        optimizer.zero_grad(set_to_none=config.set_to_none)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.autocast):
            output = model(data)
        loss = F.nll_loss(output.float(), target)
        loss.backward()
        optimizer.step()
        if config.item_each_step:
            loss.item()  # examples/mnist logs the loss: a host-device sync on a GPU.
        if step in (1, len(loader)):
            synchronize(device)  # The device's queued work counts in step 1 and the last.
        now, now_cpu = time.perf_counter(), time.thread_time()
        times.append(now - start)
        cpu.append(now_cpu - start_cpu)
        start, start_cpu = now, now_cpu
        if step == 1:
            steady_start = now
    torch.backends.cudnn.benchmark = benchmark
    train_epoch.cpu_times = cpu  # The main thread's CPU seconds per step (for the overhead).
    train_epoch.steady_seconds = (start - steady_start) / max(1, len(times) - 1)
    return times


def doctor_findings(
    config: Config,
    dataset: Dataset,
    batch_size: int,
    target: str,
    device: Union[str, torch.device] = "cpu",
) -> list[str]:
    """The doctor's findings (``rule (file:line)``) on DOCTOR_STEPS steps of ``config``
    (``dataset`` holds at least DOCTOR_STEPS batches)."""
    import conveyor.doctor  # Here: the timings run without the built extension.

    with conveyor.doctor.watch(target=target) as d:
        train_epoch(config, dataset, batch_size, DOCTOR_STEPS, device)
    return [f"{f.rule} ({f.site})" if f.site else f.rule for f in d.report().findings]


def guide_variants(workers: int, autocast: bool = False, gpu: bool = False) -> list[Config]:
    """The naive loop, then the guide's fixes added one after another: the
    host-side ones, then (``gpu``) pinned memory, non-blocking copies and
    cudnn.benchmark, then (``autocast`` or ``gpu``) bfloat16 autocast and
    channels_last."""
    variants = [Config("naive (as written)")]

    def add(name: str, **changes: object) -> None:
        variants.append(replace(variants[-1], name=name, **changes))

    add("+ DataLoader workers", num_workers=workers, persistent_workers=True)
    add("+ zero_grad(set_to_none=True)", set_to_none=True)
    add("+ no .item() per step", item_each_step=False)
    add("+ foreach optimizer", foreach=True)
    if gpu:
        add("+ pin_memory", pin_memory=True)
        add("+ non_blocking copies", non_blocking=True)
        add("+ cudnn.benchmark", cudnn_benchmark=True)
    if autocast or gpu:  # GPU fixes: on a CPU without bfloat16 units they cost ~10x.
        add("+ autocast bfloat16", autocast=True)
        add("+ channels_last", channels_last=True)
    return variants


def overhead(
    config: Config,
    dataset: Dataset,
    batch_size: int,
    batches: int,
    repeats: int,
    device: Union[str, torch.device] = "cpu",
):
    """Median step seconds (wall, and the main thread's CPU) without and with the
    doctor watching; runs interleaved so machine load hits both alike."""
    import conveyor.doctor

    runs: dict[str, list[list[float]]] = {
        "plain wall": [],
        "watched wall": [],
        "plain cpu": [],
        "watched cpu": [],
    }
    for _ in range(repeats):
        for mode in ("plain", "watched"):
            if mode == "watched":
                with conveyor.doctor.watch():
                    wall = train_epoch(config, dataset, batch_size, batches, device)
            else:
                wall = train_epoch(config, dataset, batch_size, batches, device)
            runs[f"{mode} wall"].append(wall[1:])
            runs[f"{mode} cpu"].append(train_epoch.cpu_times[1:])
    return {key: statistics.median(t for run in value for t in run) for key, value in runs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=10, help="steps per epoch (default 10)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="num_workers of the fixed variants")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs for the overhead")
    parser.add_argument(
        "--autocast", action="store_true", help="also run the autocast/channels_last variants"
    )
    parser.add_argument(
        "--device", default="cpu", help="cpu (default) or cuda: on cuda, all the GPU fixes are added too"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dataset = MnistLike(max(args.batches, DOCTOR_STEPS) * args.batch_size)

    variants = guide_variants(args.workers, args.autocast, gpu=device.type == "cuda")
    naive = variants[0]
    print(
        f"torch {torch.__version__} on {device}, {args.threads} threads, "
        f"{args.batches} steps of {args.batch_size}"
    )
    for target in ("cpu", "cuda"):
        print(f"doctor findings on the naive loop (--target {target}):")
        for finding in doctor_findings(naive, dataset, args.batch_size, target, device):
            print(f"  {finding}")

    print(
        "\n| variant (cumulative) | epoch s | ms/step (median) | main-thread CPU ms/step | vs naive "
        "| steady ms/step (synchronized) |"
    )
    print("|---|---|---|---|---|---|")
    base = None
    for config in variants:
        train_epoch(config, dataset, args.batch_size, 2, device)  # Warm-up (allocator, kernels).
        times = train_epoch(config, dataset, args.batch_size, args.batches, device)
        epoch = sum(times)
        base = base or epoch
        step, cpu = (statistics.median(t[1:]) * 1000 for t in (times, train_epoch.cpu_times))
        steady = train_epoch.steady_seconds * 1000
        figures = f"{epoch:.2f} | {step:.1f} | {cpu:.1f} | {base / epoch:.2f}x | {steady:.1f}"
        print(f"| {config.name} | {figures} |")

    m = overhead(naive, dataset, args.batch_size, args.batches, args.repeats, device)
    print(f"\ndoctor overhead on the naive loop ({args.repeats} interleaved epochs each, median step):")
    for kind in ("wall", "cpu"):
        plain, watched = m[f"plain {kind}"] * 1000, m[f"watched {kind}"] * 1000
        change = (watched / plain - 1) * 100
        print(f"  {kind:4}: {plain:.1f} ms plain, {watched:.1f} ms watched ({change:+.1f}%)")


if __name__ == "__main__":
    main()
