"""``conveyor pack``: writes an ImageFolder into WebDataset-style tar shards.

Each sample becomes three members sharing a key (its position, zero-padded):
``<key>.<ext>`` (the image file's bytes, unchanged; ext is one of the formats
the decoders read, IMG_EXTENSIONS: jpg, jpeg, png, webp, tif or tiff; a folder holding
other image formats is refused, as ImageFolder does), ``<key>.cls`` (the class
index in ASCII) and ``<key>.json`` (the class name and the file's path
relative to the folder). Shards are plain tar files
(Python's tarfile), readable by ``conveyor.sources.TarShards``, by the
``webdataset`` package and by ``tar``. Output is deterministic: same folder,
same bytes.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import tarfile
from collections.abc import Iterator
from typing import Any, Optional

from conveyor import _conveyor
from conveyor.errors import ConfigError
from conveyor.sources import ImageFolder

__all__ = ["add_commands", "pack_image_folder", "parse_size"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(i?)b?|b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in a size such as ``"256MB"``, ``"1.5GB"``, ``"64MiB"`` or ``"4096"``
    (kB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB powers of 1024)."""
    match = _SIZE.match(text)
    if match is None:
        raise ConfigError(f"invalid size {text!r}; expected e.g. 256MB, 1GB, 64MiB")
    number, prefix, binary = float(match.group(1)), (match.group(2) or "").lower(), match.group(3)
    power = "kmgt".index(prefix) + 1 if prefix else 0
    size = int(number * (1024 if binary else 1000) ** power)
    if size <= 0:
        raise ConfigError(f"size must be positive, got {text!r}")
    return size


def _shard_path(pattern: str, index: int) -> str:
    if "%" in pattern:
        return pattern % index
    if "{" in pattern:
        return pattern.format(index)
    raise ConfigError(f"output pattern {pattern!r} needs a shard number field, e.g. shard-%06d.tar")


def _member(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o444
    info.mtime = 0  # Reproducible shards.
    return info, io.BytesIO(data)


def _entry_size(data_sizes: list[int]) -> int:
    """Bytes the members take in a tar file: a header and padded data each."""
    return sum(512 + (size + 511) // 512 * 512 for size in data_sizes)


def _file_size(members_size: int) -> int:
    """Size of a tar file holding ``members_size`` bytes of members: tarfile
    appends two zero blocks and pads the file to a multiple of 20 blocks."""
    return -(-(members_size + 1024) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


def _samples(folder: ImageFolder) -> Iterator[tuple[str, int, bytes, str]]:
    for path, label in folder.samples:
        # Read by the engine: a FIFO is refused (ReadError) instead of blocking.
        yield path, label, _conveyor.read_file(os.fsencode(path)), os.path.splitext(path)[1][1:].lower()


def pack_image_folder(
    src_dir: str, out_pattern: str, shard_size: int = 256 * 10**6, progress: bool = False
) -> list[str]:
    """Packs the ImageFolder at ``src_dir`` into shards named by ``out_pattern``
    (``"out/shard-%06d.tar"`` or ``"out/shard-{:06d}.tar"``), starting a new
    shard before one would exceed ``shard_size`` bytes (a single larger sample
    gets a shard of its own). Returns the shard paths written."""
    folder = ImageFolder(src_dir)
    _shard_path(out_pattern, 0)  # Validates the pattern before any work.
    digits = max(6, len(str(len(folder) - 1)))
    written: list[str] = []
    archive: Optional[tarfile.TarFile] = None
    used = 0
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(folder), unit="img", desc="pack")
    try:
        for index, (path, label, data, ext) in enumerate(_samples(folder)):
            key = f"{index:0{digits}d}"
            meta = json.dumps(
                {"class": folder.classes[label], "path": os.path.relpath(path, folder.root)}, sort_keys=True
            ).encode()
            cls = str(label).encode()
            size = _entry_size([len(data), len(cls), len(meta)])
            if archive is None or (used > 0 and _file_size(used + size) > shard_size):
                if archive is not None:
                    archive.close()
                shard = _shard_path(out_pattern, len(written))
                os.makedirs(os.path.dirname(os.path.abspath(shard)), exist_ok=True)
                archive = tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT)
                written.append(shard)
                used = 0
            for name, member in ((f"{key}.{ext}", data), (f"{key}.cls", cls), (f"{key}.json", meta)):
                archive.addfile(*_member(name, member))
            used += size
            if bar is not None:
                bar.update(1)
    finally:
        if archive is not None:
            archive.close()
        if bar is not None:
            bar.close()
    return written


def _run(args: argparse.Namespace) -> int:
    shards = pack_image_folder(args.src_dir, args.out_pattern, parse_size(args.shard_size), args.progress)
    print(f"wrote {len(shards)} shard(s): {shards[0]}{' ... ' + shards[-1] if len(shards) > 1 else ''}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Adds ``conveyor pack`` to the command line."""
    parser = subparsers.add_parser(
        "pack",
        help="write an ImageFolder into tar shards (WebDataset layout)",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src_dir", metavar="SRC_DIR", help="ImageFolder root: SRC_DIR/<class>/**/<image>")
    parser.add_argument(
        "out_pattern", metavar="OUT_PATTERN", help="shard paths with a number field, e.g. out/shard-%%06d.tar"
    )
    parser.add_argument("--shard-size", default="256MB", help="maximum shard size (default: 256MB)")
    parser.add_argument("--progress", action="store_true", help="show a progress bar")
    parser.set_defaults(run=_run)
