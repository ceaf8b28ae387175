"""A chain of transforms as the engine runs it: the list a Loader takes
(conveyor transforms, or a torchvision pipeline converted) and
compile_pipeline, which plans it once into the engine's ImagePipeline."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Optional, Union

from conveyor import _conveyor
from conveyor._checks import check_bool, is_int
from conveyor.errors import ConfigError
from conveyor.transforms import torchvision
from conveyor.transforms.base import DEFAULT_MAX_PIXELS, OUTPUT_DTYPES, Transform
from conveyor.transforms.batch import BatchTransform

__all__ = ["as_transform_list", "compile_pipeline", "transform_chain"]


def as_transform_list(transforms: object) -> list[Transform]:
    """``transforms`` as a list of conveyor transforms: None is empty, a single
    transform is a list of one; a torchvision pipeline (a ``Compose``, a list
    holding torchvision transforms, or one) is converted by ``from_torchvision``.

    Raises:
        ConfigError: ``transforms`` or one of its items is not a conveyor
            transform (naming its position and type, and the transforms there
            are), or a torchvision transform that does not convert.
    """
    return transform_chain(transforms)[0]


def transform_chain(transforms: object) -> tuple[list[Transform], Optional[str]]:
    """``as_transform_list(transforms)`` and the output dtype the chain implies:
    a torchvision pipeline's type conversions (``ToTensor``, ``ToDtype``, ...),
    or the ``dtype`` of a ``from_torchvision`` result; None for conveyor's own
    transforms, which imply none."""
    if transforms is None:
        return [], None
    if isinstance(transforms, Transform):
        return [transforms], None
    if torchvision.is_torchvision(transforms) or (
        isinstance(transforms, (list, tuple)) and any(torchvision.is_torchvision(t) for t in transforms)
    ):
        converted = torchvision.from_torchvision(transforms)
        return list(converted), converted.dtype
    if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Iterable):
        raise ConfigError(
            f"transforms: {_qualified_name(transforms)} is not a conveyor transform or a list of them"
        )
    steps = list(transforms)
    for i, step in enumerate(steps):
        if isinstance(step, BatchTransform):
            raise ConfigError(
                f"transforms[{i}]: {type(step).__name__} of batch mixes works on whole batches: pass it as "
                "batch_transforms="
            )
        if not isinstance(step, Transform):
            raise ConfigError(
                f"transforms[{i}]: {_qualified_name(step)} is not a conveyor transform; "
                f"use conveyor.transforms ({', '.join(Transform.registered)})"
            )
    return steps, transforms.dtype if isinstance(transforms, torchvision.Converted) else None


def _qualified_name(value: object) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def compile_pipeline(
    transforms: Union[Transform, Sequence[Transform], None],
    *,
    dtype: str = "float32",
    layout: str = "CHW",
    channels: int = 3,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    raw_shape: Optional[tuple[int, int, int]] = None,
    variable_size: bool = False,
    stream_output: bool = False,
    exif_orientation: bool = True,
) -> _conveyor.SampleTransform:
    """Plan ``transforms`` once into the engine's image pipeline.

    Args:
        transforms: conveyor transforms, applied in order after decoding.
        dtype: "uint8" (values 0..255, no Normalize), "float16", "float32"
            or "bfloat16" (values scaled to [0, 1], then normalized).
        layout: "CHW" (PyTorch's convention) or "HWC".
        channels: 3 (RGB) or 1 (grayscale).
        max_pixels: images whose header claims more pixels raise TooLargeError.
        raw_shape: (height, width, channels) when samples are raw uint8
            pixels of that shape (MNIST, CIFAR, arrays) instead of encoded
            images; the chain then starts from that fixed size.
        variable_size: accept a chain without a fixed output size (each
            sample is then the size its steps give; its ``sample_shape`` has
            -1 for height and width): what the Loader does, giving such
            batches as lists of tensors.
        stream_output: write float32 CHW outputs with streaming
            (non-temporal) stores: faster when each output goes to memory
            that is not read again soon (the Loader's batch buffers, which
            is what the Loader asks for), slower when the same output memory
            is rewritten while it is in cache. The values are the same.
        exif_orientation: turn each image as its EXIF orientation tag says,
            as PIL's ``ImageOps.exif_transpose``; False: the stored pixels as
            they are, as torchvision's ImageFolder gives them (a TIFF's own
            Orientation tag is applied either way, as PIL applies it).

    Raises:
        ConfigError: an unknown transform, an invalid argument, or (without
            ``variable_size``) a chain without a fixed output size (end the
            resizes and crops with a crop or Resize((h, w))).
    """
    # Whether the chain gives a fixed size is the engine planner's rule (each
    # C++ step's plan()), checked once there.
    steps = as_transform_list(transforms)
    if dtype not in OUTPUT_DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(OUTPUT_DTYPES)}, got {dtype!r}")
    if layout not in ("CHW", "HWC"):
        raise ConfigError(f"layout must be 'CHW' or 'HWC', got {layout!r}")
    if not is_int(channels) or channels not in (1, 3):
        raise ConfigError(f"channels must be 1 or 3, got {channels!r}")
    if not is_int(max_pixels) or max_pixels <= 0:
        raise ConfigError(f"max_pixels must be a positive int, got {max_pixels!r}")
    return _conveyor.ImagePipeline(
        [t._spec() for t in steps],
        dtype=dtype,
        layout=layout,
        channels=int(channels),
        max_pixels=int(max_pixels),
        raw_shape=raw_shape,
        variable_size=bool(variable_size),
        exif_orientation=check_bool(exif_orientation, "exif_orientation"),
        stream_output=bool(stream_output),
    )
