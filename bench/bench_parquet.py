"""Columnar and many-file benchmark: `roce decode -T parquet` against `tshark -T fields -E
separator=,` on the same 200,000-packet capture and the same fields; the Parquet file read
back (pyarrow and DuckDB) against `roce decode -T fields`, every row; peak RSS writing every
column of a 200 MB capture; `roce stats` over the capture cut into 10 files with `-j 2`
against `-j 1` (and `--merge`).  Wall-clock medians, process start-up included.

    python bench/bench_parquet.py [--rounds 3] [--packets 200000] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_decode import ENV, make_big_capture, make_capture, peak_rss_mb, roce_entry_point, wall

import roce
from roce.pcapio import PcapWriter, open_capture

# (roce name, tshark name): the same facts; tshark prints some in hex, which costs it nothing
FIELDS = [("frame.number", "frame.number"), ("frame.time_epoch", "frame.time_epoch"),
          ("ip.src", "ip.src"), ("ip.dst", "ip.dst"), ("udp.srcport", "udp.srcport"),
          ("bth.opcode", "infiniband.bth.opcode"), ("bth.destqp", "infiniband.bth.destqp"),
          ("bth.psn", "infiniband.bth.psn"), ("bth.a", "infiniband.bth.a"),
          ("reth.va", "infiniband.reth.va"), ("reth.r_key", "infiniband.reth.r_key"),
          ("reth.dmalen", "infiniband.reth.dmalen"),
          ("aeth.syndrome", "infiniband.aeth.syndrome"), ("aeth.msn", "infiniband.aeth.msn")]
NS = 1_000_000_000


def split(src: Path, directory: Path, parts: int) -> None:
    frames = list(open_capture(src))
    step = -(-len(frames) // parts)
    directory.mkdir()
    for i in range(parts):
        with PcapWriter(directory / f"part{i:02d}.pcap") as w:
            for f in frames[i * step:(i + 1) * step]:
                w.write(f.data, ts_ns=f.ts_ns, origlen=f.origlen)


def round_trip(roce_cmd: str, cap: Path, out: Path) -> int:
    """Rows whose every field read back (pyarrow, and DuckDB) differs from -T fields."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [n for n, _ in FIELDS]
    fields = subprocess.run([roce_cmd, "decode", "-T", "fields",
                             *[a for n in names for a in ("-e", n)], str(cap)],
                            capture_output=True, text=True, check=True, env=ENV).stdout
    want = [line.split("\t") for line in fields.splitlines()]

    def text(v: object, time: bool) -> str:
        if v is None:
            return ""
        if time:
            return f"{v // NS}.{v % NS:09d}"  # type: ignore[operator]
        if isinstance(v, bool):
            return "1" if v else "0"
        return str(v)

    table = pq.read_table(out)
    cols = [table.column(n).cast(pa.int64()) if n == "frame.time_epoch" else table.column(n)
            for n in names]
    got = [[text(v, n == "frame.time_epoch") for v, n in zip(row, names)]
           for row in zip(*(c.to_pylist() for c in cols))]
    select = ", ".join(f'epoch_ns("{n}")' if n == "frame.time_epoch" else f'"{n}"'
                       for n in names)
    rows = duckdb.sql(f"SELECT {select} FROM read_parquet('{out}') "
                      'ORDER BY "frame.number"').fetchall()
    db = [[text(v, n == "frame.time_epoch") for v, n in zip(row, names)] for row in rows]
    bad = sum(a != b for a, b in zip(got, want)) + sum(a != b for a, b in zip(db, want))
    return bad + abs(len(got) - len(want)) + abs(len(db) - len(want))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, value in (("--rounds", 3), ("--packets", 200_000)):
        ap.add_argument(flag, type=int, default=value)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    roce_cmd, tshark = roce_entry_point(), shutil.which("tshark")
    with tempfile.TemporaryDirectory() as d:
        cap, out = Path(d) / "bench.pcap", Path(d) / "out.parquet"
        n = make_capture(cap, args.packets)
        mb = cap.stat().st_size / 1e6
        ours = wall([roce_cmd, "decode", "-T", "parquet", "-w", str(out),
                     *[a for r, _ in FIELDS for a in ("-e", r)], str(cap)], args.rounds)
        theirs = wall([tshark, "-r", str(cap), "-T", "fields", "-E", "separator=,",
                       *[a for _, t in FIELDS for a in ("-e", t)]], args.rounds) \
            if tshark else float("nan")
        mismatches = round_trip(roce_cmd, cap, out)
        every = wall([roce_cmd, "decode", "-T", "parquet", "-w", str(out), str(cap)],
                     args.rounds)
        parts = Path(d) / "parts"
        split(cap, parts, 10)
        j1 = wall([roce_cmd, "stats", "-j", "1", str(parts)], args.rounds)
        j2 = wall([roce_cmd, "stats", "-j", "2", str(parts)], args.rounds)
        merged = wall([roce_cmd, "stats", "--merge", str(parts)], args.rounds)
        single = wall([roce_cmd, "stats", str(cap)], args.rounds)
        big = Path(d) / "big.pcap"
        nbig = make_big_capture(big, 200_000_000)
        rss = peak_rss_mb([roce_cmd, "decode", "-T", "parquet", "-w", str(Path(d) / "b.pq"),
                           str(big)])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"roce {roce.__version__}, {n} packets ({mb:.0f} MB), {args.rounds} rounds, median "
          f"wall time, {cores} cores; tshark {'found' if tshark else 'MISSING'}; "
          f"python {sys.version.split()[0]}")
    rows = [
        (f"decode -T parquet, {len(FIELDS)} fields", n / ours, n / theirs, theirs / ours,
         ">= 5x vs tshark -T fields"),
        ("decode -T parquet, every column", n / every, n / theirs, theirs / every, "-"),
        ("stats, 10 files, -j 1", n / j1, float("nan"), 1.0, "-"),
        ("stats, 10 files, -j 2", n / j2, float("nan"), j1 / j2, "speed-up vs -j 1"),
        ("stats, 10 files, --merge", n / merged, float("nan"), single / merged,
         "vs one file"),
    ]
    if args.markdown:
        print("| command | roce packets/s | tshark packets/s | ratio | target |")
        print("|---|---:|---:|---:|---|")
        for name, a, b, ratio, target in rows:
            tb = "-" if b != b else f"{b:,.0f}"
            print(f"| {name} | {a:,.0f} | {tb} | {ratio:.2f}x | {target} |")
        print(f"\nRound trip of the {n}-packet Parquet file (pyarrow and DuckDB against "
              f"`roce decode -T fields`, every row): {mismatches} mismatching rows.")
        print(f"Peak RSS of `roce decode -T parquet` (every column) on a {nbig}-packet, "
              f"200 MB capture: {rss:.0f} MB (target < 150 MB)")
    else:
        for name, a, b, ratio, target in rows:
            print(f"{name:<36} {a:>12,.0f} pkt/s  {b:>12,.0f}  {ratio:6.2f}x  {target}")
        print(f"round trip mismatching rows: {mismatches}")
        print(f"peak RSS, every column, 200 MB capture ({nbig} packets): {rss:.0f} MB "
              "(target < 150 MB)")


if __name__ == "__main__":
    main()
