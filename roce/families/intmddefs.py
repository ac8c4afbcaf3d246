"""In-band telemetry's headers in Construct (INT-MD over UDP, P4.org INT v2.1): the one place
the field names, widths and order of the shim, the INT-MD header and a hop record are
written.  ``roce.families.intmd`` owns what they mean and reads these layouts through
``roce.headers.recorded`` (without importing Construct when the record is current)."""

from __future__ import annotations

from construct import BitsInteger, BitStruct, Construct, Flag

U = BitsInteger

SHIM = BitStruct("type" / U(4) * "Type", "npt" / U(2) * "Next Protocol Type",
                 "shim_reserved" / U(2) * "Reserved",
                 "len" / U(8) * "Length (4-byte words after the shim)",
                 "dport" / U(16) * "Original UDP destination port")
MD = BitStruct("ver" / U(4) * "Version", "d" / Flag * "Discard",
               "e" / Flag * "Max hop count exceeded", "m" / Flag * "MTU exceeded",
               "reserved" / U(12) * "Reserved",
               "hop_ml" / U(5) * "Per-hop metadata length (4-byte words)",
               "rhc" / U(8) * "Remaining hop count",
               "instructions" / U(16) * "Instruction bitmap",
               "ds_id" / U(16) * "Domain specific ID",
               "ds_instructions" / U(16) * "Domain specific instructions",
               "ds_flags" / U(16) * "Domain specific flags")
HOP = BitStruct("switch_id" / U(32) * "Node ID",
                "queue_id" / U(8) * "Queue ID",
                "qlen" / U(24) * "Queue occupancy (bytes)",
                "egress_ts" / U(64) * "Egress timestamp (ns)",
                "tx_bytes" / U(32) * "Egress port Tx utilization (bytes sent, mod 2^32)",
                "rate_bps" / U(64) * "Port line rate (bit/s)")

DEFINITIONS: dict[str, Construct] = {"shim": SHIM, "md": MD, "hop": HOP}
# layout names (the field-name prefixes): the shim and the INT-MD header share "int"
NAMES = {"shim": "int", "md": "int", "hop": "int.hop"}
