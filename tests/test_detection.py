"""Detection: COCO boxes follow the image through crops, resizes and flips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import conveyor
from conveyor import transforms as T
from conveyor.sources import CocoDetection


@pytest.fixture()
def coco(tmp_path):
    """Three 100 (h) × 200 (w) images; image 2 has two objects, image 1 one, image 3 none."""
    images = []
    for image_id in (2, 1, 3):
        name = f"{image_id:012d}.jpg"
        Image.fromarray(np.full((100, 200, 3), 50 * image_id, np.uint8)).save(tmp_path / name)
        images.append({"id": image_id, "file_name": name, "width": 200, "height": 100})
    annotations = [
        {"id": 10, "image_id": 2, "category_id": 5, "bbox": [20, 10, 40, 30], "area": 1200, "iscrowd": 0},
        {"id": 11, "image_id": 2, "category_id": 7, "bbox": [130, 50, 40, 50], "area": 2000, "iscrowd": 0},
        {"id": 12, "image_id": 1, "category_id": 5, "bbox": [0, 0, 30, 30], "area": 900, "iscrowd": 0},
    ]
    path = tmp_path / "instances.json"
    path.write_text(
        json.dumps(
            {
                "images": images,
                "annotations": annotations,
                "categories": [
                    {"id": 5, "name": "cat", "supercategory": "animal"},
                    {"id": 7, "name": "dog", "supercategory": "animal"},
                ],
            }
        )
    )
    return CocoDetection(tmp_path, path)


def batches(source, transforms, **kwargs):
    return list(conveyor.Loader(source, transforms, batch_size=3, dtype="uint8", **kwargs))


def test_boxes_follow_resize_and_flip(coco):
    ((images, targets),) = batches(coco, [T.Resize((50, 100)), T.RandomHorizontalFlip(p=1.0)])
    assert images.shape == (3, 3, 50, 100)
    assert [t["image_id"] for t in targets] == [1, 2, 3]  # Sorted by id.
    # Halved, then mirrored in a 100-wide image: x' = 100 - (x + w) / 2 ... by hand:
    assert targets[0]["boxes"].tolist() == [[85.0, 0.0, 15.0, 15.0]]
    assert targets[1]["boxes"].tolist() == [[70.0, 5.0, 20.0, 15.0], [15.0, 25.0, 20.0, 25.0]]
    assert targets[1]["labels"].tolist() == [5, 7]
    assert targets[2]["boxes"].shape == (0, 4) and targets[2]["labels"].tolist() == []


def test_crop_drops_and_clips_boxes(coco):
    # CenterCrop(100) of a 200-wide image keeps columns 50..150.
    ((_, targets),) = batches(coco, [T.CenterCrop(100)])
    assert targets[0]["boxes"].tolist() == []  # (0, 0, 30, 30) is cropped away.
    assert targets[1]["boxes"].tolist() == [
        [0.0, 10.0, 10.0, 30.0],
        [80.0, 50.0, 20.0, 50.0],
    ]  # Both clipped.
    assert targets[1]["labels"].tolist() == [5, 7]


def test_padded_targets(coco):
    ((_, targets),) = batches(coco, [T.Resize((50, 100))], targets="padded")
    assert targets["counts"].tolist() == [1, 2, 0]
    assert targets["boxes"].shape == (3, 2, 4)
    assert targets["boxes"][1].tolist() == [[10.0, 5.0, 20.0, 15.0], [65.0, 25.0, 20.0, 25.0]]
    assert targets["labels"].tolist() == [[5, -1], [5, 7], [-1, -1]]
    assert targets["image_ids"] == [1, 2, 3]
    assert targets["boxes"].dtype == torch.float32


def test_random_crops_are_deterministic_and_inside(coco):
    first = batches(coco, [T.RandomResizedCrop(64), T.RandomHorizontalFlip()], seed=3)
    again = batches(coco, [T.RandomResizedCrop(64), T.RandomHorizontalFlip()], seed=3, threads=1)
    for (_, a), (_, b) in zip(first, again):
        for ta, tb in zip(a, b):
            assert torch.equal(ta["boxes"], tb["boxes"])
            boxes = ta["boxes"]
            assert bool((boxes[:, :2] >= 0).all() and (boxes[:, 0] + boxes[:, 2] <= 64).all())
            assert bool((boxes[:, 1] + boxes[:, 3] <= 64).all() and (boxes[:, 2:] > 0).all())


def test_targets_argument_is_checked(coco):
    with pytest.raises(conveyor.ConfigError, match="targets must be 'list' or 'padded', got 'ragged'"):
        conveyor.Loader(coco, [T.Resize((50, 100))], targets="ragged")


def test_targets_move_to_the_device(coco):
    # "meta" stands in for an accelerator on a CPU-only machine.
    ((images, targets),) = batches(coco, [T.Resize((50, 100))], device="meta")
    assert images.device.type == "meta"
    assert all(t["boxes"].device.type == "meta" and t["labels"].device.type == "meta" for t in targets)
    ((_, padded),) = batches(coco, [T.Resize((50, 100))], device="meta", targets="padded")
    assert padded["boxes"].device.type == "meta" and padded["counts"].device.type == "meta"


def test_coco_out_of_range_ids_and_non_finite_boxes_are_read_errors(coco):
    from pathlib import Path

    root, path = coco.images_dir, Path(coco.annotation_json)
    data = json.loads(path.read_text())
    data["annotations"].append({"id": 13, "image_id": 3, "category_id": 2**63, "bbox": [1, 2, 3, 4]})
    path.write_text(json.dumps(data))
    # Regression: 2**63 became -9223372036854775808 in the labels.
    with pytest.raises(conveyor.ReadError) as info:
        CocoDetection(root, path)
    assert str(info.value) == (
        f"{path}: not a COCO instances file: "
        "annotations[3].category_id: 9223372036854775808 is out of the int64 range"
    )
    # NaN or infinity cannot reach a box: Python's json writes NaN/Infinity, which are not JSON.
    data["annotations"][3] = {"id": 13, "image_id": 3, "category_id": 5, "bbox": [1, float("nan"), 3, 4]}
    path.write_text(json.dumps(data))
    with pytest.raises(conveyor.ReadError, match=r"^.*instances.json: invalid JSON: "):
        CocoDetection(root, path)


def test_box_format_xyxy_gives_corners(coco):
    transforms = [T.Resize((50, 100)), T.RandomHorizontalFlip(p=1.0)]
    ((_, targets),) = batches(coco, transforms, box_format="xyxy")
    # The xywh boxes of test_boxes_follow_resize_and_flip as (x1, y1, x2, y2).
    assert targets[0]["boxes"].tolist() == [[85.0, 0.0, 100.0, 15.0]]
    assert targets[1]["boxes"].tolist() == [[70.0, 5.0, 90.0, 20.0], [15.0, 25.0, 35.0, 50.0]]
    assert targets[2]["boxes"].shape == (0, 4)
    ((_, padded),) = batches(coco, transforms, box_format="xyxy", targets="padded")
    assert padded["boxes"][1].tolist() == [[70.0, 5.0, 90.0, 20.0], [15.0, 25.0, 35.0, 50.0]]
    assert padded["boxes"][0].tolist() == [[85.0, 0.0, 100.0, 15.0], [0.0, 0.0, 0.0, 0.0]]
    with pytest.raises(conveyor.ConfigError, match="^box_format must be 'xywh' or 'xyxy', got 'cxcywh'$"):
        conveyor.Loader(coco, transforms, box_format="cxcywh")


def test_collate_fn_gets_each_image_with_its_target(coco):
    def collate(samples):
        return [
            (tuple(image.shape), target["image_id"], target["boxes"].tolist()) for image, target in samples
        ]

    ((_, targets),) = batches(coco, [T.Resize((50, 100))])
    (got,) = batches(coco, [T.Resize((50, 100))], collate_fn=collate)
    assert got == [((3, 50, 100), t["image_id"], t["boxes"].tolist()) for t in targets]
    assert [len(boxes) for _, _, boxes in got] == [1, 2, 0]  # Images 1, 2, 3 of the fixture.
    with pytest.raises(
        conveyor.ConfigError, match="^collate_fn takes the samples one by one; targets='padded'"
    ):
        batches(coco, [T.Resize((50, 100))], targets="padded", collate_fn=collate)
