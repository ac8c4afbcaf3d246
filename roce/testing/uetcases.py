"""Hypothesis strategies for Ultra Ethernet Transport packets, drawn from the UET layouts and
tables (``roce.families.uet``): which headers a packet has comes from the family's own rule
(``layouts.pds_chain`` / ``ses_chain``), every field of them is drawn within its width, and the
codes from the tables.  ``roce.testing.strategies`` exports them.

::

    uet_cases(pds_type=None, next_header=None, opcode=None, reading="spec", native=None,
              encrypted=None, clean=True, max_payload=64)    UetCase
    uet_frames(...)                                         the same, the Ethernet frame only

A ``UetCase`` holds the flat field values (``uet.pds.psn``...), the payload, the reading and
carriage, and the frame ``roce.families.uet.build`` makes of them.  ``clean`` packets raise no
expert note (reserved bits zero, known codes, lengths that match the payload, a SACK bitmap
that agrees with its cumulative ACK, PSNs inside the windows the packet declares); with
``clean=False`` every field ranges over its width.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from roce.families.uet import build
from roce.families.uet import codes as t
from roce.families.uet.checks import RESERVED
from roce.families.uet.layouts import (
    ACK_CC_STATE,
    AMO,
    READINGS,
    SIGNED,
    STD_TAIL,
    Header,
    Reading,
    ack_cc_key,
    carries_ses,
    pds_chain,
    renamed,
    ses_chain,
)

# next headers a clean packet of each PDS type carries
_CLEAN_NH = {**dict.fromkeys(t.REQUESTS, (t.NH_SMALL, t.NH_MEDIUM, t.NH_STD)),
             t.RUDI_REQ: (t.NH_SMALL, t.NH_MEDIUM, t.NH_STD), t.UUD_REQ: (t.NH_SMALL,
                                                                          t.NH_MEDIUM, t.NH_STD),
             t.RUDI_RESP: (t.NH_RSP, t.NH_RSP_DATA, t.NH_RSP_DATA_SMALL),
             **dict.fromkeys(t.ACKS, (t.NH_NONE, t.NH_RSP, t.NH_RSP_DATA, t.NH_RSP_DATA_SMALL)),
             **dict.fromkeys(t.NACKS, (t.NH_NONE,))}
# fields whose values name a code: drawn from their table when clean
_CODED = {"uet.pds.nack.code": t.NACK_CODES, "uet.ses.rsp.return_code": t.RETURN_CODES,
          "uet.pds.ack.cc_type": t.CC_TYPES,
          **{f"uet.ses.{e}.{f}": table for e in ("atomic_op_ext_hdr", "comp_swap_ext_hdr")
             for f, table in (("atomic_opcode", t.AMO_OPCODES), ("atomic_data_type",
                                                                 t.AMO_TYPES),
                              ("sem_ctl", t.AMO_CONTROLS))}}


@dataclass(frozen=True)
class UetCase:
    """One UET test case: its field values, payload, reading and frame."""

    values: dict[str, Any]
    payload: bytes
    reading: Reading = field(repr=False)
    native: bool  # IP protocol 253 with the entropy header, not UDP 4793
    frame: bytes = field(repr=False)

    @property
    def reading_name(self) -> str:
        return self.reading.name


def _field(draw: st.DrawFn, key: str, bits: int, clean: bool) -> int:
    if clean and (key in RESERVED or key.rsplit(".", 1)[-1] in ("ver", "flags.ver")):
        return 0
    if clean and key in _CODED:
        return draw(st.sampled_from(sorted(_CODED[key])))
    top = (1 << bits) - 1
    return draw(st.one_of(st.sampled_from(sorted({0, 1, max(top - 1, 0), top})),
                          st.integers(0, top)))


def _layout(draw: st.DrawFn, h: Header, v: dict[str, Any], clean: bool) -> None:
    for key, fld in zip(h.keys, h.layout.fields):
        if key in v:
            continue
        v[key] = draw(st.booleans()) if fld.kind == "bool" else _field(draw, key, fld.bits,
                                                                      clean)
        if key in SIGNED:  # PSN offsets are read signed
            v[key] = v[key] - 0x10000 if v[key] & 0x8000 else v[key]


@st.composite
def uet_cases(draw: st.DrawFn, pds_type: int | None = None, next_header: int | None = None,
              opcode: int | None = None, reading: str = "spec", native: bool | None = None,
              encrypted: bool | None = None, clean: bool = True,
              max_payload: int = 64) -> UetCase:
    r = READINGS[reading]
    h = r.headers
    v: dict[str, Any] = {}
    types = [x for x in t.PDS_TYPES if x not in (0, t.TSS_TYPE)]
    typ = pds_type if pds_type is not None else draw(st.sampled_from(types))
    v["uet.pds.type"] = typ
    if native is None:
        native = draw(st.booleans())
    if native:
        _layout(draw, h["entropy"], v, clean)
    if encrypted is None:
        encrypted = draw(st.integers(0, 9)) == 0
    if encrypted:
        v["uet.tss"] = True
        v["uet.tss.type"] = t.TSS_TYPE
        _layout(draw, h["tss"], v, clean)
        if v["uet.tss.sp"]:
            _layout(draw, h["tss.ssi"], v, clean)
        _layout(draw, h["tss.tsc"], v, clean)
    # flags: each of the type's flag fields, reserved ones zero when clean
    for name, mask in r.flags.get(typ, ()):
        bits = bin(mask).count("1")
        if clean and name.startswith("uet.pds.flags.rsvd_"):
            v[name] = 0
        elif bits == 1:
            v[name] = draw(st.booleans())
        elif clean and name == "uet.pds.flags.req":
            v[name] = draw(st.integers(0, 2))  # 3 is reserved
        else:  # any of the mask's bits, shifted down as decode shows them
            low = (mask & -mask).bit_length() - 1
            v[name] = (draw(st.integers(0, 0x7F)) & mask) >> low
    flags = build.compose_flags(typ, v, r)
    if typ == t.CTRL:
        v["uet.pds.ctl_type"] = draw(st.sampled_from(sorted(r.ctrl_types))) if clean else \
            draw(st.integers(0, 15))
    if carries_ses(typ):
        nh = next_header if next_header is not None else (
            draw(st.sampled_from(_CLEAN_NH[typ])) if clean else draw(st.integers(0, 6)))
        v["uet.pds.nh"] = nh
    else:
        nh = t.NH_NONE  # control packets: the 4 bits are the control type
    for key in pds_chain(typ, flags, r):
        if key == ACK_CC_STATE:
            key = ack_cc_key(v["uet.pds.ack.cc_type"])
        _layout(draw, h[key], v, clean)
        _rename(v, renamed(key, r, flags))
    payload = draw(st.binary(max_size=max_payload))
    if not encrypted and carries_ses(typ):
        op = opcode if opcode is not None else (
            draw(st.sampled_from(sorted(r.ses_opcodes))) if clean else
            draw(st.integers(0, 63)))
        v["uet.ses.std.opcode"] = op
        if nh in t.RSP_OPCODES_OF:
            v["uet.ses.rsp.opcode"] = draw(st.sampled_from(sorted(t.RSP_OPCODES_OF[nh]))) \
                if clean else draw(st.integers(0, 63))
            if r.rsp_lists and clean:
                v["uet.ses.rsp.list"] = draw(st.sampled_from(sorted(r.rsp_lists)))
        for key in ses_chain(nh, op, r):
            if key == STD_TAIL:
                key = "std.som" if v["uet.ses.std.som"] else "std.cont"
            elif key == AMO:
                cswap = draw(st.booleans())
                ext = "comp_swap_ext_hdr" if cswap else "atomic_op_ext_hdr"
                ops = sorted(t.CSWAP_OPCODES if cswap else set(t.AMO_OPCODES) - t.CSWAP_OPCODES)
                v[f"uet.ses.{ext}.atomic_opcode"] = draw(st.sampled_from(ops))
                key = "cswap" if cswap else "atomic"
            _layout(draw, h[key], v, clean)
            _rename(v, renamed(key, r, 0, op, bool(v.get("uet.ses.med_req.flags.hd"))))
    if v.get("uet.pds.nh") not in (t.NH_SMALL, t.NH_MEDIUM, t.NH_STD):
        v.pop("uet.ses.std.opcode", None)  # responses and no SES: no request opcode
    if clean:
        _make_clean(v, r, flags, len(payload))
    data = build.uet_bytes(v, r, payload, entropy=native)
    addr = draw(st.booleans())
    frame = build.frame(data, native=native, ipv6=addr,
                        dport=build.REF_PROV_PORT if reading == "ref-prov" else build.UET_PORT,
                        sport=draw(st.integers(0, 0xFFFF)))
    return UetCase(v, payload, r, native, frame)


def _rename(v: dict[str, Any], renames: dict[str, str]) -> None:
    for key, name in renames.items():
        value = v.pop(key)
        v[name] = value & 0xFFFF if key in SIGNED and name not in SIGNED else value


def _make_clean(v: dict[str, Any], r: Reading, flags: int, payload: int) -> None:
    """Bend drawn values so that no expert check fires (``roce.families.uet.checks``)."""
    if "uet.pds.clear_psn_offset" in v:
        off = v["uet.pds.clear_psn_offset"] & 0x7FFF
        low = -(v["uet.pds.psn_offset"] + 1) if "uet.pds.psn_offset" in v else -0x8000
        v["uet.pds.clear_psn_offset"] = max(-1 - off, low)
    if r.mpr_unit and "uet.pds.ack.mpr" in v:
        v["uet.pds.ack.mpr"] = 0  # no MPR window to keep inside
    if "uet.pds.ack.sack_bitmap" in v and v["uet.pds.ack.sack_psn_offset"] <= 0:
        span = min(-v["uet.pds.ack.sack_psn_offset"], 63) + 1
        v["uet.pds.ack.sack_bitmap"] |= (1 << span) - 1
    if v.get("uet.ses.std.opcode") in t.DATA_OPCODES:
        if "uet.ses.std.som" in v:
            if v["uet.ses.std.som"]:
                v["uet.ses.std.request_length"] = max(v["uet.ses.std.request_length"], payload)
                if v["uet.ses.std.eom"]:
                    v["uet.ses.std.request_length"] = payload
            else:
                v["uet.ses.std.payload_length"] = payload
                room = 0xFFFFFFFF - payload
                v["uet.ses.std.message_offset"] = min(v["uet.ses.std.message_offset"], room)
                v["uet.ses.std.request_length"] = max(
                    v["uet.ses.std.request_length"], v["uet.ses.std.message_offset"] + payload)
        for key in ("uet.ses.small_req.req_length", "uet.ses.med_req.req_length"):
            if key in v:
                v[key] = payload
    if "uet.ses.rsp.payload_length" in v:
        v["uet.ses.rsp.payload_length"] = payload


def uet_frames(**kw: Any) -> st.SearchStrategy[bytes]:
    """Ethernet frames of ``uet_cases(**kw)``."""
    return uet_cases(**kw).map(lambda c: c.frame)


__all__ = ["UetCase", "uet_cases", "uet_frames"]
