"""Full-image decode (conveyor._conveyor.decode_image) against PIL.

Inputs are generated here with PIL from scikit-image's bundled photos. PIL's
wheel and conveyor both decode JPEG with libjpeg-turbo's default (ISLOW IDCT,
fancy upsampling); the versions differ (PIL bundles 3.x, Debian 2.1.5) but
their output is identical, so JPEG parity is asserted exactly.
"""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageOps
from skimage import data

import conveyor
from conftest import tiff_bytes
from conveyor import _conveyor
from conveyor.sources import FileList


def photo(name="astronaut", size=None):
    img = Image.fromarray(getattr(data, name)())
    return img if size is None else img.resize(size, Image.BILINEAR)


def encode(img, fmt="JPEG", **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def pil_rgb(data_bytes):
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data_bytes))).convert("RGB"))


def decode(data_bytes, **kw):
    return np.asarray(_conveyor.decode_image(data_bytes, **kw))


@pytest.mark.parametrize(
    "options",
    [
        {"quality": 90},
        {"quality": 75, "progressive": True},
        {"quality": 90, "subsampling": 0},  # 4:4:4
        {"quality": 90, "subsampling": 1},  # 4:2:2
        {"quality": 90, "subsampling": 2},  # 4:2:0
        {"quality": 60, "subsampling": 2, "progressive": True},
    ],
)
@pytest.mark.parametrize("name", ["astronaut", "chelsea"])
def test_jpeg_equals_pil_exactly(name, options):
    # Odd sizes: partial MCUs at the right and bottom edges.
    jpeg = encode(photo(name, (301, 203)), **options)
    ours = decode(jpeg)
    assert ours.dtype == np.uint8 and ours.shape == (203, 301, 3)
    np.testing.assert_array_equal(ours, pil_rgb(jpeg))


def test_gray_jpeg_equals_pil():
    jpeg = encode(photo("camera"))
    np.testing.assert_array_equal(decode(jpeg), pil_rgb(jpeg))
    gray = decode(jpeg, channels=1)
    assert gray.shape == (512, 512, 1)
    np.testing.assert_array_equal(gray[..., 0], np.asarray(Image.open(io.BytesIO(jpeg))))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_as_pil_exif_transpose(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    jpeg = encode(photo("chelsea", (120, 80)), quality=92, exif=exif)
    ours = decode(jpeg)
    ref = pil_rgb(jpeg)
    assert ours.shape == ref.shape == ((120, 80, 3) if orientation >= 5 else (80, 120, 3))
    np.testing.assert_array_equal(ours, ref)
    assert _conveyor.read_image_info(jpeg)[1:] == (ref.shape[0], ref.shape[1], orientation)


def test_cmyk_jpeg_converted_like_pil():
    # PIL writes Adobe-inverted CMYK and converts with R = (255 - C)(255 - K) / 255.
    jpeg = encode(photo("coffee").convert("CMYK"), quality=95)
    diff = np.abs(decode(jpeg).astype(int) - np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")))
    assert diff.max() <= 1


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P", "PA"])
def test_png_8bit_equals_pil_convert_rgb(mode):
    img = photo("chelsea", (97, 61))
    if mode in ("P", "PA"):
        img = img.quantize(64)
        if mode == "PA":
            img.info["transparency"] = 3  # palette entry 3 transparent: colour kept, alpha dropped
    else:
        img = img.convert(mode)
        if "A" in mode:
            alpha = Image.linear_gradient("L").resize(img.size)
            img.putalpha(alpha)
    png = encode(img, "PNG", **({"transparency": 3} if mode == "PA" else {}))
    ref = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    np.testing.assert_array_equal(decode(png), ref)


def _png(width, height, color_type, samples):
    """A minimal 16-bit PNG (PIL cannot write 16-bit RGB)."""
    raw = b"".join(b"\x00" + samples[y].astype(">u2").tobytes() for y in range(height))

    def chunk(tag, payload):
        return struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", zlib.crc32(tag + payload))

    ihdr = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def test_png_16bit_rgb_keeps_high_byte_like_pil():
    rng = np.random.default_rng(0)
    samples = rng.integers(0, 65536, size=(20, 30, 3), dtype=np.uint16)
    png = _png(30, 20, 2, samples.reshape(20, 90))
    np.testing.assert_array_equal(decode(png), np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
    np.testing.assert_array_equal(decode(png), (samples >> 8).astype(np.uint8))


def test_png_16bit_gray_is_scaled_down():
    # PIL opens 16-bit gray as mode I;16 and convert("RGB") clips to 255 (it
    # does not scale); conveyor scales (high byte), as for 16-bit RGB.
    samples = np.arange(20 * 30, dtype=np.uint16).reshape(20, 30) * 100
    png = _png(30, 20, 0, samples)
    expected = (samples >> 8).astype(np.uint8)
    np.testing.assert_array_equal(decode(png), np.repeat(expected[..., None], 3, axis=2))


def test_webp_lossless_exact_and_lossy_close():
    img = photo("coffee", (150, 100))
    lossless = encode(img, "WEBP", lossless=True)
    np.testing.assert_array_equal(decode(lossless), np.asarray(img))
    rgba = img.copy()
    rgba.putalpha(128)
    np.testing.assert_array_equal(decode(encode(rgba, "WEBP", lossless=True)), np.asarray(img))
    lossy = encode(img, "WEBP", quality=80)
    diff = np.abs(decode(lossy).astype(int) - pil_rgb(lossy))
    assert diff.mean() < 1.0  # PIL bundles a newer libwebp than Debian's 1.2.4


def test_format_comes_from_bytes_not_names():
    jpeg = encode(photo("chelsea", (40, 30)))
    png = encode(photo("chelsea", (40, 30)), "PNG")
    assert _conveyor.read_image_info(jpeg)[0] == "jpeg"
    assert _conveyor.read_image_info(png)[0] == "png"


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"\xff\xd8\xff",
        b"hello, I am a text file\n",
        b"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
        bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8)),
    ],
)
def test_bad_bytes_raise_decode_error(bad):
    with pytest.raises(conveyor.DecodeError):
        _conveyor.decode_image(bad)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_truncated_images_raise(fmt):
    full = encode(photo("chelsea", (200, 150)), fmt)
    for cut in (10, 40, len(full) // 2, len(full) - 30):
        with pytest.raises(conveyor.DecodeError):
            _conveyor.decode_image(full[:cut])


def test_pixel_limit_raises_too_large_before_decoding():
    jpeg = encode(photo("chelsea", (200, 150)))
    with pytest.raises(conveyor.TooLargeError, match="max_pixels=29999"):
        _conveyor.decode_image(jpeg, max_pixels=29999)
    assert decode(jpeg, max_pixels=30000).shape == (150, 200, 3)
    assert issubclass(conveyor.TooLargeError, conveyor.DecodeError)


# --- gray output ---------------------------------------------------------------


def test_gray_output_of_rgb_images_is_pils_luma_exactly():
    # Regression: OpenCV's RGB2GRAY rounds differently from PIL's convert("L")
    # (off by one on about a third of random pixels).
    rgb = np.random.default_rng(5).integers(0, 256, (31, 47, 3), dtype=np.uint8)
    png = encode(Image.fromarray(rgb), "PNG")
    gray = decode(png, channels=1)
    assert gray.shape == (31, 47, 1)
    np.testing.assert_array_equal(gray[..., 0], np.asarray(Image.open(io.BytesIO(png)).convert("L")))


# --- TIFF ------------------------------------------------------------------------


def pil_tiff(data_bytes, mode="RGB"):
    # PIL applies a TIFF's Orientation tag when it opens the file.
    return np.asarray(Image.open(io.BytesIO(data_bytes)).convert(mode))


def assert_tiff_equals_pil(tiff):
    info = _conveyor.read_image_info(tiff)
    rgb = decode(tiff)
    np.testing.assert_array_equal(rgb, pil_tiff(tiff))
    assert info[:3] == ("tiff", rgb.shape[0], rgb.shape[1])
    np.testing.assert_array_equal(decode(tiff, channels=1)[..., 0], pil_tiff(tiff, "L"))


RNG = np.random.default_rng(11)
U8 = RNG.integers(0, 256, (13, 37, 4), dtype=np.uint8)
U16 = RNG.integers(0, 65536, (13, 37, 4), dtype=np.uint16)
PALETTE16 = RNG.integers(0, 65536, (256, 3), dtype=np.uint16)


@pytest.mark.parametrize(
    "name, tiff",
    [
        ("rgb8", tiff_bytes(U8[..., :3], 2)),
        ("rgb16", tiff_bytes(U16[..., :3], 2)),  # PIL keeps the high byte.
        ("rgb16 big-endian", tiff_bytes(U16[..., :3], 2, big_endian=True)),
        ("rgba8 unassociated alpha", tiff_bytes(U8, 2, extra=(2,))),
        ("rgba8 associated alpha", tiff_bytes(U8, 2, extra=(1,))),  # Divided out, as PIL.
        ("rgba16", tiff_bytes(U16, 2, extra=(2,))),
        ("rgb8 planar", tiff_bytes(U8[..., :3], 2, planar=2)),
        ("rgb8 tiled", tiff_bytes(U8[..., :3], 2, tile=(16, 16))),
        ("rgb8 strips", tiff_bytes(U8[..., :3], 2, rows_per_strip=4)),
        ("gray8", tiff_bytes(U8[..., 0], 1)),
        ("gray8 min-is-white", tiff_bytes(U8[..., 0], 0)),
        ("gray+alpha", tiff_bytes(U8[..., :2], 1, extra=(2,))),
        ("cmyk8", tiff_bytes(U8, 5)),
        ("cmyk16", tiff_bytes(U16, 5)),
        ("palette8", tiff_bytes(U8[..., 0], 3, colormap=PALETTE16)),
    ],
)
def test_tiff_equals_pil(name, tiff):
    assert_tiff_equals_pil(tiff)


TIFF_COMPRESSIONS = ["tiff_lzw", "tiff_deflate", "tiff_adobe_deflate", "packbits", "lzma", "zstd", "jpeg"]


@pytest.mark.parametrize(
    "mode, compression",
    [
        (mode, compression)
        for mode in ["RGB", "RGBA", "L", "LA", "P", "CMYK", "1"]
        for compression in TIFF_COMPRESSIONS
        if compression != "jpeg" or mode in ("RGB", "L", "CMYK")  # What PIL writes as JPEG-in-TIFF.
    ],
)
def test_compressed_tiff_written_by_pil_equals_pil(mode, compression):
    img = photo("chelsea", (61, 43)).convert(mode)
    assert_tiff_equals_pil(encode(img, "TIFF", compression=compression))


@pytest.mark.parametrize("compression", ["group4", "group3", "tiff_ccitt"])
def test_bilevel_tiff_ccitt_equals_pil(compression):
    img = photo("camera", (67, 45)).convert("1")
    assert_tiff_equals_pil(encode(img, "TIFF", compression=compression))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_tiff_orientation_tag_applied_as_pil(orientation):
    tiff = tiff_bytes(U8[..., :3], 2, orientation=orientation)
    assert_tiff_equals_pil(tiff)
    assert _conveyor.read_image_info(tiff) == ("tiff", *pil_tiff(tiff).shape[:2], orientation)


def test_multipage_tiff_gives_the_first_page():
    first, second = photo("chelsea", (40, 30)), photo("coffee", (50, 20))
    tiff = encode(first, "TIFF", save_all=True, append_images=[second])
    assert Image.open(io.BytesIO(tiff)).n_frames == 2
    np.testing.assert_array_equal(decode(tiff), np.asarray(first))


@pytest.mark.parametrize("layout", [{"planar": 2}, {"planar": 2, "tile": (16, 16)}, {"tile": (16, 32)}])
def test_tiff_16bit_rgb_planar_and_tiled_keep_the_high_byte(layout):
    # PIL itself misreads 16-bit planar RGB (its result is not the high bytes
    # of the stored samples), so the stored samples are the reference here.
    tiff = tiff_bytes(U16[..., :3], 2, **layout)
    np.testing.assert_array_equal(decode(tiff), (U16[..., :3] >> 8).astype(np.uint8))


def test_tiff_16bit_gray_keeps_the_high_byte():
    # As for 16-bit gray PNG: PIL opens it as mode I;16 and convert("L"/"RGB")
    # clips at 255 (almost every pixel white); conveyor keeps the high byte,
    # as PIL does for 16-bit RGB.
    for tiff in (tiff_bytes(U16[..., 0], 1), encode(Image.fromarray(U16[..., 0]), "TIFF")):
        expected = (U16[..., 0] >> 8).astype(np.uint8)
        np.testing.assert_array_equal(decode(tiff, channels=1)[..., 0], expected)
        np.testing.assert_array_equal(decode(tiff), np.repeat(expected[..., None], 3, axis=2))


def test_tiff_errors_name_the_cause_and_print_nothing(capfd):
    good = tiff_bytes(U8[..., :3], 2)
    lzw = encode(photo("chelsea", (40, 30)), "TIFF", compression="tiff_lzw")
    float32 = encode(Image.fromarray(U8[..., 0].astype(np.float32)), "TIFF")
    cases = [
        (good[:6], "TIFF: invalid or truncated header"),
        (lzw[:300], "TIFF: "),
        (float32, "TIFF: unsupported sample format 3"),
        (tiff_bytes(U8[..., :3], 6), r"TIFF: unsupported image type \(photometric 6, 8-bit, 3"),  # YCbCr
        (tiff_bytes(np.zeros((4, 4, 9), np.uint8), 1), "TIFF: unsupported 9 samples per pixel"),
    ]
    for bad, message in cases:
        with pytest.raises(conveyor.DecodeError, match=message):
            _conveyor.decode_image(bad)
    huge = tiff_bytes(U8[..., :3], 2, size=(100_000, 100_000))
    with pytest.raises(conveyor.TooLargeError, match="TIFF image of 100000x100000"):
        _conveyor.read_image_info(huge)
    wide = tiff_bytes(U8[..., :3], 2, size=(2**31, 1))
    with pytest.raises(
        conveyor.TooLargeError, match=r"TIFF image of 2147483648x1: a side exceeds 2\*\*31 - 1"
    ):
        _conveyor.read_image_info(wide, max_pixels=2**40)
    # libtiff's error and warning handlers are replaced: nothing reaches stderr.
    assert capfd.readouterr().err == ""


# --- EXIF orientation of PNG and WebP, animated WebP ---------------------------------


@pytest.mark.parametrize("fmt, options", [("PNG", {}), ("WEBP", {"lossless": True})])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_png_and_webp_exif_orientation_as_pil_exif_transpose(fmt, options, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data_bytes = encode(photo("chelsea", (120, 80)), fmt, exif=exif, **options)
    ref = pil_rgb(data_bytes)
    assert ref.shape == ((120, 80, 3) if orientation >= 5 else (80, 120, 3))
    np.testing.assert_array_equal(decode(data_bytes), ref)
    assert _conveyor.read_image_info(data_bytes) == (fmt.lower(), ref.shape[0], ref.shape[1], orientation)


@pytest.mark.parametrize("options", [{"lossless": True}, {"quality": 90}])
def test_animated_webp_gives_the_first_frame(options):
    frames = [photo("chelsea", (70, 50))] + [Image.new("RGB", (70, 50), (v, 255 - v, 30)) for v in (10, 200)]
    webp = encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100, **options)
    assert Image.open(io.BytesIO(webp)).n_frames == 3
    ref = np.asarray(Image.open(io.BytesIO(webp)).convert("RGB"))
    np.testing.assert_array_equal(decode(webp), ref)
    if options.get("lossless"):
        np.testing.assert_array_equal(decode(webp), np.asarray(frames[0]))


def test_animated_webp_first_frame_smaller_than_the_canvas():
    # The canvas around a smaller first frame is transparent black (libwebp's
    # animation decoder, which PIL uses); alpha dropped.
    frames = [Image.new("RGBA", (70, 50), (0, 0, 0, 0)) for _ in range(2)]
    frames[0].paste(photo("chelsea", (30, 20)), (10, 6))
    frames[1].paste(photo("coffee", (30, 20)), (30, 20))
    webp = encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    np.testing.assert_array_equal(decode(webp), np.asarray(Image.open(io.BytesIO(webp)).convert("RGB")))


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "TIFF", "animated WEBP"])
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_crop_of_an_oriented_image_through_the_loader(tmp_path, fmt, orientation):
    # The pipeline asks the decoder for a region (displayed coordinates): the
    # still-WebP crop-window path and the full-decode-then-view path must both
    # give PIL's exif_transpose + CenterCrop, exactly.
    exif = Image.Exif()
    exif[0x0112] = orientation
    img = photo("chelsea", (91, 67))
    if fmt == "TIFF":
        data_bytes = encode(img, "TIFF", tiffinfo={0x0112: orientation})
    elif fmt == "animated WEBP":
        frames = {"save_all": True, "append_images": [img.rotate(90)]}
        data_bytes = encode(img, "WEBP", lossless=True, exif=exif, **frames)
    else:
        data_bytes = encode(img, fmt, exif=exif, **({"lossless": True} if fmt == "WEBP" else {}))
    path = tmp_path / "image"
    path.write_bytes(data_bytes)
    reference = ImageOps.exif_transpose(Image.open(io.BytesIO(data_bytes))).convert("RGB")
    width, height = reference.size
    left, top = (width - 41) // 2, (height - 29) // 2
    expected = np.asarray(reference.crop((left, top, left + 41, top + 29)))
    crop = conveyor.transforms.CenterCrop((29, 41))
    loader = conveyor.Loader(conveyor.sources.FileList([path]), [crop], batch_size=1, dtype="uint8")
    with loader:
        (images, _), *_ = list(loader)
    np.testing.assert_array_equal(np.asarray(images)[0].transpose(1, 2, 0), expected)


@pytest.mark.parametrize("fmt", ["TIFF", "PNG", "WEBP"])
def test_gray_output_of_colour_images_through_a_resizing_pipeline(fmt):
    # channels=1 of a colour image must equal the same pipeline on PIL's "L"
    # of it: the decoder's gray view must not live in a buffer the resize
    # reuses (a strong downscale prefilters into the scratch buffers).
    from conveyor import transforms as T

    img = photo("coffee", (160, 120))
    colour = encode(img, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    gray = encode(img.convert("L"), "PNG")
    pipeline = T.compile_pipeline([T.Resize((20, 30))], dtype="uint8", layout="HWC", channels=1)
    ours = np.asarray(pipeline.apply(colour, 0, 0, 0))
    np.testing.assert_array_equal(ours, np.asarray(pipeline.apply(gray, 0, 0, 0)))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_the_loader_matches_torchvisions_image_folder_with_exif_orientation_off(tmp_path, fmt):
    # torchvision's ImageFolder opens with PIL and converts: the EXIF tag is
    # left out, a TIFF's own Orientation tag is applied (PIL applies it).
    options = {"JPEG": {"quality": 95, "subsampling": 0}, "WEBP": {"lossless": True}}.get(fmt, {})
    paths = []
    for orientation in range(1, 9):
        path = tmp_path / f"{orientation}.{fmt.lower()}"
        if fmt == "TIFF":
            path.write_bytes(tiff_bytes(U8[..., :3], 2, orientation=orientation))
        else:
            exif = Image.Exif()
            exif[0x0112] = orientation
            path.write_bytes(encode(photo("chelsea", (60, 40)), fmt, exif=exif, **options))
        paths.append(path)

    def images(**kwargs):
        loader = conveyor.Loader(FileList(paths), batch_size=8, dtype="uint8", layout="HWC", **kwargs)
        ((batch, _),) = list(loader)
        return [image.numpy() for image in batch]

    stored = images(exif_orientation=False)
    turned = images()
    for path, ours, default in zip(paths, stored, turned):
        with Image.open(path) as opened:
            np.testing.assert_array_equal(ours, np.asarray(opened.convert("RGB")), err_msg=path.name)
        np.testing.assert_array_equal(default, pil_rgb(path.read_bytes()), err_msg=path.name)
