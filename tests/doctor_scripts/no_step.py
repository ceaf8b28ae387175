"""Hostile: takes no optimizer step for as long as it runs. argv[1] says how:
``sleep`` sleeps, ``spin`` computes in a loop, ``steps-then-sleep`` takes 3 steps
and then sleeps, ``thread-spin`` computes in a thread the main thread waits for."""

import sys
import threading
import time

import torch


def spin():
    x = torch.zeros(4)
    while True:
        x = x + 1


mode = sys.argv[1]
if mode == "sleep":
    time.sleep(3600)
elif mode == "spin":
    spin()
elif mode == "steps-then-sleep":
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    time.sleep(3600)
elif mode == "thread-spin":
    thread = threading.Thread(target=spin, name="spinner")
    thread.start()
    thread.join()
