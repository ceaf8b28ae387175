"""The wheel on a bare system: `make wheel-check` (part of `make test`).

Installs the repaired wheel into a minimal Debian root made with debootstrap
(python3, python3-venv, pip and what they pull in: none of conveyor's -dev
packages, and of their libraries only those apt and Python need themselves),
entered with chroot (with /proc mounted in a private mount namespace, which
vanishes with it). There, in a fresh venv each time:

- every library the extension and its vendored libraries load resolves, and
  to the wheel's own copy, unless it is one of the manylinux set (glibc,
  libstdc++, libgcc_s): none comes from the root's own packages;
- ``conveyor --version`` gives the wheel's version, ``conveyor --help`` runs;
- packaging/wheel_job.py (JPEG, PNG, WebP, TIFF and GIF files through OpenCV's
  warps and resizes, then again through http:// and https:// with libcurl and
  OpenSSL, trusting a CA of the check's own) writes exactly the arrays the
  development build writes for it, without torch and then with torch.

Before that, here: the wheel holds no OpenCV library (OpenCV is linked in
statically), and the sdist holds every file the build reads and CMake
configures from it against the system's OpenCV, as on a machine with the
-dev packages.

The root is kept (build/wheel-root) and made again only when its recipe
changes. The work folder is its /check; the wheels the venvs need (torch as
requirements-dev.txt pins it: the CPU build on our machines) are downloaded
there once, so the installs need no index. Needs root, as debootstrap and
chroot do (sudo when not root).

    python packaging/wheel_check.py build/wheel/dist
    python packaging/wheel_check.py --make-root     # only the root (make runs it beside other set-up)
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import numpy

REPO = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
ROOT_PACKAGES = ["python3", "python3-venv", "python3-pip"]
MIRROR = os.environ.get("CONVEYOR_DEBIAN_MIRROR", "http://deb.debian.org/debian")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Inside the root: the work folder.
CHECK = "/check"
# Every step is bounded: a stalled mirror or a stuck job fails the check.
DEBOOTSTRAP_SECONDS = 900
STEP_SECONDS = 600


def log(message: str) -> None:
    print(f"wheel-check: {message}", flush=True)


def run(command: list[str], timeout: float = STEP_SECONDS, **kwargs: object) -> subprocess.CompletedProcess:
    """Runs ``command``; a failure or a timeout ends the check with the end of its output."""
    try:
        result = subprocess.run(command, timeout=timeout, check=False, **kwargs)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired:
        raise SystemExit(f"wheel-check: {shlex.join(command)[:200]} took more than {timeout:.0f} s") from None
    if result.returncode != 0:
        output = "".join(o for o in (result.stdout, result.stderr) if isinstance(o, str))
        raise SystemExit(f"wheel-check: {shlex.join(command)[:200]} failed:\n{output[-3000:]}")
    return result


def sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo"]


def ensure_root(root: Path) -> None:
    """The debootstrap root, made again when its recipe changes; its work
    folder belongs to the user running the check."""
    recipe = f"{SUITE} minbase {' '.join(ROOT_PACKAGES)}"
    stamp = root / ".conveyor-recipe"
    if stamp.is_file() and stamp.read_text() == recipe:
        return
    staging = root.with_name(root.name + ".new")
    run([*sudo(), "rm", "-rf", "--one-file-system", str(staging)])
    log(f"making a minimal Debian {SUITE} root with {', '.join(ROOT_PACKAGES)} (once per machine)")
    started = time.monotonic()
    keyring = [f"--keyring={KEYRING}"] if os.path.exists(KEYRING) else []
    include = f"--include={','.join(ROOT_PACKAGES)}"
    log_file = root.with_name(root.name + ".log")
    with open(log_file, "w") as debootstrap_log:
        try:
            made = subprocess.run(
                [*sudo(), "debootstrap", "--variant=minbase", *keyring, include, SUITE, str(staging), MIRROR],
                stdout=debootstrap_log,
                stderr=subprocess.STDOUT,
                timeout=DEBOOTSTRAP_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SystemExit(
                f"wheel-check: debootstrap took more than {DEBOOTSTRAP_SECONDS} s; see {log_file}"
            ) from None
    if made.returncode != 0:
        raise SystemExit(f"wheel-check: debootstrap failed; see {log_file}")
    owner = f"{os.getuid()}:{os.getgid()}"
    run(
        [*sudo(), "sh", "-c", f'mkdir -p "$1{CHECK}" && chown {owner} "$1{CHECK}" "$1"/.', "sh", str(staging)]
    )
    run([*sudo(), "sh", "-c", 'rm -rf --one-file-system "$1" && mv "$2" "$1"', "sh", str(root), str(staging)])
    (root / CHECK.lstrip("/") / ".keep").touch()
    stamp.write_text(recipe)
    log(f"root made in {time.monotonic() - started:.0f} s")


def root_python_version(root: Path) -> str:
    code = "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"
    return run(
        [*sudo(), "chroot", str(root), "python3", "-c", code], capture_output=True, text=True
    ).stdout.strip()


def torch_requirement() -> str:
    """torch as requirements-dev.txt pins it (the CPU build on our machines)."""
    for line in (REPO / "requirements-dev.txt").read_text().splitlines():
        if re.match(r"torch\s*==", line):
            return line.split("#")[0].strip()
    raise SystemExit("wheel-check: requirements-dev.txt pins no torch")


def pip_download(folder: Path, wanted: list[str], python_version: str) -> None:
    """Binary wheels of ``wanted`` for ``python_version`` into ``folder``, once
    per machine (the installs that follow need no index)."""
    key = f"{python_version} {' '.join(sorted(wanted))}"
    stamp = folder / ".requirements"
    if stamp.is_file() and stamp.read_text() == key:
        return
    log(f"downloading {', '.join(sorted(wanted))} (once per machine)")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "--only-binary=:all:",
    ]
    run(
        [*pip, "--python-version", python_version, "-d", str(folder), *wanted], capture_output=True, text=True
    )
    stamp.write_text(key)


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [
        line.split(":", 1)[1].strip()
        for line in lines
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]


def check_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        opencv = [name for name in archive.namelist() if "libopencv" in name]
    if opencv:
        raise SystemExit(
            f"wheel-check: {wheel.name} carries OpenCV's shared libraries ({opencv[0]}): it was built "
            "against the system's OpenCV, not the static one of packaging/opencv.sh"
        )


def extract(archive: tarfile.TarFile, folder: Path) -> None:
    """Extracts an sdist, refusing members that would land outside ``folder``
    (tarfile's "data" filter where this Python has it: 3.11.4 and later)."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(folder, filter="data")
        return
    for member in archive.getmembers():
        if member.name.startswith("/") or ".." in Path(member.name).parts or member.issym() or member.islnk():
            raise SystemExit(f"wheel-check: the sdist holds {member.name!r}, which may not be extracted")
    archive.extractall(folder)


def check_sdist(sdist: Path, work: Path) -> None:
    """The sdist holds every tracked file the build reads, and CMake configures
    from it as on a machine with the -dev packages (the system's OpenCV)."""
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        held = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        build_inputs = [
            "CMakeLists.txt",
            "cmake",
            "cpp",
            "python/conveyor",
            "packaging",
            "pyproject.toml",
            "README.md",
        ]
        tracked = run(
            ["git", "-C", str(REPO), "ls-files", *build_inputs], capture_output=True, text=True
        ).stdout
        missing = sorted(set(tracked.split()) - held)
        if missing:
            raise SystemExit(
                f"wheel-check: {sdist.name} lacks {len(missing)} files the build needs: {missing[:5]}"
            )
        unpacked = work / "sdist"
        shutil.rmtree(unpacked, ignore_errors=True)
        extract(archive, unpacked)
    configure = ["cmake", "-S", str(unpacked / top), "-B", str(unpacked / "build"), "-G", "Ninja"]
    run([*configure, "-DCONVEYOR_BUILD_TESTS=OFF"], capture_output=True, text=True)
    log(f"{sdist.name}: {len(held)} files, all the build reads; CMake configures with the system's OpenCV")


def make_certificates(folder: Path) -> None:
    """A CA of the check's own and a certificate it issued for 127.0.0.1, for
    the job's https:// server (trustme)."""
    import trustme

    folder.mkdir(exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(folder / "server.pem"))


def run_job(python: str, work: Path, out_name: str) -> None:
    """wheel_job.py here, with ``python``, trusting the check's CA (SSL_CERT_FILE)."""
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


def manylinux_libraries(wheel: Path) -> list[str]:
    """The libraries the wheel's platform tag lets it take from the system
    (auditwheel's policy: glibc's, libstdc++, libgcc_s, zlib, ...)."""
    import json
    from importlib import resources

    tag = wheel.name.rsplit("-", 1)[1].removesuffix(".whl")
    name = re.sub(r"_x86_64$|_aarch64$", "", tag.split(".")[0])
    policies = json.loads((resources.files("auditwheel.policy") / "manylinux-policy.json").read_text())
    (policy,) = [p for p in policies if p["name"] == name]
    return policy["lib_whitelist"]


# Run in the root with sh; {wheel}, {torch} and {system} arrive quoted. A
# library is the wheel's own when it resolves under site-packages/*.libs;
# those of the manylinux policy ({system}) come from the system.
ROOT_SCRIPT = """set -eu
cd {check}
system={system}
for variant in plain torch; do
  venv=/tmp/venv-$variant
  rm -rf $venv
  python3 -m venv $venv
  if [ $variant = torch ]; then extra={torch}; else extra=""; fi
  $venv/bin/pip install -q --disable-pip-version-check --no-index --find-links {check}/wheels \\
    {check}/{wheel} $extra
  so=$(ls $venv/lib/python3*/site-packages/conveyor/_conveyor*.so)
  resolved=$(ldd "$so" $(ls $venv/lib/python3*/site-packages/*.libs/*.so*) | grep -v ':$' | sort -u)
  outside=$(echo "$resolved" | grep -v '\\.libs/' | grep -Ev "^\\s*$system" || true)
  if [ -n "$outside" ]; then
    echo "wheel-check: libraries not found or not the wheel's own ($variant):" >&2
    echo "$outside" >&2; exit 1
  fi
  echo "ldd: $(ldd "$so" | wc -l) libraries, each the wheel's own or one its manylinux tag allows ($variant)"
  $venv/bin/conveyor --version > version-$variant.txt
  $venv/bin/conveyor --help > /dev/null
  has_torch=$($venv/bin/python -c 'import importlib.util as u; print(u.find_spec("torch") is not None)')
  if [ "$has_torch" != "$( [ $variant = torch ] && echo True || echo False )" ]; then
    echo "wheel-check: the $variant venv has torch: $has_torch" >&2; exit 1
  fi
  SSL_CERT_FILE={check}/tls/ca.pem \\
    $venv/bin/python {check}/wheel_job.py {check}/images {check}/out-$variant.npz {check}/tls
done
"""


def run_in_root(root: Path, wheel: Path) -> None:
    """ROOT_SCRIPT in the root (the work folder is its CHECK)."""
    # As grep -E patterns: "." and "+" are the only special characters in these names.
    names = ["linux-vdso.so", "/lib64/ld-linux", *manylinux_libraries(wheel)]
    allowed = [re.sub(r"([.+])", r"\\\1", name) for name in names]
    script = root / CHECK.lstrip("/") / "in-root.sh"
    script.write_text(
        ROOT_SCRIPT.format(
            check=CHECK,
            wheel=shlex.quote(wheel.name),
            torch=shlex.quote(torch_requirement()),
            system=shlex.quote(f"({'|'.join(allowed)})"),
        )
    )
    enter = (
        f'chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 '
        f"sh {CHECK}/{script.name}"
    )
    # /proc, as a machine has it, mounted in a private mount namespace: it
    # goes away with the namespace, also when the check is interrupted. Where
    # namespaces are not allowed the root is entered without it (the engine
    # needs none).
    probe = subprocess.run([*sudo(), "unshare", "--mount", "true"], capture_output=True, check=False)
    if probe.returncode == 0:
        inner = f'mount -t proc proc "$1/proc" && exec {enter}'
        run([*sudo(), "unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh", str(root)])
    else:
        log("no private mount namespace here (unshare --mount is refused): entering the root without /proc")
        run([*sudo(), "sh", "-c", enter, "sh", str(root)])


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
    parser.add_argument("dist", type=Path, nargs="?", help="the folder of the sdist and the repaired wheel")
    parser.add_argument(
        "--root", type=Path, default=REPO / "build" / "wheel-root", help="the debootstrap root"
    )
    parser.add_argument(
        "--make-root", action="store_true", help="only make the root (when its recipe changed)"
    )
    args = parser.parse_args()
    started = time.monotonic()
    if args.make_root:
        ensure_root(args.root.resolve())
        return 0
    if args.dist is None:
        parser.error("the folder of the sdist and the wheel is needed (or --make-root)")
    (wheel,), (sdist,) = sorted(args.dist.glob("*manylinux*.whl")), sorted(args.dist.glob("*.tar.gz"))
    check_wheel_contents(wheel)
    root = args.root.resolve()
    ensure_root(root)
    work = root / CHECK.lstrip("/")  # Seen from inside the root as CHECK.
    for stale in [*work.glob("*.whl"), *work.glob("out-*.npz"), *work.glob("version-*.txt")]:
        stale.unlink()
    shutil.copy(wheel, work / wheel.name)
    shutil.copy(REPO / "packaging" / "wheel_job.py", work / "wheel_job.py")
    make_images(work / "images")
    make_certificates(work / "tls")
    run_job(sys.executable, work, "out-expected.npz")  # What the development build writes.

    check_sdist(sdist, work)
    pip_download(
        work / "wheels", [*wheel_requirements(wheel), torch_requirement()], root_python_version(root)
    )
    run_in_root(root, wheel)
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
