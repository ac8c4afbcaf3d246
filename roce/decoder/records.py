"""Decoder records, one-line summaries and ``-V`` trees for frames a family or tunnel took.

``roce.decoder.decode`` calls ``record`` for every frame its compiled walk did not decode
as RoCE and that is not malformed RoCE; ``None`` back means "not mine" (the decoder then
says why the frame is not RoCE, as before).  Inner RoCE of a tunnel is decoded by the
decoder's own RoCE path; the tunnel layers' fields (``erspan.*``, ``gre.*``, ``vxlan.*``,
``erf.*``) and the outermost headers (``outer.ip.src`` ...) are added to its fields.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any

from roce.families import dispatch, registry
from roce.families.base.fields import FLAT_KEYS
from roce.families.base.summary import source_destination
from roce.pcapio import Frame

NS = 1_000_000_000
HIDDEN = object()  # a record the caller asked to hide (--only-roce)


def _frame_fields(number: int, ts: int, rel: int, delta: int, caplen: int,
                  origlen: int) -> dict[str, Any]:
    return {"frame.number": number, "frame.time_epoch": ts / NS,
            "frame.time_relative": rel / NS, "frame.time_delta": delta / NS,
            "frame.len": origlen, "frame.cap_len": caplen}


def record(number: int, ts: int, rel: int, delta: int, fr: Any, w: Any, udp_port: int,
           only_roce: bool, record_type: Any, decode_frames: Any,
           res: dispatch.Resolution | None = None) -> Any:
    """The Record of a frame a registered family or tunnel claims; None if none does;
    ``HIDDEN`` if it is to be hidden.  The decoder hands over its ``Record`` class and its
    ``decode_frames`` (for a tunnel's inner RoCE): this module does not import the
    decoder, the decoder imports it.  ``res``: the frame's resolution when the caller has
    it already (``carried_columns``)."""
    Record = record_type  # noqa: N806 - the class, by its own name

    data, caplen, origlen, linktype = fr[0], fr[2], fr[3], fr[4]
    if res is None:
        res = dispatch.resolve(data, linktype, w, udp_port)
    if res is None:
        return None
    outer = dispatch.outer_fields(res)
    whole = fr  # the frame a family over IP or UDP came in: the record's (its -V, its -x)
    if res.lengths is not None and res.carrier:  # ERF around a family over IP or UDP
        caplen, origlen = res.lengths
        whole = Frame(res.whole[:caplen], ts, caplen, origlen, res.linktype,
                      fr[5] if len(fr) > 5 else 0)
        n = len(res.data)
        inner = Frame(res.data, ts, n, n + origlen - caplen, res.linktype, whole[5])
    elif res.lengths is not None:  # a record that says its packet's lengths (ERF): the frame's
        caplen, origlen = res.lengths
        inner = Frame(res.data[:caplen], ts, caplen, origlen, res.linktype,
                      fr[5] if len(fr) > 5 else 0)
    else:
        inner = Frame(res.data, ts, len(res.data), len(res.data) + origlen - caplen,
                      res.linktype, fr[5] if len(fr) > 5 else 0)
    if res.error is not None:
        if only_roce:
            return HIDDEN
        f = _frame_fields(number, ts, rel, delta, caplen, origlen)
        f.update(outer)
        kind = "truncated" if caplen < origlen else "malformed"
        f[kind] = str(res.error)
        rec = Record(number, ts, rel, delta, fr, w, (), f, res.error, kind, udp_port, {})
        rec.outer = res.outer
        return rec
    if res.family is None:  # inner RoCE (or an inner frame nobody claims)
        rec = next(decode_frames([inner], res.udp_port, only_roce), None)
        if rec is None:
            return HIDDEN
        rec.number, rec.ts_ns, rec.rel_ns, rec.delta_ns = number, ts, rel, delta
        rec.fields.update(_frame_fields(number, ts, rel, delta, caplen, origlen))
        rec.fields.update(outer)
        rec.outer = res.outer
        return rec
    d = res.family.decode(res.data, inner.caplen, inner.origlen)  # type: ignore[misc]
    if only_roce and d.kind == "other":
        return HIDDEN
    f = _frame_fields(number, ts, rel, delta, caplen, origlen)
    f.update(outer)
    f.update(res.carrier_fields)  # the Ethernet / IP / UDP a family over IP or UDP came in
    f.update(d.fields)
    # over IP or UDP the record is the whole frame (its -V frame block and -x dump)
    rec = Record(number, ts, rel, delta, whole if res.carrier else inner, d.walk,
                 (*res.carrier, *d.layers), f, d.error, d.kind, udp_port, {})
    rec.family, rec.decoded, rec.outer = res.family, d, res.outer
    return rec


def columns(rec: Any) -> tuple[str, str, str, str, str]:
    """(source, destination, protocol, Info, colour) of a family record."""
    if rec.family is None or rec.family.columns is None:
        return "", "", "Frame", f"[Malformed: {rec.message}]", ""
    src, dst, proto, info = rec.family.columns(rec.decoded)
    if not src and not dst:  # a family over IP or UDP: the carrier's addresses
        src, dst = source_destination(rec.fields)
    return src, dst, proto, info, ""


# the fields source_destination reads: a family's own decoding rarely has any
_ADDRESSES = frozenset(("ip.src", "ipv6.src", "grh.sgid", "eth.src"))


def carried_columns(fr: Any, w: Any, udp_port: int,
                    only_roce: bool) -> tuple[Any, dispatch.Resolution | None]:
    """The one-line path for a family over IP or UDP: its columns straight from its decoding,
    the record's own (``columns``) without building the record.  Returns (columns or
    ``HIDDEN`` or None, the resolution): None with a resolution means "take the record
    path with it" (tunnels, errors, families of their own link type)."""
    res = dispatch.resolve(fr[0], fr[4], w, udp_port)
    if res is None:
        return None, None
    family = res.family
    if family is None or res.error is not None or not res.carrier or family.columns is None \
            or res.lengths is not None:  # ERF: the record path says the packet's lengths
        return None, res
    n = len(res.data)
    d = family.decode(res.data, n, n + fr[3] - fr[2])  # type: ignore[misc]
    if only_roce and d.kind == "other":
        return HIDDEN, res
    src, dst, proto, info = family.columns(d)
    if not src and not dst:  # as the record's fields: the family's own, then the carrier's
        f = d.fields
        src, dst = source_destination(
            ChainMap(f, res.carrier_fields) if _ADDRESSES.intersection(f)
            else res.carrier_fields)
    return (src, dst, proto, info, ""), res


def _outer_lines(rec: Any) -> list[str]:
    out = []
    for name, values in rec.outer or ():
        if name == "outer":  # the outermost Ethernet / IP / UDP headers, as the tree shows
            out += _outermost_lines(values)
            continue
        layer_titles, field_titles = _titles()
        out.append(layer_titles.get(name, name))
        out += [f"    {field_titles.get(k, k.split('.', 1)[1])}: {v}" for k, v in values.items()
                if "." in k]
    return out


def _outermost_lines(values: dict[str, Any]) -> list[str]:
    """``outer.ip.src`` ... as blocks titled like the decoder's tree (``roce.headers``)."""
    from roce.families.base.fields import FLAT_KEYS
    from roce.headers import LAYOUTS, TITLES

    out = []
    for header in ("eth", "vlan", "vlan2", "ip", "ipv6", "udp"):
        if f"outer.{header}" not in values:
            continue
        base = "vlan" if header == "vlan2" else header
        out.append(f"Outer {TITLES[base]}")
        out += [f"    {f.title}: {values[f'outer.{key}']}"
                for f, key in zip(LAYOUTS[base].fields, FLAT_KEYS[header])
                if f"outer.{key}" in values]
    return out


_TITLES: dict[tuple[int, ...], tuple[dict[str, str], dict[str, str]]] = {}


def _titles() -> tuple[dict[str, str], dict[str, str]]:
    """Display names of the layers the registered tunnels unwrap and of their fields (from
    each handler's ``title`` and ``layouts``), made once per set of handlers."""
    handlers = registry().handlers.values()
    key = tuple(map(id, handlers))
    if key not in _TITLES:
        layers: dict[str, str] = {}
        fields: dict[str, str] = {}
        for h in handlers:
            if h.layer and h.title:
                layers[h.layer] = h.title
            for prefix, layout in h.layouts:
                fields.update((f"{prefix}.{f.name}", f.title) for f in layout.fields)
        _TITLES.clear()
        _TITLES[key] = (layers, fields)
    return _TITLES[key]


_TREE: list[Any] = []  # roce.families.base.tree, imported at the first -V tree


def render(rec: Any) -> str:
    """The ``-V`` tree of a record with outer layers or of a family record."""
    if not _TREE:
        from roce.families.base import tree as loaded

        _TREE.append(loaded)
    tree = _TREE[0]

    outer = _outer_lines(rec)
    if rec.family is None and rec.kind in ("roce", "truncated") and "bth" in rec.fields:
        text = tree.render(rec)
        cut = text.index("\n", text.index("[Protocols in frame:")) + 1  # after the frame block
        return text[:cut] + "".join(line + "\n" for line in outer) + text[cut:]
    lines = [tree._frame_lines(rec), *outer]
    carrier = tuple(h for h in rec.layers if h in FLAT_KEYS)
    if rec.family is not None and carrier:  # Ethernet / IP / UDP before the family
        lines.append(tree.headers_text(carrier, rec.fields).rstrip("\n"))
    if rec.family is not None and rec.family.tree is not None:
        lines += rec.family.tree(rec.decoded, rec.frame[0])
    if rec.error is not None:
        lines.append(f"[{'Malformed Packet' if rec.kind == 'malformed' else 'Note'}: "
                     f"{rec.message}]")
    return "\n".join(lines) + "\n\n"
