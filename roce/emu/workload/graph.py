"""A dependency graph of transfers, driven as they complete: the ``Source`` of a collective.

Each iteration is a ``Plan``: the transfers in program order, each in a *group* (the unit
whose arrival others wait for: one transfer, or every piece of one message), and for each
transfer the groups it needs.  A transfer is handed out by ``ready`` when

1. every group it needs has arrived whole (the data it forwards, or the step it follows);
2. every transfer before it on its connection (same source and destination, program
   order) has been handed out: a connection posts in order, as a queue pair does;
3. fewer than ``window`` transfers of its connection are in flight (handed out, not yet
   arrived): the receiver's buffer slots (for NCCL, its FIFO of ``NCCL_STEPS`` steps).

Iterations are separated by a barrier: iteration ``k + 1`` is planned, and its first
transfers handed out, when the last transfer of iteration ``k`` arrives, so each
iteration's time (``iterations``: start, end) is its own.  Only the current iteration is
held in memory.

Nothing here knows what a collective is: ``roce.emu.workload.collective`` makes the plans.
``complete`` refuses (``ValueError``: a runner's bug) a transfer that was not handed out or
arrived already.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from roce.emu.workload.traffic import Source, Transfer

PENDING, ISSUED, ARRIVED = 0, 1, 2


@dataclass
class Plan:
    """One iteration: ``transfers`` in program order (their ids ``base`` + position),
    ``groups[i]`` the group of transfer ``i`` (0 .. ``ngroups`` - 1), ``needs[i]`` the
    groups it waits for (the graph keeps them in arrays and empties ``groups`` and
    ``needs``)."""

    transfers: list[Transfer]
    groups: list[int]
    needs: list[tuple[int, ...]]
    ngroups: int
    base: int = 0


@dataclass(frozen=True)
class IterationTime:
    """When one iteration of a workload started and ended, in virtual nanoseconds."""

    index: int
    start_ns: int
    end_ns: int

    @property
    def ns(self) -> int:
        return self.end_ns - self.start_ns


class _Connection:
    __slots__ = ("queue", "in_flight", "dirty")

    def __init__(self) -> None:
        self.queue: deque[int] = deque()  # transfers not yet handed out, program order
        self.in_flight = 0
        self.dirty = False


class Graph(Source):
    """The source of ``iterations`` iterations, each the ``Plan`` that ``plan(index,
    base_id)`` makes, at most ``window`` transfers in flight per connection."""

    def __init__(self, plan: Callable[[int, int], Plan], iterations: int, window: int,
                 start_ns: int = 0) -> None:
        if iterations < 1 or window < 1:
            raise ValueError("a graph has at least one iteration and a window of 1")
        self._make = plan
        self._iterations = iterations
        self._window = window
        self.iterations: list[IterationTime] = []
        self._index = -1
        self._next_base = 0
        self._begin(start_ns)

    # -- one iteration's state -------------------------------------------------------------

    def _begin(self, now: int) -> None:
        self._index += 1
        p = self.plan = self._make(self._index, self._next_base)
        n = len(p.transfers)
        if n == 0:
            raise ValueError("an iteration has no transfers")
        self._next_base = p.base + n
        self._start = now
        self._state = bytearray(n)
        self._left = n
        groups = self._groups = array("l", p.groups)
        self._waiting = array("l", (len(need) for need in p.needs))
        group_left = self._group_left = array("l", [0]) * p.ngroups
        for g in groups:
            group_left[g] += 1
        # who waits for each group, compressed: group g's waiters are
        # waiters[first[g]:first[g + 1]] (two flat arrays, not a list per group)
        first = array("l", [0]) * (p.ngroups + 1)
        for need in p.needs:
            for g in need:
                first[g + 1] += 1
        for g in range(p.ngroups):
            first[g + 1] += first[g]
        waiters = array("l", [0]) * first[-1]
        fill = array("l", first)
        for i, need in enumerate(p.needs):
            for g in need:
                waiters[fill[g]] = i
                fill[g] += 1
        self._first, self._waiters = first, waiters
        self._inputs: list[list[int]] | None = None
        p.groups, p.needs = [], []  # held as the arrays above from here on
        self._conns: dict[tuple[int, int], _Connection] = {}
        self._conn_of: list[_Connection] = []
        for t in p.transfers:
            c = self._conns.get((t.src, t.dst))
            if c is None:
                c = self._conns[(t.src, t.dst)] = _Connection()
            c.queue.append(t.id - p.base)
            self._conn_of.append(c)
        self._dirty: deque[_Connection] = deque()
        for c in self._conns.values():
            self._touch(c)

    def _touch(self, c: _Connection) -> None:
        if not c.dirty:
            c.dirty = True
            self._dirty.append(c)

    # -- Source ----------------------------------------------------------------------------

    def ready(self, now: int) -> list[Transfer]:
        out: list[Transfer] = []
        transfers, waiting, state, window = (self.plan.transfers, self._waiting, self._state,
                                             self._window)
        while self._dirty:
            c = self._dirty.popleft()
            c.dirty = False
            q = c.queue
            while q and c.in_flight < window and waiting[q[0]] == 0:
                i = q.popleft()
                state[i] = ISSUED
                c.in_flight += 1
                out.append(transfers[i])
        return out

    def next_time(self) -> int | None:
        return None  # only completions release transfers

    def complete(self, transfer: Transfer, now: int) -> None:
        if self.done:
            raise ValueError(f"transfer {transfer.id} completed after the last iteration")
        p = self.plan
        i = transfer.id - p.base
        if not 0 <= i < len(p.transfers) or p.transfers[i] != transfer:
            raise ValueError(f"transfer {transfer.id} is not of iteration {self._index}")
        if self._state[i] != ISSUED:
            raise ValueError(f"transfer {transfer.id} was not handed out or arrived already")
        self._state[i] = ARRIVED
        c = self._conn_of[i]
        c.in_flight -= 1
        self._touch(c)
        g = self._groups[i]
        self._group_left[g] -= 1
        if self._group_left[g] == 0:
            waiting = self._waiting
            for w in self._waiters[self._first[g]:self._first[g + 1]]:
                waiting[w] -= 1
                if waiting[w] == 0:
                    self._touch(self._conn_of[w])
        self._left -= 1
        if self._left == 0:
            self.iterations.append(IterationTime(self._index, self._start, now))
            if len(self.iterations) < self._iterations:
                self._begin(now)

    @property
    def done(self) -> bool:
        return len(self.iterations) == self._iterations

    # -- inspection (tests, traces) --------------------------------------------------------

    def inputs(self, transfer: Transfer) -> list[Transfer]:
        """The transfers of the current iteration that ``transfer`` waits for (the first
        call in an iteration indexes them: the graph itself does not need this way round)."""
        p = self.plan
        if self._inputs is None:
            first, waiters = self._first, self._waiters
            members: list[list[int]] = [[] for _ in range(p.ngroups)]
            for i, g in enumerate(self._groups):
                members[g].append(i)
            needs: list[list[int]] = [[] for _ in p.transfers]
            for g in range(p.ngroups):
                for w in waiters[first[g]:first[g + 1]]:
                    needs[w].extend(members[g])
            self._inputs = needs
        return [p.transfers[i] for i in self._inputs[transfer.id - p.base]]


__all__ = ["Graph", "IterationTime", "Plan"]
