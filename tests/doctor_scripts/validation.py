"""Follows the tuning guide, with a validation loop after each epoch whose
batches are slow to load (0.05 s each, 4 batches): its time belongs to the
evaluation, not to the next training step's compute or data wait."""

import time

import doctor_common as c
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset


class SlowValidation(Dataset):
    def __init__(self):
        self.data = c.dataset(64)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        if i % 16 == 0:
            time.sleep(0.05)  # One slow sample per batch of 16.
        return self.data[i]


model = c.model()
opt = c.optimizer(model)
loader = c.loader()
validation = c.loader(SlowValidation(), shuffle=False)
for _epoch in range(2):
    total = torch.zeros((), device=c.device)
    for x, y in loader:
        x = x.to(c.device, memory_format=torch.channels_last, non_blocking=True)
        y = y.to(c.device, non_blocking=True)
        with torch.autocast(c.device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.detach()
    model.eval()
    with torch.inference_mode():
        scores = [model(x.to(c.device, memory_format=torch.channels_last)) for x, _ in validation]
    model.train()
print(f"loss {total.item() / len(loader):.3f}, {len(scores)} validation batches")
