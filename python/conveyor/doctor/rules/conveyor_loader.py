"""conveyor's own advice: the exact ``conveyor.Loader`` call that replaces a
DataLoader over a torchvision ``ImageFolder`` (or another ``DatasetFolder``)
whose transform is a torchvision pipeline, with the pipeline converted by
``from_torchvision``; or, when it does not convert, which transform stops it.

The probe calls :func:`replacement` when a DataLoader starts an epoch and keeps
the text in ``LoaderInfo.conveyor``; the data-loading rules (``input-stall``,
``dataloader-no-workers``) add it to their fix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

from conveyor.errors import ConfigError
from conveyor.transforms.base import Transform
from conveyor.transforms.torchvision import from_torchvision, is_torchvision

_DATASETS = "torchvision.datasets"
#: Samples of the script's files the replacement is measured on.
TRIAL_SAMPLES = 64


@dataclass
class Trial:
    """The replacement run on the first samples of the same files, after the
    script (``measure``): its images/s, or why it could not run."""

    paths: list[str]
    labels: list[int]
    steps: list[Transform]
    batch_size: int
    dtype: Optional[str]
    images_per_second: Optional[float] = None
    error: Optional[str] = None

    def describe(self) -> str:
        """The comment line the fix shows."""
        if self.error is not None:
            return f"# not measured here: the replacement raised {self.error}"
        if self.images_per_second is None:
            return "# not measured here"
        return (
            f"# measured here: conveyor.Loader {self.images_per_second:.0f} images/s on the first "
            f"{len(self.paths)} of these files (one pass after a warm-up pass)"
        )


def measure(trial: Trial) -> None:
    """Runs the replacement over the trial's files twice (the first pass warms
    up threads and caches) and records the second pass's images/s."""
    import conveyor

    try:
        source = conveyor.sources.FileList(trial.paths, trial.labels)
        batch = min(trial.batch_size, len(trial.paths))
        with conveyor.Loader(source, trial.steps, batch_size=batch, seed=0, dtype=trial.dtype) as loader:
            for _ in loader:
                pass
            start = time.perf_counter()
            images = sum(len(images) for images, _ in loader)
            trial.images_per_second = images / max(time.perf_counter() - start, 1e-9)
    except Exception as e:  # The advice must not break the report.
        trial.error = f"{type(e).__name__}: {e}"


def _pipeline(transform: object) -> bool:
    if is_torchvision(transform):
        return True
    return isinstance(transform, (list, tuple)) and any(is_torchvision(t) for t in transform)


def replacement(
    dataset: Any, *, batch_size: Optional[int], shuffle: bool, drop_last: bool, sampler: Optional[str] = None
) -> tuple[Optional[str], Optional[Trial]]:
    """The conveyor.Loader call (code) that replaces a DataLoader over
    ``dataset``, or the reason its transforms do not convert, and the trial
    to measure it on; (None, None) when the dataset is not a torchvision folder
    dataset with a torchvision pipeline. ``sampler`` names the class of the
    DataLoader's own sampler, if it has one: the code then passes it on as
    ``sampler`` (the trial reads its files in order)."""
    module = type(dataset).__module__ or ""
    if not (module == _DATASETS or module.startswith(_DATASETS + ".")):
        return None, None
    transform, samples = getattr(dataset, "transform", None), getattr(dataset, "samples", None)
    if not _pipeline(transform) or not isinstance(samples, list):
        return None, None
    try:
        steps = from_torchvision(transform)
    except ConfigError as e:
        return f"# conveyor.Loader cannot take this pipeline as it is: {e}", None
    first = samples[:TRIAL_SAMPLES]
    trial = Trial(
        [str(path) for path, _ in first],
        [int(label) for _, label in first],
        list(steps),
        batch_size or 1,
        steps.dtype,
    )
    root = getattr(dataset, "root", None)
    if type(dataset).__name__ == "ImageFolder" and isinstance(root, str):
        source = f"conveyor.sources.ImageFolder({root!r})"
    else:  # Another DatasetFolder: its own file list, as it found it.
        source = (
            "conveyor.sources.FileList([path for path, _ in dataset.samples], "
            "[label for _, label in dataset.samples])"
        )
    options = [f"batch_size={batch_size}"] if batch_size is not None else []
    options += ["shuffle=True"] if shuffle else []
    options += ["sampler=sampler"] if sampler else []
    options += ["drop_last=True"] if drop_last else []
    options += [f'dtype="{steps.dtype}"'] if steps.dtype not in (None, "float32") else []
    sampler_note = f"# (`sampler`: your DataLoader's {sampler}, drawn once per epoch as DataLoader does)"
    lines = [
        "# or conveyor.Loader on the same files, the transforms converted from torchvision:",
        *([sampler_note] if sampler else []),
        "import conveyor",
        "from conveyor import transforms as T",
        "loader = conveyor.Loader(",
        f"    {source},",
        "    [",
        *(f"        T.{step!r}," for step in steps),
        "    ],",
        *(f"    {option}," for option in options),
        ")",
    ]
    return "\n".join(lines), trial
