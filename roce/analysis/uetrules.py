"""The rules of ``roce stats`` on Ultra Ethernet Transport, written once: what each PDS type
is to a PDC, the UET fields the analysis reads, what asks for a close or a clear, which NACK
codes are trims, and the per-PDC counters the reports show.

The PDC engine (``roce.analysis.uetref``, interpreted as the reference and compiled by the
build as ``roce.analysis._uetengine``) applies them to each packet; it reads the fields either
from the bytes, at the places the UET family's layouts put them (``FIELDS`` names the layouts'
flat keys, so an offset is never written twice), or from the family's decoded fields (a packet
the byte reader leaves to the dissector: encrypted, cut short, tunnelled).  The report
(``roce.analysis.uetflows``: text, JSON, Parquet) names its counters from ``COUNTERS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roce.families.uet import codes as t

# -- what a packet is to its PDC (by PDS type) ----------------------------------------------------
K_OTHER, K_REQUEST, K_ACK, K_NACK, K_CTRL = range(5)


def kind_of(typ: int) -> int:
    """What a PDS type is to the analysis: a PSN-sequenced request, an ACK, a NACK, a control
    packet, or other (RUDI, UUD and unknown types: no PDC, counted as unreliable)."""
    if typ in t.REQUESTS:
        return K_REQUEST
    if typ in t.ACKS:
        return K_ACK
    if typ in t.NACKS:
        return K_NACK
    if typ == t.CTRL:
        return K_CTRL
    return K_OTHER


# -- the fields read, by their flat names in the family's layouts -------------------------------
# PDS body fields (the layouts of ``roce.families.uet.layouts.pds_chain``); NSCC's come from the
# layout of the ACK's CC state when its CC type is NSCC (``NSCC_FIELDS``, ``layouts.ack_cc_key``).
FIELDS = ("uet.pds.psn", "uet.pds.spdcid", "uet.pds.dpdcid", "uet.pds.psn_offset",
          "uet.pds.cack_psn", "uet.pds.ack.sack_psn_offset", "uet.pds.ack.sack_bitmap",
          "uet.pds.ack.cc_type", "uet.pds.nack.code", "uet.pds.nack.psn")
NSCC_FIELDS = ("uet.pds.ack.cc_state.service_time", "uet.pds.ack.cc_state.rcvd_bytes",
               "uet.pds.ack.cc_state.ooo_count")
# the byte whose whole value is a SYN's PDC mode (Wireshark's uet.pds.pdc_mode)
PDC_MODE_FIELD = "uet.pds.pdc_mode_rsv"
# SES: a message is told by the standard request's message ID, SOM and EOM flags
SES_FIELDS = ("uet.ses.std.message_id", "uet.ses.std.som", "uet.ses.std.eom")
# ... and, for the opcodes whose packets carry message data, the lengths the payload is held
# to (``uetref._cut``: a trimmed copy carries less)
LENGTH_FIELDS = ("uet.ses.std.request_length", "uet.ses.std.payload_length")
DATA_OPCODES = t.DATA_OPCODES


def ack_close(f: Mapping[str, Any]) -> bool:
    """Does an ACK ask to close its PDC?  The specification's 2-bit REQ field says 2 (CLOSE);
    the reference provider's separate REQ_CLS bit is set."""
    return f.get("uet.pds.flags.req") == 2 or bool(f.get("uet.pds.flags.req_cls"))


def ack_clear(f: Mapping[str, Any]) -> bool:
    """Does an ACK ask to clear (REQ 1, or the provider's REQ_CLR bit)?"""
    return f.get("uet.pds.flags.req") == 1 or bool(f.get("uet.pds.flags.req_clr"))


# control types of the close and clear handshakes (the reference provider's numbering, which
# names control packets in the report): the target asks (an ACK's request bits, or CLOSE_REQ /
# CLEAR_REQ), the initiator does (CLOSE / CLEAR).  A handshake is a request answered by the
# command; the requests still waiting at the end of the capture are unanswered.
CLEAR_COMMAND, CLEAR_REQUEST, CLOSE_COMMAND, CLOSE_REQUEST = 2, 3, 4, 5
CLOSE_CONTROLS = frozenset((CLOSE_COMMAND, CLOSE_REQUEST))
CLEAR_CONTROLS = frozenset((CLEAR_COMMAND, CLEAR_REQUEST))
TARGET_CONTROLS = frozenset((CLEAR_REQUEST, CLOSE_REQUEST))  # sent by the target
TRIM_NACKS = t.TRIM_NACKS  # counted apart from the resource NACKs


def nack_name(code: int) -> str:
    return t.NACK_CODES.get(code, (f"0x{code:02x}", ""))[0]


def control_name(ct: int) -> str:
    return t.REF_PROV_CTRL_TYPES.get(ct, (f"0x{ct:x}", ""))[0]


# -- the per-PDC counters: JSON key, what it counts ----------------------------------------------
COUNTERS: tuple[tuple[str, str], ...] = (
    ("requests", "PSN-sequenced requests"),
    ("request_bytes", "their payload bytes, every copy"),
    ("syn", "SYN requests"),
    ("missing", "PSNs skipped and never seen"),
    ("retransmissions", "requests with RETX, or of a PSN seen before"),
    ("spurious_retransmissions", "resends of a PSN acknowledged before"),
    ("acks", "ACKs"),
    ("cack_advances", "ACKs that moved the cumulative ACK PSN"),
    ("ecn_marked_acks", "ACKs with the M flag"),
    ("probe_acks", "ACKs with the P flag"),
    ("sack_holes", "ACKs whose SACK bitmap has a hole"),
    ("sack_covered", "PSNs past the cumulative ACK that a SACK bitmap acknowledged"),
    ("close_requests", "ACKs asking to close, CLOSE and CLOSE_REQ control packets"),
    ("clear_requests", "ACKs asking to clear, CLEAR and CLEAR_REQ control packets"),
    ("close_handshakes", "close requests a CLOSE answered"),
    ("clear_handshakes", "clear requests a CLEAR answered"),
    ("close_unanswered", "close requests no CLOSE answered by the end of the capture"),
    ("clear_unanswered", "clear requests no CLEAR answered by the end of the capture"),
)
COUNTER_KEYS = tuple(k for k, _ in COUNTERS)
# PSNs listed in the text report before "and N more"
TEXT_PSNS = 8

__all__ = ["CLEAR_COMMAND", "CLEAR_CONTROLS", "CLEAR_REQUEST", "CLOSE_COMMAND", "CLOSE_CONTROLS",
           "CLOSE_REQUEST", "COUNTERS", "COUNTER_KEYS", "DATA_OPCODES", "FIELDS", "K_ACK", "K_CTRL",
           "K_NACK", "K_OTHER", "K_REQUEST", "LENGTH_FIELDS", "NSCC_FIELDS", "PDC_MODE_FIELD",
           "SES_FIELDS", "TARGET_CONTROLS", "TEXT_PSNS", "TRIM_NACKS", "ack_clear", "ack_close",
           "control_name", "kind_of", "nack_name"]
