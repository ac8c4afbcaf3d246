"""The 16:1 incast under each congestion-control algorithm: the table in
docs/congestion-control.md ("The algorithms side by side").

Sixteen senders each WRITE 1 MiB to one receiver at once (MTU 4096, 100 Gb/s links, 1 us
delay, 12 MiB shared buffer, PFC on), with every algorithm at its default profile, first at
the default ECN marking (RED at the rate-scaled 400 KB / 1.6 MB, Pmax 0.2), then with step
marking at K = 200 KB (``--ecn 200K,200K,1``, DCTCP's kind of marking) for the algorithms
that read marks.  Per run: flow completion p50 / p99 (virtual time), the bottleneck queue's
peak and its mean, minimum and maximum while all sixteen send (sampled every 2 us from 100 us
to the first completion), PFC frames, ECN marks, CNPs and retransmitted packets.  Virtual
time only: the numbers do not depend on the machine.

    python bench/cc_incast.py [--markdown]
"""

from __future__ import annotations

import argparse
import statistics

from roce.emu.cc import configure
from roce.emu.cc.experiments import US, watched
from roce.emu.net.runner import NetScenario

RUNS = (("none", "on"), ("dcqcn", "on"), ("timely", "on"), ("dctcp", "on"), ("swift", "on"),
        ("hpcc", "on"),
        ("dcqcn", "200K,200K,1"), ("dctcp", "200K,200K,1"))


def case(cc: str, ecn: str) -> dict:
    sc = NetScenario(topology="incast:16", op="write", size=1 << 20, count=1, depth=1,
                     mtu=4096, rate_gbps=100.0, pfc=True, ecn=ecn, cc=configure(cc))
    s, w = watched(sc, 2 * US)
    first = min(f["fct_ns"]["p50"] for f in s.flows)
    q = [x for t, x in zip(w.times, w.queues[w.busiest()]) if 100 * US <= t <= first]
    f = s.fabric
    return {"cc": cc, "ecn": ecn, "ok": s.data_verified, "p50_us": s.fct_ns["p50"] / 1e3,
            "p99_us": s.fct_ns["p99"] / 1e3, "peak_kb": f["max_queue_bytes"] / 1e3,
            "mean_kb": statistics.mean(q) / 1e3, "min_kb": min(q) / 1e3,
            "max_kb": max(q) / 1e3, "pfc": f["pfc_frames"], "marked": f["ecn_marked"],
            "cnps": f["cnps_sent"], "retx": s.retransmitted}


def table(rows: list[dict]) -> list[str]:
    """The markdown table docs/congestion-control.md shows (tests/test_cc_docs.py holds the
    page to it)."""
    out = ["| CC | ECN marking | FCT p50 / p99 | peak queue | queue while 16 send: mean "
           "(min-max) | PFC frames | ECN marks | CNPs | retransmitted |",
           "|---|---|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        ecn = "RED 400K-1.6M" if r["ecn"] == "on" else "step K = 200K"
        out.append(f"| {r['cc']} | {ecn} | {r['p50_us']:.0f} / {r['p99_us']:.0f} us | "
                   f"{r['peak_kb']:,.0f} KB | {r['mean_kb']:,.0f} KB ({r['min_kb']:,.0f}-"
                   f"{r['max_kb']:,.0f}) | {r['pfc']} | {r['marked']} | {r['cnps']} | "
                   f"{r['retx']} |" + ("" if r["ok"] else " (unverified)"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = [case(cc, ecn) for cc, ecn in RUNS]
    if args.markdown:
        print("\n".join(table(rows)))
    else:
        for r in rows:
            print(r)


if __name__ == "__main__":
    main()
