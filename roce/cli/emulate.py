"""``roce emulate``: run a scenario on the simulated network and print its summary.

Two hosts cabled back to back by default (``--topology p2p``), or any switched network; with
``--listen`` / ``--connect HOST`` the two hosts are two processes on a real link
(``roce.emu.real.remote``: raw Ethernet with ``-i IFACE`` or UDP with ``--transport udp``).
``scenario`` turns the options into the one ``Scenario`` every kind of run starts from;
``emit`` prints every kind of summary.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack

from roce.cli import _emulate_cc as cc_cli
from roce.cli import _emulate_net as net_cli
from roce.cli import _emulate_traffic as traffic_cli
from roce.cli import _emulate_uet as uet_cli
from roce.emu import defaults
from roce.emu.core.recovery import LOSS_RULES, MODES
from roce.emu.scenario import OPS, Scenario
from roce.errors import InputError, RemoteError, UsageError, VerificationError
from roce.locate import LINKTYPE_ERF, LINKTYPE_INFINIBAND, ROCE_PORT
from roce.options import (
    PATH_MTUS,
    parse_count,
    parse_ip_text,
    parse_link_rate,
    parse_listen_port,
    parse_mac,
    parse_port,
    parse_positive,
    parse_positive_seconds,
    parse_probability,
    parse_psn,
    parse_retry,
    parse_seed,
    parse_size,
    parse_time,
    parse_timeout,
)

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

D = Scenario()  # the defaults (roce.emu.defaults), as the options show them


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", choices=OPS, default=D.op, help=f"operation (default {D.op})")
    p.add_argument("--size", type=parse_size, default=D.size,
                   help=f"message size ({_size(D.size)})")
    p.add_argument("--count", type=parse_count,
                   default=D.count, help=f"messages per QP ({D.count})")
    p.add_argument("--mtu", type=int, choices=PATH_MTUS, default=D.mtu)
    p.add_argument("--qps", type=parse_positive, default=D.qps,
                   help=f"concurrent queue pairs ({D.qps})")
    p.add_argument("--depth", type=parse_positive, default=D.depth,
                   help=f"outstanding messages per QP ({D.depth})")
    p.add_argument("--rate", type=parse_link_rate, default=D.rate_gbps,
                   help=f"link rate in Gb/s ({D.rate_gbps:g}; 1e-9 .. 1e6)")
    p.add_argument("--delay", type=parse_time, default=D.delay_ns,
                   help=f"propagation delay ({D.delay_ns / 1000:g}us)")
    for name in ("loss", "burst", "reorder", "dup", "corrupt"):
        p.add_argument(f"--{name}", type=parse_probability, default=0.0,
                       help=f"{name} probability per frame and direction")
    p.add_argument("--recovery", choices=MODES, default=D.recovery,
                   help="loss recovery: gbn (go-back-N, rxe; default) or sr (IRN selective "
                        "repeat)")
    p.add_argument("--loss-rule", choices=LOSS_RULES, default=D.loss_rule,
                   help="--recovery sr: how a PSN is found lost: rack (time-based, RFC 8985; "
                        "default) or dupthresh (IRN's count of PSNs acknowledged above it)")
    p.add_argument("--seed", type=parse_seed, default=D.seed)
    p.add_argument("--psn", type=parse_psn, default=D.psn, help="first PSN of each QP")
    p.add_argument("--timeout", type=parse_timeout, default=None,
                   help=f"local ACK timeout exponent ({defaults.ACK_TIMEOUT_SIMULATED} "
                        f"simulated, {defaults.ACK_TIMEOUT_REAL} across a real link)")
    p.add_argument("--retry-cnt", type=parse_retry, default=D.retry_cnt)
    p.add_argument("--rnr-retry", type=parse_retry, default=D.rnr_retry)
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
                   help=f"raw Ethernet (with -i) or a kernel UDP socket on port {ROCE_PORT}")
    g.add_argument("--ip", type=parse_ip_text, metavar="ADDR",
                   help="the emulated device's IP (default: the "
                   "interface's, or for UDP the out-of-band connection's local address)")
    g.add_argument("--mac", type=parse_mac, metavar="MAC",
                   help="the device's MAC (default: the interface's)")
    g.add_argument("--arp", action="store_true",
                   help="raw Ethernet: answer ARP for --ip and resolve the peer by ARP")
    g.add_argument("--qp-type", choices=("rc", "uc", "ud"), default=D.qp_type,
                   help="queue pair type (rc; ud: --op send, one packet per message)")
    g.add_argument("--port", type=parse_listen_port, default=defaults.OOB_PORT,
                   help=f"out-of-band TCP port ({defaults.OOB_PORT}; 0: any free one)")
    g.add_argument("--bind", type=parse_ip_text, metavar="ADDR",
                   help="--listen: out-of-band address (all)")
    g.add_argument("--udp-port", type=parse_port, default=ROCE_PORT, help=argparse.SUPPRESS)
    g.add_argument("--oob-timeout", type=parse_positive_seconds,
                   default=defaults.OOB_TIMEOUT_S, metavar="S",
                   help="seconds to wait for the peer's out-of-band messages "
                        f"({defaults.OOB_TIMEOUT_S:g})")
    g.add_argument("--time-limit", type=parse_positive_seconds,
                   default=defaults.REAL_TIME_LIMIT_S, metavar="S",
                   help=f"wall-clock seconds for the run ({defaults.REAL_TIME_LIMIT_S:g})")
    net_cli.add_arguments(p)
    traffic_cli.add_arguments(p)
    uet_cli.add_arguments(p)


def _size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


FAULTS = ("loss", "burst", "reorder", "dup", "corrupt")


def _simulated_only() -> dict[str, tuple[str, Any, str]]:
    """dest -> (option, default, why) of every option that only the simulated network
    honours: the link's faults, rate and delay, the switched network's and congestion
    control's whole groups (taken from their parsers, so a new option is covered)."""
    out: dict[str, tuple[str, Any, str]] = {}
    link = argparse.ArgumentParser(add_help=False)
    add_arguments(link)
    for a in link._actions:
        if a.dest in FAULTS:
            out[a.dest] = (a.option_strings[0], a.default, "on a real link impair it with tc "
                           "netem or `roce relay`")
        elif a.dest in ("rate", "delay"):
            out[a.dest] = (a.option_strings[0], a.default, "a real link has its own")
    for module, why in ((cc_cli, "congestion control runs in the simulated NICs"),
                        (net_cli, "a real link is no simulated network"),
                        (uet_cli, "UET endpoints run on the simulated network")):
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


def refuse_given_ib(args: argparse.Namespace) -> None:
    """A UsageError naming an option a native InfiniBand run has nothing for that was typed
    with its default value (a value other than the default the run refuses itself:
    ``runner.IB_REFUSED``, the one table of them and their reasons)."""
    from roce.emu.net.runner import IB_REFUSED

    typed = net_cli.given(args)
    for name, opt, why in IB_REFUSED:
        if name in typed:
            raise UsageError(f"{opt} with --protocol ib: {why}")


def scenario(args: argparse.Namespace, real: bool = False) -> Scenario:
    """The scenario ``roce emulate``'s options describe: the one path from arguments to a run,
    simulated (two hosts or a switched network) or across a real link (``real``: the
    wall-clock ACK timeout and time limit).  A bad --cc-profile or --cc-param is a
    UsageError naming it."""
    cc = cc_cli.config(args, args.rate)
    timeout = args.timeout if args.timeout is not None else defaults.ack_timeout(real)
    return Scenario(
        op=args.op, size=args.size, count=args.count, mtu=args.mtu, qps=args.qps,
        depth=args.depth, seed=args.seed, psn=args.psn, timeout=timeout,
        retry_cnt=args.retry_cnt, rnr_retry=args.rnr_retry, qp_type=args.qp_type,
        recovery=args.recovery, loss_rule=args.loss_rule, rate_gbps=args.rate,
        delay_ns=args.delay, loss=args.loss, burst=args.burst, reorder=args.reorder,
        dup=args.dup, corrupt=args.corrupt,
        time_limit_ns=int(args.time_limit * 1e9) if real else None,
        topology=args.topology, topology_file=args.topology_file, traffic=args.traffic,
        buffer=args.buffer, ecn=args.ecn, pfc=args.pfc == "on", lb=args.lb,
        oversubscription=args.oversubscription, link_down=list(args.link_down),
        protocol=getattr(args, "protocol", defaults.PROTOCOL),
        ib_routing=getattr(args, "ib_routing", defaults.IB_ROUTING),
        ib_cc=getattr(args, "ib_cc", "off") == "on",
        ib_lmc=getattr(args, "ib_lmc", 0), ib_ar=getattr(args, "ib_ar", "off") == "on",
        detect_delay_ns=args.detect_delay,
        storm=list(args.pfc_storm), cc=cc, cdf=args.workload, load=args.load,
        duration_ns=args.duration, collective=args.collective, algorithm=args.algorithm,
        ranks=args.ranks, iterations=args.iterations, chunk=args.chunk, window=args.window,
        fct=args.fct, fct_bins=args.fct_bins)


def run(args: argparse.Namespace) -> int:
    if args.pcap == "-":  # two outputs on one stream would corrupt both
        raise UsageError(f"-w - and -T {args.format} would both write to standard output "
                         "(the pcap and the summary): give -w a file name")
    if getattr(args, "listen", False) or getattr(args, "connect", None):
        refuse_simulated(args)
        return emit(run_real(args), args.format, args.pcap)
    return emit(simulate(args), args.format, args.pcap)


def emit(summary: Any, fmt: str, pcap: str | None) -> int:
    """Print a summary; raise ``VerificationError`` (exit 4) when the data did not check
    out (the run ended, but not every message arrived intact: scripts can tell)."""
    if fmt == "json":
        import json  # here: the text summary, the default, never needs it

        print(json.dumps(summary.as_dict(), indent=2))
    else:
        print(summary.text())
        if pcap:
            print(f"pcap          {pcap}")
    if not summary.data_verified:
        why = getattr(summary, "unverified", "") or "see the summary"
        raise VerificationError(f"data not verified: {why}")
    return 0


def simulate(args: argparse.Namespace) -> Any:
    """The summary of a run on the simulated network, from ``roce emulate``'s parsed options
    (``roce sweep`` calls this once per grid point).  A bad combination is a UsageError;
    the pcap, taps and trace are written as the run goes."""
    from roce.emu.net.observe import Trace, tap_port
    from roce.emu.net.runner import NetRun
    from roce.outfile import open_output

    sc = scenario(args)
    if getattr(args, "interface", None) or getattr(args, "transport", None):
        raise UsageError("-i/--transport need --listen or --connect HOST")
    if sc.protocol == "ib":
        refuse_given_ib(args)
    pcap, taps, trace_path = args.pcap, getattr(args, "tap", []), getattr(args, "trace", None)
    uet = uet_cli.options(args)
    if sc.generated:
        return _simulate_workload(args, sc, transport(sc, uet))
    if uet is not None:
        return _simulate_uet(args, sc, uet)
    ib = sc.protocol == "ib"
    if ib and trace_path:
        raise UsageError("--trace with --protocol ib: the trace samples Ethernet switches' "
                         "queues and pause states (use --tap for an InfiniBand port)")
    if ib:  # the InfiniBand fabric and its families, only for an InfiniBand run
        from roce.emu.ib.ibrun import IbRun
    with ExitStack() as stack:
        # every check before a file is created: a refused run leaves none
        run = (IbRun if ib else NetRun)(sc, topology=topology(args))
        ports = [(tap_port(run.net, where), path) for where, _, path in
                 (spec.partition("=") for spec in taps)]
        if pcap:
            run.record(_open_pcap(stack, pcap, LINKTYPE_INFINIBAND if ib else 1))
        for (port, path), spec in zip(ports, taps):
            name = path or f"tap-{spec.replace(':', '-')}.pcap"
            if ib:  # an InfiniBand port's both directions, link packets too: ERF records
                port.erf_tap = _open_pcap(stack, name, LINKTYPE_ERF)
            else:
                port.tap = _open_pcap(stack, name)
        if trace_path:
            out = stack.enter_context(open_output(trace_path, "w", dash=False, newline=""))
            fmt = "json" if trace_path.endswith((".json", ".jsonl")) else "csv"
            run.trace = Trace(out, args.trace_interval, fmt)
        return run.run(_progress(stack, args, sc.count * len(run.flows)))


def _simulate_uet(args: argparse.Namespace, sc: Scenario, uet: Any) -> Any:
    """A --protocol uet run (roce.emu.uet.run): the pcap and taps as for any run."""
    from roce.emu.uet.run import UetRun

    if getattr(args, "trace", None):
        raise UsageError("--trace: not with --protocol uet (it samples RoCE QPs; use --tap "
                         "for a port's frames)")
    taps = getattr(args, "tap", [])
    with ExitStack() as stack:
        run = UetRun(sc, uet, topology=topology(args))
        _record(stack, args, run.net, taps)
        return run.run()


def transport(sc: Scenario, uet: Any = None) -> Any:
    """The transport a --workload or --collective run of ``sc.protocol`` posts its
    transfers on (``roce.emu.net.transport``): RoCE's RC queue pairs, the same on an
    InfiniBand subnet's HCAs, or UET's PDCs with ``uet`` (``UetOptions``)."""
    if sc.protocol == "uet":
        from roce.emu.uet.uettransport import UetTransport

        return UetTransport(uet)
    if sc.protocol == "ib":
        from roce.emu.ib.ibrun import IbTransport

        return IbTransport()
    from roce.emu.net.transport import QpTransport

    return QpTransport()


def _simulate_workload(args: argparse.Namespace, sc: Scenario, tr: Any) -> Any:
    """A --workload or --collective run (roce.emu.net.workrun) on transport ``tr``: the
    pcap and taps as for any run; the trace samples --count flows' QPs, which a workload
    run does not have."""
    from roce.emu.net.workrun import WorkloadRun

    if getattr(args, "trace", None):
        raise UsageError("--trace: not with --workload or --collective (it samples the QPs "
                         "of --count traffic; use --tap for a port's frames)")
    taps = getattr(args, "tap", [])
    with ExitStack() as stack:
        run = WorkloadRun(sc, topology=topology(args), transport=tr)
        _record(stack, args, run.net, taps, tr)
        return run.run(_progress(stack, args, 1))


def _record(stack: ExitStack, args: argparse.Namespace, net: Any, taps: list[str],
            tr: Any = None) -> None:
    """``-w`` and each ``--tap NODE:PORT[=FILE]`` onto a simulated network's recorders and
    ports, closed with ``stack``; with a transport ``tr``, the pcap in its link type
    (InfiniBand's 247) and an InfiniBand port's taps as ERF records (both directions, link
    packets too)."""
    from roce.emu.net.observe import tap_port

    ports = [(tap_port(net, where), path) for where, _, path in
             (spec.partition("=") for spec in taps)]
    ib = tr is not None and tr.linktype == LINKTYPE_INFINIBAND
    if args.pcap:
        if tr is None:
            net.recorders.append(_open_pcap(stack, args.pcap))
        else:
            tr.record(_open_pcap(stack, args.pcap, tr.linktype))
    for (port, path), spec in zip(ports, taps):
        name = path or f"tap-{spec.replace(':', '-')}.pcap"
        if ib:
            port.erf_tap = _open_pcap(stack, name, LINKTYPE_ERF)
        else:
            port.tap = _open_pcap(stack, name)


def topology(args: argparse.Namespace) -> Any:
    """The ``--topology-file``'s topology, checked, its drop filters compiled as ``roce
    decode -Y`` compiles a display filter (the emulator takes predicates); None for
    ``--topology``."""
    if not getattr(args, "topology_file", None):
        return None
    from roce.decoder.decode import make_filter
    from roce.emu.net.topology import load

    return load(args.topology_file, make_filter)


def _open_pcap(stack: ExitStack, path: str, linktype: int = 1) -> Any:
    """A pcap written under a temporary name and renamed when the run ends (roce.outfile):
    an unwritable one is an InputError naming it; a failed or interrupted run leaves none.
    ``linktype``: Ethernet, InfiniBand (247) or ERF (197)."""
    from roce.pcapio import PcapWriter

    return stack.enter_context(PcapWriter(path, linktype=linktype))


def _progress(stack: ExitStack, args: argparse.Namespace, total: int) -> Any:
    """A progress bar's callback on a terminal (None otherwise, or with --no-progress)."""
    if getattr(args, "no_progress", True) or not sys.stderr.isatty():
        return None
    from rich.progress import Progress

    bar = Progress(transient=True)
    task = bar.add_task("emulating", total=total)
    bar.start()
    stack.callback(bar.stop)

    def progress(done: int, total: int) -> None:
        bar.update(task, completed=done)
    return progress


def endpoint(args: argparse.Namespace) -> Any:
    """How this end of a real-link run reaches the wire, from the options: raw Ethernet on
    ``-i IFACE`` or UDP (``--transport udp``)."""
    from roce.emu.real.remote import Endpoint

    transport = args.transport or ("raw" if args.interface else None)
    if transport is None:
        raise RemoteError("say how to reach the wire: -i IFACE (raw Ethernet) or "
                          "--transport udp")
    if transport == "raw" and not args.interface:
        raise RemoteError("--transport raw needs -i IFACE")
    return Endpoint(transport=transport, interface=args.interface, ip=args.ip, mac=args.mac,
                    arp=args.arp, oob_port=args.port, udp_port=args.udp_port,
                    oob_timeout=args.oob_timeout)


def run_real(args: argparse.Namespace) -> Any:
    """``--listen`` / ``--connect HOST``: one end of a run across a real link; its summary.
    Errors propagate to the CLI's exit-code table (1 options, 2 interface/peer)."""
    from roce.emu.real import remote
    from roce.emu.record import pcap_writer

    if args.listen and args.connect:
        raise RemoteError("--listen and --connect exclude each other")

    def log(text: str) -> None:
        if args.format != "json":
            print(f"roce emulate: {text}", file=sys.stderr, flush=True)

    ep = endpoint(args)
    sc = scenario(args, real=True)
    sc.check(sides=1)
    try:
        with pcap_writer(args.pcap) as writer:
            if args.listen:
                return remote.run_listener(sc, ep, writer, bind=args.bind or "", log=log)
            return remote.run_connector(args.connect, sc, ep, writer, log=log)
    except PermissionError as e:
        raise InputError(f"{e.strerror or e}: raw Ethernet needs root (CAP_NET_RAW)") from None
