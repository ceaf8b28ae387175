"""``conveyor pack``: writes image files into WebDataset-style tar shards.

The images come from an ImageFolder (SRC a folder: SRC/<class>/**/<image>),
a CSV or TSV file (SRC ending in .csv or .tsv: the columns path and label,
read as FileList.from_csv reads them) or a file list (any other file: one
path per line, optionally followed by whitespace and an integer label;
relative paths are relative to the list's folder).

Each sample becomes three members sharing a key (its position, zero-padded):
``<key>.<ext>`` (the image file's bytes, unchanged; ext is one of the formats
the decoders read, IMG_EXTENSIONS: jpg, jpeg, png, webp, tif, tiff, bmp, ppm
or pgm; other formats are refused), ``<key>.cls`` (the class index in ASCII; left out for unlabelled
images) and ``<key>.json`` (the class name when known and the file's path
relative to the source's folder). Samples are written in the source's order
(an ImageFolder's is sorted by class), or with ``--shuffle`` in a random
order drawn from ``--seed``, so that streaming reads with a small shuffle
buffer see every class.

OUT_PATTERN names the shards: ``out/shard-%06d.tar`` or ``out/shard-{:06d}.tar``
(a new shard starts before one would exceed --shard-size), or a brace list
as TarShards reads it, ``out/shard-{000..009}.tar``, which fixes the shard
count: the samples are divided evenly over the listed shards, so the same
pattern reads them back. Shards are plain tar files (Python's tarfile),
readable by ``conveyor.sources.TarShards``, by the ``webdataset`` package and
by ``tar``. Output is deterministic: same input and seed, same bytes.

Beside each shard goes its index, ``<shard>.index.json`` (``--no-index``:
none): where each member lies and each sample's label. Upload it with the
shard: ``TarShards`` over URLs then reads the index, one small request,
instead of the whole shard at construction. ``conveyor index SHARDS`` writes
the indexes of shards made otherwise (webdataset's, ``tar``'s).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import secrets
import tarfile
from collections.abc import Iterator
from typing import Any, Optional

from braceexpand import UnbalancedBracesError, braceexpand

from conveyor import _conveyor
from conveyor._checks import check_int
from conveyor.errors import ConfigError, _printable_path
from conveyor.sources import IMG_EXTENSIONS, FileList, ImageFolder
from conveyor.sources.base import PathLike
from conveyor.sources.remote import is_url

__all__ = ["add_commands", "pack", "pack_image_folder", "parse_size", "shard_names", "write_shard_index"]

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


def shard_names(pattern: str) -> tuple[Optional[list[str]], Optional[str]]:
    """How ``pattern`` names shards: ``(names, None)`` for a brace list
    (``out/shard-{000..009}.tar``: exactly those, in order), ``(None,
    pattern)`` for a numbered pattern (``shard-%06d.tar``, ``shard-{:06d}.tar``).

    Raises:
        ConfigError: unbalanced braces, a brace list naming a shard twice, a
            format field that is not one number (``{name}``, ``%s %s``), or
            no number field at all (every shard would get the same name).
    """
    try:
        names = list(braceexpand(pattern))
    except UnbalancedBracesError as e:
        raise ConfigError(f"output pattern {pattern!r}: {e}") from None
    if names != [pattern]:
        if len(set(names)) != len(names):
            raise ConfigError(f"output pattern {pattern!r} names a shard more than once")
        # Spelled differently, one file still (s.tar, ./s.tar, a symlinked folder).
        seen: dict[str, str] = {}
        for name in names:
            other = seen.setdefault(os.path.realpath(name), name)
            if other != name:
                raise ConfigError(
                    f"output pattern {pattern!r} names a shard more than once: "
                    f"{other!r} and {name!r} are one file"
                )
        return names, None
    first, second = _format_shard(pattern, 0), _format_shard(pattern, 1)
    if first == second:
        raise ConfigError(
            f"output pattern {pattern!r} needs a shard number field, e.g. shard-%06d.tar, "
            "shard-{:06d}.tar or a list shard-{000..009}.tar"
        )
    return None, pattern


def _format_shard(pattern: str, index: int) -> str:
    try:
        if "%" in pattern:
            return pattern % index
        if "{" in pattern or "}" in pattern:
            return pattern.format(index)
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
        raise ConfigError(
            f"output pattern {pattern!r} is not a shard pattern ({type(e).__name__}: {e}); use e.g. "
            "shard-%06d.tar, shard-{:06d}.tar or a list shard-{000..009}.tar"
        ) from None
    return pattern


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


class _Sample:
    """One image to pack: its path, label (-1: none), class name (if known)
    and path relative to the source's folder."""

    def __init__(self, path: str, label: int, name: Optional[str], relative: str) -> None:
        self.path, self.label, self.name, self.relative = path, label, name, relative


def _file_list(list_path: str) -> FileList:
    """A file list: one path per line, optionally a space or tab and an integer label."""
    shown = _printable_path(list_path)
    folder = os.path.dirname(os.path.abspath(list_path))
    try:
        text = _conveyor.read_file(os.fsencode(list_path)).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{shown}: not a UTF-8 file list ({e})") from e
    paths: list[str] = []
    labels: list[int] = []
    for line, row in enumerate(text.splitlines(), start=1):
        row = row.strip()
        if not row:
            continue
        parts = row.rsplit(None, 1)
        label = -1
        if len(parts) == 2 and re.fullmatch(r"[+-]?\d+", parts[1]):
            row, label = parts[0], check_int(int(parts[1]), f"{shown}:{line}: label")
        paths.append(os.path.join(folder, row))
        labels.append(label)
    if not paths:
        raise ConfigError(f"{shown}: the file list is empty")
    return FileList(paths, labels)


def _source_samples(src: str) -> list[_Sample]:
    """The samples of an ImageFolder, a CSV/TSV file or a file list at ``src``."""
    if os.path.isdir(src):
        files: FileList = ImageFolder(src)
        root = os.fsdecode(src)
    else:
        if not os.path.exists(src):
            raise ConfigError(
                f"pack: {_printable_path(src)} does not exist (an ImageFolder, a CSV file or a file list)"
            )
        files = FileList.from_csv(src) if src.lower().endswith((".csv", ".tsv")) else _file_list(src)
        root = os.path.dirname(os.path.abspath(src))
    labels = files.labels or [-1] * len(files.paths)
    samples = []
    for path, label in zip(files.paths, labels):
        if not path.lower().endswith(IMG_EXTENSIONS):
            raise ConfigError(
                f"pack: {_printable_path(path)} is not one of the image formats the decoders read "
                f"({', '.join(IMG_EXTENSIONS)})"
            )
        name = files.classes[label] if files.classes is not None and label >= 0 else None
        samples.append(_Sample(path, label, name, os.path.relpath(path, root)))
    return samples


def _read(samples: list[_Sample]) -> Iterator[tuple[_Sample, bytes, str]]:
    for sample in samples:
        # Read by the engine: a FIFO is refused (ReadError) instead of blocking.
        data = _conveyor.read_file(os.fsencode(sample.path))
        yield sample, data, os.path.splitext(sample.path)[1][1:].lower()


def write_shard_index(shard: PathLike) -> str:
    """Writes the index of the local tar shard ``shard`` beside it, as
    ``shard + SHARD_INDEX_SUFFIX`` (``".index.json"``; the format:
    ``TarShardSource::shard_index`` in cpp/conveyor/io/tar_shards.h), under a
    temporary name renamed into place; returns its path.

    Raises:
        ReadError: the shard cannot be indexed (as ``TarShards`` would refuse
            it, or a member name is not UTF-8), naming it.
        OSError: the index cannot be written.
    """
    path = os.fsdecode(shard) + _conveyor.SHARD_INDEX_SUFFIX
    text = _conveyor.TarShardSource.shard_index(os.fsencode(shard))
    # A short name of its own (the shard's name plus a suffix could pass
    # NAME_MAX), made new (O_EXCL: never another writer's), 0o666 less the umask.
    while True:
        temporary = os.path.join(os.path.dirname(path), f".{secrets.token_hex(8)}.index.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.remove(temporary)
    return path


def pack(
    src: str,
    out_pattern: str,
    shard_size: Optional[int] = None,
    progress: bool = False,
    shuffle: bool = False,
    seed: int = 0,
    write_index: bool = True,
) -> list[str]:
    """Packs the images of ``src`` (an ImageFolder, a CSV/TSV file or a file
    list; see the module's text) into shards named by ``out_pattern``. With a
    numbered pattern (``"out/shard-%06d.tar"``, ``"out/shard-{:06d}.tar"``) a
    new shard starts before one would exceed ``shard_size`` bytes (default
    256 MB; a single larger sample gets a shard of its own); a brace list
    (``"out/shard-{000..009}.tar"``) divides the samples evenly over its
    shards. ``shuffle`` writes them in a random order drawn from ``seed``.
    ``write_index`` writes each shard's index beside it (``write_shard_index``).
    Returns the shard paths written.

    Raises:
        ConfigError: a bad pattern (see ``shard_names``), a brace list with
            more shards than samples or given with ``shard_size``, an image in
            a format the decoders do not read, or a bad source.
        ReadError: an image that can't be read, naming it.
    """
    names, numbered = shard_names(os.fsdecode(out_pattern))
    if names is not None and shard_size is not None:
        raise ConfigError("pack: a brace list of shards fixes their number; --shard-size does not apply")
    shard_size = 256 * 10**6 if shard_size is None else shard_size
    seed = check_int(seed, "seed", minimum=0)
    samples = _source_samples(os.fsdecode(src))
    if shuffle:
        random.Random(seed).shuffle(samples)
    if names is not None and len(names) > len(samples):
        raise ConfigError(f"pack: the pattern lists {len(names)} shards for {len(samples)} samples")
    digits = max(6, len(str(len(samples) - 1)))
    written: list[str] = []
    archive: Optional[tarfile.TarFile] = None
    used = 0
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(samples), unit="img", desc="pack")
    try:
        for index, (sample, data, ext) in enumerate(_read(samples)):
            key = f"{index:0{digits}d}"
            meta = {"path": sample.relative}
            if sample.name is not None:
                meta["class"] = sample.name
            members = [(f"{key}.{ext}", data)]
            if sample.label >= 0:
                members.append((f"{key}.cls", str(sample.label).encode()))
            members.append((f"{key}.json", json.dumps(meta, sort_keys=True).encode()))
            size = _entry_size([len(member) for _, member in members])
            if names is not None:
                # Sample i goes to shard i * K // n: sizes differ by at most one.
                new_shard = index * len(names) // len(samples) >= len(written)
            else:
                new_shard = archive is None or (used > 0 and _file_size(used + size) > shard_size)
            if new_shard:
                if archive is not None:
                    archive.close()
                    if write_index:
                        write_shard_index(written[-1])
                shard = (
                    names[len(written)] if names is not None else _format_shard(numbered or "", len(written))
                )
                os.makedirs(os.path.dirname(os.path.abspath(shard)), exist_ok=True)
                # An index left by an earlier pack would describe the old
                # shard, likely of the same size (tar pads to blocks).
                if os.path.lexists(shard + _conveyor.SHARD_INDEX_SUFFIX):
                    os.remove(shard + _conveyor.SHARD_INDEX_SUFFIX)
                archive = tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT)
                written.append(shard)
                used = 0
            assert archive is not None
            for name, member in members:
                archive.addfile(*_member(name, member))
            used += size
            if bar is not None:
                bar.update(1)
    finally:
        if archive is not None:
            archive.close()
        if bar is not None:
            bar.close()
    if write_index and written:
        write_shard_index(written[-1])
    return written


def pack_image_folder(
    src_dir: str, out_pattern: str, shard_size: int = 256 * 10**6, progress: bool = False
) -> list[str]:
    """``pack`` of the ImageFolder at ``src_dir``, in its order."""
    return pack(src_dir, out_pattern, shard_size, progress)


def _run(args: argparse.Namespace) -> int:
    shard_size = None if args.shard_size is None else parse_size(args.shard_size)
    shards = pack(
        args.src, args.out_pattern, shard_size, args.progress, args.shuffle, args.seed, not args.no_index
    )
    print(f"wrote {len(shards)} shard(s): {shards[0]}{' ... ' + shards[-1] if len(shards) > 1 else ''}")
    return 0


def _run_index(args: argparse.Namespace) -> int:
    from conveyor.sources.tar import expand_shards

    for pattern in args.shards:
        if is_url(pattern):
            raise ConfigError(
                f"index: {pattern} is a URL; index the shards where they are files, then upload both"
            )
    # A pattern such as out/* also matches the indexes written before.
    shards = [s for s in expand_shards(args.shards, "index") if not s.endswith(_conveyor.SHARD_INDEX_SUFFIX)]
    if not shards:
        raise ConfigError(f"index: {' '.join(args.shards)} names only shard indexes")
    written = [write_shard_index(shard) for shard in shards]
    print(f"wrote {len(written)} index(es): {written[0]}{' ... ' + written[-1] if len(written) > 1 else ''}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Adds ``conveyor pack`` and ``conveyor index`` to the command line."""
    parser = subparsers.add_parser(
        "pack",
        help="write an ImageFolder, a CSV file or a file list into tar shards (WebDataset layout)",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "src",
        metavar="SRC",
        help="an ImageFolder root (SRC/<class>/**/<image>), a .csv/.tsv file (columns path, label) "
        "or a file list (a path and an optional label per line)",
    )
    parser.add_argument(
        "out_pattern",
        metavar="OUT_PATTERN",
        help="shard paths with a number field, e.g. out/shard-%%06d.tar, or a list out/shard-{000..009}.tar",
    )
    parser.add_argument(
        "--shard-size", default=None, help="maximum shard size with a numbered pattern (default: 256MB)"
    )
    parser.add_argument(
        "--shuffle", action="store_true", help="write the samples in a random order (see --seed)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --shuffle's order (default: 0)")
    parser.add_argument("--progress", action="store_true", help="show a progress bar")
    parser.add_argument(
        "--no-index", action="store_true", help="write no <shard>.index.json beside each shard"
    )
    parser.set_defaults(run=_run)

    index = subparsers.add_parser(
        "index",
        help="write <shard>.index.json beside local tar shards, for TarShards over URLs",
        description=(
            "Writes the index of each local tar shard beside it (<shard>.index.json): where each member "
            "lies and each sample's label. Uploaded with the shards, it spares TarShards over URLs reading "
            "every shard whole at construction. conveyor pack writes them itself."
        ),
    )
    index.add_argument(
        "shards",
        metavar="SHARDS",
        nargs="+",
        help="shard paths or patterns (out/shard-{000..009}.tar, out/*.tar)",
    )
    index.set_defaults(run=_run_index)
