"""The congestion-control figures in docs/: the 2-flow dumbbell fairness run (rate per QP over
time, DCQCN, the second flow joining after 2 ms) and the 16:1 incast's bottleneck queue with
and without DCQCN (PFC on).  Both from emulator traces, drawn by ``roce.plot``.

    python bench/cc_figures.py [--out docs]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from roce.emu.cc import configure
from roce.emu.cc.experiments import US, backlogged
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="docs")
    out = Path(ap.parse_args().out)
    fairness(out)
    incast(out)


if __name__ == "__main__":
    main()
