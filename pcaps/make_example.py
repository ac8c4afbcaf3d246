"""Generate pcaps/example.pcap with roce itself: one RC connection between 10.0.0.1 (QP 0x11)
and 10.0.0.2 (QP 0x22) doing a WRITE, a lost packet and its go-back-N retransmission, a
READ, a SEND with immediate, an RNR NAK, an atomic, ECN marks and a CNP, and one frame with a
corrupted ICRC.  Run from the repository root:  python pcaps/make_example.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import roce
from roce.headers import AETH_ACK, AETH_NAK, AETH_RNR_NAK, NAK_PSN_SEQUENCE_ERROR, syndrome
from roce.pcapio import PcapWriter

A, B = "10.0.0.1", "10.0.0.2"
QP_A, QP_B = 0x11, 0x22
MTU = 1024


def frames() -> list[bytes]:
    out: list[bytes] = []

    def req(op: str, payload: bytes = b"", **kw: object) -> None:
        out.append(roce.craft(op, payload, src=A, dst=B, smac="02:00:00:00:00:01",
                              dmac="02:00:00:00:00:02", dqpn=QP_B, **kw).to_bytes())

    def resp(op: str, payload: bytes = b"", **kw: object) -> None:
        out.append(roce.craft(op, payload, src=B, dst=A, smac="02:00:00:00:00:02",
                              dmac="02:00:00:00:00:01", dqpn=QP_A, **kw).to_bytes())

    ack = syndrome(AETH_ACK, 31)
    data = bytes(range(256)) * 16  # 4 KiB
    # RDMA WRITE of 4 KiB in four MTU packets, PSN 100..103; PSN 102 is lost.
    req("RC_RDMA_WRITE_FIRST", data[:MTU], psn=100, va=0x7F0000001000, rkey=0x1234,
        dmalen=len(data))
    req("RC_RDMA_WRITE_MIDDLE", data[MTU:2 * MTU], psn=101)
    req("RC_RDMA_WRITE_LAST", data[3 * MTU:], psn=103, ackreq=True)  # 102 lost on the way
    resp("RC_ACKNOWLEDGE", psn=102, syndrome=syndrome(AETH_NAK, NAK_PSN_SEQUENCE_ERROR), msn=0)
    # go-back-N: resend from 102
    req("RC_RDMA_WRITE_MIDDLE", data[2 * MTU:3 * MTU], psn=102)
    req("RC_RDMA_WRITE_LAST", data[3 * MTU:], psn=103, ackreq=True)
    resp("RC_ACKNOWLEDGE", psn=103, syndrome=ack, msn=1)
    # RDMA READ of 2 KiB: one request, two responses, consuming PSN 104..105
    req("RC_RDMA_READ_REQUEST", psn=104, va=0x7F0000002000, rkey=0x1234, dmalen=2 * MTU,
        ackreq=True)
    resp("RC_RDMA_READ_RESPONSE_FIRST", data[:MTU], psn=104, syndrome=ack, msn=2)
    resp("RC_RDMA_READ_RESPONSE_LAST", data[MTU:2 * MTU], psn=105, syndrome=ack, msn=2)
    # SEND with immediate, first refused with RNR NAK (no receive posted), then accepted
    req("RC_SEND_ONLY_WITH_IMMEDIATE", b"hello, rdma", psn=106, immdt=0xCAFE, ackreq=True,
        se=True)
    resp("RC_ACKNOWLEDGE", psn=106, syndrome=syndrome(AETH_RNR_NAK, 12), msn=2)
    req("RC_SEND_ONLY_WITH_IMMEDIATE", b"hello, rdma", psn=106, immdt=0xCAFE, ackreq=True,
        se=True)
    resp("RC_ACKNOWLEDGE", psn=106, syndrome=ack, msn=3)
    # Fetch&Add on an 8-byte counter
    req("RC_FETCH_ADD", psn=107, va=0x7F0000003000, rkey=0x1234, swapdt=1, ackreq=True)
    resp("RC_ATOMIC_ACKNOWLEDGE", psn=107, syndrome=ack, msn=4, origremdt=41)
    # congestion: the switch marks CE, the receiver answers with a CNP
    req("RC_SEND_ONLY", b"x" * 300, psn=108, ecn="ce", ackreq=True)
    out.append(roce.craft("CNP", src=B, dst=A, dqpn=QP_A, ecn="ect1").to_bytes())
    resp("RC_ACKNOWLEDGE", psn=108, syndrome=ack, msn=5)
    # one frame corrupted on the wire (ICRC no longer matches)
    bad = bytearray(roce.craft("RC_SEND_ONLY", b"y" * 64, src=A, dst=B, dqpn=QP_B, psn=109,
                               ackreq=True).to_bytes())
    bad[-10] ^= 0x40
    out.append(bytes(bad))
    resp("RC_ACKNOWLEDGE", psn=109, syndrome=ack, msn=6)
    return out


def main(path: str = "pcaps/example.pcap") -> None:
    t0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z, fixed so the file is reproducible
    with PcapWriter(path) as w:
        for i, f in enumerate(frames()):
            w.write(f, ts_ns=t0 + i * 7_000)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
    sys.exit(0 if Path(sys.argv[1] if len(sys.argv) > 1 else "pcaps/example.pcap").exists()
             else 1)
