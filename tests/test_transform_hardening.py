"""The transforms and the loader under hostile arguments: empty and huge
images in the functional API, steps that make images past max_pixels or of
no pixel, a transform or a dataset that calls back into its own loader,
epochs and class counts that cannot fit. What once crashed or hung runs in a
child process with a timeout, so a regression fails instead of killing or
stalling the suite."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

import conveyor
from conftest import run_python
from conveyor import _conveyor
from conveyor import transforms as T
from conveyor.errors import ConfigError, TooLargeError
from conveyor.sources import ArraySource, FileList
from conveyor.transforms import functional as F

IMAGES = np.arange(4 * 32 * 48 * 3, dtype=np.uint64).astype(np.uint8).reshape(4, 32, 48, 3)


def first_error(transforms: list, **options) -> conveyor.Error:
    """The error iterating a loader of IMAGES with ``transforms`` raises."""
    loader = conveyor.Loader(ArraySource(IMAGES), transforms, batch_size=2, dtype="uint8", **options)
    with pytest.raises(conveyor.Error) as info:
        for _ in loader:
            pass
    loader.close()
    return info.value


def test_every_functional_op_refuses_an_empty_image_by_name():
    # F.pad (edge) and F.resize once crashed on these, F.pad (reflect) spun
    # forever, F.perspective raised a raw OpenCV assertion.
    code = """
        import numpy as np, torch
        from conveyor.errors import ConfigError
        from conveyor.transforms import functional as F
        points = [[0, 0], [1, 0], [1, 1], [0, 1]]
        MODES = ("constant", "edge", "reflect", "symmetric")
        calls = {
            "pad": [lambda x, m=m: F.pad(x, 2, padding_mode=m) for m in MODES],
            "resize": [lambda x: F.resize(x, [4, 4])],
            "perspective": [lambda x: F.perspective(x, points, points)],
            "rotate": [lambda x: F.rotate(x, 30, expand=True)],
            "invert": [F.invert],
            "gaussian_blur": [lambda x: F.gaussian_blur(x, [3, 3])],
            "center_crop": [lambda x: F.center_crop(x, [2, 2])],
        }
        # (image, height, width): numpy H x W (x C) and torch (C x) H x W.
        images = [(np.zeros((h, w, c), np.uint8), h, w) for h, w, c in [(0, 3, 3), (3, 0, 3), (0, 0, 1)]]
        images += [(np.zeros((0, 3), np.uint8), 0, 3), (torch.zeros((3, 0, 4), dtype=torch.uint8), 0, 4)]
        u8 = torch.uint8
        images += [(torch.zeros((1, 5, 0), dtype=u8), 5, 0), (torch.zeros((2, 0), dtype=u8), 2, 0)]
        for op, functions in calls.items():
            for f in functions:
                for image, height, width in images:
                    try:
                        f(image)
                    except ConfigError as e:
                        expected = f"{op}: an image of {width}x{height} pixels (each side must be at least 1)"
                        assert str(e) == expected, str(e)
                    else:
                        raise AssertionError(f"{op} accepted {tuple(image.shape)}")
        print("ok")
    """
    child = run_python(code)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["ok"]


def test_a_side_beyond_an_int_is_too_large_not_wrapped():
    # (2**32 + 3) x 1 x 1 once came back as (3, 1, 1). np.zeros does not touch the 4 GB.
    with pytest.raises(TooLargeError) as info:
        F.invert(np.zeros((2**32 + 3, 1, 1), np.uint8))
    assert str(info.value) == "invert: an image of 1x4294967299 pixels, a side longer than 2147483647"
    with pytest.raises(ConfigError, match=r"^invert: image must have 1 or 3 channels, got 4$"):
        F.invert(np.zeros((3, 3, 4), np.uint8))


def test_what_a_functional_op_makes_is_bounded_before_it_is_allocated():
    image = IMAGES[0]
    with pytest.raises(TooLargeError) as info:
        F.pad(image, 30000, padding_mode="reflect")  # 10.8 GB once ended in InternalError: std::bad_alloc.
    assert str(info.value) == "pad: an image of 60048x60032 pixels, more than max_pixels (178956970)"
    with pytest.raises(TooLargeError, match=r"^crop: an image of 100000x100000 pixels"):
        F.crop(image, 0, 0, 100000, 100000)
    with pytest.raises(TooLargeError, match=r"^resize: an image of 100000x100000 pixels"):
        F.resize(image, [100000, 100000])
    # float32 keeps no digit of the expanded size about a center this far away.
    for center, size in (([3e9, 3e9], "0x0"), ([1e9, 1e9], "0x64")):
        with pytest.raises(ConfigError) as info:
            F.rotate(image, 30, expand=True, center=center)
        assert str(info.value) == f"rotate: an image of {size} pixels (each side must be at least 1)"


def grow(image: np.ndarray) -> np.ndarray:
    return np.zeros((100, 100, 3), np.uint8)


def test_every_step_of_a_pipeline_is_bounded_by_max_pixels():
    # Only constant Pad and Resize were checked: these passed max_pixels=3000.
    cases = [
        (T.Pad(50, padding_mode="reflect"), "Pad: an image of 148x132 pixels"),
        (T.RandomRotation((45, 45), expand=True), "RandomRotation: an image of 58x58 pixels"),
        (T.Lambda(grow), "Lambda(grow): an image of 100x100 pixels"),
    ]
    for step, made in cases:
        error = first_error([step, T.Resize((8, 8))], max_pixels=3000)
        assert isinstance(error, TooLargeError), error
        assert str(error) == f"images[0]: {made}, more than max_pixels (3000)"
    error = first_error([T.Pad(30000, padding_mode="reflect"), T.Resize((8, 8))])
    assert isinstance(error, TooLargeError)
    assert str(error) == "images[0]: Pad: an image of 60048x60032 pixels, more than max_pixels (178956970)"
    # An empty image from a step is named too (it was an InternalError).
    error = first_error([T.RandomRotation((30, 30), expand=True, center=(3e9, 3e9)), T.Resize((8, 8))])
    assert isinstance(error, ConfigError)
    assert str(error) == "images[0]: RandomRotation: an image of 0x0 pixels (each side must be at least 1)"


REENTRY = """
    import io, sys
    import numpy as np
    from PIL import Image
    import conveyor
    from conveyor import transforms as T
    from conveyor.sources import ArraySource, PythonSource

    holder = {}

    def png(value):
        buffer = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(buffer, format="PNG")
        return buffer.getvalue()

    class Dataset:
        def __init__(self, call):
            self.call = call
        def __len__(self):
            return 8
        def __getitem__(self, i):
            if holder.pop("armed", False):  # Once: the second pass runs plainly.
                self.call(holder["loader"])
            return png(i), i

    def lambda_of(call):
        def fn(image):
            if holder.pop("armed", False):
                call(holder["loader"])
            return image
        return fn

    calls = {"close": lambda loader: loader.close(), "peek": lambda loader: next(iter(loader))}
    for name, call in calls.items():
        for where in ("lambda", "dataset"):
            if where == "lambda":
                source, steps = ArraySource(np.zeros((8, 8, 8, 3), np.uint8)), [T.Lambda(lambda_of(call))]
            else:
                source, steps = PythonSource(Dataset(call)), [T.Resize((8, 8))]
            loader = conveyor.Loader(source, steps, batch_size=4, dtype="uint8", shuffle=False)
            holder["loader"], holder["armed"] = loader, True
            try:
                for _ in loader:
                    pass
            except conveyor.Error as e:
                cause = e.__cause__
                print(name, where, type(e).__name__, type(cause).__name__, str(cause))
            # The outer pass failed by the sample's error; the loader still works.
            print(name, where, "again", sum(len(labels) for _, labels in loader))
            loader.close()
"""


def test_a_transform_or_dataset_calling_back_into_its_loader_is_an_error_not_a_deadlock():
    child = run_python(REENTRY)
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    message = (
        "was called from one of the loader's own threads (in the source's read or a transform), where it "
        "would wait for that thread to finish: call it from the code that iterates the loader"
    )
    expected = []
    for name, call in (("close", "Loader.close()"), ("peek", "iter(loader)")):
        for where, kind in (("lambda", "InternalError"), ("dataset", "ReadError")):
            expected += [f"{name} {where} {kind} ConfigError {call} {message}", f"{name} {where} again 8"]
    assert lines == expected


def test_epochs_are_bounded_so_that_the_next_one_fits():
    # set_epoch(2**63 - 1) was accepted; the epoch after it raised a raw TypeError.
    loader = conveyor.Loader(ArraySource(IMAGES), [], batch_size=2, dtype="uint8")
    last = 2**63 - 2
    assert _conveyor.Loader.MAX_EPOCH == last
    with pytest.raises(ConfigError, match=rf"^epoch must be <= {last}, got {last + 1}$"):
        loader.set_epoch(last + 1)
    state = loader.state_dict()
    with pytest.raises(ConfigError, match=rf"^state\['epoch'\] must be <= {last}, got {last + 1}$"):
        loader.load_state_dict({**state, "epoch": last + 1})
    loader.set_epoch(last)
    assert sum(len(labels) for _, labels in loader) == 4
    assert loader.epoch == last + 1
    with pytest.raises(ConfigError, match=rf"^epoch {last + 1} is outside \[0, {last}\]$"):
        iter(loader)
    loader.close()


def test_a_batch_mix_whose_soft_labels_cannot_fit_is_refused_at_construction():
    # MixUp(num_classes=2**40) once failed the first batch with InternalError: std::bad_alloc.
    source = ArraySource(IMAGES, np.zeros(4, np.int64))
    with pytest.raises(ConfigError) as info:
        conveyor.Loader(
            source, [], batch_size=2, batch_transforms=[T.MixUp(num_classes=2**40)], memory_budget=2**30
        )
    assert str(info.value) == (
        "MixUp: num_classes 1099511627776 makes soft labels of 8796093022208 bytes per batch "
        "(batch_size x num_classes float32), more than memory_budget (1073741824 bytes)"
    )


def test_random_choice_takes_huge_probabilities_as_weights():
    # p = [1e308, 1e308] summed to infinity and was refused as "all 0".
    source = ArraySource(IMAGES, np.arange(4))
    mix = T.RandomChoice([T.MixUp(num_classes=4), T.CutMix(num_classes=4)], p=[1e308, 1e308])
    halves = T.RandomChoice([T.MixUp(num_classes=4), T.CutMix(num_classes=4)], p=[0.5, 0.5])
    batches = [
        [
            labels.numpy()
            for _, labels in conveyor.Loader(source, [], batch_size=2, batch_transforms=[m], seed=3)
        ]
        for m in (mix, halves)
    ]
    assert all(np.array_equal(a, b) for a, b in zip(*batches))
    assert all(math.isclose(float(row.sum()), 1.0, rel_tol=1e-6) for batch in batches[0] for row in batch)


def test_grayscale_1_takes_the_loader_argument_its_error_names(tmp_path):
    # "pass channels=1 to the loader" named an argument the Loader did not have.
    rng = np.random.default_rng(5)
    paths = []
    for i in range(4):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)).save(paths[-1])
    source = FileList(paths)
    with pytest.raises(ConfigError, match=r"pass channels=1 to the loader \(or num_output_channels=3\)$"):
        conveyor.Loader(source, [T.Grayscale(1), T.CenterCrop((6, 9))], batch_size=2)
    loader = conveyor.Loader(
        source, [T.Grayscale(1), T.CenterCrop((6, 9))], batch_size=4, dtype="uint8", channels=1
    )
    images, _ = next(iter(loader))
    assert tuple(images.shape) == (4, 1, 6, 9)
    # PNGs are decoded to one channel as PIL's convert("L") (torchvision's
    # Grayscale on a PIL image) computes it, within the decoder's rounding.
    for image, path in zip(images.numpy(), paths):
        expected = np.asarray(Image.open(path).convert("L"), dtype=np.int16)
        assert np.abs(image[0].astype(np.int16) - expected).max() <= 1
    # A raw source's channels are its own: the loader does not convert them.
    with pytest.raises(ConfigError) as info:
        conveyor.Loader(ArraySource(IMAGES), [T.Grayscale(1)], batch_size=2, channels=1)
    assert str(info.value) == (
        "channels=1: ArraySource's samples are raw pixels of 3 channel(s), which the loader does not "
        "convert; leave channels unset"
    )
