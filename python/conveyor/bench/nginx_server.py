"""Debian's nginx as ``conveyor bench remote``'s file server: a folder served
on 127.0.0.1 (HTTP/1.1 keep-alive, byte ranges, ETags, sendfile) by one
nginx process, a fixed latency added to every request by the echo module's
``echo_sleep`` (Debian: ``libnginx-mod-http-echo``), a timer in nginx's event
loop, before the file is served.

The bench's loader and its server share the same cores, so what serving
costs is part of what the bench measures: nginx serves a request for ~0.06 ms
of CPU on the bench's 2 cores, about half of what the project's own Python
server (``http_server.py``) takes; real stores serve from other machines.
The tests keep the Python server, whose faults (503s, redirects) they script.
"""

from __future__ import annotations

import os
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
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


def _echo_module() -> Optional[str]:
    return next((path for path in ECHO_MODULES if os.path.exists(path)), None)


def unavailable() -> Optional[str]:
    """Why nginx cannot serve the bench here (a sentence), or None."""
    if _binary() is None:
        return "nginx is not installed (Debian: apt-get install nginx)"
    if _echo_module() is None:
        return "nginx's echo module is not installed (Debian: apt-get install libnginx-mod-http-echo)"
    return None


def start(root: str, latency_ms: float, folder: str) -> tuple[subprocess.Popen[bytes], int]:
    """nginx serving ``root`` with ``latency_ms`` added to every request, its
    configuration, logs and temporary files in ``folder``; returns the
    process (one: no master, one worker's loop) and its port. Raises
    RuntimeError when it is unavailable() or does not start."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    binary, module = _binary(), _echo_module()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = os.path.abspath(root)
    if latency_ms > 0:
        # echo_sleep is a timer (whole milliseconds: it takes 3 decimals of a
        # second), then the request goes on to the static files.
        sleep = f"{round(latency_ms) / 1000:.3f}"
        serve = f"location / {{ echo_sleep {sleep}; echo_exec @file; }} location @file {{ root {root}; }}"
    else:
        serve = f"root {root};"
    conf = os.path.join(folder, "nginx.conf")
    with open(conf, "w") as f:
        f.write(
            f"""
            load_module {module};
            daemon off; master_process off; worker_processes 1; worker_rlimit_nofile 16384;
            pid {folder}/nginx.pid; error_log {folder}/error.log;
            events {{ worker_connections 8192; }}
            http {{
                access_log off; sendfile on; keepalive_requests 1000000;
                default_type application/octet-stream;
                client_body_temp_path {folder}; proxy_temp_path {folder}; fastcgi_temp_path {folder};
                uwsgi_temp_path {folder}; scgi_temp_path {folder};
                server {{ listen 127.0.0.1:{port} backlog=4096; {serve} }}
            }}
            """
        )
    assert binary is not None
    process = subprocess.Popen([binary, "-p", folder, "-c", conf], stderr=subprocess.PIPE)
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                error = process.communicate()[1].decode(errors="replace").strip()
                raise RuntimeError(f"nginx did not start on port {port}: {error}") from None
            time.sleep(0.02)
