"""Frames in, columns out: how both flow engines take frames that are not a capture file.

``pcapio.Frame`` objects (or Ethernet frames as plain ``bytes``) become columns of at most
``n`` frames of one link type, the shape ``pcapio.Batch`` has.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from roce import locate

__all__ = ["frame_columns"]


def frame_columns(frames: Iterable[Any], n: int) -> Iterator[tuple[list[bytes], Sequence[int],
                                                                  Sequence[int] | None,
                                                                  Sequence[int], int]]:
    """``Frame`` objects (or Ethernet frames as bytes) as columns of at most ``n`` frames of
    one link type: (datas, ts_ns, caplens or None for bytes, origlens, linktype)."""
    it = iter(frames)
    while chunk := list(islice(it, n)):
        if isinstance(chunk[0], (bytes, bytearray, memoryview)):
            datas = [bytes(d) for d in chunk]
            yield datas, [0] * len(datas), None, list(map(len, datas)), locate.LINKTYPE_ETHERNET
            continue
        datas, tss, caps, lens, lts, _ = zip(*chunk)  # Frame fields as columns, in C
        count = len(chunk)
        if lts.count(lts[0]) == count:
            yield list(datas), tss, caps, lens, lts[0]
            continue
        # A pcapng file may mix link types: each run of one link type on its own.
        start = 0
        while start < count:
            end = start + 1
            while end < count and lts[end] == lts[start]:
                end += 1
            yield (list(datas[start:end]), tss[start:end], caps[start:end], lens[start:end],
                   lts[start])
            start = end
