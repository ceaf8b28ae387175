"""WebDataset-style tar shards."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from braceexpand import UnbalancedBracesError, braceexpand

from conveyor import _conveyor
from conveyor._checks import check_int
from conveyor.errors import ConfigError
from conveyor.sources.base import PathLike, Source, fs_paths
from conveyor.sources.remote import RetryPolicy, build_interruptibly, is_url, list_objects, remote_arguments


def expand_shards(shards: Union[PathLike, Sequence[PathLike]], who: str = "TarShards") -> list[str]:
    """The shard paths named by a pattern or a list of them, in order: brace
    expansion by the ``braceexpand`` package, as webdataset does
    (``data/shard-{000..009}.tar``, ``{train,val}``, nested braces, ``{a..c}``;
    a backslash escapes a brace), then glob patterns (``data/*.tar``, sorted);
    a plain path is kept as is (a missing file is reported when it is opened).
    URLs are brace-expanded but never globbed (``?`` starts a URL's query).
    Errors start with ``who``.

    Raises:
        ConfigError: no shard given, unbalanced braces, or a glob pattern
            matches no file.
    """
    items = [shards] if isinstance(shards, (str, bytes, os.PathLike)) else list(shards)
    paths: list[str] = []
    for item in items:
        try:
            patterns = list(braceexpand(os.fsdecode(item)))
        except UnbalancedBracesError as e:
            raise ConfigError(f"{who}: {os.fsdecode(item)}: {e}") from None
        for pattern in patterns:
            if glob.has_magic(pattern) and not is_url(pattern):
                matches = sorted(glob.glob(pattern))
                if not matches:
                    raise ConfigError(f"{who}: no file matches {pattern}")
                paths.extend(matches)
            else:
                paths.append(pattern)
    if not paths:
        raise ConfigError(f"{who}: no shards given")
    return paths


class TarShards(Source):
    """Samples stored WebDataset-style in tar shards (as written by
    ``conveyor pack`` or webdataset's ShardWriter): members sharing a prefix
    (the path up to the first "." of the file name) form one sample; its image
    is the member named by IMG_EXTENSIONS (``jpg``, ``jpeg``, ``png``,
    ``webp``, ``tif``, ``tiff``, ``bmp``, ``ppm``, ``pgm``), its label the integer in ``cls`` (-1
    without one); other members (``json``, ...) are readable with
    ``field()``.

    Shards are opened and indexed once, so every sample is randomly
    accessible (each read is a positional read of its member; a shard that
    shrinks afterwards gives a ReadError naming ``shard.tar:member``, never a
    crash, and so does one replaced since, by rename or rewritten in place:
    "the shard changed since it was indexed"): ``Loader(shuffle=True)``
    shuffles globally, across shards.
    For data sets far larger than memory, where random reads would thrash the
    page cache, ``shuffle_buffer=N`` gives webdataset's streaming order
    instead: the shard order is shuffled and samples pass through a buffer of
    N, so reads stay within a few shards at a time; under W ranks each rank
    streams shards of its own (docs/distributed.md). Either order depends
    only on (seed, epoch), and the streaming one on W. Sample keys are
    ``"shard.tar:member"``.

    Shards may be URLs (``https://host/shard-{000..009}.tar``, ``s3://``, any
    fsspec protocol whose backend is installed): each is indexed once at
    construction (16 shards at a time), from its index beside it when there
    is one (``<shard URL>.index.json``, written by ``conveyor pack`` or
    ``conveyor index``: one small request; under a listed prefix the listing
    says which shards have one, and their sizes), else by reading the shard
    in large range requests (8 MiB chunks), keeping only offsets; afterwards,
    samples that are neighbours in a shard and that an epoch's order reads
    close together (``shuffle=False``, a
    ``shuffle_buffer``, a small set) are read in one range request per run
    of about 8 MiB, and other samples in one range request of exactly their
    bytes, with transient failures retried under ``retry``. See
    docs/api.md, "Remote storage".

    Args:
        shards: a pattern (``"data/shard-{000..009}.tar"``, ``"data/*.tar"``),
            a URL prefix ending in "/" (``"s3://bucket/train/"``: every
            ``.tar`` object under it, sorted), or a list of them.
        shuffle_buffer: None (global shuffle) or the buffer size N >= 1 (an
            int or numpy integer; not a bool).
        retry: how reads of URLs retry transient failures (a RetryPolicy;
            None: its defaults).
        storage_options: settings of the URLs' store, as for FileList.
        cache_dir, cache_budget: a local folder that keeps whole shards read
            from URLs (fetched whole on the first read of any member), and
            its size limit, as for FileList.

    Raises:
        ConfigError: no shard matches, no samples, or shuffle_buffer is not
            an int >= 1; a URL's protocol has no fsspec backend installed.
        ReadError: a shard is missing, unreadable, not a regular file (a FIFO
            is refused, not waited on), truncated or corrupt, or a
            sample has no image, a duplicate member or a malformed ``cls``
            (naming ``shard.tar:member``); a remote shard's index is not one
            (naming it).
    """

    def __init__(
        self,
        shards: Union[PathLike, Sequence[PathLike]],
        shuffle_buffer: Optional[int] = None,
        *,
        retry: Optional[RetryPolicy] = None,
        storage_options: Optional[Mapping[str, Any]] = None,
        cache_dir: Optional[PathLike] = None,
        cache_budget: Optional[int] = None,
    ) -> None:
        if shuffle_buffer is not None:
            shuffle_buffer = check_int(
                shuffle_buffer, "TarShards: shuffle_buffer (None or an int >= 1)", minimum=1
            )
        self.shuffle_buffer = shuffle_buffer
        expanded = expand_shards(shards)
        if any(is_url(shard) for shard in expanded):
            # Listing and indexing wait on the network: Ctrl-C ends them.
            build_interruptibly(
                lambda: self._build(expanded, retry, storage_options, cache_dir, cache_budget)
            )
        else:
            self._build(expanded, retry, storage_options, cache_dir, cache_budget)

    def _build(
        self,
        expanded: list[str],
        retry: Optional[RetryPolicy],
        storage_options: Optional[Mapping[str, Any]],
        cache_dir: Optional[PathLike],
        cache_budget: Optional[int],
    ) -> None:
        self.shards = []
        # Per shard, what its prefix's listing said: (size, whether its index is there).
        listings: list[Optional[tuple[int, bool]]] = []
        for shard in expanded:
            if is_url(shard) and shard.endswith("/"):  # A prefix: its .tar objects, listed once.
                sizes = dict(list_objects(shard, retry, storage_options, "TarShards"))
                found = [url for url in sizes if url.endswith(".tar")]
                if not found:
                    raise ConfigError(f"TarShards: found no .tar objects under {shard}")
                self.shards.extend(found)
                # A size of 0 is one the listing did not know (fsspec's HTTP
                # "listings" of links): the store is asked.
                listings += [
                    (sizes[url], url + _conveyor.SHARD_INDEX_SUFFIX in sizes) if sizes[url] > 0 else None
                    for url in found
                ]
            else:
                self.shards.append(shard)
                listings.append(None)
        remote = remote_arguments(self.shards, retry, storage_options, "TarShards", cache_dir, cache_budget)
        self._remote = bool(remote)
        self._store = remote.get("remote")  # The store reading the URLs (its counters), or None.
        if remote and any(listings):
            remote["listed"] = listings
        self._source = _conveyor.TarShardSource(fs_paths(self.shards), **remote)

    def __len__(self) -> int:
        return len(self._source)

    def _engine_source(self) -> _conveyor.Source:
        return self._source

    def fields(self, index: int) -> list[str]:
        """The member names of sample ``index`` without its prefix, e.g. ``["cls", "jpg", "json"]``."""
        return list(self._source.fields(index))

    def field(self, index: int, name: str) -> bytes:
        """The bytes of member ``name`` (e.g. ``"json"``) of sample ``index``."""
        return self._source.field(index, name)

    def key(self, index: int) -> str:
        """``"shard.tar:member"`` of sample ``index``'s image."""
        return self._source.key(index)
