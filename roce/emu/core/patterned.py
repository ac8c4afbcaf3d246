"""A memory region that holds a seeded pattern without holding its bytes.

A run that only copies seeded slots (WRITE and SEND from a requester's buffer to a
responder's: ``roce.emu.core.payload``) needs neither buffer in full: the source's bytes are
a function of (seed, QP, side, position), made a frame's payload at a time as frames are
built, and the destination only has to end up holding the source's pattern.  ``Patterned``
is such a region's content: it starts as the pattern of ``side`` (``base``) and records what
is written to it -- a write that carries ``target``'s pattern at the same offsets (what a
correct WRITE or SEND of the same slot carries) as a range (``good``: sorted boundaries,
merged, so an in-order message is one range), any other write as its bytes (``odd``), later
writes over earlier ones as memory would.  So it is exact memory, of O(ranges) size: reading
any range gives what a ``bytearray`` would hold (``read``), and a corrupted, misplaced,
duplicated or missing byte shows as a slot not holding what ``payload.Expected`` says
(``Expected.mismatched`` asks ``whole`` first, so a slot written in full with the right
pattern is checked without regenerating it).

``MemoryRegion.view`` hands out a ``PatternView`` of it where it hands out a memoryview of a
``bytearray``: slicing reads, slice assignment writes, so the transport's code is the same
for both kinds of region.

A piece is made once where it can be: the last ``RECENT_PIECES`` pieces made, by any region,
are kept, and the responder's region checking a payload finds there the piece of the same
stream the requester's region made when it sent it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from roce.emu.core.payload import CHUNK, PIECE_WORDS, expand, label_seed, seeded_range, slot_label
from roce.fast import same_bytes

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any


# The pieces made lately, by (stream seed, piece, length), oldest out first: a requester's
# region makes each piece of its payload as it sends it, and the responder's region, which
# checks that a WRITE or SEND carried that pattern (``write``), asks for the same piece of
# the same stream a round trip later; it finds it here instead of making it again.  Bounded
# by ``RECENT_PIECES`` (x 4 KiB), whatever the run: a piece evicted is made again.
RECENT_PIECES = 1024
# a piece's bytes, as the per-packet arithmetic reads them (a C constant when compiled)
_CHUNK = CHUNK
_RECENT: dict[tuple[int, int, int], bytes] = {}
_ORDER: list = [None] * RECENT_PIECES  # the keys of _RECENT, a ring: _NEXT is the oldest
_NEXT = [0]


def _remember(key: tuple[int, int, int], piece: bytes) -> None:
    at = _NEXT[0]
    old = _ORDER[at]
    if old is not None:  # (pop: runs in two threads at once lose an entry, never a byte)
        _RECENT.pop(old, None)
    _ORDER[at] = key
    _RECENT[key] = piece
    _NEXT[0] = (at + 1) % RECENT_PIECES


def _add(edges: list[int], a: int, b: int) -> None:
    """Add [a, b) to the ranges whose boundaries ``edges`` lists (even: start, odd: end)."""
    i, j = bisect_left(edges, a), bisect_right(edges, b)
    edges[i:j] = ([a] if i % 2 == 0 else []) + ([b] if j % 2 == 0 else [])


def _remove(edges: list[int], a: int, b: int) -> None:
    """Remove [a, b) from the ranges ``edges`` lists."""
    i, j = bisect_left(edges, a), bisect_right(edges, b)
    edges[i:j] = ([a] if i % 2 else []) + ([b] if j % 2 else [])


def _covers(edges: list[int], a: int, b: int) -> bool:
    """Whether one range of ``edges`` holds all of [a, b)."""
    i = bisect_right(edges, a)
    return i % 2 == 1 and edges[i] >= b


def _touches(edges: list[int], a: int, b: int) -> bool:
    """Whether any range of ``edges`` meets [a, b)."""
    return bisect_right(edges, a) % 2 == 1 or bisect_left(edges, b) != bisect_right(edges, a)


class Patterned:
    """The content of a region of ``slots`` slots of ``slot`` bytes that starts as the
    pattern of (``seed``, ``qp``, ``side``) and expects copies of ``target``'s (None: any
    write is recorded as bytes)."""

    __slots__ = ("seed", "qp", "side", "target", "slot", "length", "good", "odd", "writes",
                 "_own_at", "_own", "_target_at", "_target", "_seeds")

    def __init__(self, seed: int, qp: int, side: str, slot: int, slots: int,
                 target: str | None = None) -> None:
        self.seed, self.qp, self.side, self.target = seed, qp, side, target
        self.slot = slot
        self.length = slot * slots
        self.good: list[int] = []  # ranges holding target's pattern
        self.odd: list[tuple[int, bytes]] = []  # other writes, in order, later ones win
        self.writes = 0
        # the last piece made of each side (where it starts in the region, the piece): a
        # frame smaller than a piece (an MTU under 4096) reuses it, rather than making it
        # again up to its own end; the requester reads its own side, the responder checks
        # the target's
        self._own_at = -1
        self._own = b""
        self._target_at = -1
        self._target = b""
        self._seeds: dict[tuple[str, int], int] = {}  # (side, slot) -> its stream's seed

    def _make(self, side: str, j: int, k: int, n: int) -> bytes:
        """The first ``n`` bytes of piece ``k`` of slot ``j`` of ``side``'s pattern (what
        ``payload.piece`` makes, the slot's seed hashed once), from the pieces made lately
        when one of them is it."""
        seed = self._seeds.get((side, j))
        if seed is None:
            seed = self._seeds[side, j] = label_seed(slot_label(self.seed, self.qp, side, j))
        key = (seed, k, n)
        recent = _RECENT  # (a dictionary: looked up in C in the compiled form)
        got = recent.get(key)
        if got is None:
            got = expand(seed, k * PIECE_WORDS, n)
            _remember(key, got)
        return got

    def piece_at(self, side: str, off: int, n: int) -> bytes | None:
        """The piece of ``side``'s pattern that holds all of [off, off + n) of the region
        (it starts at the region's ``off - off % slot % CHUNK``), when one piece does and
        ``side`` is the region's own or its target; else None."""
        o = off  # the arithmetic's own names: C integers in the compiled form
        m = n
        chunk = _CHUNK
        slot = self.slot
        j = o // slot
        lo = o - j * slot
        plo = lo % chunk
        if plo + m > chunk or lo + m > slot:
            return None
        at = o - plo  # where the piece starts: names it among the region's
        size = slot - (lo - plo)  # the piece's length: a whole one but at the slot's end
        if size > chunk:
            size = chunk
        if side == self.side:
            if self._own_at != at:
                self._own = self._make(side, j, lo // chunk, size)
                self._own_at = at
            return self._own
        if side == self.target:
            if self._target_at != at:
                self._target = self._make(side, j, lo // chunk, size)
                self._target_at = at
            return self._target
        return None

    def pattern(self, side: str, off: int, n: int) -> bytes:
        """Bytes [off, off + n) of the region had it started as ``side``'s pattern."""
        got = self.piece_at(side, off, n)
        if got is not None:  # within one piece: a frame's payload
            o = off  # C integers in the compiled form, as in ``piece_at``
            m = n
            plo = o % self.slot % _CHUNK
            return got[plo:plo + m]
        slot = self.slot
        j, lo = divmod(off, slot)
        if lo + n <= slot:
            return seeded_range(slot_label(self.seed, self.qp, side, j), lo, n)
        out = bytearray()
        while n > 0:
            m = min(slot - lo, n)
            out += seeded_range(slot_label(self.seed, self.qp, side, j), lo, m)
            n -= m
            j, lo = j + 1, 0
        return bytes(out)

    def read(self, off: int, n: int) -> bytes:
        """What bytes [off, off + n) of the region hold."""
        out = self.pattern(self.side, off, n)
        if not self.good and not self.odd:
            return out
        buf = bytearray(out)
        end = off + n
        good = self.good
        for k in range(0, len(good), 2):
            a, b = max(good[k], off), min(good[k + 1], end)
            if a < b:
                buf[a - off:b - off] = self.pattern(self.target, a, b - a)  # type: ignore[arg-type]
        for o, data in self.odd:
            a, b = max(o, off), min(o + len(data), end)
            if a < b:
                buf[a - off:b - off] = data[a - o:b - o]
        return bytes(buf)

    def read_at(self, off: int, n: int) -> tuple[bytes, int]:
        """What bytes [off, off + n) of the region hold, as (buffer, start): the piece of
        its own pattern that holds them and where they start in it, when one piece does and
        nothing was written over the region (a requester's payload, put into its frame
        without a slice); else (the bytes, 0)."""
        if not self.good and not self.odd:
            got = self.piece_at(self.side, off, n)
            if got is not None:
                o = off  # C integers in the compiled form, as in ``piece_at``
                return got, o % self.slot % _CHUNK
        return self.read(off, n), 0

    def write(self, off: int, data: Any) -> None:
        """Bytes [off, off + len(data)) now hold ``data``."""
        n = len(data)
        if not n:
            return
        self.writes += 1
        o = off  # C integers in the compiled form, as in ``piece_at``
        end = o + n
        if self.odd:  # what this write covers no longer holds the odd bytes
            self.odd = [p for at, d in self.odd for p in _outside(at, d, off, end)]
        target = self.target
        same = False
        if target is not None:
            got = self.piece_at(target, off, n)
            if got is not None:  # a frame's payload: compared in place, no slice made
                same = got.startswith(data, o % self.slot % _CHUNK)
            else:  # bytes compare by memcmp, a memoryview item by item
                same = bytes(data) == self.pattern(target, off, n)
        if same:
            self._holds_target(o, end)
        else:
            _remove(self.good, o, end)
            self.odd.append((off, bytes(data)))

    def write_from(self, off: int, frame: bytes, at: int, n: int) -> None:
        """``write(off, frame[at:at + n])``: a received payload, compared in place with the
        target's pattern; sliced out of its frame only when it is something else."""
        if n and not self.odd and self.target is not None:
            o = off  # C integers in the compiled form, as in ``piece_at``
            m = n
            got = self.piece_at(self.target, off, n)
            if got is not None and same_bytes(got, o % self.slot % _CHUNK, frame, at, m):
                self.writes += 1
                self._holds_target(o, o + m)
                return
        self.write(off, frame[at:at + n])

    def _holds_target(self, o: int, end: int) -> None:
        """[o, end) now holds the target's pattern (a write that carried it)."""
        good = self.good
        if good:
            last = good[-1]
            if last == o:  # the next bytes of the last range: in order
                good[-1] = end
                return
            if good[-2] <= o and end <= last:  # within the last range: a slot written again
                return
        if not _covers(good, o, end):  # (a slot written again holds them already)
            _add(good, o, end)

    def whole(self, j: int) -> str | None:
        """The side whose initial pattern slot ``j`` holds, byte for byte, when that is
        known without reading it (untouched: its own side; written in full with the
        target's pattern: the target); None otherwise."""
        a, b = j * self.slot, (j + 1) * self.slot
        if any(o < b and a < o + len(d) for o, d in self.odd):
            return None
        if _covers(self.good, a, b):
            return self.target
        if not _touches(self.good, a, b):
            return self.side
        return None

    def view(self, off: int, n: int) -> PatternView:
        return PatternView(self, off, n)


def _outside(o: int, d: bytes, a: int, b: int) -> list[tuple[int, bytes]]:
    """The parts of the write of ``d`` at ``o`` outside [a, b)."""
    end = o + len(d)
    if end <= a or b <= o:
        return [(o, d)]
    parts = []
    if o < a:
        parts.append((o, d[:a - o]))
    if b < end:
        parts.append((b, d[b - o:]))
    return parts


class PatternView:
    """Bytes [off, off + n) of a ``Patterned`` region, as a memoryview of a buffer would be
    used: ``len``, slices (read now), slice assignment (a write), ``bytes``."""

    __slots__ = ("content", "off", "n")

    def __init__(self, content: Patterned, off: int, n: int) -> None:
        self.content, self.off, self.n = content, off, n

    def __len__(self) -> int:
        return self.n

    def span(self, key: Any) -> tuple[int, int]:
        """The range [lo, hi) of the view that the slice ``key`` names."""
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a pattern view takes contiguous slices")
        lo, hi, _ = key.indices(self.n)
        return lo, max(hi, lo)

    def __getitem__(self, key: Any) -> bytes:
        if type(key) is slice and key.step is None and type(key.start) is int \
                and type(key.stop) is int and 0 <= key.start <= key.stop <= self.n:
            # ``take``'s slices (a frame's payload): what ``span`` would find, found sooner
            return self.content.read(self.off + key.start, key.stop - key.start)
        lo, hi = self.span(key)
        return self.content.read(self.off + lo, hi - lo)

    def part(self, lo: int, hi: int) -> bytes:
        """``self[lo:hi]`` without the slice object (``memory.take``, per packet sent)."""
        if 0 <= lo <= hi <= self.n:
            a = lo  # C integers in the compiled form
            b = hi
            return self.content.read(self.off + a, b - a)
        return self[lo:hi]

    def __setitem__(self, key: Any, data: Any) -> None:
        lo, hi = self.span(key)
        if len(data) != hi - lo:
            raise ValueError(f"{len(data)} bytes do not fit a range of {hi - lo}")
        self.content.write(self.off + lo, data)

    def __bytes__(self) -> bytes:
        return self.content.read(self.off, self.n)

    def __eq__(self, other: object) -> bool:
        return bytes(self) == other
