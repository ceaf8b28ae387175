"""RandomErasing (issue 10): on the written output after Normalize, identical
for any thread count, resumed exactly; the functional erase; argument errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import conveyor
from conftest import assert_resumes_exactly, png_bytes, textured
from conveyor import transforms as T
from conveyor.errors import ConfigError
from conveyor.sources import ImageFolder
from conveyor.transforms import compile_pipeline
from conveyor.transforms import functional as F

CHAIN = [
    T.RandomResizedCrop(24),
    T.RandomHorizontalFlip(),
    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    T.RandomErasing(p=0.7, value="random"),
    T.RandomErasing(p=0.7, value=[-1.0, 0.5, 2.0]),
]


def make_loader(root: Path, **kwargs) -> conveyor.Loader:
    options = dict(batch_size=5, shuffle=True, seed=3)
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root), CHAIN, **options)


@pytest.mark.parametrize("threads", [2, 4])
def test_same_batches_for_any_thread_count(texture_folder, threads):
    reference = [x.clone() for x, _ in make_loader(texture_folder, threads=1, prefetch=1)]
    got = [x for x, _ in make_loader(texture_folder, threads=threads, prefetch=3)]
    assert len(got) == len(reference) == 5
    for a, b in zip(reference, got):
        assert torch.equal(a, b)
    # Something was erased with the per-channel value.
    assert any(bool((x[:, 0] == -1.0).any()) for x in reference)


def test_resume_mid_epoch_is_exact(texture_folder):
    assert_resumes_exactly(lambda **kw: make_loader(texture_folder, **kw), epoch=1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_erased_values_exact_per_dtype_and_layout(dtype, layout):
    image = png_bytes(textured(1, 30, 40))
    base = [T.CenterCrop(20)]
    if dtype != "uint8":
        base.append(T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]))
    # area 0.16 * 400 = 64, ratio 1: an 8 x 8 box, always.
    erasing = T.RandomErasing(p=1.0, scale=(0.16, 0.16), ratio=(1.0, 1.0), value=[-1.5, 0.1, 300.7])
    plain = np.asarray(compile_pipeline(base, dtype=dtype, layout=layout).apply(image, seed=4, index=2))
    ours = np.asarray(
        compile_pipeline([*base, erasing], dtype=dtype, layout=layout).apply(image, seed=4, index=2)
    )
    chw = lambda a: a if layout == "CHW" else np.moveaxis(a, -1, 0)  # noqa: E731
    changed = np.argwhere((chw(plain) != chw(ours)).any(axis=0))
    (top, left), (bottom, right) = changed.min(axis=0), changed.max(axis=0)
    assert (bottom - top + 1, right - left + 1) == (8, 8)
    expected = chw(plain).copy()
    values = np.array([-1.5, 0.1, 300.7], dtype=np.float32)
    if dtype == "uint8":  # torch's conversion: truncated through int64, wrapping.
        fill = values.astype(np.int64).astype(np.uint8)
    else:
        fill = values.astype(dtype)
    expected[:, top : top + 8, left : left + 8] = fill[:, None, None]
    np.testing.assert_array_equal(chw(ours), expected)


def test_functional_erase_on_arrays_and_tensors():
    image = textured(2, 5, 6)
    out = F.erase(image, 1, 2, 3, 10, [1, 2, 3])
    expected = image.copy()
    expected[1:4, 2:] = [1, 2, 3]
    np.testing.assert_array_equal(out, expected)
    tensor = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    got = F.erase(tensor, 0, 0, 2, 2, torch.tensor([7.9])[:, None, None])
    want = tensor.clone()
    want[:, 0:2, 0:2] = 7
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: T.RandomErasing(p=1.5), "RandomErasing: p must be in [0, 1], got 1.5"),
        (
            lambda: T.RandomErasing(scale=(0.5, 0.1)),
            "scale must be (min, max) with min <= max",
        ),
        (lambda: T.RandomErasing(scale=(0.1, 2)), "RandomErasing: scale must be within [0, 1], got (0.1, 2)"),
        (lambda: T.RandomErasing(ratio=(0, 1)), "RandomErasing: ratio must be positive, got (0, 1)"),
        (lambda: T.RandomErasing(ratio=3), "RandomErasing: ratio must be a pair of numbers (lo, hi), got 3"),
        (
            lambda: T.RandomErasing(value="noise"),
            "value must be numbers or 'random', got 'noise'",
        ),
        (lambda: T.RandomErasing(value=[]), "RandomErasing: value must be a number or a sequence of numbers"),
        (lambda: T.RandomErasing(value=float("nan")), "RandomErasing: value must be finite numbers"),
        (lambda: T.RandomErasing(inplace=1), "RandomErasing: inplace must be a bool, got 1"),
        (
            lambda: compile_pipeline([T.CenterCrop(4), T.RandomErasing(value=[1, 2])]),
            "value needs 1 or 3 numbers",
        ),
        (
            lambda: compile_pipeline([T.CenterCrop(4), T.RandomErasing(), T.RandomHorizontalFlip()]),
            "horizontal_flip comes after random_erasing, which works on the written output",
        ),
        (
            lambda: F.erase(np.zeros((2, 2, 3), np.uint8), -1, 0, 1, 1, 0),
            "i must be an int >= 0, got -1",
        ),
        (lambda: F.erase(np.zeros((2, 2, 3), np.uint8), 0, 0, 1, 1, [1, 2]), "erase: v needs 1 or 3 numbers"),
    ],
)
def test_bad_arguments_are_config_errors_naming_them(make, message):
    with pytest.raises(ConfigError) as info:
        make()
    assert message in str(info.value)
