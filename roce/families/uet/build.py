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
from typing import Any

from roce.families.uet import IPPROTO_UET, REF_PROV_PORT, UET_PORT
from roce.families.uet import codes as t
from roce.families.uet.layouts import (
    EPSN_MASK,
    P_MASK,
    SIGNED,
    SPEC,
    SYN_MASK,
    Header,
    Reading,
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
    d: dict[str, Any] = {}
    for key, fld in zip(h.keys, h.layout.fields):
        src = (renames or {}).get(key, key)
        x = v.get(src, 0)
        if x is None:
            x = 0
        if isinstance(x, bool):
            x = int(x)
        if key in SIGNED:
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
    ses_kind = v.get("uet.pds.nh")
    if ses_kind is None:
        ses_kind = v["uet.pds.nh"] = default_next_header(typ)
    flags = compose_flags(typ, v, reading)
    nh = v.get("uet.pds.ctl_type", 0) if typ == t.CTRL else ses_kind
    out.append(_encode(h["prologue"], {"uet.pds.type": typ, "uet.pds.nh": nh,
                                       "uet.pds.flags": flags}))
    out.append(_pds_body(typ, flags, v, reading))
    if not encrypted and typ != t.CTRL and typ in t.PDS_TYPES:
        out.append(_ses(ses_kind, v, reading))
    return b"".join(out) + payload


def default_next_header(typ: int) -> int:
    """What follows a PDS type when nothing says: a standard request after a request, no
    SES header after ACKs, NACKs and control packets."""
    if typ in t.REQUESTS or typ in (t.RUDI_REQ, t.UUD_REQ):
        return t.NH_STD
    if typ == t.RUDI_RESP:
        return t.NH_RSP
    return t.NH_NONE


def _pds_body(typ: int, flags: int, v: dict[str, Any], reading: Reading) -> bytes:
    h = reading.headers
    if typ in t.REQUESTS:
        _offset(v, "uet.pds.clear_psn", "uet.pds.psn", "uet.pds.clear_psn_offset")
        syn = flags & SYN_MASK
        if syn and "uet.pds.start_psn" in v and "uet.pds.psn_offset" not in v:
            v["uet.pds.psn_offset"] = (v.get("uet.pds.psn", 0) - v["uet.pds.start_psn"]) \
                & PSN_MASK
        body = _encode(h["rud_rod.syn" if syn else "rud_rod"], v)
        if typ in t.CC_REQUESTS:
            body += _encode(h["cc"], v)
        return body
    if typ in t.RUDI:
        return _encode(h["rudi"], v)
    if typ == t.UUD_REQ:
        return _encode(h["uud"], v)
    if typ in t.ACKS:
        probe = reading.name == "ref-prov" and flags & P_MASK
        if probe:
            body = _encode(h["ack"], v, {"uet.pds.ack_psn_offset": "uet.pds.ack.probe_opaque"})
        else:
            _offset(v, "uet.pds.ack_psn", "uet.pds.cack_psn", "uet.pds.ack_psn_offset")
            body = _encode(h["ack"], v)
        if typ == t.ACK and "ack.epsn" in h and flags & EPSN_MASK:
            body += _encode(h["ack.epsn"], v)
        if typ != t.ACK:
            _offset(v, "uet.pds.ack.sack_psn", "uet.pds.cack_psn",
                    "uet.pds.ack.sack_psn_offset")
            body += _encode(h["ack.ext"], v)
            if typ == t.ACK_CC or reading.name == "ref-prov":
                body += _cc_state(v, h)
            if typ == t.ACK_CCX:
                body += _encode(h["ack.ccx"], v)
        return body
    if typ in t.NACKS:
        body = _encode(h["nack"], v)
        if typ == t.NACK_CCX:
            body += _encode(h["nack.ccx"], v)
        return body
    if typ == t.CTRL:
        syn = reading.ctrl_syn and flags & SYN_MASK
        return _encode(h["ctrl.syn" if syn else "ctrl"], v)
    return b""  # reserved and unknown types: the prologue only


def _cc_state(v: dict[str, Any], h: dict[str, Header]) -> bytes:
    kind = v.get("uet.pds.ack.cc_type", 0)
    if kind == t.CC_NSCC and "uet.pds.ack.cc_state" not in v:
        return _encode(h["ack.nscc"], v)
    if kind == t.CC_CREDIT and "uet.pds.ack.cc_state" not in v:
        return _encode(h["ack.credit"], v)
    state = v.get("uet.pds.ack.cc_state", 0)
    if not 0 <= state < 1 << 64:
        raise ValueError(f"uet.pds.ack.cc_state = {state:#x} does not fit its 64 bits")
    return state.to_bytes(8, "big")


def _ses(nh: int, v: dict[str, Any], reading: Reading) -> bytes:
    h = reading.headers
    if nh == t.NH_STD:
        op = v.get("uet.ses.std.opcode", 0)
        renames = {}
        if op in t.RESTART_AT_OFFSET:
            renames["uet.ses.std.buffer_offset"] = "uet.ses.std.restart_token"
        elif op in t.RESTART_AT_KEY:
            renames["uet.ses.std.mem_key_match_bits"] = "uet.ses.std.restart_token"
        out = _encode(h["std"], v, renames)
        out += _encode(h["std.som" if v.get("uet.ses.std.som") else "std.cont"], v)
        if op in (t.SYNC_WRITE, t.SYNC_ATOMIC) and "sync" in h:
            out += _encode(h["sync"], v)
        if op in t.ATOMIC_OPCODES or (op == t.SYNC_ATOMIC and "sync" in h):
            out += _atomic(v, h)
        elif op in t.RENDEZVOUS_OPCODES:
            out += _encode(h["rendv"], v)
        return out
    if nh == t.NH_SMALL:
        out = _encode(h["small"], v)
        return out + (_atomic(v, h) if v.get("uet.ses.std.opcode", 0) in t.ATOMIC_OPCODES
                      else b"")
    if nh == t.NH_MEDIUM:
        renames = ({"uet.ses.med_req.buffer_offset": "uet.ses.med_req.header_data"}
                   if v.get("uet.ses.med_req.flags.hd") else {})
        out = _encode(h["medium"], v, renames)
        return out + (_atomic(v, h) if v.get("uet.ses.std.opcode", 0) in t.ATOMIC_OPCODES
                      else b"")
    key = {t.NH_RSP: "rsp", t.NH_RSP_DATA: "rsp_data",
           t.NH_RSP_DATA_SMALL: "rsp_data_small"}.get(nh)
    if key is None:
        return b""
    if "uet.ses.rsp.opcode" not in v:
        v["uet.ses.rsp.opcode"] = t.RSP_RESPONSE if nh == t.NH_RSP else t.RSP_WITH_DATA
    return _encode(h[key], v)


def _atomic(v: dict[str, Any], h: dict[str, Header]) -> bytes:
    if "uet.ses.comp_swap_ext_hdr.atomic_opcode" in v:
        return _encode(h["cswap"], v)
    return _encode(h["atomic"], v)


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
           "default_next_header", "entropy_header", "frame", "uet_bytes"]
