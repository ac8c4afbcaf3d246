"""The small tables of an InfiniBand port: SL-to-VL mapping and VL arbitration (IBA Vol 1
7.6.6 and 7.6.9; the SM sets both through SLtoVLMappingTable and VLArbitrationTable).

- ``SlToVl``: 16 entries, the VL a packet of each service level takes out of a port.  A
  packet keeps its SL end to end; its VL may change per hop.  SL15 is not used for data.
- ``VlArbiter``: the output port's choice among VLs with a packet ready.  Two tables of
  (VL, weight) entries, weights in units of 64 bytes (0 skips the entry); the high-priority
  table is served first, but once it has sent ``limit_high`` x 4096 bytes while low-priority
  packets waited the low-priority table gets the next packet (LimitOfHighPriority; 255 is
  unbounded).  Within a table entries take turns: an entry stays current until its weight
  is used up (a packet that starts within the weight is sent whole), or no packet of its VL
  is ready, then the next entry is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from roce.families.ib.flowcontrol import BLOCK, MAX_VL

SLS = 16
UNBOUNDED_HIGH = 255  # LimitOfHighPriority: no limit
HIGH_LIMIT_UNIT = 4096  # bytes per unit of LimitOfHighPriority (IBA 7.6.9)


class SlToVl:
    __slots__ = ("table",)

    def __init__(self, table: Sequence[int]) -> None:
        if len(table) != SLS or any(not 0 <= v <= MAX_VL for v in table):
            raise ValueError(f"an SL-to-VL table maps {SLS} SLs to data VLs 0-{MAX_VL}")
        self.table = tuple(table)

    @classmethod
    def spread(cls, vls: int) -> SlToVl:
        """SL s on VL s mod ``vls``: every data VL in use, SLs sharing them in turn."""
        return cls([s % vls for s in range(SLS)])

    def __getitem__(self, sl: int) -> int:
        return self.table[sl]


class _Table:
    __slots__ = ("entries", "at", "left")

    def __init__(self, entries: Sequence[tuple[int, int]]) -> None:
        for vl, w in entries:
            if not 0 <= vl <= MAX_VL or not 0 <= w <= 255:
                raise ValueError(f"VL arbitration entry ({vl}, {w}): VL 0-{MAX_VL}, "
                                 "weight 0-255")
        self.entries = [(vl, w) for vl, w in entries if w]
        self.at = 0
        self.left = self.entries[0][1] * BLOCK if self.entries else 0

    # (``pick`` and ``idle`` on locals the build makes C integers: ``roce._compiled``)

    def pick(self, ready: Callable[[int], bool]) -> int | None:
        entries = self.entries
        n, at, block = len(entries), self.at, BLOCK
        for _ in range(n + 1):
            vl = entries[at][0]
            if self.left > 0 and ready(vl):
                self.at = at
                return vl
            at = (at + 1) % n
            weight = entries[at][1]
            self.left = weight * block
        self.at = at
        return None

    def idle(self) -> None:
        """What ``pick`` does when no VL is ready: every entry tried in turn, the one after
        the current entry is current, with its whole weight."""
        entries = self.entries
        n, at, block = len(entries), self.at, BLOCK
        at = (at + 1) % n
        weight = entries[at][1]
        self.at = at
        self.left = weight * block

    def charge(self, nbytes: int) -> None:
        self.left -= nbytes

    def has(self, ready: Callable[[int], bool]) -> bool:
        return any(ready(vl) for vl, _ in self.entries)


class VlArbiter:
    __slots__ = ("high", "low", "limit_high", "high_sent", "_last")

    def __init__(self, high: Sequence[tuple[int, int]], low: Sequence[tuple[int, int]],
                 limit_high: int = UNBOUNDED_HIGH) -> None:
        self.high, self.low = _Table(high), _Table(low)
        if not self.high.entries and not self.low.entries:
            raise ValueError("VL arbitration needs an entry with a weight")
        self.limit_high = limit_high
        self.high_sent = 0
        self._last: _Table | None = None

    @classmethod
    def round_robin(cls, vls: int) -> VlArbiter:
        """Every data VL in the low-priority table with one MTU's weight (4 KB: 64 x 64)."""
        return cls((), [(vl, 64) for vl in range(vls)])

    def pick(self, ready: Callable[[int], bool]) -> int | None:
        """The VL to send from next among those ``ready`` says have a packet that may go."""
        high_ok = (self.limit_high == UNBOUNDED_HIGH
                   or self.high_sent < self.limit_high * HIGH_LIMIT_UNIT
                   or not self.low.has(ready))
        if high_ok:
            vl = self.high.pick(ready) if self.high.entries else None
            if vl is not None:
                self._last = self.high
                return vl
        vl = self.low.pick(ready) if self.low.entries else None
        if vl is not None:
            self._last = self.low
            return vl
        if not high_ok and self.high.entries:
            vl = self.high.pick(ready)
            self._last = self.high if vl is not None else None
            return vl
        return None

    def idle(self) -> None:
        """What ``pick`` does when ``ready`` says no for every VL, without asking it (a port
        with nothing waiting): each table's turn passes."""
        if self.high.entries:
            self.high.idle()
        if self.low.entries:
            self.low.idle()

    def charge(self, nbytes: int) -> None:
        """The packet ``pick`` chose went: it uses its entry's weight."""
        t = self._last
        if t is None:
            return
        t.charge(nbytes)
        if t is self.high:
            self.high_sent += nbytes
        else:
            self.high_sent = 0


__all__ = ["SLS", "UNBOUNDED_HIGH", "SlToVl", "VlArbiter"]
