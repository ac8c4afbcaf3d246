"""The column types of every field the families set, for columnar output
(``roce.decoder.columnar``: ``-T parquet``/``arrow``): each registered family and tunnel
declares its own (``Handler.layouts``, ``Handler.column_types``); the outermost headers of a
tunnelled frame (``outer.*``) are typed from RoCE's layouts."""

from __future__ import annotations

from roce.families import registry
from roce.families.base.fields import FLAT_KEYS
from roce.families.handler import ColumnSpec, handler_columns
from roce.headers import LAYOUTS

Spec = ColumnSpec


def specs() -> list[Spec]:
    out: list[Spec] = []
    for handler in registry().handlers.values():
        out += handler_columns(handler)
    for h in ("eth", "vlan", "vlan2", "ip", "ipv6", "udp"):
        base = "vlan" if h == "vlan2" else h
        out.append((f"outer.{h}", "bool", 1, True))
        for f, key in zip(LAYOUTS[base].fields, FLAT_KEYS[h]):
            kind = "bool" if f.kind == "bool" else "string" if f.kind == "addr" else "int"
            out.append((f"outer.{key}", kind, f.bits, False))
    out.append(("outer.ip.options", "binary", 0, False))
    seen: dict[str, Spec] = {}
    for spec in out:  # ERSPAN II and III share names: the wider type wins
        old = seen.get(spec[0])
        if old is None or spec[2] > old[2]:
            seen[spec[0]] = spec
    return list(seen.values())
