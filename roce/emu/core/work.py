"""Work requests, scatter/gather entries and completions, with pyverbs' field names, and the
emulator's internal work queue entries."""

from __future__ import annotations

from dataclasses import dataclass, field

from roce.emu.core.constants import WCOpcode, WCStatus, WROpcode
from roce.opcodes import Operation

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any


@dataclass
class SGE:
    """One scatter/gather element (``struct ibv_sge``)."""

    addr: int
    length: int
    lkey: int


@dataclass
class SendWR:
    """A send work request (``struct ibv_send_wr``)."""

    wr_id: int = 0
    opcode: int = WROpcode.IBV_WR_SEND
    sg_list: list[SGE] = field(default_factory=list)
    num_sge: int | None = None
    send_flags: int = 0
    remote_addr: int = 0
    rkey: int = 0
    imm_data: int = 0
    invalidate_rkey: int = 0
    compare_add: int = 0
    swap: int = 0
    # UD: address handle, remote QPN and Q_Key
    ah: object = None
    remote_qpn: int = 0
    remote_qkey: int = 0


@dataclass
class RecvWR:
    """A receive work request (``struct ibv_recv_wr``)."""

    wr_id: int = 0
    sg_list: list[SGE] = field(default_factory=list)
    num_sge: int | None = None


@dataclass
class WC:
    """A work completion (``struct ibv_wc``)."""

    wr_id: int
    status: WCStatus
    opcode: WCOpcode
    byte_len: int = 0
    imm_data: int = 0
    qp_num: int = 0
    src_qp: int = 0
    wc_flags: int = 0
    invalidated_rkey: int = 0
    vendor_err: int = 0

    def __repr__(self) -> str:
        return (f"WC(wr_id={self.wr_id}, status={WCStatus(self.status).name}, "
                f"opcode={WCOpcode(self.opcode).name}, byte_len={self.byte_len}, "
                f"imm_data={self.imm_data:#x}, qp_num={self.qp_num:#x})")


# WR opcode -> (operation, immediate, invalidate, completion opcode)
WR_KINDS: dict[int, tuple[Operation, bool, bool, WCOpcode]] = {
    WROpcode.IBV_WR_SEND: (Operation.SEND, False, False, WCOpcode.IBV_WC_SEND),
    WROpcode.IBV_WR_SEND_WITH_IMM: (Operation.SEND, True, False, WCOpcode.IBV_WC_SEND),
    WROpcode.IBV_WR_SEND_WITH_INV: (Operation.SEND, False, True, WCOpcode.IBV_WC_SEND),
    WROpcode.IBV_WR_RDMA_WRITE: (Operation.RDMA_WRITE, False, False,
                                 WCOpcode.IBV_WC_RDMA_WRITE),
    WROpcode.IBV_WR_RDMA_WRITE_WITH_IMM: (Operation.RDMA_WRITE, True, False,
                                          WCOpcode.IBV_WC_RDMA_WRITE),
    WROpcode.IBV_WR_RDMA_READ: (Operation.RDMA_READ, False, False, WCOpcode.IBV_WC_RDMA_READ),
    WROpcode.IBV_WR_ATOMIC_CMP_AND_SWP: (Operation.ATOMIC, False, False,
                                         WCOpcode.IBV_WC_COMP_SWAP),
    WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD: (Operation.ATOMIC, False, False,
                                           WCOpcode.IBV_WC_FETCH_ADD),
}


@dataclass(eq=False)
class SendWQE:
    """A posted send work request and its transmission state."""

    wr: SendWR
    operation: Operation
    immediate: bool
    invalidate: bool
    wc_opcode: WCOpcode
    length: int
    signaled: bool
    npkts: int = 0  # packets this message takes on the wire (READ: the request, 1)
    npsn: int = 0  # PSNs it consumes (READ: one per response packet)
    first_psn: int = -1  # assigned at first transmission
    views: list = field(default_factory=list)  # the local memory it sends (memoryviews)
    read_next: int = 0  # READ: next response packet index expected
    done: bool = False
    error: WCStatus | None = None  # a local error found for this WR (completed at flush)

    @property
    def rd_atomic(self) -> bool:
        return self.operation in (Operation.RDMA_READ, Operation.ATOMIC)


@dataclass(eq=False)
class RecvWQE:
    """A posted receive request and the bytes its scatter list can take."""

    wr: RecvWR
    length: int


def complete_send(qp: Any, wqe: SendWQE, status: WCStatus) -> None:
    """Put a send WQE's completion on the send CQ: always for an error, for success only
    when it was signaled (IBA 10.8.3; rxe ``do_complete``).  RC, UC and UD share it."""
    if status != WCStatus.IBV_WC_SUCCESS or wqe.signaled:
        ok = status == WCStatus.IBV_WC_SUCCESS
        qp.send_cq.push(WC(wqe.wr.wr_id, status, wqe.wc_opcode,
                           wqe.length if ok else 0, 0, qp.qpn))
