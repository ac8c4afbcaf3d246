"""A host in the switched network: an emulated RoCE device behind a NIC transmit scheduler.

The device and its QPs stay sans-I/O; the NIC owns their clock and their wire.  Each QP keeps
its own short transmit list (``QueuePair.tx_limit``): the link pulls one frame at a time and
the NIC pumps the QP's requester again, so go-back-N restarts from fresh state instead of
behind a long queue; a rewind takes back the request frames still in the list
(``QueuePair.discard_unsent_requests``), as a NIC that builds each packet when it sends it.
For the same reason a request frame's timers start when it leaves here, not when it was built:
the link's pull hands the requester its PSN and the virtual time (``Requester.on_wire``: the
local ACK timeout or selective repeat's RTO, and RACK's send time), so a frame the pacer held
for longer than the timeout is not taken for lost.
The scheduler holds frames per priority (a QP's priority follows its DSCP through the same
map the switches use), skips priorities the switch paused with PFC,
goes round robin among the QPs, and lets each QP send only when its pacer allows
(``RatePacer`` at line rate here; congestion control will drive it).  PFC frames the NIC
itself sends (a PFC storm fault) bypass all of that.  Received frames go to the device with
their ECN bits intact; received PFC frames stop the named priorities when PFC is on at the
NIC's peer (``pfc``: a NIC with PFC off ignores them, as one configured without it does).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator

from roce import macc
from roce.emu.core.verbs import Context
from roce.emu.net import hop as frames
from roce.emu.net.link import PullEndpoint
from roce.emu.net.pfc import CLASSES, MAX_QUANTA, PauseState, pause_ns
from roce.emu.net.stages import Pacer, RatePacer

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

    from roce.emu.net.interfaces import Classifier

_MACC = macc.ETHERTYPE_MACC.to_bytes(2, "big")
_ETYPE0 = frames.ETYPE[0]
TX_LIMIT = 8  # frames a QP builds ahead of the scheduler


class Nic(PullEndpoint):
    __slots__ = ("net", "ctx", "name", "device", "mac", "classifier", "wire", "pause", "ctrl",
                 "pacers", "pacer_factory", "_prio", "_rings", "_rr_prio", "_busy", "_timer_at",
                 "_theap", "_tcache", "_kick_pending", "_held_until", "rx_frames", "tx_frames",
                 "pfc_sent", "cc", "pfc", "tap", "icrc_checked")

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
        self.pacers: dict[int, Pacer] = {}
        # how a new QP gets its rate limiter (line rate -> Pacer): congestion control plugs
        # in here, or sets ``rate_bps`` on the pacers it is given
        self.pacer_factory: Callable[[int], Pacer] = RatePacer
        self._prio: dict[int, int] = {}
        self._rings: list[deque] = [deque() for _ in range(CLASSES)]  # QPs with frames
        self._rr_prio = 0
        self._busy: list[int] = []  # priorities whose ring is not empty, ascending
        self._timer_at: int | None = None
        self._theap: list[tuple[int, int]] = []  # (deadline, QPN), possibly stale
        self._tcache: dict[int, int | None] = {}  # QPN -> its current deadline
        self._kick_pending = False
        # set by ``pull`` when it returns None because the one sending QP's pacer holds it
        # until then; the wire's ``next_tx`` right after takes it (Wire.kick)
        self._held_until: int | None = None
        self.rx_frames = 0
        self.tx_frames = 0
        self.pfc_sent = 0
        self.pfc = True  # obey pause frames (PFC on at the peer; ``topology.build``)
        self.tap: Any = None  # a writer for what this port sends and receives
        # the frames ``receive`` gets were built by this port after it checked the packets
        # they came in, their ICRC with them (an InfiniBand HCA): the device does not check
        # that ICRC again (roce.emu.core.frames.receive)
        self.icrc_checked = False
        self.cc: Any = None  # roce.emu.cc.engine.CcDriver once congestion control is on

    def attach(self, wire: Any) -> None:
        self.wire = wire
        self.pause = PauseState(wire.rate_bps)

    # -- Endpoint ----------------------------------------------------------------------

    def fire(self, now: int, frame: bytes) -> None:
        """A frame arrived (``Callback``): ``receive``, called in C compiled."""
        self.receive(now, frame)

    def receive(self, now: int, frame: bytes) -> None:
        self.rx_frames += 1
        if self.net.recorders:
            for w in self.net.recorders:
                w.write(frame, ts_ns=now)
        if self.tap is not None:
            self.tap.write(frame, ts_ns=now)
        f = frame  # (bytes: its EtherType compared in place, in C in the compiled form)
        if f.startswith(_MACC, _ETYPE0):
            if self.pfc:  # with PFC off a NIC ignores pause frames
                self.pause.on_frame(now, frame)
                self.wire.kick(now)
            return
        if self.cc is not None:
            if self.cc.telemetry:  # INT: taken off here, as a sink does, before the device
                frame = self.cc.int_in(now, frame)
            if self.cc.received(now, frame):
                return  # a CNP: congestion control's, not the QP's
        dev = self.device
        dev.last_qp = None
        dev.receive(now, frame, self.icrc_checked)
        if self._busy and not self.wire.busy:
            self.wire.kick(now)  # an ACK or response to send
        qp = dev.last_qp
        if qp is not None and self._tcache.get(qp.qpn) != qp.deadline():
            self._rearm(now, qp)  # its named timers changed

    def pull(self, now: int) -> bytes | None:
        if self.ctrl:
            self.tx_frames += 1
            frame = self.ctrl.popleft()
            if self.tap is not None:
                self.tap.write(frame, ts_ns=now)
            return frame
        busy = self._busy
        if not busy:
            return None
        until = self.pause.until
        if len(busy) == 1:
            prio = busy[0]  # (a C integer in the compiled form: the lists indexed in C)
            ring = self._rings[prio]
            if len(ring) == 1:  # one QP sending (an incast sender): no round robin to do
                if until[prio] > now:
                    return None
                qp = ring[0]
                tx = qp.tx
                pacer = tx.pacer
                if pacer.rate_bps < self.wire.rate_bps:
                    t = pacer.next_allowed()
                    if t > now:
                        self._held_until = t  # the wire asks ``next_tx`` at once: the answer
                        return None
                return self._take(now, qp, ring, prio)
        for prio in (busy if len(busy) == 1 else self._order()):
            if until[prio] > now:
                continue  # PFC holds this priority at this port
            ring = self._rings[prio]
            for _ in range(len(ring)):
                qp = ring[0]
                ring.rotate(-1)  # round robin among the QPs of a priority
                pacer = qp.tx.pacer
                if pacer.rate_bps < self.wire.rate_bps and pacer.next_allowed() > now:
                    continue
                return self._take(now, qp, ring, prio)
        return None

    def _order(self) -> list[int]:
        """Priorities with frames waiting: strict ones first, then round robin."""
        strict = [p for p in self._busy if p in self.classifier.strict]
        rest = [p for p in self._busy if p not in self.classifier.strict]
        k = next((i for i, p in enumerate(rest) if p >= self._rr_prio), 0)
        rest = rest[k:] + rest[:k]
        if rest:
            self._rr_prio = rest[0] + 1
        return strict + rest

    def _take(self, now: int, qp: Any, ring: deque, prio: int) -> bytes:
        tx = qp.tx
        frame = tx.frames.pop(0)
        tag = tx.tags.popleft()
        if self.cc is not None and self.cc.telemetry:  # INT: a data packet's, an ACK's echo
            frame = self.cc.int_out(qp.qpn, frame)
        self.tx_frames += 1
        if self.tap is not None:
            self.tap.write(frame, ts_ns=now)
        tx.sent_bytes += len(frame)
        if self.cc is not None:
            self.cc.transmitted(now, qp.qpn, frame)
        pacer = tx.pacer
        if pacer.rate_bps < self.wire.rate_bps:
            pacer.sent(now, len(frame))  # below line rate: the pacer spaces the frames
        if tag is not None:  # a request frame: its timers start now that it is on the wire
            psn, end = tag
            qp.requester.on_wire(now, psn, end)
            if tx.frames and self._tcache.get(qp.qpn) != qp.deadline():
                self._rearm(now, qp)
        if not tx.frames:
            self._leave(qp, ring, prio)  # it rejoins on its next frame
            qp.requester.pump(now)  # build the next frames now that the link took these
            if self._tcache.get(qp.qpn) != qp.deadline():
                self._rearm(now, qp)
        return frame

    def _leave(self, qp: Any, ring: deque, prio: int) -> None:
        ring.remove(qp)
        if not ring:
            self._busy.remove(prio)

    def drained(self, qp: Any) -> None:
        """A QP's transmit list was emptied outside ``pull`` (frames taken back)."""
        prio = self._prio.get(qp.qpn)
        for p in ([prio] if prio is not None else range(CLASSES)):
            if qp in self._rings[p]:
                self._leave(qp, self._rings[p], p)
                return

    def next_tx(self, now: int) -> int | None:
        t = self._held_until
        if t is not None:  # ``pull`` just found the one sending QP held by its pacer
            self._held_until = None
            return t
        if self.ctrl:
            return now
        busy = self._busy
        if len(busy) == 1 and len(self._rings[busy[0]]) == 1:  # one QP (``pull``'s case)
            prio = busy[0]
            t = self._rings[prio][0].tx.pacer.next_allowed()
            u = self.pause.until[prio]
            return max(now, u, t)
        best = None
        until = self.pause.until
        for prio in busy:
            for qp in self._rings[prio]:
                t = max(now, until[prio], qp.tx.pacer.next_allowed())
                if best is None or t < best:
                    best = t
        return best

    def queued(self, qp: Any, frame: bytes) -> None:
        """A QP's transmit list went from empty to not: it joins its priority's ring."""
        prio = self._prio.get(qp.qpn)
        if prio is None:  # every frame of a QP carries its traffic class: classify one
            prio = self._prio[qp.qpn] = self.classifier.classify(frame)
        ring = self._rings[prio]
        if not ring:
            self._busy.append(prio)
            self._busy.sort()
        ring.append(qp)

    # -- the device's driver -----------------------------------------------------------

    def _congestion_control(self) -> Any:
        """The NIC's congestion-control driver, made when the device or one of its QPs has a
        configuration (``Context``/``QP.set_congestion_control``; roce.emu.cc.engine)."""
        if self.cc is None:
            cfg = getattr(self.ctx, "cc_config", None)
            if cfg is None and not any(getattr(q, "cc_config", None)
                                       for q in self.device.qps.values()):
                return None
            from roce.emu.cc import CcConfig
            from roce.emu.cc.engine import CcDriver

            events = self.net.events
            self.cc = CcDriver(cfg or CcConfig(), self.wire.rate_bps, self.device.qps,
                               lambda t, fn: events.at(t, _call, fn),
                               self._send_ctrl,
                               on_faster=lambda now: events.at(now, self._kick_wire))
        return self.cc

    def _kick_wire(self, now: int, _: Any = None) -> None:
        """A rate went up: the scheduler looks again (as an event: never inside a pull)."""
        self.wire.kick(now)

    def _send_ctrl(self, now: int, frame: bytes) -> None:
        """A frame the NIC itself makes (a CNP): ahead of the QPs' data, like PFC frames."""
        self.ctrl.append(frame)
        self.wire.kick(now)

    def _activity(self, device: Any) -> None:
        cc = self._congestion_control()
        for qp in device.qps.values():
            if qp.qpn not in self.pacers:
                self.pacers[qp.qpn] = (cc.pacer(qp.qpn, self.net.now) if cc is not None
                                       else self.pacer_factory(self.wire.rate_bps))
                qp.tx = _TxList(self, qp, qp.tx)
            elif cc is not None and qp.qpn not in cc.algos and not qp.tx.sent_bytes:
                # congestion control was set after the QP appeared, before it sent
                self.pacers[qp.qpn] = qp.tx.pacer = cc.pacer(qp.qpn, self.net.now)
        self._prio.clear()  # a modify may have changed a QP's traffic class
        if not self._kick_pending:
            self._kick_pending = True
            self.net.at(self.net.now, self._kick)

    def _kick(self, now: int, _: Any) -> None:
        self._kick_pending = False
        self._after(now)

    def _after(self, now: int) -> None:
        self.wire.kick(now)
        self._rearm(now)

    def _rearm(self, now: int, qp: Any = None) -> None:
        """Keep one timer event at the device's earliest QP deadline.  Deadlines are cached
        per QP in a heap (stale entries dropped lazily), so an event that touched one QP
        re-reads only that QP's named timers; ``qp=None`` re-reads them all."""
        if qp is None:
            for q in self.device.qps.values():
                self._note(q)
        else:
            self._note(qp)
        heap, cache = self._theap, self._tcache
        while heap and cache.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        d = heap[0][0] if heap else None
        if d is None:
            self._timer_at = None
        elif d != self._timer_at:
            self._timer_at = d
            self.net.events.at(max(d, now), self._timer, d)

    def _note(self, qp: Any) -> None:
        d = qp.deadline()
        if self._tcache.get(qp.qpn) != d:
            self._tcache[qp.qpn] = d
            if d is not None:
                heapq.heappush(self._theap, (d, qp.qpn))

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


def _call(now: int, fn: Callable[[int], None]) -> None:
    """A network event that calls ``fn(now)`` (congestion control's timers)."""
    fn(now)


class _TxList:
    """A QP's transmit list that tells the NIC when it stops being empty (the QP core only
    appends: it stays unaware of the scheduler).  ``frames`` holds the frames in order;
    ``tags`` runs beside it: for a request frame the requester's ``(psn, end)``
    (``QueuePair.send_request``), handed back to it when the frame leaves
    (``Requester.on_wire``), else None.  The QP reads it as a sequence (``len``, iteration);
    the NIC takes frames off ``frames`` itself."""

    __slots__ = ("frames", "nic", "qp", "pacer", "sent_bytes", "tags")

    def __init__(self, nic: Nic, qp: Any, frames: list[bytes]) -> None:
        self.frames = list(frames)
        self.nic = nic
        self.qp = qp
        pacer = nic.pacers[qp.qpn]
        if not isinstance(pacer, Pacer):  # (the NIC calls it per frame: the base, in C)
            raise TypeError(f"{nic.name}: the pacer of QP 0x{qp.qpn:06x}, a "
                            f"{type(pacer).__name__}, is not a roce.emu.net.stages.Pacer (a "
                            "pacer subclasses it)")
        self.pacer = pacer
        self.sent_bytes = 0  # what the scheduler took from this QP
        # frames built before the NIC took the list had their timers started when built
        self.tags: deque[tuple[int, int] | None] = deque([None] * len(frames))
        qp.timers_at_wire = True
        if frames:
            nic.queued(qp, frames[0])

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.frames)

    def append(self, frame: bytes) -> None:
        if not self.frames:
            self.nic.queued(self.qp, frame)
        self.frames.append(frame)
        self.tags.append(None)

    def append_request(self, frame: bytes, tag: tuple[int, int]) -> None:
        if not self.frames:
            self.nic.queued(self.qp, frame)
        self.frames.append(frame)
        self.tags.append(tag)

    def replace(self, frames: list[bytes]) -> None:
        """The QP took back frames (a go-back-N rewind): an emptied list leaves the ring."""
        was = bool(self.frames)
        keep = {id(f) for f in frames}
        self.tags = deque(t for f, t in zip(self.frames, self.tags) if id(f) in keep)
        self.frames = list(frames)
        if was and not self.frames:
            self.nic.drained(self.qp)
