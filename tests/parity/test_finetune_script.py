"""A DataLoader + torchvision v2 fine-tuning script with the habits such
scripts have (a WeightedRandomSampler, a collate_fn returning a dict,
persistent_workers, prefetch_factor, timeout, len(loader.dataset), a peek
with next(iter(loader)) inside the loop, RandomApply, a bicubic Resize,
bfloat16 output) runs with conveyor.Loader in place of DataLoader, nothing
else changed, and gives the DataLoader's batches for the same indices: the
sampler's generator seeded alike gives both the same indices, and every
transform here is deterministic for them (RandomApply with p=1 and a fixed
jitter factor), so the batches are equal exactly."""

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torchvision.transforms import InterpolationMode, v2

import conveyor

SAMPLES_PER_EPOCH = 20
BATCH = 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory, photo):
    """An ImageFolder of 3 classes × 5 PNG crops of the photograph, of varied sizes."""
    root = tmp_path_factory.mktemp("finetune")
    for c in range(3):
        (root / f"class{c}").mkdir()
        for k in range(5):
            i = c * 5 + k
            crop = photo[i * 7 : 200 + i * 11, i * 3 : 180 + i * 13]
            Image.fromarray(np.ascontiguousarray(crop)).save(root / f"class{c}" / f"{k}.png")
    return root


def transform() -> v2.Compose:
    return v2.Compose(
        [
            v2.ToImage(),
            v2.Resize((72, 80), interpolation=InterpolationMode.BICUBIC),
            v2.CenterCrop(64),
            v2.RandomApply([v2.ColorJitter(brightness=(1.25, 1.25))], p=1.0),
            v2.ToDtype(torch.bfloat16, scale=True),
        ]
    )


def collate(samples):
    images, labels = zip(*samples)
    return {"image": torch.stack(images), "label": torch.tensor(labels)}


def sampler(weights):
    return torch.utils.data.WeightedRandomSampler(
        weights, SAMPLES_PER_EPOCH, replacement=True, generator=torch.Generator().manual_seed(5)
    )


def run_script(make_loader, folder):
    """The script's loop: one epoch, a peek at the second step; returns the
    epoch's batches, the peek and len(loader.dataset)."""
    dataset = torchvision.datasets.ImageFolder(str(folder))
    weights = [3.0 if label == 0 else 1.0 for _, label in dataset.samples]  # Class 0 drawn more.
    loader = make_loader(dataset, weights)
    size = len(loader.dataset)
    seen, peek = [], None
    for step, batch in enumerate(loader):
        seen.append({k: v.clone() for k, v in batch.items()})
        if step == 1 and make_loader is conveyor_loader:
            # DataLoader with persistent_workers restarts its one iterator here
            # (the loop would lose its place), so its script has no peek.
            peek = next(iter(loader))
    return seen, peek, size


def dataloader(dataset, weights):
    dataset.transform = transform()
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=sampler(weights),
        collate_fn=collate,
        num_workers=1,
        persistent_workers=True,
        prefetch_factor=4,
        timeout=60,
    )


def conveyor_loader(dataset, weights):
    return conveyor.Loader(
        conveyor.sources.ImageFolder(dataset.root),
        transform(),
        batch_size=BATCH,
        sampler=sampler(weights),
        collate_fn=collate,
        num_workers=1,
        persistent_workers=True,
        prefetch_factor=4,
        timeout=60,
        exif_orientation=False,
    )


def test_the_fine_tuning_script_gives_the_dataloaders_batches(folder):
    theirs, _, their_size = run_script(dataloader, folder)
    ours, peek, our_size = run_script(conveyor_loader, folder)
    assert our_size == their_size == 15
    assert len(ours) == len(theirs) == SAMPLES_PER_EPOCH // BATCH
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert a.keys() == b.keys() == {"image", "label"}
        assert a["image"].dtype == b["image"].dtype == torch.bfloat16, k
        assert a["image"].shape == b["image"].shape == (BATCH, 3, 64, 64), k
        assert torch.equal(a["label"], b["label"]), k
        assert torch.equal(a["image"], b["image"]), (k, (a["image"].float() - b["image"].float()).abs().max())
    # The class weights show: class 0 is drawn about 3 times as often.
    labels = torch.cat([b["label"] for b in ours])
    assert (labels == 0).sum() > (labels == 1).sum()
    # The peek inside the loop is a batch of its own pass (the sampler drawn
    # again) and left the loop's batches as they were.
    assert peek is not None and peek["image"].shape == (BATCH, 3, 64, 64)
