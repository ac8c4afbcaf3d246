"""roce: RoCEv2 at the packet level.

Build, parse, decode and analyse RoCE frames; the public API::

    import roce
    pkt = roce.craft("RC_RDMA_WRITE_ONLY", b"data", dqpn=0x11, psn=100, va=0x1000, rkey=0x22)
    frame = pkt.to_bytes()
    again = roce.parse(frame)
    again.fields()["reth.va"], again.icrc_valid
"""

from __future__ import annotations

# first: inspect is imported when something needs it, not by dataclasses (roce/_deferred.py);
# then: which form of the compiled emulator modules loads (roce/_compiled.py); the methods
# dataclasses compiles for roce's classes, and the digests of the sources the compiled
# modules were built from, come from a cache (roce/codecache.py)
# isort: off
from roce import _deferred  # noqa: F401
from roce import _compiled, codecache  # noqa: F401
# isort: on
from roce.errors import (
    AccessError,
    CaptureError,
    DecodeError,
    FieldNameError,
    FieldValueError,
    FilterError,
    InputError,
    InterfaceError,
    Interrupted,
    LayoutMismatch,
    NotRoCE,
    OOBError,
    PeerMessageError,
    QPStateError,
    RecoveryError,
    RecoveryMismatch,
    RemoteError,
    RoceError,
    TransportError,
    UsageError,
    VerificationError,
    WorkloadFileError,
)
from roce.fast import COMPILED
from roce.opcodes import (
    IB_OPCODES,
    OPCODES,
    ROCE_OPCODES,
    Link,
    Opcode,
    Operation,
    Position,
    Transport,
    lookup,
)
from roce.packet import Packet, craft, icrc_of_frame, parse

__version__ = "0.1.0"

__all__ = [
    # errors (roce/errors.py)
    "AccessError", "CaptureError", "DecodeError", "FieldNameError", "FieldValueError",
    "FilterError", "InputError", "InterfaceError", "Interrupted", "LayoutMismatch", "NotRoCE",
    "OOBError", "PeerMessageError", "QPStateError", "RecoveryError", "RecoveryMismatch",
    "RemoteError", "RoceError", "TransportError", "UsageError", "VerificationError",
    "WorkloadFileError",
    # the opcode table, packets
    "IB_OPCODES", "Link", "OPCODES", "ROCE_OPCODES", "Opcode", "Operation", "Position",
    "Transport", "lookup", "Packet", "craft", "parse", "icrc_of_frame", "COMPILED",
    "__version__"]
