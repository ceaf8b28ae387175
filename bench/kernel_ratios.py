"""Per-core kernel rates and their ratio to a raw TurboJPEG full decode, from
one run of ``image_pipeline_benchmark`` (docs/benchmarks.md, "C++ kernels").

The benchmarks are repeated and interleaved at random, so a load change on a
shared machine hits every benchmark alike; the ratios compare the minimum (and
the median) CPU time of each benchmark with that of ``BM_TurboJpegFullDecode``
in the same run.

    python bench/kernel_ratios.py [--binary build/dev/image_pipeline_benchmark]
        [--images bench-results/images] [--repetitions 8] [--filter REGEX]

``--images ''`` uses the benchmark's synthetic JPEGs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess

DEFAULT_FILTER = "BM_TurboJpegFullDecode|BM_DecodeImage|BM_TrainChain/|BM_TrainChainUint8|BM_EvalChain"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default="build/dev/image_pipeline_benchmark")
    parser.add_argument("--images", default="bench-results/images")
    parser.add_argument("--repetitions", type=int, default=8)
    parser.add_argument("--min-time", default="0.5")
    parser.add_argument("--filter", default=DEFAULT_FILTER)
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("CONVEYOR_BENCH_IMAGES", None)
    if args.images:
        env["CONVEYOR_BENCH_IMAGES"] = args.images
    command = [
        args.binary,
        f"--benchmark_filter={args.filter}",
        f"--benchmark_repetitions={args.repetitions}",
        f"--benchmark_min_time={args.min_time}",
        "--benchmark_enable_random_interleaving=true",
        "--benchmark_format=json",
    ]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    times: dict[str, list[float]] = {}
    for bench in json.loads(output)["benchmarks"]:
        if bench.get("run_type") == "iteration":
            times.setdefault(bench["run_name"], []).append(bench["cpu_time"] / 1e3)  # ns -> us
    base = times.get("BM_TurboJpegFullDecode")
    load = os.getloadavg()[0]
    print(f"load average {load:.1f}; images/s per core (CPU time), min and median of {args.repetitions}")
    for name, t in sorted(times.items()):
        fastest, median = min(t), statistics.median(t)
        line = f"{name:32s} {1e6 / fastest:7.0f} /s (min) {1e6 / median:7.0f} /s (median)"
        if base and name != "BM_TurboJpegFullDecode":
            ratio_min, ratio_median = min(base) / fastest, statistics.median(base) / median
            line += f"   x raw decode: {ratio_min:.2f} (min) {ratio_median:.2f} (median)"
        print(line)


if __name__ == "__main__":
    main()
