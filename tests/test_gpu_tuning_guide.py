"""bench/gpu_tuning_guide.py kept working on a CPU: --smoke runs every code
path with tiny sizes, the JSON has its structure, and the doctor (--target
cuda, which judges the device rules on a CPU) finds the CUDA rules planted in
the naive loop, none on the all-fixes loop. Never asserts on time: the
timings of a CPU smoke run mean nothing."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CHILD_SECONDS

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_tuning_guide.py"
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
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-guide") / "smoke.json"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--smoke", "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_SECONDS, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the smoke run hung (killed after {CHILD_SECONDS} s):\n{e.stdout!r}\n{e.stderr!r}")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text()), result.stdout


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
