"""``roce target``: serve RDMA requests from outside peers with the emulator's responder.

    roce target -i eth1 --ip 10.0.0.2 --qpn 0x11 --rkey 0x1000 --va 0x10000 --size 64K

prints the MR and QPs it exposes, then one ``roce decode``-style line per frame received
(``rx``) and sent (``tx``).  Stop with Ctrl-C, ``--count N`` (requests) or ``--duration S``.
Also runnable on its own: ``python -m roce.cli.target ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from roce.emu import budget
from roce.emu.budget import human
from roce.emu.real.target import Target, TargetConfig
from roce.emu.record import pcap_writer
from roce.errors import InputError, UsageError
from roce.options import (
    bounded_int,
    parse_address,
    parse_ip_text,
    parse_key,
    parse_mac,
    parse_port,
    parse_positive,
    parse_positive_seconds,
    parse_psn,
    parse_qpn,
    parse_seed,
    parse_size,
)
from roce.qpn import qpn_range


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--interface", metavar="IFACE", help="raw Ethernet on IFACE (root)")
    p.add_argument("--transport", choices=("raw", "udp"),
                   help="raw Ethernet (default with -i) or a UDP socket on --ip:4791")
    p.add_argument("--ip", type=parse_ip_text, metavar="ADDR",
                   help="the target's IP (default: the interface's address)")
    p.add_argument("--mac", type=parse_mac, help="the target's MAC (default: the interface's)")
    p.add_argument("--qpn", type=parse_qpn, default=0x11, help="QPN of the first QP (0x11)")
    p.add_argument("--qps", type=parse_positive, default=1, help="RC QPs, numbered from --qpn (1)")
    p.add_argument("--peer-qpn", type=parse_qpn, default=0x11,
                   help="QPN the answers go to (+ i for QP i): RC packets do not carry the "
                   "sender's (0x11)")
    p.add_argument("--rkey", type=parse_key, default=0x1000, help="R_Key of the MR (0x1000)")
    p.add_argument("--va", type=parse_address, default=0x7F00_0000_0000, help="VA of the MR")
    p.add_argument("--size", type=parse_size, default=1 << 16, help="MR size (64K)")
    p.add_argument("--fill", choices=("pattern", "zero", "random"), default="pattern",
                   help="MR contents: byte i = i & 0xff, zeros, or seeded random (pattern)")
    p.add_argument("--seed", type=parse_seed, default=0, help="for --fill random")
    p.add_argument("--psn", type=parse_psn, default=0, help="first PSN expected (0)")
    p.add_argument("--mtu", type=int, choices=(256, 512, 1024, 2048, 4096), default=1024,
                   help="path MTU (1024; lowered to what the interface carries)")
    p.add_argument("--no-arp", dest="arp", action="store_false",
                   help="do not answer ARP requests for --ip")
    p.add_argument("--recv-size", type=parse_size, default=1 << 16,
                   help="bytes per receive buffer for SENDs (64K)")
    p.add_argument("--recv-depth", type=bounded_int(0, 1 << 20, "a receive depth"), default=16,
                   help="receive buffers per QP (16)")
    # IBA 9.7.5.2.8: the RNR NAK timer is a 5-bit code
    p.add_argument("--min-rnr-timer", type=bounded_int(0, 31, "an RNR timer code"), default=1,
                   help="RNR NAK timer code (1)")
    p.add_argument("--no-recover", dest="recover", action="store_false",
                   help="leave a QP in ERR after a fatal NAK (default: re-create it)")
    p.add_argument("--count", type=parse_positive, default=None, help="stop after N requests")
    p.add_argument("--duration", type=parse_positive_seconds, default=None, metavar="S",
                   help="stop after S seconds")
    p.add_argument("-w", "--write", dest="pcap", metavar="FILE",
                   help="save every frame received and sent to a pcap")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-frame lines")
    p.add_argument("--udp-port", type=parse_port, default=4791, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    prog = "roce target"
    transport = args.transport or ("raw" if args.interface else None)
    if transport is None:
        print(f"{prog}: give -i IFACE (raw Ethernet) or --transport udp --ip ADDR",
              file=sys.stderr)
        return 1
    if args.qps < 1 or args.recv_depth < 0:
        print(f"{prog}: --qps must be >= 1 and --recv-depth >= 0", file=sys.stderr)
        return 1
    cfg = TargetConfig(ip=args.ip, interface=args.interface, transport=transport,
                       mac=args.mac, qpn=args.qpn, qps=args.qps, peer_qpn=args.peer_qpn,
                       rkey=args.rkey, va=args.va, size=args.size, psn=args.psn,
                       mtu=args.mtu, arp=args.arp, recv_size=args.recv_size,
                       recv_depth=args.recv_depth, fill=args.fill, seed=args.seed,
                       recover=args.recover, min_rnr_timer=args.min_rnr_timer,
                       udp_port=args.udp_port)
    _check_memory(args)
    for flag, first in (("--qpn", args.qpn), ("--peer-qpn", args.peer_qpn)):
        try:
            qpn_range(first, args.qps)
        except ValueError as exc:
            raise UsageError(f"{flag} 0x{first:x} --qps {args.qps}: {exc}") from None
    if args.pcap == "-":  # its lines go to standard output: the pcap would be corrupt
        raise UsageError("-w - would write the pcap to standard output, where the target "
                         "prints its lines: give -w a file name")
    # the capture of what happened: written in place as it goes, kept when the target is
    # stopped (a stop signal, roce.interrupts, is how it ends: exit 0)
    with pcap_writer(args.pcap, live=True) as writer:
        target = None
        try:
            try:
                target = Target(cfg, record=writer, quiet=args.quiet)
            except ValueError as e:
                raise InputError(str(e)) from None
            except PermissionError:
                raise InputError("raw Ethernet needs root (CAP_NET_RAW)") from None
            print(target.banner(), flush=True)
            print("-- ready", flush=True)
            stats = target.run(count=args.count, duration=args.duration)
            print(f"-- done: {stats.received} requests received, {stats.sent} frames sent, "
                  f"{stats.messages_received} SENDs received, {stats.recovered} QP(s) "
                  "re-created", flush=True)
        except KeyboardInterrupt:
            pass  # Ctrl-C during set-up or the last print
        finally:
            if target is not None:
                target.close()
    return 0


def _check_memory(args: argparse.Namespace) -> None:
    """The QPs, the MR and the receive buffers live in RAM: refuse what cannot fit, up
    front, naming the option that asks for the most."""
    if args.qps > budget.MAX_QPNS:
        raise UsageError(f"--qps {args.qps}: at most {budget.MAX_QPNS} (24-bit QPNs)")
    qps = args.qps * budget.QP_OVERHEAD
    recv = args.qps * args.recv_depth * args.recv_size
    need = qps + recv + args.size
    have = budget.available()
    if need <= have:
        return
    if qps >= max(recv, args.size):
        budget.check(need, "--qps", args.qps, str(have // budget.QP_OVERHEAD),
                     f"{args.qps} QPs")
    if recv > args.size:
        budget.check(need, "--recv-size", human(args.recv_size),
                     human(max(have - qps - args.size, 0) // max(args.qps * args.recv_depth, 1))
                     + f" with --recv-depth {args.recv_depth} and --qps {args.qps}",
                     f"{args.qps} x {args.recv_depth} receive buffers")
    budget.check(need, "--size", human(args.size), human(max(have - qps - recv, 0)),
                 f"an MR of {human(args.size)}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m roce.cli.target ...``: the same as ``roce target ...``, exit codes
    included."""
    from roce.cli import main as roce_main

    return roce_main(["target", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
