"""What the probes saw: plain records, no torch objects (the rules and the
report read only these)."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Site:
    """A place in the user's code: the file and line of a stack frame."""

    file: str
    line: int

    def __str__(self) -> str:
        path = self.file
        try:
            relative = os.path.relpath(path)
            if not relative.startswith(".."):
                path = relative
        except ValueError:  # Another drive (Windows).
            pass
        return f"{path}:{self.line}"


@dataclass
class StepRecord:
    """One optimizer step: from the previous step's end to this one's."""

    index: int
    seconds: float
    data_wait: float
    copy: float
    #: Seconds this process's threads waited for a CPU (runnable, not running) in the step.
    run_delay: float = 0.0
    #: CPU seconds the DataLoader worker processes used in the step.
    worker_cpu: float = 0.0
    #: Seconds of evaluation in the step's time (a validation loop between
    #: two steps: two or more forwards in a row of a model in eval mode or
    #: without gradients, with the batch waits among them).
    evaluation: float = 0.0

    @property
    def compute(self) -> float:
        """Time neither waiting for data, nor copying to the device, nor evaluating."""
        return max(0.0, self.seconds - self.data_wait - self.copy - self.evaluation)


@dataclass
class LoaderInfo:
    """A loader the script iterated (a DataLoader or a conveyor.Loader)."""

    kind: str
    site: Optional[Site]
    num_workers: Optional[int] = None
    pin_memory: Optional[bool] = None
    persistent_workers: Optional[bool] = None
    batch_size: Optional[int] = None
    epochs: int = 0
    batches: int = 0
    wait: float = 0.0
    #: Seconds in ``iter(loader)`` per epoch (a DataLoader starts its workers there).
    start_seconds: list[float] = field(default_factory=list)
    #: Wait for the first batch of each epoch (worker start-up shows here).
    first_waits: list[float] = field(default_factory=list)
    #: Waits for the other batches.
    steady_waits: list[float] = field(default_factory=list)
    #: Wait per step index for the steady batches (not an epoch's first).
    step_waits: dict[int, float] = field(default_factory=dict)
    #: The conveyor.Loader call that replaces this DataLoader (code), or why its
    #: torchvision pipeline does not convert (rules/conveyor_loader.py).
    conveyor: Optional[str] = None
    #: That call run on the first files after the script (its images/s).
    conveyor_trial: Optional[Any] = None
    #: A DataLoader with num_workers=0 over a map-style dataset: its
    #: dataset and batching, to measure the suggested workers
    #: (rules/worker_trial.py).
    worker_trial: Optional[Any] = None
    #: Process ids of its worker processes (a DataLoader with workers).
    worker_pids: list[int] = field(default_factory=list)

    def describe(self) -> str:
        """A one-line description with its settings."""
        where = f" at {self.site}" if self.site else ""
        if self.kind != "DataLoader":
            return f"{self.kind}{where}"
        return (
            f"DataLoader{where} (num_workers={self.num_workers}, pin_memory={self.pin_memory}, "
            f"persistent_workers={self.persistent_workers})"
        )


@dataclass
class CallSite:
    """Calls of one kind from one place in the user's code."""

    name: str
    count: int = 0
    steps: set[int] = field(default_factory=set)
    blocking: int = 0
    seconds: float = 0.0
    longest: int = 0
    nbytes: int = 0


@dataclass
class ModelInfo:
    """A top-level module (one with parameters called from outside any module)."""

    name: str
    site: Optional[Site]
    has_conv: bool = False
    on_cuda: bool = False
    calls: int = 0
    train_calls: int = 0
    input_shapes: set[tuple[int, ...]] = field(default_factory=set)
    autocast_calls: int = 0
    #: Whether every Conv2d weight is channels_last (read at the first training call).
    channels_last: Optional[bool] = None
    cudnn_benchmark_calls: int = 0


@dataclass
class OptimizerInfo:
    """An optimizer that stepped."""

    name: str
    site: Optional[Site]
    fused: Optional[bool]
    foreach: Optional[bool]
    supports_fused: bool


@dataclass
class Observations:
    """Everything the probes recorded during one run."""

    #: torch's intra-op threads when the first step ended (the model's CPUs).
    torch_threads: int = 0
    target: str = "cpu"
    script: Optional[str] = None
    steps: list[StepRecord] = field(default_factory=list)
    #: Evaluations between steps (validation loops: StepRecord.evaluation) and their seconds.
    evaluations: int = 0
    evaluation_seconds: float = 0.0
    loaders: list[LoaderInfo] = field(default_factory=list)
    models: list[ModelInfo] = field(default_factory=list)
    optimizers: list[OptimizerInfo] = field(default_factory=list)
    copies: dict[Site, CallSite] = field(default_factory=dict)
    syncs: dict[Site, CallSite] = field(default_factory=dict)
    zero_grads: dict[Site, CallSite] = field(default_factory=dict)
    eval_with_grad: dict[Site, CallSite] = field(default_factory=dict)
    chains: dict[Site, CallSite] = field(default_factory=dict)
    debug: dict[Site, CallSite] = field(default_factory=dict)
    data_parallel: list[Site] = field(default_factory=list)
    #: (conv name, batchnorm name, site of the conv, how it was found)
    conv_bn: list[tuple[str, str, Optional[Site], str]] = field(default_factory=list)
    #: Per step: flags read at the step's end.
    anomaly_steps: int = 0
    profiler_steps: int = 0
    deterministic_steps: int = 0
    cudnn_benchmark: Optional[bool] = None
    step_site: Optional[Site] = None
    stopped: str = "finished"
    error: Optional[str] = None

    @property
    def cuda(self) -> bool:
        """Whether device rules apply: --target cuda, or a model really on CUDA."""
        return self.target == "cuda" or any(m.on_cuda for m in self.models)

    def measured_steps(self) -> list[StepRecord]:
        """The steps to measure: all but the first (warm-up) when there are more."""
        return self.steps[1:] if len(self.steps) > 1 else list(self.steps)

    def median(self, attribute: str) -> float:
        """Median seconds per measured step of a StepRecord attribute."""
        steps = self.measured_steps()
        return statistics.median(getattr(s, attribute) for s in steps) if steps else 0.0
