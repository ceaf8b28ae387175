"""Planted: a torchvision ImageFolder with a torchvision pipeline, loaded in
the training process. The doctor's fix shows the conveyor.Loader that replaces
it (or, with ``unconvertible``, names the transform that stops that).

torchvision is not installed in the tests' venv: the classes below stand in for
its own (same names, same module, same attributes), as the doctor recognises
torchvision by the module of an object's class.

Usage: torchvision_folder.py ROOT [unconvertible]
"""

import sys
import time

import doctor_common as c
import torch
import torch.nn.functional as F

root = sys.argv[1]
V1 = "torchvision.transforms.transforms"


def torchvision_class(name, module=V1):
    return type(name, (), {"__module__": module, "__init__": lambda self, **kw: self.__dict__.update(kw)})


Compose = torchvision_class("Compose")
RandomResizedCrop = torchvision_class("RandomResizedCrop")
RandomHorizontalFlip = torchvision_class("RandomHorizontalFlip")
ToTensor = torchvision_class("ToTensor")
Normalize = torchvision_class("Normalize")
ElasticTransform = torchvision_class("ElasticTransform")


class ImageFolder(torch.utils.data.Dataset):
    """torchvision.datasets.ImageFolder's attributes; samples take 2 ms each."""

    __module__ = "torchvision.datasets.folder"

    def __init__(self, root, transform):
        self.root, self.transform = root, transform
        self.samples = [(f"{root}/c{i % 2}/{i}.png", i % 2) for i in range(128)]
        self.data = c.dataset()

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        time.sleep(0.002)  # As decoding and augmenting would.
        return self.data[index]


steps = [
    RandomResizedCrop(
        size=(28, 28), scale=(0.5, 1.0), ratio=(0.75, 4 / 3), interpolation="bilinear", antialias=True
    ),
    RandomHorizontalFlip(p=0.5),
    ToTensor(),
    Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], inplace=False),
]
if sys.argv[2:] == ["unconvertible"]:
    steps.insert(2, ElasticTransform(alpha=50.0))
model = c.model()
opt = c.optimizer(model)
folder = ImageFolder(root, Compose(transforms=steps))
loader = c.loader(folder, num_workers=0)  # doctor: dataloader-no-workers
for x, y in loader:
    x = x.to(c.device, memory_format=torch.channels_last, non_blocking=True)
    y = y.to(c.device, non_blocking=True)
    with torch.autocast(c.device.type, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
