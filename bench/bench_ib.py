"""Native InfiniBand against RoCE on the simulated network: the same topology, traffic and
messages on an InfiniBand subnet (``--protocol ib``: credits, LIDs) and on Ethernet (PFC,
ECN, ECMP), interleaved round by round; medians of goodput, data packet-hops per
CPU-second and, for InfiniBand, the flow-control packets the links carried.

    PYTHONPATH=$PWD python bench/bench_ib.py [--rounds 5]

Packet-hops here count data packets only: the summary's ``hops`` counts every frame a
wire carried, InfiniBand's flow-control packets included.
"""

from __future__ import annotations

import argparse
import os
import statistics

from roce.emu.ib.ibrun import IbRun
from roce.emu.net.runner import NetRun
from roce.emu.scenario import Scenario

CASES = (("incast:8", None), ("leafspine:2,2,4", "all-to-all"), ("fattree:4", "all-to-all"))


def one(topology: str, traffic: str | None, protocol: str) -> dict[str, float]:
    sc = Scenario(topology=topology, traffic=traffic, protocol=protocol, count=20,
                  size=65536, seed=1)
    s = (IbRun if protocol == "ib" else NetRun)(sc).run()
    assert s.data_verified, s.unverified
    fc = s.fabric.get("fc_packets", 0)
    return {"goodput": s.goodput_gbps, "hops": s.hops - fc, "fc": fc,
            "hops_per_cpu_s": (s.hops - fc) / s.cpu_s}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(f"load before: {os.getloadavg()[0]:.1f}")
    for topology, traffic in CASES:
        runs: dict[str, list[dict[str, float]]] = {"roce": [], "ib": []}
        for _ in range(args.rounds):
            for proto in runs:
                runs[proto].append(one(topology, traffic, proto))
        for proto, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{topology:16} {traffic or 'default':10} {proto:4} goodput "
                  f"{med['goodput']:7.1f} Gb/s  data hops {med['hops']:7.0f}  flow-control "
                  f"{med['fc']:7.0f}  data packet-hops/CPU-s {med['hops_per_cpu_s']:9,.0f}")
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
