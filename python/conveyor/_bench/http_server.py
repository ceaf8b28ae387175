"""A local HTTP file server for the remote-storage tests and ``conveyor bench
remote``: serves a folder over HTTP/1.1 (keep-alive) on 127.0.0.1 with byte
ranges (``Range: bytes=a-b``), a fixed latency added to every request, the
first N requests of chosen paths answered 503, chosen paths redirected (302),
and 404 for missing files.
Every request is logged (method, path, range, status, bytes sent).

In a thread: ``with FileServer(root, latency=0.02) as server: server.url("a.jpg")``.
In its own process (the benchmark, so that serving does not share the
measured process's GIL): ``python -m conveyor._bench.http_server ROOT
--latency-ms 20``, which prints the port on its first line.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

__all__ = ["FileServer", "Request"]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class Request:
    """One request as the server answered it."""

    method: str
    path: str  # Relative to the root, without the leading "/".
    range: Optional[str]  # The Range header, if any.
    status: int
    sent: int  # Body bytes sent.
    authorization: Optional[str] = None  # The Authorization header, if any.


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Many clients connect at once (one connection per read in flight); the
    # default backlog of 5 would drop their SYNs into 1 s retransmits.
    request_queue_size = 1024
    owner: FileServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # Keep-alive: clients reuse connections.
    # The headers and the body go out in two writes: with Nagle's algorithm
    # the body waited for the client's delayed ACK of the headers, adding
    # ~40 ms to every request (a "0 ms" server answered in ~45 ms).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # Quiet.
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _reply(
        self, status: int, headers: dict[str, str], body: bytes, send_body: bool, path: str, length: int = -1
    ) -> None:
        # `length`: what GET would send, for a HEAD (which sends no body).
        # Logged first: a client that has its reply finds the request logged.
        self.server.owner._record(
            Request(
                self.command,
                path,
                self.headers.get("Range"),
                status,
                len(body) if send_body else 0,
                self.headers.get("Authorization"),
            )
        )
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body) if length < 0 else length))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _serve(self, body: bool) -> None:
        owner = self.server.owner
        if owner.latency > 0:
            time.sleep(owner.latency)
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
        if owner._take_failure(path):
            self._reply(503, {}, b"", body, path)
            return
        moved = owner._redirects.get(path)
        if moved is not None:
            self._reply(302, {"Location": moved}, b"", body, path)
            return
        file = os.path.join(owner.root, path)
        if ".." in path.split("/") or not os.path.isfile(file):
            self._reply(404, {}, b"", body, path)
            return
        size = os.path.getsize(file)
        requested = self.headers.get("Range")
        start, end = 0, size  # [start, end)
        status = 200
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if requested is not None:
            match = _RANGE.match(requested.strip())
            if match is None or (not match.group(1) and not match.group(2)):
                self._reply(400, {}, b"", body, path)
                return
            first, last = match.groups()
            if first:
                start = int(first)
                end = min(size, int(last) + 1) if last else size
            else:  # Suffix range: the last N bytes.
                start = max(0, size - int(last))
            if start >= size or end <= start:
                self._reply(416, {"Content-Range": f"bytes */{size}"}, b"", body, path)
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        data = b""
        if body:
            with open(file, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
        self._reply(status, headers, data, body, path, length=end - start)


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
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http-file-server", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

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
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
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
    server._server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
