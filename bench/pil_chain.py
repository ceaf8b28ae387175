"""Single-process PIL + torchvision-equivalent speed of the ImageNet chains,
for the ratio against conveyor's C++ kernels (docs/benchmarks.md).

torchvision is not a dependency, so its PIL path is reproduced step by step:
decode with PIL, ``RandomResizedCrop.get_params`` (10 attempts, central-crop
fallback), crop + ``resize(BILINEAR)``, flip, ``to_tensor`` and ``Normalize``
with torch, one thread (``torch.set_num_threads(1)``), files in memory.

    python bench/pil_chain.py [--images DIR] [--seconds 10]

Without ``--images`` it writes (once) an ImageNet-like folder of 200 JPEGs made
from scikit-image's bundled photos (random crops, short side 200-500 px,
quality 90) to bench-results/images, the folder the C++ benchmark reads via
CONVEYOR_BENCH_IMAGES.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import random
import time

import numpy as np
import torch
from PIL import Image
from skimage import data

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
PHOTOS = ["astronaut", "chelsea", "coffee", "rocket", "cat", "immunohistochemistry", "hubble_deep_field"]
PHOTOS += ["retina"]


def make_images(folder: str, count: int = 200, seed: int = 0) -> None:
    os.makedirs(folder, exist_ok=True)
    rnd = random.Random(seed)
    photos = [Image.fromarray(getattr(data, name)()) for name in PHOTOS]
    for i in range(count):
        photo = photos[i % len(photos)]
        w, h = photo.size
        # A random crop of 60-100% of each side, resized to a short side of 200-500.
        cw, ch = int(w * rnd.uniform(0.6, 1.0)), int(h * rnd.uniform(0.6, 1.0))
        x, y = rnd.randint(0, w - cw), rnd.randint(0, h - ch)
        crop = photo.crop((x, y, x + cw, y + ch))
        short = rnd.randint(200, 500)
        scale = short / min(cw, ch)
        crop = crop.resize((max(1, round(cw * scale)), max(1, round(ch * scale))), Image.BILINEAR)
        crop.save(os.path.join(folder, f"{i:04d}.jpg"), "JPEG", quality=90)


def get_params(height: int, width: int, rnd: random.Random) -> tuple[int, int, int, int]:
    area = height * width
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target_area = area * rnd.uniform(0.08, 1.0)
        aspect = math.exp(rnd.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rnd.randint(0, height - h), rnd.randint(0, width - w), h, w
    side = min(height, width)
    return (height - side) // 2, (width - side) // 2, side, side


def to_normalized_tensor(img: Image.Image) -> torch.Tensor:
    t = torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).float().div(255)
    return t.sub_(MEAN).div_(STD)


def train(blob: bytes, rnd: random.Random) -> torch.Tensor:
    img = Image.open(io.BytesIO(blob)).convert("RGB")
    i, j, h, w = get_params(img.height, img.width, rnd)
    img = img.crop((j, i, j + w, i + h)).resize((224, 224), Image.BILINEAR)
    if rnd.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return to_normalized_tensor(img)


def evaluate(blob: bytes, rnd: random.Random) -> torch.Tensor:
    img = Image.open(io.BytesIO(blob)).convert("RGB")
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(256 * long / short)
    img = img.resize((256, new_long) if w <= h else (new_long, 256), Image.BILINEAR)
    left, top = int(round((img.width - 224) / 2.0)), int(round((img.height - 224) / 2.0))
    return to_normalized_tensor(img.crop((left, top, left + 224, top + 224)))


def decode_only(blob: bytes, rnd: random.Random) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"))


def measure(fn, blobs: list[bytes], seconds: float) -> float:
    rnd = random.Random(0)
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        fn(blobs[n % len(blobs)], rnd)
        n += 1
    return n / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", default="bench-results/images")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if not os.path.isdir(args.images):
        make_images(args.images)
    torch.set_num_threads(1)
    files = sorted(f for f in os.listdir(args.images) if f.lower().endswith((".jpg", ".jpeg")))
    blobs = [open(os.path.join(args.images, f), "rb").read() for f in files]
    print(f"{len(blobs)} JPEGs from {args.images}; images/s per core (CPU time), one process, one thread")
    chains = [("PIL decode + convert(RGB)", decode_only), ("train chain", train), ("eval chain", evaluate)]
    for name, fn in chains:
        print(f"{name:28s} {measure(fn, blobs, args.seconds):8.1f}")


if __name__ == "__main__":
    main()
