"""The peers of ``conveyor bench throughput --peers``: other input pipelines
running conveyor's ImageNet chains on the same files, batch size and core count.

- DataLoader + torchvision v2: ``torchvision.io.decode_jpeg`` on tensors and
  ``transforms.v2`` (the v1 PIL chain is the benchmark's DataLoader side itself
  when torchvision is importable).
- NVIDIA DALI in CPU mode (``device_id=None``): ``readers.file``,
  ``decoders.image_random_crop`` (train) or ``decoders.image`` + ``resize``
  (eval), ``resize``, ``crop_mirror_normalize``.
- SPDL: its pipeline (``PipelineBuilder``) with FFmpeg decode and a crop/scale filter.
- FFCV: its ``Loader`` over a ``.beton`` written once before the runs (``setup``,
  not timed).

Each loader yields ``(images, labels)`` batches: float32 CHW images normalized
with ImageNet's mean and std, as conveyor's. The parent process only checks
what is installed (``status``); the loaders run in the benchmark's worker
processes. Peers are installed by ``make bench-peers`` into ``.venv-peers``;
a peer whose install failed leaves its reason in
``<venv>/conveyor-not-installable/<NAME>``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TRAIN_SIZE, EVAL_RESIZE, EVAL_CROP = 224, 256, 224
#: Where ``make bench-peers`` records why a peer could not be installed.
NOT_INSTALLABLE_DIR = "conveyor-not-installable"


@dataclass(frozen=True)
class Peer:
    """A peer pipeline: its name, the worker side that runs it, the modules it
    needs, and its label in the tables (``{w}``: workers or threads)."""

    name: str
    side: str
    modules: tuple[str, ...]
    label: str


PEERS = (
    Peer(
        "torchvision v2",
        "torchvision-v2",
        ("torchvision.transforms.v2",),
        "DataLoader W={w} + torchvision v2",
    ),
    Peer("DALI", "dali", ("nvidia.dali",), "DALI CPU threads={w}"),
    Peer("SPDL", "spdl", ("spdl.io", "spdl.pipeline"), "SPDL threads={w}"),
    Peer("FFCV", "ffcv", ("ffcv",), "FFCV W={w}"),
)


def importable(module: str) -> bool:
    """Whether ``module`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):  # A parent package is missing.
        return False


def _recorded_reason(name: str, prefix: str) -> Optional[str]:
    path = os.path.join(prefix, NOT_INSTALLABLE_DIR, name)
    try:
        with open(path) as f:
            return f.read().strip() or "see the install log"
    except OSError:
        return None


def status(
    importable: Callable[[str], bool] = importable, prefix: Optional[str] = None
) -> dict[str, Optional[str]]:
    """Peer name -> None when it can run here, else why not ("not installed: ..."
    or "not installable: ...", the reason ``make bench-peers`` recorded)."""
    prefix = sys.prefix if prefix is None else prefix
    states: dict[str, Optional[str]] = {}
    for peer in PEERS:
        missing = [module for module in peer.modules if not importable(module)]
        if not missing:
            states[peer.name] = None
            continue
        recorded = _recorded_reason(peer.name, prefix)
        if recorded is not None:
            states[peer.name] = f"not installable: {recorded}"
        else:
            where = f"in {sys.executable} (`make bench-peers` installs it)"
            states[peer.name] = f"not installed: no module {missing[0]!r} {where}"
    return states


def ffcv_beton_path(data: str, limit: Optional[int]) -> str:
    """The FFCV dataset file written for the image folder ``data``."""
    return os.path.normpath(data) + f"-ffcv-{'all' if limit is None else limit}.beton"


# --- the loaders (in the worker process) -----------------------------------------------------------


def _files(spec: dict[str, Any]) -> tuple[list[str], list[int]]:
    """The image files and labels that conveyor's side reads for ``spec``."""
    import conveyor
    from conveyor.bench.subset import spread

    folder = conveyor.sources.ImageFolder(spec["data"])
    keep = spread(len(folder), spec.get("limit"))
    return [folder.paths[i] for i in keep], [int(folder.labels[i]) for i in keep]


def torchvision_v2(spec: dict[str, Any]) -> Iterable[Any]:
    """DataLoader, ``torchvision.io.decode_jpeg`` and ``transforms.v2`` on uint8 tensors."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    from torchvision.transforms import v2

    train = spec["case"] == "train"
    if train:
        steps = [v2.RandomResizedCrop(TRAIN_SIZE, antialias=True), v2.RandomHorizontalFlip()]
    else:
        steps = [v2.Resize(EVAL_RESIZE, antialias=True), v2.CenterCrop(EVAL_CROP)]
    transform = v2.Compose(
        [*steps, v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    )
    paths, labels = _files(spec)

    class Files(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, index: int) -> tuple[Any, int]:
            image = decode_jpeg(read_file(paths[index]), mode=ImageReadMode.RGB)
            return transform(image), labels[index]

    return torch.utils.data.DataLoader(
        Files(), batch_size=spec["batch_size"], shuffle=train, num_workers=spec["workers"], pin_memory=False
    )


def dali(spec: dict[str, Any]) -> Iterable[Any]:
    """A DALI pipeline on the CPU (``device_id=None``), through DALI's PyTorch iterator."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    train = spec["case"] == "train"
    paths, labels = _files(spec)

    @pipeline_def(batch_size=spec["batch_size"], num_threads=spec["workers"], device_id=None, seed=0)
    def pipeline() -> Any:
        jpegs, label = fn.readers.file(
            files=paths, labels=labels, random_shuffle=train, pad_last_batch=True, name="Reader"
        )
        if train:
            images = fn.decoders.image_random_crop(
                jpegs,
                device="cpu",
                output_type=types.RGB,
                random_area=[0.08, 1.0],
                random_aspect_ratio=[3 / 4, 4 / 3],
            )
            images = fn.resize(images, resize_x=TRAIN_SIZE, resize_y=TRAIN_SIZE)
            mirror = fn.random.coin_flip(probability=0.5)
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=EVAL_RESIZE)
            mirror = 0
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            crop=(EVAL_CROP, EVAL_CROP),
            mean=[255 * m for m in IMAGENET_MEAN],
            std=[255 * s for s in IMAGENET_STD],
            mirror=mirror,
        )
        return images, label

    def batches() -> Iterator[Any]:
        # Built on the first next(), like the other sides' work: DALI's iterator
        # runs its first batches in its constructor, which the benchmark would
        # otherwise count as construction instead of as the first batch.
        pipe = pipeline()
        pipe.build()
        iterator = DALIGenericIterator(
            pipe, ["images", "labels"], reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL
        )
        for out in iterator:
            yield out[0]["images"], out[0]["labels"]

    return batches()


def _crop_box(width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box (left, top, w, h): scale 0.08-1, ratio 3/4-4/3, 10 tries, then the centre.

    SPDL has no RandomResizedCrop, so this is the code an SPDL user writes for
    it, part of that peer's pipeline (in Python, as the user's would be); it is
    deliberately not conveyor's implementation."""
    area = width * height
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(*log_ratio))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    ratio = width / height
    if ratio < 3 / 4:
        w, h = width, round(width / (3 / 4))
    elif ratio > 4 / 3:
        w, h = round(height * 4 / 3), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def _spdl_filter(width: int, height: int, train: bool, rng: random.Random) -> str:
    """The FFmpeg filter graph of one image: crop + bilinear scale (+ flip), to RGB."""
    if train:
        left, top, w, h = _crop_box(width, height, rng)
        flip = ",hflip" if rng.random() < 0.5 else ""
        return f"crop={w}:{h}:{left}:{top},scale={TRAIN_SIZE}:{TRAIN_SIZE}:flags=bilinear{flip},format=rgb24"
    short = min(width, height)
    new_w, new_h = (
        (EVAL_RESIZE, int(EVAL_RESIZE * height / width))
        if width == short
        else (
            int(EVAL_RESIZE * width / height),
            EVAL_RESIZE,
        )
    )
    left, top = round((new_w - EVAL_CROP) / 2), round((new_h - EVAL_CROP) / 2)
    return f"scale={new_w}:{new_h}:flags=bilinear,crop={EVAL_CROP}:{EVAL_CROP}:{left}:{top},format=rgb24"


def spdl(spec: dict[str, Any]) -> Iterable[Any]:
    """SPDL's pipeline: FFmpeg demux + decode with a crop/scale filter per image
    (``concurrency`` = threads), batched and normalized with torch."""
    import spdl.io
    import torch
    from spdl.pipeline import PipelineBuilder

    train = spec["case"] == "train"
    paths, labels = _files(spec)
    order = list(range(len(paths)))
    if train:
        random.Random(0).shuffle(order)
    rng = random.Random(1)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255

    def decode(index: int) -> tuple[Any, int]:
        packets = spdl.io.demux_image(paths[index])
        width, height = packets.width, packets.height
        frames = spdl.io.decode_packets(packets, filter_desc=_spdl_filter(width, height, train, rng))
        return spdl.io.to_torch(spdl.io.convert_frames(frames)), labels[index]

    def collate(items: Sequence[tuple[Any, int]]) -> tuple[Any, Any]:
        images = torch.stack([image for image, _ in items]).permute(0, 3, 1, 2).float()
        return images.sub_(mean).div_(std).contiguous(), torch.tensor([label for _, label in items])

    pipeline = (
        PipelineBuilder()
        .add_source(order)
        .pipe(decode, concurrency=spec["workers"])
        .aggregate(spec["batch_size"])
        .pipe(collate)
        .add_sink(3)
        .build(num_threads=spec["workers"])
    )

    def batches() -> Iterator[Any]:
        with pipeline.auto_stop():
            yield from pipeline

    return batches()


def ffcv_setup(spec: dict[str, Any]) -> dict[str, Any]:
    """Writes the FFCV dataset (JPEG fields) of the benchmark's files, once."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from PIL import Image

    beton = spec["beton"]
    if os.path.exists(beton):
        return {"beton": beton, "written": False}
    paths, labels = _files(spec)

    class Images:
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, index: int) -> tuple[Any, int]:
            with Image.open(paths[index]) as image:
                return image.convert("RGB"), labels[index]

    fields = {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()}
    DatasetWriter(beton + ".tmp", fields, num_workers=spec["workers"]).from_indexed_dataset(Images())
    os.replace(beton + ".tmp", beton)
    return {"beton": beton, "written": True}


def ffcv(spec: dict[str, Any]) -> Iterable[Any]:
    """FFCV's Loader over the dataset ``ffcv_setup`` wrote: its crop decoders,
    flip, normalize and CHW float tensors."""
    import numpy as np
    from ffcv.fields.decoders import CenterCropRGBImageDecoder, IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage

    train = spec["case"] == "train"
    normalize = NormalizeImage(np.array(IMAGENET_MEAN) * 255, np.array(IMAGENET_STD) * 255, np.float32)
    if train:
        image = [RandomResizedCropRGBImageDecoder((TRAIN_SIZE, TRAIN_SIZE)), RandomHorizontalFlip()]
    else:
        image = [CenterCropRGBImageDecoder((EVAL_CROP, EVAL_CROP), ratio=EVAL_CROP / EVAL_RESIZE)]
    image += [normalize, ToTensor(), ToTorchImage(channels_last=False)]
    return Loader(
        spec["beton"],
        batch_size=spec["batch_size"],
        num_workers=spec["workers"],
        order=OrderOption.RANDOM if train else OrderOption.SEQUENTIAL,
        drop_last=False,
        seed=0,
        pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]},
    )


LOADERS: dict[str, Callable[[dict[str, Any]], Iterable[Any]]] = {
    "torchvision-v2": torchvision_v2,
    "dali": dali,
    "spdl": spdl,
    "ffcv": ffcv,
}
