"""A small hand-made capture for the congestion-control views: one QP's WRITE packets (one
retransmitted, two CE-marked), its ACKs, CNPs to its sender, and PFC frames."""

from __future__ import annotations

from roce import macc
from roce.emu.cc import cnp_frame
from roce.emu.core.frames import FrameBuilder, Path, select
from roce.headers import ECN_CE, ECN_ECT0
from roce.opcodes import Operation, Position, Transport
from roce.pcapio import PcapWriter

A = Path("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
         tclass=26 << 2 | ECN_ECT0)
A_CE = Path(A.smac, A.dmac, A.sip, A.dip, tclass=26 << 2 | ECN_CE)
B = Path(A.dmac, A.smac, A.dip, A.sip)
QP_A, QP_B = 0x11, 0x22
US = 1_000
PAYLOAD = bytes(1024)

# (ts us, psn, CE): PSN 3 is sent again at 60 us
DATA = [(0, 0, False), (10, 1, False), (20, 2, True), (30, 3, True), (40, 4, False),
        (60, 3, False), (70, 5, False)]
ACKS = [(15, 1), (45, 4), (80, 5)]
CNPS = [25, 35, 75]
PFC = [(50, {3: 100}), (55, {3: 0})]


def frames() -> list[tuple[bytes, int]]:
    out = []
    write = select(Transport.RC, Operation.RDMA_WRITE, Position.MIDDLE)
    ack = select(Transport.RC, Operation.ACK, Position.ONLY)
    fa, fce, fb = FrameBuilder(A, QP_A), FrameBuilder(A_CE, QP_A), FrameBuilder(B, QP_B)
    for t, psn, ce in DATA:
        out.append(((fce if ce else fa).build(write, QP_B, psn, payload=PAYLOAD), t * US))
    for t, psn in ACKS:
        out.append((fb.build(ack, QP_A, psn, {"aeth": {"syndrome": 0, "msn": 0}}), t * US))
    for t in CNPS:
        out.append((cnp_frame(B, QP_B, QP_A), t * US))
    for t, times in PFC:
        out.append((macc.build_pfc(bytes.fromhex("020000000002"), times), t * US))
    return sorted(out, key=lambda x: x[1])


def write_capture(path) -> str:
    with PcapWriter(str(path)) as w:
        for data, ts in frames():
            w.write(data, ts_ns=1_700_000_000_000_000_000 + ts)
    return str(path)
