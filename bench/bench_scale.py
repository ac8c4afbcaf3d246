"""Scale: a leaf-spine permutation (32 hosts per leaf, 32 spines: 32 paths between leaves,
400 Gb/s, spraying, selective repeat, one message per host), at growing numbers of leaves,
each run a fresh process: its CPU time, peak memory (the kernel's maximum resident set),
packet-hops, tail FCT and whether its data verified; and the memory model fitted to them.

Two message sizes separate what a message costs from the rest: the slope of the peak
against the hosts at a 4 KiB message is the network's and QPs' own state per host; the
difference between the two sizes per host is the frames in flight (WRITE regions hold seeded
patterns, not buffers: roce.emu.core.patterned; ``--real`` holds the buffers in full, as
runs did before).  A spine of 100 or more 400 Gb/s ports gets a buffer of what its reserves
and PFC headroom set apart plus the default 12 MiB (the default leaves it no shared pool).
The model's other terms are measured apart: one frame in flight (its bytes, its event) and
one QP pair (tracemalloc).

    python bench/bench_scale.py [--leaves 2,4,8,16] [--size 1M] [--real]
    python bench/bench_scale.py --leaves 256 --no-small      # 8,192 hosts
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, time
from roce.emu import defaults
from roce.emu.net import topology
from roce.emu.net.runner import NetRun, NetScenario, options
leaves, size, real = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "real"
spec = f"leafspine:{leaves},32,32"
sc = NetScenario(topology=spec, traffic="permutation", size=size, count=1, rate_gbps=400.0,
                 lb="spray", recovery="sr")
# the default buffer where reserves and PFC headroom leave it a shared pool; else (a spine
# of 100 or more 400 Gb/s ports) what they set apart plus the default
carve = max(topology.carved(topology.parse(spec), options(sc, direct=False),
                            topology.DscpClassifier()).values())
if defaults.BUFFER - carve < sc.mtu + 128:
    sc.buffer = carve + defaults.BUFFER
cpu0 = time.process_time()
run = NetRun(sc, real_memory=real)
built = time.process_time() - cpu0
built_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
s = run.run()
print(json.dumps({"hosts": leaves * 32, "size": size, "ok": s.data_verified,
                  "cpu_s": s.cpu_s, "hops": s.hops, "p99_us": s.fct_ns["p99"] / 1e3,
                  "mean_us": s.fct_ns["mean"] / 1e3,
                  "buffer": sc.buffer, "build_s": built, "built_rss": built_rss,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run(leaves: int, size: int, real: bool = False) -> dict:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.close(r)
        os.execvpe(sys.executable, [sys.executable, "-c", CHILD, str(leaves), str(size),
                                    "real" if real else "patterned"],
                   {**os.environ, "PYTHONPATH": str(TREE)})
    os.close(w)
    out = b""
    while chunk := os.read(r, 1 << 16):
        out += chunk
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"leafspine:{leaves},32,32 failed")
    res = json.loads(out.decode().strip().splitlines()[-1])
    res["process_cpu_s"] = ru.ru_utime + ru.ru_stime
    return res


def slope(rows: list[dict]) -> float:
    """Least-squares bytes per host of the peak RSS."""
    xs = [r["hosts"] for r in rows]
    ys = [r["peak_rss"] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
            / sum((x - mx) ** 2 for x in xs))


def frame_bytes(mtu: int = 4096) -> int:
    """What one full WRITE frame costs while it crosses a link: the frame (Ethernet, IPv4,
    UDP, BTH, RETH, ``mtu`` bytes of payload, ICRC) as a ``bytes`` object, the event tuple
    that carries it and that event's time and sequence integers."""
    frame = bytes(14 + 20 + 8 + 12 + 16 + mtu + 4)
    event = (1 << 40, 1 << 30, print, frame)
    return (sys.getsizeof(frame) + sys.getsizeof(event) + sys.getsizeof(event[0])
            + sys.getsizeof(event[1]))


def qp_pair_bytes(size: int, real: bool) -> float:
    """Bytes one more QP pair (its two QPs, CQ entries, regions) takes between two hosts:
    tracemalloc of a run built with 101 pairs less one with 1, over 100."""
    import tracemalloc

    from roce.emu.net.runner import NetRun, NetScenario

    def built(qps: int) -> int:
        tracemalloc.start()
        try:
            run = NetRun(NetScenario(topology="incast:1", size=size, count=1, qps=qps),
                         real_memory=real)
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
            del run

    return (built(101) - built(1)) / 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--leaves", default="2,4,8,16")
    ap.add_argument("--size", default=str(1 << 20))
    ap.add_argument("--no-small", action="store_true",
                    help="only the --size rows (no 4 KiB rows, no model fit)")
    ap.add_argument("--real", action="store_true",
                    help="hold every buffer in full (the runs before regions held patterns)")
    args = ap.parse_args()
    size = int(args.size.rstrip("M")) << 20 if args.size.endswith("M") else int(args.size)
    leaves = [int(x) for x in args.leaves.split(",")]
    print("| hosts | message | data verified | CPU s (loop) | CPU s (process) | packet-hops | "
          "hops / CPU-s | FCT p99 | peak RSS | largest switch buffer |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    by_size: dict[int, list[dict]] = {}
    for n in leaves:
        for sz in (size,) if args.no_small else (4096, size):
            r = run(n, sz, args.real)
            by_size.setdefault(sz, []).append(r)
            print(f"| {r['hosts']:,} | {sz:,} B | {'yes' if r['ok'] else 'NO'} | "
                  f"{r['cpu_s']:.2f} | {r['process_cpu_s']:.2f} | {r['hops']:,} | "
                  f"{r['hops'] / r['cpu_s']:,.0f} | {r['p99_us']:.1f} us | "
                  f"{r['peak_rss'] / 2**20:,.0f} MiB | {r['buffer'] / 2**20:.1f} MiB |",
                  flush=True)
    if len(leaves) > 1 and not args.no_small:
        small, big = slope(by_size[4096]), slope(by_size[size])
        frame = frame_bytes()
        print(f"\nper host: {small / 1024:,.1f} KiB at a 4 KiB message (network, QPs, "
              f"frames in flight); {big / 1024:,.1f} KiB at {size:,} B, so "
              f"{(big - small) / size:.2f} x the message size more")
        print(f"per frame in flight (4 KiB payload): {frame:,} B, so "
              f"{(big - small) / frame:,.0f} more frames in flight per host at peak")
    for sz in () if args.no_small else (4096, size):
        print(f"per QP pair, {sz:,} B messages: {qp_pair_bytes(sz, args.real):,.0f} B")


if __name__ == "__main__":
    main()
