"""Real-transport benchmark: two emulator processes over a veth pair between two network
namespaces, as ``roce emulate --listen`` / ``--connect`` runs them.

* throughput: RC WRITE of 64 KiB messages (path MTU 4096, 16 outstanding), messages/s and
  MB/s of payload, median of the rounds;
* latency: a 64-byte RC SEND posted alone (depth 1): post to completion, i.e. the SEND out
  and its ACK back, the median per round and the median of the rounds.

For both transports: raw Ethernet (AF_PACKET) and kernel UDP.  Needs root and iproute2;
creates its namespaces and removes them at the end (also on Ctrl-C).

    python bench/bench_transports.py [--rounds 3] [--count 400] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MTU = 9000
ADDR_A, ADDR_B = "192.168.178.1", "192.168.178.2"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Veth:
    """Namespaces ``A`` and ``B`` joined by a veth pair (IPv6 off, MTU 9000)."""

    def __init__(self) -> None:
        tag = f"{os.getpid()}"
        self.ns = (f"rocebench{tag}A", f"rocebench{tag}B")
        self.ifs = (f"rb{tag[-8:]}a", f"rb{tag[-8:]}b")
        try:
            for ns in self.ns:
                ip("netns", "add", ns)
                subprocess.run(["ip", "netns", "exec", ns, "sh", "-c",
                                "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6"],
                               capture_output=True, timeout=30)
            ip("link", "add", self.ifs[0], "netns", self.ns[0], "mtu", str(MTU), "type",
               "veth", "peer", "name", self.ifs[1], "netns", self.ns[1], "mtu", str(MTU))
            for ns, dev, addr in zip(self.ns, self.ifs, (ADDR_A, ADDR_B)):
                ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "link", "set", dev, "up")
            time.sleep(0.5)  # carrier
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def run_pair(v: Veth, transport: str, args: list[str]) -> dict:
    """One listener/connector run; the connector's summary."""
    roce = [sys.executable, "-m", "roce", "emulate", "-T", "json"]
    if transport == "raw":
        lst, con = ["-i", v.ifs[1]], ["-i", v.ifs[0]]
    else:
        lst = con = ["--transport", "udp"]
    listener = subprocess.Popen(["ip", "netns", "exec", v.ns[1], *roce, "--listen", *lst],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        res = subprocess.run(["ip", "netns", "exec", v.ns[0], *roce, "--connect", ADDR_B,
                              *con, *args], capture_output=True, text=True, timeout=300)
        listener.wait(60)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    if res.returncode != 0:
        raise RuntimeError(f"connector failed ({res.returncode}): {res.stderr}")
    summary = json.loads(res.stdout)
    if not summary["data_verified"]:
        raise RuntimeError("the run did not verify its data")
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=400, help="64 KiB WRITEs per round")
    ap.add_argument("--pings", type=int, default=1000, help="64-byte SENDs per round")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_transports: needs root (network namespaces, raw sockets)",
              file=sys.stderr)
        return 1
    v = Veth()
    rows = []
    try:
        for transport in ("raw", "udp"):
            tput = [run_pair(v, transport, ["--op", "write", "--size", "64K", "--count",
                                            str(args.count), "--mtu", "4096", "--depth", "16"])
                    for _ in range(args.rounds)]
            lat = [run_pair(v, transport, ["--op", "send", "--size", "64", "--count",
                                           str(args.pings), "--mtu", "4096", "--depth", "1"])
                   for _ in range(args.rounds)]
            msgs = statistics.median(s["posted"] / (s["wall_ns"] / 1e9) for s in tput)
            mbs = statistics.median(s["goodput_mbps"] for s in tput)
            retx = sum(s["retransmitted"] for s in tput)
            lat_us = statistics.median(s["latency_us"]["median"] for s in lat)
            p99 = statistics.median(s["latency_us"]["p99"] for s in lat)
            rows.append((transport, msgs, mbs, retx, lat_us, p99))
    finally:
        v.close()
    head = ("transport", "WRITE 64 KiB msg/s", "MB/s", "retransmitted", "SEND 64 B RTT us",
            "p99 us")
    cells = [(t, f"{m:,.0f}", f"{b:,.1f}", str(r), f"{lt:.0f}", f"{p:.0f}")
             for t, m, b, r, lt, p in rows]
    print(f"{os.cpu_count()} CPUs, veth MTU {MTU}, path MTU 4096, depth 16; "
          f"{args.rounds} rounds, medians")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for c in cells:
            print("| " + " | ".join(c) + " |")
    else:
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        for c in cells:
            print("  ".join(x.rjust(w) if i else x.ljust(w)
                            for i, (x, w) in enumerate(zip(c, widths))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
