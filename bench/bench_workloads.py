"""The traffic of real clusters on the emulator: WebSearch flows on a fat tree per congestion
control and recovery mode, and a ring all-reduce's bus bandwidth per congestion control.

For each load (30%, 50%), each congestion-control algorithm of the registry and each
recovery mode (gbn, sr): ``roce emulate --topology fattree:K --workload websearch --load L
--duration T``, and its slowdown p50/p99 for small (< 100 KB) and large flows, flows
finished, and packet-hops per CPU-second.  Then a ring all-reduce of ``--size`` over
``--ranks`` ranks on ``--ar-topology`` per algorithm: busbw against the line rate.

A run holds every flow that arrives in ``--duration`` until it completes (a WebSearch flow
is up to 30 MB: 2.4 ms alone at 100 Gb/s), so the run's virtual time is longer than the
duration; the CPU time of a fattree:8 run grows with the duration (packet-hops per
CPU-second is the speed figure).

    PYTHONPATH=. python bench/bench_workloads.py                 # the default: 1 ms
    PYTHONPATH=. python bench/bench_workloads.py --duration 200us --ar-size 16M
    PYTHONPATH=. python bench/bench_workloads.py --cc hpcc --cc-param hpcc_base_rtt=14
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from roce.emu.cc import algorithms
from roce.emu.net.workrun import WorkloadRun
from roce.emu.scenario import Scenario
from roce.options import parse_positive_time, parse_size


def knobs(cc: str, params: list[str]) -> list[str]:
    """The ``--cc-param`` settings that are knobs of ``cc`` (each applies to its own)."""
    return [p for p in params if p.partition("=")[0] in algorithms.ALGORITHMS[cc].PARAMS]


def flows(topology: str, load: float, cc: str, recovery: str, duration: int,
          seed: int, params: tuple[str, ...] = ()) -> dict:
    sc = Scenario(topology=topology, cdf="websearch", load=load, duration_ns=duration,
                  cc=algorithms.configure(cc, overrides=knobs(cc, list(params))),
                  recovery=recovery, seed=seed)
    t0 = time.process_time()
    s = WorkloadRun(sc).run()
    w = s.workload
    return {"load": load, "cc": cc, "recovery": recovery, "flows": w["flows"],
            "finished": w["finished"], "offered": w["offered_load"],
            "small": w["slowdown"]["small"], "large": w["slowdown"]["large"],
            "virtual_ms": s.virtual_ns / 1e6, "hops": s.hops,
            "hops_per_cpu_s": s.hops_per_cpu_s, "cpu_s": time.process_time() - t0,
            "verified": s.data_verified, "pfc": s.fabric["pfc_frames"],
            "ecn": s.fabric["ecn_marked"], "retransmitted": s.retransmitted,
            "table": w["slowdown_table"]}


def allreduce(topology: str, cc: str, size: int, ranks: int, seed: int,
              params: tuple[str, ...] = ()) -> dict:
    sc = Scenario(topology=topology, collective="allreduce", size=size, ranks=ranks,
                  cc=algorithms.configure(cc, overrides=knobs(cc, list(params))), seed=seed)
    s = WorkloadRun(sc).run()
    w = s.workload
    return {"cc": cc, "busbw_GBps": w["busbw_GBps"], "algbw_GBps": w["algbw_GBps"],
            "time_ms": w["time_ns"] / 1e6, "line_GBps": w["line_rate_GBps"],
            "hops_per_cpu_s": s.hops_per_cpu_s, "cpu_s": s.cpu_s,
            "verified": s.data_verified, "pfc": w["pfc_frames"], "ecn": w["ecn_marked"],
            "cnps": w["cnps"], "retransmitted": w["retransmitted"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--topology", default="fattree:8")
    p.add_argument("--duration", type=parse_positive_time, default=1_000_000)
    p.add_argument("--loads", default="0.3,0.5")
    p.add_argument("--cc", default=",".join(algorithms.ALGORITHMS))
    p.add_argument("--recovery", default="gbn,sr")
    p.add_argument("--ar-topology", default="fattree:4")
    p.add_argument("--ar-size", type=parse_size, default=64 << 20)
    p.add_argument("--ar-ranks", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cc-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a knob for the algorithm that has it (e.g. hpcc_base_rtt=14: HPCC's "
                   "T, the fabric's longest base RTT), repeatable")
    p.add_argument("--json", metavar="FILE", help="every figure, with the binned tables")
    a = p.parse_args()
    ccs = a.cc.split(",")
    out: dict = {"flows": [], "allreduce": [], "args": vars(a)}
    print(f"## WebSearch on {a.topology}, flows arriving for {a.duration / 1e6:g} ms\n")
    print("| load | cc | recovery | flows (finished) | small p50 | small p99 | large p50 | "
          "large p99 | virtual ms | packet-hops per CPU-s | verified |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for load in (float(x) for x in a.loads.split(",")):
        for cc in ccs:
            for rec in a.recovery.split(","):
                r = flows(a.topology, load, cc, rec, a.duration, a.seed, a.cc_param)
                out["flows"].append(r)
                sm, lg = r["small"], r["large"]
                print(f"| {load:g} | {cc} | {rec} | {r['flows']} ({r['finished']}) | "
                      f"{sm['p50']:.2f} | {sm['p99']:.2f} | {lg['p50']:.2f} | "
                      f"{lg['p99']:.2f} | {r['virtual_ms']:.2f} | "
                      f"{r['hops_per_cpu_s']:,.0f} | {r['verified']} |", flush=True)
    print(f"\n## Ring all-reduce, {a.ar_size >> 20} MiB over {a.ar_ranks} ranks on "
          f"{a.ar_topology}\n")
    print("| cc | busbw GB/s | of line rate | time ms | PFC frames | ECN marks | CNPs | "
          "packet-hops per CPU-s |")
    print("|---|---|---|---|---|---|---|---|")
    for cc in ccs:
        r = allreduce(a.ar_topology, cc, a.ar_size, a.ar_ranks, a.seed, a.cc_param)
        out["allreduce"].append(r)
        print(f"| {cc} | {r['busbw_GBps']:.2f} | {r['busbw_GBps'] / r['line_GBps']:.1%} | "
              f"{r['time_ms']:.2f} | {r['pfc']} | {r['ecn']} | {r['cnps']} | "
              f"{r['hops_per_cpu_s']:,.0f} |", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
