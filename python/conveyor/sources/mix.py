"""Mix: several sources drawn from with fixed weights, as one source."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

from conveyor import _conveyor
from conveyor._checks import check_int, is_real
from conveyor.errors import ConfigError
from conveyor.sources.base import Source

_STOPS = {
    "first_exhausted": _conveyor.MixStop.FIRST_EXHAUSTED,
    "all_exhausted": _conveyor.MixStop.ALL_EXHAUSTED,
    "never": _conveyor.MixStop.NEVER,
}


class Mix(Source):
    """Several sources drawn from with fixed weights, as one source.

    Which source feeds each position of an epoch is a function of (seed,
    epoch, position) alone, so a mixture shuffles, is shared among ranks,
    resumes exactly (at any world size) and gives the same batches for any
    thread count, like a single source.

    Every epoch draws exactly its weight's share of the epoch from each source
    (rounded so the counts add up; the shares are exact in every epoch, not
    only on average), interleaved in a random order. Within a source, draws go
    through its own order — shuffled per epoch with ``Loader(shuffle=True)``,
    in order otherwise — and start over when it gives more draws than it has
    samples; each repeat is augmented with its own random parameters.

    Args:
        sources: ``(source, weight)`` pairs; weights are positive and are
            normalised (``[(a, 7), (b, 3)]`` is ``[(a, 0.7), (b, 0.3)]``).
        stop: when an epoch ends. ``"first_exhausted"`` (default): when the
            source that runs out first has given each of its samples once (no
            sample repeats; larger sources give a different subset each
            epoch). ``"all_exhausted"``: when every source has given each of
            its samples at least once (smaller sources repeat).
            ``"never"``: after ``epoch_size`` positions (sources repeat as needed).
        epoch_size: positions per epoch; only (and required) with ``stop="never"``.
        label_offsets: one integer per source added to its labels >= 0 (e.g.
            to keep two datasets' classes apart); None leaves labels as they
            are. Labels never wrap: an offset that, added to its source's
            largest label, passes 2**63 - 1 is a ConfigError naming it; for a
            PythonSource, whose labels are only known once read, such a label
            is a ReadError naming the sample.

    All sources must give samples of one kind (encoded images, or raw tensors
    of one shape); detection sources (boxes) are not supported in a mixture.
    ``Loader.stats()["samples_per_source"]`` counts the samples each source
    gave in the current epoch. ``mix[i]`` gives sample ``i`` as its source's
    own ``[i]`` does (a tensor, raw pixels, a decoded image), the label offset
    added.

    Raises:
        ConfigError: naming the bad argument.
    """

    def __init__(
        self,
        sources: Sequence[tuple[Source, float]],
        stop: str = "first_exhausted",
        epoch_size: Optional[int] = None,
        label_offsets: Optional[Sequence[int]] = None,
    ) -> None:
        if isinstance(sources, (str, bytes)) or not isinstance(sources, Sequence) or not sources:
            raise ConfigError("Mix: sources must be a non-empty list of (source, weight) pairs")
        parts: list[Source] = []
        weights: list[float] = []
        for i, pair in enumerate(sources):
            if not (isinstance(pair, Sequence) and len(pair) == 2):
                raise ConfigError(f"Mix: sources[{i}] must be a (source, weight) pair, got {pair!r}")
            source, weight = pair
            if not isinstance(source, Source):
                raise ConfigError(f"Mix: sources[{i}] must be a conveyor source, got {type(source).__name__}")
            if not is_real(weight) or not (math.isfinite(weight) and weight > 0):
                raise ConfigError(
                    f"Mix: the weight of sources[{i}] must be a positive number, got {weight!r}"
                )  # noqa: E501
            if source.has_boxes:
                raise ConfigError(f"Mix: sources[{i}] has boxes: detection sources cannot be mixed yet")
            if source.shuffle_buffer:
                raise ConfigError(
                    f"Mix: sources[{i}] has shuffle_buffer={source.shuffle_buffer}; a mixture's order is "
                    "random access (leave shuffle_buffer unset)"
                )
            first = parts[0] if parts else source
            if _sample_kind(source) != _sample_kind(first):
                raise ConfigError(
                    f"Mix: sources[{i}] ({type(source).__name__}) gives samples of another kind than "
                    f"sources[0] ({type(first).__name__})"
                )
            parts.append(source)
            weights.append(float(weight))
        if stop not in _STOPS:
            raise ConfigError(f"Mix: stop must be one of {', '.join(map(repr, _STOPS))}, got {stop!r}")
        if stop == "never":
            if epoch_size is None:
                raise ConfigError("Mix: stop='never' needs epoch_size")
            epoch_size = check_int(epoch_size, "Mix: epoch_size", minimum=1)
        elif epoch_size is not None:
            raise ConfigError(f"Mix: epoch_size is only for stop='never' (stop={stop!r} derives it)")
        offsets: list[int] = []
        if label_offsets is not None:
            if len(label_offsets) != len(parts):
                raise ConfigError(
                    f"Mix: label_offsets has {len(label_offsets)} values for {len(parts)} sources"
                )
            offsets = [
                check_int(v, f"Mix: label_offsets[{i}]", minimum=0) for i, v in enumerate(label_offsets)
            ]  # noqa: E501
        self.sources = parts
        self.weights = [w / sum(weights) for w in weights]
        self.stop = stop
        self._source = _conveyor.MixSource(
            [p._engine_source() for p in parts], weights, _STOPS[stop], epoch_size or 0, offsets
        )

    def __len__(self) -> int:
        """Positions in one epoch."""
        return self._source.epoch_size

    @property
    def draws(self) -> list[int]:
        """Samples drawn from each source in every epoch (they add up to ``len(self)``)."""
        return list(self._source.draws)

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    # source[i]: each sample as its own source gives it (a tensor, raw pixels
    # or a decoded image), the label with its offset.
    def _decode_sample(self, index: int, data: bytes, key: str) -> Any:
        part, local = self._source.locate(index)
        return self.sources[part]._decode_sample(local, data, key)

    def _target(self, index: int, label: int) -> Any:
        part, local = self._source.locate(index)
        return self.sources[part]._target(local, label)

    def _sample_transform(self, transforms: Sequence[Any], **output: Any) -> _conveyor.SampleTransform:
        return self.sources[0]._sample_transform(transforms, **output)


def _sample_kind(source: Source) -> tuple[Any, Any]:
    """What decides how a source's samples become tensors (its
    ``_sample_transform`` and sample shape): a Mix's are its first source's."""
    while isinstance(source, Mix):
        source = source.sources[0]
    return type(source)._sample_transform, getattr(source, "sample_shape", None)
