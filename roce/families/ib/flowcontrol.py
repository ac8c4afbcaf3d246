"""InfiniBand link packets: the 6-byte flow-control packet (IBA Vol 1 7.9.4), its layout,
its CRC, building and reading it.

A flow-control packet travels on one link and never leaves it.  It is::

    Op (4) | FCTBS (12) | VL (4) | FCCL (12) | LPCRC (16)

``Op`` 0 is normal flow control, 1 flow-control initialization (IBA 7.9.4.1); ``FCTBS``
the total blocks of 64 bytes the sender has sent on the VL since link initialization, mod
4096; ``FCCL`` the credit limit the receiver grants on the VL, mod 4096 (IBA 7.9.4.2,
7.9.4.3).  ``LPCRC`` is a CRC-16 over the first four bytes, computed as the VCRC (IBA
7.9.4.4 points at 7.8.2: polynomial 0x100B, initial value 0xFFFF, inverted, bit-reflected)
and, as the VCRC, shown by Wireshark as the trailer bytes read big-endian.

Field names are Wireshark's (packet-infiniband.c, ``dissect_infiniband_link``):
``infiniband_link.op``, ``.fctbs``, ``.vl``, ``.fccl``, ``.lpcrc``; it reads them from ERF
records of type 25 (INFINIBAND_LINK, ``roce.families.erf``) and does not check the LPCRC.
Wireshark 4.0 first reads a link packet as if it began with an LRH (``dissect_general_info``)
and, when the low two bits of its second byte (FCTBS's) look like LNH 2 or 3, reads on for a
BTH or GRH past the 6 bytes and calls the record malformed; the emulator's ERF records
still hold the packet as it is on the wire (tests/test_ib_link.py compares the fields
with room after it).
VL15 carries no flow control (IBA 7.9.4: management packets are not credit-limited), so a
flow-control packet names a data VL, 0-14.
"""

from __future__ import annotations

from typing import Any

from roce.errors import DecodeError
from roce.families.ib.crc import vcrc_fast
from roce.headers import compile_codec, recorded

OP_NORMAL, OP_INIT = 0, 1  # IBA 7.9.4.1
BLOCK = 64  # bytes per credit block (IBA 7.9.4.2)
MODULUS = 4096  # FCTBS and FCCL count blocks mod 2^12
PREFIX = "infiniband_link"
MAX_VL = 14  # VL15 is not flow controlled (module docstring)

# defined in Construct in flowcontroldefs (FLOW_CONTROL), read from the layouts' record
LAYOUT = recorded("roce.families.ib.flowcontroldefs")["flowcontrol"]
assert LAYOUT.name == PREFIX
_decode, _encode = compile_codec(LAYOUT, lazy=True)
SIZE = LAYOUT.size  # 6
# the packet's first four bytes as one big-endian word: where each field starts (its low bit)
OP_SHIFT, FCTBS_SHIFT, VL_SHIFT, FCCL_SHIFT = 28, 16, 12, 0
CRC_COVERS = SIZE - 2  # the LPCRC covers the bytes before it
FIELDS = (PREFIX, *(f"{PREFIX}.{f.name}" for f in LAYOUT.fields))


def lpcrc(first4: bytes) -> int:
    """The LPCRC of a flow-control packet's first four bytes (the value Wireshark shows)."""
    return vcrc_fast(first4)


def packet(word: int) -> bytes:
    """A flow-control packet of its first four bytes, ``word`` (big-endian): the word, then
    its LPCRC."""
    head = word.to_bytes(4, "big")
    return head + lpcrc(head).to_bytes(2, "big")


def checked_word(data: bytes) -> int:
    """The first four bytes of the flow-control packet ``data`` as a big-endian word when
    its LPCRC is right; -1 when it is wrong or ``data`` is shorter than a packet."""
    if len(data) < SIZE or not valid(data):
        return -1
    return int.from_bytes(data[:CRC_COVERS], "big")


def _fast() -> tuple[Any, Any]:
    from roce import fast

    if fast._ext is None:
        return packet, checked_word
    return fast._ext.ib_link_packet, fast._ext.ib_link_word


# the two per link packet (the emulator builds and reads one per data packet-hop or so), in
# C when the fast path is built (tests/test_ib_fast.py holds them to the two above)
packet_fast, checked_word_fast = _fast()


def build(vl: int, fctbs: int, fccl: int, op: int = OP_NORMAL) -> bytes:
    """The 6 bytes of a flow-control packet; FCTBS and FCCL are taken mod 4096."""
    if not 0 <= vl <= MAX_VL:
        raise ValueError(f"flow control names a data VL 0-{MAX_VL}, not {vl}")
    # the layout of flowcontroldefs.FLOW_CONTROL, packed as one word (a packet per data
    # packet-hop: the emulator builds many; tests/test_ib_link.py decodes it by the layout)
    return packet_fast((op & 0xF) << OP_SHIFT | (fctbs % MODULUS) << FCTBS_SHIFT
                       | vl << VL_SHIFT | (fccl % MODULUS) << FCCL_SHIFT)


def decode(data: bytes, off: int = 0) -> dict:
    """Wireshark-named fields of the flow-control packet at ``data[off:]``, with
    ``infiniband_link.lpcrc.valid`` (roce's: Wireshark does not check it)."""
    if len(data) - off < SIZE:
        raise DecodeError(f"InfiniBand link packet truncated at byte {off}: needs {SIZE} "
                          f"bytes, {len(data) - off} left", PREFIX, off)
    f: dict = {PREFIX: True}
    f.update((f"{PREFIX}.{k}", v) for k, v in _decode(data, off).items())
    return f


def valid(data: bytes, off: int = 0) -> bool:
    """Whether the LPCRC of the flow-control packet at ``data[off:]`` is right."""
    return lpcrc(data[off:off + CRC_COVERS]) == int.from_bytes(
        data[off + CRC_COVERS:off + SIZE], "big")


__all__ = ["BLOCK", "FCCL_SHIFT", "FCTBS_SHIFT", "FIELDS", "MAX_VL", "MODULUS",
           "OP_INIT", "OP_NORMAL", "OP_SHIFT", "SIZE", "VL_SHIFT", "build", "checked_word",
           "checked_word_fast", "decode", "lpcrc", "packet", "packet_fast", "valid"]
