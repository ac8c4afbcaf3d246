"""The completer: ACKs, NAKs, READ responses and atomic ACKs complete send work (rxe
``rxe_comp.c``).

Rules (docs/protocol.md):
- an ACK with PSN p acknowledges every PSN up to p: SEND/WRITE messages ending at or before
  p complete, in order;
- a response past a READ/ATOMIC whose answer has not arrived is an implied NAK: retry from
  the first missing PSN;
- READ responses must come in PSN order; a gap is an implied NAK, an older one a duplicate;
- NAK PSN-sequence-error p: everything before p is done, go back to p (retry_cnt);
- RNR NAK p: everything before p is done, wait the NAK's timer, resend from p (rnr_retry);
- NAK invalid request / remote access / remote operational: the WQE at p completes with
  REM_INV_REQ_ERR / REM_ACCESS_ERR / REM_OP_ERR, the QP goes to ERR, the rest is flushed.
"""

from __future__ import annotations

from roce.emu.core.constants import WCStatus as St
from roce.emu.core.frames import Incoming
from roce.emu.core.memory import AccessError
from roce.emu.core.parts import CompleterPart
from roce.emu.core.work import SendWQE
from roce.headers import (
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    NAK_INVALID_RD_REQUEST,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR,
    NAK_REMOTE_OPERATIONAL_ERROR,
    nak_name,
    rnr_timer_ns,
    syndrome_type,
    syndrome_value,
)
from roce.opcodes import Operation, Position
from roce.psn import PSN_MASK, psn_diff

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

NAK_STATUS = {
    NAK_INVALID_REQUEST: St.IBV_WC_REM_INV_REQ_ERR,
    NAK_REMOTE_ACCESS_ERROR: St.IBV_WC_REM_ACCESS_ERR,
    NAK_REMOTE_OPERATIONAL_ERROR: St.IBV_WC_REM_OP_ERR,
    NAK_INVALID_RD_REQUEST: St.IBV_WC_REM_INV_REQ_ERR,
}

# the operations an answer may be, read once (an Enum's member through its class is a
# Python __getattr__ call)
_ACK, _READ_RESPONSE, _ATOMIC_ACK = Operation.ACK, Operation.READ_RESPONSE, Operation.ATOMIC_ACK


class Completer(CompleterPart):
    __slots__ = ("qp",)

    def __init__(self, qp: Any) -> None:
        self.qp = qp

    def receive(self, now: int, pkt: Incoming) -> None:
        req = self.qp.requester
        psn = pkt.psn
        if not req.sq or req.sq[0].first_psn < 0 or req.high is None:
            return  # nothing outstanding: a stale response
        if psn_diff(psn, req.una) < 0 or psn_diff(psn, req.high) > 0:
            self.qp.counters.duplicates += 1
            return
        operation = pkt.op.operation
        if operation is _ACK:
            syn = pkt.ext["aeth"]["syndrome"]
            kind, value = syndrome_type(syn), syndrome_value(syn)
            if kind == AETH_ACK:
                self._ack(now, psn)
            elif kind == AETH_RNR_NAK:
                self.qp.counters.rnr_naks_received += 1
                if self._complete_before(now, psn):
                    req.rnr_wait(now, psn, rnr_timer_ns(value))
            elif kind == AETH_NAK:
                name = nak_name(value)
                naks = self.qp.counters.naks_received
                naks[name] = naks.get(name, 0) + 1
                if not self._complete_before(now, psn):
                    return
                if value == NAK_PSN_SEQUENCE_ERROR:
                    req.retry(now, psn)
                else:
                    self.fail_head(NAK_STATUS.get(value, St.IBV_WC_REM_OP_ERR))
        elif operation is _READ_RESPONSE:
            self._read_response(now, pkt)
        elif operation is _ATOMIC_ACK:
            self._atomic_ack(now, pkt)

    # -- helpers -------------------------------------------------------------------------------

    def _ack(self, now: int, psn: int) -> None:
        req = self.qp.requester
        moved = False
        while req.sq and req.sq[0].first_psn >= 0:
            wqe = req.sq[0]
            if psn_diff(psn, wqe.first_psn) < 0:
                break
            if wqe.rd_atomic:
                # the responder is past this READ/ATOMIC but its answer never came
                req.retry(now, (wqe.first_psn + wqe.read_next) & PSN_MASK)
                return
            last = (wqe.first_psn + wqe.npsn - 1) & PSN_MASK
            if psn_diff(psn, last) < 0:
                break
            self._done(wqe)
            moved = True
        if psn_diff(psn + 1, req.una) > 0:
            req.una = (psn + 1) & PSN_MASK
            moved = True
        if moved:
            req.progress(now)

    def _complete_before(self, now: int, psn: int) -> bool:
        """Complete what ends before ``psn``; False if an implied NAK took over."""
        req = self.qp.requester
        while req.sq and req.sq[0].first_psn >= 0:
            wqe = req.sq[0]
            last = (wqe.first_psn + wqe.npsn - 1) & PSN_MASK
            if psn_diff(last, psn) >= 0:
                break
            if wqe.rd_atomic:
                req.retry(now, (wqe.first_psn + wqe.read_next) & PSN_MASK)
                return False
            self._done(wqe)
        if psn_diff(psn, req.una) > 0:
            req.una = psn
            req.progress(now)
        return True

    def _head_read(self, now: int, psn: int) -> SendWQE | None:
        """The READ at the head of the send queue a response ``psn`` is for, once what came
        before it completed; None if there is none (or an implied NAK took over)."""
        req = self.qp.requester
        if not self._complete_before(now, self._head_start(psn)):
            return None
        wqe = req.sq[0] if req.sq else None
        if wqe is None or wqe.operation is not Operation.RDMA_READ or wqe.first_psn < 0:
            return None
        return wqe

    def _read_response(self, now: int, pkt: Incoming) -> None:
        req = self.qp.requester
        psn = pkt.psn
        wqe = self._head_read(now, psn)
        if wqe is None:
            return
        expected = (wqe.first_psn + wqe.read_next) & PSN_MASK
        d = psn_diff(psn, expected)
        if d < 0:
            self.qp.counters.duplicates += 1
            return
        if d > 0 or psn_diff(psn, wqe.first_psn + wqe.npsn - 1) > 0:
            req.retry(now, expected)  # a response is missing: implied NAK
            return
        qp = self.qp
        try:
            qp.device.memory.scatter(qp.pd, wqe.wr.sg_list, wqe.read_next * qp.mtu,
                                     pkt.payload)
        except AccessError:
            self.fail_head(St.IBV_WC_LOC_PROT_ERR)
            return
        wqe.read_next += 1
        req.una = (psn + 1) & PSN_MASK
        if pkt.op.position in (Position.LAST, Position.ONLY) or wqe.read_next >= wqe.npsn:
            self._done(wqe)
        req.progress(now)

    def _atomic_ack(self, now: int, pkt: Incoming) -> None:
        req = self.qp.requester
        psn = pkt.psn
        if not self._complete_before(now, psn):
            return
        wqe = req.sq[0] if req.sq else None
        if wqe is None or wqe.operation is not Operation.ATOMIC or wqe.first_psn != psn:
            return
        qp = self.qp
        orig = pkt.ext["atomicacketh"]["origremdt"]
        try:
            qp.device.memory.scatter(qp.pd, wqe.wr.sg_list, 0, orig.to_bytes(8, "little"))
        except AccessError:
            self.fail_head(St.IBV_WC_LOC_PROT_ERR)
            return
        req.una = (psn + 1) & PSN_MASK
        self._done(wqe)
        req.progress(now)

    def _head_start(self, psn: int) -> int:
        """For a READ response: the PSN its READ request started at (to complete before)."""
        for wqe in self.qp.requester.sq:
            if wqe.first_psn < 0:
                break
            if 0 <= psn_diff(psn, wqe.first_psn) < wqe.npsn:
                return wqe.first_psn
        return psn

    def _done(self, wqe: SendWQE) -> None:
        req = self.qp.requester
        req.pop_head()
        req._complete(wqe, St.IBV_WC_SUCCESS)

    def fail_head(self, status: St) -> None:
        req = self.qp.requester
        if req.sq:
            req._complete(req.pop_head(), status)
        self.qp.to_error()
