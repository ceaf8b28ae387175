"""The parity set-up itself, and the transforms conveyor had before issue 10
against torchvision v2 on uint8 tensors."""

import numpy as np
import torch
import torchvision
from torchvision.transforms import v2

from conftest import mean_abs_diff, png_bytes, to_tensor
from conveyor import transforms as T
from conveyor.transforms import compile_pipeline


def test_the_reference_is_torchvision_0_29():
    assert torchvision.__version__.startswith("0.29."), torchvision.__version__
    assert torch.__version__.startswith("2.14."), torch.__version__


def test_resize_center_crop_normalize_match_torchvision_v2(photo):
    pipeline = compile_pipeline([T.Resize(200), T.CenterCrop(160)], dtype="uint8", layout="HWC")
    ours = np.asarray(pipeline.apply(png_bytes(photo)))
    theirs = v2.Compose([v2.Resize(200, antialias=True), v2.CenterCrop(160)])(to_tensor(photo))
    assert mean_abs_diff(ours, theirs.permute(1, 2, 0).numpy()) <= 1.0

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    pipeline = compile_pipeline([T.CenterCrop(160), T.Normalize(mean, std)])
    ours = np.asarray(pipeline.apply(png_bytes(photo)))
    theirs = v2.Compose([v2.CenterCrop(160), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)])(
        to_tensor(photo)
    )
    # A crop is exact, so the normalized values are torchvision's float32 arithmetic.
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=1e-6)
