"""Figures from an emulator trace (``roce emulate --trace FILE``, written by
``roce.emu.net.observe.Trace``): queue depth per switch port and traffic class, rate per QP,
pause state per port and priority.

The reader takes columns by name, from CSV (a header row) or JSON lines: ``time_ns``, ``kind``
(``queue``, ``qp``, ``pause``), ``node``, ``index`` (traffic class, or the QPN of a ``qp`` row),
``bytes``, ``rate_gbps``, ``paused``.  Other columns are ignored; a row without the columns
its kind needs is an input error naming the line.  ``open_trace`` checks the file's kind
first: a capture, or anything that is not text in one of these forms, is an input error that
says what the file is.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any, TextIO

from roce.errors import InputError
from roce.plot.figure import legend_outside, natural_key, new_figure, no_data, series_styles, widen

US = 1_000
_NEEDS = {"queue": ("bytes",), "qp": ("rate_gbps",), "pause": ("paused",)}


def open_trace(path: str) -> list[dict[str, Any]]:
    """The rows of the trace file at ``path``; an ``InputError`` saying what the file is when
    it is not a trace: a capture (plot it as one), not text, or text of another form."""
    from roce.pcapio import CaptureError, open_capture

    try:
        with open_capture(path) as reader:
            kind = f"a {'gzip-compressed ' if reader.compressed else ''}{reader.format} capture"
    except CaptureError:
        kind = None  # not a capture (or not readable: open() below says why)
    if kind is not None:
        raise InputError(f"{path}: {kind}, not an emulator trace (plot it as a capture: "
                         f"roce plot {path} -o FILE)")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(read_trace(f, path))
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not an emulator trace: not UTF-8 text (byte "
                         f"0x{e.object[e.start]:02x})") from None


def read_trace(f: TextIO, name: str = "trace") -> Iterator[dict[str, Any]]:
    """Rows as dicts (numbers converted) from CSV or JSON lines, sniffed from the first
    character; CSV needs a header naming ``time_ns`` and ``kind``."""
    head = f.read(1)
    f.seek(0)
    if head == "{":
        rows: Iterator[tuple[int, dict[str, Any]]] = (
            (n, _json(line, name, n)) for n, line in enumerate(f, 1) if line.strip())
    elif head:
        reader = csv.DictReader(f)
        try:
            columns = reader.fieldnames or []
        except csv.Error as e:
            raise InputError(f"{name}:1: not an emulator trace ({e})") from None
        if not {"time_ns", "kind"} <= set(columns):
            shown = ", ".join(c[:20] for c in columns[:6]) or "none"
            raise InputError(f"{name}: not an emulator trace: CSV without the time_ns and "
                             f"kind columns (columns: {shown})")
        rows = _csv_rows(reader, name)
    else:
        return
    for n, r in rows:
        yield _typed(r, name, n)


def _csv_rows(reader: csv.DictReader, name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    n = 1
    try:
        for n, r in enumerate(reader, 2):  # noqa: B007 - n names the line on error
            yield n, r
    except csv.Error as e:
        raise InputError(f"{name}:{n + 1}: not an emulator trace row ({e})") from None


def _json(line: str, name: str, n: int) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{name}:{n}: not JSON ({e.msg})") from None
    except RecursionError:
        raise InputError(f"{name}:{n}: JSON nested too deeply") from None
    if not isinstance(row, dict):
        raise InputError(f"{name}:{n}: a trace row is a JSON object, not "
                         f"{type(row).__name__}")
    return row


def _typed(r: dict[str, Any], name: str, n: int) -> dict[str, Any]:
    kind = r.get("kind")
    need = ("time_ns", "node", "index") + _NEEDS.get(kind, ())
    try:
        out = {"time_ns": int(r["time_ns"]), "kind": kind, "node": str(r["node"]),
               "index": int(r["index"])}
        for k in _NEEDS.get(kind, ()):
            out[k] = float(r[k])
    except (KeyError, TypeError, ValueError):
        missing = [k for k in need if r.get(k) in (None, "")]
        what = "a row" if kind is None else f"a {kind!r} row"
        raise InputError(f"{name}:{n}: {what} needs {', '.join(need)}"
                         + (f" (missing {', '.join(missing)})" if missing else "")) from None
    return out


def _series(rows: list[dict[str, Any]], kind: str, value: str) -> dict[tuple[str, int], Any]:
    out: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for r in rows:
        if r["kind"] == kind:
            xs, ys = out.setdefault((r["node"], r["index"]), ([], []))
            xs.append(r["time_ns"] / US)
            ys.append(r[value])
    return out


def _ordered(series: dict[tuple[str, int], Any]) -> list[tuple[tuple[str, int], Any]]:
    """Series by node in natural order (``s2`` before ``s10``), then index."""
    return sorted(series.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1]))


def trace_figure(rows: list[dict[str, Any]]) -> Any:
    """Queue depth per port and class, rate per QP, pause state per port and priority: a
    colour (and past 20 a line style) per series, in natural order, the legends outside the
    data (``roce.plot.figure``)."""
    fig, (aq, ar, ap) = new_figure(3)
    queues = _ordered({k: v for k, v in _series(rows, "queue", "bytes").items() if any(v[1])})
    for ((node, tc), (xs, ys)), style in zip(queues, series_styles(len(queues))):
        aq.plot(xs, [y / 1000 for y in ys], label=f"{node} class {tc}", **style)
    aq.set_ylabel("Queue depth (KB)")
    aq.set_title("Egress queue depth")
    rates = _ordered(_series(rows, "qp", "rate_gbps"))
    for ((node, qpn), (xs, ys)), style in zip(rates, series_styles(len(rates))):
        ar.plot(xs, ys, label=f"{node} QP 0x{qpn:x}", **style)
    ar.set_ylabel("Rate (Gb/s)")
    ar.set_title("Sending rate per QP")
    pauses = _ordered({k: v for k, v in _series(rows, "pause", "paused").items()
                       if any(v[1])})
    for ((node, prio), (xs, ys)), style in zip(pauses, series_styles(len(pauses))):
        ap.step(xs, ys, where="post", label=f"{node} priority {prio}", **style)
    ap.set_ylabel("Paused (0/1)")
    ap.set_title("PFC pause state")
    ap.set_xlabel("Time (us)")
    for ax, what in ((aq, "queued bytes"), (ar, "QP rows"), (ap, "pauses")):
        if ax.get_lines():
            legend_outside(ax)
        else:
            no_data(ax, what)
    widen(fig)
    return fig
