"""`roce sweep` benchmark: a 12-run sweep (loss 0..5% x WRITE/READ, 40 x 1 MiB messages on the
default 100G link) on 1 worker process against 2, wall-clock medians with process start-up;
the CPU seconds of each scenario (the table's run_cpu_s); the sweep's table itself.

    python bench/bench_sweep.py [--rounds 3] [--markdown] [--plot docs/sweep-goodput.png]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["loss=0,0.001,0.002,0.005,0.01,0.05", "op=write,read"]
FIXED = ["--size", "1M", "--count", "40", "--seed", "7"]


def sweep(out: Path, *extra: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "roce", "sweep", "--grid", *GRID, *FIXED,
                    "-o", str(out), *extra], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--plot", metavar="FILE", help="also draw goodput against loss")
    a = ap.parse_args()
    walls: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for j in (1, 2):
                walls[j].append(sweep(Path(d) / f"j{j}-{r}.csv", "-j", str(j)))
        with open(Path(d) / "j1-0.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        if a.plot:
            sweep(Path(d) / "j1-0.csv", "--plot", a.plot)  # resumes: nothing runs again
    w1, w2 = statistics.median(walls[1]), statistics.median(walls[2])
    cpu = [float(r["run_cpu_s"]) for r in rows]
    if a.markdown:
        print("| | value |\n|---|---|")
        print(f"| 12-run sweep, 1 worker (median of {a.rounds}) | {w1:.2f} s |")
        print(f"| 12-run sweep, 2 workers (median of {a.rounds}) | {w2:.2f} s |")
        print(f"| speed-up 2 workers / 1 | {w1 / w2:.2f}x |")
        print(f"| CPU per scenario: median, min, max | {statistics.median(cpu):.3f} s, "
              f"{min(cpu):.3f} s, {max(cpu):.3f} s |")
        print(f"| CPU of all 12 scenarios | {sum(cpu):.2f} s |\n")
        print("| loss | op | goodput Gb/s | packets | retransmitted | CPU s |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['loss']} | {r['op']} | {float(r['goodput_gbps']):.1f} | "
                  f"{r['packets']} | {r['retransmitted']} | {float(r['run_cpu_s']):.3f} |")
    else:
        print(f"wall 1 worker {w1:.2f}s, 2 workers {w2:.2f}s: {w1 / w2:.2f}x; CPU per "
              f"scenario median {statistics.median(cpu):.3f}s (total {sum(cpu):.2f}s)")


if __name__ == "__main__":
    main()
