"""Shared fixtures and helpers: small image folders generated per test
session, and a child Python for what could crash or hang the test process."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from PIL import Image

# Hermetic S3 tests: with no keys given, the engine would ask the machine's
# instance metadata service for a role (CI may run on a cloud VM that has
# one). The C++ tests cover that path against a fake service.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

# `make asan-python` must test the instrumented extension: a run that
# imported another (.venv's editable install) would pass without checking anything.
if os.environ.get("CONVEYOR_UNDER_ASAN") == "1":
    import conveyor._conveyor

    assert "/asan-python/" in conveyor._conveyor.__file__, conveyor._conveyor.__file__

#: How long a child Python may run: generous, importing torch alone can take
#: 30 s on a loaded machine. A child that runs longer has hung.
CHILD_SECONDS = 300


def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` (dedented) in a fresh interpreter with argv[1:] = ``args``
    and returns the finished process (stdout and stderr as text). A hang
    fails the test instead of hanging the suite; a crash shows as a negative
    return code for the caller to check."""
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
            env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})},
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"the child Python hung (killed after {CHILD_SECONDS} s); its output:\n{e.stdout!r}\n{e.stderr!r}"
        )


def tiff_bytes(
    samples: np.ndarray,
    photometric: int,
    *,
    planar: int = 1,
    tile: tuple[int, int] | None = None,
    rows_per_strip: int | None = None,
    extra: tuple[int, ...] = (),
    colormap: np.ndarray | None = None,
    orientation: int | None = None,
    big_endian: bool = False,
    size: tuple[int, int] | None = None,
) -> bytes:
    """A minimal uncompressed TIFF of ``samples`` (H×W or H×W×S, uint8 or
    uint16) with the given tags: what PIL cannot write (16-bit RGB, planar,
    tiled, associated alpha, any orientation). ``size`` (width, height)
    overrides the declared size (a hostile header)."""
    samples = np.asarray(samples)
    if samples.ndim == 2:
        samples = samples[..., None]
    h, w, s = samples.shape
    order = ">" if big_endian else "<"
    stored = samples.dtype.newbyteorder(order)
    planes = [samples[..., c : c + 1] for c in range(s)] if planar == 2 else [samples]
    chunks = []
    if tile is None:
        rps = rows_per_strip or h
        chunks = [p[y : y + rps].astype(stored).tobytes() for p in planes for y in range(0, h, rps)]
    else:
        tw, th = tile
        for p in planes:
            for ty in range(0, h, th):
                for tx in range(0, w, tw):
                    block = np.zeros((th, tw, p.shape[2]), dtype=samples.dtype)
                    part = p[ty : ty + th, tx : tx + tw]
                    block[: part.shape[0], : part.shape[1]] = part
                    chunks.append(block.astype(stored).tobytes())
    width, height = size or (w, h)
    tags: dict[int, tuple[int, list[int]]] = {
        256: (4, [width]),
        257: (4, [height]),
        258: (3, [samples.dtype.itemsize * 8] * s),
        259: (3, [1]),
        262: (3, [photometric]),
        277: (3, [s]),
        284: (3, [planar]),
    }
    if tile is None:
        tags[278] = (4, [rps])
    else:
        tags[322], tags[323] = (4, [tile[0]]), (4, [tile[1]])
    if extra:
        tags[338] = (3, list(extra))
    if colormap is not None:
        tags[320] = (3, [int(v) for v in np.asarray(colormap, dtype=np.uint16).T.ravel()])
    if orientation is not None:
        tags[274] = (3, [orientation])
    data = b"".join(chunks)
    offsets = [8 + sum(len(c) for c in chunks[:i]) for i in range(len(chunks))]
    tags[273 if tile is None else 324] = (4, offsets)
    tags[279 if tile is None else 325] = (4, [len(c) for c in chunks])
    data += b"\0" * (len(data) % 2)
    ifd_offset = 8 + len(data)
    entries = sorted(tags.items())
    values_offset = ifd_offset + 2 + 12 * len(entries) + 4
    ifd, values = struct.pack(order + "H", len(entries)), b""
    for tag, (kind, numbers) in entries:
        payload = struct.pack(order + {3: "H", 4: "I"}[kind] * len(numbers), *numbers)
        if len(payload) <= 4:
            ifd += struct.pack(order + "HHI", tag, kind, len(numbers)) + payload.ljust(4, b"\0")
        else:
            ifd += struct.pack(order + "HHII", tag, kind, len(numbers), values_offset + len(values))
            values += payload + b"\0" * (len(payload) % 2)
    head = (b"MM\0*" if big_endian else b"II*\0") + struct.pack(order + "I", ifd_offset)
    return head + data + ifd + b"\0\0\0\0" + values


def color_of(index: int) -> tuple[int, int, int]:
    """A distinct flat colour per sample index (decodes back within a few levels)."""
    return (40 + (index * 37) % 180, 40 + (index * 71) % 180, 40 + (index // 5) * 9 % 180)


def index_of(pixel: np.ndarray, count: int) -> int:
    """The sample index whose colour is nearest to ``pixel`` (RGB)."""
    colors = np.array([color_of(i) for i in range(count)], dtype=np.int32)
    return int(np.abs(colors - pixel.astype(np.int32)).sum(axis=1).argmin())


def write_jpeg(path: Path, array: np.ndarray, **options: object) -> None:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="JPEG", **options)
    path.write_bytes(buffer.getvalue())


@pytest.fixture(scope="session")
def color_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of 3 classes × 10 flat-colour JPEGs; sample i (in
    ImageFolder order) has colour color_of(i), sizes vary from 40 to 90 px."""
    root = tmp_path_factory.mktemp("colors")
    index = 0
    for c, name in enumerate(["cat", "dog", "emu"]):
        os.makedirs(root / name)
        for k in range(10):
            h, w = 40 + (index * 7) % 50, 40 + (index * 13) % 50
            array = np.empty((h, w, 3), dtype=np.uint8)
            array[:] = color_of(index)
            write_jpeg(root / name / f"{k:03d}.jpg", array, quality=95)
            index += 1
        assert c < 3
    return root


def png_bytes(image: np.ndarray) -> bytes:
    """``image`` (H×W×C or H×W uint8) encoded as PNG."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def textured(index: int, height: int, width: int) -> np.ndarray:
    """Photo-like RGB content, a function of ``index``: gradients, waves and
    noise (so that blurs, warps and histogram ops all change pixels)."""
    rng = np.random.default_rng(index)
    y, x = np.mgrid[0:height, 0:width]
    channels = [
        90 + 60 * x / width + 40 * np.sin(0.2 * y + c + index) + rng.normal(0, 12, (height, width))
        for c in range(3)
    ]
    return np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8)


#: Samples in ``texture_folder``.
TEXTURES = 24


@pytest.fixture(scope="session")
def texture_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of 2 classes × 12 ``textured`` JPEGs, 40..69 × 44..73 px."""
    root = tmp_path_factory.mktemp("textures")
    for index in range(TEXTURES):
        folder = root / ("a" if index < TEXTURES // 2 else "b")
        folder.mkdir(exist_ok=True)
        image = textured(index, 40 + (index * 7) % 30, 44 + (index * 11) % 30)
        Image.fromarray(image).save(folder / f"{index:03d}.jpg", quality=92)
    return root


def assert_resumes_exactly(make_loader: Callable[..., Any], epoch: int = 0, taken: int = 2) -> None:
    """A loader from ``make_loader(threads=...)``, checkpointed after ``taken``
    batches of ``epoch`` with 2 threads and resumed with 3, gives exactly the
    rest of the uninterrupted epoch (images compared bit for bit)."""
    import torch

    uninterrupted = make_loader(threads=2)
    uninterrupted.set_epoch(epoch)
    expected = [x.clone() for x, _ in uninterrupted]
    loader = make_loader(threads=2)
    loader.set_epoch(epoch)
    it = iter(loader)
    for _ in range(taken):
        next(it)
    state = loader.state_dict()
    del it, loader
    resumed = make_loader(threads=3)
    resumed.load_state_dict(state)
    got = [x for x, _ in resumed]
    assert 0 < len(got) == len(expected) - taken
    for a, b in zip(expected[taken:], got):
        assert torch.equal(a, b)


def shards_of_five(color_folder: Path, folder: Path) -> list[str]:
    """color_folder's 30 samples, in ImageFolder order, as 6 tar shards of 5
    (``shard-000000.tar``...: sample i in shard i // 5), in ``folder``."""
    files = sorted(p for p in color_folder.glob("*/*.jpg"))
    classes = sorted({p.parent.name for p in files})
    shards = []
    for s in range(len(files) // 5):
        path = folder / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w") as archive:
            for i in range(5 * s, 5 * s + 5):
                for name, data in (
                    (f"{i:06d}.jpg", files[i].read_bytes()),
                    (f"{i:06d}.cls", str(classes.index(files[i].parent.name)).encode()),
                ):
                    member = tarfile.TarInfo(name)
                    member.size = len(data)
                    archive.addfile(member, io.BytesIO(data))
        shards.append(str(path))
    return shards
