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
from typing import Any, NamedTuple

from roce.emu.net import hop
from roce.emu.uet.uetcodec import UET_AT, path, receive, uet_header
from roce.families.uet import UET_PORT
from roce.families.uet import codes as t
from roce.families.uet.build import frame, uet_bytes
from roce.headers import ECN_CE, ECN_ECT0

UDP_HDR = 8
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
    """The frame of one PDS packet (its SES header included in ``fields``): by the generated
    encoders and path templates of ``uetcodec`` where they cover it, else by ``build``."""
    return frame_of(fields, payload, src, dst, smac, dmac, entropy, marking, ip_id)


def frame_of(fields: dict[str, Any], payload: bytes, src: str, dst: str, smac: bytes,
             dmac: bytes, entropy: int, marking: Marking, ip_id: int) -> bytes:
    """``encode`` with its arguments in order (a host's call per packet, without keywords)."""
    control = fields.get("uet.pds.type") in _CONTROL
    dscp = marking.control if control else marking.data
    ecn = 0 if control else marking.ecn
    head = uet_header(fields)
    if head is None:
        uet = uet_bytes(fields, payload=payload)
        out = path(src, dst, smac, dmac, dscp, ecn).frame(uet, entropy, ip_id)
    else:
        out = path(src, dst, smac, dmac, dscp, ecn).wrap(head, payload, entropy, ip_id)
        if out is None:
            uet = head + payload
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


class Received(NamedTuple):
    """What a host takes from a frame: the ``RECEIVED`` fields, the payload, the source
    address, whether it was marked CE, its DSCP."""

    fields: dict[str, Any]
    payload: bytes
    src: str
    ce: bool
    dscp: int


def decode(frame_bytes: bytes) -> Received | None:
    """The PDS packet in a frame our hosts build (IPv4, UDP to port 4793), or None when
    the frame is something else or does not decode as UET.  Its fields are those the PDS,
    SES and congestion manager read (``uetcodec.RECEIVED``), as ``dissect.decode`` reads them;
    the expert checks are left out: no PDS decision reads them (``roce decode`` and ``roce
    stats`` run them on the pcaps)."""
    if len(frame_bytes) < UET_AT or not frame_bytes.startswith(_IPV4, _ETYPE0) or \
            not frame_bytes.startswith(_PORT, _DPORT0):
        return None
    end = _UDP_AT + ((frame_bytes[_ULEN] << 8) | frame_bytes[_ULEN + 1])
    got = receive(frame_bytes, end)
    if got is None or "uet.pds.type" not in got[0]:
        return None
    raw = frame_bytes[_SRC0:_SRC1]
    src = _ADDRESSES.get(raw)
    if src is None:
        if len(_ADDRESSES) > 4096:
            _ADDRESSES.clear()
        src = _ADDRESSES[raw] = ".".join(str(b) for b in raw)
    tos = frame_bytes[_TOS]
    # the tuple made in C (a named tuple's own constructor is Python)
    return _tuple(Received, (got[0], frame_bytes[got[1]:end], src,
                             (tos >> _ECN_SHIFT) & _ECN_MASK == ECN_CE,
                             (tos >> _DSCP_SHIFT) & _DSCP_MASK))


# the places and values decode reads, looked up once
_IPV4, _PORT = hop.IPV4_TYPE, UET_PORT.to_bytes(2, "big")
_tuple = tuple.__new__
_UDP_AT = UET_AT - UDP_HDR
_TOS, _ECN_SHIFT, _ECN_MASK = hop.TOS, hop.ECN_SHIFT, hop.ECN_MASK
_DSCP_SHIFT, _DSCP_MASK = hop.DSCP_SHIFT, hop.DSCP_MASK
_ETYPE0 = hop.ETYPE[0]
_DPORT0 = hop.UDP_DPORT[0]
_SRC0, _SRC1 = hop.SRC_IP
_ADDRESSES: dict[bytes, str] = {}  # source address bytes -> dotted quad, per source once


__all__ = ["DSCP_ACK", "DSCP_DATA", "MARKING", "Marking", "Received", "UET_AT", "decode", "encode",
           "encode_reference", "frame_of", "is_control"]
