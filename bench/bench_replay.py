"""Replay benchmark: ``roce replay --topspeed`` against ``tcpreplay --topspeed`` on the same
capture over a veth pair between two network namespaces (made here, removed at the end),
and, unless ``--no-pacing``, how close each tool gets to a requested ``--pps`` as seen by
tcpdump on the receiving end.

    sudo python bench/bench_replay.py [--rounds 5] [--frames 10000] [--loop 20] [--markdown]

Top speed: each round replays the capture ``--loop`` times with each tool, the tools
alternating which goes first; the table gives the median frames/s each reports (both count
from the first to the last send, capture preloaded: ``tcpreplay -K``) and the ratio
roce / tcpreplay (higher is better for roce).  The receiving interface's counters confirm
that every frame arrived.  Needs root, iproute2 and tcpreplay (``apt-get install
tcpreplay``); without tcpreplay only roce's numbers are printed.
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import netns  # noqa: E402  (the namespace helpers the tests use)

import roce  # noqa: E402
from roce.pcapio import PcapWriter, open_capture  # noqa: E402

TCPREPLAY = shutil.which("tcpreplay")
TCPDUMP = shutil.which("tcpdump")


def write_capture(path: Path, payload: int, n: int) -> int:
    """``n`` RC RDMA WRITE Only frames with ``payload`` bytes, PSNs counting; frame size."""
    with PcapWriter(path) as w:
        for i in range(n):
            frame = roce.craft("RC_RDMA_WRITE_ONLY", bytes([i & 0xFF]) * payload, dqpn=0x11,
                               psn=i & 0xFFFFFF, va=0x10000 + i * payload, rkey=0x22).to_bytes()
            w.write(frame, 1_700_000_000_000_000_000 + i * 10_000)
    return len(frame)


def rx_packets(pair: netns.VethPair) -> int:
    res = subprocess.run(["ip", "-n", pair.ns_b, "-s", "-j", "link", "show", pair.if_b],
                         capture_output=True, text=True, check=True)
    import json

    return json.loads(res.stdout)[0]["stats64"]["rx"]["packets"]


def run_roce(pair: netns.VethPair, path: Path, *extra: str) -> tuple[float, str]:
    res = pair.run(pair.ns_a, pair.roce("replay", str(path), "-i", pair.if_a, *extra),
                   timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"roce replay failed: {res.stderr}")
    m = re.search(r"; (\d+) pps", res.stdout)
    return (float(m.group(1)) if m else 0.0), res.stdout


def run_tcpreplay(pair: netns.VethPair, path: Path, *extra: str) -> tuple[float, str]:
    assert TCPREPLAY is not None
    res = pair.run(pair.ns_a, [TCPREPLAY, "-q", "-K", "-i", pair.if_a, *extra, str(path)],
                   timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"tcpreplay failed: {res.stderr or res.stdout}")
    m = re.search(r"([\d.]+) pps", res.stdout)
    return (float(m.group(1)) if m else 0.0), res.stdout


def topspeed(pair: netns.VethPair, path: Path, frames: int, loop: int,
             rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"roce": [], "tcpreplay": []}
    tools = [("roce", run_roce)] + ([("tcpreplay", run_tcpreplay)] if TCPREPLAY else [])
    for r in range(rounds):
        order = tools if r % 2 == 0 else tools[::-1]
        for name, fn in order:
            before = rx_packets(pair)
            pps, _ = fn(pair, path, "--topspeed", f"--loop={loop}")
            arrived = rx_packets(pair) - before
            if arrived < frames * loop:
                print(f"  note: {name} round {r + 1}: {frames * loop - arrived} frames lost",
                      file=sys.stderr)
            results[name].append(pps)
    return results


def received_rate(pair: netns.VethPair, tmp: Path, count: int, send: list[str]) -> float:
    """Frames/s seen by tcpdump on B while ``send`` runs in A (first to last frame)."""
    assert TCPDUMP is not None
    out, err = tmp / "rx.pcap", tmp / "rx.err"
    proc = pair.popen(pair.ns_b, [TCPDUMP, "-i", pair.if_b, "-w", str(out), "-U",
                                  "--immediate-mode", "-n", "-s", "256", "-B", "32768",
                                  "--time-stamp-precision", "nano", "-c", str(count),
                                  "udp port 4791"], stdout=subprocess.DEVNULL,
                      stderr=err.open("w"))
    try:
        netns.wait_for_text(err, "listening", proc)
        res = pair.run(pair.ns_a, send, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"{send[0]} failed: {res.stderr or res.stdout}")
        proc.wait(30)
    finally:
        pair.stop(proc)
    with open_capture(out) as reader:
        stamps = [f.ts_ns for f in reader]
    if len(stamps) < count:
        print(f"  note: tcpdump saw {len(stamps)} of {count} frames", file=sys.stderr)
    return (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9)


def pacing(pair: netns.VethPair, tmp: Path, rounds: int) -> list[tuple]:
    """(target pps, roce median, roce timing error text, tcpreplay median) per target."""
    rows = []
    for target, n in ((10_000, 3000), (50_000, 10_000), (100_000, 20_000)):
        path = tmp / f"pace{target}.pcap"
        write_capture(path, 64, n)
        ours, theirs, errors = [], [], []
        for _ in range(rounds):
            argv = pair.roce("replay", str(path), "-i", pair.if_a, "--pps", str(target))
            ours.append(received_rate(pair, tmp, n, argv))
            _, text = run_roce(pair, path, "--pps", str(target))
            m = re.search(r"timing error mean ([\d.]+) us, max ([\d.]+) us", text)
            if m:
                errors.append((float(m.group(1)), float(m.group(2))))
            if TCPREPLAY:
                argv = [TCPREPLAY, "-q", "-K", "-i", pair.if_a, f"--pps={target}", str(path)]
                theirs.append(received_rate(pair, tmp, n, argv))
        mean = statistics.median(e[0] for e in errors) if errors else float("nan")
        worst = max(e[1] for e in errors) if errors else float("nan")
        rows.append((target, statistics.median(ours), f"{mean:.1f} / {worst:.0f}",
                     statistics.median(theirs) if theirs else None))
    return rows


def table(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    if markdown:
        lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
                 "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"
                  for r in rows]
    else:
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per tool (median)")
    ap.add_argument("--frames", type=int, default=10000, help="frames in the capture")
    ap.add_argument("--loop", type=int, default=20, help="replays of the capture per round")
    ap.add_argument("--pacing-rounds", type=int, default=3)
    ap.add_argument("--no-pacing", action="store_true", help="top speed only")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    reason = netns.unavailable_reason()
    if reason:
        print(f"bench_replay: {reason}", file=sys.stderr)
        return 1
    if TCPREPLAY is None:
        print("bench_replay: tcpreplay not found (apt-get install tcpreplay): roce only",
              file=sys.stderr)
    print(f"# roce replay vs tcpreplay over veth ({platform.python_implementation()} "
          f"{platform.python_version()}, {platform.machine()}, kernel {platform.release()}, "
          f"compiled fast path: {roce.COMPILED})")
    t0 = time.monotonic()
    with netns.veth_pair() as pair, tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        rows = []
        for payload in (64, 1024):
            path = tmp / f"top{payload}.pcap"
            size = write_capture(path, payload, args.frames)
            res = topspeed(pair, path, args.frames, args.loop, args.rounds)
            ours = statistics.median(res["roce"])
            row = [f"{size} B", f"{args.frames * args.loop}", f"{ours:,.0f}",
                   f"{ours * size * 8 / 1e9:.2f}"]
            if res["tcpreplay"]:
                theirs = statistics.median(res["tcpreplay"])
                row += [f"{theirs:,.0f}", f"{theirs * size * 8 / 1e9:.2f}",
                        f"{ours / theirs:.2f}x"]
            else:
                row += ["-", "-", "-"]
            rows.append(row)
        print(f"\n## --topspeed, median of {args.rounds} rounds\n")
        print(table(["frame", "frames/round", "roce pps", "roce Gb/s", "tcpreplay pps",
                     "tcpreplay Gb/s", "ratio"], rows, args.markdown))
        if not args.no_pacing and TCPDUMP:
            prow = []
            for target, ours, err, theirs in pacing(pair, tmp, args.pacing_rounds):
                prow.append([f"{target:,}", f"{ours:,.0f}",
                             f"{(ours - target) / target:+.1%}", err,
                             "-" if theirs is None else f"{theirs:,.0f}",
                             "-" if theirs is None else f"{(theirs - target) / target:+.1%}"])
            print(f"\n## --pps N, rate seen by tcpdump on the receiving side, median of "
                  f"{args.pacing_rounds}\n")
            print(table(["target pps", "roce", "roce error", "roce timing err mean/max us",
                         "tcpreplay", "tcpreplay error"], prow, args.markdown))
    print(f"\n({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
