"""Families benchmark: `roce decode` one-line on native InfiniBand and on ERSPAN-mirrored
RoCE, against tshark on the same packets, in one run.

The capture is the emulator's (bench_decode.make_capture: mixed WRITE/READ/SEND/ATOMIC,
0.1% loss), re-framed by `roce craft`'s family code (roce.families.craft): as native
InfiniBand in pcap link type 247, and as ERSPAN type II.  tshark 4.0 does not read pcap
link type 247, so it is timed on the same InfiniBand packets as ERF INFINIBAND records
(link type 197, 16 more bytes a packet); roce is timed on both.

    python bench/bench_families.py [--rounds 5] [--packets 200000] [--markdown]
                                   [--baseline /path/to/base/venv/bin/roce]

``--baseline`` also times plain RoCE (`decode`, `decode -V`, `stats`) with the `roce` of
another revision (e.g. main built in its own venv) in the same run, rounds interleaved:
the registry must not cost RoCE speed (ratios within 5%).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from bench_decode import make_capture, roce_entry_point, wall  # noqa: E402

from roce.families import craft, erf  # noqa: E402
from roce.pcapio import PcapWriter, open_capture  # noqa: E402


def reframe(src: Path, dst: Path, how: str) -> int:
    args = SimpleNamespace(vl=0, sl=0, dlid=1, slid=2, span_id=7, link="ib", encap=None)
    n = 0
    linktype = {"ib": 247, "erf": 197, "erspan2": 1}[how]
    with PcapWriter(dst, linktype=linktype) as w:
        for fr in open_capture(src):
            if how == "erspan2":
                data = craft.encap(fr.data, "erspan2", n, 7)
            else:
                data = craft.to_ib(fr.data, args)
                if how == "erf":
                    data = erf.record(data)
            w.write(data, ts_ns=fr.ts_ns)
            n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--baseline", metavar="ROCE", help="roce executable of the base revision")
    args = ap.parse_args()
    roce_cmd = roce_entry_point()
    tshark = shutil.which("tshark")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        base = Path(d) / "roce.pcap"
        n = make_capture(base, args.packets)
        caps = {how: Path(d) / f"{how}.pcap" for how in ("ib", "erf", "erspan2")}
        for how, path in caps.items():
            reframe(base, path, how)
        pairs = [
            ("native IB one-line (247; tshark on ERF 197)", caps["ib"], caps["erf"]),
            ("native IB one-line, both on ERF 197", caps["erf"], caps["erf"]),
            ("ERSPAN II one-line", caps["erspan2"], caps["erspan2"]),
            ("plain RoCE one-line (same run)", base, base),
        ]
        for name, ours_path, their_path in pairs:
            ours = wall([roce_cmd, "decode", str(ours_path)], args.rounds)
            theirs = wall([tshark, "-n", "-r", str(their_path)], args.rounds) if tshark \
                else float("nan")
            rows.append((name, n / ours, n / theirs, theirs / ours))
        base_rows = []
        if args.baseline:
            for name, extra in (("decode (one line)", []), ("decode -V", ["-V"]),
                                ("stats", None)):
                cmd = ["stats", str(base)] if extra is None else ["decode", *extra, str(base)]
                ours_t, base_t = [], []
                for _ in range(args.rounds):  # interleaved: load drifts hit both alike
                    ours_t.append(wall([roce_cmd, *cmd], 1))
                    base_t.append(wall([args.baseline, *cmd], 1))
                ours_t.sort()
                base_t.sort()
                base_rows.append((name, n / ours_t[len(ours_t) // 2],
                                  n / base_t[len(base_t) // 2]))
    print(f"{n} packets, {args.rounds} rounds, median wall time; "
          f"tshark {'found' if tshark else 'MISSING'}")
    if args.markdown:
        print("| command | roce packets/s | tshark packets/s | ratio | target |")
        print("|---|---:|---:|---:|---:|")
        for name, ours, theirs, ratio in rows:
            print(f"| {name} | {ours:,.0f} | {theirs:,.0f} | {ratio:.1f}x | >= 3x |")
    else:
        for name, ours, theirs, ratio in rows:
            print(f"{name:<46} {ours:>12,.0f} {theirs:>13,.0f} {ratio:>6.1f}x")
    if base_rows:
        print("\nplain RoCE, this revision against the baseline (packets/s, same run):")
        for name, ours, basev in base_rows:
            print(f"| {name} | {ours:,.0f} | {basev:,.0f} | {ours / basev:.3f} |")


if __name__ == "__main__":
    main()
