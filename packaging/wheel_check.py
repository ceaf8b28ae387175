"""The wheel on a bare system: `make wheel-check` (part of `make test`).

Installs the repaired wheel into a minimal Debian root that holds python3,
python3-venv and pip and nothing else (none of conveyor's -dev packages nor
their libraries), made with debootstrap and entered with chroot (with /proc mounted in a
private mount namespace, which vanishes with it). There, in a fresh venv each time:

- ``ldd`` finds every library the extension and its vendored libraries need;
- ``conveyor --version`` gives the wheel's version, ``conveyor --help`` runs;
- packaging/wheel_job.py (JPEG, PNG, WebP, TIFF and GIF files through OpenCV's
  warps and resizes, then again through http:// and https:// with libcurl
  and OpenSSL, verified against a CA of the check's own) writes exactly
  the arrays the development build writes for it, without torch and then
  with torch installed.

Before that, here: the sdist holds every file the build reads and CMake
configures from it against the system's OpenCV, and `pip install .` into a
venv of its own gives the same arrays. (`pip install -e .` is how make sets
up .venv, which every test runs in.)

The root is kept (build/wheel-root) and made again only when its recipe
changes. The work folder is its /check; the wheels the venvs need are
downloaded there once, so the installs need no index.

    python packaging/wheel_check.py build/wheel/dist --build-dir build/wheel/tree --opencv-dir OPENCV_DIR
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import numpy
import tomllib

REPO = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
ROOT_PACKAGES = ["python3", "python3-venv", "python3-pip"]
MIRROR = os.environ.get("CONVEYOR_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Inside the root: where the work folder is mounted.
CHECK = "/check"


def log(message: str) -> None:
    print(f"wheel-check: {message}", flush=True)


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]


def run_or_exit(command: list[str], failure: str, **kwargs: object) -> subprocess.CompletedProcess:
    """Runs ``command``; when it fails, exits saying ``failure`` with the end of its output."""
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise SystemExit(f"wheel-check: {failure}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result


def sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo"]


def ensure_root(root: Path) -> None:
    """The debootstrap root, made again when its recipe changes."""
    recipe = f"{SUITE} minbase {' '.join(ROOT_PACKAGES)}"
    stamp = root / ".conveyor-recipe"
    if stamp.is_file() and stamp.read_text() == recipe:
        return
    staging = root.with_name(root.name + ".new")
    run([*sudo(), "rm", "-rf", str(staging)])
    log(f"making a minimal Debian {SUITE} root with {', '.join(ROOT_PACKAGES)} (once per machine)")
    started = time.monotonic()
    with open(root.with_name(root.name + ".log"), "w") as debootstrap_log:
        result = subprocess.run(
            [
                *sudo(),
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(ROOT_PACKAGES)}",
                SUITE,
                str(staging),
                MIRROR,
            ],
            stdout=debootstrap_log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        raise SystemExit(f"wheel-check: debootstrap failed; see {debootstrap_log.name}")
    (staging / CHECK.lstrip("/")).mkdir(exist_ok=True)
    (staging / stamp.name).write_text(recipe)
    run([*sudo(), "rm", "-rf", str(root)])
    staging.rename(root)
    log(f"root made in {time.monotonic() - started:.0f} s")


def root_python_version(root: Path) -> str:
    out = run(
        [
            *sudo(),
            "chroot",
            str(root),
            "python3",
            "-c",
            "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
        ],
        capture_output=True,
        text=True,
    ).stdout
    return out.strip()


def torch_requirement() -> str:
    """torch as requirements-dev.txt pins it (the CPU build on our machines)."""
    for line in (REPO / "requirements-dev.txt").read_text().splitlines():
        if re.match(r"torch\s*==", line):
            return line.split("#")[0].strip()
    raise SystemExit("wheel-check: requirements-dev.txt pins no torch")


def pip_download(folder: Path, wanted: list[str], python_version: str | None = None) -> None:
    """Binary wheels of ``wanted`` into ``folder``, once per machine (the
    installs that follow need no index)."""
    key = f"{python_version or sys.version_info[:2]} {' '.join(sorted(wanted))}"
    stamp = folder / ".requirements"
    if stamp.is_file() and stamp.read_text() == key:
        return
    log(f"downloading {', '.join(sorted(wanted))} (once per machine)")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    version = ["--python-version", python_version] if python_version else []
    run_or_exit(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            *version,
            "-d",
            str(folder),
            *wanted,
        ],
        "pip download failed",
    )
    stamp.write_text(key)


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return [
            line.split(":", 1)[1].strip()
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        ]


def check_sdist(sdist: Path, work: Path) -> None:
    """The sdist holds every tracked file the build reads, and CMake configures
    from it as on a machine with the -dev packages (the system's OpenCV)."""
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        held = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        tracked = run(
            [
                "git",
                "-C",
                str(REPO),
                "ls-files",
                "CMakeLists.txt",
                "cmake",
                "cpp",
                "python/conveyor",
                "packaging",
                "pyproject.toml",
                "README.md",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        missing = sorted(set(tracked) - held)
        if missing:
            raise SystemExit(
                f"wheel-check: {sdist.name} lacks {len(missing)} files the build needs: {missing[:5]}"
            )
        unpacked = work / "sdist"
        shutil.rmtree(unpacked, ignore_errors=True)
        archive.extractall(unpacked, filter="data")
    run_or_exit(
        [
            "cmake",
            "-S",
            str(unpacked / top),
            "-B",
            str(unpacked / "build"),
            "-G",
            "Ninja",
            "-DCONVEYOR_BUILD_TESTS=OFF",
        ],
        f"CMake does not configure from {sdist.name}",
    )
    log(f"{sdist.name}: {len(held)} files, all the build reads; CMake configures with the system's OpenCV")


def check_source_install(work: Path, wheel: Path, build_dir: Path, opencv_dir: Path) -> None:
    """`pip install .` into a venv of its own runs the job as the development
    build does. It reuses the wheel's build tree (``build_dir``: the same
    configuration, so nothing is compiled again). `pip install -e .` is how
    make sets up .venv, which every test runs in."""
    build_requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    wheels = work / "wheels-host"
    pip_download(wheels, [*build_requires, "ninja", *wheel_requirements(wheel)])
    venv = work / "venv-source"
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    pip = [
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        str(wheels),
    ]
    run([*pip, *build_requires, "ninja", *wheel_requirements(wheel)])
    run_or_exit(
        [
            *pip,
            "--no-build-isolation",
            str(REPO),
            f"-Cbuild-dir={build_dir}",
            f"-Ccmake.define.OpenCV_DIR={opencv_dir}",
        ],
        "pip install . failed",
    )
    where = run(
        [python, "-c", "import conveyor; print(conveyor.__file__)"], capture_output=True, text=True, cwd=work
    )
    if not Path(where.stdout.strip()).is_relative_to(venv):
        raise SystemExit(f"wheel-check: after pip install . conveyor is imported from {where.stdout.strip()}")
    run_job(python, work, "out-source.npz")
    compare(work / "out-expected.npz", work / "out-source.npz", "pip install .")
    log("pip install . in a venv of its own: batches equal to the development build's")


def make_certificates(folder: Path) -> None:
    """A CA of the check's own and a certificate it issued for 127.0.0.1, for
    the job's https:// server (trustme)."""
    import trustme

    folder.mkdir(exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(folder / "server.pem"))


def run_job(python: str, work: Path, out_name: str) -> None:
    """wheel_job.py here, with ``python``: TLS verified against the check's CA only."""
    env = {k: v for k, v in os.environ.items() if k not in ("CURL_CA_BUNDLE", "SSL_CERT_DIR")}
    env["SSL_CERT_FILE"] = str(work / "tls" / "ca.pem")
    job = [python, str(work / "wheel_job.py"), str(work / "images"), str(work / out_name), str(work / "tls")]
    run(job, env=env, stdout=subprocess.DEVNULL, cwd=work)


def make_images(folder: Path) -> None:
    """A few photos in each format the wheel decodes, with their quirks: an
    EXIF orientation, a palette, grey, an alpha channel, an animation."""
    from PIL import Image

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = numpy.random.default_rng(0)
    y, x = numpy.mgrid[0:96, 0:128]
    base = numpy.stack([x * 2, y * 2, (x + y) % 256], axis=-1).astype(numpy.uint8)
    noisy = numpy.clip(base + rng.integers(0, 40, base.shape), 0, 255).astype(numpy.uint8)
    image = Image.fromarray(noisy)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotated 90°.
    image.save(folder / "a.jpg", quality=90)
    image.save(folder / "b-exif.jpg", quality=85, exif=exif)
    image.save(folder / "c.png")
    image.convert("P").save(folder / "d-palette.png")
    image.convert("L").save(folder / "e-grey.png")
    image.save(folder / "f.webp", quality=80)
    image.convert("RGBA").save(folder / "g-alpha.webp", lossless=True)
    image.save(folder / "h.tiff", compression="tiff_deflate")
    image.save(folder / "i-lzw.tiff", compression="tiff_lzw")
    image.convert("P").save(folder / "j.gif")
    frames = [Image.fromarray(numpy.roll(noisy, 8 * k, axis=1)).convert("P") for k in range(3)]
    frames[0].save(folder / "k-animated.gif", save_all=True, append_images=frames[1:], duration=50)
    image.save(folder / "l.jpeg", quality=70, subsampling=0)


ROOT_SCRIPT = """set -eu
cd {check}
for variant in plain torch; do
  venv=/tmp/venv-$variant
  rm -rf $venv
  python3 -m venv $venv
  if [ $variant = torch ]; then extra="{torch}"; else extra=""; fi
  $venv/bin/pip install -q --disable-pip-version-check --no-index --find-links {check}/wheels \\
    {check}/{wheel} $extra
  so=$(ls $venv/lib/python3*/site-packages/conveyor/_conveyor*.so)
  if ldd "$so" $(ls $venv/lib/python3*/site-packages/*.libs/*.so* 2>/dev/null) | grep 'not found'; then
    echo "wheel-check: a library is missing (above)" >&2; exit 1
  fi
  echo "ldd: $(ldd "$so" | wc -l) libraries, all found ($variant)"
  $venv/bin/conveyor --version > version-$variant.txt
  $venv/bin/conveyor --help > /dev/null
  has_torch=$($venv/bin/python -c 'import importlib.util as u; print(u.find_spec("torch") is not None)')
  if [ "$has_torch" != "$( [ $variant = torch ] && echo True || echo False )" ]; then
    echo "wheel-check: the $variant venv has torch: $has_torch" >&2; exit 1
  fi
  SSL_CERT_FILE={check}/tls/ca.pem $venv/bin/python {check}/wheel_job.py {check}/images \\
    {check}/out-$variant.npz {check}/tls
done
"""


def run_in_root(root: Path, wheel_name: str) -> None:
    """ROOT_SCRIPT in the root (the work folder is its CHECK)."""
    script = root / CHECK.lstrip("/") / "in-root.sh"
    script.write_text(ROOT_SCRIPT.format(check=CHECK, wheel=wheel_name, torch=torch_requirement()))
    enter = (
        f"chroot {root} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "
        f"sh {CHECK}/{script.name}"
    )
    # /proc, as a machine has it, mounted in a private mount namespace: it
    # goes away with the namespace, also when the check is interrupted. Where
    # namespaces are not allowed the root is entered without it (the engine
    # needs none).
    if (
        subprocess.run([*sudo(), "unshare", "--mount", "true"], capture_output=True, check=False).returncode
        == 0
    ):
        run(
            [
                *sudo(),
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"mount -t proc proc {root}/proc && exec {enter}",
            ]
        )
    else:
        log("no private mount namespace here (unshare --mount is refused): entering the root without /proc")
        run([*sudo(), "sh", "-c", enter])


def compare(expected: Path, actual: Path, variant: str) -> None:
    with numpy.load(expected) as want, numpy.load(actual) as got:
        if sorted(want.files) != sorted(got.files):
            raise SystemExit(f"wheel-check: {variant}: {len(got.files)} arrays, expected {len(want.files)}")
        for name in want.files:
            a, b = want[name], got[name]
            if a.dtype != b.dtype or a.shape != b.shape or not numpy.array_equal(a, b):
                differ = "" if a.shape != b.shape else f", {int((a != b).sum())} values differ"
                raise SystemExit(
                    f"wheel-check: {variant}: array {name} is {b.dtype}{list(b.shape)}, the development "
                    f"build gives {a.dtype}{list(a.shape)}{differ}"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dist", type=Path, help="the folder of the sdist and the repaired wheel (make wheel)")
    parser.add_argument("--build-dir", type=Path, required=True, help="the wheel's CMake build tree")
    parser.add_argument("--opencv-dir", type=Path, required=True, help="OpenCV_DIR of the static OpenCV")
    parser.add_argument(
        "--root", type=Path, default=REPO / "build" / "wheel-root", help="the debootstrap root"
    )
    args = parser.parse_args()
    started = time.monotonic()
    (wheel,), (sdist,) = sorted(args.dist.glob("*manylinux*.whl")), sorted(args.dist.glob("*.tar.gz"))
    root = args.root.resolve()
    ensure_root(root)
    work = root / CHECK.lstrip("/")  # Seen from inside the root as CHECK.
    for stale in work.glob("*.whl"):
        stale.unlink()
    shutil.copy(wheel, work / wheel.name)
    shutil.copy(REPO / "packaging" / "wheel_job.py", work / "wheel_job.py")
    make_images(work / "images")
    make_certificates(work / "tls")
    # What the development build (this process's conveyor) writes.
    run_job(sys.executable, work, "out-expected.npz")

    check_sdist(sdist, work)
    check_source_install(work, wheel, args.build_dir.resolve(), args.opencv_dir.resolve())

    pip_download(
        work / "wheels", [*wheel_requirements(wheel), torch_requirement()], root_python_version(root)
    )
    run_in_root(root, wheel.name)
    version = wheel.name.split("-")[1]
    for variant in ("plain", "torch"):
        said = (work / f"version-{variant}.txt").read_text().strip()
        if said != f"conveyor {version}":
            raise SystemExit(
                f"wheel-check: `conveyor --version` says {said!r}; the wheel's name says {version}"
            )
        compare(
            work / "out-expected.npz", work / f"out-{variant}.npz", f"the wheel on bare Debian ({variant})"
        )
    log(
        f"{wheel.name} installs and runs on a bare Debian {SUITE} (without and with torch): batches equal to "
        f"the development build's; {wheel.stat().st_size / 1e6:.1f} MB ({time.monotonic() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
