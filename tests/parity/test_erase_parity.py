"""RandomErasing (issue 10) against torchvision 0.29's transforms.v2: the box
distribution against its own make_params, and, on a box and value forced
through fixed scale and ratio, the erased output exactly."""

import numpy as np
import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from conftest import png_bytes, to_tensor
from conveyor import transforms as T
from conveyor.transforms import compile_pipeline
from conveyor.transforms import functional as F

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def erased_box(plain: np.ndarray, ours: np.ndarray) -> tuple[int, int, int, int]:
    """(i, j, h, w) of the CHW positions where `ours` differs from `plain`."""
    changed = np.argwhere((plain != ours).any(axis=0))
    (top, left), (bottom, right) = changed.min(axis=0), changed.max(axis=0)
    return int(top), int(left), int(bottom - top + 1), int(right - left + 1)


@pytest.mark.parametrize("value", [0.0, [-2.0, 0.5, 1.25]])
def test_erasing_after_normalize_matches_torchvision_exactly(photo, value):
    # area 0.1 * 200 * 200 = 4000, ratio 0.4: h = round(sqrt(1600)) = 40, w = 100.
    scale, ratio = (0.1, 0.1), (0.4, 0.4)
    base = [T.CenterCrop(200), T.Normalize(MEAN, STD)]
    erasing = T.RandomErasing(p=1.0, scale=scale, ratio=ratio, value=value)
    data = png_bytes(photo)
    plain = np.asarray(compile_pipeline(base).apply(data, seed=1))
    ours = np.asarray(compile_pipeline([*base, erasing]).apply(data, seed=1))

    # v2's ToDtype scales by multiplying with 1 / 255 (conveyor: ToTensor's
    # division), a float32 ulp apart; the erasing is compared on conveyor's
    # normalized tensor, so exactly.
    tv_chain = v2.Compose(
        [v2.CenterCrop(200), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    )
    np.testing.assert_allclose(plain, tv_chain(to_tensor(photo)).numpy(), rtol=0, atol=1e-5)
    theirs_plain = torch.from_numpy(plain.copy())
    i, j, h, w = erased_box(plain, ours)
    params = v2.RandomErasing(p=1.0, scale=scale, ratio=ratio, value=value).make_params([theirs_plain])
    assert (h, w) == (params["h"], params["w"]) == (40, 100)
    v = torch.tensor([value] if isinstance(value, float) else value, dtype=torch.float32)[:, None, None]
    theirs = TF.erase(theirs_plain, i, j, h, w, v)
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_uint8_erase_converts_values_as_torch(photo):
    image = photo[:50, :60]
    for v in ([-1.5, 0.1, 300.7], [255.9]):
        ours = F.erase(to_tensor(image), 3, 4, 20, 70, torch.tensor(v)[:, None, None])
        theirs = TF.erase(to_tensor(image), 3, 4, 20, 70, torch.tensor(v)[:, None, None])
        assert torch.equal(ours, theirs)


def test_box_distribution_matches_torchvisions_make_params():
    height, width, draws = 30, 40, 10000
    # Ours: a white raw image with a uint8 output, erased with 0 where the box is.
    pipeline = compile_pipeline([T.RandomErasing(p=1.0)], dtype="uint8", raw_shape=(height, width, 3))
    white = bytes([255]) * (height * width * 3)
    ours = []
    for index in range(draws):
        out = np.asarray(pipeline.apply(white, seed=2, index=index))
        rows, cols = np.nonzero(out[0] == 0)
        ours.append((rows.min(), cols.min(), np.ptp(rows) + 1, np.ptp(cols) + 1) if rows.size else None)
    torch.manual_seed(0)
    transform = v2.RandomErasing(p=1.0)
    sample = torch.zeros(3, height, width)
    theirs = []
    for _ in range(draws):
        p = transform.make_params([sample])
        theirs.append((p["i"], p["j"], p["h"], p["w"]) if p["v"] is not None else None)
    none_ours = sum(b is None for b in ours) / draws
    none_theirs = sum(b is None for b in theirs) / draws
    assert abs(none_ours - none_theirs) <= 0.015
    a = np.array([b for b in ours if b is not None], dtype=np.float64)
    b = np.array([b for b in theirs if b is not None], dtype=np.float64)
    # Means within ~5 standard errors; the same largest sides.
    tolerance = 5 * b.std(axis=0) / np.sqrt(len(b))
    assert (np.abs(a.mean(axis=0) - b.mean(axis=0)) <= tolerance).all(), (a.mean(axis=0), b.mean(axis=0))
    assert (np.abs(a.std(axis=0) - b.std(axis=0)) <= tolerance).all(), (a.std(axis=0), b.std(axis=0))
    assert a[:, 2].max() == b[:, 2].max() and a[:, 3].max() == b[:, 3].max()


def test_from_torchvision_converts_random_erasing():
    converted = list(
        T.from_torchvision(v2.RandomErasing(p=0.3, scale=(0.1, 0.2), ratio=(0.5, 2.0), value="random"))
    )
    assert repr(converted[0]) == (
        "RandomErasing(p=0.3, scale=(0.1, 0.2), ratio=(0.5, 2.0), value='random', inplace=False)"
    )
    converted = list(T.from_torchvision(v2.RandomErasing(value=(1, 2, 3))))
    assert converted[0].value == [1.0, 2.0, 3.0]
