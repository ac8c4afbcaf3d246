"""Link failures and repairs at given virtual times: ``LinkFailures``.

``--link-down A-B@T[,up@T2]`` takes the link between nodes ``A`` and ``B`` (both
directions) down at ``T`` and, with ``up@T2``, back up at ``T2``.  On the simulated network
that is three named events per failure, each an ordinary event of the network's loop (no
clock is read; ``now`` is handed in):

- ``_fail`` at ``T``: both wires of the link deliver nothing from then on.  Frames in
  flight on it are lost: the ones propagating (their arrivals are taken off the event heap)
  and the one being serialized; frames queued for it still drain into it and are lost too,
  as at a port whose link went dark.  Each lost frame counts in the wire's ``lost``.
- ``_detect`` at ``T + detect_delay`` (``--detect-delay``): the network learns of it --
  every switch's routes are recomputed over the links known to be up (shortest paths by
  hop count, every equal-cost next hop, as ``topology.build`` makes them); a switch with no
  path to a host has no route to it and drops what it gets for it.
- ``_repair`` at ``T2``: both wires deliver again, and ``_detect`` at ``T2 + detect_delay``
  puts the link back in the routes.

Until detection, switches keep sending into the dead link; after it, flows hashed onto it
move to the other equal-cost paths.  An RC QP recovers what was lost by its own rules
(timeout, go-back-N or selective repeat): nothing here resends.

``parse_spec`` is the option's value type (the text's shape and times); ``resolve`` checks
the names against a topology (``UsageError`` naming the option and listing the links).
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from dataclasses import dataclass

from roce.emu.net import topology as topo
from roce.emu.net.callbacks import deliverer
from roce.errors import UsageError
from roce.options import parse_time

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True)
class LinkDown:
    """One ``--link-down``: the link's text (``A-B``), when it fails and when it is repaired
    (None: never)."""

    link: str
    down_ns: int
    up_ns: int | None = None

    def text(self) -> str:
        up = f",up@{self.up_ns}ns" if self.up_ns is not None else ""
        return f"{self.link}@{self.down_ns}ns{up}"


def parse_spec(text: str) -> LinkDown:
    """``A-B@T`` or ``A-B@T,up@T2`` (times as ``--delay`` takes them, ``T2`` after ``T``);
    an ``ArgumentTypeError`` saying what is expected otherwise."""
    want = "expected A-B@TIME or A-B@TIME,up@TIME (e.g. e1.1-a1.1@200us,up@1ms)"
    head, _, tail = text.partition(",")
    link, at, when = head.rpartition("@")
    if not at or "-" not in link.strip("-"):
        raise ArgumentTypeError(f"{text!r}: {want}")
    down = parse_time(when)
    up = None
    if tail:
        word, at, when = tail.partition("@")
        if word != "up" or not at:
            raise ArgumentTypeError(f"{text!r}: {want}")
        up = parse_time(when)
        if up <= down:
            raise ArgumentTypeError(f"{text!r}: the link comes up at {up} ns, not after it "
                                    f"fails at {down} ns")
    return LinkDown(link, down, up)


def resolve(t: topo.Topology, spec: LinkDown) -> tuple[str, str]:
    """The two nodes of ``spec``'s link in ``t``: the split of ``A-B`` at a ``-`` whose two
    sides name the ends of one link (names may hold ``-`` themselves); a UsageError
    naming the option and some links otherwise."""
    ends = {frozenset((ln.a, ln.b)) for ln in t.links}
    text = spec.link
    found = [(text[:i], text[i + 1:]) for i, c in enumerate(text)
             if c == "-" and frozenset((text[:i], text[i + 1:])) in ends]
    if len(found) == 1:
        return found[0]
    if found:
        raise UsageError(f"--link-down {spec.text()}: {text} names {len(found)} links; "
                         "rename the nodes")
    some = ", ".join(f"{ln.a}-{ln.b}" for ln in t.links[:6])
    raise UsageError(f"--link-down {spec.text()}: no link {text} in the topology (links "
                     f"are NODE-NODE: {some}{' ...' if len(t.links) > 6 else ''})")


class _Severed:
    """What a failed wire delivers to: nothing.  It counts each frame as lost on the wire."""

    __slots__ = ("wire", "name")

    def __init__(self, wire: Any) -> None:
        self.wire = wire
        self.name = wire.dst.name if hasattr(wire.dst, "name") else str(wire.dst)

    def receive(self, now: int, frame: bytes) -> None:
        self.wire.stats.lost += 1

    def next_tx(self, now: int) -> int | None:
        return None


class LinkFailures:
    """The failures of one run on ``net`` (built from ``t``), scheduled by ``start``."""

    def __init__(self, net: Any, t: topo.Topology, specs: list[LinkDown],
                 detect_delay_ns: int) -> None:
        self.net = net
        self.topology = t
        self.detect_delay_ns = detect_delay_ns
        self.specs = specs
        self.links = [resolve(t, s) for s in specs]
        # the two wires of each named link: one per direction, between the two nodes
        self.wires: dict[frozenset[str], list[Any]] = {frozenset(ab): [] for ab in self.links}
        for w in net.wires:
            key = frozenset((_node(w.src), _node(w.dst)))
            if key in self.wires:
                self.wires[key].append(w)
        self.receivers: dict[int, Any] = {}  # id(wire) -> its real destination
        self.dead: set[frozenset[str]] = set()  # what the wires do now
        self.known: set[frozenset[str]] = set()  # what the routes know
        self.failures = 0
        self.reroutes = 0
        self.lost_in_flight = 0

    def start(self) -> None:
        """Schedule every failure and repair (before the run's first event)."""
        for spec, ab in zip(self.specs, self.links):
            key = frozenset(ab)
            self.net.at(spec.down_ns, self._fail, key)
            if spec.up_ns is not None:
                self.net.at(spec.up_ns, self._repair, key)

    # -- the named events ------------------------------------------------------------------

    def _fail(self, now: int, key: frozenset[str]) -> None:
        if key in self.dead:
            return
        self.dead.add(key)
        self.failures += 1
        for w in self.wires[key]:
            real = w.dst
            self.receivers[id(w)] = real
            w.dst = _Severed(w)
            self.lost_in_flight += self._drop_in_flight(deliverer(real), w)
        self.net.at(now + self.detect_delay_ns, self._detect, (key, True))

    def _repair(self, now: int, key: frozenset[str]) -> None:
        if key not in self.dead:
            return
        self.dead.discard(key)
        for w in self.wires[key]:
            w.dst = self.receivers.pop(id(w))
            w.kick(now)
        self.net.at(now + self.detect_delay_ns, self._detect, (key, False))

    def _detect(self, now: int, arg: tuple[frozenset[str], bool]) -> None:
        key, down = arg
        if down:
            self.known.add(key)
        else:
            self.known.discard(key)
        self.reroute()
        self.reroutes += 1

    def _drop_in_flight(self, receive: Any, w: Any) -> int:
        """Take the arrivals scheduled with ``receive`` (``callbacks.deliverer``) off the event
        heap: the frames propagating on ``w`` (its destination has no other incoming wire)."""
        lost = self.net.events.remove(receive)
        w.stats.lost += lost
        return lost

    def reroute(self) -> None:
        """Every switch's routes again, over the links not known to be down (a failed link
        not yet detected is still in them: the switches keep sending into it)."""
        ends: dict[str, list[tuple[Any, Any]]] = {}
        for w in self.net.wires:
            dst = self.receivers.get(id(w), w.dst)  # a severed wire's real destination
            a = _node(w.src)
            if frozenset((a, _node(dst))) in self.known:
                continue
            ends.setdefault(a, []).append((w.src, dst))
        for sw in self.net.switches.values():
            sw.routes.clear()
        topo.routes(self.topology, self.net, ends)

    def stats(self) -> dict[str, Any]:
        return {"failures": self.failures, "reroutes": self.reroutes,
                "lost_in_flight": self.lost_in_flight,
                "down_at_end": sorted("-".join(sorted(k)) for k in self.dead)}


def _node(endpoint: Any) -> str:
    """The node an endpoint belongs to: a switch port's switch, a NIC's host."""
    sw = getattr(endpoint, "switch", None)
    if sw is not None:
        return sw.name
    return endpoint.ctx.name


__all__ = ["LinkDown", "LinkFailures", "parse_spec", "resolve"]
