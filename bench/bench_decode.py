"""Decoder benchmark: `roce decode`, `roce decode -V`, `roce decode -T json` and `roce stats`
against tshark on the same generated 200,000-packet capture, in one run; plus the peak RSS of
`roce stats` on a ~200 MB capture.  Wall-clock medians of several rounds, roce and tshark
alternating round by round (process start-up included on both sides).

    python bench/bench_decode.py [--rounds 5] [--packets 200000] [--markdown]
                                 [--only decode,tree,json,stats] [--tree DIR] [--capture FILE]

``--tree DIR`` runs ``python -m roce`` from that source tree (``PYTHONPATH=DIR``) instead of
the ``roce`` script pip installed next to the interpreter; ``--capture FILE`` reuses a
capture ``make_capture`` wrote before (it takes a few seconds to make).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import roce
from roce.emu.net.runner import run_scenario
from roce.emu.scenario import Scenario
from roce.pcapio import PcapWriter, open_capture


def make_capture(path: Path, packets: int) -> int:
    """A realistic capture from the emulator: mixed WRITE/READ/SEND/ATOMIC over 64 KiB
    messages, MTU 1024, 0.1% loss (retransmissions, NAKs); cut at ``packets`` frames."""
    tmp = path.with_suffix(".full.pcap")
    count = max(packets // 45, 10)
    with PcapWriter(tmp) as w:
        s = run_scenario(Scenario(op="mixed", size=64 << 10, count=count, mtu=1024,
                                  loss=0.001, seed=5), w)
    assert s.data_verified
    n = 0
    with PcapWriter(path) as w:
        for f in open_capture(tmp):
            w.write(f.data, ts_ns=f.ts_ns)
            n += 1
            if n >= packets:
                break
    tmp.unlink()
    return n


def make_big_capture(path: Path, target_bytes: int) -> int:
    frames = [roce.craft("RC_RDMA_WRITE_MIDDLE", bytes(1024), dqpn=0x11, psn=i).to_bytes()
              for i in range(4096)]
    n = size = 0
    with PcapWriter(path) as w:
        while size < target_bytes:
            f = frames[n % 4096]
            w.write(f, ts_ns=n * 1000)
            size += len(f) + 16
            n += 1
    return n


# Run the commands as a user's shell would: with Python's bytecode cache (some sandboxes set
# PYTHONDONTWRITEBYTECODE, which makes every start-up recompile the package).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def roce_entry_point() -> str:
    """The ``roce`` script pip installed next to this interpreter.  ``shutil.which`` may find
    a version manager's shim first (pyenv's is a bash script that costs ~45 ms a start);
    tshark is run directly, so is roce."""
    here = Path(sys.executable).parent / "roce"
    return str(here) if here.exists() else shutil.which("roce") or "roce"


def wall(cmd: list[str], rounds: int) -> float:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=ENV)  # warm-up: page cache, bytecode cache
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       env=ENV)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def wall_pair(ours: list[str], theirs: list[str], rounds: int,
              env: dict[str, str] | None = None, cwd: Path | None = None
              ) -> tuple[float, float]:
    """Medians of ``ours`` and ``theirs`` run alternately, round by round, after one warm-up
    run of each: a change of load during the run weighs on both sides alike.  ``cwd``: where
    they run (``python -m`` imports from there first)."""
    env = env or ENV
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(rounds + 1):
        for side, cmd in enumerate((ours, theirs)):
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True, env=env, cwd=cwd)
            if i:  # round 0 warms the page cache and the bytecode cache
                samples[side].append(time.perf_counter() - t)
    return statistics.median(samples[0]), statistics.median(samples[1])


def peak_rss_mb(cmd: list[str], env: dict[str, str] | None = None,
                cwd: Path | None = None) -> float:
    """Peak RSS of a child (ru_maxrss of the one child we wait for)."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], "
            "stdout=subprocess.DEVNULL, check=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True,
                         check=True, env=env, cwd=cwd)
    return int(out.stdout.strip()) / 1024


ROWS = ("decode", "tree", "json", "stats")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--packets", type=int, default=200_000)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--only", default=",".join(ROWS),
                    help="comma-separated rows: " + ", ".join(ROWS))
    ap.add_argument("--tree", type=Path, help="run python -m roce from this source tree")
    ap.add_argument("--capture", type=Path, help="a capture made by make_capture before")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if only - set(ROWS):
        ap.error(f"--only: unknown rows {sorted(only - set(ROWS))}")
    env, cwd = ENV, None
    if args.tree is not None:  # run in the tree: python -m puts the working directory first
        roce_cmd = [sys.executable, "-m", "roce"]
        cwd = args.tree.resolve()
        env = {**ENV, "PYTHONPATH": str(cwd)}
    else:
        roce_cmd = [roce_entry_point()]
    tshark = shutil.which("tshark")
    with tempfile.TemporaryDirectory() as d:
        cap = (args.capture or Path(d) / "bench.pcap").resolve()
        if args.capture is None:
            n = make_capture(cap, args.packets)
        else:
            n = sum(1 for _ in open_capture(cap))
        mb = os.path.getsize(cap) / 1e6
        rows = []
        pairs = [
            ("decode", "decode (one line)", ["decode", str(cap)], ["-r", str(cap)], 5.0),
            ("tree", "decode -V (tree)", ["decode", "-V", str(cap)],
             ["-r", str(cap), "-V"], 3.0),
            ("json", "decode -T json", ["decode", "-T", "json", str(cap)],
             ["-r", str(cap), "-T", "json"], 6.0),
            ("stats", "stats vs tshark -T fields", ["stats", str(cap)],
             ["-r", str(cap), "-T", "fields", "-e", "infiniband.bth.opcode",
              "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp"], 10.0),
        ]
        for key, name, ours_args, ts_args, target in pairs:
            if key not in only:
                continue
            # the slow rows (tshark -V and -T json take 5-25 s a run) get half the rounds
            rounds = args.rounds if key in ("decode", "stats") else max(3, args.rounds // 2)
            if tshark:
                ours, theirs = wall_pair([*roce_cmd, *ours_args], [tshark, *ts_args], rounds,
                                         env, cwd)
            else:
                ours = statistics.median(
                    wall_pair([*roce_cmd, *ours_args], ["true"], rounds, env, cwd)[:1])
                theirs = float("nan")
            rows.append((name, n / ours, n / theirs, theirs / ours, target))
        rss = nbig = None
        if "stats" in only:
            big = Path(d) / "big.pcap"
            nbig = make_big_capture(big, 200_000_000)
            rss = peak_rss_mb([*roce_cmd, "stats", str(big)], env, cwd)
    where = f"python -m roce from {args.tree}" if args.tree else roce_cmd[0]
    print(f"roce {roce.__version__} ({where}), {n} packets ({mb:.0f} MB), {args.rounds} rounds "
          f"(tree and json rows: {max(3, args.rounds // 2)}), median wall time, roce and "
          f"tshark alternating; tshark {'found' if tshark else 'MISSING'}; "
          f"load {os.getloadavg()[0]:.1f}")
    if args.markdown:
        print("| command | roce packets/s | tshark packets/s | ratio | target |")
        print("|---|---:|---:|---:|---:|")
        for name, ours, theirs, ratio, target in rows:
            print(f"| {name} | {ours:,.0f} | {theirs:,.0f} | {ratio:.1f}x | >= {target:g}x |")
        if rss is not None:
            print(f"\nPeak RSS of `roce stats` on a {nbig}-packet, 200 MB capture: {rss:.0f} MB "
                  "(target < 100 MB)")
    else:
        print(f"{'command':<28} {'roce pkt/s':>12} {'tshark pkt/s':>13} {'ratio':>7} target")
        for name, ours, theirs, ratio, target in rows:
            print(f"{name:<28} {ours:>12,.0f} {theirs:>13,.0f} {ratio:>6.1f}x >= {target:g}x")
        if rss is not None:
            print(f"peak RSS of roce stats on a 200 MB capture ({nbig} packets): {rss:.0f} MB "
                  "(target < 100 MB)")


if __name__ == "__main__":
    main()
