"""CIFAR-10 and CIFAR-100 from the official python-pickle batches."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import pickle
import pickletools
import posixpath
import reprlib
import tarfile
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from conveyor import _conveyor
from conveyor._checks import is_int
from conveyor.errors import ConfigError, ReadError, _printable_path
from conveyor.sources.arrays import ArraySource
from conveyor.sources.base import PathLike, open_regular_file, read_error

_SIDE = 32

# The largest official batch is CIFAR-100's "train": 50 000 images of 3 072
# bytes, with two labels and a file name each (155 MB). A file or archive
# member larger than 50 000 × 4 096 bytes is not a batch, and is refused
# before it is read (a /dev/zero would otherwise be read until MemoryError).
_MAX_BATCH_BYTES = 50_000 * 4_096
# The pickle's opcodes are scanned before it is unpickled (_check_pickle): the
# official layout nests a few levels (dict → list → str; the array's
# reconstruction tuples: 7 levels), and takes about 4 opcodes per image
# (a label or two, a file name and its memo entry).
_MAX_NESTING = 32
_MAX_OPCODES = 50_000 * 16
# Links followed inside an archive before it is called a loop.
_MAX_LINKS = 8
# The official tarballs hold under 10 members and decompress to under 200 MB.
_MAX_MEMBERS = 1_000
_MAX_ARCHIVE_BYTES = 1 << 30
# The compressions tarfile's "r:*" reads, by their magic bytes.
_COMPRESSIONS = (
    (b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    (b"BZh", bz2.BZ2File),
    (b"\xfd7zXZ\x00", lzma.LZMAFile),
)


class _Bounded:
    """A (decompressed) file that refuses to be read or sought past ``limit``
    bytes, for tarfile: a header claiming gigabytes is refused before
    anything is allocated for it."""

    def __init__(self, stream: Any, limit: int) -> None:
        self._stream, self._limit = stream, limit

    def _check(self, end: int) -> None:
        if end > self._limit:
            raise OSError(f"more than {self._limit} bytes once decompressed: not a CIFAR python archive")

    def read(self, size: Optional[int] = -1) -> bytes:
        position = self._stream.tell()
        if size is None or size < 0:
            data = self._stream.read(self._limit - position + 1)
            self._check(position + len(data))
            return data
        self._check(position + size)
        return self._stream.read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset, whence = self._stream.tell() + offset, io.SEEK_SET
        if whence == io.SEEK_SET:
            self._check(offset)
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()


# What the official batches (numpy arrays pickled by Python 2) may refer to;
# anything else in a "batch" is refused, so that opening one runs no code.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


# Opcodes that change the object below their arguments instead of making one.
_IN_PLACE = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"})


def _check_pickle(data: bytes) -> Optional[str]:
    """Why the pickle ``data`` is not one of the official layout's shape, or
    None. Unpickling builds containers without recursion, but a deeply nested
    result is not harmless: CPython's unpickler crashes (SIGSEGV) on 300 000
    nested tuples and a repr of 50 000 raises RecursionError. So the opcode
    stream is walked first, without building anything (``pickletools.genops``,
    iterative), following each object's nesting depth through the stack and
    the memo: at most ``_MAX_OPCODES`` opcodes and ``_MAX_NESTING`` levels.
    A container filled after it was put in another (only memo references can
    do that: cycles, or nesting the walk could not follow) is refused too,
    as the official batches never do it."""
    depth: list[int] = []  # By object id.
    contained: list[bool] = []  # By object id: already inside another object.
    stack: list[Optional[int]] = []  # Object ids; None is a mark.
    memo: dict[int, int] = {}
    try:
        for count, (opcode, arg, position) in enumerate(pickletools.genops(data), 1):
            if count > _MAX_OPCODES:
                return f"more than {_MAX_OPCODES} pickle opcodes"
            name = opcode.name
            if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                if not stack or stack[-1] is None:
                    return f"corrupt pickle: {name} at byte {position} with nothing to store"
                memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
                continue
            if name in ("GET", "BINGET", "LONG_BINGET"):
                if arg not in memo:
                    return f"corrupt pickle: {name} at byte {position} of a memo entry never stored"
                stack.append(memo[arg])
                continue
            if name == "DUP" and stack:
                stack.append(stack[-1])
                continue
            if name == "MARK":
                stack.append(None)
                continue
            if name == "POP" and stack and stack[-1] is None:
                stack.pop()  # As CPython's unpickler: POP above a mark discards the mark.
                continue
            before = opcode.stack_before
            children: list[int] = []
            if pickletools.markobject in before:
                while stack and stack[-1] is not None:
                    children.append(stack.pop())  # type: ignore[arg-type]
                if not stack:
                    return f"corrupt pickle: {name} at byte {position} without a mark"
                stack.pop()
                fixed = before.index(pickletools.markobject)
            else:
                fixed = len(before)
            if fixed > len(stack) or None in stack[len(stack) - fixed :]:
                return f"corrupt pickle: {name} at byte {position} with too few objects on the stack"
            below: list[int] = stack[len(stack) - fixed :]  # type: ignore[assignment]
            del stack[len(stack) - fixed :]
            if name == "STOP":
                return None
            if not opcode.stack_after:
                continue
            if name in _IN_PLACE:
                target, children = below[0], below[1:] + children
                if children and contained[target]:
                    return (
                        "a pickled container is changed after it was put in another: not the official layout"
                    )
            else:
                children = below + children
                depth.append(0)
                contained.append(False)
                target = len(depth) - 1
            for child in children:
                contained[child] = True
                depth[target] = max(depth[target], depth[child] + 1)
            if depth[target] > _MAX_NESTING:
                return f"the pickle nests deeper than {_MAX_NESTING} levels"
            stack.extend([target] * len(opcode.stack_after))
    except ValueError as e:  # genops: an unknown opcode, a truncated argument, no STOP.
        return f"corrupt pickle: {e}"
    return None


class _Files:
    """The batch files of an extracted folder or of the official tarball."""

    def __init__(self, root: str, folder: str, archive: str, name: str) -> None:
        _conveyor.check_path(os.fsencode(root), f"{name}: root")
        self.folder = os.path.join(root, folder)
        self.archive_path = os.path.join(root, archive)
        self._folder_name = folder
        self._tar: Optional[tarfile.TarFile] = None
        self._members: dict[str, tarfile.TarInfo] = {}
        self._streams: list[Any] = []  # What the archive is read through, closed with it.
        if os.path.isdir(self.folder):
            self.where = self.folder
        elif os.path.lexists(self.archive_path):
            self.where = self.archive_path
            self._open_archive()
        else:
            raise ConfigError(
                f"{name}: neither the folder {_printable_path(self.folder)} nor the archive "
                f"{_printable_path(self.archive_path)} exists (nothing is downloaded)"
            )

    def _open_archive(self) -> None:
        """Opens the tarball through the engine (a regular file only) and lists
        its members, bounded: at most _MAX_ARCHIVE_BYTES once decompressed
        (checked before each read, so a small archive of zeros cannot make
        tarfile allocate gigabytes for one header) and _MAX_MEMBERS members."""
        path = self.archive_path
        raw = open_regular_file(path)
        self._streams.append(raw)
        try:
            magic = raw.read(6)
            raw.seek(0)
            stream: Any = raw
            for prefix, opener in _COMPRESSIONS:
                if magic.startswith(prefix):
                    stream = opener(raw)
                    self._streams.append(stream)
            self._tar = tarfile.open(fileobj=_Bounded(stream, _MAX_ARCHIVE_BYTES), mode="r:")
            for count, member in enumerate(self._tar, 1):
                if count > _MAX_MEMBERS:
                    raise read_error(path, f"more than {_MAX_MEMBERS} members: not a CIFAR python archive")
                self._members[member.name] = member  # The last of a name wins, as tarfile's getmember.
        except ReadError:
            self.close()
            raise
        except (OSError, tarfile.TarError, EOFError) as e:
            self.close()
            raise read_error(path, f"not a readable tar archive ({e})") from e

    @staticmethod
    def _too_large(key: str, size: int) -> ReadError:
        return read_error(
            key,
            f"not a CIFAR python batch ({size} bytes; the official batches are at most {_MAX_BATCH_BYTES})",
        )

    def _read_file(self, key: str) -> bytes:
        with open_regular_file(key) as f:
            size = os.fstat(f.fileno()).st_size
            if size > _MAX_BATCH_BYTES:
                raise self._too_large(key, size)
            try:
                data = f.read(_MAX_BATCH_BYTES + 1)  # Bounded even if the file grows meanwhile.
            except OSError as e:
                raise read_error(key, e.strerror or str(e)) from e
        if len(data) > _MAX_BATCH_BYTES:
            raise self._too_large(key, len(data))
        return data

    def _member(self, name: str, key: str) -> tarfile.TarInfo:
        """The regular member ``name`` of the archive, links followed within
        the archive only (never to the file system), at most _MAX_LINKS."""
        find = self._members.get
        member = find(name)
        if member is None:
            raise read_error(key, "not found in the archive")
        for _ in range(_MAX_LINKS + 1):
            if member.isreg():
                return member
            if not (member.issym() or member.islnk()):
                kinds = {tarfile.DIRTYPE: "a directory", tarfile.FIFOTYPE: "a FIFO", tarfile.CHRTYPE:
                         "a character device", tarfile.BLKTYPE: "a block device"}  # fmt: skip
                kind = kinds.get(member.type, f"type {member.type!r}")
                raise read_error(key, f"not a regular file in the archive ({kind})")
            # A symbolic link is relative to its folder, a hard link to the archive's root.
            target = member.linkname
            if member.issym():
                target = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), target))
            member = find(target)
            if member is None:
                raise read_error(key, f"a link to {target!r}, which is not in the archive")
        raise read_error(key, f"more than {_MAX_LINKS} levels of links in the archive (a loop?)")

    def load(self, file: str) -> tuple[str, dict[str, Any]]:
        """The unpickled dict of the batch ``file`` and the key naming it."""
        if self._tar is None:
            key = os.path.join(self.folder, file)
            data = self._read_file(key)
        else:
            member_name = f"{self._folder_name}/{file}"
            key = f"{self.archive_path}:{member_name}"
            member = self._member(member_name, key)
            if member.size > _MAX_BATCH_BYTES:
                raise self._too_large(key, member.size)
            try:
                extracted = self._tar.extractfile(member)
                assert extracted is not None  # A regular member.
                data = extracted.read()
            except (OSError, tarfile.TarError, EOFError) as e:
                raise read_error(key, f"unreadable ({e})") from e
        problem = _check_pickle(data)
        if problem is not None:
            raise read_error(key, f"not a CIFAR python batch ({problem})")
        try:
            entry = _BatchUnpickler(io.BytesIO(data), encoding="latin1").load()
        except Exception as e:  # noqa: BLE001 - any failure of a corrupt pickle is this sample file's error.
            raise read_error(
                key, f"not a CIFAR python batch (corrupt pickle: {type(e).__name__}: {e})"
            ) from e
        if not isinstance(entry, dict):
            raise read_error(key, f"not a CIFAR python batch (a pickled {type(entry).__name__}, not a dict)")
        return key, {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
        for stream in reversed(self._streams):  # tarfile leaves a given file open.
            stream.close()
        self._streams.clear()


class CIFAR10(ArraySource):
    """CIFAR-10 from the official python version: ``cifar-10-batches-py/``
    (``data_batch_1`` … ``data_batch_5``, ``test_batch``, ``batches.meta``) in
    ``root``, or read directly from ``root/cifar-10-python.tar.gz`` when the
    folder is not there. Nothing is downloaded.

    Samples are raw 32×32×3 uint8 images (stored H×W×C, as torchvision's
    ``.data``): they take the image transforms without a decode, e.g. the
    CIFAR recipe ``[T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(),
    T.Normalize(...)]``. ``source[i]`` is ``(32×32×3 uint8 array, label)``;
    ``classes`` are the meta file's names, ``targets`` the labels. The whole
    split is held in memory (150 MB for the training set), as torchvision does.
    Keys (in errors) are ``<folder or archive>[i]``.

    Files are read as nothing in them can take the process down: a batch
    that is not a regular file (a FIFO, a device) is refused by name, never
    waited on; one larger than the largest official batch (204 800 000
    bytes, checked before reading) is refused; the pickle's opcodes are
    walked before it is unpickled, and nesting deeper than the layout needs
    (32 levels) is refused (CPython's unpickler crashes on 300 000);
    links in the tarball are followed within it only, 8 at most.

    Raises:
        ConfigError: neither the folder nor the archive exists in ``root``;
            ``root`` holds a NUL byte.
        ReadError: a batch or the meta file is missing, not a regular file,
            too large, not a valid pickle or nested too deep, a link loop in
            the archive, or has the wrong content (data not N×3072 uint8, a
            label that is not an int in [0, classes): ``'labels'[3] must be
            an int, got float 1.7``), naming the file (and the entry).
    """

    base_folder = "cifar-10-batches-py"
    archive = "cifar-10-python.tar.gz"
    train_list: Sequence[str] = tuple(f"data_batch_{i}" for i in range(1, 6))
    test_list: Sequence[str] = ("test_batch",)
    meta_file = "batches.meta"

    def __init__(self, root: PathLike, train: bool = True) -> None:
        self.root = os.fsdecode(root)
        self.train = bool(train)
        self._check_arguments()
        files = _Files(self.root, self.base_folder, self.archive, type(self).__name__)
        try:
            key, meta = files.load(self.meta_file)
            #: Class names, from the meta file.
            self.classes: list[str] = self._classes(key, meta)
            batches = [
                self._read_batch(*files.load(name))
                for name in (self.train_list if self.train else self.test_list)
            ]
        finally:
            files.close()
        count = sum(len(labels) for _, labels in batches)
        data = np.empty((count, _SIDE, _SIDE, 3), np.uint8)
        start = 0
        for pixels, _ in batches:
            # Stored as N×3072 planes (1024 red, green, blue): to H×W×C.
            data[start : start + len(pixels)] = pixels.reshape(-1, 3, _SIDE, _SIDE).transpose(0, 2, 3, 1)
            start += len(pixels)
        #: Labels in sample order.
        self.targets: list[int] = [label for _, labels in batches for label in labels]
        self._where = files.where
        #: Class name -> index.
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        super().__init__(data, np.asarray(self.targets, np.int64))

    @property
    def data(self) -> np.ndarray:
        """The images, N×32×32×3 uint8 (torchvision's ``.data``)."""
        return self.images

    def _check_arguments(self) -> None:
        pass

    def _name(self) -> str:
        return self._where

    labels_key = "labels"
    names_key = "label_names"

    def _read_batch(self, key: str, entry: dict[str, Any]) -> tuple[np.ndarray, list[int]]:
        def fail(cause: str) -> ReadError:
            return read_error(key, cause)

        for name in ("data", self.labels_key):
            if name not in entry:
                raise fail(f"not a CIFAR python batch: no {name!r} entry (has {', '.join(map(str, entry))})")
        pixels, labels = entry["data"], entry[self.labels_key]
        if (
            not isinstance(pixels, np.ndarray)
            or pixels.dtype != np.uint8
            or pixels.ndim != 2
            or pixels.shape[1] != 3 * _SIDE * _SIDE
        ):
            shape = getattr(pixels, "shape", None)
            dtype = getattr(pixels, "dtype", type(pixels).__name__)
            raise fail(f"'data' must be N×3072 uint8, got {dtype} of shape {shape}")
        # Integers as they are: never int() of a float, a bool, a str, nor the
        # keys of a dict.
        if isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "iu":
            label_list = labels.tolist()
        elif isinstance(labels, (list, tuple)):
            for i, label in enumerate(labels):
                if not is_int(label):
                    shown = reprlib.repr(label)
                    raise fail(f"{self.labels_key!r}[{i}] must be an int, got {type(label).__name__} {shown}")
            label_list = [int(label) for label in labels]
        else:
            what = type(labels).__name__
            if isinstance(labels, np.ndarray):
                what = f"a {labels.dtype} array of shape {labels.shape}"
            raise fail(f"{self.labels_key!r} must be a list of integers, got {what}")
        for i, label in enumerate(label_list):
            if not 0 <= label < len(self.classes):
                raise fail(
                    f"{self.labels_key!r}[{i}] = {label} is not a class index "
                    f"(the meta file names {len(self.classes)} classes)"
                )
        if len(label_list) != len(pixels):
            raise fail(f"{len(pixels)} images but {len(label_list)} {self.labels_key}")
        return pixels, label_list

    def _classes(self, key: str, meta: dict[str, Any]) -> list[str]:
        names = meta.get(self.names_key)
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, (str, bytes)) for n in names):
            raise read_error(key, f"not a CIFAR meta file: no list {self.names_key!r}")
        return [n.decode("latin1") if isinstance(n, bytes) else n for n in names]


class CIFAR100(CIFAR10):
    """CIFAR-100 from the official python version: ``cifar-100-python/``
    (``train``, ``test``, ``meta``) in ``root``, or read directly from
    ``root/cifar-100-python.tar.gz``. ``label="fine"`` (100 classes, the
    default, as torchvision) or ``"coarse"`` (20 superclasses) chooses the
    labels and ``classes``. Otherwise as CIFAR10.

    Raises:
        ConfigError: ``label`` is not "fine" or "coarse"; neither the folder
            nor the archive exists.
        ReadError: as CIFAR10.
    """

    base_folder = "cifar-100-python"
    archive = "cifar-100-python.tar.gz"
    train_list = ("train",)
    test_list = ("test",)
    meta_file = "meta"

    def __init__(self, root: PathLike, train: bool = True, label: str = "fine") -> None:
        self.label = label
        super().__init__(root, train)

    def _check_arguments(self) -> None:
        if self.label not in ("fine", "coarse"):
            raise ConfigError(f"CIFAR100: label must be 'fine' or 'coarse', got {self.label!r}")
        self.labels_key = f"{self.label}_labels"
        self.names_key = f"{self.label}_label_names"
