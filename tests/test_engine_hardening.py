"""The engine under hostile conditions: sizes that overflow, sources too large
to order, threads the OS refuses, and fork(). Each case runs in a child
process with a timeout, so a crash (segfault, abort) or a hang is a test
failure instead of a dead or stuck suite.
"""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from conftest import run_python

# Set by `make asan-python`, which runs the tests against an ASan build.
UNDER_ASAN = bool(os.environ.get("CONVEYOR_UNDER_ASAN"))

# Every child starts with this: a PythonSource of small PNGs whose sample i
# is a flat image of value i with label i.
PREAMBLE = """
import io
import os
import signal
import sys

import numpy as np
from PIL import Image

import conveyor
from conveyor import transforms as T


def png(value):
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


class Pngs:
    def __init__(self, n):
        self.items = [png(i) for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i], i


def labels_of(loader):
    return [[int(x) for x in labels] for _, labels in loader]
"""


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    """Runs PREAMBLE + ``code`` in a new Python; a hang fails the test."""
    return run_python(PREAMBLE + textwrap.dedent(code))


def check(result: subprocess.CompletedProcess[str], expected_stdout: str) -> None:
    assert result.returncode == 0, (
        f"rc {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    assert result.stdout == textwrap.dedent(expected_stdout).lstrip("\n"), result.stderr


# --- sizes -------------------------------------------------------------------------


def test_sizes_too_large_are_config_errors_at_construction_and_a_batch_past_the_data_is_the_data() -> None:
    result = run_child(
        """
        class Huge:
            def __len__(self):
                return 2**40

            def __getitem__(self, i):
                raise AssertionError("never read")


        for source, batch_size in ((Pngs(4), 2**62), (Huge(), 4)):
            engine_source = conveyor.sources.PythonSource(source)
            try:
                loader = conveyor.Loader(engine_source, [T.Resize((8, 8))], batch_size=batch_size)
            except conveyor.ConfigError as e:
                print(type(e).__name__, e)
            else:
                next(iter(loader))
                print("no error")
        """
    )
    # A batch_size past the data set takes the data set's room (it overflowed
    # as 2**62 x 768 bytes before). The order of 2**40 samples was a bare
    # MemoryError (std::bad_alloc) at iter().
    check(
        result,
        """
        no error
        ConfigError the source has 1099511627776 samples: its epoch order (8 TiB) cannot be allocated
        """,
    )


# --- threads the OS refuses --------------------------------------------------------


@pytest.mark.skipif(UNDER_ASAN, reason="ASan reserves terabytes of address space: RLIMIT_AS cannot apply")
def test_threads_the_system_refuses_are_an_error_and_the_process_goes_on() -> None:
    result = run_child(
        """
        import re
        import resource

        source = conveyor.sources.PythonSource(Pngs(6))
        # The address space in use + 1 GiB: some 8 MiB thread stacks fit, 100000 do not.
        with open("/proc/self/status") as status:
            in_use = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = in_use + 2**30 if hard == resource.RLIM_INFINITY else min(in_use + 2**30, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        try:
            conveyor.Loader(source, [T.Resize((8, 8))], batch_size=2, threads=1, io_threads=100000)
        except conveyor.Error as e:
            print(type(e).__name__, re.sub(r"thread [0-9]+ of", "thread N of", str(e)))
        else:
            print("no error")
        loader = conveyor.Loader(source, [T.Resize((8, 8))], batch_size=2, threads=1, io_threads=2)
        print(labels_of(loader))
        """
    )
    # Was "terminate called without an active exception" (SIGABRT).
    refused = (
        "cannot start thread N of 100000 of the conveyor-io pool (Resource temporarily unavailable): "
        "lower io_threads or raise the process's limits"
    )
    check(result, f"ConfigError {refused}\n[[0, 1], [2, 3], [4, 5]]\n")


# --- fork ------------------------------------------------------------------------------

FORK_ERROR = "this Loader was created before fork(); create a new Loader in the child process"


def test_a_loader_used_in_a_forked_child_raises_and_a_new_one_works() -> None:
    result = run_child(
        f"""
        import gc

        FORK_ERROR = {FORK_ERROR!r}
        source = conveyor.sources.PythonSource(Pngs(8))
        loader = conveyor.Loader(source, [T.Resize((8, 8))], batch_size=2, threads=2, io_threads=2)
        batches = iter(loader)
        first = next(batches)
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)  # A hang in the child becomes its death by SIGALRM.
            code = 0
            for bit, attempt in ((1, lambda: next(batches)), (2, lambda: iter(loader)), (4, loader.stats)):
                try:
                    attempt()
                    code |= bit
                except conveyor.Error as e:
                    if str(e) != FORK_ERROR:
                        print("child:", repr(e), file=sys.stderr)
                        code |= bit
            fresh = conveyor.Loader(source, [T.Resize((8, 8))], batch_size=2, threads=1, io_threads=1)
            if labels_of(fresh) != [[0, 1], [2, 3], [4, 5], [6, 7]]:
                code |= 8
            del loader, batches, first
            gc.collect()  # The old loader is collected without hanging.
            os._exit(code)
        rest = [[int(x) for x in labels] for _, labels in batches]
        _, status = os.waitpid(pid, 0)
        print("child exit code", os.waitstatus_to_exitcode(status))
        print([[int(x) for x in first[1]]] + rest)
        """
    )
    # The child's iteration hung forever.
    check(
        result,
        """
        child exit code 0
        [[0, 1], [2, 3], [4, 5], [6, 7]]
        """,
    )
