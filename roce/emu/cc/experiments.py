"""Long-lived flows over the switched network with congestion control, sampled: what the
fairness tests, bench/bench_cc.py and the figures in docs/ share.

``backlogged`` keeps every flow ``depth`` WRITEs deep from its own start time to the end of the
run (the scenario runner posts a fixed count, all at time 0); ``Sampled`` records each flow's
sending rate per interval from the bytes its NIC scheduler sent.
"""

from __future__ import annotations

from typing import Any

from roce.emu.cc.algorithms import configure
from roce.emu.net.runner import NetRun, NetScenario

US = 1_000


class Sampled:
    """Per-flow bytes sent per sampling interval (from the NIC scheduler's count)."""

    def __init__(self, run: NetRun, interval_ns: int) -> None:
        self.run, self.interval = run, interval_ns
        self.series: list[list[float]] = [[] for _ in run.flows]
        self._last = [0] * len(run.flows)
        run.net.at(interval_ns, self._sample)

    def _sample(self, now: int, _: Any = None) -> None:
        for i, f in enumerate(self.run.flows):
            sent = getattr(f.qa.core.tx, "sent_bytes", 0)
            self.series[i].append((sent - self._last[i]) * 8 / self.interval)  # Gb/s
            self._last[i] = sent
        self.run.net.at(now + self.interval, self._sample)


def backlogged(topology: str, cc: str | None, duration_ns: int,
               starts_ns: list[int] | None = None, size: int = 256 << 10,
               interval_ns: int = 100 * US, profile: str | None = None,
               params: tuple[str, ...] = (), trace: Any = None,
               **kw: Any) -> tuple[NetRun, Sampled]:
    """Every flow keeps ``depth`` WRITEs of ``size`` outstanding from its start time until
    ``duration_ns``: a long-lived, always-backlogged sender."""
    kw.setdefault("depth", 4)
    cfg = configure(cc or "none", profile, params, kw.get("rate_gbps", 100.0))
    sc = NetScenario(topology=topology, op="write", size=size, count=1 << 30, cc=cfg, **kw)
    run = NetRun(sc)
    net = run.net
    samples = Sampled(run, interval_ns)
    if trace is not None:
        trace.start(net, run.flows, run.names)
    starts = starts_ns or [0] * len(run.flows)

    def top_up(f: Any) -> None:
        while f.posted - f.done < sc.depth:
            run.post(f)

    for f, t in zip(run.flows, starts):
        net.at(t, lambda now, flow: top_up(flow), f)
    while net.events and net.events[0][0] <= duration_ns:
        net.run_until_any(run.ready, duration_ns)
        for f in run.completions():
            top_up(f)
    if trace is not None:
        trace.finish(net)
    return run, samples
