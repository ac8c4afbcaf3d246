"""One-line output for batches of a link type a registered family owns (``roce decode``).

A family with a batch formatter (``Handler.lines``, e.g. native InfiniBand's compiled scan)
formats the batch; otherwise every frame goes through the decoder's per-frame path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roce.families import registry
from roce.families.peel import unwrap_batch

_FORMATTERS: dict[tuple[int, str], Any] = {}


def batch_lines(batch: Any, first_number: int, summ: Any, limit: int,
                slow: Callable[[int, str], str]) -> list[str]:
    handler = registry().lookup("linktype", batch.linktype)
    if handler is not None and handler.unwrap is not None:
        inner = unwrap_batch(batch, handler)
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
