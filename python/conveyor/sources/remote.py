"""Remote storage: sources whose paths are URLs read them on the Loader's io
threads. ``http(s)://`` and ``s3://`` go through the engine's own client
(``HttpStore``, cpp/conveyor/io/http_store.h: libcurl's multi interface on
one event-loop thread, no GIL, S3 requests signed with AWS SigV4 and
credentials found as the AWS tools find them); every other protocol, and
http(s)/s3 with fsspec's own ``storage_options``, through fsspec.

The split (see cpp/conveyor/io/README.md): a store only *performs* one
attempt at a request and reports what happened (the bytes, or a failure: an
HTTP status, a timeout, a connection failure, ...); the engine
(``cpp/conveyor/io/remote.h``) decides whether a failure is transient,
retries it with backoff under a :class:`RetryPolicy`, and names the URL in the
``ReadError`` when it gives up or the failure is permanent.

fsspec and its backends are optional: ``pip install 'conveyor-loader[remote]'``.
Without them conveyor reads local files, ``http(s)://`` and ``s3://`` URLs,
and another protocol is a ConfigError saying what to install.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, TypeVar, Union

from conveyor import _conveyor
from conveyor._checks import INT_MAX, check_int, is_bool, is_real
from conveyor._distribution import pip_install
from conveyor.errors import ConfigError

__all__ = ["RetryPolicy", "build_interruptibly", "is_url", "list_objects"]

# How often a read through fsspec waiting for its request checks whether its
# loader stopped (the request is then cancelled): close() never waits for a
# slow server longer than this, the Loader's own wait slice. Shorter slices wake every
# waiting io thread more often for the GIL (20 ms cost ~20 % at 128 threads).
_POLL_SECONDS = 0.05

# What to install for the usual protocols (fsspec's own message is kept too).
_BACKENDS = {
    "http": "aiohttp",
    "https": "aiohttp",
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
    "hf": "huggingface_hub",
}


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``scheme://...``), read through a remote store."""
    return bool(_conveyor.is_url(os.fsencode(path)))


def _protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


@dataclass(frozen=True)
class RetryPolicy:
    """How reads of URLs retry transient failures (HTTP 408, 429 and 5xx
    except 501/505, timeouts, dropped connections); permanent ones (404, 403,
    other 4xx, a malformed URL) fail at once.

    A failed attempt is retried after a backoff that starts at
    ``initial_backoff`` seconds and doubles up to ``max_backoff``, each wait
    drawn at random between half and all of it (jitter); the read gives up
    after ``attempts`` attempts in all, or when the next wait would end more
    than ``timeout`` seconds after the first attempt (0: no time limit). The
    defaults (5 attempts, 0.2 s doubling to 5 s, 60 s) ride out a few seconds
    of errors, e.g. a store's throttling, and give up after at most 3 s of
    waiting on one that stays down. A wait ends at once when the Loader stops.

    Raises:
        ConfigError: ``attempts`` is not an int >= 1, a duration is not a
            finite number >= 0, or ``max_backoff`` < ``initial_backoff``.
    """

    attempts: int = 5
    initial_backoff: float = 0.2
    max_backoff: float = 5.0
    timeout: float = 60.0

    def __post_init__(self) -> None:
        check_int(self.attempts, "RetryPolicy: attempts", minimum=1, maximum=INT_MAX)
        for name in ("initial_backoff", "max_backoff", "timeout"):
            value = getattr(self, name)
            if is_bool(value) or not is_real(value) or not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"RetryPolicy: {name} must be a finite number of seconds >= 0, got {value!r}"
                )
        if self.max_backoff < self.initial_backoff:
            raise ConfigError(
                f"RetryPolicy: max_backoff ({self.max_backoff}) must be >= "
                f"initial_backoff ({self.initial_backoff})"
            )

    def _engine(self) -> _conveyor.RetryPolicy:
        return _conveyor.RetryPolicy(
            int(self.attempts), float(self.initial_backoff), float(self.max_backoff), float(self.timeout)
        )


def _status_of(error: BaseException) -> Optional[int]:
    """The HTTP status an exception carries (aiohttp, requests, botocore), if any."""
    candidates = [
        getattr(error, "status", None),
        getattr(getattr(error, "response", None), "status_code", None),
    ]
    response = getattr(error, "response", None)
    if isinstance(response, Mapping):  # botocore's ClientError.
        candidates.append(response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
    for status in candidates:
        if isinstance(status, int) and not is_bool(status) and 100 <= status <= 599:
            return status
    return None


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it was raised from, outermost first."""
    chain: list[BaseException] = []
    seen: Optional[BaseException] = error
    while seen is not None and seen not in chain and len(chain) < 16:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _is_timeout(error: BaseException) -> bool:
    from fsspec.exceptions import FSTimeoutError

    return isinstance(error, (TimeoutError, asyncio.TimeoutError, FSTimeoutError))


def _is_connection(error: BaseException) -> bool:
    kinds: tuple[type[BaseException], ...] = (ConnectionError,)
    try:
        import aiohttp

        kinds += (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
    except ImportError:
        pass
    return isinstance(error, kinds)


def _failure(error: BaseException, protocol: str) -> tuple[str, int, str]:
    """What went wrong in one request, as the engine classifies it:
    ``(kind, status, message)``. fsspec wraps some failures (its HTTP size
    lookup turns every error into FileNotFoundError), so the whole chain of
    causes is searched: a status first, then a timeout or dropped connection."""
    chain = _chain(error)
    for cause in chain:
        status = _status_of(cause)
        if status is not None:
            reason = getattr(cause, "message", None) or getattr(cause, "reason", None)
            return ("status", status, reason if isinstance(reason, str) else "")
    for cause in chain:
        if _is_timeout(cause):
            return ("timeout", 0, str(cause) or type(cause).__name__)
        if _is_connection(cause):
            return ("connection", 0, f"{type(cause).__name__}: {cause}")
    message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if isinstance(error, FileNotFoundError):
        # fsspec's HTTP reads raise exactly this for a 404.
        return ("status", 404, "Not Found") if protocol in ("http", "https") else ("not_found", 0, "")
    if isinstance(error, PermissionError):
        return ("permission", 0, message)
    if isinstance(error, ValueError):
        return ("invalid", 0, message)
    return ("other", 0, message)


def _filesystem(protocol: str, storage_options: Mapping[str, Any], owner: str) -> Any:
    """The fsspec filesystem for ``protocol``; ConfigError naming what to install."""
    package = _BACKENDS.get(protocol)
    try:
        import fsspec
    except ImportError:
        needs = "fsspec" + (f" and {package}" if package else "")
        raise ConfigError(
            f"{owner}: reading {protocol}:// URLs needs {needs} ({pip_install('remote')}"
            + (f" {package}" if package and package != "aiohttp" else "")
            + ")"
        ) from None
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as e:
        hint = f"pip install {package}" if package else "install fsspec's backend for it"
        raise ConfigError(
            f"{owner}: reading {protocol}:// URLs needs {package or 'a backend'} ({hint}): {e}"
        ) from None
    except ValueError:
        raise ConfigError(f"{owner}: fsspec knows no protocol {protocol!r} (in {protocol}://...)") from None
    options = dict(storage_options)
    if protocol in ("http", "https") and "client_kwargs" not in options:
        import aiohttp

        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=_conveyor.HTTP_CONNECT_TIMEOUT, sock_read=_conveyor.HTTP_READ_TIMEOUT
        )
        options["client_kwargs"] = {"timeout": timeout}
    try:
        return fsspec.filesystem(protocol, **options)
    except Exception as e:  # A backend refusing its options (credentials, endpoint).
        raise ConfigError(
            f"{owner}: cannot set up fsspec for {protocol}:// URLs: {type(e).__name__}: {e}"
        ) from e


class _FsspecStore:
    """One attempt at a request through fsspec, for the engine's
    PythonRemoteStore (called on the io threads, with the GIL only while
    Python runs). Returns the bytes (or size), or a failure tuple; never raises."""

    def __init__(self, urls: Sequence[str], storage_options: Mapping[str, Any], owner: str) -> None:
        self._filesystems = {
            protocol: _filesystem(protocol, storage_options, owner)
            for protocol in dict.fromkeys(_protocol(url) for url in urls)
        }

    def read(self, url: str, offset: int, size: int) -> Any:
        protocol = _protocol(url)
        fs = self._filesystems[protocol]
        limit = _conveyor.MAX_REMOTE_READ_BYTES
        if size > limit:
            return _too_large(f"{size} bytes asked for")
        # A whole object is one plain GET (a range would change what servers
        # answer, e.g. 416 for an empty object): fsspec reads its body whole,
        # so its size is checked after (the http(s) client bounds it before).
        start, end = (None, None) if size < 0 else (offset, offset + size)
        try:
            if size == 0:
                return b""
            if getattr(fs, "async_impl", False):
                data = self._wait(
                    asyncio.run_coroutine_threadsafe(fs._cat_file(url, start=start, end=end), fs.loop)
                )
            else:
                data = fs.cat_file(url, start=start, end=end)
        except Exception as e:
            return _failure(e, protocol)
        if not isinstance(data, tuple) and len(data) > limit:
            return _too_large("the object")
        return data

    def size(self, url: str) -> Any:
        protocol = _protocol(url)
        fs = self._filesystems[protocol]
        try:
            if getattr(fs, "async_impl", False):
                info = self._wait(asyncio.run_coroutine_threadsafe(fs._info(url), fs.loop))
                if isinstance(info, tuple):
                    return info
            else:
                info = fs.info(url)
        except Exception as e:
            return _failure(e, protocol)
        size = info.get("size")
        if not isinstance(size, int) or size < 0:
            return ("other", 0, f"the store gives no size for {url}")
        return size

    @staticmethod
    def _wait(future: concurrent.futures.Future[Any]) -> Any:
        # Waits in slices, so that a read whose loader stopped cancels its
        # request instead of delaying close() by a slow server's latency.
        while True:
            concurrent.futures.wait([future], timeout=_POLL_SECONDS)
            if future.done():
                return future.result()
            if _conveyor._read_cancelled():
                future.cancel()
                return ("cancelled", 0, "the loader stopped")


def _too_large(what: str) -> tuple[str, int, str]:
    """The failure of a read larger than MAX_REMOTE_READ_BYTES."""
    limit = _conveyor.MAX_REMOTE_READ_BYTES
    return ("too_large", 0, f"{what}, more than the {limit} bytes a read may return")


#: The URL schemes the engine's own client (HttpStore) reads; gs:// too when
#: storage_options give an HMAC key (GCS's S3-compatible XML API).
NATIVE_SCHEMES = frozenset({"http", "https", "s3"})
# The storage_options of gs:// through GCS's XML API.
_GCS_OPTIONS = ("key", "secret", "endpoint_url", "region")
# The storage_options the engine's client understands; any other key sends
# every URL of the source through fsspec, whose options they are.
_NATIVE_OPTIONS = frozenset({"headers", "connect_timeout", "read_timeout", *_conveyor.S3_OPTION_NAMES})


def _native_store(options: Mapping[str, Any], s3: bool, gcs: bool, owner: str) -> _conveyor.HttpStore:
    """The engine's HttpStore for ``options`` (all of them in _NATIVE_OPTIONS)."""
    headers = options.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in [*headers, *headers.values()]):
        # Names and types only: a header's value may be a token.
        shown = (
            {str(k): type(v).__name__ for k, v in headers.items()}
            if isinstance(headers, Mapping)
            else type(headers).__name__
        )
        raise ConfigError(f"{owner}: storage_options['headers'] must be a dict of str to str, got {shown}")
    s3_options: dict[str, str] = {}
    for name in _conveyor.S3_OPTION_NAMES:
        value = options.get(name)
        if value is None:
            continue
        if is_bool(value):
            value = "true" if value else "false"
        elif not isinstance(value, str):
            raise ConfigError(f"{owner}: storage_options[{name!r}] must be a str, got {type(value).__name__}")
        s3_options[name] = value
    timeouts: dict[str, float] = {}
    for name in ("connect_timeout", "read_timeout"):
        value = options.get(name)
        if value is not None:
            if is_bool(value) or not is_real(value):
                raise ConfigError(
                    f"{owner}: storage_options[{name!r}] must be a number of seconds, got {value!r}"
                )
            timeouts[name] = float(value)
    try:
        return _conveyor.HttpStore(
            list(headers.items()),
            s3_options if s3 else None,
            {k: v for k, v in s3_options.items() if k in _GCS_OPTIONS} if gcs else None,
            max_read_bytes=_conveyor.MAX_REMOTE_READ_BYTES,
            **timeouts,
        )
    except ConfigError as e:
        raise ConfigError(f"{owner}: {e}") from None


def remote_arguments(
    paths: Sequence[str],
    retry: Optional[RetryPolicy],
    storage_options: Optional[Mapping[str, Any]],
    owner: str,
    cache_dir: Optional[Union[str, os.PathLike[str]]] = None,
    cache_budget: Optional[int] = None,
) -> dict[str, Any]:
    """The engine source's ``remote`` and ``retry`` arguments for ``paths``:
    none when no path is a URL (local files keep the engine's own reads).
    With ``cache_dir`` the store keeps whole objects there (CachingStore,
    ``cache_budget`` bytes at most; None: 80 % of the folder's free space).

    Raises:
        ConfigError: a bad ``retry``, ``storage_options`` or cache argument,
            or a protocol whose fsspec backend is not installed (naming what
            to install).
    """
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(
            f"{owner}: retry must be a conveyor.sources.RetryPolicy, got {type(retry).__name__}"
        )
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise ConfigError(f"{owner}: storage_options must be a dict, got {type(storage_options).__name__}")
    urls = [path for path in paths if is_url(path)]
    if not urls:
        return {}
    options = storage_options or {}
    protocols = {_protocol(url) for url in urls}
    store: _conveyor.RemoteStore
    # gs:// is the engine's with an HMAC key (and no s3:// beside it, whose
    # settings would share the keys); else gcsfs's.
    hmac = "gs" in protocols and "s3" not in protocols and {"key", "secret"} <= set(options)
    schemes = NATIVE_SCHEMES | ({"gs"} if hmac else set())
    if protocols <= schemes and set(options) <= _NATIVE_OPTIONS:
        store = _native_store(options, "s3" in protocols, "gs" in protocols, owner)
    else:
        # s3:// through s3fs (an option the engine's client does not take, or
        # URLs of a protocol it does not read beside them) fails at the first
        # request on the engine's own options that s3fs does not take.
        s3fs_lacks = sorted({"region", "addressing_style"} & set(options)) if "s3" in protocols else []
        if s3fs_lacks:
            unknown = sorted(set(options) - _NATIVE_OPTIONS)
            why = (
                f"storage_options {unknown} are not options of conveyor's S3 client (it takes "
                f"{sorted(_NATIVE_OPTIONS)})"
                if unknown
                else f"conveyor's client does not read {sorted(protocols - schemes)} URLs beside them"
            )
            raise ConfigError(
                f"{owner}: {why}, so s3fs would read s3:// URLs, and s3fs takes no {s3fs_lacks}"
            )
        store = _conveyor.PythonRemoteStore(_FsspecStore(urls, options, owner))
    if cache_budget is not None and cache_dir is None:
        raise ConfigError(f"{owner}: cache_budget needs cache_dir")
    if cache_dir is not None:
        budget = 0 if cache_budget is None else check_int(cache_budget, f"{owner}: cache_budget", minimum=1)
        try:
            store = _conveyor.CachingStore(store, os.fsencode(cache_dir), budget)
        except ConfigError as e:
            raise ConfigError(f"{owner}: cache_dir: {e}") from None
    return {"remote": store, "retry": (retry or RetryPolicy())._engine()}


def list_objects(
    prefix: str,
    retry: Optional[RetryPolicy],
    storage_options: Optional[Mapping[str, Any]],
    owner: str,
) -> list[tuple[str, int]]:
    """``(url, size)`` of every object whose URL starts with ``prefix``, sorted
    by URL: the engine's ListObjectsV2 listing for ``s3://`` (and ``gs://``
    with an HMAC key; every page),
    fsspec's ``find`` for other protocols.

    Raises:
        ConfigError: as :func:`remote_arguments`; a protocol that cannot list
            (``http(s)://`` has no listing).
        ReadError: the listing failed (naming ``prefix`` and the cause).
    """
    arguments = remote_arguments([prefix], retry, storage_options, owner)
    if not arguments:
        raise ConfigError(f"{owner}: {prefix} is not a URL")
    store = arguments["remote"]
    protocol = _protocol(prefix)
    if isinstance(store, _conveyor.HttpStore):
        if protocol not in ("s3", "gs"):
            raise ConfigError(
                f"{owner}: {protocol}:// has no listing; list the URLs (e.g. FileList, brace patterns)"
            )
        objects = _conveyor.list_remote(store, arguments["retry"], prefix)
    else:
        fs = _FsspecStore([prefix], storage_options or {}, owner)._filesystems[protocol]
        try:
            found = fs.find(prefix, detail=True)
        except Exception as e:  # The backend's own errors: named with the prefix.
            from conveyor.errors import ReadError

            kind, status, message = _failure(e, protocol)
            cause = f"HTTP {status} {message}".rstrip() if kind == "status" else (message or kind)
            raise ReadError(f"{prefix}: {cause}") from e
        objects = [
            (f"{protocol}://{name.split('://', 1)[-1]}", int(info.get("size") or 0))
            for name, info in found.items()
            if info.get("type", "file") == "file"
        ]
    return sorted(objects)


_Built = TypeVar("_Built")


# How long an interrupted build may take to end once cancelled: the engine's
# requests and backoffs end at once; fsspec's own calls (a listing through
# gcsfs) do not see the cancellation and are left to finish in the background.
_CANCELLED_BUILD_SECONDS = 2.0


def build_interruptibly(build: Callable[[], _Built]) -> _Built:
    """``build()``, which waits on the network (a listing, the shards'
    indexes), run on a thread of its own while this one waits in slices of
    _POLL_SECONDS: Ctrl-C (KeyboardInterrupt), or any exception raised here,
    cancels its engine requests and backoffs and is raised within
    _CANCELLED_BUILD_SECONDS, instead of waiting for a slow or failing
    server. ``build``'s own exception is raised as it is.
    """
    cancellation = _conveyor.Cancellation()
    outcome: dict[str, Any] = {}
    ended = threading.Event()

    def run() -> None:
        try:
            outcome["built"] = _conveyor.call_with_cancellation(cancellation, build)
        except BaseException as e:  # Raised in the caller's thread below.
            outcome["error"] = e
        finally:
            ended.set()

    # Not a daemon: at exit the interpreter waits for it rather than stop it
    # inside the engine (a thread stopped there aborts the process). Its end
    # is waited on with an Event, not Thread.join: an interrupted join may
    # mark the thread ended while it runs (CPython 3.11, bpo-45274).
    threading.Thread(target=run, name="conveyor-build").start()
    try:
        while not ended.wait(_POLL_SECONDS):
            pass
    except BaseException:
        cancellation.cancel()
        ended.wait(_CANCELLED_BUILD_SECONDS)
        raise
    if "error" in outcome:
        raise outcome.pop("error")
    return outcome["built"]
