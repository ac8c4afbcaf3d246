"""Scapy layers for RoCE, generated from ``roce.headers.LAYOUTS`` and ``roce.opcodes.OPCODES``.

This module owns the Scapy face of roce: one ``Packet`` class per header (``BTH``, ``RDETH``,
``DETH``, ``RETH``, ``AtomicETH``, ``AETH``, ``AtomicAckETH``, ``ImmDt``, ``IETH``, ``XRCETH``,
``FETH``, ``CNPPadding`` and ``GRH`` for RoCEv1), the bindings that make Scapy dissect RoCE
with them, and the conversions ``to_scapy`` / ``from_scapy``.  Nothing about a header's
layout is written here: field names, widths, order and defaults come from ``roce.headers``
and ``roce.packet.craft``'s templates, what follows BTH from the opcode table.

The RoCE trailer (pad and ICRC) belongs to ``BTH``, as Scapy's own ``scapy.contrib.roce``
keeps its ICRC there:

* building: ``BTH.post_build`` fills PadCnt, appends the pad and a 4-byte ICRC placeholder,
  so the IP and UDP lengths Scapy computes include them; then ``BTH.build_done``, which Scapy
  calls with the finished frame, computes the ICRC through ``roce.fast`` over those very
  bytes (so fuzzed or random header values are covered as sent) and writes it in;
* dissecting: ``BTH.do_dissect`` takes the ICRC and the pad off the end before the
  extended headers and payload are dissected; ``pkt[BTH].icrc`` is the stored value,
  ``pkt[BTH].icrc_valid`` the fast path's verdict over the whole frame.

An ICRC given explicitly (or found by dissection) is kept; ``del pkt[BTH].icrc`` makes Scapy
compute it again after an edit, as ``del pkt[IP].chksum`` does for IP.

Scapy's own RoCE layer, ``scapy.contrib.roce``, and these are one layer set (the bridge is
``roce.wire.contrib``): each of contrib's classes (``BTH``, ``AETH``, ``GRH``, ``CNPPadding``) is
a base class of ours of the same name, its field names (``dqpn``, ``pkey``, ``padcount``,
``nexthdr``, ``reserved1`` ...) are second names of our fields (Wireshark's stay the primary
ones), and while bound ``scapy.contrib.roce`` names our classes, so scripts written for it
dissect, build and look layers up as before.  Where contrib's meaning differs, its names keep
it: a BTH given contrib's names gets Scapy's UDP checksum (ours: RoCE's 0), ``padcount``
leaves the pad bytes in the payload (``padcnt`` appends them).  Not kept: GRH's GIDs read as
addresses (contrib: integers; integers are taken when building), GRH's defaults are a valid
RoCEv1 header (contrib: PayLen 0, NxtHdr 0, FlowLabel 6), pad bytes are ``pad``, not payload.

Importing this module binds (``bind()``); ``unbind()`` restores exactly what was before.
What ``bind()`` changes, all of it:

* dissection: UDP destination port 4791 goes to our ``BTH``; Ethertype 0x8915 under Ether,
  802.1Q and Linux cooked captures (v1, v2) to our ``GRH``.  Contrib's bottom-up bindings under
  those layers (UDP 4791, Ether 0x8915) are taken out and put back by ``unbind()``; its
  top-down ones stay, so ``UDP()/contrib_BTH()`` still gets port 4791;
* building: ``UDP()/BTH()`` sets port 4791 and UDP checksum 0; ``Ether()/GRH()`` and the
  others Ethertype 0x8915;
* ``scapy.contrib.roce.BTH``, ``AETH``, ``GRH``, ``CNPPadding`` (and their copies in
  ``builtins`` made by ``load_contrib("roce")``) name our classes; contrib's classes get
  ``match_subclass`` so that, holding one of them from before, ``pkt[BTH]`` and contrib's own
  ICRC code still find our layers and theirs.  Such a class object taken before binding stays
  contrib's: ``pkt[BTH]``, ``BTH in pkt`` and ``isinstance`` find our layers with it, identity
  tests (``type(layer) is BTH``, ``BTH in pkt.layers()``) do not; names taken after do.

Bindings among our own classes (GRH to BTH, BTH to each opcode's first extended header) are
made once and stay; they touch no class of Scapy's.  Importing ``roce`` without this module
(the codec, the CLI) changes nothing in Scapy.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

from scapy.compat import raw
from scapy.config import conf
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteField,
    EnumField,
    Field,
    IntField,
    IP6Field,
    IPField,
    LongField,
    MACField,
    ShortField,
    ThreeBytesField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Dot1Q, Ether
from scapy.packet import Packet, bind_bottom_up, bind_layers, bind_top_down, split_layers
from scapy.utils import checksum

from roce import fast
from roce.headers import (
    LAYOUTS,
    SIZE_OF,
    SYNDROME_TYPES,
    TITLES,
    describe_syndrome,
    syndrome_type,
    syndrome_value,
)
from roce.headers import Field as LayoutField
from roce.icrc import L3_GRH, L3_IPV4, L3_IPV6, to_trailer
from roce.locate import (
    ETHERTYPE_ROCEV1,
    GRH_NEXT_BTH,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
    OK,
    ROCE_PORT,
    Walk,
)
from roce.opcodes import CNP_OPCODE, OPCODES, Opcode, lookup
from roce.packet import Packet as RocePacket
from roce.packet import craft, parse
from roce.wire.contrib import ORIGINALS, Aliased, LayerMeta, aliases, join, part

__all__ = ["BTH", "RDETH", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH",
           "XRCETH", "FETH", "CNPPadding", "GRH", "LAYERS", "CONTRIB", "cnp",
           "to_scapy", "from_scapy", "bind", "unbind"]

# Public class names; which headers get a class is derived below from the opcode table.
_CLASS_NAMES: dict[str, str] = {
    "bth": "BTH", "rdeth": "RDETH", "deth": "DETH", "reth": "RETH", "atomiceth": "AtomicETH",
    "aeth": "AETH", "atomicacketh": "AtomicAckETH", "immdt": "ImmDt", "ieth": "IETH",
    "xrceth": "XRCETH", "feth": "FETH", "cnp": "CNPPadding", "grh": "GRH",
}
_EXT_HEADERS: tuple[str, ...] = tuple(dict.fromkeys(h for op in OPCODES.values()
                                                     for h in op.headers))

# -- field display ------------------------------------------------------------------------------
# Scapy field types differ only in how they pack and how they print; the packing is chosen
# from a layout field's width and alignment, the printing by these small mixins.


def _bits(fld: Field) -> int:
    return int(fld.sz * 8)  # BitField keeps a fractional byte size


class _Hex:
    """Reserved bits and fields wider than 32 bits (virtual addresses, atomic operands):
    zero-padded hex to the field's width."""

    __slots__ = ()

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if not isinstance(x, int):
            return super().i2repr(pkt, x)  # type: ignore[misc]
        return f"{x:#0{2 + (_bits(self) + 3) // 4}x}"  # type: ignore[arg-type]


class _DecHex:
    """Wide counters and keys: decimal with hex beside it (Wireshark's BASE_DEC_HEX)."""

    __slots__ = ()

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if not isinstance(x, int):
            return super().i2repr(pkt, x)  # type: ignore[misc]
        return f"{x} ({x:#0{2 + (_bits(self) + 3) // 4}x})"  # type: ignore[arg-type]


class _Bool:
    """A one-bit flag: set from True/False (or the flag's name), shown as True/False."""

    __slots__ = ()

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        if isinstance(x, str):
            x = x.strip().lower() in ("1", "true", "yes", "on", self.name.lower())  # type: ignore[attr-defined]
        return int(x) if isinstance(x, bool) else x

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return repr(bool(x)) if isinstance(x, int) else repr(x)


class _Address:
    """An address: shown and read as text; an integer (contrib's GIDs) is taken too."""

    __slots__ = ()

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        if isinstance(x, int) and not isinstance(x, bool):
            x = _ADDRESS_TEXT[_bits(self)](x)  # type: ignore[arg-type]
        return super().any2i(pkt, x)  # type: ignore[misc]


class _Opcode:
    """BTH opcode: shown by its table ident; set by number, ident or any ``lookup`` spelling."""

    __slots__ = ()

    def any2i_one(self, pkt: Packet | None, x: Any) -> Any:
        if isinstance(x, Opcode):
            return x.code
        if isinstance(x, str):
            s2i = self.s2i  # type: ignore[attr-defined]
            return s2i[x] if x in s2i else lookup(x).code
        return super().any2i_one(pkt, x)  # type: ignore[misc]


class _Syndrome:
    """AETH syndrome byte, shown split into its type and value (IBA 9.7.5.1)."""

    __slots__ = ()

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if not isinstance(x, int):
            return super().i2repr(pkt, x)  # type: ignore[misc]
        return (f"{x:#04x} (type {SYNDROME_TYPES[syndrome_type(x)]}, value "
                f"{syndrome_value(x)}: {describe_syndrome(x)})")


# Byte-aligned fields of a struct width pack faster as Scapy's fixed fields than as
# BitFields; their widths are read from Scapy, not written here.
_FIXED: dict[int, type[Field]] = {
    int(cls("_", 0).sz * 8): cls
    for cls in (ByteField, ShortField, ThreeBytesField, IntField, LongField)}
_STRUCT_FMT: dict[int, str] = {struct.calcsize(c) * 8: c for c in "BHIQ"}
_ADDRESS: dict[int, type[Field]] = {  # address width -> field; "addr" is IPv4, IPv6 or MAC
    int(cls("_", None).sz * 8): cls for cls in (IPField, IP6Field, MACField)}
_ADDRESS_TEXT: dict[int, Any] = {  # address width -> int-to-text, from the layouts
    f.bits: f.decode for lay in LAYOUTS.values() for f in lay.fields if f.kind == "addr"}


@cache
def _field_class(mixin: type | None, base: type[Field]) -> type[Field]:
    if mixin is None:
        return base
    return type(f"{mixin.__name__.strip('_')}{base.__name__}", (mixin, base), {"__slots__": ()})


def _packing(f: LayoutField) -> type[Field] | None:
    """The fixed Scapy field that packs ``f`` exactly, or None for a BitField."""
    return _FIXED.get(f.bits) if f.bit_offset % 8 == 0 else None


def _scapy_field(header: str, f: LayoutField, default: Any) -> Field:
    """One Scapy field for layout field ``f`` of ``header``."""
    if isinstance(default, bool):
        default = int(default)
    if f.kind == "addr":
        assert f.bit_offset % 8 == 0, f"{header}.{f.name}: address not byte aligned"
        return _field_class(_Address, _ADDRESS[f.bits])(f.name, default)
    if header == "bth" and f.name == "opcode":
        idents = {code: op.ident for code, op in OPCODES.items()}
        if f.bit_offset % 8 == 0 and f.bits in _STRUCT_FMT:
            return _field_class(_Opcode, EnumField)(f.name, default, idents,
                                                        fmt=_STRUCT_FMT[f.bits])
        return _field_class(_Opcode, BitEnumField)(f.name, default, f.bits, idents)
    if f.kind == "bool":
        mixin: type | None = _Bool
    elif header == "aeth" and f.name == "syndrome":
        mixin = _Syndrome
    elif f.name.startswith("reserved") or f.bits > 32:
        mixin = _Hex
    elif f.bits >= 16:
        mixin = _DecHex
    else:
        mixin = None
    fixed = _packing(f)
    if fixed is not None:
        return _field_class(mixin, fixed)(f.name, default)
    return _field_class(mixin, BitField)(f.name, default, f.bits)


def _defaults() -> dict[str, dict[str, Any]]:
    """Default field values: those ``roce.craft`` starts from (None = computed)."""
    first = next(iter(OPCODES.values()))
    out = {"bth": craft(first).headers["bth"],
           "grh": craft(first, roce_version=1).headers["grh"]}
    for op in OPCODES.values():
        for name in op.headers:
            if name not in out:
                out[name] = craft(op).headers[name]
    return out


_DEFAULTS = _defaults()


def _fields(header: str) -> list[Field]:
    return [_scapy_field(header, f, _DEFAULTS[header].get(f.name))
            for f in LAYOUTS[header].fields]


def _put(header: str, raw_hdr: bytes, field: str, value: int) -> bytes:
    """``raw_hdr`` with one layout field replaced (PadCnt, GRH PayLen are filled this way)."""
    lay = LAYOUTS[header]
    f = lay.field(field)
    v = int.from_bytes(raw_hdr[:lay.size], "big") & ~(f.mask << f.shift)
    return (v | ((value & f.mask) << f.shift)).to_bytes(lay.size, "big") + raw_hdr[lay.size:]


def _get(header: str, raw_hdr: bytes, field: str) -> int:
    f = LAYOUTS[header].field(field)
    return (int.from_bytes(raw_hdr[:SIZE_OF[header]], "big") >> f.shift) & f.mask


# -- the trailer fields of BTH ----------------------------------------------------------------


class _TrailerField(Field[Any, Any]):
    """A value that sits after the payload: BTH's post_build writes it and do_dissect reads
    it, so in the header's own bytes it takes no room."""

    __slots__ = ()

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        return s, None


class _PadField(_TrailerField):
    """The pad bytes before the ICRC; None = PadCnt zero bytes."""

    __slots__ = ()

    def any2i(self, pkt: Packet | None, x: Any) -> Any:
        return x if x is None else bytes(x)


class _ICRCField(_TrailerField):
    """The ICRC as Wireshark shows it (the trailer read big-endian); None = compute."""

    __slots__ = ()

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return repr(x) if x is None else f"{x:#010x}"


_ICRC_LEN = len(to_trailer(0))

# -- layer classes ------------------------------------------------------------------------------

_L3_KINDS: tuple[tuple[type[Packet], int], ...] = ((IP, L3_IPV4), (IPv6, L3_IPV6))
_LINKTYPES: tuple[tuple[type[Packet], int], ...] = (
    (Ether, LINKTYPE_ETHERNET), (CookedLinux, LINKTYPE_LINUX_SLL),
    (CookedLinuxV2, LINKTYPE_LINUX_SLL2), (IP, LINKTYPE_RAW), (IPv6, LINKTYPE_RAW))


def _linktype(layer: Packet) -> int | None:
    for cls, linktype in _LINKTYPES:
        if isinstance(layer, cls):
            return linktype
    return None


def _l3_kind(layer: Packet) -> int:
    if isinstance(layer, _GRHBase):
        return L3_GRH
    for cls, kind in _L3_KINDS:
        if isinstance(layer, cls):
            return kind
    return 0


def _header_len(layer: Packet) -> int:
    """Bytes ``layer`` puts in front of its payload."""
    n = len(layer.self_build())
    if isinstance(layer, IP) and layer.raw_packet_cache is None:
        n += -n % 4  # IP.post_build pads the options
    return n


class _BTHBase(Packet):
    """BTH behaviour: PadCnt, pad and ICRC, summary, ICRC check (fields are generated)."""

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        padcnt = self.getfieldval("padcnt")
        if padcnt is None:
            padcnt = -max(len(pay) - _ext_len(self), 0) & LAYOUTS["bth"].field("padcnt").mask
            pkt = _put("bth", pkt, "padcnt", padcnt)
        pad = self.getfieldval("pad")
        body = pkt + pay + (bytes(padcnt) if pad is None else pad)
        icrc = self.getfieldval("icrc")
        if icrc is not None:
            return body + to_trailer(icrc)
        # Placeholder: the length of what this layer built, ICRC included.  build_done reads
        # it to find where BTH starts in the bytes it is handed, whichever layer those
        # bytes start at; it is always overwritten there.
        return body + (len(body) + _ICRC_LEN).to_bytes(_ICRC_LEN, "big")

    def build_done(self, p: bytes) -> bytes:
        if self.getfieldval("icrc") is None:
            p = self._with_icrc(p)
        return super().build_done(p)

    def _with_icrc(self, p: bytes) -> bytes:
        end = len(p) - len(self.build_padding())
        if end < _ICRC_LEN:
            return p
        bth_off = end - int.from_bytes(p[end - _ICRC_LEN:end], "big")
        frame, start = p, 0
        w = _locate(self, p, bth_off, end) if bth_off >= 0 else None
        if w is None:
            # The L3 header is not in these bytes (``raw(pkt[BTH])``): the ICRC covers it
            # all the same, so build the whole packet once and keep our part of it.
            first = self.firstlayer()
            if first is not self and bth_off >= 0:
                frame = first.do_build() + first.build_padding()
                start = len(frame) - len(p)
                w = _locate(self, frame, start + bth_off, start + end) if start >= 0 else None
            if w is None:  # no L3 header at all: nothing defines an ICRC
                return p[:end - _ICRC_LEN] + bytes(_ICRC_LEN) + p[end:]
        icrc = fast.icrc_of(frame, w)
        frame = frame[:w.icrc_off] + to_trailer(icrc) + frame[w.l4_end:]
        udp = self.underlayer
        if isinstance(udp, UDP) and w.udp_off >= 0 and udp.getfieldval("chksum") is None:
            # UDP.post_build summed the placeholder; RoCE sends 0 (our default), but a
            # checksum asked for must cover the ICRC.
            frame = _with_udp_checksum(frame, w)
        return frame[start:]

    def _frame_and_walk(self) -> tuple[bytes, Walk | None]:
        first = self.firstlayer()
        frame = raw(first)
        end = len(frame) - len(self.build_padding())
        return frame, _locate(self, frame, end - len(self.do_build()), end)

    def compute_icrc(self, p: bytes | None = None) -> bytes:
        """The four ICRC bytes this packet's bytes call for (zeros without an IP or GRH
        header): ``scapy.contrib.roce``'s method, by roce's fast path; ``p`` is not used."""
        return to_trailer(self.icrc_expected or 0)

    def _alias_set(self, name: str) -> None:
        # contrib's PadCount is a header field only: its users put the pad in the payload
        if self.contrib_aliases[name].field == "padcnt" and "pad" not in self.fields:
            self.setfieldval("pad", b"")

    @property
    def icrc_expected(self) -> int | None:
        """The ICRC this packet's bytes call for (None without an IP or GRH header)."""
        frame, w = self._frame_and_walk()
        return None if w is None else fast.icrc_of(frame, w)

    @property
    def icrc_valid(self) -> bool:
        """Whether the ICRC on the wire matches the frame, by roce's fast path (False when
        there is no IP or GRH header for an ICRC to cover)."""
        frame, w = self._frame_and_walk()
        return w is not None and fast.icrc_of(frame, w) == int.from_bytes(
            frame[w.icrc_off:w.l4_end], "big")

    def do_dissect(self, s: bytes) -> bytes:
        size = SIZE_OF["bth"]
        if len(s) < size + _ICRC_LEN:  # cut short: no trailer to take off
            return super().do_dissect(s)
        icrc_off = len(s) - _ICRC_LEN
        op = OPCODES.get(_get("bth", s, "opcode"))
        headers_end = min(size + (_EXT_LEN[op.code] if op else 0), icrc_off)
        pad_off = max(icrc_off - _get("bth", s, "padcnt"), headers_end)
        rest = super().do_dissect(s[:pad_off])
        self.fields["pad"] = s[pad_off:icrc_off]
        self.fields["icrc"] = int.from_bytes(s[icrc_off:], "big")
        # Without a cache Scapy rebuilds this layer through post_build, which puts the pad
        # and ICRC back: raw(Ether(frame)) == frame.
        self.raw_packet_cache = None
        return rest

    def mysummary(self) -> str:
        code = self.getfieldval("opcode")
        op = OPCODES.get(code)
        name = op.short_name if op else f"Unknown opcode {code:#04x}"
        return f"{name} QP={self.getfieldval('destqp'):#08x} PSN={self.getfieldval('psn')}"


class _ExtHeader(Packet):
    """An extended transport header: what follows it depends on the opcode in BTH."""

    _roce_header = ""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        bth = self.underlayer
        while bth is not None and not isinstance(bth, _BTHBase):
            bth = bth.underlayer
        if bth is not None:
            chain = _CHAIN.get(bth.getfieldval("opcode"), ())
            if type(self) in chain:
                i = chain.index(type(self)) + 1
                if i < len(chain):
                    return chain[i]
        return conf.raw_layer


class _AETHMixin:
    """The syndrome's parts (roce.headers holds their meaning)."""

    __slots__ = ()

    @property
    def syndrome_type(self) -> str:
        return SYNDROME_TYPES[syndrome_type(self.getfieldval("syndrome"))]  # type: ignore[attr-defined]

    @property
    def syndrome_value(self) -> int:
        return syndrome_value(self.getfieldval("syndrome"))  # type: ignore[attr-defined]

    @property
    def syndrome_text(self) -> str:
        return describe_syndrome(self.getfieldval("syndrome"))  # type: ignore[attr-defined]


class _GRHBase(Packet):
    """GRH behaviour: PayLen filled when None; what follows PayLen is Ethernet padding."""

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.getfieldval("paylen") is None:
            pkt = _put("grh", pkt, "paylen", len(pay))
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        n = self.getfieldval("paylen")
        return s[:n], s[n:]


def _make(header: str, base: type[Packet], mixins: tuple[type, ...] = (),
          extra: tuple[Field, ...] = ()) -> type[Packet]:
    """The Scapy class for ``header``: fields from its layout, name from TITLES; a subclass
    of ``scapy.contrib.roce``'s class of the same name, if it has one, taking its field
    names (roce.wire.contrib)."""
    fields = _fields(header)
    for fld in fields + list(extra):
        # The metaclass would read a same-named class attribute as a field default.
        assert not hasattr(Packet, fld.name), f"{header}.{fld.name} shadows a Packet attribute"
    name = _CLASS_NAMES[header]
    theirs = ORIGINALS.get(name)
    ns = {"name": TITLES[header], "fields_desc": fields + list(extra), "_roce_header": header,
          "__module__": __name__,
          "__doc__": f"{TITLES[header]} ({SIZE_OF[header]} bytes), from roce.headers.",
          # found by pkt[cls] for contrib's cls too; contrib's bindings are not inherited
          "match_subclass": True, "payload_guess": [], "overload_fields": {}}
    if theirs is None:
        return LayerMeta(name, (*mixins, base), ns)
    ns["contrib_class"] = theirs
    ns["contrib_aliases"] = aliases(theirs, LAYOUTS[header], tuple(f.name for f in extra))
    return LayerMeta(name, (*mixins, base, Aliased, theirs), ns)


LAYERS: dict[str, type[Packet]] = {
    "bth": _make("bth", _BTHBase, extra=(_PadField("pad", None), _ICRCField("icrc", None))),
    "grh": _make("grh", _GRHBase),
}
for _name in _EXT_HEADERS:
    LAYERS[_name] = _make(_name, _ExtHeader, (_AETHMixin,) if _name == "aeth" else ())

BTH = LAYERS["bth"]
RDETH = LAYERS["rdeth"]
DETH = LAYERS["deth"]
RETH = LAYERS["reth"]
AtomicETH = LAYERS["atomiceth"]
AETH = LAYERS["aeth"]
AtomicAckETH = LAYERS["atomicacketh"]
ImmDt = LAYERS["immdt"]
IETH = LAYERS["ieth"]
XRCETH = LAYERS["xrceth"]
FETH = LAYERS["feth"]
CNPPadding = LAYERS["cnp"]
GRH = LAYERS["grh"]

# Per opcode: the extended header classes in wire order, and their total size.
_CHAIN: dict[int, tuple[type[Packet], ...]] = {
    code: tuple(LAYERS[h] for h in op.headers) for code, op in OPCODES.items()}
_EXT_LEN: dict[int, int] = {
    code: sum(SIZE_OF[h] for h in op.headers) for code, op in OPCODES.items()}


def _ext_len(bth: Packet) -> int:
    """Bytes of extended headers in front of the payload: what the opcode dictates, or
    for an opcode outside the table, the extended-header layers actually stacked."""
    n = _EXT_LEN.get(bth.getfieldval("opcode"))
    if n is not None:
        return n
    n, layer = 0, bth.payload
    while isinstance(layer, _ExtHeader):
        n += SIZE_OF[layer._roce_header]
        layer = layer.payload
    return n


# -- where the ICRC's bytes are ------------------------------------------------------------------


def _locate(bth: Packet, frame: bytes, bth_off: int, end: int) -> Walk | None:
    """Where L3, UDP, BTH and the ICRC lie in ``frame``; ``bth_off`` and ``end`` (the end of
    the ICRC) are known, the rest is found.

    The fast path's walk does it when ``frame`` starts at the packet's first layer and is
    well formed; otherwise (bytes starting further in, a GRH with no Ethernet in front, a
    deliberately malformed packet) the layers between L3 and BTH are measured backwards
    from BTH.  None when neither finds a whole BTH and ICRC after an L3 header inside
    ``frame`` (a frame cut short: no ICRC to compute or check).
    """
    udp = bth.underlayer
    port = udp.getfieldval("dport") if isinstance(udp, UDP) else ROCE_PORT
    linktype = _linktype(bth.firstlayer())
    if linktype is not None and isinstance(port, int):
        w = fast.walk(frame, linktype, port)
        if w.status == OK and w.bth_off == bth_off and w.l4_end == end:
            return w
    off, udp_off, layer = bth_off, -1, bth.underlayer
    while layer is not None:
        size = _header_len(layer)
        off -= size
        if isinstance(layer, UDP) and udp_off < 0:
            udp_off = off
        kind = _l3_kind(layer)
        if kind:
            if off < 0 or end > len(frame) or end - _ICRC_LEN < bth_off + SIZE_OF["bth"]:
                return None  # cut short or damaged: the bytes cannot hold what an ICRC covers
            return Walk(status=OK, vlans=0, l3_kind=kind, l3_off=off, l3_len=size,
                        udp_off=udp_off, bth_off=bth_off, opcode=bth.getfieldval("opcode"),
                        payload_off=-1, pad_off=-1, icrc_off=end - _ICRC_LEN, l4_end=end,
                        err_header=0, err_offset=0, err_a=0, err_b=0)
        layer = layer.underlayer
    return None


def _with_udp_checksum(frame: bytes, w: Walk) -> bytes:
    """``frame`` with the UDP checksum (RFC 768 / 8200 pseudo-header) recomputed."""
    l3 = "ip" if w.l3_kind == L3_IPV4 else "ipv6"
    lay = LAYOUTS[l3]
    src, dst = lay.field("src"), lay.field("dst")
    addrs = frame[w.l3_off + src.byte_offset:w.l3_off + dst.byte_offset + dst.bits // 8]
    ck_field = LAYOUTS["udp"].field("checksum")
    ck_at = w.udp_off + ck_field.byte_offset
    ck_len = ck_field.bits // 8
    segment = frame[w.udp_off:ck_at] + bytes(ck_len) + frame[ck_at + ck_len:w.l4_end]
    proto = _get(l3, frame[w.l3_off:], "proto" if l3 == "ip" else "nxt")
    if w.l3_kind == L3_IPV4:
        pseudo = addrs + struct.pack("!BBH", 0, proto, len(segment))
    else:
        pseudo = addrs + struct.pack("!I3xB", len(segment), proto)
    ck = checksum(pseudo + segment) or 0xFFFF  # 0 means "no checksum": send its complement
    return frame[:ck_at] + ck.to_bytes(ck_len, "big") + frame[ck_at + ck_len:]


# -- bindings ------------------------------------------------------------------------------------


# Where RoCE enters from below: (lower layer, its field, value) for UDP and the Ethertypes.
_ENTRIES: tuple[tuple[type[Packet], str, int], ...] = (
    (Ether, "type", ETHERTYPE_ROCEV1), (Dot1Q, "type", ETHERTYPE_ROCEV1),
    (CookedLinux, "proto", ETHERTYPE_ROCEV1), (CookedLinuxV2, "proto", ETHERTYPE_ROCEV1))
# Contrib's bottom-up entries that bind() took out: (lower layer, index, entry) to put back.
_displaced: list[tuple[type[Packet], int, tuple[dict[str, Any], type[Packet]]]] = []
_bound = False


def bind() -> None:
    """Make Scapy dissect RoCE into these classes and ``scapy.contrib.roce`` name them (done on
    import; a no-op when bound).  The module docstring lists every change."""
    global _bound
    if _bound:
        return
    theirs = set(ORIGINALS.values())
    for lower in dict.fromkeys([UDP] + [lower for lower, _, _ in _ENTRIES]):
        kept = [entry for entry in lower.payload_guess if entry[1] not in theirs]
        if len(kept) < len(lower.payload_guess):
            _displaced.extend((lower, i, entry) for i, entry in enumerate(lower.payload_guess)
                              if entry[1] in theirs)
            lower.payload_guess = kept  # a list of its own, as bind_bottom_up makes
    bind_bottom_up(UDP, BTH, dport=ROCE_PORT)
    # RoCE sends UDP checksum 0 (docs/protocol.md, rxe_net.c; what roce.craft builds).
    bind_top_down(UDP, BTH, dport=ROCE_PORT, chksum=0)
    for lower, key, value in _ENTRIES:
        bind_layers(lower, GRH, {key: value})
    join({cls.__name__: cls for cls in LAYERS.values()})
    _bound = True


def unbind() -> None:
    """Undo ``bind``: UDP 4791 and Ethertype 0x8915 dissect as they did before (into
    ``scapy.contrib.roce``'s classes, which it names again)."""
    global _bound
    if not _bound:
        return
    part()
    split_layers(UDP, BTH, dport=ROCE_PORT)
    for lower, key, value in _ENTRIES:
        split_layers(lower, GRH, {key: value})
    for lower, i, entry in _displaced:  # in the order taken out: each index is right again
        lower.payload_guess = lower.payload_guess[:i] + [entry] + lower.payload_guess[i:]
    _displaced.clear()
    _bound = False


def _bind_transport() -> None:
    """Bindings among our own classes, which stay whether or not ``bind`` is in effect:
    GRH to BTH, and BTH to the first extended header of each opcode."""
    bind_layers(GRH, BTH, nxthdr=GRH_NEXT_BTH)
    first_of: dict[str, list[int]] = {}
    for code, op in OPCODES.items():
        if op.headers:
            first_of.setdefault(op.headers[0], []).append(code)
    for header, codes in first_of.items():
        for code in codes:
            bind_bottom_up(BTH, LAYERS[header], opcode=code)
        if len(codes) == 1:  # unambiguous: BTH()/CNPPadding() gets opcode CNP
            bind_top_down(BTH, LAYERS[header], opcode=codes[0])
    # What follows an extended header depends on the opcode: _ExtHeader.guess_payload_class.


_bind_transport()
bind()

# Contrib's classes as contrib made them, whatever scapy.contrib.roce names now.
CONTRIB: dict[str, type[Packet]] = dict(ORIGINALS)


def cnp(dqpn: int, **fields: Any) -> Packet:
    """A CNP for destination QP ``dqpn`` (BECN set), as ``scapy.contrib.roce.cnp`` makes it;
    ``fields`` are more BTH fields."""
    return BTH(opcode=CNP_OPCODE, becn=1, destqp=dqpn, **fields) / CNPPadding()

# -- conversions ---------------------------------------------------------------------------------


def to_scapy(packet_or_frame: RocePacket | bytes, linktype: int = LINKTYPE_ETHERNET) -> Packet:
    """A Scapy packet for a ``roce.Packet`` or frame bytes (of ``linktype``)."""
    if isinstance(packet_or_frame, RocePacket):
        linktype = packet_or_frame.linktype
        frame = packet_or_frame.to_bytes()
    else:
        frame = bytes(packet_or_frame)
    cls = conf.l2types.num2layer.get(linktype)
    if cls is None:
        raise ValueError(f"link type {linktype} has no Scapy layer")
    return cls(frame)


def from_scapy(pkt: Packet) -> RocePacket:
    """``roce.parse`` of a Scapy packet's bytes (it must start at Ethernet, Linux cooked
    capture or IP)."""
    first = pkt.firstlayer()
    linktype = _linktype(first)
    if linktype is None:
        raise ValueError(f"cannot parse a packet starting at {type(first).__name__}: roce "
                         "reads Ethernet, Linux cooked captures and raw IP")
    return parse(raw(first), linktype)
