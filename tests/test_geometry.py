"""The geometric transforms of issue 10 (RandomCrop, Pad, RandomVerticalFlip,
RandomRotation, RandomAffine, RandomPerspective) and their functional forms:
argument checks, determinism across threads and resume, boxes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import conveyor
from conftest import assert_resumes_exactly
from conveyor import transforms as T
from conveyor.errors import ConfigError
from conveyor.sources import CocoDetection, ImageFolder
from conveyor.transforms import functional as F


class InterpolationMode:
    """Stands in for torchvision's enum (matched by name and value, never imported)."""

    def __init__(self, value: str) -> None:
        self.value = value


InterpolationMode.__name__ = "InterpolationMode"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: T.RandomCrop(0), "RandomCrop: size must be positive"),
        (
            lambda: T.RandomCrop(8, padding=[1, 2, 3]),
            "RandomCrop: padding must be an int or a 1, 2, or 4 element",
        ),
        (lambda: T.RandomCrop(8, padding=-1), "RandomCrop: padding must be non-negative"),
        (lambda: T.RandomCrop(8, padding=1.5), "RandomCrop: padding must be an int"),
        (lambda: T.RandomCrop(8, pad_if_needed=1), "RandomCrop: pad_if_needed must be True or False"),
        (lambda: T.RandomCrop(8, fill=256), r"RandomCrop: fill values must be in \[0, 255\]"),
        (
            lambda: T.RandomCrop(8, fill=(1, 2)),
            r"RandomCrop: fill must be one number or one per channel \(3\), got \[1, 2\]",
        ),
        (lambda: T.RandomCrop(8, fill="red"), "RandomCrop: fill must be a number"),
        (lambda: T.RandomCrop(8, padding_mode="wrap"), "RandomCrop: padding_mode must be 'constant', 'edge'"),
        (lambda: T.Pad(), None),
        (lambda: T.Pad("2"), "Pad: padding must be an int"),
        (lambda: T.Pad(2, padding_mode="circular"), "Pad: padding_mode must be"),
        (lambda: T.RandomVerticalFlip(p=1.5), r"RandomVerticalFlip: p must be in \[0, 1\], got 1.5"),
        (lambda: T.RandomVerticalFlip(p="x"), "RandomVerticalFlip: p must be a number"),
        (lambda: T.RandomRotation(-5), "RandomRotation: if degrees is a single number, it must be positive"),
        (
            lambda: T.RandomRotation((10, -10)),
            r"RandomRotation: degrees must be \(min, max\) with min <= max",
        ),
        (
            lambda: T.RandomRotation((1, 2, 3)),
            "RandomRotation: degrees must be a number or a sequence of length 2",
        ),
        (lambda: T.RandomRotation(5, interpolation="bicubic"), "RandomRotation: interpolation must be"),
        (lambda: T.RandomRotation(5, interpolation=3), "RandomRotation: interpolation must be"),
        (lambda: T.RandomRotation(5, expand="yes"), "RandomRotation: expand must be True or False"),
        (lambda: T.RandomRotation(5, center=(1,)), "RandomRotation: center must be a sequence of 2 numbers"),
        (lambda: T.RandomRotation(5, fill=-1), r"RandomRotation: fill values must be in \[0, 255\]"),
        (
            lambda: T.RandomAffine(5, translate=(0.5, 1.5)),
            r"RandomAffine: translate values must be in \[0, 1\]",
        ),
        (lambda: T.RandomAffine(5, translate=0.5), "RandomAffine: translate must be a sequence of 2 numbers"),
        (lambda: T.RandomAffine(5, scale=(0, 1)), "RandomAffine: scale values must be positive"),
        (lambda: T.RandomAffine(5, scale=(2, 1)), r"RandomAffine: scale must be \(min, max\)"),
        (
            lambda: T.RandomAffine(5, shear=-3),
            "RandomAffine: if shear is a single number, it must be positive",
        ),
        (
            lambda: T.RandomAffine(5, shear=(1, 2, 3)),
            "RandomAffine: shear must be a number or a sequence of length 2",
        ),
        (lambda: T.RandomAffine(5, shear=(1, 2, 4, 3)), r"RandomAffine: shear must be \(min, max\)"),
        (lambda: T.RandomAffine(float("nan")), "RandomAffine: degrees must be finite"),
        (
            lambda: T.RandomPerspective(1.5),
            r"RandomPerspective: distortion_scale must be in \[0, 1\], got 1.5",
        ),
        (lambda: T.RandomPerspective(p=-0.1), r"RandomPerspective: p must be in \[0, 1\], got -0.1"),
        (lambda: T.RandomPerspective(interpolation="lanczos"), "RandomPerspective: interpolation must be"),
    ],
)
def test_bad_arguments_are_config_errors_naming_them(make, message):
    if message is None:
        with pytest.raises(TypeError):
            make()
        return
    with pytest.raises(ConfigError, match="^" + message):
        make()


def test_interpolation_accepts_torchvisions_enum_strings_and_pil_constants():
    for value, number in [
        ("nearest", 0),
        ("bilinear", 1),
        (InterpolationMode("bilinear"), 1),
        (0, 0),
        (2, 1),
    ]:
        assert T.RandomRotation(5, interpolation=value)._params()["interpolation"] == number


def test_a_fill_that_does_not_match_the_channels_is_a_config_error():
    with pytest.raises(
        ConfigError, match=r"^transform 0 RandomRotation: fill has 3 values but the images have 1"
    ):
        T.compile_pipeline([T.RandomRotation(5, fill=(1, 2, 3)), T.CenterCrop(8)], channels=1)


def test_expand_needs_a_fixed_size_after_it():
    with pytest.raises(ConfigError, match="do not give a fixed output size"):
        T.compile_pipeline([T.CenterCrop(8), T.RandomRotation(5, expand=True)])
    T.compile_pipeline([T.CenterCrop(8), T.RandomRotation(5, expand=True), T.Resize((8, 8))])


CHAIN = [
    T.RandomCrop(32, padding=4, padding_mode="reflect"),
    T.RandomRotation(20, interpolation="bilinear"),
    T.RandomVerticalFlip(),
    T.RandomAffine(5, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5, fill=(10, 20, 30)),
    T.RandomPerspective(0.3, p=0.5),
    T.Pad(2, fill=7),
    T.RandomCrop(30),
    T.RandomHorizontalFlip(),
]


def make_loader(root, **kwargs):
    options = dict(batch_size=4, shuffle=True, seed=11, dtype="uint8", layout="HWC")
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root), CHAIN, **options)


@pytest.mark.parametrize("threads", [2, 4])
def test_same_batches_for_any_thread_count(texture_folder, threads):
    reference = [x.clone() for x, _ in make_loader(texture_folder, threads=1)]
    got = [x.clone() for x, _ in make_loader(texture_folder, threads=threads, prefetch=3)]
    assert len(got) == len(reference) == 6
    assert all(torch.equal(a, b) for a, b in zip(reference, got))
    other_epoch = make_loader(texture_folder, threads=1)
    other_epoch.set_epoch(1)
    assert not torch.equal(next(iter(other_epoch))[0], reference[0])  # The draws depend on the epoch.


def test_resume_is_exact_with_warps_in_the_chain(texture_folder):
    assert_resumes_exactly(lambda **kw: make_loader(texture_folder, **kw), taken=1)


@pytest.fixture()
def coco(tmp_path):
    """Two 100 (h) × 200 (w) images: id 1 with one object, id 2 with two."""
    images, rng = [], np.random.default_rng(1)
    for image_id in (1, 2):
        name = f"{image_id:012d}.png"
        Image.fromarray(rng.integers(0, 256, (100, 200, 3), dtype=np.uint8)).save(tmp_path / name)
        images.append({"id": image_id, "file_name": name, "width": 200, "height": 100})
    annotations = [
        {"id": 10, "image_id": 2, "category_id": 5, "bbox": [20, 10, 40, 30], "area": 1200, "iscrowd": 0},
        {"id": 11, "image_id": 2, "category_id": 7, "bbox": [130, 50, 40, 50], "area": 2000, "iscrowd": 0},
        {"id": 12, "image_id": 1, "category_id": 5, "bbox": [0, 0, 30, 30], "area": 900, "iscrowd": 0},
    ]
    path = tmp_path / "instances.json"
    categories = [{"id": 5, "name": "cat"}, {"id": 7, "name": "dog"}]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return CocoDetection(tmp_path, path)


def targets_of(source, transforms):
    ((_, targets),) = list(conveyor.Loader(source, transforms, batch_size=2, dtype="uint8"))
    return [t["boxes"] for t in targets]


def test_boxes_follow_a_quarter_turn(coco):
    # 90 degrees anticlockwise with expand: (x, y) -> (y, 200 - x) in a 100 (w) x 200 (h) image.
    boxes = targets_of(coco, [T.RandomRotation((90, 90), expand=True), T.Resize((200, 100))])
    torch.testing.assert_close(boxes[0], torch.tensor([[0.0, 170.0, 30.0, 30.0]]), atol=1e-3, rtol=0)
    torch.testing.assert_close(
        boxes[1], torch.tensor([[10.0, 140.0, 30.0, 40.0], [50.0, 30.0, 50.0, 40.0]]), atol=1e-3, rtol=0
    )


def test_boxes_follow_pad_and_vertical_flip(coco):
    # Padded 10 left, 5 top (105 x 210), then mirrored top-bottom: y' = 105 - (y + 5 + h).
    whole = T.CenterCrop((100, 200))  # The whole image: gives the chain its size.
    boxes = targets_of(coco, [whole, T.Pad([10, 5, 0, 0], fill=9), T.RandomVerticalFlip(p=1.0)])
    assert boxes[0].tolist() == [[10.0, 70.0, 30.0, 30.0]]
    assert boxes[1].tolist() == [[30.0, 60.0, 40.0, 30.0], [140.0, 0.0, 40.0, 50.0]]


def test_boxes_follow_a_scaling_and_leave_with_it(coco):
    boxes = targets_of(coco, [T.CenterCrop((100, 200)), T.RandomAffine((0, 0), scale=(2, 2))])
    # Scale 2 about the centre (100, 50): x' = 2x - 100, y' = 2y - 50, clipped to 200 x 100.
    assert boxes[0].tolist() == []  # (0, 0, 30, 30) -> (-100, -50, -40, 10): outside.
    torch.testing.assert_close(
        boxes[1], torch.tensor([[0.0, 0.0, 20.0, 30.0], [160.0, 50.0, 40.0, 50.0]]), atol=1e-3, rtol=0
    )


def test_functional_ops_on_numpy_and_torch_agree():
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (21, 34, 3), dtype=np.uint8)
    tensor = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    for op, kwargs in [
        (F.rotate, {"angle": 17.0, "interpolation": "bilinear", "expand": True}),
        (F.affine, {"angle": 5.0, "translate": [2, 1], "scale": 1.1, "shear": [3.0, 1.0]}),
        (F.pad, {"padding": [1, 2], "padding_mode": "symmetric"}),
        (F.crop, {"top": 3, "left": -2, "height": 10, "width": 40}),
        (F.center_crop, {"output_size": 9}),
        (F.resized_crop, {"top": 1, "left": 2, "height": 15, "width": 20, "size": [7, 9]}),
        (F.resize, {"size": 10}),
        (F.vertical_flip, {}),
        (F.horizontal_flip, {}),
    ]:
        from_numpy = op(image, **kwargs)
        from_torch = op(tensor, **kwargs)
        assert isinstance(from_torch, torch.Tensor)
        np.testing.assert_array_equal(from_torch.permute(1, 2, 0).numpy(), from_numpy)
    gray = image[:, :, 0]
    np.testing.assert_array_equal(F.vertical_flip(gray), gray[::-1])
    assert F.resize(image, 10).shape == (10, 16, 3)  # int(10 * 34 / 21) = 16.
    assert F.resize(image, 10, max_size=12).shape == (7, 12, 3)
    assert F.rotate(image, 90.0, expand=True).shape == (34, 21, 3)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda im: F.rotate(im, "x"), "rotate: angle must be a number, got 'x'"),
        (lambda im: F.affine(im, 0.0, [1], 1.0, 0.0), "affine: translate must be a sequence of 2 numbers"),
        (lambda im: F.affine(im, 0.0, [1, 1], 0.0, 0.0), "affine: scale must be positive, got 0"),
        (lambda im: F.pad(im, 1, padding_mode="x"), "pad: padding_mode must be"),
        (lambda im: F.crop(im, 0, 0, 0, 5), "crop: size must be positive integers"),
        (
            lambda im: F.perspective(im, None, None),
            "perspective: either the startpoints/endpoints or the coeff",
        ),
        (
            lambda im: F.perspective(im, [[0, 0]] * 3, [[0, 0]] * 4),
            r"perspective: startpoints must be four \(x, y\)",
        ),
        (
            lambda im: F.perspective(im, [[0, 0]] * 4, [[0, 0]] * 4),
            "perspective: the start and end points do not",
        ),
        (lambda im: F.resize(im, [4, 4], max_size=10), "resize: max_size should only be passed"),
        (lambda im: F.resize(im, 10, interpolation="lanczos"), "resize: interpolation must be one of"),
        (lambda im: F.rotate(im, 5.0, fill=[1, 2, 3]), "rotate: fill has 3 values but the images have 1"),
    ],
)
def test_functional_bad_arguments_are_config_errors(call, message):
    with pytest.raises(ConfigError, match="^" + message):
        call(np.zeros((8, 9), np.uint8))


def test_an_image_smaller_than_the_crop_is_a_config_error_naming_the_file(tmp_path):
    (tmp_path / "a").mkdir()
    Image.fromarray(np.zeros((10, 12, 3), np.uint8)).save(tmp_path / "a" / "small.png")
    loader = conveyor.Loader(ImageFolder(tmp_path), [T.RandomCrop(16)], batch_size=1)
    with pytest.raises(
        ConfigError, match=r"small\.png: RandomCrop: required crop size \(16, 16\) is larger than input"
    ):
        list(loader)
    padded = conveyor.Loader(ImageFolder(tmp_path), [T.RandomCrop(16, pad_if_needed=True)], batch_size=1)
    assert next(iter(padded))[0].shape == (1, 3, 16, 16)
