"""The few header fields the harnesses read or rewrite in whole frames (Ethernet addresses,
the BTH destination QP), located through the header layouts (``roce.headers``) and the
walk, never by retyped offsets."""

from __future__ import annotations

from roce import fast
from roce.headers import LAYOUTS, Field
from roce.locate import Walk
from roce.testing.mutate import get_field, set_field

_ETH_DST = LAYOUTS["eth"].field("dst")
_ETH_SRC = LAYOUTS["eth"].field("src")
_BTH_DESTQP = LAYOUTS["bth"].field("destqp")


def _bytes_of(frame: bytes, base: int, f: Field) -> bytes:
    start = base + f.byte_offset
    return bytes(frame[start:start + f.bits // 8])


def eth_dst(frame: bytes) -> bytes:
    """The Ethernet destination address of a frame (its first header)."""
    return _bytes_of(frame, 0, _ETH_DST)


def eth_src(frame: bytes) -> bytes:
    return _bytes_of(frame, 0, _ETH_SRC)


def mac_bytes(mac: str) -> bytes:
    """``02:00:00:00:00:01`` (or with dashes) as six bytes."""
    return bytes.fromhex(mac.replace(":", "").replace("-", ""))


def dest_qp(frame: bytes, w: Walk) -> int:
    """The BTH destination QP of a frame the walk located."""
    return get_field(frame, w.bth_off, _BTH_DESTQP)


def set_dest_qp(buf: bytearray, w: Walk, qpn: int) -> None:
    set_field(buf, w.bth_off, _BTH_DESTQP, qpn)


def icrc_ok(frame: bytes, w: Walk) -> bool:
    """The ICRC stored in a frame the walk accepted is the one its contents give."""
    return fast.icrc_of(frame, w) == int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
