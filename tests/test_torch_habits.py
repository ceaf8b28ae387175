"""Habits of PyTorch users: torchvision objects recognised without importing
torchvision, DataLoader's argument names, torch's seed and dtypes, peeks,
channels_last batches, images/s, the per-epoch summary, Normalize on 0-255."""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings

import numpy as np
import pytest
import torch

import conveyor
from conftest import png_bytes
from conveyor import _checks
from conveyor import transforms as T
from conveyor.sources import ImageFolder, PythonSource
from conveyor.transforms import from_torchvision

N = 30  # Samples in color_folder.
V1 = "torchvision.transforms.transforms"
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def fake(name: str, module: str = V1, **attributes: object) -> object:
    """An object of a class named like torchvision's, from torchvision's module."""
    return type(name, (), {"__module__": module, **attributes})()


def compose(*steps: object, module: str = V1) -> object:
    return fake("Compose", module, transforms=list(steps))


def tv_train(module: str = V1) -> object:
    return compose(
        fake("RandomResizedCrop", module, size=(24, 24), scale=(0.5, 1.0), ratio=(0.75, 4 / 3),
             interpolation="bilinear", antialias=True),
        fake("RandomHorizontalFlip", module, p=0.5),
        fake("ToTensor", module),
        fake("Normalize", module, mean=MEAN, std=STD, inplace=False),
        module=module,
    )  # fmt: skip


NATIVE = [T.RandomResizedCrop(24, scale=(0.5, 1.0)), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(_checks, "_warned", set())


def load(root, transforms, **kwargs):
    options = dict(batch_size=4, shuffle=True, seed=7)
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root), transforms, **options)


def cloned(loader):
    return [(x.clone(), y.clone()) for x, y in loader]


def assert_same(a, b):
    assert len(a) == len(b)
    for (x, lx), (y, ly) in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x, y) and torch.equal(lx, ly)


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


# --- torchvision objects, recognised by module ----------------------------------------------------


@pytest.mark.parametrize("module", [V1, "torchvision.transforms.v2._geometry"])
def test_torchvision_like_objects_convert_without_torchvision(color_folder, module):
    converted = from_torchvision(tv_train(module))
    assert [repr(t) for t in converted] == [repr(t) for t in NATIVE] and converted.dtype == "float32"
    assert "torchvision" not in sys.modules  # Recognised by module name, never imported.
    expected = cloned(load(color_folder, NATIVE))
    assert_same(cloned(load(color_folder, tv_train(module))), expected)
    assert_same(cloned(load(color_folder, converted)), expected)
    assert_same(cloned(load(color_folder, list(tv_train(module).transforms))), expected)


def test_type_conversions_set_the_dtype(color_folder):
    resize, crop = (
        fake("Resize", size=[20], interpolation="bilinear", max_size=None, antialias=True),
        fake("CenterCrop", size=(16, 16)),
    )
    cases = [
        ([fake("PILToTensor")], "uint8"),
        ([fake("ToImage")], "uint8"),
        ([fake("ToImage"), fake("ToDtype", dtype=torch.float16, scale=True)], "float16"),
        ([fake("ToImage"), fake("ToDtype", dtype=torch.bfloat16, scale=True)], "bfloat16"),
        ([fake("PILToTensor"), fake("ConvertImageDtype", dtype=torch.float32)], "float32"),
        ([], None),
    ]
    for conversions, dtype in cases:
        converted = from_torchvision([resize, crop, *conversions])
        assert (converted.dtype, len(converted)) == (dtype, 2)
    images, _ = next(iter(load(color_folder, [resize, crop, fake("PILToTensor")])))
    assert images.dtype == torch.uint8
    with pytest.raises(conveyor.ConfigError, match=r"^dtype='float32' disagrees with the transforms"):
        load(color_folder, [resize, crop, fake("PILToTensor")], dtype="float32")


def test_unscaled_to_dtype_folds_into_the_next_normalize():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # The 0-255 values are not Normalize's warning here.
        converted = from_torchvision(
            [
                fake("ToDtype", dtype=torch.float32, scale=False),
                fake("CenterCrop", size=(8, 8)),
                fake("Normalize", mean=[127.5, 127.5, 127.5], std=[51.0, 255.0, 25.5], inplace=False),
            ]
        )
    assert repr(converted[1]) == "Normalize(mean=[0.5, 0.5, 0.5], std=[0.2, 1.0, 0.1])"
    with pytest.raises(conveyor.ConfigError) as info:
        from_torchvision([fake("ToDtype", dtype=torch.float32, scale=False)])
    assert str(info.value) == (
        "transforms[0]: torchvision ToDtype(float32, scale=False) cannot be converted: conveyor's float "
        "output is scaled to [0, 1]; use scale=True, or follow it with a Normalize"
    )


def test_unknown_and_unconvertible_transforms_name_class_and_position(color_folder):
    pipeline = compose(
        fake("CenterCrop", size=(8, 8)), compose(fake("GaussianNoise", "torchvision.transforms.v2._misc"))
    )
    with pytest.raises(conveyor.ConfigError) as info:
        load(color_folder, pipeline)
    assert str(info.value) == (
        "transforms[1][0]: GaussianNoise (torchvision.transforms.v2._misc.GaussianNoise) has no conveyor "
        "equivalent; wrap it as T.Lambda(obj) to run it in Python on each image, or leave it out "
        "(conveyor.transforms.torchvision.CONVERTERS lists the classes conveyor converts; docs/migrating.md "
        "maps each one)"
    )
    lanczos = fake("Resize", size=[8], interpolation="lanczos", max_size=None, antialias=True)
    with pytest.raises(conveyor.ConfigError) as info:
        from_torchvision([T.CenterCrop(8), lanczos])
    assert str(info.value) == (
        "transforms[1]: torchvision Resize cannot be converted: Resize: interpolation must be one of "
        "InterpolationMode.NEAREST, InterpolationMode.BILINEAR, InterpolationMode.BICUBIC, "
        "InterpolationMode.NEAREST_EXACT (or 'nearest', 'bilinear', 'bicubic', 'nearest-exact'), "
        "got 'lanczos' (torchvision has it for PIL images only)"
    )
    with pytest.raises(conveyor.ConfigError) as info:
        from_torchvision([fake("RandomHorizontalFlip", p=1.5)])
    assert str(info.value) == (
        "transforms[0]: torchvision RandomHorizontalFlip: RandomHorizontalFlip: p must be in [0, 1], got 1.5"
    )
    with pytest.raises(conveyor.ConfigError) as info:
        from_torchvision(42)
    assert (
        str(info.value)
        == "from_torchvision: int (builtins.int) is not a torchvision transform or a list of them"
    )


def test_a_class_named_like_torchvisions_elsewhere_is_not_converted(color_folder):
    with pytest.raises(
        conveyor.ConfigError, match=r"^transforms\[0\]: mypackage\.CenterCrop is not a conveyor"
    ):
        load(color_folder, [fake("CenterCrop", "mypackage", size=(8, 8))])


# --- DataLoader's argument names ------------------------------------------------------------------


def test_num_workers_is_threads(color_folder):
    expected = cloned(load(color_folder, [T.Resize((16, 16))], threads=2))
    before = native_threads()
    loader = load(color_folder, [T.Resize((16, 16))], num_workers=2, io_threads=8)
    first = next(iter(loader))
    assert native_threads() == before + 10  # 2 cpu threads and 8 io threads.
    del first, loader
    assert_same(cloned(load(color_folder, [T.Resize((16, 16))], num_workers=2)), expected)
    assert_same(cloned(load(color_folder, [T.Resize((16, 16))], num_workers=0)), expected)  # One thread.
    with pytest.raises(conveyor.ConfigError) as info:
        load(color_folder, [T.Resize((16, 16))], num_workers=4, threads=2)
    assert str(info.value) == (
        "give threads or num_workers (its DataLoader name), not both: got threads=2, num_workers=4"
    )
    with pytest.raises(conveyor.ConfigError, match="^num_workers must be >= 0, got -1$"):
        load(color_folder, [T.Resize((16, 16))], num_workers=-1)


def test_pin_memory_without_cuda_warns_once_and_continues(color_folder):
    message = "pin_memory=True but CUDA is not available: batches are not pinned (as DataLoader does)"
    with pytest.warns(UserWarning, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}$") as record:
        loader = load(color_folder, [T.Resize((16, 16))], pin_memory=True)
    assert record[0].filename == __file__  # Points at the Loader(...) call.
    assert_same(cloned(loader), cloned(load(color_folder, [T.Resize((16, 16))])))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(color_folder, [T.Resize((16, 16))], pin_memory=True)  # Once only.


def test_dataloader_arguments_with_nothing_to_change_are_accepted(color_folder):
    chain = [T.RandomResizedCrop(16), T.RandomHorizontalFlip()]
    expected = cloned(load(color_folder, chain))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Not even a warning.
        loader = load(
            color_folder,
            chain,
            persistent_workers=True,
            multiprocessing_context="spawn",
            in_order=False,
            timeout=60,
        )
    assert_same(cloned(loader), expected)  # In order, whatever in_order says.
    with pytest.raises(conveyor.ConfigError, match="^persistent_workers must be True or False, got 'yes'$"):
        load(color_folder, chain, persistent_workers="yes")


def test_prefetch_factor_keeps_as_many_batches_ahead_as_a_dataloader(color_folder):
    loader = load(color_folder, [T.Resize((16, 16))], num_workers=2, prefetch_factor=3)
    stats = loader.stats()
    assert stats["prefetch"] == 6 and stats["prefetch_auto"] is False and stats["threads"] == 2
    assert load(color_folder, [T.Resize((16, 16))], prefetch_factor=3).stats()["prefetch"] == 3
    with pytest.raises(conveyor.ConfigError) as info:
        load(color_folder, [T.Resize((16, 16))], prefetch=2, prefetch_factor=3)
    assert str(info.value) == (
        "give prefetch or prefetch_factor (DataLoader's batches per worker), not both: got prefetch=2, "
        "prefetch_factor=3"
    )
    with pytest.raises(conveyor.ConfigError, match="^prefetch_factor must be >= 1, got 0$"):
        load(color_folder, [T.Resize((16, 16))], prefetch_factor=0)
    # threads= is num_workers' other name: the same count.
    assert load(color_folder, [T.Resize((16, 16))], threads=2, prefetch_factor=3).stats()["prefetch"] == 6


def test_worker_init_fn_is_never_called_and_says_so_once(color_folder):
    called = []
    message = (
        "worker_init_fn is not called: conveyor has no worker processes (its workers are native threads in "
        "this process); seed with seed= or torch.manual_seed and set up state before making the Loader"
    )
    with pytest.warns(UserWarning) as record:
        loader = load(color_folder, [T.Resize((16, 16))], worker_init_fn=called.append)
    assert [str(w.message) for w in record] == [message] and record[0].filename == __file__
    assert len(cloned(loader)) == 8 and called == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(color_folder, [T.Resize((16, 16))], worker_init_fn=called.append)  # Once only.
    with pytest.raises(conveyor.ConfigError, match="^worker_init_fn must be callable, got int$"):
        load(color_folder, [T.Resize((16, 16))], worker_init_fn=3)


def test_num_workers_above_the_usable_cpus_warns_as_a_dataloader_does(color_folder):
    usable = conveyor._conveyor.default_cpu_threads()
    with pytest.warns(UserWarning) as record:
        loader = load(color_folder, [T.Resize((16, 16))], num_workers=usable + 3)
    assert record[0].filename == __file__
    assert [str(w.message) for w in record] == [
        f"num_workers={usable + 3} is more than the {usable} CPUs this process may use: the threads would "
        "take turns on them (leave num_workers out: conveyor chooses within the usable CPUs)"
    ]
    assert loader.stats()["threads"] == usable + 3  # As asked: a pinned count.


def test_a_generator_seeds_the_loader_as_it_seeds_a_dataloader(color_folder):
    chain = [T.RandomResizedCrop(16), T.RandomHorizontalFlip()]
    loader = load(color_folder, chain, seed=None, generator=torch.Generator().manual_seed(77))
    assert loader.state_dict()["seed"] == 77
    assert_same(cloned(loader), cloned(load(color_folder, chain, seed=77)))
    with pytest.raises(conveyor.ConfigError, match="^give seed or generator, not both: got seed=3 and a"):
        load(color_folder, chain, seed=3, generator=torch.Generator())
    with pytest.raises(conveyor.ConfigError, match="^generator must be a torch.Generator, got int$"):
        load(color_folder, chain, seed=None, generator=5)


def test_a_batch_that_takes_longer_than_timeout_raises_naming_the_wait(color_folder):
    def slow(image):
        time.sleep(0.5)
        return image

    loader = load(color_folder, [T.Resize((16, 16)), T.Lambda(slow)], threads=1, timeout=0.2)
    with pytest.raises(conveyor.WaitTimeoutError) as info:
        next(iter(loader))
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, conveyor.Error)
    assert str(info.value).startswith("no batch within timeout=0.2 s: epoch 0, batch 1 (counting from 1; ")
    assert str(info.value).endswith(
        "this epoch): a read or a transform is slower than the timeout allows, or the source stalls"
    )
    loader.close()
    # Without a timeout the same loader waits as long as it takes.
    assert len(list(load(color_folder, [T.Resize((16, 16)), T.Lambda(slow)], threads=8))) == 8
    for bad in (-1, float("nan"), True, "5"):
        with pytest.raises(conveyor.ConfigError, match="^timeout must be a number of seconds >= 0"):
            load(color_folder, [T.Resize((16, 16))], timeout=bad)
    assert load(color_folder, [T.Resize((16, 16))], timeout=np.int64(3)).timeout == 3.0
    assert load(color_folder, [T.Resize((16, 16))], timeout=float("inf")).timeout == float("inf")


def test_the_timeout_counts_only_the_wait_not_the_training_step(monkeypatch):
    # A fake clock that moves only when the test moves it: the training step
    # takes 10 "seconds", then the next batch (held back by the source until
    # released) takes a few real slices to come. Only that wait counts.
    import conveyor.loader as loader_module

    now = [0.0]
    monkeypatch.setattr(loader_module.time, "monotonic", lambda: now[0])
    release = threading.Event()
    image = png_bytes(np.zeros((8, 8, 3), dtype=np.uint8))

    class Held:
        def __len__(self):
            return 2

        def __getitem__(self, index):
            if index == 1:
                release.wait(30)
            return image

    loader = conveyor.Loader(PythonSource(Held()), [], batch_size=1, threads=1, io_threads=1, timeout=5)
    batches = iter(loader)
    next(batches)
    now[0] += 10.0  # The step.
    threading.Timer(0.3, release.set).start()  # Several 50 ms slices of real waiting.
    assert len(next(batches)[0]) == 1
    loader.close()


def test_the_dataloader_attributes_are_there(color_folder):
    loader = load(color_folder, [T.Resize((16, 16))], drop_last=True)
    assert loader.dataset is loader.source and len(loader.dataset) == 30
    assert (loader.batch_size, loader.drop_last, loader.timeout) == (4, True, 0.0)


# --- torch's seed and dtypes ------------------------------------------------------------------------


def test_torch_manual_seed_seeds_a_loader_without_seed(color_folder):
    chain = [T.RandomResizedCrop(16), T.RandomHorizontalFlip()]
    torch.manual_seed(123)
    loader = load(color_folder, chain, seed=None)
    assert loader.state_dict()["seed"] == 123
    assert_same(cloned(loader), cloned(load(color_folder, chain, seed=123)))
    torch.manual_seed(124)
    other = cloned(load(color_folder, chain, seed=None))
    assert not all(
        torch.equal(a, b) for (a, _), (b, _) in zip(other, cloned(load(color_folder, chain, seed=123)))
    )
    # An explicit seed ignores torch's.
    assert_same(cloned(load(color_folder, chain, seed=7)), cloned(load(color_folder, chain, seed=7)))


def test_resuming_a_loader_seeded_by_torch_says_how_to_match_the_seed(color_folder):
    torch.manual_seed(5)
    state = load(color_folder, [T.Resize((16, 16))], seed=None).state_dict()
    torch.manual_seed(6)
    with pytest.raises(conveyor.ConfigError) as info:
        load(color_folder, [T.Resize((16, 16))], seed=None).load_state_dict(state)
    assert str(info.value) == (
        "state was saved with seed 5, this loader has seed 6 (from torch.initial_seed(), which differs per "
        "process: pass seed=5 or call torch.manual_seed(5) before making the Loader)"
    )


def test_the_default_seed_without_torch_is_documented(monkeypatch):
    from conveyor import loader as loader_module

    monkeypatch.setattr(loader_module, "torch", None)
    assert loader_module._default_seed() == loader_module.DEFAULT_SEED == 0


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (torch.float16, "float16"),
        (torch.float32, "float32"),
        (torch.uint8, "uint8"),
        (torch.bfloat16, "bfloat16"),
    ],
)
def test_torch_dtypes_work_as_the_strings(color_folder, dtype, name):
    chain = [T.Resize((16, 16))]
    assert_same(cloned(load(color_folder, chain, dtype=dtype)), cloned(load(color_folder, chain, dtype=name)))
    assert next(iter(load(color_folder, chain, dtype=dtype)))[0].dtype == dtype


def test_other_torch_dtypes_are_refused(color_folder):
    with pytest.raises(conveyor.ConfigError) as info:
        load(color_folder, [T.Resize((16, 16))], dtype=torch.int32)
    assert str(info.value) == (
        "dtype must be one of uint8, float16, float32, bfloat16 (or torch's), got torch.int32"
    )


@pytest.mark.parametrize("batch_transforms", [None, T.MixUp(alpha=1.0, num_classes=3)])
def test_bfloat16_batches_are_the_float32_batches_rounded_as_torch_rounds(color_folder, batch_transforms):
    erasing = T.RandomErasing(p=0.5, value=[-1.5, 0.1, 300.7])  # Its fill is rounded like the pixels.
    chain = [T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD), erasing]
    f32 = cloned(load(color_folder, chain, batch_transforms=batch_transforms))
    bf16 = cloned(load(color_folder, chain, dtype=torch.bfloat16, batch_transforms=batch_transforms))
    assert bf16[0][0].dtype == torch.bfloat16
    if batch_transforms is None:
        assert_same([(x.bfloat16(), y) for x, y in f32], bf16)
    else:  # MixUp blends in bfloat16 arithmetic, rounding after each op as torch on bfloat16 tensors.
        for (x, y), (b, by) in zip(f32, bf16):
            assert torch.equal(y, by)
            # Four roundings at most apart: bfloat16 keeps 8 significant bits.
            torch.testing.assert_close(b.float(), x.bfloat16().float(), rtol=4 * 2**-8, atol=4 * 2**-8)


# --- passes: peeks and a second iter() ---------------------------------------------------------------


def test_a_peek_does_not_use_up_an_epoch(color_folder):
    chain = [T.Resize((16, 16))]
    epoch0 = cloned(load(color_folder, chain))
    loader = load(color_folder, chain)
    images, labels = next(iter(loader))
    assert torch.equal(images, epoch0[0][0])
    assert loader.epoch == 0
    assert_same(cloned(loader), epoch0)  # The whole of epoch 0, from its first batch.
    assert loader.epoch == 1


def test_a_checkpoint_after_one_step_resumes_after_it(color_folder):
    # A pass left after one batch leaves the epoch counter alone (a peek),
    # but the batch was handed out: state_dict() must not hand it out again.
    chain = [T.Resize((16, 16))]
    epoch0 = cloned(load(color_folder, chain))
    loader = load(color_folder, chain)
    for images, _labels in loader:
        assert torch.equal(images, epoch0[0][0])  # One training step ...
        break
    state = loader.state_dict()
    assert state == {
        "seed": 7,
        "epoch": 0,
        "position": 4,
        "batch": 1,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }
    resumed = load(color_folder, chain)
    resumed.load_state_dict(state)
    assert_same(cloned(resumed), epoch0[1:])  # ... then the rest of epoch 0, without repeating it.
    assert loader.epoch == 0 and len(cloned(loader)) == len(epoch0)  # The peek used up no epoch.


def test_a_pass_left_after_two_batches_counts_as_its_epoch(color_folder):
    chain = [T.Resize((16, 16))]
    reference = load(color_folder, chain)
    reference.set_epoch(1)
    epoch1 = cloned(reference)
    loader = load(color_folder, chain)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert loader.epoch == 1  # As a DataLoader's next iter() draws a new order.
    assert loader.state_dict() == {
        "seed": 7,
        "epoch": 0,
        "position": 8,
        "batch": 2,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }  # Resumable.
    assert_same(cloned(loader), epoch1)


def test_a_pass_ended_by_a_newer_iter_says_so(color_folder):
    loader = load(color_folder, [T.Resize((16, 16))])
    first = iter(loader)
    next(first)  # One batch: a peek, which the next iter() ends.
    second = iter(loader)
    next(second)
    with pytest.raises(conveyor.ConfigError) as info:
        next(first)
    assert str(info.value) == (
        "this pass over epoch 0 was ended after 1 batch(es) by a newer iter(loader): a newer pass runs "
        "beside this one only when a for statement drives it and it has handed out two batches; keep "
        "iterating one, or make a second Loader"
    )
    assert len(list(second)) == 7  # The new pass is whole: 8 batches.
    closed = iter(loader)
    next(closed)
    loader.close()
    with pytest.raises(conveyor.ConfigError, match="^the loader is closed$"):
        next(closed)


# --- channels_last, stats, progress, Normalize ------------------------------------------------------


def test_channels_last_is_a_zero_copy_view_of_the_hwc_buffer(color_folder):
    chain = [T.Resize((16, 12))]
    expected = cloned(load(color_folder, chain))
    loader = load(color_folder, chain, memory_format=torch.channels_last)
    got = []
    for images, labels in loader:
        assert images.shape[1:] == (3, 16, 12)
        assert images.stride() == (16 * 12 * 3, 1, 12 * 3, 3)
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert images.data_ptr() == loader._last_address  # The engine's buffer: no copy.
        got.append((images.clone(), labels.clone()))
    assert_same(got, expected)
    assert load(color_folder, chain, memory_format=torch.contiguous_format)._channels_last is False
    with pytest.raises(conveyor.ConfigError) as info:
        load(color_folder, chain, memory_format=torch.channels_last, layout="HWC")
    assert str(info.value) == (
        "memory_format=torch.channels_last gives N×C×H×W batches; it needs layout='CHW', got 'HWC'"
    )
    with pytest.raises(conveyor.ConfigError, match="^memory_format must be None, torch.contiguous_format or"):
        load(color_folder, chain, memory_format="channels_last")


def test_stats_include_images_per_second(color_folder):
    loader = load(color_folder, [T.Resize((16, 16))])
    list(loader)
    stats = loader.stats()
    assert stats["wall_seconds"] > 0
    assert stats["images_per_second"] == N / stats["wall_seconds"]


def test_progress_bar_leaves_a_summary_line_per_epoch(color_folder, capsys):
    loader = load(color_folder, [T.Resize((16, 16))], progress=True)
    list(loader)
    list(loader)
    err = capsys.readouterr().err
    lines = [
        line
        for line in err.replace("\r", "\n").splitlines()
        if line.startswith("epoch ") and "images/s" in line
    ]
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1"]
    assert all(line.split(": ")[1].startswith(f"{N} images in ") and "input stall" in line for line in lines)


def test_normalize_on_the_0_255_scale_warns_once():
    message = (
        "Normalize(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]): values > 1 look like the "
        "0-255 scale, but Normalize works on pixels scaled to [0, 1] (as after ToTensor); divide them by 255"
    )
    with pytest.warns(UserWarning) as record:
        T.Normalize([123.675, 116.28, 103.53], [58.395, 57.12, 57.375])
    assert [str(w.message) for w in record] == [message] and record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T.Normalize([123.675, 116.28, 103.53], [58.395, 57.12, 57.375])
        T.Normalize(MEAN, STD)


def test_collate_fn_gets_the_samples_and_its_result_is_the_batch(color_folder):
    from torch.utils.data import default_collate

    chain = [T.RandomResizedCrop(16), T.RandomHorizontalFlip()]
    expected = cloned(load(color_folder, chain))
    got = [(x.clone(), y.clone()) for x, y in load(color_folder, chain, collate_fn=default_collate)]
    assert_same(got, expected)

    seen = []

    def as_dict(samples):
        seen.append([(tuple(image.shape), int(label)) for image, label in samples])
        return {"image": torch.stack([image for image, _ in samples]), "label": [int(y) for _, y in samples]}

    batches = list(load(color_folder, chain, collate_fn=as_dict))
    assert len(batches) == len(expected) == 8 and len(seen) == 8
    for batch, (images, labels), samples in zip(batches, expected, seen):
        assert torch.equal(batch["image"], images) and batch["label"] == labels.tolist()
        assert samples == [((3, 16, 16), label) for label in labels.tolist()]


def test_collate_fn_runs_after_the_batch_functions_and_must_be_callable(color_folder):
    def double(images, labels):
        return images * 2, labels + 100

    batches = list(
        load(
            color_folder,
            [T.Resize((16, 16))],
            batch_transforms=[double],
            collate_fn=lambda s: [y for _, y in s],
        )
    )
    assert [int(y) for y in batches[0]] == [
        int(y) + 100 for y in cloned(load(color_folder, [T.Resize((16, 16))]))[0][1]
    ]
    with pytest.raises(conveyor.ConfigError, match="^collate_fn must be callable, got str$"):
        load(color_folder, [T.Resize((16, 16))], collate_fn="stack")
    # A batch function that drops labels: named, not a silently shorter list of samples.
    drop = [lambda x, y: (x, y[:2])]
    loader = load(color_folder, [T.Resize((16, 16))], batch_transforms=drop, collate_fn=len)
    with pytest.raises(conveyor.ConfigError) as info:
        next(iter(loader))
    assert str(info.value) == (
        "collate_fn: the batch has 4 images but 2 labels or targets (a batch_transforms function changed "
        "one of them)"
    )


def test_a_peek_inside_the_training_loop_runs_beside_it_and_changes_nothing_of_it(color_folder):
    loader = load(color_folder, [T.Resize((16, 16))])
    reference = load(color_folder, [T.Resize((16, 16))])
    expected, epoch1 = cloned(reference), cloned(reference)  # Epochs 0 and 1, uninterrupted.
    got, peeks, states = [], [], []
    for images, labels in loader:
        got.append((images.clone(), labels.clone()))
        if len(got) >= 2:
            peek_images, peek_labels = next(iter(loader))  # DataLoader lets this run beside the loop.
            peeks.append((peek_images.clone(), peek_labels.clone()))
            states.append(loader.state_dict()["position"])
    assert_same(got, expected)
    # Each peek is the first batch of a fresh pass over the next epoch.
    for peek in peeks:
        assert_same([peek], epoch1[:1])
    ends = np.cumsum([len(labels) for _, labels in expected]).tolist()
    assert states == ends[1:]  # The loop's positions after each of its batches from the second.
    assert loader.state_dict()["epoch"] == 1


def test_an_iterator_beside_a_for_loop_runs_whole_and_the_loop_goes_on(color_folder):
    loader = load(color_folder, [T.Resize((16, 16))])
    main, side = [], []
    for batch in loader:
        main.append(batch)
        if len(main) == 2:
            beside = iter(loader)  # Beside the for statement's iterator, which no variable holds.
            side = list(beside)
    assert len(main) == 8 and len(side) == 8


def test_an_iterator_kept_in_a_variable_is_ended_by_the_next_pass_which_runs_as_the_epoch(color_folder):
    loader = load(color_folder, [T.Resize((16, 16))])
    kept = iter(loader)
    next(kept), next(kept)  # A sanity check left alive: epoch 0 counts as run.
    epochs = []
    for _ in range(2):
        epochs.append(cloned(loader))  # Each loop is the epoch, with its state_dict.
        assert loader.state_dict()["position"] == 0
    reference = load(color_folder, [T.Resize((16, 16))])
    cloned(reference)
    assert_same(epochs[0], cloned(reference))  # Epoch 1.
    assert_same(epochs[1], cloned(reference))  # Epoch 2.
    assert loader.epoch == 3
    with pytest.raises(conveyor.ConfigError, match="was ended after 2 batch"):
        next(kept)


def test_torchvisions_batch_mixes_are_pointed_to_batch_transforms():
    from conveyor.transforms import from_torchvision

    with pytest.raises(conveyor.ConfigError) as info:
        from_torchvision([fake("RandomHorizontalFlip", p=0.5), fake("CutMix", num_classes=3)])
    assert str(info.value) == (
        "transforms[1]: CutMix (torchvision.transforms.transforms.CutMix) mixes whole batches: give "
        "conveyor's T.CutMix (or T.RandomChoice of T.MixUp and T.CutMix) as the Loader's batch_transforms="
    )
