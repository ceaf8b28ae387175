"""Debian's nginx as ``conveyor bench remote``'s file server: a folder served
on 127.0.0.1 (HTTP/1.1 keep-alive, byte ranges, ETags, sendfile) by one
nginx process, a fixed latency added to every request by the echo module's
``echo_sleep`` (Debian: ``libnginx-mod-http-echo``), a timer in nginx's event
loop, before the file is served.

The bench's loader and its server share the same cores, so what serving
costs is part of what the bench measures: nginx serves an image for ~0.05 ms
of CPU on the bench's 2 cores, half or less of what the project's own Python
server (``http_server.py``) takes; real stores serve from other machines.
The tests keep the Python server, whose faults (503s, redirects) they script.
"""

from __future__ import annotations

import http.client
import os
import secrets
import shutil
import socket
import subprocess
import time
from typing import Optional

__all__ = ["start", "unavailable"]

#: Where Debian's (and Fedora's) nginx packages install the echo module.
ECHO_MODULES = (
    "/usr/lib/nginx/modules/ngx_http_echo_module.so",
    "/usr/lib64/nginx/modules/ngx_http_echo_module.so",
)
#: Seconds nginx has to start listening.
START_SECONDS = 10


def _binary() -> Optional[str]:
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")


def _echo_module() -> Optional[str]:
    return next((path for path in ECHO_MODULES if os.path.exists(path)), None)


def unavailable(latency_ms: float = 0) -> Optional[str]:
    """Why nginx cannot serve the bench here with ``latency_ms`` (a
    sentence), or None."""
    if _binary() is None:
        return "nginx is not installed (Debian: apt-get install nginx)"
    if _echo_module() is None:
        return "nginx's echo module is not installed (Debian: apt-get install libnginx-mod-http-echo)"
    if latency_ms != round(latency_ms):
        return f"nginx's echo_sleep adds whole milliseconds, not {latency_ms:g}"
    return None


def _quoted(text: str) -> str:
    """``text`` as one nginx configuration word."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _answers(port: int, probe: str) -> bool:
    """Whether the nginx started here answers on ``port``: its own probe
    location, which another process that took the port would not have."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", probe)
        return connection.getresponse().status == 204
    except OSError:
        return False
    finally:
        connection.close()


def start(root: str, latency_ms: float, folder: str) -> tuple[subprocess.Popen[bytes], int]:
    """nginx serving ``root`` with ``latency_ms`` added to every request, its
    configuration, logs and temporary files in ``folder``; returns the
    process (one: no master, one worker's loop) and its port. Raises
    RuntimeError when it is unavailable() or does not start."""
    reason = unavailable(latency_ms)
    if reason is not None:
        raise RuntimeError(reason)
    binary, module = _binary(), _echo_module()
    assert binary is not None and module is not None
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    root, probe = os.path.abspath(root), f"/.conveyor-bench-{secrets.token_hex(8)}"
    if latency_ms > 0:
        # echo_sleep is a timer, then the request goes on to the static files.
        serve = (
            f"location / {{ echo_sleep {latency_ms / 1000:.3f}; echo_exec @file; }} "
            f"location @file {{ root {_quoted(root)}; }}"
        )
    else:
        serve = f"root {_quoted(root)};"
    conf = os.path.join(folder, "nginx.conf")
    at = _quoted(folder)
    with open(conf, "w") as f:
        f.write(
            f"""
            load_module {_quoted(module)};
            daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 16384;
            pid {_quoted(os.path.join(folder, "nginx.pid"))};
            error_log {_quoted(os.path.join(folder, "error.log"))};
            events {{ worker_connections 8192; }}
            http {{
                access_log off; sendfile on; keepalive_requests 1000000;
                default_type application/octet-stream;
                client_body_temp_path {at}; proxy_temp_path {at}; fastcgi_temp_path {at};
                uwsgi_temp_path {at}; scgi_temp_path {at};
                server {{
                    listen 127.0.0.1:{port} backlog=4096;
                    location = {probe} {{ return 204; }}
                    {serve}
                }}
            }}
            """
        )
    with open(os.path.join(folder, "stderr"), "wb") as stderr:
        process = subprocess.Popen([binary, "-p", folder, "-c", conf], stderr=stderr)
    deadline = time.monotonic() + START_SECONDS
    while not _answers(port, probe):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            with open(os.path.join(folder, "stderr"), errors="replace") as f:
                error = f.read().strip()
            raise RuntimeError(f"nginx did not start on port {port}: {error}")
        time.sleep(0.02)
    return process, port
