"""conveyor's exceptions. Every error raised by the engine is one of these.

Each carries ``key`` (the sample it concerns: a path, or ``shard.tar:member``;
empty when it concerns no sample) and ``cause`` (what went wrong); ``str(e)``
is ``"key: cause"``. A path that is not valid UTF-8 is in ``key`` as
``os.fsdecode`` gives it (equal to the path ``os.listdir`` listed, usable with
``open``), and in ``str(e)`` with the undecodable bytes as backslash escapes
(``caf\\xe9.jpg``), so that printing the error never fails.
"""

from __future__ import annotations

import os
from collections import OrderedDict


class Error(Exception):
    """Base class of every conveyor error."""

    def __init__(self, message: str, *, key: str = "", cause: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.cause = cause or message


class ConfigError(Error, ValueError):
    """An invalid argument or option, raised when the object is constructed."""


class ReadError(Error, OSError):
    """A sample's bytes could not be read: missing file, permission, bad shard."""

    def __str__(self) -> str:  # OSError would otherwise format its own way.
        return str(self.args[0]) if self.args else ""


class DecodeError(Error):
    """A sample's bytes are not a valid image: corrupt, truncated, unsupported format."""


class TooLargeError(DecodeError):
    """An image's header claims more pixels than ``max_pixels`` allows."""


class CancelledError(Error):
    """The operation was stopped by ``close()``."""


class InternalError(Error):
    """An unexpected failure inside conveyor or a user callback."""


class WaitTimeoutError(Error, TimeoutError):
    """No batch came within the Loader's ``timeout`` (DataLoader's argument)."""


_BY_KIND = {
    "config": ConfigError,
    "read": ReadError,
    "decode": DecodeError,
    "too_large": TooLargeError,
    "cancelled": CancelledError,
    "internal": InternalError,
}


# Python exceptions raised inside engine calls (PythonSource.__getitem__), by
# sample key, until the engine error they caused reaches Python. Bounded: with
# on_error="skip" the errors never reach Python. Accessed with the GIL held.
_CAUSES: OrderedDict[str, BaseException] = OrderedDict()
_MAX_CAUSES = 64


def _remember_cause(key: str, exception: BaseException) -> None:
    """Keeps the Python exception behind the engine error of sample ``key``
    (called by the extension) so that it becomes that error's ``__cause__``."""
    _CAUSES[key] = exception
    _CAUSES.move_to_end(key)
    while len(_CAUSES) > _MAX_CAUSES:
        _CAUSES.popitem(last=False)


def _printable_path(path: str) -> str:
    """``path`` (as ``os.fsdecode`` gives it) with bytes that are not UTF-8 as
    backslash escapes: ``caf\\xe9.jpg`` for the file named ``b"caf\\xe9.jpg"``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _from_engine(kind: str, cause: str, key: str) -> Error:
    """Builds the exception for an engine error (called by the extension)."""
    message = f"{_printable_path(key)}: {cause}" if key else cause
    error = _BY_KIND.get(kind, InternalError)(message, key=key, cause=cause)
    original = _CAUSES.pop(key, None) if key else None
    if original is not None:
        error.__cause__ = original
    return error
