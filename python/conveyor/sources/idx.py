"""IDX files: MNIST and Fashion-MNIST."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from conveyor import _conveyor
from conveyor.errors import ConfigError, ReadError, _printable_path
from conveyor.sources.base import PathLike, Source


def _find_file(folders: Sequence[str], name: str) -> str:
    for folder in folders:
        for candidate in (name, name + ".gz"):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                return path
    tried = ", ".join(os.path.join(folder, name) + "[.gz]" for folder in folders)
    raise ReadError(f"{name}: not found (tried {tried})", key=name, cause="not found")


def _raw_transform(
    sample_shape: Sequence[int], transforms: Sequence[Any], output: dict[str, Any]
) -> _conveyor.SampleTransform:
    """The engine transform of raw uint8 tensors that are not images (IDX
    files of other than 1 or 3 channels): only Normalize is supported."""
    from conveyor.transforms import Normalize

    mean: list[float] = []
    std: list[float] = []
    for transform in transforms:
        if not isinstance(transform, Normalize):
            raise ConfigError(
                f"raw-pixel sources support only Normalize as a transform, got {type(transform).__name__}"
            )
        if mean:
            raise ConfigError("raw-pixel sources support a single Normalize")
        mean = [float(v) for v in _as_list(transform.mean)]
        std = [float(v) for v in _as_list(transform.std)]
    if output.get("channels") is not None:
        raise ConfigError(
            f"channels={output['channels']!r}: the samples are raw tensors of shape {tuple(sample_shape)}, "
            "not images; leave channels unset"
        )
    dtype = str(output.get("dtype", "float32")).replace("torch.", "")
    if dtype not in ("uint8", "float32"):
        raise ConfigError(f"raw-pixel sources produce uint8 or float32, not {dtype}")
    if dtype == "uint8" and mean:
        raise ConfigError("Normalize needs dtype float32, not uint8")
    layout = output.get("layout", "CHW")
    if layout not in ("CHW", "HWC"):
        raise ConfigError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
    height, width = int(sample_shape[0]), int(sample_shape[1])
    channels = int(sample_shape[2]) if len(sample_shape) > 2 else 1
    return _conveyor.RawTensorTransform(
        height, width, channels=channels, dtype=dtype, channels_first=layout == "CHW", mean=mean, std=std
    )


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class MNIST(Source):
    """The MNIST digits from their IDX files, as torchvision's MNIST: 28×28
    uint8 images and labels 0–9. Files are looked up in ``root`` and in
    ``root/MNIST/raw`` (torchvision's layout), plain or ``.gz``; plain files stay
    open and each sample is read from them (a file that shrinks afterwards
    gives a ReadError naming ``images[i]``, never a crash), ``.gz`` files are
    decompressed once into memory. Nothing is downloaded.

    Samples are raw pixels, not encoded images: they go through the image
    transforms without a decode (e.g. ``[T.RandomCrop(28, padding=2),
    T.Normalize([0.1307], [0.3081])]``), and the chain starts from the fixed
    28×28 size, so ``transforms=[]`` or a Normalize alone gives N×1×28×28
    batches (layout "CHW") or N×28×28×1 ("HWC"). ``source[i]`` is
    ``(28×28×1 uint8 array, label)``.

    ``source[i]`` of an IDX file of other than 1 or 3 channels gives its
    H×W×C uint8 tensor as stored.

    Raises:
        ReadError: a file is missing, or not a valid IDX file (naming it).
        ConfigError: the image and label files disagree on the sample count;
            image sides beyond the engine's int (2**31 - 1, naming the file);
            ``root`` holds a NUL byte.
    """

    #: Sub-folder of ``root`` that torchvision uses.
    folder = "MNIST"
    classes = [
        "0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
        "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine",
    ]  # fmt: skip

    def __init__(self, root: PathLike, train: bool = True) -> None:
        self.root = os.fsdecode(root)
        _conveyor.check_path(os.fsencode(self.root), f"{type(self).__name__}: root")
        self.train = bool(train)
        prefix = "train" if self.train else "t10k"
        folders = [self.root, os.path.join(self.root, self.folder, "raw")]
        self.images_path = _find_file(folders, f"{prefix}-images-idx3-ubyte")
        self.labels_path = _find_file(folders, f"{prefix}-labels-idx1-ubyte")
        self._source = _conveyor.IdxSource(os.fsencode(self.images_path), os.fsencode(self.labels_path))
        if len(self._source) == 0:
            raise ConfigError(f"{type(self).__name__}: {self.images_path} holds no samples")
        if self.raw_shape is not None:
            try:  # The engine's rule for raw image sizes (its int sides), named here.
                _conveyor.raw_image_shape(*self.raw_shape)
            except ConfigError as e:
                raise ConfigError(
                    f"{type(self).__name__}: {_printable_path(self.images_path)}: {e}"
                ) from None

    def __len__(self) -> int:
        return len(self._source)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Dimensions of one sample in the file: (28, 28)."""
        return tuple(self._source.sample_shape)

    @property
    def raw_shape(self) -> Optional[tuple[int, int, int]]:  # type: ignore[override]
        """(H, W, C) of the images: (28, 28, 1); None for IDX files of other
        than 1 or 3 channels, which are raw tensors (Normalize only)."""
        shape = self.sample_shape
        channels = shape[2] if len(shape) > 2 else 1
        return (shape[0], shape[1], channels) if channels in (1, 3) else None

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    def _decode_sample(self, index: int, data: bytes, key: str) -> Any:
        if self.raw_shape is None:  # A raw tensor (not 1 or 3 channels): as stored.
            return np.frombuffer(data, np.uint8).reshape(self.sample_shape).copy()
        return super()._decode_sample(index, data, key)

    def _sample_transform(self, transforms: Sequence[Any], **output: Any) -> _conveyor.SampleTransform:
        if self.raw_shape is None:
            return _raw_transform(self.sample_shape, transforms, output)
        return super()._sample_transform(transforms, **output)


class FashionMNIST(MNIST):
    """Fashion-MNIST (same IDX files as MNIST, in ``root`` or ``root/FashionMNIST/raw``)."""

    folder = "FashionMNIST"
    classes = [
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    ]  # fmt: skip
