"""``roce craft``'s framing options: ``--link ib`` (native InfiniBand: ``--dlid``, ``--slid``,
``--vl``, ``--sl``) and ``--encap NAME`` (``--span-id``).  The family
(``roce.families.craft``) builds the frames and says what each framing cannot carry; the
options, their bounds (the LRH's field widths, the widest tunnel's session ID) and their
help are written here.
"""

from __future__ import annotations

import argparse

from roce.options import unsigned


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # the registry loads every family: only when a parser is built
    from roce.families.craft import encaps
    from roce.families.ib import native as ib

    g = parser.add_argument_group("native InfiniBand and tunnels")
    g.add_argument("--link", choices=("eth", "ib"), default="eth",
                   help="ib: native InfiniBand (LRH, GRH with --roce-version 1; pcap link "
                        "type 247)")
    lrh = ib.LRH_LAYOUT.field  # values bounded by their LRH field widths (roce.options)
    g.add_argument("--dlid", type=unsigned(lrh("dlid").bits, "a LID"), default=1, metavar="LID")
    g.add_argument("--slid", type=unsigned(lrh("slid").bits, "a LID"), default=2, metavar="LID")
    g.add_argument("--vl", type=unsigned(lrh("vl").bits, "a VL"), default=0, metavar="N")
    g.add_argument("--sl", type=unsigned(lrh("sl").bits, "an SL"), default=0, metavar="N")
    tunnels = encaps()
    g.add_argument("--encap", choices=list(tunnels),
                   help="wrap each frame in a tunnel: " + ", ".join(
                       f"{name} ({h.title})" for name, h in tunnels.items()))
    # bounded by the widest session ID; the family checks the chosen tunnel's (``apply``)
    g.add_argument("--span-id", type=unsigned(max(h.ident_bits for h in tunnels.values()),
                                              "a span ID / VNI"), default=1, metavar="N",
                   help="the tunnel's session ID / VNI")
