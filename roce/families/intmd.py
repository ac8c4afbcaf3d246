"""In-band Network Telemetry, INT-MD over UDP (P4.org INT specification v2.1, its INT over
TCP/UDP encapsulation with the shim header): the layouts, the byte-level edits an INT source, an
INT transit hop and an INT sink make, and the decoder's tunnel handler.

Where INT sits in a RoCEv2 frame (docs/protocol.md, "In-band telemetry (INT-MD)"): after the
UDP header and before the BTH, UDP destination port ``INT_PORT`` announcing it, the shim's
NPT 1 saying that the original UDP payload follows and holding the original destination
port (4791)::

    Ethernet | IPv4 | UDP (dst INT_PORT) | shim (4) | INT-MD header (12) | hop records | BTH ...

* shim: Type 4 (1: INT-MD) | NPT 2 (1: UDP payload, original port below) | reserved 2 |
  Length 8 (the INT-MD header and the stack in 4-byte words, the shim excluded) | original UDP
  destination port 16;
* INT-MD header: Ver 4 (2) | D | E | M | reserved 12 | Hop ML 5 (words per hop record) |
  Remaining Hop Count 8 | instruction bitmap 16 | domain-specific ID 16 | DS instructions 16 |
  DS flags 16;
* the stack: one record per hop, the last hop's first (each hop pushes its record right after
  the INT-MD header).  The instruction bits set (``INSTRUCTIONS``, bit 0 the bitmap's most
  significant): 0 node ID (4 bytes), 3 queue ID (1) and queue occupancy (3, bytes here,
  saturating at 2^24 - 1), 5 egress timestamp (8, ns), 7 egress port Tx utilization (4: the
  specification leaves its encoding to the implementation; ours is the port's count of bytes
  sent, modulo 2^32, which HPCC differentiates), then the domain-specific metadata of
  ``DS_ID``: DS instruction bit 0, the port's line rate (8, bit/s: every link rate the
  emulator takes, 1 b/s to 1 Pb/s, fits).  28 bytes, Hop ML 7.

The ICRC covers the frame without INT: a source inserts INT after the ICRC was computed and
a sink removes it (port, lengths, checksum restored) before the ICRC is checked; the decoder
checks the inner frame so.  An echo (HPCC's ACK carrying the data packet's records back)
travels as INT-MD with Remaining Hop Count 0, which transit hops leave alone (they set E).

The edits are for frames with IPv4 (no options needed, any IHL read) as the emulator's hosts
build them; the decoder reads IPv6 too.
"""

from __future__ import annotations

from collections import namedtuple

from roce import fast, locate
from roce.errors import DecodeError
from roce.families.handler import Handler, Unwrapped
from roce.headers import LAYOUTS, compile_codec, recorded

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

# The specification leaves the UDP port that announces INT to the operator of the INT domain;
# this is ours (docs/protocol.md).
INT_PORT = 9555
TYPE_MD, NPT_UDP, VERSION = 1, 1, 2
MAX_HOPS = 5  # Remaining Hop Count a source sets: HPCC's ns-3 model carries at most 5 hops

IP_LAYOUT, UDP_LAYOUT = LAYOUTS["ip"], LAYOUTS["udp"]
_LAYOUTS = recorded("roce.families.intmddefs")  # defined there, in Construct
SHIM_LAYOUT, MD_LAYOUT, HOP_LAYOUT = _LAYOUTS["shim"], _LAYOUTS["md"], _LAYOUTS["hop"]
decode_shim, encode_shim = compile_codec(SHIM_LAYOUT, lazy=True)
decode_md, encode_md = compile_codec(MD_LAYOUT, lazy=True)
decode_hop, encode_hop = compile_codec(HOP_LAYOUT, lazy=True)
SHIM_SIZE, MD_SIZE, HOP_SIZE = SHIM_LAYOUT.size, MD_LAYOUT.size, HOP_LAYOUT.size
HEAD = SHIM_SIZE + MD_SIZE  # what a source inserts
HOP_WORDS = HOP_SIZE // 4


def _bit(n: int) -> int:
    """Instruction bit ``n`` (bit 0 is the bitmap's most significant, as the spec numbers)."""
    return 0x8000 >> n


NODE_ID, QUEUE, EGRESS_TS, TX_UTIL = _bit(0), _bit(3), _bit(5), _bit(7)
INSTRUCTIONS = NODE_ID | QUEUE | EGRESS_TS | TX_UTIL
DS_ID = 0x0001  # our INT domain
DS_LINE_RATE = _bit(0)  # domain-specific instruction: the port's line rate, bit/s
QLEN_MAX = HOP_LAYOUT.field("qlen").mask
COUNTER_MOD = 1 << HOP_LAYOUT.field("tx_bytes").bits
RATE_MAX = HOP_LAYOUT.field("rate_bps").mask

# byte positions inside the INT headers (from the layouts)
_LEN = SHIM_LAYOUT.field("len").byte_offset
_DPORT = SHIM_LAYOUT.field("dport").byte_offset
_FLAGS = SHIM_SIZE + MD_LAYOUT.field("ver").byte_offset  # Ver | D | E | M share this byte
_E_BIT = 1 << MD_LAYOUT.field("e").shift % 8
_RHC = SHIM_SIZE + MD_LAYOUT.field("rhc").byte_offset
assert MD_LAYOUT.field("rhc").bits == 8 and MD_LAYOUT.field("e").byte_offset == 0


# every field an int (collections' namedtuple: typing's would import typing at start)
Hop = namedtuple("Hop", ("switch_id", "queue_id", "qlen", "egress_ts", "tx_bytes", "rate_bps"))
Hop.__doc__ = "One hop record as it is on the wire."


_HEADS: dict[tuple[int, int, int], bytes] = {}  # (port, hop count, words) -> the headers


def source_header(dport: int, rhc: int = MAX_HOPS, stack: bytes = b"") -> bytes:
    """The shim and INT-MD header an INT source inserts (and a sink's echo, ``rhc`` 0, with
    the records of ``stack``)."""
    words = (MD_SIZE + len(stack)) // 4
    key = (dport, rhc, words)
    head = _HEADS.get(key)
    if head is None:  # few shapes per run (one per path length): encoded once each
        if len(_HEADS) > 1024:
            _HEADS.clear()
        head = _HEADS[key] = (
            encode_shim({"type": TYPE_MD, "npt": NPT_UDP, "len": words, "dport": dport})
            + encode_md({"ver": VERSION, "hop_ml": HOP_WORDS, "rhc": rhc,
                         "instructions": INSTRUCTIONS, "ds_id": DS_ID,
                         "ds_instructions": DS_LINE_RATE}))
    return head + stack


# the record's fields as (shift, mask) in one big-endian integer, from the layout: a switch
# packs one per hop, a sender unpacks them per ACK (cheaper than the dict codec)
_HOP_BITS = tuple((f.shift, f.mask) for f in HOP_LAYOUT.fields)
(_SW, _), (_QID, _), (_QLEN, _), (_TS, _), (_TX, _), (_RATE, _) = _HOP_BITS


def hop_record(switch_id: int, queue_id: int, qlen: int, egress_ts: int, tx_bytes: int,
               rate_bps: float) -> bytes:
    """One transit hop's record (queue occupancy saturates, the byte counter wraps, as their
    widths require)."""
    rate = int(rate_bps)
    return (switch_id << _SW | queue_id << _QID | (qlen if qlen < QLEN_MAX else QLEN_MAX) << _QLEN
            | egress_ts << _TS | tx_bytes % COUNTER_MOD << _TX
            | (rate if rate < RATE_MAX else RATE_MAX) << _RATE).to_bytes(HOP_SIZE, "big")


def hops(stack: bytes) -> list[Hop]:
    """The records of a stack of ours, in stack order (the last hop first)."""
    out = []
    for i in range(0, len(stack) - HOP_SIZE + 1, HOP_SIZE):
        v = int.from_bytes(stack[i:i + HOP_SIZE], "big")
        out.append(Hop(*(v >> shift & mask for shift, mask in _HOP_BITS)))
    return out


# -- the edits: IPv4, UDP at ``udp``, the IPv4 header at ``l3`` ---------------------------------

_TOTAL = IP_LAYOUT.field("len").byte_offset
_CSUM = IP_LAYOUT.field("checksum").byte_offset
_ULEN = UDP_LAYOUT.field("length").byte_offset
_UDPORT = UDP_LAYOUT.field("dstport").byte_offset
_PLEN = LAYOUTS["ipv6"].field("plen").byte_offset
_INT_PORT = INT_PORT.to_bytes(2, "big")
assert _TOTAL % 2 == 0  # a 16-bit word of the checksum


def _grow(out: bytearray, l3: int, udp: int, n: int) -> None:
    """Lengths by ``n`` bytes (IPv4 total length, UDP length) in place, the IPv4 checksum
    updated for the one word that changed (RFC 1624: HC' = ~(~HC + ~m + m'))."""
    at = l3 + _TOTAL
    old = out[at] << 8 | out[at + 1]
    new = old + n
    out[at], out[at + 1] = new >> 8, new & 0xFF
    c = l3 + _CSUM
    x = (~(out[c] << 8 | out[c + 1]) & 0xFFFF) + (~old & 0xFFFF) + new
    x = (x & 0xFFFF) + (x >> 16)
    x = ~((x & 0xFFFF) + (x >> 16)) & 0xFFFF
    out[c], out[c + 1] = x >> 8, x & 0xFF
    u = udp + _ULEN
    ulen = (out[u] << 8 | out[u + 1]) + n
    out[u], out[u + 1] = ulen >> 8, ulen & 0xFF


def insert(frame: bytes, l3: int, udp: int, rhc: int = MAX_HOPS, stack: bytes = b"") -> bytes:
    """The frame with INT inserted after its UDP header (a source; a sink's echo with ``rhc``
    0 and the records to carry back)."""
    at = udp + 8
    port = udp + _UDPORT
    head = source_header(frame[port] << 8 | frame[port + 1], rhc, stack)
    out = bytearray(frame[:at])
    out[port:port + 2] = _INT_PORT
    _grow(out, l3, udp, len(head))
    return bytes(out) + head + frame[at:]


def push(frame: bytes, l3: int, udp: int, record: bytes) -> bytes:
    """A transit hop: its record pushed on the stack (Remaining Hop Count - 1, lengths, shim
    length), or the E bit set when no hop count remains."""
    base = udp + 8
    if frame[base + _RHC] == 0:
        if frame[base + _FLAGS] & _E_BIT:
            return frame
        out = bytearray(frame)
        out[base + _FLAGS] |= _E_BIT
        return bytes(out)
    at = base + HEAD
    out = bytearray(frame[:at])
    out[base + _RHC] -= 1
    out[base + _LEN] += len(record) // 4
    _grow(out, l3, udp, len(record))
    return bytes(out) + record + frame[at:]


def strip(frame: bytes, l3: int, udp: int) -> tuple[bytes, bytes] | None:
    """A sink: (the frame as its source built it, the stack of records), or None when what
    follows the UDP header is not an INT-MD shim of ours (type, NPT, length)."""
    base = udp + 8
    if len(frame) < base + HEAD or frame[base] >> 4 != TYPE_MD \
            or (frame[base] >> 2) & 3 != NPT_UDP:
        return None
    size = SHIM_SIZE + frame[base + _LEN] * 4
    if size < HEAD or len(frame) < base + size:
        return None
    out = bytearray(frame[:base])
    out[udp + _UDPORT:udp + _UDPORT + 2] = frame[base + _DPORT:base + _DPORT + 2]
    _grow(out, l3, udp, -size)
    return bytes(out) + frame[base + size:], frame[base + HEAD:base + size]


# -- the decoder's tunnel handler (row: udp.port INT_PORT, roce/families/builtin.py) --------------

def _need(data: bytes, off: int, size: int, what: str) -> None:
    if len(data) - off < size:
        raise DecodeError(f"{what} truncated at byte {off}: needs {size} bytes, "
                          f"{max(len(data) - off, 0)} left", "int", off)


def _carrier(data: bytes, off: int) -> tuple[int, Any]:
    """The link type and walk of the frame whose UDP payload starts at ``off``."""
    for linktype in (locate.LINKTYPE_ETHERNET, locate.LINKTYPE_RAW):
        w = fast.walk(data, linktype)
        if w.udp_off >= 0 and w.udp_off + 8 == off:
            return linktype, w
    raise DecodeError(f"INT at byte {off} follows no UDP header the walk found", "int", off)


def unwrap(data: bytes, off: int) -> Unwrapped:
    """The INT-MD headers at ``off`` (right after UDP); the inner frame is the frame as the
    INT source built it (the sink's view: INT removed, UDP port and lengths restored)."""
    _need(data, off, HEAD, "INT shim and INT-MD header")
    shim = decode_shim(data, off)
    if shim["type"] != TYPE_MD:
        raise DecodeError(f"INT shim type {shim['type']} at byte {off}: only INT-MD "
                          f"({TYPE_MD}) is decoded", "int", off)
    if shim["npt"] != NPT_UDP:
        raise DecodeError(f"INT shim NPT {shim['npt']} at byte {off}: only {NPT_UDP} (UDP "
                          "payload, original port in the shim) is decoded", "int", off)
    size = SHIM_SIZE + shim["len"] * 4
    if size < HEAD:
        raise DecodeError(f"INT shim length {shim['len']} at byte {off} is shorter than the "
                          f"INT-MD header ({MD_SIZE // 4} words)", "int", off)
    _need(data, off, size, "INT stack")
    md = decode_md(data, off + SHIM_SIZE)
    if md["ver"] != VERSION:
        raise DecodeError(f"INT-MD version {md['ver']} at byte {off + SHIM_SIZE} is not "
                          f"{VERSION}", "int", off + SHIM_SIZE)
    stack = data[off + HEAD:off + size]
    per = md["hop_ml"] * 4
    if per == 0 and stack or per and len(stack) % per:
        raise DecodeError(f"INT stack of {len(stack)} bytes at byte {off + HEAD} is not a "
                          f"whole number of {per}-byte hop records", "int", off + HEAD)
    fields: dict[str, Any] = {"int": True, **{f"int.{k}": v for k, v in shim.items()},
                              **{f"int.{k}": v for k, v in md.items()},
                              "int.hops": len(stack) // per if per else 0}
    if (per == HOP_SIZE and md["instructions"] == INSTRUCTIONS and md["ds_id"] == DS_ID
            and md["ds_instructions"] == DS_LINE_RATE):
        # one value per hop, the last hop first, comma-separated (as ``-T fields`` shows a
        # repeated field): one string column per field in columnar output
        records = hops(stack)
        for i, name in enumerate(Hop._fields):
            fields[f"int.hop.{name}"] = ",".join(str(r[i]) for r in records)
    linktype, w = _carrier(data, off)
    udp = w.udp_off
    inner = bytearray(data[:udp + 8])
    inner[udp + _UDPORT:udp + _UDPORT + 2] = shim["dport"].to_bytes(2, "big")
    if w.l3_kind == locate.L3_IPV4:
        _grow(inner, w.l3_off, udp, -size)
    else:  # IPv6: the payload length, then UDP's
        at = w.l3_off + _PLEN
        plen = int.from_bytes(inner[at:at + 2], "big") - size
        inner[at:at + 2] = plen.to_bytes(2, "big")
        ulen = int.from_bytes(inner[udp + _ULEN:udp + _ULEN + 2], "big") - size
        inner[udp + _ULEN:udp + _ULEN + 2] = ulen.to_bytes(2, "big")
    # the frame on the wire is the one with INT: its lengths are the record's
    return Unwrapped(bytes(inner) + data[off + size:], 0, linktype, "int", fields,
                     lengths=(len(data), len(data)))


def field_names() -> list[str]:
    return ["int", "int.hops", *(f"int.{f.name}" for f in SHIM_LAYOUT.fields),
            *(f"int.{f.name}" for f in MD_LAYOUT.fields),
            *(f"int.hop.{n}" for n in Hop._fields)]


HANDLER = Handler(
    "int", unwrap=unwrap, layer="int", title="In-band Network Telemetry (INT-MD over UDP)",
    layouts=(("int", SHIM_LAYOUT), ("int", MD_LAYOUT)),
    column_types=(("int.hops", "int", 8, False),
                  *((f"int.hop.{n}", "string", 0, False) for n in Hop._fields)),
    fields=tuple(field_names()))
