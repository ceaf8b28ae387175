"""The Loader: conveyor's replacement for ``torch.utils.data.DataLoader``.

Reads, decodes, augments and batches on native threads; each batch reaches
Python as tensors that share the engine's memory (DLPack, no copy).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Callable, NoReturn, Optional, Union

import numpy

from conveyor import _conveyor, _device
from conveyor._checks import (
    INT_MAX,
    UINT64_MAX,
    check_bool,
    check_int,
    is_bool,
    is_int,
    is_real,
    warn_once,
)
from conveyor._sampler import SamplerOrder
from conveyor.errors import ConfigError, WaitTimeoutError
from conveyor.sources import Mix, Source
from conveyor.transforms import DEFAULT_MAX_PIXELS, Transform
from conveyor.transforms.base import OUTPUT_DTYPES
from conveyor.transforms.batch import BatchFunction, BatchTransform, split_batch_transforms
from conveyor.transforms.pipeline import transform_chain

try:  # torch is optional: without it batches are numpy arrays.
    import torch
except ImportError:  # pragma: no cover - exercised only without torch
    torch = None  # type: ignore[assignment]

__all__ = ["Loader"]

_log = logging.getLogger("conveyor")
# Autotune's decisions with their reasons, when this logger is enabled for
# INFO (CONVEYOR_AUTOTUNE_LOG=1 prints the same lines to stderr from C++).
_autotune_log = logging.getLogger("conveyor.autotune")

# The default of threads, io_threads and prefetch: chosen and adjusted by
# autotune while training (docs/design/autotune.md); an int pins a value.
AUTO = "auto"

#: Without torch, seed=None means this seed.
DEFAULT_SEED = 0
_LAYOUTS = ("CHW", "HWC")
# How long one wait for a batch lasts before Python gets to check for signals
# (KeyboardInterrupt); the engine keeps working meanwhile.
_WAIT_SLICE_SECONDS = 0.05
# In place of the labels once collate_fn has made the batch one object.
_COLLATED = object()

#: (images, labels or targets); with collate_fn, what it returns.
Batch = Any
Stat = Union[int, float, bool, str]
# A batch with (end position, batches done) for the resume state.
_Marked = tuple[Any, Any, tuple[int, int]]


class Loader:
    """Iterates over batches of ``source``, one epoch per ``iter()``.

    Args:
        source: where samples come from (``conveyor.sources``).
        transforms: ``conveyor.transforms`` applied to each image, in order,
            e.g. ``[RandomResizedCrop(224), RandomHorizontalFlip(), Normalize(mean, std)]``;
            a single transform needs no list. A torchvision pipeline (v1 or v2
            ``Compose``, a list of torchvision transforms, or one) is converted
            by ``conveyor.transforms.from_torchvision``; its ``ToTensor``/
            ``ToDtype``/... set ``dtype``.
        batch_size: samples per batch.
        shuffle: a new random order every epoch, from (seed, epoch).
        seed: seeds the order and every random transform; the same seed gives
            the same batches, bit for bit, for any thread counts. None (the
            default) takes ``torch.initial_seed()``, so ``torch.manual_seed(s)``
            before the Loader is made acts as ``seed=s`` (as it seeds a
            DataLoader's shuffle); without torch, DEFAULT_SEED (0). Under an
            initialised torch.distributed process group, rank 0's
            ``torch.initial_seed()`` is broadcast to every rank (every rank
            must then make its Loader, as DDP scripts do).
        drop_last: drop the last partial batch (and, distributed, truncate
            rather than pad the epoch).
        threads: decode/transform threads; "auto" (default; None too) lets autotune
            choose and adjust them while training: just enough that your
            loop does not wait, never more than the CPUs this process may
            use (its affinity mask, lowered to its cgroup quota). An int pins it.
        num_workers: DataLoader's name for ``threads`` (give one of them);
            ``num_workers=0`` (DataLoader: load in the training process) is one thread.
        io_threads: concurrent reads; "auto" (default; None too): autotune,
            from the measured read latency and demand (for URLs too: at 100
            ms per request it grows to a few hundred reads in flight). Reads wait on storage,
            so many in flight hide slow disks and network latency without
            more decode threads.
        prefetch: batches prepared ahead of the consumer; "auto" (default;
            None too): autotune, within ``memory_budget``.
        memory_budget: bytes the batch buffers may hold (prefetched batches
            plus the two a ``for`` loop holds while the next is handed out:
            its batch and the previous one); None = a quarter of the memory
            available when the loader is made. An explicit budget must hold
            two batches (and a pinned ``prefetch`` + 1).
        device: None or "cpu" for CPU tensors; "cuda", "cuda:1", "mps" or a
            torch.device to receive batches there (CUDA copies overlap the
            consumer's work on a side stream).
        decode_device: "cuda" or "cuda:N" to decode JPEGs and resample them
            on that GPU (batches then arrive there, as with ``device``): the
            cpu threads read the files and draw each sample's random
            parameters as the CPU path does, nvJPEG decodes (on the GPU's
            hardware JPEG engines where it has them) and one kernel crops,
            resizes, flips and normalizes into the batch. Files the GPU cannot
            take (PNG, progressive or CMYK JPEG...) are finished by the CPU
            path, counted in stats(). Takes chains of crops, bilinear
            resizes, flips and pointwise steps (Normalize); needs CUDA's
            driver, nvJPEG and NVRTC (loaded at run time; docs/api.md).
        pin_memory: page-locked batch buffers (and labels/targets pinned
            before their copy); None = True when device is CUDA. True without
            CUDA warns once and continues unpinned, as DataLoader does.
        on_error: "raise" (the first bad sample raises, naming it) or "skip"
            (bad samples are left out, counted in stats() and listed by skipped()).
        progress: show a tqdm bar per epoch (images/s, input stall).
        dtype: "float32", "float16", "bfloat16" or "uint8" (0..255, no
            Normalize), or the torch dtypes ``torch.float32``/``torch.float16``/
            ``torch.bfloat16``/``torch.uint8``.
            None (the default): what a torchvision pipeline's ``ToTensor``/
            ``ToDtype``/... imply, else "float32"; a dtype given that disagrees
            with them is a ConfigError.
        layout: "CHW" (default) or "HWC".
        channels: 3 (RGB) or 1 (grayscale): the channels images are decoded
            to. None: 3, or a raw-pixel source's own (MNIST: 1; a raw source
            cannot be given another). ``T.Grayscale(1)`` needs
            ``channels=1``: each image is then decoded straight to one
            channel (the decoders' own conversion, as torchvision's
            ``decode_image(mode=ImageReadMode.GRAY)``).
        memory_format: ``torch.channels_last`` gives N×C×H×W batches with
            channels-last strides: a zero-copy view of the engine's N×H×W×C
            buffer (what a channels_last model takes without a copy). None or
            ``torch.contiguous_format``: contiguous batches. Needs torch and
            ``layout="CHW"``.
        max_pixels: images whose header claims more pixels raise TooLargeError.
        exif_orientation: turn each JPEG, PNG and WebP image as its EXIF
            orientation tag says (default, as PIL's ``ImageOps.exif_transpose``);
            False gives the stored pixels, as torchvision's ImageFolder does
            (PIL's open + ``convert("RGB")`` leaves the tag out). A TIFF's own
            Orientation tag is applied either way, as PIL applies it.
        rank, world_size: this process's share of each epoch; each one not
            given comes from torch.distributed when initialized (as
            DistributedSampler takes it), else 0 and 1.
        targets: for sources with boxes (CocoDetection): "list" gives per
            image a dict {"boxes": K×4 float32, "labels": K int64,
            "image_id"}; "padded" gives one dict {"boxes": N×Kmax×4,
            "labels": N×Kmax (-1 where padded), "counts": N, "image_ids"}.
        batch_transforms: applied to each batch: first optionally one engine
            batch mix (``T.MixUp``, ``T.CutMix``, ``T.RandomChoice`` of them),
            run in C++ on the batch buffer before hand-off (labels become
            N×num_classes float32); then any callables
            ``fn(images, labels) -> (images, labels)``, run in the thread
            iterating the loader, on the CPU tensors.
        box_format: how target boxes are given, in pixels of the transformed
            image: "xywh" (COCO's x, y, width, height; the default) or "xyxy"
            (x1, y1, x2, y2: what torchvision's detection models take).
        timeout: DataLoader's: seconds to wait for one batch before raising
            ``WaitTimeoutError``; 0 (the default) waits as long as it takes.
        generator: DataLoader's: a ``torch.Generator`` whose ``initial_seed()``
            is the seed (give ``seed`` or ``generator``, not both).
        sampler: DataLoader's: the indices of each epoch, in order (any
            ``torch.utils.data.Sampler`` such as ``WeightedRandomSampler``,
            ``SubsetRandomSampler`` or ``DistributedSampler``, or a list of
            indices), iterated once at the start of each epoch as DataLoader
            does; it needs a length. The loader then neither shuffles nor
            splits the epoch among ranks (the sampler decides what this rank
            reads). A resumed epoch (load_state_dict) draws the sampler again
            and continues at the saved position of that draw: the same samples
            only when the sampler gives the same indices again.
        batch_sampler: DataLoader's: the indices of each batch. torch's
            ``BatchSampler`` is its sampler with its batch size and drop_last;
            another batch sampler must give batches of one size (the last of
            an epoch may be smaller). Excludes ``batch_size``, ``shuffle``,
            ``sampler`` and ``drop_last``, as in DataLoader.
        persistent_workers, multiprocessing_context, in_order: DataLoader
            arguments with nothing to change here, accepted as they are: the
            threads already live as long as the Loader, there are no worker
            processes, and batches always come in order.
        prefetch_factor: DataLoader's batches ahead per worker: pins
            ``prefetch`` at ``prefetch_factor * max(1, num_workers)`` (or
            ``threads`` when pinned), the batches a DataLoader keeps ahead
            (give it or ``prefetch``).
        worker_init_fn: never called (no worker processes); a warning says so
            once.
        collate_fn: DataLoader's: called on each batch as the list of its
            samples, ``(image, label)`` pairs (``(image, target)`` for sources
            with boxes), after ``batch_transforms``; the loader then yields
            what it returns (moved to ``device``: tensors in dicts, lists and
            tuples too). The images are views of the batch (no copy until the
            function makes one). Default: the batch as ``(images, labels)``,
            written straight into one buffer (no collate step).

    Each batch is ``(images, labels)``: ``images`` N×C×H×W (or N×H×W×C),
    ``labels`` int64 of length N; torch tensors, or numpy arrays without torch.
    For sources with boxes, each batch is ``(images, targets)`` instead.

    Passes, as with a DataLoader: each ``iter(loader)`` starts a fresh pass
    over an epoch, from its start. A pass counts as its epoch (the next
    ``iter()`` runs the next epoch) once it has handed out a second batch or
    has ended; so a peek, ``next(iter(loader))``, does not use up an epoch:
    the next ``iter()`` runs the same epoch again, from its first batch.
    ``state_dict()`` counts every batch handed out, a peek's too: taken after
    one training step, it resumes after that step. A new ``iter()`` while a
    pass's iterator is driven by a ``for`` statement (held by no variable)
    and has handed out two batches or more (a training loop) runs beside it
    on a second engine, as a DataLoader's
    second iterator does: a pass over the next epoch that changes nothing
    of the loop's (so ``next(iter(loader))`` inside the loop peeks). Else a
    new ``iter()`` ends the pass under way, and that pass's iterator then
    raises ConfigError (saying so) instead of ending early in silence.

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
        seed: Optional[int] = None,
        drop_last: bool = False,
        threads: Union[int, str, None] = AUTO,
        num_workers: Optional[int] = None,
        io_threads: Union[int, str, None] = AUTO,
        prefetch: Union[int, str, None] = AUTO,
        memory_budget: Optional[int] = None,
        device: Union[str, Any, None] = None,
        decode_device: Union[str, Any, None] = None,
        pin_memory: Optional[bool] = None,
        on_error: str = "raise",
        progress: bool = False,
        dtype: Union[str, Any, None] = None,
        layout: str = "CHW",
        channels: Optional[int] = None,
        memory_format: Any = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        exif_orientation: bool = True,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        targets: str = "list",
        box_format: str = "xywh",
        batch_transforms: Union[BatchTransform, Sequence[Union[BatchTransform, BatchFunction]], None] = None,
        timeout: float = 0,
        generator: Any = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        persistent_workers: Optional[bool] = None,
        prefetch_factor: Optional[int] = None,
        worker_init_fn: Optional[Callable[[int], None]] = None,
        multiprocessing_context: Any = None,  # Accepted as it is: no worker processes.
        in_order: bool = True,
        collate_fn: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        if not isinstance(source, Source):
            raise ConfigError(
                f"source must be a conveyor source (conveyor.sources.*), got {type(source).__name__}; "
                "wrap a map-style dataset returning bytes in conveyor.sources.PythonSource"
            )
        # DataLoader's argument names and torch's conventions, in one place.
        threads, prefetch = _dataloader_arguments(
            threads,
            num_workers,
            AUTO if prefetch is None else prefetch,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
            worker_init_fn=worker_init_fn,
            in_order=in_order,
        )
        self._timeout = _check_timeout(timeout)
        if collate_fn is not None and not callable(collate_fn):
            raise ConfigError(f"collate_fn must be callable, got {type(collate_fn).__name__}")
        if collate_fn is not None and targets == "padded":
            raise ConfigError(
                "collate_fn takes the samples one by one; targets='padded' pads them into one dict: "
                "use targets='list' (or no collate_fn)"
            )
        self._collate_fn = collate_fn
        seed = _generator_seed(generator, seed)
        self._seed_from_torch = seed is None and torch is not None
        seed = _default_seed() if seed is None else seed
        steps, implied_dtype = transform_chain(transforms)
        dtype = _output_dtype(dtype, implied_dtype)
        channels_last = _channels_last(memory_format, layout)
        if pin_memory is True and (torch is None or not torch.cuda.is_available()):
            warn_once(
                "pin_memory",
                "pin_memory=True but CUDA is not available: batches are not pinned (as DataLoader does)",
            )
            pin_memory = False
        # Every number is checked against the C++ type that receives it, so
        # that no value reaches the engine as a bare conversion error.
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        prefetch = _parallelism(prefetch, "prefetch")
        seed = check_int(seed, "seed", minimum=0, maximum=UINT64_MAX)
        max_pixels = check_int(max_pixels, "max_pixels", minimum=1)
        threads, io_threads = (
            _parallelism(AUTO if value is None else value, name)
            for name, value in (("threads", threads), ("io_threads", io_threads))
        )
        memory_budget = 0 if memory_budget is None else check_int(memory_budget, "memory_budget", minimum=1)
        shuffle, drop_last, progress = (
            check_bool(value, name)
            for name, value in (("shuffle", shuffle), ("drop_last", drop_last), ("progress", progress))
        )
        if pin_memory is not None and not is_bool(pin_memory):
            raise ConfigError(f"pin_memory must be None, True or False, got {pin_memory!r}")
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if dtype not in OUTPUT_DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(OUTPUT_DTYPES)}, got {dtype!r}")
        if layout not in _LAYOUTS:
            raise ConfigError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
        if targets not in ("list", "padded"):
            raise ConfigError(f"targets must be 'list' or 'padded', got {targets!r}")
        if box_format not in ("xywh", "xyxy"):
            raise ConfigError(f"box_format must be 'xywh' or 'xyxy', got {box_format!r}")
        self._sampler: Optional[SamplerOrder] = None
        if sampler is not None or batch_sampler is not None:
            self._sampler = SamplerOrder(
                sampler, batch_sampler, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last
            )
            batch_size, drop_last = self._sampler.batch_size, self._sampler.drop_last
            if isinstance(source, Mix):
                raise ConfigError("sampler= does not apply to a Mix: a mixture draws its own order")
            if (world_size is not None and world_size != 1) or (rank is not None and rank != 0):
                raise ConfigError(
                    "rank/world_size do not apply with a sampler: the sampler decides what this rank reads "
                    "(DistributedSampler)"
                )
            rank, world_size = 0, 1
        rank, world_size = _distributed(rank, world_size)
        batch_mix, self._batch_functions = split_batch_transforms(batch_transforms)
        if batch_mix is not None and source.has_boxes:
            raise ConfigError(
                f"batch_transforms: {type(batch_mix).__name__} mixes class labels; {type(source).__name__} "
                "gives boxes"
            )

        self.source = source
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.progress = progress
        self._world_size = world_size
        self._padded_targets = targets == "padded"
        self._xyxy = box_format == "xyxy"
        self._channels_last = channels_last
        #: The output dtype in force: given, implied by a torchvision pipeline, or "float32".
        self.dtype = dtype
        self._seed = seed
        self._device = _parse_device(device)
        self._pin = _is_cuda(self._device) if pin_memory is None else bool(pin_memory)
        # The engine's layout: channels_last batches are N×H×W×C buffers seen as N×C×H×W.
        engine_layout = "HWC" if channels_last else layout
        output: dict[str, Any] = {"dtype": dtype, "layout": engine_layout, "max_pixels": max_pixels}
        if not check_bool(exif_orientation, "exif_orientation"):
            output["exif_orientation"] = False
        if channels is not None:
            output["channels"] = channels
        transform = source._sample_transform(steps, **output)
        # Decoding on the GPU: the engine's threads make records for it.
        self._device_pipeline: Any = None
        self._device_plan: Any = None
        self._device_decoder: Any = None
        if decode_device is not None:
            self._device, self._device_plan = _device_decode_plan(
                decode_device, device, transform, source, batch_mix, self._batch_functions, collate_fn
            )
            self._device_pipeline, transform = transform, self._device_plan
            self._pin = pin_memory is not False  # The records: read by nvJPEG and copied asynchronously.
        engine_source = source._engine_source()
        if self._sampler is not None:
            engine_source = self._given_order = _conveyor.GivenOrderSource(
                engine_source, self._sampler.length
            )
        options = _options(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            threads=threads,
            io_threads=io_threads,
            prefetch=prefetch,
            memory_budget=memory_budget,
            on_error=_conveyor.OnError.SKIP if on_error == "skip" else _conveyor.OnError.RAISE,
            rank=rank,
            world_size=world_size,
            local_processes=_local_processes(),
            shuffle_buffer=source.shuffle_buffer or 0,
            batch_mix=_batch_mix_spec(batch_mix, source, engine_layout),
        )
        allocator = {"allocator": _pinned_allocator()} if self._pin else {}
        self._engine = _conveyor.Loader(engine_source, transform, options, **allocator)
        # A second engine for a pass beside the one under way (a peek inside
        # the training loop), made at the first such pass.
        self._side_args = (engine_source, transform, options, allocator)
        self._side_engine: Optional[_conveyor.Loader] = None
        self._side_iteration = 0  # Identifies the live side pass; older ones stop.
        # The iteration whose iterator is alive, until it ends or is dropped.
        self._live: Optional[int] = None
        self._live_handed = 0  # Batches it has handed out.
        self._live_generator: Optional[weakref.ref[Any]] = None  # Its iterator.
        self._epoch = 0  # The epoch the next iter() runs.
        self._start_position = 0  # Where it starts on this rank (set by load_state_dict).
        self._start_batch = 0
        self._start_segment = 0  # Global positions an earlier world size consumed (elastic resume).
        self._start_order_world = 0  # The world size its order was made for (0: this loader's).
        self._running_epoch: Optional[int] = None  # The last pass's epoch until it ends (state_dict).
        self._running_start = 0  # The position it started at.
        self._running_segment = 0
        self._running_order_world = 0
        self._position = 0  # End position of the last batch handed to the user.
        self._batches_done = 0
        self._iteration = 0  # Identifies the live iterator; older ones stop.
        self._delivered = 0  # Images handed out in the pass under way (for images/s).
        self._last_address = 0  # Engine buffer address of the last batch (for checks).
        self._closed = False
        self._cuda: Optional[_device.TorchCuda] = None  # device="cuda": made at the first iter().
        # Workers stop when the loader is garbage collected, even without close().
        self._finalizer = weakref.finalize(self, _close_engine, self._engine)

    # --- iteration ---------------------------------------------------------------

    def __len__(self) -> int:
        """Batches of the epoch under way, else of the one the next ``iter()``
        runs, for this rank (skipped samples can make it fewer). An epoch
        resumed by load_state_dict() counts only the batches it has left."""
        if self._running_epoch is not None:
            return self._batches_after(self._running_start, self._running_segment)
        return self._batches_after(self._start_position, self._start_segment)

    def _batches_after(self, position: int, segment: int = 0) -> int:
        # The batches an epoch gives from `position` of this rank's order on.
        return int(self._engine.batches_after(position, segment))

    def __iter__(self) -> Iterator[Batch]:
        """Starts a pass over the epoch ``self.epoch`` (from the position loaded
        by load_state_dict, else its start); the pass under way, if any, ends.
        The epoch counts as run once the pass hands out its second batch or
        ends (see the class docstring: a peek does not use up an epoch)."""
        if self._closed:
            raise ConfigError("the loader is closed")
        self._engine.check_not_reentered("iter(loader)")  # Before any state changes.
        if self._live is not None and self._live_handed >= 2 and not self._live_held():
            # The pass under way is a loop's (its iterator is alive, has handed out
            # two batches and no variable holds it: a for statement does): this
            # one, a peek inside it, runs beside it.
            return self._side_pass()
        self._iteration += 1
        epoch = self._epoch
        if self._sampler is not None:
            self._given_order.set_order(epoch, self._sampler.draw(epoch))
        self._engine.start_epoch(
            epoch, self._start_position, self._start_batch, self._start_segment, self._start_order_world
        )
        self._position, self._batches_done = self._start_position, self._start_batch
        self._running_start, self._running_segment = self._start_position, self._start_segment
        self._running_order_world = self._start_order_world
        self._running_epoch = epoch
        self._delivered = 0
        batches = self._batches(self._iteration, epoch, self._running_start, self._running_segment)
        if _is_cuda(self._device):
            if self._cuda is None:  # One per Loader: its copy stream serves every pass.
                self._cuda = _device.TorchCuda(self._device)
            # A collate_fn's output is new memory: pinned before its copy too.
            batches = _device.prefetch(
                batches, self._cuda, pin=self._pin, pin_images=self._collate_fn is not None
            )
        elif self._device is not None:
            device = self._device
            batches = (
                (_device.move(images, device), _device.move(second, device), mark)
                for images, second, mark in batches
            )
        self._live, self._live_handed = self._iteration, 0
        generator = self._deliver(batches, self._iteration, epoch)
        self._live_generator = weakref.ref(generator)
        return generator

    def _live_held(self) -> bool:
        """Whether a variable of a frame on the stack (a local or a global)
        holds the live pass's iterator: an iterator kept aside (``it =
        iter(loader)``), not the one a ``for`` statement drives."""
        generator = self._live_generator() if self._live_generator is not None else None
        if generator is None:
            return False
        frame = sys._getframe(1)
        while frame is not None:
            if any(value is generator for value in frame.f_locals.values()) or any(
                value is generator for value in frame.f_globals.values()
            ):
                return True
            frame = frame.f_back
        return False

    def _deliver(self, batches: Iterator[_Marked], iteration: int, epoch: int) -> Iterator[Batch]:
        try:
            yield from self._handed_out(batches, iteration, epoch)
        finally:  # Ended, failed, or its iterator dropped (CPython closes it at once).
            if self._live == iteration:
                self._live = None

    def _handed_out(self, batches: Iterator[_Marked], iteration: int, epoch: int) -> Iterator[Batch]:
        # The resume position advances as the user receives a batch, not when
        # the engine delivers it (the CUDA path holds one batch back).
        # A batch handed out always counts for state_dict() (a checkpoint taken
        # after one training step resumes after it); only the epoch counter
        # waits for a second batch, so that a peek does not use up an epoch.
        handed = 0
        for images, second, (position, done) in batches:
            if iteration != self._iteration:
                break  # A batch the CUDA path held back: the pass has ended.
            self._position, self._batches_done = position, done
            handed += 1
            self._live_handed = handed
            if handed == 2:
                self._count_pass(iteration, epoch)
            yield images if second is _COLLATED else (images, second)
            # Hold no batch while waiting for the next: memory_budget counts
            # only the one the user holds.
            del images, second
        if iteration != self._iteration:
            # Ending in silence would pass for the end of the epoch.
            raise ConfigError(
                "the loader is closed"
                if self._closed
                else f"this pass over epoch {epoch} was ended after {handed} batch(es) by a newer "
                "iter(loader): a newer pass runs beside this one only when a for statement drives it "
                "and it has handed out two batches; keep iterating one, or make a second Loader"
            )
        self._count_pass(iteration, epoch)
        self._epoch_finished(epoch)

    def _raise_wait_timeout(self, engine: _conveyor.Loader, epoch: int, batch: int) -> NoReturn:
        stats = engine.stats()
        raise WaitTimeoutError(
            f"no batch within timeout={self._timeout:g} s: epoch {epoch}, batch {batch} (counting from 1; "
            f"samples read {stats.samples_read}, processed {stats.samples_processed} this epoch): a read "
            "or a transform is slower than the timeout allows, or the source stalls"
        )

    def _count_pass(self, iteration: int, epoch: int) -> None:
        # The pass counts as its epoch: the next iter() runs the next one
        # (unless set_epoch() or load_state_dict() chose another meanwhile).
        if iteration == self._iteration and self._epoch == epoch and self._running_epoch == epoch:
            self._epoch = epoch + 1
            self._start_position = self._start_batch = self._start_segment = self._start_order_world = 0

    def _batches(self, iteration: int, epoch: int, start: int, segment: int) -> Iterator[_Marked]:
        bar = self._progress_bar(epoch, start, segment) if self.progress else None
        try:
            waiting_since = time.monotonic()  # Since this generator was asked for its next batch.
            produced = self._batches_done  # Batches of the epoch before the one waited for.
            while iteration == self._iteration:
                batch = self._engine.next(_WAIT_SLICE_SECONDS)
                if batch is False:  # Timed out: Python handles pending signals here.
                    if self._timeout and time.monotonic() - waiting_since >= self._timeout:
                        self._raise_wait_timeout(self._engine, epoch, produced + 1)
                    continue
                if batch is None:
                    return
                self._last_address = batch.address
                mark = (batch.end_position, batch.index + 1)
                self._delivered += batch.size
                if _autotune_log.isEnabledFor(logging.INFO):
                    for line in self._engine.autotune_trace():
                        _autotune_log.info("%s", line)
                if bar is not None:
                    self._update_bar(bar, batch.size)
                images, second = self._converted(batch)
                produced = batch.index + 1
                yield images, second, mark
                waiting_since = time.monotonic()
                del batch, images, second  # See _deliver.
        finally:
            if bar is not None:
                self._update_bar(bar, 0, refresh=True)
                bar.close()
                bar.write(self._summary(epoch), file=sys.stderr)
            # A pass driven from one of the engine's threads (a transform that
            # calls next() on it) was refused: stopping there would wait for itself.
            if iteration == self._iteration and not self._engine.on_own_thread():
                self._engine.stop()

    def _side_pass(self) -> Iterator[Batch]:
        """A pass over the next epoch beside the training loop's, on a second
        engine (made once): its own order and threads; it changes nothing
        of the loop's pass (positions, epoch counter, state_dict)."""
        if self._side_engine is None:
            source, transform, options, allocator = self._side_args
            self._side_engine = _conveyor.Loader(source, transform, options, **allocator)
            weakref.finalize(self, _close_engine, self._side_engine)
        self._side_iteration += 1
        epoch = self._epoch
        if self._sampler is not None:
            self._given_order.set_order(epoch, self._sampler.draw(epoch))
        self._side_engine.start_epoch(epoch, 0, 0, 0)
        return self._side_batches(self._side_engine, self._side_iteration, epoch)

    def _side_batches(self, engine: _conveyor.Loader, iteration: int, epoch: int) -> Iterator[Batch]:
        try:
            waiting_since = time.monotonic()
            produced = 0
            while iteration == self._side_iteration:
                batch = engine.next(_WAIT_SLICE_SECONDS)
                if batch is False:
                    if self._timeout and time.monotonic() - waiting_since >= self._timeout:
                        self._raise_wait_timeout(engine, epoch, produced + 1)
                    continue
                if batch is None:
                    return
                images, second = self._converted(batch)
                produced = batch.index + 1
                if self._device is not None:
                    images, second = _device.move(images, self._device), _device.move(second, self._device)
                yield images if second is _COLLATED else (images, second)
                waiting_since = time.monotonic()
                del batch, images, second
            raise ConfigError(
                "the loader is closed"
                if self._closed
                else f"this pass over epoch {epoch}, beside the training loop's, was ended by a newer "
                "iter(loader) beside it: two passes run at once at most"
            )
        finally:
            if iteration == self._side_iteration and not engine.on_own_thread():
                engine.stop()

    def _converted(self, batch: _conveyor.Batch) -> tuple[Any, Any]:
        """(images, labels or targets) of an engine batch as the loader hands
        them out, after the batch functions and collate_fn (then the second
        item is _COLLATED)."""
        if self._device_plan is not None:  # Records, decoded on the GPU by their copy.
            images = self._decode_on_device(batch)
        elif batch.variable_shape:  # A chain without a fixed size: one tensor per sample.
            images = [_as_tensor(image) for image in _conveyor.Batch.sample_images(batch)]
        else:
            images = _as_tensor(_conveyor.Batch.images(batch))
            if self._channels_last:  # N×H×W×C memory seen as N×C×H×W: a view, no copy.
                images = images.permute(0, 3, 1, 2)
        labels = _from_numpy(_conveyor.Batch.labels(batch))  # Its own memory, not the batch's.
        soft_labels = _conveyor.Batch.soft_labels(batch)
        second = self._targets(batch, labels) if self.source.has_boxes else labels
        if soft_labels is not None:
            second = _from_numpy(soft_labels)
        for i, function in self._batch_functions:
            images, second = _call_batch_function(i, function, images, second)
        if self._collate_fn is not None:
            images, second = self._collate_fn(_samples(images, second)), _COLLATED
        return images, second

    def _decode_on_device(self, batch: _conveyor.Batch) -> _device.DecodeOnDevice:
        if self._device_decoder is None:  # Made at the first batch: it compiles its kernel.
            index = self._device.index if self._device.index is not None else torch.cuda.current_device()
            self._device_decoder = _conveyor.DeviceImageDecoder(self._device_pipeline, index)
        pipeline = self._device_pipeline
        shape = (batch.size, *pipeline.sample_shape)
        dtype = getattr(torch, pipeline.dtype)
        return _device.DecodeOnDevice(batch, self._device_decoder, shape, dtype, self._channels_last)

    def _targets(self, batch: _conveyor.Batch, labels: Any) -> Any:
        # Boxes are copied out of the engine (they are small): per image a
        # dict, or one padded dict with the count of boxes per image.
        counts, boxes, categories = (_from_numpy(a) for a in _conveyor.Batch.boxes(batch))
        if self._xyxy:  # (x, y, w, h) -> (x1, y1, x2, y2), in the batch's own copy.
            boxes[:, 2:] += boxes[:, :2]
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
        """Sets the epoch the next ``iter()`` runs (as DistributedSampler.set_epoch);
        a pass under way goes on with its own.

        After load_state_dict(), setting the loaded epoch keeps the loaded
        position (so calling ``set_epoch(epoch)`` at the top of every epoch
        resumes where the state was taken); any other epoch starts at its
        beginning and drops the loaded position.
        """
        epoch = check_int(epoch, "epoch", minimum=0, maximum=_conveyor.Loader.MAX_EPOCH)
        if self._sampler is not None:
            self._sampler.set_epoch(epoch)
        if epoch != self._epoch:
            self._start_position = self._start_batch = self._start_segment = self._start_order_world = 0
        self._epoch = epoch
        if self._live is None:
            # No pass under way: state_dict() and len() speak of this epoch.
            # One under way goes on (as DistributedSampler's iterator does),
            # and state_dict() says where it stands.
            self._running_epoch = None

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter()`` runs."""
        return self._epoch

    @property
    def timeout(self) -> float:
        """Seconds to wait for one batch (0: as long as it takes)."""
        return self._timeout

    @property
    def collate_fn(self) -> Optional[Callable[[list[Any]], Any]]:
        """The function that makes each batch from its samples, or None."""
        return self._collate_fn

    @property
    def dataset(self) -> Source:
        """The source (DataLoader's name for what it loads from)."""
        return self.source

    @property
    def sampler(self) -> Any:
        """The ``sampler=`` given, or None (the loader's own order)."""
        return None if self._sampler is None else self._sampler.sampler

    @property
    def batch_sampler(self) -> Any:
        """The ``batch_sampler=`` given, or None."""
        return None if self._sampler is None else self._sampler.batch_sampler

    def state_dict(self) -> dict[str, int]:
        """Where the epoch stands, in its global order: small, picklable, the
        same dict on every rank (ranks of a DDP job hand out batches in step).

        ``position`` counts the positions of the epoch's global order (every
        rank's samples) handed out: with W ranks each at position p of its
        share, ``segment_start + p * W``. load_state_dict() resumes with
        bit-identical batches at the same world size, and at any other world
        size deals what is left of the epoch among the new ranks, so that over
        the epoch every sample is seen once (plus DistributedSampler's padding).
        With a shuffle buffer over a source in shards, which deals the shards
        among the ranks, ``order_world_size`` is the world size that began the
        epoch (absent when 1). ``samples`` is the epoch's samples over all
        ranks (before padding): a state of another data set is refused.
        """
        if self._running_epoch is not None:
            epoch, local, batch = self._running_epoch, self._position, self._batches_done
            segment, order_world = self._running_segment, self._running_order_world
        else:
            epoch, local, batch = self._epoch, self._start_position, self._start_batch
            segment, order_world = self._start_segment, self._start_order_world
        epoch, position, batch, world_size, segment, order_world, samples = self._engine.saved_position(
            epoch, local, batch, segment, order_world
        )
        state = {
            "seed": self._seed,
            "epoch": epoch,
            "position": position,
            "batch": batch,
            "world_size": world_size,
            "segment_start": segment,
            "samples": samples,
        }
        if order_world is not None:
            state["order_world_size"] = order_world
        return state

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Makes the next ``iter()`` continue where ``state`` was taken, at this
        loader's world size, which may differ from the saved one (elastic resume).

        Raises:
            ConfigError: ``state`` is not what state_dict() gives for this
                loader (a missing key, a value that is not an int, a position
                outside the epoch, another seed, another data set's
                ``samples``), naming the key.
        """
        if not isinstance(state, Mapping):
            raise ConfigError(f"state must be a dict from Loader.state_dict(), got {type(state).__name__}")
        for key in ("seed", "epoch", "position", "batch"):
            if key not in state:
                raise ConfigError(f"state has no {key!r}: it must come from Loader.state_dict()")
        seed = check_int(state["seed"], "state['seed']", minimum=0, maximum=UINT64_MAX)
        if seed != self._seed:
            hint = (
                f" (from torch.initial_seed(), which differs per process: pass seed={seed} or call "
                f"torch.manual_seed({seed}) before making the Loader)"
                if self._seed_from_torch
                else ""
            )
            raise ConfigError(f"state was saved with seed {seed}, this loader has seed {self._seed}{hint}")
        # The values' types here; where they may lie, the engine's rule
        # (Loader::resume_point), with the same ConfigErrors naming the key.
        epoch, position, batch = (
            check_int(state[key], f"state[{key!r}]") for key in ("epoch", "position", "batch")
        )
        world = None
        if "world_size" in state:  # Else saved before positions were global: this rank's position.
            world = check_int(state["world_size"], "state['world_size']")
        segment = check_int(state.get("segment_start", 0), "state['segment_start']")
        order_world = None  # The order was made for 1 world (or does not depend on it).
        if "order_world_size" in state:
            order_world = check_int(state["order_world_size"], "state['order_world_size']")
        samples = None  # Saved before states said it: not checked.
        if "samples" in state:
            samples = check_int(state["samples"], "state['samples']")
        epoch, local, batch, segment, order_world = self._engine.resume_point(
            epoch, position, batch, world, segment, order_world, samples
        )
        self._epoch, self._start_position, self._start_batch = epoch, local, batch
        self._start_segment, self._start_order_world = segment, order_world
        self._running_epoch = None

    # --- observation ------------------------------------------------------------------

    def stats(self) -> dict[str, Stat]:
        """Per-stage counters of the current epoch: samples read and processed,
        seconds spent reading, decoding+transforming (summed over threads) and
        waiting for batches (input stall), the part of the reading seconds a
        Python dataset's reads spent waiting for the GIL
        (``read_lock_wait_seconds``), the time reads waited for a slot under
        a host's limit on requests in flight (``read_queue_wait_seconds``,
        not part of ``read_seconds``), wall time, queue depth, skipped
        samples, ``input_stall``: the fraction of wall time spent waiting, and
        ``images_per_second``: images handed out by the pass under way (or the
        last one) per second of its wall time. For a Mix source,
        ``samples_per_source``: the samples each of its sources gave (not
        skipped) in the epoch so far.
        Also the parallelism: ``threads``, ``io_threads``, ``prefetch`` as
        chosen now (``*_auto``: by autotune, else pinned), the threads alive
        (``threads_running``, ``io_threads_running``), ``autotune_reason`` (why
        the last change), ``autotune_changes``, autotune's estimates
        (``demand_per_second``, ``read_latency_seconds``,
        ``process_time_seconds``, ``latency_spread_seconds``, ``other_cores``)
        and its limits (``usable_cores``, ``memory_budget``), with where
        ``usable_cores`` came from (``usable_cores_source``: the CPUs the
        process may use, shared by torchrun's ``LOCAL_WORLD_SIZE`` ranks of
        a node). With ``decode_device``, ``device_decode``: nvJPEG's
        ``backend`` ("hardware (N engines)" or another), and since the loader
        was made, the samples planned for the GPU (``device_samples``), those
        the CPU path finished because the GPU cannot take them
        (``host_samples``), JPEGs redone on the CPU after nvJPEG refused
        their batch (``host_redone``), and the seconds the loop's thread
        spent queuing the GPU's work (``decode_seconds``)."""
        engine_stats = self._engine.stats()
        stats: dict[str, Any] = {name: getattr(engine_stats, name) for name in _STATS}
        wall, wait = float(stats["wall_seconds"]), float(stats["wait_seconds"])
        stats["input_stall"] = wait / wall if wall > 0 else 0.0
        stats["images_per_second"] = self._delivered / wall if wall > 0 else 0.0
        if isinstance(self.source, Mix):
            stats["samples_per_source"] = list(engine_stats.samples_per_part)
        store = getattr(self.source, "_store", None)
        if store is not None and hasattr(store, "counters"):
            stats["remote"] = store.counters()
        if self._device_plan is not None:
            decoder = self._device_decoder
            stats["device_decode"] = {
                "backend": decoder.backend if decoder is not None else "",
                "device_samples": self._device_plan.device_samples,
                "host_samples": self._device_plan.host_samples,
                "host_redone": decoder.host_redone if decoder is not None else 0,
                "decode_seconds": decoder.decode_seconds if decoder is not None else 0.0,
            }
        return stats

    def skipped(self) -> list[tuple[str, str]]:
        """(key, cause) of each sample skipped in the current epoch (on_error="skip")."""
        return [(s.key, s.cause) for s in self._engine.skipped()]

    # --- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Stops the work and joins every engine thread; the loader can't be
        iterated after. Batches already handed out stay valid."""
        self._engine.check_not_reentered("Loader.close()")  # Before any state changes.
        self._closed = True
        self._iteration += 1
        self._side_iteration += 1
        self._engine.close()
        if self._side_engine is not None:
            self._side_engine.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- helpers --------------------------------------------------------------------------

    def _progress_bar(self, epoch: int, start: int, segment: int) -> Any:
        # A resumed epoch's bar starts at its position and ends where the
        # epoch's samples (or its last full batch) end.
        from tqdm.auto import tqdm

        samples = self._engine.segment_samples(segment)
        left = min(self._batches_after(start, segment) * self.batch_size, samples - start)
        return tqdm(total=start + left, initial=start, desc=f"epoch {epoch}", unit="img", leave=False)

    def _summary(self, epoch: int) -> str:
        # The line the progress bar leaves behind when its epoch's pass ends.
        stats = self.stats()
        return (
            f"epoch {epoch}: {self._delivered} images in {stats['wall_seconds']:.2f} s, "
            f"{stats['images_per_second']:.0f} images/s, input stall {100 * stats['input_stall']:.0f}%"
        )

    def _update_bar(self, bar: Any, samples: int, refresh: bool = False) -> None:
        bar.update(samples)
        bar.set_postfix_str(_progress_text(self.stats()), refresh=refresh)


def _parallelism(value: object, name: str) -> int:
    # "auto" -> 0 (the engine's kAuto), else an int that pins the setting.
    if isinstance(value, str):
        if value != AUTO:
            raise ConfigError(f"{name} must be 'auto' or an int >= 1, got {value!r}")
        return 0
    return check_int(value, name, minimum=1, maximum=INT_MAX)


def _progress_text(stats: Mapping[str, Any]) -> str:
    # "stall 0% | threads 2/2 io 24 prefetch 3 (auto)": a pinned value has no
    # "(auto)"; threads shows chosen/usable cores.
    def auto(key: str) -> str:
        return "*" if stats[f"{key}_auto"] else ""

    return (
        f"stall {100 * stats['input_stall']:.0f}% | threads {stats['threads']}{auto('threads')}/"
        f"{stats['usable_cores']} io {stats['io_threads']}{auto('io_threads')} "
        f"prefetch {stats['prefetch']}{auto('prefetch')}"
    )


def _dataloader_arguments(
    threads: Union[int, str, None],
    num_workers: Optional[int],
    prefetch: Union[int, str],
    *,
    persistent_workers: Optional[bool],
    prefetch_factor: Optional[int],
    worker_init_fn: Optional[Callable[[int], None]],
    in_order: bool,
) -> tuple[Union[int, str, None], Union[int, str]]:
    """``threads`` and ``prefetch`` from DataLoader's names: num_workers is
    threads' alias (0, the DataLoader's "load in the training process", is one
    thread) and prefetch_factor sets prefetch; the arguments with nothing to
    change here are accepted (see the class docstring)."""
    if persistent_workers is not None:
        check_bool(persistent_workers, "persistent_workers")
    check_bool(in_order, "in_order")
    if worker_init_fn is not None:
        if not callable(worker_init_fn):
            raise ConfigError(f"worker_init_fn must be callable, got {type(worker_init_fn).__name__}")
        warn_once(
            "worker_init_fn",
            "worker_init_fn is not called: conveyor has no worker processes (its workers are native "
            "threads in this process); seed with seed= or torch.manual_seed and set up state before "
            "making the Loader",
            stacklevel=4,  # The Loader(...) call.
        )
    workers = None
    if num_workers is not None:
        workers = check_int(num_workers, "num_workers", minimum=0, maximum=INT_MAX)
        if threads is not None and threads != AUTO:
            raise ConfigError(
                f"give threads or num_workers (its DataLoader name), not both: got threads={threads!r}, "
                f"num_workers={num_workers!r}"
            )
        usable = _conveyor.default_cpu_threads()
        if workers > usable:
            warn_once(
                "num_workers",
                f"num_workers={workers} is more than the {usable} CPUs this process may use: the threads "
                "would take turns on them (leave num_workers out: conveyor chooses within the usable CPUs)",
                stacklevel=4,
            )
        threads = max(1, workers)
    if prefetch_factor is not None:
        factor = check_int(prefetch_factor, "prefetch_factor", minimum=1, maximum=INT_MAX)
        if prefetch != AUTO:
            raise ConfigError(
                f"give prefetch or prefetch_factor (DataLoader's batches per worker), not both: got "
                f"prefetch={prefetch!r}, prefetch_factor={prefetch_factor!r}"
            )
        # The threads in the DataLoader's place: num_workers, or threads when pinned.
        pinned = workers if workers is not None else threads if is_int(threads) else 1
        prefetch = min(INT_MAX, factor * max(1, pinned))
    return threads, prefetch


def _check_timeout(timeout: Any) -> float:
    if not is_real(timeout) or math.isnan(timeout) or timeout < 0:
        raise ConfigError(
            f"timeout must be a number of seconds >= 0 (0 or inf: wait as long as it takes), got {timeout!r}"
        )
    return float(timeout)


def _generator_seed(generator: Any, seed: Optional[int]) -> Optional[int]:
    """The seed a ``torch.Generator`` stands for, as DataLoader's ``generator=`` seeds its shuffle."""
    if generator is None:
        return seed
    if torch is None or not isinstance(generator, torch.Generator):
        raise ConfigError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if seed is not None:
        raise ConfigError(f"give seed or generator, not both: got seed={seed!r} and a generator")
    return int(generator.initial_seed())


def _default_seed() -> int:
    # torch.manual_seed(s) sets the default generator's initial seed to s.
    if torch is None:
        return DEFAULT_SEED
    seed = int(torch.initial_seed())
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        # Each process has its own initial seed unless the script seeded them
        # alike; ranks shuffling differently would overlap their shares. Rank
        # 0's seed is every rank's (a collective: every rank makes its Loader).
        box = [seed]
        dist.broadcast_object_list(box, src=0)
        seed = int(box[0])
    return seed


def _output_dtype(dtype: Union[str, Any, None], implied: Optional[str]) -> str:
    """The dtype name from a string or a torch dtype, checked against the one
    the transforms imply (a torchvision pipeline's ToTensor/ToDtype/...)."""
    if torch is not None and isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
        if name not in OUTPUT_DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(OUTPUT_DTYPES)} (or torch's), got {dtype}")
        dtype = name
    if dtype is None:
        return implied or "float32"
    if implied is not None and dtype != implied:
        raise ConfigError(
            f"dtype={dtype!r} disagrees with the transforms: their torchvision type conversion "
            f"(ToTensor, PILToTensor, ToImage, ToDtype, ConvertImageDtype) gives {implied!r}; "
            "leave dtype out, or change the conversion in the pipeline"
        )
    return dtype  # type: ignore[return-value]


def _channels_last(memory_format: Any, layout: str) -> bool:
    """Whether batches are N×C×H×W views of an N×H×W×C buffer."""
    if memory_format is None:
        return False
    if torch is None or memory_format not in (torch.channels_last, torch.contiguous_format):
        raise ConfigError(
            "memory_format must be None, torch.contiguous_format or torch.channels_last, "
            f"got {memory_format!r}"
        )
    if memory_format is torch.contiguous_format:
        return False
    if layout != "CHW":
        raise ConfigError(
            f"memory_format=torch.channels_last gives N×C×H×W batches; it needs layout='CHW', got {layout!r}"
        )
    return True


def _batch_mix_spec(batch_mix: Optional[BatchTransform], source: Source, layout: str) -> Any:
    # The engine's BatchMixSpec; num_classes defaults to the source's classes.
    if batch_mix is None:
        return None
    classes = getattr(source, "classes", None)
    return batch_mix._spec(None if classes is None else len(classes), channels_last=layout == "HWC")


def _samples(images: Any, second: Any) -> list[tuple[Any, Any]]:
    """The batch as collate_fn takes it: its (image, label or target) pairs."""
    if len(images) != len(second):
        raise ConfigError(
            f"collate_fn: the batch has {len(images)} images but {len(second)} labels or targets (a "
            "batch_transforms function changed one of them)"
        )
    return list(zip(images, second))


def _call_batch_function(index: int, function: BatchFunction, images: Any, labels: Any) -> tuple[Any, Any]:
    result = function(images, labels)
    if not isinstance(result, tuple) or len(result) != 2:
        raise ConfigError(
            f"batch_transforms[{index}]: {getattr(function, '__name__', type(function).__name__)} returned "
            f"{type(result).__name__}, not an (images, labels) pair"
        )
    return result


def _local_processes() -> int:
    """The processes of this job on this node (torchrun's LOCAL_WORLD_SIZE),
    which share its cores; 1 outside torchrun. A value that is not an int >= 1
    is ignored, with a warning: the environment is not the user's call."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    if value is None:
        return 1
    if not value.strip().isdigit() or not 1 <= int(value) <= INT_MAX:
        warn_once(
            "local-world-size",
            f"LOCAL_WORLD_SIZE={value!r} is not an int >= 1: "
            "the loader assumes it has the node's cores to itself",
        )
        return 1
    return int(value)


def _distributed(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int]:
    """(rank, world_size): each one not given from the initialised
    torch.distributed process group, as DistributedSampler takes them; without
    a group, rank 0 of 1, and one given without the other is refused where
    the other cannot be 0 of 1."""
    group = None
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            group = dist.get_rank(), dist.get_world_size()
    if world_size is not None:
        world_size = check_int(world_size, "world_size", minimum=1)
    if rank is not None:
        rank = check_int(rank, "rank", minimum=0)
    if group is None:
        if rank is None and world_size is None:
            _warn_if_launched_without_a_group()
        if rank is None and world_size is not None and world_size > 1:
            raise ConfigError(
                f"world_size={world_size} without rank: pass rank= too (no torch.distributed process "
                "group is initialised to take it from)"
            )
        if world_size is None and rank is not None and rank > 0:
            raise ConfigError(
                f"rank={rank} without world_size: pass world_size= too (no torch.distributed process "
                "group is initialised to take it from)"
            )
        group = (0, 1)
    rank = group[0] if rank is None else rank
    world_size = group[1] if world_size is None else world_size
    if rank >= world_size:
        raise ConfigError(f"rank must be < world_size, got rank {rank} of {world_size}")
    return rank, world_size


def _warn_if_launched_without_a_group() -> None:
    """Warns where a launcher (torchrun) says this process is one of several
    but no process group is initialised yet: the loader would read the whole
    epoch in every process."""
    launched = os.environ.get("WORLD_SIZE", "")
    if launched.isdigit() and int(launched) > 1:
        warn_once(
            "world_size_from_environment",
            f"WORLD_SIZE={launched} is set (torchrun?) but no torch.distributed process group is "
            "initialised: this loader reads the whole epoch in every process. Call "
            "torch.distributed.init_process_group() before making the Loader, or pass rank= and "
            "world_size=",
            stacklevel=5,  # The Loader(...) call.
        )


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


def _device_decode_plan(
    decode_device: Any,
    device: Any,
    transform: Any,
    source: Source,
    batch_mix: Any,
    batch_functions: Any,
    collate_fn: Any,
) -> tuple[Any, Any]:
    """(the device, the engine's DevicePlanTransform) for decode_device, or a
    ConfigError naming what cannot be decoded there: the chain and the
    loader's options first, then CUDA's libraries, then the device."""
    name = f"decode_device={decode_device!r}"
    if str(decode_device).split(":")[0] != "cuda":
        raise ConfigError(f"{name}: only 'cuda' or 'cuda:N' decodes on a device")
    if not isinstance(transform, _conveyor.ImagePipeline):
        raise ConfigError(f"{name} decodes encoded images; {type(source).__name__} gives other samples")
    if source.has_boxes:
        raise ConfigError(f"{name}: boxes are moved with the image on the CPU path only")
    if batch_mix is not None or batch_functions:
        raise ConfigError(
            f"{name}: batch_transforms work on the CPU batch, which the GPU decode does not make"
        )
    if collate_fn is not None:
        raise ConfigError(f"{name}: collate_fn takes CPU samples, which the GPU decode does not make")
    plan = _conveyor.DevicePlanTransform(transform)  # Names a step the GPU cannot run.
    _conveyor.load_cuda_libraries()  # Names each CUDA library missing.
    parsed = _parse_device(decode_device)
    if device is not None and _cuda_index(_parse_device(device)) != _cuda_index(parsed):
        raise ConfigError(f"{name} but device={device!r}: the batches are where they are decoded")
    return parsed, plan


def _cuda_index(device: Any) -> Optional[int]:
    """The GPU ``device`` names ("cuda" is the current one); None for another type."""
    if device is None or device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


def _is_cuda(device: Any) -> bool:
    return device is not None and device.type == "cuda"


def _options(**fields: Any) -> _conveyor.LoaderOptions:
    options = _conveyor.LoaderOptions()
    for name, value in fields.items():
        setattr(options, name, value)
    return options


def _close_engine(engine: _conveyor.Loader) -> None:
    """Closes an engine whose Loader was collected. The collection may run on
    one of the engine's own threads (a garbage collection inside a transform
    or a dataset's __getitem__), where closing would wait for itself: it is
    then closed from a thread of its own, which holds it until it is done."""
    if engine.on_own_thread():
        threading.Thread(target=engine.close, name="conveyor-close", daemon=True).start()
    else:
        engine.close()


# The fields of the engine's LoaderStats (the keys of stats()); samples_per_part
# is reported for a Mix only (samples_per_source).
_STATS = tuple(
    name
    for name, value in vars(_conveyor.LoaderStats).items()
    if isinstance(value, property) and name != "samples_per_part"
)


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
