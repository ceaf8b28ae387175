"""The Loader's Python API: zero copy, epochs, determinism, resume, distributed,
errors and shutdown."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import conveyor
from conftest import index_of
from conveyor import transforms as T
from conveyor.sources import ImageFolder

N = 30  # Samples in color_folder.


def make_loader(root, **kwargs) -> conveyor.Loader:
    options = dict(batch_size=4, shuffle=True, seed=7, dtype="uint8", layout="HWC")
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root), [T.Resize((16, 16))], **options)


def sample_order(batches) -> list[int]:
    return [index_of(images[i, 8, 8].numpy(), N) for images, _ in batches for i in range(len(images))]


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_batches_are_torch_tensors_with_labels(color_folder):
    loader = make_loader(color_folder, shuffle=False, dtype="float32", layout="CHW")
    assert len(loader) == 8
    batches = list(loader)
    assert len(batches) == 8
    images, labels = batches[0]
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.float32
    assert labels.dtype == torch.int64
    assert batches[-1][0].shape[0] == 2  # 30 = 7 × 4 + 2: the partial batch is kept.
    assert torch.cat([b[1] for b in batches]).tolist() == [i // 10 for i in range(N)]


def test_zero_copy_and_buffer_reuse(color_folder):
    loader = make_loader(color_folder, prefetch=2)
    addresses = set()
    for images, _labels in loader:
        assert images.data_ptr() == loader._last_address
        addresses.add(images.data_ptr())
    # `prefetch` batches in flight, plus the loop's batch and, while the next
    # one is handed over, the previous one still bound to the loop variables.
    assert loader.stats()["buffers_allocated"] == 4
    assert len(addresses) == 4
    held = list(make_loader(color_folder, prefetch=2))
    assert len({images.data_ptr() for images, _ in held}) == len(held)  # Held batches are never reused.


def test_a_held_batch_keeps_its_memory(color_folder):
    loader = make_loader(color_folder, shuffle=False)
    it = iter(loader)
    first, _ = next(it)
    snapshot = first.clone()
    rest = [b for b, _ in it]
    assert torch.equal(first, snapshot)
    assert all(b.data_ptr() != first.data_ptr() for b in rest)


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("prefetch", [1, 4])
def test_same_seed_same_batches_for_any_threads(color_folder, threads, prefetch):
    reference = [(x.clone(), y.clone()) for x, y in make_loader(color_folder, threads=1, prefetch=1)]
    loader = make_loader(color_folder, threads=threads, io_threads=threads * 3, prefetch=prefetch)
    got = list(loader)
    assert len(got) == len(reference)
    for (a, la), (b, lb) in zip(reference, got):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_epochs_advance_and_shuffle_is_a_permutation(color_folder):
    loader = make_loader(color_folder)
    first, second = sample_order(loader), sample_order(loader)
    assert sorted(first) == list(range(N)) and sorted(second) == list(range(N))
    assert first != second
    loader.set_epoch(0)
    assert sample_order(loader) == first
    assert sample_order(make_loader(color_folder, seed=8)) != first


def test_labels_match_image_folder_classes(color_folder):
    for images, labels in make_loader(color_folder):
        for i in range(len(images)):
            assert labels[i].item() == index_of(images[i, 8, 8].numpy(), N) // 10


def test_drop_last(color_folder):
    loader = make_loader(color_folder, drop_last=True)
    assert len(loader) == 7
    assert [len(images) for images, _ in loader] == [4] * 7


@pytest.mark.parametrize("threads_after", [1, 3])
def test_resume_mid_epoch_is_bit_identical(color_folder, threads_after):
    uninterrupted = make_loader(color_folder, threads=2)
    uninterrupted.set_epoch(3)
    expected = [(x.clone(), y.clone()) for x, y in uninterrupted]

    loader = make_loader(color_folder, threads=2)
    loader.set_epoch(3)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    assert state == GOOD_STATE
    del it, loader

    resumed = make_loader(color_folder, threads=threads_after, prefetch=3)
    resumed.load_state_dict(state)
    got = list(resumed)
    assert len(got) == len(expected) - 3
    for (a, la), (b, lb) in zip(expected[3:], got):
        assert torch.equal(a, b) and torch.equal(la, lb)
    assert resumed.state_dict()["epoch"] == 4


def test_distributed_shares_are_disjoint_and_equal(color_folder):
    shares = []
    for rank in range(4):
        loader = make_loader(color_folder, rank=rank, world_size=4)
        shares.append(sample_order(loader))
    assert [len(s) for s in shares] == [8, 8, 8, 8]  # 30 padded to 32 by wrapping around.
    everything = sorted(sum(shares, []))
    assert sorted(set(everything)) == list(range(N))
    assert len(everything) - len(set(everything)) == 2


def test_break_then_many_epochs_leaves_no_threads(color_folder):
    loader = make_loader(color_folder, threads=2, io_threads=4)
    list(loader)
    baseline = native_threads()
    for _ in range(200):
        for _batch in loader:
            break
    assert native_threads() == baseline
    loader.close()
    del loader


def test_deleting_the_loader_joins_its_threads(color_folder):
    before = native_threads()
    loader = make_loader(color_folder, threads=2, io_threads=8)
    next(iter(loader))
    assert native_threads() == before + 10
    del loader
    assert native_threads() == before


def test_decode_error_names_the_file_in_the_consumer_thread(tmp_path, color_folder):
    import shutil

    root = tmp_path / "data"
    shutil.copytree(color_folder, root)
    bad = root / "dog" / "004.jpg"
    bad.write_bytes(bad.read_bytes()[:200])  # Truncated.
    loader = make_loader(root, shuffle=False)
    delivered = 0
    with pytest.raises(conveyor.DecodeError) as info:
        for _ in loader:
            delivered += 1
    assert str(info.value).startswith(f"{bad}: ")
    assert info.value.key == str(bad)
    assert delivered == 3  # Sample 14 is in batch 3; the batches before it arrived.
    # The loader stays usable: the next epoch runs, and fails at the same file.
    with pytest.raises(conveyor.DecodeError, match=str(bad)):
        list(loader)


def test_skip_policy_counts_and_lists(tmp_path, color_folder):
    import shutil

    root = tmp_path / "data"
    shutil.copytree(color_folder, root)
    bad = root / "emu" / "002.jpg"
    bad.write_bytes(b"not an image at all")
    loader = make_loader(root, shuffle=False, on_error="skip")
    sizes = [len(images) for images, _ in loader]
    assert sizes == [4] * 7 + [1]
    assert loader.stats()["skipped"] == 1
    assert [key for key, _ in loader.skipped()] == [str(bad)]


def test_numpy_batches_without_torch(color_folder, monkeypatch):
    import conveyor.loader

    monkeypatch.setattr(conveyor.loader, "torch", None)
    images, labels = next(iter(make_loader(color_folder, shuffle=False)))
    assert isinstance(images, np.ndarray) and images.shape == (4, 16, 16, 3)
    assert labels.tolist() == [0, 0, 0, 0]


def test_stats(color_folder):
    loader = make_loader(color_folder)
    list(loader)
    stats = loader.stats()
    assert stats["samples_processed"] == N and stats["samples_read"] == N
    assert stats["batches_delivered"] == 8
    assert 0.0 <= stats["input_stall"] <= 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"batch_size": 2.5}, "batch_size must be an int, got float"),
        ({"prefetch": 0}, "prefetch must be >= 1, got 0"),
        ({"threads": 0}, "threads must be >= 1, got 0"),
        ({"threads": "max"}, "threads must be 'auto' or an int >= 1, got 'max'"),
        ({"io_threads": "AUTO"}, "io_threads must be 'auto' or an int >= 1, got 'AUTO'"),
        ({"prefetch": 1.5}, "prefetch must be an int, got float 1.5"),
        ({"world_size": 2}, "world_size=2 without rank: pass rank= too (no torch.distributed process group"),
        ({"rank": 1}, "rank=1 without world_size: pass world_size= too (no torch.distributed process group"),
        ({"memory_budget": 0}, "memory_budget must be >= 1, got 0"),
        ({"memory_budget": 100}, "memory_budget 100 bytes cannot hold 2 batches of"),
        ({"on_error": "ignore"}, "on_error must be 'raise' or 'skip', got 'ignore'"),
        ({"dtype": "int32"}, "dtype must be one of uint8, float16, float32, bfloat16, got 'int32'"),
        ({"layout": "NCHW"}, "layout must be 'CHW' or 'HWC', got 'NCHW'"),
        ({"rank": 2, "world_size": 2}, "rank must be < world_size, got rank 2 of 2"),
        ({"device": "cuda"}, "device='cuda' but CUDA is not available"),
    ],
)
def test_invalid_arguments_raise_config_error(color_folder, kwargs, message):
    with pytest.raises(conveyor.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_loader(color_folder, **kwargs)
    assert issubclass(conveyor.ConfigError, ValueError)


def test_source_must_be_a_conveyor_source():
    with pytest.raises(conveyor.ConfigError, match="PythonSource"):
        conveyor.Loader([b"bytes"], batch_size=1)


def test_context_manager_closes(color_folder):
    before = native_threads()
    with make_loader(color_folder, threads=2, io_threads=3) as loader:
        images, _ = next(iter(loader))
    assert native_threads() == before  # close() joined the engine's threads...
    assert images.shape == (4, 16, 16, 3)  # ...and batches handed out stay valid.
    with pytest.raises(conveyor.ConfigError, match="closed"):
        iter(loader)


def test_progress_bar_reports_images_and_stall(color_folder, capsys):
    loader = make_loader(color_folder, progress=True)
    assert sum(len(images) for images, _ in loader) == N
    err = capsys.readouterr().err
    assert "epoch 0" in err and "img" in err and "stall" in err


def test_resume_state_on_a_device_path(color_folder):
    loader = make_loader(color_folder, device="meta")
    it = iter(loader)
    for _ in range(2):
        images, _ = next(it)
    assert images.device.type == "meta"
    assert loader.state_dict() == {
        "seed": 7,
        "epoch": 0,
        "position": 8,
        "batch": 2,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }


# --- numbers, flags and transforms are checked at Loader() ------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seed": 2**64}, "seed must be <= 18446744073709551615, got 18446744073709551616"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"seed": 7.0}, "seed must be an int, got float 7.0"),
        ({"prefetch": 2**31}, "prefetch must be <= 2147483647, got 2147483648"),
        ({"threads": 2**31}, "threads must be <= 2147483647, got 2147483648"),
        ({"io_threads": 2**40}, "io_threads must be <= 2147483647, got 1099511627776"),
        ({"io_threads": True}, "io_threads must be an int, got bool True"),
        ({"max_pixels": 2**63}, "max_pixels must be <= 9223372036854775807, got 9223372036854775808"),
        ({"batch_size": 2**63}, "batch_size must be <= 9223372036854775807, got 9223372036854775808"),
        ({"world_size": 2**63}, "world_size must be <= 9223372036854775807, got 9223372036854775808"),
        ({"shuffle": "no"}, "shuffle must be True or False, got 'no'"),
        ({"drop_last": 1}, "drop_last must be True or False, got 1"),
        ({"progress": "yes"}, "progress must be True or False, got 'yes'"),
        ({"pin_memory": 0}, "pin_memory must be None, True or False, got 0"),
    ],
)
def test_out_of_range_numbers_and_non_bools_raise_config_error(color_folder, kwargs, message):
    with pytest.raises(conveyor.ConfigError) as info:
        make_loader(color_folder, **kwargs)
    assert str(info.value) == message


def test_numpy_integers_and_bools_are_accepted(color_folder):
    reference = [(x.clone(), y.clone()) for x, y in make_loader(color_folder, threads=1)]
    loader = make_loader(
        color_folder,
        batch_size=np.int64(4),
        seed=np.uint64(7),
        prefetch=np.int32(2),
        threads=np.int16(1),
        io_threads=np.int64(3),
        max_pixels=np.int64(10**8),
        shuffle=np.True_,
        drop_last=np.False_,
        rank=np.int64(0),
        world_size=np.int8(1),
    )
    assert loader.batch_size == 4 and type(loader.batch_size) is int
    got = list(loader)
    assert len(got) == len(reference) == 8
    for (a, la), (b, lb) in zip(reference, got):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_a_single_transform_needs_no_list(color_folder):
    single = conveyor.Loader(ImageFolder(color_folder), T.Resize((16, 16)), batch_size=4, dtype="uint8")
    listed = conveyor.Loader(ImageFolder(color_folder), [T.Resize((16, 16))], batch_size=4, dtype="uint8")
    single, listed = list(single), list(listed)
    assert len(single) == len(listed) == 8
    for (a, la), (b, lb) in zip(single, listed):
        assert torch.equal(a, b) and torch.equal(la, lb)


@pytest.mark.parametrize(
    ("transforms", "message"),
    [
        (
            [T.Resize((16, 16)), "crop"],
            "transforms[1]: builtins.str is not a conveyor transform; use conveyor.transforms",
        ),
        (5, "transforms: builtins.int is not a conveyor transform or a list of them"),
        ("Resize", "transforms: builtins.str is not a conveyor transform or a list of them"),
    ],
)
def test_non_transforms_name_their_position_and_type(color_folder, transforms, message):
    with pytest.raises(conveyor.ConfigError) as info:
        conveyor.Loader(ImageFolder(color_folder), transforms, batch_size=4)
    assert str(info.value).startswith(message)


def test_non_transform_for_a_raw_pixel_source_names_its_position(tmp_path):
    from test_sources import write_mnist

    write_mnist(tmp_path, "train", 4)
    with pytest.raises(conveyor.ConfigError) as info:
        conveyor.Loader(conveyor.sources.MNIST(tmp_path), [T.Normalize([0.5], [0.5]), None])
    assert str(info.value).startswith("transforms[1]: builtins.NoneType is not a conveyor transform")


# --- load_state_dict checks its input ----------------------------------------------------------

GOOD_STATE = {
    "seed": 7,
    "epoch": 3,
    "position": 12,
    "batch": 3,
    "world_size": 1,
    "segment_start": 0,
    "samples": 30,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"epoch": -1}, "state['epoch'] must be >= 0, got -1"),
        ({"epoch": 2**63 - 1}, "state['epoch'] must be <= 9223372036854775806, got 9223372036854775807"),
        ({"epoch": 3.0}, "state['epoch'] must be an int, got float 3.0"),
        ({"position": "12"}, "state['position'] must be an int, got str '12'"),
        ({"position": -1}, "state['position'] must be >= 0, got -1"),
        ({"position": 31}, "state['position'] must be <= 30, got 31"),
        ({"batch": 10**6}, "state['batch'] must be <= 8, got 1000000"),
        ({"batch": -2}, "state['batch'] must be >= 0, got -2"),
        ({"batch": True}, "state['batch'] must be an int, got bool True"),
        (
            {"batch": 4},
            "state['batch'] = 4 batches of 4 need more than position 12 of the epoch: was it saved with a "
            "smaller batch_size? Load it into a loader with that batch_size",
        ),
        (
            {"samples": 37},
            "state was saved over 37 samples per epoch, this loader's source has 30: its positions would "
            "skip or repeat samples. Resume over the same data, or start the next epoch without "
            "load_state_dict (set_epoch(state['epoch'] + 1))",
        ),
        ({"samples": 30.0}, "state['samples'] must be an int, got float 30.0"),
        ({"seed": 8}, "state was saved with seed 8, this loader has seed 7"),
        ({"seed": None}, "state['seed'] must be an int, got NoneType None"),
    ],
)
def test_load_state_dict_rejects_bad_values_naming_the_key(color_folder, change, message):
    loader = make_loader(color_folder)
    with pytest.raises(conveyor.ConfigError) as info:
        loader.load_state_dict({**GOOD_STATE, **change})
    assert str(info.value) == message
    assert loader.state_dict() == {
        "seed": 7,
        "epoch": 0,
        "position": 0,
        "batch": 0,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }  # Unchanged.


def test_load_state_dict_needs_every_key(color_folder):
    loader = make_loader(color_folder)
    with pytest.raises(conveyor.ConfigError) as info:
        loader.load_state_dict({"seed": 7, "epoch": 3, "position": 12})
    assert str(info.value) == "state has no 'batch': it must come from Loader.state_dict()"
    with pytest.raises(conveyor.ConfigError) as info:
        loader.load_state_dict([7, 3, 12, 3])
    assert str(info.value) == "state must be a dict from Loader.state_dict(), got list"


def test_load_state_dict_accepts_numpy_ints_and_the_end_of_an_epoch(color_folder):
    loader = make_loader(color_folder)
    loader.load_state_dict({k: np.int64(v) for k, v in GOOD_STATE.items()})
    assert loader.state_dict() == GOOD_STATE
    assert all(type(v) is int for v in loader.state_dict().values())
    assert len(list(loader)) == 5
    loader.load_state_dict({**GOOD_STATE, "position": 30, "batch": 8})
    assert len(loader) == 0 and list(loader) == []


def test_a_state_from_before_global_positions_still_loads(color_folder):
    # Dicts saved by earlier versions have no world_size (their position was this
    # rank's) and no samples (not checked).
    loader = make_loader(color_folder)
    loader.load_state_dict({"seed": 7, "epoch": 3, "position": 12, "batch": 3})
    assert loader.state_dict() == GOOD_STATE


# --- resume survives set_epoch; len() and the bar count the resumed epoch ----------------------


def expected_epoch(root, epoch: int, **kwargs) -> list:
    loader = make_loader(root, **kwargs)
    loader.set_epoch(epoch)
    return [(x.clone(), y.clone()) for x, y in loader]


def test_set_epoch_with_the_loaded_epoch_keeps_the_position(color_folder):
    expected = expected_epoch(color_folder, 3)
    loader = make_loader(color_folder)
    loader.load_state_dict(GOOD_STATE)
    loader.set_epoch(3)  # As a DistributedSampler user does at the top of every epoch.
    assert loader.state_dict() == GOOD_STATE
    assert len(loader) == 5
    got = list(loader)
    assert len(got) == 5
    for (a, la), (b, lb) in zip(expected[3:], got):
        assert torch.equal(a, b) and torch.equal(la, lb)
    loader.set_epoch(4)
    assert len(loader) == 8 and len(list(loader)) == 8


def test_set_epoch_with_another_epoch_clears_the_loaded_position(color_folder):
    expected = expected_epoch(color_folder, 2)
    loader = make_loader(color_folder)
    loader.load_state_dict(GOOD_STATE)
    loader.set_epoch(2)
    assert loader.state_dict() == {
        "seed": 7,
        "epoch": 2,
        "position": 0,
        "batch": 0,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }
    assert len(loader) == 8
    got = list(loader)
    assert len(got) == 8
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(expected, got))
    loader.set_epoch(3)  # The loaded position is gone: epoch 3 runs whole.
    assert len(list(loader)) == 8


def test_set_epoch_during_a_pass_leaves_the_pass_and_its_state_alone(color_folder):
    loader = make_loader(color_folder)  # 8 batches of 4.
    for step, _ in enumerate(loader):
        if step == 2:
            loader.set_epoch(0)  # The epoch under way, set again (a habit of some loops).
        if step == 4:
            break
    # A checkpoint now resumes after the 5 batches handed out.
    assert loader.state_dict() == {
        "seed": 7,
        "epoch": 0,
        "position": 20,
        "batch": 5,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }
    assert loader.epoch == 0  # As set: the next iter() runs epoch 0 from its start.
    loader.set_epoch(1)  # No pass under way: the state is epoch 1's start.
    assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["position"] == 0


@pytest.mark.parametrize(("drop_last", "resumed", "full"), [(False, 5, 8), (True, 4, 7)])
def test_len_counts_the_batches_of_the_resumed_epoch(color_folder, drop_last, resumed, full):
    loader = make_loader(color_folder, drop_last=drop_last)
    assert len(loader) == full
    loader.load_state_dict(GOOD_STATE)
    assert len(loader) == resumed
    counted = 0
    for _ in loader:
        counted += 1
        assert len(loader) == resumed  # Also while the resumed epoch runs.
    assert counted == resumed
    assert len(loader) == full
    assert len(list(loader)) == full


class FakeBar:
    bars: list[FakeBar] = []

    def __init__(self, *, total, initial=0, **kwargs):
        self.total, self.initial, self.n, self.closed = total, initial, initial, False
        FakeBar.bars.append(self)

    def update(self, n):
        self.n += n

    def set_postfix_str(self, text, refresh=True):
        pass

    def close(self):
        self.closed = True

    @staticmethod
    def write(line, file=None):
        pass


def test_progress_bar_of_a_resumed_epoch_starts_at_the_position(color_folder, monkeypatch):
    import tqdm.auto

    monkeypatch.setattr(tqdm.auto, "tqdm", FakeBar)
    FakeBar.bars = []
    loader = make_loader(color_folder, progress=True)
    loader.load_state_dict(GOOD_STATE)
    loader.set_epoch(3)
    list(loader)
    list(loader)
    resumed, whole = FakeBar.bars
    assert (resumed.total, resumed.initial, resumed.n, resumed.closed) == (30, 12, 30, True)
    assert (whole.total, whole.initial, whole.n, whole.closed) == (30, 0, 30, True)
