"""Shared helpers for the emulator tests (``from emu_helpers import pair``).

``tests/`` has no ``__init__.py``, so pytest's default "prepend" import mode puts it on
``sys.path`` and the test modules import this one by its bare name.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace

import roce
from roce.emu import (
    CQ,
    MR,
    PD,
    QP,
    Access,
    Fabric,
    LinkConfig,
    QPInitAttr,
    QPType,
    RecvWR,
    SendWR,
    WROpcode,
    connect,
)
from roce.headers import syndrome_type, syndrome_value
from roce.opcodes import Operation, Position
from roce.pcapio import PcapWriter, open_capture

FULL = (Access.IBV_ACCESS_LOCAL_WRITE | Access.IBV_ACCESS_REMOTE_WRITE
        | Access.IBV_ACCESS_REMOTE_READ | Access.IBV_ACCESS_REMOTE_ATOMIC)
MTUS = (256, 512, 1024, 2048, 4096)
IP_A, IP_B = "10.0.0.1", "10.0.0.2"

_LINK_FIELDS = set(LinkConfig.__dataclass_fields__)


def pair(seed: int = 0, mtu: int = 1024, psn_a: int = 0, psn_b: int = 0, size: int = 1 << 16,
         timeout: int = 8, retry_cnt: int = 7, rnr_retry: int = 7, min_rnr_timer: int = 1,
         access: int | None = None, max_rd_atomic: int = 16, pcap: str | None = None,
         config: LinkConfig | None = None, reverse: LinkConfig | None = None,
         mr_access: int = FULL, recovery: str = "gbn", **faults) -> SimpleNamespace:
    """Two hosts ``a`` (10.0.0.1) and ``b`` (10.0.0.2) on one link, a PD each, connected RC
    QPs ``qa``/``qb`` and MRs of ``size`` bytes with full access:

    - ``src`` (on a): seeded random bytes, the source of SENDs and WRITEs;
    - ``lbuf`` (on a): zeroed, the destination of READs and atomics;
    - ``dst`` (on b): seeded random bytes, the remote memory of WRITE/READ/atomics;
    - ``rbuf`` (on b): zeroed, receive buffers.

    ``faults`` are LinkConfig fields applied to both directions; ``config``/``reverse`` give
    per-direction configs instead.  ``pcap`` records every delivered frame to that path.
    ``spare`` is an idle QP created on b before ``qb``, so the QP numbers differ (a: 0x11,
    b: 0x12).  ``recovery`` is both devices' loss recovery (gbn or sr).
    """
    unknown = set(faults) - _LINK_FIELDS
    if unknown:
        raise TypeError(f"not LinkConfig fields: {sorted(unknown)}")
    fab = Fabric(seed=seed)
    a = fab.add_host("a", IP_A)
    b = fab.add_host("b", IP_B)
    if config is not None or reverse is not None:
        ab, ba = fab.connect(a, b, config=config or LinkConfig(**faults),
                             reverse=reverse or LinkConfig(**faults))
    else:
        ab, ba = fab.connect(a, b, **faults)
    if recovery != "gbn":
        a.set_recovery(recovery)
        b.set_recovery(recovery)
    pda, pdb = PD(a), PD(b)
    rng = random.Random(seed ^ 0x5EED)
    src = MR(pda, size, mr_access)
    lbuf = MR(pda, size, mr_access)
    dst = MR(pdb, size, mr_access)
    rbuf = MR(pdb, size, mr_access)
    src.write(rng.randbytes(size))
    dst.write(rng.randbytes(size))
    cqa, cqb = CQ(a), CQ(b)
    qa = QP(pda, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqa, recv_cq=cqa))
    spare = QP(pdb, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=CQ(b)))
    qb = QP(pdb, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqb, recv_cq=cqb))
    connect(qa, qb, path_mtu=mtu, psn_a=psn_a, psn_b=psn_b, timeout=timeout,
            retry_cnt=retry_cnt, rnr_retry=rnr_retry, min_rnr_timer=min_rnr_timer,
            access=access, max_rd_atomic=max_rd_atomic)
    writer = None
    if pcap is not None:
        writer = PcapWriter(str(pcap))
        fab.record(writer)
    return SimpleNamespace(fab=fab, a=a, b=b, ab=ab, ba=ba, pda=pda, pdb=pdb, src=src,
                           lbuf=lbuf, dst=dst, rbuf=rbuf, cqa=cqa, cqb=cqb, qa=qa, qb=qb,
                           spare=spare, mtu=mtu, writer=writer, pcap=pcap, seed=seed)


def poll_all(cq: CQ) -> list:
    return cq.poll(1 << 30)


# Virtual-time cap for a run: far beyond what any test needs (the lossiest runs end in
# ~50 ms), short enough that an emulator stuck in a retry loop fails a test instead of
# hanging it.
LIMIT_NS = 200_000_000


def run(p: SimpleNamespace, limit_ns: int = LIMIT_NS) -> None:
    """Run until idle, for at most ``limit_ns`` more virtual time (``run_until_idle`` takes an
    absolute time)."""
    p.fab.run_until_idle(p.fab.now + limit_ns)


def idle(p: SimpleNamespace) -> bool:
    """True when the fabric has no event left (the run ended by itself, not at the cap)."""
    return not p.fab.pending


def finish(p: SimpleNamespace, limit_ns: int = LIMIT_NS) -> list:
    """Run to idle (at most ``limit_ns`` more virtual time), close the capture, return its
    decoded frames."""
    run(p, limit_ns)
    if p.writer is None:
        return []
    p.writer.close()
    return read_frames(p.pcap)


# -- posting shortcuts -------------------------------------------------------------------------

def post_recv(p: SimpleNamespace, wr_id: int, offset: int, length: int) -> None:
    p.qb.post_recv(RecvWR(wr_id=wr_id, sg_list=[p.rbuf.sge(offset, length)]))


def send(p: SimpleNamespace, wr_id: int, offset: int, length: int,
         opcode: int = WROpcode.IBV_WR_SEND, **kw) -> None:
    p.qa.post_send(SendWR(wr_id=wr_id, opcode=opcode, sg_list=[p.src.sge(offset, length)], **kw))


def write(p: SimpleNamespace, wr_id: int, offset: int, length: int, remote_off: int,
          opcode: int = WROpcode.IBV_WR_RDMA_WRITE, rkey: int | None = None, **kw) -> None:
    p.qa.post_send(SendWR(wr_id=wr_id, opcode=opcode, sg_list=[p.src.sge(offset, length)],
                          remote_addr=p.dst.addr + remote_off,
                          rkey=p.dst.rkey if rkey is None else rkey, **kw))


def read(p: SimpleNamespace, wr_id: int, offset: int, length: int, remote_off: int,
         rkey: int | None = None) -> None:
    p.qa.post_send(SendWR(wr_id=wr_id, opcode=WROpcode.IBV_WR_RDMA_READ,
                          sg_list=[p.lbuf.sge(offset, length)],
                          remote_addr=p.dst.addr + remote_off,
                          rkey=p.dst.rkey if rkey is None else rkey))


def atomic(p: SimpleNamespace, wr_id: int, opcode: int, offset: int, remote_off: int,
           compare_add: int = 0, swap: int = 0, rkey: int | None = None) -> None:
    p.qa.post_send(SendWR(wr_id=wr_id, opcode=opcode, sg_list=[p.lbuf.sge(offset, 8)],
                          remote_addr=p.dst.addr + remote_off,
                          rkey=p.dst.rkey if rkey is None else rkey,
                          compare_add=compare_add, swap=swap))


# -- captures ------------------------------------------------------------------------------

@dataclass
class Frame:
    """One recorded frame, decoded (``pkt`` None when it does not decode: corrupted)."""

    ts: int
    pkt: roce.Packet | None
    raw: bytes
    f: dict = field(repr=False)

    @property
    def src(self) -> str:
        return ".".join(str(b) for b in self.raw[26:30])  # Ethernet + IPv4 source

    @property
    def op(self):
        return self.pkt.opcode

    @property
    def psn(self) -> int:
        return self.f["bth.psn"]

    @property
    def ackreq(self) -> bool:
        return bool(self.f["bth.a"])

    @property
    def is_request(self) -> bool:
        return self.op.is_request

    @property
    def syn_type(self) -> int:
        return syndrome_type(self.f["aeth.syndrome"])

    @property
    def syn_value(self) -> int:
        return syndrome_value(self.f["aeth.syndrome"])


def flat(pkt: roce.Packet) -> dict:
    """``header.field`` -> value, plus the one-field headers ``immdt``/``ieth`` under their
    bare names (whatever the layout calls their single field)."""
    out: dict = {}
    for h, values in pkt.headers.items():
        for k, v in values.items():
            out[f"{h}.{k}"] = v
        if h in ("immdt", "ieth"):
            [out[h]] = values.values()
    return out


def read_frames(path, keep_bad: bool = False) -> list[Frame]:
    """The frames of a pcap, decoded with ``roce.parse``.  Frames that do not decode
    (corrupted on the link) are left out unless ``keep_bad``."""
    out = []
    with open_capture(str(path)) as cap:
        for fr in cap:
            try:
                pkt = roce.parse(fr.data)
            except (roce.DecodeError, roce.NotRoCE):
                if keep_bad:
                    out.append(Frame(fr.ts_ns, None, fr.data, {}))
                continue
            out.append(Frame(fr.ts_ns, pkt, fr.data, flat(pkt)))
    return out


def from_a(frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if f.src == IP_A]


def from_b(frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if f.src == IP_B]


def acks(frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if f.op.operation is Operation.ACK]


def naks(frames: list[Frame]) -> list[Frame]:
    return [f for f in acks(frames) if f.syn_type != 0]


def is_last(f: Frame) -> bool:
    return f.op.position in (Position.LAST, Position.ONLY)


class ListRecorder:
    """A ``fab.record`` writer keeping (ts, frame) in memory."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []

    def write(self, data: bytes, ts_ns: int | None = None) -> None:
        self.frames.append((ts_ns or 0, bytes(data)))
