"""conveyor: a C++ input pipeline for PyTorch training.

Native threads read, decode, augment and batch samples while the model trains;
each batch reaches PyTorch without a copy. See README.md and docs/.
"""

from __future__ import annotations

from conveyor import sources, transforms
from conveyor.errors import (
    CancelledError,
    ConfigError,
    DecodeError,
    Error,
    InternalError,
    ReadError,
    TooLargeError,
    WaitTimeoutError,
)
from conveyor.loader import Loader

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "CancelledError",
    "ConfigError",
    "DecodeError",
    "Error",
    "InternalError",
    "Loader",
    "ReadError",
    "TooLargeError",
    "WaitTimeoutError",
    "sources",
    "transforms",
]
