"""``roce send``: put crafted frames (or the frames of a capture) on a network interface.

::

    roce send rc-send-only -i eth1 --dqpn 0x11 --payload-size 64 --count 1000 --pps 10000
    roce send rc-rdma-write-only -i eth1 --va 0x1000 --rkey 0x22 --payload-hex deadbeef
    roce send -r frames.pcap -i eth1 --interval 0.001

The frame options are ``roce craft``'s (``roce send -h`` lists them).  Nothing is sent
without ``-i``.  Crafted frames go from the interface's MAC to the MAC of their destination
(``--dst``, default 10.0.0.2) on that interface: the kernel's neighbour table, else ARP
(``roce.iface.resolve_mac``), as ``roce target`` finds its peers; ``--smac``/``--dmac``
or ``--field eth.src=``/``eth.dst=`` win.  With ``-r`` the capture's frames keep their MACs
(those of other link types get the interface's and the peer's, as ``roce replay`` does).

Frames go out back to back unless ``--interval SEC`` or ``--pps N`` paces them (the pacing
of ``roce replay``: monotonic deadlines, sleep then spin).  With ``-r`` the
frames come from a capture, in order, as captured (``--count N``: the first N); use
``roce replay`` for the capture's own timing and for rewrites.  ``-v`` prints each frame
in ``roce decode``'s one-line form; ``-w FILE`` also saves them.  The last line reports the
frames and bytes sent and the rate.

Exit status: 0 sent, 1 bad usage, 2 environment problem: unknown interface, interface down
or without carrier, no privilege for a raw socket, a peer whose MAC cannot be found,
unreadable capture, frames the interface refused (longer than its MTU allows); 130
interrupted (the report is still printed).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from roce import iface
from roce.cli.craft import (
    InputError,
    UsageError,
    add_frame_arguments,
    build_packets,
    describe,
    destination,
    fail,
    frame_options_given,
    frame_times,
    given_fields,
    iter_packets,
    open_writer,
    print_lines,
    written,
)
from roce.cli.replay import (
    MIN_FRAME,
    PeerMacs,
    Report,
    send_paced,
    send_topspeed,
    short_frames_warning,
    to_ethernet,
)
from roce.locate import LINKTYPE_ETHERNET
from roce.options import parse_positive, parse_pps, parse_seconds
from roce.pcapio import CaptureError, open_capture

NS = 1_000_000_000
CHUNK = 4096  # frames built, sent and saved at a time: memory follows this, not --count
LEAD_NS = 2_000_000  # a paced run's first frame is due this long after the start


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
    pace.add_argument("--pps", type=parse_pps, metavar="N", help="frames per second")
    g.add_argument("-w", "--write", metavar="FILE", help="also save the frames sent to a pcap")
    g.add_argument("--pcapng", action="store_true", help="-w writes pcapng")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="print each frame in roce decode's one-line form")
    g.add_argument("--backend", choices=("auto", "packet", "scapy"), default="auto",
                   help="AF_PACKET socket (auto) or Scapy's L2 socket")


class _Skipped:
    """Frames of a capture left out: of a link type that cannot be sent as Ethernet
    (``count``), shorter than an Ethernet header (``short``)."""

    count = 0
    short = 0

    def warn(self) -> None:
        """One line for each kind of frame left out."""
        if self.count:
            print(f"roce send: warning: {self.count} frames of a link type that cannot be "
                  "sent as Ethernet were left out", file=sys.stderr)
        if self.short:
            print(short_frames_warning("send", self.short), file=sys.stderr)


def _frames(args: argparse.Namespace, skipped: _Skipped) -> Iterator[bytes]:
    """The frames to send, built or read lazily (checked for usage errors first)."""
    if args.read_file is not None:
        if args.opcode is not None:
            raise UsageError("give an OPCODE to craft or -r FILE, not both")
        given = frame_options_given(args)
        if given:
            raise UsageError(f"{given[0]} describes crafted frames; with -r the capture's "
                             "frames are sent as they are (roce replay rewrites)")
        reader = open_capture(args.read_file)  # an unreadable file fails here, before sending
        return _capture_frames(reader, args.count, skipped, PeerMacs(args.interface))
    if args.opcode is None:
        raise UsageError("give an OPCODE to craft, or -r FILE")
    return (p.to_bytes() for p in iter_packets(args, args.count or 1))


def _capture_frames(reader: Any, count: int | None, skipped: _Skipped,
                    macs: PeerMacs) -> Iterator[bytes]:
    with reader:
        for f in itertools.islice(reader, count):
            eth = to_ethernet(f.data, f.linktype)
            if eth is None:
                skipped.count += 1
            elif len(eth) < MIN_FRAME:
                skipped.short += 1
            else:
                yield eth if f.linktype == LINKTYPE_ETHERNET else macs(eth)


def _peer_macs(args: argparse.Namespace) -> bool:
    """Fill in the MACs of crafted frames that the options leave open: the interface's as
    the source, the destination's on that interface (neighbour table, else ARP) as the
    destination.  True when something was filled in."""
    given = given_fields(args)
    filled = False
    if "eth.src" not in given:
        args.smac = iface.interface_mac(args.interface)
        filled = True
    if "eth.dst" not in given:
        ip = destination(build_packets(args, 1)[0])
        try:
            args.dmac = iface.resolve_mac(args.interface, ip)
        except iface.InterfaceError as exc:
            raise iface.InterfaceError(f"{exc}; --dst names the peer, --dmac its MAC"
                                       ) from None
        filled = True
    return filled


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (UsageError, InputError) as exc:
        return fail("send", exc)
    except (iface.InterfaceError, CaptureError) as exc:
        return fail("send", InputError(str(exc)))


def _one_after_another(frames: deque[tuple[bytes, int]]) -> Iterator[tuple[bytes, int]]:
    """The -v lines' input: the describer asks for one frame per line and is asked for
    exactly as many lines as frames were queued, so the queue is never empty here."""
    while True:
        yield frames.popleft()


def _run(args: argparse.Namespace) -> int:
    if not args.interface:
        raise UsageError("-i IFACE is required: nothing is sent without an explicit interface")
    skipped = _Skipped()
    frames = _frames(args, skipped)  # usage errors first, before touching the interface
    iface.check_interface(args.interface)  # and a missing one before any frame is built
    if args.read_file is None and _peer_macs(args):
        frames = _frames(args, skipped)  # built again with the MACs
    gap = args.interval if args.interval is not None else (
        1 / args.pps if args.pps is not None else None)
    wall = time.time_ns()
    if args.read_file is None:  # a crafted run's last timestamp is known: check it now
        frame_times(args.count or 1, gap or 0, wall,
                    option="--pps" if args.pps is not None else "--interval")
    step = round((gap or 0) * NS)
    chunks = iter(lambda: list(itertools.islice(frames, CHUNK)), [])
    first = next(chunks, [])
    if not first:
        skipped.warn()
        print("roce send: nothing to send", file=sys.stderr)
        return 0
    queued: deque[tuple[bytes, int]] = deque()
    lines = describe(_one_after_another(queued)) if args.verbose else None
    writer = open_writer(args.write, args.pcapng) if args.write is not None else None
    out = sys.stderr if args.write == "-" else sys.stdout  # -w -: the pcap has stdout
    reports: list[Report] = []
    longest = 0
    broken: CaptureError | None = None
    sender = iface.open_sender(args.interface, args.backend)
    start = time.monotonic_ns() + LEAD_NS  # one schedule for every chunk
    t0 = time.monotonic()
    index = 0
    with sender, writer or contextlib.nullcontext():
        try:
            for chunk in itertools.chain([first], chunks):
                batch = iface.FrameBatch(chunk)
                if gap is None:
                    rep = send_topspeed(sender, batch, 1)
                else:
                    offsets = [round((index + i) * gap * NS) for i in range(len(chunk))]
                    rep = send_paced(sender, batch, offsets, 0, 1, start_ns=start)
                reports.append(rep)
                longest = max(longest, max(map(len, chunk)))
                if rep.interrupted:  # -w saves what went out: the frames tried, in order
                    chunk = chunk[:rep.sent + rep.failed]
                stamped = [(f, wall + (index + i) * step) for i, f in enumerate(chunk)]
                index += len(chunk)
                if writer is not None:
                    for _ in written(writer, args.write, stamped):
                        pass
                if lines is not None:
                    queued.extend(stamped)
                    print_lines(itertools.islice(lines, len(stamped)), out)
                if rep.interrupted:
                    break
        except KeyboardInterrupt as exc:  # between two chunks: what was sent is reported
            reports.append(Report(0, 0, 0, 0, 0, None, exc))
        except CaptureError as exc:  # a capture broken part way: report what went, then fail
            broken = exc
        elapsed = time.monotonic() - t0
    skipped.warn()
    sent = sum(r.sent for r in reports)
    failed = sum(r.failed for r in reports)
    timed = [r for r in reports if r.sent or r.failed]
    rep = Report(sent, sum(r.nbytes for r in reports), failed, timed[0].first_ns if timed else 0,
                 timed[-1].last_ns if timed else 0, None,
                 next((r.interrupted for r in reports if r.interrupted), None))
    text = (f"sent {rep.sent} frames ({rep.nbytes} bytes) on {args.interface} in "
            f"{elapsed:.3f} s")
    if rep.sent > 1:
        text += f"; {rep.pps:.0f} pps, {rep.mbps:.2f} Mb/s"
    print(text, file=out)
    if broken is not None:
        print(f"roce send: {broken} (after {index} frames)", file=sys.stderr)
    if rep.failed:
        print(f"roce send: {args.interface} refused {rep.failed} of {index} frames "
              f"({longest} bytes; MTU {sender.mtu})", file=sys.stderr)
    if broken is not None or rep.failed:
        return 2
    if rep.interrupted:  # the frames sent are reported and saved (-w); then exit 130
        rep.interrupted.add_note(f"after {rep.sent:,} frames sent")
        raise rep.interrupted
    return 0


__all__ = ["add_arguments", "run"]
