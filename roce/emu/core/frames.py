"""Frames for emulated queue pairs: a per-connection builder and a light parser.

Built on the packet codec's pieces without making a full ``roce.Packet`` per frame: the
Ethernet/IP/UDP part of a connection is encoded once; each packet encodes BTH and its
extended headers and ``roce.fast.assemble`` fills lengths, checksum and ICRC.  Opcodes are
chosen from the table by (transport, operation, position, immediate, invalidate).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

# the fast path's forms (or their references), bound once: a module attribute per packet is a
# lookup per call
from roce.fast import assemble, bth_pack, rx
from roce.headers import DECODERS, ENCODERS, LAYOUTS, SIZE_OF
from roce.icrc import L3_IPV4, L3_IPV6
from roce.locate import ETHERTYPE_IPV4, ETHERTYPE_IPV6, OK, ROCE_PORT
from roce.opcodes import OPCODES, Opcode, Operation, Position, Transport
from roce.packet import udp_source_port

# transport -> operation -> position -> immediate -> invalidate -> opcode row: one lookup
# per part (the parts' hashes are cached), no key tuple made and hashed per packet
_SELECT: dict = {}
for _op in OPCODES.values():
    (_SELECT.setdefault(_op.transport, {}).setdefault(_op.operation, {})
     .setdefault(_op.position, {}).setdefault(_op.immediate, {}))[_op.invalidate] = _op
del _op


def select(transport: Transport, operation: Operation, position: Position,
           immediate: bool = False, invalidate: bool = False) -> Opcode:
    return _SELECT[transport][operation][position][immediate][invalidate]


def positions(npkts: int) -> list[Position]:
    """First/middle.../last, or only, for a message of ``npkts`` packets."""
    if npkts <= 1:
        return [Position.ONLY]
    return [Position.FIRST] + [Position.MIDDLE] * (npkts - 2) + [Position.LAST]


@dataclass(frozen=True)
class Path:
    """Where one QP's packets go: addresses and the UDP source port (flow entropy)."""

    smac: str
    dmac: str
    sip: str
    dip: str
    ipv6: bool = False
    sport: int | None = None
    tclass: int = 0  # DSCP << 2 | ECN


# the IPv4 TTL (IPv6 hop limit) a host sends with (Linux's default); a switch takes one off,
# so a receiver counts the hops a frame took (Swift's hop-scaled target, roce.emu.cc.swift)
TTL = 64


class FrameBuilder:
    """Builds the frames of one connection (one source QP toward one path)."""

    __slots__ = ("path", "l3_kind", "l2", "udp", "l3")

    def __init__(self, path: Path, src_qpn: int, ttl: int = TTL) -> None:
        self.path = path
        l3 = "ipv6" if path.ipv6 else "ip"
        self.l3_kind = L3_IPV6 if path.ipv6 else L3_IPV4
        self.l2 = ENCODERS["eth"]({"dst": path.dmac, "src": path.smac,
                                   "type": ETHERTYPE_IPV6 if path.ipv6 else ETHERTYPE_IPV4})
        if path.ipv6:
            self.l3 = ENCODERS[l3]({"version": 6, "tclass": path.tclass, "flow": 0, "plen": 0,
                                    "nxt": 17, "hlim": ttl, "src": path.sip, "dst": path.dip})
        else:
            self.l3 = ENCODERS[l3]({"version": 4, "ihl": 5, "dsfield.dscp": path.tclass >> 2,
                                    "dsfield.ecn": path.tclass & 3, "len": 0, "id": 0,
                                    "flags.rb": 0, "flags.df": 1, "flags.mf": 0, "frag_offset": 0,
                                    "ttl": ttl, "proto": 17, "checksum": 0, "src": path.sip,
                                    "dst": path.dip})
        sport = path.sport if path.sport is not None else udp_source_port(src_qpn)
        self.udp = ENCODERS["udp"]({"srcport": sport, "dstport": ROCE_PORT, "length": 0,
                                    "checksum": 0})

    def build(self, op: Opcode, destqp: int, psn: int, ext: dict[str, dict] | None = None,
              payload: bytes = b"", payload_at: int = 0, payload_len: int = -1,
              ackreq: bool = False, se: bool = False, p_key: int = 0xFFFF) -> bytes:
        """The frame of one packet; its payload ``payload[payload_at:payload_at +
        payload_len]`` (a negative length: to the end), copied once, into the frame: a
        requester hands the pattern piece that holds it (``memory.take_at``)."""
        n = len(payload) - payload_at if payload_len < 0 else payload_len
        pad = -n & 3
        headers = bth_pack(op.code, se, pad, p_key, destqp, ackreq, psn)
        hs = op.headers
        if hs:
            ext = ext or {}
            if len(hs) == 1:  # one extended header (RETH, AETH): added, no list joined
                h = hs[0]
                headers = headers + ENCODERS[h](ext.get(h, {}))
            else:
                headers = b"".join([headers] + [ENCODERS[h](ext.get(h, {})) for h in hs])
        if pad or type(payload) is not bytes:  # (a view of a plain region's buffer: copied)
            payload = bytes(payload[payload_at:payload_at + n]) + bytes(pad)
            payload_at, n = 0, n + pad
        # the payload goes into the frame as it is: copied once
        return assemble(self.l2, self.l3, self.l3_kind, self.udp, headers, None, b"", True,
                        True, True, payload, payload_at, n)


def small_field(header: str, field: str) -> tuple[int, int, int]:
    """(byte offset in the header, right shift, mask) of a field that fits in one byte."""
    f = LAYOUTS[header].field(field)
    last = f.bit_offset + f.bits - 1
    if f.bit_offset // 8 != last // 8:
        raise ValueError(f"{header}.{field} spans bytes")
    return f.bit_offset // 8, 7 - last % 8, (1 << f.bits) - 1


def _ipv6_ecn() -> tuple[int, int, int]:
    """The ECN bits are the low two bits of the IPv6 traffic class (RFC 3168 5)."""
    f = LAYOUTS["ipv6"].field("tclass")
    last = f.bit_offset + f.bits - 1
    return last // 8, 7 - last % 8, 3


_ECN = {L3_IPV4: small_field("ip", "dsfield.ecn"), L3_IPV6: _ipv6_ecn()}

# the per-packet constants of ``Incoming``, looked up once here rather than per packet
_BTH_SIZE = SIZE_OF["bth"]


def _flags(code: int) -> int:
    """What a QP's per-packet code tests of an opcode, as bits (rxe copies its opcode table's
    mask onto each packet): 1 First or Only, 2 Last or Only, 4 a request."""
    op = OPCODES.get(code)
    return 0 if op is None else op.starts | op.ends << 1 | op.is_request << 2


_FLAGS = bytes(_flags(c) for c in range(256))  # by opcode: one byte read per packet
# the extended headers of a packet that has none (most of a message's): one mapping shared,
# read-only, rather than an empty dictionary made per packet
_NO_HEADERS = MappingProxyType({})


class Incoming:
    """A received RoCE packet, decoded just enough for a QP.  Its payload stays in the frame
    (``payload_at``, ``payload_len``): ``payload`` copies it out, and a WRITE's placement
    reads it in place (``MemoryRegion.write_from``)."""

    __slots__ = ("frame", "l3_off", "l3_len", "op", "se", "p_key", "destqp", "ackreq", "psn",
                 "ext", "payload_at", "payload_len", "ecn", "starts", "ends", "request")

    def __init__(self, frame: bytes, rx: tuple) -> None:
        """``rx``: what ``fast.rx`` read of ``frame`` (its ``RX_FIELDS``), status OK."""
        self.fill(frame, rx)

    def fill(self, frame: bytes, rx: tuple) -> None:
        """``__init__``'s work (``receive`` makes an instance without a Python call)."""
        self.frame = frame
        (_, code, self.se, self.p_key, self.destqp, self.ackreq, self.psn, l3_kind, l3_off,
         self.l3_len, bth_off, payload_off, pad_off) = rx
        self.l3_off = l3_off
        ops = OPCODES  # (the tables: dictionaries indexed in C in the compiled form)
        self.op = op = ops[code]
        # the opcode's First-or-Only, Last-or-Only and request bits, as 0 or 1: read by the QP
        # per packet (C fields in the compiled form, where ``op``'s are Python attributes)
        flags = _FLAGS[code]
        self.starts = flags & 1
        self.ends = flags >> 1 & 1
        self.request = flags >> 2
        if op.headers:
            ext = {}
            pos = bth_off + _BTH_SIZE
            for h in op.headers:
                ext[h] = DECODERS[h](frame, pos)
                pos += SIZE_OF[h]
            self.ext = ext
        else:
            self.ext = _NO_HEADERS
        self.payload_at = payload_off
        self.payload_len = pad_off - payload_off
        ecns = _ECN
        off, shift, mask = ecns[l3_kind]
        f = frame  # (bytes: the byte read in C, with the offsets, in the compiled form)
        at = l3_off + off
        self.ecn = (f[at] >> shift) & mask  # carried up to the QP

    @property
    def payload(self) -> bytes:
        """The payload's bytes (a copy: ``frame[payload_at:payload_at + payload_len]``)."""
        return self.frame[self.payload_at:self.payload_at + self.payload_len]


def receive(frame: bytes, icrc_checked: bool = False) -> tuple[int, Incoming | None]:
    """(status, packet): status 0 with a packet; else the walk status, or -1 for a bad ICRC.
    ``icrc_checked``: the port that built ``frame`` computed its ICRC after checking the
    packet it came in (an InfiniBand HCA: ``roce.emu.ib.framing``), so it is not checked
    again."""
    got = rx(frame, not icrc_checked)
    if got[0] != OK:
        return got[0], None
    pkt = Incoming.__new__(Incoming)
    pkt.fill(frame, got)
    return OK, pkt
