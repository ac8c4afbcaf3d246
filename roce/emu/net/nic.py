"""A host in the switched network: an emulated RoCE device behind a NIC transmit scheduler.

The device and its QPs stay sans-I/O; the NIC owns their clock and their wire.  Each QP keeps
its own short transmit list (``QueuePair.tx_limit``): the link pulls one frame at a time and
the NIC pumps the QP's requester again, so go-back-N restarts from fresh state instead of
behind a long queue.  The scheduler holds frames per priority (a QP's priority follows its
DSCP through the same map the switches use), skips priorities the switch paused with PFC,
goes round robin among the QPs, and lets each QP send only when its pacer allows
(``RatePacer`` at line rate here; congestion control will drive it).  PFC frames the NIC
itself sends (a PFC storm fault) bypass all of that.  Received frames go to the device with
their ECN bits intact; received PFC frames stop the named priorities.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ... import macc
from ..verbs import Context
from . import frames
from .pfc import MAX_QUANTA, PauseState, pause_ns
from .stages import Classifier, RatePacer

_MACC = macc.ETHERTYPE_MACC.to_bytes(2, "big")
TX_LIMIT = 2  # frames a QP builds ahead of the scheduler


class Nic:
    def __init__(self, net: Any, ctx: Context, classifier: Classifier) -> None:
        self.net = net
        self.ctx = ctx
        self.name = ctx.name
        dev = self.device = ctx.device
        dev.shared_tx = False
        dev.qp_tx_limit = TX_LIMIT
        dev.on_activity = self._activity
        ctx.clock = lambda: net.now
        self.mac = bytes.fromhex(dev.mac.replace(":", ""))
        self.classifier = classifier
        self.wire: Any = None
        self.pause: PauseState | None = None
        self.ctrl: deque[bytes] = deque()
        self.pacers: dict[int, RatePacer] = {}
        self._prio: dict[int, int] = {}
        self._qps: list[Any] = []
        self._rr = 0
        self._timer_at: int | None = None
        self._kick_pending = False
        self.rx_frames = 0
        self.tx_frames = 0
        self.pfc_sent = 0

    def attach(self, wire: Any) -> None:
        self.wire = wire
        self.pause = PauseState(wire.rate_bps)

    # -- Endpoint ----------------------------------------------------------------------

    def receive(self, now: int, frame: bytes) -> None:
        self.rx_frames += 1
        for w in self.net.recorders:
            w.write(frame, ts_ns=now)
        if frame[frames.ETYPE[0]:frames.ETYPE[1]] == _MACC:
            self.pause.on_frame(now, frame)
            self.wire.kick(now)
            return
        self.device.receive(now, frame)
        self._after(now)

    def pull(self, now: int) -> bytes | None:
        if self.ctrl:
            self.tx_frames += 1
            return self.ctrl.popleft()
        qps = self._qps
        n = len(qps)
        if not n:
            return None
        until = self.pause.until
        pick = None
        for strict in (True, False):
            for i in range(n):
                j = (self._rr + i) % n
                qp = qps[j]
                if not qp.tx:
                    continue
                prio = self._priority(qp)
                if (prio in self.classifier.strict) != strict or until[prio] > now:
                    continue
                if self.pacers[qp.qpn].next_allowed() > now:
                    continue
                pick = j
                break
            if pick is not None:
                break
        if pick is None:
            return None
        qp = qps[pick]
        self._rr = (pick + 1) % n
        frame = qp.tx.pop(0)
        self.tx_frames += 1
        self.pacers[qp.qpn].sent(now, len(frame))
        if not qp.tx:
            qp.requester.pump(now)  # build the next frames now that the link took these
            self._rearm(now)
        return frame

    def next_tx(self, now: int) -> int | None:
        if self.ctrl:
            return now
        best = None
        until = self.pause.until
        for qp in self._qps:
            if qp.tx:
                t = max(now, until[self._priority(qp)], self.pacers[qp.qpn].next_allowed())
                if best is None or t < best:
                    best = t
        return best

    # -- the device's driver -----------------------------------------------------------

    def _priority(self, qp: Any) -> int:
        p = self._prio.get(qp.qpn)
        if p is None:
            tclass = qp.builder.path.tclass if qp.builder is not None else 0
            p = self.classifier.table[tclass >> 2]
            if qp.builder is not None:
                self._prio[qp.qpn] = p
        return p

    def _activity(self, device: Any) -> None:
        if len(self._qps) != len(device.qps) or any(
                a is not b for a, b in zip(self._qps, device.qps.values())):
            self._qps = list(device.qps.values())
            for qp in self._qps:
                if qp.qpn not in self.pacers:
                    self.pacers[qp.qpn] = RatePacer(self.wire.rate_bps)
            self._prio.clear()
        if not self._kick_pending:
            self._kick_pending = True
            self.net.at(self.net.now, self._kick)

    def _kick(self, now: int, _: Any) -> None:
        self._kick_pending = False
        self._after(now)

    def _after(self, now: int) -> None:
        self.wire.kick(now)
        self._rearm(now)

    def _rearm(self, now: int) -> None:
        d = self.device.deadline()
        if d is None:
            self._timer_at = None
        elif d != self._timer_at:
            self._timer_at = d
            self.net.at(max(d, now), self._timer, d)

    def _timer(self, now: int, d: int) -> None:
        if self._timer_at != d:
            return  # superseded
        self._timer_at = None
        self.device.on_timer(now)
        self._after(now)

    # -- faults ------------------------------------------------------------------------

    def storm(self, prio: int, start_ns: int = 0) -> None:
        """Emit PFC XOFF for ``prio`` continuously from ``start_ns`` (a broken NIC)."""
        period = max(pause_ns(MAX_QUANTA, self.wire.rate_bps) // 2, 1)
        frame = macc.build_pfc(self.mac, {prio: MAX_QUANTA})

        def tick(now: int, _: Any) -> None:
            self.pfc_sent += 1
            self.ctrl.append(frame)
            self.wire.kick(now)
            self.net.at(now + period, tick)

        self.net.at(start_ns, tick)
