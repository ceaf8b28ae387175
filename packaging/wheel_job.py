"""The loader job of the wheel check (packaging/wheel_check.py).

Runs wherever conveyor is importable, with or without torch: the
development build and the installed wheel run it on the same files, and the
check compares what they write, array for array. The transforms reach every
library the wheel carries: each image format's decoder, OpenCV (antialiased
resize, affine and perspective warps, blur) and libcurl with OpenSSL (the same
files again through http:// and https:// from a server in this process).

    SSL_CERT_FILE=TLS_DIR/ca.pem python wheel_job.py IMAGES_DIR OUT.npz [TLS_DIR]
"""

from __future__ import annotations

import functools
import http.server
import os
import ssl
import sys
import threading

import numpy

import conveyor
from conveyor import transforms as T


def _batches(paths: list[str]) -> list[numpy.ndarray]:
    loader = conveyor.Loader(
        conveyor.sources.FileList(paths, labels=list(range(len(paths)))),
        [
            T.RandomResizedCrop(48),
            T.RandomAffine(degrees=20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10),
            T.RandomPerspective(p=1.0),
            T.GaussianBlur(5, sigma=(0.5, 1.5)),
            T.RandomHorizontalFlip(),
            T.ColorJitter(0.3, 0.3, 0.3, 0.05),
            T.Resize(40),
            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ],
        batch_size=4,
        shuffle=True,
        seed=7,
        threads=2,
    )
    out = []
    with loader:
        for _epoch in range(2):
            for images, labels in loader:
                out += [numpy.asarray(images), numpy.asarray(labels)]
    return out


def _served(images_dir: str, names: list[str], tls_dir: str | None) -> list[numpy.ndarray]:
    """The batches of the files served from this process, over http://, or
    over https:// with the certificate in ``tls_dir`` (server.pem, issued by
    the CA whose ca.pem SSL_CERT_FILE names)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=images_dir)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls_dir is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.path.join(tls_dir, "server.pem"))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scheme = "http" if tls_dir is None else "https"
    try:
        return _batches([f"{scheme}://127.0.0.1:{server.server_address[1]}/{name}" for name in names])
    finally:
        server.shutdown()
        server.server_close()


def main() -> int:
    images_dir, out_path = sys.argv[1], sys.argv[2]
    tls_dir = sys.argv[3] if len(sys.argv) > 3 else None
    names = sorted(os.listdir(images_dir))
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None  # type: ignore[method-assign]
    arrays = _batches([os.path.join(images_dir, name) for name in names]) + _served(images_dir, names, None)
    if tls_dir is not None:
        arrays += _served(images_dir, names, tls_dir)
    numpy.savez(out_path, *arrays)
    print(f"wheel_job: conveyor {conveyor.__version__}, {len(names)} files, {len(arrays) // 2} batches")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
