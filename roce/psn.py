"""24-bit PSN arithmetic and sequence tracking: the pure-Python reference.

Rules (IBA 9.7.1; Linux rxe ``psn_compare``): PSNs are 24-bit and compared by the sign of
``(a - b) << 8`` taken as a signed 32-bit integer.  Relative to the expected PSN (ePSN) a
received PSN is expected, a duplicate (behind, up to 2^23 away) or ahead (an invalid,
out-of-sequence PSN).  At exactly 2^23 away the sign rule calls it behind, as rxe does.

``roce._fastpath`` has a twin of every function and of ``PSNTracker``; tests prove they agree.
"""

from __future__ import annotations

PSN_BITS = 24
PSN_MASK = (1 << PSN_BITS) - 1
PSN_WINDOW = 1 << (PSN_BITS - 1)

PSN_EXPECTED = 0
PSN_DUPLICATE = 1
PSN_AHEAD = 2
CLASS_NAMES = ("expected", "duplicate", "ahead")


def psn_add(psn: int, n: int) -> int:
    """``psn + n`` modulo 2^24 (n may be negative)."""
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` in [-2^23, 2^23): the value whose sign rxe compares."""
    # a subtraction, a mask and a test: fewer new integers than shifting to the sign bit
    d = (a - b) & 0xFFFFFF
    return d - 0x1000000 if d & 0x800000 else d


def psn_cmp(a: int, b: int) -> int:
    """-1, 0 or 1 as ``a`` is before, equal to or after ``b`` in PSN order."""
    d = psn_diff(a, b)
    return (d > 0) - (d < 0)


def classify(psn: int, epsn: int) -> int:
    """PSN_EXPECTED, PSN_DUPLICATE or PSN_AHEAD for a received ``psn`` against ``epsn``."""
    d = (psn - epsn) & 0xFFFFFF  # psn_diff inline: ahead when in (0, 2^23)
    if d == 0:
        return PSN_EXPECTED
    return PSN_AHEAD if d < 0x800000 else PSN_DUPLICATE


# Events reported by PSNTracker.feed.
EV_FIRST, EV_IN_ORDER, EV_GAP, EV_LATE, EV_DUPLICATE = 0, 1, 2, 3, 4
EVENT_NAMES = ("first", "in-order", "gap", "late", "duplicate")

# Holes remembered per flow; older holes are forgotten (their late arrivals count as
# duplicates) so that a pathological capture cannot grow memory without bound.
MAX_HOLES = 1024

# How far below a flow's first PSN a packet may arrive and still be taken for a late first
# arrival (reordered to the start of the capture: PSN 1 captured before PSN 0) rather than a
# retransmission, while ``PSNTracker.early`` is open (docs/protocol.md, "What a capture shows
# of it"; flowrules, "request PSNs").  A spraying fabric reorders by a few packets; 64 PSNs
# is half the selective-repeat window, well beyond that and small next to a lost burst.
EARLY_WINDOW = 64


class PSNTracker:
    """Follows one flow's PSNs as a capture analyser sees them.

    - in_order: the PSN after the highest seen;
    - gaps / missing: forward jumps and the PSNs they skipped;
    - late: a PSN behind the highest that fills a hole a gap left (reordering, or the first
      retransmission of a lost packet);
    - duplicates: a PSN behind the highest that was already seen (retransmission);
    - wraps: times the sequence crossed 2^24 -> 0.

    A PSN 1..``early`` below the first PSN (``first``), not overlapping it, is a late first
    arrival while the sequence has not gone half the PSN space past ``first``: the start
    moves back to it, it counts as late, and the PSNs between it and the old start become a
    hole (counted missing; no gap, no packet jumped).  ``early`` is ``EARLY_WINDOW`` until
    the analyser closes it (0: an acknowledgement covering the start was seen).
    """

    __slots__ = ("next", "started", "in_order", "gaps", "missing", "late", "duplicates",
                 "wraps", "holes", "first", "early")

    def __init__(self) -> None:
        self.next = self.first = 0
        self.early = EARLY_WINDOW
        self.started = False
        self.in_order = self.gaps = self.missing = self.late = self.duplicates = self.wraps = 0
        self.holes: list[list[int]] = []  # [start, length] runs of missing PSNs, oldest first

    def feed(self, psn: int, count: int = 1) -> int:
        """Account one packet that carries ``psn`` and consumes ``count`` PSNs; return event."""
        psn &= PSN_MASK
        if count < 1:
            count = 1
        if not self.started:
            self.started = True
            self.first = psn
            self.in_order += 1
            self._advance(psn, count)
            return EV_FIRST
        d = psn_diff(psn, self.next)
        if d == 0:
            self.in_order += 1
            self._advance(psn, count)
            return EV_IN_ORDER
        if d > 0:
            self.gaps += 1
            self.missing += d
            self.holes.append([self.next, d])
            if len(self.holes) > MAX_HOLES:
                del self.holes[0]
            self._advance(psn, count)
            return EV_GAP
        if self._fill(psn) or self._early(psn, count):
            self.late += 1
            return EV_LATE
        self.duplicates += 1
        return EV_DUPLICATE

    def _early(self, psn: int, count: int) -> bool:
        """A late first arrival (see the class): move the start back to ``psn``."""
        below = psn_diff(self.first, psn)
        if not count <= below <= self.early or psn_diff(self.next, self.first) < 0:
            return False
        self._back(psn, psn_add(psn, count), below - count)
        return True

    def start_at(self, psn: int) -> bool:
        """The flow started at ``psn``, 1..``early`` below its first PSN, not yet seen (a
        sequence NAK's ePSN there): the start moves back, ``psn`` onwards become missing.
        Whether it moved (the rule of ``_early``)."""
        psn &= PSN_MASK
        below = psn_diff(self.first, psn)
        if not self.started or not 0 < below <= self.early \
                or psn_diff(self.next, self.first) < 0:
            return False
        self._back(psn, psn, below)
        return True

    def _back(self, psn: int, start: int, hole: int) -> None:
        """The start moves back to ``psn``; ``hole`` PSNs from ``start`` are missing."""
        if hole:
            self.holes.insert(0, [start, hole])  # the lowest PSNs: PSN order kept
            self.missing += hole
            if len(self.holes) > MAX_HOLES:
                del self.holes[0]
        self.first = psn

    def _advance(self, psn: int, count: int) -> None:
        # The sequence wrapped if it jumped forward past 2^24 - 1 (psn below the expected
        # value numerically) or if this packet's PSNs run past it.
        nxt = psn + count
        if psn < self.next or nxt > PSN_MASK:
            self.wraps += 1
        self.next = nxt & PSN_MASK

    def skip_to(self, psn: int) -> None:
        """Continue from ``psn`` without counting a gap (a response stream that may jump)."""
        self.started = True
        self.next = psn & PSN_MASK
        self.early = 0  # a response stream that jumps: no start to move back

    def _fill(self, psn: int) -> bool:
        for i, hole in enumerate(self.holes):
            start, length = hole
            off = psn_diff(psn, start)
            if 0 <= off < length:
                if length == 1:
                    del self.holes[i]
                elif off == 0:
                    hole[0] = psn_add(start, 1)
                    hole[1] = length - 1
                elif off == length - 1:
                    hole[1] = length - 1
                else:
                    hole[1] = off
                    self.holes.insert(i + 1, [psn_add(psn, 1), length - off - 1])
                    if len(self.holes) > MAX_HOLES:
                        del self.holes[0]
                return True
        return False

    def missing_below(self, psn: int, floor: int = -1) -> bool:
        """Is a PSN before ``psn`` still missing (one at or after ``floor``, when it is not
        -1)?  Holes are kept in PSN order, so the newest one that starts before ``psn``
        decides (holes half the PSN space apart are not in order: then only that one)."""
        for start, length in reversed(self.holes):
            if psn_diff(start, psn) < 0:
                return floor < 0 or psn_diff(psn_add(start, length - 1), floor) >= 0
        return False

    @property
    def still_missing(self) -> int:
        return sum(h[1] for h in self.holes)

    def counts(self) -> dict[str, int]:
        return {"in_order": self.in_order, "gaps": self.gaps, "missing": self.missing,
                "late": self.late, "duplicates": self.duplicates, "wraps": self.wraps,
                "still_missing": self.still_missing, "next": self.next}
