"""Rules about feeding the model: input stall, DataLoader workers, pinned
memory, persistent workers, blocking host-to-device copies."""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple, Optional

from conveyor import _conveyor
from conveyor.doctor.observations import LoaderInfo, Observations
from conveyor.doctor.report import Finding
from conveyor.doctor.rules.registry import MEASURED_ON, rule

#: Share of step time spent waiting for data from which a stall is reported.
STALL_SHARE = 0.15
#: Share of step time loading in the training process from which workers are advised.
NO_WORKERS_SHARE = 0.10
#: Share of the loop's time spent restarting workers at epoch starts worth reporting.
RESTART_SHARE = 0.05


def _usable_cpus() -> int:
    """The CPUs this process may use (affinity and cgroup quota), as the engine counts them."""
    return _conveyor.default_cpu_threads()


def _workers_for(obs: Observations, fetch: float) -> int:
    """Workers needed so that one batch is ready per step of compute."""
    compute = max(obs.median("compute"), 1e-6)
    return max(2, min(_usable_cpus(), math.ceil(fetch / compute) + 1))


def _workers_assumption(workers: int) -> str:
    """The assumption behind a gain promised for more workers: what it takes, and
    what this machine has."""
    cpus = _usable_cpus()
    text = (
        f"an upper bound: it assumes {workers} worker processes load on CPUs the training step leaves idle; "
        f"this process may use {cpus} CPU(s)"
    )
    if cpus <= workers:
        text += ", which the workers would share with the training step: it may slow down instead (measure)"
    return text


#: The share of its compute time the training step may wait for a CPU
#: before workers that run meanwhile count as taking its CPUs.
OVERSUBSCRIBED_SHARE = 0.25
#: The CPUs the workers must keep busy meanwhile for that.
OVERSUBSCRIBED_WORKER_CPUS = 0.25


def _oversubscription(obs: Observations, loader: LoaderInfo) -> Optional[tuple[float, float, float]]:
    """(seconds per step the training step waited for a CPU, that as a share
    of its compute, the CPUs the workers used meanwhile) when a DataLoader's
    workers take the training step's CPUs, else None (median steps)."""
    if loader.kind != "DataLoader" or not loader.num_workers or not loader.worker_pids:
        return None
    steps = [s for s in obs.measured_steps() if s.compute > 0 and s.seconds > 0]
    if not steps:
        return None
    delay = statistics.median(s.run_delay for s in steps)
    share = statistics.median(s.run_delay / s.compute for s in steps)
    worker_cpus = statistics.median(s.worker_cpu / s.seconds for s in steps)
    if share < OVERSUBSCRIBED_SHARE or worker_cpus < OVERSUBSCRIBED_WORKER_CPUS:
        return None
    return delay, share, worker_cpus


def _conveyor_advice(loader: LoaderInfo) -> str:
    """The conveyor.Loader that replaces the loader, with its measured speed
    (rules/conveyor_loader.py), as lines to add to a fix."""
    if not loader.conveyor:
        return ""
    if loader.conveyor_trial is None:
        return f"\n{loader.conveyor}"
    first, rest = loader.conveyor.split("\n", 1)
    return f"\n{first}\n{loader.conveyor_trial.describe()}\n{rest}"


@rule
def input_stall(obs: Observations) -> list[Finding]:
    """The model waits for data for a large share of each step."""
    steps = obs.measured_steps()
    step_time = obs.median("seconds")
    findings = []
    for loader in obs.loaders:
        if loader.kind == "DataLoader" and loader.num_workers == 0:
            continue  # dataloader-no-workers reports it, with the same measurement.
        if _oversubscription(obs, loader) is not None:
            continue  # More workers would make it worse: cpu-oversubscription reports it.
        # Medians: one slow batch on a busy machine is not a stall.
        per_step = statistics.median(loader.step_waits.get(s.index, 0.0) for s in steps) if steps else 0.0
        if step_time <= 0 or per_step / step_time < STALL_SHARE:
            continue
        share = per_step / step_time
        if loader.kind == "DataLoader":
            fetch = statistics.median(loader.steady_waits or [per_step]) + obs.median("compute")
            workers = _workers_for(obs, fetch * (loader.num_workers or 1))
            fix = (
                f"DataLoader(..., num_workers={workers}, persistent_workers=True)"
                f"  # now num_workers={loader.num_workers}: too few for the measured stall\n"
                "# or make each sample cheaper (decode/augment less in Python), or conveyor.Loader"
                + _conveyor_advice(loader)
            )
        else:
            fix = (
                'conveyor.Loader(..., threads="auto", io_threads="auto", prefetch="auto")  # the defaults: '
                "autotune grows them to the demand\n# if they are already auto, loader.stats() shows why "
                "(autotune_reason, usable_cores): the CPUs are the limit"
            )
        findings.append(
            Finding(
                "input-stall",
                "high",
                "the model waits for data",
                f"{share:.0%} of step time waiting for the next batch ({per_step * 1000:.2f} ms per step "
                f"over {len(steps)} steps) from the {loader.describe()}",
                loader.site,
                "While the training loop waits for the loader, the accelerator idles; "
                "data should be ready before the step ends.",
                fix,
                "measured" if loader.kind != "DataLoader" else "estimated",
                f"up to {per_step * 1000:.2f} ms per step ({share:.0%}) when batches are ready in time"
                + (f" ({_workers_assumption(workers)})" if loader.kind == "DataLoader" else ""),
                {"wait_share": round(share, 4), "wait_ms_per_step": round(per_step * 1000, 3)},
                per_step,
            )
        )
    return findings


@rule
def cpu_oversubscription(obs: Observations) -> list[Finding]:
    """DataLoader workers take the CPUs the training step needs."""
    findings = []
    for loader in obs.loaders:
        measured = _oversubscription(obs, loader)
        if measured is None:
            continue
        delay, share, worker_cpus = measured
        cpus, threads, workers = _usable_cpus(), max(1, obs.torch_threads), loader.num_workers or 0
        fewer = max(1, min(workers - 1, cpus - threads))
        findings.append(
            Finding(
                "cpu-oversubscription",
                "high",
                "DataLoader workers take the training step's CPUs",
                f"the training step's threads waited {delay * 1000:.2f} ms per step for a CPU, summed over "
                f"them ({share:.0%} of its compute time) while the {workers} workers used {worker_cpus:.2f} "
                f"CPU(s); the model runs {threads} torch thread(s) and this process may use {cpus} CPU(s)",
                loader.site,
                "Worker processes and the model's threads share the CPUs: more workers than free CPUs "
                "slow the training step down instead of feeding it.",
                f"DataLoader(..., num_workers={fewer})  # now {workers}: no more than the CPUs the model "
                "leaves free (or torch.set_num_threads lower)\n# or conveyor.Loader: native threads that "
                "autotune keeps to the CPUs the step leaves" + _conveyor_advice(loader),
                "estimated",
                f"up to {delay * 1000:.2f} ms per step (the measured wait for a CPU) when the step has its "
                "CPUs to itself",
                {
                    "run_delay_ms_per_step": round(delay * 1000, 3),
                    "run_delay_share": round(share, 4),
                    "worker_cpus": round(worker_cpus, 3),
                    "usable_cpus": cpus,
                    "torch_threads": threads,
                },
                delay,
            )
        )
    return findings


class NoWorkersLoad(NamedTuple):
    """A DataLoader with num_workers=0 whose loading takes a share of the step."""

    per_batch: float  #: Seconds to load a batch in the training process (median).
    share: float  #: Of the step time.
    workers: int  #: The workers to suggest.


def no_workers_load(obs: Observations, loader: LoaderInfo) -> Optional[NoWorkersLoad]:
    """What dataloader-no-workers reports on ``loader``, or None (another
    loader, or loading too cheap for workers to pay)."""
    steps = obs.measured_steps()
    step_time = obs.median("seconds")
    if loader.kind != "DataLoader" or loader.num_workers != 0 or not steps or step_time <= 0:
        return None
    per_batch = statistics.median(loader.steady_waits or loader.first_waits or [0.0])
    share = statistics.median(loader.step_waits.get(s.index, 0.0) for s in steps) / step_time
    if share < NO_WORKERS_SHARE:
        return None  # Cheap samples (e.g. tensors in memory): workers would cost more in IPC.
    return NoWorkersLoad(per_batch, share, _workers_for(obs, per_batch))


@rule
def dataloader_no_workers(obs: Observations) -> list[Finding]:
    """A DataLoader loads in the training process (num_workers=0)."""
    findings = []
    for loader in obs.loaders:
        load = no_workers_load(obs, loader)
        if load is None:
            continue
        per_batch, share, workers = load
        trial = loader.worker_trial
        measured = trial is not None and trial.gain is not None
        if measured and trial.gain < NO_WORKERS_SHARE * obs.median("seconds"):
            continue  # Measured: the workers would not pay here (they share the step's CPUs).
        gain = trial.gain if measured else per_batch
        counts = {"load_ms_per_batch": round(per_batch * 1000, 3), "wait_share": round(share, 4)}
        if measured:
            counts["trial_wait_ms_without"] = round(trial.wait_without * 1000, 3)
            counts["trial_wait_ms_with"] = round(trial.wait_with * 1000, 3)
        findings.append(
            Finding(
                "dataloader-no-workers",
                "high",
                "the DataLoader loads in the training process (num_workers=0)",
                f"each batch took {per_batch * 1000:.2f} ms to load in the main process, "
                f"{share:.0%} of step time",
                loader.site,
                "With num_workers=0 loading and the training step run one after the other; "
                "worker processes load the next batches while the model trains.",
                f"DataLoader(..., num_workers={workers}, persistent_workers=True)" + _conveyor_advice(loader),
                "measured" if measured else "estimated",
                f"{gain * 1000:.2f} ms per step, {trial.describe()}"
                if measured
                else f"up to {per_batch * 1000:.2f} ms per step (the measured load time) leaves the loop: "
                + _workers_assumption(workers)
                + (f" (a trial was {trial.describe()})" if trial is not None and trial.error else ""),
                counts,
                gain,
            )
        )
    return findings


@rule
def pin_memory(obs: Observations) -> list[Finding]:
    """Batches for a CUDA model come from pageable memory."""
    if not obs.cuda:
        return []
    return [
        Finding(
            "pin-memory",
            "medium",
            "batches for a CUDA model are not in pinned memory",
            f"{loader.describe()} fed {loader.batches} batches",
            loader.site,
            "Copies from pageable memory are staged through a pinned buffer and cannot overlap "
            "compute; pinned batches copy faster and asynchronously with non_blocking=True.",
            "DataLoader(..., pin_memory=True)",
            "estimated",
            "1.11-1.30x per step for the guide's MNIST example; 1.00-1.01x alone and 1.06-1.12x beside "
            f"the other fixes for a ResNet-18-like net fed from pageable batches; {MEASURED_ON}",
        )
        for loader in obs.loaders
        if loader.kind == "DataLoader" and not loader.pin_memory and loader.batches
    ]


@rule
def persistent_workers(obs: Observations) -> list[Finding]:
    """Worker processes are restarted at every epoch of a short epoch loop."""
    findings = []
    loop = sum(s.seconds for s in obs.steps)
    for loader in obs.loaders:
        if loader.kind != "DataLoader" or not loader.num_workers or loader.persistent_workers:
            continue
        if loader.epochs < 2 or len(loader.first_waits) < 2 or loop <= 0:
            continue
        steady = statistics.median(loader.steady_waits) if loader.steady_waits else 0.0
        # Starting the workers (in iter()) and their first batch, each later epoch.
        restarts = sum(loader.start_seconds[1:]) + sum(max(0.0, w - steady) for w in loader.first_waits[1:])
        if restarts / loop < RESTART_SHARE:
            continue
        per_epoch = restarts / (len(loader.first_waits) - 1)
        findings.append(
            Finding(
                "persistent-workers",
                "medium",
                "worker processes restart at every epoch",
                f"{loader.epochs} epochs of {loader.batches // loader.epochs} batches; each later epoch's "
                f"start and first batch took {per_epoch * 1000:.1f} ms more than a batch "
                f"({restarts / loop:.0%} of the loop's time)",
                loader.site,
                "Without persistent_workers the DataLoader starts its worker processes again at each "
                "epoch; with short epochs the start-up is a large share of the time.",
                "DataLoader(..., persistent_workers=True)",
                "measured",
                f"about {per_epoch * 1000:.1f} ms per epoch",
                {"restart_ms_per_epoch": round(per_epoch * 1000, 3), "epochs": loader.epochs},
            )
        )
    return findings


@rule
def blocking_copy(obs: Observations) -> list[Finding]:
    """Host-to-device copies without non_blocking=True."""
    if not obs.cuda:
        return []
    return [
        Finding(
            "blocking-copy",
            "low",
            "host-to-device copies without non_blocking=True",
            f"{entry.blocking} of {entry.count} {entry.name} calls here were blocking, "
            f"in {len(entry.steps)} steps",
            site,
            "A blocking copy makes the CPU wait until the copy finished, so it cannot queue the "
            "next kernels; with pinned memory non_blocking=True copies overlap compute.",
            "x = x.to(device, non_blocking=True)  # with DataLoader(..., pin_memory=True)",
            "estimated",
            "1.00x alone and 1.00-1.04x beside the other fixes for a ResNet-18-like net, 1.00-1.40x "
            f"after pin_memory for the guide's MNIST example: it pays only with pinned memory; {MEASURED_ON}",
            {"blocking_copies": entry.blocking, "copies": entry.count},
        )
        for site, entry in obs.copies.items()
        if entry.blocking
    ]
