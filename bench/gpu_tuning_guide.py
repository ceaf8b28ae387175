"""The tuning guide's CUDA advice measured on a GPU: the doctor's CUDA rules
(cudnn-benchmark, no-autocast, channels-last, host-sync, optimizer-not-fused,
pin-memory, blocking-copy), each fix timed against the naive loop.

    PYTHONPATH=python python3 bench/gpu_tuning_guide.py --device cuda --json gpu-guide.json
    PYTHONPATH=python python3 bench/gpu_tuning_guide.py --device cpu --smoke --json /tmp/smoke.json

Part 1 (mnist): the guide's MNIST example (bench/tuning_guide_mnist.py) naive,
then with one fix added after another, on the device; the doctor's findings on
the naive loop.

Part 2 (convnet): a ResNet-18-like conv net on random images, trained naive
(cudnn.benchmark off, float32, NCHW, loss.item() every step, Adam not fused,
pageable batches copied with blocking .to(device)), with each fix alone, with
all fixes, and with all fixes but one. Each variant's seconds per step is the
median over rounds of a window of steps between two device synchronizations
(warm-up steps left out; the variants take turns, so drift hits all alike).
gain = naive seconds per step / the variant's; a gain <= 1 says the fix does
not pay here ("pays": false in the JSON). The doctor (--target cuda) watches
the naive loop, each one-fix loop and the all-fixes loop.

--smoke runs every code path with tiny sizes (on a CPU: the CUDA-only fixes are
no-ops and the timings mean nothing). Nothing is downloaded; each part records
its error in the JSON and the next part still runs. Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tuning_guide_mnist import (
    DOCTOR_STEPS,
    MnistLike,
    doctor_findings,
    guide_variants,
    synchronize,
    train_epoch,
)

SCHEMA = "conveyor.gpu_tuning_guide/1"

#: The doctor's CUDA rules, each with the field of Fixes that is its fix.
FIX_OF_RULE = {
    "cudnn-benchmark": "cudnn_benchmark",
    "no-autocast": "autocast",
    "channels-last": "channels_last",
    "host-sync": "deferred_loss",
    "optimizer-not-fused": "fused",
    "pin-memory": "pin_memory",
    "blocking-copy": "non_blocking",
}
CUDA_RULES = tuple(FIX_OF_RULE)

#: The code each fix changes (the doctor's advice for its rule).
FIX_CODE = {
    "cudnn-benchmark": "torch.backends.cudnn.benchmark = True",
    "no-autocast": 'with torch.autocast("cuda", dtype=torch.bfloat16): loss = ...',
    "channels-last": "model.to(memory_format=torch.channels_last); "
    "x.to(device, memory_format=torch.channels_last)",
    "host-sync": "total += loss.detach(); total.item() once per window instead of loss.item() per step",
    "optimizer-not-fused": "torch.optim.Adam(params, lr, fused=True)",
    "pin-memory": "DataLoader(..., pin_memory=True)",
    "blocking-copy": "x.to(device, non_blocking=True)",
}

#: Sizes of --smoke (every code path in seconds on a CPU).
SMOKE = {
    "mnist_steps": 3,
    "mnist_batch_size": 8,
    "mnist_workers": 1,
    "batch": 4,
    "image": 16,
    "width": 4,
    "classes": 10,
    "warmup": 1,
    "rounds": 2,
    "steps": 2,
    "doctor_steps": 4,
    "conv_seconds": 30.0,
}


# --- the doctor ---------------------------------------------------------------------


# --- part 2's conv net, data and training loop ---------------------------------------


class Block(nn.Module):
    """ResNet's basic block (two 3x3 convolutions and a shortcut), no conv bias before BatchNorm."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetLike(nn.Module):
    """ResNet-18's layout for small images (a 3x3 stem without max-pool, as for
    CIFAR): four stages of two blocks, widths w, 2w, 4w, 8w. torchvision-free,
    so the CPU smoke test and the GPU run train the same code."""

    def __init__(self, width: int = 64, classes: int = 100):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
            blocks += [Block(cin, cout, 1 if stage == 0 else 2), Block(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Batches(Dataset):
    """Ready-made batches of random images and labels in (pageable) host
    memory, one per index: a DataLoader with batch_size=None hands them to the
    loop as its collate would, without the per-sample cost, so the step is the
    model's and the copy's."""

    def __init__(self, count: int, batch: int, image: int, classes: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(count, batch, 3, image, image, generator=generator)
        self.labels = torch.randint(0, classes, (count, batch), generator=generator)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


@dataclass(frozen=True)
class Fixes:
    """Which of the doctor's CUDA fixes a variant applies (all False: the naive loop)."""

    cudnn_benchmark: bool = False
    autocast: bool = False
    channels_last: bool = False
    deferred_loss: bool = False
    fused: bool = False
    pin_memory: bool = False
    non_blocking: bool = False


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str  # "naive", "alone" (one fix), "all", "all-but" (every fix but one)
    rule: Optional[str]  # the rule whose fix is applied alone, or left out
    fixes: Fixes


def conv_variants() -> list[Variant]:
    """The naive loop, each fix alone, all fixes, all fixes but each one."""
    naive, every = Fixes(), Fixes(**{f.name: True for f in fields(Fixes)})
    variants = [Variant("naive", "naive", None, naive)]
    for rule, field in FIX_OF_RULE.items():
        variants.append(Variant(f"only {rule} fixed", "alone", rule, replace(naive, **{field: True})))
    variants.append(Variant("all fixes", "all", None, every))
    for rule, field in FIX_OF_RULE.items():
        variants.append(Variant(f"all but {rule}", "all-but", rule, replace(every, **{field: False})))
    return variants


class ConvTrainer:
    """One variant's model, optimizer and loader, trained a window of steps at a time."""

    def __init__(self, fixes: Fixes, data: Batches, device: torch.device, width: int, classes: int):
        torch.manual_seed(0)
        self.fixes, self.device = fixes, device
        model = ResNetLike(width, classes).to(device)
        if fixes.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model.train()
        # fused=None: PyTorch's default (foreach on CUDA), what a script that says nothing gets.
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True if fixes.fused else None)
        self.loader = DataLoader(data, batch_size=None, num_workers=0, pin_memory=fixes.pin_memory)
        self.batches = iter(self.loader)
        self.total = 0.0  # the summed loss, read on the host
        self.device_total = torch.zeros((), device=device)
        self.steps = 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            return next(self.batches)
        except StopIteration:  # An epoch ended: the next one.
            self.batches = iter(self.loader)
            return next(self.batches)

    def train(self, steps: int) -> None:
        """``steps`` training steps; with deferred_loss, the loss is read once, at the end."""
        fixes, device = self.fixes, self.device
        torch.backends.cudnn.benchmark = fixes.cudnn_benchmark
        memory_format = torch.channels_last if fixes.channels_last else torch.contiguous_format
        for _ in range(steps):
            x, y = self.next_batch()
            x = x.to(device, memory_format=memory_format, non_blocking=fixes.non_blocking)
            y = y.to(device, non_blocking=fixes.non_blocking)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=fixes.autocast):
                loss = F.cross_entropy(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            if fixes.deferred_loss:
                self.device_total += loss.detach()  # stays on the device
            else:
                self.total += loss.item()  # logging the loss each step: waits for the device
            self.steps += 1
        if fixes.deferred_loss:
            self.total += self.device_total.item()  # one read per window
            self.device_total.zero_()

    def mean_loss(self) -> Optional[float]:
        return self.total / self.steps if self.steps else None


def optimizer_settings(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """fused/foreach as the optimizer resolved them (None: PyTorch's default for the device)."""
    group = optimizer.param_groups[0]
    return {"fused": group.get("fused"), "foreach": group.get("foreach")}


def expected_cuda_rules(fixes: Fixes) -> set[str]:
    """The CUDA rules the doctor should report for a variant: the naive loop's
    (every planted one) less the fixed ones."""
    return {rule for rule, field in FIX_OF_RULE.items() if not getattr(fixes, field)}


def doctor_on_variant(
    doctor: Any, variant: Variant, data: Batches, device: torch.device, args: argparse.Namespace
) -> dict[str, Any]:
    """The doctor (--target cuda) watching a fresh trainer of ``variant`` for a few steps."""
    with doctor.watch(target="cuda") as watched:
        trainer = ConvTrainer(variant.fixes, data, device, args.width, args.classes)
        trainer.train(args.doctor_steps)
    report = watched.report()
    rules = sorted(set(report.rule_ids()))
    cuda = sorted(set(rules) & set(CUDA_RULES))
    expected = sorted(expected_cuda_rules(variant.fixes))
    return {
        "variant": variant.name,
        "steps": len(report.obs.steps),
        "rules": rules,
        "cuda_rules": cuda,
        "expected_cuda_rules": expected,
        "as_expected": cuda == expected,
        "other_rules": sorted(set(rules) - set(CUDA_RULES)),
        "findings": [
            {"rule": f.rule, "site": str(f.site) if f.site else None, "title": f.title}
            for f in report.findings
        ],
    }


def measure(
    trainers: dict[str, ConvTrainer],
    device: torch.device,
    args: argparse.Namespace,
    errors: dict[str, str],
) -> tuple[dict[str, list[float]], int]:
    """Seconds per step of each trainer, one figure per round: a window of
    args.steps steps between two synchronizations. Every trainer first warms
    up (cudnn.benchmark's search, allocator); then the rounds, each trainer in
    turn, rotated per round. Stops adding rounds past args.conv_seconds (at
    least one round). A trainer that raises is dropped, its error kept."""

    def run(name: str, steps: int) -> Optional[float]:
        try:
            synchronize(device)
            start = time.perf_counter()
            trainers[name].train(steps)
            synchronize(device)
            return (time.perf_counter() - start) / steps
        except Exception:
            errors[name] = traceback.format_exc()
            del trainers[name]
            return None

    for name in list(trainers):
        run(name, args.warmup)
    times: dict[str, list[float]] = {name: [] for name in trainers}
    start, rounds = time.perf_counter(), 0
    while times and rounds < args.rounds and (rounds == 0 or time.perf_counter() - start < args.conv_seconds):
        names = list(times)
        for name in names[rounds % len(names) :] + names[: rounds % len(names)]:
            if name in trainers and (seconds := run(name, args.steps)) is not None:
                times[name].append(seconds)
        rounds += 1
    return times, rounds


def gain(base: Optional[float], other: Optional[float]) -> Optional[float]:
    return base / other if base and other else None


def pays(variant: Variant, gain_vs_naive: Optional[float]) -> Optional[bool]:
    """Whether the variant's step is faster than the naive one's (None for the naive loop itself)."""
    return None if variant.kind == "naive" or gain_vs_naive is None else gain_vs_naive > 1


def overlap(a: list[float], b: list[float]) -> bool:
    """Whether the ranges of two variants' round times overlap (the difference is within the noise)."""
    return bool(a and b) and min(a) <= max(b) and min(b) <= max(a)


def time_variants(
    variants: list[Variant], data: Batches, device: torch.device, args: argparse.Namespace
) -> dict[str, Any]:
    """Every variant timed (see measure), with its gain over the naive loop, and
    each rule's gains: its fix alone against the naive loop, and all fixes
    against all fixes but it (what the fix is worth once the rest is tuned)."""
    trainers: dict[str, ConvTrainer] = {}
    errors: dict[str, str] = {}
    for v in variants:
        try:
            trainers[v.name] = ConvTrainer(v.fixes, data, device, args.width, args.classes)
        except Exception:
            errors[v.name] = traceback.format_exc()
    settings = {name: optimizer_settings(t.optimizer) for name, t in trainers.items()}
    start = time.perf_counter()
    times, rounds = measure(trainers, device, args, errors)
    measured = round(time.perf_counter() - start, 2)
    medians = {name: statistics.median(t) if t else None for name, t in times.items()}
    naive, every = medians.get("naive"), medians.get("all fixes")
    rows = []
    for v in variants:
        seconds = medians.get(v.name)
        rows.append(
            {
                "name": v.name,
                "kind": v.kind,
                "rule": v.rule,
                "fixes": asdict(v.fixes),
                "optimizer": settings.get(v.name),
                "seconds_per_step": seconds,
                "steps_per_second": 1 / seconds if seconds else None,
                "round_seconds_per_step": times.get(v.name, []),
                "gain_vs_naive": gain(naive, seconds),
                "pays_vs_naive": pays(v, gain(naive, seconds)),
                "mean_loss": trainers[v.name].mean_loss() if v.name in trainers else None,
                "error": errors.get(v.name),
            }
        )
    gains = {}
    for rule in CUDA_RULES:
        alone, but = f"only {rule} fixed", f"all but {rule}"
        g_alone, g_tuned = gain(naive, medians.get(alone)), gain(medians.get(but), every)
        gains[rule] = {
            "fix": FIX_CODE[rule],
            # naive seconds per step / seconds per step with this fix alone
            "alone": g_alone,
            "pays_alone": None if g_alone is None else g_alone > 1,
            "alone_within_noise": overlap(times.get("naive", []), times.get(alone, [])),
            # with every fix but this one / with all fixes: its worth in a tuned loop
            "in_tuned_loop": g_tuned,
            "pays_in_tuned_loop": None if g_tuned is None else g_tuned > 1,
            "in_tuned_loop_within_noise": overlap(times.get(but, []), times.get("all fixes", [])),
        }
    g_all = gain(naive, every)
    return {
        "rounds": rounds,
        "measure_seconds": measured,
        "variants": rows,
        "gains": gains,
        "all_fixes": {"gain_vs_naive": g_all, "pays": None if g_all is None else g_all > 1},
    }


def part_convnet(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    data = Batches(args.host_batches, args.batch, args.image, args.classes)
    variants = conv_variants()
    result: dict[str, Any] = {
        "model": f"ResNet-18 layout (3x3 stem, stages of width {args.width}..{8 * args.width}), "
        f"{sum(p.numel() for p in ResNetLike(args.width, args.classes).parameters())} parameters",
        "input": f"batch {args.batch} of 3x{args.image}x{args.image} float32, {args.classes} classes, "
        f"{args.host_batches} distinct batches in pageable host memory",
        "optimizer": "Adam(lr=1e-3)",
        "fix_code": FIX_CODE,
        "timing": f"median over rounds of {args.steps} steps between synchronizations, "
        f"after {args.warmup} warm-up steps per variant",
    }
    saved_benchmark = torch.backends.cudnn.benchmark
    try:
        result.update(time_variants(variants, data, device, args))
    except Exception:
        result["timing_error"] = traceback.format_exc()
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark
        if device.type == "cuda":
            torch.cuda.empty_cache()

    # The doctor: the naive loop, each one-fix loop and the all-fixes loop.
    doctor_runs: dict[str, Any] = {}
    try:
        import conveyor.doctor as doctor

        for v in variants:
            if v.kind == "all-but":
                continue
            try:
                doctor_runs[v.name] = doctor_on_variant(doctor, v, data, device, args)
            except Exception:
                doctor_runs[v.name] = {"error": traceback.format_exc()}
    except Exception:
        result["doctor_error"] = traceback.format_exc()
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark
    result["doctor"] = doctor_runs
    naive_rules = set(doctor_runs.get("naive", {}).get("cuda_rules", []))
    # A rule counts as found when it fired where it was planted: on the naive loop.
    result["planted_found"] = {rule: rule in naive_rules for rule in CUDA_RULES}
    result["cuda_rules_on_all_fixed"] = doctor_runs.get("all fixes", {}).get("cuda_rules")
    return result


# --- part 1: the MNIST example ------------------------------------------------------------


def part_mnist(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    steps, batch_size = args.mnist_steps, args.mnist_batch_size
    dataset = MnistLike(max(steps, DOCTOR_STEPS) * batch_size)
    variants = guide_variants(args.mnist_workers, autocast=True, gpu=True)
    result: dict[str, Any] = {
        "model": "PyTorch examples/mnist (two convolutions, dropout, two linear layers, Adadelta, nll_loss)",
        "steps": steps,
        "batch_size": batch_size,
        "timing": "one epoch per variant after a 2-step warm-up epoch; seconds per step after step 1 "
        "(the loader's start), the device synchronized at both ends",
        "variants": [],
    }
    base = previous = None
    for config in variants:
        entry: dict[str, Any] = {"name": config.name, "config": asdict(config)}
        try:
            train_epoch(config, dataset, batch_size, 2, device)  # Warm-up (allocator, kernels, cudnn).
            times = train_epoch(config, dataset, batch_size, steps, device)
            steady = train_epoch.steady_seconds
            if config is variants[0]:
                base = steady
            entry.update(
                epoch_seconds=sum(times),
                seconds_per_step=steady,
                gain_vs_naive=gain(base, steady),
                pays_vs_naive=None if config is variants[0] or base is None else base > steady,
                gain_vs_previous=gain(previous, steady),  # what this one fix added
            )
            previous = steady
        except Exception:
            entry["error"] = traceback.format_exc()
            previous = None
        result["variants"].append(entry)
    try:
        findings = doctor_findings(variants[0], dataset, batch_size, "cuda", device)
        result["doctor_naive"] = {"findings": findings, "rules": sorted({f.split(" ")[0] for f in findings})}
    except Exception:
        result["doctor_error"] = traceback.format_exc()
    return result


# --- output --------------------------------------------------------------------------------


def ms(seconds: Optional[float]) -> str:
    return f"{seconds * 1000:.2f}" if seconds else "-"


def times_x(value: Optional[float]) -> str:
    return f"{value:.2f}x" if value else "-"


def print_mnist(part: dict[str, Any]) -> None:
    print("\n| MNIST variant (cumulative) | ms/step | vs naive | vs the previous row |")
    print("|---|---|---|---|")
    for v in part.get("variants", []):
        figures = "error | |"
        if not v.get("error"):
            gains = f"{times_x(v['gain_vs_naive'])} | {times_x(v['gain_vs_previous'])}"
            figures = f"{ms(v['seconds_per_step'])} | {gains}"
        print(f"| {v['name']} | {figures} |")
    print("doctor on the naive loop (--target cuda):", part.get("doctor_naive", {}).get("rules", "-"))


def print_convnet(part: dict[str, Any]) -> None:
    print(f"\nconv net: {part['model']}; {part['input']}; {part.get('rounds', 0)} rounds")
    print("| variant | ms/step | steps/s | vs naive |")
    print("|---|---|---|---|")
    for v in part.get("variants", []):
        if v["error"]:
            print(f"| {v['name']} | error | | |")
            continue
        steps_per_second = f"{v['steps_per_second']:.1f}" if v["steps_per_second"] else "-"
        verdict = " (no gain)" if v["pays_vs_naive"] is False else ""
        print(
            f"| {v['name']} | {ms(v['seconds_per_step'])} | {steps_per_second} | "
            f"{times_x(v['gain_vs_naive'])}{verdict} |"
        )
    doctor = part.get("doctor", {})
    print(
        "\n| rule | alone: naive / fixed | in a tuned loop: all-but-it / all | doctor found it planted "
        "| silenced by its fix |"
    )
    print("|---|---|---|---|---|")
    for rule in CUDA_RULES:
        g = part.get("gains", {}).get(rule, {})
        alone = times_x(g.get("alone")) + (" NO GAIN" if g.get("pays_alone") is False else "")
        tuned = times_x(g.get("in_tuned_loop")) + (" NO GAIN" if g.get("pays_in_tuned_loop") is False else "")
        found = part.get("planted_found", {}).get(rule)
        fixed = doctor.get(f"only {rule} fixed", {}).get("cuda_rules")
        silenced = None if fixed is None else rule not in fixed
        print(f"| {rule} | {alone} | {tuned} | {found} | {silenced} |")
    print("all fixes vs naive:", times_x(part.get("all_fixes", {}).get("gain_vs_naive")))
    print("doctor on the all-fixes loop, CUDA rules:", part.get("cuda_rules_on_all_fixed"))
    for name, run in doctor.items():
        if run.get("error") or not run.get("as_expected"):
            print(f"doctor on {name!r}: not as expected: {run.get('error') or run}")


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": str(device),
        "device_name": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "mkldnn_enabled": torch.backends.mkldnn.enabled,  # Off on a CPU device (main()).
    }
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        env["cudnn"] = torch.backends.cudnn.version()
        # float32 convolutions may run on TF32 tensor cores (PyTorch's default for cuDNN).
        for key, read in (
            ("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
            ("matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
            ("cudnn_conv_fp32_precision", lambda: torch.backends.cudnn.conv.fp32_precision),
        ):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # torch >= 2.9 deprecates allow_tf32.
                    env[key] = read()
            except Exception as error:  # An API this torch does not have.
                env[key] = f"unknown ({type(error).__name__})"
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: every code path in seconds")
    parser.add_argument("--json", help="write the results here (also after each part)")
    parser.add_argument("--parts", default="mnist,convnet", help="comma-separated: mnist, convnet")
    parser.add_argument("--mnist-steps", type=int, default=100, help="MNIST steps per variant (64 each)")
    parser.add_argument("--mnist-batch-size", type=int, default=64)
    parser.add_argument("--mnist-workers", type=int, default=2, help="num_workers of the MNIST fix")
    parser.add_argument("--batch", type=int, default=128, help="conv net batch size")
    parser.add_argument("--image", type=int, default=64, help="conv net image side")
    parser.add_argument("--width", type=int, default=64, help="conv net first stage width")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--host-batches", type=int, default=4, help="distinct batches in host memory")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up steps per variant")
    parser.add_argument("--rounds", type=int, default=5, help="timed windows per variant")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed window")
    parser.add_argument("--conv-seconds", type=float, default=45.0, help="no new round after this")
    parser.add_argument("--doctor-steps", type=int, default=6, help="steps the doctor watches")
    args = parser.parse_args()
    parts: dict[str, tuple[Callable[..., dict[str, Any]], Callable[[dict[str, Any]], None]]] = {
        "mnist": (part_mnist, print_mnist),
        "convnet": (part_convnet, print_convnet),
    }
    if not set(args.parts.split(",")) <= set(parts):
        parser.error(f"--parts: choose from {', '.join(parts)}")
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
        # Tiny sizes want one thread; torch's pool of spinning threads made this
        # 6 s run take minutes beside other busy processes (make stress).
        torch.set_num_threads(1)
    started = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cpu":
        warnings.filterwarnings("ignore", message=".*pin_memory.*")  # No accelerator to pin for.
        # torch 2.13.0+cpu's oneDNN (3.12) corrupts the heap in the backward of
        # this net's channels_last convolutions on one thread of an AVX2-only
        # CPU (AMD EPYC: glibc aborts, "double free or corruption"). The CPU run
        # checks the guide's code paths, not speed: torch's own kernels do.
        torch.backends.mkldnn.enabled = False
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "args": vars(args),
        "timings_meaningful": device.type == "cuda" and not args.smoke,
        "parts": {},
    }

    def write() -> None:
        results["elapsed_seconds"] = round(time.perf_counter() - started, 2)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1) + "\n")

    try:
        results["environment"] = environment(device)
        print(json.dumps(results["environment"]), flush=True)
    except Exception:
        results["environment_error"] = traceback.format_exc()
    for name in args.parts.split(","):
        start = time.perf_counter()
        print(f"\n== {name} ==", flush=True)
        run, show = parts[name]
        try:
            part = run(args, device)
            part["error"] = None
        except Exception:
            part = {"error": traceback.format_exc()}
        part["seconds"] = round(time.perf_counter() - start, 2)
        results["parts"][name] = part
        write()
        try:
            if part["error"] is None:
                show(part)
        except Exception:
            traceback.print_exc()
        print(f"{name}: {part['seconds']:.1f} s (elapsed {time.perf_counter() - started:.1f} s)", flush=True)
    results["problems"] = problems(results)
    write()
    for problem in results["problems"]:
        print(f"problem: {problem}", file=sys.stderr)
    print(f"total {results['elapsed_seconds']:.1f} s" + (f", JSON in {args.json}" if args.json else ""))
    return 1 if results["problems"] else 0


def problems(results: dict[str, Any]) -> list[str]:
    """Every error recorded in the results (a part, a variant, a doctor run), each with its last line."""
    found = []

    def add(where: str, error: Optional[str]) -> None:
        if error:
            found.append(f"{where}: {error.strip().splitlines()[-1]}")

    add("environment", results.get("environment_error"))
    for name, part in results["parts"].items():
        add(name, part.get("error"))
        add(f"{name} timing", part.get("timing_error"))
        add(f"{name} doctor", part.get("doctor_error"))
        for variant in part.get("variants", []):
            add(f"{name} {variant['name']!r}", variant.get("error"))
        for variant, run in part.get("doctor", {}).items():
            add(f"{name} doctor on {variant!r}", run.get("error"))
            if "as_expected" in run and not run["as_expected"]:
                found.append(
                    f"{name} doctor on {variant!r}: CUDA rules {run['cuda_rules']}, "
                    f"expected {run['expected_cuda_rules']}"
                )
    return found


if __name__ == "__main__":
    sys.exit(main())
