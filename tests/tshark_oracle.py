"""What the tshark-oracle tests share: which opcodes Wireshark 4.0 decodes as our table does,
its field names against ours, and how to run it and read its values."""

from __future__ import annotations

import shutil
from pathlib import Path

from roce import OPCODES

TSHARK = shutil.which("tshark")

# Wireshark 4.0 decodes these rows as the table does.  Left out on purpose: RD (0x40..), UD
# (0x64/0x65), XRC (0xA0..) and CNP (0x81) are mis-decoded (wrong or missing extended
# headers; 0x80 is called "CNP"), and FLUSH (0x1C) and ATOMIC WRITE (0x1D) are unknown to it.
TSHARK_CODES = [c for c in sorted(OPCODES)
                if c <= 0x14 or c in (0x16, 0x17) or 0x20 <= c <= 0x2B]

# infiniband.X as tshark names it -> our Packet.fields() key.
FIELDS = {
    "infiniband.bth.opcode": "bth.opcode", "infiniband.bth.se": "bth.se",
    "infiniband.bth.m": "bth.m", "infiniband.bth.padcnt": "bth.padcnt",
    "infiniband.bth.tver": "bth.tver", "infiniband.bth.p_key": "bth.p_key",
    "infiniband.bth.destqp": "bth.destqp", "infiniband.bth.a": "bth.a",
    "infiniband.bth.psn": "bth.psn", "infiniband.reth.va": "reth.va",
    "infiniband.reth.r_key": "reth.r_key", "infiniband.reth.dmalen": "reth.dmalen",
    "infiniband.aeth.syndrome": "aeth.syndrome", "infiniband.aeth.msn": "aeth.msn",
    "infiniband.atomiceth.swapdt": "atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt": "atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt": "atomicacketh.origremdt",
    "infiniband.immdt": "immdt", "infiniband.ieth": "ieth",
    "infiniband.invariant.crc": "icrc",
}
# Wireshark 4.0 shows the AtomicETH virtual address and remote key with the RETH fields.
ATOMIC_AS_RETH = {"reth.va": "atomiceth.va", "reth.r_key": "atomiceth.r_key"}

# Payload heuristics (RPC-over-RDMA, SMB Direct, ...) may claim a SEND payload, mark the frame
# malformed and stop before the ICRC: switch them off, we test the InfiniBand dissector only.
NO_HEURISTICS = ["rpcordma", "smc", "smb_direct", "nvme-rdma", "lnet", "iser",
                 "infiniband_sdp", "fcoib", "infiniband.eoib"]


def fields_command(path: str | Path, fields: list[str]) -> list[str]:
    """tshark printing ``fields`` tab-separated, one row per frame, InfiniBand only."""
    assert TSHARK is not None
    cmd = [TSHARK, "-n", "-r", str(path)]
    for proto in NO_HEURISTICS:
        cmd += ["--disable-protocol", proto]
    cmd += ["-T", "fields", "-E", "separator=/t"]
    for f in fields:
        cmd += ["-e", f]
    return cmd


def our_key(ws_name: str, headers: tuple[str, ...]) -> str:
    """Our field key for tshark's ``ws_name`` in a packet with these extended headers."""
    key = FIELDS[ws_name]
    if "atomiceth" in headers and key in ATOMIC_AS_RETH:
        key = ATOMIC_AS_RETH[key]
    return key


def tshark_value(field: str, text: str) -> int | None:
    """A value as tshark printed it, as an integer (None when absent)."""
    if text == "":
        return None
    parts = text.split(",")  # the header and its one field share the name: shown twice
    assert len(set(parts)) == 1, (field, text)
    text = parts[0]
    if text.startswith("0x") or field in ("infiniband.immdt", "infiniband.ieth"):
        return int(text, 16)
    if text in ("True", "False"):
        return int(text == "True")
    return int(text)
