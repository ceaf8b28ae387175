"""Run by torchrun from tests/test_distributed.py. Before the process group
is initialised, a Loader warns that WORLD_SIZE says there are more processes.
After it, every rank makes Loaders that take what they are not given from the
group: the seed (seed=None without torch.manual_seed: rank 0's), the rank and
the world size. Prints one JSON line per rank."""

import json
import sys
import warnings

import torch.distributed as dist

import conveyor
from conveyor import transforms as T
from conveyor.sources import ImageFolder


def made(**kwargs):
    return conveyor.Loader(
        ImageFolder(sys.argv[1]), [T.Resize((8, 8))], batch_size=2, shuffle=True, threads=1, **kwargs
    )


def seed_and_labels(**kwargs):
    with made(**kwargs) as loader:
        return loader.state_dict()["seed"], [int(label) for _, batch in loader for label in batch]


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    made().close()
dist.init_process_group("gloo")
rank = dist.get_rank()
record = {"rank": rank, "warnings": [str(w.message) for w in caught]}
for case, kwargs in {
    "given neither": {},
    "given world_size": {"world_size": 2},
    "given rank": {"rank": rank},
}.items():
    record[case] = seed_and_labels(**kwargs)
# One write of the whole line: torchrun runs the ranks unbuffered (print would
# write the text and its newline separately, and the other rank's line could
# come between them); one write of under PIPE_BUF bytes to a pipe is atomic.
sys.stdout.write(json.dumps(record) + "\n")
sys.stdout.flush()
dist.destroy_process_group()
