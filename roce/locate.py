"""Where each header of a frame starts: the structural walk, pure-Python reference.

``walk(frame, linktype, udp_port)`` returns a tuple of integers (``Walk``) saying where L3,
UDP, BTH, the payload, the pad and the ICRC are, or a status code naming what is wrong and
where.  ``roce._fastpath.walk`` is its twin (tests prove they agree); the packet codec, the
decoder and the bulk scanner are built on it.  ``explain`` turns a status into the
``DecodeError`` / ``NotRoCE`` a user sees.

Every offset and width comes from ``roce.headers.LAYOUTS`` and every per-opcode fact from
``roce.opcodes.OPCODES``.
"""

from __future__ import annotations

from collections import namedtuple

from roce.errors import DecodeError, NotRoCE
from roce.headers import LAYOUTS, LNH_GLOBAL, LNH_LOCAL, LRH_LAYOUT, LRH_WORD, SIZE_OF
from roce.opcodes import IB_OPCODES, OPCODES, ROCE_OPCODES

ROCE_PORT = 4791
ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1 = 0x0800, 0x86DD, 0x8915
ETHERTYPE_VLAN = (0x8100, 0x88A8, 0x9100)
ETHERTYPE_MACC = 0x8808  # MAC Control: 802.3x PAUSE, 802.1Qbb PFC (roce.macc)
IPPROTO_UDP = 17
GRH_NEXT_BTH = 0x1B  # IBA: GRH NxtHdr for an IBA transport header
MAX_VLAN_TAGS = 2
LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2 = 1, 101, 113, 276
LINKTYPE_INFINIBAND = 247  # native InfiniBand packets, LRH first (tcpdump.org LINKTYPE_*)
LINKTYPE_ERF = 197  # Endace ERF records (roce.families.erf unwraps them)
# The link types the RoCE walk reads, each with the layout name of its link header (raw IP
# has none): the one list the decoder, the stats reader, the registry rows and the fuzzers use.
L2_HEADERS = {LINKTYPE_ETHERNET: "eth", LINKTYPE_LINUX_SLL: "sll", LINKTYPE_LINUX_SLL2: "sll2"}
WALK_LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2)
# The walk reads native InfiniBand when asked for WALK_INFINIBAND, a code outside the 16 bits
# of pcap link types: link type 247 itself stays roce.families.ib.native's in the decoder (the walk
# calls it NR_LINKTYPE), and the flow engines ask for this code for its frames.
WALK_INFINIBAND = 0x10000 | LINKTYPE_INFINIBAND
# The link types `roce stats` reads, by name; frames of any other are not RoCE (NR_LINKTYPE).
LINKTYPE_NAMES = {LINKTYPE_ETHERNET: "Ethernet", LINKTYPE_RAW: "raw IP",
                  LINKTYPE_LINUX_SLL: "Linux cooked v1", LINKTYPE_LINUX_SLL2: "Linux cooked v2",
                  LINKTYPE_INFINIBAND: "InfiniBand"}


def flow_linktype(linktype: int) -> int:
    """The walk code the flow engines use for frames of ``linktype``."""
    return WALK_INFINIBAND if linktype == LINKTYPE_INFINIBAND else linktype

# What carries BTH.  Native InfiniBand's kinds are numbered as the LRH's LNH that makes them:
# L3_LRH (LNH 2, IBA local) is the LRH alone, L3_LRH_GRH (LNH 3, IBA global) LRH and GRH;
# for both the "L3" header starts at the LRH (byte 0) and the ICRC is the LRH rule of IBA
# 7.8.1 (roce.icrc).  The walk's l4_end is the end of the ICRC; the VCRC follows.
L3_NONE, L3_GRH, L3_IPV4, L3_IPV6 = 0, 1, 4, 6
L3_LRH, L3_LRH_GRH = LNH_LOCAL, LNH_GLOBAL

# Status codes.  Below FIRST_BAD_STATUS: not RoCE (a well-formed frame of another protocol);
# from it on: RoCE that is malformed.  Test with is_not_roce / is_malformed, not with numbers.
OK = 0
NR_ETHERTYPE, NR_PROTO, NR_PORT, NR_FRAGMENT, NR_LINKTYPE, NR_LNH = 1, 2, 3, 4, 5, 6
BAD_TRUNCATED, BAD_IP_VERSION, BAD_IP_HDRLEN, BAD_L3_LENGTH, BAD_UDP_LENGTH = 10, 11, 12, 13, 14
BAD_TVER, BAD_OPCODE, BAD_PADCNT, BAD_PAYLOAD, BAD_PAYLOAD_LEN, BAD_GRH_NEXT = (
    15, 16, 17, 18, 19, 20)
FIRST_BAD_STATUS = BAD_TRUNCATED


def is_not_roce(status: int) -> bool:
    """A walk status for a well-formed frame that is not RoCE."""
    return OK < status < FIRST_BAD_STATUS


def is_malformed(status: int) -> bool:
    """A walk status for RoCE (or a frame claiming to be) that is malformed."""
    return status >= FIRST_BAD_STATUS

# Header ids used in Walk.err_header; ETH ids follow in OPCODES header-name order.
HEADER_IDS: tuple[str, ...] = ("frame", "eth", "vlan", "sll", "sll2", "ip", "ipv6", "udp",
                               "grh", "bth", "rdeth", "deth", "reth", "atomiceth", "aeth",
                               "atomicacketh", "immdt", "ieth", "xrceth", "feth", "cnp",
                               "payload", "icrc", "lrh")
HID = {name: i for i, name in enumerate(HEADER_IDS)}


# Every field an int; l4_end: the end of the RoCE packet (after ICRC), later bytes are
# Ethernet trailer.  collections' namedtuple: typing's NamedTuple would import typing at start.
Walk = namedtuple("Walk", ("status", "vlans", "l3_kind", "l3_off", "l3_len", "udp_off",
                           "bth_off", "opcode", "payload_off", "pad_off", "icrc_off", "l4_end",
                           "err_header", "err_offset", "err_a", "err_b"))


def _spec(header: str, field: str) -> tuple[int, int, int, int]:
    """(byte offset, byte count, shift, mask) to read one field of up to 32 bits."""
    f = LAYOUTS[header].field(field)
    first = f.bit_offset // 8
    last = (f.bit_offset + f.bits - 1) // 8
    nbytes = last - first + 1
    return first, nbytes, nbytes * 8 - (f.bit_offset % 8) - f.bits, f.mask


def _rd(buf: bytes, base: int, spec: tuple[int, int, int, int]) -> int:
    off, n, shift, mask = spec
    return (int.from_bytes(buf[base + off:base + off + n], "big") >> shift) & mask


# The fields the walk reads, in the order the fast path is handed them (FAST_FIELDS index).
FAST_FIELDS: tuple[tuple[str, str], ...] = (
    ("eth", "type"), ("vlan", "etype"), ("sll", "etype"), ("sll2", "etype"),
    ("ip", "version"), ("ip", "ihl"), ("ip", "len"), ("ip", "flags.mf"), ("ip", "frag_offset"),
    ("ip", "proto"), ("ipv6", "version"), ("ipv6", "plen"), ("ipv6", "nxt"),
    ("udp", "dstport"), ("udp", "length"), ("grh", "paylen"), ("grh", "nxthdr"),
    ("bth", "opcode"), ("bth", "padcnt"), ("bth", "tver"), ("bth", "destqp"), ("bth", "psn"),
    ("bth", "p_key"), ("bth", "se"), ("bth", "m"), ("bth", "fecn"), ("bth", "becn"),
    ("bth", "a"), ("ip", "dsfield.ecn"), ("ipv6", "tclass"), ("ip", "checksum"),
)
# Bits of the scan's "flags" column.
FLAG_SE, FLAG_M, FLAG_FECN, FLAG_BECN, FLAG_A = 0x80, 0x40, 0x10, 0x08, 0x04
SPECS = {hf: _spec(*hf) for hf in FAST_FIELDS}


def _lrh_spec(name: str) -> tuple[int, int, int, int]:
    f = LRH_LAYOUT.field(name)
    first, last = f.bit_offset // 8, (f.bit_offset + f.bits - 1) // 8
    n = last - first + 1
    return first, n, n * 8 - (f.bit_offset % 8) - f.bits, f.mask


# The LRH fields the fast path reads, in the order it is handed them (walk: lnh, pktlen;
# the IB scan: dlid, slid, vl, sl).
LRH_FIELDS = ("lnh", "pktlen", "dlid", "slid", "vl", "sl")
LRH_SPECS = {name: _lrh_spec(name) for name in LRH_FIELDS}
LRH_SIZE = LRH_LAYOUT.size
SIZE = SIZE_OF

# Per opcode: ext header ids and sizes in order, payload allowed, fixed payload length (-1).
OPCODE_PLAN: dict[int, tuple[tuple[tuple[int, int], ...], bool, int]] = {
    code: (tuple((HID[h], SIZE[h]) for h in op.headers), op.payload,
           -1 if op.payload_len is None else op.payload_len)
    for code, op in OPCODES.items()
}
# Which opcodes each link's walk accepts (``roce.opcodes`` ``Opcode.links``): bit 0 RoCE, bit 1
# native InfiniBand.  The CNPs differ: 0x81 on RoCE, 0x80 on InfiniBand (docs/protocol.md).
LINK_ROCE, LINK_IB = 1, 2
OPCODE_LINKS: dict[int, int] = {
    code: (LINK_ROCE if code in ROCE_OPCODES else 0) | (LINK_IB if code in IB_OPCODES else 0)
    for code in OPCODES
}


def _fail(status: int, parts: list[int], header: str, offset: int, a: int = 0,
          b: int = 0) -> Walk:
    return Walk(status, *parts, HID[header], offset, a, b)


def walk(frame: bytes, linktype: int = LINKTYPE_ETHERNET, udp_port: int = ROCE_PORT) -> Walk:
    """Locate the headers of a RoCE frame (reference implementation)."""
    n = len(frame)
    # vlans, l3_kind, l3_off, l3_len, udp_off, bth_off, opcode, payload, pad, icrc, end
    p = [0, L3_NONE, -1, 0, -1, -1, -1, -1, -1, -1, -1]
    off = 0
    if linktype == WALK_INFINIBAND:
        return _lrh(frame, p)
    if linktype == LINKTYPE_RAW:
        if n < 1:
            return _fail(BAD_TRUNCATED, p, "ip", 0, 1, 0)
        version = frame[0] >> 4
        etype = {4: ETHERTYPE_IPV4, 6: ETHERTYPE_IPV6}.get(version)
        if etype is None:
            return _fail(BAD_IP_VERSION, p, "ip", 0, version)
    else:
        l2 = L2_HEADERS.get(linktype)
        if l2 is None:
            return _fail(NR_LINKTYPE, p, "frame", 0, linktype)
        if n < SIZE[l2]:
            return _fail(BAD_TRUNCATED, p, l2, 0, SIZE[l2], n)
        key = "type" if l2 == "eth" else "etype"
        etype = _rd(frame, 0, SPECS[(l2, key)])
        off = SIZE[l2]
        while etype in ETHERTYPE_VLAN and p[0] < MAX_VLAN_TAGS:
            if n - off < SIZE["vlan"]:
                return _fail(BAD_TRUNCATED, p, "vlan", off, SIZE["vlan"], n - off)
            etype = _rd(frame, off, SPECS[("vlan", "etype")])
            p[0] += 1
            off += SIZE["vlan"]

    if etype == ETHERTYPE_IPV4:
        return _ipv4(frame, off, p, udp_port)
    if etype == ETHERTYPE_IPV6:
        return _ipv6(frame, off, p, udp_port)
    if etype == ETHERTYPE_ROCEV1:
        return _grh(frame, off, p)
    return _fail(NR_ETHERTYPE, p, "eth", max(off - 2, 0), etype)


def _ipv4(frame: bytes, off: int, p: list[int], udp_port: int) -> Walk:
    n = len(frame)
    p[1], p[2] = L3_IPV4, off
    if n - off < SIZE["ip"]:
        return _fail(BAD_TRUNCATED, p, "ip", off, SIZE["ip"], n - off)
    version = _rd(frame, off, SPECS[("ip", "version")])
    if version != 4:
        return _fail(BAD_IP_VERSION, p, "ip", off, version)
    ihl = _rd(frame, off, SPECS[("ip", "ihl")])
    if ihl < SIZE["ip"] // 4:
        return _fail(BAD_IP_HDRLEN, p, "ip", off, ihl)
    hlen = ihl * 4
    p[3] = hlen
    if n - off < hlen:
        return _fail(BAD_TRUNCATED, p, "ip", off, hlen, n - off)
    if _rd(frame, off, SPECS[("ip", "proto")]) != IPPROTO_UDP:
        return _fail(NR_PROTO, p, "ip", off, _rd(frame, off, SPECS[("ip", "proto")]))
    if _rd(frame, off, SPECS[("ip", "flags.mf")]) or _rd(frame, off, SPECS[("ip", "frag_offset")]):
        return _fail(NR_FRAGMENT, p, "ip", off)
    total = _rd(frame, off, SPECS[("ip", "len")])
    if total < hlen + SIZE["udp"]:
        return _fail(BAD_L3_LENGTH, p, "ip", off, total, hlen + SIZE["udp"])
    return _udp(frame, off + hlen, off + total, p, udp_port)


def _ipv6(frame: bytes, off: int, p: list[int], udp_port: int) -> Walk:
    n = len(frame)
    p[1], p[2], p[3] = L3_IPV6, off, SIZE["ipv6"]
    if n - off < SIZE["ipv6"]:
        return _fail(BAD_TRUNCATED, p, "ipv6", off, SIZE["ipv6"], n - off)
    version = _rd(frame, off, SPECS[("ipv6", "version")])
    if version != 6:
        return _fail(BAD_IP_VERSION, p, "ipv6", off, version)
    nxt = _rd(frame, off, SPECS[("ipv6", "nxt")])
    if nxt != IPPROTO_UDP:
        return _fail(NR_PROTO, p, "ipv6", off, nxt)
    plen = _rd(frame, off, SPECS[("ipv6", "plen")])
    if plen < SIZE["udp"]:
        return _fail(BAD_L3_LENGTH, p, "ipv6", off, plen, SIZE["udp"])
    start = off + SIZE["ipv6"]
    return _udp(frame, start, start + plen, p, udp_port)


def _udp(frame: bytes, off: int, end: int, p: list[int], udp_port: int) -> Walk:
    n = len(frame)
    p[4] = off
    if n - off < SIZE["udp"]:
        return _fail(BAD_TRUNCATED, p, "udp", off, SIZE["udp"], n - off)
    dport = _rd(frame, off, SPECS[("udp", "dstport")])
    if dport != udp_port:
        return _fail(NR_PORT, p, "udp", off, dport)
    length = _rd(frame, off, SPECS[("udp", "length")])
    if length != end - off:
        return _fail(BAD_UDP_LENGTH, p, "udp", off, length, end - off)
    return _transport(frame, off + SIZE["udp"], end, p, "ip" if p[1] == L3_IPV4 else "ipv6")


def _grh_fault(frame: bytes, off: int, p: list[int]) -> Walk | None:
    """The GRH at ``off`` cut short or not followed by a BTH (RoCEv1 and native IB alike)."""
    n = len(frame)
    if n - off < SIZE["grh"]:
        return _fail(BAD_TRUNCATED, p, "grh", off, SIZE["grh"], n - off)
    nxt = _rd(frame, off, SPECS[("grh", "nxthdr")])
    if nxt != GRH_NEXT_BTH:
        return _fail(BAD_GRH_NEXT, p, "grh", off, nxt)
    return None


def _grh(frame: bytes, off: int, p: list[int]) -> Walk:
    p[1], p[2], p[3] = L3_GRH, off, SIZE["grh"]
    fault = _grh_fault(frame, off, p)
    if fault is not None:
        return fault
    start = off + SIZE["grh"]
    return _transport(frame, start, start + _rd(frame, off, SPECS[("grh", "paylen")]), p, "grh")


def _lrh(frame: bytes, p: list[int]) -> Walk:
    """A native InfiniBand packet: LRH, the GRH when LNH is 3, then the transport up to the
    end PktLen gives (IBA 7.7)."""
    n = len(frame)
    p[2], p[3] = 0, LRH_SIZE
    if n < LRH_SIZE:
        return _fail(BAD_TRUNCATED, p, "lrh", 0, LRH_SIZE, n)
    lnh = _rd(frame, 0, LRH_SPECS["lnh"])
    if lnh != LNH_LOCAL and lnh != LNH_GLOBAL:
        return _fail(NR_LNH, p, "lrh", 0, lnh)
    p[1] = lnh  # L3_LRH or L3_LRH_GRH
    end = _rd(frame, 0, LRH_SPECS["pktlen"]) * LRH_WORD
    off = LRH_SIZE
    if lnh == LNH_GLOBAL:
        p[3] = LRH_SIZE + SIZE["grh"]
        fault = _grh_fault(frame, off, p)
        if fault is not None:
            return fault
        paylen = _rd(frame, off, SPECS[("grh", "paylen")])
        if paylen != end - off - SIZE["grh"]:
            return _fail(BAD_L3_LENGTH, p, "grh", off, paylen, end - off - SIZE["grh"])
        off += SIZE["grh"]
    if end < off + 4:  # not even room for the ICRC
        return _fail(BAD_L3_LENGTH, p, "lrh", 0, end, off + 4)
    return _transport(frame, off, end, p, "lrh")


def _transport(frame: bytes, off: int, end: int, p: list[int], l3: str) -> Walk:
    """BTH, extended headers, payload, pad and ICRC between ``off`` and ``end``."""
    n = len(frame)
    short = end > n  # the L3 length claims more than was captured
    limit = n if short else end - 4  # where headers must end
    p[5] = off
    if limit - off < SIZE["bth"]:
        return _fail(BAD_TRUNCATED, p, "bth", off, SIZE["bth"], max(limit - off, 0))
    opcode = _rd(frame, off, SPECS[("bth", "opcode")])
    p[6] = opcode
    tver = _rd(frame, off, SPECS[("bth", "tver")])
    if tver != 0:
        return _fail(BAD_TVER, p, "bth", off + SPECS[("bth", "tver")][0], tver)
    plan = OPCODE_PLAN.get(opcode)
    if plan is None or not OPCODE_LINKS[opcode] & (LINK_IB if l3 == "lrh" else LINK_ROCE):
        return _fail(BAD_OPCODE, p, "bth", off, opcode)
    padcnt = _rd(frame, off, SPECS[("bth", "padcnt")])
    pos = off + SIZE["bth"]
    ext, payload_ok, fixed = plan
    for hid, size in ext:
        if limit - pos < size:
            return _fail(BAD_TRUNCATED, p, HEADER_IDS[hid], pos, size, max(limit - pos, 0))
        pos += size
    p[7] = pos
    if short:
        return _fail(BAD_L3_LENGTH, p, l3, p[2], end - p[2], n - p[2])
    icrc = end - 4
    payload_len = icrc - pos - padcnt
    if payload_len < 0:
        return _fail(BAD_PADCNT, p, "bth", off + SPECS[("bth", "padcnt")][0], padcnt,
                     icrc - pos)
    p[8], p[9], p[10] = pos + payload_len, icrc, end
    if not payload_ok and payload_len + padcnt:
        return _fail(BAD_PAYLOAD, p, "payload", pos, payload_len + padcnt)
    if fixed >= 0 and payload_len != fixed:
        return _fail(BAD_PAYLOAD_LEN, p, "payload", pos, payload_len, fixed)
    return Walk(OK, *p, 0, 0, 0, 0)


def macc_offset(w: Walk) -> int:
    """Where the MAC Control opcode starts in a frame the walk stopped at EtherType 0x8808
    (``roce.macc``: PAUSE / PFC); -1 for any other frame.  The walk's error offset is the
    last EtherType field, which ends where the MAC Control header begins."""
    if w.status == NR_ETHERTYPE and w.err_a == ETHERTYPE_MACC:
        return w.err_offset + 2
    return -1


_L3_NAMES = {"ip": "IPv4 total length", "ipv6": "IPv6 payload length",
             "grh": "GRH payload length", "lrh": "LRH packet length"}


def explain(w: Walk) -> ValueError:
    """The exception for a failed walk: NotRoCE or DecodeError, in words a person reads."""
    s, hdr, off, a, b = w.status, HEADER_IDS[w.err_header], w.err_offset, w.err_a, w.err_b
    up = hdr.upper()
    if s == NR_ETHERTYPE:
        return NotRoCE(f"EtherType 0x{a:04x} is not IPv4, IPv6 or RoCEv1", off)
    if s == NR_PROTO:
        return NotRoCE(f"IP protocol {a} is not UDP", off)
    if s == NR_PORT:
        return NotRoCE(f"UDP destination port {a} is not the RoCEv2 port", off)
    if s == NR_FRAGMENT:
        return NotRoCE("IPv4 fragment", off)
    if s == NR_LINKTYPE:
        return NotRoCE(f"link type {a} is not supported", off)
    if s == NR_LNH:
        return NotRoCE(f"LRH LNH {a} carries no IBA transport (raw or IP packet)", off)
    if s == BAD_TRUNCATED:
        return DecodeError(f"{up} truncated at byte {off}: needs {a} bytes, {b} left", hdr, off)
    if s == BAD_IP_VERSION:
        return DecodeError(f"{up} version {a} at byte {off} is wrong", hdr, off)
    if s == BAD_IP_HDRLEN:
        return DecodeError(f"IPv4 header length {a * 4} at byte {off} is below 20", hdr, off)
    if s == BAD_L3_LENGTH:
        what = _L3_NAMES.get(hdr, "length")
        if a > b:
            return DecodeError(f"{what} at byte {off} says {a} bytes, only {b} captured", hdr,
                               off)
        return DecodeError(f"{what} at byte {off} is {a}: less than the {b} bytes of the "
                           "headers", hdr, off)
    if s == BAD_UDP_LENGTH:
        return DecodeError(f"UDP length at byte {off} is {a}, the IP header says {b}", hdr, off)
    if s == BAD_TVER:
        return DecodeError(f"BTH TVer at byte {off} is {a}, must be 0", hdr, off)
    if s == BAD_OPCODE:
        return DecodeError(f"unknown BTH opcode 0x{a:02x} at byte {off}", hdr, off)
    if s == BAD_PADCNT:
        return DecodeError(f"BTH PadCnt {a} at byte {off} exceeds the {b} bytes after the "
                           "headers", hdr, off)
    if s == BAD_PAYLOAD:
        name = OPCODES[w.opcode].short_name
        return DecodeError(f"{name} carries {a} payload bytes at byte {off}; it has none", hdr,
                           off)
    if s == BAD_PAYLOAD_LEN:
        name = OPCODES[w.opcode].short_name
        return DecodeError(f"{name} payload at byte {off} is {a} bytes, must be {b}", hdr, off)
    if s == BAD_GRH_NEXT:
        return DecodeError(f"GRH next header 0x{a:02x} at byte {off} is not BTH (0x1b)", hdr,
                           off)
    return DecodeError(f"status {s} at byte {off}", hdr, off)  # pragma: no cover
