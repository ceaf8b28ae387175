"""Hostile: catches BaseException around every training step, the doctor's stop
request included, and goes on for 2002 steps."""

import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
returned = raised = 0
for _ in range(2002):
    try:
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        returned += 1
    except BaseException:
        raised += 1
print(f"optimizer.step() returned {returned} times, raised {raised} times")
