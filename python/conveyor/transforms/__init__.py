"""Image transforms with torchvision's names and semantics, run in C++.

The classes only describe the chain; ``compile_pipeline`` plans it once into
the engine's ImagePipeline, which decodes each image (JPEG, PNG, WebP), fuses
the first crop into the decode and writes the result straight into the batch.
Every random choice comes from the sample's (seed, epoch, index) stream.

Example::

    from conveyor import transforms as T
    train = [T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
             T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
"""

from conveyor.transforms.auto_augment import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
from conveyor.transforms.base import DEFAULT_MAX_PIXELS, Transform
from conveyor.transforms.batch import BatchTransform, CutMix, MixUp, RandomChoice
from conveyor.transforms.color import (
    ColorJitter,
    GaussianBlur,
    Grayscale,
    Normalize,
    RandomAdjustSharpness,
    RandomAutocontrast,
    RandomEqualize,
    RandomGrayscale,
    RandomInvert,
    RandomPosterize,
    RandomSolarize,
)
from conveyor.transforms.compose import RandomApply, RandomOrder
from conveyor.transforms.erase import RandomErasing
from conveyor.transforms.function import Lambda
from conveyor.transforms.geometry import (
    CenterCrop,
    Pad,
    RandomAffine,
    RandomCrop,
    RandomHorizontalFlip,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
    Resize,
)
from conveyor.transforms.pipeline import compile_pipeline
from conveyor.transforms.torchvision import from_torchvision

__all__ = [
    "AugMix",
    "AutoAugment",
    "BatchTransform",
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "DEFAULT_MAX_PIXELS",
    "GaussianBlur",
    "Grayscale",
    "Lambda",
    "MixUp",
    "Normalize",
    "Pad",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomApply",
    "RandomAutocontrast",
    "RandomChoice",
    "RandomCrop",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomOrder",
    "RandomPerspective",
    "RandomPosterize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomSolarize",
    "RandomVerticalFlip",
    "Resize",
    "Transform",
    "TrivialAugmentWide",
    "compile_pipeline",
    "from_torchvision",
]
