"""`roce stats` (and, with ``--decode``, `roce decode`) against another tree of roce (an
earlier commit, a branch), interleaved round by round so that load on a shared machine hits
both alike: the whole command's wall time, its peak RSS and the analysis alone, on
bench_decode's 200,000-packet capture.  With ``--tshark`` each round also runs ``tshark -T
fields`` (bench_decode's fields) and, with ``--decode``, plain ``tshark -r`` (its one-line
text) on the same capture, so the ratios to tshark are taken under the same load.  Prints
medians and the ratios.

    git archive main | tar -x -C /tmp/base && (cd /tmp/base && python setup.py build_ext -i)
    python bench/bench_stats_ab.py --baseline /tmp/base [--rounds 9] [--tshark] [--decode]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_decode import ENV, make_capture

HERE = Path(__file__).resolve().parent.parent
ANALYSE = ("import sys, time\n"
           "from roce.pcapio import open_capture\n"
           "try:\n"
           "    from roce.analysis.flows import make_analyzer\n"
           "except ImportError:  # a tree from before roce/analysis/\n"
           "    from roce.dissect.flows import make_analyzer\n"
           "a = make_analyzer()\n"
           "t = time.perf_counter()\n"
           "a.feed_capture(open_capture(sys.argv[1]))\n"
           "a.finish()\n"
           "print(time.perf_counter() - t)\n")
TSHARK_FIELDS = ["-T", "fields", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
                 "-e", "infiniband.bth.destqp"]


def timed(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one run of ``cmd``, output discarded."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)  # this child's own resource usage
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the other tree (extension built in place)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--tshark", action="store_true", help="time tshark -T fields too")
    ap.add_argument("--decode", action="store_true",
                    help="time roce decode too (and tshark -r with --tshark)")
    args = ap.parse_args()
    trees = {"baseline": str(Path(args.baseline).resolve()), "this tree": str(HERE)}
    times: dict[str, dict[str, list[float]]] = {
        k: {"stats": [], "analysis": [], "rss": [], "decode": []} for k in trees}
    tshark = shutil.which("tshark") if args.tshark else None
    if args.tshark and tshark is None:
        ap.error("--tshark: tshark not found")
    ts_times: list[float] = []
    ts_text: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        cap = Path(d) / "bench.pcap"
        make_capture(cap, args.packets)
        for tree in trees.values():  # warm-up: page cache, bytecode cache
            timed([sys.executable, "-m", "roce", "stats", str(cap)],
                  dict(ENV, PYTHONPATH=tree), tree)
        if tshark:
            timed([tshark, "-r", str(cap), *TSHARK_FIELDS], ENV)
        for _ in range(args.rounds):
            for name, tree in trees.items():
                env = dict(ENV, PYTHONPATH=tree)
                wall, rss = timed([sys.executable, "-m", "roce", "stats", str(cap)], env,
                                  tree)
                times[name]["stats"].append(wall)
                times[name]["rss"].append(rss)
                out = subprocess.run([sys.executable, "-c", ANALYSE, str(cap)], env=env,
                                     cwd=tree, check=True, capture_output=True, text=True)
                times[name]["analysis"].append(float(out.stdout))
                if args.decode:
                    times[name]["decode"].append(timed(
                        [sys.executable, "-m", "roce", "decode", str(cap)], env, tree)[0])
            if tshark:
                ts_times.append(timed([tshark, "-r", str(cap), *TSHARK_FIELDS], ENV)[0])
                if args.decode:
                    ts_text.append(timed([tshark, "-r", str(cap)], ENV)[0])
    med = {n: {k: statistics.median(v) if v else 0.0 for k, v in t.items()}
           for n, t in times.items()}
    print(f"{args.packets} packets, {args.rounds} interleaved rounds, medians")
    print(f"{'':12}{'roce stats':>12}{'analysis':>12}{'peak RSS':>11}"
          + (f"{'vs tshark':>11}" if tshark else ""))
    ts = statistics.median(ts_times) if tshark else 0.0
    for name, m in med.items():
        print(f"{name:12}{m['stats']:>11.3f}s{m['analysis']:>11.3f}s{m['rss']:>8.0f} MB"
              + (f"{ts / m['stats']:>10.1f}x" if tshark else ""))
    if tshark:
        print(f"{'tshark':12}{ts:>11.3f}s   (-T fields {' '.join(TSHARK_FIELDS[3::2])})")
    b, t = med["baseline"], med["this tree"]
    print(f"{'time ratio':12}{t['stats'] / b['stats']:>12.3f}{t['analysis'] / b['analysis']:>12.3f}"
          "   (this tree / baseline; below 1 is faster)")
    if args.decode:
        tt = statistics.median(ts_text) if ts_text else 0.0
        print(f"\n{'':12}{'roce decode':>12}" + (f"{'vs tshark -r':>14}" if tt else ""))
        for name, m in med.items():
            print(f"{name:12}{m['decode']:>11.3f}s" + (f"{tt / m['decode']:>13.1f}x" if tt else ""))
        if tt:
            print(f"{'tshark -r':12}{tt:>11.3f}s")
        print(f"{'time ratio':12}{t['decode'] / b['decode']:>12.3f}")


if __name__ == "__main__":
    main()
