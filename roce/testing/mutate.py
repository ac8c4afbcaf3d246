"""Structure-aware mutation of RoCE frames, driven by a ``random.Random``.

The mutator knows where every header and field of a frame is: it walks the frame with
``roce.fast.walk`` and reads field positions from ``roce.headers.LAYOUTS`` (the opcode table
says which extended headers follow BTH).  Nothing here restates a field offset.

Operators (their names appear in fuzz summaries and corpus reason files):

===========  ================================================================================
``field``    one field of one header set to a boundary value: 0, max, max-1, 1, old+-1, random
``opcode``   BTH opcode swapped for one with other extended headers (or an unknown opcode)
``length``   a length that lies: IPv4 total length, IPv6 payload length, GRH PayLen, UDP length
``padcnt``   BTH PadCnt set to a wrong value
``tver``     BTH TVer non-zero
``truncate`` the frame cut at (or just around) a header boundary, or inside the ICRC
``junk``     trailing bytes appended after the ICRC
``icrc``     ICRC bits flipped
``flip``     a few random bit flips anywhere
``bytes``    a few random bytes overwritten
``resize``   bytes inserted or removed after BTH with the L3/L4 lengths fixed to match
``vlan``     an 802.1Q tag inserted (a third tag is more than the walker accepts)
===========  ================================================================================

After the operators, a mutant may be *fixed up* (``fixup``): its ICRC recomputed with
``roce.fast.walk`` + ``roce.fast.icrc_of`` and the trailer patched (and the IPv4 header
checksum refreshed), so it passes the receiver's CRC check and reaches the code behind it.

``Mutator(rng).mutate(frame)`` returns a ``Mutant`` (bytes, operator names, fixed-up flag);
every mutant differs from its original.  The hypothesis strategy
``roce.testing.strategies.mutations`` drives the same engine.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import NamedTuple

from roce import fast
from roce.headers import LAYOUTS, SIZE_OF, Field
from roce.locate import (
    L2_HEADERS,
    L3_GRH,
    L3_IPV4,
    L3_IPV6,
    LINKTYPE_ETHERNET,
    OK,
    ROCE_PORT,
    Walk,
)
from roce.opcodes import OPCODES

OPERATORS: tuple[str, ...] = ("field", "opcode", "length", "padcnt", "tver", "truncate",
                              "junk", "icrc", "flip", "bytes", "resize", "vlan")

_L2 = L2_HEADERS
_L3 = {L3_IPV4: "ip", L3_IPV6: "ipv6", L3_GRH: "grh"}
# The length field of each L3/L4 header, and how many bytes before the covered region it
# counts from (IPv4 counts its own header, IPv6 and GRH do not).
_LENGTHS = {"ip": ("len", 0), "ipv6": ("plen", SIZE_OF["ipv6"]),
            "grh": ("paylen", SIZE_OF["grh"]), "udp": ("length", 0)}
_ICRC = 4


class Mutant(NamedTuple):
    frame: bytes
    ops: tuple[str, ...]  # operator names applied, in order
    fixed: bool  # ICRC (and IPv4 checksum) recomputed after the operators

    @property
    def reason(self) -> str:
        return "+".join(self.ops) + (" (icrc fixed)" if self.fixed else "")


class FieldRef(NamedTuple):
    header: str
    base: int  # byte offset of the header in the frame
    field: Field


def header_offsets(frame: bytes, w: Walk | None = None, linktype: int = LINKTYPE_ETHERNET,
                   udp_port: int = ROCE_PORT) -> list[tuple[str, int]]:
    """(header name, byte offset) of every header the walk found that lies whole in
    ``frame``, in wire order: L2, VLAN tags, L3, UDP, BTH, then the opcode's ETHs."""
    if w is None:
        w = fast.walk(frame, linktype, udp_port)
    n = len(frame)
    out: list[tuple[str, int]] = []
    l2 = _L2.get(linktype)
    off = 0
    if l2 is not None and n >= SIZE_OF[l2]:
        out.append((l2, 0))
        off = SIZE_OF[l2]
        for _ in range(w.vlans):
            if off + SIZE_OF["vlan"] <= n:
                out.append(("vlan", off))
            off += SIZE_OF["vlan"]
    l3 = _L3.get(w.l3_kind)
    if l3 is not None and w.l3_off >= 0 and w.l3_off + SIZE_OF[l3] <= n:
        out.append((l3, w.l3_off))
    if w.udp_off >= 0 and w.udp_off + SIZE_OF["udp"] <= n:
        out.append(("udp", w.udp_off))
    if w.bth_off >= 0 and w.bth_off + SIZE_OF["bth"] <= n:
        out.append(("bth", w.bth_off))
        op = OPCODES.get(frame[w.bth_off])
        pos = w.bth_off + SIZE_OF["bth"]
        for name in op.headers if op is not None else ():
            if pos + SIZE_OF[name] > n:
                break
            out.append((name, pos))
            pos += SIZE_OF[name]
    return out


def field_refs(frame: bytes, w: Walk | None = None, linktype: int = LINKTYPE_ETHERNET,
               udp_port: int = ROCE_PORT) -> list[FieldRef]:
    """Every field of every located header (see ``header_offsets``)."""
    return [FieldRef(h, base, f) for h, base in header_offsets(frame, w, linktype, udp_port)
            for f in LAYOUTS[h].fields]


def _span(f: Field) -> tuple[int, int, int]:
    """(first byte, byte count, right shift) of a field inside its header."""
    first = f.bit_offset // 8
    last = (f.bit_offset + f.bits - 1) // 8
    n = last - first + 1
    return first, n, n * 8 - (f.bit_offset % 8) - f.bits


def get_field(frame: bytes | bytearray, base: int, f: Field) -> int:
    first, n, shift = _span(f)
    at = base + first
    return (int.from_bytes(frame[at:at + n], "big") >> shift) & f.mask


def set_field(buf: bytearray, base: int, f: Field, value: int) -> None:
    """Write ``value`` (masked to the field's width) into ``buf`` in place."""
    first, n, shift = _span(f)
    at = base + first
    old = int.from_bytes(buf[at:at + n], "big")
    new = (old & ~(f.mask << shift)) | ((value & f.mask) << shift)
    buf[at:at + n] = new.to_bytes(n, "big")


def fixup(frame: bytes, linktype: int = LINKTYPE_ETHERNET, udp_port: int = ROCE_PORT) -> bytes:
    """Recompute the IPv4 header checksum and the ICRC so the frame passes both checks.

    Frames the walk rejects are returned unchanged (there is no ICRC to fix)."""
    w = fast.walk(frame, linktype, udp_port)
    if w.status != OK:
        return frame
    buf = bytearray(frame)
    if w.l3_kind == L3_IPV4:
        f = LAYOUTS["ip"].field("checksum")
        set_field(buf, w.l3_off, f, 0)
        set_field(buf, w.l3_off, f,
                  fast.ip_checksum(bytes(buf[w.l3_off:w.l3_off + w.l3_len])))
    # the checksum is an ICRC-variant field, so the order of the two fixes does not matter
    icrc = fast.icrc_of(bytes(buf), w)
    buf[w.icrc_off:w.l4_end] = icrc.to_bytes(_ICRC, "big")
    return bytes(buf)


def fix_lengths(buf: bytearray, w: Walk, linktype: int = LINKTYPE_ETHERNET) -> None:
    """Make the L3 and UDP lengths of ``buf`` (walked as ``w`` before a resize) describe the
    whole buffer (no Ethernet trailer)."""
    n = len(buf)
    l3 = _L3.get(w.l3_kind)
    if l3 is not None and w.l3_off >= 0 and w.l3_off + SIZE_OF[l3] <= n:
        name, before = _LENGTHS[l3]
        set_field(buf, w.l3_off, LAYOUTS[l3].field(name), n - w.l3_off - before)
    if w.udp_off >= 0 and w.udp_off + SIZE_OF["udp"] <= n:
        set_field(buf, w.udp_off, LAYOUTS["udp"].field("length"), n - w.udp_off)


def boundary_values(f: Field, old: int | None, rng: random.Random) -> int:
    """A value for field ``f``: one of the boundaries, a neighbour of ``old``, or random."""
    mask = f.mask
    pick = rng.randrange(8)
    if pick == 0:
        return 0
    if pick == 1:
        return mask
    if pick == 2:
        return max(mask - 1, 0)
    if pick == 3:
        return 1 & mask
    if pick in (4, 5) and old is not None:
        return (old + rng.choice((-1, 1))) & mask
    if pick == 6 and f.bits > 8:
        return (1 << rng.randrange(f.bits)) & mask  # one bit set: sign and size edges
    return rng.getrandbits(f.bits) & mask


# Opcodes grouped by their extended header chain, for "swap for one with other headers".
_BY_CHAIN: dict[tuple[str, ...], list[int]] = {}
for _code, _op in OPCODES.items():
    _BY_CHAIN.setdefault(_op.headers, []).append(_code)
_CODES = sorted(OPCODES)
_UNKNOWN = [c for c in range(256) if c not in OPCODES]


class Mutator:
    """Mutates frames with a seeded ``random.Random``: same seed, same mutants.

    ``fixup_rate`` is the probability that a mutant gets its ICRC recomputed (``None`` in
    ``mutate`` leaves it to that rate, True/False forces it); ``max_stack`` bounds how many
    operators are applied to one frame; ``ops`` restricts the operators used."""

    def __init__(self, rng: random.Random, fixup_rate: float = 0.5, max_stack: int = 3,
                 ops: Sequence[str] | None = None) -> None:
        self.rng = rng
        self.fixup_rate = fixup_rate
        self.max_stack = max_stack
        names = tuple(ops) if ops is not None else OPERATORS
        unknown = set(names) - set(OPERATORS)
        if unknown:
            raise ValueError(f"unknown mutation operators: {sorted(unknown)}")
        self.ops = names
        self._table: dict[str, Callable[[bytearray, Walk, int], bool]] = {
            name: getattr(self, "_op_" + name) for name in names}

    # -- the entry point --------------------------------------------------------------------

    def mutate(self, frame: bytes, linktype: int = LINKTYPE_ETHERNET,
               udp_port: int = ROCE_PORT, fix: bool | None = None) -> Mutant:
        rng = self.rng
        buf = bytearray(frame)
        done: list[str] = []
        stack = 1 if self.max_stack <= 1 or rng.random() < 0.6 else rng.randint(2,
                                                                                self.max_stack)
        for _ in range(stack):
            w = fast.walk(bytes(buf), linktype, udp_port)
            name = rng.choice(self.ops)
            if self._table[name](buf, w, linktype):
                done.append(name)
        if fix is None:
            fix = rng.random() < self.fixup_rate
        out = bytes(buf)
        if fix:
            fixed = fixup(out, linktype, udp_port)
            fix = fixed != out or fast.walk(out, linktype, udp_port).status == OK
            out = fixed
        if out == frame:
            # an operator that happened to write the old value, or a fix-up that undid it (an
            # ICRC flip): a mutant must differ, so flip a bit of the first bytes (the
            # destination MAC on Ethernet), which neither the walk nor a fix-up rewrites
            b = bytearray(out)
            if b:
                b[rng.randrange(min(len(b), 6))] ^= 1 << rng.randrange(8)
            else:
                b.append(rng.getrandbits(8))
            out = bytes(b)
            done.append("flip")
        return Mutant(out, tuple(done) or ("flip",), bool(fix))

    # -- operators: each edits ``buf`` in place, returns whether it did something ------------

    def _op_field(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        refs = field_refs(bytes(buf), w, linktype)
        if not refs:
            return self._op_bytes(buf, w, linktype)
        ref = self.rng.choice(refs)
        old = get_field(buf, ref.base, ref.field)
        set_field(buf, ref.base, ref.field, boundary_values(ref.field, old, self.rng))
        return True

    def _bth_field(self, buf: bytearray, w: Walk, name: str, value: int) -> bool:
        if w.bth_off < 0 or w.bth_off + SIZE_OF["bth"] > len(buf):
            return False
        set_field(buf, w.bth_off, LAYOUTS["bth"].field(name), value)
        return True

    def _op_opcode(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        rng = self.rng
        if w.bth_off < 0 or w.bth_off >= len(buf):
            return False
        old = OPCODES.get(buf[w.bth_off])
        if rng.random() < 0.1:
            code = rng.choice(_UNKNOWN)
        else:
            others = [c for c in _CODES if old is None or OPCODES[c].headers != old.headers]
            code = rng.choice(others)
        return self._bth_field(buf, w, "opcode", code)

    def _op_length(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        rng = self.rng
        where = []
        l3 = _L3.get(w.l3_kind)
        if l3 is not None and w.l3_off >= 0 and w.l3_off + SIZE_OF[l3] <= len(buf):
            where.append((l3, w.l3_off))
        if w.udp_off >= 0 and w.udp_off + SIZE_OF["udp"] <= len(buf):
            where.append(("udp", w.udp_off))
        if not where:
            return False
        header, base = rng.choice(where)
        f = LAYOUTS[header].field(_LENGTHS[header][0])
        old = get_field(buf, base, f)
        pick = rng.randrange(4)
        if pick == 0:
            value = old + rng.choice((-1, 1)) * rng.randint(1, 8)
        elif pick == 1:
            value = old + rng.choice((-1, 1)) * rng.randint(9, 5000)
        else:
            value = boundary_values(f, old, rng)
        set_field(buf, base, f, value)
        return True

    def _op_padcnt(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        if w.bth_off < 0 or w.bth_off + SIZE_OF["bth"] > len(buf):
            return False
        f = LAYOUTS["bth"].field("padcnt")
        old = get_field(buf, w.bth_off, f)
        return self._bth_field(buf, w, "padcnt", (old + self.rng.randint(1, f.mask)) & f.mask)

    def _op_tver(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        f = LAYOUTS["bth"].field("tver")
        return self._bth_field(buf, w, "tver", self.rng.randint(1, f.mask))

    def _op_truncate(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        rng = self.rng
        if len(buf) <= 1:
            return False
        cuts = [off for _, off in header_offsets(bytes(buf), w, linktype)]
        cuts += [off for off in (w.payload_off, w.pad_off, w.icrc_off, w.l4_end) if off > 0]
        cut = rng.choice(cuts) + rng.randint(-2, 2) if cuts else rng.randrange(len(buf))
        cut = min(max(cut, 0), len(buf) - 1)
        del buf[cut:]
        return True

    def _op_junk(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        rng = self.rng
        n = rng.choice((1, 2, 3, 4, 6, rng.randint(1, 64)))
        buf += bytes(n) if rng.random() < 0.5 else rng.randbytes(n)
        return True

    def _op_icrc(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        if w.status != OK:
            return self._op_flip(buf, w, linktype)
        i = w.icrc_off + self.rng.randrange(_ICRC)
        buf[i] ^= 1 << self.rng.randrange(8)
        return True

    def _op_flip(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        if not buf:
            return False
        for _ in range(self.rng.randint(1, 4)):
            i = self.rng.randrange(len(buf))
            buf[i] ^= 1 << self.rng.randrange(8)
        return True

    def _op_bytes(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        if not buf:
            return False
        for _ in range(self.rng.randint(1, 4)):
            buf[self.rng.randrange(len(buf))] = self.rng.getrandbits(8)
        return True

    def _op_resize(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        rng = self.rng
        if w.bth_off < 0:
            return False
        lo = min(w.bth_off + SIZE_OF["bth"], len(buf))
        at = rng.randint(lo, len(buf))
        if rng.random() < 0.5:
            n = rng.choice((1, 2, 3, 4, 8, 12, 16, rng.randint(1, 300)))
            buf[at:at] = bytes(n) if rng.random() < 0.5 else rng.randbytes(n)
        else:
            n = rng.choice((1, 2, 3, 4, 8, rng.randint(1, 64)))
            del buf[at:at + n]
        fix_lengths(buf, w, linktype)
        return True

    def _op_vlan(self, buf: bytearray, w: Walk, linktype: int) -> bool:
        if linktype != LINKTYPE_ETHERNET or len(buf) < SIZE_OF["eth"]:
            return False
        rng = self.rng
        at = SIZE_OF["eth"] - 2  # the tag goes between the MACs and the EtherType
        tpid = rng.choice((0x8100, 0x8100, 0x88A8, 0x9100))
        tci = rng.getrandbits(16)
        buf[at:at] = tpid.to_bytes(2, "big") + tci.to_bytes(2, "big")
        return True


def random_frame(rng: random.Random, max_len: int = 300) -> bytes:
    """Bytes with no structure, or an Ethernet header that promises IPv4/IPv6/RoCEv1 followed
    by noise: the walk's first checks see both."""
    body = rng.randbytes(rng.randint(0, max_len))
    if rng.random() < 0.5:
        return body
    prefix = rng.choice((b"\x08\x00\x45", b"\x86\xdd\x60", b"\x89\x15\x60", b"\x81\x00\x00\x05"))
    return rng.randbytes(12) + prefix + body


__all__ = ["OPERATORS", "Mutant", "Mutator", "FieldRef", "header_offsets", "field_refs",
           "get_field", "set_field", "fixup", "fix_lengths", "boundary_values", "random_frame"]
