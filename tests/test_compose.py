"""Per-sample RandomApply, RandomChoice and RandomOrder through the Loader:
the same pixels as the transforms they hold, chosen per sample from the
sample's stream (the same batches for any thread count)."""

import numpy as np
import pytest

import conveyor
import conveyor.transforms as T
from conveyor.sources import ArraySource
from conveyor.transforms.compose import RandomChoice as PerSampleRandomChoice

N = 64


def images() -> ArraySource:
    rng = np.random.default_rng(0)
    return ArraySource(rng.integers(0, 256, size=(N, 6, 5, 3), dtype=np.uint8), np.arange(N))


def batch(transforms, threads=2) -> np.ndarray:
    loader = conveyor.Loader(images(), transforms, batch_size=N, dtype="uint8", threads=threads, seed=3)
    (pixels, _), *_ = list(loader)
    return np.asarray(pixels)


def test_random_apply_with_p_one_or_zero_is_its_transforms_or_nothing():
    chain = [T.RandomInvert(1.0), T.RandomPosterize(2, p=1.0)]
    assert np.array_equal(batch([T.RandomApply(chain, p=1.0)]), batch(chain))
    assert np.array_equal(batch([T.RandomApply(chain, p=0.0)]), batch([]))


def test_each_sample_gets_one_outcome_drawn_from_its_own_stream():
    plain, inverted = batch([]), batch([T.RandomInvert(1.0)])
    mixed = batch([T.RandomApply([T.RandomInvert(1.0)], p=0.5)])
    applied = [np.array_equal(mixed[i], inverted[i]) for i in range(N)]
    for i in range(N):
        assert applied[i] or np.array_equal(mixed[i], plain[i])
    assert 10 < sum(applied) < N - 10
    # The same batches for any thread count.
    assert np.array_equal(mixed, batch([T.RandomApply([T.RandomInvert(1.0)], p=0.5)], threads=1))


def test_random_choice_of_per_sample_transforms_is_the_per_sample_step():
    choice = T.RandomChoice([T.RandomInvert(1.0), T.RandomPosterize(1, p=1.0)], p=[1, 1])
    assert isinstance(choice, PerSampleRandomChoice)
    inverted, posterized = batch([T.RandomInvert(1.0)]), batch([T.RandomPosterize(1, p=1.0)])
    out = batch([choice])
    picks = [np.array_equal(out[i], inverted[i]) for i in range(N)]
    assert all(picks[i] or np.array_equal(out[i], posterized[i]) for i in range(N))
    assert 10 < sum(picks) < N - 10
    # Of batch mixes, T.RandomChoice stays the batch transform.
    assert isinstance(T.RandomChoice([T.MixUp(), T.CutMix()]), T.BatchTransform)


def test_random_order_runs_both_transforms_in_one_of_their_orders():
    invert, posterize = T.RandomInvert(1.0), T.RandomPosterize(1, p=1.0)
    first, second = batch([invert, posterize]), batch([posterize, invert])
    out = batch([T.RandomOrder([invert, posterize])])
    orders = [np.array_equal(out[i], first[i]) for i in range(N)]
    assert all(orders[i] or np.array_equal(out[i], second[i]) for i in range(N))
    assert 10 < sum(orders) < N - 10


@pytest.mark.parametrize(
    "make,message",
    [
        (
            lambda: T.RandomApply([T.RandomHorizontalFlip()]),
            "RandomApply: transforms[0] is a crop, resize or flip; per sample, RandomApply takes steps on "
            "the image (colour, blur, rotations, policies, T.Lambda)",
        ),
        (lambda: T.RandomApply([], p=0.5), "RandomApply: transforms must not be empty"),
        (lambda: T.RandomApply([T.RandomInvert()], p=1.5), "RandomApply: p must be in [0, 1], got 1.5"),
        (
            lambda: T.RandomChoice([T.RandomInvert()], p=[1, 2]),
            "RandomChoice: p must have 1 value(s), got [1, 2]",
        ),
        (
            lambda: T.RandomOrder(["invert"]),
            "RandomOrder: transforms[0] must be a conveyor transform (conveyor.transforms.*; "
            "from_torchvision converts torchvision's), got str",
        ),
    ],
)
def test_bad_arguments_are_config_errors_naming_them(make, message):
    with pytest.raises(conveyor.ConfigError) as info:
        make()
    assert str(info.value) == message


def test_nesting_deeper_than_the_limit_or_a_transform_holding_itself_is_a_config_error():
    nested = T.RandomInvert()
    with pytest.raises(conveyor.ConfigError, match=r"^RandomApply: transforms nested more than 32 deep"):
        for _ in range(40):
            nested = T.RandomApply([nested])
    loop = T.RandomApply([T.RandomInvert()])
    loop.transforms.append(loop)
    with pytest.raises(conveyor.ConfigError, match=r"nested more than 32 deep \(or one holds itself\)"):
        conveyor.transforms.compile_pipeline([T.CenterCrop(4), loop])


def test_random_choice_of_batch_mixes_copies_and_pickles_and_each_kind_is_named_where_it_belongs():
    import copy
    import pickle

    mixes = T.RandomChoice([T.MixUp(num_classes=3), T.CutMix(num_classes=3)])
    for clone in (copy.copy(mixes), copy.deepcopy(mixes), pickle.loads(pickle.dumps(mixes))):
        assert type(clone) is type(mixes) and repr(clone) == repr(mixes)
    with pytest.raises(conveyor.ConfigError, match=r"pass it as batch_transforms="):
        conveyor.Loader(images(), [mixes])
    with pytest.raises(conveyor.ConfigError, match=r"runs on each sample: pass it in transforms="):
        per_sample = T.RandomChoice([T.RandomInvert(), T.GaussianBlur(3)])
        conveyor.Loader(images(), [], batch_transforms=[per_sample])
