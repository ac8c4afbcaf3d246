"""Emulator benchmark: emulated packets per CPU-second and virtual goodput for RC WRITE of
1 MiB messages (MTU 4096) without and with 1% loss, and for 64-byte SENDs; compared with a
baseline that only builds the same frames with Scapy (with ICRC), on the same machine.

Then QP scaling: 1,000 and 10,000 QPs with one 4 KiB RC WRITE each (``roce emulate --qps N
--size 4K --count 1``), whole run CPU time (set-up, run, verification).  A linear runner
takes ~10x as long for 10x the QPs; the ratio is printed, with the quadratic runner's
figures from before (1,000 QPs 1.2 s, 10,000 QPs unfinished after 120 s, same machine).

    python bench/bench_emulator.py [--rounds 5] [--markdown] [--no-scaling]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time
import warnings

from roce.emu.net.runner import run_scenario
from roce.emu.scenario import Scenario

warnings.filterwarnings("ignore")
from scapy.contrib.roce import BTH as ScapyBTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

CASES = {
    "RC WRITE 1 MiB, MTU 4096, no loss": Scenario(op="write", size=1 << 20, count=20),
    "RC WRITE 1 MiB, MTU 4096, 1% loss": Scenario(op="write", size=1 << 20, count=20,
                                                  loss=0.01, seed=1),
    "RC SEND 64 B": Scenario(op="send", size=64, count=5000),
}
SCALING = (1_000, 10_000)
EARLIER_1K_S = 1.2  # the quadratic runner, 1,000 QPs (issue 12)


def scaling_cpu_s(qps: int, rounds: int) -> float:
    """Median CPU seconds of a whole ``--qps N --size 4K --count 1`` run."""
    times = []
    for _ in range(rounds):
        t = time.process_time()
        s = run_scenario(Scenario(op="write", size=4096, count=1, qps=qps))
        times.append(time.process_time() - t)
        assert s.data_verified and s.delivered == qps
    return statistics.median(times)


def scapy_packets_per_cpu_s(payload: int, n: int = 300) -> float:
    """Frames/CPU-s when Scapy merely builds the data packets (no protocol, no receiver)."""
    t = time.process_time()
    for i in range(n):
        reth = struct.pack("!QII", 0x1000, 0x22, payload)
        bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF")
              / UDP(sport=0xC000, dport=4791, chksum=0)
              / ScapyBTH(opcode=0x07, dqpn=0x11, psn=i) / Raw(reth + bytes(payload)))
    return n / (time.process_time() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--no-scaling", action="store_true", help="skip the QP scaling cases")
    args = ap.parse_args()
    rows = []
    for name, sc in CASES.items():
        rates, goodputs = [], []
        for _ in range(args.rounds):
            s = run_scenario(sc)
            assert s.data_verified, name
            rates.append(s.packets_per_cpu_s)
            goodputs.append(s.goodput_gbps)
        payload = 4096 if sc.size >= 4096 else sc.size
        base = statistics.median(scapy_packets_per_cpu_s(payload) for _ in range(3))
        rate = statistics.median(rates)
        rows.append((name, rate, statistics.median(goodputs), base, rate / base))
    if args.markdown:
        print("| case | emulated packets / CPU-s | virtual goodput | Scapy build only, "
              "packets / CPU-s | ratio |")
        print("|---|---:|---:|---:|---:|")
        for name, rate, gp, base, ratio in rows:
            print(f"| {name} | {rate:,.0f} | {gp:.2f} Gb/s | {base:,.0f} | {ratio:,.0f}x |")
    else:
        print(f"{'case':<38} {'pkt/CPU-s':>12} {'goodput':>12} {'scapy pkt/CPU-s':>16} ratio")
        for name, rate, gp, base, ratio in rows:
            print(f"{name:<38} {rate:>12,.0f} {gp:>8.2f} Gb/s {base:>16,.0f} {ratio:,.0f}x")
    if args.no_scaling:
        return
    rounds = max(1, min(args.rounds, 3))
    cpu = {n: scaling_cpu_s(n, rounds) for n in SCALING}
    small, big = SCALING
    growth = cpu[big] / cpu[small]
    if args.markdown:
        print()
        print("| QPs, one 4 KiB RC WRITE each | CPU s (whole run) | vs 1,000 QPs | vs the "
              "quadratic runner |")
        print("|---:|---:|---:|---:|")
        print(f"| {small:,} | {cpu[small]:.2f} | 1.0x | {EARLIER_1K_S / cpu[small]:.1f}x "
              f"faster ({EARLIER_1K_S} s) |")
        print(f"| {big:,} | {cpu[big]:.2f} | {growth:.1f}x | unfinished after 120 s before |")
    else:
        print(f"\n{'QPs (one 4 KiB WRITE each)':<38} {'CPU s':>12}")
        for n in SCALING:
            print(f"{n:<38,} {cpu[n]:>12.2f}")
        print(f"10x the QPs took {growth:.1f}x the CPU (linear: ~10x); 1,000 QPs: "
              f"{EARLIER_1K_S / cpu[small]:.1f}x faster than the quadratic runner's "
              f"{EARLIER_1K_S} s")


if __name__ == "__main__":
    main()
