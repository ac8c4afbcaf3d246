"""One-line output for batches of a link type a registered family owns (``roce decode``).

A family with a batch formatter (``Handler.lines``, e.g. native InfiniBand's compiled scan)
formats the batch; otherwise every frame goes through the decoder's per-frame path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import registry

_FORMATTERS: dict[tuple[int, str], Any] = {}


def _unwrap_batch(batch: Any, handler: Any) -> Any:
    """The batch of inner frames of a link-type tunnel (ERF), or None when the records do
    not all hold whole frames of one link type (those go frame by frame)."""
    from ..errors import DecodeError
    from ..pcapio import Batch

    datas = []
    linktype = None
    try:
        for data in batch.datas:
            u = handler.unwrap(data, 0)
            if u.linktype is None or (linktype is not None and u.linktype != linktype):
                return None
            linktype = u.linktype
            datas.append(u.data[u.offset:])
    except DecodeError:
        return None
    return Batch(datas, batch.ts_ns, batch.caplen, batch.origlen, linktype)


def batch_lines(batch: Any, first_number: int, summ: Any, limit: int,
                slow: Callable[[int, str], str]) -> list[str]:
    handler = registry().lookup("linktype", batch.linktype)
    if handler is not None and handler.unwrap is not None:
        inner = _unwrap_batch(batch, handler)
        if inner is not None:  # every record held a frame of one link type
            return batch_lines(inner, first_number, summ, limit, slow)
    if handler is None or handler.lines is None:
        index = range(min(len(batch.datas), limit))
        texts = summ.times.batch(batch.ts_ns, index)
        return [slow(i, tt) for i, tt in zip(index, texts)]
    key = (id(summ), handler.name)
    fmt = _FORMATTERS.get(key)
    if fmt is None:
        _FORMATTERS.clear()  # one run at a time: formatters hold per-run caches
        fmt = _FORMATTERS[key] = handler.lines(summ)
    return fmt.lines(batch, first_number, limit, slow)


def peel(batch: Any, udp_port: int) -> Any:
    """The batch with every tunnelled frame replaced by the frame inside (registry rows,
    ``Handler.skip``), for the compiled RoCE scan; frames that are not tunnels, or whose
    tunnel headers are cut or wrong, stay as they are (the per-frame path reports them)."""
    from .. import fast
    from ..locate import NR_PORT, NR_PROTO
    from ..pcapio import Batch

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
        while handler is not None and handler.skip is not None:
            step = handler.skip(data, off)
            if step is None:
                break
            off, inner_lt, row = step
            if inner_lt is not None:
                break
            handler = tables[row[0]].get(row[1])
        if inner_lt == linktype:  # one link type per batch: Ethernet in Ethernet
            datas[i] = data[off:]
    return Batch(datas, batch.ts_ns, batch.caplen, batch.origlen, linktype)


def starts_tunnel(batch: Any, udp_port: int) -> bool:
    """Whether the batch's first frame is a registered tunnel's: one walk per batch decides
    to peel the batch before the compiled scan."""
    from .. import fast
    from ..locate import NR_PORT, NR_PROTO

    if not batch.datas:
        return False
    w = fast.walk(batch.datas[0], batch.linktype, udp_port)
    tables = registry().tables
    if w.status == NR_PROTO:
        handler = tables["ip.proto"].get(w.err_a)
    elif w.status == NR_PORT:
        handler = tables["udp.port"].get(w.err_a)
    else:
        return False
    return handler is not None and handler.skip is not None
