"""Bulk field extraction: chosen header fields of a batch of frames, straight into column
buffers, without a Python object per frame or per field.

A *spec* says where one field lives: (slot, byte offset in its header, bytes, shift, mask,
kind); the slot is the header's id in ``roce.locate.HEADER_IDS`` (``VLAN2_SLOT`` for a second
VLAN tag).  Specs are derived from ``roce.headers.LAYOUTS`` (:func:`field_spec`), never
typed in.  :func:`extract` runs the compiled ``_fastpath.extract`` when the extension is
built, else :func:`extract_reference`, its pure-Python twin (tests/test_columnar.py holds
the two to the same output with hypothesis).

Integer and boolean fields come out as uint64 values; addresses and fields wider than 64
bits as their raw bytes.  Each field has an Arrow validity bitmap: set only for whole RoCE
frames (walk status OK) that carry the header.  Frames that are not whole RoCE are left to
the record decoder (``roce.decoder.decode``) by the caller.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from roce import fast, locate
from roce.headers import LAYOUTS, SIZE_OF
from roce.icrc import icrc_at
from roce.locate import OK, Walk

X_INT = 0  # value in a uint64 column
X_RAW = 1  # bytes copied as they are
VLAN2_SLOT = len(locate.HEADER_IDS)  # the second VLAN tag shares vlan's layout
SLOTS = {**locate.HID, "vlan2": VLAN2_SLOT}


class Spec(NamedTuple):
    slot: int
    off: int
    n: int
    shift: int
    mask: int
    kind: int


def field_spec(header: str, name: str) -> Spec:
    """Where ``header.name`` lives (``header`` may be ``vlan2``), from the layouts."""
    base = "vlan" if header == "vlan2" else header
    f = LAYOUTS[base].field(name)
    first, last = f.bit_offset // 8, (f.bit_offset + f.bits - 1) // 8
    n = last - first + 1
    assert last < SIZE_OF[base], (header, name)
    raw = f.kind == "addr" or n > 8
    shift = 0 if raw else n * 8 - f.bit_offset % 8 - f.bits
    return Spec(SLOTS[header], first, n, shift, 0 if raw else f.mask, X_RAW if raw else X_INT)


class Columns(NamedTuple):
    """The buffers of one extraction of ``count`` frames."""

    count: int
    values: list[bytearray]  # per spec: native uint64s, or n raw bytes a row
    valid: list[bytearray]  # per spec: validity bitmap
    status: array  # 'B' walk status
    paylen: array  # 'i' payload length, -1 when not OK
    icrc: array  # 'I' stored ICRC
    icrc_ok: array  # 'B' ICRC right (when checked)


def buffers(specs: list[Spec], count: int) -> Columns:
    """Preallocated buffers for ``count`` frames."""
    values = [bytearray((8 if s.kind == X_INT else s.n) * count) for s in specs]
    valid = [bytearray((count + 7) // 8) for _ in specs]
    return Columns(count, values, valid, array("B", bytes(count)), array("i", bytes(4 * count)),
                   array("I", bytes(4 * count)), array("B", bytes(count)))


def _bases(w: Walk, linktype: int) -> dict[int, int]:
    """Slot -> byte offset of each header a whole RoCE frame carries."""
    L = locate
    bases: dict[int, int] = {}
    l2 = {L.LINKTYPE_ETHERNET: "eth", L.LINKTYPE_LINUX_SLL: "sll",
          L.LINKTYPE_LINUX_SLL2: "sll2"}.get(linktype)
    size = 0
    if l2 is not None:
        bases[SLOTS[l2]] = 0
        size = SIZE_OF[l2]
    for i in range(min(w.vlans, 2)):
        bases[SLOTS["vlan" if i == 0 else "vlan2"]] = size + i * SIZE_OF["vlan"]
    l3 = {L.L3_IPV4: "ip", L.L3_IPV6: "ipv6", L.L3_GRH: "grh"}[w.l3_kind]
    bases[SLOTS[l3]] = w.l3_off
    if w.udp_off >= 0:
        bases[SLOTS["udp"]] = w.udp_off
    bases[SLOTS["bth"]] = w.bth_off
    pos = w.bth_off + SIZE_OF["bth"]
    for hid, size in L.OPCODE_PLAN[w.opcode][0]:
        bases[hid] = pos
        pos += size
    return bases


def extract_reference(frames: list[bytes], linktype: int, udp_port: int, specs: list[Spec],
                      cols: Columns, check_icrc: bool) -> int:
    """Pure-Python twin of ``_fastpath.extract``."""
    ints = [memoryview(v).cast("Q") if s.kind == X_INT else None
            for v, s in zip(cols.values, specs)]
    for k in range(len(specs)):
        cols.valid[k][:] = bytes(len(cols.valid[k]))
    for i, data in enumerate(frames):
        w = locate.walk(data, linktype, udp_port)
        cols.status[i] = w.status
        cols.paylen[i] = -1
        cols.icrc[i] = cols.icrc_ok[i] = 0
        for k, s in enumerate(specs):
            if s.kind == X_INT:
                ints[k][i] = 0  # type: ignore[index]
            else:
                cols.values[k][i * s.n:(i + 1) * s.n] = bytes(s.n)
        if w.status != OK:
            continue
        bases = _bases(w, linktype)
        cols.paylen[i] = w.pad_off - w.payload_off
        stored = int.from_bytes(data[w.icrc_off:w.icrc_off + 4], "big")
        cols.icrc[i] = stored
        if check_icrc:
            cols.icrc_ok[i] = int(icrc_at(data, w.l3_off, w.l3_kind, w.l3_len, w.bth_off,
                                          w.icrc_off) == stored)
        for k, s in enumerate(specs):
            pos = bases.get(s.slot)
            if pos is None:
                continue
            cols.valid[k][i >> 3] |= 1 << (i & 7)
            raw = data[pos + s.off:pos + s.off + s.n]
            if s.kind == X_INT:
                ints[k][i] = (int.from_bytes(raw, "big") >> s.shift) & s.mask  # type: ignore
            else:
                cols.values[k][i * s.n:(i + 1) * s.n] = raw
    return len(frames)


def extract(frames: list[bytes], linktype: int, udp_port: int, specs: list[Spec],
            cols: Columns | None = None, check_icrc: bool = False) -> Columns:
    """Extract ``specs`` from every frame (compiled when available)."""
    if cols is None or cols.count < len(frames):
        cols = buffers(specs, len(frames))
    if fast._ext is not None:
        fast._ext.extract(frames, linktype, udp_port, [tuple(s) for s in specs], cols.values,
                          cols.valid, VLAN2_SLOT, cols.status, cols.paylen, cols.icrc,
                          cols.icrc_ok, check_icrc)
    else:
        extract_reference(frames, linktype, udp_port, specs, cols, check_icrc)
    return cols


__all__ = ["Columns", "SLOTS", "Spec", "VLAN2_SLOT", "X_INT", "X_RAW", "buffers", "extract",
           "extract_reference", "field_spec"]
