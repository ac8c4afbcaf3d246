"""Collectives as dependency graphs: ring all-reduce, all-gather and reduce-scatter,
halving-doubling all-reduce, pairwise all-to-all; their algorithm and bus bandwidths.

``Collective(op, size, ranks, algorithm, iterations, chunk, window)`` plans each iteration
as a ``roce.emu.workload.graph.Plan``: every transfer starts when the data it carries (or
the step it follows) has arrived, never at a precomputed time.  Rank ``i`` is host ``i``.
The buffer of ``size`` bytes is cut into ``ranks`` parts, part ``k`` holding bytes
``size*k//ranks`` up to ``size*(k+1)//ranks`` (so every part has a byte: ``size`` is at
least ``ranks``).  For all-gather and reduce-scatter ``size`` is the whole buffer, as
nccl-tests count it (``sendcount * ranks``); for all-to-all it is what each rank sends, its
own part included.

Ring (NCCL's ring, ``src/device/all_reduce.h`` ``runRing``): rank ``r`` sends to
``r + 1``.  At step ``s`` it sends part ``r - s - 1`` (all-reduce, reduce-scatter) or
``r - s`` (all-gather), modulo ``ranks``: the part it received at step ``s - 1``, reduced
with its own (the first ``ranks - 1`` steps of all-reduce and all of reduce-scatter) or as
received.  All-reduce takes ``2(ranks - 1)`` steps, the others ``ranks - 1``.  As NCCL
loops over its buffer a chunk at a time, each part is moved in ``pieces`` cuts of at most
``chunk`` bytes, and a rank runs the whole ring for cut ``j`` before cut ``j + 1`` (its
program order); cut ``j`` of a step waits for cut ``j`` of the step before.

Halving-doubling all-reduce (Rabenseifner; ``ranks`` a power of two): reduce-scatter by
recursive halving -- at step ``i`` rank ``r`` exchanges with ``r XOR ranks/2^(i+1)`` the
half of its block the partner keeps -- then all-gather by recursive doubling, exchanging
with ``r XOR 2^i`` the block it holds.  ``2 log2(ranks)`` steps; each waits for the message
the rank received at the step before.

Pairwise all-to-all: at step ``i`` (``1 .. ranks - 1``) rank ``r`` sends part ``r + i`` to
rank ``r + i`` and receives from ``r - i``; a step starts when the rank's send and receive
of the step before have arrived (MPI's pairwise exchange).

In these two, a step's message is cut into pieces of at most ``chunk`` bytes that travel in
order on their connection, and a step waits for every piece of the messages it follows.

Defaults from NCCL's: a 4 MiB buffer per connection (``DEFAULT_BUFFSIZE``, the
``NCCL_BUFFSIZE`` variable's default) in ``NCCL_STEPS`` = 8 steps (``src/include/device.h``),
and a ring slice of ``ALLREDUCE_SLICESTEPS`` = ``NCCL_STEPS``/4 = 2 steps
(``src/include/collectives.h``): ``chunk`` 1 MiB, and ``window`` 4 slices in flight per
connection.

Bandwidth (nccl-tests, doc/PERFORMANCE.md): ``algbw = size / time``; ``busbw = algbw *
factor``, the factor ``2(n - 1)/n`` for all-reduce and ``(n - 1)/n`` for all-gather,
reduce-scatter and all-to-all: what each rank's link must carry per byte of ``size``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from roce.emu import budget
from roce.emu.workload import ALGORITHMS, DEFAULT_CHUNK, DEFAULT_WINDOW  # op -> algorithms
from roce.emu.workload.cdf import MAX_FLOW_BYTES
from roce.emu.workload.graph import Graph, IterationTime, Plan
from roce.emu.workload.traffic import Transfer, Workload, check_hosts, check_rate
from roce.errors import UsageError

# nccl-tests' bus-bandwidth factors (module docstring)
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}
MIN_CHUNK = 64  # bytes: a cut smaller than the smallest Ethernet frame measures nothing
MAX_WINDOW = 1 << 16
# Bytes the graph holds per transfer of the current iteration: the Transfer, its group,
# needs, state and place in its connection's queue (tests/test_workload_collective.py
# measures it).
TRANSFER_BYTES = 384


def _floor_human(n: int) -> str:
    """``n`` bytes as ``budget.human`` writes them, rounded down (3 significant digits), so
    the size it names is at most ``n``."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            scale = 10 ** (2 - int(math.floor(math.log10(value))))
            return f"{math.floor(value * scale) / scale:g}{unit}"
    return str(n)


def bus_factor(op: str, ranks: int) -> float:
    return BUS_FACTOR[op](ranks)


def bandwidth(op: str, size: int, ranks: int, ns: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (10^9 bytes per second, as nccl-tests prints) of ``op``
    moving ``size`` bytes among ``ranks`` in ``ns`` nanoseconds (bytes per ns is GB/s)."""
    algbw = size / ns if ns > 0 else 0.0
    return algbw, algbw * bus_factor(op, ranks)


def part(size: int, ranks: int, k: int) -> int:
    """The bytes of part ``k`` of a ``size``-byte buffer cut in ``ranks`` parts."""
    return size * (k + 1) // ranks - size * k // ranks


def cut(nbytes: int, pieces: int, j: int) -> int:
    """The bytes of cut ``j`` of ``nbytes`` cut in ``pieces``."""
    return nbytes * (j + 1) // pieces - nbytes * j // pieces


@dataclass(frozen=True)
class _Message:
    """One message of a collective's schedule: its step and phase, the ranks it goes
    between, the block it carries and the messages it waits for."""

    step: int
    phase: str
    src: int
    dst: int
    block: tuple[int, int]
    nbytes: int
    needs: tuple[tuple[int, int], ...]  # (step, src) of the messages it waits for


@dataclass(frozen=True)
class Collective(Workload):
    """``iterations`` runs of ``op`` over ``size`` bytes and ``ranks`` ranks (module
    docstring); ``algorithm`` "" is the op's first in ``ALGORITHMS``."""

    op: str
    size: int
    ranks: int
    algorithm: str = ""
    iterations: int = 1
    chunk: int = DEFAULT_CHUNK
    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        if self.op not in ALGORITHMS:
            raise UsageError(f"--collective {self.op}: one of {', '.join(ALGORITHMS)}")
        algorithms = ALGORITHMS[self.op]
        if not self.algorithm:
            object.__setattr__(self, "algorithm", algorithms[0])
        if self.algorithm not in algorithms:
            raise UsageError(f"--algorithm {self.algorithm}: --collective {self.op} runs "
                             f"{' or '.join(algorithms)}")
        n = self.ranks
        if n < 2:
            raise UsageError(f"--ranks {n}: a collective needs at least 2 ranks")
        if self.algorithm == "halving-doubling" and n & (n - 1):
            below = 1 << (n.bit_length() - 1)
            raise UsageError(f"--ranks {n}: halving-doubling needs a power of two "
                             f"({below} or {below * 2}); ring runs any number")
        if self.size < n:
            raise UsageError(f"--size {self.size}: each of --ranks {n} holds a part of the "
                             f"buffer, so --size is at least {n} bytes")
        if not MIN_CHUNK <= self.chunk <= MAX_FLOW_BYTES:
            raise UsageError(f"--chunk {self.chunk}: {MIN_CHUNK}..{MAX_FLOW_BYTES} bytes (a "
                             "transfer is one RDMA message)")
        if not 1 <= self.window <= MAX_WINDOW:
            raise UsageError(f"--window {self.window}: 1..{MAX_WINDOW} transfers in flight "
                             "per connection")
        if self.iterations < 1:
            raise UsageError(f"--iterations {self.iterations}: at least 1")

    # -- shape -----------------------------------------------------------------------------

    def steps(self) -> int:
        n = self.ranks
        if self.algorithm == "halving-doubling":
            return 2 * (n.bit_length() - 1)
        return 2 * (n - 1) if self.op == "allreduce" else n - 1

    def pieces(self) -> int:
        """Cuts per part on a ring: the largest part in cuts of at most ``chunk`` bytes
        (every part has at least that many bytes, since ``chunk`` >= 2)."""
        return -(-part(self.size, self.ranks, self.ranks - 1) // self.chunk)

    def _messages(self) -> Iterator[_Message]:
        """Halving-doubling and pairwise all-to-all: one message per rank and step, in step
        order."""
        n, size = self.ranks, self.size

        def nbytes(lo: int, hi: int) -> int:
            return size * hi // n - size * lo // n

        if self.algorithm == "halving-doubling":
            k = n.bit_length() - 1
            for i in range(k):  # reduce-scatter, recursive halving
                d = n >> (i + 1)
                for r in range(n):
                    lo = r & ~(2 * d - 1)
                    send = (lo + d, lo + 2 * d) if r & d == 0 else (lo, lo + d)
                    needs = ((i - 1, r ^ (2 * d)),) if i else ()
                    yield _Message(i, "reduce", r, r ^ d, send, nbytes(*send), needs)
            for i in range(k):  # all-gather, recursive doubling
                d = 1 << i
                for r in range(n):
                    lo = r & ~(d - 1)
                    needs = ((k + i - 1, r ^ (d >> 1)),) if i else ((k - 1, r ^ 1),)
                    yield _Message(k + i, "copy", r, r ^ d, (lo, lo + d), nbytes(lo, lo + d),
                                   needs)
        else:  # pairwise all-to-all
            for s in range(n - 1):
                for r in range(n):
                    dst = (r + s + 1) % n
                    needs = ((s - 1, r), (s - 1, (r - s) % n)) if s else ()
                    yield _Message(s, "copy", r, dst, (dst, dst + 1), nbytes(dst, dst + 1),
                                   needs)

    def transfers_per_iteration(self) -> int:
        """How many transfers one iteration has, counted without making them."""
        if self.algorithm == "ring":
            return self.pieces() * self.steps() * self.ranks
        return sum(-(-m.nbytes // self.chunk) for m in self._messages())

    # -- plans -----------------------------------------------------------------------------

    def plan(self, iteration: int, base: int) -> Plan:
        """Iteration ``iteration``'s transfers, their ids from ``base``."""
        if self.algorithm == "ring":
            return self._ring(iteration, base)
        return self._by_message(iteration, base)

    def _ring(self, iteration: int, base: int) -> Plan:
        n, size, steps, pieces = self.ranks, self.size, self.steps(), self.pieces()
        first = 0 if self.op == "allgather" else 1  # part r - s - first at step s
        reduce_steps = {"allreduce": n - 1, "reducescatter": n - 1, "allgather": 0}[self.op]
        transfers: list[Transfer] = []
        needs: list[tuple[int, ...]] = []
        blocks = [(k, k + 1) for k in range(n)]  # one tuple per part, shared
        for j in range(pieces):  # program order: the whole ring for cut j, then j + 1
            for s in range(steps):
                phase = "reduce" if s < reduce_steps else "copy"
                for r in range(n):
                    k = (r - s - first) % n
                    i = len(transfers)
                    transfers.append(Transfer(base + i, r, (r + 1) % n,
                                              cut(part(size, n, k), pieces, j),
                                              iteration=iteration, step=s, phase=phase,
                                              piece=j, block=blocks[k]))
                    # cut j of this part arrived from r - 1 at the step before
                    needs.append((i - n - r + (r - 1) % n,) if s else ())
        return Plan(transfers, list(range(len(transfers))), needs, len(transfers), base)

    def _by_message(self, iteration: int, base: int) -> Plan:
        transfers: list[Transfer] = []
        groups: list[int] = []
        needs: list[tuple[int, ...]] = []
        index: dict[tuple[int, int], int] = {}  # (step, src) -> group
        for g, m in enumerate(self._messages()):
            index[(m.step, m.src)] = g
            pieces = -(-m.nbytes // self.chunk)
            need = tuple(index[key] for key in m.needs)
            for j in range(pieces):
                transfers.append(Transfer(base + len(transfers), m.src, m.dst,
                                          cut(m.nbytes, pieces, j), iteration=iteration,
                                          step=m.step, phase=m.phase, piece=j, block=m.block))
                groups.append(g)
                needs.append(need)
        return Plan(transfers, groups, needs, len(index), base)

    # -- Workload --------------------------------------------------------------------------

    def check_memory(self, hosts: int, rate_gbps: float, per_transfer: int = 0) -> None:
        check_rate(rate_gbps)
        count = self.transfers_per_iteration()
        each = TRANSFER_BYTES + per_transfer
        need = count * each
        if need <= budget.available():
            return
        have = budget.available()
        what = f"{count} transfers per iteration of {self.op} over {self.ranks} ranks"
        most = self._largest_size(have // each)
        if not most:  # not even the smallest size fits: too many ranks
            least = replace(self, size=self.ranks).transfers_per_iteration()
            raise UsageError(f"--ranks {self.ranks}: {what} would need "
                             f"{budget.human(need)} of memory, {budget.human(have)} is "
                             f"available here, and even --size {self.ranks} makes {least} "
                             "(fewer --ranks)")
        budget.check(need, "--size", budget.human(self.size),
                     f"{_floor_human(most)} with --chunk {budget.human(self.chunk)}", what)

    def _largest_size(self, transfers: int) -> int:
        """The largest ``size`` (at most this one) whose iteration has at most ``transfers``
        transfers, 0 if none: the count never falls as the size grows, so bisect."""
        def fits(size: int) -> bool:
            return replace(self, size=size).transfers_per_iteration() <= transfers

        lo, hi = self.ranks - 1, self.size  # fits(lo) is taken as true, fits(hi) false
        if not fits(self.ranks):
            return 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def start(self, hosts: Sequence[str], rate_gbps: float, rng: random.Random,
              start_ns: int = 0) -> Graph:
        """The run's graph: deterministic, ``rng`` is not drawn from.  An iteration that does
        not fit in memory is refused here too, before it is planned (the runner's own
        ``check_memory`` adds what it keeps per transfer)."""
        check_rate(rate_gbps)
        check_hosts(hosts, self.ranks, f"--ranks {self.ranks}")
        self.check_memory(len(hosts), rate_gbps)
        return Graph(self.plan, self.iterations, self.window, start_ns)

    def report(self, iterations: Sequence[IterationTime]) -> list[dict[str, Any]]:
        """One row per iteration: its times and nccl-tests' two bandwidths."""
        rows = []
        for it in iterations:
            algbw, busbw = bandwidth(self.op, self.size, self.ranks, it.ns)
            rows.append({"iteration": it.index, "start_ns": it.start_ns, "end_ns": it.end_ns,
                         "time_ns": it.ns, "algbw_GBps": algbw, "busbw_GBps": busbw})
        return rows


__all__ = ["ALGORITHMS", "BUS_FACTOR", "Collective", "DEFAULT_CHUNK", "DEFAULT_WINDOW",
           "MIN_CHUNK", "TRANSFER_BYTES", "bandwidth", "bus_factor", "cut", "part"]
