"""Train a small CNN with DistributedDataParallel on conveyor, one loader per rank.

    torchrun --nproc-per-node 2 examples/ddp_train.py --data /path/to/imagefolder --epochs 2

Each process builds its own ``conveyor.Loader``: the loader reads rank and
world size from the initialised process group and takes its share of every
epoch, as DistributedSampler does. Call ``loader.set_epoch(epoch)`` at the top
of every epoch (the shuffle depends on (seed, epoch)), and give every rank the
same ``seed`` (here: fixed; with ``seed=None`` it comes from
``torch.initial_seed()``, which torchrun does not make equal across ranks).

Checkpoints hold the loader's ``state_dict()``: its position in the epoch's
global order, the same on every rank. ``--checkpoint`` saves one at the end of
the run (``--max-steps`` stops mid-epoch) and resumes from it when it exists,
at any number of processes: the rest of the epoch is dealt among the new ranks.
Runs on CPUs with the gloo backend, on GPUs with NCCL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import conveyor
from conveyor import transforms as T
from conveyor.sources import ImageFolder

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="an ImageFolder root")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="cpu threads per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0, help="the same on every rank")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (mid-epoch)")
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="resumed if it exists; saved at the end"
    )
    parser.add_argument("--record", type=Path, default=None, help="labels seen, per rank (tests)")
    return parser.parse_args()


def main() -> None:
    """Trains on this rank's share of each epoch; checkpoints and resumes."""
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")

    source = ImageFolder(args.data)
    train = [
        T.RandomResizedCrop(args.image_size),
        T.RandomHorizontalFlip(),
        T.Normalize(MEAN, STD),
    ]
    # rank and world_size come from the process group; device= copies each
    # batch to the GPU ahead of the step (pinned memory, side stream).
    loader = conveyor.Loader(
        source,
        train,
        batch_size=args.batch_size,
        shuffle=True,
        seed=args.seed,
        threads=args.threads,
        drop_last=True,
        device=device if cuda else None,
    )

    torch.manual_seed(args.seed)  # The same initial weights everywhere (DDP also broadcasts them).
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, len(source.classes)),
    ).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    first_epoch = 0
    if args.checkpoint is not None and args.checkpoint.exists():
        state = torch.load(args.checkpoint, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])  # Any world size: the rest of the epoch is re-dealt.
        first_epoch = state["loader"]["epoch"]

    record: dict[int, list[int]] = {}
    steps = 0
    for epoch in range(first_epoch, args.epochs):
        loader.set_epoch(epoch)  # Keeps a loaded position when it is the loaded epoch.
        seen = record.setdefault(epoch, [])
        for images, labels in loader:
            labels = labels.to(device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            seen.extend(labels.tolist())
            steps += 1
            if args.max_steps is not None and steps >= args.max_steps:
                break
        if rank == 0:
            print(f"epoch {epoch}: {steps} steps, last loss {loss.item():.3f}", flush=True)
        if args.max_steps is not None and steps >= args.max_steps:
            break

    if args.checkpoint is not None and rank == 0:
        # The loader's state is the same on every rank: rank 0 saves it.
        state = {
            "model": model.module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "loader": loader.state_dict(),
        }
        torch.save(state, args.checkpoint)
    if args.record is not None:
        path = args.record.with_name(f"{args.record.name}.rank{rank}.json")
        stats = loader.stats()
        path.write_text(
            json.dumps(
                {
                    "world_size": world,
                    "epochs": record,
                    "usable_cores": stats["usable_cores"],
                    "usable_cores_source": stats["usable_cores_source"],
                }
            )
        )
    loader.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch 2.13's gloo worker threads outlive destroy_process_group() and may
    # free a backward pass's saved Python context while the interpreter shuts
    # down; CPython then ends that thread with pthread_exit, and the unwind
    # through a noexcept destructor aborts the process ("terminate called
    # without an active exception", about 1 run in 100). Everything is saved
    # and closed by now, so the process leaves without the interpreter's
    # shutdown, which the workers cannot race.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
