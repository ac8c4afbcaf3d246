"""InfiniBand's flow-control packet in Construct (IBA Vol 1 7.9.4): the one place its field
names, widths and order are written.  ``roce.families.ib.flowcontrol`` owns what they mean
and reads this layout through ``roce.headers.recorded`` (without importing Construct when
the record is current)."""

from __future__ import annotations

from construct import BitsInteger, BitStruct, Construct

FLOW_CONTROL = BitStruct(
    "op" / BitsInteger(4) * "Operand",
    "fctbs" / BitsInteger(12) * "Flow Control Total Blocks Sent",
    "vl" / BitsInteger(4) * "Virtual Lane",
    "fccl" / BitsInteger(12) * "Flow Control Credit Limit",
    "lpcrc" / BitsInteger(16) * "Link Packet Cyclic Redundancy Check",
)

DEFINITIONS: dict[str, Construct] = {"flowcontrol": FLOW_CONTROL}
# the layout's name: the field-name prefix, Wireshark's
NAMES = {"flowcontrol": "infiniband_link"}
