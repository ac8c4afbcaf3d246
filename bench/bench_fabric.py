"""Switched-network benchmark: emulated packet-hops per CPU-second (one hop = one frame
crossing one link) for a 16:1 incast (one 1 MiB WRITE per sender, MTU 4096, 100 Gb/s, PFC on)
and a 4-leaf, 2-spine, 4-hosts-per-leaf permutation, against the two-host fabric's figure
(p2p: every emulated packet crosses one link, so packets per CPU-second = hops per CPU-second)
measured in the same run; plus the virtual-time results (completion times, drops, pauses).

    python bench/bench_fabric.py [--rounds 5] [--markdown]
"""

from __future__ import annotations

import argparse
import statistics

from roce.emu.net.runner import NetScenario, run_network, run_scenario
from roce.emu.scenario import Scenario

P2P = Scenario(op="write", size=1 << 20, count=16)
CASES = {
    "incast 16:1, 1 MiB WRITE each, PFC on": NetScenario(
        topology="incast:16", size=1 << 20, count=1, mtu=4096, rate_gbps=100.0, pfc=True,
        buffer=2 << 20),
    "leaf-spine 4x2, 4 hosts/leaf, permutation, 1 MiB WRITE each": NetScenario(
        topology="leafspine:4,2,4", traffic="permutation", size=1 << 20, count=1, mtu=4096,
        rate_gbps=100.0),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    p2p, rates, ratios, last = [], {n: [] for n in CASES}, {n: [] for n in CASES}, {}
    for _ in range(args.rounds):  # interleaved, so machine load hits every case alike
        base = run_scenario(P2P)
        assert base.data_verified
        p2p.append(base.packets_per_cpu_s)
        for name, sc in CASES.items():
            s = run_network(sc)
            assert s.data_verified, name
            rates[name].append(s.hops_per_cpu_s)
            ratios[name].append(s.hops_per_cpu_s / base.packets_per_cpu_s)
            last[name] = s
    p2p_rate = statistics.median(p2p)
    if args.markdown:
        print("| case | packet-hops / CPU-s | ratio to p2p | hops | virtual time | FCT mean / "
              "p50 / p99 | drops | PFC frames | ECN marked | max queue |")
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
        print(f"| p2p (two hosts, one link), 16 x 1 MiB WRITE | {p2p_rate:,.0f} | 1.00 | | | "
              "| | | | |")
    for name in CASES:
        s, f = last[name], last[name].fabric
        rate, ratio = statistics.median(rates[name]), statistics.median(ratios[name])
        fct = s.fct_ns
        fct_text = (f"{fct['mean'] / 1e3:.1f} / {fct['p50'] / 1e3:.1f} / "
                    f"{fct['p99'] / 1e3:.1f} us")
        if args.markdown:
            print(f"| {name} | {rate:,.0f} | {ratio:.2f} | {s.hops:,} | "
                  f"{s.virtual_ns / 1e3:.1f} us | {fct_text} | {f['drops']} | "
                  f"{f['pfc_frames']} | {f['ecn_marked']} | {f['max_queue_bytes']:,} B |")
        else:
            paused = sum(h["paused_ns"] for h in f["hosts"].values())
            print(f"{name}\n  {rate:,.0f} packet-hops/CPU-s ({ratio:.2f}x p2p's "
                  f"{p2p_rate:,.0f}); {s.hops:,} hops; virtual {s.virtual_ns / 1e3:.1f} us; "
                  f"FCT {fct_text}; drops {f['drops']}; PFC frames {f['pfc_frames']} "
                  f"(hosts paused {paused / 1e3:.1f} us in all); ECN marked "
                  f"{f['ecn_marked']}; max queue {f['max_queue_bytes']:,} B")
    spray_vs_ecmp(args.markdown)


def spray_vs_ecmp(markdown: bool) -> None:
    """Virtual-time evidence for selective repeat: the leaf-spine permutation with ECMP and
    with per-packet spraying (go-back-N answers every reordering with a resend)."""
    rows = []
    for lb in ("ecmp", "spray"):
        sc = NetScenario(topology="leafspine:4,2,4", traffic="permutation", size=1 << 20,
                         count=1, lb=lb)
        s = run_network(sc)
        assert s.data_verified
        ooo = sum(f["out_of_sequence"] for f in s.flows)
        rows.append((lb, s.fct_ns, s.packets, s.retransmitted, ooo,
                     s.naks.get("PSN sequence error", 0)))
    if markdown:
        print("\n| load balancing | FCT mean / p50 / p99 | packets | retransmitted | "
              "out-of-sequence arrivals | sequence NAKs |")
        print("|---|---|---:|---:|---:|---:|")
    for lb, fct, pk, rt, ooo, nak in rows:
        text = f"{fct['mean'] / 1e3:.1f} / {fct['p50'] / 1e3:.1f} / {fct['p99'] / 1e3:.1f} us"
        if markdown:
            print(f"| {lb} | {text} | {pk:,} | {rt:,} | {ooo:,} | {nak:,} |")
        else:
            print(f"{lb:<6} FCT {text}; packets {pk:,}, retransmitted {rt:,}, "
                  f"out of sequence {ooo:,}, sequence NAKs {nak:,}")


if __name__ == "__main__":
    main()
