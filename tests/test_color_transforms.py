"""The colour transforms and functional colour ops (issue 10): arguments,
defaults and errors as torchvision's, with ConfigErrors naming the argument.
Parity with torchvision itself is in tests/parity/test_color_parity.py."""

import re

import numpy as np
import pytest

import conveyor
from conveyor import transforms as T
from conveyor.transforms import functional as F


def test_defaults_are_torchvisions():
    assert repr(T.ColorJitter()) == "ColorJitter(brightness=None, contrast=None, saturation=None, hue=None)"
    assert repr(T.ColorJitter(0.4, (0.5, 1.5), 0, 0.1)) == (
        "ColorJitter(brightness=(0.6, 1.4), contrast=(0.5, 1.5), saturation=None, hue=(-0.1, 0.1))"
    )
    # A single number's lower end is clipped at 0 (not for hue).
    assert T.ColorJitter(brightness=2).brightness == (0.0, 3.0)
    assert T.ColorJitter(contrast=(1, 1)).contrast is None
    assert repr(T.Grayscale()) == "Grayscale(num_output_channels=1)"
    assert repr(T.RandomGrayscale()) == "RandomGrayscale(p=0.1)"
    assert repr(T.GaussianBlur(3)) == "GaussianBlur(kernel_size=(3, 3), sigma=(0.1, 2.0))"
    assert repr(T.GaussianBlur((3, 5), 1.5)) == "GaussianBlur(kernel_size=(3, 5), sigma=(1.5, 1.5))"
    assert repr(T.RandomInvert()) == "RandomInvert(p=0.5)"
    assert repr(T.RandomPosterize(4)) == "RandomPosterize(bits=4, p=0.5)"
    assert repr(T.RandomSolarize(128)) == "RandomSolarize(threshold=128.0, p=0.5)"
    assert repr(T.RandomAdjustSharpness(2)) == "RandomAdjustSharpness(sharpness_factor=2.0, p=0.5)"
    assert repr(T.RandomAutocontrast()) == "RandomAutocontrast(p=0.5)"
    assert repr(T.RandomEqualize()) == "RandomEqualize(p=0.5)"


BAD_TRANSFORMS = [
    (
        lambda: T.ColorJitter(brightness=-0.1),
        "ColorJitter: brightness must be non-negative when a single number",
    ),
    (
        lambda: T.ColorJitter(contrast=(1.5, 0.5)),
        "ColorJitter: contrast must be increasing (min, max) within [0, inf], got (1.5, 0.5)",
    ),
    (
        lambda: T.ColorJitter(saturation=(-1, 1)),
        "ColorJitter: saturation must be increasing (min, max) within [0, inf], got (-1, 1)",
    ),
    (
        lambda: T.ColorJitter(hue=0.6),
        "ColorJitter: hue must be increasing (min, max) within [-0.5, 0.5], got (-0.6, 0.6)",
    ),
    (
        lambda: T.ColorJitter(hue=(-0.6, 0.1)),
        "ColorJitter: hue must be increasing (min, max) within [-0.5, 0.5], got (-0.6, 0.1)",
    ),
    (lambda: T.ColorJitter(hue=(0.1, 0.2, 0.3)), "ColorJitter: hue must be a single number or a pair"),
    (lambda: T.ColorJitter(brightness="x"), "ColorJitter: brightness must be a single number or a pair"),
    (lambda: T.Grayscale(2), "Grayscale: num_output_channels must be 1 or 3, got 2"),
    (lambda: T.RandomGrayscale(1.5), "RandomGrayscale: p must be in [0, 1], got 1.5"),
    (lambda: T.GaussianBlur(4), "GaussianBlur: kernel_size must be odd and positive, got 4"),
    (lambda: T.GaussianBlur(0), "GaussianBlur: kernel_size must be odd and positive, got 0"),
    (lambda: T.GaussianBlur((3, -3)), "GaussianBlur: kernel_size must be odd and positive, got -3"),
    (lambda: T.GaussianBlur(3.0), "GaussianBlur: kernel_size must be an int or a pair of ints, got 3.0"),
    (lambda: T.GaussianBlur(3, -1.0), "GaussianBlur: sigma must be positive, got -1"),
    (
        lambda: T.GaussianBlur(3, (2.0, 1.0)),
        "GaussianBlur: sigma must be (min, max) with min <= max, got (2, 1)",
    ),
    (lambda: T.GaussianBlur(3, (1.0, 2.0, 3.0)), "GaussianBlur: sigma must be a number or a pair of numbers"),
    (lambda: T.RandomInvert(-0.1), "RandomInvert: p must be in [0, 1], got -0.1"),
    (lambda: T.RandomInvert("0.5"), "RandomInvert: p must be a number, got '0.5'"),
    (lambda: T.RandomPosterize(9), "RandomPosterize: bits must be an integer in [0, 8], got 9"),
    (lambda: T.RandomPosterize(-1), "RandomPosterize: bits must be an integer in [0, 8], got -1"),
    (lambda: T.RandomPosterize(4.0), "RandomPosterize: bits must be an int in [0, 8], got 4.0"),
    (lambda: T.RandomPosterize(4, p=2), "RandomPosterize: p must be in [0, 1], got 2"),
    (
        lambda: T.RandomSolarize(256),
        "RandomSolarize: threshold must be at most 255 (the uint8 maximum), got 256",
    ),
    (lambda: T.RandomSolarize(float("nan")), "RandomSolarize: threshold must be finite, got nan"),
    (
        lambda: T.RandomAdjustSharpness(-1),
        "RandomAdjustSharpness: sharpness_factor must be non-negative, got -1",
    ),
    (lambda: T.RandomAdjustSharpness(2, p=1.01), "RandomAdjustSharpness: p must be in [0, 1], got 1.01"),
    (lambda: T.RandomAutocontrast(p=None), "RandomAutocontrast: p must be a number, got None"),
    (lambda: T.RandomEqualize(p=True), "RandomEqualize: p must be a number, got True"),
]


@pytest.mark.parametrize(("make", "message"), BAD_TRANSFORMS, ids=[m for _, m in BAD_TRANSFORMS])
def test_bad_transform_arguments_are_config_errors(make, message):
    with pytest.raises(conveyor.ConfigError, match="^" + re.escape(message)):
        make()


def test_grayscale_must_give_the_loaders_channel_count():
    # The batch's channel count is fixed: Grayscale(1) needs channels=1.
    with pytest.raises(conveyor.ConfigError) as info:
        T.compile_pipeline([T.CenterCrop(8), T.Grayscale()])
    assert str(info.value) == (
        "transform 1 Grayscale: num_output_channels=1 gives 1-channel images but the pipeline outputs "
        "3 channel(s); pass channels=1 to the loader (or num_output_channels=3)"
    )
    with pytest.raises(conveyor.ConfigError, match="pass channels=3 to the loader"):
        T.compile_pipeline([T.CenterCrop(8), T.Grayscale(3)], channels=1)
    T.compile_pipeline([T.CenterCrop(8), T.Grayscale(1)], channels=1)
    T.compile_pipeline([T.CenterCrop(8), T.Grayscale(3)], channels=3)


IMAGE = np.random.default_rng(0).integers(0, 256, (6, 7, 3), dtype=np.uint8)

BAD_CALLS = [
    (
        lambda: F.adjust_brightness(IMAGE, -1),
        "adjust_brightness: brightness_factor must be non-negative, got -1",
    ),
    (
        lambda: F.adjust_contrast(IMAGE, -0.5),
        "adjust_contrast: contrast_factor must be non-negative, got -0.5",
    ),
    (
        lambda: F.adjust_saturation(IMAGE, None),
        "adjust_saturation: saturation_factor must be a number, got None",
    ),
    (lambda: F.adjust_hue(IMAGE, 0.51), "adjust_hue: hue_factor must be in [-0.5, 0.5], got 0.51"),
    (lambda: F.adjust_hue(IMAGE, -0.6), "adjust_hue: hue_factor must be in [-0.5, 0.5], got -0.6"),
    (lambda: F.rgb_to_grayscale(IMAGE, 2), "rgb_to_grayscale: num_output_channels must be 1 or 3, got 2"),
    (lambda: F.gaussian_blur(IMAGE, 2), "gaussian_blur: kernel_size must be odd and positive, got 2"),
    (
        lambda: F.gaussian_blur(IMAGE, [3, 3, 3]),
        "gaussian_blur: kernel_size must be an int or a pair of ints",
    ),
    (lambda: F.gaussian_blur(IMAGE, 3, 0.0), "gaussian_blur: sigma must be positive, got 0"),
    (
        lambda: F.gaussian_blur(IMAGE, 3, [1.0, -2.0]),
        "gaussian_blur: sigma must be positive, got -2",
    ),
    (lambda: F.posterize(IMAGE, 9), "posterize: bits must be an integer in [0, 8], got 9"),
    (
        lambda: F.solarize(IMAGE, 255.5),
        "solarize: threshold must be at most 255 (the uint8 maximum), got 255.5",
    ),
    (
        lambda: F.adjust_sharpness(IMAGE, -2),
        "adjust_sharpness: sharpness_factor must be non-negative, got -2",
    ),
    (lambda: F.invert(IMAGE[:, :, :2]), "invert: image must have 1 or 3 channels, got 2"),
    (lambda: F.equalize(IMAGE.astype(np.float32)), "equalize: image must be a uint8 array"),
    (
        lambda: F.autocontrast([[1, 2]]),
        "autocontrast: image must be a numpy array or a torch tensor, got list",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD_CALLS, ids=[m for _, m in BAD_CALLS])
def test_bad_functional_arguments_are_config_errors(call, message):
    with pytest.raises(conveyor.ConfigError, match="^" + re.escape(message)):
        call()


def test_functional_ops_keep_the_layout_and_do_not_touch_the_input():
    before = IMAGE.copy()
    assert F.invert(IMAGE).shape == (6, 7, 3)
    np.testing.assert_array_equal(F.invert(IMAGE), 255 - IMAGE)
    np.testing.assert_array_equal(IMAGE, before)
    assert F.rgb_to_grayscale(IMAGE).shape == (6, 7, 1)
    assert F.rgb_to_grayscale(IMAGE, num_output_channels=3).shape == (6, 7, 3)
    assert F.to_grayscale is F.rgb_to_grayscale
    assert F.equalize(IMAGE[:, :, 0]).shape == (6, 7)
    assert F.rgb_to_grayscale(IMAGE[:, :, 0], 3).shape == (6, 7, 3)
    # A non-contiguous view is accepted.
    np.testing.assert_array_equal(F.invert(IMAGE[:, ::2]), 255 - IMAGE[:, ::2])
