"""conveyor bench: argument handling, the report's structure, a quick smoke run.

Never asserts on speed: only that each side ran and reported its figures.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from conveyor import bench, dataset
from conveyor._bench import report
from conveyor._bench.procmem import TreeMemorySampler
from conveyor.cli import main

pytest.importorskip("torch")
pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bench") / "data")
    dataset.make_dataset(out, 24, classes=3)
    return out


def _exit_code_and_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "required: BENCH"),
        (["fast"], "invalid choice: 'fast'"),
        (["throughput"], "required: --data"),
        (["throughput", "--data", "/no/such/dir"], "not a directory"),
        (["throughput", "--data", "{data}", "--repeats", "0"], "must be >= 1"),
        (["throughput", "--data", "{data}", "--workers", "two"], "not an integer"),
        (["throughput", "--data", "{data}", "--plot", "chart.jpg"], "PNG"),
        (["slow-storage", "--data", "{data}", "--read-latency", "-1"], "must be >= 0"),
        (["slow-storage", "--data", "{data}", "--step-time", "nan"], "must be >= 0"),
        (["throughput", "--data", "{data}", "--steps", "3"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(capsys, data, args, message):
    code, err = _exit_code_and_error(capsys, ["bench", *(a.format(data=data) for a in args)])
    assert code == 2
    assert message in err


def test_help_lists_the_sub_commands(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for name in ("throughput", "slow-storage", "mnist", "all"):
        assert name in text


def _runs(full, bench_name, label_prefix):
    return [r for r in full["runs"] if r["bench"] == bench_name and r["label"].startswith(label_prefix)]


def _check_common_report(full, benches):
    assert full["schema"] == "conveyor-bench/1" and full["partial"] is False
    assert full["benchmarks"] == benches
    machine = full["machine"]
    assert machine["cores"] >= 1 and machine["cpu"] and machine["torch"]
    assert set(full["peers"]) == {"DALI", "FFCV", "SPDL"}
    assert all(state.startswith(("not installed", "installed")) for state in full["peers"].values())
    assert full["reference_pipeline"]
    for run in full["runs"]:
        assert {"bench", "case", "label", "repeat", "spec", "result", "memory", "error", "skip"} <= set(run)
        assert run["error"] is None, run["error"]


def _check_conveyor_side(full, bench_name, reference_runs, key):
    """conveyor's runs produced figures when its pieces are merged, else are marked pending."""
    ours = _runs(full, bench_name, "conveyor")
    assert ours
    if bench.conveyor_missing(bench_name) is None:
        assert all(r["result"] and r["result"][key] == reference_runs[0]["result"][key] for r in ours)
        assert all(r["result"]["stats"] for r in ours)
    else:
        assert all(r["skip"].startswith("pending") and r["result"] is None for r in ours)


def test_quick_throughput_run_reports_every_figure(tmp_path, data, capsys):
    out_json, out_png = str(tmp_path / "r.json"), str(tmp_path / "r.png")
    argv = [
        "bench",
        "throughput",
        "--quick",
        "--data",
        data,
        "--json",
        out_json,
        "--plot",
        out_png,
        "--no-progress",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "== throughput ==" in printed and "images/s" in printed
    with open(out_json) as f:
        full = json.load(f)
    _check_common_report(full, ["throughput"])
    assert full["params"]["quick"] is True and full["params"]["repeats"] == 1
    stock = _runs(full, "throughput", "DataLoader")
    assert {r["case"] for r in stock} == {"train", "eval"}
    for run in stock:
        result = run["result"]
        assert result["images"] == 24 and result["images_per_s"] > 0
        assert 0 < result["first_batch_s"] <= result["epoch_s"]
        assert result["cpu_ms_per_image"] > 0
        assert (
            run["memory"]["peak_pss_mb"] > 0 and run["memory"]["peak_rss_mb"] >= run["memory"]["peak_pss_mb"]
        )
        assert run["memory"]["peak_processes"] >= 1
    _check_conveyor_side(full, "throughput", stock, "images")
    assert full["baseline"]["error"] is None and full["baseline"]["memory"]["peak_pss_mb"] > 0
    assert "memory floor" in printed
    rows = [row for row in full["summary"] if row["metric"] == "images_per_s"]
    assert {(row["case"], row["side"].split()[0]) for row in rows} >= {
        ("train", "DataLoader"),
        ("eval", "DataLoader"),
    }
    with open(out_png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_quick_slow_storage_run(tmp_path, data, capsys):
    out_json = str(tmp_path / "s.json")
    argv = ["bench", "slow-storage", "--quick", "--data", data, "--step-time", "20", "--read-latency", "1"]
    assert main([*argv, "--json", out_json, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "field report, not measured here" in printed and "11.1 s" in printed
    with open(out_json) as f:
        full = json.load(f)
    _check_common_report(full, ["slow-storage"])
    stock = _runs(full, "slow-storage", "DataLoader")
    assert len(stock) == 1
    result = stock[0]["result"]
    assert result["steps"] == bench.QUICK_STEPS
    assert result["ideal_s"] == pytest.approx(bench.QUICK_STEPS * 0.02)
    assert result["seconds"] >= result["ideal_s"] and result["overhead"] >= 1
    _check_conveyor_side(full, "slow-storage", stock, "steps")


def test_quick_mnist_run(tmp_path, data, capsys):
    out_json, mnist_dir = str(tmp_path / "m.json"), str(tmp_path / "mnist")
    argv = ["bench", "mnist", "--quick", "--data", data, "--mnist-data", mnist_dir, "--workers", "1"]
    assert main([*argv, "--json", out_json, "--no-progress"]) == 0
    assert dataset.is_complete(mnist_dir, kind="mnist", images=bench.QUICK_MNIST, seed=0)
    with open(out_json) as f:
        full = json.load(f)
    _check_common_report(full, ["mnist"])
    ran = [r for r in _runs(full, "mnist", "DataLoader") if r["result"]]
    assert {r["label"] for r in ran} >= {"DataLoader W=0 pin=off", "DataLoader W=1 pin=off"}
    assert all(r["result"]["samples"] == bench.QUICK_MNIST for r in ran)
    _check_conveyor_side(full, "mnist", ran, "samples")


def _run(bench_name, case, label, repeat, **result):
    return {
        "bench": bench_name,
        "case": case,
        "label": label,
        "repeat": repeat,
        "result": result,
        "memory": {},
    }


def test_summary_pairs_repeats_for_the_ratio():
    runs = [
        _run("throughput", "train", "conveyor", 0, images_per_s=300.0),
        _run("throughput", "train", "DataLoader W=2", 0, images_per_s=100.0),
        _run("throughput", "train", "conveyor", 1, images_per_s=200.0),
        _run("throughput", "train", "DataLoader W=2", 1, images_per_s=50.0),
        _run("throughput", "train", "DataLoader W=2", 2, images_per_s=80.0),
    ]
    metrics = {"throughput": (report.Metric("images_per_s", "images/s", headline=True),)}
    rows = {row["side"]: row for row in report.summarize(runs, metrics)}
    assert rows["conveyor"]["median"] == 250 and rows["conveyor"]["conveyor_ratio"] is None
    stock = rows["DataLoader W=2"]
    assert (stock["median"], stock["min"], stock["max"]) == (80, 50, 100)
    assert stock["conveyor_ratio"] == [3.0, 4.0]  # Repeat 2 has no conveyor partner.
    table = report.format_table(list(rows.values()), "throughput")
    assert "3.00 4.00" in table and "conveyor/side per repeat" in table


def test_memory_sampler_sums_a_process_tree():
    if not os.path.exists("/proc/self/smaps_rollup"):
        pytest.skip("needs Linux /proc with smaps_rollup")
    child = "import time; b = bytearray(32 << 20); time.sleep(1.5)"
    code = (
        "import subprocess, sys, time; block = bytearray(64 << 20); "
        f"child = subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(1.5); child.wait()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    with TreeMemorySampler(proc.pid, interval=0.01) as sampler:
        proc.wait()
        time.sleep(0.05)
    result = sampler.result()
    assert result["peak_processes"] >= 2
    assert result["peak_rss_mb"] >= 64 + 32
    assert result["peak_pss_mb"] >= 64 + 32 - 8
