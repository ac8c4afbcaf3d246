"""A PDS packet (flat fields named as ``roce.families.uet`` names them, and a payload) to an
Ethernet frame and back.  Sending: ``uetcodec``'s generated encoder of the packet's shape and
its path's frame template, which ``build.uet_bytes`` and ``build.frame`` (``encode_reference``)
stand behind for whatever those do not cover.  Receiving: the fields the PDS, SES and
congestion manager read (``uetcodec.RECEIVED``), by ``uetcodec``'s reader generated per packet
shape, ``dissect.decode`` without its expert checks behind it.  There is no layout here.

Frames are what a UET NIC puts on a routed fabric: IPv4 and UDP to port 4793 (IANA), the UDP
source port carrying the entropy value that switches hash (UE specification 1.0, 3.5.10.1:
the checksum zero), DSCP by packet class (``Marking``: data CS0 and ACKs EF as the reference
provider marks them), the data packets ECN-capable so that switches can mark them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roce.emu.uet.uetcodec import UET_AT, Received, decode, frame_fast, path
from roce.families.uet import UET_PORT
from roce.families.uet import codes as t
from roce.families.uet.build import frame, uet_bytes
from roce.headers import ECN_ECT0

DSCP_DATA = 0  # CS0 (uet-ref-prov: UET_DEFAULT_TC)
DSCP_ACK = 46  # EF: ACKs, NACKs, RUDI responses and control packets


@dataclass(frozen=True)
class Marking:
    """The DSCP of each packet class and the ECN codepoint of data packets."""

    data: int = DSCP_DATA
    control: int = DSCP_ACK
    ecn: int = ECN_ECT0


MARKING = Marking()  # the default


def is_control(fields: dict[str, Any]) -> bool:
    return fields.get("uet.pds.type") in _CONTROL


_CONTROL = t.ACKS | t.NACKS | {t.RUDI_RESP}  # answers: DSCP ``Marking.control``, not ECT


def encode(fields: dict[str, Any], payload: bytes, *, src: str, dst: str, smac: bytes,
           dmac: bytes, entropy: int, marking: Marking = MARKING, ip_id: int = 0) -> bytes:
    """The frame of one PDS packet (its SES header included in ``fields``): by the generated
    encoders and path templates of ``uetcodec`` where they cover it, else by ``build``."""
    return frame_of(fields, payload, src, dst, smac, dmac, entropy, marking, ip_id)


def frame_of(fields: dict[str, Any], payload: bytes, src: str, dst: str, smac: bytes,
             dmac: bytes, entropy: int, marking: Marking, ip_id: int) -> bytes:
    """``encode`` with its arguments in order (a host's call per packet, without keywords)."""
    if fields.get("uet.pds.type") in _CONTROL:
        dscp, ecn = marking.control, 0
    else:
        dscp, ecn = marking.data, marking.ecn
    out = frame_fast(fields, payload, src, dst, smac, dmac, dscp, ecn, entropy, ip_id)
    if out is None:  # a shape or a value the generated code leaves to the family's builder
        uet = uet_bytes(fields, payload=payload)
        out = path(src, dst, smac, dmac, dscp, ecn).frame(uet, entropy, ip_id)
        if out is None:
            out = frame(uet, src=src, dst=dst, smac=smac.hex(":"), dmac=dmac.hex(":"),
                        sport=entropy, dport=UET_PORT, dscp=dscp, ecn=ecn, ip_id=ip_id)
    return out


def encode_reference(fields: dict[str, Any], payload: bytes, *, src: str, dst: str,
                     smac: bytes, dmac: bytes, entropy: int, marking: Marking = MARKING,
                     ip_id: int = 0) -> bytes:
    """``encode`` through the family's builder alone: what the fast one is held to."""
    control = is_control(fields)
    uet = uet_bytes(fields, payload=payload)
    return frame(uet, src=src, dst=dst, smac=smac.hex(":"), dmac=dmac.hex(":"),
                 sport=entropy, dport=UET_PORT,
                 dscp=marking.control if control else marking.data,
                 ecn=0 if control else marking.ecn, ip_id=ip_id)


__all__ = ["DSCP_ACK", "DSCP_DATA", "MARKING", "Marking", "Received", "UET_AT", "decode", "encode",
           "encode_reference", "frame_of", "is_control"]
