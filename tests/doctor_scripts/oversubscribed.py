"""Planted: DataLoader workers burn the CPUs the model's threads need (run
under an affinity of 2 CPUs: two workers and two torch threads)."""

import time

import doctor_common as c
import torch
import torch.nn.functional as F

torch.set_num_threads(2)  # The model uses both CPUs, as torch does by default.
model = c.model(channels_last=False)
opt = c.optimizer(model)


class Costly(torch.utils.data.Dataset):
    """Samples that take 6 ms of CPU each to prepare (as decoding would)."""

    def __init__(self):
        self.data = c.dataset(512)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        end = time.thread_time() + 0.006
        while time.thread_time() < end:
            pass
        return self.data[index]


loader = c.loader(Costly(), num_workers=2)  # doctor: cpu-oversubscription
big = torch.randn(384, 384)
for x, y in loader:
    for _ in range(6):  # A CPU-bound step on both torch threads.
        big = torch.tanh(big @ big) * 0.5
    loss = F.cross_entropy(model(x), y) + big.mean() * 0
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.3f}")
