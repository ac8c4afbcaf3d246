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
    ACK_CC_STATE,
    AMO,
    SES_HEADERS,
    SPEC,
    STD_TAIL,
    Header,
    Reading,
    ack_cc_key,
    carries_ses,
    pds_chain,
    renamed,
    ses_chain,
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
            raise DecodeError(f"PDS header truncated at UET byte {pos}: needs at least 4 "
                              "bytes, 0 left", "prologue", pos)
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
        elif carries_ses(f["uet.pds.type"]) and f["uet.pds.nh"] != t.NH_NONE:
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
    for key in pds_chain(typ, flags, reading):
        if key == ACK_CC_STATE:  # the state's layout by CC type; its 8 bytes as one number
            f["uet.pds.ack.cc_state"] = int.from_bytes(data[pos:pos + 8], "big")
            key = ack_cc_key(f["uet.pds.ack.cc_type"])
        if key == "ack.ext" and len(data) - pos < h[key].size + 8:
            # Wireshark's UET_PDS_ACK_EXT_HDR_SIZE: the extension and the CC state, 20 bytes
            raise DecodeError(f"PDS ACK extension truncated at UET byte {pos}: needs 20 "
                              f"bytes, {len(data) - pos} left", key, pos)
        end = _put(h[key], data, pos, f)
        derive = _DERIVE.get(key)
        if derive is not None:
            derive(f, data, pos, h[key], reading)
        pos = end
    return pos


# What decode adds to a layout's fields once read: (fields, data, where the layout starts,
# the layout, the reading).
def _request(f: dict[str, Any], data: bytes, at: int, h: Header, reading: Reading) -> None:
    off = f["uet.pds.clear_psn_offset"] = signed16(f["uet.pds.clear_psn_offset"])
    f["uet.pds.clear_psn"] = (f["uet.pds.psn"] + off) & PSN_MASK


def _syn(f: dict[str, Any], data: bytes, at: int, h: Header, reading: Reading) -> None:
    """SYN: the PDC mode byte (Wireshark's uet.pds.pdc_mode) and the start PSN."""
    f["uet.pds.pdc_mode"] = data[at + h.layout.field("pdc_mode_rsv").byte_offset]
    f["uet.pds.start_psn"] = (f["uet.pds.psn"] - f["uet.pds.psn_offset"]) & PSN_MASK


def _request_syn(f: dict[str, Any], data: bytes, at: int, h: Header, reading: Reading) -> None:
    _syn(f, data, at, h, reading)
    _request(f, data, at, h, reading)


def _ack(f: dict[str, Any], data: bytes, at: int, h: Header, reading: Reading) -> None:
    for key, name in renamed("ack", reading, f["uet.pds.flags"]).items():
        f[name] = f.pop(key)  # the provider's ACK of a probe: an opaque, no PSN offset
    if "uet.pds.ack_psn_offset" not in f:
        return
    off = f["uet.pds.ack_psn_offset"] = signed16(f["uet.pds.ack_psn_offset"])
    f["uet.pds.ack_psn"] = (f["uet.pds.cack_psn"] + off) & PSN_MASK


def _ack_ext(f: dict[str, Any], data: bytes, at: int, h: Header, reading: Reading) -> None:
    off = f["uet.pds.ack.sack_psn_offset"] = signed16(f["uet.pds.ack.sack_psn_offset"])
    f["uet.pds.ack.sack_psn"] = (f["uet.pds.cack_psn"] + off) & PSN_MASK


_DERIVE = {"rud_rod": _request, "rud_rod.syn": _request_syn, "ctrl.syn": _syn, "ack": _ack,
           "ack.ext": _ack_ext}


def _ses(data: bytes, pos: int, f: dict[str, Any], reading: Reading) -> int:
    h = reading.headers
    nh = f["uet.pds.nh"]
    first = SES_HEADERS.get(nh)
    if first is None:  # an unknown next header: nothing to read (checks name it)
        return pos
    f["uet.ses"] = True
    start = pos
    pos = _put(h[first], data, pos, f)
    if first in _FLAG_BYTE:
        f[_FLAG_BYTE[first]] = data[start + 1]
    op = f.get("uet.ses.std.opcode", 0)
    for key in ses_chain(nh, op, reading)[1:]:
        if key == STD_TAIL:
            key = "std.som" if f["uet.ses.std.som"] else "std.cont"
        elif key == AMO:
            key = "cswap" if pos < len(data) and data[pos] in t.CSWAP_OPCODES else "atomic"
        pos = _put(h[key], data, pos, f)
    for key, name in renamed(first, reading, 0, op,
                             bool(f.get("uet.ses.med_req.flags.hd"))).items():
        f[name] = f.pop(key)
    if nh in t.RSP_OPCODES_OF and f["uet.ses.rsp.opcode"] not in t.RSP_OPCODES_OF[nh]:
        f["uet.ses.rsp.invalid_opcode"] = (
            f"response opcode {f['uet.ses.rsp.opcode']} does not belong in a "
            f"{t.NEXT_HEADERS[nh][1]} header")
    return pos


# Wireshark's whole-byte flags fields of the request headers
_FLAG_BYTE = {"std": "uet.ses.std.flags", "small": "uet.ses.small_req.flags",
              "medium": "uet.ses.med_req.flags"}


__all__ = ["Decoded", "INVALID_HEADER", "WALK", "decode", "signed16"]
