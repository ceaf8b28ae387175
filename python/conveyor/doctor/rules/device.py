"""Rules about running on the accelerator: cudnn.benchmark, autocast,
channels_last, host-device syncs, fused optimizers, DataParallel. Most apply
only to a CUDA model (a model on CUDA, or ``--target cuda``)."""

from __future__ import annotations

from conveyor.doctor.observations import Observations
from conveyor.doctor.report import Finding
from conveyor.doctor.rules.registry import MEASURED_ON, rule


@rule
def cudnn_benchmark(obs: Observations) -> list[Finding]:
    """A conv net with fixed input shapes runs without cudnn.benchmark."""
    if not obs.cuda:
        return []
    return [
        Finding(
            "cudnn-benchmark",
            "low",
            "cudnn.benchmark is off for a conv net with fixed input shapes",
            f"{m.name} (convolutions) was called {m.train_calls} times with "
            f"{len(m.input_shapes)} input shape(s): {sorted(m.input_shapes)[:3]}",
            m.site,
            "With fixed shapes, cudnn.benchmark lets cuDNN time its convolution algorithms once "
            "and keep the fastest.",
            "torch.backends.cudnn.benchmark = True  # once, before the training loop",
            "estimated",
            f"no gain for a ResNet-18-like net (1.00x alone, 0.92-0.98x beside the other fixes: "
            f"cuDNN's heuristics already chose as well); {MEASURED_ON}",
            {"input_shapes": len(m.input_shapes), "calls": m.train_calls},
        )
        for m in obs.models
        if m.has_conv and m.train_calls and len(m.input_shapes) <= 2 and m.cudnn_benchmark_calls == 0
    ]


@rule
def no_autocast(obs: Observations) -> list[Finding]:
    """A CUDA model trains in float32 without autocast."""
    if not obs.cuda:
        return []
    return [
        Finding(
            "no-autocast",
            "medium",
            "no mixed precision (autocast) in the forward pass",
            f"{m.name} ran {m.train_calls} training forward passes, none under torch.autocast",
            m.site,
            "Tensor cores run float16/bfloat16 matrix math several times faster than float32, and "
            "activations take half the memory.",
            'with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n'
            "    loss = loss_fn(model(x), y)\n"
            "# float16 also needs torch.amp.GradScaler",
            "estimated",
            f"1.18-1.19x alone and 1.22-1.33x beside the other fixes for a ResNet-18-like net (float32 "
            f"convolutions already ran in TF32); slower (0.76-0.84x) for the guide's tiny MNIST net; "
            f"{MEASURED_ON}",
            {"training_calls": m.train_calls},
        )
        for m in obs.models
        if m.train_calls and m.autocast_calls == 0
    ]


@rule
def channels_last(obs: Observations) -> list[Finding]:
    """A CUDA conv net keeps the NCHW memory format."""
    if not obs.cuda:
        return []
    # Not only under autocast: on an H200, float32 (TF32) convolutions gained
    # 1.5x from channels_last too.
    return [
        Finding(
            "channels-last",
            "medium",
            "conv net in NCHW memory format",
            f"{m.name}: {m.train_calls} training forward passes, Conv2d weights not channels_last",
            m.site,
            "Tensor-core convolutions (float16, bfloat16 and TF32) work in NHWC; in NCHW every "
            "convolution pays for layout conversions.",
            "model = model.to(memory_format=torch.channels_last)\n"
            "x = x.to(device, memory_format=torch.channels_last, non_blocking=True)",
            "estimated",
            f"1.50-1.52x alone and 1.66-1.82x beside the other fixes for a ResNet-18-like net; "
            f"none or slower (0.82-0.99x) for the guide's MNIST net (two small convolutions); {MEASURED_ON}",
            {"training_calls": m.train_calls, "autocast_calls": m.autocast_calls},
        )
        for m in obs.models
        if m.has_conv and m.train_calls and m.channels_last is False
    ]


@rule
def host_sync(obs: Observations) -> list[Finding]:
    """A call that waits for the device runs in (almost) every step."""
    if not obs.cuda or len(obs.steps) < 2:
        return []
    steps = len(obs.steps)
    return [
        Finding(
            "host-sync",
            "low",
            f"{entry.name} waits for the device in every step",
            f"called {entry.count} times in {len(entry.steps)} of {steps} steps",
            site,
            f"{entry.name} on a CUDA tensor makes the CPU wait until all queued kernels finished, "
            "so the CPU cannot run ahead and queue the next step.",
            "running_loss += loss.detach()  # stays on the device\n"
            "# read it (.item()) every N steps or at the end of the epoch",
            "estimated",
            f"1.02-1.03x alone and 1.05-1.11x beside the other fixes for a ResNet-18-like net (one "
            f".item() per step); more where steps are short or sync often; {MEASURED_ON}",
            {"calls": entry.count, "steps_with_calls": len(entry.steps)},
        )
        for site, entry in obs.syncs.items()
        if len(entry.steps) >= max(2, steps // 2)
    ]


@rule
def optimizer_not_fused(obs: Observations) -> list[Finding]:
    """An optimizer with a fused implementation runs its per-parameter loop."""
    findings = []
    for o in obs.optimizers:
        if obs.cuda and o.supports_fused and not o.fused:
            fix, gain_kind, gain = (
                f"torch.optim.{o.name}(params, ..., fused=True)",
                "estimated",
                f"1.00-1.01x alone and 1.02-1.08x beside the other fixes for Adam on a ResNet-18-like "
                f"net (11 M parameters); {MEASURED_ON}",
            )
        elif o.foreach is False and not o.fused:
            fix, gain_kind, gain = (
                f"torch.optim.{o.name}(params, ...)  # drop foreach=False",
                "estimated",
                "the foreach implementation updates all parameters in a few batched calls",
            )
        else:
            continue
        findings.append(
            Finding(
                "optimizer-not-fused",
                "low",
                f"{o.name} runs a per-parameter loop where a fused implementation exists",
                f"{o.name}(fused={o.fused}, foreach={o.foreach})",
                o.site,
                "The for-loop implementation launches several small kernels per parameter; fused "
                "(or foreach) updates all parameters in a few kernels.",
                fix,
                gain_kind,
                gain,
            )
        )
    return findings


@rule
def data_parallel(obs: Observations) -> list[Finding]:
    """nn.DataParallel instead of DistributedDataParallel."""
    return [
        Finding(
            "data-parallel",
            "medium",
            "nn.DataParallel (single process, one Python thread per GPU)",
            "the model is wrapped in torch.nn.DataParallel",
            site,
            "DataParallel replicates the model and scatters inputs at every step from one process "
            "and is bound by the GIL; DistributedDataParallel runs one process per GPU and overlaps "
            "gradient all-reduce with backward.",
            "torch.distributed.init_process_group('nccl')\n"
            "model = torch.nn.parallel.DistributedDataParallel(model.to(rank), device_ids=[rank])\n"
            "# launch with torchrun --nproc_per_node=<GPUs> train.py",
            "estimated",
            "DDP is faster than DataParallel even on one machine (PyTorch documentation); "
            "needs several GPUs to measure",
        )
        for site in obs.data_parallel
    ]
