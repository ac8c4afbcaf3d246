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

from collections.abc import Callable
from typing import Any, NamedTuple

from roce.errors import DecodeError
from roce.families.uet import codes as t
from roce.families.uet.checks import check
from roce.families.uet.layouts import (
    ACK_CC_STATE,
    AMO,
    PSN_MASK,
    READINGS,
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
    h.put(data, pos, f)
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
           entropy: bool = False, reading: Reading = SPEC, checks: bool = True) -> Decoded:
    """Decode the UET bytes of one packet (after UDP, or after IP with ``entropy``): a whole
    packet through the plan of its layouts (``_plan``), anything else step by step.
    ``checks=False`` leaves the expert checks out (the emulator, which reads no expert
    field, decodes so); every other field and every error are the same."""
    plan = plan_of(data, entropy, reading)
    if plan is not None and len(data) >= plan[0]:
        return plan[1](data, checks)
    return decode_steps(data, caplen, origlen, entropy=entropy, reading=reading, checks=checks)


def plan_of(data: bytes, entropy: bool = False,
            reading: Reading = SPEC) -> tuple[int, Callable[[bytes, bool], Decoded]] | None:
    """The plan ``decode`` runs for packets chosen as this one is (by every value it branches
    on): (the bytes it reads, ``run(data, checks)``), or None when those values cannot be
    read (the bytes run out first: ``decode_steps`` says where)."""
    key = _selectors(data, entropy, reading)
    if key is None:
        return None
    plan = _PLANS.get(key)
    return plan if plan is not None else _plan(key, data, entropy, reading)


def decode_steps(data: bytes, caplen: int | None = None, origlen: int | None = None, *,
                 entropy: bool = False, reading: Reading = SPEC,
                 checks: bool = True) -> Decoded:
    """``decode`` one layout at a time: the reference the plans are held to, and what reads
    cut and broken packets (saying where they break)."""
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
    headers = tuple(got)
    if checks:
        check(f, reading, headers)
    return Decoded(WALK, tuple(layers), f, None, "uet", reading, headers, data)


_SES_KEYS = frozenset(("std", "std.som", "std.cont", "small", "medium", "atomic", "cswap",
                       "rendv", "sync", "rsp", "rsp_data", "rsp_data_small"))


_PROLOGUE = tuple((fld.shift, fld.mask) for fld in SPEC.headers["prologue"].layout.fields)


def _pds(data: bytes, pos: int, f: dict[str, Any], reading: Reading) -> int:
    h = reading.headers
    if len(data) - pos < 4:  # Wireshark's UET_COMMON_HDR_SIZE
        raise DecodeError(f"PDS header truncated at UET byte {pos}: needs at least 4 bytes, "
                          f"{len(data) - pos} left", "prologue", pos)
    word = (data[pos] << 8) | data[pos + 1]  # the prologue, by its layout's shifts and masks
    f[_GOT].append("prologue")
    typ, nh, flags = ((word >> s) & m for s, m in _PROLOGUE)
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


# -- plans: one generated function per set of layouts ---------------------------------------
# What decode_steps branches on (the values that choose layouts and names) makes a plan's key;
# the plan is straight-line Python made from the layouts decode_steps read for the first packet
# of that key (as roce.decoder.decode compiles one per RoCE header chain): one struct read for
# every header, one dict display, the derived fields by the same _DERIVE functions, the checks.

_PLANS: dict[tuple[Any, ...], tuple[int, Any]] = {}


def _spec(h: Header, name: str) -> tuple[int, int, int]:
    """(byte, shift, mask) of a selector field of layout ``h``: within one byte."""
    f = h.layout.field(name)
    byte = f.bit_offset // 8
    assert (f.bit_offset + f.bits - 1) // 8 == byte, name
    return byte, 8 - (f.bit_offset % 8) - f.bits, f.mask


# by (the layout, the field): read per packet, so looked up once
_SPECS = {(id(r.headers[k]), n): _spec(r.headers[k], n) for r in READINGS.values()
          for k, n in (("tss", "sp"), ("ack.ext", "ack.cc_type"), ("std", "std.opcode"),
                       ("small", "std.opcode"), ("medium", "std.opcode"), ("std", "std.som"),
                       ("medium", "med_req.flags.hd"))}


def _bits(h: Header, name: str, data: bytes, at: int) -> int:
    """One selector field of layout ``h`` at ``at``."""
    byte, shift, mask = _SPECS[id(h), name]
    return (data[at + byte] >> shift) & mask


# Where the selectors after the prologue sit, by (reading, type, flags) and by (reading, next
# header, opcode): the chains' sizes summed once, not per packet.
_PDS_GEOMETRY: dict[tuple[str, int, int], tuple[int, int]] = {}
_AMO_AT: dict[tuple[str, int, int], int] = {}


def _pds_geometry(reading: Reading, typ: int, flags: int) -> tuple[int, int]:
    """(bytes of the PDS header after the prologue, where its CC type byte is or -1)."""
    h, size, cc = reading.headers, 0, -1
    for key in pds_chain(typ, flags, reading):
        if key == "ack.ext":
            cc = size
        size += 8 if key == ACK_CC_STATE else h[key].size
    geometry = _PDS_GEOMETRY[reading.name, typ, flags] = (size, cc)
    return geometry


def _amo_at(reading: Reading, nh: int, op: int) -> int:
    """Where the atomic extension of an SES header starts (from the header's start), or -1."""
    h, pos, at = reading.headers, 0, -1
    for key in ses_chain(nh, op, reading):
        if key == AMO:
            at = pos
            break
        pos += h["std.som" if key == STD_TAIL else key].size
    _AMO_AT[reading.name, nh, op] = at
    return at


def _selectors(data: bytes, entropy: bool, reading: Reading) -> tuple[Any, ...] | None:
    """Every value decode_steps chooses layouts or names by, read where the layouts put them
    (None when the bytes run out first: decode_steps says where)."""
    h = reading.headers
    n, pos, sp = len(data), h["entropy"].size if entropy else 0, -1
    if n < pos + 2:
        return None
    if data[pos] >> 3 == t.TSS_TYPE:
        if n < pos + h["tss"].size:
            return None
        sp = _bits(h["tss"], "sp", data, pos)
        pos += h["tss"].size + h["tss.tsc"].size + (h["tss.ssi"].size if sp else 0)
        if n < pos + 2:
            return None
    word = (data[pos] << 8) | data[pos + 1]
    typ, nh, flags = ((word >> s) & m for s, m in _PROLOGUE)
    pos += 2
    cc = op = som = hd = cswap = -1
    name = reading.name
    geometry = _PDS_GEOMETRY.get((name, typ, flags)) or _pds_geometry(reading, typ, flags)
    if geometry[1] >= 0:
        if n <= pos + geometry[1]:
            return None
        cc = _bits(h["ack.ext"], "ack.cc_type", data, pos + geometry[1])
    pos += geometry[0]
    first = SES_HEADERS.get(nh) if sp < 0 and carries_ses(typ) else None
    if first is not None:
        if n < pos + 2:
            return None
        if first in _FLAG_BYTE:  # a request: its opcode
            op = _bits(h[first], "std.opcode", data, pos)
        if first == "std":
            som = _bits(h["std"], "std.som", data, pos)
        elif first == "medium":
            hd = _bits(h["medium"], "med_req.flags.hd", data, pos)
        at = _AMO_AT.get((name, nh, op))
        if at is None:
            at = _amo_at(reading, nh, op)
        if at >= 0:
            if n <= pos + at:
                return None
            cswap = data[pos + at] in t.CSWAP_OPCODES
    return name, entropy, sp, typ, flags, nh, cc, op, som, hd, cswap


def layout_words(fields: list[tuple[str, Any]], pos: int, done: int, nwords: int
                 ) -> tuple[list[str], list[str], list[tuple[str, str]], int, int]:
    """How one ``struct`` call reads ``fields`` ((key, field) of a layout that starts at byte
    ``pos``, in order) as words ``w<nwords>``, ``w<nwords + 1>`` ..., fields that share bytes
    sharing a word: the format codes (from byte ``done``, gaps skipped), the lines making
    the words wider than 8 bytes integers, each key's expression over its word (a boolean
    through ``_B``), and the byte and word number where the next layout's reading goes on.
    The one rule of a generated reader of UET's layouts (this module's plans, the
    emulator's ``uetcodec``)."""
    groups: list[list[Any]] = []
    for k, f in fields:
        a, b = pos + f.bit_offset // 8, pos + (f.bit_offset + f.bits + 7) // 8
        if groups and a < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], b)
            groups[-1][2].append((k, f))
        else:
            groups.append([a, b, [(k, f)]])
    fmt: list[str] = []
    lines: list[str] = []
    exprs: list[tuple[str, str]] = []
    for a, b, members in groups:
        if a > done:
            fmt.append(f"{a - done}x")
        word = f"w{nwords}"
        nwords += 1
        size = b - a
        code = {1: "B", 2: "H", 4: "I", 8: "Q"}.get(size)
        fmt.append(code or f"{size}s")
        if code is None:
            lines.append(f"    {word} = from_bytes({word}, 'big')")
        for k, f in members:
            shift = (b - pos) * 8 - f.bit_offset - f.bits
            expr = word if f.bits == size * 8 else (
                f"(({word} >> {shift}) & {f.mask:#x})" if shift else f"({word} & {f.mask:#x})")
            exprs.append((k, f"_B[{expr}]" if f.kind == "bool" else expr))
        done = b
    return fmt, lines, exprs, done, nwords


def _plan(key: tuple[Any, ...], data: bytes, entropy: bool,
          reading: Reading) -> tuple[int, Any] | None:
    """The plan for packets of ``key``, made from this one (None when it is cut short)."""
    d = decode_steps(data, entropy=entropy, reading=reading)
    if d.error is not None:
        return None
    h = reading.headers
    fmt: list[str] = []
    lines: list[str] = []
    items: list[str] = []
    derives: list[str] = []
    env: dict[str, Any] = {"_B": (False, True), "from_bytes": int.from_bytes, "d": {},
                           "Decoded": Decoded, "WALK": WALK, "reading": reading,
                           "check": check, "_layers": d.layers, "_headers": d.headers}
    consts = {k: v for k, v in d.fields.items() if k in ("uet", "uet.tss", "uet.pds", "uet.ses")
              or k.startswith("uet.pds.flags") or k in ("uet.pds.type", "uet.pds.nh",
                                                        "uet.pds.ctl_type")}
    pos = done = nwords = 0
    op, hd = key[7], key[9] == 1
    for name in d.headers:
        layout = h[name]
        renames = renamed(name, reading, 0, op, hd) if name in SES_HEADERS.values() else {}
        if name == "prologue":  # its values choose the plan: constants in it
            items += [f"{k!r}: {v!r}" for k, v in consts.items() if k != "uet"]
            pos += layout.size  # (skipped by the next word's format)
            continue
        codes, conv, exprs, done, nwords = layout_words(
            [(renames.get(k, k), f) for k, f in zip(layout.keys, layout.layout.fields)],
            pos, done, nwords)
        fmt += codes
        lines += conv
        items += [f"{k!r}: {expr}" for k, expr in exprs]
        if name in ("std", "small", "medium"):
            items.append(f"{_FLAG_BYTE[name]!r}: data[{pos + 1}]")
        if name in _DERIVE:
            env[f"D{len(derives)}"], env[f"H{len(derives)}"] = _DERIVE[name], layout
            derives.append(f"    D{len(derives)}(f, data, {pos}, H{len(derives)}, reading)")
        pos += layout.size
    states = [n for n in d.headers if n == ack_cc_key(key[6])]
    if "ack.ext" in d.headers and states:  # the CC state's 8 bytes as one number too
        at = sum(h[n].size for n in d.headers[:d.headers.index(states[0])])
        items.append(f"'uet.pds.ack.cc_state': from_bytes(data[{at}:{at + 8}], 'big')")
    tail = []
    if "uet.encrypted" in d.fields:
        tail.append(f"    f['uet.encrypted'] = len(data) - {pos}")
        end = "len(data)"
    else:
        end = str(pos)
    nh = key[5]
    if nh in t.RSP_OPCODES_OF and "uet.ses" in d.fields:
        env["_OK"], env["_NH"] = t.RSP_OPCODES_OF[nh], t.NEXT_HEADERS[nh][1]
        tail += ["    if f['uet.ses.rsp.opcode'] not in _OK:",
                 "        f['uet.ses.rsp.invalid_opcode'] = (f\"response opcode "
                 "{f['uet.ses.rsp.opcode']} does not belong in a {_NH} header\")"]
    env["unpack"] = __import__("struct").Struct("!" + "".join(fmt)).unpack_from
    words = ", ".join(f"w{i}" for i in range(nwords))
    src = "\n".join([
        "def run(data, checks):",
        f"    {words}, = unpack(data, 0)" if nwords else "    pass", *lines,
        "    f = {'uet': True, " + ", ".join(items) + "}", *derives, *tail,
        f"    f['payload.len'] = len(data) - {end}",
        "    if checks:",
        "        check(f, reading, _headers)",
        "    return Decoded(WALK, _layers, f, None, 'uet', reading, _headers, data)"]) + "\n"
    exec(compile(src, f"<uet plan {key}>", "exec"), env)
    if len(_PLANS) > 4096:
        _PLANS.clear()
    plan = _PLANS[key] = (pos, env["run"])
    return plan


__all__ = ["Decoded", "INVALID_HEADER", "WALK", "decode", "decode_steps", "plan_of", "signed16"]
