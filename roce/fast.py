"""Chooses between the compiled fast path and the pure-Python references, and feeds the
fast path the tables it needs (derived from ``roce.headers`` and ``roce.opcodes``).

Import from here, not from ``roce._fastpath``: if the extension is missing the package still
works through the references and says so once with a ``RuntimeWarning``.
"""

from __future__ import annotations

import os
import warnings
from array import array

from roce import headers as _headers
from roce import icrc as _icrc
from roce import locate as _locate
from roce import psn as _psn
from roce.headers import LAYOUTS, SIZE_OF
from roce.locate import OK, Walk
from roce.opcodes import OPCODES

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

try:
    from roce import _fastpath as _ext
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    _ext = None
    warnings.warn(f"roce: compiled fast path not available ({exc}); using the pure-Python "
                  "reference implementations (slower). Reinstall with a C compiler to fix.",
                  RuntimeWarning, stacklevel=2)

COMPILED = _ext is not None
if _ext is not None:  # the header codecs of roce.headers in C, where a layout allows
    _headers.FAST_CODEC = _ext.HeaderCodec

# -- tables for the fast path --------------------------------------------------------------

KEY_COUNT = 3


def _key_specs() -> dict[int, list[tuple[int, int, int, int]]]:
    """Per opcode: the first extended header's key fields (not reserved), from BTH start."""
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for code, op in OPCODES.items():
        if not op.headers:
            continue
        lay = LAYOUTS[op.headers[0]]
        base = SIZE_OF["bth"] * 8
        specs = []
        for f in lay.fields:
            if f.name.startswith("reserved") or f.bits > 64:
                continue
            first = (base + f.bit_offset) // 8
            last = (base + f.bit_offset + f.bits - 1) // 8
            n = last - first + 1
            if n > 8:
                continue
            specs.append((first, n, n * 8 - ((base + f.bit_offset) % 8) - f.bits, f.mask))
            if len(specs) == KEY_COUNT:
                break
        out[code] = specs
    return out


KEY_FIELDS: dict[int, tuple[str, ...]] = {
    code: tuple(f"{op.headers[0]}.{f.name}" for f in LAYOUTS[op.headers[0]].fields
                if not f.name.startswith("reserved") and f.bits <= 64)[:KEY_COUNT]
    for code, op in OPCODES.items() if op.headers
}
_KEY_SPECS = _key_specs()


def _config() -> dict[str, Any]:
    L = _locate
    return {
        "fields": [L.SPECS[hf] for hf in L.FAST_FIELDS],
        "sizes": dict(SIZE_OF),
        "hid": dict(L.HID),
        "status": {name: getattr(L, name) for name in (
            "OK", "NR_ETHERTYPE", "NR_PROTO", "NR_PORT", "NR_FRAGMENT", "NR_LINKTYPE",
            "BAD_TRUNCATED", "BAD_IP_VERSION", "BAD_IP_HDRLEN", "BAD_L3_LENGTH",
            "BAD_UDP_LENGTH", "BAD_TVER", "BAD_OPCODE", "BAD_PADCNT", "BAD_PAYLOAD",
            "BAD_PAYLOAD_LEN", "BAD_GRH_NEXT", "NR_LNH")},
        "const": {name: getattr(L, name) for name in (
            "ETHERTYPE_IPV4", "ETHERTYPE_IPV6", "ETHERTYPE_ROCEV1", "ETHERTYPE_VLAN",
            "MAX_VLAN_TAGS", "GRH_NEXT_BTH", "LINKTYPE_ETHERNET", "LINKTYPE_RAW",
            "LINKTYPE_LINUX_SLL", "LINKTYPE_LINUX_SLL2", "FLAG_SE", "FLAG_M", "FLAG_FECN",
            "FLAG_BECN", "FLAG_A", "L3_NONE", "L3_GRH", "L3_IPV4", "L3_IPV6",
            "WALK_INFINIBAND", "L3_LRH", "L3_LRH_GRH", "LRH_SIZE", "LINK_ROCE", "LINK_IB")},
        "lrh": [L.LRH_SPECS[name] for name in L.LRH_FIELDS],
        "lrh_vl_mask": _icrc.LRH_VL_MASK[0],
        "opcodes": dict(L.OPCODE_PLAN),
        "opcode_links": dict(L.OPCODE_LINKS),
        "keys": _KEY_SPECS,
        "masks": dict(_icrc.MASKS),
        "walk_type": Walk,
    }


def _decoder_config() -> list[tuple[str, list[tuple[str, int, int, int, int, int]]]]:
    from roce.headers import _ip4_dec, _ip6_dec, _mac_dec

    kinds = {_mac_dec: 2, _ip4_dec: 3, _ip6_dec: 4}
    out = []
    for name in _locate.HEADER_IDS:
        lay = LAYOUTS.get(name)
        fields = []
        for f in lay.fields if lay else ():
            first, last = f.bit_offset // 8, (f.bit_offset + f.bits - 1) // 8
            n = last - first + 1
            kind = kinds.get(f.decode, 0) if f.kind == "addr" else (1 if f.kind == "bool"
                                                                       else 0)
            if kind == 0 and n > 8:
                kind = 5
            mask = 0 if kind == 4 else f.mask
            fields.append((f.name, first, n, n * 8 - (f.bit_offset % 8) - f.bits, mask, kind))
        out.append((name, fields))
    return out


if _ext is not None:
    _ext.configure(_config())
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_ext.disable_parallel)
    _ext.configure_decoder(_decoder_config(), "vlan2")

# -- the API the rest of roce uses ----------------------------------------------------------


def walk(frame: bytes, linktype: int = 1, udp_port: int = 4791) -> Walk:
    """Locate the headers of a frame (see roce.locate.walk)."""
    return _locate.walk(frame, linktype, udp_port)


# the ICRC from the walk's pieces (``icrc_of`` unpacked; the compiled emulator calls it
# directly: one Python call less per received frame)
icrc_at: Any = _icrc.icrc_at


def icrc_of(frame: bytes, w: Walk) -> int:
    """The ICRC a walked frame should carry."""
    return icrc_at(frame, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)


def icrc_check(frame: bytes, linktype: int = 1, udp_port: int = 4791) -> tuple[int, int, int]:
    """(walk status, computed ICRC, stored ICRC) for one frame."""
    w = _locate.walk(frame, linktype, udp_port)
    if w.status != OK:
        return (w.status, 0, 0)
    return (OK, icrc_of(frame, w), int.from_bytes(frame[w.icrc_off:w.l4_end], "big"))


def icrc_batch(frames: list[bytes], linktype: int = 1, udp_port: int = 4791,
               out: Any = None, status: Any = None) -> int:
    """ICRC of many frames in one call; returns how many carry a correct ICRC."""
    good = 0
    for i, f in enumerate(frames):
        st, calc, stored = icrc_check(f, linktype, udp_port)
        if out is not None:
            out[i] = calc
        if status is not None:
            status[i] = st
        good += st == OK and calc == stored
    return good


SCAN_COLUMNS: dict[str, str] = {
    "status": "B", "opcode": "B", "destqp": "I", "psn": "I", "flags": "B", "p_key": "H",
    "ecn": "B", "l3_kind": "B", "l3_off": "i", "bth_off": "i", "payload_len": "i",
    "key0": "Q", "key1": "Q", "key2": "Q", "icrc_ok": "B",
}


def scan_columns(n: int) -> dict[str, array]:
    """Preallocated columns for ``scan`` of ``n`` frames."""
    return {name: array(code, bytes(array(code).itemsize * n)) for name, code in
            SCAN_COLUMNS.items()}


def scan(frames: list[bytes], linktype: int = 1, udp_port: int = 4791,
         check_icrc: bool = False, cols: dict[str, array] | None = None) -> dict[str, array]:
    """Bulk header scan: BTH fields and the first ETH's key fields (``KEY_FIELDS``) of every
    frame into columns (``SCAN_COLUMNS``), without a Python object per header."""
    if cols is None:
        cols = scan_columns(len(frames))
    _scan(frames, linktype, udp_port, check_icrc, cols)
    return cols


def scan_reference(frames: list[bytes], linktype: int, udp_port: int, check_icrc: bool,
                   cols: dict[str, array]) -> int:
    """Pure-Python twin of the fast path's scan."""
    L = _locate
    for i, f in enumerate(frames):
        w = L.walk(f, linktype, udp_port)
        cols["status"][i] = w.status
        cols["l3_kind"][i] = w.l3_kind
        cols["l3_off"][i] = w.l3_off
        cols["bth_off"][i] = w.bth_off
        keys = [0, 0, 0]
        if w.status != OK:
            cols["opcode"][i] = max(w.opcode, 0)
            for c in ("destqp", "psn", "flags", "p_key", "ecn", "icrc_ok"):
                cols[c][i] = 0
            cols["payload_len"][i] = -1
        else:
            b = w.bth_off
            cols["opcode"][i] = w.opcode
            rd = L._rd
            flags = 0
            for field, bit in (("se", L.FLAG_SE), ("m", L.FLAG_M), ("fecn", L.FLAG_FECN),
                               ("becn", L.FLAG_BECN), ("a", L.FLAG_A)):
                if rd(f, b, L.SPECS[("bth", field)]):
                    flags |= bit
            cols["flags"][i] = flags
            cols["p_key"][i] = rd(f, b, L.SPECS[("bth", "p_key")])
            cols["destqp"][i] = rd(f, b, L.SPECS[("bth", "destqp")])
            cols["psn"][i] = rd(f, b, L.SPECS[("bth", "psn")])
            if w.l3_kind == L.L3_IPV4:
                ecn = rd(f, w.l3_off, L.SPECS[("ip", "dsfield.ecn")])
            elif w.l3_kind == L.L3_IPV6:
                ecn = rd(f, w.l3_off, L.SPECS[("ipv6", "tclass")]) & 3
            else:
                ecn = 0
            cols["ecn"][i] = ecn
            cols["payload_len"][i] = w.pad_off - w.payload_off
            for j, (off, n, shift, mask) in enumerate(_KEY_SPECS.get(w.opcode, ())):
                keys[j] = (int.from_bytes(f[b + off:b + off + n], "big") >> shift) & mask
            cols["icrc_ok"][i] = int(check_icrc and icrc_of(f, w) ==
                                     int.from_bytes(f[w.icrc_off:w.l4_end], "big"))
        cols["key0"][i], cols["key1"][i], cols["key2"][i] = keys
    return len(frames)


def ip_checksum_reference(header: bytes) -> int:
    """RFC 791 header checksum (ones' complement sum; the checksum field must be zero)."""
    s = 0
    for i in range(0, len(header) - 1, 2):
        s += (header[i] << 8) | header[i + 1]
    if len(header) & 1:
        s += header[-1] << 8
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


ip_checksum: Any = ip_checksum_reference


def assemble_reference(l2: bytes, l3: bytes, l3_kind: int, udp: bytes, transport: bytes,
                       icrc: int | None, trailer: bytes, fix_l3_len: bool, fix_checksum: bool,
                       fix_udp_len: bool, body: bytes = b"", body_at: int = 0,
                       body_len: int = -1) -> bytes:
    """Join encoded headers (the transport part: ``transport`` then
    ``body[body_at:body_at + body_len]``, its payload; a negative ``body_len``: to the end),
    fill the L3 length, IPv4 checksum and UDP length where asked, append the ICRC (computed
    when None) and the trailer."""
    L = _locate
    if body_len < 0:
        body_len = len(body) - body_at
    if body_at < 0 or body_len < 0 or body_at > len(body) - body_len:
        raise ValueError("assemble: the payload's range lies outside its bytes")
    if len(transport) < SIZE_OF["bth"]:
        raise ValueError("assemble: transport part shorter than BTH")
    transport = transport + body[body_at:body_at + body_len]
    buf = bytearray(l2 + l3 + udp + transport)
    l3_off, n3, nu, nt = len(l2), len(l3), len(udp), len(transport)

    def put(base: int, spec: tuple[int, int, int, int], value: int) -> None:
        off, n, shift, mask = spec
        old = int.from_bytes(buf[base + off:base + off + n], "big")
        new = (old & ~(mask << shift)) | ((value & mask) << shift)
        buf[base + off:base + off + n] = new.to_bytes(n, "big")

    if fix_l3_len:
        field, value = {L.L3_IPV4: (("ip", "len"), n3 + nu + nt + 4),
                        L.L3_IPV6: (("ipv6", "plen"), nu + nt + 4),
                        L.L3_GRH: (("grh", "paylen"), nt + 4)}[l3_kind]
        put(l3_off, L.SPECS[field], value)
    if fix_udp_len and nu:
        put(l3_off + n3, L.SPECS[("udp", "length")], nu + nt + 4)
    if fix_checksum and l3_kind == L.L3_IPV4:
        put(l3_off, L.SPECS[("ip", "checksum")], 0)
        put(l3_off, L.SPECS[("ip", "checksum")],
            ip_checksum_reference(bytes(buf[l3_off:l3_off + n3])))
    bth_off = l3_off + n3 + nu
    if icrc is None:
        icrc = _icrc.icrc_at(bytes(buf), l3_off, l3_kind, n3, bth_off, len(buf))
    return bytes(buf) + icrc.to_bytes(4, "big") + trailer


assemble: Any = assemble_reference


def same_bytes_reference(a: bytes, a_at: int, b: bytes, b_at: int, n: int) -> bool:
    """Whether ``a[a_at:a_at + n]`` equals ``b[b_at:b_at + n]`` (a received payload against
    the pattern it should hold, in place in the compiled form); ValueError for a range
    outside either."""
    if n < 0 or a_at < 0 or b_at < 0 or a_at > len(a) - n or b_at > len(b) - n:
        raise ValueError("same_bytes: a range outside its bytes")
    return a[a_at:a_at + n] == b[b_at:b_at + n]


same_bytes: Any = same_bytes_reference


def bth_pack_reference(opcode: int, se: bool, padcnt: int, p_key: int, destqp: int,
                       ackreq: bool, psn: int) -> bytes:
    from roce.headers import ENCODERS

    return ENCODERS["bth"]({"opcode": opcode, "se": se, "m": False, "padcnt": padcnt,
                            "tver": 0, "p_key": p_key, "fecn": False, "becn": False,
                            "reserved": 0, "destqp": destqp, "a": ackreq, "reserved7": 0,
                            "psn": psn})


def bth_unpack_reference(frame: bytes, off: int) -> tuple:
    from roce.headers import DECODERS

    b = DECODERS["bth"](frame, off)
    return (b["opcode"], b["se"], b["padcnt"], b["p_key"], b["destqp"], b["a"], b["psn"])


# what a RoCE endpoint reads of each frame it receives: status (roce.locate's; -1: a bad ICRC),
# the BTH's fields, where the headers start
RX_FIELDS = ("status", "opcode", "se", "p_key", "destqp", "ackreq", "psn", "l3_kind",
             "l3_off", "l3_len", "bth_off", "payload_off", "pad_off")
_RX_NONE = (0,) * (len(RX_FIELDS) - 1)


def rx_reference(frame: bytes, check_icrc: bool = True, linktype: int = 1,
                 udp_port: int = 4791) -> tuple:
    """``RX_FIELDS`` of ``frame`` in one call (the emulator's receive): the walk, the ICRC
    (when ``check_icrc``) and the BTH; after a status other than OK, zeros."""
    w = _locate.walk(frame, linktype, udp_port)
    if w.status != OK:
        return (w.status, *_RX_NONE)
    if check_icrc and (_icrc.icrc_at(frame, w.l3_off, w.l3_kind, w.l3_len, w.bth_off,
                                     w.icrc_off)
                       != int.from_bytes(frame[w.icrc_off:w.l4_end], "big")):
        return (-1, *_RX_NONE)
    op, se, _, p_key, destqp, ackreq, psn = bth_unpack_reference(frame, w.bth_off)
    return (OK, op, se, p_key, destqp, ackreq, psn, w.l3_kind, w.l3_off, w.l3_len, w.bth_off,
            w.payload_off, w.pad_off)


bth_pack: Any = bth_pack_reference
bth_unpack: Any = bth_unpack_reference
rx: Any = rx_reference
decode_headers: Any = None  # the compiled twin of packet.decode_headers_reference, if any
_scan = scan_reference
psn_add, psn_diff, psn_cmp, classify = _psn.psn_add, _psn.psn_diff, _psn.psn_cmp, _psn.classify
PSNTracker: Any = _psn.PSNTracker
crc32: Any = None

if _ext is not None:
    walk = _ext.walk  # type: ignore[assignment]  # noqa: F811
    icrc_check = _ext.icrc  # type: ignore[assignment]  # noqa: F811
    icrc_batch = _ext.icrc_batch  # type: ignore[assignment]  # noqa: F811
    _scan = _ext.scan
    psn_add, psn_diff, psn_cmp, classify = (_ext.psn_add, _ext.psn_diff, _ext.psn_cmp,
                                            _ext.classify)
    PSNTracker = _ext.PSNTracker
    _ext.configure_psn(_psn.EARLY_WINDOW)
    crc32 = _ext.crc32
    ip_checksum = _ext.ip_checksum
    assemble = _ext.assemble
    same_bytes = _ext.same_bytes
    bth_pack, bth_unpack = _ext.bth_pack, _ext.bth_unpack
    rx = _ext.rx
    decode_headers = _ext.decode_headers

    icrc_at = _ext.icrc_at
else:
    import zlib

    crc32 = zlib.crc32
