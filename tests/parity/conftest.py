"""Parity tests: conveyor against real torchvision 0.29 (transforms.v2 on uint8
tensors). They run in .venv-tv (`make parity-test`, part of `make test`), where
torch 2.14.1 and torchvision 0.29.1 are installed; `make py-test` leaves this
folder out (.venv has no torchvision)."""

import io

import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data


@pytest.fixture(scope="session")
def photo() -> np.ndarray:
    """scikit-image's astronaut (512×512 RGB), a photograph as uint8 HWC."""
    return np.ascontiguousarray(data.astronaut())


def png_bytes(image: np.ndarray) -> bytes:
    """`image` (uint8 HWC) as lossless PNG bytes, so conveyor decodes exactly these pixels."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "PNG")
    return buf.getvalue()


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """uint8 HWC numpy → torchvision's uint8 CHW tensor."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).contiguous()


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Mean |a - b| on the uint8 scale."""
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())
