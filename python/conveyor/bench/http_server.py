"""A local HTTP file server for the remote-storage tests and ``conveyor bench
remote``: serves a folder over HTTP/1.1 (keep-alive) on 127.0.0.1 with byte
ranges (``Range: bytes=a-b``) and an ETag per file version, a fixed latency added to every request, the
first N requests of chosen paths answered 503, chosen paths redirected (302),
and 404 for missing files.
Every request is logged (method, path, range, status, bytes sent).

In a thread: ``with FileServer(root, latency=0.02) as server: server.url("a.jpg")``.
In its own process (``bench remote`` where nginx or its echo module is
missing, so that serving does not share the measured process's GIL):
``python path/to/http_server.py ROOT --latency-ms 20``, which prints the
port on its first line. This file imports only the
standard library, so that it runs as a script without importing ``conveyor``
(and torch, whose objects would lengthen every garbage collection).

One thread serves every connection: a selector over the sockets and a heap of
the requests waiting out the latency. ``bench remote`` runs this server on the
same cores as the loader it measures, with 64 connections at once; a thread
per connection (Python's ThreadingHTTPServer), each sleeping out the latency
and parsing headers with the email package, cost ~0.6 ms of CPU per request
there, most of it in thread switches and hand-offs of the GIL
(docs/design/benchmarks.md, "Remote storage").
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import re
import selectors
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["FileServer", "Request"]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
# Most bytes of a request's line and headers.
_MAX_HEAD = 65536
_RECV_BYTES = 65536
_REASONS = {
    200: "OK",
    206: "Partial Content",
    302: "Found",
    400: "Bad Request",
    404: "Not Found",
    416: "Range Not Satisfiable",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Request:
    """One request as the server answered it."""

    method: str
    path: str  # Relative to the root, without the leading "/".
    range: Optional[str]  # The Range header, if any.
    status: int
    sent: int  # Body bytes sent.
    authorization: Optional[str] = None  # The Authorization header, if any.


@dataclass(frozen=True)
class _Parsed:
    """A request as received: None for ``method`` when it was not HTTP/1.x."""

    method: Optional[str]
    target: str
    headers: dict[str, str]
    keep_alive: bool


class _Connection:
    """A client's connection: bytes received and not yet parsed, reply bytes
    not yet sent, and whether it closes once they are."""

    __slots__ = ("sock", "received", "outgoing", "closing", "closed", "writing")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.received = bytearray()
        self.outgoing = bytearray()
        self.closing = False  # No more requests are read; closed once the replies are sent.
        self.closed = False
        self.writing = False  # Registered for EVENT_WRITE (a reply did not fit the socket's buffer).


class _Loop:
    """The server's one thread: accepts connections, parses requests, answers
    each once the latency has passed (in order on a connection)."""

    def __init__(self, owner: FileServer, port: int) -> None:
        self._owner = owner
        self.listener = socket.create_server(("127.0.0.1", port), backlog=1024)
        self.listener.setblocking(False)
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._due: list[tuple[float, int, _Connection, _Parsed]] = []  # A heap.
        self._order = itertools.count()  # Ties in the heap keep arrival order.
        self._stopping = False
        self._stopped = threading.Event()
        self._connections: set[_Connection] = set()

    def serve_forever(self) -> None:
        try:
            while not self._stopping:
                timeout = max(0.0, self._due[0][0] - time.monotonic()) if self._due else None
                for key, events in self._selector.select(timeout):
                    connection = key.data
                    if connection is None:
                        if key.fileobj is self.listener:
                            self._accept()
                        else:
                            self._wake_read.recv(64)
                    else:
                        if events & selectors.EVENT_WRITE:
                            self._flush(connection)
                        if events & selectors.EVENT_READ and not connection.closed:
                            self._receive(connection)
                now = time.monotonic()
                while self._due and self._due[0][0] <= now:
                    _, _, connection, request = heapq.heappop(self._due)
                    if not connection.closed:
                        self._answer(connection, request)
        finally:
            for connection in list(self._connections):
                self._close(connection)
            self._selector.close()
            self.listener.close()
            self._wake_read.close()
            self._stopped.set()

    def shutdown(self, running: bool) -> None:
        """Stops serve_forever (``running``: in another thread) and closes
        the sockets."""
        self._stopping = True
        if running:
            try:
                self._wake_write.send(b"x")
            except OSError:
                pass  # The loop saw _stopping first and closed its end: it is ending anyway.
            self._stopped.wait(timeout=10)
        else:
            self._selector.close()
            self.listener.close()
            self._wake_read.close()
        self._wake_write.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # E.g. too many open files: the client's connect times out.
            sock.setblocking(False)
            # A reply is one write; never held back for the client's delayed ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(sock)
            self._connections.add(connection)
            self._selector.register(sock, selectors.EVENT_READ, connection)

    def _close(self, connection: _Connection) -> None:
        if connection.closed:
            return
        connection.closed = True
        self._connections.discard(connection)
        try:
            self._selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        connection.sock.close()

    def _receive(self, connection: _Connection) -> None:
        try:
            data = connection.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # The client closed the connection (or reset it).
            self._close(connection)
            return
        if connection.closing:
            return  # Requests after one that closes the connection are ignored.
        connection.received += data
        due = time.monotonic() + self._owner.latency
        while not connection.closing:
            request = self._parse(connection)
            if request is None:
                break
            if not request.keep_alive:
                connection.closing = True
            heapq.heappush(self._due, (due, next(self._order), connection, request))

    @staticmethod
    def _parse(connection: _Connection) -> Optional[_Parsed]:
        """The next complete request received on ``connection``, if any."""
        received = connection.received
        end = received.find(b"\r\n\r\n")
        if end < 0:
            if len(received) > _MAX_HEAD:
                del received[:]
                return _Parsed(None, "", {}, keep_alive=False)
            return None
        lines = received[:end].decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = headers.get("content-length", "0")
        body = int(length) if length.isdigit() else 0
        if len(received) < end + 4 + body:
            return None  # A body still on its way (not used, but skipped).
        del received[: end + 4 + body]
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _Parsed(None, "", headers, keep_alive=False)
        method, target, version = parts
        connection_tokens = headers.get("connection", "").lower()
        keep_alive = connection_tokens != "close" and (
            version != "HTTP/1.0" or connection_tokens == "keep-alive"
        )
        return _Parsed(method, target, headers, keep_alive and method in ("GET", "HEAD"))

    def _answer(self, connection: _Connection, request: _Parsed) -> None:
        if request.method is None:
            reply = self._reply(request, "", 400, {}, b"")
        elif request.method not in ("GET", "HEAD"):
            reply = self._reply(request, "", 501, {}, b"")
        else:
            try:
                reply = self._serve(request)
            except Exception as e:  # One bad request must not stop the server.
                request = _Parsed(request.method, request.target, request.headers, keep_alive=False)
                connection.closing = True
                reply = self._reply(request, "", 500, {}, f"{type(e).__name__}: {e}".encode())
        connection.outgoing += reply
        self._flush(connection)

    def _flush(self, connection: _Connection) -> None:
        if connection.closed:
            return
        try:
            sent = connection.sock.send(connection.outgoing)
            del connection.outgoing[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # The client went away.
            self._close(connection)
            return
        if connection.outgoing and not connection.writing:
            connection.writing = True
            self._selector.modify(connection.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, connection)
        elif not connection.outgoing:
            if connection.writing:
                connection.writing = False
                self._selector.modify(connection.sock, selectors.EVENT_READ, connection)
            if connection.closing and not any(c is connection for _, _, c, _ in self._due):
                self._close(connection)

    def _reply(
        self,
        request: _Parsed,
        path: str,
        status: int,
        headers: dict[str, str],
        body: bytes,
        length: int = -1,
    ) -> bytes:
        """The bytes of a reply, logged first (a client that has its reply
        finds the request logged). ``length``: what GET would send, for a
        HEAD (which sends no body)."""
        send_body = request.method != "HEAD"
        self._owner._record(
            Request(
                request.method or "",
                path,
                request.headers.get("range"),
                status,
                len(body) if send_body else 0,
                request.headers.get("authorization"),
            )
        )
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body) if length < 0 else length}")
        if not request.keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if send_body else head

    def _serve(self, request: _Parsed) -> bytes:
        owner = self._owner
        path = urllib.parse.unquote(urllib.parse.urlsplit(request.target).path).lstrip("/")
        if owner._take_failure(path):
            return self._reply(request, path, 503, {}, b"")
        moved = owner._redirects.get(path)
        if moved is not None:
            return self._reply(request, path, 302, {"Location": moved}, b"")
        file = os.path.join(owner.root, path)
        if ".." in path.split("/") or not os.path.isfile(file):
            return self._reply(request, path, 404, {}, b"")
        info = os.stat(file)
        size = info.st_size
        requested = request.headers.get("range")
        start, end = 0, size  # [start, end)
        status = 200
        # The file's version, as a static server derives it (nginx: mtime and size).
        etag = f'"{info.st_mtime_ns:x}-{size:x}"'
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream", "ETag": etag}
        if requested is not None:
            match = _RANGE.match(requested.strip())
            if match is None or (not match.group(1) and not match.group(2)):
                return self._reply(request, path, 400, {}, b"")
            first, last = match.groups()
            if first:
                start = int(first)
                end = min(size, int(last) + 1) if last else size
            else:  # Suffix range: the last N bytes.
                start = max(0, size - int(last))
            if start >= size or end <= start:
                return self._reply(request, path, 416, {"Content-Range": f"bytes */{size}"}, b"")
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        data = b""
        if request.method != "HEAD":
            fd = os.open(file, os.O_RDONLY)
            try:
                data = os.pread(fd, end - start, start)
            finally:
                os.close(fd)
        return self._reply(request, path, status, headers, data, length=end - start)


class FileServer:
    """Serves ``root`` on 127.0.0.1 (a free port) from a background thread.

    Args:
        root: the folder served.
        latency: seconds added to every request before it is answered.
    """

    def __init__(self, root: str, latency: float = 0.0, port: int = 0) -> None:
        self.root = os.path.abspath(root)
        self.latency = latency
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._redirects: dict[str, str] = {}
        self._log: list[Request] = []
        self._loop = _Loop(self, port)
        self._thread = threading.Thread(target=self._loop.serve_forever, name="http-file-server", daemon=True)

    @property
    def port(self) -> int:
        """The port the server listens on (127.0.0.1)."""
        return int(self._loop.listener.getsockname()[1])

    def url(self, path: str) -> str:
        """The URL of ``path`` (relative to the root)."""
        return f"http://127.0.0.1:{self.port}/{urllib.parse.quote(path)}"

    def fail(self, path: str, count: int) -> None:
        """Answer the next ``count`` requests of ``path`` with 503 (-1: all of them)."""
        with self._lock:
            self._failures[path] = count

    def redirect(self, path: str, location: str) -> None:
        """Answer requests of ``path`` with 302 to ``location`` (a URL or a path)."""
        with self._lock:
            self._redirects[path] = location

    def requests(self, path: Optional[str] = None) -> list[Request]:
        """The requests answered so far (of ``path`` only, when given)."""
        with self._lock:
            return [r for r in self._log if path is None or r.path == path]

    def clear_log(self) -> None:
        """Forgets the requests answered so far."""
        with self._lock:
            self._log.clear()

    def _take_failure(self, path: str) -> bool:
        with self._lock:
            left = self._failures.get(path, 0)
            if left == 0:
                return False
            if left > 0:
                self._failures[path] = left - 1
            return True

    def _record(self, request: Request) -> None:
        with self._lock:
            self._log.append(request)

    def start(self) -> FileServer:
        """Starts serving in a background thread; returns the server."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops serving and joins the thread."""
        self._loop.shutdown(running=self._thread.is_alive())
        self._thread.join(timeout=10)

    def __enter__(self) -> FileServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """Serves a folder until killed; prints the port on the first line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    server = FileServer(args.root, latency=args.latency_ms / 1000)
    print(server.port, flush=True)
    server._loop.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
