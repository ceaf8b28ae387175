"""The Loader: conveyor's replacement for ``torch.utils.data.DataLoader``.

Reads, decodes, augments and batches on native threads; each batch reaches
Python as tensors that share the engine's memory (DLPack, no copy).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, Union

import numpy

from conveyor import _conveyor, _device
from conveyor._checks import INT_MAX, UINT64_MAX, check_bool, check_int, is_bool
from conveyor.errors import ConfigError
from conveyor.sources import Source
from conveyor.sources.remote import REMOTE_IO_THREADS
from conveyor.transforms import DEFAULT_MAX_PIXELS, Transform
from conveyor.transforms.base import as_transform_list

try:  # torch is optional: without it batches are numpy arrays.
    import torch
except ImportError:  # pragma: no cover - exercised only without torch
    torch = None  # type: ignore[assignment]

__all__ = ["Loader"]

_log = logging.getLogger("conveyor")

_DTYPES = ("uint8", "float16", "float32")
_LAYOUTS = ("CHW", "HWC")
# How long one wait for a batch lasts before Python gets to check for signals
# (KeyboardInterrupt); the engine keeps working meanwhile.
_WAIT_SLICE_SECONDS = 0.05

Batch = tuple[Any, Any]
# A batch with (end position, batches done) for the resume state.
_Marked = tuple[Any, Any, tuple[int, int]]


class Loader:
    """Iterates over batches of ``source``, one epoch per ``iter()``.

    Args:
        source: where samples come from (``conveyor.sources``).
        transforms: ``conveyor.transforms`` applied to each image, in order,
            e.g. ``[RandomResizedCrop(224), RandomHorizontalFlip(), Normalize(mean, std)]``;
            a single transform needs no list.
        batch_size: samples per batch.
        shuffle: a new random order every epoch, from (seed, epoch).
        seed: seeds the order and every random transform; the same seed gives
            the same batches, bit for bit, for any thread counts.
        drop_last: drop the last partial batch (and, distributed, truncate
            rather than pad the epoch).
        threads: decode/transform threads; None = one per CPU this process
            may use (its affinity mask, lowered to its cgroup quota).
        io_threads: concurrent reads; None = 32, or 64 (REMOTE_IO_THREADS)
            for a source that reads URLs. Reads wait on storage, so many in
            flight hide slow disks and network latency without more decode
            threads.
        prefetch: batches prepared ahead of the consumer.
        device: None or "cpu" for CPU tensors; "cuda", "cuda:1", "mps" or a
            torch.device to receive batches there (CUDA copies overlap the
            consumer's work on a side stream).
        pin_memory: page-locked batch buffers (and labels/targets pinned
            before their copy); None = True when device is CUDA.
        on_error: "raise" (the first bad sample raises, naming it) or "skip"
            (bad samples are left out, counted in stats() and listed by skipped()).
        progress: show a tqdm bar per epoch (images/s, input stall).
        dtype: "float32" (default), "float16" or "uint8" (0..255, no Normalize).
        layout: "CHW" (default) or "HWC".
        max_pixels: images whose header claims more pixels raise TooLargeError.
        rank, world_size: this process's share of each epoch; default from
            torch.distributed when initialized, else 0 and 1.
        targets: for sources with boxes (CocoDetection): "list" gives per
            image a dict {"boxes": K×4 xywh float32, "labels": K int64,
            "image_id"}; "padded" gives one dict {"boxes": N×Kmax×4,
            "labels": N×Kmax (-1 where padded), "counts": N, "image_ids"}.

    Each batch is ``(images, labels)``: ``images`` N×C×H×W (or N×H×W×C),
    ``labels`` int64 of length N; torch tensors, or numpy arrays without torch.
    For sources with boxes, each batch is ``(images, targets)`` instead.

    Raises:
        ConfigError: an invalid argument, naming it.
    """

    def __init__(
        self,
        source: Source,
        transforms: Union[Transform, Sequence[Transform], None] = None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        threads: Optional[int] = None,
        io_threads: Optional[int] = None,
        prefetch: int = 2,
        device: Union[str, Any, None] = None,
        pin_memory: Optional[bool] = None,
        on_error: str = "raise",
        progress: bool = False,
        dtype: str = "float32",
        layout: str = "CHW",
        max_pixels: int = DEFAULT_MAX_PIXELS,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        targets: str = "list",
    ) -> None:
        if not isinstance(source, Source):
            raise ConfigError(
                f"source must be a conveyor source (conveyor.sources.*), got {type(source).__name__}; "
                "wrap a map-style dataset returning bytes in conveyor.sources.PythonSource"
            )
        # Every number is checked against the C++ type that receives it, so
        # that no value reaches the engine as a bare conversion error.
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        prefetch = check_int(prefetch, "prefetch", minimum=1, maximum=INT_MAX)
        seed = check_int(seed, "seed", minimum=0, maximum=UINT64_MAX)
        max_pixels = check_int(max_pixels, "max_pixels", minimum=1)
        threads, io_threads = (
            None if value is None else check_int(value, name, minimum=1, maximum=INT_MAX)
            for name, value in (("threads", threads), ("io_threads", io_threads))
        )
        shuffle, drop_last, progress = (
            check_bool(value, name)
            for name, value in (("shuffle", shuffle), ("drop_last", drop_last), ("progress", progress))
        )
        if pin_memory is not None and not is_bool(pin_memory):
            raise ConfigError(f"pin_memory must be None, True or False, got {pin_memory!r}")
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        if layout not in _LAYOUTS:
            raise ConfigError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        if targets not in ("list", "padded"):
            raise ConfigError(f"targets must be 'list' or 'padded', got {targets!r}")
        rank, world_size = _distributed(rank, world_size)

        self.source = source
        self.batch_size = batch_size
        self.progress = progress
        self._drop_last = drop_last
        self._padded_targets = targets == "padded"
        self._seed = seed
        self._device = _parse_device(device)
        self._pin = _is_cuda(self._device) if pin_memory is None else bool(pin_memory)
        transform = source._sample_transform(
            as_transform_list(transforms), dtype=dtype, layout=layout, max_pixels=max_pixels
        )
        self._engine = _conveyor.Loader(
            source._engine_source(),
            transform,
            _options(
                batch_size=batch_size,
                shuffle=shuffle,
                seed=seed,
                drop_last=drop_last,
                threads=threads or 0,
                io_threads=io_threads or (REMOTE_IO_THREADS if source._remote else 0),
                prefetch=prefetch,
                on_error=_conveyor.OnError.SKIP if on_error == "skip" else _conveyor.OnError.RAISE,
                rank=rank,
                world_size=world_size,
                shuffle_buffer=source.shuffle_buffer or 0,
            ),
            **({"allocator": _pinned_allocator()} if self._pin else {}),
        )
        self._epoch = 0  # The epoch the next iter() runs.
        self._start_position = 0  # Where it starts (set by load_state_dict).
        self._start_batch = 0
        self._running_epoch: Optional[int] = None  # Set while an epoch is under way.
        self._running_start = 0  # The position it started at.
        self._position = 0  # End position of the last batch handed to the user.
        self._batches_done = 0
        self._iteration = 0  # Identifies the live iterator; older ones stop.
        self._last_address = 0  # Engine buffer address of the last batch (for checks).
        self._closed = False
        # Workers stop when the loader is garbage collected, even without close().
        self._finalizer = weakref.finalize(self, _conveyor.Loader.close, self._engine)

    # --- iteration ---------------------------------------------------------------

    def __len__(self) -> int:
        """Batches of the epoch under way, else of the one the next ``iter()``
        runs, for this rank (skipped samples can make it fewer). An epoch
        resumed by load_state_dict() counts only the batches it has left."""
        running = self._running_epoch is not None
        return self._batches_after(self._running_start if running else self._start_position)

    def _batches_after(self, position: int) -> int:
        # The batches an epoch gives from `position` of its order on.
        left, size = self._engine.num_samples - position, self.batch_size
        return left // size if self._drop_last else -(-left // size)

    def __iter__(self) -> Iterator[Batch]:
        """Starts the next epoch (or resumes the one loaded by load_state_dict)."""
        if self._closed:
            raise ConfigError("the loader is closed")
        self._iteration += 1
        epoch = self._epoch
        self._engine.start_epoch(epoch, self._start_position, self._start_batch)
        self._position, self._batches_done = self._start_position, self._start_batch
        self._running_start = self._start_position
        self._start_position = self._start_batch = 0
        self._running_epoch = epoch
        self._epoch = epoch + 1
        batches = self._batches(self._iteration, epoch, self._running_start)
        if _is_cuda(self._device):
            batches = _device.prefetch(batches, _device.TorchCuda(self._device), pin=self._pin)
        elif self._device is not None:
            device = self._device
            batches = (
                (_device.move(images, device), _device.move(second, device), mark)
                for images, second, mark in batches
            )
        return self._deliver(batches, self._iteration, epoch)

    def _deliver(self, batches: Iterator[_Marked], iteration: int, epoch: int) -> Iterator[Batch]:
        # The resume position advances as the user receives a batch, not when
        # the engine delivers it (the CUDA path holds one batch back).
        for images, second, (position, done) in batches:
            self._position, self._batches_done = position, done
            yield images, second
        if iteration == self._iteration:
            self._epoch_finished(epoch)

    def _batches(self, iteration: int, epoch: int, start: int) -> Iterator[_Marked]:
        bar = self._progress_bar(epoch, start) if self.progress else None
        try:
            while iteration == self._iteration:
                batch = self._engine.next(_WAIT_SLICE_SECONDS)
                if batch is False:
                    continue  # Timed out: Python handles pending signals here.
                if batch is None:
                    return
                self._last_address = batch.address
                mark = (batch.end_position, batch.index + 1)
                if bar is not None:
                    self._update_bar(bar, batch.size)
                images = _as_tensor(_conveyor.Batch.images(batch))
                labels = _from_numpy(_conveyor.Batch.labels(batch))  # Its own memory, not the batch's.
                yield images, self._targets(batch, labels) if self.source.has_boxes else labels, mark
        finally:
            if bar is not None:
                self._update_bar(bar, 0, refresh=True)
                bar.close()
            if iteration == self._iteration:
                self._engine.stop()

    def _targets(self, batch: _conveyor.Batch, labels: Any) -> Any:
        # Boxes are copied out of the engine (they are small): per image a
        # dict, or one padded dict with the count of boxes per image.
        counts, boxes, categories = (_from_numpy(a) for a in _conveyor.Batch.boxes(batch))
        image_ids = [self.source._image_id(int(label)) for label in labels]
        if self._padded_targets:
            n, most = len(image_ids), max(counts.tolist(), default=0)
            padded_boxes = _zeros(boxes, (n, most, 4))
            padded_labels = _zeros(categories, (n, most)) - 1
            start = 0
            for i, count in enumerate(counts.tolist()):
                padded_boxes[i, :count] = boxes[start : start + count]
                padded_labels[i, :count] = categories[start : start + count]
                start += count
            return {"boxes": padded_boxes, "labels": padded_labels, "counts": counts, "image_ids": image_ids}
        out, start = [], 0
        for image_id, count in zip(image_ids, counts.tolist()):
            out.append(
                {
                    "boxes": boxes[start : start + count],
                    "labels": categories[start : start + count],
                    "image_id": image_id,
                }
            )
            start += count
        return out

    def _epoch_finished(self, epoch: int) -> None:
        self._running_epoch = None
        skipped = self._engine.skipped()
        if skipped:
            _log.warning(
                "conveyor: skipped %d bad sample(s) in epoch %d; loader.skipped() lists them",
                len(skipped),
                epoch,
            )

    # --- epochs, resume -------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next ``iter()`` runs (as DistributedSampler.set_epoch).

        After load_state_dict(), setting the loaded epoch keeps the loaded
        position (so calling ``set_epoch(epoch)`` at the top of every epoch
        resumes where the state was taken); any other epoch starts at its
        beginning and drops the loaded position.
        """
        epoch = check_int(epoch, "epoch", minimum=0)
        if epoch != self._epoch:
            self._start_position = self._start_batch = 0
        self._epoch = epoch
        self._running_epoch = None

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter()`` runs."""
        return self._epoch

    def state_dict(self) -> dict[str, int]:
        """The position after the last batch handed out: small, picklable, and
        enough for load_state_dict() to resume with bit-identical batches."""
        if self._running_epoch is not None:
            epoch, position, batch = self._running_epoch, self._position, self._batches_done
        else:
            epoch, position, batch = self._epoch, self._start_position, self._start_batch
        return {"seed": self._seed, "epoch": epoch, "position": position, "batch": batch}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Makes the next ``iter()`` continue where ``state`` was taken.

        Raises:
            ConfigError: ``state`` is not what state_dict() gives for this
                loader (a missing key, a value that is not an int, a position
                outside the epoch, another seed), naming the key.
        """
        if not isinstance(state, Mapping):
            raise ConfigError(f"state must be a dict from Loader.state_dict(), got {type(state).__name__}")
        for key in ("seed", "epoch", "position", "batch"):
            if key not in state:
                raise ConfigError(f"state has no {key!r}: it must come from Loader.state_dict()")
        seed = check_int(state["seed"], "state['seed']", minimum=0, maximum=UINT64_MAX)
        if seed != self._seed:
            raise ConfigError(f"state was saved with seed {seed}, this loader has seed {self._seed}")
        epoch = check_int(state["epoch"], "state['epoch']", minimum=0)
        samples = self._engine.num_samples
        position = check_int(state["position"], "state['position']", minimum=0, maximum=samples)
        batch = check_int(state["batch"], "state['batch']", minimum=0, maximum=self._batches_after(0))
        # Each batch handed out covers at least batch_size positions, except
        # the last one of the epoch.
        if min(batch * self.batch_size, samples) > position:
            raise ConfigError(
                f"state['batch'] = {batch} batches of {self.batch_size} need more than position "
                f"{position} of the epoch"
            )
        self._epoch, self._start_position, self._start_batch = epoch, position, batch
        self._running_epoch = None

    # --- observation ------------------------------------------------------------------

    def stats(self) -> dict[str, Union[int, float]]:
        """Per-stage counters of the current epoch: samples read and processed,
        seconds spent reading, decoding+transforming (summed over threads) and
        waiting for batches (input stall), wall time, queue depth, skipped
        samples, and ``input_stall``: the fraction of wall time spent waiting."""
        engine_stats = self._engine.stats()
        stats: dict[str, Union[int, float]] = {name: getattr(engine_stats, name) for name in _STATS}
        wall = stats["wall_seconds"]
        stats["input_stall"] = stats["wait_seconds"] / wall if wall > 0 else 0.0
        return stats

    def skipped(self) -> list[tuple[str, str]]:
        """(key, cause) of each sample skipped in the current epoch (on_error="skip")."""
        return [(s.key, s.cause) for s in self._engine.skipped()]

    # --- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Stops the work and joins every engine thread; the loader can't be
        iterated after. Batches already handed out stay valid."""
        self._closed = True
        self._iteration += 1
        self._engine.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- helpers --------------------------------------------------------------------------

    def _progress_bar(self, epoch: int, start: int) -> Any:
        # A resumed epoch's bar starts at its position and ends where the
        # epoch's samples (or its last full batch) end.
        from tqdm.auto import tqdm

        left = min(self._batches_after(start) * self.batch_size, self._engine.num_samples - start)
        return tqdm(total=start + left, initial=start, desc=f"epoch {epoch}", unit="img", leave=False)

    def _update_bar(self, bar: Any, samples: int, refresh: bool = False) -> None:
        bar.update(samples)
        bar.set_postfix_str(f"stall {100 * self.stats()['input_stall']:.0f}%", refresh=refresh)


def _distributed(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int]:
    if rank is None and world_size is None and torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    rank = 0 if rank is None else rank
    world_size = check_int(1 if world_size is None else world_size, "world_size", minimum=1)
    rank = check_int(rank, "rank", minimum=0)
    if rank >= world_size:
        raise ConfigError(f"rank must be < world_size, got rank {rank} of {world_size}")
    return rank, world_size


def _parse_device(device: Union[str, Any, None]) -> Any:
    if device is None:
        return None
    if torch is None:
        if str(device) == "cpu":
            return None
        raise ConfigError(f"device={device!r} needs torch, which is not installed")
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"device: {e}") from None
    if parsed.type == "cpu":
        return None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={device!r} but CUDA is not available")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={device!r} but MPS is not available")
    return parsed


def _is_cuda(device: Any) -> bool:
    return device is not None and device.type == "cuda"


def _options(**fields: Any) -> _conveyor.LoaderOptions:
    options = _conveyor.LoaderOptions()
    for name, value in fields.items():
        setattr(options, name, value)
    return options


# The fields of the engine's LoaderStats, in declaration order: the keys of stats().
_STATS = tuple(name for name, value in vars(_conveyor.LoaderStats).items() if isinstance(value, property))


def _pinned_allocator() -> tuple[Any, Any]:
    # Page-locked host memory from torch's pinned allocator; the tensors are
    # kept here until the engine frees the buffer.
    if torch is None or not torch.cuda.is_available():
        raise ConfigError("pin_memory=True needs torch with CUDA")
    tensors: dict[int, Any] = {}

    def allocate(nbytes: int) -> int:
        tensor = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        tensors[tensor.data_ptr()] = tensor
        return tensor.data_ptr()

    def deallocate(address: int, nbytes: int) -> None:
        tensors.pop(address, None)

    return allocate, deallocate


class _DLPackCapsule:
    # numpy.from_dlpack takes objects with __dlpack__, not bare capsules.
    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0.


def _from_numpy(array: Any) -> Any:
    return torch.from_numpy(array) if torch is not None else array


def _zeros(like: Any, shape: tuple[int, ...]) -> Any:
    if torch is not None:
        return torch.zeros(shape, dtype=like.dtype)
    return numpy.zeros(shape, dtype=like.dtype)


def _as_tensor(capsule: Any) -> Any:
    # Both share the engine's buffer: no copy.
    if torch is not None:
        return torch.from_dlpack(capsule)
    return numpy.from_dlpack(_DLPackCapsule(capsule))
