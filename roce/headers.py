"""Header layouts in Construct: the one place where field names, widths and order are written.

Each header is a flat ``BitStruct`` of integer fields.  Field names are Wireshark's (without the
``infiniband.`` prefix), so ``bth.destqp`` here is ``infiniband.bth.destqp`` in tshark.

From the Construct definitions this module derives ``LAYOUTS``: for every header its size and,
for every field, the bit shift and mask inside the header read as one big-endian integer.  The
packet codec, the fast path's offset tables and the Scapy layers all use ``LAYOUTS``; nothing
else restates a field position.

It also owns the meaning of the AETH syndrome (IBA 9.7.5.1: type, credit count, RNR timer,
NAK code).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

from construct import BitsInteger, BitStruct, Construct, ExprAdapter, Flag, Renamed

from roce.options import mac_bytes

# -- address adapters: addresses are strings in Python, integers on the wire -----------------


def _mac_dec(obj: int, ctx: object = None) -> str:
    return obj.to_bytes(6, "big").hex(":")


def _memo(parse: Callable[[str], int]) -> Callable:
    """Addresses repeat from packet to packet: remember the last few thousand parses."""
    cache: dict[str, int] = {}

    def enc(obj: str | bytes | int, ctx: object = None) -> int:
        if type(obj) is int:
            return obj
        try:
            return cache[obj]  # type: ignore[index]
        except (KeyError, TypeError):
            pass
        value = int.from_bytes(obj, "big") if isinstance(obj, bytes) else parse(obj)
        if len(cache) > 4096:
            cache.clear()
        if isinstance(obj, str):
            cache[obj] = value
        return value

    return enc


@_memo
def _mac_enc(obj: str) -> int:
    # six octets, each group one octet: "1:2:3:4:5:6" is 01:02:03:04:05:06 (roce.options)
    return int.from_bytes(mac_bytes(obj), "big")


def _ip4_dec(obj: int, ctx: object = None) -> str:
    return socket.inet_ntop(socket.AF_INET, obj.to_bytes(4, "big"))


@_memo
def _ip4_enc(obj: str) -> int:
    return int.from_bytes(socket.inet_pton(socket.AF_INET, obj), "big")


def _ip6_dec(obj: int, ctx: object = None) -> str:
    return socket.inet_ntop(socket.AF_INET6, obj.to_bytes(16, "big"))


@_memo
def _ip6_enc(obj: str) -> int:
    return int.from_bytes(socket.inet_pton(socket.AF_INET6, obj), "big")


MacAddress = ExprAdapter(BitsInteger(48), _mac_dec, _mac_enc)
IPv4Address = ExprAdapter(BitsInteger(32), _ip4_dec, _ip4_enc)
IPv6Address = ExprAdapter(BitsInteger(128), _ip6_dec, _ip6_enc)

# Python-side converters for the adapters above, used by the compiled codec.
_CONVERTERS: dict[int, tuple[Callable, Callable]] = {
    id(MacAddress): (_mac_dec, _mac_enc),
    id(IPv4Address): (_ip4_dec, _ip4_enc),
    id(IPv6Address): (_ip6_dec, _ip6_enc),
}

U = BitsInteger

# -- L2 / L3 / L4 ------------------------------------------------------------------------------

ETH = BitStruct(
    "dst" / MacAddress * "Destination",
    "src" / MacAddress * "Source",
    "type" / U(16) * "Type",
)
VLAN = BitStruct(
    "priority" / U(3) * "Priority",
    "dei" / U(1) * "DEI",
    "id" / U(12) * "ID",
    "etype" / U(16) * "Type",
)
# Linux cooked captures (libpcap LINKTYPE_LINUX_SLL / SLL2): only what we need to find L3.
SLL = BitStruct(
    "pkttype" / U(16) * "Packet type",
    "hatype" / U(16) * "Link-layer address type",
    "halen" / U(16) * "Link-layer address length",
    "src" / U(64) * "Source",
    "etype" / U(16) * "Protocol",
)
SLL2 = BitStruct(
    "etype" / U(16) * "Protocol",
    "reserved" / U(16) * "Reserved",
    "ifindex" / U(32) * "Interface index",
    "hatype" / U(16) * "Link-layer address type",
    "pkttype" / U(8) * "Packet type",
    "halen" / U(8) * "Link-layer address length",
    "src" / U(64) * "Source",
)
# ECN codepoints of the IP ECN field (RFC 3168): RoCE data goes ECT(0) or ECT(1); a switch
# marks congestion by setting CE.
ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = 0, 1, 2, 3

IPV4 = BitStruct(
    "version" / U(4) * "Version",
    "ihl" / U(4) * "Header Length",
    "dsfield.dscp" / U(6) * "Differentiated Services Codepoint",
    "dsfield.ecn" / U(2) * "Explicit Congestion Notification",
    "len" / U(16) * "Total Length",
    "id" / U(16) * "Identification",
    "flags.rb" / U(1) * "Reserved bit",
    "flags.df" / U(1) * "Don't fragment",
    "flags.mf" / U(1) * "More fragments",
    "frag_offset" / U(13) * "Fragment Offset",
    "ttl" / U(8) * "Time to Live",
    "proto" / U(8) * "Protocol",
    "checksum" / U(16) * "Header Checksum",
    "src" / IPv4Address * "Source Address",
    "dst" / IPv4Address * "Destination Address",
)
IPV6 = BitStruct(
    "version" / U(4) * "Version",
    "tclass" / U(8) * "Traffic Class",
    "flow" / U(20) * "Flow Label",
    "plen" / U(16) * "Payload Length",
    "nxt" / U(8) * "Next Header",
    "hlim" / U(8) * "Hop Limit",
    "src" / IPv6Address * "Source Address",
    "dst" / IPv6Address * "Destination Address",
)
UDP = BitStruct(
    "srcport" / U(16) * "Source Port",
    "dstport" / U(16) * "Destination Port",
    "length" / U(16) * "Length",
    "checksum" / U(16) * "Checksum",
)
# RoCEv1 Global Route Header (IBA 8.3); GIDs shown as IPv6 addresses, as tools do.
GRH = BitStruct(
    "ipver" / U(4) * "IP Version",
    "tclass" / U(8) * "Traffic Class",
    "flowlabel" / U(20) * "Flow Label",
    "paylen" / U(16) * "Payload Length",
    "nxthdr" / U(8) * "Next Header",
    "hoplmt" / U(8) * "Hop Limit",
    "sgid" / IPv6Address * "Source GID",
    "dgid" / IPv6Address * "Destination GID",
)

# Native InfiniBand Local Route Header (IBA 7.7).  Not one of RoCE's headers (it stays out of
# HEADERS and LAYOUTS): roce.families.ib.native decodes it; the structural walk (roce.locate,
# the fast path) reads LNH and PktLen from LRH_LAYOUT to find BTH in a link type 247 packet.
LRH = BitStruct(
    "vl" / U(4) * "Virtual Lane",
    "lver" / U(4) * "Link Version",
    "sl" / U(4) * "Service Level",
    "reserved2" / U(2) * "Reserved (2 bits)",
    "lnh" / U(2) * "Link Next Header",
    "dlid" / U(16) * "Destination Local ID",
    "reserved5" / U(5) * "Reserved (5 bits)",
    "pktlen" / U(11) * "Packet Length",
    "slid" / U(16) * "Source Local ID",
)
# LRH LNH (IBA 7.7.5): what follows the LRH.  PktLen counts 4-byte words (IBA 7.7.8).
LNH_RAW, LNH_IP, LNH_LOCAL, LNH_GLOBAL = 0, 1, 2, 3
LRH_WORD = 4

# -- InfiniBand transport headers (IBA 9.2, 9.3) ------------------------------------------------

BTH = BitStruct(
    "opcode" / U(8) * "Opcode",
    "se" / Flag * "Solicited Event",
    "m" / Flag * "MigReq",
    "padcnt" / U(2) * "Pad Count",
    "tver" / U(4) * "Header Version",
    "p_key" / U(16) * "Partition Key",
    "fecn" / Flag * "FECN",
    "becn" / Flag * "BECN",
    "reserved" / U(6) * "Reserved (6 bits)",
    "destqp" / U(24) * "Destination Queue Pair",
    "a" / Flag * "Acknowledge Request",
    "reserved7" / U(7) * "Reserved (7 bits)",
    "psn" / U(24) * "Packet Sequence Number",
)
RDETH = BitStruct(
    "reserved" / U(8) * "Reserved",
    "eecnxt" / U(24) * "E2E Context",
)
DETH = BitStruct(
    "q_key" / U(32) * "Queue Key",
    "reserved" / U(8) * "Reserved",
    "srcqp" / U(24) * "Source Queue Pair",
)
RETH = BitStruct(
    "va" / U(64) * "Virtual Address",
    "r_key" / U(32) * "Remote Key",
    "dmalen" / U(32) * "DMA Length",
)
ATOMICETH = BitStruct(
    "va" / U(64) * "Virtual Address",
    "r_key" / U(32) * "Remote Key",
    "swapdt" / U(64) * "Swap (Or Add) Data",
    "cmpdt" / U(64) * "Compare Data",
)
AETH = BitStruct(
    "syndrome" / U(8) * "Syndrome",
    "msn" / U(24) * "Message Sequence Number",
)
ATOMICACKETH = BitStruct(
    "origremdt" / U(64) * "Original Remote Data",
)
IMMDT = BitStruct(
    "immdt" / U(32) * "Immediate Data",
)
IETH = BitStruct(
    "ieth" / U(32) * "RKey",
)  # the R_Key to invalidate; Wireshark: infiniband.ieth
XRCETH = BitStruct(
    "reserved" / U(8) * "Reserved",
    "xrcsrq" / U(24) * "XRC Target SRQ",
)
FETH = BitStruct(
    "reserved" / U(26) * "Reserved",
    "sel" / U(2) * "Selectivity Level",
    "plt" / U(4) * "Placement Type",
)
CNP = BitStruct(
    "reserved" / U(128) * "Reserved",
)

# Each field carries its display name (Wireshark's, where Wireshark has the field) as its
# Construct docstring: the decoder's tree reads it from LAYOUTS.

# Header name (the field-name prefix) -> definition.  Opcode rows name headers by these keys.
HEADERS: dict[str, Construct] = {
    "eth": ETH, "vlan": VLAN, "sll": SLL, "sll2": SLL2, "ip": IPV4, "ipv6": IPV6, "udp": UDP,
    "grh": GRH, "bth": BTH, "rdeth": RDETH, "deth": DETH, "reth": RETH,
    "atomiceth": ATOMICETH, "aeth": AETH, "atomicacketh": ATOMICACKETH, "immdt": IMMDT,
    "ieth": IETH, "xrceth": XRCETH, "feth": FETH, "cnp": CNP,
}

# Human names for the decoder's tree.
TITLES: dict[str, str] = {
    "eth": "Ethernet II", "vlan": "802.1Q Virtual LAN", "sll": "Linux cooked capture v1",
    "sll2": "Linux cooked capture v2", "ip": "Internet Protocol Version 4",
    "ipv6": "Internet Protocol Version 6", "udp": "User Datagram Protocol",
    "grh": "Global Route Header", "bth": "Base Transport Header",
    "rdeth": "Reliable Datagram Extended Transport Header",
    "deth": "Datagram Extended Transport Header", "reth": "RDMA Extended Transport Header",
    "atomiceth": "Atomic Extended Transport Header", "aeth": "ACK Extended Transport Header",
    "atomicacketh": "Atomic ACK Extended Transport Header", "immdt": "Immediate Data",
    "ieth": "Invalidate Extended Transport Header", "xrceth": "XRC Extended Transport Header",
    "feth": "FLUSH Extended Transport Header", "cnp": "CNP padding",
}


# -- layouts derived from the definitions ------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    bit_offset: int  # from the start of the header, MSB first
    bits: int
    shift: int  # right shift of the header-as-integer that brings this field to bit 0
    mask: int
    kind: str  # "int", "bool", or "addr"
    decode: Callable | None = None
    encode: Callable | None = None
    title: str = ""  # display name (the Construct docstring)

    @property
    def byte_offset(self) -> int:
        return self.bit_offset // 8


@dataclass(frozen=True)
class Layout:
    name: str
    size: int
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


def _layout(header: str, con: Construct) -> Layout:
    size = con.sizeof()
    total = size * 8
    fields: list[Field] = []
    pos = 0
    for sub in con.subcon.subcons:
        # `"name" / X * "doc"` nests two Renamed wrappers: unwrap, keeping name and doc
        name, docs, inner = sub.name, sub.docs, sub.subcon
        while isinstance(inner, Renamed):
            name, docs, inner = name or inner.name, docs or inner.docs, inner.subcon
        dec = enc = None
        if inner is Flag:
            bits, kind = 1, "bool"
        elif isinstance(inner, BitsInteger):
            bits, kind = inner.length, "int"
        elif id(inner) in _CONVERTERS:
            bits, kind = inner.subcon.length, "addr"
            dec, enc = _CONVERTERS[id(inner)]
        else:  # pragma: no cover - a definition error, found at import
            raise TypeError(f"{header}.{name}: unsupported construct {inner!r}")
        fields.append(Field(name, pos, bits, total - pos - bits, (1 << bits) - 1, kind,
                            dec, enc, docs or name))
        pos += bits
    assert pos == total, header
    return Layout(header, size, tuple(fields))


LAYOUTS: dict[str, Layout] = {name: _layout(name, con) for name, con in HEADERS.items()}


SIZE_OF: dict[str, int] = {name: lay.size for name, lay in LAYOUTS.items()}
LRH_LAYOUT = _layout("lrh", LRH)


# -- a compiled codec: one int.from_bytes per header, shifts and masks per field -----------
# The codec is generated as straight-line Python source from the layout (as the standard
# library's namedtuple does): a loop over field descriptors costs twice as much per packet.


def _compile_decoder(layout: Layout) -> Callable[[bytes, int], dict]:
    # Recently seen header bytes map to their decoded dict; callers get a copy, as they may
    # edit it.
    env: dict[str, object] = {"from_bytes": int.from_bytes, "bool": bool, "cache": {}}
    items = []
    for i, f in enumerate(layout.fields):
        expr = f"(v >> {f.shift}) & {f.mask:#x}" if f.shift else f"v & {f.mask:#x}"
        if f.kind == "bool":
            expr = f"bool({expr})"
        elif f.kind == "addr":
            env[f"conv{i}"] = f.decode
            expr = f"conv{i}({expr})"
        items.append(f"{f.name!r}: {expr}")
    src = (f"def decode(buf, offset=0):\n"
           f"    raw = buf[offset:offset + {layout.size}]\n"
           f"    hit = cache.get(raw)\n"
           f"    if hit is not None:\n"
           f"        return hit.copy()\n"
           f"    v = from_bytes(raw, 'big')\n"
           f"    out = {{{', '.join(items)}}}\n"
           f"    if len(cache) > 4096:\n"
           f"        cache.clear()\n"
           f"    cache[raw] = out.copy()\n"
           f"    return out\n")
    exec(compile(src, f"<roce.headers {layout.name} decoder>", "exec"), env)
    return env["decode"]  # type: ignore[return-value]


def _compile_encoder(layout: Layout) -> Callable[[dict], bytes]:
    # Headers repeat from packet to packet (addresses, P_Key, most of IP), so the encoder
    # remembers recent results keyed by the tuple of field values.
    env: dict[str, object] = {"_tolerant": None, "cache": {}}
    names = ", ".join(f"d[{f.name!r}]" for f in layout.fields)
    lines = ["def encode(d):", "    try:", f"        key = ({names},)",
             "        hit = cache.get(key)", "        if hit is not None:",
             "            return hit"]
    terms, checks = [], []
    for i, f in enumerate(layout.fields):
        if f.kind == "addr":
            env[f"conv{i}"] = f.encode
            lines.append(f"        x{i} = conv{i}(key[{i}])")
        else:
            lines.append(f"        x{i} = key[{i}]")
        checks.append(f"x{i} < 0 or x{i} > {f.mask:#x}")
        terms.append(f"(x{i} << {f.shift})" if f.shift else f"x{i}")
    lines += [f"        if {' or '.join(checks)}:", "            raise TypeError",
              f"        out = ({' | '.join(terms)}).to_bytes({layout.size}, 'big')",
              "        if len(cache) > 4096:", "            cache.clear()",
              "        cache[key] = out", "        return out",
              "    except (KeyError, TypeError, ValueError, OSError, AttributeError):",
              "        return _tolerant(d)"]
    exec(compile("\n".join(lines) + "\n", f"<roce.headers {layout.name} encoder>", "exec"),
         env)
    env["_tolerant"] = _tolerant_encoder(layout)
    return env["encode"]  # type: ignore[return-value]


def _tolerant_encoder(layout: Layout) -> Callable[[dict], bytes]:
    """The slow path: missing or None fields are 0, bools and int-likes are converted, and a
    value that does not fit raises ValueError naming the field."""
    plan = tuple((f.name, f.shift, f.mask, f.bits, f.encode) for f in layout.fields)

    def encode(d: dict) -> bytes:
        v = 0
        for name, shift, mask, bits, conv in plan:
            x = d.get(name) or 0
            try:
                x = int(conv(x) if conv is not None else x)
            except (TypeError, ValueError, OSError, AttributeError) as exc:
                # AttributeError: text expected (an address), something else given
                raise ValueError(f"{layout.name}.{name}: bad value {d.get(name)!r}") from exc
            if x < 0 or x > mask:
                _range_error(layout.name, name, x, bits)
            v |= x << shift
        return v.to_bytes(layout.size, "big")

    return encode


def _range_error(header: str, field: str, value: int, bits: int) -> None:
    raise ValueError(f"{header}.{field} = {value:#x} does not fit in {bits} bits")


class _Codecs(dict):
    """One generated function per header of LAYOUTS, compiled when first looked up: a
    program uses a few of them (an emulator run: Ethernet, IP, UDP, BTH and an extended
    header or two), and compiling all of them would cost every start of roce.  A lookup
    of one already compiled is a plain dict lookup; asking for the whole mapping (its
    keys, length, members) compiles the rest first, so it always shows every header."""

    def __init__(self, make: Callable[[Layout], Callable]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, name: str) -> Callable:
        if name not in LAYOUTS:
            raise KeyError(name)
        fn = self[name] = self._make(LAYOUTS[name])
        return fn

    def _all(self) -> None:
        for name in LAYOUTS.keys() - dict.keys(self):
            self[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        self._all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        return len(LAYOUTS)

    def __contains__(self, name: object) -> bool:
        return name in LAYOUTS

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        return self[name] if name in LAYOUTS else default

    def keys(self):  # type: ignore[no-untyped-def, override]
        self._all()
        return dict.keys(self)

    def values(self):  # type: ignore[no-untyped-def, override]
        self._all()
        return dict.values(self)

    def items(self):  # type: ignore[no-untyped-def, override]
        self._all()
        return dict.items(self)


DECODERS: dict[str, Callable[[bytes, int], dict]] = _Codecs(_compile_decoder)
ENCODERS: dict[str, Callable[[dict], bytes]] = _Codecs(_compile_encoder)


def derive(name: str, con: Construct) -> Layout:
    """The layout of a header defined in another module, derived as this module derives its
    own (``roce.macc`` defines the MAC Control headers)."""
    return _layout(name, con)


def compile_codec(layout: Layout) -> tuple[Callable[[bytes, int], dict],
                                           Callable[[dict], bytes]]:
    """The generated (decoder, encoder) pair of a derived layout, as ``DECODERS`` and
    ``ENCODERS`` hold for this module's headers."""
    return _compile_decoder(layout), _compile_encoder(layout)


def decode(name: str, buf: bytes, offset: int = 0) -> dict:
    """Decode header ``name`` at ``offset`` of ``buf`` into a dict of field values."""
    return DECODERS[name](buf, offset)


def encode(name: str, values: dict) -> bytes:
    """Encode header ``name`` from a dict (missing fields are 0)."""
    return ENCODERS[name](values)


# -- AETH syndrome (IBA 9.7.5.1; docs/protocol.md "AETH syndrome") ---------------------------

AETH_ACK, AETH_RNR_NAK, AETH_RESERVED, AETH_NAK = 0, 1, 2, 3
SYNDROME_TYPES = {AETH_ACK: "ACK", AETH_RNR_NAK: "RNR NAK", AETH_RESERVED: "Reserved",
                  AETH_NAK: "NAK"}

NAK_PSN_SEQUENCE_ERROR = 0
NAK_INVALID_REQUEST = 1
NAK_REMOTE_ACCESS_ERROR = 2
NAK_REMOTE_OPERATIONAL_ERROR = 3
NAK_INVALID_RD_REQUEST = 4
NAK_CODES = {
    NAK_PSN_SEQUENCE_ERROR: "PSN sequence error",
    NAK_INVALID_REQUEST: "invalid request",
    NAK_REMOTE_ACCESS_ERROR: "remote access error",
    NAK_REMOTE_OPERATIONAL_ERROR: "remote operational error",
    NAK_INVALID_RD_REQUEST: "invalid RD request",
}

CREDITS_UNLIMITED = 31
_CREDITS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
            1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)
# RNR NAK timer codes in units of 10 ns so the table stays exact; code 0 is the longest.
_RNR_TIMER_10NS = (65536000, 1000, 2000, 3000, 4000, 6000, 8000, 12000, 16000, 24000, 32000,
                   48000, 64000, 96000, 128000, 192000, 256000, 384000, 512000, 768000, 1024000,
                   1536000, 2048000, 3072000, 4096000, 6144000, 8192000, 12288000, 16384000,
                   24576000, 32768000, 49152000)


def syndrome(kind: int, value: int) -> int:
    """Pack an AETH syndrome byte from its type (bits 6:5) and value (bits 4:0)."""
    if not 0 <= kind <= 3 or not 0 <= value <= 31:
        raise ValueError(f"AETH syndrome type {kind} / value {value} out of range")
    return (kind << SYNDROME_TYPE_SHIFT) | value


# The split of the AETH syndrome byte (IBA 9.7.5.1): bit 7 reserved, bits 6:5 type, 4:0 value.
# Code generators (the decoder's line cache) use these two numbers; everything else calls the
# functions below.
SYNDROME_TYPE_SHIFT = 5
SYNDROME_VALUE_MASK = 0x1F


def syndrome_type(syn: int) -> int:
    return (syn >> SYNDROME_TYPE_SHIFT) & 3


def syndrome_value(syn: int) -> int:
    return syn & SYNDROME_VALUE_MASK


def credit_count(code: int) -> int | None:
    """Credits granted by an ACK credit code; None means unlimited (code 31)."""
    if code == CREDITS_UNLIMITED:
        return None
    return _CREDITS[code]


def rnr_timer_us(code: int) -> float:
    """Minimum RNR NAK timer in microseconds for a 5-bit timer code."""
    return _RNR_TIMER_10NS[code & 0x1F] / 100


def rnr_timer_ns(code: int) -> int:
    return _RNR_TIMER_10NS[code & 0x1F] * 10


def nak_name(code: int) -> str:
    return NAK_CODES.get(code, f"reserved NAK code {code}")


def describe_syndrome(syn: int) -> str:
    """Short text for a syndrome byte: ``ACK credits=31``, ``RNR NAK 0.64ms``, ``NAK ...``."""
    kind, value = syndrome_type(syn), syndrome_value(syn)
    if kind == AETH_ACK:
        return "ACK credits=" + ("unlimited" if value == CREDITS_UNLIMITED else str(value))
    if kind == AETH_RNR_NAK:
        return f"RNR NAK {rnr_timer_us(value) / 1000:g}ms"
    if kind == AETH_NAK:
        return "NAK " + nak_name(value).replace(" ", "-")
    return f"Reserved syndrome 0x{syn:02x}"


# -- selective NAK (IRN) in an AETH: docs/protocol.md, "Selective repeat (IRN) encoding" ----------

# A selective NAK's out-of-order PSN (its MSN) is at most this far ahead of its ePSN (its BTH
# PSN): far beyond any window (16 MiB of 4 KiB packets), a 1-in-4096 chance for a go-back-N
# NAK's MSN.
SACK_AHEAD = 1 << 12
_PSN_MASK = (1 << 24) - 1  # BTH PSN width (IBA 9.2)
# By AETH syndrome byte: its NAK code, -1 when it is no NAK (what looks_selective_nak takes).
NAK_CODE_OF: tuple[int, ...] = tuple(syndrome_value(s) if syndrome_type(s) == AETH_NAK else -1
                                     for s in range(256))


def looks_selective_nak(code: int, psn: int, msn: int) -> bool:
    """What one packet shows of a selective NAK (``roce decode``): a NAK PSN sequence error
    whose MSN lies 1..SACK_AHEAD PSNs ahead of its BTH PSN."""
    return code == NAK_PSN_SEQUENCE_ERROR and 0 < (msn - psn) & _PSN_MASK <= SACK_AHEAD


def selective_aeth(syndrome: int, psn: int, msn: int) -> bool:
    """``looks_selective_nak`` of an AETH (syndrome byte, MSN) under a BTH PSN: the
    ``aeth.selective`` field of ``roce decode``."""
    return looks_selective_nak(NAK_CODE_OF[syndrome], psn, msn)


def define(name: str, con: Construct) -> tuple[Layout, Callable[[bytes, int], dict],
                                               Callable[[dict], bytes]]:
    """Layout, decoder and encoder of a header that a protocol family owns
    (``roce.families``): the same derivation as the headers above, kept out of
    ``LAYOUTS`` so that RoCE's tables stay RoCE's."""
    layout = _layout(name, con)
    return layout, _compile_decoder(layout), _compile_encoder(layout)
