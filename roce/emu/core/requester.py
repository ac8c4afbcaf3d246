"""The requester: turns send work requests into request packets (rxe ``rxe_req.c``).

Rules (docs/protocol.md):
- a message is cut into path-MTU packets First/Middle.../Last or Only; RETH on the first
  WRITE packet, ImmDt/IETH on the last;
- each packet takes the next 24-bit PSN; a READ request takes max(1, ceil(len/MTU)) PSNs;
- AckReq on the last packet of a message and every MAX_PKT_PER_ACK packets;
- at most MAX_UNACKED_PSNS PSNs in flight and ``max_rd_atomic`` READ/ATOMIC outstanding;
- retransmission is go-back-N from a PSN (``rewind``), on a PSN-sequence NAK, an RNR NAK
  once its timer ran out, an implied NAK, or the local ACK timeout; ``retry_cnt`` (timeouts,
  sequence NAKs) and ``rnr_retry`` (7 = infinite) bound it.
"""

from __future__ import annotations

from roce.emu.core.constants import (
    MAX_PKT_PER_ACK,
    MAX_UNACKED_PSNS,
    RNR_RETRY_INFINITE,
    QPState,
    WROpcode,
)
from roce.emu.core.constants import SendFlags as F
from roce.emu.core.constants import WCStatus as St
from roce.emu.core.frames import select
from roce.emu.core.memory import AccessError, take_at
from roce.emu.core.parts import RequesterPart
from roce.emu.core.work import WR_KINDS, SendWQE, SendWR, complete_send
from roce.opcodes import Opcode, Operation, Position, Transport, lookup
from roce.psn import PSN_MASK, psn_diff

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any


class Requester(RequesterPart):
    __slots__ = ("qp", "sq", "cur", "cur_pkt", "psn", "una", "noack", "timer", "rnr_until",
                 "rnr_psn", "retry_left", "rnr_left", "high", "wire_high", "retrying", "window",
                 "ack_every", "_row_wqe", "_row_pos", "_row")

    def __init__(self, qp: Any) -> None:
        self.qp = qp
        self.sq: list[SendWQE] = []  # not yet completed, in order
        self.cur = 0  # index in sq of the WQE being transmitted
        self.cur_pkt = 0  # next packet (READ: next response index to ask for) of sq[cur]
        self.psn = 0  # next PSN for a new message
        self.una = 0  # oldest PSN not yet acknowledged
        self.noack = 0
        self.timer: int | None = None  # retransmission deadline
        self.rnr_until: int | None = None
        self.rnr_psn = 0
        self.retry_left = 7
        self.rnr_left = 7
        self.high: int | None = None  # highest PSN sent so far: below it is a retransmission
        # highest PSN a request frame that left the NIC covers (``on_wire``; None: none yet)
        self.wire_high: int | None = None
        self.retrying: int | None = None  # PSN of the retry in progress
        self.window = MAX_UNACKED_PSNS  # PSNs in flight at most (selective repeat: the BDP)
        self.ack_every = MAX_PKT_PER_ACK  # AckReq at least every this many packets
        # the opcode row of the last data packet and what chose it (its WQE, its position):
        # a message's middle packets take the same row, looked up once (``_data_row``)
        self._row_wqe: SendWQE | None = None
        self._row_pos: Position | None = None
        self._row: Opcode | None = None

    def reset(self, sq_psn: int) -> None:
        self.psn = self.una = sq_psn & PSN_MASK

    def reset_retries(self) -> None:
        self.retry_left = self.qp.attr.retry_cnt
        self.rnr_left = self.qp.attr.rnr_retry

    def clear(self) -> None:
        self.sq.clear()
        self.cur = self.cur_pkt = 0
        self.timer = self.rnr_until = None

    # -- posting ---------------------------------------------------------------------------

    def post(self, now: int, wr: SendWR) -> None:
        qp = self.qp
        kind = WR_KINDS.get(wr.opcode)
        if kind is None:
            raise ValueError(f"unsupported send opcode {wr.opcode}")
        if len(wr.sg_list) > qp.cap.max_send_sge:
            raise ValueError(f"send WR has {len(wr.sg_list)} SGEs, max_send_sge is "
                             f"{qp.cap.max_send_sge}")
        if len(self.sq) >= qp.cap.max_send_wr:
            raise ValueError("send queue is full")
        op, imm, inv, wc_op = kind
        length = sum(s.length for s in wr.sg_list)
        signaled = qp.sq_sig_all or bool(wr.send_flags & F.IBV_SEND_SIGNALED)
        wqe = SendWQE(wr, op, imm, inv, wc_op, length, signaled)
        mtu = qp.mtu
        if op is Operation.RDMA_READ:
            wqe.npkts, wqe.npsn = 1, max(1, -(-length // mtu))
        elif op is Operation.ATOMIC:
            wqe.npkts = wqe.npsn = 1
        else:
            wqe.npkts = wqe.npsn = max(1, -(-length // mtu))
        if qp.state == QPState.IBV_QPS_ERR:
            self._complete(wqe, St.IBV_WC_WR_FLUSH_ERR)
            return
        if op is Operation.ATOMIC and length != 8:
            self._local_error(wqe, St.IBV_WC_LOC_LEN_ERR)
            return
        self.sq.append(wqe)

    # -- transmission ----------------------------------------------------------------------

    def pump(self, now: int) -> None:
        """Send what the window allows."""
        qp = self.qp
        if qp.state != _RTS or self.rnr_until is not None:
            return
        limit = qp.tx_limit
        at_wire = qp.timers_at_wire  # the timer starts in ``on_wire`` instead
        while self.cur < len(self.sq):
            if limit is not None and len(qp.tx) >= limit:
                return  # the NIC scheduler pumps again when it takes a frame
            wqe = self.sq[self.cur]
            if wqe.first_psn < 0:
                if wqe.rd_atomic and self._rd_atomic_outstanding() >= max(
                        1, qp.attr.max_rd_atomic):
                    return
                if psn_diff(self.psn, self.una) >= self.window:
                    return
                if not self._start(wqe):
                    return
            psn = (wqe.first_psn + self.cur_pkt) & PSN_MASK
            if psn_diff(psn, self.una) >= self.window:
                return
            self._send_packet(wqe, self.cur_pkt, psn)
            if self.timer is None and not at_wire and qp.timeout_ns:  # ``_arm``, inline
                self.timer = now + qp.timeout_ns
            if wqe.operation is _READ or self.cur_pkt + 1 >= wqe.npkts:
                self.cur += 1
                self.cur_pkt = 0
            else:
                self.cur_pkt += 1

    def _arm(self, now: int) -> None:
        """Start the retransmission timer if it is not running."""
        if self.timer is None and self.qp.timeout_ns:
            self.timer = now + self.qp.timeout_ns

    def _rd_atomic_outstanding(self) -> int:
        return sum(1 for w in self.sq[:self.cur] if w.rd_atomic)

    def _start(self, wqe: SendWQE) -> bool:
        """Assign PSNs and read the local data; False if the QP went to ERR."""
        qp = self.qp
        try:
            # the data to send, or a READ's destination: the SGEs must name local memory
            # (zero-length ones are not looked up, as in rxe: an empty READ or WRITE may
            # name an SGE outside any MR)
            views = qp.device.memory.views(qp.pd, wqe.wr.sg_list)
        except AccessError:
            self._local_error(wqe, St.IBV_WC_LOC_PROT_ERR)
            return False
        if wqe.operation is not Operation.RDMA_READ:
            wqe.views = views
        wqe.first_psn = self.psn
        self.psn = (self.psn + wqe.npsn) & PSN_MASK
        return True

    def _send_packet(self, wqe: SendWQE, index: int, psn: int) -> None:
        qp = self.qp
        key = psn  # the PSN the scoreboard knows this frame by (a READ's may differ)
        wr = wqe.wr
        op = wqe.operation
        mtu = qp.mtu
        ext: dict[str, dict] | None = None  # made for a row with extended headers only
        payload: bytes | memoryview = b""
        at = n = 0  # the payload: payload[at:at + n]
        if op is _READ:
            # A READ that restarts asks only for the responses still missing.
            skip = wqe.read_next * mtu
            psn = (wqe.first_psn + wqe.read_next) & PSN_MASK
            row = select(_RC, op, _ONLY)
            ext = {"reth": {"va": wr.remote_addr + skip, "r_key": wr.rkey,
                            "dmalen": max(min(wqe.length, self._read_end(wqe) * mtu) - skip,
                                          0)}}
            ackreq, last = True, True
        elif op is _ATOMIC:
            row = _ATOMIC_ROWS[wr.opcode]
            cas = wr.opcode == WROpcode.IBV_WR_ATOMIC_CMP_AND_SWP
            ext = {"atomiceth": {"va": wr.remote_addr, "r_key": wr.rkey,
                                 "swapdt": (wr.swap if cas else wr.compare_add) & _U64,
                                 "cmpdt": (wr.compare_add if cas else 0) & _U64}}
            ackreq, last = True, True
        else:
            pos = _position(index, wqe.npkts)
            last = pos is _LAST or pos is _ONLY
            payload, at, n = take_at(wqe.views, index * mtu, mtu)
            row, reth = self._data_row(wqe, index, pos, last, n)
            headers = row.headers
            if headers:  # (a Middle packet has none: no dictionary made for it)
                ext = {}
                if reth is not None:
                    ext["reth"] = reth
                if "immdt" in headers:
                    ext["immdt"] = {"immdt": wr.imm_data & 0xFFFFFFFF}
                if "ieth" in headers:
                    ext["ieth"] = {"ieth": wr.invalidate_rkey & 0xFFFFFFFF}
            self.noack += 1
            ackreq = last or self.noack >= self.ack_every
        if ackreq:
            self.noack = 0
        frame = qp.builder.build(row, qp.attr.dest_qp_num, psn, ext, payload, at, n,
                                 ackreq=ackreq, se=bool(last and wr.send_flags & _SOLICITED))
        end = (psn + (wqe.npsn - 1 - wqe.read_next if op is _READ else 0)) \
            & PSN_MASK
        high = self.high
        if high is None:
            self.high = end
        else:
            d = psn_diff(psn, high)
            if d <= 0:
                qp.counters.retransmitted += 1
            # end is psn but for a READ: reuse the distance already taken (once per packet)
            if (d if end == psn else psn_diff(end, high)) > 0:
                self.high = end
        if qp.timers_at_wire:
            qp.send_request(frame, (key, end))
        else:
            qp.send_frame(frame)

    # -- the wire (a NIC that builds frames ahead: roce.emu.net.nic) ---------------------

    def on_wire(self, now: int, psn: int, end: int) -> None:
        """A request frame for ``psn`` (covering up to ``end``) left the NIC at ``now``.

        A NIC that builds frames ahead holds them while its pacer or PFC holds the QP; the
        local ACK timeout counts from transmission (rxe arms it when it sends, rxe_req.c),
        so it starts here: when nothing sent before is still unacknowledged, or when this
        frame resends the oldest unacknowledged PSN (a retry restarts it)."""
        high = self.wire_high
        first = high is None or psn_diff(high, self.una) < 0 or psn == self.una
        if high is None or psn_diff(end, high) > 0:
            self.wire_high = end
        if self.sq and self.rnr_until is None and (first or self.timer is None):
            self._start_timer(now)

    def _start_timer(self, now: int) -> None:
        if self.qp.timeout_ns:
            self.timer = now + self.qp.timeout_ns

    def _nothing_on_wire(self) -> bool:
        """Every request frame that left the NIC is acknowledged (frames built ahead may
        still wait in it): no timer runs until the next one leaves (``on_wire``)."""
        high = self.wire_high
        return high is None or psn_diff(high, self.una) < 0

    def _read_end(self, wqe: SendWQE) -> int:
        """The response index a READ (re)request asks up to, exclusive: go-back-N asks for
        every response from ``read_next`` on."""
        return wqe.npsn

    def _data_row(self, wqe: SendWQE, index: int, pos: Position, last: bool,
                  nbytes: int) -> tuple[Opcode, dict | None]:
        """The opcode row and RETH of one SEND/WRITE packet: RETH on the first (IBA 9.4)."""
        if wqe is self._row_wqe and pos is self._row_pos:
            row = self._row  # (the same WQE and position: the same row)
        else:
            row = select(_RC, wqe.operation, pos, wqe.immediate and last,
                         wqe.invalidate and last)
            self._row_wqe, self._row_pos, self._row = wqe, pos, row
        if "reth" not in row.headers:
            return row, None
        wr = wqe.wr
        return row, {"va": wr.remote_addr, "r_key": wr.rkey, "dmalen": wqe.length}

    # -- go-back-N ---------------------------------------------------------------------------

    def rewind(self, psn: int) -> None:
        """Resend from ``psn``: the WQE holding it and everything after it."""
        for i, wqe in enumerate(self.sq):
            if wqe.first_psn < 0:
                break
            off = psn_diff(psn, wqe.first_psn)
            if 0 <= off < wqe.npsn:
                self.cur = i
                if wqe.operation is Operation.RDMA_READ:
                    wqe.read_next = max(wqe.read_next, off)
                    self.cur_pkt = 0
                else:
                    self.cur_pkt = off
                return
        # nothing matches (already completed): resend from the oldest outstanding
        self.cur, self.cur_pkt = 0, 0

    def retry(self, now: int, psn: int, timeout: bool = False) -> None:
        """Retransmission after a timeout, a sequence NAK or an implied NAK.

        NAKs and implied NAKs for a PSN already being retried are ignored until progress is
        made (as rxe's ``started_retry``): one lost packet costs one retry, not one per ACK.
        """
        if not timeout and self.retrying == psn:
            return
        self.retrying = psn
        if self.retry_left <= 0:
            self.qp.completer.fail_head(St.IBV_WC_RETRY_EXC_ERR)
            return
        self.retry_left -= 1
        self.rewind(psn)
        self._discard_unsent()
        self.timer = now + self.qp.timeout_ns if self.qp.timeout_ns else None

    def _discard_unsent(self) -> None:
        """After a rewind: frames built ahead and not yet on the wire are taken back
        (``QueuePair.discard_unsent_requests``).  When they ran up to the highest PSN, that
        part was never sent: ``high`` comes down to just below them, so resending those PSNs
        is not counted as a retransmission."""
        psns = self.qp.discard_unsent_requests()
        if psns and self.high is not None and psns[-1] == self.high:
            self.high = (psns[0] - 1) & PSN_MASK

    def rnr_wait(self, now: int, psn: int, wait_ns: int) -> None:
        if self.qp.attr.rnr_retry != RNR_RETRY_INFINITE:
            if self.rnr_left <= 0:
                self.qp.completer.fail_head(St.IBV_WC_RNR_RETRY_EXC_ERR)
                return
            self.rnr_left -= 1
        self.rewind(psn)
        self.rnr_until = now + wait_ns
        self.rnr_psn = psn
        self.timer = None

    def on_timer(self, now: int) -> None:
        if self.rnr_until is not None and now >= self.rnr_until:
            self.rnr_until = None
            if self.qp.timeout_ns:
                self.timer = now + self.qp.timeout_ns
            return
        if self.timer is not None and now >= self.timer:
            self.timer = None
            if not self.sq or self.sq[0].first_psn < 0:
                return
            self.qp.counters.timeouts += 1
            self.retry(now, self.una, timeout=True)

    def timers(self) -> dict[str, int]:
        """The armed timers by name.  While an RNR wait runs, the ACK timer is suspended."""
        if self.rnr_until is not None:
            return {"rnr": self.rnr_until}
        return {} if self.timer is None else {"ack_timeout": self.timer}

    def deadline(self) -> int | None:
        """The earliest of ``timers()`` (spelled out: it runs on every event)."""
        return self.rnr_until if self.rnr_until is not None else self.timer

    def progress(self, now: int) -> None:
        """Called by the completer when an ACK moved ``una`` forward."""
        self.reset_retries()
        self.retrying = None
        if self.cur == 0 and self.cur_pkt == 0 and (not self.sq or self.sq[0].first_psn < 0):
            self.timer = None
        elif self.qp.timers_at_wire and self._nothing_on_wire():
            self.timer = None
        elif self.qp.timeout_ns:
            self.timer = now + self.qp.timeout_ns

    # -- completion helpers --------------------------------------------------------------

    def pop_head(self) -> SendWQE:
        wqe = self.sq.pop(0)
        if self.cur > 0:
            self.cur -= 1
        else:
            self.cur_pkt = 0
        return wqe

    def _complete(self, wqe: SendWQE, status: St) -> None:
        complete_send(self.qp, wqe, status)

    def _local_error(self, wqe: SendWQE, status: St) -> None:
        """A local error on ``wqe``: the QP goes to ERR; completions stay in posting order
        (older work flushed first, then this WR with ``status``, then the rest flushed)."""
        if wqe not in self.sq:
            self.sq.append(wqe)
        wqe.error = status
        self.qp.to_error()

    def flush(self) -> None:
        while self.sq:
            wqe = self.sq.pop(0)
            self._complete(wqe, wqe.error or St.IBV_WC_WR_FLUSH_ERR)
        self.cur = self.cur_pkt = 0
        self.timer = self.rnr_until = None


def _position(index: int, npkts: int) -> Position:
    if npkts <= 1:
        return _ONLY
    if index == 0:
        return _FIRST
    return _LAST if index == npkts - 1 else _MIDDLE


# Enum members the per-packet path compares against, as module names: reading one off its
# Enum class goes through the metaclass each time (about 50 ns), and these run per packet.
_READ, _ATOMIC = Operation.RDMA_READ, Operation.ATOMIC
_RC = Transport.RC
_SOLICITED = int(F.IBV_SEND_SOLICITED)
_RTS = QPState.IBV_QPS_RTS
_FIRST, _MIDDLE, _LAST, _ONLY = Position.FIRST, Position.MIDDLE, Position.LAST, Position.ONLY


_U64 = (1 << 64) - 1
_ATOMIC_ROWS = {WROpcode.IBV_WR_ATOMIC_CMP_AND_SWP: lookup("RC_COMPARE_SWAP"),
                WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD: lookup("RC_FETCH_ADD")}
