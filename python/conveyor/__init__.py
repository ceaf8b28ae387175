"""conveyor: a C++ input pipeline for PyTorch training.

Native threads read, decode, augment and batch samples while the model trains;
each batch reaches PyTorch without a copy. See README.md and docs/.
"""

from __future__ import annotations

from conveyor.errors import (
    CancelledError,
    ConfigError,
    DecodeError,
    Error,
    InternalError,
    ReadError,
    TooLargeError,
)

from conveyor import sources
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
    "sources",
]

from conveyor import transforms  # noqa: E402  (needs the errors above; import order matters)

__all__ += ["transforms"]
