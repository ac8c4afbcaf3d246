"""REPS, recycled entropy packet spraying (``--entropy reps``): each request of a PDC takes an
entropy (the UDP source port the switches' ECMP hash reads) that came back good, or a fresh
one (uet-htsim, ``uec_mp.h``'s REPS path selection; the UE specification's load balancing by
entropy value).

Per PDC (its sending half):

- a packet sent takes the oldest entropy in the PDC's recycle queue, or when the queue is
  empty a fresh random one (so a PDC's first window sprays obliviously: the exploration);
- an ACK_CC without the M flag puts the entropy of every packet it newly acknowledged at
  the back of the queue (their path had no congestion); an ACK with the M flag, or a NACK
  for a trimmed packet, drops them (the path is congested: the next packets explore);
- the queue holds at most ``capacity`` entropies (ours: 256, above any window of PSNs the
  PDS allows in flight by default, 128), an entropy past it is dropped.

The ACKs are coalesced (one per 8 requests by default), and their M flag says that some
packet since the last ACK was marked: all the entropies it covers go together, the
conservative reading.  ACKs and NACKs themselves take the PDC's own entropy, as under
``--entropy pdc``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

CAPACITY = 256


class Reps:
    """One host's REPS state: every PDC's recycle queue and its packets' entropies;
    ``draw()`` gives a fresh entropy."""

    def __init__(self, draw: Callable[[], int], capacity: int = CAPACITY) -> None:
        self.draw = draw
        self.capacity = capacity
        self.queues: dict[int, deque[int]] = {}  # PDC ID -> entropies to reuse
        self.flight: dict[int, dict[int, int]] = {}  # PDC ID -> PSN -> its entropy
        self.recycled = 0  # packets sent on a recycled entropy
        self.fresh = 0  # packets sent on a fresh one
        self.dropped = 0  # entropies dropped for a mark or a trim

    def pick(self, pdc: Any, psn: int) -> int:
        """The entropy of request ``psn`` of ``pdc`` (a resend picks again)."""
        q = self.queues.get(pdc.id)
        if q:
            e = q.popleft()
            self.recycled += 1
        else:
            e = self.draw()
            self.fresh += 1
        self.flight.setdefault(pdc.id, {})[psn] = e
        return e

    def acked(self, pdc: Any, psns: list[int], marked: bool) -> None:
        """``psns`` of ``pdc`` acknowledged (``marked``: the ACK's M flag, or a trim)."""
        flight = self.flight.get(pdc.id)
        if not flight:
            return
        q = self.queues.setdefault(pdc.id, deque())
        for psn in psns:
            e = flight.pop(psn, None)
            if e is None:
                continue
            if marked or len(q) >= self.capacity:
                self.dropped += 1
            else:
                q.append(e)

    def stats(self) -> dict[str, int]:
        return {"recycled": self.recycled, "fresh": self.fresh, "dropped": self.dropped}


__all__ = ["CAPACITY", "Reps"]
