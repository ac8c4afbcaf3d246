"""The ``roce emulate`` options of the switched network, and running it from the command line.

``--topology p2p`` (the default) keeps the two-host fabric of ``roce.emu.scenario``; any other
topology, or ``--topology-file``, runs here (``roce.emu.net.runner``).
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from typing import Any

from roce.cli import _emulate_cc as cc_cli
from roce.options import parse_positive_time, parse_size


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "switched network",
        "hosts behind switches with shared buffers, ECN, PFC and ECMP (not with --listen)")
    g.add_argument("--topology", default="p2p", metavar="KIND",
                   help="p2p (two hosts, one link; the default), incast:N, dumbbell:N, "
                        "leafspine:L,S,H")
    g.add_argument("--topology-file", metavar="FILE", help="hosts, switches, links and "
                   "traffic from a TOML file")
    g.add_argument("--traffic", choices=("permutation", "all-to-all"),
                   help="who sends to whom (default: the topology's own; leaf-spine: "
                        "permutation)")
    g.add_argument("--buffer", type=parse_size, default=12 << 20, metavar="SIZE",
                   help="shared buffer per switch (12M)")
    g.add_argument("--ecn", default="on", metavar="KMIN,KMAX,PMAX",
                   help="RED marking per egress queue, e.g. 100K,400K,0.2; off; default: "
                        "100K,400K,0.2 per 25 Gb/s of port rate, with PFC off shrunk until "
                        "KMAX is half the queue's drop point")
    g.add_argument("--pfc", choices=("on", "off"), default="on",
                   help="PFC for the lossless class (DSCP 26, priority 3; default on)")
    g.add_argument("--lb", choices=("ecmp", "spray"), default="ecmp",
                   help="equal-cost paths: per-flow hash or per-packet spraying (ecmp)")
    g.add_argument("--tap", action="append", default=[], metavar="NODE:PORT[=FILE]",
                   help="record both directions of a switch port to a pcap (default file "
                        "tap-NODE-PORT.pcap); repeatable")
    g.add_argument("--trace", metavar="FILE", help="sampled queues, QP rates, pause states "
                   "(CSV; JSON lines if FILE ends in .json or .jsonl)")
    g.add_argument("--trace-interval", type=parse_positive_time, default=10_000, metavar="TIME",
                   help="virtual time between trace samples (10us)")
    g.add_argument("--pfc-storm", action="append", default=[], metavar="HOST",
                   help="fault: HOST sends PFC pause frames continuously; repeatable")


def wanted(args: argparse.Namespace) -> bool:
    return getattr(args, "topology", "p2p") != "p2p" or bool(
        getattr(args, "topology_file", None))


def scenario(args: argparse.Namespace) -> Any:
    from roce.emu.net.runner import NetScenario

    return NetScenario(
        op=args.op, size=args.size, count=args.count, mtu=args.mtu, qps=args.qps,
        depth=args.depth, rate_gbps=args.rate, delay_ns=args.delay, loss=args.loss,
        burst=args.burst, reorder=args.reorder, dup=args.dup, corrupt=args.corrupt,
        seed=args.seed, psn=args.psn & 0xFFFFFF,
        timeout=12 if args.timeout is None else args.timeout, retry_cnt=args.retry_cnt,
        rnr_retry=args.rnr_retry, topology=args.topology, topology_file=args.topology_file,
        traffic=args.traffic, buffer=args.buffer, ecn=args.ecn, pfc=args.pfc == "on",
        lb=args.lb, storm=list(args.pfc_storm), cc=cc_cli.config(args, args.rate),
        recovery=getattr(args, "recovery", "gbn"),
        loss_rule=getattr(args, "loss_rule", "rack"))


def simulate(args: argparse.Namespace) -> Any:
    """The run's summary (pcap, taps and trace written as it goes)."""
    from roce.emu.net.observe import Trace
    from roce.emu.net.runner import NetRun, tap_port
    from roce.outfile import open_output
    from roce.pcapio import PcapWriter

    sc = scenario(args)
    # every file complete when the run ends, or removed (roce.outfile): an unwritable one
    # is an InputError naming it, a failed or interrupted run leaves none of them
    with ExitStack() as stack:
        def open_pcap(path: str) -> Any:
            return stack.enter_context(PcapWriter(path))

        writer = open_pcap(args.pcap) if args.pcap else None
        trace = None
        if args.trace:
            out = stack.enter_context(open_output(args.trace, "w", dash=False, newline=""))
            fmt = "json" if args.trace.endswith((".json", ".jsonl")) else "csv"
            trace = Trace(out, args.trace_interval, fmt)
        run = NetRun(sc, writer, None, trace)
        ports = [(tap_port(run.net, where), path) for where, _, path in
                 (spec.partition("=") for spec in args.tap)]  # every name checked first
        for (port, path), spec in zip(ports, args.tap):
            port.tap = open_pcap(path or f"tap-{spec.replace(':', '-')}.pcap")
        return run.run()
