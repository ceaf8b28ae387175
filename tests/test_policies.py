"""The augmentation policies (TrivialAugmentWide, RandAugment, AutoAugment):
arguments, determinism across threads and resume, and their conversion."""

from __future__ import annotations

import enum
from pathlib import Path

import pytest
import torch

import conveyor
from conftest import assert_resumes_exactly
from conveyor import transforms as T
from conveyor.errors import ConfigError
from conveyor.sources import ImageFolder

NORMALIZE = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])

# Each policy between a random crop and Normalize (TrivialAugmentWide as the ImageNet recipe).
CHAINS = {
    "trivial": [T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.TrivialAugmentWide(), NORMALIZE],
    "rand": [T.RandomResizedCrop(32), T.RandAugment(num_ops=3, magnitude=12, fill=[10, 20, 30]), NORMALIZE],
    "auto": [
        T.RandomResizedCrop(32),
        T.AutoAugment("cifar10", interpolation="bilinear"),
        T.AutoAugment("svhn"),
        T.AutoAugment(),
        NORMALIZE,
    ],
    "augmix": [T.RandomResizedCrop(32), T.AugMix(severity=5, chain_depth=-1, alpha=0.5), NORMALIZE],
}


def make_loader(root: Path, chain: str, **kwargs) -> conveyor.Loader:
    options = dict(batch_size=5, shuffle=True, seed=11)
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root), CHAINS[chain], **options)


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_same_batches_for_any_thread_count(texture_folder, chain):
    reference = [(x.clone(), y.clone()) for x, y in make_loader(texture_folder, chain, threads=1, prefetch=1)]
    assert len(reference) == 5
    for threads in (2, 4):
        got = list(make_loader(texture_folder, chain, threads=threads, io_threads=threads * 2, prefetch=3))
        assert len(got) == len(reference)
        for (a, la), (b, lb) in zip(reference, got):
            assert torch.equal(a, b) and torch.equal(la, lb)


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_resume_mid_epoch_is_exact(texture_folder, chain):
    assert_resumes_exactly(lambda **kw: make_loader(texture_folder, chain, **kw), epoch=2)


def test_policies_change_images_and_draw_per_epoch(texture_folder):
    plain = [T.RandomResizedCrop(32), T.RandomHorizontalFlip(), NORMALIZE]
    options = dict(batch_size=24, seed=5, shuffle=False)
    base = [x.clone() for x, _ in conveyor.Loader(ImageFolder(texture_folder), plain, **options)]
    first = [x.clone() for x, _ in make_loader(texture_folder, "trivial", **options)]
    # Same crops and flips (the policy draws after them): most images changed, some (Identity) not.
    changed = [not torch.equal(a, b) for a, b in zip(base[0], first[0])]
    assert 12 <= sum(changed) < 24
    loader = make_loader(texture_folder, "trivial", **options)
    loader.set_epoch(1)
    assert not torch.equal(first[0], next(iter(loader))[0])


class Policy(enum.Enum):
    """Stands in for torchvision's AutoAugmentPolicy (matched by class name)."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


Policy.__name__ = "AutoAugmentPolicy"


def test_policy_as_enum_or_string():
    assert T.AutoAugment(Policy.SVHN).policy == "svhn"
    assert T.AutoAugment("CIFAR10").policy == "cifar10"
    params = {"policy": [0.0], "interpolation": [0.0], "fill": [0.0]}
    assert T.AutoAugment()._spec() == ("auto_augment", params)


BAD = [
    (lambda: T.RandAugment(num_ops=-1), "RandAugment: num_ops must be an integer in [0, 1000], got -1"),
    (lambda: T.RandAugment(num_ops=1.5), "RandAugment: num_ops must be an integer, got 1.5"),
    (
        lambda: T.RandAugment(magnitude=31),
        "RandAugment: magnitude must be an integer in [0, num_magnitude_bins - 1 = 30], got 31",
    ),
    (
        lambda: T.RandAugment(magnitude=-1),
        "RandAugment: magnitude must be an integer in [0, num_magnitude_bins - 1 = 30], got -1",
    ),
    (
        lambda: T.RandAugment(magnitude=5, num_magnitude_bins=5),
        "RandAugment: magnitude must be an integer in [0, num_magnitude_bins - 1 = 4], got 5",
    ),
    (
        lambda: T.RandAugment(num_magnitude_bins=1),
        "RandAugment: num_magnitude_bins must be an integer in [2, 1000000], got 1",
    ),
    (
        lambda: T.TrivialAugmentWide(num_magnitude_bins=0),
        "TrivialAugmentWide: num_magnitude_bins must be an integer in [2, 1000000], got 0",
    ),
    (
        lambda: T.TrivialAugmentWide(num_magnitude_bins="31"),
        "TrivialAugmentWide: num_magnitude_bins must be an integer, got '31'",
    ),
    (
        lambda: T.TrivialAugmentWide(interpolation="bicubic"),
        "TrivialAugmentWide: interpolation must be one of InterpolationMode.NEAREST, "
        "InterpolationMode.BILINEAR (or 'nearest', 'bilinear'), got 'bicubic'",
    ),
    (
        lambda: T.RandAugment(fill=[1, 2]),
        "RandAugment: fill must be one number or one per channel (3), got [1, 2]",
    ),
    (
        lambda: T.AutoAugment(fill=300),
        "AutoAugment: fill values must be in [0, 255], got 300",
    ),
    (
        lambda: T.AutoAugment("cifar100"),
        "AutoAugment: policy must be AutoAugmentPolicy.IMAGENET, CIFAR10 or SVHN "
        "(or 'imagenet', 'cifar10', 'svhn'), got 'cifar100'",
    ),
    (
        lambda: T.AutoAugment(3),
        "AutoAugment: policy must be AutoAugmentPolicy.IMAGENET, CIFAR10 or SVHN "
        "(or 'imagenet', 'cifar10', 'svhn'), got 3",
    ),
]


BAD += [
    (lambda: T.AugMix(severity=0), "AugMix: severity must be an integer in [1, 10], got 0"),
    (lambda: T.AugMix(severity=11), "AugMix: severity must be an integer in [1, 10], got 11"),
    (lambda: T.AugMix(mixture_width=0), "AugMix: mixture_width must be an integer in [1, 100], got 0"),
    (lambda: T.AugMix(chain_depth=101), "AugMix: chain_depth must be an integer in [-1000000, 100], got 101"),
    (lambda: T.AugMix(alpha=0), "AugMix: alpha must be in (0, 1000000], got 0"),
    (lambda: T.AugMix(alpha=float("nan")), "AugMix: alpha must be finite, got nan"),
    (lambda: T.AugMix(all_ops=2), "AugMix: all_ops must be True or False, got 2"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_arguments_are_config_errors(make, message):
    with pytest.raises(ConfigError) as info:
        make()
    assert str(info.value) == message


def test_fill_of_three_values_on_gray_images_is_refused():
    with pytest.raises(ConfigError, match="TrivialAugmentWide: "):
        T.compile_pipeline([T.TrivialAugmentWide(fill=[1, 2, 3])], channels=1)
