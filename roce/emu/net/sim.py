"""The switched network's event loop: ``Network``.

Events wait on one queue (``roce.emu.net.events``: a callback gets ``(now, argument)``, ties
in time run in scheduling order), so a run is a pure function of the topology, the traffic
and the seed (one ``random.Random(seed)`` hands every random consumer its own stream).  Time
is integer nanoseconds.  A callback that is a ``roce.emu.net.callbacks.Callback`` (the events of
every frame on every link) is fired through ``fire``: a C call in the compiled form.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from roce.emu.net.callbacks import Callback
from roce.emu.net.events import TIME_MAX, queue_for

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

# this module's own form decides the queue's: compiled, ``events`` is typed as the C queue
_COMPILED = not __file__.endswith(".py")


class Network:
    __slots__ = ("seed", "now", "rng", "events", "hosts", "switches", "wires", "recorders",
                 "warnings")

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.now = 0
        self.rng = random.Random(seed)
        self.events = queue_for(_COMPILED)  # what is scheduled: ``at``
        self.hosts: dict[str, Any] = {}  # name -> Nic
        self.switches: dict[str, Any] = {}  # name -> Switch
        self.wires: list[Any] = []
        self.recorders: list[Any] = []  # writers of every frame a host receives
        self.warnings: list[str] = []  # settings that defeat themselves (``topology.build``)

    def child_rng(self) -> random.Random:
        """A random stream of its own for one consumer (taken in construction order)."""
        return random.Random(self.rng.getrandbits(64))

    def at(self, t: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        """Schedule ``fn(t, arg)`` at virtual time ``t`` (``EventQueue.at``)."""
        self.events.at(t, fn, arg)

    @property
    def hops(self) -> int:
        """Frames that crossed a link so far."""
        return sum(w.hops for w in self.wires)

    def run_until_any(self, items: list, limit_ns: int) -> bool:
        """Run events until ``items`` is not empty (something a callback appends to); False
        when no event is left or the next one lies past ``limit_ns``."""
        q = self.events
        limit = min(limit_ns, TIME_MAX)
        while not items:
            ev = q.pop_until(limit)
            if ev is None:
                return False
            t, fn, arg = ev
            self.now = t
            if isinstance(fn, Callback):  # a frame's event: its ``fire``, a C call compiled
                h = fn
                h.fire(t, arg)
            else:
                fn(t, arg)
        return True

    def run(self, until: int) -> None:
        """Run every event up to virtual time ``until``."""
        self.run_until_any([], until)
        self.now = max(self.now, until)
