"""Header layouts: field names, widths and order of RoCE's headers as the codec reads them.

The definitions are written once, in Construct, in ``roce.headerdefs`` (and ``roce.macc``'s and
the INT family's in theirs).  This module derives ``LAYOUTS`` from them: for every header its
size and, for every field, the bit shift and mask inside the header read as one big-endian
integer.  The packet codec, the fast path's offset tables and the Scapy layers all use
``LAYOUTS``; nothing else restates a field position.

Deriving needs Construct, whose import is a third of a short emulator run's CPU time; so the
derived layouts are kept in a generated record, ``roce/_layoutrecord.py`` (``write_record``
writes it), with the SHA-256 of each definitions module it was derived from.  ``recorded``
reads a module's layouts from the record when that hash is the module's now, and derives them
with Construct otherwise, with a ``RuntimeWarning`` naming the module: a stale record is never
used.  ``tests/test_layout_record.py`` holds the record equal to what Construct derives.

It also owns the meaning of the AETH syndrome (IBA 9.7.5.1: type, credit count, RNR timer,
NAK code).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from roce._compiled import source_hash
from roce.addresses import CONVERTERS
from roce.addresses import ip4_dec as _ip4_dec  # noqa: F401 - the fast path's address kinds
from roce.addresses import ip6_dec as _ip6_dec  # noqa: F401
from roce.addresses import mac_dec as _mac_dec  # noqa: F401
from roce.codecache import compiled, file_hash

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

    from construct import Construct

# ECN codepoints of the IP ECN field (RFC 3168): RoCE data goes ECT(0) or ECT(1); a switch
# marks congestion by setting CE.
ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = 0, 1, 2, 3
# LRH LNH (IBA 7.7.5): what follows the LRH.  PktLen counts 4-byte words (IBA 7.7.8).
LNH_RAW, LNH_IP, LNH_LOCAL, LNH_GLOBAL = 0, 1, 2, 3
LRH_WORD = 4

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


# -- layouts: derived from the definitions, or read from their record --------------------------


@dataclass(frozen=True)
class Field:
    """One field of a header layout: where it sits, its width, how it is read and written."""

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
    """A header's fixed layout: its name, its size in bytes and its fields in wire order."""

    name: str
    size: int
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


# A field as the record keeps it: (name, bits, kind, title), the kind "int", "bool" or an
# address kind of roce.addresses.CONVERTERS; offsets, shifts and masks follow from the order.
RecordedField = tuple[str, int, str, str]

# The definitions modules whose layouts the record keeps.  Each has ``DEFINITIONS`` (key ->
# Construct ``BitStruct``) and may have ``NAMES`` (key -> layout name, where it is not the key:
# two headers may share a field-name prefix).
RECORDED = ("roce.headerdefs", "roce.maccdefs", "roce.families.intmddefs",
            "roce.families.ib.flowcontroldefs", "roce.families.tunnelsdefs")
RECORD_MODULE = "roce._layoutrecord"
_RECORD_HEADER = ('"""The header layouts Construct derives from the definitions modules of\n'
                  '``roce.headers.RECORDED``, with the SHA-256 of each module\'s source: '
                  'generated by\n``roce.headers.write_record``, do not edit (regenerate: '
                  'python -c\n"import roce.headers as h; h.write_record()")."""\n')


def _fields(header: str, con: Any) -> tuple[int, tuple[RecordedField, ...]]:
    """What Construct says of a flat ``BitStruct``: its size and its fields."""
    from construct import BitsInteger, Flag, Renamed

    from roce.headerdefs import ADDRESS_KINDS

    out: list[RecordedField] = []
    for sub in con.subcon.subcons:
        # `"name" / X * "doc"` nests two Renamed wrappers: unwrap, keeping name and doc
        name, docs, inner = sub.name, sub.docs, sub.subcon
        while isinstance(inner, Renamed):
            name, docs, inner = name or inner.name, docs or inner.docs, inner.subcon
        if inner is Flag:
            bits, kind = 1, "bool"
        elif isinstance(inner, BitsInteger):
            bits, kind = inner.length, "int"
        elif id(inner) in ADDRESS_KINDS:
            bits, kind = inner.subcon.length, ADDRESS_KINDS[id(inner)]
        else:  # pragma: no cover - a definition error, found at import
            raise TypeError(f"{header}.{name}: unsupported construct {inner!r}")
        out.append((name, bits, kind, docs or name))
    return con.sizeof(), tuple(out)


def _make(header: str, size: int, recorded: tuple[RecordedField, ...]) -> Layout:
    total = size * 8
    fields: list[Field] = []
    pos = 0
    for name, bits, kind, title in recorded:
        dec = enc = None
        if kind not in ("int", "bool"):
            dec, enc = CONVERTERS[kind]
            kind = "addr"
        fields.append(Field(name, pos, bits, total - pos - bits, (1 << bits) - 1, kind,
                            dec, enc, title))
        pos += bits
    assert pos == total, header
    return Layout(header, size, tuple(fields))


def _layout(header: str, con: Any) -> Layout:
    return _make(header, *_fields(header, con))


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:  # pragma: no cover - a RECORDED typo
        raise ImportError(f"no module {module}")
    return spec.origin


def _derived_entries(module: str) -> dict[str, tuple[str, int, tuple[RecordedField, ...]]]:
    """key -> (layout name, size, fields) of the definitions of ``module``, by Construct."""
    defs = importlib.import_module(module)
    names = getattr(defs, "NAMES", {})
    return {key: (names.get(key, key), *_fields(names.get(key, key), con))
            for key, con in defs.DEFINITIONS.items()}


def derived(module: str) -> dict[str, Layout]:
    """The layouts of the definitions module ``module`` (by key), derived with Construct."""
    return {key: _make(name, size, fields)
            for key, (name, size, fields) in _derived_entries(module).items()}


def recorded(module: str) -> dict[str, Layout]:
    """The layouts of the definitions module ``module`` (by key): from the record when it was
    made from the module's source as it is now, else derived with Construct, with a
    ``RuntimeWarning`` (a stale record is never used)."""
    try:
        record = importlib.import_module(RECORD_MODULE).RECORD
    except ImportError:
        record = {}
    entry = record.get(module)
    if entry is not None and entry[0] == file_hash(_source(module), source_hash):
        return {key: _make(name, size, fields) for key, (name, size, fields) in entry[1].items()}
    warnings.warn(f"roce: {module} differs from what {RECORD_MODULE} was generated from; "
                  "deriving its header layouts with Construct (a slower start). Regenerate: "
                  'python -c "import roce.headers as h; h.write_record()"',
                  RuntimeWarning, stacklevel=2)
    return derived(module)


def record_text() -> str:
    """The text of ``roce/_layoutrecord.py``: every module of RECORDED, derived now."""
    lines = [_RECORD_HEADER, "RECORD = {"]
    for module in RECORDED:
        lines += [f"    {module!r}: (", f"        {source_hash(_source(module))!r},", "        {"]
        for key, (name, size, fields) in _derived_entries(module).items():
            lines.append(f"            {key!r}: ({name!r}, {size}, (")
            lines += [f"                {f!r}," for f in fields]
            lines.append("            )),")
        lines.append("        },")
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_record() -> str:
    """Write ``roce/_layoutrecord.py`` beside this module; returns its path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_layoutrecord.py")
    with open(path, "w") as f:
        f.write(record_text())
    return path


_DEFINED = recorded("roce.headerdefs")
LAYOUTS: dict[str, Layout] = {name: lay for name, lay in _DEFINED.items() if name != "lrh"}
SIZE_OF: dict[str, int] = {name: lay.size for name, lay in LAYOUTS.items()}
LRH_LAYOUT = _DEFINED["lrh"]


def __getattr__(name: str) -> Any:
    """The Construct definitions (``HEADERS``, ``BTH``, ``U``, ...) are ``roce.headerdefs``';
    reached from here, they are imported at first use."""
    if name.startswith("__"):
        raise AttributeError(name)
    defs = importlib.import_module("roce.headerdefs")
    try:
        return getattr(defs, name)
    except AttributeError:
        raise AttributeError(f"module 'roce.headers' has no attribute {name!r}") from None


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
    exec(compiled(src, f"<roce.headers {layout.name} decoder>", __name__), env)
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
    exec(compiled("\n".join(lines) + "\n", f"<roce.headers {layout.name} encoder>",
                  __name__), env)
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


# The fast path's codec (``roce._fastpath.HeaderCodec``): set by roce.fast, which sits above
# this module, when the fast path is built; None, the generated codecs alone.
FAST_CODEC: Any = None


def _fast_codec(layout: Layout) -> Any:
    """The fast path's twin of this layout's generated codec (``roce/_headercodec.pxi``),
    when ``FAST_CODEC`` is set and every field is an integer or a boolean within 8 bytes;
    else None.  It hands the generated codec what it does not cover, so both give the same
    dict, bytes or error."""
    if FAST_CODEC is None or any(f.kind == "addr" for f in layout.fields):
        return None
    try:
        return FAST_CODEC(  # (the generated pair compiled only if it is needed)
            layout.size, tuple((f.name, f.shift, f.bits, f.kind == "bool") for f in layout.fields),
            _lazily(_compile_decoder, layout), _lazily(_compile_encoder, layout))
    except ValueError:  # a field across more than 8 bytes
        return None


def _decoder(layout: Layout) -> Callable[[bytes, int], dict]:
    codec = _fast_codec(layout)
    return codec.decode if codec is not None else _compile_decoder(layout)


def _encoder(layout: Layout) -> Callable[[dict], bytes]:
    codec = _fast_codec(layout)
    return codec.encode if codec is not None else _compile_encoder(layout)


# the codecs of this module's headers: the fast path's where it has one (once per packet, as a
# frame is built or read, for BTH's extended headers), else the generated Python
DECODERS: dict[str, Callable[[bytes, int], dict]] = _Codecs(_decoder)
ENCODERS: dict[str, Callable[[dict], bytes]] = _Codecs(_encoder)


def derive(name: str, con: Construct) -> Layout:
    """The layout of a header defined in another module, derived as this module derives its
    own (``roce.macc`` defines the MAC Control headers)."""
    return _layout(name, con)


def compile_codec(layout: Layout, lazy: bool = False) -> tuple[
        Callable[[bytes, int], dict], Callable[[dict], bytes]]:
    """The generated (decoder, encoder) pair of a derived layout, as ``DECODERS`` and
    ``ENCODERS`` hold for this module's headers; ``lazy``: each compiled at its first call."""
    if lazy:
        return _lazily(_compile_decoder, layout), _lazily(_compile_encoder, layout)
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


def define(name: str, con: Construct, lazy: bool = False) -> tuple[
        Layout, Callable[[bytes, int], dict], Callable[[dict], bytes]]:
    """Layout, decoder and encoder of a header that a protocol family owns
    (``roce.families``): the same derivation as the headers above, kept out of
    ``LAYOUTS`` so that RoCE's tables stay RoCE's.  ``lazy``: the decoder and encoder are
    compiled at their first call (a family of many headers, most of which a run never
    decodes or builds this way, starts faster)."""
    layout = _layout(name, con)
    if lazy:
        return layout, _lazily(_compile_decoder, layout), _lazily(_compile_encoder, layout)
    return layout, _compile_decoder(layout), _compile_encoder(layout)


def _lazily(compile_: Callable[[Layout], Callable[..., Any]],
            layout: Layout) -> Callable[..., Any]:
    made: list[Callable[..., Any]] = []

    def first_use(*args: Any) -> Any:
        if not made:
            made.append(compile_(layout))
        return made[0](*args)

    return first_use
