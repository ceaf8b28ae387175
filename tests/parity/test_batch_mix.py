"""MixUp and CutMix against torchvision.transforms.v2 0.29: with the lambda
(and CutMix's box centre) the engine drew for a batch forced into
torchvision's transform, the mixed images and labels are exactly equal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from conftest import png_bytes
from conveyor import Loader, _conveyor
from conveyor import transforms as T
from conveyor.sources import PythonSource

CLASSES = 4


class Patches:
    """12 patches of the photo, as PNG bytes with labels 0..3."""

    def __init__(self, photo: np.ndarray) -> None:
        self.items = [
            (png_bytes(photo[40 * i : 40 * i + 60, 30 * i : 30 * i + 70]), i % CLASSES) for i in range(12)
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i]


def batches(photo, mix, dtype, layout="CHW"):
    loader = Loader(
        PythonSource(Patches(photo)),
        [T.Resize((24, 28))],
        batch_size=5,
        shuffle=True,
        seed=11,
        dtype=dtype,
        layout=layout,
        batch_transforms=None if mix is None else [mix],
    )
    return [(images.clone(), labels.clone()) for images, labels in loader]


def forced(transform, lam, monkeypatch, center=None):
    """`transform` drawing exactly `lam` (and, for CutMix, the box centre)."""
    transform._dist = type(
        "Forced", (), {"sample": staticmethod(lambda shape: torch.tensor(lam, dtype=torch.float64))}
    )
    if center is not None:
        values = iter([torch.tensor([center[0]]), torch.tensor([center[1]])])
        monkeypatch.setattr(torch, "randint", lambda *args, **kwargs: next(values))
    return transform


@pytest.mark.parametrize(
    ("kind", "dtype"),
    [("MixUp", "float32"), ("MixUp", "float16"), ("CutMix", "float32"), ("CutMix", "uint8")],
)
def test_batches_equal_torchvision_with_the_same_draws(photo, monkeypatch, kind, dtype):
    mix = (
        T.MixUp(alpha=0.6, num_classes=CLASSES)
        if kind == "MixUp"
        else T.CutMix(alpha=1.3, num_classes=CLASSES)
    )
    plain = batches(photo, None, dtype)
    mixed = batches(photo, mix, dtype)
    spec = mix._spec(None, False)
    assert len(plain) == len(mixed) == 3
    for b, ((images, labels), (ours, our_labels)) in enumerate(zip(plain, mixed)):
        drawn, lam, cx, cy, x1, y1, x2, y2, label_lam = _conveyor.sample_batch_mix(spec, 24, 28, 11, 0, b)
        assert drawn == kind
        with monkeypatch.context() as m:
            if kind == "MixUp":
                theirs = forced(v2.MixUp(alpha=0.6, num_classes=CLASSES), lam, m)
            else:
                theirs = forced(v2.CutMix(alpha=1.3, num_classes=CLASSES), lam, m, center=(cx, cy))
            expected_images, expected_labels = theirs(images, labels)
        assert expected_images.dtype == ours.dtype
        assert torch.equal(ours, expected_images)
        assert torch.equal(our_labels, expected_labels)
        if kind == "CutMix":  # The box's area is the label weight, as torchvision computes it.
            assert label_lam == 1.0 - (x2 - x1) * (y2 - y1) / (24 * 28)


def test_mixup_on_uint8_fails_in_torchvision_too():
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Byte"):
        v2.MixUp(num_classes=2)(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), torch.tensor([0, 1]))
