"""Sources: where samples come from. A source maps a sample index to a record
(encoded bytes, a label, and a key naming the sample in errors); the Loader
reads many records at once on its io threads.

One module per source family: ``files`` (FileList, ImageFolder), ``tar``
(TarShards), ``idx`` (MNIST), ``arrays`` (ArraySource: numpy arrays and
``.npy`` files), ``cifar`` (CIFAR10, CIFAR100), ``python`` (PythonSource),
``coco`` (CocoDetection), ``mix`` (Mix); ``base`` holds what they share,
``remote`` how URLs are read (fsspec; RetryPolicy).
"""

from conveyor.sources.arrays import ArraySource
from conveyor.sources.base import IMG_EXTENSIONS, Source
from conveyor.sources.cifar import CIFAR10, CIFAR100
from conveyor.sources.coco import CocoDetection
from conveyor.sources.files import FileList, ImageFolder
from conveyor.sources.idx import MNIST, FashionMNIST
from conveyor.sources.mix import Mix
from conveyor.sources.python import PythonSource
from conveyor.sources.remote import RetryPolicy
from conveyor.sources.tar import TarShards, expand_shards

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "IMG_EXTENSIONS",
    "MNIST",
    "FashionMNIST",
    "ArraySource",
    "CocoDetection",
    "FileList",
    "ImageFolder",
    "Mix",
    "PythonSource",
    "RetryPolicy",
    "Source",
    "TarShards",
    "expand_shards",
]
