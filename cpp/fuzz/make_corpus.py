"""Writes the seed corpora of the fuzz targets (cpp/fuzz/*_fuzzer.cc).

Run with the project's venv Python (it uses PIL and numpy)::

    .venv/bin/python cpp/fuzz/make_corpus.py build/fuzz-corpus

Creates one folder per target. Seeds are small (fast to execute) but cover the
formats' variants: JPEG baseline/progressive/grayscale/CMYK/subsamplings/EXIF
orientations/restart markers, PNG colour types and depths/interlacing, WebP
lossy/lossless/alpha/animated/EXIF, TIFF compressions/depths/layouts, formats
that must be refused, tar shards in ustar, GNU and pax formats, and IDX file
pairs (plain and named ``.gz``), and each image function on a few shapes.
The output is deterministic; existing files are overwritten.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import sys
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from conftest import tiff_bytes  # noqa: E402  (the tests' TIFF writer: tiles, planes, 16-bit)

# The pipeline target reads its transform chain from the input's last 8 bytes.
PIPELINE_CONFIG_BYTES = 8


def _pattern(height: int, width: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    """A smooth gradient with some noise: compresses well, decodes non-trivially."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack(
        [(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)), ((x + y) * 7) % 256], axis=-1
    )
    rgb = np.clip(rgb + rng.integers(-12, 13, size=rgb.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(rgb, "RGB").convert(mode) if mode != "RGB" else Image.fromarray(rgb, "RGB")


def _save(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def image_seeds() -> dict[str, bytes]:
    """Encoded images (and non-images) named by what they exercise."""
    seeds: dict[str, bytes] = {}
    base = _pattern(24, 33)
    seeds["jpeg-baseline-420"] = _save(base, "JPEG", quality=80)
    seeds["jpeg-444"] = _save(base, "JPEG", quality=90, subsampling=0)
    seeds["jpeg-422"] = _save(base, "JPEG", quality=90, subsampling=1)
    seeds["jpeg-progressive"] = _save(base, "JPEG", quality=75, progressive=True)
    seeds["jpeg-optimized"] = _save(base, "JPEG", quality=60, optimize=True)
    seeds["jpeg-gray"] = _save(base.convert("L"), "JPEG", quality=85)
    seeds["jpeg-cmyk"] = _save(base.convert("CMYK"), "JPEG", quality=85)
    seeds["jpeg-1x1"] = _save(_pattern(1, 1), "JPEG")
    seeds["jpeg-wide"] = _save(_pattern(3, 70), "JPEG", quality=70)
    seeds["jpeg-restart"] = _save(_pattern(40, 48), "JPEG", quality=70, restart_marker_blocks=1)
    seeds["jpeg-large-crop"] = _save(_pattern(96, 128, seed=3), "JPEG", quality=50)
    for orientation in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        seeds[f"jpeg-exif-{orientation}"] = _save(
            _pattern(18, 29, seed=orientation), "JPEG", exif=exif.tobytes()
        )
    seeds["png-rgb"] = _save(base, "PNG")
    seeds["png-rgba"] = _save(base.convert("RGBA"), "PNG")
    seeds["png-gray"] = _save(base.convert("L"), "PNG")
    seeds["png-gray-alpha"] = _save(base.convert("LA"), "PNG")
    seeds["png-palette"] = _save(base.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "PNG")
    seeds["png-1bit"] = _save(base.convert("1"), "PNG")
    seeds["png-16bit"] = _save(Image.fromarray(np.asarray(base.convert("L"), np.uint16) * 257), "PNG")
    seeds["webp-lossy"] = _save(base, "WEBP", quality=70)
    seeds["webp-lossless"] = _save(base, "WEBP", lossless=True)
    seeds["webp-alpha"] = _save(base.convert("RGBA"), "WEBP", quality=70)
    seeds["gif"] = _save(base.convert("P"), "GIF")
    seeds["gif-animated-transparent"] = _save(
        base.convert("P"),
        "GIF",
        save_all=True,
        append_images=[_pattern(8, 9, seed=6).convert("P")],
        transparency=2,
    )
    seeds["bmp"] = _save(base, "BMP")
    seeds["bmp-palette"] = _save(base.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "BMP")
    seeds["bmp-1bit"] = _save(base.convert("1"), "BMP")
    # RLE8, 4x2: a run, a literal, end of line, a delta, end of bitmap (PIL cannot write RLE).
    rle = bytes([3, 1, 0, 3, 2, 3, 4, 0, 0, 0, 0, 2, 1, 0, 2, 5, 0, 1])
    info = struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 8, 1, len(rle), 0, 0, 4, 0) + bytes(range(16))
    seeds["bmp-rle8"] = (
        b"BM" + struct.pack("<IHHI", 14 + len(info) + len(rle), 0, 0, 14 + len(info)) + info + rle
    )
    seeds["ppm"] = _save(base, "PPM")
    seeds["pgm"] = _save(base.convert("L"), "PPM")
    seeds["pbm"] = _save(base.convert("1"), "PPM")
    seeds["ppm-16bit"] = b"P6\n3 2\n1000\n" + np.arange(18, dtype=">u2").tobytes()
    seeds["pgm-plain"] = b"P2\n# comment\n3 2\n15\n0 1 2\n13 14 15\n"
    seeds["tiff"] = _save(base, "TIFF")
    for compression in ("tiff_lzw", "tiff_adobe_deflate", "packbits", "jpeg"):
        seeds[f"tiff-{compression}"] = _save(base, "TIFF", compression=compression)
    seeds["tiff-gray16"] = _save(Image.fromarray(np.asarray(base.convert("L"), np.uint16) * 257), "TIFF")
    seeds["tiff-palette"] = _save(base.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "TIFF")
    seeds["tiff-cmyk"] = _save(base.convert("CMYK"), "TIFF", compression="tiff_lzw")
    seeds["tiff-rgba"] = _save(base.convert("RGBA"), "TIFF")
    seeds["tiff-1bit-group4"] = _save(base.convert("1"), "TIFF", compression="group4")
    seeds["tiff-multipage"] = _save(base, "TIFF", save_all=True, append_images=[_pattern(8, 9, seed=5)])
    pixels = np.asarray(base)
    seeds["tiff-tiled-planar"] = tiff_bytes(pixels, 2, tile=(16, 16), planar=2)
    seeds["tiff-rgb16-big-endian"] = tiff_bytes(pixels.astype(np.uint16) * 257, 2, big_endian=True)
    seeds["tiff-orientation-6"] = tiff_bytes(pixels, 2, orientation=6, rows_per_strip=5)
    for fmt, orientation, options in (("PNG", 6, {}), ("WEBP", 8, {"lossless": True})):
        exif = Image.Exif()
        exif[0x0112] = orientation
        seeds[f"{fmt.lower()}-exif-{orientation}"] = _save(base, fmt, exif=exif.tobytes(), **options)
    frames = [_pattern(12, 15, seed=s).convert("RGBA") for s in (1, 2)]
    seeds["webp-animated"] = _save(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    seeds["truncated-jpeg"] = seeds["jpeg-baseline-420"][: len(seeds["jpeg-baseline-420"]) // 2]
    seeds["truncated-png"] = seeds["png-rgb"][: len(seeds["png-rgb"]) // 2]
    seeds["text"] = b"not an image\n"
    seeds["empty"] = b""
    return {name: data for name, data in seeds.items() if data or name == "empty"}


def _tar(members: list[tuple[str, bytes]], fmt: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_seeds(images: dict[str, bytes]) -> dict[str, bytes]:
    """Small WebDataset-style shards in each tar dialect, plus odd ones."""
    jpg, png = images["jpeg-1x1"], images["png-gray"][:200]
    samples = [
        ("s000.jpg", jpg), ("s000.cls", b"3\n"), ("s000.json", b'{"a": 1}'),
        ("s001.png", png), ("s001.cls", b" 7 "),
        ("dir/s002.left.jpg", jpg), ("dir/s002.txt", b"hello"),
    ]  # fmt: skip
    seeds = {
        "ustar": _tar(samples, tarfile.USTAR_FORMAT),
        "gnu": _tar(samples, tarfile.GNU_FORMAT),
        "pax": _tar(samples, tarfile.PAX_FORMAT),
        "gnu-longname": _tar(
            [("x" * 120 + "/sample.jpg", jpg), ("x" * 120 + "/sample.cls", b"1")], tarfile.GNU_FORMAT
        ),
        "pax-longname": _tar([("y" * 150 + "/sample.jpg", jpg)], tarfile.PAX_FORMAT),
        "ustar-prefix": _tar([("p" * 90 + "/" + "q" * 60 + "/a.jpg", jpg)], tarfile.USTAR_FORMAT),
        "no-image": _tar([("a.txt", b"x"), ("a.cls", b"1")], tarfile.USTAR_FORMAT),
        "bad-cls": _tar([("a.jpg", jpg), ("a.cls", b"one")], tarfile.USTAR_FORMAT),
        "duplicate": _tar([("a.jpg", jpg), ("a.jpg", jpg)], tarfile.USTAR_FORMAT),
        "metadata": _tar([("__key__", b"k"), ("b.webp", images["webp-lossless"][:64])], tarfile.PAX_FORMAT),
    }
    seeds["truncated"] = seeds["ustar"][: len(seeds["ustar"]) - 1500]
    seeds["empty"] = b""
    seeds["zeros"] = bytes(1024)
    return seeds


def shard_index_seeds() -> dict[str, bytes]:
    """Indexes of shard_index_fuzzer's 8192-byte shard: valid ones, and each
    kind of fault the reader checks, each after the target's control byte
    (0: no listing); and the valid index under each listing and size."""
    import json

    def index(members: list[list[object]], **fields: object) -> bytes:
        doc = {"format": "conveyor tar index", "version": 1, "shard_bytes": 8192, "members": members}
        return json.dumps({**doc, **fields}).encode()

    samples = [
        ["s000.jpg", 512, 700], ["s000.cls", 1536, 2, "3\n"], ["s000.json", 2560, 8],
        ["s001.png", 3584, 200], ["s001.cls", 4096, 3, " 7 "],
        ["dir/s002.left.jpg", 5120, 100], ["dir/s002.txt", 6144, 5], ["__key__", 7168, 1],
    ]  # fmt: skip
    seeds = {
        "valid": index(samples),
        "one": index([["a.jpg", 512, 7680]]),
        "stale": index(samples, shard_bytes=4096),
        "version": index(samples, version=2),
        "overlap": index([["a.jpg", 512, 1000], ["b.jpg", 1024, 10]]),
        "outside": index([["a.jpg", 7680, 1000]]),
        "cls-without-text": index([["a.jpg", 512, 10], ["a.cls", 1024, 1]]),
        "bad-cls": index([["a.jpg", 512, 10], ["a.cls", 1024, 3, "one"]]),
        "no-image": index([["a.txt", 512, 10]]),
        "duplicate": index([["a.jpg", 512, 10], ["a.jpg", 1024, 10]]),
        "not-json": b"<html>",
        "empty": b"",
    }
    seeds = {name: b"\x00" + text for name, text in seeds.items()}
    # Listed with an index, without one, with a size of 0; shards of 4096 and 1024 bytes.
    for control in (1, 2, 3, 4, 5, 8):
        seeds[f"valid-control-{control}"] = bytes([control]) + index(samples)
    return seeds


def _idx(array: np.ndarray) -> bytes:
    return (
        struct.pack(">BBBB", 0, 0, 8, array.ndim)
        + struct.pack(f">{array.ndim}I", *array.shape)
        + array.tobytes()
    )


def _idx_input(images: bytes, labels: bytes, flags: int) -> bytes:
    """The idx target's input layout: flags, u32 LE image-file length, image file, label file."""
    return bytes([flags]) + struct.pack("<I", len(images)) + images + labels


def idx_seeds() -> dict[str, bytes]:
    """IDX file pairs in the idx target's input layout: valid, gzip, and broken ones."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 4, 3), dtype=np.uint8)
    images4 = rng.integers(0, 256, size=(3, 2, 2, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=5, dtype=np.uint8)
    plain, label_file = _idx(images), _idx(labels)
    return {
        "plain": _idx_input(plain, label_file, 0),
        "plain-float-chw": _idx_input(plain, label_file, 4 | 8),
        "four-dims": _idx_input(_idx(images4), _idx(labels[:3]), 4),
        "gzip": _idx_input(gzip.compress(plain, mtime=0), gzip.compress(label_file, mtime=0), 3),
        "gz-name-plain-bytes": _idx_input(plain, label_file, 3),
        "count-mismatch": _idx_input(plain, _idx(labels[:4]), 0),
        "truncated": _idx_input(plain[:-3], label_file, 0),
        "too-long": _idx_input(plain + b"x", label_file, 0),
        "zero-samples": _idx_input(_idx(np.zeros((0, 4, 4), np.uint8)), _idx(np.zeros(0, np.uint8)), 0),
        "bad-type": _idx_input(b"\0\0\x0d\x03" + plain[4:], label_file, 0),
    }


def coco_seeds() -> dict[str, bytes]:
    """COCO instances files: valid (ids as integers and as floats), and broken ones."""
    valid = {
        "images": [
            {"id": 2, "file_name": "b.jpg", "width": 640, "height": 480},
            {"id": 1, "file_name": "a.jpg", "width": 10, "height": 20},
        ],
        "annotations": [
            {"id": 7, "image_id": 1, "category_id": 3, "bbox": [1, 2.5, 3, 4], "area": 12.0, "iscrowd": 0},
            {
                "image_id": 2.0,
                "category_id": 1.0,
                "bbox": [0, 0, 1e3, 1e-3],
                "iscrowd": 1,
                "segmentation": [[1, 2]],
            },
        ],
        "categories": [{"id": 1, "name": "cat", "supercategory": "animal"}, {"id": 3, "name": "dog"}],
        "info": {"year": 2017},
    }
    seeds = {
        "valid": json.dumps(valid),
        "minimal": json.dumps({"images": []}),
        "unknown-image": json.dumps(
            {"images": [], "annotations": [{"image_id": 1, "category_id": 1, "bbox": [0] * 4}]}
        ),
        "duplicate-id": json.dumps({"images": [{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "b"}]}),
        "bad-bbox": json.dumps(
            {
                "images": [{"id": 1, "file_name": "a"}],
                "annotations": [{"image_id": 1, "category_id": 1, "bbox": [1, 2]}],
            }
        ),
        "float-id": '{"images": [{"id": 1e30, "file_name": "a"}]}',
        "not-object": "[1, 2, 3]",
        "invalid": '{"images": [',
        "nested": "[" * 200 + "]" * 200,
        "unicode": json.dumps({"images": [{"id": 1, "file_name": "\u00e9\ud83d\ude00.jpg"}]}),
    }
    return {name: text.encode() for name, text in seeds.items()}


# The image function target's functions, in its table's order (the registered
# names, sorted; the target checks its table against them when it starts).
IMAGE_FUNCTIONS = 24


def image_function_seeds() -> dict[str, bytes]:
    """Each image function on a few shapes (RGB, gray, empty, a huge side),
    its arguments small integers or fractions, then the pixels."""
    rng = np.random.default_rng(7)
    seeds = {}
    for function in range(IMAGE_FUNCTIONS):
        for shape_name, (height, width, channels) in {
            "rgb": (8, 12, 3),
            "gray": (5, 9, 1),
            "empty": (0, 4, 3),
            "huge": (250, 1, 3),
        }.items():
            # 16 numbers: (7, v) is the integer v, (2, v) is v / 64.
            numbers = b"".join(bytes([7, 1 + k % 5]) if k % 3 else bytes([2, 32 + k]) for k in range(16))
            pixels = rng.integers(0, 256, size=96 * 3, dtype=np.uint8).tobytes()
            header = bytes([function, height, width, channels, 0])  # 0: no argument left out.
            seeds[f"{function:02d}-{shape_name}"] = header + numbers + pixels
    return seeds


def s3_reply_seeds() -> dict[str, bytes]:
    """Inputs of s3_reply_fuzzer: byte 0 picks the parser (0 listing, 1 error
    body, 2 AWS INI file, 3 s3:// URL), the rest is what it parses."""
    listing = (
        b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        b"<Name>b</Name><Prefix>train/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
        b"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
        b"<Contents><Key>train/cat/0001.jpg</Key><Size>1234</Size><ETag>&quot;9b2cf535&quot;</ETag></Contents>"
        b"<Contents><Key>train/a&amp;b &lt;x&gt; &#233;.jpg</Key><Size>0</Size></Contents></ListBucketResult>"
    )
    last = (
        b"<ListBucketResult><IsTruncated>false</IsTruncated>"
        b"<Contents><Key>k</Key><Size>7</Size></Contents></ListBucketResult>"
    )
    error = b"<?xml version='1.0'?><Error><Code>NoSuchKey</Code><Message>No such key.</Message></Error>"
    ini = (
        b"[default]\naws_access_key_id = AKIA\naws_secret_access_key=secret ; comment\n"
        b"# a comment\n[profile dev]\nregion = eu-west-3\ns3 =\n  addressing_style = path\n"
    )
    return {
        "listing": b"\x00" + listing,
        "listing-last": b"\x00" + last,
        "error": b"\x01" + error,
        "ini": b"\x02" + ini,
        "url": b"\x03s3://bucket/some/key.tar",
        "url-bucket": b"\x03S3://bucket",
    }


def _with_config(data: bytes, name: str) -> bytes:
    """Appends the pipeline target's 8 configuration bytes (from the seed's name)."""
    return data + hashlib.sha256(name.encode()).digest()[:PIPELINE_CONFIG_BYTES]


def main(argv: list[str]) -> int:
    """Writes <out>/<target>/<seed> for every target; returns the exit status."""
    out = Path(argv[1] if len(argv) > 1 else "build/fuzz-corpus")
    images = image_seeds()
    corpora: dict[str, dict[str, bytes]] = {
        "image_decode_fuzzer": images,
        "image_pipeline_fuzzer": {
            f"{name}-{variant}": _with_config(data, f"{name}-{variant}")
            for name, data in images.items()
            for variant in range(5)
        },
        "tar_shards_fuzzer": tar_seeds(images),
        "idx_fuzzer": idx_seeds(),
        "coco_fuzzer": coco_seeds(),
        "image_function_fuzzer": image_function_seeds(),
        "s3_reply_fuzzer": s3_reply_seeds(),
        "shard_index_fuzzer": shard_index_seeds(),
    }
    for target, seeds in corpora.items():
        folder = out / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (folder / name).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
