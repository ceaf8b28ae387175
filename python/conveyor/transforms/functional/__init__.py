"""Transforms with fixed parameters on one image, as torchvision's
``transforms.v2.functional``: the same names, arguments and defaults, run by
the same C++ kernels as the random transforms (the GIL is released).

An image is a uint8 numpy array (H×W×C or H×W) or a uint8 torch tensor
(C×H×W, torchvision's layout); the result has the input's type and layout::

    from conveyor.transforms import functional as F
    rotated = F.rotate(image, 30.0)
"""

from conveyor.transforms.functional._color import (
    adjust_brightness,
    adjust_contrast,
    adjust_hue,
    adjust_saturation,
    adjust_sharpness,
    autocontrast,
    equalize,
    gaussian_blur,
    invert,
    posterize,
    rgb_to_grayscale,
    solarize,
    to_grayscale,
)
from conveyor.transforms.functional._erase import erase
from conveyor.transforms.functional._geometry import (
    affine,
    center_crop,
    crop,
    horizontal_flip,
    pad,
    perspective,
    resize,
    resized_crop,
    rotate,
    vertical_flip,
)
from conveyor.transforms.functional._image import ImageLike

__all__ = [
    "ImageLike",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_hue",
    "adjust_saturation",
    "adjust_sharpness",
    "autocontrast",
    "equalize",
    "erase",
    "gaussian_blur",
    "invert",
    "posterize",
    "rgb_to_grayscale",
    "solarize",
    "to_grayscale",
    "affine",
    "center_crop",
    "crop",
    "horizontal_flip",
    "pad",
    "perspective",
    "resize",
    "resized_crop",
    "rotate",
    "vertical_flip",
]
