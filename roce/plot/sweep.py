"""The figure of ``roce sweep --plot``: one metric against one grid parameter, a line for
each combination of the other parameters.  ``series`` is the data, ``sweep_figure`` draws it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roce.errors import UsageError
from roce.plot.figure import new_figure


def _number(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def series(rows: Sequence[dict[str, Any]], x: str, metric: str,
           group_by: Sequence[str]) -> dict[str, list[tuple[Any, float]]]:
    """``{label: [(x, y), ...]}`` sorted by x (numerically when every x is a number), from
    the rows that have the metric (failed runs are left out).  The label names the other
    parameters' values, ``loss=0.01, lb=spray``; with none, it is the metric."""
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
        pts.sort(key=(lambda p: _number(p[0])) if numeric else (lambda p: str(p[0])))
    return out


def sweep_figure(rows: Sequence[dict[str, Any]], x: str, metric: str,
                 group_by: Sequence[str]) -> Any:
    data = series(rows, x, metric, group_by)
    fig, (ax,) = new_figure(1, 4.0)
    xs = [v for pts in data.values() for v, _ in pts]
    numeric = all(_number(v) is not None for v in xs)
    ticks = sorted({str(v) for v in xs}) if not numeric else []
    for label, pts in data.items():
        px = [_number(v) if numeric else ticks.index(str(v)) for v, _ in pts]
        ax.plot(px, [y for _, y in pts], marker="o", label=label)
    if ticks:
        ax.set_xticks(range(len(ticks)), ticks)
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    if len(data) > 1:
        ax.legend(fontsize="small")
    return fig
