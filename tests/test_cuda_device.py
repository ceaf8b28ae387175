"""The CUDA hand-over on a real GPU (skipped without one): what
test_cuda_path.py asserts with a fake device, the real device must agree
with — exact batches, pinned buffers, copies on a side stream that overlap
the consumer's work, no synchronising call per step, device memory flat over
1 000 steps. (The batches before a bad sample and then its error:
test_cuda_path.py runs that test on the fake and on the real device.)

``make gpu-check`` runs this file on a lent GPU machine (bench/gpu_check.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import conveyor
import conveyor._device
from conveyor import transforms as T
from conveyor.sources import ImageFolder

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def make_loader(root: Any, **kwargs: Any) -> conveyor.Loader:
    kwargs.setdefault("transforms", [T.RandomResizedCrop(24), T.RandomHorizontalFlip()])
    return conveyor.Loader(ImageFolder(root), batch_size=4, shuffle=True, seed=3, **kwargs)


def on_host(batches: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.cpu(), y.cpu()) for x, y in batches]


def sleep_on_gpu(milliseconds: float) -> None:
    """Queues a kernel that spins for about ``milliseconds`` on the current stream."""
    torch.cuda._sleep(int(milliseconds * _cycles_per_millisecond()))


_CYCLES: list[float] = []


def _cycles_per_millisecond() -> float:
    if not _CYCLES:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        _CYCLES.append(10_000_000 / start.elapsed_time(end))
    return _CYCLES[0]


class RecordingCuda(conveyor._device.TorchCuda):
    """TorchCuda that times each batch's copies with events on the side stream
    and records whether each host tensor it copies is page-locked."""

    def __init__(self, device: Any) -> None:
        super().__init__(device)
        self.copy_starts: list[Any] = []
        self.copy_ends: list[Any] = []
        self.pinned: list[bool] = []
        self._started = False

    def copy(self, tensor: Any, stream: Any) -> Any:
        if not self._started:  # The first copy of a batch: the images.
            start = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            self.copy_starts.append(start)
            self._started = True
        self.pinned.append(tensor.is_pinned())
        return super().copy(tensor, stream)

    def record_event(self, stream: Any) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        self.copy_ends.append(event)
        self._started = False
        return event


@pytest.fixture
def recording_cuda(monkeypatch: pytest.MonkeyPatch) -> list[RecordingCuda]:
    made: list[RecordingCuda] = []

    def make(device: Any) -> RecordingCuda:
        made.append(RecordingCuda(device))
        return made[-1]

    monkeypatch.setattr(conveyor._device, "TorchCuda", make)
    return made


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"dtype": "uint8"},
        {"dtype": "float16", "memory_format": torch.channels_last},
        {"transforms": [T.Resize(20)]},  # Variable size: a list of tensors per batch.
    ],
    ids=["float32", "uint8", "float16-channels-last", "variable-size"],
)
def test_gpu_batches_equal_the_cpu_batches_exactly(color_folder, options):
    expected = list(make_loader(color_folder, **options))
    got = list(make_loader(color_folder, device="cuda", **options))
    assert len(got) == len(expected) == 8
    for (a, la), (b, lb) in zip(expected, got):
        assert torch.equal(la, lb.cpu()) and lb.is_cuda
        if isinstance(a, list):
            assert len(a) == len(b) and all(torch.equal(x, y.cpu()) and y.is_cuda for x, y in zip(a, b))
        else:
            assert b.is_cuda and b.dtype == a.dtype and b.stride() == a.stride()
            assert torch.equal(a, b.cpu())


def test_every_host_tensor_copied_is_page_locked(color_folder, recording_cuda):
    batches = list(make_loader(color_folder, device="cuda"))
    (ops,) = recording_cuda
    assert len(batches) == 8 and len(ops.pinned) == 16  # Images and labels of each batch.
    assert all(ops.pinned)


def test_a_slow_consumer_gets_the_exact_batches_with_a_small_prefetch(color_folder):
    # Each step keeps the GPU busy for 5 ms after the host has moved on: the
    # host buffers are reused only after their copy, or the batches would differ.
    cpu, gpu = make_loader(color_folder), make_loader(color_folder, device="cuda", prefetch=1, threads=2)
    expected, got = [], []
    for epoch in range(3):
        cpu.set_epoch(epoch)
        gpu.set_epoch(epoch)
        expected += on_host(cpu)
        for images, labels in gpu:
            sleep_on_gpu(5)
            got.append((images * 1, labels * 1))  # Work ordered after the copy, on the consumer's stream.
    assert len(got) == len(expected) == 24
    for (a, la), (b, lb) in zip(expected, on_host(got)):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_the_copy_of_the_next_batch_overlaps_the_step_on_this_batch(color_folder, recording_cuda):
    # Batches of 126 MB: each copy takes milliseconds, far longer than the
    # host takes from queuing it to starting the step.
    loader = conveyor.Loader(
        ImageFolder(color_folder), [T.Resize((1024, 1024))], batch_size=10, device="cuda"
    )
    base = torch.cuda.Event(enable_timing=True)
    base.record()
    step_starts, step_ends = [], []
    for _ in loader:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        sleep_on_gpu(20)
        end.record()
        end.synchronize()  # The host waits for each step, as a loop that logs its loss does.
        step_starts.append(start)
        step_ends.append(end)
    (ops,) = recording_cuda
    assert len(step_ends) == len(ops.copy_starts) == len(ops.copy_ends) == 3
    ms = base.elapsed_time
    for i in range(len(step_ends) - 1):
        # Copy i+1 is queued on the side stream before batch i is handed over;
        # on one stream step i would wait for it. It overlaps step i instead.
        assert ms(ops.copy_starts[i + 1]) < ms(step_ends[i]), i
        assert ms(step_starts[i]) < ms(ops.copy_ends[i + 1]), i


def test_no_step_synchronises_the_device(color_folder):
    loader = make_loader(color_folder, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # A synchronising call in torch raises.
    try:
        steps = 0
        for images, labels in loader:
            (images.float().mean() + labels.float().sum()).neg_()
            steps += 1
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert steps == 8


def test_device_memory_is_flat_over_1000_steps(color_folder):
    # 8 batches per epoch (the last of 2 images). Memory is compared at the
    # same place in an epoch, its 4th step: of epoch 12 (step 100) and of
    # epoch 124 (step 996).
    loader = make_loader(color_folder, device="cuda", transforms=[T.Resize((32, 32))])
    assert len(loader) == 8
    torch.cuda.empty_cache()  # What earlier tests left cached is not this loop's.
    steps, epoch = 0, 0
    allocated, reserved = [], []
    while steps < 1000:
        loader.set_epoch(epoch)
        for images, labels in loader:
            (images.float().mean() + labels.float().sum()).neg_()
            steps += 1
            if steps in (100, 996):
                torch.cuda.synchronize()
                allocated.append(torch.cuda.memory_allocated())
                reserved.append(torch.cuda.memory_reserved())
            if steps == 100:
                torch.cuda.reset_peak_memory_stats()
            if steps == 1000:
                break
        epoch += 1
    assert allocated[0] == allocated[1] and reserved[0] == reserved[1]
    assert torch.cuda.max_memory_allocated() - allocated[0] < 1 << 20  # No growth between them either.


def test_a_loop_left_early_leaves_the_next_pass_exact(color_folder):
    expected = on_host(make_loader(color_folder))
    loader = make_loader(color_folder, device="cuda")
    for step, _ in enumerate(loader):
        if step == 2:
            break
    loader.set_epoch(0)
    assert all(
        torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(expected, on_host(loader))
    )
