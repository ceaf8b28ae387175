"""The loader job of the wheel check (packaging/wheel_check.py).

Runs wherever conveyor is importable, with or without torch: the
development build and the installed wheel run it on the same files, and the
check compares what they write, array for array. The transforms reach every
library the wheel carries: each image format's decoder, OpenCV (antialiased
resize, affine and perspective warps, blur) and libcurl (the same files again
through http:// from a server in this process).

    python wheel_job.py IMAGES_DIR OUT.npz
"""

from __future__ import annotations

import functools
import http.server
import os
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


def main() -> int:
    images_dir, out_path = sys.argv[1], sys.argv[2]
    names = sorted(os.listdir(images_dir))
    local = _batches([os.path.join(images_dir, name) for name in names])

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=images_dir)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = _batches([f"http://127.0.0.1:{server.server_address[1]}/{name}" for name in names])
    finally:
        server.shutdown()

    numpy.savez(out_path, *local, *remote)
    print(f"wheel_job: conveyor {conveyor.__version__}, {len(names)} files, {len(local) // 2} batches twice")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
