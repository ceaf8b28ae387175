"""Hostile: takes 2 steps, moves to another folder, does to its standard streams
what argv[1] says, then raises. ``objects`` closes sys.stdout and sys.stderr,
``descriptors`` closes file descriptors 1 and 2, ``replaced`` points sys.stdout
and sys.stderr at os.devnull, ``redirected`` points descriptors 1 and 2 there."""

import os
import sys

import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
os.makedirs("elsewhere", exist_ok=True)
os.chdir("elsewhere")
how = sys.argv[1]
if how == "objects":
    sys.stdout.close()
    sys.stderr.close()
elif how == "descriptors":
    os.close(1)
    os.close(2)
elif how == "replaced":
    sys.stdout = sys.stderr = open(os.devnull, "w")
elif how == "redirected":
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
raise RuntimeError("planted failure after the streams")
