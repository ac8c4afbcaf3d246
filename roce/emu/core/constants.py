"""Verbs constants with the names pyverbs users know (``pyverbs.enums``), and the rxe limits
the emulator applies (docs/protocol.md)."""

from __future__ import annotations

from enum import IntEnum, IntFlag


class QPType(IntEnum):
    IBV_QPT_RC = 2
    IBV_QPT_UC = 3
    IBV_QPT_UD = 4


class QPState(IntEnum):
    IBV_QPS_RESET = 0
    IBV_QPS_INIT = 1
    IBV_QPS_RTR = 2
    IBV_QPS_RTS = 3
    IBV_QPS_SQD = 4
    IBV_QPS_SQE = 5
    IBV_QPS_ERR = 6


class Access(IntFlag):
    IBV_ACCESS_LOCAL_WRITE = 1
    IBV_ACCESS_REMOTE_WRITE = 2
    IBV_ACCESS_REMOTE_READ = 4
    IBV_ACCESS_REMOTE_ATOMIC = 8


class WROpcode(IntEnum):
    IBV_WR_RDMA_WRITE = 0
    IBV_WR_RDMA_WRITE_WITH_IMM = 1
    IBV_WR_SEND = 2
    IBV_WR_SEND_WITH_IMM = 3
    IBV_WR_RDMA_READ = 4
    IBV_WR_ATOMIC_CMP_AND_SWP = 5
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6
    IBV_WR_SEND_WITH_INV = 9


class SendFlags(IntFlag):
    IBV_SEND_FENCE = 1
    IBV_SEND_SIGNALED = 2
    IBV_SEND_SOLICITED = 4
    IBV_SEND_INLINE = 8


class WCStatus(IntEnum):
    IBV_WC_SUCCESS = 0
    IBV_WC_LOC_LEN_ERR = 1
    IBV_WC_LOC_QP_OP_ERR = 2
    IBV_WC_LOC_PROT_ERR = 4
    IBV_WC_WR_FLUSH_ERR = 5
    IBV_WC_BAD_RESP_ERR = 7
    IBV_WC_LOC_ACCESS_ERR = 8
    IBV_WC_REM_INV_REQ_ERR = 9
    IBV_WC_REM_ACCESS_ERR = 10
    IBV_WC_REM_OP_ERR = 11
    IBV_WC_RETRY_EXC_ERR = 12
    IBV_WC_RNR_RETRY_EXC_ERR = 13
    IBV_WC_GENERAL_ERR = 21


class WCOpcode(IntEnum):
    IBV_WC_SEND = 0
    IBV_WC_RDMA_WRITE = 1
    IBV_WC_RDMA_READ = 2
    IBV_WC_COMP_SWAP = 3
    IBV_WC_FETCH_ADD = 4
    IBV_WC_RECV = 128
    IBV_WC_RECV_RDMA_WITH_IMM = 129


class WCFlags(IntFlag):
    IBV_WC_GRH = 1
    IBV_WC_WITH_IMM = 2
    IBV_WC_WITH_INV = 8


class MTU(IntEnum):
    IBV_MTU_256 = 1
    IBV_MTU_512 = 2
    IBV_MTU_1024 = 3
    IBV_MTU_2048 = 4
    IBV_MTU_4096 = 5


class QPAttrMask(IntFlag):
    IBV_QP_STATE = 1 << 0
    IBV_QP_CUR_STATE = 1 << 1
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2
    IBV_QP_ACCESS_FLAGS = 1 << 3
    IBV_QP_PKEY_INDEX = 1 << 4
    IBV_QP_PORT = 1 << 5
    IBV_QP_QKEY = 1 << 6
    IBV_QP_AV = 1 << 7
    IBV_QP_PATH_MTU = 1 << 8
    IBV_QP_TIMEOUT = 1 << 9
    IBV_QP_RETRY_CNT = 1 << 10
    IBV_QP_RNR_RETRY = 1 << 11
    IBV_QP_RQ_PSN = 1 << 12
    IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13
    IBV_QP_ALT_PATH = 1 << 14
    IBV_QP_MIN_RNR_TIMER = 1 << 15
    IBV_QP_SQ_PSN = 1 << 16
    IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17
    IBV_QP_PATH_MIG_STATE = 1 << 18
    IBV_QP_CAP = 1 << 19
    IBV_QP_DEST_QPN = 1 << 20


def mtu_bytes(mtu: int) -> int:
    """Bytes of an IBV_MTU_* value (256 << (mtu - 1)); plain byte counts pass through."""
    if mtu in (256, 512, 1024, 2048, 4096):
        return mtu
    if 1 <= mtu <= 5:
        return 256 << (mtu - 1)
    raise ValueError(f"path MTU {mtu} is not one of IBV_MTU_256..IBV_MTU_4096")


# Module-level names, so `from roce.emu import IBV_WR_SEND` reads like pyverbs.
for _enum in (QPType, QPState, Access, WROpcode, SendFlags, WCStatus, WCOpcode, WCFlags, MTU,
              QPAttrMask):
    globals().update(_enum.__members__)

ALL_ACCESS = (Access.IBV_ACCESS_LOCAL_WRITE | Access.IBV_ACCESS_REMOTE_WRITE
              | Access.IBV_ACCESS_REMOTE_READ | Access.IBV_ACCESS_REMOTE_ATOMIC)

# rxe limits (docs/protocol.md; drivers/infiniband/sw/rxe/rxe_param.h)
MAX_UNACKED_PSNS = 128
MAX_PKT_PER_ACK = 64
ACK_TIMEOUT_UNIT_NS = 4096  # 4.096 us
RNR_RETRY_INFINITE = 7

# A UD receive's first 40 bytes hold the GRH, or are left undefined without one (IBA Vol 1
# 11.4.1.1; ibv_post_recv(3)): every UD receive buffer is that much longer than its message
GRH_BYTES = 40
