"""Hostile: leaves the TorchFunctionMode stack changed, then trains 2 steps.
argv[1]: ``enter`` enters a mode of its own and never exits it, ``clear`` pops
every mode on the stack (the doctor's and its caller's)."""

import sys

import torch
from torch.overrides import TorchFunctionMode


class PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


if sys.argv[1] == "enter":
    PassThrough().__enter__()
else:
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
