"""Peeling tunnels off whole batches of frames, by the registry's rows: the inner frames of
GRE, ERSPAN II/III and VXLAN for the compiled RoCE scan (``peel``, compiled in
``_peel.pxi`` beside this module, configured with each tunnel's ``SkipRule``; with
``peel_reference`` its pure-Python twin), and the
inner batch of a link-type tunnel such as ERF (``unwrap_batch``).
"""

from __future__ import annotations

from typing import Any

from roce.families import registry
from roce.families.handler import SkipRule

MAX_STEPS = 8  # tunnel headers peeled from one frame at most


def unwrap_batch(batch: Any, handler: Any) -> Any:
    """The batch of inner frames of a link-type tunnel (ERF), or None when the records do
    not all hold whole frames of one link type (those go frame by frame).  When the records
    say their packets' lengths (``Handler.lengths``) the inner batch carries them."""
    if handler.skip_batch is not None:  # the whole batch in one call (ERF: compiled)
        got = handler.skip_batch(batch.datas)
        if got is None or got[1] is None:
            return None
        return _inner_batch(batch, handler, got[0], got[1])
    return _skip_each(batch, handler)


def _inner_batch(batch: Any, handler: Any, datas: list[bytes], linktype: int) -> Any:
    from roce.pcapio import Batch

    if handler.lengths is None:
        return Batch(datas, batch.ts_ns, batch.caplen, batch.origlen, linktype)
    sizes = [handler.lengths(d, len(d) - len(inner)) for d, inner in zip(batch.datas, datas)]
    return Batch([inner[:cap] for inner, (cap, _) in zip(datas, sizes)], batch.ts_ns,
                 [cap for cap, _ in sizes], [orig for _, orig in sizes], linktype)


def _skip_each(batch: Any, handler: Any) -> Any:
    from roce.errors import DecodeError

    datas = []
    linktype = None
    skip = handler.skip
    try:
        for data in batch.datas:
            if skip is not None:
                step = skip(data, 0)
                if step is None:
                    return None
                off, lt = step[0], step[1]
                inner = data[off:]
            else:
                u = handler.unwrap(data, 0)
                lt, inner = u.linktype, u.data[u.offset:]
            if lt is None or (linktype is not None and lt != linktype):
                return None
            linktype = lt
            datas.append(inner)
    except DecodeError:
        return None
    return _inner_batch(batch, handler, datas, linktype)  # type: ignore[arg-type]


def peel(batch: Any, udp_port: int) -> Any:
    """The batch with every tunnelled frame replaced by the frame inside (registry rows),
    for the compiled RoCE scan; frames that are not tunnels, or whose tunnel headers are cut
    or wrong, stay as they are (the per-frame path reports them).  Compiled
    (``roce._fastpath.peel``) when every tunnel row is a built-in tunnel's."""
    from roce.pcapio import Batch

    ext = _compiled_peel()
    if ext is None:
        return peel_reference(batch, udp_port)
    datas = ext.peel(batch.datas, batch.linktype, udp_port)
    _unwrap_rest(batch.datas, datas, batch.linktype, udp_port)
    return Batch(datas, batch.ts_ns, batch.caplen, batch.origlen, batch.linktype)


def _unwrap_rest(before: list[bytes], datas: list[bytes], linktype: int, udp_port: int) -> None:
    """Frames of tunnels whose inner frame is not a suffix of the outer one (INT-MD is cut
    out of the middle of a frame: ``roce/families/intmd.py``): their handler has ``unwrap``
    and no ``skip``, so the skip rules left them as they were; each is replaced in ``datas``
    by the frame its handler rebuilds.  Only frames the skips left unchanged are walked."""
    from roce import fast
    from roce.errors import DecodeError
    from roce.locate import NR_PORT, NR_PROTO

    tables = registry().tables
    by_proto, by_port = tables["ip.proto"], tables["udp.port"]
    if not any(h.unwrap is not None and h.skip is None
               for rows in (by_proto, by_port) for h in rows.values()):
        return
    walk = fast.walk
    for i, data in enumerate(datas):
        if data is not before[i]:
            continue
        w = walk(data, linktype, udp_port)
        if w.status == NR_PROTO:
            handler, off = by_proto.get(w.err_a), w.l3_off + w.l3_len
        elif w.status == NR_PORT:
            handler, off = by_port.get(w.err_a), w.udp_off + 8
        else:
            continue
        if handler is None or handler.skip is not None or handler.unwrap is None:
            continue
        try:
            u = handler.unwrap(data, off)
        except DecodeError:  # cut or wrong: the per-frame path reports it
            continue
        if u.linktype == linktype:
            datas[i] = u.data[u.offset:]


_PEEL_STATE: list[Any] = [None]  # the rows the compiled peel was last configured with


def _compiled_peel() -> Any:
    """The compiled peel configured with the registry's tunnel rules, or None when some
    tunnel row's handler steps over its header in Python only (a ``skip`` that is not a
    ``SkipRule``) or the rules exceed the compiled tables."""
    from roce import fast

    ext = getattr(fast, "_ext", None)
    if ext is None or not hasattr(ext, "peel"):
        return None
    tables = registry().tables
    rules: list[SkipRule] = []
    index: dict[int, int] = {}  # id(rule) -> its number
    rows: dict[str, dict[int, int]] = {}
    for table in ext.PEEL_TABLES:
        rows[table] = {}
        for value, handler in tables[table].items():
            rule = handler.skip
            if rule is None:
                continue
            if not isinstance(rule, SkipRule):  # only the reference knows this skip
                return None
            if id(rule) not in index:
                index[id(rule)] = len(rules)
                rules.append(rule)
            rows[table][value] = index[id(rule)]
    limits = ext.PEEL_LIMITS
    if (len(rules) > limits["rules"] or any(len(r) > limits["rows"] for r in rows.values())
            or any(len(r.checks) > limits["checks"] or len(r.extras) > limits["extras"]
                   or len(r.direct) > limits["direct"] or r.table not in ("", *ext.PEEL_TABLES)
                   for r in rules)):
        return None
    key = (tuple(rules), tuple((t, tuple(sorted(r.items()))) for t, r in rows.items()))
    if _PEEL_STATE[0] != key:
        ext.peel_configure({**rows, "rules": [
            (r.size, r.checks, r.extras, r.inner, r.next_at, r.direct, r.table)
            for r in rules]})
        _PEEL_STATE[0] = key
    return ext


def peel_reference(batch: Any, udp_port: int) -> Any:
    """Pure-Python twin of ``roce._fastpath.peel`` (through ``Handler.skip``)."""
    from roce import fast
    from roce.locate import NR_PORT, NR_PROTO
    from roce.pcapio import Batch

    tables = registry().tables
    by_proto, by_port = tables["ip.proto"], tables["udp.port"]
    walk = fast.walk
    datas = list(batch.datas)
    linktype = batch.linktype
    for i, data in enumerate(datas):
        w = walk(data, linktype, udp_port)
        st = w.status
        if st == NR_PROTO:
            handler, off = by_proto.get(w.err_a), w.l3_off + w.l3_len
        elif st == NR_PORT:
            handler, off = by_port.get(w.err_a), w.udp_off + 8
        else:
            continue
        inner_lt = None
        for _step in range(MAX_STEPS):  # as many as the compiled twin takes
            if handler is None or handler.skip is None:
                break
            step = handler.skip(data, off)
            if step is None:
                break
            off, inner_lt, row = step
            if inner_lt is not None:
                break
            handler = tables[row[0]].get(row[1])
        if inner_lt == linktype:  # one link type per batch: Ethernet in Ethernet
            datas[i] = data[off:]
    _unwrap_rest(list(batch.datas), datas, linktype, udp_port)
    return Batch(datas, batch.ts_ns, batch.caplen, batch.origlen, linktype)


def starts_tunnel(batch: Any, udp_port: int) -> bool:
    """Whether the batch's first frame is a registered tunnel's: one walk per batch decides
    to peel the batch before the compiled scan."""
    from roce import fast
    from roce.locate import NR_PORT, NR_PROTO

    if not batch.datas:
        return False
    w = fast.walk(batch.datas[0], batch.linktype, udp_port)
    tables = registry(plugins=False).tables
    if w.status == NR_PROTO:
        handler = tables["ip.proto"].get(w.err_a)
    elif w.status == NR_PORT:
        handler = tables["udp.port"].get(w.err_a)
    else:
        return False
    return handler is not None and (handler.skip is not None or handler.unwrap is not None)
