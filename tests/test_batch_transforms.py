"""Batch transforms: MixUp, CutMix and RandomChoice run by the engine on each
batch (labels, Beta draws, CutMix boxes, determinism, resume, errors), and
Python callables run on the consumer side."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import conveyor
from conveyor import _conveyor
from conveyor import transforms as T
from conveyor.sources import FileList, ImageFolder

N = 30  # Samples in color_folder (3 classes).


def make_loader(root, batch_transforms, **kwargs) -> conveyor.Loader:
    options = dict(batch_size=4, shuffle=True, seed=7, dtype="float32", layout="CHW")
    options.update(kwargs)
    return conveyor.Loader(
        ImageFolder(root), [T.Resize((12, 16))], batch_transforms=batch_transforms, **options
    )


def spec_of(transform, num_classes=3, channels_last=False):
    return transform._spec(num_classes, channels_last)


def draws(transform, count, height=12, width=16, seed=7, epoch=0):
    spec = spec_of(transform)
    return [_conveyor.sample_batch_mix(spec, height, width, seed, epoch, b) for b in range(count)]


# --- labels ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mix", [T.MixUp(), T.CutMix(), T.RandomChoice([T.MixUp(), T.CutMix()])])
def test_labels_become_mixed_one_hot_rows_that_sum_to_1(color_folder, mix):
    plain = list(make_loader(color_folder, None))
    mixed = list(make_loader(color_folder, [mix]))
    assert len(plain) == len(mixed) == 8
    for b, ((_, labels), (_, soft)) in enumerate(zip(plain, mixed)):
        assert soft.dtype == torch.float32 and soft.shape == (len(labels), 3)
        np.testing.assert_allclose(soft.sum(1).numpy(), 1.0, atol=1e-6)
        _, lam, *_, label_lam = _conveyor.sample_batch_mix(spec_of(mix), 12, 16, 7, 0, b)
        rolled = labels.roll(1, 0)
        for i in range(len(labels)):
            expected = np.zeros(3, np.float32)
            expected[rolled[i]] += np.float32(1.0 - label_lam)
            expected[labels[i]] += np.float32(label_lam)
            np.testing.assert_array_equal(soft[i].numpy(), expected)


def test_mixup_images_blend_each_image_with_the_previous_one(color_folder):
    plain = list(make_loader(color_folder, None))
    mixed = list(make_loader(color_folder, [T.MixUp(alpha=0.4)]))
    for b, ((images, _), (out, _)) in enumerate(zip(plain, mixed)):
        lam = draws(T.MixUp(alpha=0.4), b + 1)[b][1]
        expected = images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))
        assert torch.equal(out, expected)


def test_cutmix_pastes_the_box_of_the_previous_image(color_folder):
    plain = list(make_loader(color_folder, None, dtype="uint8", layout="HWC"))
    mixed = list(make_loader(color_folder, [T.CutMix()], dtype="uint8", layout="HWC"))
    spec = T.CutMix()._spec(3, True)
    for b, ((images, _), (out, _)) in enumerate(zip(plain, mixed)):
        _, _, _, _, x1, y1, x2, y2, _ = _conveyor.sample_batch_mix(spec, 12, 16, 7, 0, b)
        expected = images.clone()
        expected[:, y1:y2, x1:x2, :] = images.roll(1, 0)[:, y1:y2, x1:x2, :]
        assert torch.equal(out, expected)


# --- the random draws --------------------------------------------------------------------------

BETA_CDF = {
    0.5: lambda x: 2 / math.pi * math.asin(math.sqrt(x)),  # The arcsine distribution.
    1.0: lambda x: x,
    2.0: lambda x: 3 * x * x - 2 * x**3,
}


def ks_statistic(samples, cdf) -> float:
    xs = np.sort(np.asarray(samples, dtype=np.float64))
    n = len(xs)
    f = np.array([cdf(x) for x in xs])
    return float(max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max()))


@pytest.mark.parametrize("alpha", sorted(BETA_CDF))
@pytest.mark.parametrize("kind", [T.MixUp, T.CutMix])
def test_mixing_coefficients_follow_beta_alpha_alpha(alpha, kind):
    # The lambdas of 10 000 batches as the loader draws them. The seeds are
    # fixed, so the statistic is too: the bound (the 1% critical value of
    # the two-sided KS test, 1.63 / sqrt(n)) cannot flake.
    n = 10_000
    lambdas = [d[1] for d in draws(kind(alpha=alpha), n)]
    assert ks_statistic(lambdas, BETA_CDF[alpha]) < 1.63 / math.sqrt(n)


@pytest.mark.parametrize("alpha", [0.05, 0.2, 0.5, 1.0, 2.0, 8.0])
def test_the_beta_sampler_has_the_right_moments(alpha):
    x = _conveyor.sample_beta(alpha, alpha, 100_000, seed=3)
    assert np.all((x >= 0) & (x <= 1))
    # Mean 1/2, variance 1 / (4 (2 alpha + 1)); 5 standard errors.
    assert abs(x.mean() - 0.5) < 5 * math.sqrt(0.25 / (2 * alpha + 1) / len(x))
    assert x.var() == pytest.approx(1 / (4 * (2 * alpha + 1)), rel=0.03)


def test_the_beta_sampler_follows_beta_a_b_for_unequal_parameters():
    # Beta(2, 1): CDF x^2.
    assert ks_statistic(_conveyor.sample_beta(2.0, 1.0, 10_000, seed=5), lambda x: x * x) < 1.63 / 100


def test_cutmix_box_area_matches_its_lambda_as_torchvision_computes_it():
    for kind, lam, cx, cy, x1, y1, x2, y2, label_lam in draws(T.CutMix(alpha=0.7), 2000, height=7, width=10):
        assert kind == "CutMix"
        assert 0 <= cx < 10 and 0 <= cy < 7
        r = 0.5 * math.sqrt(1.0 - lam)
        rw, rh = int(r * 10), int(r * 7)
        assert (x1, y1, x2, y2) == (max(cx - rw, 0), max(cy - rh, 0), min(cx + rw, 10), min(cy + rh, 7))
        assert label_lam == float(1.0 - (x2 - x1) * (y2 - y1) / (10 * 7))


def test_random_choice_picks_each_mix_with_its_probability():
    kinds = [d[0] for d in draws(T.RandomChoice([T.MixUp(), T.CutMix()], p=[0.25, 0.75]), 4000)]
    share = kinds.count("CutMix") / len(kinds)
    assert abs(share - 0.75) < 5 * math.sqrt(0.75 * 0.25 / len(kinds))
    assert {d[0] for d in draws(T.RandomChoice([T.MixUp(), T.CutMix()], p=[0, 1]), 200)} == {"CutMix"}


# --- determinism ----------------------------------------------------------------------------------


def as_arrays(batches):
    return [(images.numpy().copy(), labels.numpy().copy()) for images, labels in batches]


def test_identical_for_any_thread_count_and_after_resume(color_folder):
    mix = T.RandomChoice([T.MixUp(alpha=0.8), T.CutMix(alpha=1.0)])
    runs = [as_arrays(make_loader(color_folder, [mix], threads=t, prefetch=3)) for t in (1, 2, 4)]
    for other in runs[1:]:
        for (a, la), (b, lb) in zip(runs[0], other):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(la, lb)
    loader = make_loader(color_folder, [mix], threads=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    resumed = make_loader(color_folder, [mix], threads=4)
    resumed.load_state_dict(state)
    rest = as_arrays(resumed)
    assert len(rest) == 5
    for (a, la), (b, lb) in zip(runs[0][3:], rest):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)


def test_skipped_samples_keep_batches_deterministic(tmp_path, color_folder):
    paths = sorted(str(p) for p in color_folder.rglob("*.jpg"))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not a jpeg")
    files = paths[:5] + [str(bad)] + paths[5:]
    labels = [i % 3 for i in range(len(files))]

    def run(threads):
        loader = conveyor.Loader(
            FileList(files, labels),
            [T.Resize((8, 8))],
            batch_size=4,
            seed=1,
            threads=threads,
            on_error="skip",
            batch_transforms=[T.MixUp(num_classes=3)],
        )
        out = as_arrays(loader)
        assert loader.stats()["skipped"] == 1
        return out

    one, four = run(1), run(4)
    assert sum(len(b[0]) for b in one) == len(paths)
    for (a, la), (b, lb) in zip(one, four):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)


# --- errors ------------------------------------------------------------------------------------


def test_mixup_on_uint8_is_a_config_error_as_in_torchvision(color_folder):
    with pytest.raises(conveyor.ConfigError, match="MixUp needs a float dtype"):
        make_loader(color_folder, [T.MixUp()], dtype="uint8")
    make_loader(color_folder, [T.CutMix()], dtype="uint8")  # CutMix copies pixels: fine.


def test_float16_batches_are_mixed_in_half_precision(color_folder):
    plain = list(make_loader(color_folder, None, dtype="float16"))
    mixed = list(make_loader(color_folder, [T.MixUp()], dtype="float16"))
    for b, ((images, _), (out, _)) in enumerate(zip(plain, mixed)):
        lam = draws(T.MixUp(), b + 1)[b][1]
        assert torch.equal(out, images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam)))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: T.MixUp(alpha=0), "MixUp: alpha must be a finite number > 0, got 0"),
        (lambda: T.CutMix(alpha=float("nan")), "CutMix: alpha must be a finite number > 0"),
        (lambda: T.MixUp(num_classes=0), "MixUp: num_classes must be >= 1, got 0"),
        (lambda: T.RandomChoice([T.MixUp(), T.Resize(3)]), r"RandomChoice: transforms\[1\] is Resize"),
        (lambda: T.RandomChoice([T.MixUp(), T.CutMix()], p=[1]), "one probability per transform"),
        (
            lambda: T.RandomChoice([T.MixUp(num_classes=3), T.CutMix(num_classes=4)]),
            r"num_classes differ \(\[3, 4\]\)",
        ),
    ],
)
def test_bad_arguments_are_config_errors(make, message):
    with pytest.raises(conveyor.ConfigError, match=message):
        make()


def test_num_classes_comes_from_the_source_or_must_be_given(color_folder, tmp_path):
    paths = sorted(str(p) for p in color_folder.rglob("*.jpg"))[:4]
    with pytest.raises(conveyor.ConfigError, match="MixUp: num_classes is required"):
        conveyor.Loader(FileList(paths, [0, 1, 2, 3]), [T.Resize((8, 8))], batch_transforms=[T.MixUp()])
    _, soft = next(iter(make_loader(color_folder, [T.MixUp(num_classes=5)])))
    assert soft.shape == (4, 5)


def test_a_label_outside_num_classes_names_the_sample(color_folder):
    paths = sorted(str(p) for p in color_folder.rglob("*.jpg"))[:4]
    loader = conveyor.Loader(
        FileList(paths, [0, 1, 7, 2]),
        [T.Resize((8, 8))],
        batch_size=4,
        batch_transforms=[T.CutMix(num_classes=3)],
    )
    with pytest.raises(conveyor.ConfigError) as info:
        next(iter(loader))
    assert info.value.key == paths[2]
    assert (
        info.value.cause
        == "CutMix: the label 7 is outside [0, num_classes = 3): batch mixes need class labels"
    )


def test_engine_mix_must_come_first_and_items_must_be_callables(color_folder):
    with pytest.raises(conveyor.ConfigError, match=r"batch_transforms\[1\]: CutMix must come first"):
        make_loader(color_folder, [lambda x, y: (x, y), T.CutMix()])
    with pytest.raises(conveyor.ConfigError, match=r"batch_transforms\[0\]: int is neither"):
        make_loader(color_folder, [3])


# --- Python callables -------------------------------------------------------------------------


def test_python_callables_run_on_the_consumer_side_after_the_engine_mix(color_folder):
    import threading

    seen = []

    def scale(images, labels):
        seen.append(threading.get_ident())
        return images * 2, labels

    plain = list(make_loader(color_folder, [T.CutMix()]))
    out = list(make_loader(color_folder, [T.CutMix(), scale]))
    assert set(seen) == {threading.get_ident()}
    for (a, la), (b, lb) in zip(plain, out):
        assert torch.equal(a * 2, b) and torch.equal(la, lb)


def test_a_callable_that_does_not_return_a_pair_is_named(color_folder):
    def broken(images, labels):
        return images

    with pytest.raises(conveyor.ConfigError, match=r"batch_transforms\[0\]: broken returned Tensor"):
        next(iter(make_loader(color_folder, [broken])))


def test_a_batch_mix_of_channels_last_batches_mixes_the_same_pixels():
    # memory_format=torch.channels_last batches are N×H×W×C buffers: the mix
    # was told they were N×C×H×W (the user's layout) and pasted other pixels.
    images = np.random.default_rng(0).integers(0, 256, (8, 12, 16, 3), dtype=np.uint8)
    source = conveyor.sources.ArraySource(images, np.arange(8) % 4)
    common = {"batch_size": 4, "batch_transforms": [T.CutMix(num_classes=4)], "seed": 1, "dtype": "uint8"}

    def batches(**options):
        loader = conveyor.Loader(source, [], **common, **options)
        return [(images.contiguous().numpy().copy(), labels.numpy().copy()) for images, labels in loader]

    plain, channels_last = batches(), batches(memory_format=torch.channels_last)
    assert len(plain) == len(channels_last) == 2
    for (a, la), (b, lb) in zip(plain, channels_last):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)
