"""The verbs API, with pyverbs' names: Context, PD, MR, CQ, QP, QPInitAttr, QPCap, QPAttr,
SendWR, RecvWR, SGE, WC.  A thin edge over the sans-I/O device: it reads the driver's clock
(the simulated fabric's virtual time, or wall time on a real transport) and tells the driver
when there is new work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from roce.emu.core.constants import ALL_ACCESS, Access, QPAttrMask, QPState, QPType
from roce.emu.core.device import Device
from roce.emu.core.memory import MemoryRegion
from roce.emu.core.qp import AHAttr, QPAttr, QPCap, QueuePair
from roce.emu.core.states import QPStateError
from roce.emu.core.work import SGE, WC, RecvWR, SendWR

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

M = QPAttrMask


class Context:
    """An emulated RoCE device on a host.

    ``Context(name, ip, mac)`` alone is a device no one drives; a fabric (``Fabric.add_host``)
    or a transport attaches it and supplies the clock.
    """

    def __init__(self, name: str = "rxe0", ip: str = "10.0.0.1", mac: str | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        if mac is None:
            octets = [int(x) for x in ip.split(".")] if "." in ip else [0, 0, 0, 1]
            mac = "02:00:" + ":".join(f"{o:02x}" for o in octets[-4:])
        self.device = Device(name, mac, ip)
        self.clock: Callable[[], int] = clock or (lambda: 0)
        self.name = name

    @property
    def ip(self) -> str:
        return self.device.ip

    @property
    def mac(self) -> str:
        return self.device.mac

    @property
    def gid(self) -> str:
        """The RoCEv2 GID of an IPv4 address (IPv4-mapped IPv6)."""
        return self.ip if ":" in self.ip else f"::ffff:{self.ip}"

    def now(self) -> int:
        return self.clock()

    def __repr__(self) -> str:
        return f"<Context {self.name} {self.ip} {self.mac}>"

    def set_congestion_control(self, algorithm: Any = "dcqcn", profile: str | None = None,
                               params: Any = (), line_rate_gbps: float = 100.0) -> Any:
        """Congestion control for every QP of this device (``roce.emu.cc``): an algorithm
        name with a profile and ``NAME=VALUE`` overrides, or a ``CcConfig``; None turns it
        off.  The NIC that drives the device reads it (docs/congestion-control.md)."""
        self.cc_config = _cc_config(algorithm, profile, params, line_rate_gbps)
        self.device.kick()  # the driver picks it up for QPs that have not sent yet
        return self.cc_config

    def set_recovery(self, mode: Any = "sr", **knobs: int | str | None) -> Any:
        """Loss recovery for the QPs this device creates from now on (``roce.emu.core.recovery``):
        ``gbn`` (rxe's go-back-N, the default) or ``sr`` (IRN selective repeat) with knobs
        ``rto_low_ns``, ``rto_high_ns``, ``rto_n``, ``bdp_packets``, ``loss_rule`` (``rack``
        or ``dupthresh``); or a ``RecoveryConfig``."""
        from roce.emu.core.recovery import configure

        self.device.recovery = configure(mode, **knobs)
        return self.device.recovery


class PD:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx


class MR:
    """A registered memory region: ``buf`` is its bytes, ``addr`` its virtual address."""

    def __init__(self, pd: PD, length: int, access: int = Access.IBV_ACCESS_LOCAL_WRITE,
                 key: int = 0, content: Any = None) -> None:
        self.pd = pd
        self._mr: MemoryRegion = pd.ctx.device.memory.register(pd, length, Access(access), key,
                                                               content)

    buf = property(lambda self: self._mr.buf)
    # a region registered with a ``content`` (roce.emu.core.patterned) holds it, not ``buf``
    content = property(lambda self: self._mr.content)
    addr = property(lambda self: self._mr.addr)
    length = property(lambda self: self._mr.length)
    lkey = property(lambda self: self._mr.lkey)
    rkey = property(lambda self: self._mr.rkey)

    def read(self, length: int, offset: int = 0) -> bytes:
        return bytes(self._mr.buf[offset:offset + length])

    def write(self, data: bytes, length: int | None = None, offset: int = 0) -> None:
        data = bytes(data[:length] if length is not None else data)
        if offset + len(data) > self._mr.length:
            raise ValueError("write beyond the MR")
        self._mr.buf[offset:offset + len(data)] = data

    def sge(self, offset: int = 0, length: int | None = None) -> SGE:
        """An SGE over (part of) this MR."""
        n = self._mr.length - offset if length is None else length
        return SGE(self._mr.addr + offset, n, self._mr.lkey)

    def close(self) -> None:
        self.pd.ctx.device.memory.deregister(self._mr)


class AH:
    """An address handle for UD sends: ``AH(pd, attr=AHAttr(dip=..., dmac=...))``."""

    def __init__(self, pd: PD, attr: AHAttr) -> None:
        self.pd = pd
        self.attr = attr


class CQ:
    def __init__(self, ctx: Context, cqe: int = 4096, cq_context: object = None,
                 channel: object = None, comp_vector: int = 0) -> None:
        self.ctx = ctx
        self.cqe = cqe
        self.entries: deque[WC] = deque()
        self.overflow = False

    def push(self, wc: WC) -> None:
        if len(self.entries) >= self.cqe:
            self.overflow = True
            return
        self.entries.append(wc)

    def poll(self, num_entries: int = 1) -> list[WC]:
        out = []
        while self.entries and len(out) < num_entries:
            out.append(self.entries.popleft())
        return out

    def __len__(self) -> int:
        return len(self.entries)


@dataclass
class QPInitAttr:
    """What a QP is created with, as pyverbs' ``QPInitAttr``: its type, CQs and queue sizes."""

    qp_type: int = QPType.IBV_QPT_RC
    send_cq: CQ | None = None
    recv_cq: CQ | None = None
    cap: QPCap | None = None
    sq_sig_all: int = 1
    qp_context: object = None
    scq: CQ | None = None  # pyverbs' spelling
    rcq: CQ | None = None
    srq: object = None


class QP:
    def __init__(self, pd: PD, init_attr: QPInitAttr, qp_attr: QPAttr | None = None) -> None:
        send_cq = _first(init_attr.send_cq, init_attr.scq)
        recv_cq = _first(init_attr.recv_cq, init_attr.rcq, send_cq)
        if send_cq is None:
            raise ValueError("QPInitAttr needs a send CQ")
        self.pd = pd
        self.ctx = pd.ctx
        self.core: QueuePair = self.ctx.device.create_qp(
            pd, QPType(init_attr.qp_type), send_cq, recv_cq, init_attr.cap or QPCap(),
            bool(init_attr.sq_sig_all))

    @property
    def qp_num(self) -> int:
        return self.core.qpn

    @property
    def qp_state(self) -> QPState:
        return self.core.state

    def modify(self, attr: QPAttr, attr_mask: int) -> None:
        self.core.modify(attr, attr_mask)
        self.ctx.device.kick()

    def to_init(self, attr: QPAttr | None = None) -> None:
        attr = attr or QPAttr()
        attr.qp_state = QPState.IBV_QPS_INIT
        mask = M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT
        mask |= M.IBV_QP_QKEY if self.core.qp_type == QPType.IBV_QPT_UD else \
            M.IBV_QP_ACCESS_FLAGS
        self.modify(attr, mask)

    def to_rtr(self, attr: QPAttr) -> None:
        attr.qp_state = QPState.IBV_QPS_RTR
        mask = M.IBV_QP_STATE
        if self.core.qp_type == QPType.IBV_QPT_RC:
            mask |= (M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
                     | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER)
        elif self.core.qp_type == QPType.IBV_QPT_UC:
            mask |= M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
        self.modify(attr, mask)

    def to_rts(self, attr: QPAttr) -> None:
        attr.qp_state = QPState.IBV_QPS_RTS
        mask = M.IBV_QP_STATE | M.IBV_QP_SQ_PSN
        if self.core.qp_type == QPType.IBV_QPT_RC:
            mask |= (M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY
                     | M.IBV_QP_MAX_QP_RD_ATOMIC)
        self.modify(attr, mask)

    def post_send(self, wr: SendWR, bad_wr: object = None) -> None:
        self.core.post_send(self.ctx.now(), wr)
        self.ctx.device.kick()

    def post_recv(self, wr: RecvWR, bad_wr: object = None) -> None:
        self.core.post_recv(wr)
        self.ctx.device.kick()

    def close(self) -> None:
        self.ctx.device.destroy_qp(self.core)

    def set_congestion_control(self, algorithm: Any = "dcqcn", profile: str | None = None,
                               params: Any = (), line_rate_gbps: float = 100.0) -> Any:
        """This QP's own congestion control, over the device's (``Context``'s): set it before
        the QP first sends."""
        self.core.cc_config = _cc_config(algorithm, profile, params, line_rate_gbps)
        self.ctx.device.kick()
        return self.core.cc_config


    def set_recovery(self, mode: Any = "sr", **knobs: int | str | None) -> Any:
        """This QP's loss recovery (see ``Context.set_recovery``); in RESET only: both ends
        must agree before the first packet."""
        from roce.emu.core.recovery import configure

        cfg = configure(mode, **knobs)
        self.core.set_recovery(cfg)
        return cfg


def _cc_config(algorithm: Any, profile: str | None, params: Any,
               line_rate_gbps: float) -> Any:
    if algorithm is None or not isinstance(algorithm, str):
        return algorithm  # None, or a ready CcConfig
    from roce.emu.cc import configure

    return configure(algorithm, profile, params, line_rate_gbps)


def _first(*items: object) -> Any:
    return next((i for i in items if i is not None), None)


def connect(a: QP, b: QP, *, path_mtu: int = 5, access: int | None = None, psn_a: int = 0,
            psn_b: int = 0, timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7,
            min_rnr_timer: int = 12, max_rd_atomic: int = 16, traffic_class: int = 0,
            resolve: bool = False) -> None:
    """Bring two RC/UC QPs through INIT -> RTR -> RTS toward each other (the out-of-band
    exchange, done in-process).  ``psn_a`` is the first PSN ``a`` sends; ``traffic_class``
    (DSCP << 2 | ECN) marks both directions' IP headers; ``resolve`` leaves the next-hop MAC
    to each device's neighbour table (a routed network: the gateway's MAC)."""
    if access is None:
        access = ALL_ACCESS
    for me, peer, my_psn, peer_psn in ((a, b, psn_a, psn_b), (b, a, psn_b, psn_a)):
        me.to_init(QPAttr(qp_access_flags=access))
        ah = AHAttr(dmac="" if resolve else peer.ctx.mac, dip=peer.ctx.ip,
                    traffic_class=traffic_class)
        me.to_rtr(QPAttr(path_mtu=path_mtu, dest_qp_num=peer.qp_num, rq_psn=peer_psn,
                         max_dest_rd_atomic=max_rd_atomic, min_rnr_timer=min_rnr_timer,
                         ah_attr=ah))
        me.to_rts(QPAttr(sq_psn=my_psn, timeout=timeout, retry_cnt=retry_cnt,
                         rnr_retry=rnr_retry, max_rd_atomic=max_rd_atomic))


__all__ = ["AH", "Context", "PD", "MR", "CQ", "QP", "QPInitAttr", "QPCap", "QPAttr", "AHAttr",
           "SendWR", "RecvWR", "SGE", "WC", "QPStateError", "connect"]
