"""The seeded faults of one link direction, shared by every link model (the back-to-back
``Link`` of ``roce.emu.net.direct``, the switched network's ``Wire``, the real-link relay):
random loss, Gilbert-Elliott burst loss, reordering (extra delay jitter), duplication, bit
corruption (caught by the receiver's ICRC check), and targeted drops (the Nth frame, every
ACK in a time window, frames matching a display filter).  ``LinkConfig`` is a direction's
rate, delay and faults; ``LinkStats`` what it counted.

Everything random comes from the ``random.Random`` a direction is handed (the network derives
one per direction from the seed), so a seed reproduces a run bit for bit.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from roce import fast
from roce.emu import defaults
from roce.headers import LAYOUTS
from roce.locate import OK
from roce.opcodes import OPCODES, Operation


@dataclass
class LinkConfig:
    """One direction of a link."""

    rate_gbps: float = defaults.RATE_GBPS
    delay_ns: int = defaults.DELAY_NS
    loss: float = 0.0
    # Gilbert-Elliott: P(good->bad), P(bad->good), loss probability in the bad state
    burst_p: float = 0.0
    burst_r: float = 0.5
    burst_loss: float = 1.0
    reorder: float = 0.0  # probability a frame gets extra delay
    reorder_jitter_ns: int = 20_000
    dup: float = 0.0
    corrupt: float = 0.0
    # What catches a corrupted frame.  False: the endpoint's own check (RoCE's ICRC, IB's
    # VCRC and ICRC), so the frame arrives with one bit flipped.  True: only the receiving
    # port's Ethernet FCS, as for UET, whose packets carry no end-to-end CRC: the port
    # discards the frame, and nothing reaches the endpoint (counted in ``corrupted``).
    fcs: bool = False
    drop_nth: frozenset[int] = frozenset()  # 1-based frame numbers on this direction
    drop_acks_between: tuple[int, int] | None = None  # virtual ns window
    # Drop the frames whose flat fields (``roce.packet.Packet.fields()``) it accepts, e.g. a
    # ``roce.decoder.filter.compile_filter("bth.opcode == 0x11")`` the caller compiled.
    drop_filter: Callable[[dict], bool] | None = None


@dataclass
class LinkStats:
    """One link direction's counters: the frames and bytes handed to it, and what its
    faults did to them."""

    frames: int = 0
    bytes: int = 0
    lost: int = 0
    duplicated: int = 0
    corrupted: int = 0
    reordered: int = 0
    filtered: int = 0

    def carried(self, frame: bytes) -> None:
        """Count a frame handed to the link, whatever its fate."""
        self.frames += 1
        self.bytes += len(frame)


@dataclass(eq=False)
class Faults:
    """The seeded fault decisions of one link direction: which copies of a frame arrive, with
    how much extra delay.  Shared by every link model (the back-to-back ``Link`` of
    ``roce.emu.net.direct``, the switched network's ``Wire``, the relay) so the fault rules
    exist once."""

    config: LinkConfig
    rng: random.Random
    stats: LinkStats = field(default_factory=LinkStats)
    bad_state: bool = False
    _filter: Callable[[dict], bool] | None = None
    # no rule can touch a frame: derived from ``config`` (``__post_init__``), not an argument
    clean: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._filter = self.config.drop_filter
        c = self.config
        self.clean = not (c.loss or c.burst_p or c.corrupt or c.reorder or c.dup or c.drop_nth
                          or c.drop_acks_between is not None or self._filter is not None)

    def apply(self, now: int, frame: bytes) -> list[tuple[int, bytes]]:
        """(extra delay in ns, frame) for each copy that reaches the other end."""
        st = self.stats
        st.carried(frame)
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
            st.corrupted += 1
            if c.fcs:  # the receiving port's FCS check discards it
                return []
            frame = self._flip(frame)
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


_BTH_MASKED = LAYOUTS["bth"].field("fecn").byte_offset
