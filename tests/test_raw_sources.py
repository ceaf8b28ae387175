"""Sources of raw pixels and arrays: MNIST through the image transforms,
ArraySource (numpy arrays, .npy files), CIFAR10/CIFAR100 from the official
python batches (generated here with pickle; nothing is downloaded), and
``source[i]`` on every source."""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import conveyor
import conveyor.transforms as T
from conftest import run_python
from conveyor.sources import (
    CIFAR10,
    CIFAR100,
    MNIST,
    ArraySource,
    CocoDetection,
    FileList,
    PythonSource,
    TarShards,
)
from test_sources import write_mnist


def batches(loader) -> tuple[np.ndarray, np.ndarray]:
    images, labels = zip(*[(np.asarray(x), np.asarray(y)) for x, y in loader])
    return np.concatenate(images), np.concatenate(labels)


def normalized(pixels: np.ndarray, mean: float, std: float) -> np.ndarray:
    # torchvision's ToTensor + Normalize arithmetic in float32.
    return (pixels.astype(np.float32) / np.float32(255) - np.float32(mean)) / np.float32(std)


# --- MNIST through the image transforms ---------------------------------------------------


def test_mnist_takes_image_transforms_exact_pixels(tmp_path: Path):
    images, labels = write_mnist(tmp_path, "train", 13)
    source = MNIST(tmp_path)
    assert source.raw_shape == (28, 28, 1)
    got, got_labels = batches(
        conveyor.Loader(source, [T.CenterCrop(24), T.Normalize([0.1307], [0.3081])], batch_size=5)
    )
    assert got.shape == (13, 1, 24, 24) and got.dtype == np.float32
    np.testing.assert_array_equal(got[:, 0], normalized(images[:, 2:26, 2:26], 0.1307, 0.3081))
    np.testing.assert_array_equal(got_labels, labels)
    # A flip (p=1), uint8 HWC: the pixels mirrored, nothing else.
    flipped, _ = batches(
        conveyor.Loader(source, [T.RandomHorizontalFlip(1.0)], batch_size=13, dtype="uint8", layout="HWC")
    )
    np.testing.assert_array_equal(flipped[..., 0], images[:, :, ::-1])
    # float16 (refused before: raw sources took uint8 or float32 only).
    half, _ = batches(conveyor.Loader(source, [T.Normalize([0.5], [0.5])], batch_size=13, dtype="float16"))
    np.testing.assert_array_equal(half[:, 0], normalized(images, 0.5, 0.5).astype(np.float16))


def test_mnist_resize_matches_an_encoded_image(tmp_path: Path):
    """A resize of raw pixels equals the same resize of those pixels as a PNG."""
    images, _ = write_mnist(tmp_path, "train", 3)
    got, _ = batches(conveyor.Loader(MNIST(tmp_path), [T.Resize((14, 20))], batch_size=3, dtype="uint8"))
    for i in range(3):
        png = io.BytesIO()
        Image.fromarray(images[i]).save(png, "PNG")
        pipeline = conveyor.transforms.compile_pipeline([T.Resize((14, 20))], dtype="uint8", channels=1)
        np.testing.assert_array_equal(got[i], pipeline.apply(png.getvalue()))


# --- ArraySource ----------------------------------------------------------------------------


def test_array_source_images_through_transforms():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (6, 10, 9, 3), dtype=np.uint8)
    labels = np.arange(6) * 3
    source = ArraySource(images, labels)
    assert len(source) == 6 and source.raw_shape == (10, 9, 3)
    got, got_labels = batches(
        conveyor.Loader(
            source, [T.CenterCrop(8), T.Normalize([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])], batch_size=4
        )
    )
    expected = normalized(images[:, 1:9, 0:8], 0, 1)  # top round(2/2)=1, left round(1/2)=0
    expected = (expected - np.float32([0.5, 0.4, 0.3])) / np.float32(0.2)
    np.testing.assert_array_equal(got, expected.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(got_labels, labels)
    # No transforms: the images as they are (the chain starts from 10×9).
    raw, _ = batches(conveyor.Loader(source, batch_size=6, dtype="uint8", layout="HWC"))
    np.testing.assert_array_equal(raw, images)
    # N×H×W is grayscale; a non-contiguous array is copied once, then read.
    gray = np.ascontiguousarray(images[..., 0])[:, ::-1]
    gray_source = ArraySource(gray)
    assert gray_source.raw_shape == (10, 9, 1)
    out, out_labels = batches(conveyor.Loader(gray_source, batch_size=6, dtype="uint8", layout="HWC"))
    np.testing.assert_array_equal(out[..., 0], gray)
    np.testing.assert_array_equal(out_labels, [-1] * 6)


def test_array_source_tensors_are_batched_as_they_are(tmp_path: Path):
    features = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3) / 7
    source = ArraySource(features, [1, 0, 1, 0, 1])
    assert source.raw_shape is None
    got, labels = batches(conveyor.Loader(source, batch_size=2))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, features)
    np.testing.assert_array_equal(labels, [1, 0, 1, 0, 1])
    value, label = source[-2]
    np.testing.assert_array_equal(value, features[3])
    assert label == 0
    with pytest.raises(conveyor.ConfigError) as info:
        conveyor.Loader(source, [T.Normalize([0.5], [0.5])])
    assert str(info.value) == (
        "ArraySource: samples are float32 tensors of shape (2, 3), not images (uint8 N×H×W×C, C = 1 or 3): "
        "image transforms do not apply; pass transforms=None"
    )
    ints = np.arange(8, dtype=np.int64).reshape(4, 2)
    np.save(tmp_path / "ints.npy", ints)
    got, _ = batches(conveyor.Loader(ArraySource(tmp_path / "ints.npy"), batch_size=3))
    np.testing.assert_array_equal(got, ints)


def test_array_source_errors(tmp_path: Path):
    with pytest.raises(conveyor.ConfigError, match=r"images of dtype float64 are not supported"):
        ArraySource(np.zeros((2, 3)))
    with pytest.raises(conveyor.ConfigError, match=r"holds no sample"):
        ArraySource(np.zeros((0, 4, 4), np.uint8))
    with pytest.raises(conveyor.ConfigError, match=r"labels has 3 entries for 2 images"):
        ArraySource(np.zeros((2, 4, 4), np.uint8), [0, 1, 2])
    with pytest.raises(conveyor.ConfigError, match=r"labels\[0\] must be an int, got float 0.5"):
        ArraySource(np.zeros((2, 4, 4), np.uint8), [0.5, 1.0])
    with pytest.raises(conveyor.ConfigError, match=r"labels must be a 1-D integer array, got float64"):
        ArraySource(np.zeros((2, 4, 4), np.uint8), np.array([0.5, 1.0]))
    missing = tmp_path / "missing.npy"
    with pytest.raises(conveyor.ReadError) as info:
        ArraySource(missing)
    assert info.value.key == str(missing) and str(info.value) == f"{missing}: not found"
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(conveyor.ReadError, match=r"bad.npy: not a .npy file"):
        ArraySource(tmp_path / "bad.npy")


def test_npy_file_truncated_after_opening_names_the_sample(tmp_path: Path):
    path = tmp_path / "images.npy"
    images = np.arange(4 * 4 * 4, dtype=np.uint8).reshape(4, 4, 4)
    np.save(path, images)
    source = ArraySource(path)
    np.testing.assert_array_equal(source[3][0][..., 0], images[3])
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1)
    with pytest.raises(conveyor.ReadError) as info:
        source[3]
    assert info.value.key == f"{path}[3]"
    loader = conveyor.Loader(source, batch_size=4, on_error="skip", dtype="uint8")
    got, _ = batches(loader)
    assert len(got) == 3 and [key for key, _ in loader.skipped()] == [f"{path}[3]"]


RSS_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    import conveyor
    from conveyor.sources import ArraySource

    def peak_mib():
        unit = 1 << 20 if sys.platform == "darwin" else 1 << 10  # ru_maxrss: bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / unit

    source = ArraySource(sys.argv[1])
    loader = conveyor.Loader(source, batch_size=256, dtype="uint8", threads=2, prefetch=2)
    before = peak_mib()
    count = 0
    for images, _ in loader:
        count += len(images)
    print(count, peak_mib() - before)
    """
)


def test_npy_memmap_iterates_with_flat_rss(tmp_path: Path):
    """A .npy file of 384 MiB (sparse: written in no time) is read through with
    the peak resident set growing by less than 96 MiB, the test's budget: the
    file is never loaded or mapped as a whole."""
    count, shape = 131072, (32, 32, 3)
    path = tmp_path / "big.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "|u1", "fortran_order": False, "shape": (count, *shape)}
        )
        f.truncate(f.tell() + count * 32 * 32 * 3)
    assert path.stat().st_size > 384 << 20
    result = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(path)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    seen, growth_mib = result.stdout.split()
    assert int(seen) == count
    assert float(growth_mib) < 96, f"peak RSS grew by {growth_mib} MiB"


# --- CIFAR ----------------------------------------------------------------------------------


def cifar_batch(rng: np.random.Generator, n: int, classes: int, labels_key: str = "labels", **extra) -> dict:
    return {
        "batch_label": "generated",
        labels_key: rng.integers(0, classes, n).tolist(),
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "filenames": [f"img_{i}.png" for i in range(n)],
        **extra,
    }


def write_cifar10(
    root: Path, per_batch: int = 3, tarball: bool = False, protocol: int = 2
) -> dict[str, dict]:
    """The official layout: cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}."""
    rng = np.random.default_rng(10)
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    files = {f"data_batch_{i}": cifar_batch(rng, per_batch, 10) for i in range(1, 6)}
    files["test_batch"] = cifar_batch(rng, per_batch + 1, 10)
    files["batches.meta"] = {"label_names": names, "num_cases_per_batch": per_batch, "num_vis": 3072}
    write_tree(root, "cifar-10-batches-py", "cifar-10-python.tar.gz", files, tarball, protocol)
    return files


def write_tree(root: Path, folder: str, archive: str, files: dict, tarball: bool, protocol: int = 2) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if tarball:
        with tarfile.open(root / archive, "w:gz") as tar:
            for name, entry in files.items():
                data = pickle.dumps(entry, protocol=protocol)
                info = tarfile.TarInfo(f"{folder}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    else:
        (root / folder).mkdir()
        for name, entry in files.items():
            (root / folder / name).write_bytes(pickle.dumps(entry, protocol=protocol))


def hwc(data: np.ndarray) -> np.ndarray:
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


@pytest.mark.parametrize("tarball", [False, True])
def test_cifar10_reads_the_official_layout(tmp_path: Path, tarball: bool):
    files = write_cifar10(tmp_path, tarball=tarball)
    train, test = CIFAR10(tmp_path), CIFAR10(tmp_path, train=False)
    assert (len(train), len(test)) == (15, 4)
    assert train.classes[:3] == ["airplane", "automobile", "bird"] and train.class_to_idx["truck"] == 9
    expected = np.concatenate([hwc(files[f"data_batch_{i}"]["data"]) for i in range(1, 6)])
    labels = sum((files[f"data_batch_{i}"]["labels"] for i in range(1, 6)), [])
    np.testing.assert_array_equal(train.data, expected)
    assert train.targets == labels
    image, label = train[4]
    np.testing.assert_array_equal(image, expected[4])
    assert label == labels[4] and image.shape == (32, 32, 3)
    # The CIFAR recipe's deterministic part, exact: pixels, flips, normalization.
    got, got_labels = batches(
        conveyor.Loader(
            test,
            [T.RandomHorizontalFlip(1.0), T.Normalize([0.49, 0.48, 0.45], [0.25, 0.24, 0.26])],
            batch_size=3,
        )
    )
    want = (hwc(files["test_batch"]["data"])[:, :, ::-1].astype(np.float32) / np.float32(255)
            - np.float32([0.49, 0.48, 0.45])) / np.float32([0.25, 0.24, 0.26])  # fmt: skip
    np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(got_labels, files["test_batch"]["labels"])
    where = tmp_path / ("cifar-10-python.tar.gz" if tarball else "cifar-10-batches-py")
    assert train._engine_source().key(2) == f"{where}[2]"


def test_cifar100_fine_and_coarse(tmp_path: Path):
    rng = np.random.default_rng(100)
    fine = [f"fine{i}" for i in range(100)]
    coarse = [f"coarse{i}" for i in range(20)]
    files = {
        "train": cifar_batch(rng, 5, 100, "fine_labels", coarse_labels=rng.integers(0, 20, 5).tolist()),
        "test": cifar_batch(rng, 2, 100, "fine_labels", coarse_labels=[3, 19]),
        "meta": {"fine_label_names": fine, "coarse_label_names": coarse},
    }
    write_tree(tmp_path, "cifar-100-python", "cifar-100-python.tar.gz", files, tarball=True, protocol=4)
    train = CIFAR100(tmp_path)
    assert len(train) == 5 and train.classes == fine and train.targets == files["train"]["fine_labels"]
    test = CIFAR100(tmp_path, train=False, label="coarse")
    assert test.classes == coarse and test.targets == [3, 19]
    np.testing.assert_array_equal(test[1][0], hwc(files["test"]["data"])[1])
    with pytest.raises(conveyor.ConfigError, match="label must be 'fine' or 'coarse', got 'medium'"):
        CIFAR100(tmp_path, label="medium")


def test_cifar_errors_name_the_file(tmp_path: Path):
    with pytest.raises(conveyor.ConfigError) as info:
        CIFAR10(tmp_path)
    assert "cifar-10-batches-py" in str(info.value) and "cifar-10-python.tar.gz" in str(info.value)

    write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "data_batch_3").unlink()
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path)
    assert str(info.value) == f"{folder / 'data_batch_3'}: not found"

    (folder / "data_batch_3").write_bytes(b"\x80\x02garbage")
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path)
    assert info.value.key == str(folder / "data_batch_3")
    assert "not a CIFAR python batch (corrupt pickle" in str(info.value)

    rng = np.random.default_rng(1)
    bad = cifar_batch(rng, 2, 10)
    bad["data"] = bad["data"][:, :100]
    (folder / "data_batch_3").write_bytes(pickle.dumps(bad))
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path)
    assert (
        str(info.value)
        == f"{folder / 'data_batch_3'}: 'data' must be N×3072 uint8, got uint8 of shape (2, 100)"
    )

    # A pickle that would run code is refused, not run.
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (folder / "data_batch_3").write_bytes(pickle.dumps({"data": Evil()}))
    with pytest.raises(conveyor.ReadError, match="refusing to load builtins.print"):
        CIFAR10(tmp_path)

    tar_root = tmp_path / "t"
    write_cifar10(tar_root, tarball=True)
    with tarfile.open(tar_root / "cifar-10-python.tar.gz", "r:gz") as tar:
        members = [
            (m, tar.extractfile(m).read()) for m in tar.getmembers() if not m.name.endswith("test_batch")
        ]
    with tarfile.open(tar_root / "cifar-10-python.tar.gz", "w:gz") as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data))
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tar_root, train=False)
    archive = tar_root / "cifar-10-python.tar.gz"
    assert str(info.value) == f"{archive}:cifar-10-batches-py/test_batch: not found in the archive"


# --- source[i] ------------------------------------------------------------------------------


def png_file(path: Path, pixels: np.ndarray) -> Path:
    Image.fromarray(pixels).save(path)
    return path


def test_getitem_on_every_source(tmp_path: Path):
    rng = np.random.default_rng(3)
    pixels = [rng.integers(0, 256, (5, 6, 3), dtype=np.uint8) for _ in range(3)]
    paths = [png_file(tmp_path / f"{i}.png", p) for i, p in enumerate(pixels)]
    files = FileList(paths, [4, 5, 6])
    assert len(files) == 3
    image, label = files[-1]
    np.testing.assert_array_equal(image, pixels[2])
    assert label == 6 and image.dtype == np.uint8
    with pytest.raises(IndexError, match="FileList index 3 is out of range for 3 samples"):
        files[3]
    with pytest.raises(IndexError, match="FileList index -4 is out of range for 3 samples"):
        files[-4]
    with pytest.raises(TypeError, match="FileList indices must be integers, not str"):
        files["0"]

    # Errors name the sample.
    (tmp_path / "bad.png").write_bytes(b"not an image")
    broken = FileList([tmp_path / "bad.png", tmp_path / "gone.png"])
    with pytest.raises(conveyor.DecodeError) as info:
        broken[0]
    assert info.value.key == str(tmp_path / "bad.png")
    with pytest.raises(conveyor.ReadError) as info:
        broken[1]
    assert info.value.key == str(tmp_path / "gone.png")

    # Detection: the target as the Loader's targets="list" (untransformed).
    boxed = FileList(paths[:1], [0], boxes=[[(1.0, 2.0, 3.0, 2.0, 7), (0, 0, 1, 1, 2)]])
    image, target = boxed[0]
    np.testing.assert_array_equal(image, pixels[0])
    np.testing.assert_array_equal(target["boxes"], np.float32([[1, 2, 3, 2], [0, 0, 1, 1]]))
    np.testing.assert_array_equal(target["labels"], [7, 2])
    assert target["image_id"] == 0
    annotations = {
        "images": [{"id": 42, "file_name": "0.png", "width": 6, "height": 5}],
        "annotations": [
            {"id": 1, "image_id": 42, "category_id": 3, "bbox": [1, 1, 2, 2], "area": 4, "iscrowd": 0}
        ],
        "categories": [{"id": 3, "name": "thing"}],
    }
    (tmp_path / "instances.json").write_text(json.dumps(annotations))
    image, target = CocoDetection(tmp_path, tmp_path / "instances.json")[0]
    assert target["image_id"] == 42 and target["labels"].tolist() == [3]

    # Tar shards and Python datasets decode their bytes too.
    with tarfile.open(tmp_path / "shard.tar", "w") as tar:
        for i, path in enumerate(paths):
            for name, data in ((f"s{i}.png", path.read_bytes()), (f"s{i}.cls", str(i).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    image, label = TarShards(str(tmp_path / "shard.tar"))[1]
    np.testing.assert_array_equal(image, pixels[1])
    assert label == 1

    class Dataset:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return paths[i].read_bytes(), i + 10

    image, label = PythonSource(Dataset())[1]
    np.testing.assert_array_equal(image, pixels[1])
    assert label == 11

    write_mnist(tmp_path / "m", "train", 4)
    image, label = MNIST(tmp_path / "m")[-1]
    assert image.shape == (28, 28, 1) and isinstance(label, int)


# --- hostile CIFAR batches and archives -----------------------------------------------------

HOSTILE_CIFAR = """
    import resource, sys
    # A reader that reads without bound must fail here, not take the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import conveyor
    from conveyor.sources import CIFAR10

    try:
        CIFAR10(sys.argv[1])
        print("no error")
    except conveyor.Error as e:
        print(f"{type(e).__name__} key={e.key}")
        print(f"cause={e.cause}")
"""


def deep_tuples(levels: int) -> bytes:
    """A dict holding ``levels`` tuples nested in one another: 1 byte a level."""
    return b"\x80\x04}" + b")" + b"\x85" * levels + b"K\x01s."


def deep_memo_lists(levels: int) -> bytes:
    """``levels`` lists nested through the memo: each list is made, memoized and
    dropped, then fetched back and appended into the previous one."""
    out = [b"\x80\x02"]
    for i in range(levels):
        out.append(b"]r" + struct.pack("<I", i) + b"0")  # EMPTY_LIST, LONG_BINPUT i, POP
    for i in range(levels - 1):
        out.append(
            b"j" + struct.pack("<I", i) + b"j" + struct.pack("<I", i + 1) + b"a0"
        )  # GET i, GET i+1, APPEND, POP
    out.append(b"}X\x04\x00\x00\x00dataj" + struct.pack("<I", 0) + b"s.")
    return b"".join(out)


# tuples-300000: SIGSEGV in CPython's unpickler (plain pickle.loads too); tuples-50000: a raw RecursionError.
@pytest.mark.parametrize("name", ["tuples-300000", "tuples-50000", "tuples-33", "memo-lists-100"])
def test_cifar_pickle_nested_deeper_than_the_layout_is_a_read_error_not_a_crash(tmp_path: Path, name: str):
    write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    kind, levels = name.rsplit("-", 1)
    batch.write_bytes((deep_tuples if kind == "tuples" else deep_memo_lists)(int(levels)))
    done = run_python(HOSTILE_CIFAR, str(tmp_path))
    assert done.returncode == 0, f"child exited with {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.splitlines()[0] == f"ReadError key={batch}"
    cause = done.stdout.splitlines()[1]
    if name.startswith("memo"):
        assert cause == (
            "cause=not a CIFAR python batch (a pickled container is changed after it was put in "
            "another: not the official layout)"
        )
    else:
        assert cause == "cause=not a CIFAR python batch (the pickle nests deeper than 32 levels)"


def test_cifar_batch_that_is_not_a_regular_file_or_too_large_is_refused_by_name(tmp_path: Path):
    write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    batch.unlink()
    batch.symlink_to("/dev/zero")  # Read until MemoryError before.
    out = run_python(HOSTILE_CIFAR, str(tmp_path)).stdout.splitlines()
    assert out == [f"ReadError key={batch}", "cause=not a regular file (a character device)"]
    batch.unlink()
    with open(batch, "wb") as f:  # Sparse: 300 MB in no time.
        f.truncate(300_000_000)
    out = run_python(HOSTILE_CIFAR, str(tmp_path)).stdout.splitlines()
    assert out == [
        f"ReadError key={batch}",
        "cause=not a CIFAR python batch (300000000 bytes; the official batches are at most 204800000)",
    ]


def rewrite_archive(archive: Path, change) -> None:
    """Rewrites the tarball with ``change(name, info, data)`` deciding each
    member: None drops it, else an (info, data) pair or a list of them."""
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz") as tar:
        for info, data in members:
            result = change(info.name.split("/")[-1], info, data)
            for info, data in result if isinstance(result, list) else [result] if result else []:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
    info.type, info.linkname = kind, target
    return info, None


def test_cifar_archive_links_are_followed_within_the_archive_and_loops_are_named(tmp_path: Path):
    files = write_cifar10(tmp_path, tarball=True)
    archive = tmp_path / "cifar-10-python.tar.gz"
    key = f"{archive}:cifar-10-batches-py/test_batch"
    # A link to another batch is followed (within the archive only).
    rewrite_archive(
        archive, lambda name, info, data: link(name, "data_batch_1") if name == "test_batch" else (info, data)
    )
    np.testing.assert_array_equal(CIFAR10(tmp_path, train=False).data, hwc(files["data_batch_1"]["data"]))
    # Regression: a loop was a raw RecursionError.
    rewrite_archive(
        archive,
        lambda name, info, data: (
            [link("x", "y"), link("y", "x"), link(name, "x")] if name == "test_batch" else (info, data)
        ),
    )
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path, train=False)
    assert (info.value.key, info.value.cause) == (key, "more than 8 levels of links in the archive (a loop?)")
    rewrite_archive(archive, lambda name, info, data: None if name in ("x", "y") else (info, data))
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path, train=False)
    assert info.value.cause == "a link to 'cifar-10-batches-py/x', which is not in the archive"
    rewrite_archive(
        archive,
        lambda name, info, data: link(name, "/etc/passwd") if name == "test_batch" else (info, data),
    )
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path, train=False)
    assert info.value.cause == "a link to '/etc/passwd', which is not in the archive"
    rewrite_archive(
        archive,
        lambda name, info, data: link(name, "", tarfile.DIRTYPE) if name == "test_batch" else (info, data),
    )
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path, train=False)
    assert info.value.cause == "not a regular file in the archive (a directory)"


class _Zeros:
    """A file of ``size`` zero bytes for tarfile.addfile, never held whole."""

    def __init__(self, size: int):
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def test_cifar_archive_member_larger_than_a_batch_is_refused_before_reading(tmp_path: Path):
    write_cifar10(tmp_path, tarball=True)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:  # Zeros: a few hundred KB.
        for info, data in members:
            if info.name.endswith("test_batch"):
                info.size = 210_000_000
                tar.addfile(info, _Zeros(info.size))
            else:
                tar.addfile(info, io.BytesIO(data))
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path, train=False)
    assert info.value.key == f"{archive}:cifar-10-batches-py/test_batch"
    assert info.value.cause == (
        "not a CIFAR python batch (210000000 bytes; the official batches are at most 204800000)"
    )


@pytest.mark.parametrize(
    ("labels", "cause"),
    [
        ([1.7, 1, 1], "'labels'[0] must be an int, got float 1.7"),
        ([1, True, 1], "'labels'[1] must be an int, got bool True"),
        ([1, 1, "3"], "'labels'[2] must be an int, got str '3'"),
        ({1: 0, 2: 0, 3: 0}, "'labels' must be a list of integers, got dict"),
        ("123", "'labels' must be a list of integers, got str"),
        (np.array([1.0, 2.0, 3.0]), "'labels' must be a list of integers, got a float64 array of shape (3,)"),
        ([1, 10, 2], "'labels'[1] = 10 is not a class index (the meta file names 10 classes)"),
        ([1, -1, 2], "'labels'[1] = -1 is not a class index (the meta file names 10 classes)"),
    ],
)
def test_cifar_labels_must_be_integers_in_range_naming_file_and_entry(tmp_path: Path, labels, cause: str):
    files = write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_4"
    (batch).write_bytes(pickle.dumps({**files["data_batch_4"], "labels": labels}, protocol=2))
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path)
    assert (info.value.key, info.value.cause) == (str(batch), cause)


def test_cifar_labels_may_be_an_integer_array(tmp_path: Path):
    files = write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(pickle.dumps({**files["test_batch"], "labels": np.array([3, 1, 4, 1], np.uint8)}))
    assert CIFAR10(tmp_path, train=False).targets == [3, 1, 4, 1]


def test_cifar_archive_is_read_bounded_and_through_the_engine(tmp_path: Path):
    write_cifar10(tmp_path, tarball=True)
    archive = tmp_path / "cifar-10-python.tar.gz"
    # bz2 and xz archives are read as tarfile's "r:*" reads them.
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    for mode in ("w:bz2", "w:xz", "w"):
        with tarfile.open(archive, mode) as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data))
        assert len(CIFAR10(tmp_path, train=False)) == 4
    # A pax header claiming 2 GB (a few MB of gzip): refused before tarfile allocates it.
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, 2_000_000_000
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.addfile(pax, _Zeros(pax.size))
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path, train=False)
    assert (info.value.key, info.value.cause) == (
        str(archive),
        "not a readable tar archive (more than 1073741824 bytes once decompressed: "
        "not a CIFAR python archive)",
    )
    # More members than any official archive.
    with tarfile.open(archive, "w:gz") as tar:
        for i in range(1001):
            tar.addfile(tarfile.TarInfo(f"cifar-10-batches-py/x{i}"), io.BytesIO())
    with pytest.raises(conveyor.ReadError) as info:
        CIFAR10(tmp_path, train=False)
    assert info.value.cause == "more than 1000 members: not a CIFAR python archive"
    # Not a regular file: refused by name, as every file conveyor opens.
    archive.unlink()
    os.mkfifo(archive)
    out = run_python(HOSTILE_CIFAR, str(tmp_path)).stdout.splitlines()
    assert out == [f"ReadError key={archive}", "cause=not a regular file (a FIFO)"]


# --- hostile arrays and IDX files -----------------------------------------------------------


def test_array_source_labels_never_wrap(tmp_path: Path):
    x = np.zeros((2, 4), np.float32)
    # Regression: uint64 labels were cast to int64: 2**63 became -2**63, 2**64-1 became -1 ("no label").
    for labels in (np.array([2**63, 2**64 - 1], np.uint64), [2**63, 2**64 - 1]):
        with pytest.raises(conveyor.ConfigError) as info:
            ArraySource(x, labels)
        assert (
            str(info.value)
            == "ArraySource: labels[0] must be <= 9223372036854775807, got 9223372036854775808"
        )
    np.save(tmp_path / "labels.npy", np.array([0, 2**64 - 1], np.uint64))
    with pytest.raises(conveyor.ConfigError) as info:
        ArraySource(x, tmp_path / "labels.npy")
    assert (
        str(info.value) == "ArraySource: labels[1] must be <= 9223372036854775807, got 18446744073709551615"
    )
    with pytest.raises(conveyor.ConfigError) as info:
        ArraySource(x, [0, True])
    assert str(info.value) == "ArraySource: labels[1] must be an int, got bool True"
    with pytest.raises(conveyor.ConfigError) as info:
        ArraySource(x, np.array([False, True]))
    assert str(info.value) == "ArraySource: labels must be a 1-D integer array, got bool of shape (2,)"
    # The int64 range is taken as it is (FileList's rule), numpy integers too.
    source = ArraySource(x, np.array([2**63 - 1, 7], np.uint64))
    assert source._engine_source().read(0)[1] == 2**63 - 1
    assert ArraySource(x, [np.uint8(3), -(2**63)])._engine_source().read(1)[1] == -(2**63)


def write_npy_header(path: Path, shape: tuple[int, ...], descr: str = "|u1", extra: int = 0) -> Path:
    """A .npy file whose header says ``shape``, sparse, ``extra`` bytes off its size."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
        f.truncate(f.tell() + int(np.prod(shape, dtype=object)) * np.dtype(descr).itemsize + extra)
    return path


def test_npy_header_is_checked_against_the_file_size(tmp_path: Path):
    path = write_npy_header(tmp_path / "short.npy", (4, 8, 8), extra=-1)
    with pytest.raises(conveyor.ReadError) as info:
        ArraySource(path)
    assert (info.value.key, info.value.cause) == (
        str(path),
        "truncated .npy file: the header says 4×8×8 uint8 (256 bytes from offset 128), "
        "the file has 383 bytes",
    )
    # Longer than the header says is fine (as numpy.load).
    assert len(ArraySource(write_npy_header(tmp_path / "long.npy", (4, 8, 8), extra=10))) == 4
    labels = write_npy_header(tmp_path / "labels.npy", (2**40,), "<i8", extra=-8)
    with pytest.raises(conveyor.ReadError) as info:
        ArraySource(path.with_name("long.npy"), labels)
    assert info.value.key == str(labels) and info.value.cause.startswith(
        "truncated .npy file: the header says"
    )


@pytest.mark.parametrize("shape", [(1, 2**31 + 1, 1), (1, 1, 2**31 + 1), (1, 2**31 + 1, 1, 3)])
def test_npy_image_side_beyond_the_engine_is_a_config_error_naming_it(tmp_path: Path, shape):
    # Regression: nanobind's "TypeError: incompatible function arguments" from the Loader.
    path = write_npy_header(tmp_path / "wide.npy", shape)
    with pytest.raises(conveyor.ConfigError) as info:
        ArraySource(path)
    side = 2**31 + 1
    height, width = (side, 1) if shape[1] == side else (1, side)
    assert str(info.value) == (
        f"ArraySource: {path}: raw image sides must be at most 2147483647 (the engine's int), "
        f"got {height}x{width}"
    )
    # As tensors (float32) the same sizes are batched as they are.
    tensors = write_npy_header(tmp_path / "wide-f4.npy", shape, "<f4")
    assert ArraySource(tensors).sample_shape == shape[1:]


def test_mnist_of_other_channel_counts_gives_its_samples(tmp_path: Path):
    # Regression: source[i] of an IDX file of 2 channels (a raw tensor) tried to decode it as an image.
    images = np.arange(3 * 4 * 5 * 2, dtype=np.uint8).reshape(3, 4, 5, 2)
    header = struct.pack(">4B4I", 0, 0, 8, 4, *images.shape)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(header + images.tobytes())
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(struct.pack(">4BI", 0, 0, 8, 1, 3) + bytes([7, 8, 9]))
    source = MNIST(tmp_path)
    assert source.raw_shape is None
    image, label = source[1]
    np.testing.assert_array_equal(image, images[1])
    assert label == 8


def test_mnist_image_side_beyond_the_engine_is_a_config_error_naming_it(tmp_path: Path):
    side = 2**31 + 1
    with open(tmp_path / "train-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">4B3I", 0, 0, 8, 3, 1, 1, side))
        f.truncate(16 + side)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(struct.pack(">4BI", 0, 0, 8, 1, 1) + b"\x00")
    with pytest.raises(conveyor.ConfigError) as info:
        MNIST(tmp_path)
    assert str(info.value) == (
        f"MNIST: {tmp_path / 'train-images-idx3-ubyte'}: raw image sides must be at most 2147483647 "
        f"(the engine's int), got 1x{side}"
    )


CIFAR_MUTATIONS = """
import json, pickletools, random, sys
from pathlib import Path
import conveyor
from conveyor.sources import CIFAR10

root = Path(sys.argv[1])
batch = root / "cifar-10-batches-py" / "data_batch_1"
valid = batch.read_bytes()
opcodes = [op.code.encode("latin1") for op in pickletools.opcodes]
rng = random.Random(int(sys.argv[2]))
outcomes = {}
for i in range(int(sys.argv[3])):
    data = bytearray(valid)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        at = rng.randrange(len(data) + 1)
        if kind == 0 and data:  # Flip a byte.
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1:  # Cut the rest.
            del data[at:]
        elif kind == 2:  # Insert opcodes, sometimes many of one (deep nesting).
            data[at:at] = rng.choice(opcodes) * (rng.choice([1, 2, 50, 5000]))
        elif kind == 3 and data:  # Repeat a slice.
            end = min(len(data), at + rng.randint(1, 64))
            data[at:at] = data[at:end] * rng.randint(2, 40)
        else:  # Random bytes.
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    batch.write_bytes(bytes(data))
    try:
        CIFAR10(root, train=True)
        outcomes["read"] = outcomes.get("read", 0) + 1
    except conveyor.ReadError as e:
        assert e.key == str(batch), (i, e.key)
        assert str(e).startswith(f"{batch}: "), (i, str(e))
        outcomes["ReadError"] = outcomes.get("ReadError", 0) + 1
print(json.dumps(sorted(outcomes.items())))
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_mutated_cifar_batches_are_read_or_refused_naming_the_file(tmp_path: Path, seed: int):
    # A fuzz of the CIFAR reader (Python: outside the libFuzzer targets):
    # valid batches with flipped bytes, cuts, inserted opcodes (runs of one
    # opcode nest deeply) and repeated slices, each either read or refused
    # with a ReadError naming the batch file; never another exception, a
    # crash or a hang (a child process with a timeout). Seeded: the same
    # inputs on every run.
    write_cifar10(tmp_path)
    done = run_python(CIFAR_MUTATIONS, str(tmp_path), str(seed), "300")
    assert done.returncode == 0, f"child exited with {done.returncode}\n{done.stdout}\n{done.stderr}"
    outcomes = dict(json.loads(done.stdout))
    assert sum(outcomes.values()) == 300
    assert outcomes.get("ReadError", 0) > 100, outcomes  # The mutations mostly break the batch.
