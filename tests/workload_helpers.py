"""What the workload tests share: goodness-of-fit tail probabilities (no scipy here) and a
driver that runs a ``roce.emu.workload`` source on virtual time with seeded delays,
checking every rule a runner relies on as it goes."""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from roce.emu.workload.traffic import Source, Transfer


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with ``df`` degrees of freedom: 1 - P(df/2, x/2), the
    regularized lower incomplete gamma function by its power series."""
    a, z = df / 2, x / 2
    if z <= 0:
        return 1.0
    term = total = 1 / a
    n = 1
    while term > total * 1e-16:
        term *= z / (a + n)
        total += term
        n += 1
    lower = math.exp(-z + a * math.log(z) - math.lgamma(a)) * total
    return max(0.0, 1 - lower)


def kolmogorov_sf(lam: float) -> float:
    """P(sqrt(n) D_n >= lam) for large n: Kolmogorov's series."""
    if lam < 0.2:
        return 1.0
    return min(1.0, 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam)
                            for k in range(1, 101)))


def ks_statistic(samples: list[int], cdf: Callable[[int], float]) -> float:
    """The KS distance between integer ``samples`` and a distribution on the integers
    (``cdf(k)`` = P(X <= k)): both are step functions, so the distance is largest at a
    sample value or just below one."""
    xs = sorted(samples)
    n = len(xs)
    d = 0.0
    i = 0
    while i < n:
        v = xs[i]
        below = i / n  # empirical P(X <= v - 1)
        while i < n and xs[i] == v:
            i += 1
        d = max(d, abs(i / n - cdf(v)), abs(below - cdf(v - 1)))
    return d


@dataclass
class Trace:
    """What ``drive`` saw: each transfer's handout and arrival times, in handout order."""

    started: dict[int, int] = field(default_factory=dict)
    ended: dict[int, int] = field(default_factory=dict)
    order: list[Transfer] = field(default_factory=list)
    max_in_flight: int = 0


def drive(source: Source, delay: Callable[[Transfer], int], window: int | None = None,
          inputs: Callable[[Transfer], list[Transfer]] | None = None,
          on_start: Callable[[Transfer, int], None] | None = None,
          on_end: Callable[[Transfer, int], None] | None = None,
          limit: int = 10_000_000) -> Trace:
    """Run ``source`` to the end: each transfer handed out at ``now`` arrives at ``now +
    delay(t)``.  Checks, as it goes: no transfer is handed out twice, none before its
    ``inputs`` arrived, transfers of one connection in id order (program order) and at most
    ``window`` of them in flight."""
    trace = Trace()
    heap: list[tuple[int, int, Transfer]] = []
    in_flight: dict[tuple[int, int], int] = defaultdict(int)
    last_id: dict[tuple[int, int], int] = {}
    now = 0
    for _ in range(limit):
        for t in source.ready(now):
            assert t.id not in trace.started, f"transfer {t.id} handed out twice"
            if inputs is not None:
                for u in inputs(t):
                    assert trace.ended.get(u.id, now + 1) <= now, (
                        f"transfer {t.id} handed out at {now} before its input {u.id} arrived")
            conn = (t.src, t.dst)
            assert last_id.get(conn, -1) < t.id, f"{conn}: {t.id} out of program order"
            last_id[conn] = t.id
            in_flight[conn] += 1
            trace.max_in_flight = max(trace.max_in_flight, in_flight[conn])
            if window is not None:
                assert in_flight[conn] <= window, f"{conn}: more than {window} in flight"
            trace.started[t.id] = now
            trace.order.append(t)
            if on_start is not None:
                on_start(t, now)
            heapq.heappush(heap, (now + delay(t), t.id, t))
        if source.done:
            assert not heap
            return trace
        upcoming = [x for x in (heap[0][0] if heap else None, source.next_time())
                    if x is not None]
        assert upcoming, "the source is stuck: nothing in flight and nothing to come"
        now = min(upcoming)
        while heap and heap[0][0] == now:
            _, _, t = heapq.heappop(heap)
            in_flight[(t.src, t.dst)] -= 1
            trace.ended[t.id] = now
            if on_end is not None:
                on_end(t, now)
            source.complete(t, now)
    raise AssertionError("the run did not end")


def random_delay(seed: int, lo: int = 1, hi: int = 1000) -> Callable[[Transfer], int]:
    rng = random.Random(seed)
    return lambda t: rng.randint(lo, hi)
