"""The figure of ``roce sweep --plot``: one metric against one grid parameter, a line for
each combination of the other parameters.  ``series`` is the data, ``sweep_figure`` draws it,
``axis_label`` names a column for an axis, with its unit.

A column's unit is in its name (``goodput_gbps``: Gb/s, ``virtual_ns``: ns; the emulator's
summary names them so); a grid parameter is plotted by the run's own value of it when the
summary holds one (``rate`` by ``scenario.rate_gbps``, ``delay`` by ``scenario.delay_ns``:
numbers with their unit, where the grid may have said ``10us``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from roce.errors import UsageError
from roce.plot.figure import legend_outside, natural_key, new_figure, series_styles, widen

# Name endings that carry a unit: (ending, unit, words the ending stands for).
_UNITS = (("_per_cpu_s", "", "per CPU second"), ("_gbps", "Gb/s", ""), ("_bps", "b/s", ""),
          ("_ns", "ns", ""), ("_us", "us", ""), ("_ms", "ms", ""), ("_s", "s", ""),
          ("_bytes", "bytes", ""), ("_pct", "%", ""))
# Grid parameters whose values are sizes (emulate's parse_size options) hold bytes.
_BYTES = frozenset(("size", "mtu", "buffer"))
_WORDS = {"cpu": "CPU", "qps": "QPs", "mtu": "MTU", "psn": "PSN", "psns": "PSNs",
          "naks": "NAKs", "rnr": "RNR", "icrc": "ICRC", "ooo": "out-of-order", "cc": "CC",
          "ecn": "ECN", "pfc": "PFC", "lb": "load balancing", "dup": "duplication",
          "qp": "QP", "ibv": "IBV", "wc": "WC", "fct": "FCT"}
_SCENARIO = "scenario."
_TIME_UNITS = frozenset(("ns", "us", "ms", "s"))
_TIME_WORDS = frozenset(("time", "delay", "timeout", "gap", "interval", "duration", "limit",
                         "fct"))


def axis_label(column: str) -> str:
    """``goodput_gbps`` -> ``Goodput (Gb/s)``; ``scenario.delay_ns`` -> ``Delay (ns)``;
    ``fct_ns.p99`` -> ``FCT p99 (ns)``; ``size`` (a grid parameter of bytes) -> ``Size
    (bytes)``."""
    name = column.removeprefix(_SCENARIO)
    unit, extra = ("bytes", "") if name in _BYTES else ("", "")
    # dots part the name's pieces, not the dots of an address (link.10.0.0.1->...)
    pieces = re.split(r"(?<!\d)\.|\.(?!\d)", name)
    found = bool(unit)
    for i, piece in enumerate(pieces):
        for ending, u, words in _UNITS:
            if not found and piece.endswith(ending) and len(piece) > len(ending):
                pieces[i], unit, extra, found = piece[:-len(ending)], u, words, True
    words = [_WORDS.get(w.lower(), w) for w in " ".join(pieces).replace("_", " ").split()]
    if unit in _TIME_UNITS and not _TIME_WORDS & {w.lower() for w in words}:
        words.append("time")  # cpu_s: CPU time (s)
    text = " ".join([*words, extra]).strip() or column
    text = text[0].upper() + text[1:]
    return f"{text} ({unit})" if unit else text


def x_column(rows: Sequence[dict[str, Any]], x: str) -> str:
    """The column a grid parameter is plotted by: the summary's value of it with its unit
    (``scenario.rate_gbps``) when every row that has the parameter has one, else the grid's
    own column."""
    keys = set().union(*rows) if rows else set()
    for column in sorted(k for k in keys if k.startswith(f"{_SCENARIO}{x}")):
        rest = column[len(_SCENARIO) + len(x):]
        if (rest == "" or any(rest == e for e, _u, _w in _UNITS)) and all(
                _number(r.get(column)) is not None for r in rows if r.get(x) not in (None, "")):
            return column
    return x


def _number(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def series(rows: Sequence[dict[str, Any]], x: str, metric: str,
           group_by: Sequence[str]) -> dict[str, list[tuple[Any, float]]]:
    """``{label: [(x, y), ...]}`` sorted by x (numerically when every x is a number), from
    the rows that have the metric (failed runs are left out), the labels in natural order.
    The label names the other parameters' values, ``loss=0.01, lb=spray``; with none, it is
    the metric."""
    if rows and metric not in set().union(*rows):
        raise UsageError(f"--plot-metric {metric}: no such column in the sweep")
    out: dict[str, list[tuple[Any, float]]] = {}
    for r in rows:
        y = _number(r.get(metric))
        if r.get("error") or y is None:
            continue
        label = ", ".join(f"{g}={r.get(g)}" for g in group_by) or metric
        out.setdefault(label, []).append((r.get(x), y))
    xs = [v for pts in out.values() for v, _ in pts]
    numeric = all(_number(v) is not None for v in xs)
    for pts in out.values():
        pts.sort(key=(lambda p: _number(p[0])) if numeric else (lambda p: natural_key(str(p[0]))))
    return {label: out[label] for label in sorted(out, key=natural_key)}


def sweep_figure(rows: Sequence[dict[str, Any]], x: str, metric: str,
                 group_by: Sequence[str]) -> Any:
    column = x_column(rows, x)
    data = series(rows, column, metric, group_by)
    fig, (ax,) = new_figure(1, 4.0)
    xs = [v for pts in data.values() for v, _ in pts]
    numeric = all(_number(v) is not None for v in xs)
    ticks = sorted({str(v) for v in xs}, key=natural_key) if not numeric else []
    for (label, pts), style in zip(data.items(), series_styles(len(data))):
        px = [_number(v) if numeric else ticks.index(str(v)) for v, _ in pts]
        ax.plot(px, [y for _, y in pts], marker="o", label=label, **style)
    if ticks:
        ax.set_xticks(range(len(ticks)), ticks)
    ax.set_xlabel(axis_label(column))
    ax.set_ylabel(axis_label(metric))
    if len(data) > 1:
        legend_outside(ax)
        widen(fig)
    return fig
