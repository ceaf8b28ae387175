"""DataLoader's ``sampler=`` and ``batch_sampler=`` for conveyor.Loader: the
indices a sampler gives, drawn once per epoch, become that epoch's order
(io/given_order_source.h), read and decoded by the engine as any other."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any, Optional

from conveyor.errors import ConfigError

__all__ = ["SamplerOrder"]


def _length(sampler: Any, what: str) -> int:
    try:
        return len(sampler)
    except TypeError:
        raise ConfigError(
            f"{what} must have a length (len({what})): the loader sizes its epochs with it, as DataLoader's "
            f"len(loader) does; got {type(sampler).__name__}"
        ) from None


def _indices(values: Iterable[Any], what: str, epoch: int) -> list[int]:
    """The indices a sampler gave, as ints (ints, numpy ints, 0-d integer tensors)."""
    indices = []
    for position, value in enumerate(values):
        try:
            indices.append(operator.index(value))
        except TypeError:
            raise ConfigError(
                f"{what} gave {value!r} at position {position} of epoch {epoch}: indices must be integers"
            ) from None
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
    drawn per epoch and flattened: its batches must all have the size of the
    first (but the last, which may be smaller), the same every epoch, since
    the engine's batches have one size; its first epoch is drawn here, at
    construction, to learn that size.
    """

    def __init__(
        self, sampler: Any, batch_sampler: Any, *, batch_size: int, shuffle: bool, drop_last: bool
    ) -> None:
        self.sampler: Any = sampler
        self.batch_sampler: Any = batch_sampler
        self._batches_drawn: Optional[list[int]] = None  # A generic batch sampler's first epoch.
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ConfigError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                    "and drop_last"
                )
            if _is_torch_batch_sampler(batch_sampler):
                self._draw_from = batch_sampler.sampler
                self.batch_size = int(batch_sampler.batch_size)
                self.drop_last = bool(batch_sampler.drop_last)
                self.length = _length(batch_sampler.sampler, "batch_sampler.sampler")
            else:
                self._draw_from = None
                indices, self.batch_size = self._flatten(batch_sampler, 0, None)
                self.drop_last = False
                self.length = len(indices)
                self._batches_drawn = indices
        else:
            if shuffle:
                raise ConfigError("sampler option is mutually exclusive with shuffle")
            self._draw_from = sampler
            self.batch_size = batch_size
            self.drop_last = drop_last
            self.length = _length(sampler, "sampler")
        if self.length == 0:
            raise ConfigError("the sampler is empty (its length is 0)")

    def _flatten(self, batch_sampler: Any, epoch: int, batch_size: Optional[int]) -> tuple[list[int], int]:
        """A generic batch sampler's epoch as one list of indices, and its batch size."""
        indices: list[int] = []
        size = batch_size
        last: Optional[int] = None
        for number, batch in enumerate(batch_sampler):
            batch = _indices(batch, "batch_sampler", epoch)
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
        if self._draw_from is not None:
            return _indices(iter(self._draw_from), "the sampler", epoch)
        if self._batches_drawn is not None:
            indices, self._batches_drawn = self._batches_drawn, None
            return indices
        indices, _ = self._flatten(self.batch_sampler, epoch, self.batch_size)
        return indices
