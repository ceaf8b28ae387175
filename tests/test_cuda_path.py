"""The CUDA hand-over (conveyor._device.prefetch) on CPU, with a fake device
that logs every call and completes a "copy" only when its event is waited on
or synchronized (as late as a real GPU may): delivery order, one batch ahead,
batches before an error, pinned labels and targets, host buffers kept until
their copy finished; and the Loader on that path."""

from __future__ import annotations

import gc
import shutil
import weakref
from typing import Any

import pytest
import torch

import conveyor
import conveyor._device
import conveyor.loader
from conveyor import transforms as T
from conveyor._device import prefetch
from conveyor.sources import ImageFolder


class FakeTensor:
    """A named host or device tensor; ``value`` is set when a copy completes."""

    def __init__(self, name: str, value: Any = None) -> None:
        self.name, self.value = name, value

    def __repr__(self) -> str:
        return self.name


class FakeDevice:
    """DeviceOps that logs its calls. Copies (of FakeTensors or torch tensors)
    complete only when their event is waited on or synchronized."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.queued: list[tuple[Any, Any]] = []  # Copies queued since the last event.
        self.events: list[list[tuple[Any, Any]]] = []  # Per event, the copies it covers.

    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, (FakeTensor, torch.Tensor))

    def pin(self, tensor: Any) -> Any:
        self.log.append(("pin", name(tensor)))
        if isinstance(tensor, FakeTensor):
            return FakeTensor(f"pinned:{tensor.name}", tensor.value)
        return tensor.clone()

    def copy_stream(self) -> str:
        self.log.append(("copy_stream", None))
        return "side"

    def current_stream(self) -> str:
        return "consumer"

    def copy(self, tensor: Any, stream: Any) -> Any:
        assert stream == "side"
        self.log.append(("copy", name(tensor)))
        target = (
            FakeTensor(f"cuda:{tensor.name}") if isinstance(tensor, FakeTensor) else torch.empty_like(tensor)
        )
        self.queued.append((tensor, target))
        return target

    def record_event(self, stream: Any) -> int:
        assert stream == "side"
        self.events.append(self.queued)
        self.queued = []
        self.log.append(("record_event", len(self.events) - 1))
        return len(self.events) - 1

    def complete(self, event: int) -> None:
        for source, target in self.events[event]:
            if isinstance(target, FakeTensor):
                target.value = source.value
            else:
                target.copy_(source)
        self.events[event] = []

    def wait_event(self, stream: Any, event: int) -> None:
        assert stream == "consumer"
        self.log.append(("wait_event", event))
        self.complete(event)

    def record_stream(self, tensor: Any, stream: Any) -> None:
        assert stream == "consumer"
        self.log.append(("record_stream", name(tensor)))

    def synchronize(self, event: int) -> None:
        self.log.append(("synchronize", event))
        self.complete(event)


def name(tensor: Any) -> str:
    return tensor.name if isinstance(tensor, FakeTensor) else f"tensor{tuple(tensor.shape)}"


def host_batches(device: FakeDevice, count: int, error: Exception | None = None, targets: bool = False):
    """``count`` host batches (images k, labels k or targets k, mark k), then
    ``error`` if given; the log records when each batch's images are released."""
    for k in range(count):
        images = FakeTensor(f"images{k}", k)
        weakref.finalize(images, device.log.append, ("release", f"images{k}"))
        if targets:
            second: Any = [
                {"boxes": FakeTensor(f"boxes{k}", k), "labels": FakeTensor(f"labels{k}", k), "image_id": k}
            ]
        else:
            second = FakeTensor(f"labels{k}", k)
        yield images, second, ("mark", k)
    if error is not None:
        raise error


def test_batches_come_out_in_order_with_their_data_and_marks():
    device = FakeDevice()
    got = [
        (images.name, images.value, labels.name, labels.value, mark)
        for images, labels, mark in prefetch(host_batches(device, 4), device, pin=False)
    ]
    assert got == [(f"cuda:images{k}", k, f"cuda:labels{k}", k, ("mark", k)) for k in range(4)]


def test_copy_of_the_next_batch_is_issued_before_a_batch_is_handed_over():
    device = FakeDevice()
    delivered = []
    for images, _, _ in prefetch(host_batches(device, 3), device, pin=False):
        delivered.append(images.name)
        device.log.append(("delivered", images.name))
    log = [entry for entry in device.log if entry[0] != "release"]
    assert log == [
        ("copy_stream", None),
        ("copy", "images0"), ("copy", "labels0"), ("record_event", 0),
        ("copy", "images1"), ("copy", "labels1"), ("record_event", 1),
        ("wait_event", 0), ("record_stream", "cuda:images0"), ("record_stream", "cuda:labels0"),
        ("synchronize", 0), ("delivered", "cuda:images0"),
        ("copy", "images2"), ("copy", "labels2"), ("record_event", 2),
        ("wait_event", 1), ("record_stream", "cuda:images1"), ("record_stream", "cuda:labels1"),
        ("synchronize", 1), ("delivered", "cuda:images1"),
        ("wait_event", 2), ("record_stream", "cuda:images2"), ("record_stream", "cuda:labels2"),
        ("synchronize", 2), ("delivered", "cuda:images2"),
    ]  # fmt: skip


def test_every_batch_before_an_error_is_delivered_then_the_error_raised():
    device = FakeDevice()
    delivered = []
    with pytest.raises(ValueError, match="^sample 12 is bad$"):
        for images, labels, mark in prefetch(
            host_batches(device, 3, ValueError("sample 12 is bad")), device, pin=False
        ):
            delivered.append((images.value, labels.value, mark))
    assert delivered == [(0, 0, ("mark", 0)), (1, 1, ("mark", 1)), (2, 2, ("mark", 2))]


def test_an_error_before_any_batch_is_raised():
    device = FakeDevice()
    with pytest.raises(ValueError, match="first"):
        list(prefetch(host_batches(device, 0, ValueError("first")), device, pin=False))


def test_labels_are_pinned_before_their_copy_when_pinning():
    device = FakeDevice()
    got = [
        (labels.name, labels.value) for _, labels, _ in prefetch(host_batches(device, 2), device, pin=True)
    ]
    assert got == [("cuda:pinned:labels0", 0), ("cuda:pinned:labels1", 1)]
    first = device.log[: device.log.index(("record_event", 0)) + 1]
    # The images come from the pinned allocator already: only the labels are pinned.
    assert first == [
        ("copy_stream", None),
        ("pin", "labels0"),
        ("copy", "images0"),
        ("copy", "pinned:labels0"),
        ("record_event", 0),
    ]
    assert not any(entry[0] == "pin" for entry in prefetch_log(pin=False))


def prefetch_log(pin: bool) -> list[tuple[str, Any]]:
    device = FakeDevice()
    list(prefetch(host_batches(device, 2), device, pin=pin))
    return device.log


def test_detection_targets_are_pinned_and_moved():
    device = FakeDevice()
    batches = list(prefetch(host_batches(device, 2, targets=True), device, pin=True))
    targets = batches[1][1]
    assert [sorted(t) for t in targets] == [["boxes", "image_id", "labels"]]
    assert (targets[0]["boxes"].name, targets[0]["boxes"].value) == ("cuda:pinned:boxes1", 1)
    assert (targets[0]["labels"].name, targets[0]["labels"].value) == ("cuda:pinned:labels1", 1)
    assert targets[0]["image_id"] == 1
    assert ("pin", "boxes1") in device.log and ("pin", "labels1") in device.log
    assert ("record_stream", "cuda:pinned:boxes1") in device.log


def assert_released_after_their_copies(log: list[tuple[str, Any]], count: int) -> None:
    for k in range(count):
        assert log.index(("synchronize", k)) < log.index(("release", f"images{k}")), k


def test_host_batches_are_kept_until_their_copy_is_synchronized():
    device = FakeDevice()
    for _ in prefetch(host_batches(device, 4), device, pin=True):
        pass
    assert_released_after_their_copies(device.log, 4)


def test_host_batches_are_kept_until_synchronized_when_stopped_early_or_failing():
    device = FakeDevice()
    batches = prefetch(host_batches(device, 5), device, pin=False)
    next(batches)
    next(batches)  # Batch 2's copy is in flight now.
    batches.close()
    assert ("release", "images2") in device.log
    assert_released_after_their_copies(device.log, 3)

    device = FakeDevice()
    delivered = interrupted(device)
    assert delivered == ["cuda:images0"]  # Not an engine error: nothing more is delivered.
    assert_released_after_their_copies(device.log, 2)


def interrupted(device: FakeDevice) -> list[str]:
    # Returns once the exception (and the frames its traceback holds) is gone.
    delivered = []
    try:
        for images, _, _ in prefetch(host_batches(device, 2, KeyboardInterrupt()), device, pin=False):
            delivered.append(images.name)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("no KeyboardInterrupt")
    gc.collect()  # The error's traceback and the generator's frame form a cycle.
    return delivered


# --- the Loader on the CUDA path ----------------------------------------------------------------


@pytest.fixture
def fake_cuda(monkeypatch) -> FakeDevice:
    """Loader(device="cuda") on CPU: the fake device, and an allocator hook
    handing out plain memory where CUDA would give pinned memory."""
    device = FakeDevice()
    monkeypatch.setattr(conveyor.loader, "_parse_device", lambda d: torch.device(d) if d == "cuda" else None)
    monkeypatch.setattr(conveyor._device, "TorchCuda", lambda _: device)
    buffers: dict[int, torch.Tensor] = {}

    def allocate(nbytes: int) -> int:
        tensor = torch.empty(nbytes, dtype=torch.uint8)
        buffers[tensor.data_ptr()] = tensor
        return tensor.data_ptr()

    def deallocate(address: int, nbytes: int) -> None:
        del buffers[address]

    monkeypatch.setattr(conveyor.loader, "_pinned_allocator", lambda: (allocate, deallocate))
    return device


def make_loader(root, **kwargs) -> conveyor.Loader:
    return conveyor.Loader(
        ImageFolder(root), [T.Resize((16, 16))], batch_size=4, shuffle=True, seed=3, **kwargs
    )


def test_loader_batches_through_the_cuda_path_match_the_cpu_path(color_folder, fake_cuda):
    expected = [(x.clone(), y.clone()) for x, y in make_loader(color_folder)]
    loader = make_loader(color_folder, device="cuda", prefetch=1)
    got = list(loader)
    assert len(got) == len(expected) == 8
    for (a, la), (b, lb) in zip(expected, got):
        assert torch.equal(a, b) and torch.equal(la, lb)
    assert fake_cuda.log.count(("pin", "tensor(4,)")) == 7 and ("pin", "tensor(2,)") in fake_cuda.log
    assert loader.state_dict() == {
        "seed": 3,
        "epoch": 1,
        "position": 0,
        "batch": 0,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }


def test_one_device_and_its_copy_stream_serve_every_pass_of_a_loader(color_folder, fake_cuda, monkeypatch):
    # A stream per pass would leave each pass's device blocks cached in the
    # allocator's pool for that stream (seen on a GPU: memory_reserved grew).
    made = []
    monkeypatch.setattr(conveyor._device, "TorchCuda", lambda device: made.append(device) or fake_cuda)
    loader = make_loader(color_folder, device="cuda")
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert len(list(loader)) == 8
    assert len(made) == 1 and fake_cuda.log.count(("copy_stream", None)) == 3


@pytest.fixture(params=["fake", "real"])
def either_cuda(request):
    """The fake device here, and a real one where there is a GPU (the same assertions)."""
    if request.param == "real":
        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
        return None
    return request.getfixturevalue("fake_cuda")


def test_the_cuda_path_delivers_the_batches_before_a_bad_sample(tmp_path, color_folder, either_cuda):
    root = tmp_path / "data"
    shutil.copytree(color_folder, root)
    bad = root / "dog" / "004.jpg"
    bad.write_bytes(bad.read_bytes()[:200])  # Sample 14: in batch 3.
    loader = conveyor.Loader(ImageFolder(root), [T.Resize((16, 16))], batch_size=4, device="cuda", seed=0)
    delivered = []
    with pytest.raises(conveyor.DecodeError) as info:
        for _, labels in loader:
            delivered.append(labels.tolist())
    assert info.value.key == str(bad)
    assert delivered == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 1]]
    assert loader.state_dict() == {
        "seed": 0,
        "epoch": 0,
        "position": 12,
        "batch": 3,
        "world_size": 1,
        "segment_start": 0,
        "samples": 30,
    }


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_cuda_batches_match_the_cpu_path(color_folder):
    # TorchCuda itself (streams, events, pinned memory): runs only on a machine with a GPU.
    expected = [(x.clone(), y.clone()) for x, y in make_loader(color_folder)]
    got = [(x.cpu(), y.cpu()) for x, y in make_loader(color_folder, device="cuda")]
    assert len(got) == len(expected) == 8
    for (a, la), (b, lb) in zip(expected, got):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_variable_size_batches_go_through_the_cuda_path_sample_by_sample(color_folder, fake_cuda):
    def make(**kwargs):
        return conveyor.Loader(ImageFolder(color_folder), [T.Resize(16)], batch_size=4, seed=3, **kwargs)

    expected = [([x.clone() for x in xs], y.clone()) for xs, y in make()]
    got = list(make(device="cuda", prefetch=1))
    assert len(got) == len(expected) == 8
    for (a, la), (b, lb) in zip(expected, got):
        assert isinstance(b, list) and len(a) == len(b)
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and torch.equal(la, lb)


def test_a_collate_fn_output_is_pinned_before_its_copy(color_folder, fake_cuda):
    from torch.utils.data import default_collate

    batches = list(make_loader(color_folder, device="cuda", collate_fn=default_collate))
    assert len(batches) == 8 and batches[0][0].shape == (4, 3, 16, 16)
    # The collated images are new (pageable) memory: pinned like the labels.
    assert fake_cuda.log.count(("pin", "tensor(4, 3, 16, 16)")) == 7
    assert fake_cuda.log.count(("pin", "tensor(4,)")) == 7


def test_namedtuples_are_moved_field_by_field():
    from collections import namedtuple

    Pair = namedtuple("Pair", ["images", "labels"])
    moved = conveyor._device.map_tensors(
        Pair(torch.zeros(2), {"boxes": torch.ones(1)}), lambda t: t + 1, lambda v: isinstance(v, torch.Tensor)
    )
    assert isinstance(moved, Pair)
    assert torch.equal(moved.images, torch.ones(2))
    assert torch.equal(moved.labels["boxes"], torch.full((1,), 2.0))
