"""Native InfiniBand: LRH, GRH when LNH is 3, then RoCE's BTH and extended headers, ICRC, VCRC.

A native InfiniBand packet (link type 247, or the body of an ERF InfiniBand record) is::

    LRH (8) | GRH (40, LNH 3) | BTH (12) | ETHs | payload | pad | ICRC (4) | VCRC (2)

LRH.PktLen counts 4-byte words from LRH through ICRC (IBA 7.7.8).  Everything from BTH on
is the transport RoCE carries too: it is located by ``roce.locate``'s transport walk and
decoded with ``roce.headers``' layouts and ``roce.opcodes``' table, so one opcode table
serves both families.  The CRC rules are ``roce.families.ib.crc``; MADs, CM and IPoIB in
the payload are ``roce.families.ib.mad``.

Field names are Wireshark's without the ``infiniband.`` prefix: ``lrh.dlid``,
``grh.sgid``, ``bth.psn``; the VCRC is ``vcrc`` (tshark: ``infiniband.variant.crc``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from roce.errors import DecodeError, NotRoCE
from roce.families.base.fields import hex_spec
from roce.families.ib import crc as ibcrc
from roce.families.ib import mad as ibmad
from roce.headers import (
    DECODERS,
    LAYOUTS,
    LNH_GLOBAL,
    LNH_IP,
    LNH_LOCAL,
    LNH_RAW,
    LRH,
    SIZE_OF,
    define,
)
from roce.locate import (
    BAD_L3_LENGTH,
    BAD_TRUNCATED,
    HID,
    L3_GRH,
    L3_LRH_GRH,
    L3_NONE,
    LINKTYPE_INFINIBAND,
    NR_LNH,
    OK,
    SPECS,
    WALK_INFINIBAND,
    Walk,
    _rd,
    explain,
)
from roce.locate import walk as _walk
from roce.opcodes import OPCODES

LNH_NAMES = {LNH_RAW: "Raw", LNH_IP: "IP Non-IBA", LNH_LOCAL: "IBA Local",
             LNH_GLOBAL: "IBA Global"}
VCRC_SIZE = ibcrc.VCRC_SIZE
VL_MANAGEMENT = 15  # SMPs travel on VL15 (IBA 7.6.3)

LRH_LAYOUT, decode_lrh, encode_lrh = define("lrh", LRH)
LRH_SIZE = LRH_LAYOUT.size
LRH_KEYS = tuple(f"lrh.{f.name}" for f in LRH_LAYOUT.fields)
_GRH = SIZE_OF["grh"]
GRH_LAYOUT = LAYOUTS["grh"]
TRANSPORT_HEADERS = frozenset(n for op in OPCODES.values() for n in ("bth", *op.headers))
# The fields Wireshark shows in hex (packet-infiniband.c: BASE_HEX), written as it writes
# them: -T fields and the tree below (the handler's ``display``).  The other LRH fields are
# decimal there; the transport's are the RoCE headers' (roce.families.base.tree).
DISPLAY: dict[str, str] = {
    **{key: hex_spec(fld.bits) for fld, key in zip(LRH_LAYOUT.fields, LRH_KEYS)
       if fld.name in ("vl", "lnh")},
    "vcrc": hex_spec(8 * VCRC_SIZE),
}


class Decoded(NamedTuple):
    """What the family made of one frame (``kind`` as ``roce.decoder.decode.Record``)."""

    walk: Walk
    layers: tuple[str, ...]
    fields: dict[str, Any]
    error: DecodeError | NotRoCE | None
    kind: str


def walk(frame: bytes) -> tuple[Walk, DecodeError | NotRoCE | None]:
    """Locate the headers of a native InfiniBand packet: the structural walk
    (``roce.locate``, link type 247 as ``WALK_INFINIBAND``) in the decoder's terms: l3 is
    the GRH when LNH is 3 (none with LNH 2), ``l4_end`` the end of the ICRC (where the VCRC
    starts); the error a user reads, or None."""
    w = _walk(frame, WALK_INFINIBAND)
    if w.l3_kind == L3_LRH_GRH:
        w = w._replace(l3_kind=L3_GRH, l3_off=LRH_SIZE, l3_len=_GRH)
    else:
        w = w._replace(l3_kind=L3_NONE, l3_off=-1, l3_len=0)
    if w.status == NR_LNH:  # a raw or IP packet: well formed, not for the IBA transport
        lnh = w.err_a
        return (w._replace(status=OK),
                NotRoCE(f"LRH LNH {lnh} ({LNH_NAMES[lnh]}) carries no IBA transport", 1))
    if w.status == BAD_L3_LENGTH and w.err_header == HID["grh"]:
        return w, DecodeError(f"GRH payload length at byte {w.err_offset} is {w.err_a}, the "
                              f"LRH says {w.err_b}", "grh", w.err_offset)
    if w.status != OK:
        return w, explain(w)
    n = len(frame)
    if n < w.l4_end + VCRC_SIZE:
        return w, DecodeError(f"VCRC missing at byte {w.l4_end}: {n - w.l4_end} bytes left",
                              "vcrc", w.l4_end)
    return w, None


def _transport_headers(frame: bytes, w: Walk) -> dict[str, dict[str, Any]]:
    """BTH and the extended headers the walk found whole (LNH 2: no GRH before them)."""
    h: dict[str, dict[str, Any]] = {}
    b = w.bth_off
    if b < 0 or len(frame) - b < SIZE_OF["bth"]:
        return h
    h["bth"] = DECODERS["bth"](frame, b)
    op = OPCODES.get(h["bth"]["opcode"])
    limit = w.payload_off if w.payload_off >= 0 else (
        w.err_offset if w.status == BAD_TRUNCATED else -1)
    pos = b + SIZE_OF["bth"]
    for name in op.headers if op is not None else ():
        if pos + SIZE_OF[name] > limit:
            break
        h[name] = DECODERS[name](frame, pos)
        pos += SIZE_OF[name]
    return h


def decode(frame: bytes, caplen: int | None = None, origlen: int | None = None) -> Decoded:
    """Decode one native InfiniBand packet into Wireshark-named flat fields."""
    from roce.families.base.fields import header_fields, is_capture_cut, known_headers

    w, err = walk(frame)
    f: dict[str, Any] = {}
    layers: list[str] = []
    if len(frame) >= LRH_SIZE:
        f["lrh"] = True
        f.update(zip(LRH_KEYS, decode_lrh(frame, 0).values()))
        layers.append("lrh")
    f["infiniband"] = True
    if isinstance(err, NotRoCE):
        return Decoded(w, tuple(layers), f, err, "other")
    h = known_headers(frame, w, LINKTYPE_INFINIBAND) if w.l3_kind == L3_GRH else (
        _transport_headers(frame, w))
    header_fields(h, f)
    layers += list(h)
    kind = "roce"
    if err is not None:
        cut = caplen is not None and origlen is not None and (
            is_capture_cut(w, caplen, origlen) or caplen < origlen)
        kind = "truncated" if cut else "malformed"
        f[kind] = str(err)
        if w.payload_off >= 0 and kind == "truncated":
            f["payload.len"] = len(frame) - w.payload_off
        return Decoded(w, tuple(layers), f, err, kind)
    stored = int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
    f["payload.len"] = w.pad_off - w.payload_off
    f["icrc"] = stored
    f["icrc.valid"] = ibcrc.icrc(frame, w.l3_kind, w.bth_off, w.icrc_off) == stored
    stored_v = int.from_bytes(frame[w.l4_end:w.l4_end + VCRC_SIZE], "big")
    f["vcrc"] = stored_v
    f["vcrc.valid"] = ibcrc.vcrc(memoryview(frame)[:w.l4_end]) == stored_v
    layers += ibmad.decode_payload(frame, w, f)
    return Decoded(w, tuple(layers), f, None, kind)


def columns(d: Decoded) -> tuple[str, str, str, str]:
    """(source, destination, protocol, Info) of a decoded packet, tshark style: LIDs as
    addresses, the opcode line of RoCE, then MAD / CM / IPoIB facts."""
    from roce.families.base.summary import info_text
    from roce.families.ib.flags import IB_FLAG_TEXT, flag_index

    f = d.fields
    if "lrh.slid" not in f:
        return "", "", "InfiniBand", f"[Malformed: {d.error}]"
    src, dst = f"LID: {f['lrh.slid']}", f"LID: {f['lrh.dlid']}"
    if "grh" in f:
        src, dst = f["grh.sgid"], f["grh.dgid"]
    if d.kind == "other":
        return src, dst, "InfiniBand", f"{LNH_NAMES[f['lrh.lnh']]} packet"
    proto, info = "InfiniBand", ""
    if "bth" in f:
        info = info_text(f)
        extra = ibmad.info(f)
        if extra:
            proto, text = extra
            info = f"{text} ({info})" if proto != "IPoIB" else f"{text}"
        info += IB_FLAG_TEXT[flag_index(f["bth.a"], f["bth.fecn"], f["bth.becn"],
                                        f.get("icrc.valid") is not False,
                                        f.get("vcrc.valid") is not False)]
    if d.kind == "truncated":
        info = f"{info} [Truncated]" if d.walk.payload_off >= 0 else (
            f"{info} [Truncated: {d.error}]")
    elif d.kind == "malformed":
        info = f"{info} [Malformed: {d.error}]".strip()
    return src, dst, proto, info


def tree(d: Decoded, frame: bytes) -> list[str]:
    """The ``-V`` lines of the InfiniBand part: LRH and GRH, RoCE's blocks for BTH and the
    extended headers, MAD / CM / IPoIB, payload and both CRCs checked."""
    from roce.families.base.tree import transport_text

    f, w = d.fields, d.walk
    out = ["InfiniBand"]
    if "lrh" in f:
        out.append("    Local Route Header")
        for fld, key in zip(LRH_LAYOUT.fields, LRH_KEYS):
            value = f[key]
            text = DISPLAY[key].format(value) if key in DISPLAY else str(value)
            if fld.name == "lnh":
                text = f"{LNH_NAMES[value]} ({text})"
            out.append(f"        {fld.title}: {text}")
    if "grh" in f:
        out.append("    Global Route Header")
        out += [f"        {fld.title}: {f['grh.' + fld.name]}" for fld in GRH_LAYOUT.fields]
    transport = tuple(h for h in d.layers if h in TRANSPORT_HEADERS)
    if transport:
        out += transport_text(transport, f).rstrip("\n").split("\n")
    out += ibmad.tree(f)
    if d.kind == "roce" and w.payload_off >= 0:
        payload = frame[w.payload_off:w.pad_off]
        out.append(f"    Payload: {len(payload)} bytes")
        if payload:
            more = "..." if len(payload) > 16 else ""
            out.append(f"        Data: {payload[:16].hex(' ')}{more}")
        if w.icrc_off > w.pad_off:
            out.append(f"    Pad: {w.icrc_off - w.pad_off} bytes")
        out += crc_lines(d, frame)
    return out


def crc_lines(d: Decoded, frame: bytes) -> list[str]:
    """ICRC and VCRC, checked, as ``roce decode -V`` reports RoCE's ICRC."""
    f, w = d.fields, d.walk
    if "icrc" not in f:
        return []
    out = []
    want = ibcrc.icrc(frame, w.l3_kind, w.bth_off, w.icrc_off)
    state = "correct" if f["icrc.valid"] else f"incorrect, should be 0x{want:08x}"
    out.append(f"    Invariant CRC: 0x{f['icrc']:08x} [{state}]")
    want_v = ibcrc.vcrc(memoryview(frame)[:w.l4_end])
    shown = DISPLAY["vcrc"].format
    state = "correct" if f["vcrc.valid"] else f"incorrect, should be {shown(want_v)}"
    out.append(f"    Variant CRC: {shown(f['vcrc'])} [{state}]")
    return out


def build(transport: bytes, *, lnh: int = LNH_LOCAL, grh: bytes | None = None, vl: int = 0,
          sl: int = 0, dlid: int = 1, slid: int = 2, lver: int = 0,
          bad_icrc: bool = False, bad_vcrc: bool = False) -> bytes:
    """A native InfiniBand packet around ``transport`` (BTH through pad, no ICRC): LRH with
    the packet length computed, the GRH given (its payload length is set here), ICRC and
    VCRC computed.  ``vl`` 15 is where SMPs travel."""
    body = transport
    if lnh == LNH_GLOBAL:
        if grh is None or len(grh) != _GRH:
            raise ValueError("LNH 3 needs a 40-byte GRH")
        paylen = len(transport) + 4
        grh = grh[:4] + paylen.to_bytes(2, "big") + grh[6:]
        body = grh + transport
    total = LRH_SIZE + len(body) + 4
    if total % 4:
        raise ValueError(f"packet of {total} bytes is not a whole number of 4-byte words")
    lrh = encode_lrh({"vl": vl, "lver": lver, "sl": sl, "reserved2": 0, "lnh": lnh,
                      "dlid": dlid, "reserved5": 0, "pktlen": total // 4, "slid": slid})
    pkt = lrh + body
    l3 = L3_GRH if lnh == LNH_GLOBAL else L3_NONE
    bth_off = LRH_SIZE + (_GRH if lnh == LNH_GLOBAL else 0)
    value = ibcrc.icrc(pkt + bytes(4), l3, bth_off, len(pkt)) ^ (1 if bad_icrc else 0)
    pkt += value.to_bytes(4, "big")
    v = ibcrc.vcrc(pkt) ^ (1 if bad_vcrc else 0)
    return pkt + v.to_bytes(2, "big")


# -- bulk scan for the one-line path -----------------------------------------------------------
# The compiled twin is roce._fastpath.ib_scan (roce/families/ib/_scan.pxi); roce.fast hands it
# the LRH field positions (roce.locate.LRH_SPECS), roce.families.ib.crc the VCRC table.

SCAN_COLUMNS: dict[str, str] = {
    "status": "B", "lnh": "B", "opcode": "B", "destqp": "I", "psn": "I", "flags": "B",
    "dlid": "H", "slid": "H", "bth_off": "i", "icrc_end": "i", "key0": "Q", "key1": "Q",
    "key2": "Q", "icrc_ok": "B", "vcrc_ok": "B",
}


def scan_columns(n: int) -> dict[str, Any]:
    from array import array

    return {name: array(code, bytes(array(code).itemsize * n))
            for name, code in SCAN_COLUMNS.items()}


def scan_reference(frames: list[bytes], cols: dict[str, Any]) -> int:
    """Pure-Python twin of ``roce._fastpath.ib_scan``: status 0 for a whole, well-formed
    packet (VCRC present), else 1 (``decode`` says why)."""
    from roce.fast import _KEY_SPECS
    from roce.locate import FLAG_A, FLAG_BECN, FLAG_FECN, FLAG_M, FLAG_SE

    flag_bits = (("se", FLAG_SE), ("m", FLAG_M), ("fecn", FLAG_FECN), ("becn", FLAG_BECN),
                 ("a", FLAG_A))
    for i, f in enumerate(frames):
        w, err = walk(f)
        keys = [0, 0, 0]
        cols["lnh"][i] = f[1] & 3 if len(f) >= LRH_SIZE else 0
        if err is not None or w.status != OK:
            cols["status"][i] = 1
            for c in ("opcode", "flags", "icrc_ok", "vcrc_ok", "destqp", "psn", "dlid", "slid"):
                cols[c][i] = 0
            cols["bth_off"][i] = cols["icrc_end"][i] = -1
        else:
            b = w.bth_off
            cols["status"][i] = 0
            cols["opcode"][i] = w.opcode
            cols["flags"][i] = sum(bit for name, bit in flag_bits
                                   if _rd(f, b, SPECS[("bth", name)]))
            cols["destqp"][i] = _rd(f, b, SPECS[("bth", "destqp")])
            cols["psn"][i] = _rd(f, b, SPECS[("bth", "psn")])
            lrh = decode_lrh(f, 0)
            cols["dlid"][i], cols["slid"][i] = lrh["dlid"], lrh["slid"]
            cols["bth_off"][i], cols["icrc_end"][i] = b, w.l4_end
            for j, (off, n, shift, mask) in enumerate(_KEY_SPECS.get(w.opcode, ())):
                keys[j] = (int.from_bytes(f[b + off:b + off + n], "big") >> shift) & mask
            cols["icrc_ok"][i] = int(ibcrc.icrc(f, w.l3_kind, b, w.icrc_off)
                                     == int.from_bytes(f[w.icrc_off:w.l4_end], "big"))
            cols["vcrc_ok"][i] = int(ibcrc.vcrc(memoryview(f)[:w.l4_end])
                                     == int.from_bytes(f[w.l4_end:w.l4_end + 2], "big"))
        cols["key0"][i], cols["key1"][i], cols["key2"][i] = keys
    return len(frames)


def _compiled() -> Any:
    from roce import fast

    ext = getattr(fast, "_ext", None)
    if ext is None or not hasattr(ext, "ib_configure"):
        return None
    return ext  # configured: the LRH by roce.fast, the VCRC by roce.families.ib.crc


_EXT = _compiled()
scan_batch: Any = _EXT.ib_scan if _EXT is not None else scan_reference


__all__ = ["DISPLAY", "LINKTYPE_INFINIBAND", "LRH", "SCAN_COLUMNS", "Decoded", "build", "columns",
           "crc_lines", "decode", "scan_batch", "scan_columns", "scan_reference", "tree", "walk"]
