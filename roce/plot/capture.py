"""Figures from a capture (``roce.analysis.timeline``): per-QP throughput over time with CNPs,
PAUSE/PFC (XOFF) frames and retransmissions marked; PSN versus time with first transmissions,
retransmissions and ACKs in different marks.  Time is from the first frame, in microseconds;
PSNs are counted from each QP's lowest PSN (24-bit serial arithmetic, roce.psn).

A QP has a colour (``roce.plot.figure.series_styles``), its marks the QP's colour; the legend,
outside the data, names the QPs and, once each, what the marks mean.  Every series keeps its
full label (``QP ... CNP``) for what reads the figure's data."""

from __future__ import annotations

from typing import Any

from roce.analysis.timeline import Timeline, binned
from roce.plot.figure import legend_outside, natural_key, new_figure, no_data, series_styles, widen
from roce.psn import psn_diff

US = 1_000


def auto_interval(tl: Timeline) -> int:
    """About 100 points over the capture, at least 1 us."""
    return max(US, tl.duration_ns // 100)


def _qps(tl: Timeline) -> list[Any]:
    return sorted(tl.series(), key=lambda q: natural_key(q.label))


def _mark(marker: str, label: str, **kw: Any) -> Any:
    """A legend entry for a kind of mark (drawn in black: each QP's are in its colour)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], marker=marker, linestyle="none", color="black", label=label, **kw)


def throughput(ax: Any, tl: Timeline, interval_ns: int) -> int:
    """Draw the throughput graph; returns its legend's columns."""
    t0 = tl.first_ts or 0
    rows = binned(tl, interval_ns)
    series = _qps(tl)
    if not series:
        no_data(ax, "RoCE data")
    handles, marks = [], {}
    for q, style in zip(series, series_styles(len(series))):
        per_bin = {r["start_ns"]: r["qps"][q.label]["gbps"] for r in rows
                   if q.label in r["qps"]}
        xs = [(r["start_ns"] + interval_ns / 2) / US for r in rows]
        ys = [per_bin.get(r["start_ns"], 0.0) for r in rows]
        (line,) = ax.plot(xs, ys, label=f"{q.label} throughput", **style)
        handles.append((line, q.label))
        color = style["color"]

        def at(ts: int, per_bin: dict[int, float] = per_bin) -> float:
            """The QP's throughput in the bin of ``ts`` (where its event marks go)."""
            return per_bin.get((ts - t0) // interval_ns * interval_ns, 0.0)

        if q.cnps:
            ax.plot([(t - t0) / US for t in q.cnps], [at(t) for t in q.cnps], "v",
                    color=color, label=f"{q.label} CNP")
            marks["CNP"] = _mark("v", "CNP")
        rt = [d[0] for d in q.data if d[3]]
        if rt:
            ax.plot([(t - t0) / US for t in rt], [at(t) for t in rt], "x", color=color,
                    label=f"{q.label} retransmission")
            marks["retransmission"] = _mark("x", "retransmission")
    xoff = [(t - t0) / US for t, _, _, xon in tl.pauses if not xon]
    if xoff:
        top = max((line.get_ydata().max() for line in ax.get_lines()), default=1.0) or 1.0
        (line,) = ax.plot(xoff, [top] * len(xoff), "|", color="black", markersize=12,
                          label="PAUSE/PFC (XOFF)")
        handles.append((line, "PAUSE/PFC (XOFF)"))
    ax.set_ylabel("Throughput (Gb/s)")
    ax.set_title(f"Per-QP throughput ({interval_ns / US:g} us bins)")
    entries = handles + [(m, name) for name, m in marks.items()]
    return legend_outside(ax, [h for h, _ in entries], [n for _, n in entries])


def psn_graph(ax: Any, tl: Timeline) -> int:
    """Draw the PSN graph; returns its legend's columns."""
    t0 = tl.first_ts or 0
    series = _qps(tl)
    if not series:
        no_data(ax, "RoCE data")
    handles, marks = [], {}
    for q, style in zip(series, series_styles(len(series))):
        base = q.min_psn or 0
        color = style["color"]
        first = [(ts, psn) for ts, psn, _, retx, _ in q.data if not retx]
        again = [(ts, psn) for ts, psn, _, retx, _ in q.data if retx]
        (line,) = ax.plot([(t - t0) / US for t, _ in first],
                          [psn_diff(p, base) for _, p in first], ".", color=color,
                          label=f"{q.label} first transmission")
        handles.append((line, q.label))
        marks["first transmission"] = _mark(".", "first transmission")
        if again:
            ax.plot([(t - t0) / US for t, _ in again], [psn_diff(p, base) for _, p in again],
                    "x", color=color, label=f"{q.label} retransmission")
            marks["retransmission"] = _mark("x", "retransmission")
        if q.acks:
            ax.plot([(t - t0) / US for t, _ in q.acks],
                    [psn_diff(p, base) for _, p in q.acks], "^", color=color, alpha=0.6,
                    markerfacecolor="none", label=f"{q.label} ACK")
            marks["ACK"] = _mark("^", "ACK", markerfacecolor="none")
    ax.set_ylabel("PSN (from the QP's first)")
    ax.set_title("PSN versus time")
    entries = handles + [(m, name) for name, m in marks.items()]
    return legend_outside(ax, [h for h, _ in entries], [n for _, n in entries])


def capture_figure(tl: Timeline, interval_ns: int | None = None) -> Any:
    fig, (a1, a2) = new_figure(2)
    throughput(a1, tl, interval_ns or auto_interval(tl))
    psn_graph(a2, tl)
    a2.set_xlabel("Time (us)")
    widen(fig)
    return fig
