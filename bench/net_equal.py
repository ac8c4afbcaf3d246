"""Virtual-time equality of the switched-network emulator between two trees: a speed change
must leave every figure of every run bit-identical.

``dump`` runs the 24 cases of bench/bench_cc.py plus leaf-spine (ECMP; spray with selective
repeat, lossless and lossy with DCQCN), a dumbbell READ with DCQCN and a lossy incast SEND with
selective repeat, and writes each ``run_network`` summary less its CPU-time fields as JSON;
``compare`` lists the fields that differ between two dumps (exit 1 if any).

    PYTHONPATH=/path/to/other/tree python bench/net_equal.py dump other.json
    python bench/net_equal.py dump this.json
    python bench/net_equal.py compare other.json this.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import equal_cli
from bench_cc import SENDERS, scenario

from roce.emu.cc import configure
from roce.emu.net.runner import NetScenario, run_network
from roce.testing.twins import differences, summary_fields


def cases() -> Iterator[tuple[str, NetScenario]]:
    for n in SENDERS:
        for pfc in (True, False):
            for cc in ("none", "dcqcn"):
                yield f"incast:{n} pfc={pfc} cc={cc}", scenario(n, cc, pfc)
    ls = {"topology": "leafspine:2,2,4", "op": "write", "size": 256 << 10, "count": 4,
          "depth": 2, "mtu": 4096, "rate_gbps": 100.0}
    yield "leafspine ecmp", NetScenario(**ls)
    yield "leafspine spray sr", NetScenario(**ls, lb="spray", recovery="sr")
    yield "leafspine spray sr lossy dcqcn", NetScenario(
        **{**ls, "mtu": 1024}, lb="spray", recovery="sr", pfc=False, cc=configure("dcqcn"))
    yield "dumbbell read dcqcn", NetScenario(
        topology="dumbbell:4", op="read", size=128 << 10, count=4, depth=2, mtu=4096,
        rate_gbps=100.0, cc=configure("dcqcn"))
    yield "incast:8 send sr lossy dcqcn", NetScenario(
        topology="incast:8", op="send", size=256 << 10, count=2, depth=2, mtu=4096,
        rate_gbps=100.0, pfc=False, recovery="sr", cc=configure("dcqcn"))


def dump(path: str) -> None:
    out = {}
    for name, sc in cases():
        out[name] = d = summary_fields(run_network(sc))
        print(name, d["hops"], "hops", file=sys.stderr, flush=True)
    with open(path, "w") as f:
        json.dump(out, f, sort_keys=True)


def compare(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Print the fields that differ between dumps ``a`` and ``b``; 1 if any do."""
    diffs = list(differences(a, b))
    for d in diffs[:50]:
        print(d)
    print(f"{len(set(a) | set(b))} cases compared, {len(diffs)} differing fields")
    return 1 if diffs else 0


def main() -> None:
    equal_cli.run(__doc__, dump, compare)


if __name__ == "__main__":
    main()
