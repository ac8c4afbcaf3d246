"""The built-in rows of the registry (RoCE, native InfiniBand, ERF, GRE, ERSPAN, VXLAN, INT-MD
over UDP, Ultra Ethernet Transport), and ``registry()``: the process-wide registry with those
rows and the plugins' loaded.

RoCE's rows name what the compiled walk already decodes (``roce.locate``); they are here so
that decode-as (``-d udp.port==4792,roce``) and the registry's listing know RoCE.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from roce.errors import DecodeError
from roce.families import erf, intmd, tunnels
from roce.families.handler import ColumnSpec, Handler, layout_columns
from roce.families.registry import REGISTRY, Registry
from roce.locate import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_ROCEV1,
    L3_NONE,
    LINKTYPE_ERF,
    LINKTYPE_INFINIBAND,
    OK,
    ROCE_PORT,
    WALK_LINKTYPES,
    Walk,
)

ROCE = "roce"
ROCE_LINKTYPES = frozenset(WALK_LINKTYPES)


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, imported on first call: native InfiniBand's layouts cost ~8 ms to
    build, which a plain RoCE run must not pay."""

    def call(*args: Any, **kw: Any) -> Any:
        return getattr(importlib.import_module(module, __package__), name)(*args, **kw)

    call.__name__ = name
    return call


def _ib_fields() -> tuple[str, ...]:
    from roce.families.ib import mad as ibmad
    from roce.families.ib import native as ib

    return ("lrh", *ib.LRH_KEYS, "infiniband", "vcrc", "vcrc.valid", *ibmad.field_names())


def _ib_columns() -> tuple[ColumnSpec, ...]:
    from roce.families.ib import mad as ibmad
    from roce.families.ib import native as ib

    out = [*layout_columns("lrh", ib.LRH_LAYOUT), *layout_columns("mad", ibmad.MAD_LAYOUT),
           ("cm", "bool", 1, True), ("ipoib", "bool", 1, True)]
    for _key, layout, _dec, _enc in ibmad.CM_CODECS.values():
        out += layout_columns(layout.name, layout)
    return (*out, ("infiniband", "bool", 1, True), ("vcrc", "int", 16, False),
            ("vcrc.valid", "bool", 1, False), ("ipoib.type", "int", 16, False),
            ("ipoib.reserved", "int", 16, False), ("arp.opcode", "int", 16, False))


_ERF_COLUMNS: tuple[ColumnSpec, ...] = (
    ("erf", "bool", 1, True), ("erf.ts", "int", 64, False), ("erf.types", "int", 8, False),
    ("erf.types.type", "int", 8, False), ("erf.types.ext_header", "int", 8, False),
    ("erf.flags", "int", 8, False), ("erf.rlen", "int", 16, False),
    ("erf.lctr", "int", 16, False), ("erf.wlen", "int", 16, False),
    ("erf.ehdr.types", "string", 0, False))
_LINK_COLUMNS: tuple[ColumnSpec, ...] = (
    ("infiniband_link", "bool", 1, True), ("infiniband_link.op", "int", 4, False),
    ("infiniband_link.fctbs", "int", 12, False), ("infiniband_link.vl", "int", 4, False),
    ("infiniband_link.fccl", "int", 12, False), ("infiniband_link.lpcrc", "int", 16, False))


def _ib_display() -> dict[str, str]:
    from roce.families.ib import mad as ibmad
    from roce.families.ib import native as ib

    return {**ib.DISPLAY, **ibmad.DISPLAY}


def _ib_wireshark() -> dict[str, tuple[str, ...]]:
    from roce.families.ib import mad as ibmad

    return {"infiniband.variant.crc": ("vcrc",), **ibmad.WIRESHARK_NAMES}


def _link_decode(data: bytes, caplen: int | None = None,
                 origlen: int | None = None) -> Any:
    """An InfiniBand link packet (ERF type 25): flow control fields, or why not."""
    from roce.families.ib import native as ib

    w = Walk(OK, 0, L3_NONE, -1, 0, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0)
    try:
        return ib.Decoded(w, ("infiniband_link",), erf.decode_link(data, 0), None, "roce")
    except DecodeError as exc:
        return ib.Decoded(w, (), {"malformed": str(exc)}, exc, "malformed")


def _link_columns(d: Any) -> tuple[str, str, str, str]:
    f = d.fields
    if d.error is not None:
        return "", "", "InfiniBand Link", f"[Malformed: {d.error}]"
    return ("", "", "InfiniBand Link",
            f"Flow Control Op={f['infiniband_link.op']} VL={f['infiniband_link.vl']} "
            f"FCTBS={f['infiniband_link.fctbs']} FCCL={f['infiniband_link.fccl']}")


def register(reg: Any) -> None:
    """Add the built-in rows to ``reg`` (a ``roce.families.registry.Registry``)."""
    reg.add(Handler(ROCE), ("ethertype", ETHERTYPE_IPV4), ("ethertype", ETHERTYPE_IPV6),
            ("ethertype", ETHERTYPE_ROCEV1), ("udp.port", ROCE_PORT),
            *(("linktype", lt) for lt in sorted(ROCE_LINKTYPES)))
    reg.add(Handler("infiniband", decode=_lazy(".ib.native", "decode"),
                    columns=_lazy(".ib.native", "columns"), tree=_lazy(".ib.native", "tree"),
                    fields=_ib_fields, lines=_lazy(".ib.lines", "IbLines"),
                    column_types=_ib_columns, display=_ib_display,
                    wireshark=_ib_wireshark),
            ("linktype", LINKTYPE_INFINIBAND))
    reg.add(Handler("infiniband_link", decode=_link_decode, columns=_link_columns,
                    fields=erf.FIELDS, column_types=_LINK_COLUMNS),
            ("erf.type", erf.ERF_TYPE_INFINIBAND_LINK))
    reg.add(Handler("erf", unwrap=erf.unwrap, skip=erf.skip, skip_batch=erf.skip_batch,
                    fields=erf.FIELDS, layer="erf", title="Extensible Record Format",
                    column_types=_ERF_COLUMNS, lengths=erf.lengths),
            ("linktype", LINKTYPE_ERF))
    from roce.families.base.fields import FLAT_KEYS

    outer = [f"outer.{k}" for h in ("eth", "vlan", "vlan2", "ip", "ipv6", "udp")
             for k in (h, *FLAT_KEYS[h])]
    names = (*tunnels.field_names(), *outer, "outer.ip.options")
    reg.add(replace(tunnels.GRE_HANDLER, fields=names), ("ip.proto", tunnels.IPPROTO_GRE))
    reg.add(tunnels.ERSPAN2_HANDLER, ("gre.proto", tunnels.GRE_ERSPAN2))
    reg.add(tunnels.ERSPAN3_HANDLER, ("gre.proto", tunnels.GRE_ERSPAN3))
    reg.add(tunnels.VXLAN_HANDLER, ("udp.port", tunnels.VXLAN_PORT))
    # INT-MD over UDP (P4.org INT v2.1): telemetry before the BTH, the sink's view inside
    reg.add(intmd.HANDLER, ("udp.port", intmd.INT_PORT))
    # Ultra Ethernet Transport: UDP 4793 (IANA), IP protocol 253 with the entropy header; the
    # reference provider's reading (uet-ref-prov*) by -d or --uet-layout ref-prov
    from roce.families import uet

    spec_udp, spec_ip, *ref_prov = uet.handlers()
    reg.add(spec_udp, ("udp.port", uet.UET_PORT))
    reg.add(spec_ip, ("ip.proto", uet.IPPROTO_UET))
    for h in ref_prov:
        reg.add(h)


_LOADED = [False, False]  # built-in rows registered, entry-point plugins loaded


def registry(plugins: bool = True) -> Registry:
    """The process-wide registry with the built-in families, and (``plugins``) those of the
    ``roce.families`` entry points.  Scanning entry points costs ~15 ms: the plain-RoCE
    paths ask without plugins (a plugin's rows are found on the per-frame path)."""
    if not _LOADED[0]:
        _LOADED[0] = True
        register(REGISTRY)
    if plugins and not _LOADED[1]:
        _LOADED[1] = True
        if may_have_plugins():
            _load_plugins(REGISTRY)
    return REGISTRY


def may_have_plugins() -> bool:
    """Whether an installed distribution may declare a ``roce.families`` entry point: a look
    at the ``entry_points.txt`` of the distributions on ``sys.path`` (where importlib.metadata
    finds them), which spares runs without plugins the ~10 ms import of importlib.metadata.
    True when unsure (a zip on the path, a finder of distributions of another kind)."""
    import os
    import sys
    from importlib.machinery import PathFinder

    if any(getattr(f, "find_distributions", None) is not None and f is not PathFinder
           for f in sys.meta_path):
        return True
    for entry in sys.path:
        where = entry or "."
        if os.path.isfile(where):
            return True
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(where, name, "entry_points.txt"),
                          encoding="utf-8", errors="replace") as fh:
                    if "roce.families" in fh.read():
                        return True
            except OSError:
                pass
    return False


def _load_plugins(reg: Registry) -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group="roce.families"):
        ep.load()(reg)
