"""RoCE, UET and InfiniBand side by side on four cases: ``roce compare``'s default contenders
(roce.emu.contenders.DEFAULT_CONTENDERS) on

(a) ``incast``: an 8:1 incast (``--topology incast:8``, every host sends ``--count`` messages
    of ``--size`` to one);
(b) ``permutation``: a permutation on a leaf-spine with 4 spines (``leafspine:4,4,4``: 16
    hosts, each sending to one host on another leaf, the pairs drawn from ``--seed``);
(c) ``websearch``: WebSearch flows at 50 % load on ``fattree:8`` (128 hosts) for
    ``--duration`` (scaled down from the issue's runs so that the four contenders finish in
    minutes on a loaded 2-core machine; every flow that arrives runs to completion);
(d) ``allreduce``: a 16-rank ring all-reduce of ``--ar-size`` on ``leafspine:4,2,4``.

Each case runs every contender in one ``roce compare`` process (the same transfers, checked
by the report's digests); ``--repeat N`` runs each case N times, interleaved, and reports the
median of each measured figure (CPU seconds, packet-hops per CPU-second: the network's
figures are the same every time, virtual time and a fixed seed).  Prints one table per case
and, with ``--json FILE``, writes every report.

    PYTHONPATH=. python bench/bench_compare.py                        # all four cases
    PYTHONPATH=. python bench/bench_compare.py --cases incast allreduce --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import time

from roce.cli import main
from roce.emu import contenders

CASES = {
    "incast": ["--topology", "incast:8", "--size", "1M", "--count", "4"],
    "permutation": ["--topology", "leafspine:4,4,4", "--size", "1M", "--count", "4"],
    "websearch": ["--topology", "fattree:8", "--workload", "websearch", "--load", "0.5"],
    "allreduce": ["--topology", "leafspine:4,2,4", "--collective", "allreduce"],
}


def compare(args: list[str]) -> dict:
    """One ``roce compare -T json`` run in this process, its report."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["compare", "-T", "json", "--no-progress", *args])
    if code:
        raise SystemExit(f"roce compare {' '.join(args)}: exit {code}")
    return json.loads(out.getvalue())


def merged(reports: list[dict]) -> dict:
    """The first report with the measured figures replaced by their medians."""
    rep = json.loads(json.dumps(reports[0]))
    for i, row in enumerate(rep["contenders"]):
        for key in contenders.MEASURED:
            row[key] = statistics.median(r["contenders"][i][key] for r in reports)
        for r in reports:  # the network's figures do not change from run to run
            other = r["contenders"][i]
            assert all(other[k] == row[k] for k in ("goodput_gbps", "fct_p99_us",
                                                    "retransmitted", "digest")), row["name"]
    return rep


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--duration", default="100us", help="WebSearch's arrivals (100us)")
    ap.add_argument("--ar-size", default="4M", help="the all-reduce's buffer (4M)")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    extra = {"websearch": ["--duration", a.duration], "allreduce": ["--size", a.ar_size]}
    runs: dict[str, list[dict]] = {c: [] for c in a.cases}
    walls: dict[str, list[float]] = {c: [] for c in a.cases}
    for _ in range(a.repeat):  # interleaved: every case once, then again
        for case in a.cases:
            t0 = time.perf_counter()
            runs[case].append(compare([*CASES[case], *extra.get(case, []), "--seed", a.seed]))
            walls[case].append(time.perf_counter() - t0)
    out = {}
    for case in a.cases:
        rep = out[case] = merged(runs[case])
        print(f"## {case}: {' '.join([*CASES[case], *extra.get(case, [])])} "
              f"(wall {statistics.median(walls[case]):.1f} s, median of {a.repeat})")
        print(contenders.text(rep))
        print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main_()
