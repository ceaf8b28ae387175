"""Per-core speed of torchvision's ImageNet "TrivialAugmentWide + RandomErasing"
train recipe: conveyor against torchvision v2 on uint8 tensors and v1 on PIL,
in one process, one thread (docs/benchmarks.md, "The TrivialAugmentWide recipe").

The recipe (torchvision's references/classification/presets.py with
``--auto-augment ta_wide --random-erase 0.1``): RandomResizedCrop(224) +
RandomHorizontalFlip + TrivialAugmentWide + Normalize (ImageNet) +
RandomErasing(0.1), float32 CHW; the plain train chain is the same without
TrivialAugmentWide and RandomErasing. Each chain runs on JPEG bytes in memory
(decode included): torchvision v2 as ``decode_jpeg`` + ``transforms.v2``, v1
as ``PIL.Image.open(...).convert("RGB")`` + ``transforms``, conveyor as one
``compile_pipeline(...).apply`` per image. Figures are images per CPU second
(``time.process_time``), the best of ``--runs`` runs of ``--seconds`` each,
``torch.set_num_threads(1)``.

    PYTHONPATH=$PWD/python .venv-tv/bin/python bench/augment_recipe.py [--images DIR]
    PYTHONPATH=$PWD/python .venv-tv/bin/python bench/augment_recipe.py --ops

``--ops`` instead times torchvision v2's functional ops on a 224x224 uint8
tensor (the first photo resized), µs per call, best of 5 runs of 0.3 s: the
torchvision side of BM_Color224 in cpp/conveyor/ops/image_pipeline_benchmark.cc
(same ops and parameters).

Needs torch and torchvision (the parity venv ``.venv-tv``). The photos are
bench/pil_chain.py's (``python bench/pil_chain.py`` writes them to
bench-results/images once; it needs scikit-image, in ``.venv``).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import time
from typing import Callable

import torch
from PIL import Image
from torchvision import transforms as v1
from torchvision.io import decode_jpeg
from torchvision.transforms import v2

from conveyor import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def v2_chain(recipe: bool) -> Callable[[bytes, int], object]:
    steps: list[object] = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
    if recipe:
        steps.append(v2.TrivialAugmentWide())
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    if recipe:
        steps.append(v2.RandomErasing(0.1))
    chain = v2.Compose(steps)
    # decode_jpeg takes a uint8 tensor of the file: made per call (a view of
    # a writable copy of the bytes, as reading a file would give).
    return lambda blob, i: chain(decode_jpeg(torch.frombuffer(bytearray(blob), dtype=torch.uint8)))


def v1_chain(recipe: bool) -> Callable[[bytes, int], object]:
    steps: list[object] = [v1.RandomResizedCrop(224), v1.RandomHorizontalFlip()]
    if recipe:
        steps.append(v1.TrivialAugmentWide())
    steps += [v1.PILToTensor(), v1.ConvertImageDtype(torch.float32), v1.Normalize(MEAN, STD)]
    if recipe:
        steps.append(v1.RandomErasing(0.1))
    chain = v1.Compose(steps)
    return lambda blob, i: chain(Image.open(io.BytesIO(blob)).convert("RGB"))


def conveyor_chain(recipe: bool) -> Callable[[bytes, int], object]:
    steps: list[T.Transform] = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    if recipe:
        steps.append(T.TrivialAugmentWide())
    steps.append(T.Normalize(MEAN, STD))
    if recipe:
        steps.append(T.RandomErasing(0.1))
    pipeline = T.compile_pipeline(steps)
    return lambda blob, i: pipeline.apply(blob, index=i)


def measure(fn: Callable[[bytes, int], object], blobs: list[bytes], seconds: float) -> float:
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        fn(blobs[n % len(blobs)], n)
        n += 1
    return n / (time.process_time() - start)


def time_ops(blob: bytes) -> None:
    from torchvision.transforms.v2 import functional as F

    image = F.resize(
        decode_jpeg(torch.frombuffer(bytearray(blob), dtype=torch.uint8)), [224, 224], antialias=True
    )
    nearest = F.InterpolationMode.NEAREST

    def jitter(x: torch.Tensor) -> torch.Tensor:
        x = F.adjust_brightness(x, 1.2)
        x = F.adjust_contrast(x, 0.8)
        return F.adjust_hue(F.adjust_saturation(x, 1.3), 0.05)

    ops: dict[str, Callable[[torch.Tensor], object]] = {
        "adjust_brightness": lambda x: F.adjust_brightness(x, 1.3),
        "adjust_contrast": lambda x: F.adjust_contrast(x, 1.3),
        "adjust_saturation": lambda x: F.adjust_saturation(x, 1.3),
        "adjust_hue": lambda x: F.adjust_hue(x, 0.1),
        "rgb_to_grayscale_3": lambda x: F.rgb_to_grayscale(x, 3),
        "invert": F.invert,
        "posterize": lambda x: F.posterize(x, 4),
        "solarize": lambda x: F.solarize(x, 128),
        "gaussian_blur_k23": lambda x: F.gaussian_blur(x, [23, 23], [1.5, 1.5]),
        "gaussian_blur_k5": lambda x: F.gaussian_blur(x, [5, 5], [1.0, 1.0]),
        "adjust_sharpness": lambda x: F.adjust_sharpness(x, 2.0),
        "autocontrast": F.autocontrast,
        "equalize": F.equalize,
        # TrivialAugmentWide's ShearX: about the top-left corner.
        "shear_x_0.5_nearest": lambda x: F.affine(
            x, 0.0, [0, 0], 1.0, [math.degrees(math.atan(0.5)), 0.0], interpolation=nearest, center=[0, 0]
        ),
        "translate_x_16_nearest": lambda x: F.affine(
            x, angle=0.0, translate=[16, 0], scale=1.0, shear=[0.0, 0.0], interpolation=nearest
        ),
        "rotate_30_nearest": lambda x: F.rotate(x, 30.0, interpolation=nearest),
        "color_jitter_0.4_0.4_0.4_0.1": jitter,
    }
    print("torchvision v2 functional, 224x224 uint8, 1 thread, µs per call, best of 5, load", load_average())
    for name, op in ops.items():
        best = math.inf
        for _ in range(5):
            n, start = 0, time.process_time()
            while time.process_time() - start < 0.3:
                op(image.clone())
                n += 1
            best = min(best, (time.process_time() - start) / n)
        print(f"{name:32s} {best * 1e6:8.0f}")


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", default="bench-results/images")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ops", action="store_true", help="time torchvision's functional ops instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    files = sorted(f for f in os.listdir(args.images) if f.lower().endswith((".jpg", ".jpeg")))
    blobs = [open(os.path.join(args.images, f), "rb").read() for f in files]
    if args.ops:
        time_ops(blobs[0])
        return
    print(f"{len(blobs)} JPEGs from {args.images}; images/s per core (CPU time), best of {args.runs}")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load_average()}")
    makers = {"conveyor": conveyor_chain, "torchvision v2": v2_chain, "torchvision v1": v1_chain}
    chains = {(recipe, name): make(recipe) for recipe in (False, True) for name, make in makers.items()}
    best = dict.fromkeys(chains, 0.0)
    # Runs interleaved across the chains, the best of each kept: the
    # machine's load varies over time, and each chain meets it alike.
    for _ in range(args.runs):
        for key, fn in chains.items():
            best[key] = max(best[key], measure(fn, blobs, args.seconds))
    print(f"{'chain':46s} {'conveyor':>9s} {'tv v2':>8s} {'tv v1':>8s} {'vs v2':>6s} {'vs v1':>6s}")
    for recipe in (False, True):
        label = "recipe (TrivialAugmentWide + RandomErasing)" if recipe else "plain train chain"
        c, t2, t1 = (best[(recipe, name)] for name in makers)
        print(f"{label:46s} {c:9.1f} {t2:8.1f} {t1:8.1f} {c / t2:5.1f}x {c / t1:5.1f}x")
    for name in makers:
        ratio = best[(False, name)] / best[(True, name)]
        print(f"{name}: the recipe costs {ratio:.2f}x the plain chain per image")
    print(f"load average at the end {load_average()}")


if __name__ == "__main__":
    main()
