"""Batches to a CUDA device one batch ahead, on a side stream.

``prefetch`` is the Loader's hand-over for ``device="cuda"``: batch k+1's
host-to-device copy is issued on a side stream (one per Loader) before batch k is handed over,
so the copy overlaps the consumer's work on batch k. It is written against
``DeviceOps``, the few operations it needs from the device; ``TorchCuda``
implements them with torch.cuda streams and events, and a test can pass a fake
that logs the calls and completes "copies" late, so that the hand-over logic
runs without a GPU.

Guarantees:

* Batches come out in order. When the source raises, every batch it gave
  before is handed over first, then the error is raised.
* With pinning, the small tensors (labels, boxes, targets) are copied into
  page-locked memory first, so that their ``non_blocking`` copies are
  asynchronous too; the images are already pinned (the engine's buffers come
  from the pinned allocator).
* The host tensors of a batch (whose buffer the engine reuses once they are
  freed) are kept until the batch's copy is known to have finished: at
  hand-over, and also when the iteration stops early or fails.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, Callable, Protocol

__all__ = ["DecodeOnDevice", "DeviceOps", "TorchCuda", "map_tensors", "move", "prefetch"]

#: (images, labels or detection targets, the Loader's resume mark).
Marked = tuple[Any, Any, Any]


class DecodeOnDevice:
    """The images of a batch decoded on the GPU (``Loader(decode_device=...)``):
    stands where the host images would until its ``to(device)``, which queues
    the decode of the batch's records (the engine's DevicePlanTransform) into
    a new device tensor on the current stream. Holding it holds the records,
    which the decode reads until the stream has passed it."""

    def __init__(
        self, batch: Any, decoder: Any, shape: tuple[int, ...], dtype: Any, channels_last: bool
    ) -> None:
        self.batch, self.decoder = batch, decoder
        self.shape, self.dtype, self.channels_last = shape, dtype, channels_last

    def to(self, device: Any, non_blocking: bool = False) -> Any:
        """The batch decoded into a tensor on ``device``; with ``non_blocking``
        False, returns once it is done (the records may then be released)."""
        import torch

        out = torch.empty(self.shape, dtype=self.dtype, device=device)
        stream = torch.cuda.current_stream(device)
        self.decoder.decode(self.batch, out.data_ptr(), stream.cuda_stream)
        if not non_blocking:
            stream.synchronize()
        # N×H×W×C memory seen as N×C×H×W: a view, no copy.
        return out.permute(0, 3, 1, 2) if self.channels_last else out


class DeviceOps(Protocol):
    """What ``prefetch`` needs from a device. Called from the consumer's thread only."""

    def is_tensor(self, value: Any) -> bool:
        """Whether ``value`` is a tensor (else it is passed through as is, e.g. an image id)."""
        ...

    def pin(self, tensor: Any) -> Any:
        """A copy of host ``tensor`` in page-locked memory."""
        ...

    def copy_stream(self) -> Any:
        """The stream the copies are queued on: the same one on every call.
        (The caching allocator keeps freed blocks per stream: a new stream per
        pass would leave each pass's blocks cached and unused.)"""
        ...

    def current_stream(self) -> Any:
        """The consumer's current stream."""
        ...

    def copy(self, tensor: Any, stream: Any) -> Any:
        """Queues a non-blocking copy of host ``tensor`` to the device on ``stream``;
        returns the device tensor (valid for work ordered after the copy)."""
        ...

    def record_event(self, stream: Any) -> Any:
        """An event that completes when the work queued on ``stream`` so far has finished."""
        ...

    def wait_event(self, stream: Any, event: Any) -> None:
        """Makes work queued on ``stream`` from now on wait for ``event``."""
        ...

    def record_stream(self, tensor: Any, stream: Any) -> None:
        """Tells the allocator that device ``tensor`` is used on ``stream``."""
        ...

    def synchronize(self, event: Any) -> None:
        """Blocks the calling thread until ``event`` has completed."""
        ...


class TorchCuda:
    """``DeviceOps`` with torch.cuda streams and events on ``device``."""

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.device = device
        self._copy_stream: Any = None

    def is_tensor(self, value: Any) -> bool:  # noqa: D102 - documented in DeviceOps.
        # Images to decode on the device are "copied" by their decode.
        return isinstance(value, (self._torch.Tensor, DecodeOnDevice))

    def pin(self, tensor: Any) -> Any:  # noqa: D102
        # Records are in the engine's page-locked buffers already.
        return tensor if isinstance(tensor, DecodeOnDevice) else tensor.pin_memory()

    def copy_stream(self) -> Any:  # noqa: D102
        if self._copy_stream is None:
            self._copy_stream = self._torch.cuda.Stream(self.device)
        return self._copy_stream

    def current_stream(self) -> Any:  # noqa: D102
        return self._torch.cuda.current_stream(self.device)

    def copy(self, tensor: Any, stream: Any) -> Any:  # noqa: D102
        with self._torch.cuda.stream(stream):
            return tensor.to(self.device, non_blocking=True)

    def record_event(self, stream: Any) -> Any:  # noqa: D102
        event = self._torch.cuda.Event()
        event.record(stream)
        return event

    def wait_event(self, stream: Any, event: Any) -> None:  # noqa: D102
        stream.wait_event(event)

    def record_stream(self, tensor: Any, stream: Any) -> None:  # noqa: D102
        tensor.record_stream(stream)

    def synchronize(self, event: Any) -> None:  # noqa: D102
        event.synchronize()


def map_tensors(value: Any, function: Callable[[Any], Any], is_tensor: Callable[[Any], bool]) -> Any:
    """``value`` with ``function`` applied to each tensor in it (through the
    dicts, lists and tuples of detection targets); other values are kept."""
    if is_tensor(value):
        return function(value)
    if isinstance(value, dict):
        return {k: map_tensors(v, function, is_tensor) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        mapped = [map_tensors(v, function, is_tensor) for v in value]
        return type(value)(*mapped) if hasattr(value, "_fields") else type(value)(mapped)  # namedtuples too
    return value


def move(value: Any, device: Any) -> Any:
    """``value``'s tensors moved to ``device`` with ``.to`` (synchronously)."""
    return map_tensors(value, lambda t: t.to(device), lambda v: hasattr(v, "to"))


def prefetch(
    batches: Iterator[Marked], ops: DeviceOps, *, pin: bool, pin_images: bool = False
) -> Iterator[Marked]:
    """Yields the batches of ``batches`` on the device, in order, each copy
    issued one batch ahead on a side stream (see the module's docstring).

    Args:
        batches: host batches (images, labels or targets, mark); marks pass through.
        ops: the device.
        pin: copy the labels and targets into page-locked memory before their
            copy (the images must already be page-locked, unless pin_images).
        pin_images: with pin, the images too (a collate_fn's output is not
            the engine's page-locked buffer).
    """
    stream = ops.copy_stream()
    # Per batch issued and not yet handed over: (host tensors, device batch, copy event).
    in_flight: deque[tuple[Any, Marked, Any]] = deque()
    try:
        try:
            for host in batches:
                in_flight.append(_issue(ops, stream, host, pin, pin_images))
                if len(in_flight) > 1:
                    yield _hand_over(ops, in_flight)
        except Exception:
            # The source delivers the batches before a failed sample, then
            # raises: the batch held back is handed over before the error.
            while in_flight:
                yield _hand_over(ops, in_flight)
            raise
        while in_flight:
            yield _hand_over(ops, in_flight)
    finally:
        # Stopped early (break, close) or failed: the copies may still read
        # the host buffers, which the engine reuses once they are released.
        while in_flight:
            ops.synchronize(in_flight[0][2])
            in_flight.popleft()


def _issue(ops: DeviceOps, stream: Any, host: Marked, pin: bool, pin_images: bool) -> tuple[Any, Marked, Any]:
    images, second, mark = host
    if pin:
        second = map_tensors(second, ops.pin, ops.is_tensor)
        if pin_images:
            images = map_tensors(images, ops.pin, ops.is_tensor)
    on_device = (
        map_tensors(
            images, lambda tensor: ops.copy(tensor, stream), ops.is_tensor
        ),  # A list when variable-size.
        map_tensors(second, lambda tensor: ops.copy(tensor, stream), ops.is_tensor),
        mark,
    )
    # The pinned copies are read by the copy too: kept with the host batch.
    return (host, images, second), on_device, ops.record_event(stream)


def _hand_over(ops: DeviceOps, in_flight: deque[tuple[Any, Marked, Any]]) -> Marked:
    on_device, event = in_flight[0][1:]
    consumer = ops.current_stream()
    ops.wait_event(consumer, event)
    tensors: list[Any] = []
    map_tensors(on_device[:2], tensors.append, ops.is_tensor)
    for tensor in tensors:
        ops.record_stream(tensor, consumer)
    ops.synchronize(event)  # Normally complete already: the copy ran during the consumer's last step.
    in_flight.popleft()  # Only now may the engine reuse the host buffers.
    return on_device
