"""``roce plot``: a capture's per-QP throughput and PSN graph, an emulator trace's queues,
rates and pauses, or FCT slowdown against flow size from per-flow files (``roce emulate
--fct``), written as PNG, SVG or PDF (by the output's extension)."""

from __future__ import annotations

import argparse

from roce.emu import defaults
from roce.errors import UsageError
from roce.options import bounded_int, parse_positive_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("capture", nargs="?", help="pcap or pcapng file (or use --trace)")
    p.add_argument("--trace", metavar="FILE",
                   help="an emulator trace (roce emulate --trace): CSV or JSON lines")
    p.add_argument("--fct", action="append", default=[], metavar="FILE",
                   help="FCT slowdown against flow size from per-flow rows (roce emulate "
                        "--fct: CSV or Parquet); repeatable, one set of lines per file")
    p.add_argument("--fct-bins", type=bounded_int(1, 100, "a percent"),
                   default=defaults.FCT_BINS, metavar="P",
                   help=f"--fct: percent of the flows per size bin ({defaults.FCT_BINS})")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the figure: FILE.png, FILE.svg or FILE.pdf")
    p.add_argument("--interval", type=parse_positive_time, metavar="TIME",
                   help="throughput bin width (default: 1/100 of the capture, >= 1us)")


def run(args: argparse.Namespace) -> int:
    from roce.plot.figure import output_format, save

    output_format(args.output)  # a bad name fails before any work
    if (args.capture is not None) + (args.trace is not None) + bool(args.fct) != 1:
        raise UsageError("give a capture, --trace FILE or --fct FILE (one of them)")
    if args.interval is not None and args.interval <= 0:
        raise UsageError("--interval must be positive")
    if args.fct:
        from roce.emu.workload.fct import read_rows, slowdown_table
        from roce.plot.slowdown import fct_figure

        tables = {}
        for path in args.fct:
            bins = slowdown_table(read_rows(path), args.fct_bins)
            if not bins:
                raise UsageError(f"--fct {path}: no flows to plot")
            tables[path] = bins
        fig = fct_figure(tables)
    elif args.trace:
        from roce.plot.trace import open_trace, trace_figure

        fig = trace_figure(open_trace(args.trace))  # the file's kind is checked
    else:
        from roce.analysis.timeline import collect
        from roce.pcapio import open_capture
        from roce.plot.capture import capture_figure

        with open_capture(args.capture) as reader:
            tl = collect(reader)
        fig = capture_figure(tl, args.interval)
    save(fig, args.output)
    return 0
