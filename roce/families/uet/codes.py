"""The numbers of Ultra Ethernet Transport and their names: PDS types, next headers, control
types, NACK codes, SES request and response opcodes, return codes, atomic operations and data
types, congestion-control types.  Each table maps a number to (short name, description): the
short name is what ``roce decode``'s one-line Info and ``-Y`` names show (the identifiers of
UE specification 1.0.1 as Wireshark 5.0's ``packet-uet.c`` defines them), the description
what ``-V`` shows (our wording).

Where the reference provider (``ultraethernet/uet-ref-prov``, ``uet_pkt_hdr.h``) knows numbers
the specification's reading does not (SES opcodes 0x10-0x11, control type 9, the response
list values), they are in the ``REF_PROV_*`` tables; ``roce.families.uet.layouts`` says which
reading uses which.  docs/protocol.md, "Ultra Ethernet Transport", lists the sources.
"""

from __future__ import annotations

Names = dict[int, tuple[str, str]]

# -- the prologue ---------------------------------------------------------------------------------

TSS_TYPE = 1  # the first 5 bits of a TSS header: the PDS type number 1 ("encryption header")
PDS_TYPES: Names = {
    0: ("RESERVED", "Reserved"),
    1: ("TSS", "Security header (TSS)"),
    2: ("RUD_REQ", "RUD Request"),
    3: ("ROD_REQ", "ROD Request"),
    4: ("RUDI_REQ", "RUDI Request"),
    5: ("RUDI_RESP", "RUDI Response"),
    6: ("UUD_REQ", "UUD Request"),
    7: ("ACK", "ACK"),
    8: ("ACK_CC", "ACK with CC extension"),
    9: ("ACK_CCX", "ACK with CCX extension"),
    10: ("NACK", "NACK"),
    11: ("CTRL", "Control"),
    12: ("NACK_CCX", "NACK with CCX extension"),
    13: ("RUD_CC_REQ", "RUD Request with CC state"),
    14: ("ROD_CC_REQ", "ROD Request with CC state"),
}
RUD_REQ, ROD_REQ, RUDI_REQ, RUDI_RESP, UUD_REQ = 2, 3, 4, 5, 6
ACK, ACK_CC, ACK_CCX, NACK, CTRL, NACK_CCX, RUD_CC_REQ, ROD_CC_REQ = range(7, 15)
REQUESTS = frozenset((RUD_REQ, ROD_REQ, RUD_CC_REQ, ROD_CC_REQ))  # PSN-sequenced requests
CC_REQUESTS = frozenset((RUD_CC_REQ, ROD_CC_REQ))
ACKS = frozenset((ACK, ACK_CC, ACK_CCX))
NACKS = frozenset((NACK, NACK_CCX))
RUDI = frozenset((RUDI_REQ, RUDI_RESP))

NEXT_HEADERS: Names = {
    0: ("NONE", "No SES header"),
    1: ("REQ_SMALL", "SES small request"),
    2: ("REQ_MEDIUM", "SES medium request"),
    3: ("REQ_STD", "SES standard request"),
    4: ("RSP", "SES response"),
    5: ("RSP_DATA", "SES response with data"),
    6: ("RSP_DATA_SMALL", "SES small response with data"),
}
NH_NONE, NH_SMALL, NH_MEDIUM, NH_STD, NH_RSP, NH_RSP_DATA, NH_RSP_DATA_SMALL = range(7)

CTRL_TYPES: Names = {
    0: ("NOOP", "No operation"),
    1: ("ACK_REQ", "Request for ACK"),
    2: ("CLEAR", "Clear"),
    3: ("CLEAR_REQ", "Request for clear"),
    4: ("CLOSE", "Close"),
    5: ("CLOSE_REQ", "Request for close"),
    6: ("PROBE", "Probe"),
    7: ("CREDIT", "Credit"),
    8: ("CREDIT_REQ", "Request for credit"),
}
REF_PROV_CTRL_TYPES: Names = {**CTRL_TYPES, 9: ("NEGOTIATION", "Negotiation")}
# what the 32-bit payload of a control packet holds, by control type
CTRL_PAYLOAD: dict[int, str] = {
    0: "unused", 1: "message ID or 0", 2: "clear sequence number", 3: "clear sequence number",
    4: "unused", 5: "unused", 6: "SACK bitmap base PSN", 7: "credit allocation",
    8: "credit request", 9: "negotiation",
}

ACK_REQUESTS: Names = {0: ("NONE", "No request"), 1: ("CLEAR", "Clear PSN"),
                       2: ("CLOSE", "Close PDC"), 3: ("RESERVED", "Reserved")}
CC_TYPES: Names = {0: ("NSCC", "NSCC"), 1: ("CREDIT", "Credit")}
CC_NSCC, CC_CREDIT = 0, 1

NACK_CODES: Names = {
    0x01: ("TRIMMED", "the packet was trimmed"),
    0x02: ("TRIMMED_LASTHOP", "the packet was trimmed by the last switch"),
    0x03: ("TRIMMED_ACK", "an ACK carrying read data was trimmed"),
    0x04: ("NO_PDC_AVAIL", "no PDC left at the target"),
    0x05: ("NO_CCC_AVAIL", "no congestion control context left"),
    0x06: ("NO_BITMAP", "no PSN tracking state left"),
    0x07: ("NO_PKT_BUFFER", "no packet buffer left"),
    0x08: ("NO_GTD_DEL_AVAIL", "no guaranteed-delivery response state left"),
    0x09: ("NO_SES_MSG_AVAIL", "no message tracking state left"),
    0x0A: ("NO_RESOURCE", "a resource is not available"),
    0x0B: ("PSN_OOR_WINDOW", "PSN outside the tracking window"),
    0x0D: ("ROD_OOO", "out-of-order PSN on an ROD PDC"),
    0x0E: ("INV_DPDCID", "unknown destination PDC and no SYN"),
    0x0F: ("PDC_HDR_MISMATCH", "no SYN and the packet does not match the PDC"),
    0x10: ("CLOSING", "the PDC is closed or closing"),
    0x11: ("CLOSING_IN_ERR", "the close timed out at the target"),
    0x12: ("PKT_NOT_RCVD", "ACK requested for a PSN never received"),
    0x13: ("GTD_DEL_RESP_UNAVAIL", "guaranteed-delivery response lost for a duplicate"),
    0x14: ("ACK_WITH_DATA", "ACK requested for a PSN with read response data"),
    0x15: ("INVALID_SYN", "SYN with a PSN outside the SYN range"),
    0x16: ("PDC_MODE_MISMATCH", "delivery mode (RUD/ROD) does not match"),
    0x17: ("NEW_START_PSN", "resend everything from a new start PSN"),
    0x18: ("RCVD_SES_PROCG", "still being processed by the SES"),
    0x19: ("UNEXP_EVENT", "unexpected event"),
    0x1A: ("RCVR_INFER_LOSS", "the receiver infers a loss"),
    0xFD: ("EXP_NACK_NORMAL", "experimental, normal"),
    0xFE: ("EXP_NACK_ERR", "experimental, error"),
    0xFF: ("EXP_NACK_FATAL", "experimental, fatal"),
}
# trims are counted apart from resource NACKs (roce stats on UET)
TRIM_NACKS = frozenset((0x01, 0x02, 0x03))

# -- SES ------------------------------------------------------------------------------------------

SES_OPCODES: Names = {
    0x00: ("NO_OP", "No operation"),
    0x01: ("WRITE", "Write"),
    0x02: ("READ", "Read"),
    0x03: ("ATOMIC", "Atomic"),
    0x04: ("FETCHING_ATOMIC", "Fetching atomic"),
    0x05: ("SEND", "Send"),
    0x06: ("RENDEZVOUS_SEND", "Rendezvous send"),
    0x07: ("DATAGRAM_SEND", "Datagram send"),
    0x08: ("DEFERRABLE_SEND", "Deferrable send"),
    0x09: ("TAGGED_SEND", "Tagged send"),
    0x0A: ("RENDEZVOUS_TSEND", "Rendezvous tagged send"),
    0x0B: ("DEFERRABLE_TSEND", "Deferrable tagged send"),
    0x0C: ("DEFERRABLE_RTR", "Deferrable ready to restart"),
    0x0D: ("TSEND_ATOMIC", "Tagged send atomic"),
    0x0E: ("TSEND_FETCH_ATOMIC", "Tagged send fetching atomic"),
    0x0F: ("MSG_ERROR", "Message error"),
}
REF_PROV_SES_OPCODES: Names = {**SES_OPCODES, 0x10: ("SYNC_WRITE", "Synchronised write"),
                               0x11: ("SYNC_ATOMIC", "Synchronised atomic")}
WRITE, READ, ATOMIC, FETCHING_ATOMIC, SEND = 0x01, 0x02, 0x03, 0x04, 0x05
RENDEZVOUS_SEND, DEFERRABLE_SEND, RENDEZVOUS_TSEND = 0x06, 0x08, 0x0A
DEFERRABLE_TSEND, DEFERRABLE_RTR, TSEND_FETCH_ATOMIC = 0x0B, 0x0C, 0x0E
SYNC_WRITE, SYNC_ATOMIC = 0x10, 0x11
# what follows a request's SES header (Wireshark's dissect_ses_*_req switch)
ATOMIC_OPCODES = frozenset((ATOMIC, FETCHING_ATOMIC, TSEND_FETCH_ATOMIC))
RENDEZVOUS_OPCODES = frozenset((RENDEZVOUS_SEND, RENDEZVOUS_TSEND))
# a restart token in place of the buffer offset, or of the memory key
RESTART_AT_OFFSET = frozenset((DEFERRABLE_SEND, DEFERRABLE_TSEND))
RESTART_AT_KEY = frozenset((DEFERRABLE_RTR,))
# opcodes whose packets carry message data: an SES length must match the payload
DATA_OPCODES = frozenset((WRITE, SEND, 0x07, DEFERRABLE_SEND, 0x09, SYNC_WRITE))

SES_FLAGS = (("ver", 0xC0), ("dc", 0x20), ("ie", 0x10), ("rel", 0x08), ("hd", 0x04),
             ("eom", 0x02), ("som", 0x01))

RSP_OPCODES: Names = {0: ("DEFAULT_RESPONSE", "Default response"), 1: ("RESPONSE", "Response"),
                      2: ("RESPONSE_W_DATA", "Response with data"),
                      3: ("NO_RESPONSE", "No response")}
RSP_DEFAULT, RSP_RESPONSE, RSP_WITH_DATA, RSP_NONE = range(4)
# the response opcodes each next header admits (Wireshark's uet.ses.rsp.invalid_opcode)
RSP_OPCODES_OF: dict[int, frozenset[int]] = {
    NH_RSP: frozenset((RSP_DEFAULT, RSP_RESPONSE, RSP_NONE)),
    NH_RSP_DATA: frozenset((RSP_WITH_DATA,)),
    NH_RSP_DATA_SMALL: frozenset((RSP_WITH_DATA,)),
}
REF_PROV_RSP_LISTS: Names = {0: ("EXPECTED", "expected list"), 1: ("OVERFLOW", "overflow list")}

RETURN_CODES: Names = {
    0x00: ("NULL", "no code"),
    0x01: ("OK", "success"),
    0x02: ("BAD_GENERATION", "index generation does not match"),
    0x03: ("DISABLED", "resource disabled"),
    0x04: ("DISABLED_GEN", "resource disabled, generation supported"),
    0x05: ("NO_MATCH", "message not matched, dropped"),
    0x06: ("UNSUPPORTED_OP", "operation not supported"),
    0x07: ("UNSUPPORTED_SIZE", "message larger than supported"),
    0x08: ("AT_INVALID", "address translation context invalid"),
    0x09: ("AT_PERM", "address translation permission failure"),
    0x0A: ("AT_ATS_ERROR", "ATS translation request failed"),
    0x0B: ("AT_NO_TRANS", "no translation"),
    0x0C: ("AT_OUT_OF_RANGE", "virtual address out of range"),
    0x0D: ("HOST_POISONED", "host read poisoned"),
    0x0E: ("HOST_UNSUCCESS_CMPL", "host read unsuccessful"),
    0x0F: ("AMO_UNSUPPORTED_OP", "atomic operation not supported"),
    0x10: ("AMO_UNSUPPORTED_DT", "atomic data type not supported"),
    0x11: ("AMO_UNSUPPORTED_SIZE", "atomic length not a multiple of the data type"),
    0x12: ("AMO_UNALIGNED", "atomic address unaligned"),
    0x13: ("AMO_FP_NAN", "atomic made a NaN"),
    0x14: ("AMO_FP_UNDERFLOW", "atomic underflow"),
    0x15: ("AMO_FP_OVERFLOW", "atomic overflow"),
    0x16: ("AMO_FP_INEXACT", "atomic inexact"),
    0x17: ("PERM_VIOLATION", "permission violation"),
    0x18: ("OP_VIOLATION", "operation violates the buffer's access"),
    0x19: ("BAD_INDEX", "index not configured"),
    0x1A: ("BAD_PID", "PID not found"),
    0x1B: ("BAD_JOB_ID", "job ID not found"),
    0x1C: ("BAD_MKEY", "memory key maps no buffer"),
    0x1D: ("BAD_ADDR", "invalid address"),
    0x1E: ("CANCELLED", "cancelled by the target"),
    0x1F: ("UNDELIVERABLE", "undeliverable"),
    0x20: ("UNCOR", "uncorrectable error"),
    0x21: ("UNCOR_TRNSNT", "uncorrectable, transient error"),
    0x22: ("TOO_LONG", "message longer than its buffer"),
    0x23: ("INITIATOR_ERR", "initiator error echoed"),
    0x24: ("DROPPED", "dropped at the target"),
}

AMO_OPCODES: Names = {
    0x00: ("MIN", "minimum"), 0x01: ("MAX", "maximum"), 0x02: ("SUM", "sum"),
    0x03: ("DIFF", "difference"), 0x04: ("PROD", "product"), 0x05: ("LOR", "logical or"),
    0x06: ("LAND", "logical and"), 0x07: ("BOR", "bitwise or"), 0x08: ("BAND", "bitwise and"),
    0x09: ("LXOR", "logical xor"), 0x0A: ("BXOR", "bitwise xor"), 0x0B: ("READ", "read"),
    0x0C: ("WRITE", "write"), 0x0D: ("CSWAP", "compare and swap if equal"),
    0x0E: ("CSWAP_NE", "compare and swap if not equal"),
    0x0F: ("CSWAP_LE", "compare and swap if less or equal"),
    0x10: ("CSWAP_LT", "compare and swap if less"),
    0x11: ("CSWAP_GE", "compare and swap if greater or equal"),
    0x12: ("CSWAP_GT", "compare and swap if greater"),
    0x13: ("MSWAP", "swap masked bits"), 0x14: ("INVAL", "invalidate"),
}
# atomic opcodes that carry compare and swap operands (the 36-byte extension header)
CSWAP_OPCODES = frozenset(range(0x0D, 0x13))
AMO_TYPES: Names = {
    0x00: ("INT8", "8-bit signed"), 0x01: ("UINT8", "8-bit unsigned"),
    0x02: ("INT16", "16-bit signed"), 0x03: ("UINT16", "16-bit unsigned"),
    0x04: ("INT32", "32-bit signed"), 0x05: ("UINT32", "32-bit unsigned"),
    0x06: ("INT64", "64-bit signed"), 0x07: ("UINT64", "64-bit unsigned"),
    0x08: ("INT128", "128-bit signed"), 0x09: ("UINT128", "128-bit unsigned"),
    0x0A: ("FLOAT", "single float"), 0x0B: ("DOUBLE", "double float"),
    0x0C: ("FLOAT_COMPLEX", "pair of floats"), 0x0D: ("DOUBLE_COMPLEX", "pair of doubles"),
    0x0E: ("LONG_DOUBLE", "extended float"), 0x0F: ("LONG_DOUBLE_COMPLEX",
                                                    "pair of extended floats"),
    0x10: ("BF16", "bfloat16"), 0x11: ("FP16", "IEEE half float"),
}
AMO_CONTROLS: Names = {0: ("NONE", "none"), 1: ("CACHEABLE", "cacheable"),
                       2: ("CPU_COHERENT", "CPU coherent"),
                       3: ("CACHEABLE_CPU_COHERENT", "cacheable, CPU coherent")}


def short(table: Names, value: int) -> str:
    """The short name of ``value``, or ``Unknown(value)``."""
    hit = table.get(value)
    return hit[0] if hit is not None else f"Unknown({value})"


def described(table: Names, value: int) -> str:
    """``NAME (value)`` with the description, for the ``-V`` tree."""
    hit = table.get(value)
    if hit is None:
        return f"Unknown ({value})"
    return f"{hit[0]}: {hit[1]} ({value})"


def lookup_name(table: Names, text: str) -> int | None:
    """The number a short name stands for (any case, ``-`` or ``_``), or None."""
    key = text.strip().upper().replace("-", "_")
    for value, (name, _desc) in table.items():
        if name == key:
            return value
    return None
