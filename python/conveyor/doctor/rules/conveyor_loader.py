"""conveyor's own advice: the exact ``conveyor.Loader`` call that replaces a
DataLoader over a torchvision ``ImageFolder`` (or another ``DatasetFolder``)
whose transform is a torchvision pipeline, with the pipeline converted by
``from_torchvision``; or, when it does not convert, which transform stops it.

The probe calls :func:`replacement` when a DataLoader starts an epoch and keeps
the text in ``LoaderInfo.conveyor``; the data-loading rules (``input-stall``,
``dataloader-no-workers``) add it to their fix.
"""

from __future__ import annotations

from typing import Any, Optional

from conveyor.errors import ConfigError
from conveyor.transforms.torchvision import from_torchvision, is_torchvision

_DATASETS = "torchvision.datasets"


def _pipeline(transform: object) -> bool:
    if is_torchvision(transform):
        return True
    return isinstance(transform, (list, tuple)) and any(is_torchvision(t) for t in transform)


def replacement(dataset: Any, *, batch_size: Optional[int], shuffle: bool, drop_last: bool) -> Optional[str]:
    """The conveyor.Loader call (code) that replaces a DataLoader over
    ``dataset``, or the reason its transforms do not convert; None when the
    dataset is not a torchvision folder dataset with a torchvision pipeline."""
    module = type(dataset).__module__ or ""
    if not (module == _DATASETS or module.startswith(_DATASETS + ".")):
        return None
    transform, samples = getattr(dataset, "transform", None), getattr(dataset, "samples", None)
    if not _pipeline(transform) or not isinstance(samples, list):
        return None
    try:
        steps = from_torchvision(transform)
    except ConfigError as e:
        return f"# conveyor.Loader cannot take this pipeline as it is: {e}"
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
    options += ["drop_last=True"] if drop_last else []
    options += [f'dtype="{steps.dtype}"'] if steps.dtype not in (None, "float32") else []
    lines = [
        "# or conveyor.Loader on the same files, the transforms converted from torchvision:",
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
    return "\n".join(lines)
