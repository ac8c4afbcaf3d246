"""`roce stats` against another tree of roce (an earlier commit, a branch), interleaved round by
round so that load on a shared machine hits both alike: the whole command's wall time and the
analysis alone, on bench_decode's 200,000-packet capture.  Prints medians and the ratios.

    git archive main | tar -x -C /tmp/base && (cd /tmp/base && python setup.py build_ext -i)
    python bench/bench_stats_ab.py --baseline /tmp/base [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_decode import make_capture

HERE = Path(__file__).resolve().parent.parent
ANALYSE = ("import sys, time\n"
           "from roce.pcapio import open_capture\n"
           "from roce.analysis.flows import make_analyzer\n"
           "a = make_analyzer()\n"
           "t = time.perf_counter()\n"
           "a.feed_capture(open_capture(sys.argv[1]))\n"
           "a.finish()\n"
           "print(time.perf_counter() - t)\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the other tree (extension built in place)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--packets", type=int, default=200_000)
    args = ap.parse_args()
    trees = {"baseline": str(Path(args.baseline).resolve()), "this tree": str(HERE)}
    times: dict[str, dict[str, list[float]]] = {k: {"stats": [], "analysis": []} for k in trees}
    with tempfile.TemporaryDirectory() as d:
        cap = Path(d) / "bench.pcap"
        make_capture(cap, args.packets)
        for _ in range(args.rounds):
            for name, tree in trees.items():
                env = dict(os.environ, PYTHONPATH=tree)
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "roce", "stats", str(cap)], env=env,
                               cwd=tree, check=True, stdout=subprocess.DEVNULL)
                times[name]["stats"].append(time.perf_counter() - t)
                out = subprocess.run([sys.executable, "-c", ANALYSE, str(cap)], env=env,
                                     cwd=tree, check=True, capture_output=True, text=True)
                times[name]["analysis"].append(float(out.stdout))
    med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
    print(f"{args.packets} packets, {args.rounds} interleaved rounds, medians")
    print(f"{'':12}{'roce stats':>12}{'analysis':>12}")
    for name, m in med.items():
        print(f"{name:12}{m['stats']:>11.3f}s{m['analysis']:>11.3f}s")
    b, t = med["baseline"], med["this tree"]
    print(f"{'time ratio':12}{t['stats'] / b['stats']:>12.3f}{t['analysis'] / b['analysis']:>12.3f}"
          "   (this tree / baseline; below 1 is faster)")


if __name__ == "__main__":
    main()
