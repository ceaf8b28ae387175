"""conveyor: a C++ input pipeline for PyTorch training.

Native threads read, decode, augment and batch samples while the model trains;
each batch reaches PyTorch without a copy. See README.md and docs/.
"""

from __future__ import annotations

from conveyor import _conveyor, sources, transforms
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

#: The version, as the wheel's name and ``conveyor --version`` give it (CMakeLists.txt's project()).
__version__: str = _conveyor.__version__

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
