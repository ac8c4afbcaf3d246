"""The ``roce emulate`` options of the traffic of real clusters: open-loop flows of a
flow-size distribution (``--workload``) or a collective (``--collective``), in place of
``--count`` messages per pair, and the per-flow rows (``--fct``).  The run is
``roce.emu.net.workrun``'s; the generators are ``roce.emu.workload``'s.
"""

from __future__ import annotations

import argparse

from roce.cli import Deferred
from roce.emu import defaults
from roce.emu.workload import ALGORITHMS, DEFAULT_CHUNK, DEFAULT_WINDOW
from roce.options import bounded_int, parse_load, parse_positive, parse_positive_time, parse_size

ALL_ALGORITHMS = tuple(dict.fromkeys(a for algos in ALGORITHMS.values() for a in algos))


def _workload_help() -> str:
    from roce.emu.workload.cdf import BUILTIN  # its tables: only when help is shown

    return (f"open-loop flows with this size distribution: {', '.join(BUILTIN)} or a "
            "FILE.cdf of 'size cumulative%%' lines; a switched --topology")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "traffic of real clusters",
        "open-loop flows or a collective in place of --count messages per pair "
        "(docs/guide/workloads.md)")
    g.add_argument("--workload", metavar="CDF", help=Deferred(_workload_help))
    g.add_argument("--load", type=parse_load, default=defaults.LOAD,
                   help=f"--workload: offered load per host, a fraction of the line rate "
                        f"({defaults.LOAD:g})")
    g.add_argument("--duration", type=parse_positive_time, default=defaults.DURATION_NS,
                   metavar="TIME", help=f"--workload: flows arrive during this much virtual "
                   f"time ({defaults.DURATION_NS // 1_000_000}ms)")
    g.add_argument("--collective", choices=tuple(ALGORITHMS),
                   help="a collective over --ranks hosts; --size is its buffer")
    g.add_argument("--algorithm", choices=ALL_ALGORITHMS, default="",
                   help="--collective: its algorithm (default the first it runs: ring; "
                        "all-to-all: pairwise)")
    g.add_argument("--ranks", type=parse_positive, help="--collective: ranks, hosts "
                   "0..N-1 of the topology (default every host)")
    g.add_argument("--iterations", type=parse_positive, default=1,
                   help="--collective: runs of it, each timed (1)")
    g.add_argument("--chunk", type=parse_size, metavar="SIZE",
                   help=f"--collective: the largest transfer ({DEFAULT_CHUNK >> 20}M)")
    g.add_argument("--window", type=parse_positive,
                   help=f"--collective: transfers in flight per connection ({DEFAULT_WINDOW})")
    g.add_argument("--fct", metavar="FILE", help="--workload: per-flow rows (source, "
                   "destination, size, start, FCT, ideal FCT, slowdown) to FILE.csv or "
                   "FILE.parquet")
    g.add_argument("--fct-bins", type=bounded_int(1, 100, "a percent"),
                   default=defaults.FCT_BINS, metavar="P",
                   help=f"percent of the flows per bin of the slowdown table "
                        f"({defaults.FCT_BINS})")
