"""``roce emulate``: run a scenario between two emulated hosts and print its summary.

On the simulated fabric by default; with ``--listen`` / ``--connect HOST`` the two hosts are
two processes on a real link (``roce.emu.real.remote``: raw Ethernet with ``-i IFACE`` or UDP with
``--transport udp``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from roce.cli import _emulate_cc as cc_cli
from roce.cli import _emulate_net as net_cli
from roce.emu.core.recovery import LOSS_RULES, MODES
from roce.emu.record import pcap_writer
from roce.emu.scenario import OPS, Scenario, emit, run_scenario
from roce.errors import UsageError
from roce.options import (
    MAX_COUNT,
    bounded_int,
    parse_ip_text,
    parse_listen_port,
    parse_mac,
    parse_port,
    parse_positive,
    parse_positive_seconds,
    parse_probability,
    parse_psn,
    parse_rate,
    parse_retry,
    parse_seed,
    parse_size,
    parse_time,
    parse_timeout,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", choices=OPS, default="write", help="operation (default write)")
    p.add_argument("--size", type=parse_size, default=1 << 20, help="message size (1M)")
    p.add_argument("--count", type=bounded_int(0, MAX_COUNT, "a message count"), default=10,
                   help="messages per QP (10)")
    p.add_argument("--mtu", type=int, choices=(256, 512, 1024, 2048, 4096), default=4096)
    p.add_argument("--qps", type=parse_positive, default=1, help="concurrent queue pairs (1)")
    p.add_argument("--depth", type=parse_positive, default=16,
                   help="outstanding messages per QP (16)")
    p.add_argument("--rate", type=parse_rate, default=100.0, help="link rate in Gb/s (100)")
    p.add_argument("--delay", type=parse_time, default=1000, help="propagation delay (1us)")
    for name in ("loss", "burst", "reorder", "dup", "corrupt"):
        p.add_argument(f"--{name}", type=parse_probability, default=0.0,
                       help=f"{name} probability per frame and direction")
    p.add_argument("--recovery", choices=MODES, default=MODES[0],
                   help="loss recovery: gbn (go-back-N, rxe; default) or sr (IRN selective "
                        "repeat)")
    p.add_argument("--loss-rule", choices=LOSS_RULES, default=LOSS_RULES[0],
                   help="--recovery sr: how a PSN is found lost: rack (time-based, RFC 8985; "
                        "default) or dupthresh (IRN's count of PSNs acknowledged above it)")
    p.add_argument("--seed", type=parse_seed, default=0)
    p.add_argument("--psn", type=parse_psn, default=0, help="first PSN of each QP")
    p.add_argument("--timeout", type=parse_timeout, default=None,
                   help="local ACK timeout exponent (12 simulated, 14 across a real link)")
    p.add_argument("--retry-cnt", type=parse_retry, default=7)
    p.add_argument("--rnr-retry", type=parse_retry, default=7)
    p.add_argument("-w", "--write", dest="pcap", metavar="FILE",
                   help="record every delivered frame to a pcap")
    p.add_argument("-T", dest="format", choices=("text", "json"), default="text")
    p.add_argument("--no-progress", action="store_true")
    cc_cli.add_arguments(p)
    g = p.add_argument_group(
        "across a real network",
        "run the scenario between two processes: one --listen, the other --connect HOST "
        "drives the operations; a TCP connection (--port) exchanges QPNs, PSNs, keys, MTU")
    g.add_argument("--listen", action="store_true", help="serve one connector, then exit")
    g.add_argument("--connect", metavar="HOST", help="the listener's out-of-band address")
    g.add_argument("-i", "--interface", metavar="IFACE",
                   help="raw Ethernet on this interface (AF_PACKET; root)")
    g.add_argument("--transport", choices=("raw", "udp"),
                   help="raw Ethernet (with -i) or a kernel UDP socket on port 4791")
    g.add_argument("--ip", type=parse_ip_text, metavar="ADDR",
                   help="the emulated device's IP (default: the "
                   "interface's, or for UDP the out-of-band connection's local address)")
    g.add_argument("--mac", type=parse_mac, metavar="MAC",
                   help="the device's MAC (default: the interface's)")
    g.add_argument("--arp", action="store_true",
                   help="raw Ethernet: answer ARP for --ip and resolve the peer by ARP")
    g.add_argument("--qp-type", choices=("rc", "uc", "ud"), default="rc",
                   help="queue pair type (rc; ud: --op send, one packet per message)")
    g.add_argument("--port", type=parse_listen_port, default=18515,
                   help="out-of-band TCP port (18515; 0: any free one)")
    g.add_argument("--bind", type=parse_ip_text, metavar="ADDR",
                   help="--listen: out-of-band address (all)")
    g.add_argument("--udp-port", type=parse_port, default=4791, help=argparse.SUPPRESS)
    g.add_argument("--oob-timeout", type=parse_positive_seconds, default=30.0, metavar="S",
                   help="seconds to wait for the peer's out-of-band messages (30)")
    g.add_argument("--time-limit", type=parse_positive_seconds, default=120.0, metavar="S",
                   help="wall-clock seconds for the run (120)")
    net_cli.add_arguments(p)


FAULTS = ("loss", "burst", "reorder", "dup", "corrupt")


def _simulated_only() -> dict[str, tuple[str, Any, str]]:
    """dest -> (option, default, why) of every option that only the simulated fabric
    honours: the link's faults, rate and delay, the switched network's and congestion
    control's whole groups (taken from their parsers, so a new option is covered)."""
    out: dict[str, tuple[str, Any, str]] = {}
    link = argparse.ArgumentParser(add_help=False)
    add_arguments(link)
    for a in link._actions:
        if a.dest in FAULTS:
            out[a.dest] = (a.option_strings[0], a.default, "on a real link impair it with tc "
                           "netem or `python -m roce.emu.real.relay`")
        elif a.dest in ("rate", "delay"):
            out[a.dest] = (a.option_strings[0], a.default, "a real link has its own")
    for module, why in ((cc_cli, "congestion control runs in the simulated NICs of a "
                         "switched network (--topology)"),
                        (net_cli, "a real link is no simulated network")):
        g = argparse.ArgumentParser(add_help=False)
        module.add_arguments(g)
        for a in g._actions:
            out[a.dest] = (a.option_strings[0], a.default, why)
    return out


def refuse_simulated(args: argparse.Namespace) -> None:
    """A UsageError naming the first simulated-fabric option given to a real-link run (one
    whose value is not its default): silently ignoring it would mislead."""
    for dest, (opt, default, why) in _simulated_only().items():
        if getattr(args, dest, default) != default:
            raise UsageError(f"{opt} is for the simulated fabric, not --listen/--connect: "
                             f"{why}")


def run(args: argparse.Namespace) -> int:
    if args.pcap == "-":  # two outputs on one stream would corrupt both
        raise UsageError(f"-w - and -T {args.format} would both write to standard output "
                         "(the pcap and the summary): give -w a file name")
    if getattr(args, "listen", False) or getattr(args, "connect", None):
        from roce.emu.real.remote import run_cli

        refuse_simulated(args)
        return run_cli(args)
    return emit(simulate(args), args.format, args.pcap)


def simulate(args: argparse.Namespace) -> Any:
    """The summary of a run on the simulated fabric, from ``roce emulate``'s parsed options
    (``roce sweep`` calls this once per grid point).  A bad combination is a UsageError."""
    cc = cc_cli.config(args, args.rate)  # a bad --cc-profile or --cc-param fails first
    if cc.enabled and getattr(args, "topology", "p2p") == "p2p" and not getattr(
            args, "topology_file", None):
        raise UsageError(f"--cc {args.cc} needs a switched network (--topology ...)")
    if getattr(args, "interface", None) or getattr(args, "transport", None):
        raise UsageError("-i/--transport need --listen or --connect HOST")
    if net_cli.wanted(args):
        return net_cli.simulate(args)
    sc = Scenario(op=args.op, size=args.size, count=args.count, mtu=args.mtu, qps=args.qps,
                  depth=args.depth, rate_gbps=args.rate, delay_ns=args.delay, loss=args.loss,
                  burst=args.burst, reorder=args.reorder, dup=args.dup, corrupt=args.corrupt,
                  seed=args.seed, psn=args.psn & 0xFFFFFF,
                  timeout=12 if args.timeout is None else args.timeout,
                  retry_cnt=args.retry_cnt, rnr_retry=args.rnr_retry,
                  qp_type=getattr(args, "qp_type", "rc"), recovery=args.recovery,
                  loss_rule=getattr(args, "loss_rule", LOSS_RULES[0]))
    sc.check(sides=2)  # before the pcap is created: a refused run leaves no file behind
    with pcap_writer(args.pcap) as writer:
        progress = None
        bar = None
        if not args.no_progress and sys.stderr.isatty():
            from rich.progress import Progress

            bar = Progress(transient=True)
            task = bar.add_task("emulating", total=sc.count * sc.qps)
            bar.start()

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done)
        try:
            return run_scenario(sc, writer, progress)
        finally:
            if bar is not None:
                bar.stop()
