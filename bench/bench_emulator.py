"""Emulator benchmark: emulated packets per CPU-second and virtual goodput for RC WRITE of
1 MiB messages (MTU 4096) without and with 1% loss, and for 64-byte SENDs; compared with a
baseline that only builds the same frames with Scapy (with ICRC), on the same machine.

    python bench/bench_emulator.py [--rounds 5] [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time
import warnings

from roce.emu.scenario import Scenario, run_scenario

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


if __name__ == "__main__":
    main()
