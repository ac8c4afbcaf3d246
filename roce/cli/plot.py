"""``roce plot``: a capture's per-QP throughput and PSN graph, or an emulator trace's queues,
rates and pauses, written as PNG, SVG or PDF (by the output's extension)."""

from __future__ import annotations

import argparse

from roce.errors import UsageError
from roce.options import parse_positive_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("capture", nargs="?", help="pcap or pcapng file (or use --trace)")
    p.add_argument("--trace", metavar="FILE",
                   help="an emulator trace (roce emulate --trace): CSV or JSON lines")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the figure: FILE.png, FILE.svg or FILE.pdf")
    p.add_argument("--interval", type=parse_positive_time, metavar="TIME",
                   help="throughput bin width (default: 1/100 of the capture, >= 1us)")


def run(args: argparse.Namespace) -> int:
    from roce.plot.figure import output_format, save

    output_format(args.output)  # a bad name fails before any work
    if (args.capture is None) == (args.trace is None):
        raise UsageError("give a capture or --trace FILE (one of them)")
    if args.interval is not None and args.interval <= 0:
        raise UsageError("--interval must be positive")
    if args.trace:
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
