"""A PDS packet (flat fields named as ``roce.families.uet`` names them, and a payload) to an
Ethernet frame and back, through the UET family's codec: ``build.uet_bytes`` and
``build.frame`` to send, ``dissect.decode`` to receive.  There is no layout here.

Frames are what a UET NIC puts on a routed fabric: IPv4 and UDP to port 4793 (IANA), the UDP
source port carrying the entropy value that switches hash (UE specification 1.0, 3.5.10.1:
the checksum zero), DSCP by packet class (``Marking``: data CS0 and ACKs EF as the reference
provider marks them), the data packets ECN-capable so that switches can mark them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roce.emu.net import hop
from roce.families.uet import UET_PORT
from roce.families.uet import codes as t
from roce.families.uet.build import frame, uet_bytes
from roce.families.uet.dissect import decode as dissect
from roce.headers import ECN_CE, ECN_ECT0

UDP_HDR = 8
UET_AT = hop.L2 + hop.IP_HDR + UDP_HDR  # where the PDS starts in our frames
_ULEN = hop.UDP_SPORT[0] + 4  # the UDP length field
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
    """The frame of one PDS packet (its SES header included in ``fields``)."""
    control = is_control(fields)
    uet = uet_bytes(fields, payload=payload)
    return frame(uet, src=src, dst=dst, smac=smac.hex(":"), dmac=dmac.hex(":"),
                 sport=entropy, dport=UET_PORT,
                 dscp=marking.control if control else marking.data,
                 ecn=0 if control else marking.ecn, ip_id=ip_id)


@dataclass
class Received:
    fields: dict[str, Any]
    payload: bytes
    src: str
    ce: bool
    dscp: int


def decode(frame_bytes: bytes) -> Received | None:
    """The PDS packet in a frame our hosts build (IPv4, UDP to port 4793), or None when
    the frame is something else or does not decode as UET."""
    if len(frame_bytes) < UET_AT or not hop.is_ipv4(frame_bytes):
        return None
    if int.from_bytes(frame_bytes[hop.UDP_DPORT[0]:hop.UDP_DPORT[1]], "big") != UET_PORT:
        return None
    ulen = int.from_bytes(frame_bytes[_ULEN:_ULEN + 2], "big")
    data = frame_bytes[UET_AT:UET_AT - UDP_HDR + ulen]
    d = dissect(data)
    if d.error is not None or "uet.pds.type" not in d.fields:
        return None
    payload = data[len(data) - d.fields.get("payload.len", 0):]
    src = ".".join(str(b) for b in frame_bytes[hop.SRC_IP[0]:hop.SRC_IP[1]])
    return Received(d.fields, bytes(payload), src, hop.ecn(frame_bytes) == ECN_CE,
                    hop.dscp(frame_bytes))


__all__ = ["DSCP_ACK", "DSCP_DATA", "MARKING", "Marking", "Received", "UET_AT", "decode", "encode",
           "is_control"]
