"""Geometric transforms and functional ops against torchvision v2 on uint8
tensors: exact for flips, crops and pads (every padding mode) and for
nearest-neighbour warps; warps with bilinear interpolation within a mean
|diff| of 2.0 on interior pixels (in practice under 1)."""

import numpy as np
import pytest
import torch
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as TF

from conftest import mean_abs_diff, png_bytes, to_tensor
from conveyor import transforms as T
from conveyor.transforms import compile_pipeline
from conveyor.transforms import functional as F

#: Pixels this far from the border are interior (border pixels blend with the fill).
MARGIN = 4


@pytest.fixture(scope="module")
def image(photo):
    """A non-square crop of the photo (non-square sizes exercise the centre conventions)."""
    return np.ascontiguousarray(photo[40:341, 60:460])


def hwc(tensor: torch.Tensor) -> np.ndarray:
    return tensor.permute(1, 2, 0).numpy()


def interior(a: np.ndarray) -> np.ndarray:
    return a[MARGIN:-MARGIN, MARGIN:-MARGIN]


def assert_exact(ours, theirs: torch.Tensor) -> None:
    np.testing.assert_array_equal(np.asarray(ours), hwc(theirs))


def assert_close_warp(ours, theirs: torch.Tensor) -> None:
    ours, theirs = np.asarray(ours), hwc(theirs)
    assert ours.shape == theirs.shape
    assert mean_abs_diff(interior(ours), interior(theirs)) <= 2.0
    assert mean_abs_diff(ours, theirs) <= 2.0


def test_flips_crops_and_pads_are_exact(image):
    t = to_tensor(image)
    assert_exact(F.horizontal_flip(image), TF.horizontal_flip(t))
    assert_exact(F.vertical_flip(image), TF.vertical_flip(t))
    assert_exact(F.crop(image, 10, 20, 100, 50), TF.crop(t, 10, 20, 100, 50))
    assert_exact(F.crop(image, -7, 390, 60, 30), TF.crop(t, -7, 390, 60, 30))  # Leaves the image: zeros.
    assert_exact(F.center_crop(image, [320, 111]), TF.center_crop(t, [320, 111]))
    assert_exact(F.center_crop(image, 200), TF.center_crop(t, 200))
    for mode in ("constant", "edge", "reflect", "symmetric"):
        for padding in (3, [4, 9], [1, 2, 3, 4]):
            assert_exact(F.pad(image, padding, padding_mode=mode), TF.pad(t, padding, padding_mode=mode))
    assert_exact(F.pad(image, [2, 5], fill=[10, 200, 30]), TF.pad(t, [2, 5], fill=[10, 200, 30]))
    assert_exact(F.pad(image, 5, fill=77), TF.pad(t, 5, fill=77))


def test_functional_ops_on_torch_tensors_keep_the_layout(image):
    t = to_tensor(image)
    out = F.rotate(t, 33.0, fill=[1, 2, 3])
    assert isinstance(out, torch.Tensor) and out.shape == t.shape
    assert torch.equal(out, TF.rotate(t, 33.0, fill=[1, 2, 3]))


@pytest.mark.parametrize("interpolation", [InterpolationMode.NEAREST, InterpolationMode.BILINEAR])
def test_warps_match(image, interpolation):
    t = to_tensor(image)
    exact = assert_exact if interpolation == InterpolationMode.NEAREST else assert_close_warp
    for angle in (0.0, 90.0, 180.0, 270.0, -90.0, 33.3, -12.0, 135.0):
        for expand in (False, True):
            exact(
                F.rotate(image, angle, interpolation, expand=expand, fill=[5, 6, 7]),
                TF.rotate(t, angle, interpolation, expand=expand, fill=[5, 6, 7]),
            )
    exact(
        F.rotate(image, 20.0, interpolation, center=[50, 80]),
        TF.rotate(t, 20.0, interpolation, center=[50, 80]),
    )
    exact(
        F.affine(image, 15.0, [12, -7], 1.3, [8.0, -4.0], interpolation, fill=100),
        TF.affine(t, 15.0, [12, -7], 1.3, [8.0, -4.0], interpolation, fill=100),
    )
    exact(
        F.affine(image, -30.0, [0, 0], 0.7, 10.0, interpolation, center=[100, 60]),
        TF.affine(t, -30.0, [0, 0], 0.7, 10.0, interpolation, center=[100, 60]),
    )
    h, w = image.shape[:2]
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    end = [[20, 11], [w - 35, 3], [w - 8, h - 40], [14, h - 20]]
    exact(
        F.perspective(image, start, end, interpolation, fill=[9, 8, 7]),
        TF.perspective(t, start, end, interpolation, fill=[9, 8, 7]),
    )


def test_resize_and_resized_crop_match(image):
    t = to_tensor(image)
    assert mean_abs_diff(np.asarray(F.resize(image, 150)), hwc(TF.resize(t, 150))) <= 1.0
    assert mean_abs_diff(np.asarray(F.resize(image, [90, 333])), hwc(TF.resize(t, [90, 333]))) <= 1.0
    ours = F.resized_crop(image, 20, 30, 200, 150, [64, 48])
    assert mean_abs_diff(np.asarray(ours), hwc(TF.resized_crop(t, 20, 30, 200, 150, [64, 48]))) <= 1.0


@pytest.mark.parametrize("mode", ["bicubic", "nearest", "nearest-exact"])
@pytest.mark.parametrize("antialias", [True, False])
def test_bicubic_and_nearest_resizes_are_exact(image, mode, antialias):
    t = to_tensor(image)
    im = InterpolationMode(mode)
    # Shrinks, enlargements, one side each way, one side unchanged, 2x.
    for size in (150, [90, 333], [500, 300], 37, [301, 123], [602, 800]):
        assert_exact(
            F.resize(image, size, interpolation=im, antialias=antialias),
            TF.resize(t, size, interpolation=im, antialias=antialias),
        )
    assert_exact(
        F.resized_crop(image, 20, 30, 200, 150, [64, 48], interpolation=im, antialias=antialias),
        TF.resized_crop(t, 20, 30, 200, 150, [64, 48], interpolation=im, antialias=antialias),
    )
    # In a pipeline: a resize of the decoded image, and a crop then a resize.
    assert_exact(
        run_chain(image, [T.Resize((120, 170), im, antialias=antialias)]),
        v2.Resize((120, 170), im, antialias=antialias)(t),
    )
    assert_exact(
        run_chain(image, [T.CenterCrop(250), T.Resize(96, im, antialias=antialias)], variable_size=True),
        v2.Compose([v2.CenterCrop(250), v2.Resize(96, im, antialias=antialias)])(t),
    )


def test_a_bicubic_resize_then_crop_is_exact(image):
    # One resample of the crop's box in the source, with the weights' fixed
    # point chosen over the whole resized axis, as torch's.
    for mode in ("bicubic", "nearest", "nearest-exact"):
        ours = run_chain(image, [T.Resize(256, mode), T.CenterCrop(224)])
        reference = v2.Compose([v2.Resize(256, InterpolationMode(mode)), v2.CenterCrop(224)])
        assert_exact(ours, reference(to_tensor(image)))


def run_chain(image, transforms, **kwargs):
    pipeline = compile_pipeline(transforms, dtype="uint8", layout="HWC", **kwargs)
    return np.asarray(pipeline.apply(png_bytes(image)))


def test_chains_with_fixed_parameters_match(image):
    t = to_tensor(image)
    # RandomCrop with padding whose crop is the whole padded image: fixed.
    for mode in ("constant", "edge", "reflect", "symmetric"):
        ours = run_chain(image, [T.RandomCrop((311, 410), padding=5, fill=3, padding_mode=mode)])
        assert_exact(ours, v2.RandomCrop((311, 410), padding=5, fill=3, padding_mode=mode)(t))
    assert_exact(
        run_chain(image, [T.Pad([3, 1, 4, 1], fill=[1, 2, 3]), T.CenterCrop(200)]),
        v2.Compose([v2.Pad([3, 1, 4, 1], fill=[1, 2, 3]), v2.CenterCrop(200)])(t),
    )
    # A pad with a fill, then a centre crop larger than the image (zeros around it).
    assert_exact(
        run_chain(image, [T.Pad(2, fill=50), T.CenterCrop((320, 420))]),
        v2.Compose([v2.Pad(2, fill=50), v2.CenterCrop((320, 420))])(t),
    )
    assert_exact(
        run_chain(image, [T.RandomVerticalFlip(p=1.0), T.CenterCrop((100, 101))]),
        v2.Compose([v2.RandomVerticalFlip(p=1.0), v2.CenterCrop((100, 101))])(t),
    )
    # Rotations and affine maps with a fixed draw, before and after crops and resizes.
    for interpolation in ("nearest", "bilinear"):
        ours = run_chain(
            image, [T.CenterCrop(280), T.RandomRotation((25, 25), interpolation), T.CenterCrop(200)]
        )
        theirs = v2.Compose(
            [v2.CenterCrop(280), v2.RandomRotation((25, 25), interpolation), v2.CenterCrop(200)]
        )(t)
        (assert_exact if interpolation == "nearest" else assert_close_warp)(ours, theirs)
    ours = run_chain(
        image,
        [
            T.Resize(256),
            T.RandomAffine((10, 10), scale=(1.2, 1.2), shear=(5, 5), interpolation="bilinear"),
            T.CenterCrop(224),
        ],
    )
    theirs = v2.Compose(
        [
            v2.Resize(256),
            v2.RandomAffine(
                (10, 10), scale=(1.2, 1.2), shear=(5, 5), interpolation=InterpolationMode.BILINEAR
            ),
            v2.CenterCrop(224),
        ]
    )(t)
    assert_close_warp(ours, theirs)
    ours = run_chain(image, [T.RandomRotation((90, 90), expand=True), T.Resize((128, 96))])
    theirs = v2.Compose([v2.RandomRotation((90, 90), expand=True), v2.Resize((128, 96))])(t)
    assert mean_abs_diff(ours, hwc(theirs)) <= 1.0


def test_random_perspective_with_p_zero_is_the_identity(image):
    ours = run_chain(image, [T.CenterCrop(128), T.RandomPerspective(0.9, p=0.0)])
    assert_exact(ours, v2.CenterCrop(128)(to_tensor(image)))
