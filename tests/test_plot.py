"""The capture timeline and ``roce plot``: checked on the data the figures plot."""

from __future__ import annotations

import json

import pytest
from cc_helpers import ACKS, CNPS, DATA, PAYLOAD, frames, write_capture

from roce.analysis.timeline import binned, collect
from roce.cli import main
from roce.plot.capture import capture_figure
from roce.plot.trace import read_trace, trace_figure

US = 1_000


def lines(ax) -> dict[str, tuple[list, list]]:
    return {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata()))
            for ln in ax.get_lines()}


def test_timeline_counts():
    tl = collect(frames())
    (q,) = tl.series()
    assert (q.src, q.dst, q.qpn) == ("10.0.0.1", "10.0.0.2", 0x22)
    assert [d[1] for d in q.data] == [p for _, p, _ in DATA]
    assert [d[3] for d in q.data] == [False] * 5 + [True, False]
    assert q.retransmissions == 1
    assert q.ce_fraction == pytest.approx(2 / 7)
    assert q.cnps == [t * US for t in CNPS] and q.cnp_min_gap() == 10 * US
    assert [a[1] for a in q.acks] == [p for _, p in ACKS]
    assert [(p[0], p[3]) for p in tl.pauses] == [(50 * US, False), (55 * US, True)]


def test_binned():
    rows = binned(collect(frames()), 20 * US)
    by = {r["start_ns"]: r for r in rows}
    label = "10.0.0.1 -> 10.0.0.2 QP 0x000022"
    first = by[0]["qps"][label]
    n = first["bytes"] // 2
    assert n > len(PAYLOAD) and first["bytes"] == 2 * n  # PSN 0 and 1
    assert first["gbps"] == pytest.approx(2 * n * 8 / (20 * US))
    assert by[20 * US]["qps"][label]["cnps"] == 2
    assert by[60 * US]["qps"][label]["retransmissions"] == 1
    assert by[40 * US]["pauses"] == 1  # the XON at 55 us is not a pause


def test_capture_figure_data():
    fig = capture_figure(collect(frames()), 20 * US)
    thr, psn = fig.axes
    label = "10.0.0.1 -> 10.0.0.2 QP 0x000022"
    got = lines(thr)
    xs, ys = got[f"{label} throughput"]
    assert xs == [10, 30, 50, 70]  # bin centres, us
    n = len(frames()[0][0])  # every WRITE frame has the same length
    assert ys == pytest.approx([k * n * 8 / (20 * US) for k in (2, 2, 1, 2)])
    assert got[f"{label} CNP"][0] == CNPS
    assert got[f"{label} retransmission"][0] == [60]
    assert got["PAUSE/PFC (XOFF)"][0] == [50]
    assert thr.get_ylabel() == "Throughput (Gb/s)"
    assert thr.get_legend() is not None
    p = lines(psn)
    assert p[f"{label} first transmission"] == ([0, 10, 20, 30, 40, 70], [0, 1, 2, 3, 4, 5])
    assert p[f"{label} retransmission"] == ([60], [3])
    assert p[f"{label} ACK"] == ([t for t, _ in ACKS], [x for _, x in ACKS])
    assert psn.get_xlabel() == "Time (us)" and psn.get_ylabel().startswith("PSN")


TRACE_ROWS = [
    {"time_ns": 0, "kind": "queue", "node": "sw0:p1", "index": 3, "bytes": 0},
    {"time_ns": 10_000, "kind": "queue", "node": "sw0:p1", "index": 3, "bytes": 150_000},
    {"time_ns": 0, "kind": "queue", "node": "sw0:p2", "index": 3, "bytes": 0},
    {"time_ns": 10_000, "kind": "queue", "node": "sw0:p2", "index": 3, "bytes": 0},
    {"time_ns": 0, "kind": "qp", "node": "h0->h2", "index": 17, "bytes": 0,
     "rate_gbps": 100.0, "acked_psns": 0},
    {"time_ns": 10_000, "kind": "qp", "node": "h0->h2", "index": 17, "bytes": 4096,
     "rate_gbps": 50.5, "acked_psns": 3},
    {"time_ns": 0, "kind": "pause", "node": "h0", "index": 3, "paused": 0},
    {"time_ns": 10_000, "kind": "pause", "node": "h0", "index": 3, "paused": 1},
]


def _write_trace(path, fmt):
    cols = ("time_ns", "kind", "node", "index", "bytes", "rate_gbps", "acked_psns", "paused")
    with open(path, "w") as f:
        if fmt == "csv":
            f.write(",".join(cols) + "\n")
            for r in TRACE_ROWS:
                f.write(",".join(str(r.get(c, "")) for c in cols) + "\n")
        else:
            for r in TRACE_ROWS:
                f.write(json.dumps(r) + "\n")


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_trace_figure(tmp_path, fmt):
    path = tmp_path / f"t.{fmt}"
    _write_trace(path, fmt)
    with open(path) as f:
        fig = trace_figure(list(read_trace(f)))
    q, r, p = fig.axes
    assert lines(q) == {"sw0:p1 class 3": ([0, 10], [0, 150])}  # idle queues left out
    assert lines(r) == {"h0->h2 QP 0x11": ([0, 10], [100.0, 50.5])}
    assert lines(p) == {"h0 priority 3": ([0, 10], [0, 1])}
    assert (q.get_ylabel(), r.get_ylabel(), p.get_xlabel()) == (
        "Queue depth (KB)", "Rate (Gb/s)", "Time (us)")


def test_trace_missing_column(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("time_ns,kind,node,index\n0,queue,sw0:p1,3\n")
    out = tmp_path / "x.png"
    assert main(["plot", "--trace", str(path), "-o", str(out)]) == 2
    assert "bad.csv:2" in capsys.readouterr().err


@pytest.mark.parametrize("ext, magic", [("png", b"\x89PNG"), ("svg", b"<?xml"),
                                        ("pdf", b"%PDF")])
def test_cli_writes_each_format(tmp_path, ext, magic):
    cap = write_capture(tmp_path / "c.pcap")
    out = tmp_path / f"fig.{ext}"
    assert main(["plot", cap, "-o", str(out), "--interval", "20us"]) == 0
    assert out.read_bytes().startswith(magic)


def test_cli_usage_errors(tmp_path, capsys):
    cap = write_capture(tmp_path / "c.pcap")
    assert main(["plot", cap, "-o", str(tmp_path / "fig.gif")]) == 1
    assert ".png, .svg or .pdf" in capsys.readouterr().err
    assert main(["plot", "-o", str(tmp_path / "fig.png")]) == 1
    assert main(["plot", str(tmp_path / "missing.pcap"), "-o", str(tmp_path / "f.png")]) == 2


@pytest.mark.parametrize("kind", ["pcap", "gzip", "binary", "csv-without-columns",
                                  "json-not-object", "long-line"])
def test_trace_of_another_kind_is_named(tmp_path, capsys, kind):
    """``--trace`` checks the file's kind: a capture, bytes that are not text, or text of
    another form is an input error (exit 2) saying what the file is, never a crash."""
    import gzip

    path = tmp_path / "x"
    cap = write_capture(tmp_path / "c.pcap")
    data = {"pcap": open(cap, "rb").read(),
            "gzip": gzip.compress(open(cap, "rb").read()),
            "binary": bytes(range(128, 256)) * 4,
            "csv-without-columns": b"a,b\n1,2\n",
            "json-not-object": b'{"time_ns": 0, "kind": "x", "node": "a", "index": 1}\n[1]\n',
            "long-line": b"time_ns,kind\n" + b"1" * 200_000 + b"\n"}[kind]
    path.write_bytes(data)
    assert main(["plot", "--trace", str(path), "-o", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "internal error" not in err
    want = {"pcap": "a pcap capture, not an emulator trace",
            "gzip": "a gzip-compressed pcap capture", "binary": "not UTF-8 text",
            "csv-without-columns": "without the time_ns and kind columns",
            "json-not-object": ":2: a trace row is a JSON object",
            "long-line": "not an emulator trace"}[kind]
    assert want in err


# -- many series: readable at 64 (checked on the figure's data, not its pixels) --------------


def _readable(fig, min_axes_inches: float = 6.0, time_axis: bool = True) -> None:
    """Each legend lies outside its axes (right of the data, not over it), every series of
    an axes has its own colour and line style, axes are labelled with units, and the axes
    keep their width whatever the legend's."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None:
            continue
        box, legbox = ax.get_window_extent(renderer), leg.get_window_extent(renderer)
        assert legbox.x0 >= box.x1, (legbox, box)  # beside the data, not over it
        assert box.width / fig.dpi >= min_axes_inches
        lines = [ln for ln in ax.get_lines() if ln.get_linestyle() not in ("None", "")]
        styles = [(tuple(ln.get_color()) if not isinstance(ln.get_color(), str)
                   else ln.get_color(), ln.get_linestyle()) for ln in lines]
        assert len(set(styles)) == len(styles)
        assert "(" in ax.get_ylabel() and ")" in ax.get_ylabel(), ax.get_ylabel()
    assert "(us)" in fig.axes[-1].get_xlabel() or not time_axis


def _trace_rows(n: int) -> list[dict]:
    rows = []
    for i in range(1, n + 1):
        for t, depth, paused, rate in ((0, 0, 0, 100.0), (10_000, 1000 * i, 1, 100.0 / i)):
            rows.append({"time_ns": t, "kind": "queue", "node": f"s{i}", "index": 3,
                         "bytes": depth})
            rows.append({"time_ns": t, "kind": "qp", "node": f"s{i}->r", "index": 0x10 + i,
                         "rate_gbps": rate})
            rows.append({"time_ns": t, "kind": "pause", "node": f"s{i}", "index": 3,
                         "paused": paused})
    return rows


@pytest.mark.parametrize("n", [16, 64])
def test_trace_figure_of_many_series_is_readable(n):
    fig = trace_figure(_trace_rows(n))
    q, r, p = fig.axes
    labels = [t.get_text() for t in q.get_legend().get_texts()]
    assert labels == [f"s{i} class 3" for i in range(1, n + 1)]  # s2 before s10
    assert [t.get_text() for t in r.get_legend().get_texts()][:3] == [
        "s1->r QP 0x11", "s2->r QP 0x12", "s3->r QP 0x13"]
    assert len(lines(q)) == len(lines(r)) == len(lines(p)) == n
    _readable(fig)


@pytest.mark.parametrize("n", [16, 64])
def test_capture_figure_of_many_qps_is_readable(n):
    from cc_helpers import congested

    fig = capture_figure(collect(congested(n)), 100 * US)
    thr, psn = fig.axes
    labels = [t.get_text() for t in thr.get_legend().get_texts()]
    qps = [lb for lb in labels if " QP 0x" in lb]
    assert len(qps) == n and qps == sorted(qps, key=lambda s: int(s.split(".")[2]))
    assert set(labels) - set(qps) <= {"CNP", "retransmission", "PAUSE/PFC (XOFF)"}
    assert "CNP" in labels  # each kind of mark once, beside the QPs
    psn_labels = [t.get_text() for t in psn.get_legend().get_texts()]
    assert psn_labels[:n] == qps and "first transmission" in psn_labels
    _readable(fig)


def test_sweep_figure_labels_axes_with_units_and_keeps_legends_outside():
    from roce.plot.sweep import axis_label, sweep_figure

    rows = [{"delay": d, "scenario.delay_ns": str(ns), "lb": lb, "goodput_gbps": str(g)}
            for lb in [f"n{i}" for i in range(64)]
            for (d, ns), g in zip((("1us", 1000), ("10us", 10_000), ("2us", 2000)), (9, 5, 8))]
    fig = sweep_figure(rows, "delay", "goodput_gbps", ["lb"])
    (ax,) = fig.axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("Delay (ns)", "Goodput (Gb/s)")
    got = lines(ax)
    assert got["lb=n0"] == ([1000.0, 2000.0, 10_000.0], [9.0, 8.0, 5.0])  # by the value
    assert [t.get_text() for t in ax.get_legend().get_texts()][:3] == ["lb=n0", "lb=n1",
                                                                        "lb=n2"]
    _readable(fig, min_axes_inches=5.0, time_axis=False)
    assert [axis_label(c) for c in ("cpu_s", "size", "loss", "virtual_ns", "fct_ns.p99",
                                    "packets_per_cpu_s")] == [
        "CPU time (s)", "Size (bytes)", "Loss", "Virtual time (ns)", "FCT p99 (ns)",
        "Packets per CPU second"]
