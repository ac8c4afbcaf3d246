"""From a frame the RoCE walk called "not RoCE" to the family that decodes it.

``resolve`` follows the registry: the walk's status names the table (unknown link type ->
``linktype``, other IP protocol -> ``ip.proto``, other UDP port -> ``udp.port``, other
EtherType -> ``ethertype``); a tunnel unwraps and the inner frame is walked again (RoCE
first, compiled); a family decodes.  ``record`` turns the result into the decoder's
``Record``; ``line`` into a one-line summary.  Nothing here runs for a frame the compiled
walk decoded as RoCE.

A family reached by an IP protocol or UDP port row (Ultra Ethernet over UDP 4793 or IP
protocol 253) gets its datagram: the bytes after the IP or UDP header up to where that header's
length says it ends (not the Ethernet padding), and the resolution keeps the headers before it
(``carrier``: Ethernet, VLAN, IP, UDP) for the record's fields, tree and addresses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roce import fast
from roce.errors import DecodeError
from roce.families import registry
from roce.families.base.fields import known_headers
from roce.families.registry import Handler, Registry
from roce.locate import NR_ETHERTYPE, NR_LINKTYPE, NR_PORT, NR_PROTO, OK, Walk

MAX_DEPTH = 8  # tunnels inside tunnels; deeper is treated as malformed


@dataclass
class Resolution:
    """``family`` None: inner RoCE (``walk`` is the compiled walk of ``data``)."""

    data: bytes
    linktype: int
    walk: Walk | None
    udp_port: int
    family: Handler | None = None
    outer: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    error: DecodeError | None = None
    # the headers the walk found before a family reached by an ip.proto or udp.port row: their
    # names and flat fields (with Wireshark's either-direction pairs, ip.addr ...)
    carrier: tuple[str, ...] = ()
    carrier_fields: dict[str, Any] = field(default_factory=dict)
    # and the frame those headers begin (``data`` is then its datagram)
    whole: bytes = b""
    # (captured, on the wire) lengths of the frame inside, when a record says them (ERF)
    lengths: tuple[int, int] | None = None


def _row(w: Walk, linktype: int) -> tuple[str, int, int] | None:
    st = w.status
    if st == NR_LINKTYPE:
        return "linktype", linktype, 0
    if st == NR_PROTO:
        return "ip.proto", w.err_a, w.l3_off + w.l3_len
    if st == NR_PORT:
        return "udp.port", w.err_a, w.udp_off + 8
    if st == NR_ETHERTYPE:
        return "ethertype", w.err_a, w.err_offset + 2
    return None


# Carrier headers repeat from packet to packet of a flow (addresses, ports, lengths): their
# bytes map to what they decode to, a few thousand kept.
_CARRIERS: dict[tuple[int, bytes], tuple[tuple[str, ...], dict[str, Any], int]] = {}


def _carrier(data: bytes, w: Walk, linktype: int,
             start: int) -> tuple[tuple[str, ...], dict[str, Any], int]:
    """(header names, flat fields, where the datagram ends) of the headers before ``start``.
    The datagram ends where its UDP or IP length says (the frame's end when that length is
    missing or runs past it: a cut capture, or a bad length); what follows is link padding."""
    key = (linktype, data[:start])
    hit = _CARRIERS.get(key)
    n = len(data)
    if hit is None:
        from roce.families.base.fields import header_fields, pair_fields

        h = known_headers(data, w, linktype)
        f: dict[str, Any] = {}
        header_fields(h, f)
        pair_fields(h, f)
        if "udp" in h:
            end = w.udp_off + h["udp"]["length"]
        elif "ip" in h:
            end = w.l3_off + h["ip"]["len"]
        elif "ipv6" in h:
            end = w.l3_off + w.l3_len + h["ipv6"]["plen"]
        else:
            end = -1
        if len(_CARRIERS) > 4096:
            _CARRIERS.clear()
        hit = _CARRIERS[key] = (tuple(h), f, end)
    names, f, end = hit
    return names, f, n if end < 0 or end > n else max(end, start)


def _outer_fields(data: bytes, w: Walk, linktype: int) -> dict[str, Any]:
    from roce.families.base.fields import header_fields, known_headers

    f: dict[str, Any] = {}
    header_fields(known_headers(data, w, linktype), f)
    return {f"outer.{k}": v for k, v in f.items()}


def resolve(data: bytes, linktype: int, w: Walk, udp_port: int,
            reg: Registry | None = None) -> Resolution | None:
    """Where a non-RoCE frame goes; None when no handler claims it."""
    reg = reg or registry()
    res = Resolution(data, linktype, w, udp_port)
    for depth in range(MAX_DEPTH):
        row = _row(res.walk, res.linktype) if res.walk is not None else None
        handler = reg.lookup(row[0], row[1]) if row is not None else None
        if handler is None:
            return res if depth else None
        table, value, off = row  # type: ignore[misc]
        if handler.name == "roce":
            if table != "udp.port":
                return res if depth else None
            res.udp_port = value
            res.walk = fast.walk(res.data, res.linktype, value)
            return res
        if handler.decode is not None:
            res.family = handler
            if table in ("ip.proto", "udp.port") and res.walk is not None:
                res.carrier, res.carrier_fields, end = _carrier(res.data, res.walk,
                                                                res.linktype, off)
                res.whole, res.data = res.data, res.data[off:end]
            else:
                res.data = res.data[off:] if off else res.data
            return res
        if res.walk is not None and table != "linktype" and not res.outer:
            # the outermost headers only: filters reach them as outer.ip.src ...
            res.outer.append(("outer", _outer_fields(res.data, res.walk, res.linktype)))
        data = res.data
        try:
            while True:
                u = handler.unwrap(data, off)  # type: ignore[misc]
                res.outer.append((u.layer, u.fields))
                if u.lengths is not None:
                    res.lengths = u.lengths
                data, off = u.data, u.offset
                if u.linktype is not None:
                    break
                handler = reg.lookup(*u.next)  # type: ignore[misc]
                if handler is None:
                    raise DecodeError(f"{u.next[0]} 0x{u.next[1]:04x} at byte {off} has no "
                                      "decoder", u.layer, off)
                if handler.decode is not None:
                    res.family, res.data, res.walk = handler, data[off:], None
                    return res
        except DecodeError as exc:
            res.error, res.walk = exc, None
            return res
        res.data, res.linktype = data[off:], u.linktype
        res.walk = fast.walk(res.data, res.linktype, udp_port)
        if res.walk.status == OK or _row(res.walk, res.linktype) is None:
            return res
    res.error = DecodeError(f"more than {MAX_DEPTH} nested encapsulations", "frame", 0)
    return res


def outer_fields(res: Resolution) -> dict[str, Any]:
    f: dict[str, Any] = {}
    for _name, values in res.outer:
        for k, v in values.items():
            f.setdefault(k, v)
    return f


__all__ = ["Resolution", "outer_fields", "resolve"]
