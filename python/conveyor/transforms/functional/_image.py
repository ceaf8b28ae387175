"""The conversion shared by every functional op: a numpy or torch image in,
the engine's HWC uint8 array through the registered C++ function, the same
kind of image out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, Union

import numpy as np

from conveyor import _conveyor
from conveyor.errors import ConfigError

#: A uint8 numpy array (H×W×C or H×W) or a uint8 torch tensor (C×H×W).
ImageLike = TypeVar("ImageLike")

Param = Union[bool, int, float, Sequence[float]]


def _numbers(value: Param) -> list[float]:
    if isinstance(value, (bool, int, float, np.integer, np.floating)):
        return [float(value)]
    return [float(v) for v in value]


def apply(op: str, name: str, image: Any, params: Mapping[str, Param]) -> Any:
    """Runs the registered C++ image function `name` on `image`.

    `op` is the user-facing name used in errors (e.g. ``"rotate"``); `params`
    maps argument names to numbers (None values are left out: the engine's
    default applies).
    """
    if type(image).__module__.startswith("torch"):
        if image.dtype.__str__() != "torch.uint8" or image.ndim not in (2, 3):
            raise ConfigError(
                f"{op}: image must be a uint8 tensor of shape (C, H, W) or (H, W), got "
                f"{tuple(image.shape)} {image.dtype}"
            )
        squeeze = image.ndim == 2
        hwc = image.detach().cpu().numpy()
        hwc = hwc[:, :, None] if squeeze else np.moveaxis(hwc, 0, -1)
        out = _run(name, hwc, params)
        import torch

        # A 2-D image stays 2-D unless the op gave it channels (rgb_to_grayscale(x, 3)).
        squeeze = squeeze and out.shape[2] == 1
        result = torch.from_numpy(out[:, :, 0] if squeeze else np.ascontiguousarray(np.moveaxis(out, -1, 0)))
        return result.to(image.device)
    if not isinstance(image, np.ndarray):
        raise ConfigError(f"{op}: image must be a numpy array or a torch tensor, got {type(image).__name__}")
    if image.dtype != np.uint8 or image.ndim not in (2, 3):
        raise ConfigError(
            f"{op}: image must be a uint8 array of shape (H, W, C) or (H, W), got {image.shape} {image.dtype}"
        )
    squeeze = image.ndim == 2
    out = _run(name, image[:, :, None] if squeeze else image, params)
    return out[:, :, 0] if squeeze and out.shape[2] == 1 else out


def _run(name: str, hwc: np.ndarray, params: Mapping[str, Param]) -> np.ndarray:
    # The engine checks the image (channels, empty, max_pixels), naming the op.
    record = {k: _numbers(v) for k, v in params.items() if v is not None}
    return _conveyor.apply_image_function(name, record, np.ascontiguousarray(hwc))
