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


def congested(n: int, ipv6: bool = False) -> list[tuple[bytes, int]]:
    """``n`` QPs between ``n`` pairs of hosts, each sending WRITEs of which every third is
    CE-marked and getting CNPs back; long IPv6 addresses with ``ipv6``.  (frame, time ns)."""
    import roce

    out = []
    for q in range(n):
        if ipv6:
            a, b = (f"2001:db8:1234:5678:9abc:def0:{side}:{q + 1:x}" for side in ("a", "b"))
        else:
            a, b = f"10.1.{q}.1", f"10.2.{q}.2"
        for k in range(12):
            t = (q * 7 + k * 100) * US
            out.append((roce.craft("RC_RDMA_WRITE_MIDDLE", PAYLOAD, src=a, dst=b, ipv6=ipv6,
                                   dqpn=0x100 + q, psn=k, ecn=3 if k % 3 == 0 else 2)
                        .to_bytes(), t))
            if k % 4 == 1:
                out.append((roce.craft("cnp", src=b, dst=a, ipv6=ipv6, dqpn=0x200 + q)
                            .to_bytes(), t + 3 * US))
    return sorted(out, key=lambda x: x[1])
