"""Chains without a final fixed size (only Resize(256), or no transform):
batches are lists of tensors, one per sample at its own size, with the same
determinism, resume, errors and skip as fixed-size batches, and memory that
does not grow with epochs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import conveyor
from conveyor import _conveyor
from conveyor import transforms as T
from conveyor.sources import FileList, ImageFolder

N = 30  # Samples in color_folder: sample i is (40 + 7i % 50) x (40 + 13i % 50) pixels.


def size_of(i: int) -> tuple[int, int]:
    return 40 + (i * 7) % 50, 40 + (i * 13) % 50


def resized(h: int, w: int, short: int) -> tuple[int, int]:
    # torchvision's Resize(int): the shorter side to `short`, the other int(short * long / short_side).
    return (short, int(short * w / h)) if h <= w else (int(short * h / w), short)


def epoch(loader):
    return [([image.clone() for image in images], labels.clone()) for images, labels in loader]


def test_resize_to_the_shorter_side_gives_one_tensor_per_sample(color_folder):
    loader = conveyor.Loader(ImageFolder(color_folder), [T.Resize(20)], batch_size=4)
    batches = epoch(loader)
    assert len(batches) == 8 and len(batches[-1][0]) == 2
    shapes = [tuple(image.shape) for images, _ in batches for image in images]
    assert shapes == [(3, *resized(*size_of(i), 20)) for i in range(N)]
    assert all(image.dtype == torch.float32 for images, _ in batches for image in images)
    assert torch.cat([labels for _, labels in batches]).tolist() == [i // 10 for i in range(N)]
    # Each sample equals the pipeline run alone on its file.
    pipeline = T.compile_pipeline([T.Resize(20)], variable_size=True)
    assert tuple(pipeline.sample_shape) == (3, -1, -1)
    paths = ImageFolder(color_folder).samples
    for i in (0, 7, 29):
        alone = np.asarray(pipeline.apply(open(paths[i][0], "rb").read(), index=i))
        np.testing.assert_array_equal(batches[i // 4][0][i % 4].numpy(), alone)


def test_no_transform_gives_the_decoded_images_hwc_uint8(color_folder):
    loader = conveyor.Loader(ImageFolder(color_folder), [], batch_size=8, dtype="uint8", layout="HWC")
    paths = ImageFolder(color_folder).samples
    images = [image for batch, _ in epoch(loader) for image in batch]
    assert len(images) == N
    for i, image in enumerate(images):
        assert image.dtype == torch.uint8 and tuple(image.shape) == (*size_of(i), 3)
        decoded = _conveyor.decode_image(open(paths[i][0], "rb").read())
        np.testing.assert_array_equal(image.numpy(), decoded)


def test_identical_for_any_thread_count_and_after_resume(color_folder):
    chain = [T.Resize(16), T.RandomHorizontalFlip()]

    def make(**kwargs):
        return conveyor.Loader(ImageFolder(color_folder), chain, batch_size=4, shuffle=True, seed=9, **kwargs)

    one, four = epoch(make(threads=1)), epoch(make(threads=4, prefetch=4))
    for (a, la), (b, lb) in zip(one, four):
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and torch.equal(la, lb)
    loader = make(threads=2)
    it = iter(loader)
    next(it), next(it)
    resumed = make(threads=3)
    resumed.load_state_dict(loader.state_dict())
    rest = epoch(resumed)
    assert len(rest) == 6
    for (a, la), (b, lb) in zip(one[2:], rest):
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and torch.equal(la, lb)


def test_bad_samples_raise_naming_them_or_are_skipped(tmp_path, color_folder):
    root = tmp_path / "data"
    shutil.copytree(color_folder, root)
    bad = root / "dog" / "004.jpg"
    bad.write_bytes(bad.read_bytes()[:200])  # Sample 14.
    with pytest.raises(conveyor.DecodeError) as info:
        epoch(conveyor.Loader(ImageFolder(root), [T.Resize(10)], batch_size=4))
    assert info.value.key == str(bad)
    loader = conveyor.Loader(ImageFolder(root), [T.Resize(10)], batch_size=4, on_error="skip", threads=3)
    images = [image for batch, _ in epoch(loader) for image in batch]
    assert [tuple(i.shape) for i in images] == [(3, *resized(*size_of(i), 10)) for i in range(N) if i != 14]
    assert loader.stats()["skipped"] == 1


def test_memory_does_not_grow_with_epochs(color_folder):
    loader = conveyor.Loader(ImageFolder(color_folder), [T.Resize(24)], batch_size=4, prefetch=2, threads=2)
    for _ in range(10):
        for _batch in loader:
            pass
    # 300 samples were loaded; their buffers are recycled: per size class at
    # most the samples in flight or held at once, (prefetch + 2) x batch_size.
    assert loader.stats()["buffers_allocated"] <= N
    assert loader.stats()["buffers_leased"] <= 2 * 4


def test_boxes_follow_each_sample_at_its_own_size(color_folder):
    paths = [p for p, _ in ImageFolder(color_folder).samples][:4]
    boxes = [[(0.0, 0.0, 20.0, 10.0, 1)] for _ in paths]
    loader = conveyor.Loader(FileList(paths, boxes=boxes), [T.Resize(20)], batch_size=4)
    images, targets = next(iter(loader))
    for i, (image, target) in enumerate(zip(images, targets)):
        h, w = size_of(i)
        scale_y, scale_x = image.shape[1] / h, image.shape[2] / w
        np.testing.assert_allclose(target["boxes"].numpy(), [[0, 0, 20 * scale_x, 10 * scale_y]], rtol=1e-5)


def test_fixed_size_rules_stay_where_a_fixed_size_is_needed(color_folder):
    with pytest.raises(conveyor.ConfigError, match="do not give a fixed output size"):
        T.compile_pipeline([T.Resize(256)])
    with pytest.raises(conveyor.ConfigError, match="CutMix: samples must have a fixed size"):
        conveyor.Loader(ImageFolder(color_folder), [T.Resize(20)], batch_transforms=[T.CutMix()])
