"""The time-based loss rule of selective repeat (``loss_rule="rack"``): send times, RTT, the
reordering window.

A fact-for-fact rendering of RACK (RFC 8985, "The RACK-TLP Loss Detection Algorithm for TCP")
on PSNs instead of sequence numbers; docs/protocol.md, "Selective repeat (IRN) encoding":

- every (re)transmission of a PSN is remembered with its send time and a send counter (a
  burst leaves in one virtual instant: the counter orders it, as RFC 8985 section 6.1 orders
  equal timestamps by sequence);
- when a PSN is acknowledged (selectively or cumulatively) the newest-sent of the PSNs just
  acknowledged becomes RACK's reference: its send time and its round trip (``rack_rtt``);
- a PSN sent *before* the reference is lost once ``send time + rack_rtt + reo_wnd`` has
  passed (RFC 8985 section 6.2, step 5); until then its deadline is the ``reorder`` timer;
- ``reo_wnd`` = ``mult`` x min RTT / 4, at most the smoothed RTT (RFC 8985 section 6.2,
  step 4); ``mult`` grows by one, at most once per round trip, whenever a retransmission
  proves spurious: its PSN is acknowledged sooner than a min RTT after it was resent (the
  original got there; RFC 8985 section 6.2, step 2), or the responder reports it twice (a
  D-SACK, RFC 2883); not when it rode on a cumulative acknowledgement behind another PSN (its
  own selective NAK was lost: one names one PSN, where TCP repeats its SACK blocks).
- the growth does not last for ever: it is undone (``mult`` back to 1) after
  ``REO_WND_PERSIST`` = 16 loss recoveries in a row that saw none (RFC 8985 section 6.2,
  step 4, ``RACK.reo_wnd_persist``: set to 16 when the window grows, one less each time a
  recovery ends).  A loss recovery (``on_recovered``, called by the requester) starts when a
  PSN is found lost and ends once the cumulative acknowledgement reaches the PSN that was
  next to send then (TCP's recovery point).
- Ours, not RFC 8985's: the window also takes the reordering it measured (``seen``): how much
  longer than the min RTT a first transmission took that came back after a PSN sent later
  (a spurious retransmission's original included), at most the smoothed RTT.  Multipath
  spraying delays one path by a spine's queue: growing by a quarter min RTT per round trip
  would cost one spurious retransmission per step (bench/RESULTS.md, "Loss recovery").
  Every such measure counts as growth for ``reo_wnd_persist`` (the path still reorders),
  and ``seen`` is undone with ``mult``, so a window shrinks once the reordering is gone.

The object is sans-I/O: the requester hands it every time it knows (``now``).
"""

from __future__ import annotations

from collections.abc import Container, Iterable

SRTT_SHIFT = 3  # srtt += (sample - srtt) / 8 (RFC 6298's alpha)
REO_WND_PERSIST = 16  # loss recoveries a grown window outlives (RFC 8985 section 6.2, step 4)


class Rack:
    """The send record and reordering window of one requester."""

    __slots__ = ("sent", "count", "min_rtt", "srtt", "ref", "ref_rtt", "mult", "grow_after",
                 "spurious", "deadline", "seen", "first", "persist", "recoveries")

    def __init__(self) -> None:
        # PSN -> (send time, send counter) of PSNs sent and neither selectively nor
        # cumulatively acknowledged, in send order (dict order; a resend moves to the end)
        self.sent: dict[int, tuple[int, int]] = {}
        self.count = 0
        self.min_rtt: int | None = None
        self.srtt: int | None = None
        self.ref = -1  # send counter of the newest-sent PSN acknowledged so far
        self.ref_rtt = 0  # its round trip
        self.mult = 1  # reo_wnd in quarters of the min RTT
        self.grow_after = 0  # no second growth before this time (one per round trip)
        self.spurious = 0  # retransmissions found spurious
        self.deadline: int | None = None  # when the oldest candidate's window runs out
        self.seen = 0  # the most a late first transmission took beyond the min RTT
        self.first: dict[int, int] = {}  # PSN -> first send time, for PSNs sent again
        self.persist = 0  # loss recoveries left before the window's growth is undone
        self.recoveries = 0  # loss recoveries ended

    def on_send(self, psn: int, now: int) -> None:
        sent = self.sent
        if psn in sent:
            self.first.setdefault(psn, sent.pop(psn)[0])
        self.count += 1
        sent[psn] = (now, self.count)

    def on_ack(self, psns: Iterable[int], now: int, resent: Container[int]) -> None:
        """``psns`` (in PSN order) were acknowledged at ``now``; those in ``resent`` were
        retransmitted.  Only the first of them measures reordering: a selective
        acknowledgement, or the hole a cumulative one filled (the responder acknowledges a
        filled hole at once); a later PSN of a cumulative acknowledgement may look late only
        because its own selective acknowledgement was lost."""
        sent = self.sent
        best: tuple[int, int] | None = None
        measure = True
        first = self.first
        for psn in psns:
            entry = sent.pop(psn, None)
            if entry is None:
                measure = False
                continue
            rtt = now - entry[0]
            sent_first = first.pop(psn, None) if first else None
            if psn in resent:
                if self.min_rtt is not None and rtt < self.min_rtt:
                    # the original answered: not a sample, but a measure of the reordering
                    # when it is the first PSN; a later one's own selective NAK was lost
                    self.on_spurious(now, grow=measure)
                    if measure and sent_first is not None:
                        self._late(now - sent_first)
                    measure = False
                    continue
            else:
                if self.min_rtt is None or rtt < self.min_rtt:
                    self.min_rtt = rtt
                if measure and entry[1] < self.ref:  # came back after a PSN sent later
                    self._late(rtt)
            measure = False
            if best is None or entry[1] > best[1]:
                best = entry
        if best is None or best[1] < self.ref:
            return
        rtt = now - best[0]
        self.ref, self.ref_rtt = best[1], rtt
        self.srtt = rtt if self.srtt is None else self.srtt + ((rtt - self.srtt) >> SRTT_SHIFT)

    def _late(self, rtt: int) -> None:
        """A first transmission took ``rtt`` although a later one already came back: a
        window that wide would have waited for it."""
        self.on_reordered(rtt - (self.min_rtt or 0))

    def on_reordered(self, late: int) -> None:
        """Something arrived ``late`` ns after what was sent after it (a request's
        acknowledgement, or a READ response, ``SRCompleter``): widen ``seen`` to it."""
        if self.srtt is not None and late > self.srtt:
            late = self.srtt  # an acknowledgement lost, not reordering, can look later
        if late > 0:
            self.persist = REO_WND_PERSIST  # the path still reorders: keep the window
        if late > self.seen:
            self.seen = late

    def on_spurious(self, now: int, grow: bool = True) -> None:
        """A retransmission was not needed: the path reorders more than ``reo_wnd`` (unless
        not ``grow``: an acknowledgement was lost, the path did not reorder)."""
        self.spurious += 1
        if grow and now >= self.grow_after:
            self.mult += 1
            self.persist = REO_WND_PERSIST
            self.grow_after = now + (self.srtt or self.min_rtt or 0)

    def on_recovered(self) -> None:
        """A loss recovery ended (RFC 8985 section 6.2, step 4: exiting recovery): after
        ``REO_WND_PERSIST`` of them with no growth in between the window starts over."""
        self.recoveries += 1
        self.persist -= 1
        if self.persist <= 0:
            self.mult = 1
            self.seen = 0

    def reo_wnd(self) -> int:
        w = self.mult * (self.min_rtt or 0) // 4
        if self.srtt is not None and w > self.srtt:
            w = self.srtt
        return w + self.seen

    def lost(self, now: int, skip: Container[int]) -> list[int]:
        """PSNs sent before the reference whose window ran out (not those in ``skip``,
        already queued); sets ``deadline`` to the next candidate's, or None."""
        self.deadline = None
        if self.min_rtt is None:
            return []
        ref, wait = self.ref, self.ref_rtt + self.reo_wnd()
        out = []
        for psn, (t, n) in self.sent.items():
            if n > ref:
                break  # sent after the reference: nothing newer was acknowledged yet
            if psn in skip:
                continue
            if now >= t + wait:
                out.append(psn)
            else:
                self.deadline = t + wait  # later entries were sent later still
                break
        return out

    def forget(self) -> None:
        """The scoreboard starts over (a rewind, a flush); the path estimates stay."""
        self.sent.clear()
        self.first.clear()
        self.deadline = None
