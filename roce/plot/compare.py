"""The figure of ``roce compare --plot``: a bar per contender in one panel per figure of the
report (goodput; the tail: slowdown p99 for open-loop flows, busbw for a collective, FCT p99
otherwise; pauses, drops, trims and retransmissions; CPU time).  ``panels`` is the data,
``compare_figure`` draws it; the report is ``roce.emu.contenders.report``'s dict."""

from __future__ import annotations

from typing import Any

from roce.plot.figure import new_figure, series_styles

# (panel title, the report's columns drawn in it, unit)
EVENTS = ("pauses", "drops", "trims", "retransmitted")


def _tail(rows: list[dict[str, Any]]) -> tuple[str, tuple[str, ...], str]:
    if any(r["slowdown_p99"] is not None for r in rows):
        return "FCT slowdown p99", ("slowdown_p99",), ""
    if any(r["busbw_GBps"] is not None for r in rows):
        return "bus bandwidth", ("busbw_GBps",), "GB/s"
    return "FCT p99", ("fct_p99_us",), "us"


def panels(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per panel: ``title``, ``unit``, the contenders' ``names`` and, per series
    (a column of the report), its ``values`` in the contenders' order (0 where a figure does
    not apply)."""
    rows = rep["contenders"]
    names = [r["name"] for r in rows]
    out = []
    for title, cols, unit in (("goodput", ("goodput_gbps",), "Gb/s"), _tail(rows),
                              ("events", EVENTS, "count"), ("CPU time", ("cpu_s",), "s")):
        out.append({"title": title, "unit": unit, "names": names,
                    "series": {c: [float(r[c] or 0) for r in rows] for c in cols}})
    return out


def compare_figure(rep: dict[str, Any]) -> Any:
    """The report as bars: contenders along x, one panel per figure."""
    data = panels(rep)
    fig, axes = new_figure(len(data), 2.6)
    for ax, p in zip(axes, data):
        series = list(p["series"].items())
        n = len(series)
        width = 0.8 / n
        styles = series_styles(n)
        for j, (col, values) in enumerate(series):
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(p["names"]))]
            ax.bar(xs, values, width, label=col if n > 1 else None,
                   color=styles[j]["color"])
        ax.set_ylabel(f"{p['title']} ({p['unit']})" if p["unit"] else p["title"])
        if n > 1:
            ax.legend(fontsize="small", frameon=False)
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xticks(range(len(data[0]["names"])), data[0]["names"])
    return fig


__all__ = ["compare_figure", "panels"]
