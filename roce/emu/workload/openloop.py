"""Open-loop flows: sizes from a CDF, Poisson arrivals per host at an offered load.

``OpenLoop(cdf, load, duration_ns)`` is the traffic of the HPCC ns-3 simulator's generator
(alibaba-edu/High-Precision-Congestion-Control, ``traffic_gen/traffic_gen.py``), drawn
lazily instead of written to a file:

- every host starts flows as a Poisson process: gaps are exponential with mean
  ``mean_size * 8 / (rate * load)`` (``mean_size`` the CDF's mean, ``roce.emu.workload.cdf``),
  so each host offers ``load`` of its line rate on average;
- each flow's size is one draw from the CDF, its destination uniform among the other hosts;
- flows start in ``[start, start + duration)``; the flow whose arrival would fall at or
  after the end is not made (HPCC's generator also drops the flow before it: not here).

Flows come out in order of arrival, from one heap of per-host next arrivals, so memory is
the number of hosts plus what the runner holds, not the number of flows.  The runner's share
grows with the flows (each completion becomes a row), so ``check_memory`` bounds the
expected count -- a Poisson count, taken at its mean plus six standard deviations -- against
the memory this process can get (``roce.emu.budget``), naming ``--duration``.

Draws from the handed-in ``random.Random`` happen in a fixed order: each host's first gap in
host order, then per flow its size, its destination and its host's next gap.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from roce.emu import budget
from roce.emu.workload.cdf import Cdf
from roce.emu.workload.traffic import Source, Transfer, Workload, check_hosts, check_rate
from roce.errors import UsageError
from roce.options import MAX_NS

# Bytes the source keeps per flow: its Transfer and the completion entry
# (tests/test_workload_openloop.py measures it).
FLOW_BYTES = 320
SIGMAS = 6  # a Poisson count's margin above its mean in ``flow_bound``


@dataclass(frozen=True)
class OpenLoop(Workload):
    """Flows of ``cdf`` sizes offering ``load`` (0..1] of every host's line rate for
    ``duration_ns`` nanoseconds."""

    cdf: Cdf
    load: float
    duration_ns: int

    def __post_init__(self) -> None:
        if not (0 < self.load <= 1):
            raise UsageError(f"--load {self.load:g}: the offered load is a fraction of the "
                             "line rate, above 0 and at most 1")
        if not 0 < self.duration_ns <= MAX_NS:
            raise UsageError(f"--duration {self.duration_ns} ns: a positive time up to "
                             f"{MAX_NS} ns")

    def mean_gap_ns(self, rate_gbps: float) -> float:
        """The mean time between two flows of one host: mean size in bits over the offered
        rate (bits per ns is Gb/s)."""
        return self.cdf.mean() * 8 / (rate_gbps * self.load)

    def expected_flows(self, hosts: int, rate_gbps: float) -> float:
        return hosts * self.duration_ns / self.mean_gap_ns(rate_gbps)

    def flow_bound(self, hosts: int, rate_gbps: float) -> int:
        """A count of flows a run is all but sure to stay within: the Poisson mean plus
        ``SIGMAS`` standard deviations (beyond it, a chance of about one in a billion once
        the mean is in the hundreds)."""
        mean = self.expected_flows(hosts, rate_gbps)
        return math.ceil(mean + SIGMAS * math.sqrt(mean)) + 1

    def check_memory(self, hosts: int, rate_gbps: float, per_transfer: int = 0) -> None:
        check_rate(rate_gbps)
        flows = self.flow_bound(hosts, rate_gbps)
        each = FLOW_BYTES + per_transfer
        budget.check(flows * each, "--duration", f"{self.duration_ns / 1e9:g}s",
                     f"{self._longest(hosts, rate_gbps, budget.available() // each) / 1e9:g}s"
                     f" at --load {self.load:g}",
                     f"up to {flows} flows ({hosts} hosts at {rate_gbps:g} Gb/s)")

    def _longest(self, hosts: int, rate_gbps: float, flows: int) -> int:
        """The longest duration in ns, to 3 significant digits, whose ``flow_bound`` is at
        most ``flows``: the mean m with m + SIGMAS sqrt(m) + 2 = flows, solved for sqrt(m)."""
        root = (-SIGMAS + math.sqrt(SIGMAS * SIGMAS + 4 * max(0, flows - 2))) / 2
        ns = int(root * root * self.mean_gap_ns(rate_gbps) / hosts)
        step = 10 ** max(0, len(str(ns)) - 3)
        return ns // step * step

    def flows(self, hosts: int, rate_gbps: float, rng: random.Random,
              start_ns: int = 0) -> Iterator[Transfer]:
        """The flows of one run, in order of arrival (module docstring)."""
        check_rate(rate_gbps)
        if hosts < 2:
            raise UsageError(f"--workload {self.cdf.name} needs at least 2 hosts; the "
                             f"network has {hosts}")
        gap = self.mean_gap_ns(rate_gbps)
        end = start_ns + self.duration_ns
        cdf = self.cdf

        def draw() -> float:  # an exponential gap; 1 - random() is in (0, 1]
            return -math.log(1.0 - rng.random()) * gap

        # per-host clocks in float ns, so truncating each arrival to an integer never
        # accumulates into a bias of the rate
        heap = [(start_ns + draw(), h) for h in range(hosts)]
        heapq.heapify(heap)
        n = 0
        while heap:
            t, src = heap[0]
            if t >= end:
                heapq.heappop(heap)
                continue
            size = cdf.sample(rng)
            dst = rng.randrange(hosts - 1)
            dst += dst >= src  # uniform among the other hosts
            yield Transfer(n, src, dst, size, at_ns=int(t))
            n += 1
            heapq.heapreplace(heap, (t + draw(), src))

    def start(self, hosts: Sequence[str], rate_gbps: float, rng: random.Random,
              start_ns: int = 0) -> FlowSource:
        check_hosts(hosts, 2, f"--workload {self.cdf.name}")
        return FlowSource(self.flows(len(hosts), rate_gbps, rng, start_ns))


class FlowSource(Source):
    """The flows of one open-loop run, handed out at their arrival times.

    ``completions`` holds (flow, completion time) in completion order; ``generated`` and
    ``offered_bytes`` count the flows handed out so far and their bytes."""

    def __init__(self, flows: Iterator[Transfer]) -> None:
        self._flows = flows
        self._next = next(flows, None)
        self._out: dict[int, Transfer] = {}
        self.completions: list[tuple[Transfer, int]] = []
        self.generated = 0
        self.offered_bytes = 0

    def ready(self, now: int) -> list[Transfer]:
        out = []
        nxt = self._next
        while nxt is not None and nxt.at_ns <= now:  # type: ignore[operator]
            out.append(nxt)
            self._out[nxt.id] = nxt
            self.offered_bytes += nxt.size
            nxt = next(self._flows, None)
        self._next = nxt
        self.generated += len(out)
        return out

    def next_time(self) -> int | None:
        return None if self._next is None else self._next.at_ns

    def complete(self, transfer: Transfer, now: int) -> None:
        if transfer.id not in self._out:
            raise ValueError(f"flow {transfer.id} was not handed out or completed twice")
        if now < transfer.at_ns:  # type: ignore[operator]
            raise ValueError(f"flow {transfer.id} completed at {now} ns, before it arrived "
                             f"at {transfer.at_ns} ns")
        del self._out[transfer.id]
        self.completions.append((transfer, now))

    @property
    def done(self) -> bool:
        return self._next is None and not self._out

    def offered_load(self, hosts: int, rate_gbps: float, duration_ns: int) -> float:
        """The bytes handed out so far as a fraction of what ``hosts`` links of ``rate_gbps``
        carry in ``duration_ns``."""
        return self.offered_bytes * 8 / (hosts * rate_gbps * duration_ns)


__all__ = ["FLOW_BYTES", "FlowSource", "OpenLoop"]
