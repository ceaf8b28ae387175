"""conveyor.transforms against torchvision's algorithms, re-implemented here
with PIL exactly as torchvision applies them to PIL images (torchvision is not
a dependency): Resize uses PIL's antialiased bilinear, CenterCrop pads then
crops at round((size - crop) / 2), RandomResizedCrop crops its box then resizes.
"""

import io
import math
import os
import random
import re
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from skimage import data

import conveyor
from conveyor import _conveyor
from conveyor import transforms as T

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
PHOTOS = ["astronaut", "chelsea", "coffee"]


def jpeg_of(name, quality=95):
    buf = io.BytesIO()
    Image.fromarray(getattr(data, name)()).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def pil_of(jpeg):
    return Image.open(io.BytesIO(jpeg)).convert("RGB")


# --- torchvision's PIL path -----------------------------------------------------
def tv_resize(img, size):
    w, h = img.size
    if isinstance(size, int):
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = size, int(size * long / short)
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    else:
        new_h, new_w = size
    return img.resize((new_w, new_h), Image.BILINEAR)


def tv_center_crop(img, size):
    ch, cw = size
    w, h = img.size
    if cw > w or ch > h:
        pad_l, pad_t = max(cw - w, 0) // 2, max(ch - h, 0) // 2
        canvas = Image.new("RGB", (max(w, cw), max(h, ch)))
        canvas.paste(img, (pad_l, pad_t))
        img, (w, h) = canvas, canvas.size
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return img.crop((left, top, left + cw, top + ch))


def tv_resized_crop(img, box, size):
    i, j, h, w = box
    return img.crop((j, i, j + w, i + h)).resize((size[1], size[0]), Image.BILINEAR)


def ours(transforms, data_bytes, index=0, seed=0, epoch=0, **kw):
    kw.setdefault("dtype", "uint8")
    kw.setdefault("layout", "HWC")
    return np.asarray(T.compile_pipeline(transforms, **kw).apply(data_bytes, seed, epoch, index))


def assert_close_to_pil(a, ref, mean_tol=2.0, max_tol=40):
    diff = np.abs(a.astype(int) - np.asarray(ref).astype(int))
    assert a.shape == np.asarray(ref).shape
    assert diff.mean() <= mean_tol and diff.max() <= max_tol, (diff.mean(), diff.max())
    return diff


# --- parity ------------------------------------------------------------------------
@pytest.mark.parametrize("name", PHOTOS)
@pytest.mark.parametrize("size", [(256, 256), (224, 300), (128, 96), (64, 64), (700, 500)])
def test_resize_to_size_close_to_pil(name, size):
    jpeg = jpeg_of(name)
    assert_close_to_pil(ours([T.Resize(size)], jpeg), tv_resize(pil_of(jpeg), size))


@pytest.mark.parametrize("name", PHOTOS)
@pytest.mark.parametrize("resize,crop", [(256, 224), (160, 128), (64, 56)])
def test_eval_chain_close_to_pil(name, resize, crop):
    jpeg = jpeg_of(name)
    ref = tv_center_crop(tv_resize(pil_of(jpeg), resize), (crop, crop))
    assert_close_to_pil(ours([T.Resize(resize), T.CenterCrop(crop)], jpeg), ref)


@pytest.mark.parametrize("name", PHOTOS)
@pytest.mark.parametrize("size", [(224, 224), (100, 150), (600, 700)])
def test_center_crop_exact(name, size):
    # No resize: pure pixel selection (and zero padding when larger).
    jpeg = jpeg_of(name)
    expected = np.asarray(tv_center_crop(pil_of(jpeg), size))
    np.testing.assert_array_equal(ours([T.CenterCrop(size)], jpeg), expected)


@pytest.mark.parametrize("name", PHOTOS)
def test_random_resized_crop_close_to_pil_for_its_box(name):
    jpeg = jpeg_of(name)
    img = pil_of(jpeg)
    w, h = img.size
    means = []
    for index in range(40):
        box = _conveyor.sample_random_resized_crop(h, w, (0.08, 1.0), (3 / 4, 4 / 3), 7, 0, index)
        out = ours([T.RandomResizedCrop(224)], jpeg, index=index, seed=7)
        means.append(assert_close_to_pil(out, tv_resized_crop(img, box, (224, 224))).mean())
    assert np.mean(means) < 1.0


# --- RandomResizedCrop's rule --------------------------------------------------------
def tv_get_params(height, width, rnd, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision.transforms.RandomResizedCrop.get_params, with `rnd` for torch's RNG."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rnd.uniform(*scale)
        aspect_ratio = math.exp(rnd.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return rnd.randint(0, height - h), rnd.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def boxes(h, w, n, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed=0, epoch=0):
    draw = _conveyor.sample_random_resized_crop
    return np.array([draw(h, w, scale, ratio, seed, epoch, i) for i in range(n)])


def test_random_resized_crop_box_distribution():
    h, w = 375, 500
    b = boxes(h, w, 10000)
    top, left, bh, bw = b.T
    assert (top >= 0).all() and (left >= 0).all() and (top + bh <= h).all() and (left + bw <= w).all()
    area = bh * bw / (h * w)
    aspect = bw / bh
    # Rounding to whole pixels moves area and aspect slightly past the bounds.
    assert area.min() >= 0.075 and area.max() <= 1.0
    assert aspect.min() >= 0.75 * 0.98 and aspect.max() <= 4 / 3 * 1.02
    # Log-uniform aspect: on a square image (no rejection bias) the log is
    # symmetric around 0 and uniform over [log 3/4, log 4/3].
    sq = boxes(400, 400, 10000)
    log_aspect = np.log(sq[:, 3] / sq[:, 2])
    assert abs(log_aspect.mean()) < 0.01
    hist, _ = np.histogram(log_aspect, bins=4, range=(np.log(3 / 4), np.log(4 / 3)))
    assert hist.min() > 0.8 * hist.max()
    # The same distribution as torchvision's get_params (re-implemented below
    # with Python's random): large boxes that do not fit are redrawn, so the
    # mean area is well below the 0.54 of uniform(0.08, 1).
    ref = np.array([tv_get_params(h, w, random.Random(i)) for i in range(10000)])
    ref_area = ref[:, 2] * ref[:, 3] / (h * w)
    assert abs(area.mean() - ref_area.mean()) < 0.01
    q = [10, 50, 90]
    np.testing.assert_allclose(np.percentile(area, q), np.percentile(ref_area, q), atol=0.02)
    # Both ends are reached.
    assert area.min() < 0.1 and area.max() > 0.95
    # Positions cover the full range.
    assert left.min() == 0 and (left + bw).max() == w


def test_random_resized_crop_fallback_is_central_crop():
    # No draw can fit: the ratio range is far from the image's.
    b = boxes(100, 400, 50, scale=(0.9, 1.0), ratio=(1.0, 1.0))
    np.testing.assert_array_equal(b, np.tile([0, 150, 100, 100], (50, 1)))
    tall = boxes(400, 100, 5, scale=(0.95, 1.0), ratio=(2.0, 3.0))
    # in_ratio 0.25 < 2: w = 100, h = round(100 / 2) = 50, centred.
    np.testing.assert_array_equal(tall, np.tile([175, 0, 50, 100], (5, 1)))
    assert tv_get_params(400, 100, random.Random(0), scale=(0.95, 1.0), ratio=(2.0, 3.0)) == (175, 0, 50, 100)


def test_random_resized_crop_extreme_ratio_gives_at_least_one_pixel():
    # No draw fits; torchvision's fallback rounds the height to 0 (an empty
    # crop, all-zero images here before). Each side is at least 1 pixel now.
    assert tv_get_params(300, 400, random.Random(0), ratio=(1000, 1000)) == (150, 0, 0, 400)
    np.testing.assert_array_equal(boxes(300, 400, 5, ratio=(1000, 1000)), np.tile([149, 0, 1, 400], (5, 1)))
    np.testing.assert_array_equal(boxes(300, 400, 5, ratio=(0.001, 0.001)), np.tile([0, 199, 300, 1], (5, 1)))
    # Where torchvision's fallback is a valid crop, it is the same.
    assert tv_get_params(300, 400, random.Random(0), ratio=(40, 40)) == (145, 0, 10, 400)
    np.testing.assert_array_equal(boxes(300, 400, 5, ratio=(40, 40)), np.tile([145, 0, 10, 400], (5, 1)))
    # The image is that one row, resized: not black.
    image = np.asarray(pil_of(jpeg_of("coffee")).resize((400, 300)))
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    out = ours([T.RandomResizedCrop(8, ratio=(1000, 1000))], buffer.getvalue(), dtype="uint8", layout="HWC")
    assert out.any()
    np.testing.assert_array_equal(out, np.broadcast_to(out[:1], out.shape))  # Every row is row 149 shrunk.


def test_random_resized_crop_same_seed_same_boxes():
    a, b = boxes(300, 300, 200, seed=5, epoch=2), boxes(300, 300, 200, seed=5, epoch=2)
    np.testing.assert_array_equal(a, b)
    assert (a != boxes(300, 300, 200, seed=5, epoch=3)).any()
    assert (a != boxes(300, 300, 200, seed=6, epoch=2)).any()


# --- fused decode ---------------------------------------------------------------------
@pytest.mark.parametrize("name", PHOTOS)
def test_crop_window_and_dct_decode_close_to_full_decode(name):
    jpeg = jpeg_of(name, quality=90)
    chains = [
        [T.RandomResizedCrop(112)._spec()],
        [T.Resize(128)._spec(), T.CenterCrop(112)._spec()],
        [T.CenterCrop((200, 100))._spec()],
    ]
    for specs in chains:
        for index in range(10):

            def run(specs=specs, index=index, **kw):
                p = _conveyor.ImagePipeline(specs, dtype="uint8", layout="HWC", **kw)
                return np.asarray(p.apply(jpeg, 0, 0, index)).astype(int)

            full = run(crop_decode=False, dct_scale=False)
            window = run(crop_decode=True, dct_scale=False)
            np.testing.assert_array_equal(window, full)  # crop-window decode is exact
            # DCT scaling (default margin 2): close; at margin 1 the IDCT's own
            # low-pass shows (see docs/design/resize.md) but stays near.
            assert np.abs(run() - full).mean() < 1.5
            assert np.abs(run(dct_margin=1.0) - full).mean() < 4.5


@pytest.mark.parametrize("options", [{"quality": 80}, {"lossless": True}])
def test_webp_crop_window_decode_is_exact(options):
    buf = io.BytesIO()
    Image.fromarray(data.coffee()).save(buf, "WEBP", **options)
    blob = buf.getvalue()
    chains = [
        [T.RandomResizedCrop(64)._spec()],
        [T.Resize(100)._spec(), T.CenterCrop(90)._spec()],
        [T.CenterCrop((101, 77))._spec()],
    ]
    for specs in chains:
        for index in range(6):
            window, full = (
                np.asarray(
                    _conveyor.ImagePipeline(specs, dtype="uint8", layout="HWC", crop_decode=c).apply(
                        blob, 0, 0, index
                    )
                )
                for c in (True, False)
            )
            np.testing.assert_array_equal(window, full)


# --- output pass -------------------------------------------------------------------------
def test_normalize_and_dtypes_match_torchvision_arithmetic():
    jpeg = jpeg_of("chelsea")
    chain = [T.Resize(64), T.CenterCrop(56)]
    u8 = ours(chain, jpeg, layout="CHW")
    f32 = ours([*chain, T.Normalize(MEAN, STD)], jpeg, dtype="float32", layout="CHW")
    assert u8.dtype == np.uint8 and f32.dtype == np.float32 and u8.shape == f32.shape == (3, 56, 56)
    # torchvision: to_tensor divides by 255 in float32, Normalize subtracts and divides in float32.
    mean = np.array(MEAN, np.float32)[:, None, None]
    std = np.array(STD, np.float32)[:, None, None]
    np.testing.assert_array_equal(f32, (u8.astype(np.float32) / np.float32(255) - mean) / std)
    plain = ours(chain, jpeg, dtype="float32", layout="CHW")
    np.testing.assert_array_equal(plain, u8.astype(np.float32) / np.float32(255))
    f16 = ours([*chain, T.Normalize(MEAN, STD)], jpeg, dtype="float16", layout="CHW")
    assert f16.dtype == np.float16
    np.testing.assert_array_equal(f16, f32.astype(np.float16))


def test_hwc_layout_is_transposed_chw():
    jpeg = jpeg_of("coffee")
    chain = [T.RandomResizedCrop((48, 64)), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
    for index in range(4):
        chw = ours(chain, jpeg, index=index, dtype="float32", layout="CHW")
        hwc = ours(chain, jpeg, index=index, dtype="float32", layout="HWC")
        assert chw.shape == (3, 48, 64) and hwc.shape == (48, 64, 3)
        np.testing.assert_array_equal(hwc, chw.transpose(1, 2, 0))


def test_flip_is_deterministic_per_sample_and_mirrors():
    jpeg = jpeg_of("astronaut")
    base = ours([T.CenterCrop(100)], jpeg)
    always = ours([T.CenterCrop(100), T.RandomHorizontalFlip(1.0)], jpeg)
    np.testing.assert_array_equal(always, base[:, ::-1])
    chain = [T.CenterCrop(100), T.RandomHorizontalFlip(0.5)]
    flipped = []
    for index in range(40):
        a = ours(chain, jpeg, index=index, seed=3)
        np.testing.assert_array_equal(a, ours(chain, jpeg, index=index, seed=3))
        assert (a == base).all() or (a == always).all()
        flipped.append(bool((a == always).all()))
    assert 5 < sum(flipped) < 35
    assert flipped != [bool((ours(chain, jpeg, index=i, seed=4) == always).all()) for i in range(40)]


def test_grayscale_output():
    jpeg = jpeg_of("chelsea")
    gray = ours([T.CenterCrop(50)], jpeg, channels=1)
    assert gray.shape == (50, 50, 1)
    rgb = ours([T.CenterCrop(50)], jpeg).astype(np.float64)
    luma = rgb @ np.array([0.299, 0.587, 0.114])
    assert np.abs(gray[..., 0] - luma).max() <= 2.0


# --- configuration errors -----------------------------------------------------------------
@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: T.Resize("big"), "size"),
        (lambda: T.Resize((1, 2, 3)), "size"),
        (lambda: T.CenterCrop(0), "positive"),
        (lambda: T.CenterCrop(2.5), "size"),
        (lambda: T.RandomResizedCrop(224, scale=(0.9, 0.1)), "scale"),
        (lambda: T.RandomResizedCrop(224, ratio=(1,)), "ratio"),
        (lambda: T.RandomHorizontalFlip(2), "p must"),
        (lambda: T.Normalize([0.5, 0.5], [0.5]), "mean has 2"),
        (lambda: T.Normalize(MEAN, [1, 0, 1]), "non-zero"),
        (lambda: T.compile_pipeline(None), "a resize to (h, w)"),
        (lambda: T.compile_pipeline([]), "crop"),
        (lambda: T.compile_pipeline([T.Resize(256)]), "fixed output size"),
        (lambda: T.compile_pipeline([T.CenterCrop(8), T.Normalize([0.5], [0.5])]), "one value per channel"),
        (lambda: T.compile_pipeline([T.CenterCrop(8), T.Normalize(MEAN, STD)], dtype="uint8"), "uint8"),
        (lambda: T.compile_pipeline([T.Normalize(MEAN, STD), T.CenterCrop(8)]), "after Normalize"),
        (lambda: T.compile_pipeline([T.CenterCrop(8)], dtype="int64"), "dtype"),
        (lambda: T.compile_pipeline([T.CenterCrop(8)], layout="NCHW"), "layout"),
        (lambda: T.compile_pipeline([T.CenterCrop(8)], channels=4), "channels"),
    ],
)
def test_invalid_configurations_raise_config_error(make, needle):
    with pytest.raises(conveyor.ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        make()


@pytest.mark.parametrize(
    "make,needle",
    [
        (
            lambda: T.Resize(2**31),
            "Resize: size must be positive integers of at most 2147483647, got 2147483648",
        ),
        (
            lambda: T.Resize((8, np.int64(2**40))),
            "Resize: size must be positive integers of at most 2147483647, got [8, 1099511627776]",
        ),
        (
            lambda: T.CenterCrop(2**63),
            "CenterCrop: size must be positive integers of at most 2147483647, got [",
        ),
        (
            lambda: T.RandomResizedCrop((2**31, 8)),
            "RandomResizedCrop: size must be positive integers of at most 2147483647, got [2147483648, 8]",
        ),
    ],
)
def test_sizes_beyond_a_cpp_int_are_config_errors_at_construction(make, needle):
    with pytest.raises(conveyor.ConfigError, match=re.escape(needle)):
        make()
    assert T.Resize(np.int64(2**31 - 1)).size == 2**31 - 1  # numpy ints are ints


def png_header(width, height):
    """A PNG whose header claims width x height (RGB); the pixel data is a stub."""

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"\x78\x9c") + chunk(b"IEND", b"")


def test_resized_side_beyond_a_cpp_int_is_too_large_naming_the_file(tmp_path):
    # 1 x 178956970 pixels is exactly the default max_pixels; Resize(256) would
    # make it 256 x 45812984320 (it wrapped before: a garbage or zero image).
    from conveyor.sources import ImageFolder

    (tmp_path / "c" / "0").mkdir(parents=True)
    wide = tmp_path / "c" / "0" / "wide.png"
    wide.write_bytes(png_header(178956970, 1))
    loader = conveyor.Loader(ImageFolder(tmp_path / "c"), [T.Resize(256), T.CenterCrop(224)], batch_size=1)
    with pytest.raises(conveyor.TooLargeError) as info:
        list(loader)
    assert str(info.value) == (
        f"{wide}: Resize(256) of a 178956970x1 image: the long side 45812984320 does not fit in an int"
    )
    pipeline = T.compile_pipeline([T.Resize(256), T.CenterCrop(224)])
    with pytest.raises(conveyor.TooLargeError, match="the long side 45812984320 does not fit"):
        pipeline.apply(png_header(1, 178956970))


# --- the registry: one Python class per registered C++ transform ---------------------
def test_every_transform_class_names_a_registered_cpp_transform():
    names = {cls.name for cls in T.Transform.registered.values()}
    assert names == set(_conveyor.registered_transforms())
    assert {
        "Resize",
        "CenterCrop",
        "RandomResizedCrop",
        "RandomHorizontalFlip",
        "Normalize",
        "RandomCrop",
        "Pad",
        "RandomVerticalFlip",
        "RandomRotation",
        "RandomAffine",
        "RandomPerspective",
        "ColorJitter",
        "Grayscale",
        "RandomGrayscale",
        "GaussianBlur",
        "RandomInvert",
        "RandomPosterize",
        "RandomSolarize",
        "RandomAdjustSharpness",
        "RandomAutocontrast",
        "RandomEqualize",
    } <= set(T.Transform.registered)


@pytest.fixture
def own_registry(monkeypatch):
    """Transform classes defined by a test are registered only for that test."""
    monkeypatch.setattr(T.Transform, "registered", dict(T.Transform.registered))


def test_a_new_transform_is_one_python_class(own_registry):
    # No binding code: the class names a registered C++ transform and gives
    # its parameters; the error texts and the fixed-size check follow.
    class AlwaysMirror(T.Transform, name="horizontal_flip"):
        def _params(self):
            return {"p": 1.0}

    class Crop16(T.Transform, name="center_crop"):
        def _params(self):
            return {"size": 16}

    jpeg = jpeg_of("chelsea")
    expected = ours([T.CenterCrop(16), T.RandomHorizontalFlip(1.0)], jpeg)
    np.testing.assert_array_equal(ours([Crop16(), AlwaysMirror()], jpeg), expected)
    with pytest.raises(conveyor.ConfigError, match=r"Resize, .*, AlwaysMirror, Crop16\)$"):
        T.compile_pipeline([object()])
    with pytest.raises(conveyor.ConfigError, match=r"do not give a fixed output size"):
        T.compile_pipeline([AlwaysMirror()])


def test_unknown_transform_names_and_arguments_are_config_errors(own_registry):
    class Rotate(T.Transform, name="rotate"):
        def _params(self):
            return {}

    class Flip(T.Transform, name="horizontal_flip"):
        def _params(self):
            return {"prob": 0.5}

    with pytest.raises(conveyor.ConfigError) as info:
        T.compile_pipeline([T.CenterCrop(8), Rotate()])
    registered = ", ".join(sorted(_conveyor.registered_transforms()))
    assert str(info.value) == f"transform 1 unknown transform 'rotate' (registered: {registered})"
    assert registered.startswith("aug_mix, auto_augment, center_crop, color_jitter, gaussian_blur, ")
    with pytest.raises(
        conveyor.ConfigError, match=r"^transform 1 RandomHorizontalFlip: unknown argument 'prob'$"
    ):
        T.compile_pipeline([T.CenterCrop(8), Flip()])


def test_foreign_transform_is_named():
    class ToTensor:  # stands in for a torchvision transform
        pass

    with pytest.raises(conveyor.ConfigError, match="test_transforms.*ToTensor.*not a conveyor transform"):
        T.compile_pipeline([T.CenterCrop(8), ToTensor()])


def test_sample_shape_and_dtype():
    p = T.compile_pipeline([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])
    assert isinstance(p, _conveyor.SampleTransform)
    assert list(p.sample_shape) == [3, 224, 224] and p.dtype == "float32"
    p = T.compile_pipeline([T.Resize((32, 48))], dtype="float16", layout="HWC", channels=1)
    assert list(p.sample_shape) == [32, 48, 1] and p.dtype == "float16"
    assert math.isclose(T.RandomResizedCrop(10).ratio[1], 4 / 3)


# --- inside the Loader ------------------------------------------------------------------------
def test_loader_batches_equal_the_pipeline_per_sample(tmp_path):
    # Each batch slot is the pipeline's output for that sample's (seed, epoch, index) stream.
    from conveyor.sources import ImageFolder

    for k, name in enumerate(PHOTOS):
        os.makedirs(tmp_path / "c" / str(k))
        (tmp_path / "c" / str(k) / f"{name}.jpg").write_bytes(jpeg_of(name, quality=85))
    source = ImageFolder(tmp_path / "c")
    chain = [T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)]
    loader = conveyor.Loader(source, chain, batch_size=3, shuffle=False, seed=11, threads=2)
    for epoch in range(2):
        (images, _labels), *_ = list(loader)
        pipeline = T.compile_pipeline(chain)
        for index, path in enumerate(source.paths):
            expected = np.asarray(pipeline.apply(open(path, "rb").read(), 11, epoch, index))
            np.testing.assert_array_equal(np.asarray(images[index]), expected)


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize(("height", "width"), [(24, 42017), (40000, 3)])
def test_sides_beyond_opencv_warp_limit(height, width, antialias):
    # OpenCV's warpAffine refuses images with a side >= 32767; found by the
    # pipeline fuzzer with a full (not crop-window) decode of a 42017-wide JPEG.
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    for chain in (
        [T.Resize((16, 16), antialias=antialias)._spec()],
        [T.CenterCrop((20, 3))._spec(), T.Resize((40, 6), antialias=antialias)._spec()],
    ):
        options = {"dtype": "uint8", "layout": "HWC", "crop_decode": False, "dct_scale": False}
        pipeline = _conveyor.ImagePipeline(chain, **options)
        out = pipeline.apply(buffer.getvalue())
        assert out.shape[2] == 3
    # The whole-image shrink averages what it covers: close to the image mean.
    whole = _conveyor.ImagePipeline([T.Resize((1, 1))._spec()], dtype="uint8", layout="HWC")
    assert np.abs(whole.apply(buffer.getvalue()).astype(float) - image.mean(axis=(0, 1))).max() < 3


@pytest.mark.parametrize(
    "make", [lambda a: T.Resize(8, antialias=a), lambda a: T.RandomResizedCrop(8, antialias=a)]
)
def test_antialias_must_be_a_bool(make):
    # Regression: antialias="no" was truthy, so it antialiased.
    with pytest.raises(conveyor.ConfigError, match="antialias must be True or False, got 'no'"):
        make("no")
    assert make(np.bool_(False)).antialias is False


# The required arguments of each registered class, for constructing one.
_REQUIRED = {
    "CenterCrop": {"size": 4},
    "GaussianBlur": {"kernel_size": 3},
    "Normalize": {"mean": [0.5], "std": [0.5]},
    "Pad": {"padding": 1},
    "RandomAdjustSharpness": {"sharpness_factor": 2},
    "RandomAffine": {"degrees": 5},
    "RandomCrop": {"size": 4},
    "RandomPosterize": {"bits": 4},
    "RandomResizedCrop": {"size": 4},
    "RandomRotation": {"degrees": 5},
    "RandomSolarize": {"threshold": 128},
    "Resize": {"size": 4},
    "RandomApply": {"transforms": [T.RandomInvert()]},
    "RandomChoice": {"transforms": [T.RandomInvert()]},
    "RandomOrder": {"transforms": [T.RandomInvert()]},
}


@pytest.mark.parametrize("name", sorted(T.Transform.registered))
def test_every_transform_hands_its_arguments_to_the_engine_once_at_construction(name, monkeypatch):
    calls = []
    monkeypatch.setattr(conveyor._conveyor, "check_transform", calls.append)
    cls = T.Transform.registered[name]
    transform = cls(**_REQUIRED.get(name, {}))
    assert calls == [transform._spec()]
    assert calls[0][0] == cls.name


def test_engine_defaults_are_the_factorys_fallbacks():
    from conveyor.transforms.base import engine_defaults

    assert engine_defaults("random_resized_crop", size=4) == {
        "scale": (0.08, 1.0),
        "ratio": (3 / 4, 4 / 3),
        "interpolation": 1.0,
        "antialias": 1.0,
    }
    assert engine_defaults("horizontal_flip", p=0.25) == {}
    with pytest.raises(conveyor.ConfigError, match="^CenterCrop: size is required$"):
        engine_defaults("center_crop")


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: T.Resize(10**400), "Resize: size must be positive integers of at most 2147483647, got inf"),
        (lambda: T.RandomPosterize(10**400), "RandomPosterize: bits must be finite, got inf"),
        (lambda: T.RandAugment(num_ops=-(10**400)), "RandAugment: num_ops must be finite, got -inf"),
        (
            lambda: T.RandomErasing(scale="01"),
            "RandomErasing: scale must be a pair of numbers (lo, hi), got '01'",
        ),
        (
            lambda: T.RandomResizedCrop(8, ratio=(False, True)),
            "RandomResizedCrop: ratio must be a pair of numbers (lo, hi), got (False, True)",
        ),
    ],
)
def test_numbers_beyond_a_double_and_pairs_of_the_wrong_type_are_config_errors(make, message):
    with pytest.raises(conveyor.ConfigError) as info:
        make()
    assert str(info.value) == message
