"""A library's warning meant for its caller (stacklevel), raised inside calls
the doctor wraps (Optimizer.__init__, DataLoader.__init__): it must point at
this script's lines as it does without the doctor."""

import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset


class Optimizer(torch.optim.SGD):
    def add_param_group(self, param_group):
        # add_param_group (1) <- Optimizer.__init__ (2) <- SGD.__init__ (3) <- the line below (4).
        warnings.warn("for the line that made the optimizer", UserWarning, stacklevel=4)
        super().add_param_group(param_group)


class Dataset(TensorDataset):
    def __len__(self):
        # __len__ (1) <- the line below (2): DataLoader.__init__ does not call it.
        warnings.warn("for the line that asked the length", UserWarning, stacklevel=2)
        return super().__len__()


model = torch.nn.Linear(2, 1)
optimizer = Optimizer(model.parameters(), lr=0.1)  # OPTIMIZER LINE
loader = DataLoader(Dataset(torch.zeros(8, 2), torch.zeros(8, 1)), batch_size=4)
print(len(loader.dataset))  # LENGTH LINE
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
