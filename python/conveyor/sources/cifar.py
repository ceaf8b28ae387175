"""CIFAR-10 and CIFAR-100 from the official python-pickle batches."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from conveyor.errors import ConfigError, ReadError, _printable_path
from conveyor.sources.arrays import ArraySource
from conveyor.sources.base import PathLike

_SIDE = 32

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


class _Files:
    """The batch files of an extracted folder or of the official tarball."""

    def __init__(self, root: str, folder: str, archive: str, name: str) -> None:
        self.folder = os.path.join(root, folder)
        self.archive_path = os.path.join(root, archive)
        self._folder_name = folder
        self._tar: Optional[tarfile.TarFile] = None
        if os.path.isdir(self.folder):
            self.where = self.folder
        elif os.path.isfile(self.archive_path):
            self.where = self.archive_path
            try:
                self._tar = tarfile.open(self.archive_path, "r:*")
            except (OSError, tarfile.TarError, EOFError) as e:
                raise self._error(self.archive_path, f"not a readable tar archive ({e})") from e
        else:
            raise ConfigError(
                f"{name}: neither the folder {_printable_path(self.folder)} nor the archive "
                f"{_printable_path(self.archive_path)} exists (nothing is downloaded)"
            )

    @staticmethod
    def _error(key: str, cause: str) -> ReadError:
        return ReadError(f"{_printable_path(key)}: {cause}", key=key, cause=cause)

    def load(self, file: str) -> tuple[str, dict[str, Any]]:
        """The unpickled dict of the batch ``file`` and the key naming it."""
        if self._tar is None:
            key = os.path.join(self.folder, file)
            try:
                with open(key, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                raise self._error(key, "not found") from None
            except OSError as e:
                raise self._error(key, e.strerror or str(e)) from e
        else:
            member = f"{self._folder_name}/{file}"
            key = f"{self.archive_path}:{member}"
            try:
                extracted = self._tar.extractfile(member)
            except KeyError:
                raise self._error(key, "not found in the archive") from None
            except (OSError, tarfile.TarError, EOFError) as e:
                raise self._error(key, f"unreadable ({e})") from e
            if extracted is None:
                raise self._error(key, "not a regular file")
            try:
                data = extracted.read()
            except (OSError, tarfile.TarError, EOFError) as e:
                raise self._error(key, f"unreadable ({e})") from e
        try:
            entry = _BatchUnpickler(io.BytesIO(data), encoding="latin1").load()
        except Exception as e:  # noqa: BLE001 - any failure of a corrupt pickle is this sample file's error.
            raise self._error(
                key, f"not a CIFAR python batch (corrupt pickle: {type(e).__name__}: {e})"
            ) from e
        if not isinstance(entry, dict):
            raise self._error(key, f"not a CIFAR python batch (a pickled {type(entry).__name__}, not a dict)")
        return key, {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()


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

    Raises:
        ConfigError: neither the folder nor the archive exists in ``root``.
        ReadError: a batch or the meta file is missing, not a valid pickle,
            or has the wrong content (e.g. data not N×3072 uint8), naming it.
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
            batches = [
                self._read_batch(*files.load(name))
                for name in (self.train_list if self.train else self.test_list)
            ]
            key, meta = files.load(self.meta_file)
            #: Class names, from the meta file.
            self.classes: list[str] = self._classes(key, meta)
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
        bad = next((label for label in self.targets if not 0 <= label < len(self.classes)), None)
        if bad is not None:
            cause = f"label {bad} is not a class index (the meta file names {len(self.classes)} classes)"
            raise ReadError(f"{_printable_path(files.where)}: {cause}", key=files.where, cause=cause)
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
            return ReadError(f"{_printable_path(key)}: {cause}", key=key, cause=cause)

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
        try:
            label_list = [int(label) for label in labels]
        except (TypeError, ValueError) as e:
            raise fail(f"{self.labels_key!r} must be a list of integers ({e})") from e
        if len(label_list) != len(pixels):
            raise fail(f"{len(pixels)} images but {len(label_list)} {self.labels_key}")
        return pixels, label_list

    def _classes(self, key: str, meta: dict[str, Any]) -> list[str]:
        names = meta.get(self.names_key)
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, (str, bytes)) for n in names):
            cause = f"not a CIFAR meta file: no list {self.names_key!r}"
            raise ReadError(f"{_printable_path(key)}: {cause}", key=key, cause=cause)
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
