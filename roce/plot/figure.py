"""A matplotlib figure without pyplot (no global state, no display: the Agg canvas), saving
it in the format its file name asks for, and what keeps a figure of many series readable (64
QPs or ports as well as two): series in natural order (``s2`` before ``s10``), a colour each
from a colour map (and a line style besides past 20, so neighbours differ), and legends
outside the data, in as many columns as they need, the figure widened to hold them."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from roce.errors import UsageError

FORMATS = ("png", "svg", "pdf")
WIDTH = 9.0  # inches of the axes' part of a figure
LEGEND_ROWS = 12  # legend entries to a column: as many as a 3-inch axes holds beside it
LEGEND_PAD = 0.4  # inches between the axes and their legend, and after it


def new_figure(rows: int, height_per_row: float = 3.0) -> tuple[Any, list[Any]]:
    """A figure with ``rows`` stacked axes sharing the time axis."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("roce plot needs matplotlib: pip install 'roce[plot]'") from None
    fig = Figure(figsize=(9, height_per_row * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return fig, list(axes)


def natural_key(text: str) -> list[Any]:
    """Sort key in which the numbers in a name count as numbers: ``s2`` before ``s10``,
    ``sw:2 class 3`` before ``sw:10 class 0``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.lower())
            for part in re.split(r"(\d+)", text) if part]


def series_styles(n: int) -> list[dict[str, Any]]:
    """``n`` distinct line styles (keyword arguments of ``Axes.plot``): the ``tab10`` or
    ``tab20`` colours up to 20 series, past that a colour map's colours evenly spaced with
    four line styles in turn, so that series next to each other in a legend differ twice."""
    from matplotlib import colormaps

    if n <= 10:
        cmap = colormaps["tab10"]
        return [{"color": cmap(i)} for i in range(n)]
    if n <= 20:
        cmap = colormaps["tab20"]
        return [{"color": cmap(i)} for i in range(n)]
    cmap = colormaps["turbo"]
    dashes = ("-", "--", ":", "-.")
    return [{"color": cmap(0.05 + 0.9 * i / (n - 1)), "linestyle": dashes[i % 4]}
            for i in range(n)]


def legend_outside(ax: Any, handles: Sequence[Any] | None = None,
                   labels: Sequence[str] | None = None) -> int:
    """A legend to the right of the axes, outside the data: ``LEGEND_ROWS`` entries to a
    column; returns its columns (``widen`` then makes room for the legends).  Without
    ``handles``, the axes' labelled lines."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return 0
    ncol = math.ceil(len(handles) / LEGEND_ROWS)
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0, ncol=ncol, frameon=False,
              fontsize="small" if ncol == 1 else "x-small")
    return ncol


def widen(fig: Any) -> None:
    """Widen the figure by its widest legend (as laid out: its columns of labels), so the
    axes keep ``WIDTH`` inches whatever the legends hold."""
    renderer = fig.canvas.get_renderer()
    widths = [ax.get_legend().get_window_extent(renderer).width / fig.dpi
              for ax in fig.axes if ax.get_legend() is not None]
    if widths:
        fig.set_figwidth(WIDTH + max(widths) + LEGEND_PAD)


def output_format(path: str) -> str:
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise UsageError(f"-o {path}: the file name must end in .png, .svg or .pdf")
    return ext


def save(fig: Any, path: str) -> None:
    """The figure in ``path``'s format, complete or not at all (``roce.outfile``; an
    unwritable path is an ``InputError`` naming it)."""
    from roce.outfile import open_output

    fmt = output_format(path)
    with open_output(path, "wb", dash=False) as out:
        fig.savefig(out, format=fmt)


def no_data(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", transform=ax.transAxes, ha="center", va="center")
