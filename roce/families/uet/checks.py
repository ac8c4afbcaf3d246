"""Expert checks on a decoded UET packet: what Wireshark 5.0's dissector does not check.

Each check is one ``Check`` row: its name, the ``uet.expert.*`` field it sets, the text of the
``-V`` note and the one-line tag, and how to make a packet fire it (``spoil``, behind
``roce craft uet-... --bad-<name>``).  ``check`` runs them all and sets, for each that fires,
``uet.expert.<name>`` to a sentence saying what and where, and ``uet.expert`` when any fired.

* ``sack``: the SACK bitmap marks a PSN at or below the cumulative ACK PSN as not received.
  Bit i stands for PSN ``sack_psn + i`` (bit 0 the least significant; the reference
  provider's ``bm_extract64``) and every PSN up to ``cack_psn`` has been received.
* ``window``: a PSN outside the window the packet itself declares: a request whose clear PSN
  is not before its own PSN (the clear PSN is the window's left edge), a SYN whose clear PSN
  is before the PDC's start PSN less one, and, where the reading gives the MPR its unit (the
  reference provider: 128 PSNs), an ACK whose acknowledged PSN or SACK bits reach past the
  cumulative ACK plus the maximum PSN range.
* ``ses_length``: an SES length that disagrees with the payload: a standard request's payload
  length (not the first packet), or a single-packet message's request length (small and
  medium requests, the first-and-last packet of a standard one), for opcodes that carry data;
  a response's payload length.
* ``reserved``: a reserved field or flag bit set.
* ``unknown``: a code no table names: PDS type, next header, control type, NACK code, SES
  opcode, response opcode, return code, CC type, atomic opcode, data type, semantic control,
  the ACK's request value 3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roce.families.uet import codes as t
from roce.families.uet.layouts import Reading

PSN_MASK = 0xFFFFFFFF
Fields = dict[str, Any]


@dataclass(frozen=True)
class Check:
    """One expert check: its name, its -V note, its Info tag, severity and rule."""

    name: str  # uet.expert.<name>; --bad-<name> with dashes
    title: str  # the -V note
    tag: str  # the one-line Info tag
    severity: str  # Wireshark's expert severities: Note, Warning, Error
    # the sentence when it fires, else None; ``keys`` is what ``needs`` chose for the packet
    run: Callable[[Fields, Reading, tuple[Any, ...]], str | None]
    # bends a packet's values (and payload length) so that the check fires
    spoil: Callable[[Fields, Reading, int], None]

    @property
    def field(self) -> str:
        return f"uet.expert.{self.name}"

    @property
    def option(self) -> str:
        """``roce craft``'s option that makes a packet fire it."""
        return "--bad-" + self.name.replace("_", "-")


def _serial_le(a: int, b: int) -> bool:
    """PSN ``a`` at or before ``b`` (32-bit serial arithmetic)."""
    return ((b - a) & PSN_MASK) < 0x80000000


def _sack(f: Fields, reading: Reading, keys: tuple[Any, ...]) -> str | None:
    bitmap = f.get("uet.pds.ack.sack_bitmap")
    if bitmap is None:
        return None
    base, cack = f["uet.pds.ack.sack_psn"], f["uet.pds.cack_psn"]
    if not _serial_le(base, cack):
        return None
    span = min((cack - base) & PSN_MASK, 63) + 1  # bits standing for PSNs up to the CACK
    need = (1 << span) - 1
    missing = ~bitmap & need
    if not missing:
        return None
    first = (missing & -missing).bit_length() - 1
    return (f"SACK bitmap marks PSN {(base + first) & PSN_MASK} (bit {first}) not received, "
            f"at or below the cumulative ACK PSN {cack}")


def _window(f: Fields, reading: Reading, keys: tuple[Any, ...]) -> str | None:
    off = f.get("uet.pds.clear_psn_offset")
    if off is not None:
        psn = f["uet.pds.psn"]
        if off >= 0:
            return (f"PSN {psn} is not after its clear PSN {f['uet.pds.clear_psn']}: outside "
                    "the window the request declares")
        start = f.get("uet.pds.start_psn")
        if start is not None and -off > f["uet.pds.psn_offset"] + 1:
            return (f"clear PSN {f['uet.pds.clear_psn']} is before the PDC's start PSN "
                    f"{start} less one")
    mpr = f.get("uet.pds.ack.mpr")
    if reading.mpr_unit and mpr:
        cack, limit = f["uet.pds.cack_psn"], mpr * reading.mpr_unit
        acked = f.get("uet.pds.ack_psn")
        if acked is not None and (acked - cack) & PSN_MASK < 0x80000000 and \
                (acked - cack) & PSN_MASK > limit:
            return (f"ACK PSN {acked} is more than the MPR's {limit} PSNs past the cumulative "
                    f"ACK PSN {cack}")
        bitmap = f["uet.pds.ack.sack_bitmap"]
        if bitmap:
            top = (f["uet.pds.ack.sack_psn"] + bitmap.bit_length() - 1) & PSN_MASK
            ahead = (top - cack) & PSN_MASK
            if ahead < 0x80000000 and ahead > limit:
                return (f"SACK bit for PSN {top} is more than the MPR's {limit} PSNs past the "
                        f"cumulative ACK PSN {cack}")
    return None


def _ses_length(f: Fields, reading: Reading, keys: tuple[Any, ...]) -> str | None:
    payload = f.get("payload.len")
    if payload is None or "uet.ses" not in f:
        return None
    if "uet.ses.rsp.payload_length" in f:
        said = f["uet.ses.rsp.payload_length"]
        if said != payload:
            return f"response payload length {said}, {payload} bytes follow"
        return None
    op = f.get("uet.ses.std.opcode")
    if op not in t.DATA_OPCODES:
        return None
    if "uet.ses.std.payload_length" in f:  # a standard request past the first packet
        said = f["uet.ses.std.payload_length"]
        if said != payload:
            return f"SES payload length {said}, {payload} bytes follow"
        end = f["uet.ses.std.message_offset"] + payload
        if end > f["uet.ses.std.request_length"]:
            return (f"message offset {f['uet.ses.std.message_offset']} plus {payload} bytes "
                    f"passes the request length {f['uet.ses.std.request_length']}")
        return None
    if "uet.ses.std.request_length" in f:
        said = f["uet.ses.std.request_length"]
        if f["uet.ses.std.eom"] and said != payload or payload > said:
            return f"request length {said}, {payload} bytes follow"
        return None
    for key in ("uet.ses.small_req.req_length", "uet.ses.med_req.req_length"):
        if key in f and f[key] != payload:
            return f"request length {f[key]}, {payload} bytes follow"
    return None


# Reserved fields (flat names); the PDS flag ones are the type's rsvd_* entry.
RESERVED = (
    "uet.pds.entropy.rsvd", "uet.tss.reserved", "uet.pds.pdc_mode_rsv", "uet.pds.rudi.rsvd",
    "uet.pds.uud.rsvd", "uet.pds.ack.cc_state.reserved", "uet.ses.std.rsv",
    "uet.ses.std.reserved2", "uet.ses.std.reserved3", "uet.ses.std.reserved4",
    "uet.ses.small_req.rsv", "uet.ses.small_req.flags.rsvd", "uet.ses.small_req.flags.rsv2",
    "uet.ses.small_req.rsv3", "uet.ses.small_req.rsv4", "uet.ses.med_req.rsv",
    "uet.ses.med_req.flags.rsv2", "uet.ses.med_req.rsv3", "uet.ses.med_req.rsv4",
    "uet.ses.atomic_op_ext_hdr.rsvd", "uet.ses.comp_swap_ext_hdr.rsvd",
    "uet.ses.rendv_ext_hdr.reserved", "uet.ses.rendv_ext_hdr.reserved2", "uet.ses.rsp.reserved",
    "uet.ses.rsp.reserved2", "uet.ses.rsp.reserved3",
    *(f"uet.pds.flags.rsvd_{k}" for k in ("rud_rod", "uud", "ctl", "ack", "rudi", "nack")),
)


def _reserved(f: Fields, reading: Reading, keys: tuple[Any, ...]) -> str | None:
    bad = [k for k in keys if f.get(k)]
    if not bad:
        return None
    return "reserved bits set: " + ", ".join(f"{k} = {f[k]:#x}" for k in bad)


# Fields that hold a code some table names: (field, its table in a reading, what it is).
CODED: tuple[tuple[str, Callable[[Reading], t.Names], str], ...] = (
    ("uet.pds.ctl_type", lambda r: r.ctrl_types, "control type"),
    ("uet.pds.nack.code", lambda r: t.NACK_CODES, "NACK code"),
    ("uet.ses.std.opcode", lambda r: r.ses_opcodes, "SES opcode"),
    ("uet.ses.rsp.opcode", lambda r: t.RSP_OPCODES, "response opcode"),
    ("uet.ses.rsp.return_code", lambda r: t.RETURN_CODES, "return code"),
    ("uet.ses.rsp.list", lambda r: r.rsp_lists or None, "response list"),
    ("uet.pds.ack.cc_type", lambda r: t.CC_TYPES, "CC type"),
    *((f"uet.ses.{ext}.{name}", lambda r, table=table: table, what)
      for ext in ("atomic_op_ext_hdr", "comp_swap_ext_hdr")
      for name, table, what in (("atomic_opcode", t.AMO_OPCODES, "atomic opcode"),
                                ("atomic_data_type", t.AMO_TYPES, "atomic data type"),
                                ("sem_ctl", t.AMO_CONTROLS, "semantic control"))),
)


def _unknown(f: Fields, reading: Reading, keys: tuple[Any, ...]) -> str | None:
    found = []
    typ = f.get("uet.pds.type")
    if typ is not None and (typ not in t.PDS_TYPES or typ in (0, t.TSS_TYPE)):
        found.append(f"PDS type {typ}")
    if typ in t.PDS_TYPES and typ not in (0, t.TSS_TYPE, t.CTRL):
        nh = f.get("uet.pds.nh")
        if nh is not None and nh not in t.NEXT_HEADERS:
            found.append(f"next header {nh}")
    for key, table, what in keys:
        v = f.get(key)
        if v is not None and v not in table:
            found.append(f"{what} {v}")
    if f.get("uet.pds.flags.req") == 3:
        found.append("ACK request 3")
    return ("unknown " + ", ".join(found)) if found else None


# -- making a packet that fires each check (roce craft --bad-<name>) ------------------------------
# Each takes the flat values a packet is built from (with the builder's defaults filled in)
# and its payload length, and bends one thing; ValueError when the packet has nothing of the
# kind to bend.


def _spoil_sack(v: Fields, reading: Reading, payload: int) -> None:
    if v.get("uet.pds.type") not in (t.ACK_CC, t.ACK_CCX):
        raise ValueError("needs an ACK with a SACK bitmap (uet-ack-cc, uet-ack-ccx)")
    v.pop("uet.pds.ack.sack_psn", None)
    v["uet.pds.ack.sack_psn_offset"] = 0  # the bitmap starts at the cumulative ACK PSN ...
    v["uet.pds.ack.sack_bitmap"] = v.get("uet.pds.ack.sack_bitmap", 0) & ~1  # ... not received


def _spoil_window(v: Fields, reading: Reading, payload: int) -> None:
    if v.get("uet.pds.type") not in t.REQUESTS:
        raise ValueError("needs a RUD or ROD request (the window a request declares)")
    v.pop("uet.pds.clear_psn", None)
    v["uet.pds.clear_psn_offset"] = 0  # the clear PSN is the packet's own PSN


def _spoil_ses_length(v: Fields, reading: Reading, payload: int) -> None:
    nh = v.get("uet.pds.nh")
    if nh in (t.NH_RSP_DATA, t.NH_RSP_DATA_SMALL):
        v["uet.ses.rsp.payload_length"] = (payload + 1) & 0x3FFF
        return
    if nh not in (t.NH_SMALL, t.NH_MEDIUM, t.NH_STD) or \
            v.get("uet.ses.std.opcode") not in t.DATA_OPCODES:
        raise ValueError("needs an SES length: a request of an opcode that carries data "
                         "(WRITE, SEND, ...) or a response with data")
    key = {t.NH_SMALL: "uet.ses.small_req.req_length", t.NH_MEDIUM: "uet.ses.med_req.req_length",
           t.NH_STD: "uet.ses.std.request_length" if v.get("uet.ses.std.som") else
           "uet.ses.std.payload_length"}[nh]
    v[key] = (payload + 1) & (0x3FFF if nh != t.NH_STD or "payload" in key else 0xFFFFFFFF)
    if key == "uet.ses.std.request_length":
        v["uet.ses.std.eom"] = True  # first and last packet: the length is the payload's


def _spoil_reserved(v: Fields, reading: Reading, payload: int) -> None:
    for name, mask in reading.flags.get(v.get("uet.pds.type", -1), ()):
        if name.startswith("uet.pds.flags.rsvd_"):
            v.pop("uet.pds.flags", None)
            v[name] = 1 if mask & 1 or not mask & (mask - 1) else \
                (mask & -mask) >> ((mask & -mask).bit_length() - 1)
            return
    raise ValueError("needs a PDS type with reserved flag bits")


def _spoil_unknown(v: Fields, reading: Reading, payload: int) -> None:
    typ, nh = v.get("uet.pds.type"), v.get("uet.pds.nh")
    if typ == t.CTRL:
        v["uet.pds.ctl_type"] = 15
    elif nh in (t.NH_SMALL, t.NH_MEDIUM, t.NH_STD):
        v["uet.ses.std.opcode"] = 0x3F
    elif nh in t.RSP_OPCODES_OF:
        v["uet.ses.rsp.return_code"] = 0x3F
    elif typ in t.NACKS:
        v["uet.pds.nack.code"] = 0x0C  # the one code below 0x1B nothing names
    else:
        v["uet.pds.nh"] = 0x0F


CHECKS: tuple[Check, ...] = (
    Check("sack", "SACK bitmap contradicts the cumulative ACK", "SACK contradicts CACK",
          "Warning", _sack, _spoil_sack),
    Check("window", "PSN outside the PDC's window", "PSN outside window", "Warning", _window,
          _spoil_window),
    Check("ses_length", "SES length disagrees with the payload", "SES length mismatch",
          "Warning", _ses_length, _spoil_ses_length),
    Check("reserved", "Reserved bits set", "Reserved bits set", "Note", _reserved,
          _spoil_reserved),
    Check("unknown", "Unknown code", "Unknown code", "Warning", _unknown, _spoil_unknown),
)
CHECK_FIELDS = ("uet.expert", *(c.field for c in CHECKS))


_NEEDS: dict[str, frozenset[str]] = {  # the layouts that give a check something to read
    "sack": frozenset(("ack.ext",)), "window": frozenset(("rud_rod", "rud_rod.syn", "ack.ext")),
    "ses_length": frozenset(("std.som", "std.cont", "small", "medium", "rsp_data",
                             "rsp_data_small"))}
_PLANS: dict[tuple[str, tuple[str, ...]], tuple[tuple[Check, tuple[Any, ...]], ...]] = {}


def _plan(reading: Reading, headers: tuple[str, ...]) -> tuple[tuple[Check, tuple[Any, ...]],
                                                                ...]:
    """The checks a packet of these layouts can fire, each with the fields it reads."""
    present = {k for h in headers for k in reading.headers[h].keys}
    present.update(name for flags in reading.flags.values() for name, _m in flags)
    present.update(("uet.pds.ctl_type", "uet.pds.nh"))
    plan = []
    for c in CHECKS:
        if c.name in _NEEDS and not _NEEDS[c.name] & set(headers):
            continue
        if c.name == "reserved":
            keys: tuple[Any, ...] = tuple(k for k in RESERVED if k in present)
        elif c.name == "unknown":
            keys = tuple((k, get(reading), what) for k, get, what in CODED
                         if k in present and get(reading) is not None)
        else:
            keys = ()
        plan.append((c, keys))
    return tuple(plan)


def check(f: Fields, reading: Reading, headers: tuple[str, ...]) -> None:
    """Run the checks on the flat fields of a packet decoded from ``headers`` (its layouts'
    keys, as ``dissect`` lists them); mark what fires."""
    plan = _PLANS.get((reading.name, headers))
    if plan is None:
        if len(_PLANS) > 4096:
            _PLANS.clear()
        plan = _PLANS[reading.name, headers] = _plan(reading, headers)
    any_fired = False
    for c, keys in plan:
        text = c.run(f, reading, keys)
        if text is not None:
            f[c.field] = text
            any_fired = True
    if any_fired:
        f["uet.expert"] = True


__all__ = ["CHECKS", "CHECK_FIELDS", "Check", "RESERVED", "check"]
