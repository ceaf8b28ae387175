"""Remote storage: sources whose paths are URLs (``https://``, ``s3://``,
``gs://``, ...) read them on the Loader's io threads: ``http(s)://`` with the
standard library's ``http.client`` (one keep-alive connection per io thread
and server), every other protocol through fsspec.

The split (see cpp/conveyor/io/README.md): this module only *performs* one
attempt at a request and reports what happened (the bytes, or a failure: an
HTTP status, a timeout, a connection failure, ...); the engine
(``cpp/conveyor/io/remote.h``) decides whether a failure is transient,
retries it with backoff under a :class:`RetryPolicy`, and names the URL in the
``ReadError`` when it gives up or the failure is permanent.

Why not fsspec for HTTP too: a request through fsspec's HTTP filesystem
(aiohttp, on fsspec's event-loop thread) cost 2.3-3.0 ms of CPU, most of it
Python under the GIL, so at a few hundred images/s the GIL, not the network,
set the pace (docs/benchmarks.md, "Remote storage"). ``http.client`` does the
same request in a fraction of that, with the GIL released while it waits.
fsspec still reads ``http(s)://`` when ``storage_options`` has keys other
than ``headers`` (they are fsspec's options).

fsspec and its backends are optional: ``pip install 'conveyor[remote]'``.
Without them conveyor reads local files and ``http(s)://`` URLs, and another
protocol is a ConfigError saying what to install.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import math
import os
import select
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from conveyor import _conveyor
from conveyor._checks import INT_MAX, check_int, is_bool, is_real
from conveyor.errors import ConfigError

__all__ = ["REMOTE_IO_THREADS", "RetryPolicy", "is_url"]

#: The Loader's default ``io_threads`` for a source that reads URLs. A read
#: waits a round trip on the network, so by Little's law the reads in flight
#: must cover rate x latency: 64 keep ~500 images/s at 100 ms per request
#: (the local default, 32, caps it near 300: measured 209 images/s at 100 ms
#: against 369 with 64, docs/benchmarks.md). More is not better here: every
#: request also runs Python under the GIL: with fsspec 128 threads were
#: slower than 64 at 0 and 20 ms on our 2 cores; with http.client (2026-11-26)
#: 128 were faster at 100 ms (685 against 538 images/s) but slower at 20 ms
#: (861 against 943), so 64 stayed.
REMOTE_IO_THREADS = 64

# How often a read waiting for its request checks whether its loader stopped
# (the request is then cancelled): close() never waits for a slow server
# longer than this, the Loader's own wait slice. Shorter slices wake every
# waiting io thread more often for the GIL (20 ms cost ~20 % at 128 threads).
_POLL_SECONDS = 0.05

# Connect and read timeouts of the HTTP client: a server that stops answering
# becomes a (transient, retried) timeout instead of a read that hangs.
_HTTP_CONNECT_TIMEOUT_S = 10.0
_HTTP_READ_TIMEOUT_S = 30.0

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
    """Whether ``path`` is a URL (``scheme://...``), read through fsspec."""
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
            f"{owner}: reading {protocol}:// URLs needs {needs} (pip install 'conveyor[remote]'"
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
            total=None, sock_connect=_HTTP_CONNECT_TIMEOUT_S, sock_read=_HTTP_READ_TIMEOUT_S
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


# Redirects an HTTP read follows (as fsspec's client does) before failing.
_MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)


# What one read of a reply's body asks for (a bounded read is a loop of them).
_BODY_PIECE_BYTES = 1 << 20


def _too_large(what: str) -> tuple[str, int, str]:
    """The failure of a read larger than MAX_REMOTE_READ_BYTES."""
    limit = _conveyor.MAX_REMOTE_READ_BYTES
    return ("too_large", 0, f"{what}, more than the {limit} bytes a read may return")


class _HttpStore:
    """One attempt at an ``http(s)://`` request with ``http.client``, for the
    engine's PythonRemoteStore (called on the io threads; the GIL is released
    while a socket waits). Each io thread keeps one keep-alive connection per
    server. Returns the bytes (or size), or a failure tuple; never raises."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._headers = dict(headers)
        self._local = threading.local()
        self._tls = ssl.create_default_context()

    def read(self, url: str, offset: int, size: int) -> Any:
        if size == 0:
            return b""
        headers = {} if size < 0 else {"Range": f"bytes={offset}-{offset + size - 1}"}
        reply = self._request("GET", url, headers)
        if isinstance(reply[0], str):
            return reply  # A failure.
        status, _, body = reply
        if status == 200 and size >= 0:
            body = body[offset : offset + size]  # A server that ignores Range sends it all.
        if size >= 0 and len(body) != size:
            return ("other", 0, f"asked for bytes {offset}-{offset + size - 1}, got {len(body)} byte(s)")
        return body

    def size(self, url: str) -> Any:
        reply = self._request("HEAD", url, {})
        if isinstance(reply[0], str):
            return reply  # A failure.
        _, length, _ = reply
        if length is None or not length.isdigit():
            return ("other", 0, f"the server gives no Content-Length for {url}")
        return int(length)

    def _request(self, method: str, url: str, headers: Mapping[str, str]) -> Any:
        """``(status, Content-Length, body)`` of a 2xx reply after redirects,
        or a failure tuple (its first item a str, the kind)."""
        for _ in range(_MAX_REDIRECTS + 1):
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                return ("invalid", 0, f"not an http(s) URL: {url}")
            target = parts.path or "/"
            if parts.query:
                target += "?" + parts.query
            reply = self._attempt(parts, method, target, {**self._headers, **headers})
            if isinstance(reply[0], str):
                return reply  # A failure.
            status, reason, length, location, body = reply
            if status in _REDIRECTS and location:
                url = urllib.parse.urljoin(url, location)
                continue
            if 200 <= status < 300:
                return status, length, body
            return ("status", status, reason)
        return ("other", 0, f"more than {_MAX_REDIRECTS} redirects")

    def _attempt(
        self, parts: urllib.parse.SplitResult, method: str, target: str, headers: Mapping[str, str]
    ) -> Any:
        key = (parts.scheme, parts.netloc)
        connections = self._local.__dict__.setdefault("connections", {})
        for fresh in (False, True):
            connection = None if fresh else connections.get(key)
            reused = connection is not None
            if connection is None:
                connection = self._connect(parts)
                connections[key] = connection
            try:
                connection.request(method, target, headers=headers)
                if not self._wait_for_reply(connection):
                    connection.close()
                    return ("cancelled", 0, "the loader stopped")
                response = connection.getresponse()
                body = b"" if method == "HEAD" else self._bounded_body(response)
                if body is None:  # Larger than any read may be: the rest is never read.
                    connection.close()
                    length = response.getheader("Content-Length")
                    declared = f"Content-Length: {length}" if length else "a body of no declared length"
                    return _too_large(declared)
                if response.will_close:
                    connection.close()
                return (
                    response.status,
                    response.reason,
                    response.getheader("Content-Length"),
                    response.getheader("Location"),
                    body,
                )
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                connection.close()
                if reused:
                    continue  # The server closed an idle keep-alive connection: once more, anew.
                return ("connection", 0, f"{type(e).__name__}: {e}")
            except (socket.timeout, TimeoutError) as e:
                connection.close()
                return ("timeout", 0, str(e) or type(e).__name__)
            except ssl.SSLCertVerificationError as e:
                connection.close()
                return ("other", 0, f"{type(e).__name__}: {e}")
            except (OSError, http.client.HTTPException) as e:
                connection.close()
                return ("connection", 0, f"{type(e).__name__}: {e}")
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _bounded_body(response: http.client.HTTPResponse) -> Optional[bytes]:
        """The body, or None when it is larger than MAX_REMOTE_READ_BYTES:
        refused by its declared length before reading, else (chunked, or no
        length) read in pieces no further than one byte past the limit (one
        read of the limit would reserve that much memory up front)."""
        limit = _conveyor.MAX_REMOTE_READ_BYTES
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > limit:
            return None
        pieces, total = [], 0
        while total <= limit:
            piece = response.read(min(_BODY_PIECE_BYTES, limit + 1 - total))
            if not piece:
                return b"".join(pieces)
            pieces.append(piece)
            total += len(piece)
        return None

    def _connect(self, parts: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        if parts.scheme == "https":
            return http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=_HTTP_CONNECT_TIMEOUT_S, context=self._tls
            )
        return http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=_HTTP_CONNECT_TIMEOUT_S)

    @staticmethod
    def _wait_for_reply(connection: http.client.HTTPConnection) -> bool:
        """Waits for the reply's first bytes in slices, so that a read whose
        loader stopped gives up instead of delaying close() by a slow server's
        latency; False then. A reply that does not start within the read
        timeout raises socket.timeout."""
        sock = connection.sock
        assert sock is not None
        sock.settimeout(_HTTP_READ_TIMEOUT_S)  # For the body, once it flows.
        deadline = time.monotonic() + _HTTP_READ_TIMEOUT_S
        while not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            readable, _, _ = select.select([sock], [], [], _POLL_SECONDS)
            if readable:
                return True
            if _conveyor._read_cancelled():
                return False
            if time.monotonic() > deadline:
                raise socket.timeout(f"no reply within {_HTTP_READ_TIMEOUT_S:g} s")
        return True


class _Stores:
    """Routes each URL to its store: ``http(s)://`` to :class:`_HttpStore`
    (unless ``storage_options`` has fsspec options), the rest to
    :class:`_FsspecStore`."""

    def __init__(self, urls: Sequence[str], storage_options: Mapping[str, Any], owner: str) -> None:
        http = set(storage_options) <= {"headers"}
        self._http = _HttpStore(storage_options.get("headers") or {}) if http else None
        others = [url for url in urls if not (http and _protocol(url) in ("http", "https"))]
        self._fsspec = _FsspecStore(others, storage_options, owner) if others else None

    def _store(self, url: str) -> Any:
        return self._http if self._http is not None and _protocol(url) in ("http", "https") else self._fsspec

    def read(self, url: str, offset: int, size: int) -> Any:
        return self._store(url).read(url, offset, size)

    def size(self, url: str) -> Any:
        return self._store(url).size(url)


def remote_arguments(
    paths: Sequence[str],
    retry: Optional[RetryPolicy],
    storage_options: Optional[Mapping[str, Any]],
    owner: str,
) -> dict[str, Any]:
    """The engine source's ``remote`` and ``retry`` arguments for ``paths``:
    none when no path is a URL (local files keep the engine's own reads).

    Raises:
        ConfigError: a bad ``retry`` or ``storage_options``, or a protocol
            whose fsspec backend is not installed (naming what to install).
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
    headers = options.get("headers", {})
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in [*headers, *headers.values()]):
        raise ConfigError(
            f"{owner}: storage_options['headers'] must be a dict of str to str, got {headers!r}"
        )
    store = _Stores(urls, options, owner)
    return {"remote": _conveyor.PythonRemoteStore(store), "retry": (retry or RetryPolicy())._engine()}
