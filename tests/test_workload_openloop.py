"""Open-loop flows (roce/emu/workload/openloop.py): the offered load is within 5 % of
``--load``, arrivals per host are Poisson at the mean gap HPCC's generator uses,
destinations are uniform among the other hosts, a seed reproduces a run, flows are made
lazily, and a run whose flows cannot fit in memory is refused before it starts."""

from __future__ import annotations

import itertools
import math
import random
import tracemalloc
from collections import Counter, defaultdict

import pytest
from workload_helpers import chi2_sf, drive, kolmogorov_sf, ks_statistic

from roce.emu import budget
from roce.emu.workload import BUILTIN, OpenLoop
from roce.emu.workload import openloop as ol
from roce.errors import UsageError

HOSTS = [f"h{i}" for i in range(16)]
RATE = 100.0  # Gb/s


def run_for(name: str, load: float, flows: int, seed: int = 42) -> tuple[OpenLoop, list]:
    """A workload of about ``flows`` flows over HOSTS, and its flows."""
    probe = OpenLoop(BUILTIN[name], load, 1)
    duration = int(flows / len(HOSTS) * probe.mean_gap_ns(RATE))
    w = OpenLoop(BUILTIN[name], load, duration)
    return w, list(w.flows(len(HOSTS), RATE, random.Random(seed)))


def test_mean_gap_is_hpccs() -> None:
    """HPCC: avg_inter_arrival = 1 / (bandwidth * load / 8 / avg) seconds."""
    w = OpenLoop(BUILTIN["websearch"], 0.3, 10**9)
    hpcc_seconds = 1 / (RATE * 1e9 * 0.3 / 8.0 / BUILTIN["websearch"].mean())
    assert w.mean_gap_ns(RATE) == pytest.approx(hpcc_seconds * 1e9)


@pytest.mark.parametrize("name,load,seed,count", [
    ("websearch", 0.3, 1, 100_000), ("websearch", 0.8, 2, 100_000),
    ("fbhadoop", 0.5, 3, 200_000), ("alistorage", 0.9, 4, 200_000)])
def test_offered_load_within_five_percent(name: str, load: float, seed: int,
                                          count: int) -> None:
    """The offered load's standard error is the sizes' coefficient of variation over
    sqrt(count): about 2.3 (websearch), 5.6 (fbhadoop) and 4.7 (alistorage), so these
    counts put 5 % at least four standard errors away."""
    w, flows = run_for(name, load, count, seed)
    offered = sum(f.size for f in flows) * 8 / (len(HOSTS) * RATE * w.duration_ns)
    assert abs(offered / load - 1) < 0.05, offered
    # the count is the Poisson mean's, within the bound the memory check uses
    mean = w.expected_flows(len(HOSTS), RATE)
    assert abs(len(flows) - mean) < 4 * math.sqrt(mean)
    assert len(flows) <= w.flow_bound(len(HOSTS), RATE)


def test_source_accounts_the_offered_load() -> None:
    """The source hands out the generator's flows and counts their load."""
    w, flows = run_for("websearch", 0.5, 5000, 8)
    src = w.start(HOSTS, RATE, random.Random(8))
    trace = drive(src, lambda t: 1000)
    assert trace.order == flows
    assert src.generated == len(flows) and src.done
    offered = sum(f.size for f in flows) * 8 / (len(HOSTS) * RATE * w.duration_ns)
    assert src.offered_load(len(HOSTS), RATE, w.duration_ns) == pytest.approx(offered)
    assert [(t, end - t.at_ns) for t, end in src.completions] == [(f, 1000) for f in flows]


def test_arrivals_are_poisson_per_host() -> None:
    """Every host's gaps (the first one from the start included) are exponential with the
    mean gap: KS against 1 - exp(-x/mean), and a coefficient of variation of 1."""
    w, flows = run_for("fbhadoop", 0.5, 30_000)
    gap = w.mean_gap_ns(RATE)
    times: dict[int, list[int]] = defaultdict(list)
    for f in flows:
        times[f.src].append(f.at_ns)
    assert sorted(times) == list(range(len(HOSTS)))
    gaps = [b - a for t in times.values() for a, b in zip([0] + t, t)]
    assert min(gaps) >= 0
    # arrival times are whole ns, the clock behind them is not: a gap is within 1 ns of an
    # exponential draw, far below the mean gap (tens of microseconds)
    assert gap > 1e4
    d = ks_statistic(gaps, lambda k: 1 - math.exp(-(k + 0.5) / gap) if k >= 0 else 0.0)
    assert kolmogorov_sf(d * len(gaps) ** 0.5) > 1e-3
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert mean == pytest.approx(gap, rel=0.03)
    assert sd / mean == pytest.approx(1, abs=0.03)
    # flows come out in order of arrival, every one inside the duration
    assert [f.at_ns for f in flows] == sorted(f.at_ns for f in flows)
    assert all(0 <= f.at_ns < w.duration_ns for f in flows)


def test_a_uniform_clock_fails_the_poisson_check() -> None:
    """The KS check above can fail: evenly spaced arrivals at the same mean do."""
    gap = 50_000
    gaps = [gap] * 5000
    d = ks_statistic(gaps, lambda k: 1 - math.exp(-(k + 0.5) / gap) if k >= 0 else 0.0)
    assert kolmogorov_sf(d * len(gaps) ** 0.5) < 1e-3


def test_destinations_uniform_among_other_hosts() -> None:
    hosts = 6
    w = OpenLoop(BUILTIN["alistorage"], 0.7, 3_000_000)
    flows = list(w.flows(hosts, RATE, random.Random(5)))
    assert all(f.src != f.dst and 0 <= f.dst < hosts for f in flows)
    pairs = Counter((f.src, f.dst) for f in flows)
    cells = hosts * (hosts - 1)
    assert len(pairs) == cells
    # chi-square of pair counts given each source's count: uniform over its n - 1 peers
    per_src = Counter(f.src for f in flows)
    stat = sum((pairs[(s, d)] - per_src[s] / (hosts - 1)) ** 2 / (per_src[s] / (hosts - 1))
               for s in range(hosts) for d in range(hosts) if d != s)
    assert chi2_sf(stat, hosts * (hosts - 2)) > 1e-3


def test_a_seed_reproduces_a_run() -> None:
    w = OpenLoop(BUILTIN["websearch"], 0.5, 5_000_000)
    a = list(w.flows(8, RATE, random.Random(1)))
    assert a == list(w.flows(8, RATE, random.Random(1)))
    assert a != list(w.flows(8, RATE, random.Random(2)))
    assert [f.id for f in a] == list(range(len(a)))


def test_flows_are_made_lazily() -> None:
    """A year of traffic: its first flows come at once, in memory of a few hosts' state."""
    w = OpenLoop(BUILTIN["alistorage"], 1.0, 365 * 86400 * 10**9)
    tracemalloc.start()
    first = list(itertools.islice(w.flows(64, 400.0, random.Random(0)), 1000))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(first) == 1000
    assert peak < 2 << 20


def test_memory_check_names_duration(monkeypatch) -> None:
    monkeypatch.setattr(budget, "available", lambda: 64 << 20)
    w = OpenLoop(BUILTIN["alistorage"], 1.0, 10 * 10**9)
    with pytest.raises(UsageError, match=r"--duration 10s: up to \d+ flows \(64 hosts at 400 "
                       r"Gb/s\) would need .* of memory, 64M is available here \(--duration "
                       r"at most [0-9.e-]+s at --load 1\)") as e:
        w.check_memory(64, 400.0, per_transfer=1000)
    # the bound it names fits
    most = float(str(e.value).split("--duration at most ")[1].split("s")[0])
    OpenLoop(BUILTIN["alistorage"], 1.0, int(most * 1e9)).check_memory(64, 400.0, 1000)
    OpenLoop(BUILTIN["alistorage"], 1.0, 10**5).check_memory(64, 400.0, 1000)


def test_flow_bytes_covers_what_the_source_keeps() -> None:
    w = OpenLoop(BUILTIN["websearch"], 0.5, 20_000_000)
    tracemalloc.start()
    src = w.start(HOSTS, RATE, random.Random(9))
    drive(src, lambda t: 5000)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(src.completions) > 1000
    assert current / len(src.completions) <= ol.FLOW_BYTES


def test_source_protocol() -> None:
    w = OpenLoop(BUILTIN["fbhadoop"], 0.5, 2_000_000)
    flows = list(w.flows(4, RATE, random.Random(3)))
    src = w.start(HOSTS[:4], RATE, random.Random(3))
    assert src.next_time() == flows[0].at_ns
    assert src.ready(flows[0].at_ns - 1) == []
    got = src.ready(flows[2].at_ns)
    assert got == [f for f in flows if f.at_ns <= flows[2].at_ns]
    assert src.next_time() == flows[len(got)].at_ns
    with pytest.raises(ValueError, match="before it arrived"):
        src.complete(got[0], got[0].at_ns - 1)
    src.complete(got[0], got[0].at_ns + 10)
    with pytest.raises(ValueError, match="completed twice"):
        src.complete(got[0], got[0].at_ns + 20)
    with pytest.raises(ValueError, match="not handed out"):
        src.complete(flows[-1], flows[-1].at_ns + 1)
    assert not src.done
    assert src.completions == [(got[0], got[0].at_ns + 10)]


@pytest.mark.parametrize("kwargs,match", [
    ({"load": 0}, r"--load 0: .*above 0 and at most 1"),
    ({"load": 1.5}, r"--load 1.5"),
    ({"load": float("nan")}, r"--load nan"),
    ({"duration_ns": 0}, r"--duration 0 ns"),
])
def test_bad_parameters(kwargs: dict, match: str) -> None:
    args = {"cdf": BUILTIN["websearch"], "load": 0.5, "duration_ns": 10**6, **kwargs}
    with pytest.raises(UsageError, match=match):
        OpenLoop(**args)


def test_needs_two_hosts_and_a_rate() -> None:
    w = OpenLoop(BUILTIN["websearch"], 0.5, 10**6)
    with pytest.raises(UsageError, match="needs at least 2 hosts; the network has 1"):
        w.start(["a"], RATE, random.Random(0))
    with pytest.raises(UsageError, match="positive line rate"):
        w.start(["a", "b"], 0.0, random.Random(0))
