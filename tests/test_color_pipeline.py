"""Colour transforms inside the engine's image pipeline and the Loader
(issue 10): the pipeline runs the same kernels as the functional API, output
is identical for any thread count and a resumed epoch matches an
uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import conveyor
from conftest import assert_resumes_exactly, png_bytes, textured
from conveyor import transforms as T
from conveyor.sources import ImageFolder
from conveyor.transforms import functional as F

# Every colour transform, randomly applied, between a random crop and Normalize.
AUGMENTED = [
    T.RandomResizedCrop(24),
    T.ColorJitter(0.4, 0.4, 0.4, 0.1),
    T.RandomGrayscale(0.3),
    T.GaussianBlur(3),
    T.RandomInvert(0.3),
    T.RandomPosterize(4, 0.3),
    T.RandomSolarize(160, 0.3),
    T.RandomAdjustSharpness(2.0, 0.5),
    T.RandomAutocontrast(0.3),
    T.RandomEqualize(0.3),
    T.RandomHorizontalFlip(),
    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
]


def make_loader(root: Path, **kwargs) -> conveyor.Loader:
    options = dict(batch_size=5, shuffle=True, seed=11)
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root), AUGMENTED, **options)


@pytest.mark.parametrize("threads", [2, 4])
def test_same_batches_for_any_thread_count(texture_folder, threads):
    reference = [(x.clone(), y.clone()) for x, y in make_loader(texture_folder, threads=1, prefetch=1)]
    got = list(make_loader(texture_folder, threads=threads, io_threads=threads * 2, prefetch=3))
    assert len(got) == len(reference) == 5
    for (a, la), (b, lb) in zip(reference, got):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_resume_mid_epoch_is_exact(texture_folder):
    assert_resumes_exactly(lambda **kw: make_loader(texture_folder, **kw), epoch=2)


def test_epochs_and_samples_draw_different_parameters(texture_folder):
    first = [x.clone() for x, _ in make_loader(texture_folder, shuffle=False, threads=2)]
    loader = make_loader(texture_folder, shuffle=False, threads=2)
    loader.set_epoch(1)
    second = [x for x, _ in loader]
    assert not any(torch.equal(a, b) for a, b in zip(first, second))


IMAGE = textured(3, 50, 60)
CROP = [T.CenterCrop(40)]

# (transform with p = 1 or fixed parameters, the functional op it must equal)
FIXED = [
    (T.Grayscale(3), lambda x: F.rgb_to_grayscale(x, 3)),
    (T.RandomGrayscale(1.0), lambda x: F.rgb_to_grayscale(x, 3)),
    (T.GaussianBlur(5, sigma=1.5), lambda x: F.gaussian_blur(x, 5, 1.5)),
    (T.GaussianBlur((3, 7), sigma=0.8), lambda x: F.gaussian_blur(x, (3, 7), 0.8)),
    (T.RandomInvert(1.0), F.invert),
    (T.RandomPosterize(3, 1.0), lambda x: F.posterize(x, 3)),
    (T.RandomSolarize(100, 1.0), lambda x: F.solarize(x, 100)),
    (T.RandomAdjustSharpness(2.5, 1.0), lambda x: F.adjust_sharpness(x, 2.5)),
    (T.RandomAutocontrast(1.0), F.autocontrast),
    (T.RandomEqualize(1.0), F.equalize),
    (T.ColorJitter(brightness=(1.3, 1.3)), lambda x: F.adjust_brightness(x, 1.3)),
    (T.ColorJitter(contrast=(0.6, 0.6)), lambda x: F.adjust_contrast(x, 0.6)),
    (T.ColorJitter(saturation=(1.8, 1.8)), lambda x: F.adjust_saturation(x, 1.8)),
    (T.ColorJitter(hue=(0.2, 0.2)), lambda x: F.adjust_hue(x, 0.2)),
]


@pytest.mark.parametrize(("transform", "op"), FIXED, ids=[repr(t) for t, _ in FIXED])
def test_pipeline_runs_the_functional_kernels(transform, op):
    crop = np.asarray(T.compile_pipeline(CROP, dtype="uint8", layout="HWC").apply(png_bytes(IMAGE)))
    pipeline = T.compile_pipeline([*CROP, transform], dtype="uint8", layout="HWC")
    for index in range(3):
        np.testing.assert_array_equal(np.asarray(pipeline.apply(png_bytes(IMAGE), index=index)), op(crop))


def test_probability_zero_leaves_the_image_and_resizes_after_colour_ops():
    plain = np.asarray(T.compile_pipeline(CROP, dtype="uint8", layout="HWC").apply(png_bytes(IMAGE)))
    never = T.compile_pipeline(
        [*CROP, T.RandomInvert(0.0), T.RandomEqualize(0.0)], dtype="uint8", layout="HWC"
    )
    np.testing.assert_array_equal(np.asarray(never.apply(png_bytes(IMAGE))), plain)
    # A resize after a colour op resamples the transformed image.
    after = T.compile_pipeline([*CROP, T.RandomInvert(1.0), T.Resize((20, 20))], dtype="uint8", layout="HWC")
    out = np.asarray(after.apply(png_bytes(IMAGE)))
    assert out.shape == (20, 20, 3)
    before = T.compile_pipeline([*CROP, T.Resize((20, 20))], dtype="uint8", layout="HWC")
    # (Inverting and resampling commute up to the rounding of the resample.)
    diff = np.abs(out.astype(int) - (255 - np.asarray(before.apply(png_bytes(IMAGE))).astype(int)))
    assert diff.max() <= 1


def test_grayscale_one_channel_pipeline():
    # channels=1 decodes to one channel; Grayscale(1) leaves it (torchvision on a 1-channel image).
    plain = T.compile_pipeline(CROP, dtype="uint8", layout="HWC", channels=1)
    gray = T.compile_pipeline([*CROP, T.Grayscale()], dtype="uint8", layout="HWC", channels=1)
    np.testing.assert_array_equal(
        np.asarray(gray.apply(png_bytes(IMAGE))), np.asarray(plain.apply(png_bytes(IMAGE)))
    )
    jitter = T.compile_pipeline([*CROP, T.ColorJitter(0.5, 0.5, 0.5, 0.2)], dtype="uint8", channels=1)
    assert np.asarray(jitter.apply(png_bytes(IMAGE))).shape == (1, 40, 40)
