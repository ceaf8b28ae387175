"""Whether the gain the doctor promises for more DataLoader workers is the
gain they give: the doctor (`conveyor doctor --json`, a fresh process each
time) runs the planted script tests/doctor_scripts/
no_workers.py (num_workers=0, 2 ms per sample) and measures the workers it
suggests (rules/worker_trial.py); the script is then run again with that
suggestion (WORKERS=k) under the doctor, and the real gain is the difference
of the two runs' step times (the median of two consecutive steps' mean:
two workers deliver batches in pairs, so steps alternate long and short).

    .venv/bin/python bench/doctor_worker_gain.py --runs 5

Not a test: wall-clock gains depend on the machine's load (beside busy
processes the workers' real gain shrinks more than the trial's); the figures
go to the issue's note. Target: promised within 25 % of real on an idle
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from conveyor.cli import int_at_least

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "doctor_scripts" / "no_workers.py"


def _doctor(workers: int, out: Path) -> dict:
    """The doctor's JSON report of the script in a fresh process, with num_workers=workers."""
    env = dict(os.environ, WORKERS=str(workers))
    command = [sys.executable, "-m", "conveyor", "doctor", "--json", str(out), "--", str(SCRIPT)]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
    return json.loads(out.read_text())


def _step(report: dict) -> float:
    """The median over the run of two consecutive steps' mean (seconds),
    step 1 left out: two workers deliver batches in pairs (steps alternate
    long and short), and an epoch's restart is one outlier, not a shift."""
    steps = [s["total_ms"] / 1000 for s in report["per_step"][1:]]
    return statistics.median((a + b) / 2 for a, b in zip(steps, steps[1:]))


def one_run(folder: Path) -> tuple[float, float, int]:
    """(promised, real) seconds per step and the workers suggested."""
    report = _doctor(0, folder / "naive.json")
    finding = next(f for f in report["findings"] if f["rule"] == "dataloader-no-workers")
    workers = int(re.search(r"num_workers=(\d+)", finding["fix"]).group(1))
    fixed = _doctor(workers, folder / "fixed.json")
    return finding["gain"]["seconds_per_step"] or 0.0, _step(report) - _step(fixed), workers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int_at_least(1), default=5)
    args = parser.parse_args()
    print("run  workers  promised ms  real ms  promised/real")
    with tempfile.TemporaryDirectory() as folder:
        for run in range(1, args.runs + 1):
            promised, real, workers = one_run(Path(folder))
            ratio = promised / real if real > 0 else float("inf")
            print(f"{run:3d}  {workers:7d}  {promised * 1000:11.2f}  {real * 1000:7.2f}  {ratio:13.2f}")


if __name__ == "__main__":
    main()
