"""The responder: executes requests, answers with ACKs, NAKs, READ responses and atomic ACKs,
and completes receive work (rxe ``rxe_resp.c``).

Checks, in rxe's order, and what each failure puts on the wire (docs/protocol.md):

| check | failure | QP |
|---|---|---|
| PSN ahead of ePSN | NAK PSN sequence error carrying ePSN, once until ePSN arrives | stays |
| PSN behind (duplicate) | SEND/WRITE: ACK again; READ: answer again; ATOMIC: saved result | stays |
| opcode sequence | NAK invalid request | ERR |
| QP access flags | NAK invalid request | ERR |
| receive WQE for SEND / WRITE with Imm | RNR NAK with min_rnr_timer | stays |
| length (MTU rules, DMA length, receive buffer) | NAK invalid request | ERR |
| rkey / PD / range / MR access | NAK remote access error | ERR |
| atomic address not 8-byte aligned | NAK invalid request | ERR |

MSN counts completed messages (a READ or ATOMIC when accepted).  An ACK goes out for every
request packet with AckReq set, carrying the PSN of that packet and the current MSN.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from roce.emu.core.constants import Access, WCOpcode
from roce.emu.core.constants import WCStatus as St
from roce.emu.core.frames import Incoming, positions, select
from roce.emu.core.memory import AccessError
from roce.emu.core.parts import ResponderPart
from roce.emu.core.placement import Refused, WriteCursor, check_length
from roce.emu.core.work import RecvWQE
from roce.errors import RoceError
from roce.headers import (
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    CREDITS_UNLIMITED,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR,
    nak_name,
    syndrome,
)
from roce.opcodes import Operation, Position, Transport
from roce.psn import PSN_MASK, psn_diff

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_ACK_ROW = select(Transport.RC, Operation.ACK, Position.ONLY)
_ATOMIC_ACK_ROW = select(Transport.RC, Operation.ATOMIC_ACK, Position.ONLY)
_U64 = (1 << 64) - 1


@dataclass
class ReadResource:
    """A READ request the responder answered, kept to answer it again when it comes back
    as a duplicate: its PSN range, remote address, R_Key and length."""

    psn: int
    npsn: int
    va: int
    rkey: int
    length: int


@dataclass
class AtomicResource:
    """An atomic the responder executed: its PSN and the original value, which a
    duplicate of the request gets back without executing it again."""

    psn: int
    orig: int


RNR = -1  # Reject code for "answer with an RNR NAK" (NAK codes are 0..31; never confuse them)


class Reject(RoceError):
    """A check failed: answer with this AETH NAK code, or an RNR NAK for ``RNR``."""

    def __init__(self, code: int, why: str, local_status: St | None = None) -> None:
        super().__init__(why)
        self.code = code
        self.local_status = local_status


class Responder(ResponderPart):
    __slots__ = ("qp", "epsn", "msn", "nak_sent", "in_progress", "recv", "offset", "write",
                 "resources", "last_read_ack")

    def __init__(self, qp: Any) -> None:
        self.qp = qp
        self.epsn = 0
        self.msn = 0
        self.nak_sent = False
        self.in_progress: Operation | None = None  # a multi-packet SEND or WRITE under way
        self.recv: RecvWQE | None = None  # the receive WQE the current SEND fills
        self.offset = 0  # bytes placed so far in the current message
        self.write = WriteCursor()
        self.resources: deque[ReadResource | AtomicResource] = deque()
        self.last_read_ack = 0

    def reset(self, rq_psn: int) -> None:
        self.epsn = rq_psn & PSN_MASK
        self.nak_sent = False

    # -- entry --------------------------------------------------------------------------------

    def receive(self, now: int, pkt: Incoming) -> None:
        qp = self.qp
        d = psn_diff(pkt.psn, self.epsn)
        if d > 0:
            qp.counters.out_of_sequence += 1
            if not self.nak_sent:
                self.nak_sent = True
                self._nak(NAK_PSN_SEQUENCE_ERROR, self.epsn)
            return
        if d < 0:
            qp.counters.duplicates += 1
            if pkt.op.operation not in ANSWERED:
                qp.counters.duplicate_requests += 1
            self._duplicate(pkt)
            return
        self.nak_sent = False
        try:
            self._execute(pkt)
        except Reject as r:
            if r.code == RNR:
                qp.counters.rnr_naks_sent += 1
                self._send_aeth(syndrome(AETH_RNR_NAK, qp.attr.min_rnr_timer & 0x1F), pkt.psn)
                return
            self._nak(r.code, pkt.psn)
            if self.recv is not None:
                qp.complete_recv(self.recv, r.local_status or St.IBV_WC_REM_INV_REQ_ERR)
                self.recv = None
            qp.to_error()

    # -- execution ------------------------------------------------------------------------

    def _execute(self, pkt: Incoming) -> None:
        qp = self.qp
        op = pkt.op
        operation = op.operation
        first = pkt.starts
        last = pkt.ends
        # opcode sequence
        if self.in_progress is not None:
            if first or operation is not self.in_progress:
                raise Reject(NAK_INVALID_REQUEST, f"{op} inside a {self.in_progress.value}")
        elif not first:
            raise Reject(NAK_INVALID_REQUEST, f"{op} without a first packet")
        # QP access flags
        access = _QP_ACCESS  # (a dictionary: looked up in C in the compiled form)
        need = access.get(operation)
        if need is not None and not qp.remote_access_ok(need):
            raise Reject(NAK_INVALID_REQUEST, f"QP does not allow {Access(need).name}")
        # responder resources for READ/ATOMIC (max_dest_rd_atomic)
        if (operation is _READ or operation is _ATOMIC) and \
                qp.attr.max_dest_rd_atomic < 1:
            raise Reject(NAK_INVALID_REQUEST, "no responder resources (max_dest_rd_atomic 0)")
        if operation is _SEND:
            self._send(pkt, first, last)
        elif operation is _WRITE:
            self._write(pkt, first, last)
        elif operation is _READ:
            self._read(pkt)
            return
        elif operation is _ATOMIC:
            self._atomic(pkt)
            return
        else:
            raise Reject(NAK_INVALID_REQUEST, f"{op} is not supported")
        self.epsn = (pkt.psn + 1) & PSN_MASK
        if pkt.ackreq:
            self._ack(pkt.psn)

    def _check_length(self, pkt: Incoming) -> None:
        try:
            check_length(pkt, self.qp.mtu)
        except Refused as r:
            raise Reject(NAK_INVALID_REQUEST, r.why) from None

    def _executed(self) -> None:
        """One more message done: MSN counts it (IBA 9.7.5.1.3)."""
        self.msn = (self.msn + 1) & PSN_MASK
        self.qp.counters.messages_executed += 1

    def _send(self, pkt: Incoming, first: bool, last: bool) -> None:
        qp = self.qp
        if first:
            if not qp.rq:
                raise Reject(RNR, "no receive WQE")
            self._check_length(pkt)
            self.recv = qp.rq.popleft()
            self.offset = 0
        else:
            self._check_length(pkt)
        wqe = self.recv
        assert wqe is not None
        if self.offset + pkt.payload_len > wqe.length:
            raise Reject(NAK_INVALID_REQUEST, "SEND longer than the receive buffer",
                         St.IBV_WC_LOC_LEN_ERR)
        try:
            qp.device.memory.scatter(qp.pd, wqe.wr.sg_list, self.offset, pkt.payload)
        except AccessError as e:
            raise Reject(NAK_INVALID_REQUEST, e.why, St.IBV_WC_LOC_PROT_ERR) from None
        self.offset += pkt.payload_len
        self.in_progress = None if last else _SEND
        if last:
            imm = pkt.ext["immdt"]["immdt"] if "immdt" in pkt.ext else None
            inv = pkt.ext["ieth"]["ieth"] if "ieth" in pkt.ext else None
            if inv is not None:
                qp.device.memory.invalidate(inv)
            qp.complete_recv(wqe, St.IBV_WC_SUCCESS, WCOpcode.IBV_WC_RECV, self.offset, imm,
                             inv)
            self.recv = None
            self._executed()

    def _write(self, pkt: Incoming, first: bool, last: bool) -> None:
        qp = self.qp
        imm = "immdt" in pkt.ext
        if last and imm and not qp.rq:
            raise Reject(RNR, "no receive WQE for RDMA WRITE with immediate")
        try:
            check_length(pkt, qp.mtu)
            self.write.take(qp, pkt, first, last)
        except Refused as r:
            raise Reject(NAK_REMOTE_ACCESS_ERROR if r.access else NAK_INVALID_REQUEST,
                         r.why) from None
        self.in_progress = None if last else _WRITE
        if last:
            self._executed()
            if imm:
                wqe = qp.rq.popleft()
                qp.complete_recv(wqe, St.IBV_WC_SUCCESS, WCOpcode.IBV_WC_RECV_RDMA_WITH_IMM,
                                 self.write.offset, pkt.ext["immdt"]["immdt"])

    def _read(self, pkt: Incoming) -> None:
        qp = self.qp
        reth = pkt.ext["reth"]
        va, rkey, length = reth["va"], reth["r_key"], reth["dmalen"]
        if length:
            try:
                qp.device.memory.lookup_remote(qp.pd, rkey, va, length, _REMOTE_READ)
            except AccessError as e:
                raise Reject(NAK_REMOTE_ACCESS_ERROR, e.why) from None
        npsn = max(1, -(-length // qp.mtu))
        self._remember(ReadResource(pkt.psn, npsn, va, rkey, length))
        self._executed()
        self.epsn = (pkt.psn + npsn) & PSN_MASK
        self._read_responses(pkt.psn, va, rkey, length)

    def _read_responses(self, psn: int, va: int, rkey: int, length: int) -> None:
        qp = self.qp
        mtu = qp.mtu
        data: bytes | memoryview = b""
        if length:  # a view: each response copies only its own MTU of it
            mr = qp.device.memory.lookup_remote(qp.pd, rkey, va, length, _REMOTE_READ)
            data = mr.view(va, length)
        npkts = max(1, -(-length // mtu))
        aeth = {"syndrome": syndrome(AETH_ACK, CREDITS_UNLIMITED), "msn": self.msn}
        for i, pos in enumerate(positions(npkts)):
            row = select(_RC, _READ_RESPONSE, pos)
            ext = {"aeth": aeth} if "aeth" in row.headers else None
            qp.send_frame(qp.builder.build(row, qp.attr.dest_qp_num, (psn + i) & PSN_MASK,
                                           ext, data[i * mtu:(i + 1) * mtu]))

    def _atomic(self, pkt: Incoming) -> None:
        qp = self.qp
        a = pkt.ext["atomiceth"]
        va, rkey = a["va"], a["r_key"]
        try:  # key, PD, access and range first (rxe order), alignment after
            mr = qp.device.memory.lookup_remote(qp.pd, rkey, va, 8, _REMOTE_ATOMIC)
        except AccessError as e:
            raise Reject(NAK_REMOTE_ACCESS_ERROR, e.why) from None
        if va % 8:
            raise Reject(NAK_INVALID_REQUEST, f"atomic address 0x{va:x} is not 8-byte aligned")
        cell = mr.view(va, 8)
        orig = int.from_bytes(cell, "little")
        if pkt.op.ident.endswith("COMPARE_SWAP"):
            if orig == a["cmpdt"]:
                cell[:] = a["swapdt"].to_bytes(8, "little")
        else:
            cell[:] = ((orig + a["swapdt"]) & _U64).to_bytes(8, "little")
        self._remember(AtomicResource(pkt.psn, orig))
        self._executed()
        self.epsn = (pkt.psn + 1) & PSN_MASK
        self._atomic_ack(pkt.psn, orig)

    # -- duplicates ---------------------------------------------------------------------

    def _duplicate(self, pkt: Incoming) -> None:
        operation = pkt.op.operation
        if operation is Operation.RDMA_READ:
            reth = pkt.ext["reth"]
            for res in self.resources:
                if isinstance(res, ReadResource) and 0 <= psn_diff(pkt.psn, res.psn) < res.npsn \
                        and reth["r_key"] == res.rkey:
                    skip = psn_diff(pkt.psn, res.psn) * self.qp.mtu
                    length = min(reth["dmalen"], max(res.length - skip, 0))
                    try:
                        self._read_responses(pkt.psn, res.va + skip, res.rkey, length)
                    except AccessError:
                        pass  # the MR went away since: nothing to answer from
                    return
            return
        if operation is Operation.ATOMIC:
            for res in self.resources:
                if isinstance(res, AtomicResource) and res.psn == pkt.psn:
                    self._atomic_ack(res.psn, res.orig)
                    return
            return
        # SEND / WRITE: already executed; acknowledge again, up to the last good PSN
        self._ack((self.epsn - 1) & PSN_MASK)

    def _remember(self, res: ReadResource | AtomicResource) -> None:
        self.resources.append(res)
        while len(self.resources) > max(1, self.qp.attr.max_dest_rd_atomic) * 4:
            self.resources.popleft()

    # -- answers --------------------------------------------------------------------------

    def _ack(self, psn: int) -> None:
        self._send_aeth(syndrome(AETH_ACK, CREDITS_UNLIMITED), psn)

    def _nak(self, code: int, psn: int) -> None:
        name = nak_name(code)
        naks = self.qp.counters.naks_sent
        naks[name] = naks.get(name, 0) + 1
        self._send_aeth(syndrome(AETH_NAK, code), psn)

    def _send_aeth(self, syn: int, psn: int) -> None:
        qp = self.qp
        qp.send_frame(qp.builder.build(_ACK_ROW, qp.attr.dest_qp_num, psn,
                                       {"aeth": {"syndrome": syn, "msn": self.msn}}))

    def _atomic_ack(self, psn: int, orig: int) -> None:
        qp = self.qp
        ext = {"aeth": {"syndrome": syndrome(AETH_ACK, CREDITS_UNLIMITED), "msn": self.msn},
               "atomicacketh": {"origremdt": orig}}
        qp.send_frame(qp.builder.build(_ATOMIC_ACK_ROW, qp.attr.dest_qp_num, psn, ext))


_REMOTE_WRITE = int(Access.IBV_ACCESS_REMOTE_WRITE)
_REMOTE_READ = int(Access.IBV_ACCESS_REMOTE_READ)
_REMOTE_ATOMIC = int(Access.IBV_ACCESS_REMOTE_ATOMIC)
# Enum members the per-packet path compares against, as module names: reading one off its
# Enum class goes through the metaclass each time (about 50 ns), and these run per packet.
_SEND, _WRITE = Operation.SEND, Operation.RDMA_WRITE
_READ, _ATOMIC = Operation.RDMA_READ, Operation.ATOMIC
_RC, _READ_RESPONSE = Transport.RC, Operation.READ_RESPONSE
# Requests whose answer is what the requester is missing: a READ's responses, an atomic's
# ACK.  One asked again is no spurious retransmission (docs/protocol.md, "Selective repeat
# (IRN) encoding", Counting): its answer may have been lost, and the responder cannot tell.
ANSWERED = frozenset((_READ, _ATOMIC))
_QP_ACCESS = {Operation.RDMA_WRITE: _REMOTE_WRITE, Operation.RDMA_READ: _REMOTE_READ,
              Operation.ATOMIC: _REMOTE_ATOMIC}
