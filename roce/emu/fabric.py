"""The simulated fabric: hosts joined by links, a discrete-event loop on a virtual clock.

Everything random comes from one ``random.Random(seed)`` handed out per link direction, so a
seed reproduces a run bit for bit.  A link direction has a rate, a propagation delay and
faults: random loss, Gilbert-Elliott burst loss, reordering (extra delay jitter),
duplication, bit corruption (caught by the receiver's ICRC check), and targeted drops (the
Nth frame, every ACK in a time window, frames matching a display filter).  Every delivered
frame can be recorded to a pcap with virtual timestamps.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from roce import fast
from roce.emu.core.endpoint import Endpoint
from roce.emu.core.verbs import Context
from roce.headers import LAYOUTS
from roce.locate import OK
from roce.opcodes import OPCODES, Operation


@dataclass
class LinkConfig:
    """One direction of a link."""

    rate_gbps: float = 100.0
    delay_ns: int = 1000
    loss: float = 0.0
    # Gilbert-Elliott: P(good->bad), P(bad->good), loss probability in the bad state
    burst_p: float = 0.0
    burst_r: float = 0.5
    burst_loss: float = 1.0
    reorder: float = 0.0  # probability a frame gets extra delay
    reorder_jitter_ns: int = 20_000
    dup: float = 0.0
    corrupt: float = 0.0
    drop_nth: frozenset[int] = frozenset()  # 1-based frame numbers on this direction
    drop_acks_between: tuple[int, int] | None = None  # virtual ns window
    # Drop the frames whose flat fields (``roce.packet.Packet.fields()``) it accepts, e.g. a
    # ``roce.decoder.filter.compile_filter("bth.opcode == 0x11")`` the caller compiled.
    drop_filter: Callable[[dict], bool] | None = None


@dataclass
class LinkStats:
    frames: int = 0
    bytes: int = 0
    lost: int = 0
    duplicated: int = 0
    corrupted: int = 0
    reordered: int = 0
    filtered: int = 0


@dataclass(eq=False)
class Faults:
    """The seeded fault decisions of one link direction: which copies of a frame arrive, with
    how much extra delay.  Shared by every link model (this fabric's ``Link``, the switched
    network's ``Wire``, the relay) so the fault rules exist once."""

    config: LinkConfig
    rng: random.Random
    stats: LinkStats = field(default_factory=LinkStats)
    bad_state: bool = False
    _filter: Callable[[dict], bool] | None = None

    def __post_init__(self) -> None:
        self._filter = self.config.drop_filter
        c = self.config
        self.clean = not (c.loss or c.burst_p or c.corrupt or c.reorder or c.dup or c.drop_nth
                          or c.drop_acks_between is not None or self._filter is not None)

    def apply(self, now: int, frame: bytes) -> list[tuple[int, bytes]]:
        """(extra delay in ns, frame) for each copy that reaches the other end."""
        st = self.stats
        st.frames += 1
        st.bytes += len(frame)
        if self.clean:
            return [(0, frame)]
        c = self.config
        rng = self.rng
        if st.frames in c.drop_nth or self._targeted(now, frame):
            st.lost += 1
            return []
        if c.burst_p:
            self.bad_state = (rng.random() >= c.burst_r) if self.bad_state else (
                rng.random() < c.burst_p)
            if self.bad_state and rng.random() < c.burst_loss:
                st.lost += 1
                return []
        if c.loss and rng.random() < c.loss:
            st.lost += 1
            return []
        if c.corrupt and rng.random() < c.corrupt:
            frame = self._flip(frame)
            st.corrupted += 1
        extra = 0
        if c.reorder and rng.random() < c.reorder:
            extra = rng.randrange(1, max(2, c.reorder_jitter_ns))
            st.reordered += 1
        out = [(extra, frame)]
        if c.dup and rng.random() < c.dup:
            st.duplicated += 1
            out.append((extra + rng.randrange(1, 1000), frame))
        return out

    def _targeted(self, now: int, frame: bytes) -> bool:
        c = self.config
        if c.drop_acks_between is not None:
            lo, hi = c.drop_acks_between
            if lo <= now < hi:
                w = fast.walk(frame)
                if w.status == OK and OPCODES[w.opcode].operation is Operation.ACK:
                    self.stats.filtered += 1
                    return True
        if self._filter is not None:
            from roce.packet import parse

            try:
                fields = parse(frame).fields()
            except ValueError:
                return False
            if self._filter(fields):
                self.stats.filtered += 1
                return True
        return False

    def _flip(self, frame: bytes) -> bytes:
        """Flip one bit that the ICRC covers: BTH to the end of the pad, except the BTH byte
        the ICRC masks (FECN/BECN/reserved)."""
        w = fast.walk(frame)
        lo, hi = (w.bth_off, w.icrc_off) if w.status == OK else (14, len(frame))
        if hi - lo < 2:
            return frame
        pos = self.rng.randrange(lo, hi - 1)
        if w.status == OK and pos >= w.bth_off + _BTH_MASKED:
            pos += 1  # skip the masked byte
        b = bytearray(frame)
        b[pos] ^= 1 << self.rng.randrange(8)
        return bytes(b)


class Link:
    """One direction of a point-to-point link between two endpoints (docs/architecture.md:
    a link depends on the ``Endpoint`` interface, not on the verbs API)."""

    def __init__(self, src: Endpoint, dst: Endpoint, config: LinkConfig,
                 rng: random.Random) -> None:
        self.src, self.dst, self.rng = src, dst, rng
        self.busy_until = 0
        self.faults = Faults(config, rng)

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

    def fate(self, now: int, frame: bytes) -> list[tuple[int, bytes]]:
        """(arrival time, frame) for each copy that reaches the other end."""
        start = max(now, self.busy_until)
        self.busy_until = start + int(len(frame) * 8 / self.config.rate_gbps)  # bits/(Gb/s)=ns
        arrival = self.busy_until + self.config.delay_ns
        return [(arrival + extra, f) for extra, f in self.faults.apply(now, frame)]


class Fabric:
    """Hosts and links on a virtual clock (integer nanoseconds)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.now = 0
        self._rng = random.Random(seed)
        self._events: list[tuple[int, int, int, Any, Any]] = []
        self._seq = 0
        self.hosts: dict[str, Context] = {}
        self.links: dict[tuple[str, str], Link] = {}  # (src ip, dst mac) -> link
        self._timers: dict[int, int] = {}  # id(device) -> scheduled deadline
        self._kicked: set[int] = set()
        self.recorders: list[Any] = []
        self.events_run = 0

    # -- building --------------------------------------------------------------------------

    def add_host(self, name: str, ip: str, mac: str | None = None) -> Context:
        ctx = Context(name, ip, mac, clock=lambda: self.now)
        ctx.device.on_activity = self._on_activity
        self.hosts[name] = ctx
        return ctx

    def connect(self, a: Context, b: Context, config: LinkConfig | None = None,
                reverse: LinkConfig | None = None, **kw: Any) -> tuple[Link, Link]:
        """Join two hosts; ``config`` (or keyword fields of LinkConfig) for a->b, ``reverse``
        for b->a (defaults to the same)."""
        fwd = config or LinkConfig(**kw)
        back = reverse or (LinkConfig(**kw) if config is None else config)
        ab = Link(a.device, b.device, fwd, random.Random(self._rng.getrandbits(64)))
        ba = Link(b.device, a.device, back, random.Random(self._rng.getrandbits(64)))
        self.links[(a.ip, b.mac)] = ab
        self.links[(b.ip, a.mac)] = ba
        a.device.neighbors[b.ip] = b.mac
        b.device.neighbors[a.ip] = a.mac
        return ab, ba

    def record(self, writer: Any) -> None:
        """Write every delivered frame to ``writer`` (``PcapWriter``-like: ``write(frame,
        ts_ns=...)``)."""
        self.recorders.append(writer)

    # -- the event loop ------------------------------------------------------------------

    def _push(self, t: int, kind: int, a: Any, b: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, a, b))

    def _on_activity(self, device: Any) -> None:
        if id(device) not in self._kicked:
            self._kicked.add(id(device))
            self._push(self.now, _KICK, device)

    def _after(self, device: Any) -> None:
        """After a device handled something: send its frames, (re)arm its timer."""
        frames = device.drain()
        if frames:
            for frame in frames:
                self._transmit(device, frame)
        d = device.deadline()
        if d is None:
            self._timers.pop(id(device), None)
        elif self._timers.get(id(device)) != d:
            self._timers[id(device)] = d
            self._push(max(d, self.now), _TIMER, device, d)

    def _transmit(self, device: Any, frame: bytes) -> None:
        link = self.links.get((device.ip, frame[_DST_OFF:_DST_END].hex(":")))
        if link is None:
            return  # no cable to that MAC: the frame goes nowhere
        for t, f in link.fate(self.now, frame):
            self._push(t, _DELIVER, link, f)

    def step(self) -> bool:
        """Run one event; False when there is none."""
        if not self._events:
            return False
        t, _, kind, a, b = heapq.heappop(self._events)
        if kind == _TIMER and self._timers.get(id(a)) != b:
            return True  # superseded: the device re-armed or cleared it; time does not move
        self.now = t
        self.events_run += 1
        if kind == _DELIVER:
            for w in self.recorders:
                w.write(b, ts_ns=t)
            dev = a.dst
            dev.receive(t, b)
            self._after(dev)
        elif kind == _TIMER:
            del self._timers[id(a)]
            a.on_timer(t)
            self._after(a)
        else:
            self._kicked.discard(id(a))
            self._after(a)
        return True

    def run(self, until: int | None = None, max_events: int | None = None) -> int:
        """Run events up to virtual time ``until`` (ns); returns events run."""
        n = 0
        while self._events:
            if until is not None and self._events[0][0] > until:
                self.now = until
                break
            if max_events is not None and n >= max_events:
                break
            self.step()
            n += 1
        else:
            if until is not None:
                self.now = max(self.now, until)
        return n

    def run_until_idle(self, limit_ns: int | None = None) -> int:
        """Run until no event is left (or virtual time passes ``limit_ns``)."""
        return self.run(until=limit_ns)

    def run_until(self, predicate: Callable[[], bool], limit_ns: int = 60_000_000_000) -> bool:
        """Run until ``predicate()`` holds; False if time ran past ``limit_ns`` first."""
        while not predicate():
            if not self._events or self._events[0][0] > limit_ns:
                return False
            self.step()
        return True


_DELIVER, _TIMER, _KICK = 0, 1, 2
_BTH_MASKED = LAYOUTS["bth"].field("fecn").byte_offset
_DST_OFF = LAYOUTS["eth"].field("dst").byte_offset
_DST_END = _DST_OFF + LAYOUTS["eth"].field("dst").bits // 8
