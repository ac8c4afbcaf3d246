"""Two UET hosts (PDS and SES) joined by a virtual-time loop in which a test decides each
packet's fate: delivered, lost, delayed (reordered), duplicated or trimmed.  Every packet
crosses as a frame through ``roce.emu.uet.uetframes`` (the UET family's codec both ways)."""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from roce.emu.core.constants import ALL_ACCESS
from roce.emu.core.memory import AddressSpace
from roce.emu.uet import uetframes
from roce.emu.uet.pds import Pds, PdsConfig
from roce.emu.uet.ses import Ses

DELAY = 1000  # ns each way
# fate(i, fields) -> a list of (extra delay, trimmed) copies; [] drops the packet
Fate = Callable[[int, dict[str, Any]], list[tuple[int, bool]]]


def clean(i: int, f: dict[str, Any]) -> list[tuple[int, bool]]:
    return [(0, False)]


class Host:
    def __init__(self, ip: str, mac: bytes, cfg: PdsConfig, seed: int, mtu: int) -> None:
        self.space = AddressSpace()
        self.pd = object()
        self.ses = Ses(self.space, self.pd, mtu)
        self.pds = Pds(ip, cfg, self.ses, random.Random(seed))
        self.ses.pds = self.pds
        self.ip, self.mac = ip, mac


class Loop:
    def __init__(self, cfg: PdsConfig | None = None, mtu: int = 1024,
                 fate: Fate = clean) -> None:
        cfg = cfg or PdsConfig()
        self.a = Host("10.0.0.1", bytes.fromhex("020000000001"), cfg, 1, mtu)
        self.b = Host("10.0.0.2", bytes.fromhex("020000000002"), cfg, 2, mtu)
        self.hosts = {self.a.ip: self.a, self.b.ip: self.b}
        self.fate = fate
        self.now = 0
        self.events: list[tuple[int, int, str, bytes, bool]] = []
        self.seq = itertools.count()
        self.count = itertools.count()
        self.frames: list[tuple[int, bytes]] = []  # (time, frame) of every frame delivered
        self.sent: list[tuple[str, dict[str, Any]]] = []  # (sender ip, fields) as pulled

    def buffers(self, size: int, seed: int = 5) -> tuple[Any, Any]:
        """A region on each host, ``size`` bytes of seeded random data each."""
        la = self.a.space.register(self.a.pd, size, ALL_ACCESS)
        rb = self.b.space.register(self.b.pd, size, ALL_ACCESS)
        r = random.Random(seed)
        la.buf[:] = r.randbytes(size)
        rb.buf[:] = r.randbytes(size)
        return la, rb

    def _pull(self, h: Host) -> Any:
        """The host's next packet (a test may watch each pull here)."""
        return h.pds.pull(self.now)

    def _receive(self, h: Host, r: Any, trimmed: bool) -> None:
        """A packet decoded for the host (a test may watch each one here)."""
        h.pds.receive(self.now, r.fields, r.payload, r.src, r.ce, trimmed)

    def _flush(self) -> None:
        for h in (self.a, self.b):
            while True:
                o = self._pull(h)
                if o is None:
                    break
                self.sent.append((h.ip, o.fields))
                fr = uetframes.encode(o.fields, o.payload, src=h.ip, dst=o.dst, smac=h.mac,
                                 dmac=self.hosts[o.dst].mac, entropy=0xC000)
                for extra, trimmed in self.fate(next(self.count), o.fields):
                    heapq.heappush(self.events, (self.now + DELAY + extra, next(self.seq),
                                                 o.dst, fr, trimmed))

    def run(self, limit: int = 10**10, until: Callable[[], bool] | None = None) -> int:
        """Run until nothing is left to happen (or ``until()``); the virtual time."""
        while True:
            self._flush()
            if until is not None and until():
                return self.now
            times = [d for d in (self.a.pds.deadline(), self.b.pds.deadline())
                     if d is not None]
            if self.events:
                times.append(self.events[0][0])
            if not times or min(times) > limit:
                return self.now
            self.now = max(self.now, min(times))
            while self.events and self.events[0][0] <= self.now:
                _, _, dst, fr, trimmed = heapq.heappop(self.events)
                self.frames.append((self.now, fr))
                r = uetframes.decode(fr)
                assert r is not None
                self._receive(self.hosts[dst], r, trimmed)
            for h in (self.a, self.b):
                h.pds.on_timer(self.now)
