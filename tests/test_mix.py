"""conveyor.sources.Mix: weighted mixtures of sources, random access."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from PIL import Image

import conveyor
from conveyor import transforms as T
from conveyor.sources import FileList, Mix


def flat_images(root, name: str, count: int, value: int) -> FileList:
    """`count` 8×8 PNGs of one grey `value`; label i is the image's index."""
    paths = []
    for i in range(count):
        path = root / f"{name}{i:03d}.png"
        Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path)
        paths.append(path)
    return FileList(paths, labels=list(range(count)))


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    return flat_images(root, "a", 40, 10), flat_images(root, "b", 12, 200)


def run(mix: Mix, epochs=1, **kwargs):
    """(grey value, label) of every sample, per epoch."""
    options = dict(batch_size=5, shuffle=True, seed=3, dtype="uint8", layout="HWC")
    options.update(kwargs)
    loader = conveyor.Loader(mix, [T.CenterCrop(4)], **options)
    out = []
    for _ in range(epochs):
        out.append([(int(x[i, 0, 0, 0]), int(y[i])) for x, y in loader for i in range(len(x))])
    return out, loader


def test_first_exhausted_epoch_has_exact_shares_and_no_repeats(parts):
    a, b = parts
    mix = Mix([(a, 0.75), (b, 0.25)])
    assert len(mix) == 48 and mix.draws == [36, 12]  # b runs out at 12 / 0.25.
    (epoch,), loader = run(mix)
    counts = Counter(value for value, _ in epoch)
    assert counts == {10: 36, 200: 12}
    assert len(set(epoch)) == 48  # No sample twice.
    assert loader.stats()["samples_per_source"] == [36, 12]
    # The parts interleave (not all of a, then all of b).
    switches = sum(1 for p, q in itertools.pairwise(epoch) if p[0] != q[0])
    assert switches > 6


def test_label_offsets_and_epochs_draw_other_subsets(parts):
    a, b = parts
    mix = Mix([(a, 3), (b, 1)], label_offsets=[0, 100])
    epochs, _ = run(mix, epochs=2)
    for epoch in epochs:
        assert all((label >= 100) == (value == 200) for value, label in epoch)
    a_labels = [{label for value, label in epoch if value == 10} for epoch in epochs]
    assert a_labels[0] != a_labels[1]  # 36 of a's 40 samples, another subset each epoch.


def test_all_exhausted_and_never(parts):
    a, b = parts
    mix = Mix([(a, 1), (b, 1)], stop="all_exhausted")
    assert len(mix) == 80 and mix.draws == [40, 40]
    (epoch,), _ = run(mix)
    b_labels = Counter(label for value, label in epoch if value == 200)
    assert sorted(b_labels) == list(range(12)) and sum(b_labels.values()) == 40

    mix = Mix([(a, 0.9), (b, 0.1)], stop="never", epoch_size=1000)
    (epoch,), loader = run(mix, batch_size=50)
    assert Counter(value for value, _ in epoch) == {10: 900, 200: 100}


def test_mixtures_are_deterministic_for_any_threads_and_resume_at_another_world_size(parts):
    a, b = parts
    mix = Mix([(a, 0.6), (b, 0.4)], stop="all_exhausted")
    (one,), _ = run(mix, threads=1)
    (many,), _ = run(mix, threads=3, io_threads=7)
    assert one == many
    # Two ranks take 2 batches each, then three ranks finish the epoch.
    seen, state = [], None
    for rank in range(2):
        loader = conveyor.Loader(
            mix,
            [T.CenterCrop(4)],
            batch_size=5,
            shuffle=True,
            seed=3,
            dtype="uint8",
            layout="HWC",
            rank=rank,
            world_size=2,
        )
        for x, y in itertools.islice(loader, 2):
            seen += [(int(x[i, 0, 0, 0]), int(y[i])) for i in range(len(x))]
        state = loader.state_dict()
    for rank in range(3):
        loader = conveyor.Loader(
            mix,
            [T.CenterCrop(4)],
            batch_size=5,
            shuffle=True,
            seed=3,
            dtype="uint8",
            layout="HWC",
            rank=rank,
            world_size=3,
        )
        loader.load_state_dict(state)
        seen += [(int(x[i, 0, 0, 0]), int(y[i])) for x, y in loader for i in range(len(x))]
    left = len(mix) - 20
    padding = -(-left // 3) * 3 - left
    assert len(seen) == len(one) + padding
    assert Counter(one) - Counter(seen) == Counter()  # Every position of the epoch was seen.


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ([], {}, "Mix: sources must be a non-empty list of (source, weight) pairs"),
        ([("x", 1)], {}, "Mix: sources[0] must be a conveyor source, got str"),
        (["a"], {}, "Mix: sources[0] must be a (source, weight) pair, got 'a'"),
        ([("A", 0)], {}, "Mix: the weight of sources[0] must be a positive number, got 0"),
        ([("A", float("nan"))], {}, "Mix: the weight of sources[0] must be a positive number, got nan"),
        (
            [("A", 1)],
            {"stop": "first"},
            "Mix: stop must be one of 'first_exhausted', 'all_exhausted', 'never', got 'first'",
        ),
        ([("A", 1)], {"stop": "never"}, "Mix: stop='never' needs epoch_size"),
        (
            [("A", 1)],
            {"epoch_size": 10},
            "Mix: epoch_size is only for stop='never' (stop='first_exhausted' derives it)",
        ),
        ([("A", 1)], {"label_offsets": [1, 2]}, "Mix: label_offsets has 2 values for 1 sources"),
        ([("A", 1)], {"label_offsets": [-1]}, "Mix: label_offsets[0] must be >= 0, got -1"),
    ],
)
def test_bad_arguments_name_them(parts, args, kwargs, message):
    # "A" stands for a real source (the fixture is not available in the parameters).
    sources = [
        tuple(parts[0] if x == "A" else x for x in pair) if isinstance(pair, tuple) else pair for pair in args
    ]
    with pytest.raises(conveyor.ConfigError) as info:
        Mix(sources, **kwargs)
    assert str(info.value) == message


def test_getitem_gives_each_part_s_own_sample(parts, tmp_path):
    # Regression: Mix[i] decoded every sample as an encoded image ("not a JPEG")
    # however its source gives it.
    tensors = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    raw = np.arange(2 * 4 * 3, dtype=np.uint8).reshape(2, 4, 3)
    for source, expected in (
        (conveyor.sources.ArraySource(tensors, [5, 6, 7]), tensors),
        (conveyor.sources.ArraySource(raw), raw[..., None]),  # Raw uint8 images (N×H×W).
    ):
        mix = Mix([(source, 1), (source, 1)], label_offsets=[0, 100])
        for i in range(len(mix)):
            part, local = mix._source.locate(i)
            image, label = mix[i]
            want_image, want_label = source[local]
            np.testing.assert_array_equal(image, expected[local])
            np.testing.assert_array_equal(image, want_image)
            assert label == (want_label + 100 * part if want_label >= 0 else -1)
    # Encoded images and mixtures of mixtures too.
    a, b = parts
    inner = Mix([(a, 1), (b, 1)])
    outer = Mix([(inner, 1), (Mix([(b, 1)]), 1)], label_offsets=[1000, 0])
    image, label = outer[0]
    part, local = outer._source.locate(0)
    assert part == 0 and image.shape == (8, 8, 3) and label == inner[local][1] + 1000


def test_a_mixture_mixes_with_sources_of_its_samples_kind_and_only_those(parts):
    a, b = parts
    inner = Mix([(a, 1), (b, 1)])  # 12 of each.
    outer = Mix([(inner, 1), (b, 1)])  # A Mix beside a plain source of encoded images.
    (epoch,), _ = run(outer)
    assert len(epoch) == len(outer) == 24 and {value for value, _ in epoch} == {10, 200}
    tensors = conveyor.sources.ArraySource(np.zeros((3, 4, 4, 3), np.uint8))
    with pytest.raises(conveyor.ConfigError) as info:
        Mix([(inner, 1), (tensors, 1)])
    assert str(info.value) == (
        "Mix: sources[1] (ArraySource) gives samples of another kind than sources[0] (Mix)"
    )


def test_label_offsets_that_would_wrap_are_refused_naming_them(parts):
    a, b = parts  # a's largest label is 39, b's 11.
    # Regression: the offset was added in int64 and wrapped to negative labels.
    with pytest.raises(conveyor.ConfigError) as info:
        Mix([(a, 1), (b, 1)], label_offsets=[2**63 - 1, 0])
    assert str(info.value) == (
        "Mix: label_offsets[0] (9223372036854775807) plus the largest label of sources[0] (39) "
        "is beyond int64 (9223372036854775807)"
    )
    with pytest.raises(
        conveyor.ConfigError, match=r"label_offsets\[1\] \(9223372036854775797\) plus the largest "
    ):
        Mix([(a, 1), (b, 1)], label_offsets=[0, 2**63 - 11])
    mix = Mix([(a, 1), (b, 1)], label_offsets=[0, 2**63 - 12])
    engine = mix._engine_source()
    assert max(engine.read(i)[1] for i in range(len(engine))) == 2**63 - 1
    # Unlabelled samples stay -1 whatever the offset; nested mixtures add up their offsets.
    unlabelled = conveyor.sources.ArraySource(np.zeros((3, 2, 2), np.uint8))
    assert Mix([(unlabelled, 1)], label_offsets=[2**63 - 1])._engine_source().read(0)[1] == -1
    inner = Mix([(a, 1)], label_offsets=[2**62])
    with pytest.raises(
        conveyor.ConfigError,
        match=r"label_offsets\[0\] \(4611686018427387904\) plus the largest "
        r"label of sources\[0\] \(4611686018427387943\)",
    ):
        Mix([(inner, 1)], label_offsets=[2**62])


class _Labelled:
    """A PythonSource dataset whose labels are only known when read."""

    def __init__(self, labels):
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return b"x", self.labels[i]


def test_label_offsets_on_labels_known_only_when_read_are_a_read_error_naming_the_sample():
    source = conveyor.sources.PythonSource(_Labelled([1, 2**63 - 1]))
    mix = Mix([(source, 1)], label_offsets=[1])
    assert mix._engine_source().read(0)[1] == 2
    with pytest.raises(conveyor.ReadError) as info:
        mix._engine_source().read(1)
    assert (info.value.key, info.value.cause) == (
        "_Labelled[1]",
        "label 9223372036854775807 plus label_offsets[0] (1) is beyond int64 (9223372036854775807)",
    )
