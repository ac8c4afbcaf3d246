"""One direction of a link in the switched network: the ``Wire``.

A wire carries one frame at a time (store-and-forward): when idle it pulls the next frame
from its source endpoint, holds it for the serialization time at its rate, then hands each
copy the seeded fault rules (``roce.emu.net.faults.Faults``) let through to the destination
endpoint after the propagation delay.  The serialization clock is exact: within a busy
period the end of frame k is ``start + ceil(bits so far / rate)``, so rounding never
accumulates and a saturated wire runs at exactly its rate.
"""

from __future__ import annotations

from math import gcd

from roce.emu.net.callbacks import Callback, deliverer
from roce.emu.net.faults import Faults, LinkStats
from roce.emu.net.serial import serial_end  # per frame started (a C call in the compiled form)

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

    from roce.emu.core.endpoint import Endpoint


class PullEndpoint(Callback):
    """The end a wire pulls its frames from, one at a time (store-and-forward serialization):
    a NIC, a switch port, an HCA, a UET host.  Such an end subclasses this and overrides both
    methods; it receives frames as any ``roce.emu.core.endpoint.Endpoint`` does.  The wire
    calls them per frame (in C in the compiled form, where a subclass written in Python is
    called through its overrides).  A frame's arrival fires it (``Callback``): ``receive``,
    unless a subclass reaches its receiving more directly."""

    __slots__ = ()

    def fire(self, now: int, frame: bytes) -> None:
        self.receive(now, frame)  # type: ignore[attr-defined]

    def pull(self, now: int) -> bytes | None:
        """The next frame to put on the wire now, or None if nothing may go now."""
        raise NotImplementedError

    def next_tx(self, now: int) -> int | None:
        """The earliest time (ns, >= ``now``) this end wants to transmit; None: nothing to
        send until something else happens (a post, a received frame, a timer)."""
        raise NotImplementedError


class Wire(Callback):
    """One direction of a link (module docstring); its end of serialization is the event it
    fires (``Callback``), with the frame."""

    __slots__ = ("net", "src", "dst", "rate_bps", "delay_ns", "faults", "name", "busy",
                 "free_at", "_period_start", "_period_bits", "_ns_num", "_ns_den", "_wake_at",
                 "_events", "_stats", "_waker")

    def __init__(self, net: Any, src: PullEndpoint, dst: Endpoint, rate_gbps: float,
                 delay_ns: int, faults: Faults, name: str) -> None:
        if not isinstance(src, PullEndpoint):
            raise TypeError(f"wire {name}: its source, a {type(src).__name__}, is not a "
                            "roce.emu.net.link.PullEndpoint (a wire pulls from one)")
        self.net = net
        self.src = src
        self.dst = dst
        self.rate_bps = round(rate_gbps * 1e9)
        # nanoseconds per bit, num / den in lowest terms (1 / 100 at 100 Gb/s): the same
        # exact ceiling as 1e9 / rate_bps, in integers small enough for Python's fast paths
        g = gcd(1_000_000_000, self.rate_bps)
        self._ns_num, self._ns_den = 1_000_000_000 // g, self.rate_bps // g
        self.delay_ns = int(delay_ns)
        self.faults = faults
        self.name = name
        self.busy = False
        self.free_at = 0
        self._period_start = 0
        self._period_bits = 0
        self._wake_at: int | None = None
        # looked up once, not per frame: the network's event queue (``Network.at`` inline)
        # and the counters.  The endpoints are looked up per frame: a failure (or a test)
        # may replace ``dst`` after the wire is made
        self._events = net.events
        self._stats = faults.stats
        self._waker = _Wake(self)  # the wake-up it schedules when its source must wait

    @property
    def stats(self) -> LinkStats:
        return self.faults.stats

    @property
    def hops(self) -> int:
        """Frames this wire carried (each one hop), lost ones included: they were sent."""
        return self.faults.stats.frames

    def kick(self, now: int) -> None:
        """Start the next frame if the wire is idle and the source has one to send now;
        otherwise come back when the source says it will."""
        if self.busy:
            return
        frame = self.src.pull(now)
        if frame is None:
            t = self.src.next_tx(now)
            if t is not None and t > now and self._wake_at != t:
                self._wake_at = t
                self._events.at(t, self._waker, t)
            return
        self.busy = True
        # the end of serialization: exact within a busy period (module docstring)
        if now > self.free_at:
            self._period_start, bits = now, 0
        else:
            bits = self._period_bits
        self._period_bits = bits = bits + len(frame) * 8
        self.free_at = end = serial_end(self._period_start, bits, self._ns_num, self._ns_den)
        self._events.at(end, self, frame)  # ``fire``: the end of its serialization

    def _wake(self, now: int, t: int) -> None:
        if self._wake_at == t:
            self._wake_at = None
            self.kick(now)

    def fire(self, now: int, frame: bytes) -> None:
        """``frame`` is serialized: it propagates, and the next one may start."""
        self.busy = False
        arrive = now + self.delay_ns
        faults = self.faults
        if faults.clean:  # one copy, on time: what Faults.apply would say, without its list
            self._stats.carried(frame)
            self._events.at(arrive, deliverer(self.dst), frame)
        else:
            dst, events = deliverer(self.dst), self._events
            for extra, f in faults.apply(now, frame):
                events.at(arrive + extra, dst, f)
        self.kick(now)


class _Wake(Callback):
    """A wire's wake-up: its source wanted to send at ``t`` (``Wire.kick``); fired by the
    loop in C (``Callback``), as the wire's own events are."""

    __slots__ = ("wire",)

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def fire(self, now: int, t: int) -> None:
        self.wire._wake(now, t)
