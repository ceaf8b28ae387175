"""Sources: ImageFolder (torchvision's rules), FileList.from_csv, TarShards and
`conveyor pack`, MNIST (IDX files), PythonSource. Inputs are generated per test."""

from __future__ import annotations

import gc
import gzip
import io
import json
import os
import struct
import tarfile
import threading
import traceback
import weakref
from pathlib import Path

import numpy as np
import pytest

import conveyor
from conveyor import _conveyor
from conveyor.cli import main as cli_main
from conveyor.pack import pack_image_folder, parse_size
from conveyor.sources import (
    IMG_EXTENSIONS,
    MNIST,
    CocoDetection,
    FashionMNIST,
    FileList,
    ImageFolder,
    PythonSource,
    TarShards,
    expand_shards,
)
from conveyor.transforms import CenterCrop, Normalize, Resize


def touch(path: Path, data: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- ImageFolder ------------------------------------------------------------------------


def torchvision_make_dataset(root: str, extensions=IMG_EXTENSIONS):
    """torchvision.datasets.folder's find_classes + make_dataset, as documented
    (torchvision itself is not installed here)."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {root}.")
    class_to_idx = {name: i for i, name in enumerate(classes)}
    instances = []
    available = set()
    for target_class in sorted(class_to_idx):
        target_dir = os.path.join(root, target_class)
        for folder, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(folder, fname)
                if path.lower().endswith(tuple(extensions)):
                    instances.append((path, class_to_idx[target_class]))
                    available.add(target_class)
    empty = set(class_to_idx) - available
    if empty:
        raise FileNotFoundError(f"Found no valid file for the classes {', '.join(sorted(empty))}.")
    return classes, class_to_idx, instances


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for rel in [
        "zebra/b.jpg", "zebra/A.JPG", "zebra/nested/deeper/c.Png", "zebra/nested/a.webp",
        "ant/x.jpeg", "ant/notes.txt", "ant/y.WEBP", "ant/sub/Z.JPEG", "ant/sub/.hidden.jpg",
        "Bee/img.PNG", "Bee/readme.md", "bee/1.jpg", "bee/10.jpg", "bee/2.jpg",
    ]:  # fmt: skip
        touch(root / rel, rel.encode())
    touch(root / "stray.jpg")  # A file at the root is not a class.
    return root


def test_image_folder_matches_torchvision_rules(tree: Path):
    folder = ImageFolder(tree)
    classes, class_to_idx, instances = torchvision_make_dataset(str(tree))
    assert folder.classes == classes == ["Bee", "ant", "bee", "zebra"]
    assert folder.class_to_idx == class_to_idx
    assert folder.samples == instances
    assert len(folder) == len(instances) == 12
    # Spot checks of the rule itself: sorted walk, mixed-case extensions, hidden files kept.
    rel = [os.path.relpath(p, tree) for p, _ in folder.samples]
    assert rel[:5] == ["Bee/img.PNG", "ant/x.jpeg", "ant/y.WEBP", "ant/sub/.hidden.jpg", "ant/sub/Z.JPEG"]
    assert rel[5:8] == ["bee/1.jpg", "bee/10.jpg", "bee/2.jpg"]
    assert rel[8:] == ["zebra/A.JPG", "zebra/b.jpg", "zebra/nested/a.webp", "zebra/nested/deeper/c.Png"]
    data, label, key = folder._engine_source().read(11)
    assert (data, label, key) == (b"zebra/nested/deeper/c.Png", 3, str(tree / "zebra/nested/deeper/c.Png"))


def test_image_folder_empty_class_raises_like_torchvision(tree: Path):
    (tree / "empty").mkdir()
    touch(tree / "nothing" / "notes.txt")
    with pytest.raises(FileNotFoundError, match="empty, nothing"):
        torchvision_make_dataset(str(tree))
    with pytest.raises(conveyor.ConfigError, match=r"found no images for the classes empty, nothing in "):
        ImageFolder(tree)
    folder = ImageFolder(tree, allow_empty=True)
    assert folder.classes == ["Bee", "ant", "bee", "empty", "nothing", "zebra"]
    assert sorted(set(folder.labels)) == [0, 1, 2, 5]  # Empty classes keep their index.


def test_image_folder_config_errors(tmp_path: Path):
    with pytest.raises(conveyor.ConfigError, match=f"ImageFolder: {tmp_path / 'missing'} is not a directory"):
        ImageFolder(tmp_path / "missing")
    (tmp_path / "root").mkdir()
    with pytest.raises(conveyor.ConfigError, match="no class folders found"):
        ImageFolder(tmp_path / "root")
    touch(tmp_path / "root" / "cls" / "a.txt")
    with pytest.raises(conveyor.ConfigError, match="found no images in"):
        ImageFolder(tmp_path / "root")


def test_image_folder_missing_file_is_a_read_error(tree: Path):
    folder = ImageFolder(tree)
    path = folder.paths[0]
    os.remove(path)
    with pytest.raises(conveyor.ReadError) as info:
        folder._engine_source().read(0)
    assert str(info.value) == f"{path}: No such file or directory"
    assert info.value.key == path


# --- FileList.from_csv ------------------------------------------------------------------


def test_file_list_from_csv(tmp_path: Path):
    touch(tmp_path / "data" / "imgs" / "a.jpg", b"A")
    touch(tmp_path / "other.jpg", b"B")
    csv_path = tmp_path / "data" / "list.csv"
    csv_path.write_text(f"path,label\nimgs/a.jpg,3\n{tmp_path / 'other.jpg'}, 5\n\n")
    files = FileList.from_csv(csv_path)
    assert files.paths == [str(tmp_path / "data" / "imgs" / "a.jpg"), str(tmp_path / "other.jpg")]
    assert files.labels == [3, 5]
    assert files._engine_source().read(1) == (b"B", 5, str(tmp_path / "other.jpg"))
    # Column order is free, other columns are ignored, label is optional.
    csv_path.write_text("id,LABEL,path\n1,7,imgs/a.jpg\n")
    assert FileList.from_csv(csv_path).labels == [7]
    csv_path.write_text("path\nimgs/a.jpg\n")
    assert FileList.from_csv(csv_path).labels is None
    assert FileList.from_csv(csv_path)._engine_source().read(0)[1] == -1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "path,label\na.jpg,1\nb.jpg,9223372036854775808\n",
            ":3: label must be <= 9223372036854775807, got 9223372036854775808",
        ),
        ("path,label\na.jpg,1\nb.jpg\n", ":3: expected 2 columns, got 1"),
        ("path,label\n,1\n", ":2: empty path"),
        ("file,label\na.jpg,1\n", ":1: the header row ['file', 'label'] has no 'path' column"),
        ("path,label\n", ": no rows after the header"),
        ("", ": empty file; expected a header row with the columns path,label"),
    ],
)
def test_file_list_from_csv_errors_name_the_line(tmp_path: Path, text: str, message: str):
    csv_path = tmp_path / "list.csv"
    csv_path.write_text(text)
    with pytest.raises(conveyor.ConfigError) as info:
        FileList.from_csv(csv_path)
    assert str(info.value) == f"{csv_path}{message}"


def test_file_list_from_missing_csv_is_a_read_error(tmp_path: Path):
    with pytest.raises(conveyor.ReadError) as info:
        FileList.from_csv(tmp_path / "nope.csv")
    assert str(info.value) == f"{tmp_path / 'nope.csv'}: No such file or directory"


# --- TarShards and conveyor pack ----------------------------------------------------------


@pytest.fixture
def small_folder(tmp_path: Path) -> Path:
    """3 classes, 7 images with distinct bytes (content is not decoded here)."""
    root = tmp_path / "folder"
    for rel in ["cat/1.jpg", "cat/2.JPEG", "dog/a/3.png", "dog/4.webp", "dog/skip.txt", "emu/5.jpg",
                "emu/6.jpg", "emu/7.jpg"]:  # fmt: skip
        touch(root / rel, (rel * 40).encode())
    return root


def test_pack_then_tar_shards_roundtrip(small_folder: Path, tmp_path: Path):
    out = tmp_path / "shards" / "shard-%03d.tar"
    # Each sample is 3 members of 1 kB (header + data < 512 bytes); a shard adds
    # 1 kB of end marker and pads to 10 kB: 3 samples per 12 kB shard.
    assert cli_main(["pack", str(small_folder), str(out), "--shard-size", "12kB"]) == 0
    folder = ImageFolder(small_folder)
    shards = [str(tmp_path / "shards" / f"shard-{i:03d}.tar") for i in range(3)]
    # Each shard, and its index beside it.
    written = sorted(str(p) for p in (tmp_path / "shards").iterdir())
    assert written == sorted(shards + [s + ".index.json" for s in shards])
    assert all(os.path.getsize(s) <= 12_000 for s in shards)
    for shard in shards:
        with tarfile.open(shard) as archive:
            members = [
                [m.name, m.offset_data, m.size]
                + ([archive.extractfile(m).read().decode()] if m.name.endswith(".cls") else [])
                for m in archive.getmembers()
            ]
        index = json.loads(Path(shard + ".index.json").read_text())
        assert index == {
            "format": "conveyor tar index",
            "version": 1,
            "shard_bytes": os.path.getsize(shard),
            "members": members,
        }

    source = TarShards(str(tmp_path / "shards" / "shard-{000..002}.tar"))
    assert source.shards == shards
    assert len(source) == len(folder) == 7
    for i, (path, label) in enumerate(folder.samples):
        data, got_label, key = source._engine_source().read(i)
        assert data == Path(path).read_bytes()
        assert got_label == label
        ext = os.path.splitext(path)[1][1:].lower()
        assert key == f"{shards[i // 3]}:{i:06d}.{ext}"
        assert source.key(i) == key
        assert source.fields(i) == [ext, "cls", "json"]
        meta = json.loads(source.field(i, "json"))
        assert meta == {"class": folder.classes[label], "path": os.path.relpath(path, small_folder)}


def test_packed_shards_are_readable_by_webdataset(small_folder: Path, tmp_path: Path):
    wds = pytest.importorskip("webdataset")
    shards = pack_image_folder(str(small_folder), str(tmp_path / "s-{:02d}.tar"), shard_size=10**6)
    assert len(shards) == 1
    folder = ImageFolder(small_folder)
    samples = list(wds.WebDataset(shards, shardshuffle=False))
    assert [s["__key__"] for s in samples] == [f"{i:06d}" for i in range(7)]
    for sample, (path, label) in zip(samples, folder.samples):
        ext = os.path.splitext(path)[1][1:].lower()
        assert sample[ext] == Path(path).read_bytes()
        assert int(sample["cls"]) == label


def test_pack_is_deterministic(small_folder: Path, tmp_path: Path):
    a = pack_image_folder(str(small_folder), str(tmp_path / "a-%d.tar"))
    b = pack_image_folder(str(small_folder), str(tmp_path / "b-%d.tar"))
    assert Path(a[0]).read_bytes() == Path(b[0]).read_bytes()


def test_pack_errors(small_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert cli_main(["pack", str(small_folder), str(tmp_path / "plain.tar")]) == 1
    assert "needs a shard number field" in capsys.readouterr().err
    assert cli_main(["pack", str(small_folder), str(tmp_path / "x-%d.tar"), "--shard-size", "lots"]) == 1
    assert "invalid size 'lots'" in capsys.readouterr().err
    assert cli_main(["pack", str(tmp_path / "nowhere"), str(tmp_path / "x-%d.tar")]) == 1


def test_parse_size():
    assert parse_size("256MB") == 256 * 10**6
    assert parse_size("64MiB") == 64 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("4096") == 4096
    assert parse_size("10 kb") == 10_000
    with pytest.raises(conveyor.ConfigError):
        parse_size("0MB")


def write_tar(path: Path, members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(path, "w", format=fmt) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_tar_shards_patterns_and_lists(tmp_path: Path):
    for i in range(3):
        write_tar(tmp_path / f"part-{i}.tar", [(f"k{i}.jpg", b"%d" % i), (f"k{i}.cls", b"%d" % i)])
    by_glob = TarShards(str(tmp_path / "part-*.tar"))
    assert by_glob.shards == [str(tmp_path / f"part-{i}.tar") for i in range(3)]
    by_list = TarShards([tmp_path / "part-2.tar", tmp_path / "part-0.tar"])
    assert [by_list._engine_source().read(i)[:2] for i in range(2)] == [(b"2", 2), (b"0", 0)]
    assert expand_shards("a/{0..2}-{x,y}.tar") == [
        "a/0-x.tar", "a/0-y.tar", "a/1-x.tar", "a/1-y.tar", "a/2-x.tar", "a/2-y.tar",
    ]  # fmt: skip
    assert expand_shards("s-{08..11}.tar") == ["s-08.tar", "s-09.tar", "s-10.tar", "s-11.tar"]
    with pytest.raises(conveyor.ConfigError, match="no file matches"):
        TarShards(str(tmp_path / "nothing-*.tar"))
    with pytest.raises(
        conveyor.ConfigError, match=r"shuffle_buffer \(None or an int >= 1\) must be >= 1, got 0"
    ):
        TarShards(str(tmp_path / "part-*.tar"), shuffle_buffer=0)
    with pytest.raises(conveyor.ReadError) as info:
        TarShards(str(tmp_path / "part-{0..3}.tar"))
    assert str(info.value) == f"{tmp_path / 'part-3.tar'}: No such file or directory"


def test_tar_shards_long_names_from_python_tarfile(tmp_path: Path):
    long_dir = "d" * 120
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT):
        path = write_tar(
            tmp_path / f"f{fmt}.tar",
            [(f"{long_dir}/sample.jpg", b"IMG"), (f"{long_dir}/sample.cls", b"4")],
            fmt,
        )
        source = TarShards(str(path))
        assert source._engine_source().read(0) == (b"IMG", 4, f"{path}:{long_dir}/sample.jpg")
    # Non-ASCII names need a pax header.
    path = write_tar(tmp_path / "utf8.tar", [("café/ü.png", b"P")])
    assert TarShards(str(path)).key(0) == f"{path}:café/ü.png"


def test_truncated_shard_is_a_read_error_naming_shard_and_member(tmp_path: Path):
    path = write_tar(tmp_path / "t.tar", [("a.jpg", b"A" * 100), ("b.jpg", b"B" * 3000)])
    data = path.read_bytes()
    path.write_bytes(data[: 512 * 3 + 1000])
    with pytest.raises(conveyor.ReadError) as info:
        TarShards(str(path))
    assert info.value.key == f"{path}:b.jpg"
    assert "truncated shard" in str(info.value)


def test_tar_shard_replaced_after_indexing_is_a_read_error_naming_the_member(tmp_path: Path):
    # Regression: the shard is reopened by path on every read, and one replaced
    # after indexing was read at the old offsets (new bytes, old label), silently.
    path = write_tar(tmp_path / "s.tar", [("a.jpg", b"A" * 100), ("a.cls", b"1")])
    source = TarShards(str(path))
    assert source._engine_source().read(0) == (b"A" * 100, 1, f"{path}:a.jpg")
    indexed = path.stat()

    def changed() -> str:
        with pytest.raises(conveyor.ReadError) as info:
            source._engine_source().read(0)
        assert info.value.key == f"{path}:a.jpg"
        return info.value.cause

    # Rewritten in place: same size, other bytes, another mtime.
    write_tar(path, [("a.jpg", b"B" * 100), ("a.cls", b"2")])
    os.utime(path, ns=(indexed.st_atime_ns, indexed.st_mtime_ns + 10**9))
    assert path.stat().st_size == indexed.st_size
    assert changed() == (
        "the shard changed since it was indexed (modification time changed); recreate the TarShards source"
    )
    # Renamed over by another tar of the same size and mtime.
    other = write_tar(tmp_path / "other.tar", [("a.jpg", b"C" * 100), ("a.cls", b"3")])
    os.utime(other, ns=(indexed.st_atime_ns, indexed.st_mtime_ns))
    inode = other.stat().st_ino
    os.replace(other, path)
    assert changed() == (
        f"the shard changed since it was indexed (another file: inode {inode}, was {indexed.st_ino}); "
        "recreate the TarShards source"
    )


def test_loader_over_tar_shards(color_folder: Path, tmp_path: Path):
    shards = pack_image_folder(str(color_folder), str(tmp_path / "c-%d.tar"), shard_size=20_000)
    assert len(shards) > 1
    source = TarShards(shards)
    loader = conveyor.Loader(source, [CenterCrop(32)], batch_size=8, shuffle=True, dtype="uint8")
    labels = np.concatenate([np.asarray(labels) for _, labels in loader])
    assert sorted(labels.tolist()) == sorted(ImageFolder(color_folder).labels)


# --- MNIST --------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    return (
        struct.pack(">BBBB", 0, 0, 8, array.ndim)
        + struct.pack(f">{array.ndim}I", *array.shape)
        + array.tobytes()
    )


def write_mnist(folder: Path, prefix: str, n: int, gz: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", labels)):
        data = idx_bytes(array)
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)
    return images, labels


def test_mnist_reads_torchvision_layout_and_gzip(tmp_path: Path):
    train_images, train_labels = write_mnist(tmp_path / "MNIST" / "raw", "train", 50)
    test_images, test_labels = write_mnist(tmp_path / "MNIST" / "raw", "t10k", 20, gz=True)
    train, test = MNIST(tmp_path), MNIST(tmp_path, train=False)
    assert (len(train), len(test)) == (50, 20)
    assert train.sample_shape == (28, 28)
    assert train.images_path == str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte")
    assert test.images_path.endswith("t10k-images-idx3-ubyte.gz")
    for source, images, labels in ((train, train_images, train_labels), (test, test_images, test_labels)):
        for i in (0, 7, len(source) - 1):
            data, label, key = source._engine_source().read(i)
            assert data == images[i].tobytes()
            assert label == labels[i]
            assert key == f"{source.images_path}[{i}]"
    fashion_root = tmp_path / "f"
    write_mnist(fashion_root / "FashionMNIST" / "raw", "train", 3)
    assert len(FashionMNIST(fashion_root)) == 3


def test_mnist_errors(tmp_path: Path):
    with pytest.raises(conveyor.ReadError, match="train-images-idx3-ubyte: not found"):
        MNIST(tmp_path)
    images, _ = write_mnist(tmp_path, "train", 5)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(6, np.uint8)))
    with pytest.raises(conveyor.ConfigError, match="IDX files disagree on the number of samples"):
        MNIST(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx_bytes(images)[:-1])
    with pytest.raises(conveyor.ReadError) as info:
        MNIST(tmp_path)
    assert str(info.value) == (
        f"{tmp_path / 'train-images-idx3-ubyte'}: truncated IDX file: the header says 5x28x28, "
        "the file has 3919 bytes of data"
    )


def batches(loader) -> tuple[np.ndarray, np.ndarray]:
    images, labels = zip(*[(np.asarray(x), np.asarray(y)) for x, y in loader])
    return np.concatenate(images), np.concatenate(labels)


def test_mnist_through_the_loader(tmp_path: Path):
    images, labels = write_mnist(tmp_path, "train", 37)
    source = MNIST(tmp_path)
    got, got_labels = batches(conveyor.Loader(source, [Normalize([0.1307], [0.3081])], batch_size=8))
    assert got.shape == (37, 1, 28, 28) and got.dtype == np.float32
    # torchvision's ToTensor + Normalize arithmetic in float32, bit for bit.
    expected = (images.astype(np.float32) / np.float32(255) - np.float32(0.1307)) / np.float32(0.3081)
    np.testing.assert_array_equal(got[:, 0], expected)
    np.testing.assert_array_equal(got_labels, labels)

    raw, _ = batches(conveyor.Loader(source, batch_size=10, dtype="uint8", layout="HWC"))
    assert raw.shape == (37, 28, 28, 1) and raw.dtype == np.uint8
    np.testing.assert_array_equal(raw[..., 0], images)

    # Raw pixels take the image transforms (tests/test_raw_sources.py); a
    # chain without a fixed size gives lists of tensors, as for encoded images.
    images, _ = next(iter(conveyor.Loader(source, [Resize(32)], batch_size=8, dtype="uint8")))
    assert isinstance(images, list) and [tuple(x.shape) for x in images] == [(1, 32, 32)] * 8


# --- PythonSource --------------------------------------------------------------------------


class BytesDataset:
    def __init__(self, n: int, fail_at: int = -1):
        self.n, self.fail_at = n, fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if index == self.fail_at:
            raise KeyError(f"no sample {index}")
        return bytes([index % 256] * 4), index * 10


class RawPythonSource(PythonSource):
    """Samples are 4 raw bytes (a 1×4 image) so that no decoder is involved."""

    def _sample_transform(self, transforms, **output):
        return _conveyor.RawTensorTransform(1, 4, dtype="uint8")


def test_python_source_reads():
    source = PythonSource(BytesDataset(5))
    assert len(source) == 5
    assert source._engine_source().read(3) == (b"\x03\x03\x03\x03", 30, "BytesDataset[3]")

    class Plain:
        def __len__(self):
            return 2

        def __getitem__(self, index):
            return [b"raw", bytearray(b"ba"), memoryview(b"mv")][index]

    assert PythonSource(Plain())._engine_source().read(0) == (b"raw", -1, "Plain[0]")
    assert PythonSource(Plain())._engine_source().read(1) == (b"ba", -1, "Plain[1]")
    assert PythonSource(["a", "b"])._engine_source().key(1) == "list[1]"
    expected = r"^list\[0\]: __getitem__ returned builtins.str; expected encoded image bytes"
    with pytest.raises(conveyor.ReadError, match=expected):
        PythonSource(["a"])._engine_source().read(0)
    with pytest.raises(
        conveyor.ReadError, match=r"^tuple\[0\]: the label returned by __getitem__ is not an int"
    ):
        PythonSource(((b"x", "cat"),))._engine_source().read(0)
    with pytest.raises(conveyor.ConfigError, match="needs __len__ and __getitem__"):
        PythonSource(object())
    # Regression: labels beyond int64 gave "bad label: OverflowError: int too big to convert".
    for label in (2**63, -(2**63) - 1):
        with pytest.raises(conveyor.ReadError) as info:
            PythonSource(((b"x", label),))._engine_source().read(0)
        assert (
            str(info.value)
            == f"tuple[0]: the label returned by __getitem__ ({label}) is out of the int64 range"
        )
    assert PythonSource(((b"x", np.int64(2**63 - 1)),))._engine_source().read(0)[1] == 2**63 - 1
    # Regression: a bool label was taken as 0 or 1 (Python's int), silently.
    for label in (True, np.True_):
        with pytest.raises(conveyor.ReadError) as info:
            PythonSource(((b"x", label),))._engine_source().read(0)
        assert str(info.value).startswith("tuple[0]: the label returned by __getitem__ is ")
    with pytest.raises(conveyor.ReadError) as info:
        PythonSource(((b"x", True),))._engine_source().read(0)
    assert str(info.value) == "tuple[0]: the label returned by __getitem__ is a bool (True), not an integer"


def test_python_source_exception_keeps_type_message_index_and_traceback():
    source = PythonSource(BytesDataset(5, fail_at=2))
    with pytest.raises(conveyor.ReadError) as info:
        source._engine_source().read(2)
    assert str(info.value) == "BytesDataset[2]: __getitem__(2) raised KeyError: 'no sample 2'"
    assert info.value.key == "BytesDataset[2]"
    original = info.value.__cause__
    assert isinstance(original, KeyError) and original.args == ("no sample 2",)
    assert original.__traceback__ is not None
    assert "__getitem__" in [frame.name for frame in traceback.extract_tb(original.__traceback__)]


def test_python_source_exception_through_the_loader():
    loader = conveyor.Loader(RawPythonSource(BytesDataset(40, fail_at=21)), batch_size=8, io_threads=4)
    seen = 0
    with pytest.raises(conveyor.ReadError) as info:
        for images, _ in loader:
            seen += len(images)
    assert seen == 16
    assert str(info.value) == "BytesDataset[21]: __getitem__(21) raised KeyError: 'no sample 21'"
    assert isinstance(info.value.__cause__, KeyError)


def test_python_source_through_the_loader_gives_exact_batches():
    images, labels = batches(
        conveyor.Loader(RawPythonSource(BytesDataset(50)), batch_size=16, shuffle=True, seed=0)
    )
    order = np.asarray(_conveyor.random_permutation(50, 0, 0))
    np.testing.assert_array_equal(labels, order * 10)
    np.testing.assert_array_equal(images[:, 0, 0, 0], order % 256)


class ConcurrentDataset:
    """The first ``together`` calls of __getitem__ wait for each other at a
    barrier: they can only all get through if they run at the same time."""

    def __init__(self, together: int) -> None:
        self.barrier = threading.Barrier(together)
        self.together = together
        self.calls = 0
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 640

    def __getitem__(self, index: int):
        with self.lock:
            self.calls += 1
            first = self.calls <= self.together
        if first:
            # Raises BrokenBarrierError (a ReadError for the loader) if the
            # calls were serialized: the first caller would wait alone.
            self.barrier.wait(timeout=60)
        return bytes(4), index


def test_python_source_calls_run_concurrently():
    # No wall-clock bound: 16 calls that only return together prove that 16
    # __getitem__ calls were in flight at once, on any machine load.
    dataset = ConcurrentDataset(16)
    loader = conveyor.Loader(RawPythonSource(dataset), batch_size=64, io_threads=32, prefetch=4)
    _, labels = batches(loader)
    np.testing.assert_array_equal(labels, np.arange(640))
    assert not dataset.barrier.broken


def test_python_source_reference_cycle_is_collected():
    class Cyclic(BytesDataset):
        pass

    dataset = Cyclic(3)
    dataset.source = PythonSource(dataset)  # dataset -> source -> engine source -> dataset
    ref = weakref.ref(dataset)
    del dataset
    gc.collect()
    assert ref() is None


# --- CocoDetection ----------------------------------------------------------------------------


def test_coco_detection(tmp_path: Path):
    touch(tmp_path / "images" / "a.jpg", b"A")
    touch(tmp_path / "images" / "b.jpg", b"B")
    annotations = {
        "images": [
            {"id": 20, "file_name": "b.jpg", "width": 64, "height": 48},
            {"id": 3, "file_name": "a.jpg", "width": 32, "height": 16},
        ],
        "annotations": [
            {"id": 1, "image_id": 20, "category_id": 5, "bbox": [1, 2, 3, 4], "area": 12, "iscrowd": 0},
            {"id": 2, "image_id": 20, "category_id": 6, "bbox": [0.5, 0, 10, 10], "area": 100, "iscrowd": 1},
        ],
        "categories": [{"id": 5, "name": "cat"}, {"id": 6, "name": "dog"}],
    }
    (tmp_path / "instances.json").write_text(json.dumps(annotations))
    coco = CocoDetection(tmp_path / "images", tmp_path / "instances.json")
    assert coco.ids == [3, 20]
    assert coco.categories == {5: "cat", 6: "dog"}
    assert coco._engine_source().read(1) == (b"B", 1, str(tmp_path / "images" / "b.jpg"))  # label = index
    assert coco.targets(0)["boxes"] == []
    assert coco.targets(1) == {
        "image_id": 20,
        "width": 64,
        "height": 48,
        "boxes": [(1.0, 2.0, 3.0, 4.0), (0.5, 0.0, 10.0, 10.0)],
        "category_ids": [5, 6],
        "annotation_ids": [1, 2],
        "iscrowd": [False, True],
        "area": [12.0, 100.0],
    }
    annotations["annotations"][1]["bbox"] = [1, 2]
    (tmp_path / "bad.json").write_text(json.dumps(annotations))
    with pytest.raises(conveyor.ReadError) as info:
        CocoDetection(tmp_path / "images", tmp_path / "bad.json")
    assert str(info.value) == (
        f"{tmp_path / 'bad.json'}: not a COCO instances file: annotations[1].bbox: expected 4 numbers"
    )


def test_tar_shards_shuffle_buffer_streams_shard_by_shard(tmp_path: Path):
    import io

    from PIL import Image

    jpeg = io.BytesIO()
    Image.new("RGB", (8, 8), (90, 120, 150)).save(jpeg, format="JPEG")
    for shard in range(6):
        members = []
        for k in range(10):
            index = shard * 10 + k
            members += [(f"s{index:03d}.jpg", jpeg.getvalue()), (f"s{index:03d}.cls", b"%d" % index)]
        write_tar(tmp_path / f"shard-{shard}.tar", members)

    def order(epoch: int, threads: int) -> list[int]:
        source = TarShards(str(tmp_path / "shard-{0..5}.tar"), shuffle_buffer=4)
        loader = conveyor.Loader(
            source,
            [conveyor.transforms.Resize((8, 8))],
            batch_size=7,
            shuffle=True,
            dtype="uint8",
            threads=threads,
        )
        loader.set_epoch(epoch)
        return [int(label) for _, labels in loader for label in labels]

    first = order(0, threads=1)
    assert sorted(first) == list(range(60))
    assert first == order(0, threads=3)
    assert first != order(1, threads=1)
    # Reads never run more than the buffer ahead of what is emitted: by the
    # k-th sample out, at most sample k + 4 of the shard stream was read, so
    # at most (k + 4) // 10 + 1 shards were opened.
    for k in range(60):
        assert len({index // 10 for index in first[: k + 1]}) <= (k + 4) // 10 + 1
    assert first[:10] != sorted(first[:10])  # Shuffled within the shards, too.


# --- arguments and numbers that were not checked ---------------------------------------


def test_file_list_labels_must_be_int64_integers(tmp_path: Path):
    paths = [touch(tmp_path / f"{i}.jpg", b"x") for i in range(3)]
    # numpy integers are integers.
    files = FileList(paths, [np.int64(4), np.uint8(7), 2**63 - 1])
    assert files.labels == [4, 7, 2**63 - 1]
    assert files._engine_source().read(1)[1] == 7
    # Regression: [1.7] was truncated to 1 and ["3"] parsed as 3; 2**63 a raw nanobind TypeError.
    for labels, message in [
        ([0, 1.7, 2], "FileList: labels[1] must be an int, got float 1.7"),
        ([0, 1, "3"], "FileList: labels[2] must be an int, got str '3'"),
        ([np.float32(1), 1, 2], f"FileList: labels[0] must be an int, got float32 {np.float32(1)!r}"),
        ([True, 1, 2], "FileList: labels[0] must be an int, got bool True"),
        ([0, 2**63, 2], "FileList: labels[1] must be <= 9223372036854775807, got 9223372036854775808"),
        (
            [0, 1, -(2**63) - 1],
            "FileList: labels[2] must be >= -9223372036854775808, got -9223372036854775809",
        ),
    ]:
        with pytest.raises(conveyor.ConfigError) as info:
            FileList(paths, labels)
        assert str(info.value) == message


@pytest.mark.parametrize("single", ["one/path.jpg", b"one/path.jpg", Path("one/path.jpg")])
def test_file_list_of_a_single_path_is_a_config_error(single: object):
    # Regression: a str was taken as a list of 12 one-character paths.
    with pytest.raises(conveyor.ConfigError) as info:
        FileList(single)  # type: ignore[arg-type]
    kind = type(single).__name__
    assert (
        str(info.value)
        == f"FileList: paths must be a list of paths, got a single {kind} (one/path.jpg); pass [path]"
    )
    with pytest.raises(
        conveyor.ConfigError, match=r"^FileList: paths\[1\] must be a str, bytes or os.PathLike, got int$"
    ):
        FileList(["a.jpg", 3])  # type: ignore[list-item]


def test_file_list_boxes_must_be_finite(tmp_path: Path):
    paths = [touch(tmp_path / f"{i}.jpg", b"x") for i in range(2)]
    good = FileList(paths, boxes=[[(1, 2, 3, 4, 5)], [(np.float32(1.5), 0, 2, 2, np.int64(1))]])
    assert good.has_boxes
    # Regression: NaN and infinite coordinates were accepted.
    for box, message in [
        (
            (1.0, float("nan"), 3.0, 4.0, 1),
            "FileList: boxes[1][1]: coordinates must be finite, got (1.0, nan, 3.0, 4.0, 1)",
        ),
        (
            (1.0, 2.0, float("inf"), 4.0, 1),
            "FileList: boxes[1][1]: coordinates must be finite, got (1.0, 2.0, inf, 4.0, 1)",
        ),
        (
            (1.0, 2.0, "3", 4.0, 1),
            "FileList: boxes[1][1]: coordinates must be numbers, got (1.0, 2.0, '3', 4.0, 1)",
        ),
        ((1.0, 2.0, 3.0, 4.0, 1.5), "FileList: boxes[1][1] category must be an int, got float 1.5"),
        (
            (1.0, 2.0, 3.0, 4.0),
            "FileList: boxes[1][1] must be (x, y, width, height, category), got (1.0, 2.0, 3.0, 4.0)",
        ),
    ]:
        with pytest.raises(conveyor.ConfigError) as info:
            FileList(paths, boxes=[[], [(0, 0, 1, 1, 0), box]])
        assert str(info.value) == message


def test_tar_shards_shuffle_buffer_is_checked(tmp_path: Path):
    path = write_tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("b.jpg", b"B")])
    # Regression: numpy integers were refused.
    assert TarShards(str(path), shuffle_buffer=np.int64(2)).shuffle_buffer == 2
    assert type(TarShards(str(path), shuffle_buffer=np.int32(1)).shuffle_buffer) is int
    for bad, shown in [(True, "bool True"), (1.0, "float 1.0"), ("4", "str '4'")]:
        with pytest.raises(conveyor.ConfigError) as info:
            TarShards(str(path), shuffle_buffer=bad)
        assert (
            str(info.value) == f"TarShards: shuffle_buffer (None or an int >= 1) must be an int, got {shown}"
        )


# --- brace expansion: the braceexpand package, as webdataset ------------------------------


@pytest.mark.parametrize(
    "pattern",
    ["s-{1..010}.tar", "{a,b{1,2}}/x.tar", "s-{a..c}.tar", "s-{000..003}-{x,y}.tar", "s{10..8}.tar",
     "plain.tar", "s-{0..6..3}.tar", "a\\{b\\}.tar", "{x}.tar"],
)  # fmt: skip
def test_expand_shards_agrees_with_braceexpand(pattern: str):
    braceexpand = pytest.importorskip("braceexpand")
    # Regression: the old _expand_braces gave 1..10 without padding for {1..010},
    # split nested braces wrongly and kept {a..c} literally.
    assert expand_shards(pattern) == list(braceexpand.braceexpand(pattern))


def test_expand_shards_unbalanced_braces_is_a_config_error():
    with pytest.raises(conveyor.ConfigError, match=r"^TarShards: s-\{0..2\.tar: Unbalanced braces"):
        expand_shards("s-{0..2.tar")


def test_expand_shards_old_disagreements():
    assert expand_shards("s-{1..010}.tar")[:2] == ["s-001.tar", "s-002.tar"]
    assert expand_shards("{a,b{1,2}}.tar") == ["a.tar", "b1.tar", "b2.tar"]
    assert expand_shards("s-{a..c}.tar") == ["s-a.tar", "s-b.tar", "s-c.tar"]


def test_globs_are_expanded_after_braces(tmp_path: Path):
    for name in ["a-0.tar", "a-1.tar", "b-0.tar", "c-0.tar"]:
        touch(tmp_path / name)
    assert expand_shards(str(tmp_path / "{a,c}-*.tar")) == [
        str(tmp_path / n) for n in ["a-0.tar", "a-1.tar", "c-0.tar"]
    ]


# --- one list of image formats ---------------------------------------------------------


def test_image_extensions_are_the_decoders_formats(tmp_path: Path):
    from PIL import Image

    from conveyor import pack

    assert (
        IMG_EXTENSIONS
        == tuple("." + e for e in _conveyor.IMAGE_EXTENSIONS)
        == (".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp", ".ppm", ".pgm")
    )
    # The same set as torchvision's ImageFolder, so that both list the same files.
    assert set(IMG_EXTENSIONS) == {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}
    assert not hasattr(pack, "PACK_EXTENSIONS")  # One name for the list: IMG_EXTENSIONS.
    # Every listed extension decodes (a listed format is never one the decoder refuses).
    formats = {
        ".jpg": "JPEG",
        ".jpeg": "JPEG",
        ".png": "PNG",
        ".webp": "WEBP",
        ".tif": "TIFF",
        ".tiff": "TIFF",
        ".bmp": "BMP",
        ".ppm": "PPM",
        ".pgm": "PPM",  # PIL writes an RGB image as P6 whatever the name: decoded by content.
    }
    array = np.full((6, 5, 3), (200, 30, 90), dtype=np.uint8)
    for i, ext in enumerate(IMG_EXTENSIONS):
        Image.fromarray(array).save(
            touch(tmp_path / "c" / f"{i}{ext.upper() if i % 2 else ext}"),
            formats[ext],
            quality=100,
            lossless=True,
        )
    folder = ImageFolder(tmp_path)
    assert len(folder) == len(IMG_EXTENSIONS)
    images, _ = next(
        iter(conveyor.Loader(folder, [Resize((6, 5))], batch_size=len(folder), dtype="uint8", layout="HWC"))
    )
    assert np.abs(np.asarray(images).astype(int) - array).max() <= 3
    # The same files, packed, are tar members TarShards takes as images.
    shards = pack_image_folder(str(tmp_path), str(tmp_path / "out" / "s-%d.tar"))
    source = TarShards(shards)
    assert [source.key(i).rsplit(".", 1)[1] for i in range(len(source))] == [e[1:] for e in IMG_EXTENSIONS]


def test_image_folder_refuses_extensions_the_decoders_do_not_read(tmp_path: Path):
    touch(tmp_path / "root" / "a" / "1.jpg")
    touch(tmp_path / "root" / "b" / "2.gif")
    # Like torchvision's ImageFolder, .gif is not listed; explicit extensions take only those.
    assert ImageFolder(tmp_path / "root", allow_empty=True).paths == [str(tmp_path / "root" / "a" / "1.jpg")]
    assert ImageFolder(tmp_path / "root", extensions=[".JPG"], allow_empty=True).paths == [
        str(tmp_path / "root" / "a" / "1.jpg")
    ]
    with pytest.raises(conveyor.ConfigError) as info:
        ImageFolder(tmp_path / "root", extensions=[".jpg", ".txt"])
    assert str(info.value) == (
        "ImageFolder: extensions .txt are not formats the decoders read "
        "(only .jpg, .jpeg, .png, .webp, .tif, .tiff, .bmp, .ppm, .pgm)"
    )


def test_file_list_from_csv_class_names_tsv_and_bom(tmp_path: Path):
    touch(tmp_path / "imgs" / "a.jpg", b"A")
    csv_path = tmp_path / "list.tsv"
    # A UTF-8 BOM (Excel's "CSV UTF-8"), tabs, class names: mapped in sorted order.
    csv_path.write_bytes("\ufeffpath\tlabel\nimgs/a.jpg\tdog\nimgs/a.jpg\tcat\nimgs/a.jpg\tdog\n".encode())
    files = FileList.from_csv(csv_path)
    assert files.paths == [str(tmp_path / "imgs" / "a.jpg")] * 3
    assert files.labels == [1, 0, 1]
    assert files.classes == ["cat", "dog"] and files.class_to_idx == {"cat": 0, "dog": 1}
    # Given classes decide the indices; other column names; a sniffed semicolon.
    csv_path.write_text("file;species\nimgs/a.jpg;dog\nimgs/a.jpg;cat\n")
    files = FileList.from_csv(
        csv_path, path_column="file", label_column="species", classes=["dog", "cat", "emu"]
    )
    assert files.labels == [0, 1] and files.classes == ["dog", "cat", "emu"]
    # Integer labels stay as they are; no class names then.
    csv_path.write_text("path,label\nimgs/a.jpg,7\nimgs/a.jpg,2\n")
    files = FileList.from_csv(csv_path)
    assert files.labels == [7, 2] and files.classes is None and files.class_to_idx is None
    # An explicit delimiter wins over the sniffed one.
    csv_path.write_text("path|label\nimgs/a.jpg|x,y\n")
    assert FileList.from_csv(csv_path, delimiter="|").classes == ["x,y"]


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        (
            "path,label\na.jpg,dog\nb.jpg,cow\n",
            {"classes": ["dog", "cat"]},
            ":3: unknown class 'cow' (classes: 'dog', 'cat')",
        ),
        ("path,label\na.jpg,dog\nb.jpg, \n", {}, ":3: empty label"),
        (
            "path,cls\na.jpg,dog\n",
            {"label_column": "species"},
            ":1: the header row ['path', 'cls'] has no 'species' column",
        ),
        ("\ufeff", {}, ": empty file; expected a header row with the columns path,label"),
    ],
)
def test_file_list_from_csv_label_errors(tmp_path: Path, text: str, kwargs: dict, message: str):
    csv_path = tmp_path / "list.csv"
    csv_path.write_text(text, encoding="utf-8")
    with pytest.raises(conveyor.ConfigError) as info:
        FileList.from_csv(csv_path, **kwargs)
    assert str(info.value) == f"{csv_path}{message}"


def test_pack_brace_pattern_reads_back_with_the_same_pattern(small_folder: Path, tmp_path: Path):
    """`conveyor pack ... out/shard-{000..002}.tar` crashed with "ValueError: Empty
    attribute in format string"; it now divides the samples over those shards."""
    pattern = str(tmp_path / "out" / "shard-{000..002}.tar")
    assert cli_main(["pack", str(small_folder), pattern]) == 0
    source = TarShards(pattern)
    assert source.shards == [str(tmp_path / "out" / f"shard-{i:03d}.tar") for i in range(3)]
    assert [len(TarShards(shard)) for shard in source.shards] == [3, 2, 2]  # Sample i in shard i * 3 // 7.
    folder = ImageFolder(small_folder)
    assert [source._engine_source().read(i)[1] for i in range(7)] == folder.labels


def test_pack_shuffle_and_csv_and_file_list(small_folder: Path, tmp_path: Path):
    folder = ImageFolder(small_folder)
    by_path = dict(folder.samples)

    def packed_order(out: Path) -> list[str]:
        source = TarShards(str(out))
        return [str(small_folder / json.loads(source.field(i, "json"))["path"]) for i in range(len(source))]

    assert cli_main(["pack", str(small_folder), str(tmp_path / "a-%d.tar"), "--shuffle", "--seed", "3"]) == 0
    assert cli_main(["pack", str(small_folder), str(tmp_path / "b-%d.tar"), "--shuffle", "--seed", "3"]) == 0
    assert cli_main(["pack", str(small_folder), str(tmp_path / "c-%d.tar"), "--shuffle", "--seed", "4"]) == 0
    order = packed_order(tmp_path / "a-0.tar")
    assert sorted(order) == sorted(folder.paths) and order != folder.paths  # Not sorted by class.
    assert (tmp_path / "a-0.tar").read_bytes() == (tmp_path / "b-0.tar").read_bytes()
    assert packed_order(tmp_path / "c-0.tar") != order
    source = TarShards(str(tmp_path / "a-0.tar"))
    assert [source._engine_source().read(i)[1] for i in range(7)] == [by_path[p] for p in order]

    # A CSV with class names: indices in sorted order, the name in the json.
    csv_path = small_folder / "list.csv"
    csv_path.write_text("path,label\ncat/1.jpg,zebra\ndog/4.webp,ant\n")
    (shard,) = pack_image_folder(str(csv_path), str(tmp_path / "csv-%d.tar"))
    source = TarShards(shard)
    assert [source._engine_source().read(i)[1] for i in range(2)] == [1, 0]
    assert json.loads(source.field(0, "json")) == {"class": "zebra", "path": "cat/1.jpg"}
    # A file list: a path per line, an optional integer label.
    list_path = small_folder / "files.txt"
    list_path.write_text("emu/5.jpg 4\ndog/a/3.png\n")
    (shard,) = pack_image_folder(str(list_path), str(tmp_path / "txt-%d.tar"))
    source = TarShards(shard)
    assert [source._engine_source().read(i)[1] for i in range(2)] == [4, -1]
    assert source.fields(1) == ["png", "json"]
    assert json.loads(source.field(1, "json")) == {"path": "dog/a/3.png"}


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("x-{name}.tar", "is not a shard pattern (KeyError: 'name')"),
        ("x-%d-%d.tar", "is not a shard pattern (TypeError: not enough arguments for format string)"),
        ("x-{000..009.tar", "Unbalanced braces"),
        ("x-{a,a}.tar", "names a shard more than once"),
        ("{x-a,./x-a}.tar", "/x-a.tar' and '"),  # Spelled twice, one file: "... are one file".
        ("plain.tar", "needs a shard number field"),
        ("x-{0000..0099}.tar", "the pattern lists 100 shards for 7 samples"),
    ],
)
def test_pack_bad_patterns(small_folder: Path, tmp_path: Path, capsys, pattern: str, message: str):
    assert cli_main(["pack", str(small_folder), str(tmp_path / pattern)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("conveyor pack: ") and message in err, err
    assert not list(tmp_path.glob("x-*"))


def test_pack_and_index_name_a_file_they_cannot_write_in_one_line(small_folder: Path, tmp_path: Path, capsys):
    # A folder where the index goes: the OSError is said in one line, not a traceback.
    (tmp_path / "x-0.tar.index.json").mkdir()
    assert cli_main(["pack", str(small_folder), str(tmp_path / "x-%d.tar")]) == 1
    assert capsys.readouterr().err == f"conveyor pack: '{tmp_path}/x-0.tar.index.json': Is a directory\n"
    assert cli_main(["pack", "--no-index", str(small_folder), str(tmp_path / "x-%d.tar")]) == 1
    assert capsys.readouterr().err == f"conveyor pack: '{tmp_path}/x-0.tar.index.json': Is a directory\n"
    (tmp_path / "x-0.tar.index.json").rmdir()
    assert cli_main(["pack", "--no-index", str(small_folder), str(tmp_path / "x-%d.tar")]) == 0
    (tmp_path / "x-0.tar.index.json").mkdir()
    assert cli_main(["index", str(tmp_path / "x-0.tar")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("conveyor index: '") and err.endswith(
        f" -> '{tmp_path}/x-0.tar.index.json': Is a directory\n"
    )
    assert err.count("\n") == 1
    # A shard name near NAME_MAX: the temporary file's name stays short.
    long = tmp_path / ("L" * (255 - len(".tar.index.json")) + ".tar")
    os.replace(tmp_path / "x-0.tar", long)
    assert cli_main(["index", str(long)]) == 0
    assert Path(str(long) + ".index.json").is_file()
    assert not list(tmp_path.glob(".*.tmp"))  # No temporary file is left.


# --- paths with a NUL byte, CSV labels that are not plain integers ------------------------


def test_paths_with_a_nul_byte_are_config_errors_naming_the_entry(tmp_path: Path):
    from PIL import Image

    Image.new("RGB", (3, 3)).save(tmp_path / "c.png")
    bad = f"{tmp_path / 'c.png'}\x00junk"
    shown = f"{tmp_path / 'c.png'}\\x00junk"
    at = len(str(tmp_path / "c.png"))

    def message(call) -> str:
        with pytest.raises(conveyor.ConfigError) as info:
            call()
        return str(info.value)

    # Regression: the C string ended at the NUL, so c.png was opened instead.
    assert message(lambda: FileList([tmp_path / "c.png", bad])) == (
        f"FileList: paths[1] contains a NUL byte at position {at} ('{shown}'); file names cannot hold one"
    )
    assert message(lambda: FileList([os.fsencode(bad)])).startswith("FileList: paths[0] contains a NUL byte")
    csv_path = tmp_path / "list.csv"
    csv_path.write_text("path,label\nc.png,1\nc.png\x00junk,2\n")
    assert message(lambda: FileList.from_csv(csv_path)) == (
        f"{csv_path}:3: path contains a NUL byte at position 5 ('c.png\\x00junk'); file names cannot hold one"
    )
    assert message(lambda: TarShards([str(tmp_path / "a.tar"), bad])) == (
        f"TarShards: shards[1] contains a NUL byte at position {at} ('{shown}'); file names cannot hold one"
    )
    assert message(lambda: conveyor.sources.ArraySource(bad)) == (
        f"ArraySource: images contains a NUL byte at position {at} ('{shown}'); file names cannot hold one"
    )
    assert message(lambda: conveyor.sources.ArraySource(np.zeros((1, 2, 2), np.uint8), bad)).startswith(
        "ArraySource: labels contains a NUL byte"
    )
    for source in (MNIST, conveyor.sources.CIFAR10, ImageFolder):
        assert message(lambda source=source: source(f"{tmp_path}\x00x")) == (
            f"{source.__name__}: root contains a NUL byte at position {len(str(tmp_path))} "
            f"('{tmp_path}\\x00x'); file names cannot hold one"
        )
    annotations = {
        "images": [{"id": 1, "file_name": "c.png\u0000junk", "width": 3, "height": 3}],
        "annotations": [],
        "categories": [],
    }
    (tmp_path / "instances.json").write_text(json.dumps(annotations))
    assert message(lambda: CocoDetection(tmp_path, tmp_path / "instances.json")) == (
        f"CocoDetection: paths[0] contains a NUL byte at position {at} ('{shown}'); "
        "file names cannot hold one"
    )
    assert message(lambda: CocoDetection(tmp_path, f"{tmp_path}/instances.json\x00")).startswith(
        "CocoDetection: annotation_json contains a NUL byte"
    )
    # The engine refuses such a path wherever it opens one (C++ callers included).
    with pytest.raises(conveyor.ConfigError, match=r"^path contains a NUL byte at position"):
        _conveyor.read_file(os.fsencode(bad))


@pytest.mark.parametrize("label", ["1_0", "\uff13", "+3", "٣", " 1 0"])
def test_file_list_from_csv_labels_are_ascii_digits_or_class_names(tmp_path: Path, label: str):
    # Regression: int() took "1_0" as 10 and the fullwidth "３" as 3.
    csv_path = tmp_path / "list.csv"
    csv_path.write_text(f"path,label\na.jpg,2\nb.jpg,{label}\n", encoding="utf-8")
    if label == " 1 0":  # Not a number to int() either: a class name, as "dog" is.
        assert FileList.from_csv(csv_path).classes == ["1 0", "2"]
        return
    with pytest.raises(conveyor.ConfigError) as info:
        FileList.from_csv(csv_path)
    assert str(info.value) == (
        f"{csv_path}:3: label {label!r} is neither a plain integer (ASCII digits, an optional '-') nor "
        "a class name: write it in ASCII digits, or pass classes= to take it as a name"
    )
    # Given classes, it is a name like any other.
    assert FileList.from_csv(csv_path, classes=["2", label]).labels == [0, 1]
