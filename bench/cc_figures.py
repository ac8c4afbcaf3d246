"""The congestion-control figures in docs/: the 2-flow dumbbell fairness run (rate per QP over
time, DCQCN, the second flow joining after 2 ms), the 16:1 incast's bottleneck queue with
and without DCQCN (PFC on), both from emulator traces drawn by ``roce.plot``; and that queue
under every algorithm (bench/cc_incast.py's runs).

    python bench/cc_figures.py [--out docs]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from roce.emu.cc import configure
from roce.emu.cc.experiments import US, backlogged, watched
from roce.emu.net.observe import Trace
from roce.emu.net.runner import NetRun, NetScenario
from roce.plot.figure import new_figure, save
from roce.plot.trace import read_trace, trace_figure


def fairness(out: Path) -> None:
    buf = io.StringIO()
    trace = Trace(buf, 100 * US)
    backlogged("dumbbell:2", "dcqcn", 12_000 * US, starts_ns=[0, 2_000 * US], trace=trace)
    buf.seek(0)
    fig = trace_figure(list(read_trace(buf)))
    fig.suptitle("DCQCN (NVIDIA profile), dumbbell, 100 Gb/s bottleneck, flow 2 joins at 2 ms")
    save(fig, str(out / "cc-fairness.png"))


def incast(out: Path) -> None:
    fig, (ax,) = new_figure(1, 4.0)
    for cc in ("none", "dcqcn"):
        buf = io.StringIO()
        trace = Trace(buf, 10 * US)
        sc = NetScenario(topology="incast:16", op="write", size=1 << 20, count=1, depth=1,
                         pfc=True, cc=configure(cc))
        NetRun(sc, trace=trace).run()
        buf.seek(0)
        rows = [r for r in read_trace(buf) if r["kind"] == "queue"]
        port = max({r["node"] for r in rows},
                   key=lambda n: max(r["bytes"] for r in rows if r["node"] == n))
        pts = [(r["time_ns"] / US, r["bytes"] / 1000) for r in rows
               if r["node"] == port and r["index"] == 3]
        ax.plot([p[0] for p in pts], [p[1] for p in pts],
                label=f"{'DCQCN' if cc == 'dcqcn' else 'no congestion control'} ({port})")
    ax.set_xlabel("Time (us)")
    ax.set_ylabel("Queue depth (KB)")
    ax.set_title("Incast 16:1, one 1 MiB WRITE per sender, PFC on: the receiver's port queue")
    ax.legend()
    save(fig, str(out / "cc-incast-queue.png"))


def algorithms(out: Path) -> None:
    fig, (ax,) = new_figure(1, 4.0)
    for cc, ecn in (("none", "on"), ("dcqcn", "on"), ("timely", "on"),
                    ("dctcp", "200K,200K,1"), ("swift", "on")):
        sc = NetScenario(topology="incast:16", op="write", size=1 << 20, count=1, depth=1,
                         pfc=True, ecn=ecn, cc=configure(cc))
        _, w = watched(sc, 5 * US)
        q = w.queues[w.busiest()]
        label = {"none": "no congestion control", "dctcp": "DCTCP (step marking, K 200 KB)"}
        ax.plot([t / US for t in w.times], [b / 1000 for b in q],
                label=label.get(cc, cc.upper() if cc != "swift" else "Swift"))
    ax.set_yscale("symlog", linthresh=100)
    ax.set_ylim(0, 1e5)  # room above the deepest queue for the legend
    ax.set_xlabel("Time (us)")
    ax.set_ylabel("Queue depth (KB)")
    ax.set_title("Incast 16:1, one 1 MiB WRITE per sender, PFC on: the receiver's port queue")
    ax.legend(loc="upper center", ncol=3)
    save(fig, str(out / "cc-incast-algorithms.png"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="docs")
    out = Path(ap.parse_args().out)
    fairness(out)
    incast(out)
    algorithms(out)


if __name__ == "__main__":
    main()
