"""Run by torchrun from tests/test_distributed.py: every rank makes a Loader
with seed=None (without torch.manual_seed) and prints its seed and samples."""

import json
import sys

import torch.distributed as dist

import conveyor
from conveyor import transforms as T
from conveyor.sources import ImageFolder

dist.init_process_group("gloo")
loader = conveyor.Loader(ImageFolder(sys.argv[1]), [T.Resize((8, 8))], batch_size=2, shuffle=True, threads=1)
labels = [int(label) for _, batch in loader for label in batch]
# One write of the whole line: torchrun runs the ranks unbuffered (print would
# write the text and its newline separately, and the other rank's line could
# come between them); one write of under PIPE_BUF bytes to a pipe is atomic.
line = json.dumps({"rank": dist.get_rank(), "seed": loader.state_dict()["seed"], "labels": labels}) + "\n"
sys.stdout.write(line)
sys.stdout.flush()
loader.close()
dist.destroy_process_group()
