"""Instructions per packet-hop of the emulator's loop, counted by valgrind (callgrind): immune
to the machine's load, so a change of a few per cent shows where timing cannot see it.

Per case (the networks of bench/bench_ns3.py, at MTU 1024): valgrind counts the instructions
of a fresh process that builds the network and runs it, and of one that only builds it; the
difference divided by the run's packet-hops is the loop's cost per hop.  ``PYTHONHASHSEED=0``
so both processes hash alike.  ``ROCE_PURE=1`` in the environment measures the interpreted
form; ``--tree`` measures another tree (built in place) with the same cases.

    python bench/hop_instructions.py [--cases incast,incast-dcqcn,p2p,leafspine] [--size N]
                                     [--tree PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_ns3 import CASES, MTU, TREE

CHILD = r"""
import json, sys
kw = json.loads(sys.argv[1])
from roce.emu.net.runner import NetRun, NetScenario
from roce.emu.cc import configure
if "cc" in kw:
    kw["cc"] = configure(kw["cc"])
run = NetRun(NetScenario(**kw))
if sys.argv[2] == "run":
    s = run.run()
    assert s.data_verified, s.unverified
    print(json.dumps({"hops": s.hops}))
"""


def instructions(kw: dict, what: str, tree: Path = TREE) -> tuple[int, dict]:
    """Instructions valgrind counted in a child that builds (``what`` "build") or builds and
    runs ("run") the network of ``kw``, and what the child printed."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                            sys.executable, "-c", CHILD, json.dumps(kw), what],
                           capture_output=True, text=True, env=env, check=True)
        text = Path(out).read_text()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    assert m, "no total in callgrind's output"
    printed = r.stdout.strip().splitlines()
    return int(m.group(1)), json.loads(printed[-1]) if printed else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--size", type=int, default=0, help="bytes per message (default: the "
                    "case's own, 1 MiB)")
    ap.add_argument("--tree", type=Path, default=TREE, help="the tree to measure (default: "
                    "this one)")
    args = ap.parse_args()
    print(f"{'case':14} {'hops':>8} {'instructions / hop':>19}")
    for name in args.cases.split(","):
        kw = dict(CASES[name][0], mtu=MTU)
        if args.size:
            kw["size"] = args.size
        base, _ = instructions(kw, "build", args.tree)
        total, got = instructions(kw, "run", args.tree)
        hops = got["hops"]
        print(f"{name:14} {hops:>8,} {(total - base) / hops:>19,.0f}", flush=True)


if __name__ == "__main__":
    main()
