"""One measurement in a fresh process: ``python -m conveyor.bench.worker SPEC``.

SPEC is a JSON object naming the benchmark (``bench``), the side
(``conveyor``, ``dataloader`` or a peer of ``conveyor.bench.peers``) and its
parameters; the figures are printed
as one JSON line prefixed with ``RESULT `` on stdout. Running each measurement
in its own process gives each side the same clean start and lets the parent
sample the memory of exactly this process tree.

``python -m conveyor.bench.worker --serve`` runs one measurement per line of
stdin (a SPEC each), one after the other in this one process, and answers
each with its ``RESULT `` line, or an ``ERROR `` line (the traceback's end, as
JSON) when it raised: ``bench --quick`` runs so, sparing a start (and
torch's import) per run where only the run's completion matters.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Optional

from conveyor.bench.subset import spread

RESULT_PREFIX = "RESULT "
#: Prefixes the answer of ``--serve`` to a measurement that raised.
ERROR_PREFIX = "ERROR "
#: The argument that makes this module serve measurements from stdin.
SERVE = "--serve"

Spec = dict[str, Any]


def _conveyor_image_transforms(case: str) -> list[Any]:
    from conveyor import transforms as T
    from conveyor.bench.reference import IMAGENET_MEAN, IMAGENET_STD

    if case == "train":
        return [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return [T.Resize(256), T.CenterCrop(224), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def _image_loader(spec: Spec) -> Iterable[Any]:
    from conveyor.bench import peers

    if spec["side"] in peers.LOADERS:
        return peers.LOADERS[spec["side"]](spec)
    train = spec["case"] == "train"
    if spec["side"] == "conveyor":
        import conveyor

        folder = conveyor.sources.ImageFolder(spec["data"])
        keep = spread(len(folder), spec.get("limit"))
        source = conveyor.sources.FileList([folder.paths[i] for i in keep], [folder.labels[i] for i in keep])
        return conveyor.Loader(
            source,
            transforms=_conveyor_image_transforms(spec["case"]),
            batch_size=spec["batch_size"],
            shuffle=train,
            seed=0,
            threads=spec["workers"],
        )
    import torch

    from conveyor.bench import reference

    transform = reference.train_transform() if train else reference.eval_transform()
    dataset = reference.image_folder(spec["data"], transform)
    dataset = torch.utils.data.Subset(dataset, spread(len(dataset), spec.get("limit")))
    return torch.utils.data.DataLoader(
        dataset, batch_size=spec["batch_size"], shuffle=train, num_workers=spec["workers"], pin_memory=False
    )


class _Timed:
    """Iterates ``batches``, timing the first batch, the time spent waiting
    for each (the input stall seen by the consumer) and when each ended."""

    def __init__(self, batches: Iterable[Any]):
        self.batches = batches
        self.first_batch_s: Optional[float] = None
        self.wait_s = 0.0
        self.samples = 0
        self.ends: list[tuple[float, int]] = []  # (seconds since the start, samples so far) per batch.

    def steady_rate(self) -> Optional[float]:
        """Images/s in the middle half of the epoch's time: past the start
        (connections opening, autotune's first settings), before the end
        hands out at once what was prefetched. None for fewer than 4 batches."""
        if len(self.ends) < 4:
            return None
        total = self.ends[-1][0]

        def samples_by(moment: float) -> int:
            return max((n for t, n in self.ends if t <= moment), default=0)

        return (samples_by(0.75 * total) - samples_by(0.25 * total)) / (0.5 * total)

    def __iter__(self) -> Iterator[Any]:
        start = time.perf_counter()
        iterator = iter(self.batches)
        while True:
            before = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            now = time.perf_counter()
            self.wait_s += now - before
            if self.first_batch_s is None:
                self.first_batch_s = now - start
            self.samples += len(batch[1])
            self.ends.append((now - start, self.samples))
            yield batch


def _rusage() -> dict[str, float]:
    """Peak RSS (MB) of this process and of its largest finished child (Linux:
    KB units); with ``--serve``, over all the measurements so far."""
    return {
        "maxrss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "maxrss_largest_child_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def _cpu_seconds() -> float:
    """User + system CPU time of this process (all threads) and of its children
    that have been waited for (DataLoader workers, once shut down)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _stats(loader: Any) -> Optional[dict[str, Any]]:
    stats = getattr(loader, "stats", None)
    return dict(stats()) if callable(stats) else None


def _close(loader: Any) -> None:
    close = getattr(loader, "close", None)
    if callable(close):
        close()


def throughput(spec: Spec, make_loader: Callable[[Spec], Iterable[Any]] = _image_loader) -> dict[str, Any]:
    """One epoch of the ImageNet train or eval pipeline (or of ``make_loader``'s); images/s."""
    return _epoch(lambda: make_loader(spec))


def _epoch(make_loader: Callable[[], Iterable[Any]]) -> dict[str, Any]:
    """Figures of one epoch of the loader ``make_loader`` builds (timed too)."""
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    loader = make_loader()
    construct_s = time.perf_counter() - start
    timed = _Timed(loader)
    epoch_start = time.perf_counter()
    for _ in timed:
        pass
    epoch_s = time.perf_counter() - epoch_start
    stats = _stats(loader)
    _close(loader)
    cpu_s = _cpu_seconds() - cpu_start
    return {
        "cpu_s": cpu_s,
        "cpu_ms_per_image": 1000 * cpu_s / max(1, timed.samples),
        "images": timed.samples,
        "construct_s": construct_s,
        "epoch_s": epoch_s,
        "images_per_s": timed.samples / epoch_s,
        "first_batch_s": timed.first_batch_s,
        "steady_images_per_s": timed.steady_rate(),
        "wait_s": timed.wait_s,
        "stats": stats,
    }


def _process_cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU time of the running process ``pid`` (all its threads),
    from /proc/<pid>/stat; None where there is no /proc (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_server(root: str, latency_ms: float, folder: str) -> tuple[subprocess.Popen[Any], int, str]:
    """The file server in its own process (so that serving does not share
    the measured process's GIL); returns it, its port and which it is:
    nginx with the echo module's latency (nginx_server.py), else, where that
    is not installed, the project's Python server (http_server.py), started
    as a script, not with ``-m``: importing the ``conveyor`` package imports
    torch, whose ~170,000 objects made each of the server's garbage
    collections long (~20 % of its CPU at 20 ms latency,
    docs/design/benchmarks.md "Remote storage")."""
    from conveyor.bench import http_server, nginx_server

    missing = nginx_server.unavailable(latency_ms)
    if missing is None:
        process, port = nginx_server.start(root, latency_ms, folder)
        return process, port, "nginx"
    server = subprocess.Popen(
        [sys.executable, http_server.__file__, root, "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, int(server.stdout.readline()), f"conveyor.bench.http_server ({missing})"


def _remote_order(count: int, limit: Optional[int]) -> list[int]:
    """``limit`` indices into ``count`` samples: spread evenly over them, or
    every one repeated in turn when ``limit`` is larger."""
    limit = limit or count
    return spread(count, limit) if limit <= count else [i % count for i in range(limit)]


#: The keys the bench signs its S3 requests with (the file server checks none).
_BENCH_KEYS = {"key": "bench", "secret": "bench"}


def _remote_loader(spec: Spec, source: Callable[[], Any], dataset: Callable[[], Any]) -> Iterable[Any]:
    """conveyor's Loader over ``source()`` (a conveyor source) on the
    conveyor side, else DataLoader over ``dataset()`` (a torch dataset; an
    iterable one is not shuffled by DataLoader: it shuffles itself)."""
    if spec["side"] == "conveyor":
        import conveyor

        return conveyor.Loader(
            source(),
            transforms=_conveyor_image_transforms("train"),
            batch_size=spec["batch_size"],
            shuffle=True,
            seed=0,
            threads=spec["workers"],
            io_threads=spec.get("io_threads"),
        )
    import torch

    data = dataset()
    return torch.utils.data.DataLoader(
        data,
        batch_size=spec["batch_size"],
        shuffle=not isinstance(data, torch.utils.data.IterableDataset),
        num_workers=spec["workers"],
        pin_memory=False,
    )


def _with_server_cpu(pid: int, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s figures, with the CPU the server process ``pid`` spent per image."""
    start = _process_cpu_seconds(pid)
    result = run()
    end = _process_cpu_seconds(pid)
    if start is not None and end is not None:
        # The server shares the cores: its CPU is part of what a read costs here.
        result["server_cpu_ms_per_image"] = 1000 * (end - start) / max(1, result["images"])
    return result


def _served(root: str, spec: Spec, run: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """``run(endpoint)``'s figures against the file server serving ``root``
    at ``spec["latency_ms"]``, with the server's CPU per image and which
    server it was."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="conveyor-bench-server-") as folder:
        server, port, name = _start_server(root, spec["latency_ms"], folder)
        try:
            result = _with_server_cpu(server.pid, lambda: run(f"http://127.0.0.1:{port}"))
            result["server"] = name
            return result
        finally:
            server.kill()
            server.wait()


#: Bytes per tar shard in ``bench remote``: 16 384 of the demo's photos make
#: ~120 shards, enough for every DataLoader worker of webdataset to get many.
REMOTE_SHARD_BYTES = 4 * 10**6
#: The shuffle buffer of ``bench remote``'s shards cases, conveyor's
#: (``TarShards(shuffle_buffer=...)``) and webdataset's alike: webdataset's
#: documented ImageNet recipe. The ``"s3-global"`` case shuffles globally.
REMOTE_SHUFFLE_BUFFER = 1000


def _remote_shards(spec: Spec) -> dict[str, Any]:
    """One epoch over the ``limit`` images of the file cases packed into tar
    shards, read from local disk (``latency_ms`` None), from a local S3
    server (moto; ``store="s3"``, or ``"s3-global"`` for a global shuffle),
    listed as ``s3://bench/shards/``, or as ``s3://`` URLs (path-style,
    signed) from the project's file server (``store="s3-files"``; the
    ``webdataset`` side reads the same shards as ``http://`` URLs), either
    adding ``latency_ms`` to every request; in the streaming order of a
    REMOTE_SHUFFLE_BUFFER buffer but for ``"s3-global"``. Each shard has its
    index beside it (``conveyor pack`` writes them), so that building the
    source reads no shard's bytes."""
    import csv
    import tempfile

    from conveyor._conveyor import SHARD_INDEX_SUFFIX
    from conveyor.bench import reference
    from conveyor.pack import pack
    from conveyor.sources import TarShards

    samples = reference.ImageFolderDataset(spec["data"], lambda image: image).samples
    samples = [samples[i] for i in _remote_order(len(samples), spec.get("limit"))]
    with tempfile.TemporaryDirectory(prefix="conveyor-bench-shards-") as folder:
        os.makedirs(os.path.join(folder, "bench"))
        listing = os.path.join(folder, "samples.csv")
        with open(listing, "w", newline="") as f:
            # Absolute: a CSV's relative paths are read relative to its folder.
            csv.writer(f).writerows(
                [("path", "label"), *((os.path.abspath(p), label) for p, label in samples)]
            )
        shards = pack(listing, os.path.join(folder, "bench", "shard-%06d.tar"), shard_size=REMOTE_SHARD_BYTES)
        names = [os.path.basename(shard) for shard in shards]
        buffer = None if spec["store"] == "s3-global" else REMOTE_SHUFFLE_BUFFER
        if spec["latency_ms"] is None:
            return _epoch(
                lambda: _remote_loader(spec, lambda: TarShards(shards, shuffle_buffer=buffer), lambda: None)
            )
        if spec["store"] == "s3-files":
            brace = f"shard-{{000000..{len(shards) - 1:06d}}}.tar"
            return _served(
                folder,
                spec,
                lambda endpoint: _epoch(
                    lambda: _remote_loader(
                        spec,
                        lambda: TarShards(
                            f"s3://bench/{brace}",
                            shuffle_buffer=buffer,
                            storage_options={"endpoint_url": endpoint, **_BENCH_KEYS},
                        ),
                        lambda: reference.webdataset_images(
                            [f"{endpoint}/bench/{name}" for name in names],
                            reference.train_transform(),
                            REMOTE_SHUFFLE_BUFFER,
                        ),
                    )
                ),
            )
        from conveyor.bench.s3_server import S3Server

        with S3Server(latency=spec["latency_ms"] / 1000) as s3:
            for shard, name in zip(shards, names):
                for path, key in ((shard, name), (shard + SHARD_INDEX_SUFFIX, name + SHARD_INDEX_SUFFIX)):
                    with open(path, "rb") as f:  # The shard and its index, as a user uploads them.
                        s3.put("bench", "shards/" + key, f.read())
            pid = s3.pid
            assert pid is not None
            s3_options = s3.storage_options()
            return _with_server_cpu(
                pid,
                lambda: _epoch(
                    lambda: _remote_loader(
                        spec,
                        lambda: TarShards(
                            "s3://bench/shards/", shuffle_buffer=buffer, storage_options=s3_options
                        ),
                        lambda: None,
                    )
                ),
            )


def _cached_second_epoch(spec: Spec, urls: list[str], labels: list[int]) -> dict[str, Any]:
    """The second epoch of a Loader whose FileList keeps the URLs' objects in
    a cache folder (the first epoch fills it, untimed), with the requests the
    timed epoch sent (the cache's misses, checks and reads sent on)."""
    import tempfile

    from conveyor.sources import FileList

    with tempfile.TemporaryDirectory(prefix="conveyor-bench-cache-") as cache:
        source = FileList(urls, labels, cache_dir=cache)
        loader = _remote_loader(spec, lambda: source, lambda: None)
        for _ in loader:  # The first epoch fills the cache, untimed.
            pass
        before = source._store.counters()
        result = _epoch(lambda: loader)
        after = source._store.counters()
        result["requests"] = sum(after[k] - before[k] for k in ("misses", "validations", "read_through"))
        return result


def _restore_environment(saved: dict[str, Optional[str]]) -> None:
    """Sets each variable of ``saved`` back to its value (None: unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


#: Threads of the ``urllib`` side's plain fetch from the modest server.
URLLIB_FETCH_THREADS = 64


def _modest_server(spec: Spec, samples: list[tuple[str, int]]) -> dict[str, Any]:
    """One epoch over the images from Python's ``http.server`` (HTTP/1.0: a
    connection per request, a listen queue of 5), as a new user would serve
    them, in its own process: conveyor's FileList of their URLs, or
    (``side="urllib"``) a plain fetch of the same URLs, without decode, on
    URLLIB_FETCH_THREADS threads; images/s and the server's CPU per image."""
    import tempfile
    import urllib.parse

    from conveyor.sources import FileList

    command = [
        sys.executable,
        "-u",
        "-m",
        "http.server",
        "0",
        "--bind",
        "127.0.0.1",
        "--directory",
        spec["data"],
    ]
    # stderr to a file, not a pipe: the server logs every request there.
    with (
        tempfile.TemporaryFile(mode="w+") as log,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True) as server,
    ):
        try:
            assert server.stdout is not None
            # "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
            line = server.stdout.readline()
            if " port " not in line:
                server.wait(timeout=60)
                log.seek(0)
                tail = "\n".join(log.read().strip().splitlines()[-6:])
                raise RuntimeError(
                    f"python -m http.server did not start (exit code {server.returncode}): {tail}"
                )
            port = int(line.split(" port ")[1].split()[0])
            urls = [
                f"http://127.0.0.1:{port}/{urllib.parse.quote(os.path.relpath(path, spec['data']))}"
                for path, _ in samples
            ]
            if spec["side"] == "conveyor":
                labels = [label for _, label in samples]
                result = _with_server_cpu(
                    server.pid,
                    lambda: _epoch(
                        lambda: _remote_loader(spec, lambda: FileList(urls, labels), lambda: None)
                    ),
                )
            else:
                result = _with_server_cpu(server.pid, lambda: _fetch(urls))
            result["server"] = "http.server"
            return result
        finally:
            server.kill()


def _fetch(urls: list[str]) -> dict[str, Any]:
    """A plain fetch of ``urls`` (no decode) on URLLIB_FETCH_THREADS threads with urllib."""
    import concurrent.futures
    import urllib.request

    def fetch(url: str) -> int:
        with urllib.request.urlopen(url, timeout=60) as reply:
            return len(reply.read())

    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(URLLIB_FETCH_THREADS) as pool:
        images = sum(1 for _ in pool.map(fetch, urls))
    epoch_s = time.perf_counter() - start
    cpu_s = _cpu_seconds() - cpu_start
    return {
        "cpu_s": cpu_s,
        "cpu_ms_per_image": 1000 * cpu_s / max(1, images),
        "images": images,
        "epoch_s": epoch_s,
        "images_per_s": images / epoch_s,
    }


def _s3_objects(spec: Spec, samples: list[tuple[str, int]]) -> dict[str, Any]:
    """One epoch over the images as ``s3://bench/<class>/<file>`` objects
    (path-style, signed) from the file server: conveyor's FileList, or a
    DataLoader reading them with s3fs (``side="s3fs"``) or with
    s3torchconnector's S3MapDataset (``side="s3torchconnector"``)."""
    import tempfile

    from conveyor.bench import reference
    from conveyor.sources import FileList

    labels = [label for _, label in samples]
    # s3:// URLs hold the keys as they are (every client encodes them itself).
    urls = ["s3://bench/" + os.path.relpath(path, spec["data"]).replace(os.sep, "/") for path, _ in samples]

    def peer(endpoint: str) -> Any:
        transform = reference.train_transform()
        if spec["side"] == "s3fs":
            options = reference.s3fs_options(endpoint, **_BENCH_KEYS)
            return reference.UrlImages(urls, labels, transform, storage_options=options)
        return reference.s3_map_images(urls, labels, transform, endpoint)

    # s3torchconnector's CRT client finds its keys where AWS tools do: the
    # environment (restored after: a reused worker runs other sides after it).
    keys = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
    saved = {name: os.environ.get(name) for name in keys}
    if spec["side"] == "s3torchconnector":
        os.environ.update(keys)
    try:
        with tempfile.TemporaryDirectory(prefix="conveyor-bench-s3-") as folder:
            # The bucket "bench" is the data folder (path-style: /bench/<key>).
            os.symlink(os.path.abspath(spec["data"]), os.path.join(folder, "bench"))
            return _served(
                folder,
                spec,
                lambda endpoint: _epoch(
                    lambda: _remote_loader(
                        spec,
                        lambda: FileList(
                            urls, labels, storage_options={"endpoint_url": endpoint, **_BENCH_KEYS}
                        ),
                        lambda: peer(endpoint),
                    )
                ),
            )
    finally:
        _restore_environment(saved)


def remote(spec: Spec) -> dict[str, Any]:
    """One epoch of the ImageNet train pipeline over ``limit`` images of
    ``data`` (the folder repeated when it holds fewer) served by a local HTTP
    server adding ``latency_ms`` to every request (None: the local files, for
    reference), as ``s3://`` objects (``store="s3-objects"``), or
    (``store="s3"``, ``"s3-global"`` or ``"s3-files"``) over the folder's tar shards; with
    ``cache``, the second epoch over a cache folder; images/s."""
    import urllib.parse

    from conveyor.bench import reference
    from conveyor.sources import FileList

    if spec.get("store") in ("s3", "s3-global", "s3-files"):
        return _remote_shards(spec)
    samples = reference.ImageFolderDataset(spec["data"], lambda image: image).samples
    samples = [samples[i] for i in _remote_order(len(samples), spec.get("limit"))]
    if spec.get("store") == "s3-objects":
        return _s3_objects(spec, samples)
    if spec.get("store") == "modest":
        return _modest_server(spec, samples)
    labels = [label for _, label in samples]
    transform = reference.train_transform()
    if spec["latency_ms"] is None:
        files = [path for path, _ in samples]

        def local_folder() -> Any:  # The throughput bench's dataset.
            import torch

            dataset = reference.image_folder(spec["data"], transform)
            return torch.utils.data.Subset(dataset, _remote_order(len(dataset), spec.get("limit")))

        return _epoch(lambda: _remote_loader(spec, lambda: FileList(files, labels), local_folder))

    def run(endpoint: str) -> dict[str, Any]:
        quoted = [urllib.parse.quote(os.path.relpath(path, spec["data"])) for path, _ in samples]
        urls = [f"{endpoint}/{path}" for path in quoted]
        if spec.get("cache"):
            return _cached_second_epoch(spec, urls, labels)
        return _epoch(
            lambda: _remote_loader(
                spec, lambda: FileList(urls, labels), lambda: reference.UrlImages(urls, labels, transform)
            )
        )

    return _served(spec["data"], spec, run)


def _slow_loader(spec: Spec) -> Iterable[Any]:
    from conveyor.bench.reference import SlowDecodedFiles, SlowFiles

    paths = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(spec["data"])
        for name in names
        if name.lower().endswith((".jpg", ".jpeg"))
    )
    files = SlowFiles(paths, spec["steps"] * spec["batch_size"], spec["read_latency"])
    size = spec["size"]
    if spec["side"] == "conveyor":
        import conveyor
        from conveyor import transforms as T

        return conveyor.Loader(
            conveyor.sources.PythonSource(files),
            transforms=[T.Resize((size, size))],
            batch_size=spec["batch_size"],
            threads=spec["workers"],
        )
    import torch

    from conveyor.bench.reference import resize_transform

    return torch.utils.data.DataLoader(
        SlowDecodedFiles(files, resize_transform(size, size)),
        batch_size=spec["batch_size"],
        num_workers=spec["workers"],
    )


def slow_storage(spec: Spec) -> dict[str, Any]:
    """``steps`` training steps of ``step_time`` s each over storage whose every
    read takes ``read_latency`` s more; total time against the ideal."""
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    loader = _slow_loader(spec)
    timed = _Timed(loader)
    steps = 0
    for _ in timed:
        time.sleep(spec["step_time"])  # The training step.
        steps += 1
        if steps == spec["steps"]:
            break
    total_s = time.perf_counter() - start
    stats = _stats(loader)
    _close(loader)
    # Leaving the loop freed the DataLoader's iterator, which joined its workers:
    # their CPU time is in RUSAGE_CHILDREN now.
    ideal_s = spec["steps"] * spec["step_time"]
    return {
        "cpu_s": _cpu_seconds() - cpu_start,
        "steps": steps,
        "seconds": total_s,
        "ideal_s": ideal_s,
        "overhead": total_s / ideal_s,
        "first_batch_s": timed.first_batch_s,
        "steady_images_per_s": timed.steady_rate(),
        "wait_s": timed.wait_s,
        "stats": stats,
    }


def _small_cnn() -> Any:
    """2 conv + 2 fully connected layers for 28×28 digits."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 8, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def _mnist_loader(spec: Spec) -> Iterable[Any]:
    from conveyor.dataset import MNIST_FILES

    if spec["side"] == "conveyor":
        import conveyor
        from conveyor import transforms as T
        from conveyor.bench.reference import IdxDataset

        return conveyor.Loader(
            conveyor.sources.MNIST(spec["mnist_data"], train=True),
            transforms=[T.Normalize((IdxDataset.MEAN,), (IdxDataset.STD,))],
            batch_size=spec["batch_size"],
            shuffle=True,
            seed=0,
            threads=spec["workers"] or None,
        )
    import torch

    from conveyor.bench.reference import IdxDataset

    images, labels = (os.path.join(spec["mnist_data"], name) for name in MNIST_FILES[True])
    return torch.utils.data.DataLoader(
        IdxDataset(images, labels),
        batch_size=spec["batch_size"],
        shuffle=True,
        num_workers=spec["workers"],
        pin_memory=spec["pin_memory"],
    )


def mnist(spec: Spec) -> dict[str, Any]:
    """One epoch of training a small CNN on MNIST-format data."""
    import torch

    torch.set_num_threads(spec["torch_threads"])
    torch.manual_seed(0)
    model = _small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    loader = _mnist_loader(spec)
    timed = _Timed(loader)
    loss = torch.zeros(())
    for images, labels in timed:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
    total_s = time.perf_counter() - start
    stats = _stats(loader)
    _close(loader)
    return {
        "cpu_s": _cpu_seconds() - cpu_start,
        "samples": timed.samples,
        "seconds": total_s,
        "first_batch_s": timed.first_batch_s,
        "steady_images_per_s": timed.steady_rate(),
        "wait_s": timed.wait_s,
        "final_loss": float(loss),
        "stats": stats,
    }


def cifar_transforms() -> list[Any]:
    """conveyor's CIFAR-10 recipe, the one list both sides follow: the
    DataLoader side crops only when this list holds a RandomCrop."""
    from conveyor import transforms as T
    from conveyor.bench.reference import CIFAR_MEAN, CIFAR_STD

    return [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Normalize(CIFAR_MEAN, CIFAR_STD)]


def _cifar_loader(spec: Spec) -> Iterable[Any]:
    recipe = cifar_transforms()
    if spec["side"] == "conveyor":
        import conveyor

        return conveyor.Loader(
            conveyor.sources.CIFAR10(spec["cifar_data"], train=True),
            transforms=recipe,
            batch_size=spec["batch_size"],
            shuffle=True,
            seed=0,
            threads=spec["workers"],
        )
    import torch

    from conveyor.bench.reference import CifarDataset

    crops = any(type(t).__name__ == "RandomCrop" for t in recipe)
    return torch.utils.data.DataLoader(
        CifarDataset(spec["cifar_data"], padding=4 if crops else None),
        batch_size=spec["batch_size"],
        shuffle=True,
        num_workers=spec["workers"],
        pin_memory=False,
    )


def cifar(spec: Spec) -> dict[str, Any]:
    """One epoch of the CIFAR-10 training recipe over the arrays; images/s."""
    return throughput(spec, _cifar_loader)


def baseline(spec: Spec) -> dict[str, Any]:
    """Nothing but the imports both sides pay for: the memory floor of a process."""
    import torch

    import conveyor.sources

    return {"torch": torch.__version__, "conveyor": conveyor.sources.__name__}


def ffcv_setup(spec: Spec) -> dict[str, Any]:
    """Writes FFCV's dataset file before its runs (not timed)."""
    from conveyor.bench import peers

    return peers.ffcv_setup(spec)


RUNNERS: dict[str, Callable[[Spec], dict[str, Any]]] = {
    "baseline": baseline,
    "ffcv-setup": ffcv_setup,
    "throughput": throughput,
    "slow-storage": slow_storage,
    "mnist": mnist,
    "cifar": cifar,
    "remote": remote,
}


def _measure(spec: Spec) -> dict[str, Any]:
    result = RUNNERS[spec["bench"]](spec)
    result.update(_rusage())
    return result


def serve(lines: Iterable[str]) -> int:
    """Runs the measurement of each line of ``lines`` (JSON), in turn, and
    prints its result or, when it raised, the end of its traceback."""
    for line in lines:
        if not line.strip():
            continue
        try:
            result = _measure(json.loads(line))
        except Exception:
            tail = "\n".join(traceback.format_exc().strip().splitlines()[-6:])
            print(ERROR_PREFIX + json.dumps(tail), flush=True)
        else:
            print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def main(argv: list[str]) -> int:
    """Runs the measurement described by ``argv[0]`` (JSON) and prints the
    result; with ``--serve``, those of stdin's lines (see ``serve``)."""
    if argv == [SERVE]:
        return serve(sys.stdin)
    print(RESULT_PREFIX + json.dumps(_measure(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
