"""COCO detection: images with their boxes."""

from __future__ import annotations

import os
from typing import Any

from conveyor import _conveyor
from conveyor.errors import ConfigError
from conveyor.sources.base import PathLike
from conveyor.sources.files import FileList


class CocoDetection(FileList):
    """Images of a COCO "instances" annotation file, with their boxes.

    Images are taken in id order (as torchvision's CocoDetection); the file is
    parsed once in C++. Through a Loader each batch is ``(images, targets)``:
    every object's box (COCO's x, y, width, height, in pixels of the
    transformed image) follows the sample's crops, resizes and flips; boxes
    cropped away are dropped, partly visible ones clipped. ``targets`` is a
    list of per-image dicts or one padded dict (``Loader(targets=...)``).
    ``targets(i)`` gives the untransformed annotations of sample ``i``.
    Segmentations (polygons, RLE) and keypoints are not parsed.

    Args:
        images_dir: folder holding the images (``file_name`` is relative to it).
        annotation_json: path of ``instances_*.json``.

    Raises:
        ReadError: the annotation file is unreadable, not a regular file, or
            malformed (naming it and the entry, e.g. ``annotations[3].bbox``),
            including ids beyond int64 (``annotations[3].category_id``) and
            NaN or infinite numbers (not valid JSON).
        ConfigError: the file lists no image; a path holds a NUL byte
            (``images_dir``, ``annotation_json``, or a ``file_name``: naming
            ``paths[i]``).
    """

    def __init__(self, images_dir: PathLike, annotation_json: PathLike) -> None:
        self.images_dir = os.fsdecode(images_dir)
        self.annotation_json = os.fsdecode(annotation_json)
        for name in ("images_dir", "annotation_json"):
            _conveyor.check_path(os.fsencode(getattr(self, name)), f"CocoDetection: {name}")
        coco = _conveyor.read_coco(os.fsencode(self.annotation_json))
        self._images: list[_conveyor.CocoImage] = coco.images
        if not self._images:
            raise ConfigError(f"CocoDetection: {self.annotation_json} lists no image")
        #: Image ids in sample order.
        self.ids: list[int] = [image.id for image in self._images]
        #: Category id -> name.
        self.categories: dict[int, str] = {c.id: c.name for c in coco.categories}
        paths = [os.path.join(self.images_dir, image.file_name) for image in self._images]
        boxes = [[(*a.bbox, a.category_id) for a in image.annotations] for image in self._images]
        super().__init__(paths, list(range(len(paths))), boxes)

    def _image_id(self, label: int) -> int:
        return self.ids[label]  # The label of sample i is i.

    def targets(self, index: int) -> dict[str, Any]:
        """Annotations of sample ``index``: ``image_id``, ``width``, ``height``,
        ``boxes`` (list of (x, y, w, h) in pixels, COCO's xywh), ``category_ids``,
        ``annotation_ids``, ``iscrowd`` and ``area``, one entry per object in
        the file's order."""
        image = self._images[int(index)]
        annotations = image.annotations
        return {
            "image_id": image.id,
            "width": image.width,
            "height": image.height,
            "boxes": [tuple(a.bbox) for a in annotations],
            "category_ids": [a.category_id for a in annotations],
            "annotation_ids": [a.id for a in annotations],
            "iscrowd": [a.iscrowd for a in annotations],
            "area": [a.area for a in annotations],
        }
