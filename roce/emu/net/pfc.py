"""802.1Qbb priority flow control at one port: what it received and what it sends.

``PauseState`` is the receiving side: a PFC frame stops exactly the priorities whose
class-enable bit is set, each for its pause time (quanta x 512 bit times at the port's rate)
or until a time of 0 (XON); an 802.3x PAUSE stops every priority.  ``PfcSender`` builds the
frames a port sends upstream (codec: ``roce.macc``): XOFF with the full pause time, refreshed
at half the pause time while the priority stays congested, and XON when it drains.
"""

from __future__ import annotations

from collections.abc import Callable

from roce import macc

CLASSES = len(macc.PRIORITIES)
MAX_QUANTA = macc.MAX_QUANTA


def _span(header: str, field: str) -> tuple[int, int]:
    f = macc.LAYOUTS[header].field(field)
    return f.byte_offset, f.byte_offset + f.bits // 8


# offsets after the opcode (roce.macc's layouts): the lean reader of the per-hop path
_OPCODE = _span("macc", "opcode")
_BODY = macc.LAYOUTS["macc"].size
_ENBV = _span("macc.cbfc", "cbfc.enbv")
_TIMES = tuple(_span("macc.cbfc", f"cbfc.pause_time.c{p}") for p in macc.PRIORITIES)
_PAUSE_TIME = _span("macc.pause", "pause_time")


def class_times(frame: bytes) -> dict[int, int] | None:
    """Priority -> quanta a MAC Control frame acts on (``MacControl.class_times``), read at
    fixed offsets; None if it is not a whole PAUSE or PFC frame."""
    off = macc.macc_offset(frame)
    if off < 0 or len(frame) < off + _BODY + macc.LAYOUTS["macc.cbfc"].size:
        return None
    u16 = int.from_bytes
    op = u16(frame[off + _OPCODE[0]:off + _OPCODE[1]], "big")
    body = off + _BODY
    if op == macc.OPCODE_PFC:
        enbv = u16(frame[body + _ENBV[0]:body + _ENBV[1]], "big")
        return {p: u16(frame[body + a:body + b], "big")
                for p, (a, b) in enumerate(_TIMES) if enbv >> p & 1}
    if op == macc.OPCODE_PAUSE:
        return dict.fromkeys(macc.PRIORITIES,
                             u16(frame[body + _PAUSE_TIME[0]:body + _PAUSE_TIME[1]], "big"))
    return None


def pause_ns(quanta: int, rate_bps: int) -> int:
    """A pause time in whole ns at a link rate (rounded up: a pause never ends early)."""
    return -(-quanta * macc.QUANTUM_BITS * 1_000_000_000 // rate_bps)


class PauseState:
    """Which priorities a peer told this port to hold, until when; counters for stats."""

    __slots__ = ("until", "paused_ns", "frames", "xoffs", "xons", "rate_bps")

    def __init__(self, rate_bps: int) -> None:
        self.until = [0] * CLASSES
        self.paused_ns = 0
        self.frames = 0
        self.xoffs = 0
        self.xons = 0
        self.rate_bps = rate_bps

    def on_frame(self, now: int, frame: bytes) -> bool:
        """Apply a MAC Control frame; False if it is not one we understand."""
        times = class_times(frame)
        if times is None:
            return False  # another opcode, or cut short: a real MAC ignores it too
        self.frames += 1
        for prio, quanta in times.items():  # PAUSE: every class
            self._set(now, prio, quanta)
        return True

    def _set(self, now: int, prio: int, quanta: int) -> None:
        """A new pause time replaces the running one (802.1Qbb); 0 ends it (XON)."""
        if quanta == 0:
            self.xons += 1
        else:
            self.xoffs += 1
        end = now + pause_ns(quanta, self.rate_bps) if quanta else now
        self.paused_ns += end - max(self.until[prio], now)
        self.until[prio] = end

    def paused_ns_at(self, now: int) -> int:
        """Paused time up to ``now`` (pauses still running count up to ``now`` only)."""
        return self.paused_ns - sum(max(u - now, 0) for u in self.until)

    def paused(self, prio: int, now: int) -> bool:
        return self.until[prio] > now


class PfcSender:
    """The pause frames one port sends upstream for its lossless priorities."""

    __slots__ = ("src_mac", "rate_bps", "send", "at", "quanta", "refresh_ns", "pauses_sent",
                 "xons_sent", "epoch")

    def __init__(self, src_mac: bytes, rate_bps: int, send: Callable[[bytes], None],
                 at: Callable, quanta: int = MAX_QUANTA) -> None:
        self.src_mac = src_mac
        self.rate_bps = rate_bps
        self.send = send  # queue a control frame on the port and kick its wire
        self.at = at  # the network's scheduler
        self.quanta = quanta
        self.refresh_ns = pause_ns(quanta, rate_bps) // 2
        self.pauses_sent = 0
        self.xons_sent = 0
        self.epoch = [0] * CLASSES  # invalidates pending refreshes after XON

    def xoff(self, now: int, prio: int, still_congested: Callable[[], bool]) -> None:
        self.pauses_sent += 1
        self.send(macc.build_pfc(self.src_mac, {prio: self.quanta}))
        self.epoch[prio] += 1
        self.at(now + self.refresh_ns, self._refresh, (prio, self.epoch[prio], still_congested))

    def _refresh(self, now: int, arg: tuple) -> None:
        prio, epoch, still_congested = arg
        if self.epoch[prio] == epoch and still_congested():
            self.xoff(now, prio, still_congested)

    def xon(self, now: int, prio: int) -> None:
        self.xons_sent += 1
        self.epoch[prio] += 1
        self.send(macc.build_pfc(self.src_mac, {prio: 0}))
