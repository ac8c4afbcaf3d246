"""``roce stats FILE``: per-flow analysis of a RoCE capture (the analysis is in ``flows``).

Prints one table per connection (both directions side by side) or lone flow, the capture
totals, then the expert list (errors, warnings, notes; the first 20 by severity unless
``--expert``).  ``-T json`` prints all of it as one JSON object.  Tables use rich when stdout
is a terminal and plain aligned text otherwise, so output piped to a file or ``grep`` reads
the same as on screen minus the colours.

Exit status: 0 analysed (malformed packets and a damaged tail are findings, not failures),
1 bad usage, 2 the input cannot be read as a capture (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Callable
from typing import IO

from roce import locate
from roce.analysis import flows as fl
from roce.analysis import pauses, tap, uetflows
from roce.analysis.statsview import EXPERT_DEFAULT, sections, write_text
from roce.decoder.progress import Progress
from roce.families.uet import READING_NAMES as UET_READINGS
from roce.options import parse_port, parse_positive_time, rate_within
from roce.pcapio import CaptureError, CaptureReader, open_capture

PROG = "roce stats"
# --link-rate: the rates the PFC accounting can represent (Gb/s)
LINK_RATE = rate_within(*pauses.LINK_RATE_GBPS, "Gb/s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Values are checked by their argparse types (roce.options); roce's parser exits 1.
    parser.add_argument("file", nargs="*", metavar="FILE",
                        help="pcap or pcapng captures (gzip allowed), directories or globs; "
                        "- reads stdin")
    parser.add_argument("-T", dest="format", default="text", metavar="FORMAT", type=str.lower,
                        choices=("text", "json", "parquet"),
                        help="output format: text (default), json or parquet (-w DIR)")
    parser.add_argument("--expert", action="store_true",
                        help=f"list every expert event (default: the first {EXPERT_DEFAULT} "
                        "by severity)")
    parser.add_argument("--udp-port", type=parse_port, default=locate.ROCE_PORT, metavar="N",
                        help=f"RoCEv2 UDP destination port (default {locate.ROCE_PORT})")
    parser.add_argument("--link-rate", type=LINK_RATE, default=pauses.DEFAULT_LINK_RATE,
                        metavar="RATE",
                        help="link rate that turns pause quanta into time (Gb/s, default "
                        f"{pauses.DEFAULT_LINK_RATE})")
    parser.add_argument("--pause-storm", type=parse_positive_time, default=pauses.DEFAULT_STORM,
                        metavar="TIME",
                        help="expert warning when a priority stays paused longer than TIME "
                        f"without a break (default {pauses.DEFAULT_STORM})")
    parser.add_argument("--cnp-interval", type=parse_positive_time, metavar="TIME",
                        help="expert warning when two CNPs to one QP come closer than TIME "
                        "(the notification point's np_min_time_between_cnps, e.g. 4us)")
    parser.add_argument("-d", "--decode-as", action="append", default=[], dest="decode_as",
                        metavar="TABLE==VALUE,uet",
                        help="analyse a UDP port or IP protocol as Ultra Ethernet, as roce "
                             "decode -d does: udp.port==49150,uet (RoCE's port is --udp-port)")
    parser.add_argument("--uet-layout", choices=UET_READINGS, default="spec",
                        help="Ultra Ethernet Transport layouts: spec (default) or ref-prov "
                             "(the reference provider's; as roce decode --uet-layout)")
    parser.add_argument("--timeline", type=parse_positive_time, metavar="INTERVAL",
                        help="per-QP throughput, CNPs, retransmissions and PAUSE frames per "
                        "INTERVAL (e.g. 10us; one capture file, read a second time)")
    from roce.cli._fleet import add_stats_arguments  # --merge, -w, -j, --scheduler

    add_stats_arguments(parser)


def _usage(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    if not args.file:
        return _usage("missing FILE (a capture file, or - for stdin)")
    fmt, port = args.format, args.udp_port
    rate_bps, storm_ns = args.link_rate * 1e9, args.pause_storm
    cnp_interval, timeline = args.cnp_interval, args.timeline
    if args.decode_as or args.uet_layout != "spec":  # rows of the registry for this run
        from roce.families import rows, uet

        for spec, (_t, _v, family) in zip(args.decode_as, rows.apply(rows.run_rows(
                args.decode_as, args.uet_layout))):
            if family not in uet.HANDLERS.values():
                return _usage(f"-d {spec}: roce stats takes Ultra Ethernet rows (...,uet); "
                              "RoCE's UDP port is --udp-port")
    from roce.cli import _fleet as fleetcmd

    if fleetcmd.wants_stats(args):  # several captures, --merge, Parquet tables
        if timeline is not None:
            return _usage("--timeline takes one capture file")
        return fleetcmd.stats(args, fmt, port, (rate_bps, storm_ns), cnp_interval)
    if timeline is not None and args.file[0] == "-":
        return _usage("--timeline reads the capture twice: give a file, not stdin")
    args.file = args.file[0]
    account = pauses.PauseAccount(rate_bps, storm_ns)

    try:
        reader, size, fh = _open(args.file)
    except CaptureError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    from roce.analysis import inner as tunnelled  # ERSPAN / GRE / VXLAN / ERF: inner flows

    kind = tunnelled.capture_kind(args.file, port)
    # tunnels peeled; ERF records unwrapped (native InfiniBand in ERF included): the engine
    # analyses the frames inside.
    reader = tunnelled.analysed(reader, kind, port)
    uet = uetflows.UetAnalysis(port)  # Ultra Ethernet's PDCs, beside the RoCE flows
    try:
        report = _analyse(reader, port, size, _position(reader, fh) if size else None,
                          account, uet)
        _warn_linktypes(reader)
    except CaptureError as exc:  # a read error after the header
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    finally:
        reader.close()
        if fh is not None:
            fh.close()
    pfc = account.finish()
    pfc.merge_into(report)
    from roce.analysis.ccstats import CcReport

    cc = CcReport(report, cnp_interval)
    cc.merge_into(report)
    if timeline is not None:
        try:
            with open_capture(args.file) as again:  # the frames the first pass analysed
                peeled = tunnelled.analysed(again, kind, port)
                cc.add_timeline(again if peeled is again else tunnelled.frames(peeled, port),
                                timeline, port)
        except CaptureError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2
    report.problems = [p.message for p in reader.problems]
    if report.problems:
        more = len(report.problems) - 1
        print(f"{PROG}: warning: {reader.name}: {report.problems[0]}"
              + (f" (and {more} more problem{'s' * (more > 1)})" if more else ""),
              file=sys.stderr)

    out = sys.stdout
    # native InfiniBand: CM exchanges and the connections they set up
    cm = tunnelled.cm_pairing(args.file) if kind == "ib" else None
    if fmt == "json":
        doc = {"capture": {"file": reader.name, "format": reader.format,
                           "compressed": reader.compressed},
               **sections(report, pfc, cc, cm)}
        if uet.packets:
            doc["uet"] = uet.to_dict()
        json.dump(doc, out, indent=1)
        out.write("\n")
    else:
        write_text(report, reader.name, out, args.expert, pfc, cc, cm)
        if uet.packets:
            out.write("\n" + "\n".join(uet.lines()) + "\n")
    out.flush()
    return 0


def _open(path: str) -> tuple[CaptureReader, int, IO[bytes] | None]:
    """The reader, the file size (0 unless a regular file) and the open file (its position
    drives the progress bar); the caller closes both."""
    if path == "-":
        return open_capture("-"), 0, None
    try:
        fh = open(path, "rb")
    except OSError:
        # Let pcapio word the failure (no such file, permission, directory) as it always does.
        return open_capture(path), 0, None
    try:
        reader = open_capture(fh)
    except BaseException:
        fh.close()
        raise
    st = os.fstat(fh.fileno())
    return reader, st.st_size if stat.S_ISREG(st.st_mode) else 0, fh


def _position(reader: CaptureReader, fh: IO[bytes] | None) -> Callable[[], int] | None:
    """How far through the file the run is, for the progress bar: the compressed bytes
    decompressed so far for a gzip-compressed capture (the file's read position jumps a
    megabyte at a time, and a megabyte may hold a gigabyte of records), else the position."""
    if reader.compressed:
        return lambda: reader.compressed_done or 0
    return fh.tell if fh is not None else None


def _warn_linktypes(reader: CaptureReader) -> None:
    """One line per link type of the capture that roce cannot read: otherwise its frames
    would only show up as "not RoCE", with no word about why."""
    known = locate.LINKTYPE_NAMES
    reads = getattr(reader, "reads", None)  # a Peel reads what a tunnel unwraps (ERF)
    for lt in reader.linktypes:
        if lt not in known and not (reads is not None and reads(lt)):
            print(f"{PROG}: warning: {reader.name}: link type {lt} is not supported (only "
                  f"{', '.join(f'{n} ({v})' for v, n in known.items())}); its frames are "
                  "counted as not RoCE", file=sys.stderr)


def _analyse(reader: CaptureReader, port: int, size: int,
             where: Callable[[], int] | None,
             account: pauses.PauseAccount | None = None,
             uet: uetflows.UetAnalysis | None = None) -> fl.Report:
    analyzer = fl.make_analyzer(port)
    compressed = getattr(reader, "compressed", False)
    if uet is not None:  # UET packets: seen beside the engine (tap.Tap)
        reader = tap.Tap(reader, analyzer, uet)  # type: ignore[assignment]
    if account is not None:  # PFC / PAUSE frames: seen beside the engine (tap.Tap)
        reader = tap.Tap(reader, analyzer, account)  # type: ignore[assignment]
    progress = Progress("analysing", size if where else 0)

    def tick(frames: int, offset: int | None) -> None:
        # a stream offset is a file offset unless the file is compressed
        if progress.enabled:
            progress.update(offset if offset is not None and not compressed else
                            where() if where else None, frames)

    try:
        analyzer.feed_capture(reader, tick)
    finally:
        progress.close()
    return analyzer.finish()
