"""Scapy layers benchmark: building 1 KB RDMA WRITE Only frames with roce.wire.layers (ICRC
through roce's fast path) against stock scapy.contrib.roce (its own ICRC), in one run.

    python bench/bench_scapy.py [--rounds 7] [--frames 300] [--payload 1024]

Both builds make the same frame, byte for byte (checked before timing): Ether / IPv4 / UDP
(checksum 0) / BTH / RETH / 1 KB payload / ICRC; contrib has no RETH layer, so its RETH rides
in Raw.  Each line is the median over the rounds of the time per frame, from constructing the
layers to ``bytes()``.  "RETH in Raw" builds our frame with contrib's layer count (each layer
in a ``/`` chain costs Scapy a copy); "ICRC given" lines skip the ICRC computation; the last
two lines time the ICRC step alone on packets already built.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings
from collections.abc import Callable

import roce

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import scapy.contrib.roce as contrib
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from roce.headers import encode
from roce.wire.layers import BTH, RETH, unbind

# Both sides build with every field given, so neither needs bindings: unbinding leaves contrib's
# classes and module exactly as Scapy made them (bound, scapy.contrib.roce.BTH would be ours).
unbind()

SRC, DST = "02:00:00:00:00:01", "02:00:00:00:00:02"


def head(i: int) -> Packet:
    return (Ether(src=SRC, dst=DST) / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF", id=i)
            / UDP(sport=0xC000, dport=4791, chksum=0))


def ours(i: int, body: bytes, icrc: int | None = None) -> Packet:
    return (head(i) / BTH(opcode="RC_RDMA_WRITE_ONLY", destqp=0x11, psn=i, icrc=icrc)
            / RETH(va=0x10000, r_key=0x22, dmalen=len(body)) / Raw(body))


def ours_flat(i: int, body: bytes) -> Packet:
    """Our BTH with the RETH in Raw, as contrib must: same layer count as ``stock``."""
    reth = encode("reth", {"va": 0x10000, "r_key": 0x22, "dmalen": len(body)})
    return (head(i) / BTH(opcode="RC_RDMA_WRITE_ONLY", destqp=0x11, psn=i)
            / Raw(reth + body))


def stock(i: int, body: bytes, icrc: int | None = None) -> Packet:
    reth = encode("reth", {"va": 0x10000, "r_key": 0x22, "dmalen": len(body)})
    return (head(i) / contrib.BTH(opcode=0x0A, dqpn=0x11, psn=i, padcount=-len(body) & 3,
                                  icrc=icrc)
            / Raw(reth + body + bytes(-len(body) & 3)))


def per_frame(fns: dict[str, Callable[[int], object]], frames: int,
              rounds: int) -> dict[str, float]:
    """Median seconds per frame of each function over ``rounds`` rounds of ``frames`` calls.
    Rounds interleave the functions, so that a slower spell of the machine hits them all."""
    for fn in fns.values():  # warm-up
        for i in range(min(frames, 20)):
            fn(i)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for i in range(frames):
                fn(i)
            samples[name].append((time.perf_counter() - t) / frames)
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--payload", type=int, default=1024)
    args = ap.parse_args()
    if args.rounds < 5:
        ap.error("--rounds must be at least 5")
    body = bytes(range(256)) * (args.payload // 256) + bytes(args.payload % 256)

    # Same work on both sides: identical frames, and roce agrees the ICRC is right.
    for i in (0, 1, 77):
        mine, theirs = bytes(ours(i, body)), bytes(stock(i, body))
        assert mine == theirs, f"frame {i}: the two builds differ"
        assert roce.parse(mine).icrc_valid, f"frame {i}: bad ICRC"
    icrc0 = roce.parse(bytes(ours(0, body))).icrc

    # The ICRC step alone, on built packets: ours is BTH.build_done on the frame with its
    # placeholder (locate, CRC, write in); contrib's is BTH.compute_icrc.
    built = [ours(i, body) for i in range(args.frames)]
    unpatched = [(p[BTH], p.do_build()) for p in built]
    stocks = [stock(i, body) for i in range(args.frames)]
    t = per_frame({
        "roce.wire.layers, ICRC by roce.fast": lambda i: bytes(ours(i, body)),
        "scapy.contrib.roce, its ICRC": lambda i: bytes(stock(i, body)),
        "roce.wire.layers, RETH in Raw": lambda i: bytes(ours_flat(i, body)),
        "roce.wire.layers, ICRC given": lambda i: bytes(ours(i, body, icrc0)),
        "scapy.contrib.roce, ICRC given": lambda i: bytes(stock(i, body, icrc0)),
        "roce.craft().to_bytes() (no Scapy)": lambda i: roce.craft(
            "RC_RDMA_WRITE_ONLY", body, dqpn=0x11, psn=i, va=0x10000, rkey=0x22,
            dmalen=len(body), sport=0xC000, **{"ip.id": i}).to_bytes(),
        "roce.wire.layers ICRC step": lambda i: unpatched[i][0].build_done(unpatched[i][1]),
        "scapy.contrib.roce compute_icrc": lambda i: stocks[i][contrib.BTH].compute_icrc(None),
    }, args.frames, args.rounds)
    print(f"roce {roce.__version__} fast path={roce.COMPILED} python "
          f"{platform.python_version()} {platform.machine()}: {len(bytes(ours(0, body)))}-byte "
          f"RDMA WRITE Only frames ({args.payload} B payload), median of {args.rounds} rounds "
          f"x {args.frames} frames")
    for name, sec in t.items():
        print(f"  {name:<40} {sec * 1e6:9.1f} us/frame")
    ours_t, stock_t = t["roce.wire.layers, ICRC by roce.fast"], t["scapy.contrib.roce, its ICRC"]
    print(f"  build with ICRC: roce.wire.layers is {stock_t / ours_t:.2f}x as fast as "
          f"scapy.contrib.roce ({stock_t / t['roce.wire.layers, RETH in Raw']:.2f}x with the "
          "same layer count)")
    ours_i = t["roce.wire.layers ICRC step"]
    stock_i = t["scapy.contrib.roce compute_icrc"]
    print(f"  ICRC step: {stock_i / ours_i:,.0f}x as fast")


if __name__ == "__main__":
    main()
