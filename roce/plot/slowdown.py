"""The figure of ``roce plot --fct``: FCT slowdown against flow size, as the HPCC paper's
Figure 11 draws it -- the flows binned by size, and per bin the 50th, 95th and 99th
percentile of their slowdown, at the bin's largest size (log-scaled size axis).

The command hands in the binned tables (``roce.emu.workload.fct.slowdown_table``: this
layer does not read the emulator's files); ``series`` is the data, ``fct_figure`` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from roce.plot.figure import legend_outside, new_figure, series_styles, widen

PERCENTILES = ("p50", "p95", "p99")
STYLES = {"p50": "-", "p95": "--", "p99": ":"}


def series(tables: Mapping[str, Sequence[Any]]) -> dict[str, list[tuple[int, float]]]:
    """``{label: [(size, slowdown), ...]}``: per table (one per file, in the order given)
    and percentile, the bins' largest sizes and that percentile of their slowdown.  The
    label is the percentile, after the table's name when there are several."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name, bins in tables.items():
        for p in PERCENTILES:
            label = f"{name} {p}" if len(tables) > 1 else p
            out[label] = [(b.max_size, getattr(b, p)) for b in bins]
    return out


def fct_figure(tables: Mapping[str, Sequence[Any]]) -> Any:
    data = series(tables)
    fig, (ax,) = new_figure(1, 4.0)
    colours = series_styles(len(tables))
    for i, (label, pts) in enumerate(data.items()):
        p = label.rsplit(" ", 1)[-1]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3,
                label=label, linestyle=STYLES[p], **colours[i // len(PERCENTILES)])
    ax.set_xscale("log")
    ax.set_xlabel("Flow size (bytes, the largest of each bin)")
    ax.set_ylabel("FCT slowdown (FCT / ideal FCT)")
    legend_outside(ax)
    widen(fig)
    return fig


__all__ = ["PERCENTILES", "fct_figure", "series"]
