"""Protection domains, memory regions and the key checks (rxe ``rxe_mr.c`` rules).

An emulated device has a virtual address space: every MR gets a VA range, SGEs and RETHs name
addresses in it.  Keys are ``index << 8 | key`` (rxe): the index finds the MR, the low byte
must match.  ``lookup_remote`` applies the responder's checks in rxe's order and says which
failed; ``lookup_local`` does the same for SGEs.

A region holds its bytes in ``buf``, or, registered with a ``content``
(``roce.emu.core.patterned.Patterned``), holds a seeded pattern and what was written over
it without a buffer: ``view`` hands out the one or the other, sliced and assigned alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roce.emu.core.constants import Access
from roce.emu.core.patterned import PatternView
from roce.errors import AccessError

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

VA_BASE = 0x7F00_0000_0000
VA_ALIGN = 0x1000


@dataclass(eq=False)
class MemoryRegion:
    """A registered range of an address space, with its keys and access bits."""

    pd: object
    addr: int
    length: int
    access: int  # Access bits, kept as a plain int: IntFlag operators are slow
    lkey: int
    rkey: int
    buf: bytearray
    valid: bool = True
    content: Any = None  # a Patterned: the region's bytes, ``buf`` left empty

    def contains(self, addr: int, length: int) -> bool:
        off = addr - self.addr  # one operation on the 64-bit addresses; the rest is small
        return 0 <= off and off + length <= self.length

    def view(self, addr: int, length: int) -> Any:
        """Bytes [addr, addr + length): a memoryview of ``buf``, or a view of ``content``
        that reads and writes the same way."""
        off = addr - self.addr
        if self.content is not None:
            return self.content.view(off, length)
        return memoryview(self.buf)[off:off + length]

    def write(self, addr: int, data: Any) -> None:
        """Bytes [addr, addr + len(data)) now hold ``data`` (``view(...)[:] = data`` without
        the view: one per packet placed)."""
        off = addr - self.addr
        if self.content is not None:
            self.content.write(off, data)
        else:
            memoryview(self.buf)[off:off + len(data)] = data

    def write_from(self, addr: int, frame: bytes, at: int, n: int) -> None:
        """``write(addr, frame[at:at + n])``: a received payload placed from its frame, read
        in place where the region holds a pattern."""
        if self.content is not None:
            self.content.write_from(addr - self.addr, frame, at, n)
        else:
            off = addr - self.addr
            memoryview(self.buf)[off:off + n] = memoryview(frame)[at:at + n]


@dataclass(eq=False)
class AddressSpace:
    """One device's MRs, keyed by index, and its VA allocator."""

    next_va: int = VA_BASE
    next_index: int = 1
    regions: dict[int, MemoryRegion] = field(default_factory=dict)

    def register(self, pd: object, length: int, access: Access, key: int = 0,
                 content: Any = None) -> MemoryRegion:
        """A new MR of ``length`` bytes, zeroed, or holding ``content`` (no buffer)."""
        index = self.next_index
        self.next_index += 1
        k = (index << 8) | (key & 0xFF)
        addr = self.next_va
        self.next_va += (length + VA_ALIGN - 1) // VA_ALIGN * VA_ALIGN + VA_ALIGN
        mr = MemoryRegion(pd, addr, length, int(access), k, k,
                          bytearray(0 if content is not None else length), True, content)
        self.regions[index] = mr
        return mr

    def deregister(self, mr: MemoryRegion) -> None:
        self.regions.pop(mr.rkey >> 8, None)
        mr.valid = False

    def invalidate(self, rkey: int) -> bool:
        mr = self.regions.get(rkey >> 8)
        if mr is None or mr.rkey != rkey:
            return False
        mr.valid = False
        return True

    def lookup_remote(self, pd: object, rkey: int, addr: int, length: int, need: Access,
                      atomic: bool = False) -> MemoryRegion:
        """The MR a remote request may touch, in rxe's order of checks."""
        mr = self.regions.get(rkey >> 8)
        if mr is None:
            raise AccessError(f"no MR with rkey 0x{rkey:08x}", "key")
        check_remote(mr, pd, rkey, addr, length, need, atomic)
        return mr

    def lookup_local(self, pd: object, lkey: int, addr: int, length: int,
                     need: Access | None = None) -> MemoryRegion:
        mr = self.regions.get(lkey >> 8)
        if mr is None or mr.lkey != lkey or not mr.valid:
            raise AccessError(f"no MR with lkey 0x{lkey:08x}")
        if mr.pd is not pd:
            raise AccessError(f"lkey 0x{lkey:08x} belongs to another PD")
        if need and not mr.access & need:
            raise AccessError(f"lkey 0x{lkey:08x} lacks {Access(need).name}")
        if not mr.contains(addr, length):
            raise AccessError(f"0x{addr:x}+{length} is outside lkey 0x{lkey:08x}")
        return mr

    def views(self, pd: object, sges: list) -> list:
        """Views of the local memory a gather list names, checked now (raises AccessError).

        Zero-length SGEs are skipped without a lookup, as rxe's ``copy_data`` does: an empty
        message may name an SGE outside any MR.  Views, not copies: a message is read from
        memory a packet at a time (and again when retransmitted), as an RNIC does."""
        return [self.lookup_local(pd, s.lkey, s.addr, s.length).view(s.addr, s.length)
                for s in sges if s.length]

    def gather(self, pd: object, sges: list, length: int | None = None) -> bytes:
        """Bytes named by a scatter/gather list (raises AccessError)."""
        data = b"".join(self.views(pd, sges))
        return data if length is None else data[:length]

    def scatter(self, pd: object, sges: list, offset: int, data: bytes | memoryview) -> None:
        """Write ``data`` at byte ``offset`` of the buffer a scatter list describes."""
        pos = 0
        for s in sges:
            if offset >= s.length:
                offset -= s.length
                continue
            n = min(s.length - offset, len(data) - pos)
            if n <= 0:
                break
            mr = self.lookup_local(pd, s.lkey, s.addr + offset, n,
                                   Access.IBV_ACCESS_LOCAL_WRITE)
            mr.write(s.addr + offset, data[pos:pos + n])
            pos += n
            offset = 0
        if pos < len(data):
            raise AccessError(f"{len(data) - pos} bytes do not fit the receive buffer")


def check_remote(mr: MemoryRegion, pd: object, rkey: int, addr: int, length: int, need: int,
                 atomic: bool) -> None:
    """rxe's checks of a remote request on the MR its key's index found, in rxe's order
    (raises AccessError naming the first that fails)."""
    if mr.rkey != rkey:
        raise AccessError(f"no MR with rkey 0x{rkey:08x}", "key")
    if not mr.valid:
        raise AccessError(f"rkey 0x{rkey:08x} was invalidated", "key")
    if mr.pd is not pd:
        raise AccessError(f"rkey 0x{rkey:08x} belongs to another PD", "pd")
    if not mr.access & need:
        raise AccessError(f"rkey 0x{rkey:08x} lacks {Access(need).name}", "access")
    if not mr.contains(addr, length):
        raise AccessError(f"0x{addr:x}+{length} is outside rkey 0x{rkey:08x}", "range")
    if atomic and addr % 8:
        raise AccessError(f"atomic address 0x{addr:x} is not 8-byte aligned", "align")


def take_at(views: list, offset: int, n: int) -> tuple[bytes | memoryview, int, int]:
    """``take``'s bytes as (buffer, start, length): where a seeded region holds them in one
    piece of its pattern, that piece (a packet's payload goes into its frame from there,
    without a copy of its own); else ``take``'s result, from 0."""
    o = offset
    for v in views:
        if o >= len(v):
            o -= len(v)
            continue
        if type(v) is PatternView:
            pv = v
            m = min(n, len(pv) - o)
            if m == n or v is views[-1]:  # all of it in this view
                # [o, o + m) lies within the view: its region hands the bytes as it holds them
                buf, at = pv.content.read_at(pv.off + o, m)
                return buf, at, m
        break
    part = take(views, offset, n)
    return part, 0, len(part)


def take(views: list, offset: int, n: int) -> bytes | memoryview:
    """Bytes [offset, offset + n) of the concatenation of ``views``, copying only when the
    range spans two of them."""
    parts = []
    for v in views:
        if offset >= len(v):
            offset -= len(v)
            continue
        if type(v) is PatternView:  # a seeded region's: its part, without a slice object
            pv = v
            part = pv.part(offset, offset + n)
        else:
            part = v[offset:offset + n]
        if len(part) == n and not parts:
            return part
        parts.append(part)
        n -= len(part)
        offset = 0
        if n <= 0:
            break
    return b"".join(parts)
