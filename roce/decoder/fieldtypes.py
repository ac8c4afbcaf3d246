"""The column types of every field the families set, for columnar output
(``roce.decoder.columnar``: ``-T parquet``/``arrow``): derived from the families' layouts,
as RoCE's columns are from ``roce.headers``; the fields no layout holds are typed here."""

from __future__ import annotations

from roce.families import tunnels
from roce.families.base.fields import FLAT_KEYS
from roce.families.ib import mad as ibmad
from roce.families.ib import native as ib
from roce.headers import LAYOUTS, Layout

# (name, kind, bits, presence); kind is "bool", "int" (bits wide), "string" or "binary"
Spec = tuple[str, str, int, bool]

_EXTRA: tuple[Spec, ...] = (
    ("infiniband", "bool", 1, True), ("vcrc", "int", 16, False),
    ("vcrc.valid", "bool", 1, False), ("ipoib.type", "int", 16, False),
    ("ipoib.reserved", "int", 16, False), ("arp.opcode", "int", 16, False),
    ("gre.checksum", "int", 16, False), ("gre.key", "int", 32, False),
    ("gre.sequence_number", "int", 32, False),
    ("erf", "bool", 1, True), ("erf.ts", "int", 64, False), ("erf.types", "int", 8, False),
    ("erf.types.type", "int", 8, False), ("erf.types.ext_header", "int", 8, False),
    ("erf.flags", "int", 8, False), ("erf.rlen", "int", 16, False),
    ("erf.lctr", "int", 16, False), ("erf.wlen", "int", 16, False),
    ("erf.ehdr.types", "string", 0, False),
    ("infiniband_link", "bool", 1, True), ("infiniband_link.op", "int", 4, False),
    ("infiniband_link.fctbs", "int", 12, False), ("infiniband_link.vl", "int", 4, False),
    ("infiniband_link.fccl", "int", 12, False), ("infiniband_link.lpcrc", "int", 16, False),
    ("outer.ip.options", "binary", 0, False),
)


def _layout(prefix: str, layout: Layout, presence: bool = True) -> list[Spec]:
    out: list[Spec] = [(prefix, "bool", 1, True)] if presence else []
    for f in layout.fields:
        kind = "bool" if f.kind == "bool" else "string" if f.kind == "addr" else "int"
        out.append((f"{prefix}.{f.name}", kind, f.bits, False))
    return out


def specs() -> list[Spec]:
    out = [*_layout("lrh", ib.LRH_LAYOUT), *_layout("mad", ibmad.MAD_LAYOUT),
           ("cm", "bool", 1, True), ("ipoib", "bool", 1, True)]
    for _key, layout, _dec, _enc in ibmad.CM_CODECS.values():
        out += _layout(layout.name, layout)
    for key, layout in tunnels.LAYOUTS.items():
        prefix = key.split(".")[0].rstrip("23")
        out += _layout(prefix, layout, presence=key in ("gre", "erspan2", "vxlan"))
    for h in ("eth", "vlan", "vlan2", "ip", "ipv6", "udp"):
        base = "vlan" if h == "vlan2" else h
        out.append((f"outer.{h}", "bool", 1, True))
        for f, key in zip(LAYOUTS[base].fields, FLAT_KEYS[h]):
            kind = "bool" if f.kind == "bool" else "string" if f.kind == "addr" else "int"
            out.append((f"outer.{key}", kind, f.bits, False))
    out += _EXTRA
    seen: dict[str, Spec] = {}
    for spec in out:  # ERSPAN II and III share names: the wider type wins
        old = seen.get(spec[0])
        if old is None or spec[2] > old[2]:
            seen[spec[0]] = spec
    return list(seen.values())
