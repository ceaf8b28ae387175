"""The extension's edges: which memory each batch tensor holds, the Python
allocator hook, destruction of the bound Loader, and the option/stat classes."""

from __future__ import annotations

import gc
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

import conveyor
from conftest import run_python
from conveyor import _conveyor
from conveyor.errors import InternalError

# The keys docs/api.md documents for Loader.stats().
STATS_KEYS = {
    "epoch",
    "images_per_second",
    "samples_read",
    "samples_processed",
    "batches_delivered",
    "skipped",
    "read_seconds",
    "process_seconds",
    "read_cpu_seconds",
    "read_lock_wait_seconds",
    "read_queue_wait_seconds",
    "process_cpu_seconds",
    "wait_seconds",
    "wall_seconds",
    "batches_ready",
    "batches_in_flight",
    "buffers_allocated",
    "buffers_leased",
    "input_stall",
    "threads",
    "io_threads",
    "prefetch",
    "threads_running",
    "io_threads_running",
    "threads_auto",
    "io_threads_auto",
    "prefetch_auto",
    "autotune_reason",
    "autotune_changes",
    "demand_per_second",
    "read_latency_seconds",
    "process_time_seconds",
    "latency_spread_seconds",
    "usable_cores",
    "usable_cores_source",
    "other_cores",
    "memory_budget",
}


class RawDataset:
    """``count`` raw 4×4 uint8 samples; sample i is filled with i % 256, its label is 1000 + i."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[bytes, int]:
        return bytes([index % 256]) * 16, 1000 + index


def raw_loader(count: int, batch_size: int, allocator: Any = None) -> Any:
    options = _conveyor.LoaderOptions()
    options.batch_size = batch_size
    options.threads = 2
    options.io_threads = 2
    return _conveyor.Loader(
        _conveyor.PythonSource(RawDataset(count)),
        _conveyor.RawTensorTransform(4, 4),
        options,
        **({"allocator": allocator} if allocator is not None else {}),
    )


# --- labels own their memory -----------------------------------------------------------


class JpegDataset:
    def __init__(self, count: int) -> None:
        buffer = io.BytesIO()
        Image.fromarray(np.full((16, 16, 3), 90, dtype=np.uint8)).save(buffer, format="JPEG")
        self.jpeg = buffer.getvalue()
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[bytes, int]:
        return self.jpeg, 7 * index


def test_held_labels_do_not_hold_the_image_buffers() -> None:
    prefetch = 2
    loader = conveyor.Loader(
        conveyor.sources.PythonSource(JpegDataset(100)),
        [conveyor.transforms.Resize((8, 8))],
        batch_size=2,
        prefetch=prefetch,
        threads=2,
        io_threads=2,
    )
    all_labels = []
    leased = []
    for _images, labels in loader:
        all_labels.append(labels)
        leased.append(loader.stats()["buffers_leased"])
    loader.close()
    assert len(all_labels) == 50
    assert max(leased) <= prefetch + 1, leased
    assert [int(v) for labels in all_labels for v in labels] == [7 * i for i in range(100)]
    assert all(str(labels.dtype).endswith("int64") and tuple(labels.shape) == (2,) for labels in all_labels)


def test_labels_and_boxes_are_arrays_of_their_own() -> None:
    loader = raw_loader(4, batch_size=4)
    loader.start_epoch(0)
    batch = loader.next(60)
    labels = _conveyor.Batch.labels(batch)
    counts, boxes, categories = _conveyor.Batch.boxes(batch)
    assert labels.tolist() == [1000, 1001, 1002, 1003]
    assert counts.tolist() == [0, 0, 0, 0] and boxes.shape == (0, 4) and categories.shape == (0,)
    assert labels.ctypes.data != batch.address
    del batch
    gc.collect()
    assert loader.stats().buffers_leased == 0  # The labels alone hold no buffer.
    assert labels.tolist() == [1000, 1001, 1002, 1003]
    loader.close()


# --- the bound option and stat classes --------------------------------------------------


def test_loader_options_defaults_are_the_engines() -> None:
    options = _conveyor.LoaderOptions()
    assert (options.batch_size, options.shuffle, options.shuffle_buffer, options.seed) == (1, False, 0, 0)
    assert (options.drop_last, options.threads, options.io_threads, options.prefetch) == (False, 0, 0, 0)
    assert options.memory_budget == 0
    assert (options.on_error, options.rank, options.world_size) == (_conveyor.OnError.RAISE, 0, 1)


def test_stats_has_the_documented_keys() -> None:
    source = conveyor.sources.PythonSource(JpegDataset(6))
    loader = conveyor.Loader(source, [conveyor.transforms.Resize((8, 8))])
    assert len(list(loader)) == 6
    stats = loader.stats()
    loader.close()
    assert set(stats) == STATS_KEYS
    assert (stats["samples_read"], stats["samples_processed"], stats["batches_delivered"]) == (6, 6, 6)
    assert all(isinstance(stats[k], float) for k in ("read_seconds", "wall_seconds", "input_stall"))


def test_skip_option_reaches_the_engine() -> None:
    class Failing(RawDataset):
        def __getitem__(self, index: int) -> tuple[bytes, int]:
            if index == 1:
                raise KeyError("gone")
            return super().__getitem__(index)

    options = _conveyor.LoaderOptions()
    options.batch_size = 3
    options.on_error = _conveyor.OnError.SKIP
    loader = _conveyor.Loader(_conveyor.PythonSource(Failing(3)), _conveyor.RawTensorTransform(4, 4), options)
    loader.start_epoch(0)
    batch = loader.next(60)
    assert _conveyor.Batch.labels(batch).tolist() == [1000, 1002]
    assert [s.key for s in loader.skipped()] == ["Failing[1]"]
    loader.close()


# --- destruction of the bound Loader ------------------------------------------------------


def test_deleting_the_bound_loader_with_reads_in_flight_does_not_deadlock() -> None:
    # Without the Python wrapper nothing closes the engine before Python
    # destroys it; the destructor must not join the io threads (waiting for the
    # GIL inside __getitem__) while holding the GIL.
    result = run_python(
        """
        import threading, time
        from conveyor import _conveyor

        reading = threading.Event()

        class Slow:
            def __len__(self):
                return 64

            def __getitem__(self, index):
                reading.set()
                time.sleep(0.2)
                return bytes(16), index

        options = _conveyor.LoaderOptions()
        options.batch_size = 4
        options.io_threads = 4
        options.threads = 1
        loader = _conveyor.Loader(_conveyor.PythonSource(Slow()), _conveyor.RawTensorTransform(4, 4), options)
        loader.start_epoch(0)
        assert reading.wait(60)
        del loader
        print("deleted")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "deleted\n"


# --- the allocator hook ------------------------------------------------------------------------


class FakeAllocator:
    """Buffers from numpy arrays, 64-byte aligned; records every call."""

    def __init__(self) -> None:
        self.arrays: dict[int, tuple[np.ndarray, int]] = {}
        self.allocated: list[int] = []
        self.freed: list[int] = []

    def allocate(self, nbytes: int) -> int:
        array = np.zeros(nbytes + 64, dtype=np.uint8)
        address = array.ctypes.data + (-array.ctypes.data) % 64
        self.arrays[address] = (array, nbytes)
        self.allocated.append(address)
        return address

    def deallocate(self, address: int, nbytes: int) -> None:
        assert self.arrays.pop(address)[1] == nbytes
        self.freed.append(address)


def test_allocator_buffers_hold_the_batches_and_are_freed_once() -> None:
    allocator = FakeAllocator()
    loader = raw_loader(40, batch_size=4, allocator=(allocator.allocate, allocator.deallocate))
    loader.start_epoch(0)
    batches = 0
    while (batch := loader.next(60)) is not None:
        images = np.from_dlpack(_DLPack(_conveyor.Batch.images(batch)))
        assert images.ctypes.data == batch.address
        array, nbytes = allocator.arrays[batch.address]
        assert nbytes == 4 * 16
        assert images.ravel().tolist() == [(4 * batch.index + k) % 256 for k in range(4) for _ in range(16)]
        batches += 1
        del images, batch
    assert batches == 10
    loader.close()
    assert allocator.freed == []  # The pool keeps its buffers until it is gone.
    del loader
    gc.collect()
    assert sorted(allocator.freed) == sorted(allocator.allocated)
    assert len(allocator.allocated) >= 1 and allocator.arrays == {}


def test_a_raising_deallocate_goes_to_the_unraisable_hook() -> None:
    result = run_python(
        """
        import gc, sys
        import numpy as np
        from conveyor import _conveyor

        seen = []
        sys.unraisablehook = lambda u: seen.append((type(u.exc_value).__name__, str(u.exc_value), u.object))
        arrays = {}

        def allocate(nbytes):
            array = np.zeros(nbytes, dtype=np.uint8)
            arrays[array.ctypes.data] = array
            return array.ctypes.data

        def deallocate(address, nbytes):
            raise ValueError(f"cannot free {nbytes} bytes")

        class Raw:
            def __len__(self):
                return 8

            def __getitem__(self, index):
                return bytes(16), index

        options = _conveyor.LoaderOptions()
        options.batch_size = 4
        loader = _conveyor.Loader(_conveyor.PythonSource(Raw()), _conveyor.RawTensorTransform(4, 4), options,
                                  allocator=(allocate, deallocate))
        loader.start_epoch(0)
        while loader.next(60) is not None:
            pass
        del loader
        gc.collect()
        assert len(seen) >= 1, seen
        assert all(s == ("ValueError", "cannot free 64 bytes", deallocate) for s in seen), seen
        print("survived")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "survived\n"


@pytest.mark.parametrize(
    ("allocate", "cause"),
    [
        (lambda nbytes: 1 // 0, "raised ZeroDivisionError: integer division or modulo by zero"),
        (lambda nbytes: "0x1000", "returned '0x1000', not a non-zero int address"),
        (lambda nbytes: 0, "returned 0, not a non-zero int address"),
        (lambda nbytes: -8, "returned -8, not a non-zero int address"),
    ],
)
def test_a_failing_allocate_is_an_error_from_next(allocate: Any, cause: str) -> None:
    loader = raw_loader(8, batch_size=4, allocator=(allocate, lambda address, nbytes: None))
    loader.start_epoch(0)
    with pytest.raises(InternalError) as error:
        loader.next(60)
    assert str(error.value) == f"allocator: allocate(64) {cause}"
    loader.close()


@pytest.mark.parametrize("timeout", [1e15, float("inf"), float("nan"), -1.0])
def test_a_huge_or_non_finite_timeout_waits_without_limit(timeout: float) -> None:
    loader = raw_loader(8, batch_size=4)
    loader.start_epoch(0)
    batch = loader.next(timeout)
    assert batch is not None and batch is not False
    assert batch.size == 4
    loader.close()


class BadRepr:
    def __repr__(self) -> str:
        raise ValueError("no repr")


def test_an_allocate_result_whose_repr_raises_is_named_as_returned() -> None:
    loader = raw_loader(8, batch_size=4, allocator=(lambda nbytes: BadRepr(), lambda address, nbytes: None))
    loader.start_epoch(0)
    with pytest.raises(InternalError) as error:
        loader.next(60)
    assert str(error.value) == (
        "allocator: allocate(64) returned a BadRepr (its repr raised ValueError: no repr),"
        " not a non-zero int address"
    )
    loader.close()


def test_an_allocator_that_is_not_a_pair_is_a_config_error() -> None:
    with pytest.raises(conveyor.errors.ConfigError, match=r"^allocator must be a pair \(allocate"):
        raw_loader(8, batch_size=4, allocator=lambda nbytes: 0)


class _DLPack:
    # numpy.from_dlpack takes objects with __dlpack__, not bare capsules.
    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)
