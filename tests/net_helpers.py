"""Shared helpers for the switched-network tests (``from net_helpers import ...``)."""

from __future__ import annotations

from roce.emu.net import hop as frames
from roce.emu.net.runner import NetRun, NetScenario
from roce.macc import ETHERTYPE_MACC
from roce.pcapio import PcapWriter, open_capture


def scenario(**kw) -> NetScenario:
    kw.setdefault("count", 1)
    return NetScenario(**kw)


def run(taps: dict[str, str] | None = None, record: str | None = None, **kw):
    """Build and run a network scenario; ``taps`` maps NODE:PORT -> pcap path."""
    writers = {k: PcapWriter(v) for k, v in (taps or {}).items()}
    rec = PcapWriter(record) if record else None
    try:
        r = NetRun(scenario(**kw), rec, writers)
        s = r.run()
    finally:
        for w in writers.values():
            w.close()
        if rec is not None:
            rec.close()
    return r, s


def pcap(path) -> list[tuple[int, bytes]]:
    """(timestamp ns, frame) of every record."""
    with open_capture(str(path)) as cap:
        return [(f.ts_ns, bytes(f.data)) for f in cap]


def is_macc(frame: bytes) -> bool:
    return frame[frames.ETYPE[0]:frames.ETYPE[1]] == ETHERTYPE_MACC.to_bytes(2, "big")


def is_roce_to(frame: bytes, ip: str) -> bool:
    return (frames.is_ipv4(frame)
            and frame[frames.DST_IP[0]:frames.DST_IP[1]] == bytes(map(int, ip.split("."))))


def src_ip(frame: bytes) -> str:
    return ".".join(str(b) for b in frame[frames.SRC_IP[0]:frames.SRC_IP[1]])
