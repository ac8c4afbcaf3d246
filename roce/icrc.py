"""ICRC, the RoCE invariant CRC: the pure-Python reference (IBA Annex A17.3.3; docs/protocol.md).

The ICRC is CRC-32 (the zlib polynomial) over: eight 0xFF bytes standing in for the IB LRH,
then the L3 header with its variant fields set to all ones, the UDP header with the checksum
set to all ones (RoCEv2 only), BTH with byte 4 (FECN, BECN, reserved) all ones, then the
extended headers, payload and pad.  It is stored little-endian after the pad.

Which fields are variant is written here, once, as header field names; the byte masks are
derived from ``roce.headers.LAYOUTS`` and the fast path is handed the same masks.

Values are shown as Wireshark shows them: the four trailer bytes read big-endian.
"""

from __future__ import annotations

import zlib

from roce.headers import LAYOUTS, LRH_LAYOUT
from roce.locate import L3_GRH, L3_IPV4, L3_IPV6, L3_LRH, L3_LRH_GRH, LRH_SIZE

# Variant fields per header: anything a router or switch may rewrite in flight.
VARIANT_FIELDS: dict[str, tuple[str, ...]] = {
    "ip": ("dsfield.dscp", "dsfield.ecn", "ttl", "checksum"),
    "ipv6": ("tclass", "flow", "hlim"),
    "grh": ("tclass", "flowlabel", "hoplmt"),
    "udp": ("checksum",),
    "bth": ("fecn", "becn", "reserved"),
}

LRH_STANDIN = b"\xff" * 8
# Native InfiniBand with LNH 2 (IBA 7.8.1): the LRH itself is covered, its VL set to ones.
_VL = LRH_LAYOUT.field("vl")
LRH_VL_MASK = (_VL.mask << _VL.shift).to_bytes(LRH_SIZE, "big")

L3_HEADER = {L3_IPV4: "ip", L3_IPV6: "ipv6", L3_GRH: "grh"}


def _or_mask(header: str) -> bytes:
    """Bytes to OR into ``header`` so that every variant bit becomes one."""
    layout = LAYOUTS[header]
    value = 0
    for name in VARIANT_FIELDS.get(header, ()):
        f = layout.field(name)
        value |= f.mask << f.shift
    return value.to_bytes(layout.size, "big")


MASKS: dict[str, bytes] = {name: _or_mask(name) for name in VARIANT_FIELDS}
_BTH = LAYOUTS["bth"].size


def _masked(data: bytes | memoryview, header: str) -> bytes:
    mask = MASKS[header]
    return bytes(b | m for b, m in zip(data[:len(mask)], mask)) + bytes(data[len(mask):])


def icrc_at(frame: bytes, l3_offset: int, l3_kind: int, l3_len: int, bth_offset: int,
            end: int) -> int:
    """ICRC of the RoCE packet in ``frame`` (Wireshark's big-endian reading of the trailer).

    ``l3_len`` is the IP header length (with options) or 40; ``bth_offset`` where BTH starts;
    ``end`` is where the ICRC starts (the end of the covered bytes).
    """
    mv = memoryview(frame)
    if l3_kind == L3_LRH:  # native InfiniBand, IBA local: LRH, BTH
        parts = [bytes(b | m for b, m in zip(mv[l3_offset:l3_offset + LRH_SIZE], LRH_VL_MASK))]
    elif l3_kind == L3_LRH_GRH:  # IBA global: the LRH replaced by ones, as RoCEv1's
        parts = [LRH_STANDIN, _masked(mv[l3_offset + LRH_SIZE:l3_offset + l3_len], "grh")]
    else:
        parts = [LRH_STANDIN, _masked(mv[l3_offset:l3_offset + l3_len], L3_HEADER[l3_kind])]
    if l3_kind in L3_HEADER and l3_kind != L3_GRH:
        parts.append(_masked(mv[l3_offset + l3_len:bth_offset], "udp"))
    parts.append(_masked(mv[bth_offset:bth_offset + _BTH], "bth"))
    crc = zlib.crc32(b"".join(parts))
    crc = zlib.crc32(mv[bth_offset + _BTH:end], crc)
    return int.from_bytes(crc.to_bytes(4, "little"), "big")


def to_trailer(icrc: int) -> bytes:
    """The four bytes on the wire for an ICRC value."""
    return icrc.to_bytes(4, "big")
