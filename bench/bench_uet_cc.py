"""UET congestion management in miniature of uet-htsim's headline (a permutation with NSCC:
tail FCT against its target): a leaf-spine 4,4,4 permutation (16 hosts, 4 spines, one 1 MiB
WRITE per flow, 100 Gb/s, PFC off, trimming switches, seed 1) with per-packet spraying or
REPS, without congestion control, with NSCC and with RCCC; the same permutation on
leaf-spine 4,2,4 (2:1 oversubscribed); and an 8:1 incast (one 512 KiB WRITE per sender).
NSCC runs have switches mark RED from its target queue to four times it (MARK).
Every figure is virtual time, exact for the seed (CPU seconds aside); the FCT target is the
ideal one, the base RTT plus the flow's bytes on the wire at its fair share of the
bottleneck (line rate in the permutation, half of it on 4,2,4, an eighth in the incast).

    python bench/bench_uet_cc.py
"""

from __future__ import annotations

import time

from roce.emu.cc import configure
from roce.emu.scenario import Scenario
from roce.emu.uet.run import UetOptions, run_uet

PERM = dict(op="write", size=1 << 20, count=1, topology="leafspine:4,4,4", pfc=False, seed=1)
MARK = "46875,187500,1"  # RED from NSCC's target queue at 100 Gb/s (3.75 us) to 4 x
HEADERS = 98  # Ethernet, IPv4, UDP, PDS and SES standard header of a data packet
LINK_NS = 1_000


def cc(name: str, *params: str):
    return configure(name, None, list(params), 100.0)


OVER = dict(PERM, topology="leafspine:4,2,4")  # 2 spines: the leaves 2:1 oversubscribed
INCAST = dict(op="write", size=512 << 10, count=1, topology="incast:8", pfc=False, seed=1)

# (name, scenario, UET options, the share of a bottleneck one flow may have, hops)
CONTENDERS = [
    ("permutation, spray, no CC", Scenario(**PERM), UetOptions(entropy="packet", trim=True),
     1, 4),
    ("permutation, spray, NSCC", Scenario(**PERM, ecn=MARK, cc=cc("nscc")),
     UetOptions(entropy="packet", trim=True), 1, 4),
    ("permutation, REPS, NSCC", Scenario(**PERM, ecn=MARK, cc=cc("nscc")),
     UetOptions(entropy="reps", trim=True), 1, 4),
    ("permutation, spray, RCCC", Scenario(**PERM, cc=cc("rccc")),
     UetOptions(entropy="packet", trim=True), 1, 4),
    ("2:1 permutation, spray, no CC", Scenario(**OVER), UetOptions(entropy="packet",
                                                                  trim=True), 2, 4),
    ("2:1 permutation, spray, NSCC", Scenario(**OVER, ecn=MARK, cc=cc("nscc")),
     UetOptions(entropy="packet", trim=True), 2, 4),
    ("2:1 permutation, REPS, NSCC", Scenario(**OVER, ecn=MARK, cc=cc("nscc")),
     UetOptions(entropy="reps", trim=True), 2, 4),
    ("incast 8:1, no CC", Scenario(**INCAST, ecn=MARK), UetOptions(trim=True), 8, 2),
    ("incast 8:1, NSCC", Scenario(**INCAST, ecn=MARK, cc=cc("nscc")), UetOptions(trim=True),
     8, 2),
    ("incast 8:1, RCCC", Scenario(**INCAST, cc=cc("rccc")), UetOptions(trim=True), 8, 2),
]


def ideal_us(size: int, share: int = 1, hops: int = 4, mtu: int = 4096) -> float:
    """Base RTT (the links both ways, a packet's and an ACK's serialisation per hop) plus
    the message's bytes on the wire at 100 Gb/s / ``share`` (its fair share of the
    bottleneck)."""
    packets = -(-size // mtu)
    wire = size + packets * HEADERS
    rtt = 2 * hops * LINK_NS + hops * (mtu + HEADERS) * 8 / 100 + hops * 150 * 8 / 100
    return (rtt + wire * 8 * share / 100) / 1e3


def main() -> None:
    print("| run | goodput Gb/s | FCT p50 us | FCT p99 us | ideal us | p99 / ideal | retx | "
          "trims | max queue KB | CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, sc, opts, share, hops in CONTENDERS:
        t0 = time.process_time()
        s = run_uet(sc, opts)
        cpu = time.process_time() - t0
        assert s.data_verified, name
        f = s.fct_ns
        ideal = ideal_us(sc.size, share, hops)
        print(f"| {name} | {s.goodput_gbps:.1f} | {f['p50'] / 1e3:.0f} | "
              f"{f['p99'] / 1e3:.0f} | {ideal:.0f} | {f['p99'] / 1e3 / ideal:.2f} | "
              f"{s.retransmitted} | {s.fabric['trimmed']} | "
              f"{s.fabric['max_queue_bytes'] / 1e3:.0f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
