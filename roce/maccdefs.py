"""MAC Control layouts in Construct (IEEE 802.3x PAUSE, IEEE 802.1Qbb PFC): the one place
their field names, widths and order are written.  ``roce.macc`` owns the frames and reads
these layouts through ``roce.headers.recorded`` (without importing Construct when the record
is current).

Field names are Wireshark's without the ``macc.`` prefix; the docstrings are its display
names.  The opcode is its own header so each body is chosen by it (as Wireshark does).
"""

from __future__ import annotations

from construct import BitsInteger, BitStruct, Construct, Flag

U = BitsInteger
PRIORITIES = range(8)  # 802.1Q priorities = PFC classes, each with a pause time and a bit

MACC = BitStruct(
    "opcode" / U(16) * "Opcode",
)
PAUSE = BitStruct(
    "pause_time" / U(16) * "pause_time",
)
CBFC = BitStruct(
    "cbfc.enbv" / U(16) * "CBFC Class Enable Vector",
    *(f"cbfc.pause_time.c{p}" / U(16) * f"C{p}" for p in PRIORITIES),
)
# The bits of ``cbfc.enbv``, MSB first: Wireshark shows them as the vector's children.
ENBV = BitStruct(
    "reserved" / U(8) * "Reserved (must be 0)",
    *(f"c{p}" / Flag * f"C{p}" for p in reversed(PRIORITIES)),
)

# Header name (flat-field prefix) -> definition.
DEFINITIONS: dict[str, Construct] = {"macc": MACC, "macc.pause": PAUSE, "macc.cbfc": CBFC,
                                     "macc.cbfc.enbv": ENBV}
