"""QPN arithmetic: queue pair numbers are the BTH's 24-bit DestQP (IBA 9.2).

A range of QPNs that would pass 0xFFFFFF is refused, never wrapped: QPN 0 and 1 are the
management QPs (SMI and GSI, IBA 9.3.1), so a run of RC QPs that wrapped would land on
them, and two numbers for one QP (0x1000000 and 0) disagree between who counts and who
sends.  ``qpn_range`` is the one place QPNs are counted: ``roce target``'s own QPs and the
peer's it answers, and the emulated device numbering the QPs it creates.
"""

from __future__ import annotations

from roce.headers import LAYOUTS

QPN_BITS = LAYOUTS["bth"].field("destqp").bits
QPN_MAX = LAYOUTS["bth"].field("destqp").mask
QPN_COUNT = QPN_MAX + 1


def qpn_range(first: int, count: int) -> range:
    """The ``count`` QPNs from ``first``: ValueError when ``first`` is not a QPN, ``count``
    is negative, or the last would pass the 24 bits."""
    if not 0 <= first <= QPN_MAX:
        raise ValueError(f"0x{first:x} is not a {QPN_BITS}-bit QPN (0..0x{QPN_MAX:x})")
    if count < 0:
        raise ValueError(f"a count of QPNs cannot be negative ({count})")
    last = first + count - 1
    if last > QPN_MAX:
        raise ValueError(f"{count} QPNs from 0x{first:06x} end at 0x{last:x}, past the "
                         f"{QPN_BITS}-bit QPNs (0x{QPN_MAX:x} is the last)")
    return range(first, first + count)


__all__ = ["QPN_BITS", "QPN_COUNT", "QPN_MAX", "qpn_range"]
