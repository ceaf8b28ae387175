"""Colour ops (issue 10) against torchvision 0.29's transforms.v2.functional
on uint8 tensors, on a photograph: conveyor's functional API runs the same C++
kernels as the random transforms."""

import numpy as np
import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from conftest import mean_abs_diff, png_bytes, to_tensor
from conveyor import transforms as T
from conveyor.transforms import compile_pipeline
from conveyor.transforms import functional as F

# (op, args): every colour op with a few fixed parameters.
CASES = [
    ("adjust_brightness", (0.0,)),
    ("adjust_brightness", (0.61,)),
    ("adjust_brightness", (1.37,)),
    ("adjust_contrast", (0.0,)),
    ("adjust_contrast", (0.4,)),
    ("adjust_contrast", (1.8,)),
    ("adjust_saturation", (0.0,)),
    ("adjust_saturation", (0.3,)),
    ("adjust_saturation", (1.7,)),
    ("adjust_hue", (-0.5,)),
    ("adjust_hue", (-0.27,)),
    ("adjust_hue", (0.0,)),
    ("adjust_hue", (0.1,)),
    ("adjust_hue", (0.5,)),
    ("gaussian_blur", ([3, 3], [0.1, 0.1])),
    ("gaussian_blur", ([5, 9], [1.3, 2.1])),
    ("gaussian_blur", ([23, 23], None)),
    ("adjust_sharpness", (0.0,)),
    ("adjust_sharpness", (0.2,)),
    ("adjust_sharpness", (2.3,)),
    ("autocontrast", ()),
    ("equalize", ()),
]

# Integer ops: bit-exact.
EXACT = [
    ("rgb_to_grayscale", (1,)),
    ("rgb_to_grayscale", (3,)),
    ("invert", ()),
    ("posterize", (0,)),
    ("posterize", (3,)),
    ("posterize", (8,)),
    ("solarize", (0,)),
    ("solarize", (128.5,)),
    ("solarize", (200,)),
]


def theirs(op, image, args):
    return getattr(TF, op)(to_tensor(image), *args).permute(1, 2, 0).numpy()


@pytest.mark.parametrize(("op", "args"), CASES, ids=[f"{op}{args}" for op, args in CASES])
def test_colour_ops_match_torchvision_v2(photo, op, args):
    ours = getattr(F, op)(photo, *args)
    # Measured: brightness, contrast, saturation, hue, sharpness, autocontrast
    # and equalize are bit-exact; the blur differs in a few pixels by 1.
    assert mean_abs_diff(ours, theirs(op, photo, args)) <= 0.001


@pytest.mark.parametrize(("op", "args"), EXACT, ids=[f"{op}{args}" for op, args in EXACT])
def test_integer_colour_ops_are_exact(photo, op, args):
    np.testing.assert_array_equal(getattr(F, op)(photo, *args), theirs(op, photo, args))


@pytest.mark.parametrize(("op", "args"), CASES + EXACT, ids=[f"{op}{args}" for op, args in CASES + EXACT])
def test_one_channel_images_match_torchvision_v2(photo, op, args):
    gray = np.ascontiguousarray(photo[:, :, 1:2])
    assert mean_abs_diff(getattr(F, op)(gray, *args), theirs(op, gray, args)) <= 0.001
    # A 2-D array stays 2-D unless the op adds channels.
    flat = getattr(F, op)(gray[:, :, 0], *args)
    assert flat.shape == ((512, 512, 3) if args == (3,) and op == "rgb_to_grayscale" else (512, 512))


def test_torch_tensors_in_torch_tensors_out(photo):
    tensor = to_tensor(photo)
    for op, args in CASES + EXACT:
        ours = getattr(F, op)(tensor, *args)
        assert isinstance(ours, torch.Tensor) and ours.dtype == torch.uint8
        assert mean_abs_diff(ours.numpy(), getattr(TF, op)(tensor, *args).numpy()) <= 0.001


def test_saturated_and_gray_content(photo):
    # Extremes where the float32 details show: white is 254 in v2's grayscale,
    # autocontrast of a [50, 150] channel ends at 254, hue keeps grays.
    ramp = np.broadcast_to(np.arange(256, dtype=np.uint8)[None, :, None], (4, 256, 3)).copy()
    for op, args in [
        ("rgb_to_grayscale", (3,)),
        ("adjust_hue", (0.3,)),
        ("autocontrast", ()),
        ("equalize", ()),
    ]:
        for image in (ramp, ramp // 2 + 50, photo // 3 + 100):
            np.testing.assert_array_equal(getattr(F, op)(image, *args), theirs(op, image, args))


def test_a_chain_of_colour_transforms_matches_torchvision_v2(photo):
    # Fixed parameters (p = 1, single-valued ranges) so both sides draw the same.
    ours_chain = [
        T.Resize(200),
        T.CenterCrop(160),
        T.ColorJitter(brightness=(1.2, 1.2)),
        T.ColorJitter(contrast=(0.7, 0.7)),
        T.ColorJitter(saturation=(1.4, 1.4)),
        T.ColorJitter(hue=(0.08, 0.08)),
        T.GaussianBlur(5, sigma=1.2),
        T.RandomAdjustSharpness(1.8, p=1.0),
        T.RandomAutocontrast(p=1.0),
        T.RandomEqualize(p=1.0),
        T.RandomPosterize(5, p=1.0),
        T.RandomSolarize(200, p=1.0),
        T.RandomInvert(p=1.0),
        T.Grayscale(3),
    ]
    theirs_chain = v2.Compose(
        [
            v2.Resize(200, antialias=True),
            v2.CenterCrop(160),
            v2.ColorJitter(brightness=(1.2, 1.2)),
            v2.ColorJitter(contrast=(0.7, 0.7)),
            v2.ColorJitter(saturation=(1.4, 1.4)),
            v2.ColorJitter(hue=(0.08, 0.08)),
            v2.GaussianBlur(5, sigma=1.2),
            v2.RandomAdjustSharpness(1.8, p=1.0),
            v2.RandomAutocontrast(p=1.0),
            v2.RandomEqualize(p=1.0),
            v2.RandomPosterize(5, p=1.0),
            v2.RandomSolarize(200, p=1.0),
            v2.RandomInvert(p=1.0),
            v2.Grayscale(3),
        ]
    )
    ours = np.asarray(compile_pipeline(ours_chain, dtype="uint8", layout="HWC").apply(png_bytes(photo)))
    theirs = theirs_chain(to_tensor(photo)).permute(1, 2, 0).numpy()
    # The resize differs slightly (issue 3's tolerance: 0.49 for Resize(200) +
    # CenterCrop(160) alone here); equalize and posterize turn some of its
    # +-1 differences into larger steps (0.93 with warpAffine's sampling,
    # 1.04 with the exact bilinear sampling of issue 14, which is closer to v2
    # on the resize alone: 0.490 vs 0.495).
    assert mean_abs_diff(ours, theirs) <= 1.1


def test_colour_steps_after_the_resize_are_exact_on_the_resized_image(photo):
    # From the same resized pixels, the colour chain is bit-exact (but the blur).
    base = np.asarray(
        compile_pipeline([T.Resize(200), T.CenterCrop(160)], dtype="uint8", layout="HWC").apply(
            png_bytes(photo)
        )
    )
    chain = [T.ColorJitter(brightness=(1.2, 1.2)), T.ColorJitter(hue=(-0.3, -0.3)), T.RandomEqualize(p=1.0)]
    ours = np.asarray(
        compile_pipeline([T.Resize(200), T.CenterCrop(160), *chain], dtype="uint8", layout="HWC").apply(
            png_bytes(photo)
        )
    )
    theirs = v2.Compose(
        [v2.ColorJitter(brightness=(1.2, 1.2)), v2.ColorJitter(hue=(-0.3, -0.3)), v2.RandomEqualize(p=1.0)]
    )(to_tensor(base))
    np.testing.assert_array_equal(ours, theirs.permute(1, 2, 0).numpy())


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.RandomApply([m.RandomInvert(p=1.0), m.RandomPosterize(3, p=1.0)], p=1.0),
        lambda m: m.RandomChoice([m.RandomInvert(p=1.0)]),
        lambda m: m.RandomOrder([m.RandomEqualize(p=1.0)]),
    ],
    ids=["RandomApply", "RandomChoice", "RandomOrder"],
)
def test_random_apply_choice_and_order_convert_and_match_torchvision_where_the_draw_is_certain(photo, make):
    from torchvision import transforms as v1

    from conveyor.transforms import from_torchvision

    for module in (v1, v2):
        converted = from_torchvision(module.Compose([module.CenterCrop(160), make(module)]))
        pipeline = compile_pipeline(list(converted), dtype="uint8", layout="HWC")
        ours = np.asarray(pipeline.apply(png_bytes(photo)))
        theirs = v2.Compose([v2.CenterCrop(160), make(v2)])(to_tensor(photo)).permute(1, 2, 0).numpy()
        np.testing.assert_array_equal(ours, theirs)
