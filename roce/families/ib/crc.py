"""The two CRCs of a native InfiniBand packet: ICRC with IBA's masking, and VCRC.

ICRC (IBA 7.8.1): CRC-32 (the zlib polynomial) over the packet from LRH to the end of the
pad, with every field a switch or router may rewrite set to ones.  Which fields are
variant depends on LNH:

* LNH 2 (IBA local, BTH follows LRH): the LRH as it is but with VL set to ones; BTH with
  its resv8a byte (FECN, BECN, reserved) set to ones.
* LNH 3 (IBA global, GRH follows LRH): the whole LRH replaced by eight 0xFF bytes; GRH
  with TClass, FlowLabel and HopLmt set to ones; BTH as above.  This is exactly RoCEv1's
  ICRC (``roce.icrc``), whose eight 0xFF bytes stand in for this LRH.

The GRH and BTH masks are ``roce.icrc.MASKS``: one source for RoCE and InfiniBand.

VCRC (IBA 7.8.2): CRC-16 with polynomial 0x100B, initial value 0xFFFF, over every bit
from LRH through ICRC, inverted; computed bit-reflected (as the Endace DAG library's
``dagcrc_infiniband_vcrc16_r`` does: reflected polynomial 0xD008).  A switch recomputes
it on every hop.

Both are stored little-endian on the wire; values are shown as Wireshark shows them, the
trailer bytes read big-endian (``infiniband.invariant.crc``, ``infiniband.variant.crc``).
"""

from __future__ import annotations

from typing import Any

from roce.icrc import LRH_VL_MASK, icrc_at
from roce.locate import L3_GRH, L3_LRH, L3_LRH_GRH

VCRC_POLY_REFLECTED = 0xD008  # 0x100B, bit-reversed
VCRC_INIT = 0xFFFF
VCRC_SIZE = 2  # after the ICRC (IBA 7.8.2)
VL_MASK = LRH_VL_MASK[0]  # LRH byte 0: VL in the high nibble


def _vcrc_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ VCRC_POLY_REFLECTED if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


VCRC_TABLE = _vcrc_table()


def vcrc(data: bytes | memoryview) -> int:
    """The VCRC of ``data`` (LRH through ICRC) as the value Wireshark displays."""
    c = VCRC_INIT
    t = VCRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFF
    return ((c & 0xFF) << 8) | (c >> 8)  # stored little-endian, read big-endian


def icrc(frame: bytes, l3_kind: int, bth_off: int, icrc_off: int) -> int:
    """ICRC of a native InfiniBand packet starting at byte 0 of ``frame`` (the value
    Wireshark displays).  ``l3_kind`` is ``L3_GRH`` when LNH is 3.  The rule is
    ``roce.icrc``'s for the walk's kinds L3_LRH / L3_LRH_GRH (the LRH and GRH up to BTH)."""
    kind = L3_LRH_GRH if l3_kind == L3_GRH else L3_LRH
    return icrc_at(frame, 0, kind, bth_off, bth_off, icrc_off)


def trailer(icrc_value: int, vcrc_value: int | None = None) -> bytes:
    """Wire bytes of an ICRC (and VCRC) value as displayed."""
    out = icrc_value.to_bytes(4, "big")
    return out if vcrc_value is None else out + vcrc_value.to_bytes(2, "big")


def _configure() -> None:
    """Hand the fast path the VCRC's polynomial (its ``ib_vcrc``, the IB scan and the flow
    engine check VCRCs by _crc32.c's CRC-16 of it; ``vcrc`` here is the reference)."""
    from roce import fast

    if fast._ext is not None:
        fast._ext.ib_configure({"vcrc_poly": VCRC_POLY_REFLECTED, "vcrc_init": VCRC_INIT,
                                "vcrc_size": VCRC_SIZE})


_configure()


def _fastest() -> Any:
    from roce import fast

    return fast._ext.ib_vcrc if fast._ext is not None else vcrc


# ``vcrc`` as computed where it runs per packet (the emulator's hops, link packets): the
# fast path's twin when it is built
vcrc_fast: Any = _fastest()

__all__ = ["VCRC_SIZE", "VCRC_TABLE", "icrc", "trailer", "vcrc", "vcrc_fast"]
