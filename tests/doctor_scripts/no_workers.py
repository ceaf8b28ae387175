"""Planted: the DataLoader prepares costly samples in the training process.
WORKERS=k in the environment runs it with num_workers=k instead (the fix,
to measure it)."""

import os
import time

import doctor_common as c
import torch
import torch.nn.functional as F

model = c.model()
opt = c.optimizer(model)


class Decoded(torch.utils.data.Dataset):
    """Samples that take 2 ms each to prepare (as decoding would)."""

    def __init__(self):
        self.data = c.dataset(512)  # 32 batches an epoch: long enough for workers to reach their pace.

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        time.sleep(0.002)
        return self.data[index]


loader = c.loader(Decoded(), num_workers=int(os.environ.get("WORKERS", "0")))  # doctor: dataloader-no-workers
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
        model(x)
    model.train()
print(f"loss {total.item() / len(loader):.3f}")
