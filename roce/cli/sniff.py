"""``roce sniff``: capture RoCE live on an interface and decode it as ``roce decode`` does.

::

    roce sniff -i eth1                                 one line per packet
    roce sniff -i eth1 -V -c 5                         full header trees, stop after 5
    roce sniff -i eth1 -Y 'nak or cnp' -w naks.pcap    display filter, save what is shown
    roce sniff -i eth1 -T fields -e bth.psn -e aeth.msn --duration 10
    roce sniff -i eth1 -f 'udp port 4791 and host 10.0.0.2' -q -w all.pcap

Frames come from an ``AF_PACKET`` socket bound to the interface (promiscuous unless
``-p``) with a capture filter in the kernel: ``-f`` takes tcpdump syntax, compiled by
libpcap (or ``tcpdump -ddd``); the default is ``udp port 4791 or ether proto 0x8915``
(the port follows ``--udp-port``).  Without libpcap and tcpdump the default filter runs in
Python and ``-f`` is refused.  Linux removes 802.1Q tags before capture sockets see a
frame; they are put back from the packet's metadata, as libpcap does, and the kernel
filter sees the frame without its tag (so ``-f 'vlan ...'`` does not match here).
Timestamps are the kernel's, in nanoseconds.

Decoding is ``roce.decoder.decode.decode_frames``; the outputs, display filter (``-Y``) and
their options are ``roce decode``'s.  ``-w FILE`` saves the frames that are shown (every
captured frame without ``-Y``/``--only-roce``), flushed per packet.  A line
``listening on IFACE ...`` on standard error says when capture has started.  The capture
stops cleanly on Ctrl-C or SIGTERM, after ``-c N`` shown packets or ``--duration SEC``; the
counts (captured, shown, dropped by the kernel) go to standard error.

Exit status: 0 done, 1 bad usage or a filter that does not compile, 2 environment problem
(unknown or down interface, no privilege, no filter compiler for ``-f``, unwritable -w).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

from roce import fast, iface
from roce.cli import _decode_options as output_options
from roce.cli.craft import InputError, UsageError, fail, open_writer
from roce.decoder import decode, output
from roce.decoder.filter import FilterError
from roce.families.base import summary, tree
from roce.headers import LAYOUTS
from roce.locate import L3_GRH, LINKTYPE_ETHERNET, NR_PORT, OK, is_malformed
from roce.options import bounded_int, parse_seconds
from roce.pcapio import Frame, PcapNgWriter, PcapWriter

SNAPLEN = 262144
ETHERTYPE_ROCEV1 = 0x8915
DisplayFilter = Callable[[Mapping[str, object]], bool]


def default_filter(udp_port: int) -> str:
    return f"udp port {udp_port} or ether proto 0x{ETHERTYPE_ROCEV1:04x}"


def python_filter(udp_port: int) -> Callable[[bytes], bool]:
    """The default capture filter, in Python (when nothing compiles BPF)."""
    walk = fast.walk
    sport = LAYOUTS["udp"].field("srcport").byte_offset

    def accept(data: bytes) -> bool:
        w = walk(data, LINKTYPE_ETHERNET, udp_port)
        if w.status == OK or w.bth_off >= 0 or w.l3_kind == L3_GRH:  # RoCE, malformed, v1
            return True
        if w.status == NR_PORT:  # "udp port N" also matches the source port
            off = w.udp_off + sport
            return int.from_bytes(data[off:off + 2], "big") == udp_port
        return w.udp_off >= 0 and is_malformed(w.status)  # bad UDP length, RoCE port

    return accept


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("exit status: 0 done, 1 bad usage or filter, 2 interface problem "
                     "(unknown, down, no privilege) or unwritable -w.")
    g = parser.add_argument_group("capture")
    g.add_argument("-i", "--interface", metavar="IFACE", help="interface to capture on")
    g.add_argument("-f", "--capture-filter", metavar="EXPR", dest="capture_filter",
                   help="tcpdump-syntax filter (default: udp port 4791 or ether proto 0x8915)")
    g.add_argument("-p", "--no-promiscuous-mode", action="store_false", dest="promiscuous",
                   help="do not put the interface in promiscuous mode")
    # libpcap's largest snapshot length (MAXIMUM_SNAPLEN) is also ours: a frame buffer
    g.add_argument("-s", "--snapshot-length", type=bounded_int(1, SNAPLEN, "a snapshot length"),
                   default=SNAPLEN,
                   metavar="N", dest="snaplen", help=f"bytes kept per frame (default {SNAPLEN})")
    g.add_argument("-Q", "--direction", choices=("in", "out", "inout"), default="inout",
                   help="frames received, sent, or both (default)")
    g.add_argument("--duration", type=parse_seconds, metavar="SEC",
                   help="stop after SEC seconds")
    g.add_argument("-w", "--write", metavar="FILE",
                   help="save the packets shown to a pcap (pcapng if named .pcapng)")
    g.add_argument("-q", "--quiet", action="store_true", help="print no packets (with -w)")
    g = parser.add_argument_group("decoding (as roce decode)")
    output_options.add_output_arguments(g)


class _Output:
    """Everything printed per shown record, in the chosen format."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.out = out
        self.verbose, self.hexdump = args.verbose, args.hexdump
        self.print_summary = args.print_summary
        fmt = args.format
        self.writer: output.JsonWriter | output.FieldsWriter | output.CsvWriter | None = None
        if args.quiet:
            self.writer = None
            self.quiet = True
        else:
            self.quiet = False
            if fmt in ("json", "jsonl"):
                self.writer = output.JsonWriter(out, lines=fmt == "jsonl")
            elif fmt == "fields":
                # decode's -E options: shared so both commands read them alike
                self.writer = output.FieldsWriter(out, args.fields,
                                                  **output_options.field_options(args.field_options))
            elif fmt == "csv":
                self.writer = output.CsvWriter(out, args.fields)
        colour = fmt == "text" and output_options.want_colour(args.color, out)
        self.summ = summary.Summarizer(summary.TimeColumn(args.time_format, 9), args.udp_port,
                                       colour)
        w = self.writer
        self.want_summary = w is None and not self.quiet and (
            not self.verbose or self.print_summary)
        self.want_columns = w.needs_columns if w is not None else self.want_summary

    def add(self, rec: decode.Record) -> None:
        if self.quiet:
            return
        if self.want_columns:
            fr = rec.frame
            text = self.summ.times.record_text(rec.ts_ns, rec.rel_ns, rec.delta_ns)
            cols = self.summ.columns(fr.data, rec.walk, rec.fields, fr.linktype, fr.caplen,
                                     fr.origlen, rec.message)
            rec.columns = {"No.": rec.number, "Time": text, "Source": cols[0],
                           "Destination": cols[1], "Protocol": cols[2], "Length": fr.origlen,
                           "Info": cols[3]}
            if self.want_summary:
                self.out.write(self.summ.line(rec.number, text, fr.origlen, cols) + "\n")
        if self.writer is not None:
            self.writer.add(rec)
            return
        if self.verbose:
            self.out.write(tree.render(rec))
        if self.hexdump:
            self.out.write(tree.hexdump(rec.frame.data) + "\n")

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()
        self.out.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.out.flush()


def _check_usage(args: argparse.Namespace) -> DisplayFilter | None:
    """Usage errors before anything is opened; returns the compiled display filter."""
    if not args.interface:
        raise UsageError("-i IFACE is required")
    output_options.check_output_options(args)
    if args.filter is None:
        return None
    return decode.make_filter(args.filter)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except FilterError as exc:  # the message has its own caret line
        print(str(exc), file=sys.stderr)
        return 1
    except (UsageError, InputError) as exc:
        return fail("sniff", exc)
    except iface.FilterError as exc:
        return fail("sniff", UsageError(str(exc)))
    except iface.InterfaceError as exc:
        return fail("sniff", InputError(str(exc)))
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0


def _run(args: argparse.Namespace) -> int:
    display = _check_usage(args)
    expr = args.capture_filter if args.capture_filter is not None else default_filter(
        args.udp_port)
    prog = iface.compile_filter(expr, args.snaplen) if expr.strip() else []
    in_python: Callable[[bytes], bool] | None = None
    if prog is None:
        if args.capture_filter is not None:
            raise iface.InterfaceError("cannot compile -f: neither libpcap nor tcpdump is "
                                       "installed")
        in_python = python_filter(args.udp_port)
    sock = iface.open_capture_socket(args.interface, prog or None, args.promiscuous)
    try:  # the file only once capture can start: a failed run leaves no empty pcap behind
        # written in place, record by record, readable as it grows (tcpdump -U)
        saver = open_writer(args.write, live=True) if args.write is not None else None
    except BaseException:
        sock.close()
        raise
    counts = _Counts()
    out = _Output(args, sys.stderr if args.write == "-" else sys.stdout)
    # From here on a stop signal (Ctrl-C, SIGTERM, SIGHUP: roce.interrupts) is the end of
    # the capture, as in tcpdump, wherever it lands: the file ends on its last whole record
    try:
        where = "in Python" if in_python else "in the kernel"
        print(f"listening on {args.interface}, link-type EN10MB (Ethernet), snapshot "
              f"length {args.snaplen} bytes, filter {expr!r} ({where})", file=sys.stderr,
              flush=True)
        _capture(args, sock, display, in_python, out, saver, counts)
    except KeyboardInterrupt:
        pass
    finally:
        out.close()
        if saver is not None:
            saver.close()
        _received, dropped = iface.capture_stats(sock)
        sock.close()
    print(f"{counts.captured} packets captured, {counts.shown} shown, {dropped} dropped by "
          "the kernel", file=sys.stderr)
    return 0


class _Counts:
    __slots__ = ("captured", "shown")

    def __init__(self) -> None:
        self.captured = 0
        self.shown = 0


def _capture(args: argparse.Namespace, sock: Any, display: DisplayFilter | None,
             in_python: Callable[[bytes], bool] | None, out: _Output,
             saver: PcapWriter | PcapNgWriter | None, counts: _Counts) -> None:
    """The capture loop, until -c, --duration or an interrupt."""
    deadline = None if args.duration is None else time.monotonic() + args.duration
    limit = args.count or sys.maxsize
    want = {"in": False, "out": True}.get(args.direction)

    def frames() -> Iterator[Frame]:
        for cap in iface.receive(sock, args.snaplen, deadline, out.flush):
            if want is not None and cap.outgoing is not want:
                continue
            if in_python is not None and not in_python(cap.data):
                continue
            counts.captured += 1
            yield Frame(cap.data, cap.ts_ns, len(cap.data), max(cap.origlen, len(cap.data)),
                        LINKTYPE_ETHERNET, 0)

    for rec in decode.decode_frames(frames(), args.udp_port, args.only_roce):
        if display is not None and not display(rec.fields):
            continue
        counts.shown += 1
        if saver is not None:
            fr = rec.frame
            saver.write(fr.data, fr.ts_ns, fr.origlen)
            saver.flush()
        out.add(rec)
        if counts.shown >= limit:
            break


__all__ = ["add_arguments", "default_filter", "python_filter", "run"]
