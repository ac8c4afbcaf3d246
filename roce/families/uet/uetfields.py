"""Every flat field the UET family may set, with its column type and ``-V`` title: the layouts'
fields of both readings (``roce.families.uet.layouts``) and the ones ``dissect`` and ``checks``
derive.  ``-Y`` and ``-e`` (``Handler.fields``), ``-T parquet`` (``Handler.column_types``) and
the tree read this one table.
"""

from __future__ import annotations

from functools import cache

from roce.families.handler import ColumnSpec
from roce.families.uet.checks import CHECKS
from roce.families.uet.layouts import FLAG_TITLES, READINGS, SIGNED

# Fields ``dissect`` derives (not in any layout): name -> (kind, bits, title).  Kinds as
# ``ColumnSpec``; "sint" is a signed integer.
DERIVED: dict[str, tuple[str, int, str]] = {
    "uet": ("bool", 1, "Ultra Ethernet Transport"),
    "uet.tss": ("bool", 1, "TSS"),
    "uet.pds": ("bool", 1, "PDS"),
    "uet.ses": ("bool", 1, "SES"),
    "uet.pds.ctl_type": ("int", 4, "Ctl Type"),
    "uet.pds.clear_psn": ("int", 32, "Clear PSN"),
    "uet.pds.pdc_mode": ("int", 8, "PDC Mode"),
    "uet.pds.start_psn": ("int", 32, "Start PSN"),
    "uet.pds.ack_psn": ("int", 32, "ACK PSN"),
    "uet.pds.ack.probe_opaque": ("int", 16, "Probe Opaque"),
    "uet.pds.ack.sack_psn": ("int", 32, "SACK PSN"),
    "uet.pds.ack.cc_state": ("int", 64, "CC State"),
    "uet.ses.std.flags": ("int", 8, "Flags"),
    "uet.ses.small_req.flags": ("int", 8, "Flags"),
    "uet.ses.med_req.flags": ("int", 8, "Flags"),
    "uet.ses.std.restart_token": ("int", 64, "Restart Token"),
    "uet.ses.med_req.header_data": ("int", 64, "Header Data"),
    "uet.encrypted": ("int", 32, "Encrypted bytes"),
    "uet.ses.rsp.invalid_opcode": ("string", 0, "Invalid SES response opcode"),
    "uet.tss.invalid_header": ("string", 0, "Invalid TSS header length"),
    "uet.pds.invalid_header": ("string", 0, "Invalid PDS header length"),
    "uet.pds.rud_rod.invalid_header": ("string", 0, "Invalid PDS RUD/ROD header length"),
    "uet.pds.ack.invalid_header": ("string", 0, "Invalid PDS ACK header length"),
    "uet.ses.invalid_header": ("string", 0, "Invalid SES header length"),
    "uet.expert": ("bool", 1, "Expert notes"),
    **{c.field: ("string", 0, c.title) for c in CHECKS},
}


@cache
def table() -> dict[str, tuple[str, int, str]]:
    """name -> (kind, bits, title) of every field, both readings (the wider wins)."""
    out = {k: v for k, v in DERIVED.items() if k in PRESENCE}
    for reading in READINGS.values():
        for h in reading.headers.values():
            for key, fld in zip(h.keys, h.layout.fields):
                kind = "bool" if fld.kind == "bool" else "sint" if key in SIGNED else "int"
                old = out.get(key)
                if old is None or fld.bits > old[1]:
                    out[key] = (kind, fld.bits, fld.title)
        for flags in reading.flags.values():
            for name, mask in flags:
                bits = bin(mask).count("1")
                out.setdefault(name, ("bool" if bits == 1 else "int", bits, FLAG_TITLES[name]))
    out.update(DERIVED)
    return out


PRESENCE = ("uet", "uet.tss", "uet.pds", "uet.ses", "uet.expert")  # header-is-there markers


def names() -> tuple[str, ...]:
    return tuple(table())


def column_types() -> tuple[ColumnSpec, ...]:
    return tuple((name, kind, bits, name in PRESENCE)
                 for name, (kind, bits, _title) in table().items())


def title(name: str) -> str:
    return table()[name][2]


__all__ = ["DERIVED", "column_types", "names", "table", "title"]
