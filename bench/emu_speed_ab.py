"""Emulator speed of two trees, A/B: packet-hops per CPU-second of the same runs, alternating
between the trees run by run (this machine's speed drifts), medians of ``--rounds``.

Cases: two hosts cabled back to back (``--topology p2p``: 16 RDMA WRITEs of 1 MiB, MTU 4096;
every packet crosses one link, so packets = packet-hops), the same with 1 % loss, and the
16:1 incast of bench/bench_fabric.py (one 1 MiB WRITE per sender, PFC on, 2 MiB buffer),
without congestion control and with DCQCN.
Each run is a child process of its tree (``PYTHONPATH``), timed by its own CPU clock.

    python bench/emu_speed_ab.py /path/to/tree/a /path/to/tree/b [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CASES = {
    "p2p, 16 x 1 MiB WRITE": {"size": 1 << 20, "count": 16},
    "p2p, 16 x 1 MiB WRITE, 1% loss": {"size": 1 << 20, "count": 16, "loss": 0.01, "seed": 1},
    "incast 16:1, 1 MiB WRITE each, PFC on, 2 MiB buffer": {
        "topology": "incast:16", "size": 1 << 20, "count": 1, "buffer": 2 << 20},
    "incast 16:1, 1 MiB WRITE each, PFC on, 2 MiB buffer, DCQCN": {
        "topology": "incast:16", "size": 1 << 20, "count": 1, "buffer": 2 << 20,
        "cc": "dcqcn"},
}

CHILD = """
import json, sys, time
from roce.emu.scenario import Scenario
kw = json.loads(sys.argv[1])
if kw.get("topology", "p2p") == "p2p":
    try:
        from roce.emu.net.runner import run_scenario
    except ImportError:
        from roce.emu.scenario import run_scenario
    kw.pop("topology", None)
    s = run_scenario(Scenario(**kw))
    hops = s.packets
else:
    from roce.emu.cc import configure
    from roce.emu.net.runner import NetScenario, run_network
    if "cc" in kw:
        kw["cc"] = configure(kw["cc"])
    s = run_network(NetScenario(**kw))
    hops = s.hops
assert s.data_verified
print(json.dumps({"hops": hops, "cpu_s": s.cpu_s, "virtual_ns": s.virtual_ns}))
"""


def once(tree: str, kw: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    # in the tree: ``python -c`` puts the working directory before PYTHONPATH on sys.path
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(kw)], env=env, cwd=tree,
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print("| case | A packet-hops / CPU-s | B packet-hops / CPU-s | B / A |")
    print("|---|---:|---:|---:|")
    for name, kw in CASES.items():
        rates: dict[str, list[float]] = {"a": [], "b": []}
        for i in range(args.rounds):
            for side in (("a", "b") if i % 2 == 0 else ("b", "a")):
                r = once(getattr(args, side), kw)
                rates[side].append(r["hops"] / r["cpu_s"])
        a, b = statistics.median(rates["a"]), statistics.median(rates["b"])
        print(f"| {name} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |", flush=True)


if __name__ == "__main__":
    main()
