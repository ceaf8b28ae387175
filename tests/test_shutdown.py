"""Shutdown and leaks: loaders created and abandoned many times leave no
thread, file descriptor or memory behind; Ctrl-C and exceptions end a wait
cleanly; a consumer holding batches blocks the producer instead of growing
memory. No wall-clock speed is asserted: time bounds are generous timeouts
that only catch hangs.
"""

from __future__ import annotations

import _thread
import faulthandler
import gc
import io
import os
import signal
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import conveyor
from conveyor import transforms as T

CYCLES = 1000
HANG_SECONDS = 120
# Set by `make asan-python`, which runs these tests against an ASan build.
UNDER_ASAN = os.environ.get("CONVEYOR_UNDER_ASAN") == "1"
PAGE = os.sysconf("SC_PAGE_SIZE")


def engine_threads() -> int:
    """The engine's threads in this process: those named "conveyor-*".
    Counting only them keeps the count free of threads that other tests or
    libraries start and end on their own schedule (timers, tqdm's monitor)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                count += comm.read().startswith("conveyor-")
        except OSError:
            pass  # The thread ended between the listing and the read.
    return count


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


def png_bytes(value: int, size: int = 8) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """16 small JPEGs."""
    root = tmp_path_factory.mktemp("tiny")
    paths = []
    for i in range(16):
        path = root / f"{i:02d}.jpg"
        Image.fromarray(np.full((12, 10, 3), 10 * i, np.uint8)).save(path, quality=90)
        paths.append(path)
    return paths


def make_loader(paths: list[Path], **options: object) -> conveyor.Loader:
    settings: dict[str, object] = dict(batch_size=2, threads=2, io_threads=2, dtype="uint8", shuffle=True)
    settings.update(options)
    return conveyor.Loader(conveyor.sources.FileList(paths), [T.Resize((8, 8))], **settings)


def settled(threads: int, fds: int, patience: float = 10.0) -> tuple[int, int]:
    """The (threads, fds) counts, re-read for up to ``patience`` seconds while
    the engine's threads differ from ``threads`` or the descriptors exceed
    ``fds``: pthread_join returns when the thread has finished, but the kernel
    may list its task in /proc/self/task for a moment longer (and a new thread
    names itself when it first runs). A real leak stays; this only absorbs
    that window. Fewer descriptors are not a leak: objects of earlier tests
    (an HTTP client's sockets, an event loop) may be collected, and their
    descriptors closed, at any time."""
    deadline = time.monotonic() + patience
    counts = engine_threads(), open_fds()
    while (counts[0] != threads or counts[1] > fds) and time.monotonic() < deadline:
        time.sleep(0.001)
        counts = engine_threads(), open_fds()
    return counts


def one_cycle(paths: list[Path], how: str) -> None:
    """Creates a loader, takes one batch and abandons it in one of three ways."""
    loader = make_loader(paths)
    if how == "break":
        for images, _ in loader:
            assert images.shape == (2, 3, 8, 8)
            break
    elif how == "del":
        iterator = iter(loader)
        images, _ = next(iterator)
        del iterator  # Mid-epoch, without close().
    else:
        images, _ = next(iter(loader))
        loader.close()
    del images, loader  # The last references: the engine is destroyed here.


def test_create_use_abandon_cycles_leak_nothing(tiny_folder: list[Path]) -> None:
    """CYCLES loaders, each abandoned after one batch by break, del or
    close(): threads and descriptors return to the baseline after every
    cycle, and RSS shows no growth trend."""
    for how in ("break", "del", "close"):  # Warm-up: lazy imports, allocator pools.
        one_cycle(tiny_folder, how)
    gc.collect()
    threads, fds = engine_threads(), open_fds()
    rss: list[int] = []
    leaks: list[str] = []
    for cycle in range(CYCLES):
        how = ("break", "del", "close")[cycle % 3]
        one_cycle(tiny_folder, how)
        now_threads, now_fds = settled(threads, fds)
        if (now_threads != threads or now_fds > fds) and len(leaks) < 5:
            leaks.append(f"cycle {cycle} ({how}): {now_threads} threads, {now_fds} fds")
        fds = min(fds, now_fds)  # Something else closed descriptors: the baseline from now on.
        rss.append(rss_bytes())
    assert not leaks, f"baseline {threads} threads, {fds} fds; " + "; ".join(leaks)
    if UNDER_ASAN:
        return  # ASan's quarantine keeps freed memory resident: RSS says nothing there.
    early = statistics.median(rss[100:200])
    late = statistics.median(rss[-100:])
    # Generous: allocator noise is a few MB; a leak of even 10 KB per cycle
    # would show as ~8 MB over 800 cycles.
    assert late - early < 8 << 20, f"RSS grew from {early / 2**20:.1f} MB to {late / 2**20:.1f} MB"


class SlowDataset:
    """A map-style dataset whose reads sleep (storage that hangs)."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay
        self.calls = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> bytes:
        self.calls += 1
        time.sleep(self.delay)
        return png_bytes(index)


@pytest.fixture
def hang_guard() -> Iterator[None]:
    """Bounds a test that could hang: after HANG_SECONDS the process dumps
    every thread's traceback and exits (a failure, never a silent hang)."""
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def send_sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("interrupt", [_thread.interrupt_main, send_sigint], ids=["interrupt_main", "SIGINT"])
def test_keyboard_interrupt_ends_the_wait(hang_guard: None, interrupt: Callable[[], None]) -> None:
    """Ctrl-C while the consumer waits for a batch raises KeyboardInterrupt
    there (the wait runs in slices); close() then stops the work, and dropping
    the loader leaves no engine thread."""
    # Python installs its KeyboardInterrupt handler only when SIGINT was not
    # ignored at start-up; a suite started in the background (nohup, `cmd &`,
    # some CI runners) inherits SIG_IGN. Install it for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_during_wait(interrupt)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_during_wait(interrupt: Callable[[], None]) -> None:
    baseline = engine_threads()
    dataset = SlowDataset(64, delay=0.5)
    loader = conveyor.Loader(
        conveyor.sources.PythonSource(dataset), [T.Resize((8, 8))], batch_size=4, threads=2, io_threads=2
    )
    timer = threading.Timer(0.2, interrupt)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in loader:
                pass
            pytest.fail("the epoch ended before the interrupt")  # 64 × 0.5 s / 2 threads: it can't.
    finally:
        timer.cancel()
    # Not a speed assertion: the whole epoch takes 64 × 0.5 s / 2 = 16 s, so
    # only a wait that ignored the interrupt gets near this.
    assert time.monotonic() - started < 12, "the interrupt was not handled while waiting"
    loader.close()  # Waits for the reads under way (at most one delay each).
    assert dataset.calls < dataset.n, "the engine kept reading after close()"
    calls = dataset.calls
    time.sleep(0.2)
    assert dataset.calls == calls, "reads continue after close()"
    del loader
    gc.collect()
    assert settled(baseline, open_fds())[0] == baseline


def test_an_exception_in_the_consumer_stops_the_work(hang_guard: None) -> None:
    """An exception leaving the for loop closes the iterator, which stops the
    epoch: no read starts afterwards, even though the loader is still referenced."""
    dataset = SlowDataset(400, delay=0.01)
    # A deep prefetch: a loader that kept running would read ~60 samples
    # ahead during the pause below.
    loader = conveyor.Loader(
        conveyor.sources.PythonSource(dataset),
        [T.Resize((8, 8))],
        batch_size=2,
        threads=2,
        io_threads=2,
        prefetch=100,
    )
    with pytest.raises(ZeroDivisionError):
        for _ in loader:
            1 / 0  # noqa: B018 - the consumer's own bug
    calls = dataset.calls
    time.sleep(0.3)
    assert dataset.calls == calls, "reads continued after the consumer's exception"
    assert calls < dataset.n
    # The loader is reusable: the next epoch starts from scratch.
    assert len(next(iter(loader))[1]) == 2
    loader.close()


def test_close_joins_the_engine_threads(tiny_folder: list[Path]) -> None:
    """After close() no engine thread remains, even while the Loader object is still referenced."""
    baseline = engine_threads()
    loader = make_loader(tiny_folder, threads=3, io_threads=5)
    next(iter(loader))
    # The count sees the engine's threads (each names itself when it first runs).
    assert settled(baseline + 3 + 5, open_fds())[0] == baseline + 3 + 5
    loader.close()
    threads = settled(baseline, open_fds())[0]
    assert threads == baseline, f"{threads - baseline} engine threads after close()"


class FailingDataset:
    """Raises on sample 5, with a recognizable traceback."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> bytes:
        if index == 5:
            self.explode(index)
        return png_bytes(index)

    def explode(self, index: int) -> None:
        raise LookupError(f"sample {index} is gone")


def test_exception_in_python_source_reaches_the_consumer_with_its_traceback() -> None:
    loader = conveyor.Loader(
        conveyor.sources.PythonSource(FailingDataset()), [T.Resize((8, 8))], batch_size=2, threads=2
    )
    delivered = 0
    with pytest.raises(conveyor.ReadError) as info:
        for _ in loader:
            delivered += 1
    assert delivered == 2  # Samples 0-3; sample 5 is in batch 2.
    error = info.value
    assert str(error).startswith("FailingDataset[5]: ")
    assert "LookupError: sample 5 is gone" in str(error)
    original = error.__cause__
    assert isinstance(original, LookupError) and str(original) == "sample 5 is gone"
    frames = [frame.name for frame in traceback.extract_tb(original.__traceback__)]
    assert frames[-2:] == ["__getitem__", "explode"], frames
    loader.close()


def test_exception_in_python_source_under_skip_is_counted() -> None:
    loader = conveyor.Loader(
        conveyor.sources.PythonSource(FailingDataset()),
        [T.Resize((8, 8))],
        batch_size=4,
        on_error="skip",
        threads=2,
    )
    sizes = [len(labels) for _, labels in loader]
    assert sizes == [4, 4, 3]
    assert loader.stats()["skipped"] == 1
    [(key, cause)] = loader.skipped()
    assert key == "FailingDataset[5]" and "LookupError: sample 5 is gone" in cause


def test_a_consumer_holding_batches_blocks_the_producer(tiny_folder: list[Path]) -> None:
    """Holding 20 batches with prefetch=2: the pool holds those 20 plus at
    most `prefetch` more, and never more than `prefetch` are ready or in flight."""
    paths = tiny_folder * 4  # 64 samples, 64 batches of 1.
    prefetch = 2
    loader = make_loader(paths, batch_size=1, prefetch=prefetch, shuffle=False)
    held = []
    most_ahead = 0
    for images, labels in loader:
        held.append((images, labels))
        time.sleep(0.002)  # Give the producer every chance to run ahead.
        stats = loader.stats()
        most_ahead = max(most_ahead, stats["batches_ready"] + stats["batches_in_flight"])
        if len(held) == 20:
            break
    time.sleep(0.1)
    stats = loader.stats()
    most_ahead = max(most_ahead, stats["batches_ready"] + stats["batches_in_flight"])
    assert stats["buffers_allocated"] <= 20 + prefetch, stats
    assert most_ahead <= prefetch, stats
    # The held batches are intact (each its own buffer): 16 files repeated.
    for k, (images, _) in enumerate(held):
        expected = min(10 * (k % 16), 255)
        assert abs(int(images[0, 0, 4, 4]) - expected) <= 3
    loader.close()
