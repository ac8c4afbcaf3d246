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
from typing import Any

# bytes of one piece of a pattern: one path MTU of 4096, so a frame's payload is made from
# one or two pieces (a SHAKE output is a prefix of any longer one: a range costs no more than
# the piece ends it reaches)
CHUNK = 4096
MAX_SLOTS = 4
SLOT_BUDGET = 64 << 20  # bytes of slots per side of a QP; larger messages get fewer slots
HEAD = 8  # bytes an atomic touches; also the smallest slot

# SHAKE-128 (FIPS 202): CPython's built-in module for a run's first pieces, OpenSSL's (through
# hashlib) once a run needs many.  Importing hashlib starts OpenSSL, ~3 ms of a short run's
# start; the built-in digests about 3x slower.  Both give the same bytes
# (tests/test_emu_payload.py).
BUILTIN_PIECES = 64
_made = 0


def _builtin() -> Callable[[bytes], Any]:
    try:
        from _sha3 import shake_128
    except ImportError:  # a Python without it: OpenSSL's from the start
        from hashlib import shake_128
    return shake_128


_builtin_shake = _builtin()


def _shake(data: bytes) -> Any:
    """SHAKE-128 of ``data``, by whichever implementation is cheaper so far."""
    global _made, _shake
    _made += 1
    if _made <= BUILTIN_PIECES:
        return _builtin_shake(data)
    import hashlib

    _shake = hashlib.shake_128  # from now on, called directly
    return _shake(data)


def slot_bytes(size: int) -> int:
    """Bytes of one message slot: the message, and room for an atomic's 8 bytes."""
    return max(size, HEAD)


def slots_for(size: int, count: int) -> int:
    """Message slots per side of a QP: one per message, 4 at most, and fewer when 4 would
    pass 64 MiB; at least 1."""
    return max(1, min(MAX_SLOTS, count, SLOT_BUDGET // slot_bytes(size)))


def seeded_chunks(label: str, length: int) -> Iterator[bytes]:
    """``length`` pseudo-random bytes determined by ``label``, in chunks of ``CHUNK``:
    chunk k is SHAKE-128 of (label, k), so any chunk can be made without the others and
    the bytes are the same on every platform and Python version."""
    k = 0
    while length > 0:
        n = min(CHUNK, length)
        yield _shake(f"{label}/{k}".encode()).digest(n)
        length -= n
        k += 1


def piece(label: str, k: int, n: int = CHUNK) -> bytes:
    """The first ``n`` bytes of piece ``k`` of the stream of ``label``."""
    return _shake(f"{label}/{k}".encode()).digest(n)


def seeded_range(label: str, start: int, n: int) -> bytes:
    """Bytes [start, start + n) of the stream ``seeded_chunks(label, ...)`` yields."""
    k, lo = divmod(start, CHUNK)
    end = start + n
    if lo + n <= CHUNK:  # one piece: the common case, a frame within a piece
        return _shake(f"{label}/{k}".encode()).digest(lo + n)[lo:]
    out = bytearray()
    pos = k * CHUNK
    while pos < end:
        piece = _shake(f"{label}/{k}".encode()).digest(min(CHUNK, end - pos))
        out += piece[max(start - pos, 0):]
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
