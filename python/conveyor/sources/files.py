"""Image files: a list of paths (optionally with labels or boxes), a CSV
file listing them, or a torchvision-style ImageFolder."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from conveyor import _conveyor
from conveyor._checks import check_int, is_real
from conveyor.errors import ConfigError, _printable_path
from conveyor.sources.base import (
    IMG_EXTENSIONS,
    PathLike,
    Source,
    fs_paths,
)
from conveyor.sources.remote import RetryPolicy, build_interruptibly, is_url, list_objects, remote_arguments


def _listed_urls(
    root: str,
    retry: Optional[RetryPolicy],
    storage_options: Optional[Mapping[str, Any]],
    owner: str,
) -> list[str]:
    """Every URL under ``root`` (a prefix ending in "/"), in the order os.walk
    with sorted folders and files gives locally: by folder, then by name."""
    listed = build_interruptibly(lambda: list_objects(root, retry, storage_options, owner))
    return sorted((url for url, _ in listed), key=lambda url: tuple(url.rsplit("/", 1)))


def _images(urls: list[str], extensions: Sequence[str]) -> list[str]:
    """The URLs of ``urls`` whose names end with one of ``extensions`` (case-insensitive)."""
    return [url for url in urls if url.lower().endswith(tuple(extensions))]


def _checked_extensions(extensions: Optional[Sequence[str]], owner: str) -> tuple[str, ...]:
    """``extensions`` lower-cased (IMG_EXTENSIONS when None); a ConfigError for
    a str or an extension the decoders do not read."""
    if isinstance(extensions, str):
        raise ConfigError(f"{owner}: extensions must be a list, got the str {extensions!r}")
    allowed = IMG_EXTENSIONS if extensions is None else tuple(e.lower() for e in extensions)
    refused = [e for e in allowed if e not in IMG_EXTENSIONS]
    if refused:
        raise ConfigError(
            f"{owner}: extensions {', '.join(refused)} are not formats the decoders read "
            f"(only {', '.join(IMG_EXTENSIONS)})"
        )
    return allowed


def _check_boxes(
    boxes: Sequence[Sequence[tuple[float, float, float, float, int]]],
) -> list[list[_conveyor.BoundingBox]]:
    """Boxes as the engine takes them; a box that is not four finite numbers
    and an integer category is a ConfigError naming ``boxes[i][j]`` (NaN and
    infinite coordinates are rejected, not dropped: they would turn into
    garbage after the image's geometric transforms)."""
    checked: list[list[_conveyor.BoundingBox]] = []
    for i, objects in enumerate(boxes):
        row = []
        for j, box in enumerate(objects):
            where = f"FileList: boxes[{i}][{j}]"
            if isinstance(box, (str, bytes)) or len(box) != 5:
                raise ConfigError(f"{where} must be (x, y, width, height, category), got {box!r}")
            coords = box[:4]
            for value in coords:
                if not is_real(value):
                    raise ConfigError(f"{where}: coordinates must be numbers, got {box!r}")
                if not math.isfinite(value):
                    raise ConfigError(f"{where}: coordinates must be finite, got {box!r}")
            category = check_int(box[4], f"{where} category")
            row.append(_conveyor.BoundingBox(*(float(v) for v in coords), category))
        checked.append(row)
    return checked


class FileList(Source):
    """Image files given as a list of paths, with optional integer labels and
    optional boxes (for detection).

    Paths may be str, bytes or path-like; they reach the file system as the
    OS gives them (``os.fsencode``), so names that are not UTF-8 work. They
    are kept in ``paths`` as ``os.fsdecode`` gives them (the form
    ``os.listdir`` lists), which is also the ``key`` of their errors.

    Paths may also be URLs (``https://``, ``s3://``, ``gs://``, any fsspec
    protocol whose backend is installed; ``pip install 'conveyor-loader[remote]'``
    for HTTP): each is fetched whole with one request on the io threads,
    transient failures retried under ``retry``, and a failure is a ReadError
    naming the URL. See docs/api.md, "Remote storage".

    Args:
        paths: a list of image file paths.
        labels: one class index per path (int or numpy integer), or None
            (every label is -1).
        boxes: per path, its objects as ``(x, y, width, height, category)`` in
            pixels; the Loader then returns each batch's boxes moved along
            with the image's crops, resizes and flips (see ``Loader(targets=)``).
        retry: how reads of URLs retry transient failures (a RetryPolicy;
            None: its defaults, 5 attempts).
        storage_options: settings of the URLs' store: ``headers``,
            ``connect_timeout``, ``read_timeout`` and S3's (``key``,
            ``secret``, ``endpoint_url``, ``region``, ``profile``, ``anon``,
            ...); any other key sends the URLs through fsspec, whose
            ``fsspec.filesystem`` options they then are (docs/api.md,
            "Remote storage").
        cache_dir: a local folder that keeps every object read from a URL,
            so that later epochs, runs and the other ranks of the node read
            it from there (docs/api.md, "The cache").
        cache_budget: the most bytes the cache folder holds (least recently
            used objects go first); None: 80 % of its free space.

    Raises:
        ConfigError: ``paths`` is a single path or empty; a path holds a
            NUL byte (naming ``paths[i]``: the system would open the path up
            to it); a label is not an integer in the int64 range (naming
            ``labels[i]``; floats and strings are refused, not truncated);
            a box is not four finite numbers and an integer (naming
            ``boxes[i][j]``); or ``labels`` or ``boxes`` has the wrong
            length; a URL's protocol has no fsspec backend installed (naming
            the package to install).
    """

    #: Class names by index, when known (ImageFolder, from_csv with class names).
    classes: Optional[list[str]] = None
    #: Class name -> index, when known.
    class_to_idx: Optional[dict[str, int]] = None

    def __init__(
        self,
        paths: Sequence[PathLike],
        labels: Optional[Sequence[int]] = None,
        boxes: Optional[Sequence[Sequence[tuple[float, float, float, float, int]]]] = None,
        *,
        retry: Optional[RetryPolicy] = None,
        storage_options: Optional[Mapping[str, Any]] = None,
        cache_dir: Optional[PathLike] = None,
        cache_budget: Optional[int] = None,
    ) -> None:
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise ConfigError(
                f"FileList: paths must be a list of paths, got a single {type(paths).__name__} "
                f"({_printable_path(os.fsdecode(paths))}); pass [path]"
            )
        self.paths: list[str] = []
        for i, path in enumerate(paths):
            try:
                self.paths.append(os.fsdecode(path))
            except TypeError:
                raise ConfigError(
                    f"FileList: paths[{i}] must be a str, bytes or os.PathLike, got {type(path).__name__}"
                ) from None
        if not self.paths:
            raise ConfigError("FileList: paths is empty")
        for name, values in (("labels", labels), ("boxes", boxes)):
            if values is not None and len(values) != len(self.paths):
                raise ConfigError(f"FileList: {name} has {len(values)} entries for {len(self.paths)} paths")
        self.labels = (
            None
            if labels is None
            else [check_int(label, f"FileList: labels[{i}]") for i, label in enumerate(labels)]
        )
        self.has_boxes = boxes is not None
        checked_boxes = [] if boxes is None else _check_boxes(boxes)
        self._boxes = [[tuple(box) for box in objects] for objects in boxes] if boxes is not None else None
        remote = remote_arguments(self.paths, retry, storage_options, "FileList", cache_dir, cache_budget)
        self._remote = bool(remote)
        self._store = remote.get("remote")  # The store reading the URLs (its counters), or None.
        try:  # The engine checks the paths (a NUL byte names paths[i]).
            self._source = _conveyor.FileSource(
                fs_paths(self.paths), self.labels or [], checked_boxes, **remote
            )
        except ConfigError as e:
            raise ConfigError(f"{type(self).__name__}: {e}") from None

    def __len__(self) -> int:
        return len(self.paths)

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    def _target(self, index: int, label: int) -> Any:
        # With boxes, source[i] gives the target as the Loader's targets="list"
        # does (untransformed: boxes in the stored image's pixels, xywh).
        if self._boxes is None:
            return label
        objects = self._boxes[index]
        return {
            "boxes": np.array([box[:4] for box in objects], np.float32).reshape(-1, 4),
            "labels": np.array([box[4] for box in objects], np.int64),
            "image_id": self._image_id(label),
        }

    @classmethod
    def from_prefix(
        cls,
        prefix: str,
        extensions: Optional[Sequence[str]] = None,
        *,
        retry: Optional[RetryPolicy] = None,
        storage_options: Optional[Mapping[str, Any]] = None,
        cache_dir: Optional[PathLike] = None,
        cache_budget: Optional[int] = None,
    ) -> FileList:
        """A FileList (no labels) of every image under a URL prefix
        (``s3://bucket/train/``; other fsspec protocols through fsspec's
        listing), listed once here (every page of S3's ListObjectsV2), taken
        in the order a local folder walk gives (by folder, then by name).

        Args:
            prefix: the URL prefix; a trailing "/" is added when missing.
            extensions: the file extensions to take (IMG_EXTENSIONS when None).
            retry, storage_options, cache_dir, cache_budget: as for
                FileList; the listing uses the first two too.

        Raises:
            ConfigError: ``prefix`` is not a URL or its protocol cannot list
                (``http(s)://``); no image found; bad ``extensions``.
            ReadError: the listing failed (naming the prefix and the cause).
        """
        allowed = _checked_extensions(extensions, "FileList.from_prefix")
        if not is_url(prefix):
            raise ConfigError(f"FileList.from_prefix: {_printable_path(prefix)} is not a URL")
        root = prefix if prefix.endswith("/") else prefix + "/"
        urls = _images(_listed_urls(root, retry, storage_options, "FileList.from_prefix"), allowed)
        if not urls:
            raise ConfigError(
                f"FileList.from_prefix: found no images under {root} (extensions: {', '.join(allowed)})"
            )
        return cls(
            urls, retry=retry, storage_options=storage_options, cache_dir=cache_dir, cache_budget=cache_budget
        )

    @classmethod
    def from_csv(
        cls,
        path: PathLike,
        path_column: str = "path",
        label_column: Optional[str] = "label",
        delimiter: Optional[str] = None,
        classes: Optional[Sequence[str]] = None,
    ) -> FileList:
        """A FileList from a CSV or TSV file whose header row names the columns
        (matched without regard to case or surrounding spaces; other columns
        are ignored).

        Args:
            path: the CSV file. A UTF-8 byte order mark is ignored.
            path_column: the column of image paths; relative paths are
                relative to the CSV file's folder, URLs (``scheme://...``)
                are kept as they are.
            label_column: the column of labels, or None for no labels. When
                it is the default "label" and the file has no such column,
                every label is -1.
            delimiter: the field separator; None sniffs it from the header
                row (the most frequent of comma, tab and semicolon).
            classes: the class names, in index order. Without it, labels that
                are all plain integers (ASCII digits, an optional "-") are
                taken as they are, and any other labels are class names
                mapped to indices in sorted order; a label Python's ``int()``
                would read but that is not plain (``1_0``, a fullwidth
                ``３``, ``+3``) is refused, naming its line: pass ``classes``
                to take it as a name.

        The result's ``classes`` and ``class_to_idx`` list the class names and
        their indices (None for integer labels).

        Raises:
            ReadError: the CSV file can't be read or is not a regular file (a
                FIFO is refused, not waited on).
            ConfigError: an empty file, a missing column, a row with the wrong
                number of fields, an empty path or label, a path holding a NUL
                byte, a class not in ``classes``, a label out of the int64
                range or not a plain integer (naming ``file:line``), or no rows.
        """
        csv_path = os.fsdecode(path)
        shown = _printable_path(csv_path)
        folder = os.path.dirname(os.path.abspath(csv_path))
        # Read by the engine: a FIFO is refused instead of blocking in open().
        data = _conveyor.read_file(os.fsencode(csv_path))
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{shown}: not a UTF-8 CSV file ({e})") from e
        if not text.strip():
            columns = path_column if label_column is None else f"{path_column},{label_column}"
            raise ConfigError(f"{shown}: empty file; expected a header row with the columns {columns}")
        if delimiter is None:
            first = text.splitlines()[0]
            delimiter = max(",\t;", key=first.count)
        elif not isinstance(delimiter, str) or len(delimiter) != 1:
            raise ConfigError(f"FileList.from_csv: delimiter must be one character, got {delimiter!r}")
        try:
            rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
        except csv.Error as e:
            raise ConfigError(f"{shown}: not a valid CSV file ({e})") from e
        header = [name.strip().lower() for name in rows[0]]

        def column(name: str) -> Optional[int]:
            return header.index(name.strip().lower()) if name.strip().lower() in header else None

        path_index = column(path_column)
        if path_index is None:
            raise ConfigError(f"{shown}:1: the header row {rows[0]} has no {path_column!r} column")
        label_index = None if label_column is None else column(label_column)
        if (
            label_column is not None
            and label_index is None
            and (label_column != "label" or classes is not None)
        ):
            raise ConfigError(f"{shown}:1: the header row {rows[0]} has no {label_column!r} column")
        paths: list[str] = []
        texts: list[tuple[int, str]] = []  # (line, label text)
        for line, row in enumerate(rows[1:], start=2):
            if not row or all(not cell.strip() for cell in row):
                continue  # Blank lines, e.g. at the end.
            if len(row) != len(header):
                raise ConfigError(f"{shown}:{line}: expected {len(header)} columns, got {len(row)}")
            file = row[path_index].strip()
            if not file:
                raise ConfigError(f"{shown}:{line}: empty path")
            _conveyor.check_path(os.fsencode(file), f"{shown}:{line}: path")
            # A URL stays a URL: joined onto the folder it would be a local path.
            paths.append(file if is_url(file) else os.path.join(folder, file))
            if label_index is not None:
                label = row[label_index].strip()
                if not label:
                    raise ConfigError(f"{shown}:{line}: empty label")
                texts.append((line, label))
        if not paths:
            raise ConfigError(f"{shown}: no rows after the header")
        if label_index is None:
            return cls(paths)
        names: Optional[list[str]] = None
        if classes is not None:
            if isinstance(classes, str):
                raise ConfigError(
                    f"FileList.from_csv: classes must be a list of names, got the str {classes!r}"
                )
            names = [str(name) for name in classes]
        elif not all(_is_integer(label) for _, label in texts):
            for line, label in texts:
                if _int_would_read(label) and not _is_integer(label):
                    raise ConfigError(
                        f"{shown}:{line}: label {label!r} is neither a plain integer (ASCII digits, an "
                        "optional '-') nor a class name: write it in ASCII digits, or pass classes= to take "
                        "it as a name"
                    )
            names = sorted({label for _, label in texts})
        if names is None:
            labels = [check_int(int(label), f"{shown}:{line}: label") for line, label in texts]
        else:
            index = {name: i for i, name in enumerate(names)}
            labels = []
            for line, label in texts:
                if label not in index:
                    raise ConfigError(
                        f"{shown}:{line}: unknown class {label!r} (classes: {', '.join(map(repr, names))})"
                    )
                labels.append(index[label])
        result = cls(paths, labels)
        result.classes = names
        result.class_to_idx = None if names is None else {name: i for i, name in enumerate(names)}
        return result


_DIGITS = frozenset("0123456789")


def _is_integer(text: str) -> bool:
    """A plain integer label: ASCII digits with an optional "-" (as a tar
    shard's ``cls``), never what else ``int()`` reads ("1_0", "３", "+3")."""
    digits = text[1:] if text.startswith("-") else text
    return bool(digits) and all(c in _DIGITS for c in digits)


def _int_would_read(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


class ImageFolder(FileList):
    """Images stored as ``root/<class>/**/<image>``, with torchvision's rules:
    classes are the sorted sub-folder names, ``class_to_idx`` maps each to its
    index, files with IMG_EXTENSIONS (case-insensitive) are taken in sorted
    order, following symbolic links. File names need not be UTF-8.

    Like torchvision (``allow_empty=False``, its default), a class folder
    without any image is an error: its index would silently match no sample.
    With ``allow_empty=True`` such classes keep their index and have no samples.

    IMG_EXTENSIONS are torchvision's (JPEG, PNG, WebP, TIFF, BMP, PPM, PGM),
    all of which the decoders read; pass ``extensions`` to take only some.

    ``root`` may be a URL prefix (``s3://bucket/imagenet/train/``): it is
    listed once (every page of S3's ListObjectsV2; fsspec's listing for other
    protocols), classes are the first path level under it, and samples come
    in the order the same tree gives locally; ``retry``,
    ``storage_options``, ``cache_dir`` and ``cache_budget`` are FileList's.

    Raises:
        ConfigError: root does not exist (or holds a NUL byte), has no class
            folders, or no images (a URL root: or its protocol cannot list);
            a class folder has no image and ``allow_empty`` is False; or
            ``extensions`` lists one the decoders do not read.
    """

    def __init__(
        self,
        root: PathLike,
        extensions: Optional[Sequence[str]] = None,
        allow_empty: bool = False,
        *,
        retry: Optional[RetryPolicy] = None,
        storage_options: Optional[Mapping[str, Any]] = None,
        cache_dir: Optional[PathLike] = None,
        cache_budget: Optional[int] = None,
    ) -> None:
        self.root = os.fsdecode(root)
        allowed = _checked_extensions(extensions, "ImageFolder")
        paths: list[str] = []
        labels: list[int] = []
        if is_url(self.root):
            # Listed once: classes are the first path level under the prefix.
            if not self.root.endswith("/"):
                self.root += "/"
            listed = _listed_urls(self.root, retry, storage_options, "ImageFolder")
            relative_of = {url: url[len(self.root) :].split("/", 1) for url in listed}
            urls = _images(listed, allowed)
            relative = [relative_of[url] for url in urls]
            # As locally every sub-folder is a class, images or not, every
            # key's first path level is one (a folder marker "b/" too).
            self.classes = sorted({parts[0] for parts in relative_of.values() if len(parts) == 2})
            if not self.classes:
                raise ConfigError(f"ImageFolder: no class folders found in {self.root}")
            self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
            for url, parts in sorted(
                zip(urls, relative), key=lambda pair: (pair[1][0], pair[0].rsplit("/", 1)[0])
            ):
                if len(parts) == 2:
                    paths.append(url)
                    labels.append(self.class_to_idx[parts[0]])
        else:
            _conveyor.check_path(os.fsencode(self.root), "ImageFolder: root")
            if not os.path.isdir(self.root):
                raise ConfigError(f"ImageFolder: {_printable_path(self.root)} is not a directory")
            self.classes = sorted(entry.name for entry in os.scandir(self.root) if entry.is_dir())
            if not self.classes:
                raise ConfigError(f"ImageFolder: no class folders found in {_printable_path(self.root)}")
            self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
            for name in self.classes:
                class_dir = os.path.join(self.root, name)
                for folder, _, files in sorted(os.walk(class_dir, followlinks=True)):
                    for file in sorted(files):
                        lower = file.lower()
                        if lower.endswith(allowed):
                            paths.append(os.path.join(folder, file))
                            labels.append(self.class_to_idx[name])
        root = _printable_path(self.root)
        if not paths:
            raise ConfigError(f"ImageFolder: found no images in {root} (extensions: {', '.join(allowed)})")
        empty = sorted(set(self.classes) - {self.classes[label] for label in labels})
        if empty and not allow_empty:
            raise ConfigError(
                f"ImageFolder: found no images for the classes {', '.join(map(_printable_path, empty))} in "
                f"{root} (extensions: {', '.join(allowed)}); pass allow_empty=True to keep them"
            )
        super().__init__(
            paths,
            labels,
            retry=retry,
            storage_options=storage_options,
            cache_dir=cache_dir,
            cache_budget=cache_budget,
        )

    @property
    def samples(self) -> list[tuple[str, int]]:
        """(path, class index) pairs in sample order, as torchvision's ImageFolder."""
        assert self.labels is not None
        return list(zip(self.paths, self.labels))
