"""Tunnels that carry mirrored or overlaid frames: GRE, ERSPAN type I/II/III, VXLAN.

* GRE (RFC 2784/2890, IP protocol 47): 4 bytes (flags and version, protocol), then a
  4-byte checksum word when C is set, a key when K is set, a sequence number when S is
  set.  Protocol 0x6558 is transparent Ethernet; 0x0800 / 0x86DD carry IP;
  0x88BE is ERSPAN type II (type I when S is clear: no ERSPAN header), 0x22EB type III.
* ERSPAN type II: 8 bytes (Ver 4 | VLAN 12 | COS 3 | En 2 | T 1 | Session ID 10 |
  Reserved 12 | Index 20), then the mirrored Ethernet frame.
* ERSPAN type III: 12 bytes (Ver | VLAN | COS | BSO | T | Session ID | Timestamp 32 |
  SGT 16 | P 1 | FT 5 | HW ID 6 | D 1 | Gra 2 | O 1), plus an 8-byte platform subheader
  when O is set, then the frame.
* VXLAN (RFC 7348, UDP 4789): 8 bytes (flags 16 | group policy 16 | VNI 24 | reserved 8),
  then Ethernet.

Layouts are Construct definitions (``roce.families.tunnelsdefs``, recorded as RoCE's are:
``roce.headers.recorded``); field names are Wireshark's
(``erspan.spanid``, ``gre.proto``, ``vxlan.vni``).  Each ``unwrap`` returns where the
inner frame starts and its link type, or the next header's dispatch row.
"""

from __future__ import annotations

from roce.errors import DecodeError
from roce.families.handler import Handler, SkipRule, Unwrapped
from roce.headers import compile_codec, recorded

LINKTYPE_ETHERNET, LINKTYPE_RAW = 1, 101
GRE_ETHERNET, GRE_ERSPAN2, GRE_ERSPAN3 = 0x6558, 0x88BE, 0x22EB
GRE_IPV4, GRE_IPV6 = 0x0800, 0x86DD
IPPROTO_GRE = 47
VXLAN_PORT = 4789
GRE_C, GRE_K, GRE_S = 0x8000, 0x2000, 0x1000

# defined in Construct in tunnelsdefs, read from the layouts' record; codecs made at first use
_DEFINED = recorded("roce.families.tunnelsdefs")
GRE_LAYOUT, ERSPAN2_LAYOUT, ERSPAN3_LAYOUT, PLATFORM_LAYOUT, VXLAN_LAYOUT = (
    _DEFINED[k] for k in ("gre", "erspan2", "erspan3", "erspan3.platform", "vxlan"))
decode_gre, encode_gre = compile_codec(GRE_LAYOUT, lazy=True)
decode_erspan2, encode_erspan2 = compile_codec(ERSPAN2_LAYOUT, lazy=True)
decode_erspan3, encode_erspan3 = compile_codec(ERSPAN3_LAYOUT, lazy=True)
decode_platform, encode_platform = compile_codec(PLATFORM_LAYOUT, lazy=True)
decode_vxlan, encode_vxlan = compile_codec(VXLAN_LAYOUT, lazy=True)
LAYOUTS = {"gre": GRE_LAYOUT, "erspan2": ERSPAN2_LAYOUT, "erspan3": ERSPAN3_LAYOUT,
           "erspan3.platform": PLATFORM_LAYOUT, "vxlan": VXLAN_LAYOUT}
VXLAN_FLAG_I = 0x0800  # the VNI-valid bit of the 16-bit flags word


def _need(data: bytes, off: int, size: int, what: str) -> None:
    if len(data) - off < size:
        raise DecodeError(f"{what} truncated at byte {off}: needs {size} bytes, "
                          f"{max(len(data) - off, 0)} left", what.split()[0].lower(), off)


def _flat(prefix: str, values: dict) -> dict:
    return {f"{prefix}.{k}": v for k, v in values.items()}


def unwrap_gre(data: bytes, off: int) -> Unwrapped:
    _need(data, off, 4, "GRE header")
    g = decode_gre(data, off)
    flags, proto = g["flags_and_version"], g["proto"]
    if flags & 7:
        raise DecodeError(f"GRE version {flags & 7} at byte {off} is not 0", "gre", off)
    fields = {"gre": True, **_flat("gre", g)}
    pos = off + 4
    for bit, name in ((GRE_C, "checksum"), (GRE_K, "key"), (GRE_S, "sequence_number")):
        if flags & bit:
            _need(data, pos, 4, "GRE header")
            word = int.from_bytes(data[pos:pos + 4], "big")
            fields[f"gre.{name}"] = word >> 16 if name == "checksum" else word
            pos += 4
    if proto == GRE_ETHERNET or (proto == GRE_ERSPAN2 and not flags & GRE_S):
        return Unwrapped(data, pos, LINKTYPE_ETHERNET, "gre", fields)  # ERSPAN type I
    if proto in (GRE_IPV4, GRE_IPV6):
        return Unwrapped(data, pos, LINKTYPE_RAW, "gre", fields)
    return Unwrapped(data, pos, None, "gre", fields, ("gre.proto", proto))


def unwrap_erspan2(data: bytes, off: int) -> Unwrapped:
    _need(data, off, ERSPAN2_LAYOUT.size, "ERSPAN header")
    h = decode_erspan2(data, off)
    if h["version"] != 1:
        raise DecodeError(f"ERSPAN version {h['version']} at byte {off} is not 1 (type II)",
                          "erspan", off)
    return Unwrapped(data, off + ERSPAN2_LAYOUT.size, LINKTYPE_ETHERNET, "erspan",
                     {"erspan": True, **_flat("erspan", h)})


def unwrap_erspan3(data: bytes, off: int) -> Unwrapped:
    _need(data, off, ERSPAN3_LAYOUT.size, "ERSPAN header")
    h = decode_erspan3(data, off)
    if h["version"] != 2:
        raise DecodeError(f"ERSPAN version {h['version']} at byte {off} is not 2 (type III)",
                          "erspan", off)
    fields = {"erspan": True, **_flat("erspan", h)}
    pos = off + ERSPAN3_LAYOUT.size
    if h["o"]:
        _need(data, pos, PLATFORM_LAYOUT.size, "ERSPAN platform subheader")
        fields.update(_flat("erspan", decode_platform(data, pos)))
        pos += PLATFORM_LAYOUT.size
    return Unwrapped(data, pos, LINKTYPE_ETHERNET, "erspan", fields)


def unwrap_vxlan(data: bytes, off: int) -> Unwrapped:
    _need(data, off, VXLAN_LAYOUT.size, "VXLAN header")
    h = decode_vxlan(data, off)
    return Unwrapped(data, off + VXLAN_LAYOUT.size, LINKTYPE_ETHERNET, "vxlan",
                     {"vxlan": True, **_flat("vxlan", h)})


# -- offsets only: the one-line path peels tunnels without building field dicts -----------------
# Each rule steps over its header: (inner offset, inner link type or None, next dispatch row or
# None), or None when the header is cut or wrong (the frame then takes the per-frame path,
# which says why).  The compiled peel runs the same rules (roce.families.handler.SkipRule).

_FLAGS = GRE_C >> 8, GRE_K >> 8, GRE_S >> 8  # the flag bits in the GRE header's first byte
skip_gre = SkipRule(
    size=4, checks=((1, 7, 0),),  # version 0
    extras=tuple((0, bit, 4) for bit in _FLAGS),  # checksum (+ reserved), key, sequence
    next_at=2, table="gre.proto",
    direct=((GRE_ETHERNET, 0, 0, LINKTYPE_ETHERNET),
            (GRE_ERSPAN2, 0, GRE_S >> 8, LINKTYPE_ETHERNET),  # type I: S clear, no header
            (GRE_IPV4, 0, 0, LINKTYPE_RAW), (GRE_IPV6, 0, 0, LINKTYPE_RAW)))
skip_erspan2 = SkipRule(size=ERSPAN2_LAYOUT.size, checks=((0, 0xF0, 1 << 4),),
                        inner=LINKTYPE_ETHERNET)
skip_erspan3 = SkipRule(size=ERSPAN3_LAYOUT.size, checks=((0, 0xF0, 2 << 4),),
                        extras=((ERSPAN3_LAYOUT.size - 1, 1, PLATFORM_LAYOUT.size),),  # O
                        inner=LINKTYPE_ETHERNET)
skip_vxlan = SkipRule(size=VXLAN_LAYOUT.size, inner=LINKTYPE_ETHERNET)


def gre(proto: int, payload: bytes, key: int | None = None, seq: int | None = None) -> bytes:
    """A GRE header (version 0) with the optional key and sequence number, then payload."""
    flags = (GRE_K if key is not None else 0) | (GRE_S if seq is not None else 0)
    out = encode_gre({"flags_and_version": flags, "proto": proto})
    if key is not None:
        out += key.to_bytes(4, "big")
    if seq is not None:
        out += seq.to_bytes(4, "big")
    return out + payload


def erspan2(frame: bytes, spanid: int = 1, index: int = 0, vlan: int = 0, cos: int = 0) -> bytes:
    return encode_erspan2({"version": 1, "vlan": vlan, "cos": cos, "encap": 0, "truncated": 0,
                           "spanid": spanid, "reserved": 0, "index": index}) + frame


def erspan3(frame: bytes, spanid: int = 1, timestamp: int = 0, platform: int | None = None,
            hw: int = 0, direction: int = 0) -> bytes:
    out = encode_erspan3({"version": 2, "spanid": spanid, "timestamp": timestamp, "hw": hw,
                          "direction": direction, "o": 1 if platform is not None else 0,
                          "gra": 3})
    if platform is not None:
        out += encode_platform({"platid": platform, "platinfo": 0})
    return out + frame


def vxlan(frame: bytes, vni: int) -> bytes:
    return encode_vxlan({"flags": VXLAN_FLAG_I, "vni": vni}) + frame


def field_names() -> list[str]:
    names = ["gre", "erspan", "vxlan", *(name for name, _, _, _ in GRE_OPTIONAL)]
    for key, layout in LAYOUTS.items():
        prefix = key.split(".")[0].rstrip("23")
        names += [f"{prefix}.{f.name}" for f in layout.fields]
    return names


# -- the handlers the registry's rows point at (roce/families/builtin.py) -----------------------

# GRE's optional words: no layout holds them (each is there only when its flag is set)
GRE_OPTIONAL = (("gre.checksum", "int", 16, False), ("gre.key", "int", 32, False),
                ("gre.sequence_number", "int", 32, False))
_SPAN_BITS = ERSPAN2_LAYOUT.field("spanid").bits


def _carry_gre(proto: int, payload: bytes, n: int) -> bytes:
    return gre(proto, payload, seq=n)  # a mirror session numbers its packets (GRE S)


GRE_HANDLER = Handler(
    "gre", unwrap=unwrap_gre, skip=skip_gre, layer="gre",
    title="Generic Routing Encapsulation", layouts=(("gre", GRE_LAYOUT),),
    column_types=GRE_OPTIONAL, encap=lambda frame, n, ident: gre(GRE_ETHERNET, frame),
    carry=_carry_gre)
ERSPAN2_HANDLER = Handler(
    "erspan2", unwrap=unwrap_erspan2, skip=skip_erspan2, layer="erspan",
    title="Encapsulated Remote Switch Packet ANalysis", layouts=(("erspan", ERSPAN2_LAYOUT),),
    encap=lambda frame, n, ident: erspan2(frame, ident, n), ident_bits=_SPAN_BITS)
ERSPAN3_HANDLER = Handler(
    "erspan3", unwrap=unwrap_erspan3, skip=skip_erspan3, layer="erspan",
    title="Encapsulated Remote Switch Packet ANalysis",
    layouts=(("erspan", ERSPAN3_LAYOUT), ("erspan", PLATFORM_LAYOUT)),
    encap=lambda frame, n, ident: erspan3(frame, ident, timestamp=n), ident_bits=_SPAN_BITS)
VXLAN_HANDLER = Handler(
    "vxlan", unwrap=unwrap_vxlan, skip=skip_vxlan, layer="vxlan",
    title="Virtual eXtensible Local Area Network", layouts=(("vxlan", VXLAN_LAYOUT),),
    encap=lambda frame, n, ident: vxlan(frame, ident),
    ident_bits=VXLAN_LAYOUT.field("vni").bits)
