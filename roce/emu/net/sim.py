"""The switched network's event loop: ``Network``.

Events are ``(time, sequence, callback, argument)`` on one heap; a callback gets
``(now, argument)``.  Time is integer nanoseconds; the sequence number breaks ties in
scheduling order, so a run is a pure function of the topology, the traffic and the seed
(one ``random.Random(seed)`` hands every random consumer its own stream).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any


class Network:
    __slots__ = ("seed", "now", "rng", "events", "seq", "hosts", "switches", "wires", "recorders",
                 "warnings")

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.now = 0
        self.rng = random.Random(seed)
        self.events: list[tuple[int, int, Callable[[int, Any], None], Any]] = []
        self.seq = itertools.count()  # tie-breaker: scheduling order
        self.hosts: dict[str, Any] = {}  # name -> Nic
        self.switches: dict[str, Any] = {}  # name -> Switch
        self.wires: list[Any] = []
        self.recorders: list[Any] = []  # writers of every frame a host receives
        self.warnings: list[str] = []  # settings that defeat themselves (``topology.build``)

    def child_rng(self) -> random.Random:
        """A random stream of its own for one consumer (taken in construction order)."""
        return random.Random(self.rng.getrandbits(64))

    def at(self, t: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        heapq.heappush(self.events, (t, next(self.seq), fn, arg))

    @property
    def hops(self) -> int:
        """Frames that crossed a link so far."""
        return sum(w.hops for w in self.wires)

    def run_until_any(self, items: list, limit_ns: int) -> bool:
        """Run events until ``items`` is not empty (something a callback appends to); False
        when no event is left or the next one lies past ``limit_ns``."""
        ev = self.events
        pop = heapq.heappop
        while not items:
            if not ev or ev[0][0] > limit_ns:
                return False
            t, _, fn, arg = pop(ev)
            self.now = t
            fn(t, arg)
        return True

    def run(self, until: int) -> None:
        """Run every event up to virtual time ``until``."""
        self.run_until_any([], until)
        self.now = max(self.now, until)
