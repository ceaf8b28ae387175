"""The DataLoader setting ``dataloader-no-workers`` suggests, measured before
it is promised: after the script, the same dataset (in order, from its first
sample) is loaded by a DataLoader with no workers and by one with the
suggested workers, each batch followed by the step's measured compute, run
as CPU work on torch's threads as the model's is. The gain promised is the
difference of the two waits per batch.

The probe keeps what the trial needs (``LoaderInfo.worker_trial``) when a
DataLoader with ``num_workers=0`` over a map-style dataset starts its first
epoch; the runner measures it once the probes are gone."""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

#: Batches measured per setting (the dataset read again from its start if
#: it has fewer), after the warm-up ones: a worker's start and the batches
#: the workers prefetch meanwhile (2 each, DataLoader's prefetch_factor).
TRIAL_BATCHES = 16
WARMUP_BATCHES = 2
#: No setting is measured for longer than this.
TRIAL_SECONDS = 10.0


@dataclass
class WorkerTrial:
    """A DataLoader's dataset and batching, to be loaded again with workers."""

    dataset: Any
    batch_size: int
    collate_fn: Optional[Callable[..., Any]]
    drop_last: bool
    #: Set by ``measure``: the workers tried, and the mean wait per batch
    #: with none and with them (seconds); or why it could not run.
    workers: int = 0
    batches: int = 0
    wait_without: Optional[float] = None
    wait_with: Optional[float] = None
    error: Optional[str] = None
    compute: float = 0.0

    @property
    def gain(self) -> Optional[float]:
        """Seconds per step the workers saved in the trial (None: not measured)."""
        if self.wait_without is None or self.wait_with is None:
            return None
        return max(0.0, self.wait_without - self.wait_with)

    def describe(self) -> str:
        """What was measured, for the finding's evidence."""
        if self.gain is None:
            return f"not measured: {self.error or 'the trial did not run'}"
        return (
            f"measured here on {self.batches} batches of the same dataset, each followed by the "
            f"step's {self.compute * 1000:.2f} ms of compute run on torch's threads: "
            f"{self.wait_with * 1000:.2f} ms wait per batch with num_workers={self.workers} against "
            f"{self.wait_without * 1000:.2f} ms with none"
        )


def _compute(seconds: float, work: torch.Tensor) -> None:
    """Keeps torch's threads busy for ``seconds``, as the training step does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(work, work)


def _waits(trial: WorkerTrial, workers: int, work: torch.Tensor) -> list[float]:
    from torch.utils.data import DataLoader

    warmup = WARMUP_BATCHES + 2 * workers
    size = len(trial.dataset)
    indices = [i % size for i in range((warmup + TRIAL_BATCHES) * trial.batch_size)]
    loader = DataLoader(
        trial.dataset,
        batch_size=trial.batch_size,
        sampler=indices,
        num_workers=workers,
        collate_fn=trial.collate_fn,
        drop_last=trial.drop_last,
        timeout=TRIAL_SECONDS if workers else 0,  # A worker stuck on a sample ends the trial.
    )
    waits: list[float] = []
    deadline = time.perf_counter() + TRIAL_SECONDS
    iterator = iter(loader)
    try:
        for k in range(warmup + TRIAL_BATCHES):
            start = time.perf_counter()
            try:
                next(iterator)
            except StopIteration:
                break
            if k >= warmup:
                waits.append(time.perf_counter() - start)
            _compute(trial.compute, work)
            if time.perf_counter() > deadline:
                break
    finally:
        del iterator  # Ends its worker processes now.
    return waits


def measure(trial: WorkerTrial, workers: int, compute: float) -> None:
    """Loads the trial's batches with no workers, then with ``workers``;
    records each setting's mean wait per batch, or the error."""
    trial.workers, trial.compute = workers, compute
    if torch.cuda.is_initialized():
        trial.error = "CUDA is initialised in this process: forked workers could not use it"
        return
    work = torch.ones(128, 128)
    try:
        # The dataset's own warnings were shown while the script ran; the
        # trial reading it again must not repeat them (at the trial's lines).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            without, with_workers = _waits(trial, 0, work), _waits(trial, workers, work)
        measured = min(len(without), len(with_workers))
        if measured == 0:
            trial.error = "the dataset is empty"
            return
        trial.batches = measured
        # Means, not medians: workers finish batches in bursts (two workers,
        # two batches at once), so the waits alternate long and short.
        trial.wait_without = statistics.fmean(without)
        trial.wait_with = statistics.fmean(with_workers)
    except Exception as e:  # The advice must not break the report.
        trial.error = f"{type(e).__name__}: {e}"
