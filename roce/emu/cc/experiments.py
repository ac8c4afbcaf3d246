"""Flows over the switched network with congestion control, sampled: what the fairness and
incast tests, bench/bench_cc.py, bench/cc_incast.py and the figures in docs/ share.

``backlogged`` keeps every flow ``depth`` WRITEs deep from its own start time to the end of the
run (the scenario runner posts a fixed count, all at time 0); ``Sampled`` records each flow's
sending rate per interval from the bytes its NIC scheduler sent; ``watched`` runs a scenario
as the runner does while ``Watch`` samples every switch queue and the sending QPs' algorithms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roce.emu.cc.algorithms import configure
from roce.emu.cc.base import CongestionControl
from roce.emu.net.runner import NetRun, NetScenario
from roce.emu.scenario import Summary

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
    while net.events and net.events.first() <= duration_ns:
        net.run_until_any(run.ready, duration_ns)
        for f in run.completions():
            top_up(f)
    if trace is not None:
        trace.finish(net)
    return run, samples


class Watch:
    """Every ``interval_ns``: the bytes in each switch egress queue (all traffic classes), by
    port name, and ``probe`` of the sending QPs' algorithms (one per flow, None before the
    flow's QP sent), e.g. ``lambda algos: [a.window for a in algos]``."""

    def __init__(self, run: NetRun, interval_ns: int,
                 probe: Callable[[list[CongestionControl | None]], Any] | None = None) -> None:
        self.run, self.interval, self.probe = run, interval_ns, probe
        self.times: list[int] = []
        self.queues: dict[str, list[int]] = {p.name: [] for sw in run.net.switches.values()
                                             for p in sw.ports}
        self.probes: list[Any] = []
        run.net.at(0, self._sample)

    def algos(self) -> list[CongestionControl | None]:
        """The sending QPs' algorithms, in flow order."""
        hosts = self.run.net.hosts
        out = []
        for f, (src, _) in zip(self.run.flows, self.run.names):
            cc = hosts[src].cc
            out.append(cc.algos.get(f.qa.qp_num) if cc is not None else None)
        return out

    def _sample(self, now: int, _: Any = None) -> None:
        self.times.append(now)
        for sw in self.run.net.switches.values():
            for p in sw.ports:
                self.queues[p.name].append(sum(p.qbytes))
        if self.probe is not None:
            self.probes.append(self.probe(self.algos()))
        self.run.net.at(now + self.interval, self._sample)

    def busiest(self) -> str:
        """The port whose queue grew largest (an incast's: the port toward the receiver)."""
        return max(self.queues, key=lambda n: max(self.queues[n], default=0))


def watched(sc: NetScenario, interval_ns: int,
            probe: Callable[[list[CongestionControl | None]], Any] | None = None
            ) -> tuple[Summary, Watch]:
    """Run ``sc`` as ``roce emulate`` does, sampled by a ``Watch``."""
    run = NetRun(sc)
    watch = Watch(run, interval_ns, probe)
    return run.run(), watch
