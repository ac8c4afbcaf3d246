"""Building UET packets: flat field values (the names ``dissect`` gives) to bytes, through the
same layouts and the same choices ``dissect`` makes (which PDS body, which SES header, which
extension), so what is built decodes to what was asked; and the Ethernet / IP / UDP (or IP
protocol 253 with the entropy header) around them.

``uet_bytes(values)`` fills what is not given: PDS type RUD request, next header by type,
flags from the per-flag fields, and the values ``dissect`` derives can be given instead of
what they derive from (``uet.pds.clear_psn`` for the offset, ``uet.pds.start_psn`` for the SYN
PSN offset, ``uet.pds.ack_psn`` and ``uet.pds.ack.sack_psn`` for theirs).  A value that does
not fit its field is a ``ValueError`` naming the field.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from roce.families.uet import IPPROTO_UET, REF_PROV_PORT, UET_PORT
from roce.families.uet import codes as t
from roce.families.uet.layouts import (
    ACK_CC_STATE,
    AMO,
    SIGNED,
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
from roce.fast import ip_checksum_reference
from roce.headers import ENCODERS

IPPROTO_UDP = 17
PSN_MASK = 0xFFFFFFFF
ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN = 0x0800, 0x86DD, 0x8100
# addresses roce.craft gives RoCE frames by default, so mixed captures read alike
DEFAULT_SMAC, DEFAULT_DMAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
DEFAULT_SRC4, DEFAULT_DST4 = "10.0.0.1", "10.0.0.2"
DEFAULT_SRC6, DEFAULT_DST6 = "fd00::1", "fd00::2"
ENTROPY_BASE = 0xC000  # default UDP source port / entropy: a fixed value in the dynamic range


def _encode(h: Header, v: dict[str, Any], renames: dict[str, str] | None = None) -> bytes:
    """Header ``h`` from the flat values ``v`` (``renames``: flat key -> the key its value is
    taken from).  Runs the straight-line encoder ``_plan`` makes of it; that one hands values
    other than integers in range to ``_encode_checked``, which says what is wrong."""
    key = (id(h), tuple(renames.items()) if renames else ())
    hit = _PLANS.get(key)
    if hit is None:
        hit = _PLANS[key] = (h, _plan(h, renames or {}))
    return hit[1](v)


# (id of a Header, renames) -> (the Header, kept alive so that its id stays its own; encoder)
_PLANS: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[Header, Callable]] = {}
_INTS = frozenset((int, bool))


def _plan(h: Header, renames: dict[str, str]) -> Callable[[dict[str, Any]], bytes]:
    """Straight-line Python encoding ``h`` (as ``roce.headers`` generates its codecs): each
    value read once, checked against its field and shifted into one integer; anything else
    (a missing value, None, a value of another type or out of range) goes to
    ``_encode_checked``, so the bytes and the errors are its own."""
    if any(f.kind == "addr" for f in h.layout.fields):  # pragma: no cover - none in UET
        return lambda v: _encode_checked(h, v, renames)
    env: dict[str, Any] = {"INTS": _INTS, "slow": _encode_checked, "h": h, "renames": renames}
    reads, checks, terms = [], [], []
    for i, (key, f) in enumerate(zip(h.keys, h.layout.fields)):
        src = renames.get(key, key)
        reads.append(f"    x{i} = v.get({src!r}, 0)")
        if src in SIGNED:
            checks.append(f"type(x{i}) in INTS and -0x8000 <= x{i} <= 0x7FFF")
            term = f"(x{i} & 0xFFFF)"
        else:
            checks.append(f"type(x{i}) in INTS and 0 <= x{i} <= {f.mask:#x}")
            term = f"x{i}"
        terms.append(f"({term} << {f.shift})" if f.shift else term)
    src = "\n".join(["def enc(v):", *reads,
                     f"    if not ({' and '.join(checks) or 'True'}):",
                     "        return slow(h, v, renames)",
                     f"    return ({' | '.join(terms) or '0'}).to_bytes({h.layout.size}, 'big')"])
    exec(compile(src + "\n", f"<uet encoder {h.key}>", "exec"), env)
    return env["enc"]


def _encode_checked(h: Header, v: dict[str, Any],
                    renames: dict[str, str] | None = None) -> bytes:
    d: dict[str, Any] = {}
    for key, fld in zip(h.keys, h.layout.fields):
        src = (renames or {}).get(key, key)
        x = v.get(src, 0)
        if x is None:
            x = 0
        if isinstance(x, bool):
            x = int(x)
        if src in SIGNED:  # a renamed field (the probe opaque) is not signed
            if not -0x8000 <= x <= 0x7FFF:
                raise ValueError(f"{src} = {x} does not fit a signed 16-bit offset")
            x &= 0xFFFF
        elif not 0 <= x <= fld.mask:
            raise ValueError(f"{src} = {x:#x} does not fit its {fld.bits} bits")
        d[fld.name] = x
    return h.encode(d)


def _offset(v: dict[str, Any], derived: str, base_key: str, offset_key: str) -> None:
    """Give ``offset_key`` from a derived PSN when only that was given
    (derived = base + offset, 32-bit)."""
    if derived in v and offset_key not in v:
        diff = (v[derived] - v.get(base_key, 0)) & PSN_MASK
        v[offset_key] = diff - (1 << 32) if diff & 0x80000000 else diff


def compose_flags(typ: int, v: dict[str, Any], reading: Reading) -> int:
    """The 7 flag bits from the per-flag fields of type ``typ`` (``uet.pds.flags`` wins)."""
    if "uet.pds.flags" in v:
        return int(v["uet.pds.flags"])
    flags = 0
    for name, mask in reading.flags.get(typ, ()):
        x = v.get(name)
        if not x:
            continue
        low = (mask & -mask).bit_length() - 1
        x = int(x)
        if (x << low) & ~mask & 0x7F or x << low > 0x7F:
            raise ValueError(f"{name} = {x:#x} does not fit its bits (mask {mask:#04x})")
        flags |= x << low if mask & (mask - 1) else mask
    return flags


def uet_bytes(values: dict[str, Any], reading: Reading = SPEC, payload: bytes = b"",
              entropy: bool = False) -> bytes:
    """The UET bytes (from the entropy header or the PDS prologue on) of ``values``."""
    v = dict(values)
    h = reading.headers
    out: list[bytes] = []
    if entropy:
        out.append(_encode(h["entropy"], v))
    encrypted = bool(v.get("uet.tss"))
    if encrypted:
        v.setdefault("uet.tss.type", t.TSS_TYPE)
        v.setdefault("uet.tss.sp", "uet.tss.ssi" in v)
        out.append(_encode(h["tss"], v))
        if v["uet.tss.sp"]:
            out.append(_encode(h["tss.ssi"], v))
        out.append(_encode(h["tss.tsc"], v))
    typ = v.setdefault("uet.pds.type", t.RUD_REQ)
    nh = v.get("uet.pds.nh")
    if nh is None:
        nh = v["uet.pds.nh"] = default_next_header(typ)
    flags = compose_flags(typ, v, reading)
    four = v.get("uet.pds.ctl_type", 0) if typ == t.CTRL else nh
    out.append(_encode(h["prologue"], {"uet.pds.type": typ, "uet.pds.nh": four,
                                       "uet.pds.flags": flags}))
    _derived(v, reading, flags)
    for key in pds_chain(typ, flags, reading):
        if key == ACK_CC_STATE:
            out.append(_cc_state(v, h))
            continue
        out.append(_encode(h[key], v, renamed(key, reading, flags)))
    if not encrypted and carries_ses(typ):
        out.append(_ses(nh, v, reading))
    return b"".join(out) + payload


def default_next_header(typ: int) -> int:
    """What follows a PDS type when nothing says: a standard request after a request, a
    response after a RUDI response, no SES header after ACKs, NACKs and control packets."""
    if typ in t.REQUESTS or typ in (t.RUDI_REQ, t.UUD_REQ):
        return t.NH_STD
    if typ == t.RUDI_RESP:
        return t.NH_RSP
    return t.NH_NONE


def _derived(v: dict[str, Any], reading: Reading, flags: int) -> None:
    """The offsets the derived PSNs given stand for."""
    _offset(v, "uet.pds.clear_psn", "uet.pds.psn", "uet.pds.clear_psn_offset")
    _offset(v, "uet.pds.ack_psn", "uet.pds.cack_psn", "uet.pds.ack_psn_offset")
    _offset(v, "uet.pds.ack.sack_psn", "uet.pds.cack_psn", "uet.pds.ack.sack_psn_offset")
    if "uet.pds.start_psn" in v and "uet.pds.psn_offset" not in v:
        v["uet.pds.psn_offset"] = (v.get("uet.pds.psn", 0) - v["uet.pds.start_psn"]) & PSN_MASK


def _cc_state(v: dict[str, Any], h: dict[str, Header]) -> bytes:
    if "uet.pds.ack.cc_state" in v:  # the 8 bytes as one number
        state = v["uet.pds.ack.cc_state"]
        if not 0 <= state < 1 << 64:
            raise ValueError(f"uet.pds.ack.cc_state = {state:#x} does not fit its 64 bits")
        return int(state).to_bytes(8, "big")
    return _encode(h[ack_cc_key(v.get("uet.pds.ack.cc_type", 0))], v)


def _ses(nh: int, v: dict[str, Any], reading: Reading) -> bytes:
    h = reading.headers
    op = v.get("uet.ses.std.opcode", 0)
    if nh in t.RSP_OPCODES_OF and "uet.ses.rsp.opcode" not in v:
        v["uet.ses.rsp.opcode"] = t.RSP_RESPONSE if nh == t.NH_RSP else t.RSP_WITH_DATA
    out = []
    for key in ses_chain(nh, op, reading):
        renames = renamed(key, reading, 0, op, bool(v.get("uet.ses.med_req.flags.hd")))
        if key == STD_TAIL:
            key = "std.som" if v.get("uet.ses.std.som") else "std.cont"
        elif key == AMO:  # decode's rule: the atomic opcode says which extension
            cs, at = "uet.ses.comp_swap_ext_hdr.", "uet.ses.atomic_op_ext_hdr."
            amo = v.get(f"{cs}atomic_opcode", v.get(f"{at}atomic_opcode", 0))
            key = "cswap" if amo in t.CSWAP_OPCODES else "atomic"
            one, other = (cs, at) if key == "cswap" else (at, cs)
            for name in ("atomic_opcode", "atomic_data_type", "sem_ctl", "rsvd"):
                if one + name not in v and other + name in v:
                    renames[one + name] = other + name
        out.append(_encode(h[key], v, renames))
    return b"".join(out)


# -- what roce craft builds ------------------------------------------------------------------------


def slug(name: str) -> str:
    return name.lower().replace("_", "-")


def kinds(reading: Reading = SPEC) -> dict[str, tuple[int, int | None]]:
    """``roce craft``'s UET names: ``uet-<PDS type>`` (``uet-rud-req``, ``uet-ack-cc``...) and
    ``uet-<SES opcode>`` (``uet-write``...: a RUD request with a standard SES header of that
    opcode) -> (PDS type, SES opcode or None)."""
    out: dict[str, tuple[int, int | None]] = {
        f"uet-{slug(name)}": (typ, None) for typ, (name, _d) in t.PDS_TYPES.items()
        if typ not in (0, t.TSS_TYPE)}
    out.update({f"uet-{slug(name)}": (t.RUD_REQ, op)
                for op, (name, _d) in reading.ses_opcodes.items()})
    return out


def with_defaults(values: dict[str, Any], reading: Reading = SPEC,
                  payload: int = 0) -> dict[str, Any]:
    """``values`` with what a well-formed packet needs and was not given: next header by type,
    a request's clear PSN just before its PSN, a SYN's start PSN at its PSN, a standard
    request that is a whole message (SOM and EOM) unless a flag says otherwise, SES lengths
    that match a ``payload``-byte payload; nothing that makes an expert note."""
    v = dict(values)
    typ = v.setdefault("uet.pds.type", t.RUD_REQ)
    nh = v.setdefault("uet.pds.nh", default_next_header(typ))
    if typ in t.REQUESTS and "uet.pds.clear_psn" not in v:
        v.setdefault("uet.pds.clear_psn_offset", -1)
    if typ in t.NACKS:
        v.setdefault("uet.pds.nack.code", 0x01)  # TRIMMED: code 0 names nothing
    if typ in (t.ACK_CC, t.ACK_CCX) and "uet.pds.ack.sack_psn" not in v:
        v.setdefault("uet.pds.ack.sack_psn_offset", 1)  # the bitmap from the PSN after CACK
    if nh in (t.NH_SMALL, t.NH_MEDIUM, t.NH_STD):
        v.setdefault("uet.ses.std.opcode", t.WRITE)
    if nh == t.NH_STD:
        if "uet.ses.std.som" not in v and "uet.ses.std.eom" not in v:
            v["uet.ses.std.som"] = v["uet.ses.std.eom"] = True
        if v.get("uet.ses.std.som"):
            v.setdefault("uet.ses.std.request_length", payload)
        else:
            v.setdefault("uet.ses.std.payload_length", payload)
            v.setdefault("uet.ses.std.request_length",
                         v.get("uet.ses.std.message_offset", 0) + payload)
    elif nh == t.NH_SMALL:
        v.setdefault("uet.ses.small_req.req_length", payload)
        v.setdefault("uet.ses.small_req.som", True)
        v.setdefault("uet.ses.small_req.eom", True)
    elif nh == t.NH_MEDIUM:
        v.setdefault("uet.ses.med_req.req_length", payload)
        v.setdefault("uet.ses.med_req.som", True)
        v.setdefault("uet.ses.med_req.eom", True)
    elif nh in (t.NH_RSP_DATA, t.NH_RSP_DATA_SMALL):
        v.setdefault("uet.ses.rsp.payload_length", payload)
    if nh in t.RSP_OPCODES_OF:
        v.setdefault("uet.ses.rsp.return_code", 1)  # OK
    return v


# -- framing --------------------------------------------------------------------------------------


def frame(uet: bytes, *, native: bool = False, ipv6: bool = False, src: str | None = None,
          dst: str | None = None, smac: str = DEFAULT_SMAC, dmac: str = DEFAULT_DMAC,
          sport: int = ENTROPY_BASE, dport: int = UET_PORT, vlan: int | None = None,
          vlan_priority: int = 0, dscp: int = 0, ecn: int = 0, ttl: int = 64,
          ip_id: int = 0) -> bytes:
    """An Ethernet frame around UET bytes: IPv4 or IPv6, then UDP to ``dport`` (checksum 0,
    as the reference provider sends), or (``native``) IP protocol 253 straight, whose UET
    bytes begin with the entropy header.  Frames under 60 bytes are padded as Ethernet
    requires."""
    if native:
        proto, l4 = IPPROTO_UET, uet
    else:
        proto = IPPROTO_UDP
        l4 = ENCODERS["udp"]({"srcport": sport, "dstport": dport, "length": 8 + len(uet),
                              "checksum": 0}) + uet
    if ipv6:
        l3 = ENCODERS["ipv6"]({"version": 6, "tclass": (dscp << 2) | ecn, "flow": 0,
                               "plen": len(l4), "nxt": proto, "hlim": ttl,
                               "src": src or DEFAULT_SRC6, "dst": dst or DEFAULT_DST6})
        etype = ETHERTYPE_IPV6
    else:
        ip = bytearray(ENCODERS["ip"]({"version": 4, "ihl": 5, "dsfield.dscp": dscp,
                                       "dsfield.ecn": ecn, "len": 20 + len(l4), "id": ip_id,
                                       "flags.rb": 0, "flags.df": 1, "flags.mf": 0,
                                       "frag_offset": 0, "ttl": ttl, "proto": proto,
                                       "checksum": 0, "src": src or DEFAULT_SRC4,
                                       "dst": dst or DEFAULT_DST4}))
        ip[10:12] = ip_checksum_reference(bytes(ip)).to_bytes(2, "big")
        l3, etype = bytes(ip), ETHERTYPE_IPV4
    eth = ENCODERS["eth"]({"dst": dmac, "src": smac, "type": ETHERTYPE_VLAN if vlan is not None
                           else etype})
    if vlan is not None:
        eth += ENCODERS["vlan"]({"priority": vlan_priority, "dei": 0, "id": vlan,
                                 "etype": etype})
    out = eth + l3 + l4
    return out + bytes(max(0, 60 - len(out)))


def entropy_header(entropy: int, reserved: int = 0) -> bytes:
    return struct.pack("!HH", entropy, reserved)


__all__ = ["ENTROPY_BASE", "IPPROTO_UET", "REF_PROV_PORT", "UET_PORT", "compose_flags",
           "default_next_header", "entropy_header", "frame", "kinds", "slug", "uet_bytes",
           "with_defaults"]
