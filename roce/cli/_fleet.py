"""What ``roce decode`` and ``roce stats`` do with several inputs, columnar output
(``-T parquet|arrow``), ``-j``, ``--scheduler`` and ``stats --merge``.  The two commands
call in here (``wants_*`` decides) and keep their single-capture paths as they are.

* ``roce decode -T parquet -w OUT FILE``: one columnar file; several inputs write
  ``OUT/<name>.parquet`` (``.arrows`` for Arrow) each, one task per input.
* ``roce decode`` text formats over several inputs: each capture in turn, to stdout.
* ``roce stats FILE...``: one report per capture (one task each), then their total;
  ``--merge``: the captures as one time-ordered session, one report.  ``-T parquet -w DIR``
  writes ``DIR/<table>.parquet`` for each of ``roce.analysis.tables.STATS_TABLES``: flows, expert,
  congestion, pfc, cm, latency, uet_pdcs (docs/columnar-schema.md).

Exit status: 0, 1 for bad usage, 2 when any capture could not be read (the others are
still done).
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any

from roce.decoder import multifile
from roce.errors import UsageError
from roce.extras import need_pyarrow
from roce.families import rows
from roce.options import parse_jobs
from roce.pcapio import open_capture

COLUMNAR = ("parquet", "arrow")
SUFFIX = {"parquet": ".parquet", "arrow": ".arrows"}
BATCH = 4096  # frames per batch of a merged session


def add_many_arguments(parser: Any, write_help: str) -> None:
    """-w, -j and --scheduler (decode and stats)."""
    parser.add_argument("-w", "--write", metavar="PATH", dest="write", help=write_help)
    parser.add_argument("-j", "--jobs", type=parse_jobs, default=0, metavar="N",
                        help="worker processes for several captures (default 0: all cores)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:8786",
                        help="run the per-capture tasks on this Dask scheduler "
                             '(pip install "roce[dask]")')


def add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:  # -T is shared with roce sniff: columnar is decode's own
        if action.dest == "format" and action.choices is not None:
            action.choices = (*action.choices, *COLUMNAR)
            action.help = (action.help or "") + "; parquet/arrow write -w PATH"
        if action.dest == "fields":
            action.help = "field for -T fields/csv, column for -T parquet/arrow (repeat)"
    add_many_arguments(parser, "with -T parquet|arrow: the file to write (a directory for "
                               "several captures)")


def add_stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--merge", action="store_true",
                        help="the captures are one session (rotating files): analyse them as "
                             "one time-ordered stream")
    add_many_arguments(parser, "with -T parquet: the directory for flows, expert, "
                               "congestion, pfc, cm, latency and uet_pdcs .parquet")


def _jobs_of(args: argparse.Namespace) -> int:
    return args.jobs or multifile.default_jobs()


def _name(path: str) -> str:
    return "<stdin>" if path == "-" else path


# -- roce decode --------------------------------------------------------------------------------


def _is_set(items: list[str] | None) -> bool:
    """Several captures: more than one name, or a directory or glob."""
    items = items or []
    return len(items) > 1 or any(p != "-" and (os.path.isdir(p) or glob.has_magic(p))
                                 for p in items)


def wants_decode(args: argparse.Namespace) -> bool:
    return _is_set(args.file) or args.format in COLUMNAR \
        or args.write is not None or args.scheduler is not None


def decode(args: argparse.Namespace,
           run_one: Callable[[argparse.Namespace], int]) -> int:
    """``roce decode`` over several captures or into a columnar file.  Errors propagate:
    ``roce.cli`` words them and maps them to exit codes."""
    if args.file and args.read_file:
        raise UsageError("give the captures once: FILE... or -r FILE")
    items = list(args.file or []) + ([args.read_file] if args.read_file else [])
    if not items:
        raise UsageError("no capture given (FILE..., -r FILE, or - for standard input)")
    paths = multifile.expand(items)
    fmt = args.format
    if fmt not in COLUMNAR:
        if args.write is not None or args.scheduler is not None:
            raise UsageError("-w and --scheduler need -T parquet or -T arrow")
        return _decode_text(args, paths, run_one)
    from roce.decoder import columnar

    if args.write is None:
        raise UsageError(f"-T {fmt} needs -w PATH (a file; '-' for standard output)")
    if args.verbose or args.hexdump or args.field_options or args.print_summary:
        raise UsageError(f"-V, -P, -x and -E do not combine with -T {fmt}")
    need_pyarrow(f"-T {fmt}")
    columnar.resolve_names(args.fields or columnar.default_names())  # usage errors now
    if args.filter is not None:
        from roce.decoder.decode import make_filter

        make_filter(args.filter)  # FilterError now, not once per worker
    targets = _targets(paths, args.write, fmt)
    if args.write == "-" and len(paths) == 1:
        res = columnar.decode_to(paths[0], "-", fmt, args.fields or None, args.filter,
                                 args.udp_port, args.only_roce, args.count)
        _warn(res.path, res.problems)
        return 0
    results = multifile.run(
        decode_task, paths, (targets, fmt, args.fields or None, args.filter, args.udp_port,
                             args.only_roce, args.count, _rows_of(args)),
        jobs=_jobs_of(args), scheduler=args.scheduler, label="decoding")
    for r in results:
        if not isinstance(r, multifile.Failed):
            _warn(r.path, r.problems)
    return report_failures("roce decode", results)


def _targets(paths: list[str], write: str, fmt: str) -> dict[str, str]:
    """Input -> output file: ``write`` itself for one input (unless a directory), else
    ``write/<input name><suffix>`` (a number added when two inputs share a name)."""
    if len(paths) == 1 and not (os.path.isdir(write) or write.endswith(os.sep)):
        return {paths[0]: write}
    if write == "-":
        raise UsageError("several captures need -w DIRECTORY, not standard output")
    if os.path.exists(write) and not os.path.isdir(write):
        raise UsageError(f"-w {write}: several captures need a directory")
    out: dict[str, str] = {}
    used: set[str] = set()
    for p in paths:
        stem = os.path.basename(p)
        for ext in (".gz", ".pcapng", ".pcap", ".cap"):
            if stem.endswith(ext):
                stem = stem[:-len(ext)]
        name, k = stem, 1
        while name in used:
            k += 1
            name = f"{stem}-{k}"
        used.add(name)
        out[p] = os.path.join(write, name + SUFFIX[fmt])
    return out


def decode_task(path: str, targets: dict[str, str], fmt: str, names: list[str] | None,
                display_filter: str | None, udp_port: int, only_roce: bool,
                count: int | None, run_rows: rows.RunRows, ticker: Any) -> Any:
    """One capture into its columnar file (runs in a worker, with the run's registry rows)."""
    from roce.decoder import columnar

    with rows.applied(run_rows):
        return columnar.decode_to(path, targets[path], fmt, names, display_filter, udp_port,
                                  only_roce, count, ticker)


def _rows_of(args: argparse.Namespace) -> rows.RunRows:
    """The run's ``-d`` and ``--uet-layout`` rows, for tasks in other processes."""
    return rows.run_rows(getattr(args, "decode_as", None), getattr(args, "uet_layout", None))


def _decode_text(args: argparse.Namespace, paths: list[str],
                 run_one: Callable[[argparse.Namespace], int]) -> int:
    """Text formats over several captures: ``run_one`` (the single-capture command) on each."""
    status = 0
    for path in paths:
        one = copy.copy(args)
        # as -r: a path left unexpanded (an empty directory, a glob matching nothing) is
        # then reported as unreadable rather than taken for a set again, without end
        one.file, one.read_file = [], path
        status = max(status, run_one(one))
    return status


def report_failures(prog: str, results: list[Any]) -> int:
    """One line per member that could not be read; the exit status (2 when any, else 0)."""
    bad = [r for r in results if isinstance(r, multifile.Failed)]
    skipped = " (skipped)" if len(results) > 1 else ""
    for r in bad:
        text = r.message if r.path in r.message else f"{r.path}: {r.message}"
        print(f"{prog}: {text}{skipped}", file=sys.stderr)
    return 2 if bad else 0


def _warn(path: str, problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        print(f"roce decode: warning: {_name(path)}: {problems[0]}{more}", file=sys.stderr)


# -- roce stats ---------------------------------------------------------------------------------


def wants_stats(args: argparse.Namespace) -> bool:
    return len(args.file or ()) != 1 or _is_set(args.file) or args.merge or args.write is not None \
        or args.scheduler is not None or str(args.format).lower() == "parquet"


def stats(args: argparse.Namespace, fmt: str, port: int,
          pause: tuple[float, int], cnp_interval: int | None = None) -> int:
    """``roce stats`` over several captures, merged or not, or into Parquet tables (errors
    propagate to ``roce.cli``, as ``decode``'s).  ``pause``: (link rate in bit/s, pause
    storm in ns), for the PFC / PAUSE accounting (``pauses.PauseAccount``);
    ``cnp_interval``: ``--cnp-interval`` in ns (``ccstats.CcReport``).  Every report, of
    one file or of a merged session, has the sections ``roce stats`` gives one capture."""
    if not args.file:
        raise UsageError("missing FILE (capture files, directories or globs; - for stdin)")
    paths = multifile.expand(args.file)
    if fmt == "parquet":

        need_pyarrow("-T parquet")
        if args.write is None or args.write == "-":
            raise UsageError("-T parquet needs -w DIRECTORY (for flows.parquet, "
                             "expert.parquet and the other tables)")
        if os.path.exists(args.write) and not os.path.isdir(args.write):
            raise UsageError(f"-w {args.write}: not a directory (-T parquet writes "
                             "flows.parquet, expert.parquet and the other tables in one)")
    elif args.write is not None:
        raise UsageError("-w needs -T parquet")
    if args.merge:
        if args.scheduler is not None:
            raise UsageError("--merge reads the captures as one stream, here: no --scheduler")
        return _merged(args, paths, fmt, port, pause, cnp_interval)
    results = multifile.run(stats_task, paths, (port, args.expert, pause, cnp_interval,
                                                _rows_of(args)),
                            jobs=_jobs_of(args),
                            scheduler=args.scheduler, label="analysing")
    good = [r for r in results if not isinstance(r, multifile.Failed)]
    status = report_failures("roce stats", results)
    for r in good:
        _warn_stats(r)
    out = sys.stdout
    from roce.analysis.flows import merged_latency

    total = sum_totals([r["report"]["totals"] for r in good])
    latency = merged_latency([r["latency_hists"] for r in good])
    counts: dict[str, int] = {}
    for r in good:
        for k, v in r["report"]["expert"]["counts"].items():
            counts[k] = counts.get(k, 0) + v
    if fmt == "json":
        json.dump({"files": [{"capture": r["capture"], **r["report"]} for r in good],
                   "failed": [{"file": r.path, "error": r.message} for r in results
                              if isinstance(r, multifile.Failed)],
                   "total": {"files": len(good), "totals": total, "latency": latency,
                             "expert_counts": dict(sorted(counts.items()))}}, out, indent=1)
        out.write("\n")
    elif fmt == "parquet":
        from roce.analysis import tables

        tables.write_stats(args.write, tables.stats_rows(
            [(r["capture"]["file"], r["report"]) for r in good]))
    else:
        for r in good:
            out.write(r["text"])
        if len(paths) > 1:
            _render_total(out, f"{len(good)} of {len(paths)} captures", total, latency,
                          counts)
    out.flush()
    return status


def stats_task(path: str, port: int, expert_all: bool, pause: tuple[float, int],
               cnp_interval: int | None, run_rows: rows.RunRows, ticker: Any) -> dict[str, Any]:
    """One capture's report as plain data (runs in a worker): its JSON form and its text,
    as ``roce stats`` on that capture alone gives them (congestion control and CM pairing
    included: small, a row per flow with CNPs or CE marks and one per CM connection)."""
    with rows.applied(run_rows):
        return _stats_one(path, port, expert_all, pause, cnp_interval, ticker)


def _stats_one(path: str, port: int, expert_all: bool, pause: tuple[float, int],
               cnp_interval: int | None, ticker: Any) -> dict[str, Any]:
    import io

    from roce.analysis import flows as fl
    from roce.analysis import inner as tunnelled
    from roce.analysis import pauses, tap, uetflows
    from roce.analysis.ccstats import CcReport
    from roce.analysis.statsview import sections, write_text

    with open_input(path) as (opened, fh):
        # tunnels peeled, ERF unwrapped, as `roce stats` on this capture alone does
        kind = tunnelled.capture_kind(path, port)
        reader = tunnelled.analysed(opened, kind, port)
        analyzer = fl.make_analyzer(port)
        account = pauses.PauseAccount(*pause)

        def tick(frames: int, offset: int | None) -> None:
            ticker(offset if offset is not None else fh.tell() if fh is not None else 0)

        uet = uetflows.UetAnalysis(port)  # Ultra Ethernet's PDCs, beside the RoCE flows
        analyzer.feed_capture(tap.Tap(tap.Tap(reader, analyzer, uet), analyzer,
                                         account), tick)
        report = analyzer.finish()
        pfc = account.finish()
        pfc.merge_into(report)
        cc = CcReport(report, cnp_interval)
        cc.merge_into(report)
        report.problems = [p.message for p in reader.problems]
        cm = tunnelled.cm_pairing(path) if kind == "ib" else None
        text = io.StringIO()
        write_text(report, reader.name, text, expert_all, pfc, cc, cm, rich=False)
        doc = sections(report, pfc, cc, cm)
        if uet.packets:
            doc["uet"] = uet.to_dict()
            text.write("\n" + "\n".join(uet.lines()) + "\n")
        return {"capture": {"file": reader.name, "format": reader.format,
                            "compressed": reader.compressed},
                "report": doc, "text": text.getvalue(), "latency_hists": report.latency_hists}


class open_input:  # noqa: N801 - used as a context manager, reads as a function
    """(reader, open file or None) for a path; both closed on exit."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh: IO[bytes] | None = None
        self.reader: Any = None

    def __enter__(self) -> tuple[Any, IO[bytes] | None]:
        if self.path == "-":
            self.reader = open_capture("-")
            return self.reader, None
        try:
            self.fh = open(self.path, "rb")
        except OSError:
            self.reader = open_capture(self.path)  # pcapio words the failure
            return self.reader, None
        try:
            self.reader = open_capture(self.fh)
        except BaseException:
            self.fh.close()
            raise
        return self.reader, self.fh

    def __exit__(self, *exc: object) -> None:
        if self.reader is not None:
            self.reader.close()
        if self.fh is not None:
            self.fh.close()


def _warn_stats(r: dict[str, Any]) -> None:
    problems = r["report"]["problems"]
    if problems:
        more = len(problems) - 1
        print(f"roce stats: warning: {r['capture']['file']}: {problems[0]}"
              + (f" (and {more} more problem{'s' * (more > 1)})" if more else ""),
              file=sys.stderr)


_FIRST_LAST = ("first_ns", "last_ns", "duration", "goodput_Bps", "throughput_Bps")


def sum_totals(totals: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals of several reports: counters added, the time span from the earliest
    first frame to the latest last one, goodput (unique payload) and throughput (all
    payload) over that span."""
    out: dict[str, Any] = {}
    for t in totals:
        for k, v in t.items():
            if k not in _FIRST_LAST:
                out[k] = out.get(k, 0) + v
    firsts = [t["first_ns"] for t in totals if t.get("first_ns") is not None]
    lasts = [t["last_ns"] for t in totals if t.get("last_ns") is not None]
    first, last = (min(firsts), max(lasts)) if firsts else (None, None)
    dur = (last - first) if first is not None else 0  # type: ignore[operator]
    out.update({"first_ns": first, "last_ns": last, "duration": dur / 1e9,
                "goodput_Bps": out.get("unique_payload_bytes", 0) * 1e9 / dur
                if dur else None,
                "throughput_Bps": out.get("payload_bytes", 0) * 1e9 / dur if dur else None})
    if not totals:
        from roce.analysis import flows as fl

        out = {k: v for k, v in fl.totals(_Empty(), [], 0).items()}
    return out


class _Empty:
    frames = not_roce = malformed_unattributed = truncated_unattributed = 0
    first_ts = last_ts = -1


def _render_total(out: IO[str], name: str, t: dict[str, Any], latency: dict[str, Any],
                  counts: dict[str, int]) -> None:
    from roce.analysis.statsview import latency_rows, total_rows

    title = f"Totals: {name}"
    out.write(f"\n{title}\n{'=' * len(title)}\n")
    rows = total_rows(t) + latency_rows([latency["completion_ns"]], [latency["ack_rtt_ns"]])
    width = max(len(label) for label, _ in rows)
    vwidth = max(len(v[0]) for _, v in rows)
    for label, (value,) in rows:
        out.write(f"  {label.ljust(width)}  {value.rjust(vwidth)}\n")
    if counts:
        out.write("  expert: " + ", ".join(f"{k.replace('_', ' ')} {v:,}"
                                           for k, v in sorted(counts.items())) + "\n")


def _merged(args: argparse.Namespace, paths: list[str], fmt: str, port: int,
            pause: tuple[float, int], cnp_interval: int | None) -> int:
    """One report of the captures as one time-ordered stream.  Congestion control is worked
    out on the merged report: a QP's CNPs from all files are one series, so its smallest
    gap may span two files (the files are one session: rotating captures of one port)."""
    from roce.analysis import flows as fl
    from roce.analysis import inner as tunnelled
    from roce.analysis import pauses, uetflows
    from roce.analysis.ccstats import CcReport
    from roce.analysis.statsview import sections, write_text
    from roce.decoder.progress import Progress

    readers, failed = multifile.open_members(paths)
    status = report_failures("roce stats", [*failed, *readers])
    bar = Progress("analysing", sum(multifile.size_of(r.name) for r in readers),
                   sys.stdout, files=len(paths))
    analyzer = fl.make_analyzer(port)
    account = pauses.PauseAccount(*pause)
    uet = uetflows.UetAnalysis(port)
    done = frames = 0
    kinds = [tunnelled.capture_kind(r.name, port) for r in readers]
    try:
        # each capture as `roce stats` reads it alone: tunnels peeled, ERF unwrapped
        streams = [tunnelled.analysed(r, k, port) for r, k in zip(readers, kinds)]
        for batch in multifile.merged_batches([s.batches(BATCH) for s in streams]):
            base, other = analyzer.frames, analyzer.not_roce
            analyzer.feed_batch(batch)
            if analyzer.not_roce != other:  # PFC / PAUSE frames, as tap.Tap shows them
                account.scan_batch(batch, base)
                uet.scan_batch(batch, base)  # UET, as tap.Tap shows it
            if bar.enabled:
                frames += len(batch.datas)
                done += sum(batch.caplen) + 16 * len(batch.datas)
                bar.update(done, frames)
        report = analyzer.finish()
        pfc = account.finish()
        pfc.merge_into(report)
        cc = CcReport(report, cnp_interval)
        cc.merge_into(report)
    finally:
        bar.close()
        for r in readers:
            r.close()
    problems = [f"{r.name}: {p.message}" for r in readers for p in r.problems]
    report.problems = problems
    for p in problems:
        print(f"roce stats: warning: {p}", file=sys.stderr)
    name = f"{len(readers)} captures merged"
    # CM pairing over the same stream (frames numbered as in the merged flow report)
    cm = tunnelled.cm_pairing_merged([r.name for r in readers]) if "ib" in kinds else None
    out = sys.stdout
    doc = sections(report, pfc, cc, cm)
    if uet.packets:
        doc["uet"] = uet.to_dict()
    if fmt == "json":
        json.dump({"capture": {"files": [r.name for r in readers], "merged": True},
                   "failed": [{"file": f.path, "error": f.message} for f in failed],
                   **doc}, out, indent=1)
        out.write("\n")
    elif fmt == "parquet":
        from roce.analysis import tables

        tables.write_stats(args.write, tables.stats_rows([(name, doc)]))
    else:
        write_text(report, name, out, args.expert, pfc, cc, cm)
        if uet.packets:
            out.write("\n" + "\n".join(uet.lines()) + "\n")
    out.flush()
    return status


__all__ = ["add_decode_arguments", "add_stats_arguments", "decode", "decode_task", "stats",
           "stats_task", "sum_totals", "wants_decode", "wants_stats"]
