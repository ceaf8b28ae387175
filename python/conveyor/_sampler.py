"""DataLoader's ``sampler=`` and ``batch_sampler=`` for conveyor.Loader: the
indices a sampler gives, drawn once per epoch, become that epoch's order
(io/given_order_source.h), read and decoded by the engine as any other."""

from __future__ import annotations

import operator
from typing import Any, Optional

from conveyor._checks import INT64_MAX, INT64_MIN, check_int
from conveyor.errors import ConfigError

__all__ = ["SamplerOrder"]


def _length(sampler: Any, what: str) -> int:
    try:
        return len(sampler)
    except TypeError:
        if not hasattr(sampler, "__len__"):
            raise ConfigError(
                f"{what} must have a length (len({what})): the loader sizes its epochs with it, as "
                f"DataLoader's len(loader) does; got {type(sampler).__name__}"
            ) from None
        raise ConfigError(f"len({what}) must be a non-negative int") from None
    except ValueError as e:
        raise ConfigError(f"len({what}) must be a non-negative int: {e}") from None
    except Exception as e:
        raise ConfigError(f"len({what}) raised {type(e).__name__}: {e}") from e


def _indices(values: Any, what: str, epoch: int, limit: int) -> list[int]:
    """The indices a sampler gave for `epoch`, as ints (ints, numpy ints, 0-d
    integer tensors; an array or a tensor in one go), at most `limit` of them:
    an endless sampler is refused, not waited for."""
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        values = values.tolist()  # A tensor or an array: one conversion, not one per element.
    indices = []
    for position, value in enumerate(values):
        if position >= limit:
            raise ConfigError(
                f"{what} gave more indices for epoch {epoch} than the {limit - 1} its epochs had when the "
                "Loader was made (conveyor fixes the epoch's length then; an endless sampler is refused)"
            )
        try:
            if isinstance(value, bool):
                raise TypeError
            index = operator.index(value)
        except TypeError:
            raise ConfigError(
                f"{what} gave {value!r} at position {position} of epoch {epoch}: indices must be integers"
            ) from None
        if not INT64_MIN <= index <= INT64_MAX:
            raise ConfigError(
                f"{what} gave index {index} at position {position} of epoch {epoch}: beyond int64"
            )
        indices.append(index)
    return indices


def _is_torch_batch_sampler(batch_sampler: Any) -> bool:
    """torch's own BatchSampler (not a subclass, which may batch otherwise)."""
    cls = type(batch_sampler)
    return cls.__name__ == "BatchSampler" and cls.__module__.startswith("torch.utils.data")


class SamplerOrder:
    """The orders of a Loader made with ``sampler=`` or ``batch_sampler=``.

    DataLoader's rules on combining the arguments hold (with its messages, as
    ConfigError). torch's ``BatchSampler(sampler, batch_size, drop_last)`` is
    its sampler with that batch size and drop_last. Any other batch sampler is
    flattened: its batches must all have the size of the first (but the last,
    which may be smaller). It is drawn once at construction to learn that
    size and the epoch's length, which stay fixed (the engine's batches have
    one size, its epochs one length); each epoch draws it again.
    """

    def __init__(
        self, sampler: Any, batch_sampler: Any, *, batch_size: int, shuffle: bool, drop_last: bool
    ) -> None:
        self.sampler: Any = sampler
        self.batch_sampler: Any = batch_sampler
        self._draw_from: Any = None  # The sampler each epoch iterates (None: a generic batch sampler).
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ConfigError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                    "and drop_last"
                )
            if _is_torch_batch_sampler(batch_sampler):
                self._draw_from = batch_sampler.sampler
                self._what = "batch_sampler.sampler"
                self.batch_size = check_int(batch_sampler.batch_size, "batch_sampler.batch_size", minimum=1)
                self.drop_last = bool(batch_sampler.drop_last)
                self.length = _length(batch_sampler.sampler, self._what)
            else:
                self._what = "batch_sampler"
                indices, self.batch_size = self._flatten(0, None)
                self.drop_last = False
                self.length = len(indices)
        else:
            if shuffle:
                raise ConfigError("sampler option is mutually exclusive with shuffle")
            self._draw_from = sampler
            self._what = "sampler"
            self.batch_size = batch_size
            self.drop_last = drop_last
            self.length = _length(sampler, "sampler")
        if self.length == 0:
            raise ConfigError("the sampler is empty (its length is 0)")

    def _flatten(self, epoch: int, batch_size: Optional[int]) -> tuple[list[int], int]:
        """A generic batch sampler's epoch as one list of indices, and its batch size."""
        indices: list[int] = []
        size = batch_size
        last: Optional[int] = None
        most = _length(self.batch_sampler, "batch_sampler") + 1  # An endless one is refused, not waited for.
        for number, batch in enumerate(self.batch_sampler):
            if number >= most:
                raise ConfigError(f"batch_sampler gave more than {most} batches for epoch {epoch}")
            if isinstance(batch, (str, bytes)) or not hasattr(batch, "__iter__"):
                raise ConfigError(
                    f"batch_sampler gave {batch!r} at batch {number} of epoch {epoch}: each batch must be a "
                    "list of indices"
                )
            batch = _indices(batch, "batch_sampler", epoch, INT64_MAX)
            if size is None:
                size = len(batch)
            if last is not None and last != size:
                raise ConfigError(
                    f"batch_sampler gave a batch of {last} indices before the end of epoch {epoch} "
                    f"(batch {number - 1}); conveyor's batches all have one size, {size}: "
                    "only the last batch of an epoch may be smaller"
                )
            if len(batch) > size or len(batch) == 0:
                raise ConfigError(
                    f"batch_sampler gave a batch of {len(batch)} indices in epoch {epoch} (batch {number}); "
                    f"conveyor's batches all have one size, {size} (its first batch's)"
                )
            last = len(batch)
            indices.extend(batch)
        if size is None:
            raise ConfigError(f"batch_sampler gave no batch for epoch {epoch}")
        return indices, size

    def draw(self, epoch: int) -> list[int]:
        """The order of `epoch`: the sampler iterated once, as DataLoader
        iterates it at the start of each epoch."""
        if self._draw_from is None:
            indices, _ = self._flatten(epoch, self.batch_size)
        else:
            indices = _indices(self._draw_from, self._what, epoch, self.length + 1)
        if len(indices) != self.length:
            raise ConfigError(
                f"{self._what} gave {len(indices)} indices for epoch {epoch}; its epochs had {self.length} "
                "when the Loader was made, and conveyor fixes the epoch's length then (make a new Loader "
                "for another length)"
            )
        return indices

    def set_epoch(self, epoch: int) -> None:
        """Passes Loader.set_epoch on to a sampler that has one (DistributedSampler)."""
        for sampler in (self.sampler, self.batch_sampler, getattr(self.batch_sampler, "sampler", None)):
            if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
                sampler.set_epoch(epoch)
