"""BMP, PNM and GIF decode (conveyor._conveyor.decode_image) against PIL.

torchvision's ImageFolder lists .bmp, .ppm and .pgm, and web-scraped sets hold
GIFs under any name; the pixels must be those of torchvision's loader,
``Image.open(f).convert("RGB")`` (``"L"`` for one channel). Files PIL writes
are used where it writes the variant; the others (16/32-bit bit fields, RLE,
OS/2 headers, plain PNM, GIF frames offset on a larger screen) are built here
byte by byte.
"""

import io
import struct

import numpy as np
import pytest
from PIL import Image

import conveyor
from conveyor import _conveyor

RNG = np.random.default_rng(11)
RGB = RNG.integers(0, 256, (19, 23, 3), dtype=np.uint8)


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def decode(data: bytes, **kw) -> np.ndarray:
    return np.asarray(_conveyor.decode_image(data, **kw))


def assert_equals_pil(data: bytes, fmt: str) -> None:
    ours = decode(data)
    pil = Image.open(io.BytesIO(data))
    np.testing.assert_array_equal(ours, np.asarray(pil.convert("RGB")))
    np.testing.assert_array_equal(decode(data, channels=1)[..., 0], np.asarray(pil.convert("L")))
    info = _conveyor.read_image_info(data)
    assert info[:3] == (fmt, ours.shape[0], ours.shape[1])


# --- BMP -------------------------------------------------------------------------


def bmp(
    bits: int,
    rows: list[bytes],
    *,
    width: int,
    compression: int = 0,
    masks: tuple[int, ...] = (),
    palette: list[tuple[int, int, int]] | None = None,
    top_down: bool = False,
    header_size: int = 40,
    pixel_data: bytes | None = None,
) -> bytes:
    """A BMP file; `rows` are the stored rows (bottom-up unless `top_down`)
    before padding; `pixel_data` replaces them (RLE)."""
    height = len(rows) if pixel_data is None else None
    if pixel_data is None:
        stride = (width * bits + 31) // 32 * 4
        pixel_data = b"".join(r.ljust(stride, b"\0") for r in rows)
    entry = 3 if header_size == 12 else 4
    pal = b"".join(bytes([b, g, r, 0][:entry]) for r, g, b in (palette or []))
    h = height if height is not None else 0
    if header_size == 12:
        info = struct.pack("<IHHHH", 12, width, h, 1, bits)
    else:
        info = struct.pack(
            "<IiiHHIIiiII",
            header_size,
            width,
            -h if top_down else h,
            1,
            bits,
            compression,
            len(pixel_data),
            0,
            0,
            len(palette or []),
            0,
        )
        extra = struct.pack(f"<{len(masks)}I", *masks)
        info = (info + extra).ljust(header_size, b"\0") if header_size > 40 else info + extra
    offset = 14 + len(info) + len(pal)
    return b"BM" + struct.pack("<IHHI", offset + len(pixel_data), 0, 0, offset) + info + pal + pixel_data


def rle_bmp(bits: int, width: int, height: int, stream: bytes, palette) -> bytes:
    data = bmp(bits, [], width=width, compression=1 if bits == 8 else 2, palette=palette, pixel_data=stream)
    # The height is not implied by RLE data: patch it in.
    return data[:22] + struct.pack("<i", height) + data[26:]


PALETTE = [tuple(int(v) for v in RNG.integers(0, 256, 3)) for _ in range(256)]
INDICES = RNG.integers(0, 256, (7, 9), dtype=np.uint8)
WORDS = RNG.integers(0, 65536, (7, 9), dtype=np.uint16)
DWORDS = RNG.integers(0, 2**32, (7, 9), dtype=np.uint32)


def without_offset(data: bytes) -> bytes:
    """The BMP with its pixel-data offset field set to 0."""
    return data[:10] + b"\0\0\0\0" + data[14:]


def nibbles(row: np.ndarray) -> bytes:
    padded = np.append(row, 0) if len(row) % 2 else row
    return bytes((padded[0::2] << 4) | padded[1::2])


BMP_CASES = {
    "pil rgb": encode(Image.fromarray(RGB), "BMP"),
    "pil palette": encode(Image.fromarray(RGB).quantize(200), "BMP"),
    "pil gray": encode(Image.fromarray(RGB[..., 0]), "BMP"),
    "pil 1-bit": encode(Image.fromarray(RGB[..., 0]).convert("1"), "BMP"),
    "pil rgba": encode(Image.fromarray(np.dstack([RGB, RGB[..., :1]])), "BMP"),
    "24-bit top-down": bmp(24, [r.tobytes() for r in RGB[:, :, ::-1]], width=23, top_down=True),
    "4-bit palette": bmp(4, [nibbles(r % 16) for r in INDICES], width=9, palette=PALETTE[:16]),
    "8-bit palette, indices past the table": bmp(
        8, [r.tobytes() for r in INDICES], width=9, palette=PALETTE[:100]
    ),
    "8-bit gray ramp of 16, indices past it": bmp(
        8, [r.tobytes() for r in INDICES], width=9, palette=[(i, i, i) for i in range(16)]
    ),
    "16-bit 555": bmp(16, [r.astype("<u2").tobytes() for r in WORDS & 0x7FFF], width=9),
    "16-bit 565 bit fields": bmp(
        16, [r.astype("<u2").tobytes() for r in WORDS], width=9, compression=3, masks=(0xF800, 0x7E0, 0x1F)
    ),
    "16-bit 555 bit fields": bmp(
        16, [r.astype("<u2").tobytes() for r in WORDS], width=9, compression=3, masks=(0x7C00, 0x3E0, 0x1F)
    ),
    "32-bit BGRX": bmp(32, [r.astype("<u4").tobytes() for r in DWORDS], width=9),
    "32-bit XBGR bit fields": bmp(
        32,
        [r.astype("<u4").tobytes() for r in DWORDS],
        width=9,
        compression=3,
        masks=(0xFF000000, 0xFF0000, 0xFF00),
    ),
    "32-bit RGBA bit fields, V5 header": bmp(
        32,
        [r.astype("<u4").tobytes() for r in DWORDS],
        width=9,
        compression=3,
        masks=(0xFF, 0xFF00, 0xFF0000, 0xFF000000),
        header_size=124,
    ),
    "OS/2 24-bit": bmp(24, [r.tobytes() for r in RGB], width=23, header_size=12),
    "OS/2 8-bit palette": bmp(8, [r.tobytes() for r in INDICES], width=9, header_size=12, palette=PALETTE),
    "pixel offset 0 (data after the header)": without_offset(
        bmp(8, [r.tobytes() for r in INDICES], width=9, palette=PALETTE[:16])
    ),
    "RLE8": rle_bmp(
        8,
        9,
        4,
        # A run of 5, a literal of 3 (padded to a word), end of line; a delta
        # (+2, +1); a run past the row's end (clipped), end of line; a whole
        # row. PIL refuses data that ends before the last pixel.
        bytes([5, 7, 0, 3, 1, 2, 3, 0, 0, 0, 0, 2, 2, 1, 12, 9, 0, 0, 9, 4, 0, 1]),
        PALETTE,
    ),
    "RLE4": rle_bmp(
        4, 9, 3, bytes([5, 0x12, 0, 3, 0x34, 0x50, 0, 0, 9, 0xAB, 0, 0, 9, 0xCD, 0, 1]), PALETTE[:16]
    ),
}


@pytest.mark.parametrize("name", list(BMP_CASES))
def test_bmp_equals_pil(name):
    assert_equals_pil(BMP_CASES[name], "bmp")


@pytest.mark.parametrize(
    "data, message",
    [
        (BMP_CASES["pil rgb"][:-5], r"BMP: truncated data \(1363 of 1368 bytes\)"),
        (BMP_CASES["pil rgb"][:30], "BMP: truncated header"),
        (BMP_CASES["pil palette"][:100], "BMP: truncated palette"),
        (
            bmp(24, [b"\0\0\0"], width=1, header_size=64)[:14] + struct.pack("<I", 20) + b"\0" * 40,
            "BMP: unsupported header size 20",
        ),
        (
            bmp(32, [b"\0" * 4], width=1, compression=3, masks=(0xF00, 0xF0, 0xF)),
            "BMP: unsupported bit field layout",
        ),
        (
            bmp(24, [b"\0" * 3], width=1, compression=4),
            r"BMP: unsupported compression 4 \(JPEG or PNG inside BMP\)",
        ),
        (bmp(2, [b"\0"], width=1, palette=PALETTE[:4]), "BMP: unsupported bit depth 2"),
        (rle_bmp(8, 9, 4, bytes([5, 7, 0, 3, 1]), PALETTE), "BMP: truncated RLE data"),
    ],
)
def test_bad_bmp_raises_naming_what_is_wrong(data, message):
    with pytest.raises(conveyor.DecodeError, match=message):
        decode(data)


def test_bmp_pixel_limit_is_checked_from_the_header():
    with pytest.raises(
        conveyor.TooLargeError, match="BMP image of 23x19 = 437 pixels exceeds max_pixels=436"
    ):
        decode(BMP_CASES["pil rgb"], max_pixels=436)


# --- PNM -------------------------------------------------------------------------


def pnm(magic: str, width: int, height: int, maxval: int | None, body: bytes, comment: str = "") -> bytes:
    header = f"{magic}\n{comment}{width} {height}\n" + ("" if maxval is None else f"{maxval}\n")
    return header.encode() + body


def ramp(maxval: int, channels: int) -> tuple[int, bytes]:
    """Every value 0..maxval, as one row of raw samples."""
    values = np.arange(maxval + 1)
    pixels = -(-len(values) // channels)
    values = np.resize(values, pixels * channels)
    dtype = ">u2" if maxval > 255 else np.uint8
    return pixels, values.astype(dtype).tobytes()


PNM_CASES = {
    "pil ppm": encode(Image.fromarray(RGB), "PPM"),
    "pil pgm": encode(Image.fromarray(RGB[..., 0]), "PPM"),
    "pil pbm": encode(Image.fromarray(RGB[..., 0]).convert("1"), "PPM"),
    "ppm maxval 1000": pnm("P6", *ramp(1000, 3)[:1], 1, 1000, ramp(1000, 3)[1]),
    "ppm maxval 65535": pnm("P6", 9, 7, 65535, WORDS.repeat(3).astype(">u2").tobytes()),
    "pgm maxval 100": pnm("P5", *ramp(100, 1)[:1], 1, 100, ramp(100, 1)[1]),
    "pgm maxval 7": pnm("P5", *ramp(7, 1)[:1], 1, 7, ramp(7, 1)[1]),
    "pgm values above maxval are clipped": pnm("P5", 3, 1, 100, bytes([99, 101, 255])),
    "pbm odd width": pnm("P4", 11, 3, None, bytes([0b10110011, 0b01100000, 0xFF, 0xE0, 0x00, 0x20])),
    "plain pbm": pnm("P1", 5, 2, None, b"10110\n0 1 0 0 1\n"),
    "plain pgm with comments": pnm(
        "P2", 3, 2, 15, b"0 7 15\n# a comment\n3 4 5\n", comment="# made by hand\n"
    ),
    "plain ppm": pnm("P3", 2, 1, 255, b"1 2 3  250 251 252\n"),
}


@pytest.mark.parametrize("name", list(PNM_CASES))
def test_pnm_equals_pil(name):
    assert_equals_pil(PNM_CASES[name], "pnm")


def test_16_bit_pgm_is_scaled_to_8_bits_where_pil_clips():
    # PIL opens a PGM with maxval > 255 as mode "I" and its convert("L")
    # clips at 255 (almost every pixel white); conveyor scales as PIL does
    # for a 16-bit PPM: round(v / maxval * 255), half to even.
    pixels, body = ramp(1000, 1)
    ours = decode(pnm("P5", pixels, 1, 1000, body))[0, :, 0]
    expected = [min(255, round(v / 1000 * 255)) for v in range(1001)]
    assert ours.tolist() == expected
    ppm = np.asarray(Image.open(io.BytesIO(PNM_CASES["ppm maxval 1000"])).convert("RGB")).reshape(-1)
    assert ppm[:1001].tolist() == expected


@pytest.mark.parametrize(
    "data, message",
    [
        (PNM_CASES["pil ppm"][:-1], r"PNM: truncated data \(1310 of 1311 bytes\)"),
        (b"P6\n23 19\n", r"PNM: truncated header \(no maxval\)"),
        (b"P6\n23 x\n255\n", "PNM: invalid header: expected the height as a decimal number"),
        (b"P5\n1 1\n0\n\0", r"PNM: maxval 0 is not in 1..65535"),
        (b"P5\n1 1\n70000\n\0\0", r"PNM: maxval 70000 is not in 1..65535"),
        (b"P2\n2 1\n100\n5 101\n", "PNM: sample 101 exceeds maxval 100"),
        (b"P2\n2 1\n100\n5", "PNM: truncated data"),
        (b"P1\n2 1\n1 2\n", "PNM: invalid character in bitmap data"),
        (b"P7\nWIDTH 1\n", r"unsupported image format PAM/PFM"),
    ],
)
def test_bad_pnm_raises_naming_what_is_wrong(data, message):
    with pytest.raises(conveyor.DecodeError, match=message):
        decode(data)


def test_pnm_pixel_limit_is_checked_from_the_header():
    with pytest.raises(conveyor.TooLargeError, match="PNM image of 100000x100000"):
        decode(b"P6\n100000 100000\n255\n")


# --- GIF -------------------------------------------------------------------------


def gif_records(data: bytes) -> tuple[int, int]:
    """Offsets of the logical screen size (6) and of the first image
    descriptor's left/top/width/height fields."""
    pos = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
    while data[pos] == 0x21:  # extension: label, then sub-blocks
        pos += 2
        while data[pos]:
            pos += data[pos] + 1
        pos += 1
    assert data[pos] == 0x2C
    return 6, pos + 1


def reframe(data: bytes, screen: tuple[int, int], left: int, top: int) -> bytes:
    """The GIF with its first frame moved to (left, top) on a screen of `screen`."""
    screen_at, image_at = gif_records(data)
    out = bytearray(data)
    out[screen_at : screen_at + 4] = struct.pack("<HH", *screen)
    out[image_at : image_at + 4] = struct.pack("<HH", left, top)
    return bytes(out)


FRAMES = [Image.fromarray(RNG.integers(0, 256, (19, 23, 3), dtype=np.uint8)).quantize(64) for _ in range(3)]
SMALL = Image.fromarray(RGB[:6, :5]).quantize(8)

GIF_CASES = {
    "single frame, interlaced": encode(FRAMES[0], "GIF"),
    "single frame, not interlaced": encode(FRAMES[0], "GIF", interlace=False),
    "animated: the first frame": encode(
        FRAMES[0], "GIF", save_all=True, append_images=FRAMES[1:], duration=40
    ),
    "gray": encode(Image.fromarray(RGB[..., 0]), "GIF"),
    "transparency": encode(FRAMES[0], "GIF", transparency=3),
    "frame inside a larger screen": reframe(encode(SMALL, "GIF"), (11, 9), 4, 2),
    "frame inside a larger screen, transparent fill": reframe(
        encode(SMALL, "GIF", transparency=5), (11, 9), 4, 2
    ),
    "frame sticking out of the screen": reframe(encode(SMALL, "GIF"), (6, 4), 3, 1),
    # 1x1, a table of two colours, LZW code size 8 and index 200 (PIL: black).
    "index past the colour table": b"GIF89a\x01\x00\x01\x00\x80\x00\x00"
    + bytes([10, 20, 30, 40, 50, 60])
    + b",\x00\x00\x00\x00\x01\x00\x01\x00\x00"
    + bytes([8, 4, 0x00, 0x91, 0x05, 0x04, 0])
    + b";",
}


@pytest.mark.parametrize("name", list(GIF_CASES))
def test_gif_equals_pil(name):
    assert_equals_pil(GIF_CASES[name], "gif")


@pytest.mark.parametrize(
    "data, message",
    [
        (GIF_CASES["single frame, interlaced"][:-40], "GIF: truncated data"),
        (GIF_CASES["single frame, interlaced"][:8], "GIF: "),
        (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "GIF: no image"),
    ],
)
def test_bad_gif_raises_naming_what_is_wrong(data, message):
    with pytest.raises(conveyor.DecodeError, match=message):
        decode(data)


def test_gif_pixel_limit_counts_the_screen():
    data = reframe(encode(SMALL, "GIF"), (1000, 1000), 0, 0)
    with pytest.raises(conveyor.TooLargeError, match="GIF image of 1000x1000"):
        decode(data, max_pixels=999_999)


# --- through the loader ------------------------------------------------------------


def test_image_folder_reads_bmp_ppm_pgm_and_a_gif_named_jpg(tmp_path):
    images = {
        "a/x.bmp": BMP_CASES["pil rgb"],
        "a/y.ppm": PNM_CASES["pil ppm"],
        "b/z.pgm": PNM_CASES["pil pgm"],
        "b/w.jpg": GIF_CASES["single frame, interlaced"],  # a GIF under a JPEG name
    }
    for name, data in images.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    source = conveyor.sources.ImageFolder(tmp_path)
    assert sorted(source.paths) == sorted(str(tmp_path / n) for n in images)
    loader = conveyor.Loader(
        source, batch_size=4, transforms=[conveyor.transforms.Resize((8, 8))], dtype="uint8", shuffle=False
    )
    images_out, labels = next(iter(loader))
    assert tuple(images_out.shape) == (4, 3, 8, 8) and labels.tolist() == [0, 0, 1, 1]
