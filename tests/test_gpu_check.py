"""The GPU device check (bench/gpu_check.py) kept working on a CPU: run as
`make gpu-check` would without a GPU, it says what it skipped, the CUDA tests
pass, and each GPU benchmark runs every code path with --smoke. Its pieces
that prepare a GPU machine (unpacking .deb files under a prefix) are tested
on a .deb made here. The benchmarks' JSON has its structure, and the doctor
(--target cuda judges the device rules on a CPU) finds the CUDA rules planted
in the tuning guide's naive loop and none on the all-fixes loop. Never
asserts on time: the timings of a CPU smoke run mean nothing."""

import io
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import CHILD_SECONDS

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_check  # noqa: E402

CUDA_RULES = {
    "cudnn-benchmark",
    "no-autocast",
    "channels-last",
    "host-sync",
    "optimizer-not-fused",
    "pin-memory",
    "blocking-copy",
}


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    """The check's summary, its log and its out folder, run once without a GPU."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the CPU part of the check is not what runs")
    out = tmp_path_factory.mktemp("gpu-check")
    command = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_SECONDS, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the check hung (killed after {CHILD_SECONDS} s):\n{e.stdout!r}\n{e.stderr!r}")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads((out / "gpu-check.json").read_text()), (out / "gpu-check.log").read_text(), out


@pytest.fixture(scope="module")
def smoke(check):
    """The tuning guide's smoke results and the log holding its printed tables."""
    summary, log, _ = check
    return summary["guide"]["results"], log


def test_without_a_gpu_the_check_runs_the_cpu_part_and_says_what_it_skipped(check):
    summary, log, out = check
    assert summary["ok"] is True and summary["environment"]["cuda_available"] is False
    assert [s["what"] for s in summary["skipped"]] == [
        "build",
        "the real-GPU tests (tests/test_cuda_device.py, tests/test_device_decode.py)",
        "the GPU benchmarks at full size",
    ]
    assert (
        "SKIPPED the real-GPU tests (tests/test_cuda_device.py, tests/test_device_decode.py): no CUDA device"
        in log
    )
    tests = summary["tests"]
    assert tests["status"] == 0 and tests["failures"] == tests["errors"] == 0
    assert tests["skipped"] == 18 and tests["tests"] > tests["skipped"]  # The real-device tests only.
    for name in ("handoff", "guide", "decode"):
        assert summary[name]["status"] == 0, name
    assert summary["handoff"]["results"]["smoke"] is summary["decode"]["results"]["smoke"] is True
    assert summary["guide"]["results"]["args"]["smoke"] is True
    assert {p.name for p in out.iterdir()} == {
        "gpu-check.json", "gpu-check.log", "tests.xml", "handoff.json", "guide.json", "decode.json",
    }  # fmt: skip


def test_the_handoff_and_decode_benchmarks_run_every_path(check):
    summary, _, _ = check
    handoff = summary["handoff"]["results"]
    for part in ("loader_alone", "synthetic", "fed_auto", "fed_threads=12", "fed_dtype=uint8"):
        assert "error" not in handoff[part] and number(handoff[part]["images_per_s"]), part
    assert number(handoff["fed_auto"]["input_stall"]) and handoff["fed_auto"]["variant"] == "auto"
    decode = summary["decode"]["results"]
    for part in ("conveyor_cpu_all_threads", "conveyor_cpu_2_threads"):
        assert number(decode[part]["images_per_s_per_cpu_core"]), part
    assert "torchvision_gpu_decode" not in decode  # Needs the GPU.


def make_deb(path: Path, files: dict[str, bytes], links: dict[str, str]) -> None:
    """A .deb (an ar archive holding data.tar.xz) with these files and symbolic links."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        for name, target in links.items():
            info = tarfile.TarInfo("./" + name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b""), ("data.tar.xz", data.getvalue())]
    with open(path, "wb") as f:
        f.write(b"!<arch>\n")
        for name, body in members:
            f.write(f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode())
            f.write(body + (b"\n" if len(body) % 2 else b""))


def test_a_deb_is_unpacked_under_the_prefix_with_its_paths_pointing_there(tmp_path):
    deb, prefix = tmp_path / "libdemo-dev.deb", tmp_path / "prefix"
    make_deb(
        deb,
        {
            "usr/lib/x86_64-linux-gnu/pkgconfig/demo.pc": b"prefix=/usr\nlibdir=${prefix}/lib\n",
            "usr/lib/x86_64-linux-gnu/cmake/demo/demoTargets.cmake": b'set(_IMPORT_PREFIX "/usr")\n',
            "usr/lib/x86_64-linux-gnu/libcvtdemo.so.7.1": b"\x7fELF",
            "usr/share/doc/demo/README": b"/usr stays in other files",
        },
        {
            "usr/lib/x86_64-linux-gnu/libcvtdemo.so.7": "libcvtdemo.so.7.1",
            "usr/lib/x86_64-linux-gnu/libcvtdemo.so": "/usr/lib/x86_64-linux-gnu/libcvtdemo.so.7",
            "usr/lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
        },
    )
    prefix.mkdir()
    gpu_check.unpack_deb(deb, prefix)
    gpu_check.relocate(prefix)
    lib = prefix / "usr/lib/x86_64-linux-gnu"
    assert (lib / "pkgconfig/demo.pc").read_text() == f"prefix={prefix}/usr\nlibdir=${{prefix}}/lib\n"
    assert (lib / "cmake/demo/demoTargets.cmake").read_text() == f'set(_IMPORT_PREFIX "{prefix}/usr")\n'
    assert (prefix / "usr/share/doc/demo/README").read_text() == "/usr stays in other files"
    assert os.readlink(lib / "libcvtdemo.so") == f"{prefix}/usr/lib/x86_64-linux-gnu/libcvtdemo.so.7"
    assert os.readlink(lib / "libcvtdemo.so.7") == "libcvtdemo.so.7.1"  # Relative: kept.
    # Only the sonames the system's loader lacks are put on LD_LIBRARY_PATH.
    missing = gpu_check.missing_library_folder(prefix)
    assert sorted(p.name for p in missing.iterdir()) == ["libcvtdemo.so.7"]


def test_a_file_that_is_not_a_deb_is_named(tmp_path):
    (tmp_path / "x.deb").write_bytes(b"PK\x03\x04")
    with pytest.raises(ValueError, match=r"x\.deb: not a \.deb \(ar\) archive"):
        gpu_check.unpack_deb(tmp_path / "x.deb", tmp_path)


def number(value):
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_smoke_json_structure(smoke):
    data, stdout = smoke
    assert data["schema"] == "conveyor.gpu_tuning_guide/1"
    assert data["timings_meaningful"] is False and data["args"]["smoke"] is True
    assert data["problems"] == []
    assert data["environment"]["device"] == "cpu" and data["environment"]["torch"]
    assert set(data["parts"]) == {"mnist", "convnet"}
    for part in data["parts"].values():
        assert part["error"] is None and number(part["seconds"])

    mnist = data["parts"]["mnist"]
    names = [v["name"] for v in mnist["variants"]]
    assert names[0] == "naive (as written)" and "+ autocast bfloat16" in names and "+ pin_memory" in names
    for v in mnist["variants"]:
        assert "error" not in v, v
        assert number(v["seconds_per_step"]) and number(v["gain_vs_naive"])

    convnet = data["parts"]["convnet"]
    kinds = [v["kind"] for v in convnet["variants"]]
    assert kinds.count("naive") == kinds.count("all") == 1
    assert sorted(v["rule"] for v in convnet["variants"] if v["kind"] == "alone") == sorted(CUDA_RULES)
    assert sorted(v["rule"] for v in convnet["variants"] if v["kind"] == "all-but") == sorted(CUDA_RULES)
    assert convnet["rounds"] >= 1
    for v in convnet["variants"]:
        assert v["error"] is None, v["error"]
        assert number(v["seconds_per_step"]) and number(v["steps_per_second"]) and number(v["mean_loss"])
        assert len(v["round_seconds_per_step"]) == convnet["rounds"]
        assert v["pays_vs_naive"] is None if v["kind"] == "naive" else isinstance(v["pays_vs_naive"], bool)
    assert set(convnet["gains"]) == CUDA_RULES
    for g in convnet["gains"].values():
        assert number(g["alone"]) and number(g["in_tuned_loop"])
        assert isinstance(g["pays_alone"], bool) and isinstance(g["pays_in_tuned_loop"], bool)
    assert isinstance(convnet["all_fixes"]["pays"], bool)
    # The readable tables and the time of each part are printed too.
    assert "| only host-sync fixed |" in stdout and "convnet:" in stdout and "mnist:" in stdout


def test_doctor_finds_the_planted_cuda_rules(smoke):
    data, _ = smoke
    convnet = data["parts"]["convnet"]
    doctor = convnet["doctor"]
    assert set(doctor["naive"]["cuda_rules"]) == CUDA_RULES
    assert convnet["planted_found"] == {rule: True for rule in CUDA_RULES}
    assert convnet["cuda_rules_on_all_fixed"] == []
    # Each fix silences its own rule and no other.
    for name, run in doctor.items():
        assert run["as_expected"], (name, run)
    for rule in CUDA_RULES:
        assert rule not in doctor[f"only {rule} fixed"]["cuda_rules"]
    sites = {f["site"] for f in doctor["naive"]["findings"] if f["rule"] in CUDA_RULES}
    assert all(site and "gpu_tuning_guide.py:" in site for site in sites), sites

    mnist_rules = set(data["parts"]["mnist"]["doctor_naive"]["rules"])
    assert {"no-autocast", "cudnn-benchmark", "pin-memory", "blocking-copy", "host-sync"} <= mnist_rules


def test_a_spent_budget_skips_the_steps_left_and_fails_the_check(tmp_path):
    command = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--out", str(tmp_path), "--budget", "1"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    result = subprocess.run(
        [*command, "--only", "tests"], capture_output=True, text=True, timeout=CHILD_SECONDS, env=env
    )
    assert result.returncode == 1, result.stdout + result.stderr
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    assert summary["tests"]["status"] == "skipped" and summary["ok"] is False
    (why,) = [s["why"] for s in summary["skipped"] if s["what"] == "tests"]
    assert why.startswith("the budget of 1 s is spent ("), why
