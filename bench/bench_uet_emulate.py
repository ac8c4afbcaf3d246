"""UET endpoints on the simulated network against RoCE, on two workloads: the leaf-spine 4,2,4
permutation (16 flows, 4 x 1 MiB WRITEs per flow, PFC off, seed 1), the workload of "Loss
recovery: spraying"; and an 8:1 incast (4 x 256 KiB WRITEs per sender, PFC off, a 1 MiB
buffer) with and without trimming.  Virtual-time figures (goodput, completion times,
retransmissions, drops, trims) are exact; packet-hops per CPU-second are the median of
``--rounds`` rounds, the contenders interleaved within each round.

    python bench/bench_uet_emulate.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

from roce.emu.net.runner import run_scenario
from roce.emu.scenario import Scenario
from roce.emu.uet.run import UetOptions, run_uet

BASE = dict(op="write", size=1 << 20, count=4, topology="leafspine:4,2,4", pfc=False, seed=1)

INCAST = dict(op="write", size=256 << 10, count=4, topology="incast:8", pfc=False, seed=1,
              buffer=1 << 20)

CONTENDERS = [
    ("RoCE ecmp gbn", lambda: run_scenario(Scenario(**BASE, lb="ecmp", recovery="gbn"))),
    ("RoCE spray sr", lambda: run_scenario(Scenario(**BASE, lb="spray", recovery="sr"))),
    ("UET rud, entropy per PDC", lambda: run_uet(Scenario(**BASE), UetOptions())),
    ("UET rud, entropy per packet",
     lambda: run_uet(Scenario(**BASE), UetOptions(entropy="packet"))),
    ("UET rud, per packet, trimming",
     lambda: run_uet(Scenario(**BASE), UetOptions(entropy="packet", trim=True))),
    ("UET rod, entropy per PDC", lambda: run_uet(Scenario(**BASE), UetOptions(mode="rod"))),
    ("incast: RoCE gbn", lambda: run_scenario(Scenario(**INCAST))),
    ("incast: RoCE sr", lambda: run_scenario(Scenario(**INCAST, recovery="sr"))),
    ("incast: UET rud", lambda: run_uet(Scenario(**INCAST), UetOptions())),
    ("incast: UET rud, trimming", lambda: run_uet(Scenario(**INCAST), UetOptions(trim=True))),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rates: dict[str, list[float]] = {name: [] for name, _ in CONTENDERS}
    last = {}
    for r in range(args.rounds):
        order = CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]
        for name, run in order:
            s = run()
            assert s.data_verified, (name, s.unverified)
            rates[name].append(s.hops_per_cpu_s)
            last[name] = s
    head = ("| contenders | goodput Gb/s | FCT p50 us | FCT p99 us | retx | drops | trims | "
            "timeouts | packet-hops per CPU-s |")
    print(head)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, _ in CONTENDERS:
        s = last[name]
        print(f"| {name} | {s.goodput_gbps:.1f} | {s.fct_ns['p50'] / 1e3:.0f} | "
              f"{s.fct_ns['p99'] / 1e3:.0f} | {s.retransmitted} | {s.fabric['drops']} | "
              f"{s.fabric.get('trimmed', 0)} | {s.timeouts} | "
              f"{statistics.median(rates[name]):,.0f} |")


if __name__ == "__main__":
    main()
