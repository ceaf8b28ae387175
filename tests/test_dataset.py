"""conveyor make-dataset: the ImageNet-like JPEG folder and the MNIST IDX files."""

import io
import os

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from conveyor import dataset
from conveyor.cli import main

IMAGES = 60


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("data") / "images")
    paths = dataset.make_dataset(out, IMAGES, seed=3, classes=10, threads=2)
    return out, paths


def _files(root):
    return sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, _, files in os.walk(root)
        for f in files
        if f.endswith(".jpg")
    )


def _read(root, names):
    result = {}
    for name in names:
        with open(os.path.join(root, name), "rb") as f:
            result[name] = f.read()
    return result


def test_layout_is_one_folder_per_class_with_image_n_in_class_n_mod_classes(folder):
    out, paths = folder
    classes = sorted(e.name for e in os.scandir(out) if e.is_dir())
    assert classes == dataset._class_names(10)
    assert classes[0] == "000_astronaut" and len(set(classes)) == 10
    assert len(paths) == IMAGES == len(_files(out))
    for n, path in enumerate(paths):
        assert os.path.basename(os.path.dirname(path)) == classes[n % 10]
        assert os.path.basename(path) == f"{n:02d}.jpg"


def test_same_seed_gives_the_same_bytes_for_any_thread_count(folder, tmp_path):
    out, _ = folder
    again = str(tmp_path / "again")
    dataset.make_dataset(again, IMAGES, seed=3, classes=10, threads=1)
    names = _files(out)
    assert names == _files(again)
    assert _read(out, names) == _read(again, names)


def test_another_seed_gives_other_images(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    dataset.make_dataset(a, 10, seed=3, classes=10)
    dataset.make_dataset(b, 10, seed=4, classes=10)
    names = _files(a)
    assert names == _files(b)
    first, second = _read(a, names), _read(b, names)
    assert all(first[name] != second[name] for name in names)


def test_sizes_are_imagenet_like_rgb_jpegs(folder):
    _, paths = folder
    for path in paths:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            w, h = image.size
            assert 200 <= min(w, h) <= 500
            assert 3 / 4 - 0.01 <= w / h <= 4 / 3 + 0.01


def _quantization_tables(quality):
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buffer, "JPEG", quality=quality)
    return tuple(Image.open(buffer).quantization[0])


def test_quality_chroma_subsampling_and_progressive_vary(folder):
    _, paths = folder
    allowed = {_quantization_tables(q) for q in range(70, 96)}
    tables, samplings, progressive = set(), set(), set()
    for path in paths:
        with Image.open(path) as image:
            table = tuple(image.quantization[0])
            assert table in allowed, f"{path}: quality outside 70-95"
            tables.add(table)
            samplings.add(JpegImagePlugin.get_sampling(image))
            progressive.add(bool(image.info.get("progressive")))
    assert len(tables) >= 5
    assert samplings == {0, 2}  # 4:4:4 and 4:2:0
    assert progressive == {True, False}


def test_images_differ_within_a_class(folder):
    _, paths = folder
    same_class = [np.asarray(Image.open(p).convert("L").resize((32, 32)), np.float32) for p in paths[::10]]
    assert all(np.abs(a - b).mean() > 1 for a, b in zip(same_class, same_class[1:]))


def test_command_writes_and_quiet_if_present_skips(tmp_path, capsys):
    out = str(tmp_path / "d")
    assert main(["make-dataset", out, "--images", "12", "--classes", "3"]) == 0
    assert "wrote 12" in capsys.readouterr().out
    assert dataset.is_complete(out, kind="images", images=12, seed=0, classes=3)
    before = {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in _files(out)}
    assert main(["make-dataset", out, "--images", "12", "--classes", "3", "--quiet-if-present"]) == 0
    assert capsys.readouterr().out == ""
    assert {name: os.stat(os.path.join(out, name)).st_mtime_ns for name in _files(out)} == before
    # Another size is not "present": the folder is rewritten.
    assert main(["make-dataset", out, "--images", "5", "--classes", "3", "--quiet-if-present"]) == 0
    assert len(_files(out)) == 5
    assert dataset.is_complete(out, kind="images", images=5, seed=0, classes=3)


def test_incomplete_marker_is_not_present(tmp_path):
    out = str(tmp_path / "d")
    dataset.make_dataset(out, 4, classes=2)
    dataset._write_marker(out, {"kind": "images", "images": 4, "seed": 0, "classes": 2}, complete=False)
    assert not dataset.is_complete(out, kind="images", images=4, seed=0, classes=2)


def test_refuses_a_folder_it_did_not_make(tmp_path, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    assert main(["make-dataset", str(tmp_path), "--images", "3"]) == 1
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--images", "0"], "must be >= 1"),
        (["--images", "ten"], "not an integer"),
        (["--images", "3", "--seed", "-1"], "must be >= 0"),
        (["--images", "3", "--classes", "0"], "must be >= 1"),
        ([], "required: --images"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        main(["make-dataset", str(tmp_path / "x"), *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_mnist_idx_files(tmp_path):
    from conveyor.bench.reference import read_idx

    out = str(tmp_path / "mnist")
    paths = dataset.make_mnist(out, 120, seed=1)
    images = read_idx(paths["train-images-idx3-ubyte"])
    labels = read_idx(paths["train-labels-idx1-ubyte"])
    assert images.shape == (120, 28, 28) and labels.shape == (120,)
    assert read_idx(paths["t10k-images-idx3-ubyte"]).shape == (20, 28, 28)
    assert set(labels.tolist()) == set(range(10))
    ink = images.reshape(120, -1).max(axis=1)
    assert (ink > 150).all()  # Every sample has a digit drawn.
    assert np.median(images) == 0  # White digits on black, as MNIST.
    again = dataset.make_mnist(str(tmp_path / "again"), 120, seed=1)
    for name, path in paths.items():
        with open(path, "rb") as a, open(again[name], "rb") as b:
            assert a.read() == b.read()


def _normalized(digit):
    image = Image.fromarray(digit)
    return np.asarray(image.crop(image.getbbox()).resize((12, 16), Image.Resampling.BILINEAR), np.float32)


def test_mnist_labels_match_the_drawn_digit(tmp_path):
    # Cropped to their ink, digits of a label are nearer their label's mean than
    # any other: far above the 10% of chance.
    from conveyor.bench.reference import read_idx

    paths = dataset.make_mnist(str(tmp_path / "m"), 600, seed=0)
    images = np.stack([_normalized(d) for d in read_idx(paths["train-images-idx3-ubyte"])]).reshape(600, -1)
    labels = read_idx(paths["train-labels-idx1-ubyte"])
    means = np.stack([images[labels == d].mean(axis=0) for d in range(10)])
    nearest = np.argmin(((images[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    assert (nearest == labels).mean() > 0.6
