"""Between the RC queue pairs and the InfiniBand link: the HCA's framing (``Framer``).

The queue pairs above are the emulator's own (``roce.emu.core``), unchanged: they build and
read RoCEv2 frames.  An HCA keeps their transport (BTH through pad) and swaps what is
around it:

- out: the LRH (VL from the SL-to-VL table, SL, DLID of the destination's LID, SLID of its
  own, LNH 2: IBA local, PktLen in words), then the transport, the ICRC by IBA's LRH rule
  and the VCRC (``roce.families.ib``: the codec every decoder here reads back);
- in: the addresses and headers the QP expects (IPv4 and UDP of the source's LID, the
  RoCE ICRC), so the device reads it exactly as a frame from an Ethernet port.

LIDs are assigned by the subnet (``roce.emu.ib.routing.assign_lids``): 2^LMC per HCA port
from its base LID.  With LMC above 0 a packet's path bits (the LID's low LMC bits, DLID's
and SLID's alike) are its destination QPN mod 2^LMC: a QP's packets keep one path, and the
QPs between two ports spread over all of them (IBA Vol 1 7.11.1: the path bits select among
a port's LIDs, and so among its paths).
"""

from __future__ import annotations

import ipaddress
import struct

from roce import fast
from roce.emu.core.frames import FrameBuilder, Path
from roce.families.ib import crc as ibcrc
from roce.families.ib.native import LRH_SIZE
from roce.headers import LNH_LOCAL, LRH_WORD
from roce.icrc import L3_IPV4, L3_LRH
from roce.locate import OK

ICRC, VCRC = 4, ibcrc.VCRC_SIZE
_vcrc = ibcrc.vcrc_fast
_LRH = struct.Struct(">BBHHH")  # VL|LVer, SL|rsv|LNH, DLID, rsv|PktLen, SLID (IBA 7.7)
# where the device's frames (Ethernet II, IPv4 without options, UDP) put the destination
# address and the BTH; any other frame is walked (``Framer.to_ib``)
_ETH, _IPV4_DST, _BTH = 14, 14 + 16, 14 + 20 + 8


def lrh(vl: int, sl: int, dlid: int, pktlen: int, slid: int) -> bytes:
    """A local LRH (LNH 2, LVer 0): ``roce.families.ib.native``'s LRH layout packed at once
    (the emulator frames every packet; tests/test_emu_ib.py holds it to ``encode_lrh``)."""
    return _LRH.pack(vl << 4, sl << 4 | LNH_LOCAL, dlid, pktlen & 0x7FF, slid)


def frame_reference(lrh_bytes: bytes, transport: bytes) -> bytes:
    """The native InfiniBand packet of an LRH (IBA local) and ``transport`` (BTH through
    pad): LRH, transport, the ICRC by IBA's LRH rule, the VCRC (``roce.families.ib``)."""
    end = len(lrh_bytes) + len(transport)
    pkt = lrh_bytes + transport + bytes(ICRC)  # the ICRC's walk needs its place
    out = bytearray(pkt)
    out[end:] = fast.icrc_at(pkt, 0, L3_LRH, LRH_SIZE, LRH_SIZE, end).to_bytes(4, "big")
    out += ibcrc.vcrc(out).to_bytes(2, "big")
    return bytes(out)


def frame_ok_reference(packet: bytes) -> bool:
    """Whether ``packet``'s VCRC, then its ICRC (IBA's LRH rule), are right: what an HCA
    checks of every packet it receives."""
    end = len(packet) - VCRC
    if ibcrc.vcrc(memoryview(packet)[:end]) != int.from_bytes(packet[end:], "big"):
        return False
    icrc_off = end - ICRC
    return fast.icrc_at(packet, 0, L3_LRH, LRH_SIZE, LRH_SIZE, icrc_off) == int.from_bytes(
        packet[icrc_off:end], "big")


# the two per packet, in C when the fast path is built (tests/test_ib_fast.py holds them to
# the references)
_frame = frame_reference if fast._ext is None else fast._ext.ib_frame
_frame_ok = frame_ok_reference if fast._ext is None else fast._ext.ib_frame_ok
_assemble = fast.assemble


def vcrc(data: bytes) -> int:
    """The VCRC of LRH through ICRC (``roce.families.ib.crc.vcrc``, compiled when built)."""
    return _vcrc(data)


def set_vl(packet: bytes, vl: int) -> bytes:
    """``packet`` leaving on ``vl``: the LRH's VL rewritten and the VCRC (which covers it)
    computed again; the ICRC masks the VL and stays."""
    if packet[0] >> 4 == vl:
        return packet
    out = bytearray(packet)
    out[0] = (vl << 4) | (packet[0] & 0x0F)
    end = len(out) - VCRC
    out[end:] = _vcrc(memoryview(out)[:end]).to_bytes(2, "big")
    return bytes(out)


BTH_BYTE4 = LRH_SIZE + 4  # FECN, BECN (roce.emu.ib.ibcc)


def set_bits(packet: bytes, offset: int, bits: int) -> bytes:
    """``packet`` with ``bits`` set in byte ``offset`` and its VCRC computed again (the ICRC
    masks BTH byte 4: it stays)."""
    if packet[offset] & bits == bits:
        return packet
    out = bytearray(packet)
    out[offset] |= bits
    end = len(out) - VCRC
    out[end:] = _vcrc(memoryview(out)[:end]).to_bytes(2, "big")
    return bytes(out)


class Framer:
    """One HCA's framing: its LID and address, every peer's LID by address and back."""

    __slots__ = ("lid", "ip", "lid_of", "ip_of", "mac", "peer_mac", "tclass", "_builders",
                 "paths")

    def __init__(self, lid: int, ip: str, lid_of: dict[bytes, int], ip_of: dict[int, str],
                 mac: str, peer_mac: str, tclass: int, lmc: int = 0) -> None:
        self.lid = lid  # the base LID
        self.paths = (1 << lmc) - 1  # the path bits' mask
        self.ip = ip
        self.lid_of = lid_of  # IPv4 address (4 bytes) -> LID
        self.ip_of = ip_of  # LID -> dotted address
        self.mac, self.peer_mac = mac, peer_mac
        self.tclass = tclass
        self._builders: dict[int, FrameBuilder] = {}

    def to_ib(self, frame: bytes, sl: int, vl: int) -> bytes:
        """The native InfiniBand packet for a RoCEv2 frame the device built."""
        if frame[12] == 0x08 and frame[13] == 0x00 and frame[_ETH] == 0x45:
            dst, b, end = frame[_IPV4_DST:_IPV4_DST + 4], _BTH, len(frame) - ICRC
        else:
            w = fast.walk(frame)
            if w.status != OK:
                raise ValueError(f"the device built a frame the walk refuses (status "
                                 f"{w.status})")
            dst, b, end = frame[w.l3_off + 16:w.l3_off + 20], w.bth_off, w.icrc_off
        dlid = self.lid_of[dst]
        bits = 0
        if self.paths:
            bits = int.from_bytes(frame[b + 5:b + 8], "big") & self.paths
        return self.packet(frame[b:end], sl, vl, dlid | bits, bits)

    def packet(self, transport: bytes, sl: int, vl: int, dlid: int, bits: int = 0) -> bytes:
        """The native InfiniBand packet of ``transport`` (BTH through pad) from here to
        ``dlid``, from the LID of path ``bits``: LRH, ICRC, VCRC."""
        total = LRH_SIZE + len(transport) + ICRC
        return _frame(lrh(vl, sl, dlid, total // LRH_WORD, self.lid | bits), transport)

    def to_roce(self, packet: bytes, icrc: bool = True) -> bytes | None:
        """The RoCEv2 frame the device reads for an InfiniBand packet addressed here; None
        for one whose CRCs are wrong or whose source is not in the subnet (dropped, as an
        HCA drops it).  Its ICRC is computed when ``icrc`` says something records the frame;
        otherwise it is zero: the device does not check it (the HCA checked the packet's)."""
        if not _frame_ok(packet):
            return None
        icrc_off = len(packet) - VCRC - ICRC
        slid = (packet[6] << 8 | packet[7]) & ~self.paths  # the LRH's SLID, its base LID
        b = self._builders.get(slid)
        if b is None:
            ip = self.ip_of.get(slid)
            if ip is None:
                return None
            b = self._builders[slid] = FrameBuilder(
                Path(smac=self.peer_mac, dmac=self.mac, sip=ip, dip=self.ip,
                     tclass=self.tclass), 0)
        return _assemble(b.l2, b.l3, L3_IPV4, b.udp, packet[LRH_SIZE:icrc_off],
                         None if icrc else 0, b"", True, True, True)


def packed(ip: str) -> bytes:
    return ipaddress.IPv4Address(ip).packed


__all__ = ["BTH_BYTE4", "Framer", "frame_ok_reference", "frame_reference", "packed", "set_bits",
           "set_vl", "vcrc"]
