"""InfiniBand congestion control (IBA Vol 1 Annex A10), as switches and HCAs run it:
``IbCcConfig`` (its parameters) and ``CcAgent`` (an HCA's congestion control table index per
QP).  Sans-I/O: the HCA hands it BECNs and the virtual time, and reads each QP's rate and
the next ``ccti_timer`` deadline.

Rules, each parameter named as Annex A10 and Linux's hfi1 driver (its congestion control
agent: ``process_becn``, ``cca_timer_fn``, ``set_link_ipg``) name it:

1. A switch marks FECN (BTH byte 4, bit 7) on a packet it sends out of a port whose queue
   holds more than ``threshold_bytes`` (A10's Threshold is a 4-bit, vendor-scaled level:
   here its effect, in bytes of the output queue), every ``marking_rate`` + 1 such packets
   (Marking_Rate: packets between marks; 0 marks each).  Only a root of congestion marks:
   a port whose queue grew while it had credit; one that waited for credit before the
   packet (a victim of congestion further on) marks only with ``victim_marking`` (A10's
   Victim_Mask), so flows that merely pass a backed-up port are not slowed for it.
2. The destination HCA answers each FECN-marked packet with a CNP (opcode 0x80, BECN set,
   DestQP the sender's QP; hfi1 ``return_cnp``) to the packet's SLID.
3. The source HCA, on a BECN for a QP, raises that QP's CCTI by ``ccti_increase``, up to
   ``ccti_limit``, and (re)starts the QP's ``ccti_timer``.
4. Each ``ccti_timer`` expiry (in units of 1.024 us: hfi1 waits 1024 ns x CCTI_Timer) lowers
   the CCTI by one while it is above ``ccti_min``; the timer stops there.
5. The congestion control table entry at the CCTI, (shift, multiplier), gives the
   inter-packet delay: IPD = (time to send a largest packet at line rate >> shift) x
   multiplier (hfi1 ``set_link_ipg``).  A QP sending largest packets each followed by IPD
   sends at line rate x t / (t + IPD): its pacer's rate.

The default table (``default_table``) is 128 entries of shift 2, multiplier i: entry i adds
i/4 of a largest packet's time after each packet (rate 1 / (1 + i/4) of line rate), a table
of the linear shape subnet managers fill; the defaults of the other parameters are choices
for the emulator's microsecond-scale links, not a published profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TIMER_UNIT_NS = 1024  # CCTI_Timer counts 1.024 us (rule 4)
FECN, BECN = 0x80, 0x40  # BTH byte 4
TABLE_ENTRIES = 128


def default_table() -> tuple[tuple[int, int], ...]:
    return tuple((2, i) for i in range(TABLE_ENTRIES))


@dataclass(frozen=True)
class IbCcConfig:
    """InfiniBand congestion control's settings (IBA Annex A10), by the rules above."""

    threshold_bytes: int = 4 * (4096 + 128)  # rule 1: four largest packets queued
    marking_rate: int = 0  # rule 1
    victim_marking: bool = False  # rule 1
    ccti_increase: int = 1  # rule 3
    ccti_limit: int = TABLE_ENTRIES - 1  # rule 3
    ccti_min: int = 0  # rule 4
    ccti_timer: int = 5  # rule 4, x 1.024 us
    table: tuple[tuple[int, int], ...] = field(default_factory=default_table)  # rule 5

    def __post_init__(self) -> None:
        if not 0 <= self.ccti_min <= self.ccti_limit < len(self.table):
            raise ValueError("CCTI_Min <= CCTI_Limit < the table's entries")
        if self.ccti_timer < 1 or self.ccti_increase < 1 or self.threshold_bytes < 0:
            raise ValueError("CCTI_Timer and CCTI_Increase are at least 1")
        for shift, mult in self.table:
            if not 0 <= shift <= 3 or not 0 <= mult < 1 << 14:
                raise ValueError("a table entry is shift (2 bits), multiplier (14 bits)")


class CcAgent:
    """One HCA's congestion control: a CCTI per QP (rules 3-5)."""

    __slots__ = ("cfg", "line_bps", "max_frame", "ccti", "deadline_of", "becns", "max_ccti")

    def __init__(self, cfg: IbCcConfig, line_bps: int, max_frame: int) -> None:
        self.cfg = cfg
        self.line_bps = line_bps
        self.max_frame = max_frame
        self.ccti: dict[int, int] = {}
        self.deadline_of: dict[int, int] = {}  # QPN -> its ccti_timer's deadline
        self.becns = 0
        self.max_ccti = 0

    def on_becn(self, now: int, qpn: int) -> int:
        """Rule 3; the QP's next ``ccti_timer`` deadline."""
        c = self.cfg
        self.becns += 1
        v = self.ccti[qpn] = min(self.ccti.get(qpn, c.ccti_min) + c.ccti_increase,
                                 c.ccti_limit)
        self.max_ccti = max(self.max_ccti, v)
        t = self.deadline_of[qpn] = now + c.ccti_timer * TIMER_UNIT_NS
        return t

    def on_timer(self, now: int, qpn: int) -> int | None:
        """Rule 4, when the QP's deadline has come: the next deadline, or None."""
        if self.deadline_of.get(qpn) != now:
            return None  # superseded by a later BECN
        c = self.cfg
        v = self.ccti[qpn] = max(self.ccti[qpn] - 1, c.ccti_min)
        if v > c.ccti_min:
            t = self.deadline_of[qpn] = now + c.ccti_timer * TIMER_UNIT_NS
            return t
        del self.deadline_of[qpn]
        return None

    def rate_bps(self, qpn: int) -> int:
        """Rule 5: the QP's sending rate."""
        shift, mult = self.cfg.table[self.ccti.get(qpn, self.cfg.ccti_min)]
        pkt_ns = self.max_frame * 8 * 1_000_000_000 // self.line_bps
        ipd = (pkt_ns >> shift) * mult
        return max(1, self.line_bps * pkt_ns // (pkt_ns + ipd)) if pkt_ns else self.line_bps


__all__ = ["BECN", "FECN", "TIMER_UNIT_NS", "CcAgent", "IbCcConfig", "default_table"]
