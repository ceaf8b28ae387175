"""Hostile: trains 300 steps in a thread. argv[1]: ``join`` waits for it,
``no-join`` runs off the script's end while it trains (Python waits for the
thread before it exits)."""

import sys
import threading

import torch


def train():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(300):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    print("trained 300 steps", flush=True)


thread = threading.Thread(target=train, name="trainer")
thread.start()
if sys.argv[1] == "join":
    thread.join()
