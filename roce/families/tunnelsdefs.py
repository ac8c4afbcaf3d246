"""The tunnels' headers in Construct: GRE, ERSPAN type II and III (with the type III platform
subheader) and VXLAN, the one place their field names, widths and order are written.
``roce.families.tunnels`` owns what they mean and reads these layouts through
``roce.headers.recorded`` (without importing Construct when the record is current)."""

from __future__ import annotations

from construct import BitsInteger, BitStruct, Construct

U = BitsInteger

GRE = BitStruct("flags_and_version" / U(16) * "Flags and Version",
                "proto" / U(16) * "Protocol Type")
ERSPAN2 = BitStruct(
    "version" / U(4) * "Version", "vlan" / U(12) * "Vlan", "cos" / U(3) * "COS",
    "encap" / U(2) * "Encap", "truncated" / U(1) * "Truncated",
    "spanid" / U(10) * "SpanID", "reserved" / U(12) * "Reserved",
    "index" / U(20) * "Index",
)
ERSPAN3 = BitStruct(
    "version" / U(4) * "Version", "vlan" / U(12) * "Vlan", "cos" / U(3) * "COS",
    "bso" / U(2) * "Bad/Short/Oversized", "truncated" / U(1) * "Truncated",
    "spanid" / U(10) * "SpanID", "timestamp" / U(32) * "Timestamp",
    "sgt" / U(16) * "Security Group Tag", "p" / U(1) * "Has Ethernet PDU",
    "ft" / U(5) * "Frame Type", "hw" / U(6) * "Hardware ID",
    "direction" / U(1) * "Direction", "gra" / U(2) * "Timestamp granularity",
    "o" / U(1) * "Optional Sub headers",
)
ERSPAN3_PLATFORM = BitStruct("platid" / U(6) * "Platform ID",
                             "platinfo" / U(58) * "Platform Specific Info")
VXLAN = BitStruct("flags" / U(16) * "Flags", "gbp" / U(16) * "Group Policy ID",
                  "vni" / U(24) * "VXLAN Network Identifier (VNI)",
                  "reserved8" / U(8) * "Reserved")

DEFINITIONS: dict[str, Construct] = {"gre": GRE, "erspan2": ERSPAN2, "erspan3": ERSPAN3,
                                     "erspan3.platform": ERSPAN3_PLATFORM, "vxlan": VXLAN}
# layout names (the field-name prefixes, Wireshark's): ERSPAN's three share "erspan"
NAMES = {"erspan2": "erspan", "erspan3": "erspan", "erspan3.platform": "erspan"}
