"""A wire's serialization clock: where a frame's last bit leaves (``roce.emu.net.link.Wire``).

Within a busy period that started at ``start``, the frame that brings the bits sent to
``bits`` ends at ``start + ceil(bits * num / den)``, ``num / den`` being the nanoseconds per bit
in lowest terms: exact, so rounding never accumulates and a saturated wire runs at exactly its
rate.  The product outgrows 64 bits on a long busy period at a rate whose ``num`` is large, so
the reference computes in Python integers; the compiled twin (``roce._fastpath.serial_end``,
roce/emu/net/_serial.pxi) in 128 bits, falling back to them past that (hypothesis test in
tests/test_net_units.py).
"""

from __future__ import annotations

from roce import fast


def serial_end_reference(start: int, bits: int, num: int, den: int) -> int:
    """``start + ceil(bits * num / den)``."""
    return start - (-bits * num // den)


serial_end = serial_end_reference
if fast.COMPILED:  # the compiled twin: one call per frame a wire starts
    serial_end = fast._ext.serial_end
