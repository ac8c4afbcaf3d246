"""Collectives as dependency graphs (roce/emu/workload/collective.py, graph.py): each rank
sends and receives the bytes the formulas say, in the steps they say; no transfer is
handed out before its inputs arrived; the data each rank ends with is the collective's
result (checked by replaying the transfers, in the order a seeded driver ran them);
connections post in program order within their window; iterations are timed one by one;
bus bandwidths use nccl-tests' factors."""

from __future__ import annotations

import random
import tracemalloc
from collections import Counter, defaultdict
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from workload_helpers import drive, random_delay

from roce.emu import budget
from roce.emu.workload import Collective, Graph
from roce.emu.workload import collective as col
from roce.emu.workload.traffic import Transfer
from roce.errors import UsageError
from roce.options import parse_size

HOSTS = [f"h{i}" for i in range(16)]

CASES = [("allreduce", "ring"), ("allreduce", "halving-doubling"), ("allgather", "ring"),
         ("reducescatter", "ring"), ("alltoall", "pairwise")]


def ranks_for(algorithm: str) -> list[int]:
    return [2, 4, 8] if algorithm == "halving-doubling" else [2, 3, 5, 8]


def all_transfers(c: Collective) -> list[Transfer]:
    return c.plan(0, 0).transfers


# -- the formulas -------------------------------------------------------------------------


def expected_per_rank(op: str, size: int, n: int) -> int:
    """Bytes each rank sends (and receives) when ``size`` splits evenly: nccl-tests'
    busbw factor times ``size`` (doc/PERFORMANCE.md)."""
    return {"allreduce": 2 * (n - 1) * size // n}.get(op, (n - 1) * size // n)


def expected_steps(op: str, algorithm: str, n: int) -> int:
    if algorithm == "halving-doubling":
        return 2 * (n.bit_length() - 1)
    return 2 * (n - 1) if op == "allreduce" else n - 1


@pytest.mark.parametrize("op,algorithm", CASES)
def test_bytes_and_steps_match_the_formulas(op: str, algorithm: str) -> None:
    for n in ranks_for(algorithm):
        for chunk in (64, 1000, 1 << 20):
            size = n * 4096  # splits evenly
            c = Collective(op, size, n, algorithm, chunk=chunk)
            ts = all_transfers(c)
            sent, received = Counter(), Counter()
            for t in ts:
                sent[t.src] += t.size
                received[t.dst] += t.size
                assert 1 <= t.size <= chunk and t.src != t.dst
            want = expected_per_rank(op, size, n)
            assert all(sent[r] == want and received[r] == want for r in range(n)), (n, chunk)
            assert {t.step for t in ts} == set(range(expected_steps(op, algorithm, n)))
            assert c.steps() == expected_steps(op, algorithm, n)
            assert c.transfers_per_iteration() == len(ts)
            assert [t.id for t in ts] == list(range(len(ts)))


@pytest.mark.parametrize("op,algorithm", CASES)
def test_uneven_sizes_move_every_byte(op: str, algorithm: str) -> None:
    """A size that does not split evenly: parts differ by a byte, and the totals over all
    ranks are still exact (each part crosses the ring's links, or a rank's, as often as
    the formula says)."""
    n = 8 if algorithm == "halving-doubling" else 5
    size = n * 1000 + 3
    ts = all_transfers(Collective(op, size, n, algorithm, chunk=300))
    total = sum(t.size for t in ts)
    assert total == {"allreduce": 2 * (n - 1) * size}.get(op, (n - 1) * size)
    assert all(t.size >= 1 for t in ts)


# -- running the graph ----------------------------------------------------------------------


def replay(c: Collective, order: list[Transfer], started: dict[int, int],
           ended: dict[int, int]) -> list[dict]:
    """What each rank holds at the end, computed from the transfers alone: per (part, cut)
    the set of ranks whose input it sums.  A transfer carries what its sender held when it
    was handed out; a "reduce" adds it to the receiver's, a "copy" replaces it."""
    n = c.ranks
    cuts = range(c.pieces() if c.algorithm == "ring" else 1)
    if c.op == "allgather":
        hold = [{(k, j): ({k} if k == r else set()) for k in range(n) for j in cuts}
                for r in range(n)]
    else:
        hold = [{(k, j): {r} for k in range(n) for j in cuts} for r in range(n)]
    events = []
    for t in order:
        events.append((started[t.id], 1, t))
        events.append((ended[t.id], 0, t))
    carried: dict[int, dict] = {}
    for _, kind, t in sorted(events, key=lambda e: (e[0], e[1], e[2].id)):
        keys = ([(k, t.piece) for k in range(*t.block)] if c.algorithm == "ring" else
                [(k, 0) for k in range(*t.block)])
        if kind == 1:  # handed out: the sender's data as it is now
            carried[t.id] = {key: set(hold[t.src][key]) for key in keys}
        else:
            for key, data in carried.pop(t.id).items():
                if t.phase == "reduce":
                    hold[t.dst][key] |= data
                else:
                    hold[t.dst][key] = set(data)
    return hold


def check_result(c: Collective, hold: list[dict]) -> None:
    n = c.ranks
    everyone = set(range(n))
    pieces = c.pieces() if c.algorithm == "ring" else 1
    for r in range(n):
        for k in range(n):
            for j in range(pieces):
                got = hold[r][(k, j)]
                if c.op == "allreduce":
                    assert got == everyone, (r, k, j, got)
                elif c.op == "reducescatter" and k == r:
                    assert got == everyone, (r, k, j, got)
                elif c.op == "allgather":
                    assert got == {k}, (r, k, j, got)


def run(c: Collective, seed: int, delay=None):
    g = c.start(HOSTS, 100.0, random.Random(0))
    trace = drive(g, delay or random_delay(seed), window=c.window, inputs=g.inputs)
    return g, trace


@pytest.mark.parametrize("op,algorithm", CASES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_run_computes_the_collective(op: str, algorithm: str, seed: int) -> None:
    """Seeded random delays: every transfer waits for its inputs (``drive`` checks it) and
    the data the ranks end with is the collective's result."""
    for n in ranks_for(algorithm):
        c = Collective(op, n * 700 + seed, n, algorithm, chunk=256, window=1 + seed % 3)
        g, trace = run(c, seed * 100 + n)
        assert len(trace.order) == c.transfers_per_iteration()
        if op == "alltoall":  # each rank got its part of every other rank's buffer, once
            got = Counter((t.src, t.dst, t.block) for t in trace.order if t.piece == 0)
            assert got == Counter({(s, d, (d, d + 1)): 1 for s in range(n) for d in range(n)
                                   if s != d})
            continue
        check_result(c, replay(c, trace.order, trace.started, trace.ended))


@given(case=st.sampled_from(CASES), k=st.integers(1, 4), n=st.integers(2, 9),
       extra=st.integers(0, 5000), chunk=st.integers(64, 3000), window=st.integers(1, 6),
       seed=st.integers(0, 2**32 - 1))
def test_any_shape_computes_the_collective(case, k, n, extra, chunk, window, seed) -> None:
    """Drawn ranks, sizes, chunks, windows and delays: the rules hold and the result is
    right (halving-doubling draws its ranks as a power of two)."""
    op, algorithm = case
    if algorithm == "halving-doubling":
        n = 1 << k
    c = Collective(op, n + extra, n, algorithm, iterations=2, chunk=chunk, window=window)
    g, trace = run(c, seed)
    assert len(trace.order) == 2 * c.transfers_per_iteration()
    assert sum(t.size for t in trace.order) == 2 * {"allreduce": 2 * (n - 1) * c.size}.get(
        op, (n - 1) * c.size)
    if op != "alltoall":
        last = [t for t in trace.order if t.iteration == 1]
        check_result(c, replay(c, last, trace.started, trace.ended))


def test_the_replay_catches_a_missing_dependency(monkeypatch) -> None:
    """The check above fails a ring whose transfers do not wait for the data they forward:
    with the needs dropped, early sends carry partial sums."""
    c = Collective("allreduce", 8 * 500, 8, chunk=256)
    real = col.Collective._ring

    def careless(self, iteration, base):
        plan = real(self, iteration, base)
        plan.needs = [() for _ in plan.needs]
        return plan

    monkeypatch.setattr(col.Collective, "_ring", careless)
    g = Graph(c.plan, 1, c.window)
    trace = drive(g, random_delay(5), window=c.window)
    with pytest.raises(AssertionError):
        check_result(c, replay(c, trace.order, trace.started, trace.ended))


def test_window_bounds_a_connection() -> None:
    """A slow link (rank 0 to 1) piles up rank 0's sends as the data for them arrives:
    the window is reached and never passed (``drive`` asserts the bound)."""
    for window in (1, 2, 4):
        c = Collective("allreduce", 1 << 20, 4, chunk=4096, window=window)
        _, trace = run(c, 9, delay=lambda t: 10_000 if t.src == 0 else 100)
        assert trace.max_in_flight == window


def test_step_times_with_fixed_delays() -> None:
    """Every transfer takes d: a step cannot start before the one it follows arrived, so an
    iteration of one cut per part lasts exactly steps * d."""
    d = 1000
    for op, algorithm in CASES:
        n = 8
        c = Collective(op, n * 64, n, algorithm, iterations=3, chunk=1 << 20)
        g, _ = run(c, 0, delay=lambda t: d)
        assert [(i.index, i.ns) for i in g.iterations] == [(k, c.steps() * d)
                                                           for k in range(3)]


def test_iterations_are_separated() -> None:
    c = Collective("allreduce", 8 * 3000, 8, "halving-doubling", iterations=4, chunk=500)
    g, trace = run(c, 11)
    assert [i.index for i in g.iterations] == [0, 1, 2, 3]
    by_iteration = defaultdict(list)
    for t in trace.order:
        by_iteration[t.iteration].append(t)
    assert len(by_iteration) == 4
    per = c.transfers_per_iteration()
    for k, it in enumerate(g.iterations):
        ts = by_iteration[k]
        assert len(ts) == per and {t.id for t in ts} == set(range(k * per, (k + 1) * per))
        assert min(trace.started[t.id] for t in ts) == it.start_ns
        assert max(trace.ended[t.id] for t in ts) == it.end_ns
        if k:
            assert it.start_ns == g.iterations[k - 1].end_ns
    assert g.done


def test_complete_refuses_misuse() -> None:
    c = Collective("allgather", 4 * 100, 4, chunk=64)
    g = c.start(HOSTS, 100.0, random.Random(0))
    first = g.ready(0)
    assert first and all(t.step == 0 for t in first)
    later = c.plan(0, 0).transfers[-1]
    with pytest.raises(ValueError, match="not handed out"):
        g.complete(later, 10)
    g.complete(first[0], 10)
    with pytest.raises(ValueError, match="arrived already"):
        g.complete(first[0], 11)
    with pytest.raises(ValueError, match="not of iteration 0"):
        g.complete(Transfer(10**6, 0, 1, 5), 12)


# -- bandwidth ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_bus_factors_are_nccl_tests(n: int) -> None:
    assert col.bus_factor("allreduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("allgather", "reducescatter", "alltoall"):
        assert col.bus_factor(op, n) == pytest.approx((n - 1) / n)
    algbw, busbw = col.bandwidth("allreduce", 1 << 30, n, 10**7)
    assert algbw == pytest.approx((1 << 30) / 1e9 / 1e-2)  # GB/s
    assert busbw == pytest.approx(algbw * 2 * (n - 1) / n)


def test_report_rows() -> None:
    c = Collective("allreduce", 8 << 20, 8, iterations=2)
    g, _ = run(c, 0, delay=lambda t: 2000)
    rows = c.report(g.iterations)
    assert [r["iteration"] for r in rows] == [0, 1]
    for r in rows:
        assert r["time_ns"] == r["end_ns"] - r["start_ns"] > 0
        assert r["algbw_GBps"] == pytest.approx((8 << 20) / r["time_ns"])
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 14 / 8)


def test_busbw_reaches_line_rate_on_an_ideal_ring() -> None:
    """Each rank's link carries one transfer at a time at ``rate`` (a delay of size /
    rate, no latency): a ring all-reduce's busbw is then the line rate, which is what the
    factor is for."""
    rate_GBps = 12.5  # 100 Gb/s
    n, size = 8, 8 << 20
    c = Collective("allreduce", size, n, chunk=1 << 16, window=1)
    g, _ = run(c, 0, delay=lambda t: round(t.size / rate_GBps))
    (row,) = c.report(g.iterations)
    assert row["busbw_GBps"] == pytest.approx(rate_GBps, rel=0.01)


# -- bad values and memory ------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,match", [
    ({"op": "broadcast"}, r"--collective broadcast: one of allreduce, allgather, "
                          r"reducescatter, alltoall"),
    ({"op": "allgather", "algorithm": "halving-doubling"},
     r"--algorithm halving-doubling: --collective allgather runs ring"),
    ({"algorithm": "halving-doubling", "ranks": 6}, r"--ranks 6: halving-doubling needs a "
                                                    r"power of two \(4 or 8\)"),
    ({"ranks": 1}, r"--ranks 1: a collective needs at least 2 ranks"),
    ({"size": 7}, r"--size 7: each of --ranks 8 .* at least 8 bytes"),
    ({"chunk": 63}, r"--chunk 63: 64\.\.2147483648 bytes"),
    ({"window": 0}, r"--window 0: 1\.\.65536"),
    ({"iterations": 0}, r"--iterations 0: at least 1"),
])
def test_bad_values(kwargs: dict, match: str) -> None:
    args = {"op": "allreduce", "size": 1 << 20, "ranks": 8, **kwargs}
    with pytest.raises(UsageError, match=match):
        Collective(**args)


def test_ranks_need_hosts_and_default_algorithms() -> None:
    with pytest.raises(UsageError, match=r"--ranks 32 needs at least 32 hosts; the network "
                       r"has 16"):
        Collective("allreduce", 1 << 20, 32).start(HOSTS, 100.0, random.Random(0))
    for op, algorithms in col.ALGORITHMS.items():
        assert Collective(op, 1 << 20, 8).algorithm == algorithms[0]


def test_memory_check_names_size(monkeypatch) -> None:
    """Refused naming --size and the largest size that fits; that size passes."""
    monkeypatch.setattr(budget, "available", lambda: 32 << 20)
    for c in (Collective("allreduce", 1 << 30, 64, chunk=4096),
              Collective("allreduce", 1 << 30, 64, "halving-doubling", chunk=4096),
              Collective("alltoall", 1 << 28, 16, chunk=64)):
        with pytest.raises(UsageError, match=rf"--size (1G|256M): \d+ transfers per iteration "
                           rf"of {c.op} over {c.ranks} ranks would need .* of memory, 32M is "
                           r"available here \(--size at most [0-9.]+[KMG]? with --chunk") as e:
            c.check_memory(64, 100.0)
        most = str(e.value).split("--size at most ")[1].split(" ")[0]
        size = parse_size(most)
        assert size > c.ranks
        replace(c, size=size).check_memory(64, 100.0)
        # and a little more does not (the bound is within 1 % of the largest)
        with pytest.raises(UsageError):
            replace(c, size=size * 102 // 100 + 4096 * c.ranks).check_memory(64, 100.0)


def test_start_refuses_before_planning(monkeypatch) -> None:
    """A graph too big for memory is refused by ``start`` itself, in a blink: nothing of
    it is made."""
    monkeypatch.setattr(budget, "available", lambda: 32 << 20)
    c = Collective("allreduce", 1 << 40, 16, chunk=64)
    tracemalloc.start()
    with pytest.raises(UsageError, match="--size 1T: "):
        c.start(HOSTS, 100.0, random.Random(0))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20


def test_memory_check_when_nothing_fits(monkeypatch) -> None:
    monkeypatch.setattr(budget, "available", lambda: 1 << 20)
    with pytest.raises(UsageError, match=r"--ranks 1024: .* and even --size 1024 makes \d+ "
                       r"\(fewer --ranks\)"):
        Collective("allreduce", 1 << 20, 1024, chunk=4096).check_memory(1024, 100.0)


def test_transfer_bytes_covers_the_graph() -> None:
    """The graph's peak memory while planning an iteration, per transfer."""
    for c in (Collective("allreduce", 4 << 20, 8, chunk=1 << 15),
              Collective("alltoall", 1 << 20, 8, chunk=1024),
              Collective("allreduce", 1 << 20, 8, "halving-doubling", chunk=1024)):
        assert c.transfers_per_iteration() > 1500
        tracemalloc.start()
        c.start(HOSTS, 100.0, random.Random(0))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak / c.transfers_per_iteration() <= col.TRANSFER_BYTES, c
