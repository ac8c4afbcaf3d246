"""Hosts cabled back to back without a transmit scheduler: ``DirectNic`` and its ``Link``.

This is the two-host model (``roce emulate`` on ``--topology p2p``, the verbs ``Fabric``): a
host's device puts every frame it builds onto its link at once, the link serializes them in
order (``Link.fate``: the end of a frame is the later of now and the end of the one before,
plus its bits over the rate in whole ns), and a frame's fate (the seeded faults of
``roce.emu.net.faults``) is decided when it is handed to the link.  A QP's timers start when
its frames are built.  Nothing here can hold a frame back, so congestion control (a pacer per
QP) and PFC (queues a pause can stop) need the switched network's ``Nic`` instead
(``roce.emu.net.nic``); ``topology.build`` picks which.

Both ends run on the one event loop (``roce.emu.net.sim.Network``), with three kinds of
event, scheduled exactly as the two-host fabric always scheduled them:

- a delivery: the frame reaches the destination's ``receive`` at its arrival time;
- a kick: the device has new work (a post, a modify): drain its frames, re-arm its timer;
- a timer: ``timer_event`` with ``(nic, deadline)``; a timer the device re-armed or cleared
  since is stale and does nothing (``DirectNic.stale``).
"""

from __future__ import annotations

import random

from roce.emu.core.verbs import Context
from roce.emu.net.callbacks import Callback, deliverer
from roce.emu.net.faults import Faults, LinkConfig, LinkStats
from roce.headers import LAYOUTS

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

    from roce.emu.core.endpoint import Endpoint

_DST_OFF = LAYOUTS["eth"].field("dst").byte_offset
_DST_END = _DST_OFF + LAYOUTS["eth"].field("dst").bits // 8


class Link:
    """One direction of a cable between two endpoints (docs/architecture.md: a link depends
    on the ``Endpoint`` interface, not on the verbs API).  ``watch``: None, or a callable
    ``(now, frame)`` handed each frame as the link takes it, before its fate (tests watch
    what a link is handed; an extension type in the compiled form, so not by replacing
    ``fate``)."""

    __slots__ = ("src", "dst", "rng", "name", "busy_until", "faults", "watch")

    def __init__(self, src: Endpoint, dst: Endpoint, config: LinkConfig,
                 rng: random.Random, name: str = "") -> None:
        self.src, self.dst, self.rng = src, dst, rng
        self.name = name
        self.busy_until = 0
        self.faults = Faults(config, rng)
        self.watch: Any = None

    @property
    def config(self) -> LinkConfig:
        return self.faults.config

    @config.setter
    def config(self, config: LinkConfig) -> None:
        """A new fault configuration; the counters and the random stream carry on."""
        self.faults = Faults(config, self.rng, self.faults.stats, self.faults.bad_state)

    @property
    def stats(self) -> LinkStats:
        return self.faults.stats

    @property
    def hops(self) -> int:
        """Frames this link carried (each one hop), lost ones included: they were sent."""
        return self.faults.stats.frames

    def fate(self, now: int, frame: bytes) -> list[tuple[int, bytes]]:
        """(arrival time, frame) for each copy that reaches the other end."""
        if self.watch is not None:
            self.watch(now, frame)
        faults = self.faults
        arrival = self._serialize(now, frame) + faults.config.delay_ns
        if faults.clean:  # one copy, on time: what Faults.apply would say, without its list
            faults.stats.carried(frame)
            return [(arrival, frame)]
        return [(arrival + extra, f) for extra, f in faults.apply(now, frame)]

    def clean_arrival(self, now: int, frame: bytes) -> int:
        """When ``frame`` reaches the other end, taken as ``fate`` takes it, if its fate is
        one copy on time (no faults configured, nobody watching): no list made for it (a
        sending host's every frame); else -1 with nothing done, and ``fate`` decides."""
        faults = self.faults
        if self.watch is not None or not faults.clean:
            return -1
        faults.stats.carried(frame)
        return self._serialize(now, frame) + faults.config.delay_ns

    def _serialize(self, now: int, frame: bytes) -> int:
        """The link takes ``frame`` at ``now``: when its last bit leaves, after the frames
        before it (bits / (Gb/s) = ns, whole ns); the link is busy until then."""
        busy = self.busy_until
        start = now if now > busy else busy
        bits = len(frame) * 8  # (C numbers in the compiled form: the quotient in C)
        rate = self.faults.config.rate_gbps
        self.busy_until = end = start + int(bits / rate)
        return end


class DirectNic(Callback):
    """A host whose device sends straight onto its links (one per peer, by MAC); a frame's
    arrival fires it (``Callback``: ``receive``)."""

    __slots__ = ("net", "ctx", "name", "device", "mac", "links", "timer_at", "kicked", "tap",
                 "rx_frames", "tx_frames", "sent_bytes", "_only", "_only_mac")

    def __init__(self, net: Any, ctx: Context) -> None:
        self.net = net
        self.ctx = ctx
        self.name = ctx.name
        self.device = dev = ctx.device
        dev.on_activity = self._activity
        ctx.clock = lambda: net.now
        self.mac = bytes.fromhex(dev.mac.replace(":", ""))
        self.links: dict[bytes, Link] = {}  # destination MAC -> the link toward it
        # the one link and its MAC while there is one (two hosts): a frame's destination is
        # compared with it in place, with no slice to look up
        self._only: Link | None = None
        self._only_mac = b""
        self.timer_at: int | None = None  # the deadline of the live timer event
        self.kicked = False
        self.tap: Any = None  # a writer for what this host sends and receives
        self.rx_frames = 0
        self.tx_frames = 0
        self.sent_bytes: dict[int, int] | None = None  # QPN -> bytes, once ``count_sent``

    @property
    def ip(self) -> str:
        return self.device.ip

    def attach(self, link: Link, peer_mac: bytes) -> None:
        self.links[peer_mac] = link
        one = len(self.links) == 1
        self._only, self._only_mac = (link, peer_mac) if one else (None, b"")

    # -- Endpoint ----------------------------------------------------------------------

    def fire(self, now: int, frame: bytes) -> None:
        self.receive(now, frame)

    def receive(self, now: int, frame: bytes) -> None:
        self.rx_frames += 1
        for w in self.net.recorders:
            w.write(frame, ts_ns=now)
        if self.tap is not None:
            self.tap.write(frame, ts_ns=now)
        dev = self.device
        dev.receive(now, frame)
        self._after(now)

    def next_tx(self, now: int) -> int | None:
        return None  # frames never wait here: they go onto the link as they are built

    # -- the device's driver -----------------------------------------------------------

    def _activity(self, device: Any) -> None:
        if not self.kicked:
            self.kicked = True
            self.net.at(self.net.now, _kick, self)

    def _after(self, now: int) -> None:
        """After the device handled something: send its frames, (re)arm its timer."""
        dev = self.device
        frames = dev.drain()
        if frames:
            for frame in frames:
                self._transmit(now, frame)
        d = dev.deadline()
        if d is None:
            self.timer_at = None
        elif self.timer_at != d:
            self.timer_at = d
            self.net.events.at(max(d, now), timer_event, (self, d))

    def _transmit(self, now: int, frame: bytes) -> None:
        f = frame  # (bytes: its destination compared in place, in C in the compiled form)
        link = self._only
        if link is None or not f.startswith(self._only_mac, _DST_OFF):
            link = self.links.get(frame[_DST_OFF:_DST_END])
        if link is None:
            return  # no cable to that MAC: the frame goes nowhere
        self.tx_frames += 1
        net = self.net
        if self.tap is not None:  # written when its serialization starts
            net.at(max(now, link.busy_until), _write, (self.tap, frame))
        deliver = deliverer(link.dst)
        events = net.events
        t = link.clean_arrival(now, frame)
        if t >= 0:
            events.at(t, deliver, frame)
            return
        for t, f in link.fate(now, frame):
            events.at(t, deliver, f)

    def stale(self, deadline: int) -> bool:
        """Whether a timer event for ``deadline`` was superseded (re-armed or cleared)."""
        return self.timer_at != deadline

    def on_timer(self, now: int) -> None:
        self.timer_at = None
        self.device.on_timer(now)
        self._after(now)

    # -- observing -----------------------------------------------------------------------

    def count_sent(self) -> None:
        """Count the bytes each QP of the device sends from now on (``sent_bytes``, by QPN:
        a trace's QP rates).  Every frame a QP builds goes onto the link, so the count is
        taken as the QP appends it to the device's list."""
        if self.sent_bytes is not None:
            return
        self.sent_bytes = {}
        for qp in self.device.qps.values():
            self.sent_bytes[qp.qpn] = 0
            qp.tx = _Counted(self.device.tx, self.sent_bytes, qp.qpn)


class _Counted:
    """A QP's view of its device's transmit list that counts what the QP appends."""

    __slots__ = ("frames", "sent", "qpn")

    def __init__(self, frames: list[bytes], sent: dict[int, int], qpn: int) -> None:
        self.frames, self.sent, self.qpn = frames, sent, qpn

    def append(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.sent[self.qpn] += len(frame)

    def __len__(self) -> int:
        return len(self.frames)


def _kick(now: int, nic: DirectNic) -> None:
    nic.kicked = False
    nic._after(now)


def timer_event(now: int, arg: tuple[DirectNic, int]) -> None:
    nic, deadline = arg
    if nic.timer_at == deadline:
        nic.on_timer(now)


def _write(now: int, arg: tuple[Any, bytes]) -> None:
    writer, frame = arg
    writer.write(frame, ts_ns=now)
