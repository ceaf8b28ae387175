"""Decoding on the GPU (``Loader(decode_device="cuda")``): what every machine
checks (the chains and options the GPU path refuses, each named; the CUDA
libraries named when they are missing), and on a GPU (``make gpu-check``
runs this file there) the batches against the CPU path's: the same labels
and order, pixels within a mean of 2 levels (the issue's bound) where nvJPEG
decoded, exactly the CPU path's where the file went there (a PNG, a
progressive JPEG), the same for any thread count, counted in stats().
The device's arithmetic itself is checked on the CPU against the CPU path
(cpp/conveyor/ops/device_plan_test.cc)."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import conveyor
from conftest import textured
from conveyor import ConfigError
from conveyor import transforms as T
from conveyor.sources import ImageFolder

torch = pytest.importorskip("torch")


def has_cuda_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: Of ``gpu_folder``'s 20 files, these go to the CPU path.
PNG, PROGRESSIVE = "a/005.png", "b/013.jpg"


@pytest.fixture(scope="module")
def gpu_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 classes × 10 photo-like images, 150..249 × 180..279 px: JPEGs of
    4:2:0 and 4:4:4, one PNG and one progressive JPEG."""
    root = tmp_path_factory.mktemp("gpu-decode")
    for index in range(20):
        folder = root / ("a" if index < 10 else "b")
        folder.mkdir(exist_ok=True)
        image = Image.fromarray(textured(index, 150 + (index * 37) % 100, 180 + (index * 53) % 100))
        name = f"{folder.name}/{index:03d}"
        if f"{name}.png" == PNG:
            image.save(root / PNG)
        else:
            image.save(
                root / f"{name}.jpg",
                quality=90,
                subsampling=0 if index % 3 == 0 else 2,
                progressive=f"{name}.jpg" == PROGRESSIVE,
            )
    return root


# --- on every machine -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "transforms, options, message",
    [
        (
            [T.ColorJitter(0.4), T.CenterCrop(32)],
            {},
            "decoding on the GPU: transform 0 (color_jitter) works on the whole decoded image "
            "(only on the CPU)",
        ),
        (
            [T.RandomResizedCrop(32, interpolation="bicubic")],
            {},
            "decoding on the GPU: transform 0 (random_resized_crop) resizes with another interpolation than "
            "bilinear (only on the CPU)",
        ),
        (
            [T.CenterCrop(32)],
            {"channels": 1},
            "decoding on the GPU: the output is grayscale (only on the CPU)",
        ),
        ([T.CenterCrop(32)], {"collate_fn": list}, "collate_fn takes CPU samples"),
        (
            [T.CenterCrop(32)],
            {"batch_transforms": [T.MixUp(num_classes=2)]},
            "batch_transforms work on the CPU",
        ),
        ([T.CenterCrop(32)], {"decode_device": "cpu"}, "only 'cuda' or 'cuda:N' decodes on a device"),
    ],
)
def test_what_the_gpu_path_cannot_run_is_refused_by_name(gpu_folder, transforms, options, message):
    options.setdefault("decode_device", "cuda")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        conveyor.Loader(ImageFolder(gpu_folder), transforms, batch_size=2, **options)


@pytest.mark.skipif(has_cuda_driver(), reason="this machine has a CUDA driver")
def test_without_cuda_the_missing_libraries_are_named(gpu_folder):
    with pytest.raises(ConfigError) as raised:
        conveyor.Loader(ImageFolder(gpu_folder), [T.CenterCrop(32)], batch_size=2, decode_device="cuda")
    message = str(raised.value)
    assert "decoding on the GPU needs the CUDA libraries, and the CUDA driver (libcuda.so.1" in message
    assert "set CUDA_HOME" in message and "libnvjpeg.so.13" in message


# --- on a GPU -----------------------------------------------------------------------------------


def loader(root: Path, transforms: list[Any], **options: Any) -> conveyor.Loader:
    return conveyor.Loader(ImageFolder(root), transforms, batch_size=6, shuffle=True, seed=11, **options)


def epoch(made: conveyor.Loader) -> list[tuple[Any, Any]]:
    with made:
        return [(x.cpu(), y.cpu()) for x, y in made]


TRAIN = [T.RandomResizedCrop(64), T.RandomHorizontalFlip()]


@needs_gpu
def test_gpu_batches_are_the_cpu_batches_within_two_levels(gpu_folder):
    gpu_made = loader(gpu_folder, TRAIN, dtype="uint8", decode_device="cuda")
    gpu, cpu = epoch(gpu_made), epoch(loader(gpu_folder, TRAIN, dtype="uint8"))
    assert len(gpu) == len(cpu) == 4
    for (gx, gy), (cx, cy) in zip(gpu, cpu):
        assert torch.equal(gy, cy)
        assert gx.shape == cx.shape == (gy.numel(), 3, 64, 64) and gx.dtype == torch.uint8
        assert (gx.float() - cx.float()).abs().mean() <= 2.0
    stats = gpu_made.stats()["device_decode"]
    assert (stats["device_samples"], stats["host_samples"], stats["host_redone"]) == (18, 2, 0)
    assert stats["backend"]


@needs_gpu
def test_files_the_gpu_cannot_take_are_the_cpu_paths_exactly(gpu_folder):
    # Unshuffled: samples 5 (the PNG) and 13 (progressive) are at known places.
    made = conveyor.Loader(
        ImageFolder(gpu_folder), TRAIN, batch_size=20, seed=5, dtype="uint8", decode_device="cuda"
    )
    ((gx, _),) = epoch(made)
    ((cx, _),) = epoch(conveyor.Loader(ImageFolder(gpu_folder), TRAIN, batch_size=20, seed=5, dtype="uint8"))
    for index in (5, 13):
        assert torch.equal(gx[index], cx[index])


@needs_gpu
def test_gpu_batches_are_the_same_for_any_thread_count(gpu_folder):
    chain = [*TRAIN, T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))]
    one = epoch(loader(gpu_folder, chain, threads=1, decode_device="cuda"))
    three = epoch(loader(gpu_folder, chain, threads=3, decode_device="cuda"))
    for (x1, y1), (x3, y3) in zip(one, three):
        assert torch.equal(x1, x3) and torch.equal(y1, y3)


@needs_gpu
def test_normalized_channels_last_batches_are_the_cpu_paths_within_the_bound(gpu_folder):
    chain = [T.Resize(80), T.CenterCrop(64), T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    options = {"memory_format": torch.channels_last}
    gpu = epoch(loader(gpu_folder, chain, decode_device="cuda", **options))
    cpu = epoch(loader(gpu_folder, chain, **options))
    for (gx, _), (cx, _) in zip(gpu, cpu):
        assert gx.is_contiguous(memory_format=torch.channels_last)
        # 2 levels of 255, through the largest 1/std.
        assert (gx - cx).abs().mean() <= 2 / 255 / 0.224


@needs_gpu
def test_a_truncated_jpeg_is_named_by_the_cpu_path(tmp_path, gpu_folder):
    for path in sorted(gpu_folder.rglob("*.*"))[:6]:
        (tmp_path / path.parent.name).mkdir(exist_ok=True)
        (tmp_path / path.parent.name / path.name).write_bytes(path.read_bytes())
    broken = tmp_path / "a" / "000.jpg"
    broken.write_bytes(broken.read_bytes()[:2000])
    made = conveyor.Loader(ImageFolder(tmp_path), TRAIN, batch_size=3, decode_device="cuda")
    with pytest.raises(conveyor.DecodeError, match="000.jpg"):
        epoch(made)


@needs_gpu
def test_a_peek_inside_the_loop_is_decoded_beside_it(gpu_folder):
    # The peek decodes on the consumer's stream while the loop's batches are
    # decoded on the copy stream's thread: both exact.
    made = loader(gpu_folder, TRAIN, dtype="uint8", decode_device="cuda")
    fresh = loader(gpu_folder, TRAIN, dtype="uint8", decode_device="cuda")
    epoch_0 = epoch(fresh)
    next_epoch = loader(gpu_folder, TRAIN, dtype="uint8", decode_device="cuda")
    next_epoch.set_epoch(1)
    first_of_epoch_1 = epoch(next_epoch)[0]
    with made:
        seen = []
        for step, (x, y) in enumerate(made):
            seen.append((x.cpu(), y.cpu()))
            if step == 1:
                peek_x, peek_y = next(iter(made))
                assert torch.equal(peek_x.cpu(), first_of_epoch_1[0])
                assert torch.equal(peek_y.cpu(), first_of_epoch_1[1])
    for (x, y), (fx, fy) in zip(seen, epoch_0, strict=True):
        assert torch.equal(x, fx) and torch.equal(y, fy)
