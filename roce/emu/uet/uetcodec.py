"""The emulator's fast UET codec: the few packet shapes the PDS sends, each packed by one
generated function, the Ethernet / IPv4 / UDP prefix of its frame (a per-path template) in the
same ``struct`` call; and the reading of a received packet: the fields the PDS, SES and
congestion manager read of it (``RECEIVED``), by one function generated per packet shape,
found from bytes at fixed places, or by its twin in C where the fast path is built (the
family's decoder, ``dissect.decode``, behind both and held equal to them on those fields).

``build.uet_bytes`` and ``build.frame`` are the reference (and the fallback) these are held to,
byte for byte (tests/test_uet_codec.py): the shape of a field dictionary (its keys in order and
the values that choose layouts: PDS type, next header, SYN, SES opcode, SOM, CC type) picks
the layouts by the family's own rules (``layouts.pds_chain``, ``ses_chain``, ``renamed``), and
the generated function packs every field at the offset, width and shift its layout gives, with
one ``struct`` call.  Anything the generated code does not cover (a value that is not an integer
in range, a TSS or atomic extension, a whole flags byte given) returns None, and the caller
builds through ``build.uet_bytes``, whose bytes and errors are then its own.  The encoder of
the shape last seen with a dictionary's keys is tried first, and says ``MISS`` when the values
that choose layouts differ from its shape's.

The prefix is ``build.frame``'s own bytes for an empty UET packet on that path (addresses,
DSCP, ECN), with the per-packet fields patched at the offsets ``roce.headers`` gives: IPv4
total length, identification and checksum (the ones' complement sum of the fixed words kept,
RFC 1071), the UDP source port (the entropy) and length.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from roce.codecache import compiled
from roce.emu.net import hop
from roce.families.uet import UET_PORT
from roce.families.uet import codes as t
from roce.families.uet.build import default_next_header, frame
from roce.families.uet.dissect import decode as dissect
from roce.families.uet.dissect import decode_steps, layout_words
from roce.families.uet.layouts import (
    ACK_CC_STATE,
    AMO,
    PSN_MASK,
    SES_HEADERS,
    SIGNED,
    SPEC,
    STD_TAIL,
    SYN_MASK,
    ack_cc_key,
    carries_ses,
    pds_chain,
    renamed,
    ses_chain,
)
from roce.headers import ECN_CE, LAYOUTS, SIZE_OF

_INTS = frozenset((int, bool))
TYPE, NH, OP, CC = "uet.pds.type", "uet.pds.nh", "uet.ses.std.opcode", "uet.pds.ack.cc_type"
SYN, SOM, HD, TSS = ("uet.pds.flags.syn", "uet.ses.std.som", "uet.ses.med_req.flags.hd",
                     "uet.tss")
# (derived value, its base, the offset field it stands for): build._derived's rules
_OFFSETS = (("uet.pds.clear_psn", "uet.pds.psn", "uet.pds.clear_psn_offset"),
            ("uet.pds.ack_psn", "uet.pds.cack_psn", "uet.pds.ack_psn_offset"),
            ("uet.pds.ack.sack_psn", "uet.pds.cack_psn", "uet.pds.ack.sack_psn_offset"))

# A shape's pair of generated functions, one body: ``enc(fields)``, the header's bytes, and
# ``frm(fields, gaps, base, sport, ip_id, payload)``, the whole frame on a path (``Path``'s
# gaps and checksum base); each gives None or MISS as the module docstring says.  Third, the
# shape as a plan for ``frm``'s twin in C (roce/emu/uet/_frame.pxi), or None.
Encoders = tuple[Callable[[dict[str, Any]], Any], Callable[..., Any], Any]
_SHAPES: dict[tuple[Any, ...], Encoders | None] = {}
# The keys of a field dictionary, in order -> the encoders of the shape last seen with them:
# they check the values that choose layouts themselves (``MISS`` when they differ), so that a
# packet of the shape before it costs no key built of them.
_BY_KEYS: dict[tuple[str, ...], Encoders] = {}
MISS = object()


def _encoders(fields: dict[str, Any], names: tuple[str, ...]) -> Encoders | None:
    """The encoders of the shape of ``fields`` (its keys ``names``), learnt for those keys;
    None for a shape they do not cover."""
    g = fields.get
    key = (names, g(TYPE), g(NH), g(OP), g(CC), not g(SYN), not g(SOM), not g(HD),
           not g(TSS))
    encs = _SHAPES.get(key, _SHAPES)  # type: ignore[arg-type]
    if encs is _SHAPES:
        if len(_SHAPES) > 4096:
            _SHAPES.clear()
        encs = _SHAPES[key] = _compile(key)
    if encs is not None:
        if len(_BY_KEYS) > 4096:
            _BY_KEYS.clear()
        _BY_KEYS[names] = encs  # type: ignore[assignment]
    return encs  # type: ignore[return-value]


def uet_header(fields: dict[str, Any]) -> bytes | None:
    """``build.uet_bytes(fields)`` less its payload (the specification's reading, no entropy
    header) for the shapes the generated encoders cover; None for anything else."""
    names = tuple(fields)
    encs = _BY_KEYS.get(names)
    if encs is not None:
        out = encs[0](fields)
        if out is not MISS:
            return out  # type: ignore[no-any-return]
    encs = _encoders(fields, names)
    return None if encs is None else encs[0](fields)  # type: ignore[no-any-return]


def frame_fast(fields: dict[str, Any], payload: bytes, src: str, dst: str, smac: bytes,
               dmac: bytes, dscp: int, ecn: int, sport: int, ip_id: int) -> bytes | None:
    """``path(src, dst, smac, dmac, dscp, ecn).wrap(uet_header(fields), payload, sport,
    ip_id)`` in one step: the shape's plan run in C where the fast path is built, else its
    generated ``frm``; the frame of the packet, None where either would give None."""
    p = _PATHS.get((src, dst, smac, dmac, dscp, ecn))
    if p is None:
        p = path(src, dst, smac, dmac, dscp, ecn)
    names = tuple(fields)
    encs = _BY_KEYS.get(names)
    if encs is None:
        encs = _encoders(fields, names)
        if encs is None:
            return None
    if encs[2] is not None:  # the shape's plan in C: None and bytes are the Python encoder's
        out = _FRAME(encs[2], fields, p.template, p.base, sport, ip_id, payload)
        if out is not MISS:
            return out  # type: ignore[no-any-return]
    out = encs[1](fields, p.gaps, p.base, sport, ip_id, payload)
    if out is not MISS:
        return out  # type: ignore[no-any-return]
    encs = _encoders(fields, names)  # another shape with the same keys
    return None if encs is None else encs[1](fields, p.gaps, p.base, sport, ip_id, payload)


def uet_fast(fields: dict[str, Any], payload: bytes) -> bytes | None:
    """``build.uet_bytes(fields, payload=payload)`` for the shapes the generated encoders
    cover; None for anything else."""
    head = uet_header(fields)
    return None if head is None else head + payload


def _compile(key: tuple[Any, ...]) -> Encoders | None:
    """The generated encoders of one shape, or None when the shape is not one they cover."""
    names, typ, nh, op, cc, no_syn, no_som, no_hd, no_tss = key
    nh_raw = nh
    have = set(names)
    if not no_tss or "uet.pds.flags" in have:
        return None
    for k, x in ((TYPE, typ), (NH, nh), (OP, op), (CC, cc)):
        if k in have and type(x) not in _INTS:
            return None  # None, or a value of another type: uet_bytes says what it makes of it
    typ = int(typ) if TYPE in have else t.RUD_REQ
    nh = int(nh) if NH in have else default_next_header(typ)
    op = int(op) if OP in have else 0
    cc = int(cc) if CC in have else 0
    reading, heads = SPEC, SPEC.headers
    locals_: dict[str, str] = {}  # flat key -> the local variable holding its value
    for i, k in enumerate(names):
        locals_[k] = f"x{i}"
    # the values in the dictionary's order (its keys are ``names``, in order: the callers'
    # lookup), every one to be an int or a bool: a value an operation or a ``struct`` code
    # takes refuses any other type by raising (TypeError, AttributeError, struct.error: the
    # encoder then gives None); the others (compared only, or not packed) by a type check
    reads = [f"    {''.join(x + ', ' for x in locals_.values())}= v.values()"] if names else []
    checks = [""]  # the type check, once what is operated on is known
    lines: list[str] = []
    ops: list[str] = []  # the lines that operate on values (with ``words``: what they take)
    # flags, composed as build.compose_flags composes them (None where it would refuse)
    lines.append("    fl = 0")
    for name, mask in reading.flags.get(typ, ()):
        if name not in have:
            continue
        x = locals_[name]
        low = (mask & -mask).bit_length() - 1
        lines.append(f"    if {x}:")
        if mask & (mask - 1):
            ops += [f"        if ({x} << {low}) & {~mask & 0x7F:#x} or {x} < 0 or "
                    f"({x} << {low}) > 0x7F:", "            return None",
                    f"        fl |= {x} << {low}"]
            lines += ops[-3:]
        else:
            lines += [f"        if {x} != 1:", "            return None", f"        fl |= {mask}"]
    syn_bit = 0 if no_syn else SYN_MASK
    lines += [f"    if fl & {SYN_MASK} != {syn_bit}:", "        return None"]
    values: dict[str, str] = {k: locals_[k] for k in names}
    ctrl = typ == t.CTRL
    derived: list[tuple[str, int, int, int]] = []  # (its local, from, less, signed): the C plan's
    # the derived PSNs given for the offsets they stand for (build._derived)
    for n, (derived_key, base, off) in enumerate(_OFFSETS):
        if derived_key in have and off not in have:
            b = locals_.get(base, "0")
            ops.append(f"    d{n} = ({locals_[derived_key]} - {b}) & {PSN_MASK}")
            lines += [ops[-1], f"    if d{n} & 0x80000000:", f"        d{n} -= 0x100000000"]
            values[off] = f"d{n}"
            derived.append((f"d{n}", _index(locals_[derived_key]), _index(b), 1))
    if "uet.pds.start_psn" in have and "uet.pds.psn_offset" not in have:
        ops.append(f"    d9 = ({locals_.get('uet.pds.psn', '0')} - "
                   f"{locals_['uet.pds.start_psn']}) & {PSN_MASK}")
        lines.append(ops[-1])
        values["uet.pds.psn_offset"] = "d9"
        derived.append(("d9", _index(locals_.get("uet.pds.psn", "0")),
                        _index(locals_["uet.pds.start_psn"]), 0))
    # the layouts, in wire order, each with the flat key its fields are taken from
    pro = heads["prologue"]
    plan: list[tuple[Any, dict[str, str], dict[str, str]]] = []
    pro_values = {TYPE: str(typ), NH: values.get("uet.pds.ctl_type", "0") if ctrl else str(nh),
                  "uet.pds.flags": "fl"}
    plan.append((pro, {}, pro_values))
    flags_known = syn_bit
    for k in pds_chain(typ, flags_known, reading):
        if k == ACK_CC_STATE:
            if "uet.pds.ack.cc_state" in have:
                plan.append((heads["ack.cc_raw"], {}, values))
                continue
            k = ack_cc_key(cc)
        plan.append((heads[k], renamed(k, reading, flags_known), values))
    if carries_ses(typ):
        consts = dict(values)
        if nh in t.RSP_OPCODES_OF and "uet.ses.rsp.opcode" not in have:
            consts["uet.ses.rsp.opcode"] = str(t.RSP_RESPONSE if nh == t.NH_RSP
                                               else t.RSP_WITH_DATA)
        for k in ses_chain(nh, op, reading):
            if k == AMO:
                return None  # the extension by atomic opcode: uet_bytes
            renames = renamed(k, reading, 0, op, not no_hd)
            if k == STD_TAIL:
                k = "std.cont" if no_som else "std.som"
            plan.append((heads[k], renames, consts))
    # every field: its value expression, checked against its width, shifted into its word
    groups: list[list[Any]] = []  # [first byte, end byte, [(expr, field)]] over the whole
    ranged: list[tuple[str, int, int]] = []  # (range check, its group, the field's bits)
    placed: list[tuple[str, int, int, int]] = []  # (value, bit end, bits, check): the C plan's
    at = 0
    for h, renames, vals in plan:
        for fk, f in zip(h.keys, h.layout.fields):
            src = renames.get(fk, fk)
            expr = vals.get(src, "0")
            check = ""
            given, kind = expr, 0  # the C plan's check: 0 none, 1 unsigned, 2 signed 16-bit
            if h is pro and src == TYPE or (h is pro and src == NH and not ctrl):
                if not 0 <= int(expr) <= f.mask:
                    return None
            elif expr != "0" and expr != "fl":
                if src in SIGNED:
                    check = f"-0x8000 <= {expr} <= 0x7FFF"
                    expr = f"({expr} & 0xFFFF)"
                    kind = 2
                elif expr.isdigit():  # a value of the shape: checked now
                    if int(expr) > f.mask:
                        return None
                else:
                    check = f"0 <= {expr} <= {f.mask:#x}"
                    kind = 1
            bit_end = at * 8 + f.bit_offset + f.bits
            if given != "0":
                placed.append((given, bit_end, f.bits, kind))
            first, end = at + f.bit_offset // 8, (bit_end + 7) // 8
            if groups and first < groups[-1][1]:
                groups[-1][1] = max(groups[-1][1], end)
                groups[-1][2].append((expr, bit_end))
            else:
                groups.append([first, end, [(expr, bit_end)]])
            if check:
                ranged.append((check, len(groups) - 1, f.bits))
        at += h.size
    # a field alone in a word of its width is checked by ``struct`` (its error: None); the
    # others here
    for check, g, bits in ranged:
        first, end, fields = groups[g]
        if not (len(fields) == 1 and bits == (end - first) * 8 and end - first in (1, 2, 4, 8)
                and not check.startswith("-")):
            checks.append(check)
    fmt, words = [], []
    for first, end, fields in groups:
        size = end - first
        terms = []
        for expr, bit_end in fields:
            shift = end * 8 - bit_end
            if expr != "0":
                terms.append(f"({expr} << {shift})" if shift else expr)
        word = " | ".join(terms) if terms else "0"
        code = {1: "B", 2: "H", 4: "I", 8: "Q"}.get(size)
        if code is None:
            fmt.append(f"{size}s")
            word = f"({word}).to_bytes({size}, 'big')"
        else:
            fmt.append(code)
        words.append(word)
    # the values that chose this shape's layouts, as its key has them
    # (given: the Python encoder's test and the C plan's)
    equal = [(k, x) for k, x in ((TYPE, key[1]), (NH, nh_raw), (OP, key[3]), (CC, key[4]))
             if k in have]
    falsy = [(k, x) for k, x in ((SYN, no_syn), (SOM, no_som), (HD, no_hd), (TSS, no_tss))
             if k in have]
    chose = [f"{locals_[k]} != {x!r}" for k, x in equal]
    chose += [f"(not {locals_[k]}) != {x}" for k, x in falsy]
    operated = set(re.findall(r"\bx\d+\b", "\n".join([*ops, *words])))
    typed = [x for x in locals_.values() if x not in operated]
    checks[0] = " and ".join(f"type({x}) in ints" for x in typed) or "True"
    # one body, two ends: the header's bytes (``enc``), or the whole frame on a path, the
    # prefix's words packed in the same ``struct`` call (``frm``)
    body = [*reads, f"    if {' or '.join(chose)}:" if chose else "    pass",
            "        return MISS" if chose else "", f"    if not ({checks[0]}):",
            "        return None", "    try:", *("    " + x for x in lines),
            f"        if not ({' and '.join(checks[1:]) or 'True'}):", "            return None"]
    size = at  # the header's bytes
    pad = [f"    if len(out) < {MIN_FRAME}:", f"        out += bytes({MIN_FRAME} - len(out))"] \
        if size + PREFIX < MIN_FRAME else []
    src = "\n".join([
        "def enc(v):", *body,
        f"        return pack({', '.join(words)})",
        "    except REFUSED:", "        return None",
        "def frm(v, g, base, sport, ipid, payload):", *body,
        f"        n = {size + IP_HDR + UDP_HDR} + len(payload)",
        "        if n > 0xFFFF or not 0 <= sport <= 0xFFFF or not 0 <= ipid <= 0xFFFF:",
        "            return None",
        "        s = base + n + ipid",
        "        s = (s & 0xFFFF) + (s >> 16)",
        "        s = (s & 0xFFFF) + (s >> 16)",
        f"        out = packf({', '.join([*_PREFIX_ARGS, *words])}) + payload",
        "    except REFUSED:", "        return None", *pad,
        "    return out"]) + "\n"
    env: dict[str, Any] = {"ints": _INTS, "MISS": MISS,
                           "REFUSED": (TypeError, AttributeError, struct.error),
                           "pack": struct.Struct("!" + "".join(fmt)).pack,
                           "packf": struct.Struct("!" + "".join([*_PREFIX_FMT, *fmt])).pack}
    exec(compiled(src, f"<uet fast encoder {typ}/{nh}>", __name__), env)
    # the same shape as a plan for C (``_frame.pxi``), where the fast path is built
    plan = None
    if _PLAN is not None:
        at_of = {d: i for i, (d, _a, _b, _s) in enumerate(derived)}

        def source(v: str) -> tuple[int, int, int]:
            """A placed value's (kind, reference, constant): 0 a constant, 1 a value of
            the dictionary, 2 a derived offset, 3 the flags."""
            if v == "fl":
                return 3, 0, 0
            if v.isdigit():
                return 0, 0, int(v)
            return (2, at_of[v], 0) if v in at_of else (1, _index(v), 0)

        spec = (size, len(names),
                tuple((_index(locals_[k]), 1, int(x)) for k, x in equal)
                + tuple((_index(locals_[k]), 2, int(not x)) for k, x in falsy),
                tuple((_index(locals_[name]), mask, (mask & -mask).bit_length() - 1,
                       int(bool(mask & (mask - 1))))
                      for name, mask in reading.flags.get(typ, ()) if name in have),
                (SYN_MASK, syn_bit),
                tuple((a, b, sgn) for _d, a, b, sgn in derived),
                tuple((src[0], src[1], end, bits, kind, src[2])
                      for src, end, bits, kind in ((source(v), e, b, k)
                                                   for v, e, b, k in placed)))
        try:
            plan = _PLAN(spec)
        except ValueError:  # larger than the plan holds: Python's encoder alone
            plan = None
    return env["enc"], env["frm"], plan


def _index(local: str) -> int:
    """The place in the dictionary of the value a generated local holds (``x3``: 3); -1 for
    the constant 0 a missing base stands for."""
    return -1 if local == "0" else int(local[1:])


# -- the Ethernet / IPv4 / UDP prefix ---------------------------------------------------------

L2, IP_HDR, UDP_HDR = SIZE_OF["eth"], SIZE_OF["ip"], SIZE_OF["udp"]
PREFIX = UET_AT = L2 + IP_HDR + UDP_HDR  # where the UET packet starts in a frame
MIN_FRAME = 60  # build.frame pads shorter frames, as Ethernet requires


def _at(header: str, name: str, base: int) -> int:
    f = LAYOUTS[header].field(name)
    assert f.bits == 16 and f.bit_offset % 8 == 0, (header, name)
    return base + f.byte_offset


IP_LEN, IP_ID, IP_CSUM = (_at("ip", n, L2) for n in ("len", "id", "checksum"))
UDP_SPORT, UDP_LEN = (_at("udp", n, L2 + IP_HDR) for n in ("srcport", "length"))
_PATCHED = sorted(((IP_LEN, "iplen"), (IP_ID, "ipid"), (IP_CSUM, "csum"),
                   (UDP_SPORT, "sport"), (UDP_LEN, "ulen")))


def _prefix_plan(exprs: dict[str, str]) -> tuple[list[str], list[str]]:
    """The ``struct`` codes and argument expressions of a prefix: the five 16-bit fields
    (``exprs``: their values by name) between the template's bytes around them (``g``, the
    path's gaps, cut once per path)."""
    fmt, args, pos, n = [], [], 0, 0
    for off, name in _PATCHED:
        if off > pos:
            fmt.append(f"{off - pos}s")
            args.append(f"g[{n}]")
            n += 1
        fmt.append("H")
        args.append(exprs[name])
        pos = off + 2
    if pos < PREFIX:
        fmt.append(f"{PREFIX - pos}s")
        args.append(f"g[{n}]")
    return fmt, args


# in a generated ``frm``: ``n`` is the IPv4 total length, ``s`` the folded checksum sum
_PREFIX_FMT, _PREFIX_ARGS = _prefix_plan({"iplen": "n", "ipid": "ipid", "csum": "~s & 0xFFFF",
                                          "sport": "sport", "ulen": f"n - {IP_HDR}"})


def _prefix_packer() -> Callable[..., bytes]:
    """``put(g, iplen, ipid, csum, sport, ulen)``: a prefix in one ``struct`` call."""
    fmt, args = _prefix_plan({k: k for _o, k in _PATCHED})
    src = (f"def put(g, iplen, ipid, csum, sport, ulen):\n"
           f"    return pack({', '.join(args)})\n")
    env: dict[str, Any] = {"pack": struct.Struct("!" + "".join(fmt)).pack}
    exec(compiled(src, "<uet frame prefix>", __name__), env)
    return env["put"]  # type: ignore[no-any-return]


def _gaps(template: bytes) -> tuple[bytes, ...]:
    """The template's bytes between the fields ``_PUT`` puts, in order."""
    out, pos = [], 0
    for off, _name in _PATCHED:
        if off > pos:
            out.append(template[pos:off])
        pos = off + 2
    if pos < PREFIX:
        out.append(template[pos:PREFIX])
    return tuple(out)


_PUT = _prefix_packer()


class Path:
    """One path's frame prefix: ``build.frame``'s bytes for it, and the ones' complement sum
    of its IPv4 header without the words each packet changes."""

    __slots__ = ("template", "base", "gaps")

    def __init__(self, src: str, dst: str, smac: str, dmac: str, dscp: int, ecn: int) -> None:
        self.template = frame(b"", src=src, dst=dst, smac=smac, dmac=dmac, sport=0,
                              dport=UET_PORT, dscp=dscp, ecn=ecn, ip_id=0)[:PREFIX]
        skip = {IP_LEN, IP_ID, IP_CSUM}
        t_ = self.template
        self.base = sum((t_[i] << 8) | t_[i + 1] for i in range(L2, L2 + IP_HDR, 2)
                        if i not in skip)
        self.gaps = _gaps(t_)

    def frame(self, uet: bytes, sport: int, ip_id: int) -> bytes | None:
        """The frame of ``uet`` on this path (None when a value does not fit its field)."""
        return self.wrap(uet, b"", sport, ip_id)

    def wrap(self, head: bytes, payload: bytes, sport: int, ip_id: int) -> bytes | None:
        """The frame of the UET packet ``head`` + ``payload`` on this path, its payload copied
        once (None when a value does not fit its field)."""
        n = len(head) + len(payload)
        iplen = IP_HDR + UDP_HDR + n
        if iplen > 0xFFFF or not 0 <= sport <= 0xFFFF or not 0 <= ip_id <= 0xFFFF:
            return None
        s = self.base + iplen + ip_id
        s = (s & 0xFFFF) + (s >> 16)
        s = (s & 0xFFFF) + (s >> 16)
        out = b"".join((_PUT(self.gaps, iplen, ip_id, ~s & 0xFFFF, sport, UDP_HDR + n), head,
                        payload))
        if len(out) < MIN_FRAME:
            out += bytes(MIN_FRAME - len(out))
        return out


_PATHS: dict[tuple[Any, ...], Path] = {}


def path(src: str, dst: str, smac: bytes, dmac: bytes, dscp: int, ecn: int) -> Path:
    """The (cached) prefix template of one path and packet class."""
    key = (src, dst, smac, dmac, dscp, ecn)
    p = _PATHS.get(key)
    if p is None:
        if len(_PATHS) > 4096:
            _PATHS.clear()
        p = _PATHS[key] = Path(src, dst, smac.hex(":"), dmac.hex(":"), dscp, ecn)
    return p


# the places and values decode reads, looked up once
_IPV4, _PORT = hop.IPV4_TYPE, UET_PORT.to_bytes(2, "big")
_ETHERTYPE = int.from_bytes(_IPV4, "big")
_UDP_AT = UET_AT - UDP_HDR
_ULEN = UDP_LEN
_TOS, _ECN_SHIFT, _ECN_MASK = hop.TOS, hop.ECN_SHIFT, hop.ECN_MASK
_DSCP_SHIFT, _DSCP_MASK = hop.DSCP_SHIFT, hop.DSCP_MASK
_ETYPE0 = hop.ETYPE[0]
_DPORT0 = hop.UDP_DPORT[0]
_SRC0, _SRC1 = hop.SRC_IP
_ADDRESSES: dict[bytes, str] = {}  # source address bytes -> dotted quad, per source once


def _head() -> tuple[int, int, Callable[..., tuple[Any, ...]]]:
    """One ``struct`` reading of what ``decode`` checks and keeps of a frame's first bytes:
    (where it starts, where it ends, its ``unpack_from``) giving the EtherType, the TOS
    byte, the source address's bytes, the UDP destination port and length, and the UET
    prologue, at the places ``roce.headers`` gives."""
    parts = sorted(((_ETYPE0, "H"), (_TOS, "B"), (_SRC0, f"{_SRC1 - _SRC0}s"),
                    (_DPORT0, "H"), (_ULEN, "H"), (UET_AT, "H")))
    fmt, pos = [], parts[0][0]
    for off, code in parts:
        if off > pos:
            fmt.append(f"{off - pos}x")
        fmt.append(code)
        pos = off + struct.calcsize("!" + code)
    return parts[0][0], pos, struct.Struct("!" + "".join(fmt)).unpack_from


_HEAD_AT, _HEAD_END, _HEAD = _head()


# -- reading ---------------------------------------------------------------------------------
# What the emulator reads of a received packet is ``RECEIVED``: the fields the PDS, the SES and
# the congestion manager take from it (by ``f.get`` or ``f[...]``; tests/test_uet_codec.py runs
# them on every shape they receive and fails on a field read outside it).  ``decode_python``
# builds only those, at the offsets the family's layouts give, by one function generated per packet
# shape: ``dissect.decode`` chooses its layouts by values it reads all over a packet
# (``_selectors``); in the packets the PDS reads those values sit in the prologue and at most
# two bytes after it (an ACK's CC type; a request's SES opcode and flags), at places the
# prologue fixes.  So the prologue and those bytes, as they are, name the shape: the first
# whole packet of a shape is decoded step by step (``decode_steps``), and the layouts it read
# make the reader of every later one.  What has no such place (TSS, an atomic extension chosen
# by its own first byte, an ACK's SES request header after its CC type) or is cut short goes to
# ``dissect.decode``, its fields then narrowed to ``RECEIVED``: the same errors, the same
# values.  ``decode_native`` is its twin in C (roce/emu/uet/_receive.pxi: the family's C walk
# of ``roce decode``'s UET lines, told which slots ``RECEIVED`` names), what a host calls
# where the fast path is built.

RECEIVED = frozenset((
    # the PDS: prologue, request, SYN, ACK, NACK, control and RUDI headers
    TYPE, NH, "uet.pds.ctl_type", SYN, "uet.pds.flags.ar", "uet.pds.flags.m",
    "uet.pds.psn", "uet.pds.spdcid", "uet.pds.dpdcid", "uet.pds.start_psn",
    "uet.pds.cack_psn", "uet.pds.ack_psn", "uet.pds.ack.sack_psn", "uet.pds.ack.sack_bitmap",
    CC, "uet.pds.ack.cc_state.service_time", "uet.pds.ack.cc_state.rcvd_bytes",
    "uet.pds.ack.cc_state.credit", "uet.pds.nack.code", "uet.pds.nack.psn",
    "uet.pds.nack.max_recv_psn_plus_1", "uet.pds.ctrl_payload", "uet.pds.rudi.pkt_id",
    # the SES: requests, their extensions, responses
    OP, "uet.ses.std.som", "uet.ses.std.message_id", "uet.ses.std.job_id",
    "uet.ses.std.buffer_offset", "uet.ses.std.mem_key_match_bits",
    "uet.ses.std.resource_index", "uet.ses.std.request_length", "uet.ses.std.message_offset",
    "uet.ses.atomic_op_ext_hdr.atomic_opcode", "uet.ses.atomic_op_ext_hdr.atomic_data_type",
    "uet.ses.comp_swap_ext_hdr.atomic_opcode", "uet.ses.comp_swap_ext_hdr.atomic_data_type",
    "uet.ses.comp_swap_ext_hdr.comp_value", "uet.ses.comp_swap_ext_hdr.swap_value",
    "uet.ses.rendv_ext_hdr.eager_length", "uet.ses.rendv_ext_hdr.read_offset",
    "uet.ses.rendv_ext_hdr.read_match_bits", "uet.ses.rsp.message_id", "uet.ses.rsp.job_id",
    "uet.ses.rsp.return_code", "uet.ses.rsp.read_req_message_id",
    "uet.ses.rsp.message_offset",
))
# derived fields: (derived, base, offset, the offset's sign: +1 signed 16 bits, -1 unsigned)
_DERIVED = (*((d, b, o, 1) for d, b, o in _OFFSETS),
            ("uet.pds.start_psn", "uet.pds.psn", "uet.pds.psn_offset", -1))

_PRO = [(f.shift, f.mask) for f in SPEC.headers["prologue"].layout.fields]
_SES_FIRST = ("std", "small", "medium")  # request headers: opcode and flags in bytes 0-1
_AMO_KEYS = frozenset(("atomic", "cswap"))
_SPANS: dict[int, tuple[int, int]] = {}  # prologue -> where its selector bytes are
Reader = Callable[[bytes, int, int, str], 'Received']  # (frame, end, TOS, source)
_READERS: dict[int, tuple[int, Reader] | bool] = {}  # shape -> (size, reader), or False


def _span(prologue: int) -> tuple[int, int]:
    """Where the selector bytes after a prologue are and how many (0: none; -1: its packets
    are not ``decode``'s: TSS, or selectors in two places)."""
    typ, nh, flags = ((prologue >> s) & m for s, m in _PRO)
    if typ == t.TSS_TYPE:
        return 0, -1
    heads, size = SPEC.headers, SPEC.headers["prologue"].size
    ses_first = carries_ses(typ) and SES_HEADERS.get(nh) in _SES_FIRST
    for k in pds_chain(typ, flags, SPEC):
        if k == "ack.ext":
            # the CC type: its first byte; an SES request header after it would have its
            # opcode choose too (two places: not a shape of ``decode``'s, which no PDS sends)
            return (0, -1) if ses_first else (size, 1)
        size += 8 if k == ACK_CC_STATE else heads[k].size
    if ses_first:
        return size, 2
    return 0, 0


def _reader(data: bytes) -> tuple[int, Reader] | bool:
    """The reader of packets shaped as ``data`` (a whole one): (the bytes it reads, a
    function of the frame giving the ``RECEIVED`` fields); False when its shape is not
    ``decode``'s (an atomic extension: chosen by a byte at no fixed place), True when
    ``data`` does not decode (nothing learnt)."""
    d = decode_steps(data, checks=False)
    if d.error is not None:
        return True
    if _AMO_KEYS & set(d.headers):
        return False
    heads, got = SPEC.headers, d.fields
    typ, flags = got[TYPE], got["uet.pds.flags"]
    op, hd = got.get(OP, 0), bool(got.get(HD))
    # the prologue's fields are the shape's: constants
    items = [f"{k!r}: {got[k]!r}" for k in (TYPE, NH, "uet.pds.ctl_type",
                                             *(n for n, _m in SPEC.flags.get(typ, ())))
             if k in got and k in RECEIVED]
    wanted = set(RECEIVED)  # and what the derived fields of RECEIVED are made from
    for derived, base, off, _sign in _DERIVED:
        if derived in RECEIVED:
            wanted |= {base, off}
    fmt, lines, names = [], [], {}
    pos = done = 0  # where the next layout starts; the bytes the format covers so far
    nwords = 0
    for key in d.headers:
        h = heads[key]
        if key == "prologue":
            pos += h.size
            continue
        renames = renamed(key, SPEC, flags if key == "ack" else 0, op, hd)
        codes, conv, exprs, done, nwords = layout_words(
            [(k, f) for k, f in ((renames.get(k, k), f) for k, f in zip(h.keys, h.layout.fields))
             if k in wanted], pos, done, nwords)
        fmt += codes
        lines += conv
        for k, expr in exprs:
            local = f"v{len(names)}"
            names[k] = local
            lines.append(f"    {local} = {expr}")
        pos += h.size
    for k, local in names.items():
        if k in RECEIVED:
            items.append(f"{k!r}: {local}")
    for derived, base, off, sign in _DERIVED:
        if derived in RECEIVED and off in names:
            o, bv = names[off], names.get(base, "0")
            if sign > 0:
                o = f"({o} - 0x10000 if {o} & 0x8000 else {o})"
                items.append(f"{derived!r}: ({bv} + {o}) & {PSN_MASK:#x}")
            else:
                items.append(f"{derived!r}: ({bv} - {o}) & {PSN_MASK:#x}")
    words = ", ".join(f"w{i}" for i in range(nwords))
    # the whole ``Received`` (the frame's TOS and source address as ``decode`` read them)
    src = "\n".join(["def rd(fr, end, tos, src):",
                     f"    {words}, = unpack(fr, {UET_AT})" if nwords else "    pass", *lines,
                     "    return new(Received, ({" + ", ".join(items) + "}, "
                     f"fr[{UET_AT + pos}:end], src, (tos >> {_ECN_SHIFT}) & {_ECN_MASK} == "
                     f"{ECN_CE}, (tos >> {_DSCP_SHIFT}) & {_DSCP_MASK}))"]) + "\n"
    env: dict[str, Any] = {"_B": (False, True), "from_bytes": int.from_bytes,
                           "unpack": struct.Struct("!" + "".join(fmt)).unpack_from,
                           "new": tuple.__new__, "Received": Received}
    exec(compiled(src, f"<uet reader {typ}>", __name__), env)
    return pos, env["rd"]


class Received(NamedTuple):
    """What a host takes from a frame: the ``RECEIVED`` fields, the payload, the source
    address, whether it was marked CE, its DSCP."""

    fields: dict[str, Any]
    payload: bytes
    src: str
    ce: bool
    dscp: int


def decode_python(frame: bytes) -> Received | None:
    """The PDS packet in a frame our hosts build (IPv4, UDP to port 4793), or None when the
    frame is something else or does not decode as UET.  Its fields are the ``RECEIVED`` ones
    of what ``dissect.decode`` (without expert checks: no PDS decision reads them; ``roce
    decode`` and ``roce stats`` run them on the pcaps) decodes of the UET packet, which the
    UDP length ends; the payload is what follows its headers.  This runs once per frame a
    host receives (``decode``, when the fast path is not built): what it reads of the
    Ethernet, IPv4 and UDP headers and the UET prologue is one ``struct`` call, and the
    shape's reader makes the whole answer."""
    if len(frame) < _HEAD_END:
        return _general(frame)
    etype, tos, raw, dport, ulen, pro = _HEAD(frame, _HEAD_AT)
    if etype != _ETHERTYPE or dport != UET_PORT:
        return None
    end = _UDP_AT + ulen
    n = len(frame)
    if end < n:
        n = end
    n -= UET_AT
    span = _SPANS.get(pro)
    if span is None:
        if len(_SPANS) > 4096:
            _SPANS.clear()
        span = _SPANS[pro] = _span(pro)
    at, width = span
    if width < 0 or n < at + width:
        return _general(frame)
    # the shape: the prologue, its selector bytes and how many
    if width == 0:
        key = pro << 2
    elif width == 1:
        key = (((pro << 8) | frame[UET_AT + at]) << 2) | 1
    else:
        key = (((pro << 16) | (frame[UET_AT + at] << 8) | frame[UET_AT + at + 1]) << 2) | 2
    rd = _READERS.get(key)
    if rd is None:  # learnt from a whole packet of the shape, the first one
        rd = _reader(frame[UET_AT:UET_AT + n])
        if rd is not True:
            if len(_READERS) > 4096:
                _READERS.clear()
            _READERS[key] = rd
    if rd is True or rd is False or n < rd[0]:  # type: ignore[index]
        return _general(frame)
    src = _ADDRESSES.get(raw)
    if src is None:
        src = _address(raw)
    return rd[1](frame, end, tos, src)  # type: ignore[index,no-any-return]


def _general(frame: bytes) -> Received | None:
    """``decode`` of any frame by ``dissect.decode``: what no reader takes (cut short, TSS,
    an atomic extension, an error)."""
    if len(frame) < UET_AT or not frame.startswith(_IPV4, _ETYPE0) or \
            not frame.startswith(_PORT, _DPORT0):
        return None
    end = _UDP_AT + ((frame[_ULEN] << 8) | frame[_ULEN + 1])
    d = dissect(frame[UET_AT:end], checks=False)
    f = d.fields
    if d.error is not None or TYPE not in f:
        return None
    start = min(len(frame), end) - f["payload.len"]
    tos = frame[_TOS]
    return Received({k: v for k, v in f.items() if k in RECEIVED}, frame[start:end],
                    _address(frame[_SRC0:_SRC1]), (tos >> _ECN_SHIFT) & _ECN_MASK == ECN_CE,
                    (tos >> _DSCP_SHIFT) & _DSCP_MASK)


def _address(raw: bytes) -> str:
    """The dotted quad of an IPv4 address's bytes, kept per source."""
    src = _ADDRESSES.get(raw)
    if src is None:
        if len(_ADDRESSES) > 4096:
            _ADDRESSES.clear()
        src = _ADDRESSES[raw] = ".".join(str(b) for b in raw)
    return src




def _native() -> tuple[Any, Any, Any]:
    """``roce._fastpath``'s UET reading and frame making (roce/emu/uet/_receive.pxi,
    _frame.pxi) configured with this module's places, values and ``RECEIVED``: (the reader,
    the frame maker, its plan type); Nones when the fast path is not built."""
    from roce.families.uet import READING_NAMES, uetlines

    ext = uetlines.compiled()
    if ext is None or not hasattr(ext, "uet_receive"):
        return None, None, None
    ext.uet_receive_configure({
        "reading": READING_NAMES.index(SPEC.name), "received": sorted(RECEIVED),
        "etype_at": _ETYPE0, "ethertype": _ETHERTYPE, "tos_at": _TOS, "src_at": _SRC0,
        "dport_at": _DPORT0, "port": UET_PORT, "ulen_at": _ULEN, "udp_at": _UDP_AT,
        "uet_at": UET_AT, "ecn_shift": _ECN_SHIFT, "ecn_mask": _ECN_MASK, "ecn_ce": ECN_CE,
        "dscp_shift": _DSCP_SHIFT, "dscp_mask": _DSCP_MASK, "tuple": Received})
    ext.uet_frame_configure({
        "at": (IP_LEN, IP_ID, IP_CSUM, UDP_SPORT, UDP_LEN), "prefix": PREFIX, "ip": IP_HDR,
        "udp": UDP_HDR, "min_frame": MIN_FRAME, "psn_mask": PSN_MASK, "miss": MISS})
    return ext.uet_receive, ext.uet_frame, ext.UetFramePlan


_RECEIVE, _FRAME, _PLAN = _native()


def decode_native(frame: bytes) -> Received | None:
    """``decode_python`` with the reading in C (``uet_receive``, its twin), Python's reader
    behind it for what C leaves."""
    got = _RECEIVE(frame)  # type: ignore[misc]
    return got if got is not None else decode_python(frame)


# what a host calls per frame: the C reading when the fast path is built
decode = decode_native if _RECEIVE is not None else decode_python


__all__ = ["PREFIX", "RECEIVED", "UET_AT", "Path", "Received", "decode", "decode_native",
           "decode_python", "frame_fast", "path", "uet_fast", "uet_header"]
