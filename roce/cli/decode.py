"""``roce decode``: the command.  Reads captures and prints them as tshark does, through the
decoder in ``roce.decoder.decode`` (one line per packet, ``-V`` trees, ``-T`` formats, ``-Y``
filters); several captures and columnar output go through ``roce.cli._fleet``.

Only the dispatcher (``roce.cli``) and the decoder fuzz harness import this module; the
decoder itself is a library that any module may use.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from roce import fast
from roce.cli._decode_options import add_output_arguments, check_output_options, want_colour
from roce.decoder.decode import (
    BATCH,
    PIPE_BATCH,
    Record,
    decode_frames,
    decode_text,
    filter_macros,
    header_fields,
    known_fields,
    make_filter,
)
from roce.decoder.progress import Progress
from roce.errors import UsageError
from roce.families.base import fields, summary
from roce.families.uet import READING_NAMES as UET_READINGS
from roce.locate import (
    Walk,
    explain,
    is_malformed,
)
from roce.pcapio import Batch, CaptureError, CaptureReader, Frame, open_capture


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "filter macros: ack nak rnr cnp read write send atomic bad_icrc ecn_ce pfc pause,\n"
        "and one per opcode (rc.send.only, rc.rdma.write.first, rc.ack, ud.send.only, ...);\n"
        "bth.opcode takes names: -Y 'bth.opcode == rc-rdma-read-request'.\n"
        "-T fields prints values as tshark does (bth.destqp 0x000048; -E raw=y: decimal);\n"
        "-T csv prints integers in decimal; booleans as 1/0; absent fields empty.\n"
        "exit status: 0 read (even with malformed packets), 1 usage or filter error,\n"
        "2 unreadable capture.")
    parser.add_argument("file", nargs="*", metavar="FILE",
                        help="pcap/pcapng captures (gzip ok), directories or globs; - reads "
                             "standard input")
    parser.add_argument("-r", "--read-file", metavar="FILE", dest="read_file",
                        help="capture to read (same as FILE)")
    add_output_arguments(parser)
    parser.add_argument("-d", "--decode-as", action="append", default=[], dest="decode_as",
                        metavar="TABLE==VALUE,FAMILY",
                        help="decode as tshark's -d does: udp.port==4792,roce (tables: "
                             "linktype ethertype ip.proto udp.port gre.proto erf.type)")
    parser.add_argument("--uet-layout", choices=UET_READINGS, default="spec",
                        help="Ultra Ethernet Transport layouts: spec (UE 1.0.1 as Wireshark "
                             "5.0 reads it, default) or ref-prov (the reference provider's "
                             "uet_pkt_hdr.h; docs/protocol.md lists the differences)")
    parser.add_argument("-G", "--list", choices=("fields", "macros"), dest="list",
                        help="print the field names or the filter macros and exit")
    from roce.cli._fleet import add_decode_arguments  # -T parquet|arrow, -w, -j, --scheduler

    add_decode_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except UsageError as exc:
        print(f"roce decode: {exc}", file=sys.stderr)
        return 1
    except CaptureError as exc:
        print(f"roce decode: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `roce decode f | head`: the reader left.  Point stdout at /dev/null so the
        # interpreter's final flush does not complain, and exit quietly.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 0


def _run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.list:
        names = sorted(known_fields()) if args.list == "fields" else [
            f"{k}\t{v}" for k, v in sorted(filter_macros().items())]
        out.write("\n".join(names) + "\n")
        return 0
    from roce.cli import _fleet as fleetcmd

    apply_registry_options(args)  # before the fleet: its workers are forked from here
    if fleetcmd.wants_decode(args):  # several captures, columnar output
        return fleetcmd.decode(args, run)
    args.file = args.file[0] if args.file else None
    if args.file and args.read_file and args.file != args.read_file:
        raise UsageError("give the capture once: FILE or -r FILE")
    path = args.read_file or args.file
    if path is None:
        raise UsageError("no capture given (FILE, -r FILE, or - for standard input)")
    fmt = args.format
    field_opts = check_output_options(args)
    flt = None
    if args.filter is not None:
        from roce.decoder.filter import FilterError

        try:
            flt = make_filter(args.filter)
        except FilterError as exc:
            print(str(exc), file=sys.stderr)
            return 1
    colour = fmt == "text" and want_colour(args.color, out)

    reader = open_capture(path)
    gc_was_enabled = gc.isenabled()
    # Decoding makes millions of short-lived acyclic objects; the cyclic collector would
    # rescan them for nothing (a third of the run time on big captures).
    gc.disable()
    size = 0
    if path not in (None, "-"):
        try:
            size = os.path.getsize(path)
        except OSError:
            pass
    progress = Progress("decoding", size, out)
    try:
        times = summary.TimeColumn(args.time_format, 9 if reader.nanosecond else 6)
        summ = summary.Summarizer(times, args.udp_port, colour)
        limit = args.count or sys.maxsize
        if fmt == "text" and not (args.verbose or flt or args.hexdump):
            batch = PIPE_BATCH if path == "-" else BATCH
            _lines(reader, summ, args, limit, out, progress, batch)
        else:
            _records(reader, summ, args, flt, limit, out, progress, field_opts)
        out.flush()
    finally:
        progress.close()
        reader.close()
        if gc_was_enabled:
            gc.enable()
    _warn_problems(reader)
    return 0


def apply_registry_options(args: argparse.Namespace) -> None:
    """``-d TABLE==VALUE,FAMILY`` and ``--uet-layout``: rows of the registry for this run."""
    from roce.families import rows

    rows.apply(rows.run_rows(getattr(args, "decode_as", None), getattr(args, "uet_layout", None)))


# Frames up to this long whose walk says malformed are alike often enough (zero-length
# records, runt frames) that the one-line view keeps their columns (``_lines``).
SHORT_FRAME = 64


def _done(reader: CaptureReader, stream_bytes: int) -> int:
    """How far through the file a run is, for the progress bar against the file's size: the
    compressed bytes decompressed so far for a gzip-compressed capture, else the bytes of
    the frames read (and their record headers)."""
    done = reader.compressed_done
    return stream_bytes if done is None else done


def _warn_problems(reader: CaptureReader) -> None:
    problems = reader.problems
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        print(f"roce decode: warning: {reader.name}: {problems[0].message}{more}",
              file=sys.stderr)


def _lines(reader: CaptureReader, summ: summary.Summarizer, args: argparse.Namespace,
           limit: int, out: TextIO, progress: Progress, batch_size: int) -> None:
    """The one-line path: batches through the fast scan."""
    number = 1
    shown = done = 0
    udp_port, only_roce = args.udp_port, args.only_roce
    walk, known, explain_ = fast.walk, fields.known_headers, explain
    from roce.decoder import familylines as families
    from roce.families import peel, registry

    # the registry decides, once per batch (plugins are loaded if a frame needs them)
    linktypes = registry(plugins=False).tables["linktype"]
    tunnels = False  # set when a tunnel's frame shows up: plain RoCE never pays for peeling
    # The columns of short malformed frames, by their bytes and lengths: a capture may hold
    # millions of alike ones (zero-length records), each otherwise decoded in Python.
    seen: dict[tuple[bytes, int, int, int], tuple[str, str, str, str, str]] = {}
    # UET's lines in C (roce.families.uet.uetlines), made for a whole batch at its first frame
    # the compiled scan calls "not RoCE": None until then, and where Python makes the line
    uet: list[Any] = []
    for batch in reader.batches(batch_size):
        base = number

        def rests(batch: Batch = batch, made: list[Any] = []) -> Any:  # noqa: B006
            """This batch's UET lines after the time column, made once (None: none)."""
            if not made:
                made.append(_uet_rests(uet, batch, summ, udp_port))
            return made[0]

        def slow(i: int, time_text: str, batch: Batch = batch, base: int = base,
                 rests: Any = rests) -> str:
            rest = rests()
            if rest is not None and rest[i] is not None:  # rest_lines' twin
                return f"{base + i:5d} {time_text} {rest[i]}"
            data, caplen, origlen = batch.datas[i], batch.caplen[i], batch.origlen[i]
            key = (data, batch.linktype, caplen, origlen)
            cols = seen.get(key) if len(data) <= SHORT_FRAME else None
            if cols is not None:
                return summ.line(base + i, time_text, origlen, cols)
            w = walk(data, batch.linktype, udp_port)
            if not is_malformed(w.status):
                nonlocal tunnels
                line, tunnel = _family_line(base + i, time_text, batch, i, w, summ, udp_port,
                                            only_roce)
                tunnels = tunnels or tunnel
                if line is not None:
                    return line
                if only_roce:
                    return ""  # hidden: fast_lines was asked to show every frame
            f: dict[str, Any] = {}
            header_fields(known(data, w, batch.linktype), f)
            cols = summ.columns(data, w, f, batch.linktype, caplen, origlen,
                                str(explain_(w)))
            if len(data) <= SHORT_FRAME and is_malformed(w.status):
                if len(seen) >= 4096:
                    seen.clear()
                seen[key] = cols
            return summ.line(base + i, time_text, origlen, cols)

        # With --only-roce the frames the scan calls "not RoCE" still go to ``slow``: a
        # registered tunnel or family may claim them; hidden ones come back empty.
        room = len(batch.datas) if only_roce else limit - shown
        handler = linktypes.get(batch.linktype)
        if handler is not None and handler.name == "roce":  # compiled walk and scan
            # once a tunnel has been seen, peel tunnels before the compiled scan
            tunnels = tunnels or peel.starts_tunnel(batch, udp_port)
            lines = summ.fast_lines(peel.peel(batch, udp_port) if tunnels else batch,
                                    base, False, room, slow, rests)
        else:  # a link type a registered family owns may format its own batches
            lines = families.batch_lines(batch, base, summ, room, slow)
        if only_roce:
            lines = [line for line in lines if line][:limit - shown]
        number += len(batch.datas)
        if lines:
            shown += len(lines)
            out.write("\n".join(lines) + "\n")
        if progress.enabled:
            done += sum(batch.caplen) + 16 * len(batch.datas)
            progress.update(_done(reader, done), number - 1)
        if shown >= limit:
            break


def _uet_rests(uet: list[Any], batch: Batch, summ: summary.Summarizer,
               udp_port: int) -> list[str | None] | None:
    """The compiled UET lines of a batch (after the time column; None for a frame Python
    lines), or None when the extension is not built or no registry row leads to UET.
    ``uet`` holds the run's ``UetLines`` once made."""
    if not uet:
        from roce.families import registry
        from roce.families.uet.uetlines import UetLines

        lines = UetLines(registry(), summ.arrow, udp_port)
        uet.append(lines if lines.enabled else None)
    return uet[0].rests(batch) if uet[0] is not None else None


def _family_line(number: int, time_text: str, batch: Batch, i: int, w: Walk,
                 summ: summary.Summarizer, udp_port: int,
                 only_roce: bool) -> tuple[str | None, bool]:
    """The line of a frame a registered family or tunnel claims (None: not claimed), and
    whether it came through a tunnel."""
    from roce.decoder import records

    fr = Frame(batch.datas[i], batch.ts_ns[i], batch.caplen[i], batch.origlen[i],
               batch.linktype, 0)
    cols, res = records.carried_columns(fr, w, udp_port, only_roce)
    if cols is records.HIDDEN:
        return "", False
    if cols is not None:  # a family over IP or UDP: no record needed for its line
        return summ.line(number, time_text, fr.origlen, cols), False
    if res is None:
        return None, False
    rec = records.record(number, fr.ts_ns, 0, 0, fr, w, udp_port, only_roce, Record,
                         decode_frames, res)
    if rec is None:
        return None, False
    if rec is records.HIDDEN:
        return "", False
    tunnel = bool(rec.outer)
    if rec.family is not None or rec.walk is w:
        cols = records.columns(rec)
    else:
        inner = rec.frame
        cols = summ.columns(inner.data, rec.walk, rec.fields, inner.linktype, inner.caplen,
                            inner.origlen, rec.message)
    # frame.len: the record's packet for ERF (its wlen), the captured frame's otherwise
    return summ.line(number, time_text, rec.fields.get("frame.len", fr.origlen), cols), tunnel


def _batch(args: argparse.Namespace) -> int:
    """Frames read at a time: from a pipe they trickle in, do not wait for many."""
    return PIPE_BATCH if (args.read_file or args.file) == "-" else BATCH


def _counted(reader: CaptureReader, progress: Progress) -> Any:
    """The reader's frames; counted for the progress bar when it shows."""
    if not progress.enabled:
        return reader
    seen = [0, 0]  # bytes (with record headers) and frames read

    def counted() -> Any:
        for fr in reader:
            seen[0] += fr[2] + 16
            seen[1] += 1
            if not seen[1] % 1024:
                progress.update(_done(reader, seen[0]), seen[1])
            yield fr

    return counted()


def _json(reader: CaptureReader, args: argparse.Namespace, limit: int, writer: Any,
          progress: Progress) -> None:
    """``-T json`` / ``jsonl`` without a filter: good RoCE frames come written already
    (``decode_text``), the others as records."""
    shown = 0
    add, add_text = writer.add, writer.add_text
    for item in decode_text(_counted(reader, progress), "json", args.udp_port,
                            args.only_roce, _batch(args)):
        if type(item) is str:
            add_text(item)
        else:
            add(item)
        shown += 1
        if shown >= limit:
            break
    writer.close()


def _trees(reader: CaptureReader, args: argparse.Namespace, limit: int, out: TextIO,
           progress: Progress) -> None:
    """``-V`` alone (no filter, summary or dump): good RoCE frames' trees come written
    already (``decode_text``), the others' from their records."""
    from roce.decoder import records
    from roce.families.base import tree

    parts: list[str] = []
    shown = 0
    for item in decode_text(_counted(reader, progress), "tree", args.udp_port,
                            args.only_roce, _batch(args)):
        if type(item) is str:
            parts.append(item)
        elif item.family is not None or item.outer:
            parts.append(records.render(item))
        else:
            parts.append(tree.render(item))
        if len(parts) >= 256:
            out.write("".join(parts))
            parts.clear()
        shown += 1
        if shown >= limit:
            break
    if parts:
        out.write("".join(parts))


def _records(reader: CaptureReader, summ: summary.Summarizer, args: argparse.Namespace,
             flt: Callable[[Mapping[str, object]], bool] | None, limit: int, out: TextIO,
             progress: Progress, field_opts: dict[str, Any]) -> None:
    """Every mode but the plain one-liner: one record at a time."""
    # imported here: the one-line path (the common, start-up-sensitive one) needs none
    from roce.decoder import output, records
    from roce.families.base import tree

    fmt = args.format
    writer: output.JsonWriter | output.FieldsWriter | output.CsvWriter | None = None
    if fmt in ("json", "jsonl"):
        writer = output.JsonWriter(out, lines=fmt == "jsonl")
    elif fmt == "fields":
        writer = output.FieldsWriter(out, args.fields, **field_opts)
    elif fmt == "csv":
        writer = output.CsvWriter(out, args.fields)
    if isinstance(writer, output.JsonWriter) and flt is None:
        _json(reader, args, limit, writer, progress)
        return
    if writer is None and flt is None and args.verbose and not (args.print_summary
                                                                or args.hexdump):
        _trees(reader, args, limit, out, progress)
        return
    want_summary = writer is None and (not args.verbose or args.print_summary)
    want_columns = writer.needs_columns if writer is not None else want_summary
    times = summ.times
    parts: list[str] = []
    shown = 0
    frames = done = 0
    for rec in decode_frames(reader, args.udp_port, args.only_roce):
        if progress.enabled:
            done += rec.frame.caplen + 16
            frames += 1
            if not frames % 1024:
                progress.update(_done(reader, done), frames)
        if flt is not None and not flt(rec.fields):
            continue
        shown += 1
        if want_columns:
            fr = rec.frame
            time_text = times.record_text(rec.ts_ns, rec.rel_ns, rec.delta_ns)
            if rec.family is not None or (rec.outer and rec.walk is fr):
                cols = records.columns(rec)
            else:
                cols = summ.columns(fr.data, rec.walk, rec.fields, fr.linktype, fr.caplen,
                                    fr.origlen, rec.message)
            if want_summary:  # frame.len: the captured frame's, also for a tunnel's inner one
                parts.append(summ.line(rec.number, time_text, rec.fields.get("frame.len",
                                                                             fr.origlen),
                                       cols) + "\n")
            else:
                src, dst, proto, info, _colour = cols
                rec.columns = {"No.": rec.number, "Time": time_text, "Source": src,
                               "Destination": dst, "Protocol": proto, "Length": fr.origlen,
                               "Info": info}
        if writer is not None:
            writer.add(rec)
        else:
            if args.verbose:
                if rec.family is not None or rec.outer:
                    parts.append(records.render(rec))
                else:
                    parts.append(tree.render(rec))
            if args.hexdump:
                parts.append(tree.hexdump(rec.frame.data) + "\n")
            if len(parts) >= 256:
                out.write("".join(parts))
                parts.clear()
        if shown >= limit:
            break
    if parts:
        out.write("".join(parts))
    if writer is not None:
        writer.close()


