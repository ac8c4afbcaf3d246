"""DCQCN's notification point, in the receiving NIC, and the CNP frames it sends.

Per receiving QP: a packet that arrives with ECN Congestion Experienced asks for a CNP to the
sender's QP; at most one CNP leaves per QP per ``np_min_time_between_cnps`` (NVIDIA's knob;
the DCQCN paper's 50 us).  Marked packets inside the interval are counted, not answered.

A CNP (RoCEv2, IBA Annex A17.9.2) is BTH with opcode CNP_OPCODE, BECN set, the P_Key, PSN 0,
then 16 reserved bytes and the ICRC; it travels in IP with DSCP 48 (NVIDIA's CNP default,
priority 6) and not ECN-capable.  It is built from the connection's own Ethernet/IP/UDP
headers (``roce.emu.core.frames.FrameBuilder``), so the UDP source port and addresses are the QP's.
"""

from __future__ import annotations

from dataclasses import replace

from roce import fast
from roce.emu.core import frames as wire
from roce.emu.net.stages import DSCP_CNP
from roce.headers import ENCODERS, LAYOUTS
from roce.opcodes import CNP_OPCODE

CNP_DSCP = DSCP_CNP  # NVIDIA's cnp_dscp default, as the fabric's classifier maps it

_BECN = LAYOUTS["bth"].field("becn")
_BECN_BYTE, _BECN_BIT = _BECN.bit_offset // 8, 1 << (7 - _BECN.bit_offset % 8)
_CNP_BODY = ENCODERS["cnp"]({"reserved": 0})


def cnp_frame(path: wire.Path, src_qpn: int, dest_qpn: int, p_key: int = 0xFFFF,
              dscp: int = CNP_DSCP) -> bytes:
    """A CNP from ``src_qpn`` (the QP that saw CE marks) to ``dest_qpn`` along ``path``."""
    return CnpBuilder(path, src_qpn, dscp).build(dest_qpn, p_key)


class CnpBuilder:
    """The CNPs of one receiving QP: its headers encoded once, with the CNP's DSCP."""

    __slots__ = ("fb",)

    def __init__(self, path: wire.Path, src_qpn: int, dscp: int = CNP_DSCP) -> None:
        self.fb = wire.FrameBuilder(replace(path, tclass=dscp << 2), src_qpn)

    def build(self, dest_qpn: int, p_key: int = 0xFFFF) -> bytes:
        bth = bytearray(fast.bth_pack(CNP_OPCODE, False, 0, p_key, dest_qpn, False, 0))
        bth[_BECN_BYTE] |= _BECN_BIT
        fb = self.fb
        return fast.assemble(fb.l2, fb.l3, fb.l3_kind, fb.udp, bytes(bth) + _CNP_BODY, None,
                             b"", True, True, True)


class NotificationPoint:
    """CE marks in, CNP decisions out, for every QP of one NIC (sans-I/O: ``now`` in ns)."""

    __slots__ = ("min_gap", "_last", "ce_packets", "cnps_sent", "suppressed")

    def __init__(self, min_gap_ns: int) -> None:
        if min_gap_ns < 0:
            raise ValueError("np_min_time_between_cnps must be >= 0")
        self.min_gap = min_gap_ns
        self._last: dict[int, int] = {}  # receiving QPN -> when its last CNP left
        self.ce_packets = 0
        self.cnps_sent = 0
        self.suppressed = 0

    def on_ce(self, now: int, qpn: int) -> bool:
        """A CE-marked packet for QP ``qpn`` arrived: True if a CNP must go now."""
        self.ce_packets += 1
        last = self._last.get(qpn)
        if last is not None and now - last < self.min_gap:
            self.suppressed += 1
            return False
        self._last[qpn] = now
        self.cnps_sent += 1
        return True
