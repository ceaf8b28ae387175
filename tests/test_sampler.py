"""DataLoader's sampler= and batch_sampler=: each epoch's order is the
sampler's indices, drawn once per epoch as DataLoader draws them, so the
batches hold exactly the samples a DataLoader with the same sampler gives."""

import numpy as np
import pytest

import conveyor
from conveyor.sources import ArraySource

torch = pytest.importorskip("torch")
from torch.utils.data import (  # noqa: E402
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

N = 23


def source() -> ArraySource:
    """Sample i: a 1x1 image whose value is i, labelled i."""
    return ArraySource(np.arange(N, dtype=np.uint8).reshape(N, 1, 1, 1), np.arange(N))


def loader_batches(loader: conveyor.Loader) -> list[list[int]]:
    """Each batch as its samples' indices, read from the pixels and checked against the labels."""
    batches = []
    for images, labels in loader:
        pixels = images.reshape(len(labels)).tolist()
        assert pixels == labels.tolist()
        batches.append(pixels)
    return batches


def dataloader_batches(**kwargs) -> list[list[int]]:
    return [batch.tolist() for batch in DataLoader(range(N), **kwargs)]


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    "make_sampler",
    [
        lambda: WeightedRandomSampler(np.linspace(0.1, 3.0, N), num_samples=30, generator=seeded(5)),
        lambda: SubsetRandomSampler([1, 4, 9, 16, 22, 3, 7], generator=seeded(6)),
        lambda: RandomSampler(range(N), generator=seeded(7)),
        lambda: [22, 0, 5, 5, 11],
        lambda: range(N - 1, -1, -2),
    ],
    ids=["weighted", "subset", "random", "list", "range"],
)
@pytest.mark.parametrize("drop_last", [False, True])
def test_each_epoch_gives_the_samples_dataloader_gives_with_the_same_sampler(make_sampler, drop_last):
    ours, theirs = make_sampler(), make_sampler()
    loader = conveyor.Loader(
        source(), [], batch_size=4, sampler=ours, drop_last=drop_last, threads=2, dtype="uint8"
    )
    for _ in range(3):  # Each epoch draws the sampler again, as DataLoader does.
        assert loader_batches(loader) == dataloader_batches(sampler=theirs, batch_size=4, drop_last=drop_last)
    assert loader.sampler is ours
    assert len(loader) == len(DataLoader(range(N), sampler=theirs, batch_size=4, drop_last=drop_last))


def test_torchs_batch_sampler_is_its_sampler_batch_size_and_drop_last():
    def make():
        return BatchSampler(RandomSampler(range(N), generator=seeded(9)), batch_size=5, drop_last=True)

    ours, theirs = make(), make()
    loader = conveyor.Loader(source(), [], batch_sampler=ours, dtype="uint8")
    assert (loader.batch_size, loader.drop_last) == (5, True)
    assert loader.batch_sampler is ours
    for _ in range(2):
        assert loader_batches(loader) == dataloader_batches(batch_sampler=theirs)


class EvenThenOdd:
    """A batch sampler of one's own: even indices, then odd ones, in batches of 3."""

    def __iter__(self):
        order = list(range(0, N, 2)) + list(range(1, N, 2))
        return iter([order[i : i + 3] for i in range(0, N, 3)])

    def __len__(self):
        return (N + 2) // 3


def test_another_batch_sampler_is_flattened_when_its_batches_have_one_size():
    loader = conveyor.Loader(source(), [], batch_sampler=EvenThenOdd(), dtype="uint8")
    assert loader.batch_size == 3
    assert loader_batches(loader) == dataloader_batches(batch_sampler=EvenThenOdd())
    assert loader_batches(loader) == dataloader_batches(batch_sampler=EvenThenOdd())


def test_a_distributed_sampler_decides_what_each_rank_reads():
    seen = []
    for rank in range(3):
        sampler = DistributedSampler(range(N), num_replicas=3, rank=rank, shuffle=True, seed=3)
        loader = conveyor.Loader(source(), [], batch_size=4, sampler=sampler, dtype="uint8")
        batches = loader_batches(loader)
        theirs = DistributedSampler(range(N), num_replicas=3, rank=rank, shuffle=True, seed=3)
        assert batches == dataloader_batches(sampler=theirs, batch_size=4)
        seen += [i for batch in batches for i in batch]
    assert sorted(set(seen)) == list(range(N))


def test_a_resumed_epoch_continues_at_the_saved_position_of_the_samplers_order():
    order = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
    full = loader_batches(conveyor.Loader(source(), [], batch_size=3, sampler=order, dtype="uint8"))
    first = conveyor.Loader(source(), [], batch_size=3, sampler=order, dtype="uint8")
    iterator = iter(first)
    next(iterator)
    next(iterator)
    state = first.state_dict()
    resumed = conveyor.Loader(source(), [], batch_size=3, sampler=order, dtype="uint8")
    resumed.load_state_dict(state)
    assert loader_batches(resumed) == full[2:]


class Uneven:
    def __iter__(self):
        return iter([[0, 1, 2], [3], [4, 5, 6]])

    def __len__(self):
        return 3


class Growing:
    """Batches of 2, one more each epoch."""

    def __init__(self):
        self.epoch = 0

    def __iter__(self):
        self.epoch += 1
        return iter([[0, 1]] * (self.epoch + 1))

    def __len__(self):
        return self.epoch + 1


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"sampler": [1, 2], "shuffle": True}, "sampler option is mutually exclusive with shuffle"),
        (
            {"batch_sampler": Uneven(), "batch_size": 3},
            "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last",
        ),
        (
            {"batch_sampler": Uneven()},
            "batch_sampler gave a batch of 1 indices before the end of epoch 0 (batch 1); conveyor's batches "
            "all have one size, 3: only the last batch of an epoch may be smaller",
        ),
        (
            {"sampler": iter([1, 2])},
            "sampler must have a length (len(sampler)): the loader sizes its epochs with it, as DataLoader's "
            "len(loader) does; got list_iterator",
        ),
        ({"sampler": []}, "the sampler is empty (its length is 0)"),
        (
            {"sampler": [1, 2], "world_size": 2},
            "rank/world_size do not apply with a sampler: the sampler decides what this rank reads "
            "(DistributedSampler)",
        ),
    ],
)
def test_arguments_dataloader_refuses_are_config_errors_with_its_message(kwargs, message):
    with pytest.raises(conveyor.ConfigError) as info:
        conveyor.Loader(source(), [], dtype="uint8", **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "sampler,message",
    [
        ([0, 1, N], f"the sampler gave index {N} at position 2 of epoch 0; the source has {N} samples"),
        ([0, -1], f"the sampler gave index -1 at position 1 of epoch 0; the source has {N} samples"),
        ([0, 1.5], "sampler gave 1.5 at position 1 of epoch 0: indices must be integers"),
    ],
)
def test_a_bad_index_is_named_with_its_position_and_epoch(sampler, message):
    loader = conveyor.Loader(source(), [], sampler=sampler, dtype="uint8")
    with pytest.raises(conveyor.ConfigError) as info:
        iter(loader)
    assert str(info.value) == message


def test_a_sampler_whose_epochs_change_length_is_named_at_that_epoch():
    lengths = iter([4, 4, 6])

    class Curriculum:
        def __iter__(self):
            return iter(range(next(lengths)))

        def __len__(self):
            return 4

    loader = conveyor.Loader(source(), [], batch_size=2, sampler=Curriculum(), dtype="uint8")
    assert loader_batches(loader) == [[0, 1], [2, 3]]
    assert loader_batches(loader) == [[0, 1], [2, 3]]
    with pytest.raises(conveyor.ConfigError) as info:
        iter(loader)
    assert str(info.value) == (
        "sampler gave more indices for epoch 2 than the 4 its epochs had when the Loader was made (conveyor "
        "fixes the epoch's length then; an endless sampler is refused)"
    )


def test_a_batch_sampler_of_ones_own_is_drawn_again_for_each_epoch():
    loader = conveyor.Loader(source(), [], batch_sampler=Growing(), dtype="uint8")
    with pytest.raises(conveyor.ConfigError) as info:
        iter(loader)  # Drawn again: 3 batches of 2 where the first draw gave 2.
    assert str(info.value).startswith("batch_sampler gave 6 indices for epoch 0; its epochs had 4 when")


def test_loader_set_epoch_is_passed_on_to_a_distributed_sampler():
    sampler = DistributedSampler(range(N), num_replicas=2, rank=0, shuffle=True, seed=0)
    loader = conveyor.Loader(source(), [], batch_size=4, sampler=sampler, dtype="uint8")
    orders = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        orders.append(loader_batches(loader))
        reference = DistributedSampler(range(N), num_replicas=2, rank=0, shuffle=True, seed=0)
        reference.set_epoch(epoch)
        assert orders[-1] == dataloader_batches(sampler=reference, batch_size=4)
    assert orders[0] != orders[1]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"sampler": [2**63, 1]},
            "sampler gave index 9223372036854775808 at position 0 of epoch 0: beyond int64",
        ),
        ({"sampler": [True, 1]}, "sampler gave True at position 0 of epoch 0: indices must be integers"),
        (
            {"batch_sampler": [1, 2, 3]},
            "batch_sampler gave 1 at batch 0 of epoch 0: each batch must be a list of indices",
        ),
    ],
)
def test_indices_that_are_not_int64_and_batches_that_are_not_lists_are_named(kwargs, message):
    with pytest.raises(conveyor.ConfigError) as info:
        iter(conveyor.Loader(source(), [], dtype="uint8", **kwargs))
    assert str(info.value) == message


def test_an_endless_sampler_is_refused_at_its_length_not_waited_for():
    class Endless:
        def __iter__(self):
            i = 0
            while True:
                yield i % 5
                i += 1

        def __len__(self):
            return 5

    loader = conveyor.Loader(source(), [], batch_size=2, sampler=Endless(), dtype="uint8")
    with pytest.raises(conveyor.ConfigError, match="^sampler gave more indices for epoch 0 than the 5 its"):
        iter(loader)


def test_numpy_and_tensor_indices_are_taken_as_ints():
    loader = conveyor.Loader(
        source(), [], batch_size=2, sampler=[np.int64(4), torch.tensor(7), 2], dtype="uint8"
    )
    assert loader_batches(loader) == [[4, 7], [2]]


def test_a_sequential_sampler_is_the_loaders_own_unshuffled_order():
    sequential = SequentialSampler(range(N))
    with_sampler = conveyor.Loader(source(), [], batch_size=4, sampler=sequential, dtype="uint8")
    plain = conveyor.Loader(source(), [], batch_size=4, dtype="uint8")
    assert loader_batches(with_sampler) == loader_batches(plain)


def test_the_migration_table_lists_every_dataloader_argument_with_a_real_loader_argument():
    import inspect
    import pathlib
    import re

    text = (pathlib.Path(__file__).parent.parent / "docs" / "migrating.md").read_text()
    section = text.split("## `torch.utils.data.DataLoader` arguments", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    documented = {re.fullmatch(r" `(\w+)` ", first).group(1): second for first, second in rows}
    assert list(documented) == list(inspect.signature(DataLoader.__init__).parameters)[1:]
    ours = inspect.signature(conveyor.Loader.__init__).parameters
    for argument, column in documented.items():
        for name in re.findall(r"`([\w.]+)`", column):
            if name.startswith("loader."):
                assert hasattr(conveyor.Loader, name.split(".", 1)[1]), (argument, name)
            else:
                assert name in ours, (argument, name)
