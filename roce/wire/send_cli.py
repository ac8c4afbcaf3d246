"""``roce send``: put crafted frames (or the frames of a capture) on a network interface.

::

    roce send rc-send-only -i eth1 --dqpn 0x11 --payload-size 64 --count 1000 --pps 10000
    roce send rc-rdma-write-only -i eth1 --va 0x1000 --rkey 0x22 --payload-hex deadbeef
    roce send -r frames.pcap -i eth1 --interval 0.001

The frame options are ``roce craft``'s (``roce send -h`` lists them).  Nothing is sent
without ``-i``.  Frames go out back to back unless ``--interval SEC`` or ``--pps N`` paces
them (the pacing of ``roce replay``: monotonic deadlines, sleep then spin).  With ``-r`` the
frames come from a capture, in order, as captured (``--count N``: the first N); use
``roce replay`` for the capture's own timing and for rewrites.  ``-v`` prints each frame
in ``roce decode``'s one-line form; ``-w FILE`` also saves them.  The last line reports the
frames and bytes sent and the rate.

Exit status: 0 sent, 1 bad usage, 2 environment problem: unknown interface, interface down
or without carrier, no privilege for a raw socket, unreadable capture, frames the interface
refused (longer than its MTU allows); 130 interrupted (the report is still printed).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterable

from roce.options import parse_positive, parse_rate, parse_seconds
from roce.pcapio import CaptureError, open_capture

from . import iface
from .craft_cli import (
    InputError,
    UsageError,
    add_frame_arguments,
    describe,
    fail,
    frame_options_given,
    frame_times,
    iter_packets,
    print_lines,
    write_frames,
)
from .replay_cli import send_paced, send_topspeed, to_ethernet

NS = 1_000_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("exit status: 0 sent, 1 bad usage, 2 environment problem (interface "
                     "unknown/down, no privilege, unreadable capture), 130 interrupted.")
    add_frame_arguments(parser, opcode_optional=True)
    g = parser.add_argument_group("sending")
    g.add_argument("-i", "--interface", metavar="IFACE",
                   help="interface to send on (required: nothing is sent without it)")
    g.add_argument("-r", "--read-file", metavar="FILE", dest="read_file",
                   help="send the frames of this capture instead of crafting")
    g.add_argument("--count", type=parse_positive, metavar="N",
                   help="frames to send (crafted: PSN steps by --psn-step; -r: the first N)")
    pace = g.add_mutually_exclusive_group()
    pace.add_argument("--interval", type=parse_seconds, metavar="SEC",
                      help="time between frames (default: back to back)")
    pace.add_argument("--pps", type=parse_rate, metavar="N", help="frames per second")
    g.add_argument("-w", "--write", metavar="FILE", help="also save the frames sent to a pcap")
    g.add_argument("--pcapng", action="store_true", help="-w writes pcapng")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="print each frame in roce decode's one-line form")
    g.add_argument("--backend", choices=("auto", "packet", "scapy"), default="auto",
                   help="AF_PACKET socket (auto) or Scapy's L2 socket")


def _frames(args: argparse.Namespace) -> Iterable[bytes]:
    if args.read_file is not None:
        if args.opcode is not None:
            raise UsageError("give an OPCODE to craft or -r FILE, not both")
        given = frame_options_given(args)
        if given:
            raise UsageError(f"{given[0]} describes crafted frames; with -r the capture's "
                             "frames are sent as they are (roce replay rewrites)")
        out = []
        skipped = 0
        with open_capture(args.read_file) as reader:
            for f in itertools.islice(reader, args.count):
                eth = to_ethernet(f.data, f.linktype)
                if eth is None:
                    skipped += 1
                else:
                    out.append(eth)
        if skipped:
            print(f"roce send: warning: {skipped} frames of a link type that cannot be sent "
                  "as Ethernet were left out", file=sys.stderr)
        return out
    if args.opcode is None:
        raise UsageError("give an OPCODE to craft, or -r FILE")
    return (p.to_bytes() for p in iter_packets(args, args.count or 1))


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (UsageError, InputError) as exc:
        return fail("send", exc)
    except (iface.InterfaceError, CaptureError) as exc:
        return fail("send", InputError(str(exc)))


def _run(args: argparse.Namespace) -> int:
    if not args.interface:
        raise UsageError("-i IFACE is required: nothing is sent without an explicit interface")
    crafted = _frames(args)  # usage errors first, before touching the interface
    iface.check_interface(args.interface)  # and a missing one before --count frames are built
    frames = list(crafted)
    if not frames:
        print("roce send: nothing to send", file=sys.stderr)
        return 0
    gap = args.interval if args.interval is not None else (
        1 / args.pps if args.pps is not None else None)
    sender = iface.open_sender(args.interface, args.backend)
    wall = time.time_ns()
    with sender, iface.stop_on_sigterm():
        batch = iface.FrameBatch(frames)
        t0 = time.monotonic()
        if gap is None:
            rep = send_topspeed(sender, batch, 1)
        else:
            offsets = [round(i * gap * NS) for i in range(len(frames))]
            rep = send_paced(sender, batch, offsets, 0, 1)
        elapsed = time.monotonic() - t0
    stamped = list(zip(frames, frame_times(len(frames), gap or 0, wall)))
    if args.write is not None:
        write_frames(args.write, stamped, args.pcapng)
    if args.verbose:
        print_lines(describe(stamped), sys.stdout)
    text = (f"sent {rep.sent} frames ({rep.nbytes} bytes) on {args.interface} in "
            f"{elapsed:.3f} s")
    if rep.sent > 1:
        text += f"; {rep.pps:.0f} pps, {rep.mbps:.2f} Mb/s"
    print(text)
    if rep.failed:
        print(f"roce send: {args.interface} refused {rep.failed} of {len(frames)} frames "
              f"({max(map(len, frames))} bytes; MTU {sender.mtu})", file=sys.stderr)
        return 2
    return 130 if rep.interrupted else 0


__all__ = ["add_arguments", "run"]
