"""Autotune in the Loader: threads, io_threads and prefetch default to "auto";
the chosen values change only timing, never batches; the controller's
decisions respect the usable cores and the memory budget and are observable
(stats, progress, the "conveyor.autotune" logger, CONVEYOR_AUTOTUNE_LOG).

No assertion on wall time: delays only shape the pipeline, and assertions are
on the controller's decisions (stats()), within generous batch limits."""

from __future__ import annotations

import io
import json
import logging
import math
import os
import re
import time

import numpy as np
import pytest
from PIL import Image

import conveyor
from conftest import run_python
from conveyor import transforms as T
from conveyor.loader import _progress_text
from conveyor.sources import ImageFolder, PythonSource


def png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value % 256, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


class SleepyDataset:
    """``count`` 8×8 PNGs; each read sleeps ``read_seconds`` (slow storage)."""

    def __init__(self, count: int, read_seconds: float = 0.0) -> None:
        self.count, self.read_seconds = count, read_seconds
        self.images = [png(i) for i in range(16)]

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[bytes, int]:
        if self.read_seconds:
            time.sleep(self.read_seconds)
        return self.images[index % 16], index


def train_loader(root, **kwargs) -> conveyor.Loader:
    options = dict(batch_size=4, shuffle=True, seed=11, dtype="uint8")
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root), [T.RandomResizedCrop(16), T.RandomHorizontalFlip()], **options)


def epoch_arrays(loader, limit=None):
    out = []
    for k, (images, labels) in enumerate(loader):
        out.append((images.numpy().copy(), labels.numpy().copy()))
        if limit is not None and k + 1 == limit:
            break
    return out


def assert_same(a, b) -> None:
    assert len(a) == len(b)
    for (ia, la), (ib, lb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(la, lb)


def test_reads_of_urls_start_with_a_batchs_reads_in_flight(color_folder):
    from conveyor.sources import FileList

    urls = [f"http://127.0.0.1:9/{i}.jpg" for i in range(300)]  # Not read: the loader's first settings.
    images = [T.Resize((8, 8))]
    with conveyor.Loader(FileList(urls), images, batch_size=100, dtype="uint8") as remote:
        assert remote.stats()["io_threads"] == 100  # Their first batch waits one read, not seven.
    with conveyor.Loader(FileList(urls), images, batch_size=8, dtype="uint8") as small:
        assert small.stats()["io_threads"] == 16  # Never fewer than local reads start with.

    class Items:  # A Python dataset's reads wait on the GIL, not a network.
        def __len__(self) -> int:
            return 300

        def __getitem__(self, index: int) -> tuple[bytes, int]:
            return b"", 0

    with conveyor.Loader(PythonSource(Items()), images, batch_size=100, dtype="uint8") as python:
        assert python.stats()["io_threads"] == 16


def test_auto_is_the_default_and_gives_the_batches_of_fixed_threads(color_folder):
    with (
        train_loader(color_folder) as auto,
        train_loader(color_folder, threads=2, io_threads=3, prefetch=2) as fixed,
    ):
        stats = auto.stats()
        assert (stats["threads_auto"], stats["io_threads_auto"], stats["prefetch_auto"]) == (True, True, True)
        # The starting point: every usable core (the first batch is always awaited), 16 reads, 2 batches.
        assert (stats["threads"], stats["io_threads"], stats["prefetch"]) == (stats["usable_cores"], 16, 2)
        for _ in range(2):
            assert_same(epoch_arrays(auto), epoch_arrays(fixed))
        pinned = fixed.stats()
        assert (pinned["threads_auto"], pinned["io_threads_auto"], pinned["prefetch_auto"]) == (
            False,
            False,
            False,
        )
        assert (pinned["threads"], pinned["io_threads"], pinned["prefetch"]) == (2, 3, 2)
    # None, as a config file may hold it, is "auto" for each of the three.
    with train_loader(color_folder, threads=None, io_threads=None, prefetch=None) as none:
        stats = none.stats()
        assert (stats["threads_auto"], stats["io_threads_auto"], stats["prefetch_auto"]) == (True, True, True)


def test_resume_with_auto_on_both_sides(color_folder):
    with train_loader(color_folder) as whole:
        expected = epoch_arrays(whole)
    with train_loader(color_folder) as first:
        head = epoch_arrays(first, limit=3)
        state = first.state_dict()
    with train_loader(color_folder) as second:
        second.load_state_dict(state)
        tail = epoch_arrays(second)
    assert_same(head + tail, expected)


def test_a_slow_consumer_gets_fewer_cpu_threads_than_cores(caplog):
    # The property that holds whatever else runs on the machine. Which rule
    # gives the cores back depends on it: "idle" (Little's law) on a quiet
    # machine; beside another process the consumer's thread waits for a core,
    # which is the rest of the process wanting it. Each rule's own decision is
    # checked on injected windows in the C++ autotune tests.
    caplog.set_level(logging.INFO, logger="conveyor.autotune")
    loader = conveyor.Loader(PythonSource(SleepyDataset(100000)), [T.Resize((8, 8))], batch_size=4)
    cores = loader.stats()["usable_cores"]
    if cores < 2:
        pytest.skip("needs 2 usable cores")
    batches = iter(loader)
    next(batches)
    loader._engine.set_parallelism(threads=cores)  # Start from every core: autotune must give them back.
    for _ in range(3000):
        next(batches)
        time.sleep(0.005)  # The training step: far slower than the 8x8 decode.
        stats = loader.stats()
        if stats["threads"] < cores:
            break
    next(batches)  # The trace reaches the logger with the next batch.
    loader.close()
    assert stats["threads"] < cores
    lines = [r.getMessage() for r in caplog.records if r.name == "conveyor.autotune"]
    rules = ("idle: ", "wanted by the rest of the process: ")
    assert any(f"cpu threads {cores} -> " in line and any(r in line for r in rules) for line in lines), lines


def test_reads_of_a_python_dataset_report_their_wait_for_the_gil(color_folder):
    loader = conveyor.Loader(
        PythonSource(SleepyDataset(256)),
        [T.Resize((8, 8))],
        batch_size=8,
        threads=1,
        io_threads=4,
        prefetch=2,
    )
    for _ in loader:
        deadline = time.perf_counter() + 0.002
        while time.perf_counter() < deadline:  # The training loop's Python, holding the GIL.
            pass
    stats = loader.stats()
    loader.close()
    assert stats["samples_read"] == 256
    assert 0 < stats["read_lock_wait_seconds"] <= stats["read_seconds"]
    native = train_loader(color_folder)
    epoch_arrays(native)
    assert native.stats()["read_lock_wait_seconds"] == 0  # Native reads never take the GIL.
    native.close()


def test_injected_read_latency_grows_the_reads_in_flight(caplog):
    caplog.set_level(logging.INFO, logger="conveyor.autotune")
    loader = conveyor.Loader(
        PythonSource(SleepyDataset(20000, read_seconds=0.01)), [T.Resize((8, 8))], batch_size=8
    )
    most = 0
    for k, _ in enumerate(loader):
        most = max(most, loader.stats()["io_threads"])
        if most > 16 or k == 2000:
            break
    loader.close()
    assert most > 16
    lines = [r.getMessage() for r in caplog.records if r.name == "conveyor.autotune"]
    assert any("io threads 16 -> " in line for line in lines), lines
    assert all(line.startswith("conveyor autotune t=") for line in lines)


def test_cpu_threads_never_exceed_the_usable_cores(tmp_path):
    # One usable CPU (affinity), a consumer that wants all it can get: one thread.
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    code = """
        import os, sys
        sys.path.insert(0, sys.argv[1])
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        import conveyor
        from conveyor import transforms as T
        from test_autotune import SleepyDataset
        loader = conveyor.Loader(conveyor.sources.PythonSource(SleepyDataset(3000)), [T.Resize((64, 64))],
                                 batch_size=8)
        most = 0
        for _ in loader:
            stats = loader.stats()
            most = max(most, stats["threads"], stats["threads_running"])
        print(stats["usable_cores"], most)
    """
    child = run_python(code, os.path.dirname(__file__))
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["1", "1"]


def test_the_memory_budget_bounds_prefetch_and_buffers():
    # Batches of 8 x 8x8x3 float32 = 6144 bytes; a budget of 4 of them: at
    # most 2 prepared while the loop holds two. Slow reads make autotune want more.
    budget = 4 * 8 * 8 * 8 * 3 * 4
    loader = conveyor.Loader(
        PythonSource(SleepyDataset(800, read_seconds=0.002)),
        [T.Resize((8, 8))],
        batch_size=8,
        memory_budget=budget,
    )
    for images, labels in loader:
        del images, labels
        stats = loader.stats()
        assert stats["prefetch"] <= 2
        assert stats["buffers_allocated"] <= 4
    assert stats["memory_budget"] == budget
    loader.close()


def test_a_plain_for_loop_stays_within_the_memory_budget():
    # Batches of 8 x 8x8x3 float32; a budget of 3 of them. A `for` loop holds
    # its batch and, while the next is handed out, the previous one: so only
    # one may be prepared ahead (it was 2, and the loop reached 4 buffers).
    batch_bytes = 8 * 8 * 8 * 3 * 4
    loader = conveyor.Loader(
        PythonSource(SleepyDataset(200, read_seconds=0.001)),
        [T.Resize((8, 8))],
        batch_size=8,
        memory_budget=3 * batch_bytes,
    )
    for images, _labels in loader:
        stats = loader.stats()
        assert stats["prefetch"] == 1
        assert stats["buffers_allocated"] <= 3
        assert images.shape == (8, 3, 8, 8)
    loader.close()


def test_progress_shows_the_chosen_values(color_folder):
    with train_loader(color_folder, io_threads=5) as loader:
        epoch_arrays(loader)
        text = _progress_text(loader.stats())
    cores = loader.stats()["usable_cores"]
    # An asterisk marks a value autotune chose; io_threads is pinned.
    assert re.fullmatch(rf"stall \d+% \| threads \d+\*/{cores} io 5 prefetch \d+\*", text), text


def test_the_environment_variable_traces_decisions_to_stderr(tmp_path):
    code = """
        import sys
        sys.path.insert(0, sys.argv[1])
        import conveyor
        from conveyor import transforms as T
        from test_autotune import SleepyDataset
        loader = conveyor.Loader(conveyor.sources.PythonSource(SleepyDataset(400, 0.005)), [T.Resize((8, 8))],
                                 batch_size=8)
        for _ in loader:
            pass
    """
    child = run_python(code, os.path.dirname(__file__), env={"CONVEYOR_AUTOTUNE_LOG": "1"})
    assert child.returncode == 0, child.stderr
    lines = [line for line in child.stderr.splitlines() if line.startswith("conveyor autotune t=")]
    assert lines, child.stderr
    assert "io threads 16 -> " in child.stderr


@pytest.mark.measures_cpu
def test_a_consumer_that_burns_a_core_keeps_it(tmp_path):
    # The training step keeps a core busy (a busy loop of 25 ms of its own CPU
    # time per batch); the loader's work is light. On 2 usable cores (the
    # child pins itself to two CPUs), the cores the rest of the process uses
    # are not given to cpu threads: threads <= usable - others, rounded with
    # the controller's 0.25 hysteresis. Asserted through stats() only: how
    # much CPU the busy loop gets depends on the machine's load, so the bound
    # follows the measured estimate. What the busy loop wants is the CPU it
    # got plus the time its thread waited for a core (the run delay of
    # /proc/thread-self/schedstat): on a busy machine it gets less than a core
    # and waits for the rest, and the estimate counts both, as it should.
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 usable CPUs")
    for i in range(320):
        (tmp_path / "c").mkdir(exist_ok=True)
        (tmp_path / "c" / f"{i:03d}.png").write_bytes(png(i))
    code = """
        import json, os, sys, time
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])

        def run_delay():  # Seconds this thread has waited for a core.
            with open("/proc/thread-self/schedstat") as f:
                return int(f.read().split()[1]) * 1e-9

        import conveyor
        from conveyor import transforms as T
        loader = conveyor.Loader(conveyor.sources.ImageFolder(sys.argv[1]), [T.Resize((8, 8))], batch_size=8,
                                 dtype="uint8", seed=1)
        first = None
        for images, labels in loader:
            if first is None:
                first = loader.stats()  # The pipeline's fill is not a stall of the steady state.
                first_cpu, first_delay = time.process_time(), run_delay()
            start = time.thread_time()
            while time.thread_time() - start < 0.025:
                pass
        last = loader.stats()
        cpu, delay = time.process_time() - first_cpu, run_delay() - first_delay
        print(json.dumps({"first": first, "last": last, "cpu": cpu, "delay": delay}))
    """
    child = run_python(code, str(tmp_path))
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout.splitlines()[-1])
    first, last = result["first"], result["last"]
    assert last["usable_cores"] == 2
    # The estimate is the process's CPU time minus the loader's, plus the
    # consumer's wait for a core, per second (smoothed over ~0.3 s, so
    # compared loosely with the whole run's mean).
    wall = last["wall_seconds"] - first["wall_seconds"]
    loader_cpu = sum(last[k] - first[k] for k in ("read_cpu_seconds", "process_cpu_seconds"))
    measured = (result["cpu"] - loader_cpu + result["delay"]) / wall
    others = last["other_cores"]
    assert measured > 0.1, result  # The busy loop shows.
    assert abs(others - measured) < 0.35, (others, measured, result)
    assert last["threads"] <= max(1, math.floor(2 - others + 0.75)), last
    if others >= 0.75:  # The busy loop got most of a core: one is left to the loader.
        assert last["threads"] == 1, last
    assert last["wait_seconds"] - first["wait_seconds"] <= 0.05 * wall, result
