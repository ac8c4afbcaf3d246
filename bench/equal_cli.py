"""The command line of the tree-equality checks (net_equal.py, p2p_equal.py): ``dump OUT``
writes this tree's figures, ``compare A B`` says what differs between two dumps and exits 1
if anything does."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def run(doc: str, dump: Callable[[str], None],
        compare: Callable[[dict[str, Any], dict[str, Any]], int]) -> None:
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("dump").add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out)
        return
    with open(args.a) as fa, open(args.b) as fb:
        a, b = json.load(fa), json.load(fb)
    sys.exit(compare(a, b))
