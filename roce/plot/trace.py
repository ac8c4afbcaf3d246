"""Figures from an emulator trace (``roce emulate --trace FILE``, written by
``roce.emu.net.observe.Trace``): queue depth per switch port and traffic class, rate per QP,
pause state per port and priority.

The reader takes columns by name, from CSV (a header row) or JSON lines: ``time_ns``, ``kind``
(``queue``, ``qp``, ``pause``), ``node``, ``index`` (traffic class, or the QPN of a ``qp`` row),
``bytes``, ``rate_gbps``, ``paused``.  Other columns are ignored; a row without the columns
its kind needs is an input error naming the line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any, TextIO

from roce.errors import InputError
from roce.plot.figure import new_figure, no_data

US = 1_000
_NEEDS = {"queue": ("bytes",), "qp": ("rate_gbps",), "pause": ("paused",)}


def read_trace(f: TextIO, name: str = "trace") -> Iterator[dict[str, Any]]:
    """Rows as dicts (numbers converted) from CSV or JSON lines, sniffed from the first
    character."""
    head = f.read(1)
    f.seek(0)
    if head == "{":
        rows: Iterator[tuple[int, dict[str, Any]]] = (
            (n, _json(line, name, n)) for n, line in enumerate(f, 1) if line.strip())
    else:
        rows = enumerate(csv.DictReader(f), 2)
    for n, r in rows:
        yield _typed(r, name, n)


def _json(line: str, name: str, n: int) -> dict[str, Any]:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(f"{name}:{n}: not JSON ({e.msg})") from None


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
        raise InputError(f"{name}:{n}: a {kind!r} row needs {', '.join(need)}"
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


def trace_figure(rows: list[dict[str, Any]]) -> Any:
    fig, (aq, ar, ap) = new_figure(3)
    queues = {k: v for k, v in _series(rows, "queue", "bytes").items() if any(v[1])}
    for (node, tc), (xs, ys) in sorted(queues.items()):
        aq.plot(xs, [y / 1000 for y in ys], label=f"{node} class {tc}")
    aq.set_ylabel("Queue depth (KB)")
    aq.set_title("Egress queue depth")
    rates = _series(rows, "qp", "rate_gbps")
    for (node, qpn), (xs, ys) in sorted(rates.items()):
        ar.plot(xs, ys, label=f"{node} QP 0x{qpn:x}")
    ar.set_ylabel("Rate (Gb/s)")
    ar.set_title("Sending rate per QP")
    pauses = {k: v for k, v in _series(rows, "pause", "paused").items() if any(v[1])}
    for (node, prio), (xs, ys) in sorted(pauses.items()):
        ap.step(xs, ys, where="post", label=f"{node} priority {prio}")
    ap.set_ylabel("Paused (0/1)")
    ap.set_title("PFC pause state")
    ap.set_xlabel("Time (us)")
    for ax, what in ((aq, "queued bytes"), (ar, "QP rows"), (ap, "pauses")):
        if ax.get_lines():
            ax.legend(fontsize="small", loc="best")
        else:
            no_data(ax, what)
    return fig
