"""The seeded contents of a workload's message buffers, and what they must hold at the end.

A workload (``roce emulate``, on the simulated fabric or across a real link) gives each QP a
buffer of ``slots`` message slots on each side: ``local`` at the requester, ``remote`` at
the responder; message ``i`` uses slot ``i % slots``.  Every slot starts with bytes drawn
from a generator seeded by (seed, QP, side, slot), produced in chunks, so a buffer is filled
in place and never needs a second copy of itself.

``Expected`` follows the operations without holding any data: a slot is "the initial
bytes of slot (side, j), with these first 8 bytes" -- WRITE and SEND copy a slot, READ
copies one back, an atomic changes 8 bytes.  ``matches`` regenerates what a buffer must
hold, chunk by chunk, and compares it with the buffer: memory stays bounded by one chunk
whatever the message size.  Both ends of a real link compute the same expectation from the
seed (``roce.emu.real.remote``), so nothing but the verdict is shipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

# bytes of one piece of a pattern: one path MTU of 4096, so a frame's payload is made from
# one or two pieces (a piece's bytes are a prefix of any longer expansion of its seed: a range
# costs no more than the piece ends it reaches)
CHUNK = 4096
MAX_SLOTS = 4
SLOT_BUDGET = 64 << 20  # bytes of slots per side of a QP; larger messages get fewer slots
HEAD = 8  # bytes an atomic touches; also the smallest slot

# A stream's bytes are splitmix64's outputs (Steele, Lea and Flood, "Fast splittable
# pseudorandom number generators", OOPSLA 2014; the constants of Vigna's splitmix64.c) from
# a 64-bit seed that SHAKE-128 (FIPS 202) makes of the stream's label, each word
# little-endian.  The hash names streams apart; the generator makes their bytes at a
# fraction of a nanosecond each, where SHAKE's own output cost ~2 ns a byte
# (bench/RESULTS.md, "roce against ns-3"): a run makes every byte it moves.  Word i of the
# stream needs only the seed and i, so a piece is made alone.  CPython's built-in SHAKE:
# 8 bytes of it cost about what OpenSSL's do, without loading OpenSSL.
_GAMMA = 0x9E3779B97F4A7C15
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = (1 << 64) - 1
PIECE_WORDS = CHUNK // 8  # words of a piece: piece k of a stream starts at word k * PIECE_WORDS


def _builtin() -> Callable[[bytes], Any]:
    try:
        from _sha3 import shake_128
    except ImportError:  # a Python without it: OpenSSL's
        from hashlib import shake_128
    return shake_128


_shake = _builtin()


def _lanes() -> tuple[int, int, int]:
    """For ``expand_reference``: 1 in every 128-bit lane, each lane's counter step, and
    every lane's low 64 bits, for the words of the longest piece."""
    one = steps = low = 0
    for i in reversed(range(PIECE_WORDS)):
        one, low = one << 128 | 1, low << 128 | (1 << 64) - 1
        steps = steps << 128 | (i + 1) * _GAMMA % (1 << 64)
    return one, steps, low


_LANES: tuple[int, int, int] | None = None


def expand_reference(seed: int, first: int, n: int) -> bytes:
    """``n`` bytes (at most ``CHUNK``) of the stream of the 64-bit ``seed`` from its word
    ``first`` on: word i (from 0) of the stream is splitmix64's output for seed + (i + 1) *
    0x9E3779B97F4A7C15 (mod 2**64), little-endian, the last one cut to what ``n`` leaves.
    Every word at once: one Python integer holds them in 128-bit lanes, so a lane's product
    never reaches the next.  The compiled form is ``roce._fastpath.pattern_expand``
    (roce/emu/core/_pattern.pxi)."""
    if not 0 <= n <= CHUNK:
        raise ValueError(f"a pattern's length is not negative and at most {CHUNK}, not {n}")
    global _LANES
    if _LANES is None:
        _LANES = _lanes()
    one, steps, low = _LANES
    start = (seed + first * _GAMMA) & _U64  # the counter before word ``first``
    x = (start * one + steps) & low
    x = ((x ^ x >> 30) & low) * _MIX1 & low
    x = ((x ^ x >> 27) & low) * _MIX2 & low
    x = (x ^ x >> 31) & low
    lanes = x.to_bytes(16 * PIECE_WORDS, "little")
    out = bytearray(8 * PIECE_WORDS)
    for b in range(8):  # each lane's low 8 bytes, in order
        out[b::8] = lanes[b::16]
    return bytes(out[:n])


def _expander() -> Callable[[int, int, int], bytes]:
    from roce import fast  # the codec is loaded by every run already
    return fast._ext.pattern_expand if fast._ext is not None else expand_reference


expand = _expander()


def label_seed(label: str) -> int:
    """The 64-bit seed of the stream of ``label``."""
    return int.from_bytes(_shake(label.encode()).digest(8), "little")


def slot_bytes(size: int) -> int:
    """Bytes of one message slot: the message, and room for an atomic's 8 bytes."""
    return max(size, HEAD)


def slots_for(size: int, count: int) -> int:
    """Message slots per side of a QP: one per message, 4 at most, and fewer when 4 would
    pass 64 MiB; at least 1."""
    return max(1, min(MAX_SLOTS, count, SLOT_BUDGET // slot_bytes(size)))


def seeded_chunks(label: str, length: int) -> Iterator[bytes]:
    """``length`` pseudo-random bytes determined by ``label``, in chunks of ``CHUNK``: the
    stream of ``label_seed(label)``, of which any chunk can be made without the others; the
    bytes are the same on every platform and Python version."""
    seed = label_seed(label)
    k = 0
    while length > 0:
        n = min(CHUNK, length)
        yield expand(seed, k * PIECE_WORDS, n)
        length -= n
        k += 1


def piece(label: str, k: int, n: int = CHUNK) -> bytes:
    """The first ``n`` bytes of piece ``k`` of the stream of ``label``."""
    return expand(label_seed(label), k * PIECE_WORDS, n)


def seeded_range(label: str, start: int, n: int) -> bytes:
    """Bytes [start, start + n) of the stream ``seeded_chunks(label, ...)`` yields."""
    seed = label_seed(label)
    k, lo = divmod(start, CHUNK)
    end = start + n
    if lo + n <= CHUNK:  # one piece: the common case, a frame within a piece
        return expand(seed, k * PIECE_WORDS, lo + n)[lo:]
    out = bytearray()
    pos = k * CHUNK
    while pos < end:
        out += expand(seed, k * PIECE_WORDS, min(CHUNK, end - pos))[max(start - pos, 0):]
        pos += CHUNK
        k += 1
    return bytes(out)


def slot_label(seed: int, qp: int, side: str, slot: int) -> str:
    """What seeds slot ``slot`` of ``side``'s buffer of QP ``qp``."""
    return f"roce-emu/{seed}/{qp}/{side}/{slot}"


def fill(buf: bytearray, seed: int, qp: int, side: str, size: int, slots: int) -> None:
    """Write the initial contents of one side's buffer (``slots`` slots) into ``buf``."""
    slot = slot_bytes(size)
    for j in range(slots):
        pos = j * slot
        for chunk in seeded_chunks(slot_label(seed, qp, side, j), slot):
            buf[pos:pos + len(chunk)] = chunk
            pos += len(chunk)


@dataclass
class _Slot:
    """What a slot holds: the initial bytes of slot ``src`` (side, index), first 8 replaced
    by ``head``."""

    src: tuple[str, int]
    head: bytes | None = None  # None: the source's own first 8 bytes


class Expected:
    """What the two buffers of one QP hold after the operations applied so far, in order
    (what an RC responder's PSN order guarantees)."""

    def __init__(self, seed: int, qp: int, size: int, slots: int) -> None:
        self.seed, self.qp, self.size = seed, qp, size
        self.slot = slot_bytes(size)
        self.slots = slots
        self.state = {side: [_Slot((side, j)) for j in range(self.slots)]
                      for side in ("local", "remote")}

    def _initial(self, side: str, j: int, start: int, n: int) -> bytes:
        """Bytes [start, start + n) of slot (side, j) as it started."""
        return seeded_range(slot_label(self.seed, self.qp, side, j), start, n)

    def _head(self, s: _Slot) -> bytes:
        if s.head is None:
            s.head = self._initial(s.src[0], s.src[1], 0, HEAD)
        return s.head

    def _copy(self, src: _Slot, dst: _Slot) -> None:
        n = self.size
        if n >= HEAD:  # the whole slot (slot == size)
            dst.src, dst.head = src.src, src.head
        else:  # an 8-byte slot: only its first ``size`` bytes change
            dst.head = self._head(src)[:n] + self._head(dst)[n:]

    def apply(self, what: str, i: int) -> None:
        """Message ``i`` of kind ``what`` (write, send, read, atomic) completed."""
        j = i % self.slots
        local, remote = self.state["local"], self.state["remote"]
        if what in ("write", "send"):
            self._copy(local[j], remote[j])
        elif what == "read":
            self._copy(remote[j], local[j])
        elif what == "atomic":  # fetch-and-add 1 on the first 8 bytes of the remote buffer
            head = self._head(remote[0])
            old = int.from_bytes(head, "little")
            local[j].head = head
            remote[0].head = ((old + 1) % (1 << 64)).to_bytes(HEAD, "little")
        else:
            raise ValueError(f"unknown operation {what!r}")

    def received(self, i: int, j: int) -> None:
        """SEND message ``i`` landed in the receive buffer of slot ``j % slots`` (a
        transport that matches receives in arrival order: UET over RUD)."""
        self._copy(self.state["local"][i % self.slots], self.state["remote"][j % self.slots])

    def chunks(self, side: str, j: int) -> Iterator[bytes]:
        """The bytes slot ``j`` of ``side`` must hold, in chunks."""
        s = self.state[side][j]
        first = True
        label = slot_label(self.seed, self.qp, *s.src)
        for chunk in seeded_chunks(label, self.slot):
            if first and s.head is not None:
                chunk = s.head + chunk[HEAD:]
                first = False
            yield chunk

    def read(self, side: str, j: int, n: int) -> bytes:
        """The first ``n`` bytes slot ``j`` of ``side`` must hold (a small message)."""
        s = self.state[side][j]
        head = self._head(s)
        if n <= HEAD:
            return head[:n]
        return head + self._initial(s.src[0], s.src[1], HEAD, n - HEAD)

    def matches(self, side: str, buf: Any) -> bool:
        """Whether ``buf`` (the side's whole buffer: bytes, or the ``Patterned`` content of
        a region that does not hold them) holds what it must."""
        return all(self._slot_matches(side, buf, j) for j in range(self.slots))

    def mismatched(self, side: str, buf: Any) -> list[int]:
        """The slots of ``buf`` that do not hold what they must (message ``i`` used slot
        ``i % slots``; the last one to use it decides its contents)."""
        return [j for j in range(self.slots) if not self._slot_matches(side, buf, j)]

    def _slot_matches(self, side: str, buf: Any, j: int) -> bool:
        pos = j * self.slot
        whole = getattr(buf, "whole", None)
        if whole is not None:  # a Patterned region: a slot holding one pattern in full
            s = self.state[side][j]
            if s.head is None and (whole(j), j) == s.src:  # is known without its bytes
                return True
            read = buf.read
        else:
            view = memoryview(buf)
            read = lambda pos, n: bytes(view[pos:pos + n])  # noqa: E731
        for chunk in self.chunks(side, j):
            if read(pos, len(chunk)) != chunk:  # memcmp, not per item
                return False
            pos += len(chunk)
        return True
