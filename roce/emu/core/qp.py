"""The queue pair core: sans-I/O state machine ``(now, event) -> (frames, completions, timers)``.

Events are ``post_send``, ``post_recv``, ``modify``, ``receive`` (a decoded packet) and
``on_timer``; all take ``now`` in integer nanoseconds and none reads a clock.  Frames to send
collect in ``tx`` (the device drains them), completions go to the CQs, and ``deadline()`` says
when ``on_timer`` must be called next.  The work is split as in Linux rxe: ``Requester``
(sends requests), ``Completer`` (handles ACKs and responses, completes send work),
``Responder`` (handles requests, sends ACKs/NAKs/responses, completes receive work).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from roce import fast
from roce.emu.core.constants import (
    ACK_TIMEOUT_UNIT_NS,
    QPAttrMask,
    QPState,
    QPType,
    WCOpcode,
    WCStatus,
    mtu_bytes,
)
from roce.emu.core.frames import FrameBuilder, Incoming, Path
from roce.emu.core.recovery import GBN, RecoveryConfig, RecoveryError
from roce.emu.core.states import (
    CAN_POST_RECV,
    CAN_POST_SEND,
    CAN_RECEIVE,
    QPStateError,
    check_transition,
)
from roce.emu.core.work import WC, RecvWQE, RecvWR, SendWR
from roce.headers import ECN_CE
from roce.locate import OK
from roce.opcodes import OPCODES, Transport

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

S = QPState


@dataclass
class QPCap:
    """The queue sizes a QP is created with (``struct ibv_qp_cap``)."""

    max_send_wr: int = 256
    max_recv_wr: int = 256
    max_send_sge: int = 4
    max_recv_sge: int = 4
    max_inline_data: int = 0


@dataclass
class AHAttr:
    """Address of the peer: its MAC and IP (GID); ``ipv6`` for an IPv6 GID."""

    dmac: str = ""
    dip: str = ""
    ipv6: bool = False
    sport: int | None = None
    traffic_class: int = 0  # IP DSCP << 2 | ECN, as the GRH's traffic class (IBA 8.3)


@dataclass
class QPAttr:
    """A QP's attributes as ``modify`` takes and ``query`` returns them (``struct
    ibv_qp_attr``); a ``QPAttrMask`` says which of them a call sets."""

    qp_state: int = S.IBV_QPS_RESET
    qp_access_flags: int = 0
    pkey_index: int = 0
    port_num: int = 1
    qkey: int = 0
    path_mtu: int = 5  # IBV_MTU_4096
    dest_qp_num: int = 0
    rq_psn: int = 0
    sq_psn: int = 0
    max_rd_atomic: int = 1
    max_dest_rd_atomic: int = 1
    min_rnr_timer: int = 12  # 0.64 ms
    timeout: int = 14  # 4.096 us * 2^14 = 67 ms
    retry_cnt: int = 7
    rnr_retry: int = 7
    ah_attr: AHAttr = field(default_factory=AHAttr)
    cap: QPCap | None = None


@dataclass
class Counters:
    """What a QP counted: packets, retransmissions, timeouts, NAKs."""

    packets_sent: int = 0
    packets_received: int = 0
    retransmitted: int = 0
    timeouts: int = 0
    rnr_naks_received: int = 0
    rnr_naks_sent: int = 0
    naks_received: dict[str, int] = field(default_factory=dict)
    naks_sent: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    out_of_sequence: int = 0
    messages_executed: int = 0  # responder: messages done (RC: as MSN counts), received (UD)
    wrong_transport: int = 0
    ce_received: int = 0  # packets that arrived with ECN Congestion Experienced
    # selective repeat (roce.emu.core.selective); duplicate_requests counts in both modes
    duplicate_requests: int = 0  # request PSNs the responder already had (executed or held)
    ooo_accepted: int = 0  # request packets held ahead of ePSN
    sacks_sent: int = 0  # selective NAKs (docs/protocol.md, "Selective repeat (IRN) encoding")
    sacks_received: int = 0
    selective_retransmitted: int = 0  # resent alone, not as part of a go-back


class QueuePair:
    """One queue pair of an emulated device."""

    __slots__ = ("device", "pd", "qpn", "qp_type", "send_cq", "recv_cq", "cap", "sq_sig_all",
                 "state", "attr", "mtu", "builder", "tx", "tx_limit", "timers_at_wire",
                 "extra_timers", "counters", "rq", "recovery", "transport", "requester",
                 "responder", "completer", "cc_config")

    def __init__(self, device: Any, pd: Any, qpn: int, qp_type: QPType, send_cq: Any,
                 recv_cq: Any, cap: QPCap, sq_sig_all: bool = True) -> None:
        self.device = device
        self.pd = pd
        self.qpn = qpn
        self.qp_type = QPType(qp_type)
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self.cap = cap
        self.sq_sig_all = sq_sig_all
        self.state = S.IBV_QPS_RESET
        self.attr = QPAttr()
        self.mtu = 4096
        self.builder: FrameBuilder | None = None
        self.tx: list[bytes] = []
        # None: the requester builds every packet its window allows at once; a number: it
        # stops while this many frames wait in ``tx`` (a NIC scheduler pulls and pumps again)
        self.tx_limit: int | None = None
        # True once a NIC scheduler owns ``tx`` (roce.emu.net.nic): the requester starts its
        # timers when a request frame leaves on the wire (``Requester.on_wire``), not when it
        # is built; False: every frame leaves as it is built (docs/architecture.md)
        self.timers_at_wire = False
        self.extra_timers: dict[str, int] = {}
        self.counters = Counters()
        self.rq: deque[RecvWQE] = deque()
        self.recovery: RecoveryConfig = getattr(device, "recovery", None) or GBN
        self._make_parts()

    def _make_parts(self) -> None:
        """Fresh requester, responder (and completer for RC): a QP starts, and returns to RESET,
        with no transport state at all."""
        from roce.emu.core.completer import Completer
        from roce.emu.core.requester import Requester
        from roce.emu.core.responder import Responder

        if self.qp_type == QPType.IBV_QPT_RC and self.recovery.selective:
            from roce.emu.core.selective import SRCompleter, SRRequester, SRResponder

            self.transport = Transport.RC
            self.requester, self.responder = SRRequester(self), SRResponder(self)
            self.completer: Completer | None = SRCompleter(self)
        elif self.qp_type == QPType.IBV_QPT_RC:
            self.transport = Transport.RC
            self.requester, self.responder = Requester(self), Responder(self)
            self.completer = Completer(self)
        elif self.qp_type == QPType.IBV_QPT_UC:
            from roce.emu.core.unreliable import UCRequester, UCResponder

            self.transport = Transport.UC
            self.requester, self.responder = UCRequester(self), UCResponder(self)
            self.completer = None
        else:
            from roce.emu.core.unreliable import UDRequester, UDResponder

            self.transport = Transport.UD
            self.requester, self.responder = UDRequester(self), UDResponder(self)
            self.completer = None

    def set_recovery(self, config: RecoveryConfig) -> None:
        """Go-back-N or selective repeat (``roce.emu.core.recovery``); only in RESET, since the
        two ends must agree before the first packet (as a NIC's per-QP setting)."""
        if self.state != S.IBV_QPS_RESET:
            raise RecoveryError(f"recovery mode set on QP 0x{self.qpn:x} in state "
                                f"{self.state.name}; set it in RESET")
        self.recovery = config
        self._make_parts()

    # -- control ---------------------------------------------------------------------------

    def modify(self, attr: QPAttr, mask: int) -> None:
        """ibv_modify_qp: check the transition against the state table, then apply."""
        mask = QPAttrMask(mask)
        m = int(mask)  # plain int tests: IntFlag operators cost a call each (setup of many QPs)
        new = QPState(attr.qp_state) if m & _STATE else self.state
        check_transition(self.qp_type, self.state, new, mask)
        self.device.touch(self)
        a = self.attr
        for bit, name in _ATTR_FIELDS:
            if m & bit:
                setattr(a, name, getattr(attr, name))
        if m & _PATH_MTU:
            self.mtu = mtu_bytes(a.path_mtu)
        if m & _AV:
            ah = a.ah_attr
            self.builder = FrameBuilder(
                Path(self.device.mac, ah.dmac or self.device.peer_mac(ah.dip), self.device.ip,
                     ah.dip, ah.ipv6 or ":" in ah.dip, ah.sport, ah.traffic_class), self.qpn)
        if m & _RQ_PSN:
            self.responder.reset(a.rq_psn)
        if m & _SQ_PSN:
            self.requester.reset(a.sq_psn)
        if m & _RETRIES:
            self.requester.reset_retries()
        if new == S.IBV_QPS_ERR and self.state != S.IBV_QPS_ERR:
            self.state = new
            self.flush()
            return
        if new == S.IBV_QPS_RESET:
            self.rq.clear()
            self._make_parts()
        self.state = new

    @property
    def timeout_ns(self) -> int:
        """Local ACK timeout: 4.096 us * 2^timeout; 0 means no timer."""
        t = self.attr.timeout
        return 0 if t == 0 else ACK_TIMEOUT_UNIT_NS << min(t, 31)

    # -- events ----------------------------------------------------------------------------

    def post_send(self, now: int, wr: SendWR) -> None:
        if self.state not in CAN_POST_SEND:
            raise QPStateError(f"post_send in state {self.state.name}")
        self.requester.post(now, wr)
        self.requester.pump(now)
        self.device.touch(self)

    def post_recv(self, wr: RecvWR) -> None:
        if self.state not in CAN_POST_RECV:
            raise QPStateError(f"post_recv in state {self.state.name}")
        if len(wr.sg_list) > self.cap.max_recv_sge:
            raise ValueError(f"recv WR has {len(wr.sg_list)} SGEs, max_recv_sge is "
                             f"{self.cap.max_recv_sge}")
        if len(self.rq) >= self.cap.max_recv_wr:
            raise ValueError("receive queue is full")
        self.device.touch(self)
        wqe = RecvWQE(wr, sum(s.length for s in wr.sg_list))
        if self.state == S.IBV_QPS_ERR:
            self.complete_recv(wqe, WCStatus.IBV_WC_WR_FLUSH_ERR)
            return
        self.rq.append(wqe)

    def receive(self, now: int, pkt: Incoming) -> None:
        if self.state not in CAN_RECEIVE:
            return  # RESET/INIT/ERR drop everything (IBA 10.3.1)
        if pkt.op.transport is not self.transport:
            self.counters.wrong_transport += 1  # e.g. a UC packet for an RC QP: drop
            return
        self.counters.packets_received += 1
        if pkt.ecn == ECN_CE:
            self.counters.ce_received += 1
        if pkt.request:
            self.responder.receive(now, pkt)
        elif self.completer is not None and self.state in _ANSWERED:
            self.completer.receive(now, pkt)
        self.requester.pump(now)

    def on_timer(self, now: int) -> None:
        self.requester.on_timer(now)
        self.requester.pump(now)

    def timers(self) -> dict[str, int]:
        """Every armed timer of this QP by name (virtual ns): the requester's (``ack_timeout``,
        ``rnr``) and any a driver added to ``extra_timers`` (congestion control's)."""
        t = self.requester.timers()
        if self.extra_timers:
            t = {**t, **self.extra_timers}
        return t

    def deadline(self) -> int | None:
        """The earliest named timer, or None."""
        if self.extra_timers:
            return min(self.timers().values(), default=None)
        return self.requester.deadline()

    # -- shared by the three parts ---------------------------------------------------------

    def send_frame(self, frame: bytes) -> None:
        self.counters.packets_sent += 1
        self.tx.append(frame)

    def send_request(self, frame: bytes, tag: tuple[int, int]) -> None:
        """A request frame: ``tag`` (its PSN and the last PSN it covers) goes back to the
        requester when a NIC puts it on the wire."""
        if not self.timers_at_wire:
            self.send_frame(frame)
            return
        self.counters.packets_sent += 1
        self.tx.append_request(frame, tag)

    def discard_unsent_requests(self) -> list[int]:
        """Take back the request packets built ahead into this QP's own transmit list that no
        NIC has taken yet; return their PSNs, in build order.

        A go-back-N rewind calls this: a hardware NIC builds a packet when its scheduler
        picks the QP, so after a rewind the next packet on the wire is the resent PSN.  The
        frames an emulated NIC holds ahead (``tx_limit``; paced or paused QPs hold them for
        long) would otherwise leave after the rewind, out of sequence at the responder, and
        take their place in a congested queue.  A device-wide list (``tx_limit`` None) is
        drained at once and is left alone; responses and ACKs in the list stay."""
        tx = self.tx
        if self.tx_limit is None or not tx:
            return []
        keep, psns = [], []
        for f in tx:
            w = fast.walk(f)
            if w.status == OK and OPCODES[w.opcode].is_request:
                psns.append(fast.bth_unpack(f, w.bth_off)[6])
            else:
                keep.append(f)
        if psns:
            self.counters.packets_sent -= len(psns)
            replace = getattr(tx, "replace", None)  # a NIC's list (roce.emu.net.nic)
            if replace is not None:
                replace(keep)
            else:
                tx[:] = keep
        return psns

    def complete_recv(self, wqe: RecvWQE, status: WCStatus, opcode: WCOpcode =
                      WCOpcode.IBV_WC_RECV, byte_len: int = 0, imm: int | None = None,
                      invalidated: int | None = None, src_qp: int = 0) -> None:
        flags = 0
        if imm is not None:
            flags |= 2  # IBV_WC_WITH_IMM
        if invalidated is not None:
            flags |= 8  # IBV_WC_WITH_INV
        self.recv_cq.push(WC(wqe.wr.wr_id, status, opcode, byte_len, imm or 0, self.qpn,
                             src_qp, flags, invalidated or 0))

    def to_error(self) -> None:
        """Move to ERR and flush all outstanding work (IBV_WC_WR_FLUSH_ERR)."""
        if self.state != S.IBV_QPS_ERR:
            self.state = S.IBV_QPS_ERR
            self.flush()

    def flush(self) -> None:
        self.requester.flush()
        while self.rq:
            self.complete_recv(self.rq.popleft(), WCStatus.IBV_WC_WR_FLUSH_ERR)

    def remote_access_ok(self, need: int) -> bool:
        return bool(int(self.attr.qp_access_flags) & need)


_ATTR_FIELDS = (
    (int(QPAttrMask.IBV_QP_ACCESS_FLAGS), "qp_access_flags"),
    (int(QPAttrMask.IBV_QP_PKEY_INDEX), "pkey_index"),
    (int(QPAttrMask.IBV_QP_PORT), "port_num"),
    (int(QPAttrMask.IBV_QP_QKEY), "qkey"),
    (int(QPAttrMask.IBV_QP_AV), "ah_attr"),
    (int(QPAttrMask.IBV_QP_PATH_MTU), "path_mtu"),
    (int(QPAttrMask.IBV_QP_TIMEOUT), "timeout"),
    (int(QPAttrMask.IBV_QP_RETRY_CNT), "retry_cnt"),
    (int(QPAttrMask.IBV_QP_RNR_RETRY), "rnr_retry"),
    (int(QPAttrMask.IBV_QP_RQ_PSN), "rq_psn"),
    (int(QPAttrMask.IBV_QP_MAX_QP_RD_ATOMIC), "max_rd_atomic"),
    (int(QPAttrMask.IBV_QP_MIN_RNR_TIMER), "min_rnr_timer"),
    (int(QPAttrMask.IBV_QP_SQ_PSN), "sq_psn"),
    (int(QPAttrMask.IBV_QP_MAX_DEST_RD_ATOMIC), "max_dest_rd_atomic"),
    (int(QPAttrMask.IBV_QP_DEST_QPN), "dest_qp_num"),
    (int(QPAttrMask.IBV_QP_CAP), "cap"),
)
# the states whose requester takes answers (read once: an Enum's member through its class is
# a Python __getattr__ call, and this is read per packet)
_ANSWERED = (S.IBV_QPS_RTS, S.IBV_QPS_SQD)
_STATE = int(QPAttrMask.IBV_QP_STATE)
_PATH_MTU = int(QPAttrMask.IBV_QP_PATH_MTU)
_AV = int(QPAttrMask.IBV_QP_AV)
_RQ_PSN = int(QPAttrMask.IBV_QP_RQ_PSN)
_SQ_PSN = int(QPAttrMask.IBV_QP_SQ_PSN)
_RETRIES = int(QPAttrMask.IBV_QP_TIMEOUT | QPAttrMask.IBV_QP_RETRY_CNT)
