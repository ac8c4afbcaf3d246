"""Unreliable Connected (UC) and Unreliable Datagram (UD) queue pairs: requester and responder
for each (IBA 9.8.3 UC, 9.8.4 UD; rxe).

UC: SEND and RDMA WRITE only, no ACKs and no retransmission; a send completes once its last
packet is on the wire.  The responder takes packets in PSN order; a PSN it did not expect
drops the message under way (its receive WQE is kept for the next message) and it resumes at
the next First or Only packet.  Errors (no receive WQE, bad rkey, length) drop silently.

UD: SEND Only (with Immediate) with DETH (Q_Key, source QP), one MTU at most, to the address
handle of each work request.  The receiver checks the Q_Key, places a 40-byte GRH area (the
IPv4 header at its last 20 bytes for RoCEv2 over IPv4, as RoCE devices do) before the data,
and reports the source QP in the completion.
"""

from __future__ import annotations

from typing import Any

from roce.emu.core.constants import GRH_BYTES, Access, WCFlags, WCOpcode, WROpcode
from roce.emu.core.constants import WCStatus as St
from roce.emu.core.frames import FrameBuilder, Incoming, Path, select
from roce.emu.core.memory import AccessError, take
from roce.emu.core.parts import RequesterPart, ResponderPart
from roce.emu.core.placement import Refused, WriteCursor, check_length
from roce.emu.core.work import WC, WR_KINDS, SendWQE, SendWR, complete_send
from roce.opcodes import Operation, Position, Transport
from roce.psn import PSN_MASK

_UC_OPCODES = {WROpcode.IBV_WR_SEND, WROpcode.IBV_WR_SEND_WITH_IMM, WROpcode.IBV_WR_RDMA_WRITE,
               WROpcode.IBV_WR_RDMA_WRITE_WITH_IMM}
_UD_OPCODES = {WROpcode.IBV_WR_SEND, WROpcode.IBV_WR_SEND_WITH_IMM}
_REMOTE_WRITE = int(Access.IBV_ACCESS_REMOTE_WRITE)


class _Unacked(RequesterPart):
    """What UC and UD requesters share: no window, no timers, complete on send."""

    allowed: set[int] = set()

    def __init__(self, qp: Any) -> None:
        self.qp = qp
        self.sq: list[SendWQE] = []
        self.psn = 0

    def reset(self, sq_psn: int) -> None:
        self.psn = sq_psn & PSN_MASK

    def reset_retries(self) -> None:
        pass

    def clear(self) -> None:
        self.sq.clear()

    def timers(self) -> dict[str, int]:
        return {}

    def deadline(self) -> int | None:
        return None

    def on_timer(self, now: int) -> None:
        pass

    def post(self, now: int, wr: SendWR) -> None:
        qp = self.qp
        if wr.opcode not in self.allowed:
            raise ValueError(f"{qp.qp_type.name} does not support send opcode {wr.opcode}")
        if len(wr.sg_list) > qp.cap.max_send_sge:
            raise ValueError(f"send WR has {len(wr.sg_list)} SGEs, max_send_sge is "
                             f"{qp.cap.max_send_sge}")
        if len(self.sq) >= qp.cap.max_send_wr:
            raise ValueError("send queue is full")
        op, imm, inv, wc_op = WR_KINDS[wr.opcode]
        length = sum(s.length for s in wr.sg_list)
        signaled = qp.sq_sig_all or bool(wr.send_flags & 2)
        wqe = SendWQE(wr, op, imm, inv, wc_op, length, signaled)
        wqe.npkts = wqe.npsn = max(1, -(-length // qp.mtu))
        if qp.state.name == "IBV_QPS_ERR":
            self._complete(wqe, St.IBV_WC_WR_FLUSH_ERR)
            return
        self.sq.append(wqe)

    def pump(self, now: int) -> None:
        qp = self.qp
        if qp.state.name != "IBV_QPS_RTS":
            return
        while self.sq:
            wqe = self.sq.pop(0)
            try:
                wqe.views = qp.device.memory.views(qp.pd, wqe.wr.sg_list)
            except AccessError:
                self._complete(wqe, St.IBV_WC_LOC_PROT_ERR)
                qp.to_error()
                return
            if not self._transmit(wqe):
                return
            self._complete(wqe, St.IBV_WC_SUCCESS)

    def _transmit(self, wqe: SendWQE) -> bool:
        raise NotImplementedError

    def _complete(self, wqe: SendWQE, status: St) -> None:
        complete_send(self.qp, wqe, status)

    def flush(self) -> None:
        while self.sq:
            self._complete(self.sq.pop(0), St.IBV_WC_WR_FLUSH_ERR)


class UCRequester(_Unacked):
    allowed = _UC_OPCODES

    def _transmit(self, wqe: SendWQE) -> bool:
        qp = self.qp
        wr, mtu, n = wqe.wr, qp.mtu, wqe.npkts
        for i in range(n):
            pos = Position.ONLY if n == 1 else Position.FIRST if i == 0 else (
                Position.LAST if i == n - 1 else Position.MIDDLE)
            last = pos in (Position.LAST, Position.ONLY)
            row = select(Transport.UC, wqe.operation, pos, wqe.immediate and last)
            ext: dict[str, dict] = {}
            if "reth" in row.headers:
                ext["reth"] = {"va": wr.remote_addr, "r_key": wr.rkey, "dmalen": wqe.length}
            if "immdt" in row.headers:
                ext["immdt"] = {"immdt": wr.imm_data & 0xFFFFFFFF}
            qp.send_frame(qp.builder.build(row, qp.attr.dest_qp_num, self.psn, ext,
                                           take(wqe.views, i * mtu, mtu)))
            self.psn = (self.psn + 1) & PSN_MASK
        return True


class UDRequester(_Unacked):
    allowed = _UD_OPCODES

    def __init__(self, qp: Any) -> None:
        super().__init__(qp)
        self.builders: dict[tuple, FrameBuilder] = {}

    def _transmit(self, wqe: SendWQE) -> bool:
        qp = self.qp
        wr = wqe.wr
        if wqe.length > qp.mtu:
            self._complete(wqe, St.IBV_WC_LOC_LEN_ERR)
            return False
        ah = getattr(wr.ah, "attr", wr.ah)
        if ah is None:
            raise ValueError("a UD send needs an address handle (SendWR.ah)")
        key = (ah.dip, ah.dmac)
        builder = self.builders.get(key)
        if builder is None:
            dmac = ah.dmac or qp.device.peer_mac(ah.dip)
            builder = self.builders[key] = FrameBuilder(
                Path(qp.device.mac, dmac, qp.device.ip, ah.dip, ":" in ah.dip, ah.sport),
                qp.qpn)
        row = select(Transport.UD, Operation.SEND, Position.ONLY, wqe.immediate)
        ext: dict[str, dict] = {"deth": {"q_key": wr.remote_qkey & 0xFFFFFFFF,
                                         "srcqp": qp.qpn}}
        if "immdt" in row.headers:
            ext["immdt"] = {"immdt": wr.imm_data & 0xFFFFFFFF}
        qp.send_frame(builder.build(row, wr.remote_qpn, self.psn, ext,
                                    take(wqe.views, 0, wqe.length),
                                    se=bool(wr.send_flags & 4)))
        self.psn = (self.psn + 1) & PSN_MASK
        return True


class UCResponder(ResponderPart):
    def __init__(self, qp: Any) -> None:
        self.qp = qp
        self.epsn = 0
        self.in_progress: Operation | None = None
        self.recv = None
        self.offset = 0
        self.write = WriteCursor()
        self.dropped = 0

    def reset(self, rq_psn: int) -> None:
        self.epsn = rq_psn & PSN_MASK

    def _drop(self) -> None:
        self.dropped += 1
        self.in_progress = None  # the receive WQE (if any) stays for the next message

    def receive(self, now: int, pkt: Incoming) -> None:
        qp = self.qp
        op = pkt.op
        first = op.position in (Position.FIRST, Position.ONLY)
        last = op.position in (Position.LAST, Position.ONLY)
        if pkt.psn != self.epsn or (self.in_progress is None and not first) or (
                self.in_progress is not None and (first or op.operation != self.in_progress)):
            qp.counters.out_of_sequence += 1
            self._drop()
            if not first:
                self.epsn = (pkt.psn + 1) & PSN_MASK
                return
        self.epsn = (pkt.psn + 1) & PSN_MASK
        try:
            check_length(pkt, qp.mtu)  # the RC rules; UC drops instead of NAKing (rxe)
            if op.operation is Operation.SEND:
                self._send(pkt, first, last)
            elif op.operation is Operation.RDMA_WRITE:
                self._write(pkt, first, last)
            else:
                self._drop()
        except (AccessError, Refused):
            self._drop()

    def _send(self, pkt: Incoming, first: bool, last: bool) -> None:
        qp = self.qp
        if first:
            if self.recv is None:
                if not qp.rq:
                    self._drop()  # UC: no RNR NAK, the message is lost
                    return
                self.recv = qp.rq.popleft()
            self.offset = 0
        wqe = self.recv
        if wqe is None or self.offset + pkt.payload_len > wqe.length:
            self._drop()
            return
        qp.device.memory.scatter(qp.pd, wqe.wr.sg_list, self.offset, pkt.payload)
        self.offset += pkt.payload_len
        self.in_progress = None if last else Operation.SEND
        if last:
            imm = pkt.ext["immdt"]["immdt"] if "immdt" in pkt.ext else None
            qp.complete_recv(wqe, St.IBV_WC_SUCCESS, WCOpcode.IBV_WC_RECV, self.offset, imm)
            qp.counters.messages_executed += 1
            self.recv = None

    def _write(self, pkt: Incoming, first: bool, last: bool) -> None:
        qp = self.qp
        if not qp.remote_access_ok(_REMOTE_WRITE):
            self._drop()
            return
        self.write.take(qp, pkt, first, last)
        self.in_progress = None if last else Operation.RDMA_WRITE
        if not last:
            return
        if "immdt" in pkt.ext:
            if not qp.rq:
                self._drop()
                return
            qp.complete_recv(qp.rq.popleft(), St.IBV_WC_SUCCESS,
                             WCOpcode.IBV_WC_RECV_RDMA_WITH_IMM, self.write.offset,
                             pkt.ext["immdt"]["immdt"])
        qp.counters.messages_executed += 1


class UDResponder(ResponderPart):
    def __init__(self, qp: Any) -> None:
        self.qp = qp
        self.qkey_drops = 0
        self.dropped = 0

    def reset(self, rq_psn: int) -> None:
        pass

    def receive(self, now: int, pkt: Incoming) -> None:
        qp = self.qp
        deth = pkt.ext["deth"]
        if deth["q_key"] != qp.attr.qkey:
            self.qkey_drops += 1
            return
        if not qp.rq:
            self.dropped += 1
            return
        wqe = qp.rq[0]
        if GRH_BYTES + pkt.payload_len > wqe.length:
            qp.rq.popleft()
            qp.complete_recv(wqe, St.IBV_WC_LOC_LEN_ERR)
            return
        qp.rq.popleft()
        # The GRH area: for RoCEv2/IPv4 the IPv4 header sits in its last 20 bytes.
        l3 = pkt.frame[pkt.l3_off:pkt.l3_off + pkt.l3_len][:GRH_BYTES]
        grh = bytes(GRH_BYTES - len(l3)) + l3
        try:
            qp.device.memory.scatter(qp.pd, wqe.wr.sg_list, 0, grh + pkt.payload)
        except AccessError:
            qp.complete_recv(wqe, St.IBV_WC_LOC_PROT_ERR)
            return
        imm = pkt.ext["immdt"]["immdt"] if "immdt" in pkt.ext else None
        qp.counters.messages_executed += 1
        qp.recv_cq.push(WC(wqe.wr.wr_id, St.IBV_WC_SUCCESS, WCOpcode.IBV_WC_RECV,
                           GRH_BYTES + pkt.payload_len, imm or 0, qp.qpn, deth["srcqp"],
                           int(WCFlags.IBV_WC_GRH) | (int(WCFlags.IBV_WC_WITH_IMM)
                                                      if imm is not None else 0)))
