"""A map-style dataset that returns decoded images (PIL images, numpy
arrays, torch tensors), as a DataLoader dataset without transforms does,
through PythonSource and the native transform chain: exact pixels."""

import numpy as np
import pytest
from PIL import Image

import conveyor
import conveyor.transforms as T
from conveyor.sources import PythonSource

torch = pytest.importorskip("torch")

H, W = 9, 7


def pixels(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 256, size=(H, W, 3), dtype=np.uint8)


class Decoded:
    """Sample i: pixels(i) in the form `make` gives, labelled i."""

    def __init__(self, make, n=5):
        self.make, self.n = make, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.make(pixels(i)), i


def batch(dataset, transforms=(), **kwargs) -> tuple[np.ndarray, list[int]]:
    options = dict(batch_size=len(dataset), dtype="uint8", layout="HWC", **kwargs)
    loader = conveyor.Loader(PythonSource(dataset), list(transforms), **options)
    images, labels = next(iter(loader))
    return images.numpy(), labels.tolist()


@pytest.mark.parametrize(
    "make",
    [
        Image.fromarray,
        lambda a: a,
        lambda a: torch.from_numpy(a).permute(2, 0, 1),  # torchvision's C×H×W (not contiguous).
        lambda a: Image.fromarray(a).convert("RGBA"),  # Converted to RGB, as torchvision's loader does.
    ],
    ids=["pil", "numpy-hwc", "tensor-chw", "pil-rgba"],
)
def test_decoded_images_come_out_with_exactly_their_pixels(make):
    images, labels = batch(Decoded(make), [T.CenterCrop((H, W))])
    assert labels == list(range(5))
    for i in range(5):
        np.testing.assert_array_equal(images[i], pixels(i))


def test_one_channel_images_stay_one_channel_with_channels_1_and_are_replicated_with_3():
    def gray(a):
        return a[:, :, 0]

    ones, _ = batch(Decoded(gray), [T.CenterCrop((H, W))], channels=1)
    threes, _ = batch(Decoded(lambda a: Image.fromarray(gray(a))), [T.CenterCrop((H, W))])
    for i in range(5):
        np.testing.assert_array_equal(ones[i, :, :, 0], gray(pixels(i)))
        np.testing.assert_array_equal(threes[i], np.repeat(gray(pixels(i))[:, :, None], 3, axis=2))


def test_the_native_chain_runs_on_them_as_on_files():
    # The same pixels as a PNG file decoded by the engine: a random crop and flip, identical per seed.
    class Png:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            import io

            buf = io.BytesIO()
            Image.fromarray(pixels(i)).save(buf, "PNG")
            return buf.getvalue(), i

    chain = [T.RandomResizedCrop(6), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4)]
    decoded, _ = batch(Decoded(Image.fromarray), chain, seed=5)
    encoded, _ = batch(Png(), chain, seed=5)
    np.testing.assert_array_equal(decoded, encoded)


@pytest.mark.parametrize(
    "make,cause",
    [
        (
            lambda a: torch.from_numpy(a).permute(2, 0, 1).float() / 255,
            "__getitem__ returned a torch.float32 tensor; return uint8 images (no ToTensor in the dataset: "
            "the loader's dtype= makes float batches scaled to [0, 1])",
        ),
        (lambda a: a.astype(np.float32), "__getitem__ returned a float32 array; return uint8 images"),
        (
            lambda a: np.zeros((H, W, 4), np.uint8),
            f"__getitem__ returned an image of shape ({H}, {W}, 4); expected H×W, H×W×1 or H×W×3 (a tensor: "
            "C×H×W)",
        ),
        (
            lambda a: {"image": a},
            "__getitem__ returned builtins.dict; expected encoded image bytes, a decoded image (a PIL image, "
            "an H×W×C uint8 array, a C×H×W uint8 tensor) or an (image, label) pair",
        ),
    ],
    ids=["float-tensor", "float-array", "four-channels", "dict"],
)
def test_an_image_the_engine_cannot_take_is_a_read_error_naming_the_sample(make, cause):
    with pytest.raises(conveyor.ReadError) as info:
        batch(Decoded(make))
    assert "Decoded[0]" in str(info.value)
    assert cause in str(info.value)
