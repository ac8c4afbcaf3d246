"""Figures from a capture (``roce.analysis.timeline``): per-QP throughput over time with CNPs,
PAUSE/PFC (XOFF) frames and retransmissions marked; PSN versus time with first transmissions,
retransmissions and ACKs in different marks.  Time is from the first frame, in microseconds;
PSNs are counted from each QP's lowest PSN (24-bit serial arithmetic, roce.psn)."""

from __future__ import annotations

from typing import Any

from roce.analysis.timeline import Timeline, binned
from roce.plot.figure import new_figure, no_data
from roce.psn import psn_diff

US = 1_000


def auto_interval(tl: Timeline) -> int:
    """About 100 points over the capture, at least 1 us."""
    return max(US, tl.duration_ns // 100)


def throughput(ax: Any, tl: Timeline, interval_ns: int) -> None:
    t0 = tl.first_ts or 0
    rows = binned(tl, interval_ns)
    series = tl.series()
    if not series:
        no_data(ax, "RoCE data")
    for q in series:
        per_bin = {r["start_ns"]: r["qps"][q.label]["gbps"] for r in rows
                   if q.label in r["qps"]}
        xs = [(r["start_ns"] + interval_ns / 2) / US for r in rows]
        ys = [per_bin.get(r["start_ns"], 0.0) for r in rows]
        (line,) = ax.plot(xs, ys, label=f"{q.label} throughput")
        color = line.get_color()

        def at(ts: int, per_bin: dict[int, float] = per_bin) -> float:
            """The QP's throughput in the bin of ``ts`` (where its event marks go)."""
            return per_bin.get((ts - t0) // interval_ns * interval_ns, 0.0)

        if q.cnps:
            ax.plot([(t - t0) / US for t in q.cnps], [at(t) for t in q.cnps], "v",
                    color=color, label=f"{q.label} CNP")
        rt = [d[0] for d in q.data if d[3]]
        if rt:
            ax.plot([(t - t0) / US for t in rt], [at(t) for t in rt], "x", color=color,
                    label=f"{q.label} retransmission")
    xoff = [(t - t0) / US for t, _, _, xon in tl.pauses if not xon]
    if xoff:
        top = max((line.get_ydata().max() for line in ax.get_lines()), default=1.0) or 1.0
        ax.plot(xoff, [top] * len(xoff), "|", color="black", markersize=12,
                label="PAUSE/PFC (XOFF)")
    ax.set_ylabel("Throughput (Gb/s)")
    ax.set_title(f"Per-QP throughput ({interval_ns / US:g} us bins)")
    if ax.get_lines():
        ax.legend(fontsize="small", loc="best")


def psn_graph(ax: Any, tl: Timeline) -> None:
    t0 = tl.first_ts or 0
    series = tl.series()
    if not series:
        no_data(ax, "RoCE data")
    for q in series:
        base = q.min_psn or 0
        first = [(ts, psn) for ts, psn, _, retx, _ in q.data if not retx]
        again = [(ts, psn) for ts, psn, _, retx, _ in q.data if retx]
        (line,) = ax.plot([(t - t0) / US for t, _ in first],
                          [psn_diff(p, base) for _, p in first], ".",
                          label=f"{q.label} first transmission")
        color = line.get_color()
        if again:
            ax.plot([(t - t0) / US for t, _ in again], [psn_diff(p, base) for _, p in again],
                    "x", color="red", label=f"{q.label} retransmission")
        if q.acks:
            ax.plot([(t - t0) / US for t, _ in q.acks],
                    [psn_diff(p, base) for _, p in q.acks], "^", color=color, alpha=0.6,
                    markerfacecolor="none", label=f"{q.label} ACK")
    ax.set_ylabel("PSN (from the QP's first)")
    ax.set_title("PSN versus time")
    if ax.get_lines():
        ax.legend(fontsize="small", loc="best")


def capture_figure(tl: Timeline, interval_ns: int | None = None) -> Any:
    fig, (a1, a2) = new_figure(2)
    throughput(a1, tl, interval_ns or auto_interval(tl))
    psn_graph(a2, tl)
    a2.set_xlabel("Time (us)")
    return fig
