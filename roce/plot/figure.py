"""A matplotlib figure without pyplot (no global state, no display: the Agg canvas), and
saving it in the format its file name asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roce.errors import UsageError

FORMATS = ("png", "svg", "pdf")


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
