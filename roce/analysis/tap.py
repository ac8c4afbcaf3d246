"""What the flow engine leaves to others: a ``CaptureReader`` stand-in that hands the engine
the reader's records and shows the blocks in which the engine found frames that are not RoCE
to a side analysis (PFC and PAUSE accounting, UET's PDCs).

The engine counts such frames (``not_roce``) but does not keep them; a side analysis sees
only the records or batches in which that count moved, numbered as the engine numbers
frames, so a capture of plain RoCE costs the taps nothing but a comparison per block."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from roce.pcapio import Batch


class Side(Protocol):
    """An analysis fed the blocks the engine found frames that are not RoCE in."""

    def scan_records(self, buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                     linktype: int | None, base: int, count: int) -> None:
        """Records ``buf[pos:end]`` (pcap record headers and frames), the first numbered
        ``base + 1``; ``count`` of them are not RoCE."""

    def scan_batch(self, batch: Batch, base: int) -> None:
        """A batch of frames, the first numbered ``base + 1``."""


class Tap:
    """The reader as the flow engine sees it, with ``side`` shown what is not RoCE."""

    def __init__(self, reader: Any, analyzer: Any, side: Side) -> None:
        self._reader = reader
        self._an = analyzer
        self._side = side

    def can_scan_records(self) -> bool:
        return bool(self._reader.can_scan_records())

    def scan_records(self, consume: Callable[..., tuple[int, int]],
                     *args: Any) -> Iterator[int]:
        an, side = self._an, self._side

        def tapped(buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                   linktype: int | None) -> tuple[int, int]:
            base, other = an.frames, an.not_roce
            new, status = consume(buf, pos, end, big_endian, frac_mul, linktype)
            if an.not_roce != other:
                side.scan_records(buf, pos, new, bool(big_endian), frac_mul, linktype, base,
                                  an.not_roce - other)
            return new, status

        return self._reader.scan_records(tapped, *args)

    def batches(self, n: int) -> Iterator[Batch]:
        an = self._an
        for batch in self._reader.batches(n):
            base, other = an.frames, an.not_roce
            yield batch
            if an.not_roce != other:
                self._side.scan_batch(batch, base)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


__all__ = ["Side", "Tap"]
