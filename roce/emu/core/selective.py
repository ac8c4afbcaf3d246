"""Selective repeat for RC (IRN): the requester's scoreboard, the responder's window, the
completer's selective NAKs.

Follows IRN (Mittal et al., "Revisiting Network Support for RDMA", SIGCOMM 2018); the frames
are plain RoCEv2 and their encoding is docs/protocol.md, "Selective repeat (IRN) encoding":

- WRITE: every packet carries a RETH with its own remote address, so the responder can place
  it alone.  RoCEv2 has RETH only on WRITE First and WRITE Only, so a message of n packets
  goes as n-1 WRITE First (DMA length: the bytes from this packet to the message's end) and
  one WRITE Only [with Immediate] whose DMA length equals its payload: that packet ends the
  message.
- Responder: a request PSN ahead of ePSN, inside the window, is held (not dropped) and answered
  with a selective NAK: AETH NAK PSN sequence error, BTH PSN = ePSN (the cumulative
  acknowledgement, as plain RoCE), AETH MSN = the PSN that arrived out of order.  When ePSN
  arrives the held packets run in PSN order, so execution, MSN and completions stay in order.
- Requester: a scoreboard of selectively acknowledged PSNs; only PSNs found lost are resent.
  The loss rule is the config's ``loss_rule``: ``rack`` (default), time-based (RFC 8985,
  ``roce.emu.core.rack``; the ``reorder`` timer fires it when no acknowledgement follows), or
  ``dupthresh``: lost once ``DUPTHRESH`` PSNs above it were acknowledged (IRN declares it at
  once, i.e. 1; 3 is TCP's RFC 6675 rule and absorbs some multipath reordering).  A timeout
  (IRN's RTO_low / RTO_high, ``roce.emu.core.recovery``) resends every PSN not acknowledged.
  BDP flow control caps PSNs in flight (``RecoveryConfig.bdp_packets``).
- READ responses of any outstanding READ are placed as they arrive (a response names its
  READ by PSN), whatever the READs before it miss; a READ completes, in order, once all its
  responses came.  A missing one is asked for again by the loss rule (``rack``: a later
  response, of this READ or a later one, arrived more than the reordering window ago, the
  ``read_gap`` timer; ``dupthresh``: that many later responses), with a READ request for
  the missing run alone (PSN, RETH VA and length of that run).
  RNR NAKs and error NAKs keep the go-back-N rules of ``roce.emu.core.completer``.

The three classes compile as Cython extension types over the compiled requester, responder
and completer (roce/_compiled.py): their attributes are their ``__slots__``, and they call
their bases' methods by name (``Requester.pump(self, now)``), since a ``cpdef`` method has no
``super()``.
"""

from __future__ import annotations

from collections import deque

from roce.emu.core.completer import Completer
from roce.emu.core.constants import MAX_PKT_PER_ACK, MAX_UNACKED_PSNS, QPState, WCOpcode
from roce.emu.core.constants import WCStatus as St
from roce.emu.core.frames import Incoming, select
from roce.emu.core.memory import AccessError
from roce.emu.core.placement import _REMOTE_WRITE
from roce.emu.core.rack import Rack
from roce.emu.core.requester import Requester
from roce.emu.core.responder import _ACK_ROW, ANSWERED, RNR, Reject, Responder
from roce.emu.core.work import SendWQE
from roce.headers import (
    AETH_NAK,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR,
    syndrome,
    syndrome_type,
    syndrome_value,
)
from roce.opcodes import Opcode, Operation, Position, Transport
from roce.psn import PSN_MASK, psn_diff

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

DUPTHRESH = 3


def is_selective_nak(syn: int) -> bool:
    """A NAK PSN sequence error: under selective repeat its MSN is the out-of-order PSN."""
    return syndrome_type(syn) == AETH_NAK and syndrome_value(syn) == NAK_PSN_SEQUENCE_ERROR


class SRRequester(Requester):
    """The requester of selective repeat: the scoreboard, the loss rules, retransmission of
    the PSNs found lost (module docstring)."""

    __slots__ = ("cfg", "sacked", "rtx", "queued", "mark", "dupthresh", "resent", "holes",
                 "rack", "reo_at", "acked_to", "now", "recover_to", "gap_at", "asked")

    def __init__(self, qp: Any) -> None:
        Requester.__init__(self, qp)
        cfg = qp.recovery
        self.cfg = cfg
        if cfg.bdp_packets is not None:
            self.window = min(MAX_UNACKED_PSNS, cfg.bdp_packets)
        # ACK often enough that a BDP window never waits on AckReq
        self.ack_every = max(1, min(MAX_PKT_PER_ACK, self.window // 4))
        self.sacked: set[int] = set()
        self.rtx: deque[int] = deque()  # PSNs to resend, in the order found lost
        self.queued: set[int] = set()
        self.mark: int | None = None  # PSNs below it were already judged in this round
        self.dupthresh = DUPTHRESH
        self.resent: set[int] = set()  # PSNs retransmitted and not yet acknowledged
        self.holes: set[int] = set()  # PSNs a selective NAK named as the responder's ePSN
        # the time-based loss rule (RFC 8985), or None for the packet-count rule (IRN, TCP)
        self.rack: Rack | None = Rack() if cfg.loss_rule == "rack" else None
        self.reo_at: int | None = None  # the ``reorder`` timer: a candidate's window ends
        self.acked_to = self.una  # una when the send record was last brought up to date
        self.now = 0  # the time of the current pump (when ``_send_packet`` sends)
        # a loss recovery in progress ends when una reaches this PSN: the next new one when
        # the first loss of the episode was found (TCP's recovery point; RFC 8985 step 4)
        self.recover_to: int | None = None
        self.gap_at: int | None = None  # the ``read_gap`` timer (SRCompleter.read_gap)
        # READ response PSNs (and atomic PSNs) asked for again and not yet come: the loss
        # rules do not ask twice; the RTO covers a lost re-request
        self.asked: set[int] = set()

    def reset(self, sq_psn: int) -> None:
        Requester.reset(self, sq_psn)
        self.acked_to = self.una

    def clear(self) -> None:
        Requester.clear(self)
        self.reo_at = None
        self.gap_at = None

    # -- scoreboard ---------------------------------------------------------------------

    def in_flight(self) -> int:
        """PSNs sent and neither acknowledged nor selectively acknowledged: IRN's count for
        choosing RTO_low (section 4.1).  ``psn`` would not do: a message's PSNs are all
        assigned when its first packet goes, so a 1 MiB WRITE held back by BDP flow control
        would count its unsent packets and always wait RTO_high.  Frames a NIC still holds
        (roce.emu.net.nic) do count: they will leave and draw the acknowledgements that find
        a loss, which is what RTO_low is for (bench/RESULTS.md, "Loss recovery")."""
        if self.high is None:
            return 0
        return max(0, psn_diff(self.high, self.una) + 1 - len(self.sacked))

    def _unit(self, psn: int) -> tuple[int, bool] | None:
        """The PSN to resend for ``psn``: itself, or for a READ its first missing response;
        and whether it asks for an answer (a READ or atomic)."""
        for wqe in self.sq:
            if wqe.first_psn < 0:
                return None
            off = psn_diff(psn, wqe.first_psn)
            if 0 <= off < wqe.npsn:
                if wqe.operation is Operation.RDMA_READ:
                    if wqe.read_next >= wqe.npsn:
                        return None  # every response came; it completes in order
                    return (wqe.first_psn + wqe.read_next) & PSN_MASK, True
                return psn, wqe.rd_atomic
        return None

    def _queue(self, psn: int) -> None:
        found = self._unit(psn)
        if found is None:
            return
        unit, asks = found
        if asks:
            if unit in self.asked:
                return  # asked for again already
            # a selective NAK says the request arrived, not that its answer came back (it
            # may be lost): a READ or atomic is resent whenever found missing
            self.sacked.discard(unit)
        if unit not in self.queued and unit not in self.sacked:
            self.queued.add(unit)
            self.rtx.append(unit)
            if self.recover_to is None:
                self.recover_to = self.psn

    def on_sack(self, now: int, cum: int, ooo: int) -> None:
        """A selective NAK: ``cum`` is the responder's ePSN (everything before it arrived,
        already completed by the completer), ``ooo`` arrived out of order."""
        if psn_diff(ooo, cum) <= 0 or self.high is None or psn_diff(ooo, self.high) > 0:
            return
        self.holes.add(cum)  # the responder's ePSN: certainly missing there just now
        rack = self.rack
        if rack is not None:
            if ooo in self.sacked:  # it arrived twice (a D-SACK): resent for nothing?
                if ooo in self.resent:
                    rack.on_spurious(now)
                return
            self.sacked.add(ooo)
            rack.on_ack((ooo,), now, self.resent)
            self._detect(now)
            return
        self.sacked.add(ooo)
        above = sorted((psn_diff(p, cum) for p in self.sacked), reverse=True)
        if len(above) < self.dupthresh:
            return
        lost_below = above[self.dupthresh - 1]  # PSNs under it have dupthresh SACKs above
        start = 0 if self.mark is None else max(0, psn_diff(self.mark, cum))
        for off in range(start, lost_below):
            p = (cum + off) & PSN_MASK
            if p not in self.sacked:
                self._queue(p)
        self.mark = (cum + max(start, lost_below)) & PSN_MASK

    def arrived(self, now: int, start: int, end: int) -> None:
        """The responder's ePSN passed ``end`` while a READ or atomic before it still misses
        its answer (``SRCompleter`` holds that acknowledgement until the answer comes): the
        other PSNs in ``[start, end)`` arrived, so no loss rule may resend them; the send
        record takes them as acknowledged now."""
        got = []
        for wqe in self.sq:
            first = wqe.first_psn
            if first < 0 or psn_diff(first, end) >= 0:
                break
            if wqe.rd_atomic:
                continue
            for off in range(wqe.npsn):
                p = (first + off) & PSN_MASK
                if psn_diff(p, start) >= 0 and psn_diff(p, end) < 0 and p not in self.sacked:
                    self.sacked.add(p)
                    got.append(p)
        if got and self.rack is not None:
            self.rack.on_ack(got, now, self.resent)

    def _detect(self, now: int) -> None:
        """The time-based rule (``roce.emu.core.rack``): queue what it finds lost, arm the
        ``reorder`` timer for the next candidate."""
        rack = self.rack
        for psn in rack.lost(now, self.queued):
            self._queue(psn)
        self.reo_at = rack.deadline

    def _reordered(self, psn: int) -> None:
        """``psn``'s first transmission arrived after later PSNs: the path reorders by that
        many packets; tolerate it from now on (as Linux TCP's reordering metric)."""
        later = sum(1 for p in self.sacked if psn_diff(p, psn) > 0)
        if later >= self.dupthresh:  # never so high that a window cannot trigger recovery
            self.dupthresh = max(DUPTHRESH, min(self.window // 2, later + 1))

    # -- transmission -------------------------------------------------------------------

    def pump(self, now: int) -> None:
        self.now = now
        qp = self.qp
        if qp.state != QPState.IBV_QPS_RTS or self.rnr_until is not None:
            return
        limit = qp.tx_limit
        while self.rtx:
            if limit is not None and len(qp.tx) >= limit:
                return
            psn = self.rtx.popleft()
            self.queued.discard(psn)
            if psn_diff(psn, self.una) < 0 or psn in self.sacked:
                continue
            self._resend(psn)
            if not qp.timers_at_wire:  # else ``on_wire`` starts it
                self._arm(now)
        idle = self.timer is None
        Requester.pump(self, now)
        if idle and self.timer is not None:  # the base arms go-back-N's local ACK timeout
            self.timer = now + self.cfg.rto_ns(self.in_flight())

    def _resend(self, psn: int) -> None:
        for wqe in self.sq:
            if wqe.first_psn < 0:
                return
            off = psn_diff(psn, wqe.first_psn)
            if 0 <= off < wqe.npsn:
                self.noack = self.ack_every  # AckReq: a filled hole is acknowledged at once
                self.qp.counters.selective_retransmitted += 1
                self.resent.add(psn)
                if wqe.operation is Operation.RDMA_READ:  # the responses it asks for
                    first = wqe.first_psn
                    self.asked.update([(first + i) & PSN_MASK
                                       for i in range(wqe.read_next, self._read_end(wqe))])
                elif wqe.rd_atomic:
                    self.asked.add(psn)
                self._send_packet(wqe, 0 if wqe.rd_atomic else off, psn)
                return

    def _send_packet(self, wqe: SendWQE, index: int, psn: int) -> None:
        Requester._send_packet(self, wqe, index, psn)
        if self.rack is not None and not self.qp.timers_at_wire:
            self.rack.on_send(psn, self.now)

    def on_wire(self, now: int, psn: int, end: int) -> None:
        """RACK's send time is when the frame left the NIC (RFC 8985 section 6.1: the
        transmission time), so a frame held by the pacer is not found lost before it went."""
        if self.rack is not None and self.sq:
            self.rack.on_send(psn, now)
        Requester.on_wire(self, now, psn, end)

    def _start_timer(self, now: int) -> None:
        self.timer = now + self.cfg.rto_ns(self.in_flight())

    def _read_end(self, wqe: SendWQE) -> int:
        """Selective repeat asks only for the missing run: up to the first response that
        arrived past ``read_next`` (the loss rule asks for the next run once this one is
        placed)."""
        got = self.qp.completer.got.get(wqe.first_psn)
        return min(got) if got else wqe.npsn

    def answered(self, now: int, wqe: SendWQE, psn: int) -> None:
        """A response ``psn`` of READ ``wqe`` came: its request arrived, and the re-request
        starting at ``psn`` (if any) too.  The send record takes them as acknowledged, so
        the request rule does not resend a READ that is being answered."""
        self.asked.discard(psn)
        rack = self.rack
        if rack is not None:
            sent = rack.sent
            keys = [k for k in dict.fromkeys((wqe.first_psn, psn)) if k in sent]
            if keys:
                rack.on_ack(keys, now, self.resent)

    def _data_row(self, wqe: SendWQE, index: int, pos: Position, last: bool,
                  nbytes: int) -> tuple[Opcode, dict | None]:
        if wqe.operation is not Operation.RDMA_WRITE or wqe.npkts <= 1:
            return Requester._data_row(self, wqe, index, pos, last, nbytes)
        wr = wqe.wr
        skip = index * self.qp.mtu
        reth = {"va": wr.remote_addr + skip, "r_key": wr.rkey,
                "dmalen": nbytes if last else wqe.length - skip}
        if last:
            return select(Transport.RC, Operation.RDMA_WRITE, Position.ONLY,
                          wqe.immediate), reth
        return _WRITE_FIRST, reth

    # -- timers -------------------------------------------------------------------------

    def _arm(self, now: int) -> None:
        if self.timer is None:
            self.timer = now + self.cfg.rto_ns(self.in_flight())

    def retry(self, now: int, psn: int, timeout: bool = False) -> None:
        """A timeout resends every PSN not acknowledged; an implied NAK (a READ or atomic
        answer missing) resends that one request."""
        if not timeout:
            if self.retrying == psn:
                return
            self.retrying = psn
            self._queue(psn)
            return
        if self.retry_left <= 0:
            self.qp.completer.fail_head(St.IBV_WC_RETRY_EXC_ERR)
            return
        self.retry_left -= 1
        self.retrying = None
        self.asked.clear()  # ask again for everything missing
        if self.high is not None:
            for off in range(psn_diff(self.high, self.una) + 1):
                self._queue((self.una + off) & PSN_MASK)
        self.mark = None
        self.timer = now + self.cfg.rto_ns(self.in_flight())

    def timers(self) -> dict[str, int]:
        if self.rnr_until is not None:
            return {"rnr": self.rnr_until}
        t = {} if self.timer is None else {"rto": self.timer}
        if self.reo_at is not None:
            t["reorder"] = self.reo_at
        if self.gap_at is not None:
            t["read_gap"] = self.gap_at
        return t

    def deadline(self) -> int | None:
        if self.rnr_until is not None:
            return self.rnr_until
        reo, rto = self.reo_at, self.timer
        if self.gap_at is not None and (reo is None or self.gap_at < reo):
            reo = self.gap_at
        if reo is None or rto is not None and rto < reo:
            return rto
        return reo

    def on_timer(self, now: int) -> None:
        reo = self.reo_at
        if reo is not None and now >= reo and self.rnr_until is None:
            self.reo_at = None
            self._detect(now)
        gap = self.gap_at
        if gap is not None and now >= gap and self.rnr_until is None:
            self.gap_at = None
            self.qp.completer.read_gap(now)
        Requester.on_timer(self, now)

    def progress(self, now: int) -> None:
        self.reset_retries()
        self.retrying = None
        una = self.una
        rack = self.rack
        if rack is not None:
            n = psn_diff(una, self.acked_to)
            if n > 0:
                start = self.acked_to
                rack.on_ack([(start + i) & PSN_MASK for i in range(n)], now, self.resent)
            self.acked_to = una
        if self.sacked:
            for p in self.holes:
                if psn_diff(p, una) < 0 and p not in self.resent:
                    self._reordered(p)  # a known hole filled by its first transmission
            self.sacked = {p for p in self.sacked if psn_diff(p, una) > 0}
        if self.holes:
            self.holes = {p for p in self.holes if psn_diff(p, una) >= 0}
        if self.resent:
            self.resent = {p for p in self.resent if psn_diff(p, una) >= 0}
        if self.asked:
            self.asked = {p for p in self.asked if psn_diff(p, una) >= 0}
        if self.mark is not None and psn_diff(self.mark, una) < 0:
            self.mark = None
        if psn_diff(self.psn, una) <= 0 or self.qp.timers_at_wire and self._nothing_on_wire():
            self.timer = None
        else:
            self.timer = now + self.cfg.rto_ns(self.in_flight())
        if self.recover_to is not None and psn_diff(una, self.recover_to) >= 0:
            self.recover_to = None
            if rack is not None:
                rack.on_recovered()
        if rack is not None:
            self._detect(now)

    def rewind(self, psn: int) -> None:
        """Go back (an RNR NAK): the scoreboard starts over."""
        self.rtx.clear()
        self.queued.clear()
        self.sacked.clear()
        self.mark = None
        self._forget()
        Requester.rewind(self, psn)

    def _forget(self) -> None:
        if self.rack is not None:
            self.rack.forget()
        self.reo_at = None
        self.gap_at = None
        self.asked.clear()
        self.recover_to = None  # the scoreboard starts over; no recovery ended
        self.qp.completer.behind = None

    def flush(self) -> None:
        self.rtx.clear()
        self.queued.clear()
        self.sacked.clear()
        self._forget()
        Requester.flush(self)


class SRResponder(Responder):
    """The responder of selective repeat: packets ahead of ePSN held and answered with a
    selective NAK (module docstring)."""

    __slots__ = ("held", "msg_bytes")

    def __init__(self, qp: Any) -> None:
        Responder.__init__(self, qp)
        self.held: dict[int, Incoming] = {}  # request packets ahead of ePSN, by PSN
        self.msg_bytes = 0  # bytes of the WRITE message under way (for WRITE with Immediate)

    def receive(self, now: int, pkt: Incoming) -> None:
        qp = self.qp
        d = psn_diff(pkt.psn, self.epsn)
        if d > 0:
            if d >= MAX_UNACKED_PSNS:  # beyond any requester's window: not ours to hold
                qp.counters.out_of_sequence += 1
                return
            if pkt.psn in self.held:
                qp.counters.duplicates += 1
                if pkt.op.operation not in ANSWERED:
                    qp.counters.duplicate_requests += 1
            else:
                self.held[pkt.psn] = pkt
                qp.counters.ooo_accepted += 1
            self._sack(pkt.psn)
            return
        Responder.receive(self, now, pkt)
        if d < 0:
            return
        drained = False
        acked = pkt.ackreq
        while self.epsn in self.held and qp.state in _RUNNING:
            nxt = self.held.pop(self.epsn)
            Responder.receive(self, now, nxt)
            drained = True
            acked = nxt.ackreq
        if qp.state not in _RUNNING:
            self.held.clear()
        elif drained and not acked:
            self._ack((self.epsn - 1) & PSN_MASK)  # a filled hole is news to the requester

    def _sack(self, ooo: int) -> None:
        qp = self.qp
        qp.counters.sacks_sent += 1
        qp.send_frame(qp.builder.build(_ACK_ROW, qp.attr.dest_qp_num, self.epsn, {
            "aeth": {"syndrome": syndrome(AETH_NAK, NAK_PSN_SEQUENCE_ERROR), "msn": ooo}}))

    def _write(self, pkt: Incoming, first: bool, last: bool) -> None:
        if "reth" not in pkt.ext or pkt.op.position is Position.ONLY and \
                pkt.ext["reth"]["dmalen"] == pkt.payload_len and not self.msg_bytes:
            Responder._write(self, pkt, first, last)  # a plain one-packet WRITE
            return
        qp = self.qp
        reth = pkt.ext["reth"]
        va, rkey, left = reth["va"], reth["r_key"], reth["dmalen"]
        n = pkt.payload_len
        ends = left == n
        if ends and "immdt" in pkt.ext and not qp.rq:
            raise Reject(RNR, "no receive WQE for RDMA WRITE with immediate")
        self._check_length(pkt)
        if n > left:
            raise Reject(NAK_INVALID_REQUEST, "WRITE data beyond its DMA length")
        if not ends and pkt.op.position is Position.ONLY:
            raise Reject(NAK_INVALID_REQUEST, "WRITE Only ends before its DMA length")
        if left:
            try:  # all of [va, va + DMA length): the first packet checks the whole message,
                # as rxe does, so a bad range writes nothing
                mr = qp.device.memory.lookup_remote(qp.pd, rkey, va, left, _REMOTE_WRITE)
            except AccessError as e:
                raise Reject(NAK_REMOTE_ACCESS_ERROR, e.why) from None
            mr.write_from(va, pkt.frame, pkt.payload_at, n)
        self.msg_bytes += n
        self.in_progress = None
        if ends:
            total, self.msg_bytes = self.msg_bytes, 0
            self._executed()
            if "immdt" in pkt.ext:
                wqe = qp.rq.popleft()
                qp.complete_recv(wqe, St.IBV_WC_SUCCESS, WCOpcode.IBV_WC_RECV_RDMA_WITH_IMM,
                                 total, pkt.ext["immdt"]["immdt"])


class SRCompleter(Completer):
    """The completer of selective repeat: SACKs, READ responses out of order (module
    docstring)."""

    __slots__ = ("got", "behind", "held_by", "seen_at", "acks_past", "now")

    def __init__(self, qp: Any) -> None:
        Completer.__init__(self, qp)
        # READ first PSN -> {response index placed past read_next: its arrival time}, in
        # arrival order (the first entry is the earliest response past the gap)
        self.got: dict[int, dict[int, int]] = {}
        # the first PSN the responder had not yet received, by an acknowledgement that came
        # while a READ or atomic before it still missed its answer: applied once it came
        self.behind: int | None = None
        self.held_by = -1  # the first PSN of the READ or atomic that holds it
        # READ first PSN -> when its first response arrived (until it completes)
        self.seen_at: dict[int, int] = {}
        # (acknowledged PSN, when), PSN ascending: acknowledgements that passed a READ still
        # missing responses while the time rule judges (``_read_passed``): evidence of later
        # arrivals for the loss rule, as later responses are, not an implied NAK
        self.acks_past: list[tuple[int, int]] = []
        self.now = 0  # the time of the response being handled (for ``_done``)

    def receive(self, now: int, pkt: Incoming) -> None:
        self.now = now
        if pkt.op.operation is Operation.ACK and is_selective_nak(pkt.ext["aeth"]["syndrome"]):
            req = self.qp.requester
            if not req.sq or req.sq[0].first_psn < 0 or req.high is None:
                return
            cum = pkt.psn
            if psn_diff(cum, req.una) < 0 or psn_diff(cum, req.high) > 0:
                self.qp.counters.duplicates += 1
                return
            self.qp.counters.sacks_received += 1
            # what it says holds even when a READ's or atomic's answer is missing before
            # cum (an implied NAK asks for that one): ooo arrived too
            self._complete_before(now, cum)
            req.on_sack(now, cum, pkt.ext["aeth"]["msn"])
            return
        Completer.receive(self, now, pkt)
        if self.behind is not None:
            self._release(now)

    # -- acknowledgements behind a missing READ or atomic answer --------------------------
    # Go-back-N drops them: it resends everything after the READ anyway.  Selective repeat
    # resends only the READ (or atomic), so what the acknowledgement said of the PSNs after
    # it must not be lost: they are marked arrived (``SRRequester.arrived``) and the
    # acknowledgement is applied once the answer came (docs/protocol.md).

    def _ack(self, now: int, psn: int) -> None:
        read = self._read_passed(psn)
        if read is None:
            Completer._ack(self, now, psn)
            self._hold(now, (psn + 1) & PSN_MASK)
            return
        # Past a READ still missing responses: over a path that reorders they may only be
        # late.  Complete what ends before the READ, hold the rest (as a response past it
        # does, ``_before``), and let the loss rule judge the READ with this arrival.
        req = self.qp.requester
        if psn_diff(read.first_psn, req.una) > 0:
            Completer._ack(self, now, (read.first_psn - 1) & PSN_MASK)
        acks = self.acks_past
        if not acks or psn_diff(psn, acks[-1][0]) > 0:
            acks.append((psn, now))
        self._hold(now, (psn + 1) & PSN_MASK)
        self._judge(now)

    def _read_passed(self, psn: int) -> SendWQE | None:
        """The READ, still missing responses, that an acknowledgement of ``psn`` passes when
        the time rule judges (``rack`` with a round trip measured); None when it passes none,
        or an atomic comes first, or the packet count judges: go-back-N's implied NAK."""
        req = self.qp.requester
        rack = req.rack
        if rack is None or rack.min_rtt is None:
            return None
        for wqe in req.sq:
            if wqe.first_psn < 0 or psn_diff(psn, wqe.first_psn) < 0:
                return None
            if wqe.rd_atomic:
                return wqe if wqe.operation is Operation.RDMA_READ else None
        return None

    def _complete_before(self, now: int, psn: int) -> bool:
        if Completer._complete_before(self, now, psn):
            return True
        self._hold(now, psn)
        return False

    def _hold(self, now: int, end: int) -> None:
        req = self.qp.requester
        if psn_diff(end, req.una) <= 0:
            return  # not held up: everything before ``end`` completed
        behind = self.behind
        start = behind if behind is not None and psn_diff(behind, req.una) > 0 else req.una
        if psn_diff(end, start) > 0:
            req.arrived(now, start, end)
            self.behind = end
        self.held_by = req.sq[0].first_psn if req.sq else -1

    def _release(self, now: int) -> None:
        """Apply the held acknowledgement once the READ or atomic that held it completed."""
        req = self.qp.requester
        end = self.behind
        head = req.sq[0] if req.sq else None
        if end is None or head is None or head.first_psn < 0 or \
                psn_diff(end, head.first_psn) <= 0:
            self.behind = None  # nothing left that it covers
            return
        if head.first_psn == self.held_by:
            return  # still waiting for this one's answer (asked for already)
        self.behind = None
        self._ack(now, (end - 1) & PSN_MASK)  # may hold again, at the next READ or atomic

    def _read_response(self, now: int, pkt: Incoming) -> None:
        """IRN: READ responses are placed as they come, for any outstanding READ (by their
        PSN: a READ's responses carry the PSNs its request took), whatever the state of the
        READs before it; a READ completes, in order, once every response arrived and
        everything before it completed.  A missing response is asked for again (the READ
        request resent for the missing run, a selective retransmission) by the loss rule:
        ``rack``, once a later response (of this READ or a later one) arrived more than
        the reordering window ago (``read_gap``); ``dupthresh``, or ``rack`` before any
        round trip was measured, once ``dupthresh`` later responses arrived."""
        req = self.qp.requester
        psn = pkt.psn
        wqe = self._read_of(psn)
        if wqe is None:
            self.qp.counters.duplicates += 1  # no outstanding READ took this PSN
            return
        idx = psn_diff(psn, wqe.first_psn)
        got = self.got.setdefault(wqe.first_psn, {})
        if idx < wqe.read_next or idx in got:
            self.qp.counters.duplicates += 1
            return
        # the responder answers in PSN order: everything before this READ arrived there
        if not self._before(now, wqe.first_psn):
            return
        qp = self.qp
        try:
            qp.device.memory.scatter(qp.pd, wqe.wr.sg_list, idx * qp.mtu, pkt.payload)
        except AccessError:
            if req.sq[0] is wqe:
                self.fail_head(St.IBV_WC_LOC_PROT_ERR)
            else:
                req._local_error(wqe, St.IBV_WC_LOC_PROT_ERR)
            return
        if idx == wqe.read_next and req.rack is not None and psn not in req.asked and \
                req.retrying != psn:
            since = self._later(wqe)[0]
            if since is not None:  # it came after later ones, unasked: the path reorders
                req.rack.on_reordered(now - since)
        req.answered(now, wqe, psn)
        self.seen_at.setdefault(wqe.first_psn, now)
        got[idx] = now
        start = wqe.read_next
        while wqe.read_next in got:
            del got[wqe.read_next]
            wqe.read_next += 1
        if req.sq[0] is wqe:
            if wqe.read_next >= wqe.npsn:
                req.una = (wqe.first_psn + wqe.npsn) & PSN_MASK
                self._done(wqe)
                req.progress(now)
            elif wqe.read_next != start:
                req.una = (wqe.first_psn + wqe.read_next) & PSN_MASK
                req.progress(now)
        self._judge(now)

    def _read_of(self, psn: int) -> SendWQE | None:
        """The outstanding READ whose PSNs hold ``psn``."""
        for wqe in self.qp.requester.sq:
            if wqe.first_psn < 0:
                break
            if 0 <= psn_diff(psn, wqe.first_psn) < wqe.npsn:
                return wqe if wqe.operation is Operation.RDMA_READ else None
        return None

    def _before(self, now: int, first: int) -> bool:
        """A response of the READ at ``first`` came: complete what ends before it, in
        order; a READ before it still missing responses is left to the loss rule (not an
        implied NAK: those may be late), an atomic missing its answer is asked for again
        (the implied NAK); the other PSNs before ``first`` count as arrived
        (``_hold``).  False if the QP failed."""
        req = self.qp.requester
        sq = req.sq
        while sq and sq[0].first_psn >= 0 and sq[0].first_psn != first:
            head = sq[0]
            if head.rd_atomic:
                if head.operation is Operation.ATOMIC:
                    req.retry(now, head.first_psn)
                self._hold(now, first)
                return bool(sq)
            self._done(head)
        if psn_diff(first, req.una) > 0:
            req.una = first
            req.progress(now)
        return bool(sq)

    def _done(self, wqe: SendWQE) -> None:
        """Complete ``wqe``, then every READ after it all of whose responses arrived."""
        Completer._done(self, wqe)
        self.got.pop(wqe.first_psn, None)
        self.seen_at.pop(wqe.first_psn, None)
        req = self.qp.requester
        moved = False
        while req.sq:
            head = req.sq[0]
            if head.operation is not Operation.RDMA_READ or head.first_psn < 0:
                break
            end = (head.first_psn + head.read_next) & PSN_MASK
            if psn_diff(end, req.una) > 0:
                req.una = end
                moved = True
            if head.read_next < head.npsn:
                break
            Completer._done(self, head)
            self.got.pop(head.first_psn, None)
            self.seen_at.pop(head.first_psn, None)
        if moved:
            req.progress(self.now)

    def _later(self, wqe: SendWQE) -> tuple[int | None, int]:
        """The earliest arrival time of a response past ``wqe``'s first missing one (of
        ``wqe`` or a later READ), and how many such responses arrived."""
        got = self.got.get(wqe.first_psn)
        t = next(iter(got.values())) if got else None
        n = len(got) if got else 0
        ta, na = self._acked_past(wqe.first_psn)
        if na:
            t = ta if t is None or ta < t else t
            n += na
        after = False
        for w in self.qp.requester.sq:
            if w.first_psn < 0:
                break
            if not after:
                after = w is wqe
                continue
            seen = self.seen_at.get(w.first_psn)
            if seen is not None:
                t = seen if t is None or seen < t else t
                n += w.read_next + len(self.got.get(w.first_psn) or ())
        return t, n

    def _judge(self, now: int) -> None:
        """Ask again for the first missing response of every READ the loss rule finds it
        lost for; arm ``read_gap`` for the earliest moment the time-based rule would."""
        req = self.qp.requester
        req.gap_at = None
        seen_at = self.seen_at
        acks = self.acks_past
        if acks and psn_diff(acks[0][0], req.una) < 0:
            acks[:] = [a for a in acks if psn_diff(a[0], req.una) >= 0]  # all completed
        if len(seen_at) < 2 and not acks and not any(self.got.get(first) for first in seen_at):
            return  # at most one READ answered so far, in order: no gap
        rack = req.rack
        count = rack is None or rack.min_rtt is None
        wnd = 0 if count else rack.reo_wnd()
        gap = None
        t, n = None, 0  # responses past the READ being judged (walking back from the last)
        for wqe in reversed(req.sq):
            first = wqe.first_psn
            if first < 0 or wqe.operation is not Operation.RDMA_READ:
                continue
            got = self.got.get(first)
            if got:
                g = next(iter(got.values()))
                t = g if t is None or g < t else t
                n += len(got)
            te, ne = t, n  # with the acknowledgements past it
            if acks:
                ta, na = self._acked_past(first)
                if na:
                    te = ta if te is None or ta < te else te
                    ne += na
            missing = (first + wqe.read_next) & PSN_MASK
            if wqe.read_next < wqe.npsn and ne and missing not in req.asked and \
                    req.retrying != missing:
                if count:
                    if ne >= req.dupthresh:
                        req.retry(now, missing)
                elif now >= te + wnd:
                    req.retry(now, missing)
                elif gap is None or te + wnd < gap:
                    gap = te + wnd
            seen = self.seen_at.get(first)
            if seen is not None:
                t = seen if t is None or seen < t else t
                n += wqe.read_next
        req.gap_at = gap

    def _acked_past(self, first: int) -> tuple[int | None, int]:
        """The earliest arrival, and the number, of the acknowledgements past the READ at
        ``first`` (``acks_past``)."""
        t, n = None, 0
        for psn, at in self.acks_past:
            if psn_diff(psn, first) >= 0:
                t = at if t is None or at < t else t
                n += 1
        return t, n

    def read_gap(self, now: int) -> None:
        """The ``read_gap`` timer: judge every READ's gap again."""
        self.now = now
        self._judge(now)


_RUNNING = (QPState.IBV_QPS_RTR, QPState.IBV_QPS_RTS, QPState.IBV_QPS_SQD)
_WRITE_FIRST = select(Transport.RC, Operation.RDMA_WRITE, Position.FIRST)
