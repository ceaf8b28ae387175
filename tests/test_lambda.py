"""T.Lambda: user functions in the chain, run on the engine's threads
(any size, errors naming the sample with the original exception as
__cause__, skip, shutdown and interpreter exit with a Lambda running)."""

from __future__ import annotations

import threading
import traceback

import numpy as np
import pytest
import torch
from PIL import Image

import conveyor
from conftest import run_python
from conveyor import transforms as T
from conveyor.sources import ImageFolder

N = 30  # Samples in color_folder.


def load(root, transforms, **kwargs):
    options = dict(batch_size=4, seed=3, dtype="uint8", layout="HWC", shuffle=True)
    options.update(kwargs)
    loader = conveyor.Loader(ImageFolder(root), transforms, **options)
    return [(as_array(images), labels.numpy().copy()) for images, labels in loader], loader


def as_array(images) -> np.ndarray:
    # A chain ending with a Lambda has no fixed size: its batches are lists.
    if isinstance(images, list):
        return np.stack([image.numpy() for image in images])
    return images.numpy().copy()


def draw_and_crop(image: np.ndarray) -> np.ndarray:
    out = image[5:35, 2:38].copy()  # Crops: 30 × 36.
    out[10:20, 10:20] = (255, 0, 255)  # Draws a square.
    return out


def test_a_lambda_that_crops_and_draws_gives_identical_batches_for_1_and_4_threads(color_folder):
    chain = [T.Resize((40, 40)), T.Lambda(draw_and_crop), T.CenterCrop((20, 24))]
    one, _ = load(color_folder, chain, threads=1)
    four, _ = load(color_folder, chain, threads=4)
    assert len(one) == 8
    for (a, la), (b, lb) in zip(one, four):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
    # The square, at (10..20, 10..20) of the 30 × 36 image, is at (5..15, 4..14) of the centre crop.
    images = np.concatenate([b[0] for b in one])
    assert images.shape == (N, 20, 24, 3)
    assert (images[:, 5:15, 4:14] == (255, 0, 255)).all()
    assert not (images[:, 16:, :] == (255, 0, 255)).all(axis=-1).any()


def test_the_lambda_sees_what_the_chain_gave_and_its_result_is_what_follows(color_folder):
    plain, _ = load(color_folder, [T.Resize((16, 16))])
    seen = []

    def identity(image):
        seen.append((image.shape, str(image.dtype), image.flags["C_CONTIGUOUS"]))
        return image

    same, _ = load(color_folder, [T.Resize((16, 16)), T.Lambda(identity)], threads=2)
    assert set(seen) == {((16, 16, 3), "uint8", True)}
    for (a, _), (b, _) in zip(plain, same):
        np.testing.assert_array_equal(a, b)
    flipped, _ = load(color_folder, [T.Resize((16, 16)), T.Lambda(lambda a: a[:, ::-1])])
    for (a, _), (b, _) in zip(plain, flipped):
        np.testing.assert_array_equal(a[:, :, ::-1], b)


def test_runs_on_engine_threads_and_arrays_it_keeps_stay_valid(color_folder):
    kept, threads = [], set()

    def keep(image):
        threads.add(threading.get_ident())
        kept.append(image)
        return image

    batches, _ = load(color_folder, [T.Resize((8, 8)), T.Lambda(keep)], threads=3, shuffle=False)
    assert threading.get_ident() not in threads
    images = np.concatenate([b[0] for b in batches])
    # Each kept array still holds its sample (in the order the threads ran them).
    assert sorted(a.tobytes() for a in kept) == sorted(i.tobytes() for i in images)


def test_custom_transform_objects_and_pil_results_work(color_folder):
    class Invert:  # A torchvision-style transform class.
        def __call__(self, image):
            return Image.fromarray(255 - np.asarray(image))

    plain, _ = load(color_folder, [T.Resize((8, 8))])
    inverted, _ = load(color_folder, [T.Resize((8, 8)), T.Lambda(Invert())])
    for (a, _), (b, _) in zip(plain, inverted):
        np.testing.assert_array_equal(255 - a, b)
    assert repr(T.Lambda(Invert())).startswith("Lambda(test_custom_transform_objects")


def test_an_exception_names_the_sample_and_keeps_the_original_with_its_traceback(color_folder):
    def fails_on_dark(image):
        if image.mean() < 100:
            raise KeyError("too dark")
        return image

    with pytest.raises(conveyor.InternalError) as info:
        load(color_folder, [T.Resize((8, 8)), T.Lambda(fails_on_dark)], shuffle=False, threads=1)
    error = info.value
    assert error.key.endswith(".jpg") and "/cat/" in error.key
    assert (
        error.cause == "Lambda(test_an_exception_names_the_sample_and_keeps_the_original_with_its_traceback."
        "<locals>.fails_on_dark) raised KeyError: 'too dark'"
    )
    assert isinstance(error.__cause__, KeyError)
    frames = [frame.name for frame in traceback.extract_tb(error.__cause__.__traceback__)]
    assert "fails_on_dark" in frames


def test_with_skip_failed_samples_are_left_out_and_counted(color_folder):
    def fails_on_odd_width(image):
        if image.shape[1] % 2:
            raise ValueError("odd")
        return image

    batches, loader = load(color_folder, [T.Lambda(fails_on_odd_width), T.Resize((8, 8))], on_error="skip")
    widths = [40 + (i * 13) % 50 for i in range(N)]  # color_folder's sizes.
    odd = sum(w % 2 for w in widths)
    assert loader.stats()["skipped"] == odd > 0
    assert sum(len(b[0]) for b in batches) == N - odd
    assert {cause for _, cause in loader.skipped()} == {
        "Lambda(test_with_skip_failed_samples_are_left_out_and_counted.<locals>.fails_on_odd_width) raised "
        "ValueError: odd"
    }


def test_a_result_with_other_channels_is_an_error_of_the_sample_saying_so(color_folder):
    with pytest.raises(conveyor.InternalError) as info:
        load(color_folder, [T.Lambda(lambda a: a[:, :, :2]), T.Resize((8, 8))])
    assert (
        "must return a uint8 H×W×3 array (the chain's 3 channel(s)), got ndarray of dtype uint8 and shape"
        in str(info.value)
    )
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(conveyor.InternalError, match="got ndarray of dtype float64"):
        load(color_folder, [T.Lambda(lambda a: a / 2.0), T.Resize((8, 8))])
    with pytest.raises(conveyor.ConfigError, match="Lambda: fn must be callable"):
        T.Lambda(3)


def test_a_lambda_before_normalize_and_float_output(color_folder):
    mean, std = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]
    plain, _ = load(color_folder, [T.Resize((8, 8)), T.Normalize(mean, std)], dtype="float32", layout="CHW")
    with_lambda, _ = load(
        color_folder,
        [T.Resize((8, 8)), T.Lambda(lambda a: a), T.Normalize(mean, std)],
        dtype="float32",
        layout="CHW",
    )
    for (a, _), (b, _) in zip(plain, with_lambda):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.float32


# --- shutdown and interpreter exit (child processes: a hang fails the test) -------------

CHILD_SETUP = """
import sys, time
import numpy as np
from PIL import Image
import conveyor
from conveyor import transforms as T
from conveyor.sources import ImageFolder
root = sys.argv[1]
chain = lambda fn: [T.Lambda(fn), T.Resize((8, 8))]
"""


def make_images(tmp_path, count=40):
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for k in range(count // 2):
            Image.fromarray(np.full((20, 20, 3), k * 5, np.uint8)).save(tmp_path / c / f"{k}.png")
    return str(tmp_path)


@pytest.mark.parametrize(
    "body",
    [
        "time.sleep(0.2)",  # Releases the GIL while it waits.
        "end = time.monotonic() + 0.05\n        while time.monotonic() < end: pass",  # Holds the GIL.
    ],
    ids=["sleeps", "spins"],
)
def test_breaking_out_and_closing_with_a_slow_lambda_stops(tmp_path, body):
    code = (
        CHILD_SETUP
        + f"""
def slow(image):
    {body.replace(chr(10) + "        ", chr(10) + "    ")}
    return image
loader = conveyor.Loader(ImageFolder(root), chain(slow), batch_size=2, threads=4, prefetch=4)
for images, labels in loader:
    break
loader.close()
for images, labels in conveyor.Loader(ImageFolder(root), chain(slow), batch_size=2, threads=2):
    break
print("closed")
"""
    )
    child = run_python(code, make_images(tmp_path))
    assert child.returncode == 0, child.stderr
    assert child.stdout == "closed\n"


def test_interpreter_exit_with_a_live_loader_running_a_lambda(tmp_path):
    code = (
        CHILD_SETUP
        + """
def slow(image):
    time.sleep(0.05)
    return image
loader = conveyor.Loader(ImageFolder(root), chain(slow), batch_size=2, threads=4, prefetch=8)
it = iter(loader)
next(it)
print("exiting", flush=True)
# No close(), no del: the interpreter exits with the epoch under way.
"""
    )
    child = run_python(code, make_images(tmp_path))
    assert child.returncode == 0, child.stderr
    assert child.stdout == "exiting\n"
    assert "Fatal" not in child.stderr and "Traceback" not in child.stderr


def test_interpreter_exit_after_a_failed_lambda_keeps_no_python_object_alive_wrongly(tmp_path):
    # The exception kept for __cause__ sits in the engine until the batch is
    # reached; exiting before that releases it without the GIL problems.
    code = (
        CHILD_SETUP
        + """
def fails(image):
    raise RuntimeError("no")
loader = conveyor.Loader(ImageFolder(root), chain(fails), batch_size=2, threads=2)
it = iter(loader)
time.sleep(0.5)
print("exiting", flush=True)
"""
    )
    child = run_python(code, make_images(tmp_path))
    assert child.returncode == 0, child.stderr
    assert child.stdout == "exiting\n"


def test_a_torch_tensor_result_is_taken_as_hwc(color_folder):
    plain, _ = load(color_folder, [T.Resize((8, 8))])
    out, _ = load(color_folder, [T.Resize((8, 8)), T.Lambda(lambda a: torch.from_numpy(a) // 2)])
    for (a, _), (b, _) in zip(plain, out):
        np.testing.assert_array_equal(a // 2, b)


def test_a_python_thread_that_ran_a_lambda_chain_ends_cleanly(tmp_path):
    # A Python thread has its own thread state: the engine must not keep (and
    # later restore) one for it, since Python deletes that state when the
    # thread ends.
    code = (
        CHILD_SETUP
        + """
import io, threading
from conveyor.transforms import compile_pipeline
buffer = io.BytesIO()
Image.fromarray(np.full((20, 20, 3), 9, np.uint8)).save(buffer, format="PNG")
pipeline = compile_pipeline(chain(lambda image: image + 1), dtype="uint8", layout="HWC")
results = []
for _ in range(3):
    thread = threading.Thread(target=lambda: results.append(pipeline.apply(buffer.getvalue())))
    thread.start()
    thread.join()
results.append(pipeline.apply(buffer.getvalue()))  # And on the main thread.
print(len(results), sorted({int(r[0, 0, 0]) for r in results}))
"""
    )
    child = run_python(code, make_images(tmp_path))
    assert child.returncode == 0, child.stderr
    assert child.stdout == "4 [10]\n"
