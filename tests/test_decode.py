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
from conveyor import _conveyor


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


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
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
