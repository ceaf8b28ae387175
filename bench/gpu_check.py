"""The GPU device check as one command: build conveyor on a GPU machine that
has none of its Debian libraries and no network, run the CUDA tests, run the
GPU benchmarks, and write a JSON summary and a log.

Here (a machine with the Debian registry), once::

    make gpu-deps        # the .deb files and wheels the GPU machine lacks -> build/gpu-deps

There (carrying build/gpu-deps), one command of a few minutes::

    python3 bench/gpu_check.py --deps build/gpu-deps --out "$OUT"

Steps, each recorded in ``gpu-check.json`` and ``gpu-check.log`` under
``--out``:

1. ``environment``: the machine, its compiler, Python, torch and GPU.
2. ``build`` (with ``--deps`` only): every ``.deb`` is unpacked under a
   prefix in /tmp (never into ``/``), its paths are made to point into the
   prefix, and the extension is built there against it with the machine's
   compiler and Python (warnings are not errors: a newer compiler than the
   project's warns more). Libraries the machine lacks are found through
   ``LD_LIBRARY_PATH`` on a folder that links only those.
3. ``tests``: tests/test_cuda_device.py (real GPU), tests/test_cuda_path.py
   and tests/test_device_decode.py (decoding on the GPU).
4. ``handoff``: bench/gpu_handoff.py (ResNet-50 fed by conveyor vs synthetic).
5. ``guide``: bench/gpu_tuning_guide.py (the tuning guide's fixes measured).
6. ``decode``: bench/gpu_decode_baseline.py (GPU decode against the CPU path
   and torchvision's GPU decode).

Without a GPU (``make gpu-check``, part of ``make test``) it uses the
extension already built, the tests that need a GPU skip, the benchmarks run
with ``--smoke`` on the CPU, and the summary lists what was skipped. The exit
status is 0 when every step that ran passed.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any, Optional, TextIO

ROOT = Path(__file__).resolve().parent.parent
ARCH = "x86_64-linux-gnu"


class Check:
    """The summary and the log of one run."""

    def __init__(self, out: Path, budget: Optional[float] = None) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.budget = budget
        self.log: TextIO = open(out / "gpu-check.log", "w")
        self.summary: dict[str, Any] = {"skipped": []}
        self.began = time.perf_counter()

    def say(self, line: str) -> None:
        stamped = f"[{time.perf_counter() - self.began:6.1f} s] {line}"
        print(stamped, flush=True)
        self.log.write(stamped + "\n")
        self.log.flush()

    def skip(self, what: str, why: str) -> None:
        self.summary["skipped"].append({"what": what, "why": why})
        self.say(f"SKIPPED {what}: {why}")

    def run(self, name: str, command: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
        """Runs ``command`` in the repository root, its output into the log;
        returns its exit status, seconds and output tail."""
        if self.budget is not None:
            left = self.budget - (time.perf_counter() - self.began)
            if left < 30:
                self.skip(name, f"the budget of {self.budget:.0f} s is spent ({left:.0f} s left)")
                return {"status": "skipped", "seconds": 0, "tail": ""}
            timeout = min(timeout, left - 10)
        self.say(f"{name}: {' '.join(command)}")
        began = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
            )
            status, output = done.returncode, done.stdout
        except subprocess.TimeoutExpired as expired:
            output = expired.stdout or ""
            status, output = "timeout", output if isinstance(output, str) else output.decode(errors="replace")
        seconds = time.perf_counter() - began
        self.log.write(output)
        self.say(f"{name}: exit {status} after {seconds:.1f} s")
        return {"status": status, "seconds": round(seconds, 1), "tail": output[-3000:]}

    def write(self) -> None:
        self.summary["seconds"] = round(time.perf_counter() - self.began, 1)
        with open(self.out / "gpu-check.json", "w") as f:
            json.dump(self.summary, f, indent=2)


def command_output(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"unavailable ({error})"


def environment() -> dict[str, Any]:
    found: dict[str, Any] = {
        "machine": platform.platform(),
        "cpus": len(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "python_headers": os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")),
        "compiler": command_output(["c++", "--version"]).split("\n")[0],
        "cmake": command_output(["cmake", "--version"]).split("\n")[0],
        "nvidia_smi": command_output(["nvidia-smi", "-L"]),
        "nvcc": command_output(["nvcc", "--version"]).split("\n")[-1],
        # What GPU decode would build against or load (docs/design: dlopen at run time).
        "cuda_image_libraries": sorted(
            path
            for pattern in (
                "/usr/local/cuda*/lib64/libnvjpeg.so*",
                "/usr/local/cuda*/targets/*/lib/libnvjpeg.so*",
                "/usr/local/cuda*/lib64/libnvrtc.so*",
                "/usr/lib/x86_64-linux-gnu/libnvjpeg.so*",
                "/usr/lib/x86_64-linux-gnu/libnvimgcodec.so*",
                f"{sysconfig.get_paths()['purelib']}/nvidia/*/lib/lib*nvjpeg*.so*",
                f"{sysconfig.get_paths()['purelib']}/nvidia/*/lib/libnvimgcodec*.so*",
                f"{sysconfig.get_paths()['purelib']}/nvidia/*/lib/libnvrtc*.so*",
                f"{sysconfig.get_paths()['purelib']}/torchvision*/**/*nvjpeg*",
                "/usr/lib/x86_64-linux-gnu/libcuda.so*",
                "/usr/local/nvidia/lib64/libcuda.so*",
            )
            for path in glob.glob(pattern, recursive=True)
        ),
        "cuda_image_headers": sorted(
            path
            for pattern in (
                "/usr/local/cuda*/include/nvjpeg.h",
                "/usr/local/cuda*/include/nvimgcodec.h",
                "/usr/include/nvjpeg.h",
            )
            for path in glob.glob(pattern)
        ),
    }
    try:
        import torch

        found["torch"] = torch.__version__
        found["cuda_available"] = torch.cuda.is_available()
        if found["cuda_available"]:
            found["gpu"] = torch.cuda.get_device_name()
            found["cuda"] = torch.version.cuda
    except ImportError as error:
        found["torch"] = f"missing ({error})"
        found["cuda_available"] = False
    return found


# --- the Debian packages, unpacked under a prefix -----------------------------------


def unpack_deb(deb: Path, prefix: Path) -> None:
    """Extracts the files of ``deb`` (an ar archive holding data.tar.*) under ``prefix``."""
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ValueError(f"{deb}: not a .deb (ar) archive")
        while header := f.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
            body = f.read(size)
            f.read(size % 2)  # Members are 2-byte aligned.
            if name.startswith("data.tar"):
                if name.endswith(".zst"):
                    body = subprocess.run(["zstd", "-dc"], input=body, capture_output=True, check=True).stdout
                with tarfile.open(fileobj=io.BytesIO(body)) as archive:
                    # Debian's own packages: their absolute links are kept, then relocated.
                    trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}
                    archive.extractall(prefix, **trusted)
                return
    raise ValueError(f"{deb}: no data.tar member")


# Paths in CMake package files and pkg-config files of the packages point to /usr.
_USR = re.compile(r'(?<![\w./-])/usr(?=[/"\s]|$)', re.MULTILINE)


def relocate(prefix: Path) -> None:
    """Points the unpacked packages' absolute links, CMake package files and
    pkg-config files into ``prefix``."""
    for path in prefix.rglob("*"):
        if path.is_symlink():
            target = os.readlink(path)
            if target.startswith("/"):
                path.unlink()
                path.symlink_to(str(prefix) + target)
        elif path.suffix in (".pc", ".cmake") and path.is_file():
            text = path.read_text()
            moved = _USR.sub(str(prefix / "usr"), text)
            if moved != text:
                path.write_text(moved)


def missing_library_folder(prefix: Path) -> Path:
    """A folder linking the unpacked shared libraries whose name the system's
    loader does not know, so that only those come from the prefix."""
    known = set(re.findall(r"^\s*(\S+) \(", command_output(["ldconfig", "-p"]), re.MULTILINE))
    folder = prefix / "missing-libraries"
    folder.mkdir(exist_ok=True)
    for libdir in (prefix / "usr/lib" / ARCH, prefix / "lib" / ARCH):
        for library in sorted(libdir.glob("lib*.so.*")) if libdir.is_dir() else []:
            # Sonames (libtiff.so.6), the names the loader looks for.
            if (
                re.fullmatch(r"lib.+\.so\.\d+", library.name)
                and library.name not in known
                and not (folder / library.name).exists()
            ):
                (folder / library.name).symlink_to(library)
    return folder


def build(check: Check, deps: Path, env: dict[str, str], jobs: int) -> Optional[Path]:
    """Unpacks ``deps``'s .deb files and builds the extension; returns the
    folder of libraries to add to LD_LIBRARY_PATH, or None when it failed."""
    prefix = Path(tempfile.mkdtemp(prefix="conveyor-gpu-prefix-"))
    debs = sorted(deps.glob("*.deb"))
    began = time.perf_counter()
    for deb in debs:
        unpack_deb(deb, prefix)
    relocate(prefix)
    libraries = missing_library_folder(prefix)
    check.say(
        f"unpacked {len(debs)} packages in {time.perf_counter() - began:.1f} s; "
        f"libraries the system lacks: {sorted(p.name for p in libraries.iterdir())}"
    )
    libdirs = [prefix / "usr/lib" / ARCH, prefix / "lib" / ARCH]
    env.update(
        LD_LIBRARY_PATH=os.pathsep.join([str(libraries), env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep),
        PKG_CONFIG_LIBDIR=os.pathsep.join(
            str(d) for d in [libdirs[0] / "pkgconfig", prefix / "usr/share/pkgconfig"]
        ),
    )
    build_dir = ROOT / "build" / "gpu"
    rpath_link = ":".join(str(d) for d in libdirs)
    configure = [
        "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", "-DCONVEYOR_BUILD_TESTS=OFF", "-DCONVEYOR_BUILD_PYTHON=ON",
        "-DCONVEYOR_WERROR=OFF", f"-DPython_EXECUTABLE={sys.executable}",
        f"-DCMAKE_PREFIX_PATH={prefix / 'usr'};{prefix}",
        f"-DCMAKE_LIBRARY_PATH={';'.join(str(d) for d in libdirs)}",
        f"-DPKG_CONFIG_EXECUTABLE={prefix / 'usr/bin/pkgconf'}",
        f"-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,{rpath_link}",
        f"-DCMAKE_MODULE_LINKER_FLAGS=-Wl,-rpath-link,{rpath_link}",
    ]  # fmt: skip
    compile_ = ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", "_conveyor"]
    steps = [check.run("configure", configure, env, timeout=120)]
    if steps[0]["status"] == 0:
        steps.append(check.run("compile", compile_, env, timeout=240))
    check.summary["build"] = {"steps": steps, "packages": len(debs)}
    return libraries if all(step["status"] == 0 for step in steps) else None


# --- tests and benchmarks ------------------------------------------------------------------


def junit_counts(path: Path) -> dict[str, int]:
    suite = ElementTree.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu-check.json and the log")
    parser.add_argument("--deps", type=Path, help="build/gpu-deps (make gpu-deps): build against these first")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds for the whole check: each step's timeout is cut to what is left, "
        "and a step is skipped when under 30 s is left (default: no limit)",
    )
    parser.add_argument(
        "--only",
        default="tests,handoff,guide,decode",
        help="comma-separated steps after the build (default: all)",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    unknown = only - {"tests", "handoff", "guide", "decode"}
    if unknown:
        parser.error(f"--only: unknown step(s) {', '.join(sorted(unknown))} (tests, handoff, guide, decode)")
    check = Check(args.out, args.budget)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    check.summary["environment"] = found = environment()
    check.say(f"environment: {json.dumps(found)}")
    check.log.write(command_output(["nvidia-smi", "-q"]) + "\n")  # Engines (JPEG decoders) and clocks.
    gpu = bool(found.get("cuda_available"))
    ok = True
    if args.deps is not None:
        ok = build(check, args.deps, env, args.jobs) is not None
    else:
        check.skip("build", "no --deps: the extension already built here is used")
    wheels = sorted(str(w) for w in (args.deps or Path("/nonexistent")).glob("*.whl"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), *wheels, env.get("PYTHONPATH", "")])
    built = ok
    if ok and "tests" in only:
        junit = args.out / "tests.xml"
        tests = check.run(
            "tests",
            [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}",
             "tests/test_cuda_device.py", "tests/test_cuda_path.py", "tests/test_device_decode.py"],
            env, timeout=180,
        )  # fmt: skip
        if junit.exists():
            tests.update(junit_counts(junit))
        check.summary["tests"] = tests
        ok = tests["status"] == 0
        if not gpu:
            check.skip(
                "the real-GPU tests (tests/test_cuda_device.py, tests/test_device_decode.py)",
                "no CUDA device",
            )
    if built:  # The benchmarks run also when a test failed: each is its own evidence.
        smoke = [] if gpu else ["--device", "cpu", "--smoke"]
        if not gpu:
            check.skip("the GPU benchmarks at full size", "no CUDA device: run with --smoke on the CPU")
        for name, script, timeout in (
            ("handoff", "bench/gpu_handoff.py", 150),
            ("guide", "bench/gpu_tuning_guide.py", 150),
            ("decode", "bench/gpu_decode_baseline.py", 150),
        ):
            if name not in only:
                continue
            result_file = args.out / f"{name}.json"
            step = check.run(name, [sys.executable, script, *smoke, "--json", str(result_file)], env, timeout)
            if result_file.exists():
                step["results"] = json.loads(result_file.read_text())
            check.summary[name] = step
            ok = ok and step["status"] == 0
            check.write()
    check.summary["ok"] = ok
    check.write()
    check.say(f"gpu-check {'passed' if ok else 'FAILED'}; summary in {args.out / 'gpu-check.json'}")
    check.log.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
