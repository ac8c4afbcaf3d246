"""The verbs API's simulated network: ``Fabric``, hosts cabled back to back on the one event
loop of the emulator (``roce.emu.net.sim.Network``).

``Fabric(seed)`` builds it host by host: ``add_host`` gives a verbs ``Context`` whose device a
``DirectNic`` drives, ``connect`` joins two hosts with a ``Link`` per direction (rate, delay
and the seeded faults of ``LinkConfig``), and ``run``, ``run_until`` and ``step`` move the
virtual clock (integer nanoseconds).  It is the two-host topology ``roce emulate`` runs on
``--topology p2p`` (``roce.emu.net.topology``), made one call at a time; the frames, their
times and the counters are the same.  Every delivered frame can be recorded to a pcap with
virtual timestamps (``record``).

Everything random comes from ``random.Random(seed)``: each link direction gets a stream of its
own, in the order the links are made, so a seed reproduces a run bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable

from roce.emu.core.verbs import Context
from roce.emu.net.direct import DirectNic, Link, timer_event
from roce.emu.net.faults import Faults, LinkConfig, LinkStats
from roce.emu.net.sim import Network

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Fabric", "Faults", "Link", "LinkConfig", "LinkStats"]


class Fabric:
    """Hosts and links on a virtual clock (integer nanoseconds)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.net = Network(seed)
        self.net.recorders = []
        self.hosts: dict[str, Context] = {}
        self.links: dict[tuple[str, str], Link] = {}  # (src ip, dst mac) -> link
        self.events_run = 0

    @property
    def now(self) -> int:
        return self.net.now

    @now.setter
    def now(self, t: int) -> None:
        self.net.now = t

    @property
    def recorders(self) -> list[Any]:
        return self.net.recorders

    @property
    def pending(self) -> int:
        """Events still scheduled (0: the fabric is idle)."""
        return len(self.net.events)

    # -- building --------------------------------------------------------------------------

    def add_host(self, name: str, ip: str, mac: str | None = None) -> Context:
        ctx = Context(name, ip, mac)
        self.net.hosts[name] = DirectNic(self.net, ctx)
        self.hosts[name] = ctx
        return ctx

    def connect(self, a: Context, b: Context, config: LinkConfig | None = None,
                reverse: LinkConfig | None = None, **kw: Any) -> tuple[Link, Link]:
        """Join two hosts; ``config`` (or keyword fields of LinkConfig) for a->b, ``reverse``
        for b->a (defaults to the same)."""
        fwd = config or LinkConfig(**kw)
        back = reverse or (LinkConfig(**kw) if config is None else config)
        na, nb = self.net.hosts[a.name], self.net.hosts[b.name]
        ab = Link(na, nb, fwd, self.net.child_rng(), f"{a.ip}->{b.ip}")
        ba = Link(nb, na, back, self.net.child_rng(), f"{b.ip}->{a.ip}")
        na.attach(ab, nb.mac)
        nb.attach(ba, na.mac)
        self.net.wires += [ab, ba]
        self.links[(a.ip, b.mac)] = ab
        self.links[(b.ip, a.mac)] = ba
        a.device.neighbors[b.ip] = b.mac
        b.device.neighbors[a.ip] = a.mac
        return ab, ba

    def record(self, writer: Any) -> None:
        """Write every delivered frame to ``writer`` (``PcapWriter``-like: ``write(frame,
        ts_ns=...)``)."""
        self.net.recorders.append(writer)

    # -- running -------------------------------------------------------------------------

    def step(self) -> bool:
        """Run one event; False when there is none.  A timer its device re-armed or
        cleared since is dropped without moving the clock."""
        events = self.net.events
        if not events:
            return False
        t, fn, arg = events.pop()
        if fn is timer_event and arg[0].stale(arg[1]):
            return True
        self.net.now = t
        self.events_run += 1
        fn(t, arg)
        return True

    def run(self, until: int | None = None, max_events: int | None = None) -> int:
        """Run events up to virtual time ``until`` (ns); returns events run."""
        n = 0
        events = self.net.events
        while events:
            if until is not None and events.first() > until:
                self.net.now = until
                break
            if max_events is not None and n >= max_events:
                break
            self.step()
            n += 1
        else:
            if until is not None:
                self.net.now = max(self.net.now, until)
        return n

    def run_until_idle(self, limit_ns: int | None = None) -> int:
        """Run until no event is left (or virtual time passes ``limit_ns``)."""
        return self.run(until=limit_ns)

    def run_until(self, predicate: Callable[[], bool], limit_ns: int = 60_000_000_000) -> bool:
        """Run until ``predicate()`` holds; False if time ran past ``limit_ns`` first."""
        events = self.net.events
        while not predicate():
            if not events or events.first() > limit_ns:
                return False
            self.step()
        return True
