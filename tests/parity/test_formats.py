"""ImageFolder parity with torchvision: the same samples listed, and the same
pixels as torchvision's default loader (PIL ``Image.open(f).convert("RGB")``)
for the formats beyond JPEG/PNG: TIFF variants and animated WebP."""

import io
from pathlib import Path

import numpy as np
from PIL import Image
from torchvision.datasets import ImageFolder as TvImageFolder

from conveyor import _conveyor
from conveyor.sources import ImageFolder


def _save(path: Path, image: Image.Image, fmt: str, **options: object) -> None:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


def test_image_folder_lists_and_decodes_as_torchvision(tmp_path: Path, photo: np.ndarray) -> None:
    image = Image.fromarray(photo).resize((96, 64))
    second = Image.fromarray(photo[::-1]).resize((50, 40))
    _save(tmp_path / "a" / "1.tif", image, "TIFF", compression="tiff_lzw")
    _save(tmp_path / "a" / "2.TIFF", image.convert("CMYK"), "TIFF", compression="tiff_adobe_deflate")
    _save(tmp_path / "a" / "3.tiff", image, "TIFF", save_all=True, append_images=[second])  # 2 pages
    _save(tmp_path / "b" / "4.tif", image.convert("P"), "TIFF", compression="packbits")
    _save(tmp_path / "b" / "5.tiff", image, "TIFF", tiffinfo={274: 6})  # Orientation: PIL applies it.
    _save(tmp_path / "b" / "6.webp", image, "WEBP", save_all=True, append_images=[second.resize((96, 64))])
    _save(tmp_path / "b" / "7.png", image.convert("LA"), "PNG")
    ours, theirs = ImageFolder(tmp_path), TvImageFolder(str(tmp_path))
    assert ours.samples == theirs.samples and ours.classes == theirs.classes
    assert len(ours) == 7
    for index, (path, _) in enumerate(theirs.samples):
        expected = np.asarray(theirs[index][0])
        decoded = np.asarray(_conveyor.decode_image(Path(path).read_bytes()))
        assert decoded.shape == expected.shape, path
        assert np.array_equal(decoded, expected), path
