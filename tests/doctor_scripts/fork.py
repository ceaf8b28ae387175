"""Hostile: forks; the child leaves the script (argv[1]: ``return`` runs off its
end, ``exit`` calls sys.exit(3), ``raise`` raises) while the parent waits for it,
then trains 2 steps."""

import os
import sys

import torch

pid = os.fork()
if pid == 0:
    if sys.argv[1] == "exit":
        sys.exit(3)
    if sys.argv[1] == "raise":
        raise RuntimeError("planted failure in the child")
else:
    _, status = os.waitpid(pid, 0)
    print(f"parent: the child exited with {os.waitstatus_to_exitcode(status)}", flush=True)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
