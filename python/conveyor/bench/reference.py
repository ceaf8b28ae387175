"""The stock PyTorch side of the benchmarks: map-style datasets for
``torch.utils.data.DataLoader`` with torchvision's transforms when torchvision
is importable, else a PIL implementation of the same algorithms (PIL bilinear
resize, which antialiases when it shrinks; RandomResizedCrop's ``get_params``;
ToTensor and Normalize with torch ops).

This is the reference the benchmarks measure conveyor against, so it keeps
its own implementation of those algorithms (torchvision's, written in Python
on PIL and torch); it deliberately uses nothing of conveyor's.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from PIL import Image

__all__ = [
    "CIFAR_MEAN",
    "CIFAR_STD",
    "CifarDataset",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "IdxDataset",
    "ImageFolderDataset",
    "SlowDecodedFiles",
    "SlowFiles",
    "UrlImages",
    "eval_transform",
    "image_folder",
    "read_idx",
    "reference_name",
    "resize_transform",
    "s3_map_images",
    "s3fs_options",
    "train_transform",
    "webdataset_images",
    "write_cifar10",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
Transform = Callable[[Image.Image], Any]

try:
    import torchvision
    import torchvision.transforms as tv
except ImportError:  # The usual case here: torchvision is not a dependency.
    torchvision = None
    tv = None


def reference_name() -> str:
    """Which implementation of the stock transforms runs."""
    if torchvision is not None:
        return f"torchvision {torchvision.__version__}"
    return "PIL implementation of torchvision's transforms (torchvision not installed)"


# --- the PIL implementation of torchvision's transforms ------------------------------------------


class _RandomResizedCrop:
    """torchvision's RandomResizedCrop on PIL images: ``get_params`` draws the box
    with torch's RNG (10 tries, then a centre crop), then crop and bilinear resize."""

    def __init__(
        self, size: int, scale: Sequence[float] = (0.08, 1.0), ratio: Sequence[float] = (3 / 4, 4 / 3)
    ):
        self.size = (size, size)
        self.scale = scale
        self.ratio = ratio

    def get_params(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The crop box (top, left, height, width), exactly as torchvision draws it."""
        area = height * width
        log_ratio = torch.log(torch.tensor(self.ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                i = int(torch.randint(0, height - h + 1, size=(1,)).item())
                j = int(torch.randint(0, width - w + 1, size=(1,)).item())
                return i, j, h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            w, h = int(round(height * max(self.ratio))), height
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img: Image.Image) -> Image.Image:
        i, j, h, w = self.get_params(*img.size)
        return img.crop((j, i, j + w, i + h)).resize(self.size[::-1], Image.Resampling.BILINEAR)


class _Resize:
    """torchvision's Resize on PIL images: an int sets the short side (the long
    side is truncated as torchvision does), a pair is (height, width)."""

    def __init__(self, size: Union[int, tuple[int, int]]):
        self.size = size

    def __call__(self, img: Image.Image) -> Image.Image:
        w, h = img.size
        if isinstance(self.size, int):
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = self.size, int(self.size * long / short)
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        else:
            new_h, new_w = self.size
        return img.resize((new_w, new_h), Image.Resampling.BILINEAR)


class _CenterCrop:
    def __init__(self, size: int):
        self.size = size

    def __call__(self, img: Image.Image) -> Image.Image:
        w, h = img.size
        top, left = int(round((h - self.size) / 2.0)), int(round((w - self.size) / 2.0))
        return img.crop((left, top, left + self.size, top + self.size))


class _RandomHorizontalFlip:
    def __call__(self, img: Image.Image) -> Image.Image:
        return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if torch.rand(1) < 0.5 else img


def _to_tensor(img: Image.Image) -> torch.Tensor:
    """torchvision's ToTensor for RGB images: float32 CHW in [0, 1]."""
    pixels = torch.from_numpy(np.array(img, np.uint8, copy=True))
    pixels = pixels.view(img.size[1], img.size[0], len(img.getbands())).permute((2, 0, 1)).contiguous()
    return pixels.to(dtype=torch.float32).div(255)


class _Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean = torch.as_tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.as_tensor(std, dtype=torch.float32)[:, None, None]

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone().sub_(self.mean).div_(self.std)


class _Compose:
    def __init__(self, steps: Sequence[Callable[[Any], Any]]):
        self.steps = list(steps)

    def __call__(self, value: Any) -> Any:
        for step in self.steps:
            value = step(value)
        return value


# --- the pipelines ---------------------------------------------------------------------------------


def train_transform(size: int = 224) -> Transform:
    """ImageNet training: RandomResizedCrop, horizontal flip, ToTensor, Normalize."""
    if tv is not None:
        return tv.Compose(
            [
                tv.RandomResizedCrop(size),
                tv.RandomHorizontalFlip(),
                tv.ToTensor(),
                tv.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            ]
        )
    return _Compose(
        [
            _RandomResizedCrop(size),
            _RandomHorizontalFlip(),
            _to_tensor,
            _Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


def eval_transform(resize: int = 256, crop: int = 224) -> Transform:
    """ImageNet evaluation: Resize (short side), CenterCrop, ToTensor, Normalize."""
    if tv is not None:
        return tv.Compose(
            [tv.Resize(resize), tv.CenterCrop(crop), tv.ToTensor(), tv.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        )
    return _Compose([_Resize(resize), _CenterCrop(crop), _to_tensor, _Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def resize_transform(height: int, width: int) -> Transform:
    """Resize to exactly (height, width), then ToTensor."""
    if tv is not None:
        return tv.Compose([tv.Resize((height, width)), tv.ToTensor()])
    return _Compose([_Resize((height, width)), _to_tensor])


def _rgb_loader(path: str) -> Image.Image:
    """torchvision's default (PIL) loader."""
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


class ImageFolderDataset(torch.utils.data.Dataset):
    """torchvision's ImageFolder: ``root/<class>/**/<image>``, sorted classes and files."""

    def __init__(
        self, root: str, transform: Transform, extensions: Sequence[str] = (".jpg", ".jpeg", ".png")
    ):
        self.classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
        self.samples = []
        for label, name in enumerate(self.classes):
            for folder, _, files in sorted(os.walk(os.path.join(root, name), followlinks=True)):
                self.samples += [
                    (os.path.join(folder, file), label)
                    for file in sorted(files)
                    if file.lower().endswith(tuple(extensions))
                ]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path, label = self.samples[index]
        return self.transform(_rgb_loader(path)), label


def image_folder(root: str, transform: Transform) -> torch.utils.data.Dataset:
    """torchvision's ImageFolder when importable, else ``ImageFolderDataset``."""
    if torchvision is not None:
        return torchvision.datasets.ImageFolder(root, transform)
    return ImageFolderDataset(root, transform)


class UrlImages(torch.utils.data.Dataset):
    """Images read from URLs with fsspec in ``__getitem__`` (one GET of the
    whole file), decoded with PIL and run through ``transform``: what a
    DataLoader user writes for remote storage (``s3://`` goes through s3fs,
    given ``storage_options``). The filesystem is made in each worker process
    on first use (fsspec's event loop does not survive fork)."""

    def __init__(
        self,
        urls: Sequence[str],
        labels: Sequence[int],
        transform: Transform,
        storage_options: Optional[dict[str, Any]] = None,
    ):
        self.urls = list(urls)
        self.labels = list(labels)
        self.transform = transform
        self.storage_options = dict(storage_options or {})
        self._fs: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.urls)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        if self._fs is None or self._pid != os.getpid():
            import fsspec

            protocol = self.urls[index].split("://", 1)[0]
            self._fs = fsspec.filesystem(protocol, skip_instance_cache=True, **self.storage_options)
            self._pid = os.getpid()
        data = self._fs.cat_file(self.urls[index])
        with Image.open(io.BytesIO(data)) as image:
            return self.transform(image.convert("RGB")), self.labels[index]


def s3fs_options(endpoint_url: str, key: str, secret: str, region: str = "us-east-1") -> dict[str, Any]:
    """s3fs's options for an S3-compatible endpoint, at its fastest for whole
    reads: ``max_concurrency=1`` makes ``cat_file`` one GET (at its default
    of 10 it first sends a HEAD for the size, which halves the rate)."""
    return {
        "endpoint_url": endpoint_url,
        "key": key,
        "secret": secret,
        "client_kwargs": {"region_name": region},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        "max_concurrency": 1,
    }


def s3_map_images(
    urls: Sequence[str], labels: Sequence[int], transform: Transform, endpoint: str, region: str = "us-east-1"
) -> torch.utils.data.Dataset:
    """s3torchconnector's ``S3MapDataset`` over ``urls`` (``s3://bucket/key``)
    on an S3-compatible ``endpoint`` (path-style), each object decoded with
    PIL and run through ``transform``: AWS's own PyTorch reader (its CRT
    client; credentials from the environment, as it finds them)."""
    from s3torchconnector import S3ClientConfig, S3MapDataset

    label_of = dict(zip(urls, labels))

    def decode(reader: Any) -> tuple[Any, int]:
        with Image.open(io.BytesIO(reader.read())) as image:
            return transform(image.convert("RGB")), label_of[f"s3://{reader.bucket}/{reader.key}"]

    return S3MapDataset.from_objects(
        list(urls),
        region=region,
        endpoint=endpoint,
        transform=decode,
        s3client_config=S3ClientConfig(force_path_style=True),
    )


def webdataset_images(
    urls: Sequence[str], transform: Transform, shuffle_buffer: int, seed: int = 0
) -> torch.utils.data.IterableDataset:
    """webdataset over tar shards at ``urls`` (it reads ``http://`` through a
    ``curl`` pipe, one GET per shard), shards split between DataLoader
    workers, samples shuffled in a buffer of ``shuffle_buffer``, the image (``jpg`` or
    ``png`` member) decoded with PIL and run through ``transform``, with its
    ``cls`` label: webdataset's documented ImageNet recipe."""
    import webdataset

    def decode(sample: dict[str, Any]) -> tuple[Any, int]:
        data = next(sample[ext] for ext in ("jpg", "jpeg", "png") if ext in sample)
        with Image.open(io.BytesIO(data)) as image:
            return transform(image.convert("RGB")), int(sample["cls"])

    # empty_check=False: fewer shards than workers leaves a worker idle, not failed.
    shards = webdataset.WebDataset(list(urls), shardshuffle=False, seed=seed, empty_check=False)
    return shards.shuffle(shuffle_buffer).map(decode)


# --- slow storage ------------------------------------------------------------------------------------


class SlowFiles:
    """``count`` samples cycling over ``paths``; every read first sleeps
    ``latency`` seconds (slow storage) and returns the file's bytes."""

    def __init__(self, paths: Sequence[str], count: int, latency: float):
        self.paths = list(paths)
        self.count = count
        self.latency = latency

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> bytes:
        if not 0 <= index < self.count:
            raise IndexError(index)
        time.sleep(self.latency)
        with open(self.paths[index % len(self.paths)], "rb") as f:
            return f.read()


class SlowDecodedFiles(torch.utils.data.Dataset):
    """SlowFiles decoded with PIL and transformed: the DataLoader side."""

    def __init__(self, files: SlowFiles, transform: Transform):
        self.files = files
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> Any:
        return self.transform(Image.open(io.BytesIO(self.files[index])).convert("RGB"))


# --- MNIST ----------------------------------------------------------------------------------------------


def read_idx(path: str) -> np.ndarray:
    """An unsigned-byte IDX file as a numpy array."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * d : 8 + 4 * d], "big") for d in range(ndim))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


class IdxDataset(torch.utils.data.Dataset):
    """MNIST from IDX files, the tuning guide's way: all samples in memory as
    tensors, each item converted to float and normalized in ``__getitem__``."""

    MEAN, STD = 0.1307, 0.3081

    def __init__(self, images_path: str, labels_path: str, limit: Optional[int] = None):
        self.images = torch.from_numpy(read_idx(images_path)[:limit].copy())
        self.labels = torch.from_numpy(read_idx(labels_path)[:limit].astype(np.int64))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = (self.images[index].float().div(255) - self.MEAN) / self.STD
        return image.unsqueeze(0), self.labels[index]


# --- CIFAR-10 ------------------------------------------------------------------------------------------

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))


def write_cifar10(root: str, count: int, seed: int = 0) -> None:
    """Writes ``count`` random training images (and a test batch of a fifth
    of that) in the layout of the official python version,
    ``root/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}``."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, CIFAR_FOLDER)
    os.makedirs(folder, exist_ok=True)
    sizes = [count * (i + 1) // 5 - count * i // 5 for i in range(5)]
    batches = dict(zip(CIFAR_TRAIN_BATCHES, sizes))
    batches["test_batch"] = max(1, count // 5)
    for name, n in batches.items():
        entry = {
            "batch_label": name,
            "labels": rng.integers(0, 10, n).tolist(),
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            "filenames": [f"{name}_{i}.png" for i in range(n)],
        }
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump(entry, f, protocol=2)
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    with open(os.path.join(folder, "batches.meta"), "wb") as f:
        pickle.dump({"label_names": names, "num_cases_per_batch": sizes[0], "num_vis": 3072}, f, protocol=2)


class CifarDataset(torch.utils.data.Dataset):
    """CIFAR-10's training batches in memory as N×32×32×3 uint8 (torchvision's
    layout), each item augmented in ``__getitem__`` with numpy/torch ops as
    torchvision's recipe does: RandomCrop(32, padding=4) when ``padding`` is
    set (zero padding, a uniform offset), RandomHorizontalFlip, ToTensor,
    Normalize."""

    def __init__(self, root: str, padding: Optional[int] = 4):
        data, labels = [], []
        for name in CIFAR_TRAIN_BATCHES:
            with open(os.path.join(root, CIFAR_FOLDER, name), "rb") as f:
                entry = pickle.load(f, encoding="latin1")
            data.append(entry["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            labels.extend(entry["labels"])
        self.data = np.ascontiguousarray(np.concatenate(data))
        self.labels = torch.tensor(labels, dtype=torch.int64)
        self.padding = padding
        self.mean = torch.tensor(CIFAR_MEAN).view(3, 1, 1)
        self.std = torch.tensor(CIFAR_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.data[index]
        if self.padding:
            p = self.padding
            padded = np.pad(image, ((p, p), (p, p), (0, 0)))
            top, left = (int(v) for v in torch.randint(0, 2 * p + 1, (2,)))
            image = padded[top : top + 32, left : left + 32]
        if torch.rand(()) < 0.5:
            image = image[:, ::-1]
        tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div(255)
        return (tensor - self.mean) / self.std, self.labels[index]
