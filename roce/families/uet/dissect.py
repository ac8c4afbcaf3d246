"""Decoding a UET packet into flat fields named as Wireshark names them (``uet.pds.psn``,
``uet.ses.std.opcode``) plus ours where Wireshark has none (``uet.pds.clear_psn_offset``).

The bytes handed over start where UET does: at the PDS prologue after UDP (port 4793), or at
the 4-byte entropy header after IP (protocol 253).  In wire order::

    [entropy] [TSS: word, SSI when SP, TSC] PDS prologue, PDS body by type [SES by next header
    [extension]] payload

A TSS header means what follows the PDS is encrypted: it is counted (``uet.encrypted``), not
parsed.  A header cut short is a ``DecodeError`` naming the header and its offset in the UET
bytes; the fields decoded before it stay, with Wireshark's expert field for that header
(``uet.ses.invalid_header``...).  What Wireshark does not check is checked after decoding
(``roce.families.uet.checks``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from roce.errors import DecodeError
from roce.families.uet import codes as t
from roce.families.uet.checks import check
from roce.families.uet.layouts import (
    EPSN_MASK,
    P_MASK,
    SPEC,
    SYN_MASK,
    Header,
    Reading,
)
from roce.locate import L3_NONE, OK, Walk

PSN_MASK = 0xFFFFFFFF
# the walk a family record carries (records read layers and fields, not offsets)
WALK = Walk(OK, 0, L3_NONE, -1, 0, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0)


class Decoded(NamedTuple):
    """What the family made of one packet (``kind`` as ``roce.decoder.decode.Record``)."""

    walk: Walk
    layers: tuple[str, ...]
    fields: dict[str, Any]
    error: DecodeError | None
    kind: str
    reading: Reading = SPEC
    headers: tuple[str, ...] = ()  # the layouts decoded, in wire order (their keys)
    data: bytes = b""  # the UET bytes decoded (the tree's payload comes from them)


# Wireshark's expert field for a header that is cut short, by where decoding stopped.
INVALID_HEADER = {"uet.tss": "uet.tss.invalid_header", "uet.pds": "uet.pds.invalid_header",
                  "uet.pds.rud_rod": "uet.pds.rud_rod.invalid_header",
                  "uet.pds.ack": "uet.pds.ack.invalid_header",
                  "uet.ses": "uet.ses.invalid_header"}
_WHAT = {"entropy": "entropy header", "tss": "TSS header", "tss.ssi": "TSS SSI",
         "tss.tsc": "TSS counter", "prologue": "PDS prologue", "rud_rod": "PDS RUD/ROD request",
         "rud_rod.syn": "PDS RUD/ROD request", "cc": "PDS request CC state",
         "rudi": "PDS RUDI header", "uud": "PDS UUD header", "ack": "PDS ACK",
         "ack.ext": "PDS ACK extension", "ack.nscc": "PDS ACK CC state",
         "ack.credit": "PDS ACK CC state", "ack.ccx": "PDS ACK CCX state",
         "ack.epsn": "PDS ACK expected PSN", "nack": "PDS NACK", "nack.ccx": "PDS NACK CCX state",
         "ctrl": "PDS control", "ctrl.syn": "PDS control", "std": "SES standard request",
         "std.som": "SES standard request", "std.cont": "SES standard request",
         "small": "SES small request", "medium": "SES medium request",
         "atomic": "SES atomic extension", "cswap": "SES compare-and-swap extension",
         "rendv": "SES rendezvous extension", "sync": "SES sync extension",
         "rsp": "SES response", "rsp_data": "SES response with data",
         "rsp_data_small": "SES small response with data"}
_EXPERT_OF = {"entropy": "uet.pds", "tss": "uet.tss", "tss.ssi": "uet.tss",
              "tss.tsc": "uet.tss", "prologue": "uet.pds", "rud_rod": "uet.pds.rud_rod",
              "rud_rod.syn": "uet.pds.rud_rod", "cc": "uet.pds.rud_rod",
              "ack.ext": "uet.pds.ack", "ack.nscc": "uet.pds.ack", "ack.credit": "uet.pds.ack",
              "ack.ccx": "uet.pds.ack"}


def signed16(v: int) -> int:
    return v - 0x10000 if v & 0x8000 else v


def _put(h: Header, data: bytes, pos: int, f: dict[str, Any]) -> int:
    """Decode ``h`` at ``pos`` into ``f`` (and its key into ``f[_GOT]``); the position after
    it.  Raises DecodeError when the bytes run out."""
    end = pos + h.size
    if end > len(data):
        raise DecodeError(f"{_WHAT[h.key]} truncated at UET byte {pos}: needs {h.size} "
                          f"bytes, {len(data) - pos} left", h.key, pos)
    f.update(zip(h.keys, h.decode(data, pos).values()))
    f[_GOT].append(h.key)
    return end


_GOT = "\0headers"  # a key no field has: the layouts decoded, taken out before returning


def _flags(flags: int, table: tuple[tuple[str, int], ...], f: dict[str, Any]) -> None:
    for name, mask in table:
        v = flags & mask
        if mask & (mask - 1):  # several bits: a number, shifted down as Wireshark shows it
            f[name] = v >> ((mask & -mask).bit_length() - 1)
        else:
            f[name] = v != 0


def decode(data: bytes, caplen: int | None = None, origlen: int | None = None, *,
           entropy: bool = False, reading: Reading = SPEC) -> Decoded:
    """Decode the UET bytes of one packet (after UDP, or after IP with ``entropy``)."""
    got: list[str] = []
    f: dict[str, Any] = {"uet": True, _GOT: got}
    layers = ["uet"]
    h = reading.headers
    pos = 0
    try:
        if entropy:
            pos = _put(h["entropy"], data, 0, f)
        if pos >= len(data):
            raise DecodeError(f"PDS header missing at UET byte {pos}", "prologue", pos)
        encrypted = data[pos] >> 3 == t.TSS_TYPE
        if encrypted:
            layers.append("uet.tss")
            f["uet.tss"] = True
            word = h["tss"]
            end = _put(word, data, pos, f)
            if f["uet.tss.sp"]:
                end = _put(h["tss.ssi"], data, end, f)
            pos = _put(h["tss.tsc"], data, end, f)
        layers.append("uet.pds")
        pos = _pds(data, pos, f, reading)
        if encrypted:  # TSS: what follows the PDS is ciphertext
            f["uet.encrypted"] = len(data) - pos
            pos = len(data)
        elif "uet.pds.nh" in f and f["uet.pds.nh"] != t.NH_NONE and \
                f["uet.pds.type"] in _SES_CARRIERS:
            layers.append("uet.ses")
            pos = _ses(data, pos, f, reading)
    except DecodeError as exc:
        key = exc.header
        expert = INVALID_HEADER.get(_EXPERT_OF.get(key, "uet.ses" if key in _SES_KEYS
                                                   else "uet.pds"))
        if expert is not None:
            f[expert] = str(exc)
        cut = caplen is not None and origlen is not None and caplen < origlen
        kind = "truncated" if cut else "malformed"
        f[kind] = str(exc)
        del f[_GOT]
        return Decoded(WALK, tuple(layers), f, exc, kind, reading, tuple(got), data)
    del f[_GOT]
    f["payload.len"] = len(data) - pos
    check(f, reading)
    return Decoded(WALK, tuple(layers), f, None, "uet", reading, tuple(got), data)


_SES_KEYS = frozenset(("std", "std.som", "std.cont", "small", "medium", "atomic", "cswap",
                       "rendv", "sync", "rsp", "rsp_data", "rsp_data_small"))
# PDS types after which a next header names an SES header (every one but control)
_SES_CARRIERS = frozenset((*t.REQUESTS, *t.RUDI, t.UUD_REQ, *t.ACKS, *t.NACKS))


def _pds(data: bytes, pos: int, f: dict[str, Any], reading: Reading) -> int:
    h = reading.headers
    if len(data) - pos < 4:  # Wireshark's UET_COMMON_HDR_SIZE
        raise DecodeError(f"PDS header truncated at UET byte {pos}: needs at least 4 bytes, "
                          f"{len(data) - pos} left", "prologue", pos)
    pro = h["prologue"].decode(data, pos)
    f[_GOT].append("prologue")
    typ, nh, flags = pro["type"], pro["nh"], pro["flags"]
    f["uet.pds"] = True
    f["uet.pds.type"] = typ
    f["uet.pds.ctl_type" if typ == t.CTRL else "uet.pds.nh"] = nh
    f["uet.pds.flags"] = flags
    _flags(flags, reading.flags.get(typ, ()), f)
    pos += 2
    if typ in t.REQUESTS:
        syn = flags & SYN_MASK
        pos = _put(h["rud_rod.syn" if syn else "rud_rod"], data, pos, f)
        psn = f["uet.pds.psn"]
        off = f["uet.pds.clear_psn_offset"] = signed16(f["uet.pds.clear_psn_offset"])
        f["uet.pds.clear_psn"] = (psn + off) & PSN_MASK
        if syn:
            f["uet.pds.pdc_mode"] = data[pos - 2]
            f["uet.pds.start_psn"] = (psn - f["uet.pds.psn_offset"]) & PSN_MASK
        if typ in t.CC_REQUESTS:
            pos = _put(h["cc"], data, pos, f)
    elif typ in t.RUDI:
        pos = _put(h["rudi"], data, pos, f)
    elif typ == t.UUD_REQ:
        pos = _put(h["uud"], data, pos, f)
    elif typ in t.ACKS:
        pos = _put(h["ack"], data, pos, f)
        raw = f.pop("uet.pds.ack_psn_offset")
        cack = f["uet.pds.cack_psn"]
        if reading.name == "ref-prov" and flags & P_MASK:  # a probe's ACK: no PSN offset
            f["uet.pds.ack.probe_opaque"] = raw
        else:
            off = f["uet.pds.ack_psn_offset"] = signed16(raw)
            f["uet.pds.ack_psn"] = (cack + off) & PSN_MASK
        if typ == t.ACK and "ack.epsn" in h and flags & EPSN_MASK:
            pos = _put(h["ack.epsn"], data, pos, f)
        if typ != t.ACK:
            pos = _ack_ext(data, pos, typ, f, reading)
    elif typ in t.NACKS:
        pos = _put(h["nack"], data, pos, f)
        if typ == t.NACK_CCX:
            pos = _put(h["nack.ccx"], data, pos, f)
    elif typ == t.CTRL:
        syn = reading.ctrl_syn and flags & SYN_MASK
        pos = _put(h["ctrl.syn" if syn else "ctrl"], data, pos, f)
        if syn:
            f["uet.pds.pdc_mode"] = data[pos - 6]
            f["uet.pds.start_psn"] = (f["uet.pds.psn"] - f["uet.pds.psn_offset"]) & PSN_MASK
    return pos


def _ack_ext(data: bytes, pos: int, typ: int, f: dict[str, Any], reading: Reading) -> int:
    h = reading.headers
    if len(data) - pos < h["ack.ext"].size + 8:  # Wireshark's UET_PDS_ACK_EXT_HDR_SIZE (20)
        raise DecodeError(f"PDS ACK extension truncated at UET byte {pos}: needs 20 bytes, "
                          f"{len(data) - pos} left", "ack.ext", pos)
    pos = _put(h["ack.ext"], data, pos, f)
    off = f["uet.pds.ack.sack_psn_offset"] = signed16(f["uet.pds.ack.sack_psn_offset"])
    f["uet.pds.ack.sack_psn"] = (f["uet.pds.cack_psn"] + off) & PSN_MASK
    if typ == t.ACK_CC or reading.name == "ref-prov":
        f["uet.pds.ack.cc_state"] = int.from_bytes(data[pos:pos + 8], "big")
        kind = f["uet.pds.ack.cc_type"]
        if kind == t.CC_NSCC:
            _put(h["ack.nscc"], data, pos, f)
        elif kind == t.CC_CREDIT:
            _put(h["ack.credit"], data, pos, f)
        pos += 8
    if typ == t.ACK_CCX:
        pos = _put(h["ack.ccx"], data, pos, f)
    return pos


def _ses(data: bytes, pos: int, f: dict[str, Any], reading: Reading) -> int:
    h = reading.headers
    nh = f["uet.pds.nh"]
    f["uet.ses"] = True
    if nh == t.NH_STD:
        start = pos
        pos = _put(h["std"], data, pos, f)
        pos = _put(h["std.som" if f["uet.ses.std.som"] else "std.cont"], data, pos, f)
        f["uet.ses.std.flags"] = data[start + 1]
        op = f["uet.ses.std.opcode"]
        if op in t.RESTART_AT_OFFSET:
            f["uet.ses.std.restart_token"] = f.pop("uet.ses.std.buffer_offset")
        elif op in t.RESTART_AT_KEY:
            f["uet.ses.std.restart_token"] = f.pop("uet.ses.std.mem_key_match_bits")
        if op in (t.SYNC_WRITE, t.SYNC_ATOMIC) and "sync" in h:
            pos = _put(h["sync"], data, pos, f)
        if op in t.ATOMIC_OPCODES or (op == t.SYNC_ATOMIC and "sync" in h):
            pos = _atomic(data, pos, f, h)
        elif op in t.RENDEZVOUS_OPCODES:
            pos = _put(h["rendv"], data, pos, f)
    elif nh == t.NH_SMALL:
        f["uet.ses.small_req.flags"] = data[pos + 1] if len(data) > pos + 1 else 0
        pos = _put(h["small"], data, pos, f)
        if f["uet.ses.std.opcode"] in t.ATOMIC_OPCODES:
            pos = _atomic(data, pos, f, h)
    elif nh == t.NH_MEDIUM:
        f["uet.ses.med_req.flags"] = data[pos + 1] if len(data) > pos + 1 else 0
        pos = _put(h["medium"], data, pos, f)
        if f["uet.ses.med_req.flags.hd"]:
            f["uet.ses.med_req.header_data"] = f.pop("uet.ses.med_req.buffer_offset")
        if f["uet.ses.std.opcode"] in t.ATOMIC_OPCODES:
            pos = _atomic(data, pos, f, h)
    elif nh == t.NH_RSP:
        pos = _put(h["rsp"], data, pos, f)
    elif nh == t.NH_RSP_DATA:
        pos = _put(h["rsp_data"], data, pos, f)
    elif nh == t.NH_RSP_DATA_SMALL:
        pos = _put(h["rsp_data_small"], data, pos, f)
    else:  # an unknown next header: nothing to read (checks name it)
        del f["uet.ses"]
        return pos
    if nh in t.RSP_OPCODES_OF and f["uet.ses.rsp.opcode"] not in t.RSP_OPCODES_OF[nh]:
        f["uet.ses.rsp.invalid_opcode"] = (
            f"response opcode {f['uet.ses.rsp.opcode']} does not belong in a "
            f"{t.NEXT_HEADERS[nh][1]} header")
    return pos


def _atomic(data: bytes, pos: int, f: dict[str, Any], h: dict[str, Header]) -> int:
    if pos < len(data) and data[pos] in t.CSWAP_OPCODES:
        return _put(h["cswap"], data, pos, f)
    return _put(h["atomic"], data, pos, f)


__all__ = ["Decoded", "INVALID_HEADER", "WALK", "decode", "signed16"]
