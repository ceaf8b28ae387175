"""Distributed runs: elastic resume (a state taken at one world size resumed at
another) and a real torchrun job (examples/ddp_train.py)."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import conveyor
from conftest import index_of, run_python, shards_of_five
from conveyor import transforms as T
from conveyor.sources import ImageFolder, TarShards

N = 30  # Samples in color_folder.
REPO = Path(__file__).resolve().parents[1]


def make_loader(root, source=None, **kwargs) -> conveyor.Loader:
    """A loader of ``source`` (else the ImageFolder at ``root``)."""
    options = dict(batch_size=2, shuffle=True, seed=11, dtype="uint8", layout="HWC")
    options.update(kwargs)
    return conveyor.Loader(ImageFolder(root) if source is None else source, [T.Resize((16, 16))], **options)


def samples_of(batches) -> list[int]:
    return [index_of(images[i, 8, 8].numpy(), N) for images, _ in batches for i in range(len(images))]


def run_ranks(root, world: int, steps, state=None, **kwargs):
    """Each of `world` ranks hands out `steps` batches (all if None) after
    loading `state`; returns the samples per rank and each rank's state_dict."""
    samples, states = [], []
    for rank in range(world):
        loader = make_loader(root, rank=rank, world_size=world, **kwargs)
        loader.set_epoch(2)
        if state is not None:
            loader.load_state_dict(state)
        batches = [(x.clone(), y.clone()) for x, y in itertools.islice(loader, steps)]
        samples.append(samples_of(batches))
        states.append(loader.state_dict())
    return samples, states


@pytest.mark.parametrize(("before", "after"), [(w1, w2) for w1 in (1, 2, 4) for w2 in (1, 2, 3)])
def test_elastic_resume_sees_every_sample_of_the_epoch(color_folder, before, after):
    steps = 2  # Batches of 2 per rank before the checkpoint.
    seen_before, states = run_ranks(color_folder, before, steps)
    # Ranks in step agree on the state: the epoch's global position.
    assert all(s == states[0] for s in states)
    consumed = before * steps * 2
    assert states[0]["position"] == consumed and states[0]["world_size"] == before

    seen_after, _ = run_ranks(color_folder, after, None, state=states[0])
    everything = Counter(sum(seen_before, []) + sum(seen_after, []))
    assert set(everything) == set(range(N))  # Every sample of the epoch ...
    left = N - consumed
    padding = math.ceil(left / after) * after - left
    assert sum(everything.values()) == N + padding  # ... once, plus DistributedSampler's padding.
    assert [len(s) for s in seen_after] == [math.ceil(left / after)] * after


def test_elastic_resume_keeps_the_global_order(color_folder):
    # Without padding, the ranks after the change take what the whole
    # uninterrupted single-process epoch would have given next, dealt round-robin.
    whole, _ = run_ranks(color_folder, 1, None)
    _, states = run_ranks(color_folder, 2, 3)  # 2 ranks x 3 batches of 2: 12 positions.
    resumed, _ = run_ranks(color_folder, 3, None, state=states[0])
    rest = whole[0][12:]
    assert resumed == [rest[r::3] for r in range(3)]


def test_elastic_resume_is_the_same_for_any_threads(color_folder):
    _, states = run_ranks(color_folder, 4, 2)
    one, _ = run_ranks(color_folder, 3, None, state=states[0], threads=1)
    many, _ = run_ranks(color_folder, 3, None, state=states[0], threads=3, io_threads=5)
    assert one == many


def test_resume_at_the_same_world_size_is_bit_identical_and_chains(color_folder):
    whole, _ = run_ranks(color_folder, 3, None)
    first, states = run_ranks(color_folder, 3, 1)  # One batch: a peek still counts for the state.
    second, states = run_ranks(color_folder, 3, 1, state=states[0])
    assert [a + b for a, b in zip(first, second)] == [w[:4] for w in whole]
    first, states = run_ranks(color_folder, 3, 2)
    second, states = run_ranks(color_folder, 3, 2, state=states[0])
    third, _ = run_ranks(color_folder, 3, None, state=states[0])
    assert [a + b + c for a, b, c in zip(first, second, third)] == whole
    # A second change of world size starts from where the first one stood.
    fourth, states2 = run_ranks(color_folder, 2, 2, state=states[0])
    assert states2[0]["segment_start"] == states[0]["position"] == 24
    assert states2[0]["position"] == 24 + 3 * 2  # 6 left: 3 per rank (a batch of 2, then 1).


def test_drop_last_truncates_what_is_left(color_folder):
    _, states = run_ranks(color_folder, 2, 2, drop_last=True)  # 8 positions consumed.
    after, _ = run_ranks(color_folder, 4, None, state=states[0], drop_last=True)
    # 22 left: 5 per rank (2 truncated), in whole batches of 2: 2 batches each.
    assert [len(s) for s in after] == [4, 4, 4, 4]


def test_len_counts_the_resumed_share(color_folder):
    _, states = run_ranks(color_folder, 1, 5)  # 10 positions consumed, 20 left.
    loader = make_loader(color_folder, rank=0, world_size=3)
    loader.set_epoch(2)
    loader.load_state_dict(states[0])
    assert len(loader) == 4  # 20 left -> 7 per rank (1 padding) -> 4 batches of 2.
    assert len(list(loader)) == 4


def test_a_shuffle_buffer_deals_shards_to_ranks_and_an_elastic_resume_keeps_that_order(
    color_folder, tmp_path
):
    shards = shards_of_five(color_folder, tmp_path)  # Sample i in shard i // 5.

    def ranks(world: int, steps, state=None):
        return run_ranks(color_folder, world, steps, state, source=TarShards(shards, shuffle_buffer=3))

    whole, states = ranks(3, None)
    # Each rank streams two whole shards of its own, as webdataset's shards split by node.
    assert [len({i // 5 for i in samples}) for samples in whole] == [2, 2, 2]
    assert sorted(sum(whole, [])) == list(range(N))
    assert states[0]["order_world_size"] == 3
    # One process: the state is as before (its order is made for 1).
    assert "order_world_size" not in ranks(1, 1)[1][0]
    # Resumed by 2 ranks after 2 batches of 2 on each of 3: the rest of the
    # 3 ranks' global order (rank r's position p is its position 3p + r).
    _, states = ranks(3, 2)
    assert states[0]["position"] == 12 and states[0]["order_world_size"] == 3
    resumed, states = ranks(2, None, state=states[0])
    rest = [whole[p % 3][p // 3] for p in range(N)][12:]
    assert resumed == [rest[0::2], rest[1::2]]
    # The next epoch's order is made for this world.
    assert (states[0]["epoch"], states[0]["order_world_size"]) == (3, 2)
    # Saved again before that epoch ends, the state keeps the order's world.
    _, states = ranks(3, 2)
    assert ranks(2, 1, state=states[0])[1][0]["order_world_size"] == 3
    # A state saved before orders depended on the world (no key) means the
    # order made for one: the single process's, dealt round-robin.
    single = ranks(1, None)[0][0]
    old = {key: value for key, value in states[0].items() if key != "order_world_size"}
    assert ranks(3, None, state=old)[0] == [single[12 + r :: 3] for r in range(3)]
    # Nothing handed out yet: the epoch is made for the world that loads it.
    _, states = ranks(3, 0)
    assert states[0]["position"] == 0 and states[0]["order_world_size"] == 3
    assert [len({i // 5 for i in samples}) for samples in ranks(2, None, state=states[0])[0]] == [3, 3]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"world_size": 0}, "state['world_size'] must be >= 1, got 0"),
        ({"order_world_size": 0}, "state['order_world_size'] must be >= 1, got 0"),
        ({"segment_start": 31}, "state['segment_start'] must be <= 30, got 31"),
        ({"position": 3}, "state['position'] must be >= 4, got 3"),
        (
            {"position": 5},
            "state['position'] = 5 is not a whole number of steps of 2 ranks from state['segment_start'] = 4",
        ),
        # Saved by 3 ranks: 26 samples were left after the segment, 9 each.
        ({"world_size": 3, "position": 2**62}, f"state['position'] must be <= 31, got {2**62}"),
        ({"world_size": 3, "batch": 2**63 - 1}, f"state['batch'] must be <= 8, got {2**63 - 1}"),
    ],
)
def test_bad_elastic_states_name_the_key(color_folder, change, message):
    state = {"seed": 11, "epoch": 2, "position": 8, "batch": 1, "world_size": 2, "segment_start": 4}
    loader = make_loader(color_folder, rank=0, world_size=2)
    with pytest.raises(conveyor.ConfigError) as info:
        loader.load_state_dict({**state, **change})
    assert str(info.value) == message


# --- a real torchrun job: examples/ddp_train.py --------------------------------------------------


@pytest.fixture(scope="module")
def one_per_class(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of 12 classes with one JPEG each: a label names its sample."""
    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("one_per_class")
    rng = np.random.default_rng(0)
    for c in range(12):
        (root / f"c{c:02d}").mkdir()
        pixels = rng.integers(0, 256, (48, 40, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"c{c:02d}" / "img.jpg", quality=90)
    return root


def torchrun(nproc: int, *args: object) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(REPO / "examples" / "ddp_train.py"),
        *map(str, args),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def recorded(prefix: Path, world: int) -> list[dict[str, list[int]]]:
    return [data["epochs"] for data in recorded_ranks(prefix, world)]


def recorded_ranks(prefix: Path, world: int) -> list[dict]:
    """What each rank of examples/ddp_train.py recorded (--record)."""
    import json

    out = []
    for rank in range(world):
        data = json.loads(prefix.with_name(f"{prefix.name}.rank{rank}.json").read_text())
        assert data["world_size"] == world
        out.append(data)
    return out


def test_torchrun_ranks_share_each_epoch(one_per_class, tmp_path):
    result = torchrun(
        2,
        "--data",
        one_per_class,
        "--epochs",
        2,
        "--batch-size",
        2,
        "--threads",
        1,
        "--image-size",
        32,
        "--record",
        tmp_path / "seen",
    )
    assert "epoch 1: 6 steps" in result.stdout
    ranks = recorded(tmp_path / "seen", 2)
    for epoch in ("0", "1"):
        shares = [set(r[epoch]) for r in ranks]
        assert [len(r[epoch]) for r in ranks] == [6, 6]
        assert shares[0].isdisjoint(shares[1]) and shares[0] | shares[1] == set(range(12))
    assert ranks[0]["0"] != ranks[0]["1"]  # set_epoch reshuffles.
    # The node's cores are shared by its 2 ranks (torchrun's LOCAL_WORLD_SIZE).
    with conveyor.Loader(conveyor.sources.ImageFolder(one_per_class), [], batch_size=1) as alone:
        cores = alone.stats()["usable_cores"]  # This process has the node to itself.
    for rank in recorded_ranks(tmp_path / "seen", 2):
        assert rank["usable_cores"] == max(1, cores // 2)
        assert (
            rank["usable_cores_source"]
            == f"{cores} usable CPUs (affinity, cgroup quota) shared by 2 processes on this node"
        )


def test_torchrun_checkpoint_resumes_on_another_world_size(one_per_class, tmp_path):
    common = ["--data", one_per_class, "--batch-size", 2, "--threads", 1, "--image-size", 32]
    checkpoint = tmp_path / "ck.pt"
    # 2 processes stop after 2 steps of epoch 0 (8 samples) and checkpoint ...
    torchrun(2, *common, "--max-steps", 2, "--checkpoint", checkpoint, "--record", tmp_path / "before")
    # ... one process resumes and finishes the epoch: every sample once.
    torchrun(1, *common, "--checkpoint", checkpoint, "--record", tmp_path / "after")
    before = [r["0"] for r in recorded(tmp_path / "before", 2)]
    after = recorded(tmp_path / "after", 1)[0]["0"]
    assert [len(b) for b in before] == [4, 4] and len(after) == 4
    assert sorted(before[0] + before[1] + after) == list(range(12))


def test_torchrun_ranks_take_the_seed_rank_and_world_size_they_are_not_given_from_the_group(one_per_class):
    # Without torch.manual_seed each process has its own torch.initial_seed();
    # the loaders agree on rank 0's, so their shares stay disjoint. A rank or
    # a world size not given comes from the group, as DistributedSampler
    # takes it; a loader made before the group warns that it reads it all.
    import json

    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(REPO / "tests" / "distributed_scripts" / "process_group.py"),
        str(one_per_class),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in ranks) == [0, 1], result.stdout + result.stderr
    for case in ("given neither", "given world_size", "given rank"):
        (seed0, labels0), (seed1, labels1) = (r[case] for r in ranks)
        assert seed0 == seed1, case
        assert sorted(labels0 + labels1) == list(range(12)), case
    for r in ranks:
        assert r["warnings"] == [
            "WORLD_SIZE=2 is set (torchrun?) but no torch.distributed process group is initialised: this "
            "loader reads the whole epoch in every process. Call torch.distributed.init_process_group() "
            "before making the Loader, or pass rank= and world_size="
        ]


@pytest.mark.parametrize(("local_world_size", "share"), [(None, 2), ("2", 1), ("4", 1), ("x", 2)])
def test_ranks_of_one_node_share_its_cores(color_folder, local_world_size, share):
    # torchrun's LOCAL_WORLD_SIZE ranks on a 2-CPU affinity: each rank's
    # autotune gets its share of the CPUs (at least 1), and stats() says why.
    env = {} if local_world_size is None else {"LOCAL_WORLD_SIZE": local_world_size}
    result = run_python(
        """
        import os, sys, warnings
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
        import conveyor
        from conveyor import transforms as T
        from conveyor.sources import ImageFolder
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = conveyor.Loader(ImageFolder(sys.argv[1]), [T.Resize((8, 8))], batch_size=4)
        for _ in loader:
            pass
        stats = loader.stats()
        print(stats["usable_cores"], stats["threads"] <= stats["usable_cores"])
        print(stats["usable_cores_source"])
        print(*[str(w.message) for w in caught], sep="\\n")
        """,
        str(color_folder),
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{share} True"
    shared = local_world_size not in (None, "x")
    assert lines[1] == "2 usable CPUs (affinity, cgroup quota)" + (
        f" shared by {local_world_size} processes on this node" if shared else ""
    )
    if local_world_size == "x":
        assert (
            lines[2]
            == "LOCAL_WORLD_SIZE='x' is not an int >= 1: the loader assumes it has the node's cores to itself"
        )
