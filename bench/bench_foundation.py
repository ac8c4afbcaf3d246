"""Foundation benchmark: ICRC, craft, parse and bulk scan against Scapy, zlib, ISA-L and a
plain struct loop, on the same frames, in one run.  Prints a table of medians and ratios.

    python bench/bench_foundation.py [--rounds 5] [--frames 2000] [--markdown]

Ratios are "how many times faster roce is" (higher is better), except the ISA-L line for the
ICRC batch, which is our bytes/s as a percentage of ISA-L's.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import struct
import time
import warnings
import zlib
from collections.abc import Callable

import roce
from roce import fast

warnings.filterwarnings("ignore")
from scapy.contrib.roce import BTH as ScapyBTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

try:
    from isal import isal_zlib
except ImportError:  # pragma: no cover
    isal_zlib = None


def timed(fn: Callable[[], object], rounds: int) -> float:
    """Median seconds of ``rounds`` calls of fn (after one warm-up)."""
    fn()
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def frames_for(payload: int, n: int) -> list[bytes]:
    return [roce.craft("RC_RDMA_WRITE_ONLY", bytes([i & 0xFF]) * payload, dqpn=0x11, psn=i,
                       va=0x10000 + i * payload, rkey=0x22, dmalen=payload,
                       id=i & 0xFFFF).to_bytes() for i in range(n)]


def scapy_packet(payload: int, i: int) -> object:
    # The RETH rides in Raw: Scapy's RoCE layer has no RETH.
    reth = struct.pack("!QII", 0x10000 + i * payload, 0x22, payload)
    return (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
            / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF", id=i & 0xFFFF)
            / UDP(sport=0xC000, dport=4791, chksum=0)
            / ScapyBTH(opcode=0x0A, dqpn=0x11, psn=i)
            / Raw(reth + bytes([i & 0xFF]) * payload))


def run(rounds: int, n: int) -> list[tuple[str, str, float, float, str]]:
    rows: list[tuple[str, str, float, float, str]] = []
    for payload in (1024, 4096):
        rows += run_size(payload, rounds, n)
    return rows


def run_size(payload: int, rounds: int, n: int) -> list[tuple[str, str, float, float, str]]:
    rows: list[tuple[str, str, float, float, str]] = []
    frames = frames_for(payload, n)
    total_bytes = sum(map(len, frames))
    ns = max(n // 20, 20)  # Scapy is slow: time a subset, report per frame
    dissected = [Ether(f) for f in frames[:ns]]

    def scapy_icrc() -> None:
        for p in dissected:
            p[ScapyBTH].compute_icrc(None)

    def ours_icrc_each() -> None:
        check = fast.icrc_check
        for f in frames:
            check(f)

    def ours_icrc_batch() -> None:
        fast.icrc_batch(frames)

    def zlib_each() -> None:
        c = zlib.crc32
        for f in frames:
            c(f)

    def isal_each() -> None:
        c = isal_zlib.crc32
        for f in frames:
            c(f)

    t_scapy = timed(scapy_icrc, rounds) / ns
    t_each = timed(ours_icrc_each, rounds) / n
    t_batch = timed(ours_icrc_batch, rounds) / n
    t_zlib = timed(zlib_each, rounds) / n
    tag = f"{payload // 1024}K"
    rows.append((f"ICRC per frame ({tag})", "scapy compute_icrc", t_each, t_scapy,
                 f"{t_scapy / t_each:,.0f}x"))
    rows.append((f"ICRC batch ({tag})", "scapy compute_icrc", t_batch, t_scapy,
                 f"{t_scapy / t_batch:,.0f}x"))
    rows.append((f"ICRC batch ({tag})", "zlib.crc32 per frame", t_batch, t_zlib,
                 f"{t_zlib / t_batch:.2f}x"))
    if isal_zlib is not None:
        t_isal = timed(isal_each, rounds) / n
        big = b"".join(frames)
        t_isal_big = timed(lambda: isal_zlib.crc32(big), rounds) / n
        rows.append((f"ICRC batch ({tag})", "isal crc32 per frame", t_batch, t_isal,
                     f"{t_isal / t_batch:.0%} of ISA-L B/s"))
        rows.append((f"ICRC batch ({tag})", "isal crc32, one buffer", t_batch, t_isal_big,
                     f"{t_isal_big / t_batch:.0%} of ISA-L B/s"))
    gbps = total_bytes / (t_batch * n) / 1e9
    rows.append((f"ICRC batch ({tag})", f"{gbps:.1f} GB/s, kernel {fast_kernel()}",
                 t_batch, t_batch, "-"))

    def ours_craft() -> None:
        body = bytes(payload)
        for i in range(n):
            roce.craft("RC_RDMA_WRITE_ONLY", body, dqpn=0x11, psn=i, va=0x10000,
                       rkey=0x22, dmalen=payload).to_bytes()

    def scapy_build() -> None:
        for i in range(ns):
            bytes(scapy_packet(payload, i))

    t_craft = timed(ours_craft, rounds) / n
    t_sbuild = timed(scapy_build, rounds) / ns
    rows.append((f"craft+to_bytes ({tag})", "scapy build with ICRC", t_craft, t_sbuild,
                 f"{t_sbuild / t_craft:,.0f}x"))

    def ours_parse() -> None:
        parse = roce.parse
        for f in frames:
            parse(f)

    def ours_parse_full() -> None:
        parse = roce.parse
        for f in frames:
            parse(f).headers  # noqa: B018 - decodes every header

    def scapy_parse() -> None:
        for f in frames[:ns]:
            Ether(f)

    t_parse = timed(ours_parse, rounds) / n
    t_full = timed(ours_parse_full, rounds) / n
    t_sparse = timed(scapy_parse, rounds) / ns
    rows.append((f"parse, headers on demand ({tag})", "scapy dissection", t_parse,
                 t_sparse, f"{t_sparse / t_parse:,.0f}x"))
    rows.append((f"parse + decode all headers ({tag})", "scapy dissection", t_full,
                 t_sparse, f"{t_sparse / t_full:,.0f}x"))

    cols = fast.scan_columns(n)

    def ours_scan() -> None:
        fast.scan(frames, cols=cols)

    def struct_loop() -> None:
        # The same columns the scan fills, with struct on known offsets (no validation).
        unpack = struct.unpack_from
        out = []
        for f in frames:
            op, flags, pkey, qp, psn = unpack("!BBHI4xI", f, 42)
            va, rkey, ln = unpack("!QII", f, 54)
            out.append((op, flags, pkey, qp & 0xFFFFFF, psn & 0xFFFFFF, va, rkey, ln))

    t_scan = timed(ours_scan, rounds) / n
    t_struct = timed(struct_loop, rounds) / n
    rows.append((f"bulk header scan ({tag})", "plain struct loop", t_scan, t_struct,
                 f"{t_struct / t_scan:.1f}x"))
    return rows


def fast_kernel() -> str:
    return fast._ext.crc32_impl() if fast._ext is not None else "zlib (no fast path)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    rows = run(args.rounds, args.frames)
    head = (f"roce {roce.__version__} fast path={roce.COMPILED} python "
            f"{platform.python_version()} {platform.machine()} ({args.rounds} rounds, median)")
    print(head)
    if args.markdown:
        print("| operation | compared with | roce per frame | other per frame | ratio |")
        print("|---|---|---:|---:|---:|")
        for what, other, ours, theirs, ratio in rows:
            print(f"| {what} | {other} | {ours * 1e6:.3f} us | {theirs * 1e6:.3f} us | {ratio} |")
    else:
        print(f"{'operation':<34} {'compared with':<36} {'roce':>11} {'other':>11}  ratio")
        for what, other, ours, theirs, ratio in rows:
            print(f"{what:<34} {other:<36} {ours * 1e6:>8.3f} us {theirs * 1e6:>8.3f} us"
                  f"  {ratio}")


if __name__ == "__main__":
    main()
