"""The few bytes a switch reads and rewrites per hop, at offsets derived from roce/headers.py.

No per-frame Construct parsing on the hop path: the offsets of the Ethernet type and MACs,
the IPv4 DSCP/ECN byte, TTL, checksum, addresses and the UDP ports come from ``LAYOUTS``
once, at import.  Only IPv4 without options or VLAN tags is forwarded (the frames our hosts
build); anything else is counted and dropped by the switch.
"""

from __future__ import annotations

from roce import fast
from roce.emu.core import frames as wire
from roce.headers import ECN_CE, ECN_NOT_ECT, LAYOUTS, SIZE_OF
from roce.locate import ETHERTYPE_IPV4


def _span(header: str, field: str) -> tuple[int, int]:
    f = LAYOUTS[header].field(field)
    return f.byte_offset, f.byte_offset + f.bits // 8


L2 = SIZE_OF["eth"]
DST_MAC = _span("eth", "dst")
SRC_MAC = _span("eth", "src")
ETYPE = _span("eth", "type")
IPV4_TYPE = ETHERTYPE_IPV4.to_bytes(2, "big")

_TOS, DSCP_SHIFT, DSCP_MASK = wire.small_field("ip", "dsfield.dscp")
_ECN_BYTE, ECN_SHIFT, ECN_MASK = wire.small_field("ip", "dsfield.ecn")
assert _TOS == _ECN_BYTE  # DSCP and ECN share the DS byte (RFC 2474, RFC 3168)
TOS = L2 + _TOS
TTL = L2 + LAYOUTS["ip"].field("ttl").byte_offset
CSUM = tuple(L2 + x for x in _span("ip", "checksum"))
SRC_IP = tuple(L2 + x for x in _span("ip", "src"))
DST_IP = tuple(L2 + x for x in _span("ip", "dst"))
IP_HDR = SIZE_OF["ip"]
PROTO = L2 + LAYOUTS["ip"].field("proto").byte_offset
UDP_SPORT = tuple(L2 + IP_HDR + x for x in _span("udp", "srcport"))
UDP_DPORT = tuple(L2 + IP_HDR + x for x in _span("udp", "dstport"))
# the 5-tuple ECMP hashes: addresses, protocol, ports (contiguous but for proto)
KEY_END = UDP_DPORT[1]

CE = ECN_CE
NOT_ECT = ECN_NOT_ECT


def is_ipv4(frame: bytes) -> bool:
    return frame[ETYPE[0]:ETYPE[1]] == IPV4_TYPE


def dscp(frame: bytes) -> int:
    return (frame[TOS] >> DSCP_SHIFT) & DSCP_MASK


def ecn(frame: bytes) -> int:
    return (frame[TOS] >> ECN_SHIFT) & ECN_MASK


def flow_key(frame: bytes) -> bytes:
    """Source and destination address, protocol, UDP ports: what ECMP hashes."""
    return frame[SRC_IP[0]:DST_IP[1]] + frame[PROTO:PROTO + 1] + frame[UDP_SPORT[0]:KEY_END]


def udp_sport(frame: bytes) -> int:
    return int.from_bytes(frame[UDP_SPORT[0]:UDP_SPORT[1]], "big")


_SRC_END, _C0 = SRC_MAC[1], CSUM[0]
assert CSUM[1] == _C0 + 2  # the checksum is one 16-bit word
# RFC 1624 adds ~m + m' per changed 16-bit word; the byte that does not change cancels out
# but for its all-ones complement: 0xFF00 when the changed byte is the word's low half (TOS,
# after version/IHL), 0xFF when it is the high half (TTL, before the protocol)
assert (TOS - L2) % 2 == 1 and (TTL - L2) % 2 == 0
_TOS_C, _TTL_C = 0xFF00, 0xFF
_CE_BITS = CE << ECN_SHIFT


def routed_reference(frame: bytes, src_mac: bytes, dst_mac: bytes,
                     mark_ce: bool) -> bytes:
    """The frame as a router sends it on: new MACs, TTL - 1, CE set if asked, header checksum
    updated incrementally (RFC 1624: HC' = ~(~HC + ~m + m') over the changed 16-bit words).
    The ICRC stays valid: it masks TOS, TTL and the checksum (IBA A17.8.1)."""
    tos = frame[TOS]
    new_tos = tos | _CE_BITS if mark_ce else tos
    ttl = frame[TTL]
    new_ttl = ttl - 1 if ttl else 0
    x = ((~((frame[_C0] << 8) | frame[_C0 + 1]) & 0xFFFF) + _TOS_C + (~tos & 0xFF) + new_tos
         + _TTL_C + ((~ttl & 0xFF) + new_ttl << 8))
    x = (x & 0xFFFF) + (x >> 16)
    x = (x & 0xFFFF) + (x >> 16)
    x = ~x & 0xFFFF
    # one copy patched in place: cheaper than joining nine slices (once per switch hop)
    out = bytearray(frame)
    out[:_SRC_END] = dst_mac + src_mac
    out[TOS] = new_tos
    out[TTL] = new_ttl
    out[_C0] = x >> 8
    out[_C0 + 1] = x & 0xFF
    return bytes(out)


routed = routed_reference
if fast.COMPILED:  # the compiled twin (roce/emu/net/_routed.pxi), handed this module's offsets
    fast._ext.routed_configure(_SRC_END, TOS, TTL, _C0, _TOS_C, _TTL_C, _CE_BITS)
    routed = fast._ext.routed
