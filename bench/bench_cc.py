"""Congestion-control benchmark: an incast sweep, 2 to 64 senders into one receiver, one 1 MiB
RDMA WRITE each (MTU 4096, 100 Gb/s links, 1 us delay, 12 MiB shared buffer, ECN at the
rate-scaled defaults), with and without DCQCN (NVIDIA profile), PFC on and off.

Reports per case the flow completion time p50 / p99 (post to completion, virtual time), PFC
frames, drops, retransmitted packets, the peak egress queue, CNPs, and emulated packet-hops per
CPU-second; the two-host fabric's packets per CPU-second measured in the same run gives the
ratio (the machine may be shared: ratios hold, absolute rates move with its load).

    python bench/bench_cc.py [--senders 2,4,8,16,32,64] [--markdown]
"""

from __future__ import annotations

import argparse

from roce.emu.cc import configure
from roce.emu.net.runner import NetScenario, run_network
from roce.emu.scenario import Scenario, run_scenario

P2P = Scenario(op="write", size=1 << 20, count=16)


SENDERS = (2, 4, 8, 16, 32, 64)


def scenario(n: int, cc: str, pfc: bool) -> NetScenario:
    """One case of the sweep (bench/net_equal.py replays the same ones)."""
    return NetScenario(topology=f"incast:{n}", op="write", size=1 << 20, count=1, depth=1,
                       mtu=4096, rate_gbps=100.0, pfc=pfc, cc=configure(cc))


def case(n: int, cc: str, pfc: bool) -> dict:
    s = run_network(scenario(n, cc, pfc))
    f = s.fabric
    return {"senders": n, "cc": cc, "pfc": "on" if pfc else "off", "ok": s.data_verified,
            "p50_us": s.fct_ns["p50"] / 1e3, "p99_us": s.fct_ns["p99"] / 1e3,
            "pfc_frames": f["pfc_frames"], "drops": f["drops"], "retx": s.retransmitted,
            "max_queue": f["max_queue_bytes"], "cnps": f["cnps_sent"], "hops": s.hops,
            "hops_per_cpu_s": s.hops_per_cpu_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--senders", default=",".join(map(str, SENDERS)))
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    p2p = []
    for n in (int(x) for x in args.senders.split(",")):
        p2p.append(run_scenario(P2P).packets_per_cpu_s)  # interleaved with the cases
        for pfc in (True, False):
            for cc in ("none", "dcqcn"):
                rows.append(case(n, cc, pfc))
                r = rows[-1]
                if not args.markdown:
                    print(r, flush=True)
    base = sorted(p2p)[len(p2p) // 2]
    if args.markdown:
        print(f"p2p baseline (median of {len(p2p)}): {base:,.0f} packets per CPU-second\n")
        print("| senders | PFC | CC | FCT p50 / p99 | PFC frames | drops | retransmitted | "
              "peak queue | CNPs | packet-hops / CPU-s | ratio to p2p |")
        print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['senders']} | {r['pfc']} | {r['cc']} | {r['p50_us']:.1f} / "
                  f"{r['p99_us']:.1f} us | {r['pfc_frames']} | {r['drops']} | {r['retx']} | "
                  f"{r['max_queue']:,} B | {r['cnps']} | {r['hops_per_cpu_s']:,.0f} | "
                  f"{r['hops_per_cpu_s'] / base:.2f} |" + ("" if r["ok"] else " (unverified)"))


if __name__ == "__main__":
    main()
