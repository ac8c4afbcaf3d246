"""The flow-analysis rules, written once: event kinds, their expert texts, flow counters and
the per-opcode and per-syndrome facts the flow engine runs on.

One engine applies these rules: ``roce.analysis.flowref``, which runs interpreted (the
reference) and compiled (``roce.analysis._flowengine``, which the build makes from the same
file).  It restates no name, number, severity, text or counter written here: it reads this
module at import, builds its tables from it (C arrays in the compiled form) and numbers
events and counters by their row here.  Protocol facts come from ``roce.headers`` (AETH
syndrome, ECN), ``roce.opcodes`` (opcode classes) and ``roce.locate`` (L3 kinds); see
docs/architecture.md for the layering.

Adding an event kind
--------------------
1. Add one :class:`EventKind` row to ``EVENTS``: its name, severity, expert text (a
   %-template), the flow counter it bumps (a ``COUNTERS`` name, or None) and, when
   consecutive events of one flow fold into one expert line, the folded text.  (A kind found
   outside the flow engines, like ``pause_storm``, says ``engine=False`` and its module makes
   ``flowmodel.Event`` rows from the same text.)
2. Raise it where its rule fires, by name: ``self._event(fn, ts, "name", f, args)`` in
   ``flowref.py`` (rebuild with ``pip install -e .``: until then the compiled form stands
   aside and the edited file runs interpreted, with a warning).  tests/test_flowrules.py
   fails until the engine raises exactly the kinds ``EVENTS`` has; the twin tests in
   tests/test_stats.py hold its two forms equal.

Nothing else changes: severities, the numbering the engine uses, the counter an event bumps,
expert counts by kind and severity, the JSON and the text report follow from the row.

A new counter is one :class:`Counter` row in ``COUNTERS``; when an event kind bumps it, that
is all.  A counter the engine bumps by itself also needs that line in ``flowref.py``, through
a ``_CT_*`` index it looks up by the counter's name.  Either way it appears in the flow's
JSON and, with a ``total`` key, in the capture's totals without further edits; the text
tables of ``roce stats`` list what they choose to show.

Definitions (what the rules mean)
---------------------------------
flow
    one direction to one QP: (L3 source, L3 destination, BTH destination QP).  A flow may carry
    requests (its source's send queue) and responses (ACKs / READ responses / atomic ACKs for
    requests going the other way).  CNPs are attributed to the flow of their destination QP.
connection
    the two flows of one RC queue-pair connection; pairing is a heuristic done at the end of
    the capture (``roce.analysis.flowpair``).
request PSNs
    one ``PSNTracker`` per flow.  A READ request consumes max(1, ceil(DMA length / MTU)) PSNs;
    the MTU is the largest First/Middle payload seen between the two addresses (either
    direction), ``DEFAULT_MTU`` until one is seen.  While no First/Middle has been seen the
    READ's PSN count is decided when the next request arrives: a distance that one of the five
    IB MTUs explains is taken as the READ's length (so a READ-only stream has no false gaps).
    A late first arrival (reordered to the capture's start: PSN 1 captured before PSN 0): a
    PSN 1..``EARLY_WINDOW`` (roce.psn) below the flow's first PSN, not overlapping it, is
    out of order (late), not a retransmission, while no acknowledgement covers it (see
    "acknowledged PSNs": once the flow answering it has acknowledged past the first PSN,
    the old rule holds for good) and the sequence has not gone half the PSN space on; the
    flow's start moves back to it and the PSNs between become missing (a hole, not a gap).
    A sequence NAK whose ePSN lies so below the first PSN of the one flow it answers (the
    flows between the same addresses the other way; two such flows: nothing) moves that
    start back to the ePSN, which is missing from then on (``PSNTracker.start_at``).
    Response PSNs follow the first rule, without the acknowledgement condition.
response PSNs
    a second tracker per flow, fed with READ responses and atomic ACKs (ACKs coalesce, so they
    are not sequenced).  A response First/Only or an atomic ACK may jump forward (the PSNs in
    between belong to requests without a data response); a Middle/Last must continue the
    sequence.
retransmission bursts
    consecutive retransmitted PSNs of one tracker (each the previous one plus one, no other
    packet of that tracker in between) make one expert line: frame range, PSN range and count.
    The exact count of retransmitted packets stays in the expert counts and the totals.  A
    burst of one packet counts as a selective retransmission, a longer one as a go-back
    (go-back-N resends runs; selective repeat resends what is missing, alone unless
    neighbours were lost too).
goodput and throughput
    goodput counts each PSN's payload once (packets the tracker did not call a duplicate, and
    all of UD); throughput counts every payload byte, retransmissions included.  Both are
    divided by the flow's (or the capture's) duration.
messages
    counted from First/Only and completed at Last/Only; retransmitted copies are not counted
    twice.  Packets are reassembled in PSN order: a packet with a PSN missing below it waits
    (at most ``REORDER_HOLD`` per flow and direction; past that, the oldest waiting one goes
    on and the PSNs missing below it are no longer waited for) until the hole is filled, so
    reordered packets (a sprayed path, selective repeat) make the same messages as in-order
    ones.  PSNs lost inside a message are filled in at the message's First payload, so sizes
    stay exact when a capture misses packets.  In PSN order, a READ response First at the PSN
    after a response message that has no Last yet is that READ resumed from a lost response
    (the requester asks again from its first missing response, as rxe does), so a Middle
    of it.  A message whose First or Last never shows up is incomplete; a late
    retransmission of the missing piece completes it.  A WRITE whose size differs from the
    RETH DMA length is reported.
selective repeat WRITE
    IRN sends a WRITE as WRITE First packets, each with a RETH (DMA length: the bytes from
    that packet to the message's end), and a WRITE Only with RETH (docs/protocol.md).  A
    First whose DMA length is the message's less the full-MTU packets since its First is a
    Middle of that message; such an Only whose DMA length is its payload is its Last.  In PSN
    order this makes one message per WRITE, exact in count and size.  A late First (out of
    order, before the message's First in PSN) whose DMA length is the message's plus the
    full-MTU packets from it to that First is the message's true First (a late first
    arrival, "request PSNs"): the message starts there; a late First after the message's
    First whose DMA length fits as above is a Middle of it.
bad frames
    a malformed frame (walk status >= 10) is counted globally and, when its addresses and BTH
    are readable, in its flow; its PSN is still sequenced but it takes no part in message
    reassembly.  A frame cut by the capture's snap length is "truncated", not malformed.  A
    frame with a bad ICRC is analysed normally (a receiver would drop it: expect a
    retransmission after it).
UD
    not sequenced (one destination QP receives from many source QPs); SENDs are counted.
selective NAK
    selective repeat (IRN; docs/protocol.md, "Selective repeat (IRN) encoding"): a NAK PSN
    sequence error whose AETH MSN lies 1..``SACK_AHEAD`` PSNs ahead of its BTH PSN names the
    PSN that arrived out of order (BTH PSN: the cumulative ePSN) when either its MSN differs
    from the MSN of the flow's last ACK, or the flow's previous sequence NAK had the same BTH
    PSN.  A go-back-N NAK carries the responder's MSN, the one its ACKs carry, and is sent
    once per ePSN (rxe); so the first selective NAK of a flow before any ACK is counted as a
    sequence NAK.  Each selective NAK answers one out-of-order arrival at the responder (a
    packet it holds, or a copy of one); they are not counted with the NAKs.
    ``roce decode`` sees one packet, not the flow: it calls a NAK selective by
    ``looks_selective_nak`` (the PSN-sequence-error code and the MSN 1..``SACK_AHEAD`` ahead of
    the BTH PSN), the part of this rule a packet shows by itself.
acknowledged PSNs
    each flow keeps what its ACKs and sequence NAKs acknowledged of the requests going the
    other way: the cumulative acknowledgement (the PSN after the highest ACK's BTH PSN, or a
    sequence NAK's BTH PSN, the ePSN: every PSN before it arrived), never moving back; and the
    PSNs its selective NAKs named out of order, less than ``SACK_AHEAD`` ahead of the
    cumulative acknowledgement (a bitmap of ``SACK_AHEAD`` bits, 512 bytes, made at a flow's first
    selective NAK and cleared as the cumulative acknowledgement passes: bounded per flow).
    RNR and fatal NAKs, atomic ACKs and READ responses acknowledge nothing here.
spurious retransmissions
    a retransmitted request PSN (not a READ request: a READ asked again wants its responses)
    is spurious when, before the retransmission was seen, the receiver had acknowledged it:
    the acknowledgements of the flow answering it (above) cover it, cumulatively or
    selectively.  The answering flow of requests X (A to B) is the one flow from B to A whose
    cumulative acknowledgement lies in X's request PSN range (from X's first PSN to its next
    expected one); none or several (QPs between the same two addresses in overlapping PSN
    ranges): nothing is counted.  A PSN seen twice with no acknowledgement between is an
    ordinary retransmission (or a copy the network made).  Consecutive spurious PSNs fold as
    retransmission bursts do; the counter counts packets.
congestion marks
    ``CE_MARKS`` says per L3 kind which field marks a packet as having met congestion: the IP
    ECN field at CE on RoCEv2 (RFC 3168; a RoCE BTH FECN stays ignored: RoCEv2 carries the
    mark in IP), the BTH FECN bit on native InfiniBand (IBA Annex A10, Wireshark
    infiniband.bth.fecn).  A marked packet is an ``ecn_ce`` event whatever its L3.  The
    receiver's answer is a CNP (counted on the flow of its destination QP) or, on native
    InfiniBand, the BECN bit on a packet it sends back on the QP, an ACK most often
    (``BECN_FIELDS``; Wireshark infiniband.bth.becn): a non-CNP packet carrying it is a
    ``becn`` event on its flow, the flow of the QP told to slow down, as a CNP would be.
    docs/protocol.md, "Congestion marks on native InfiniBand".
completion times
    message completion time (MCT): on a flow carrying requests of a transport with
    acknowledgements (RC, XRC, RD; not UC or UD), from the first captured packet of a message
    to the first response that acknowledges its last PSN.  A message starts at a request that
    begins one (a SEND or WRITE First or Only, a READ request, an atomic, a FLUSH, ATOMIC
    WRITE or RESYNC); the time of its first transmission is kept, so a retransmitted message
    counts from there.  When the capture shows later packets of a message before its First (a
    First lost before the capture point and resent), the message counts from the earliest of
    them.  A message ends at its Last (or Only); a READ at its last response, or, when that
    is not seen in order, at the PSN before the next message's start (PSNs are contiguous).
    Acknowledgement is cumulative and by PSN (the AETH MSN counts messages from the QP's
    start, which a capture begun mid-connection cannot place): an ACK with PSN p covers every
    PSN up to p; a READ response or atomic ACK with PSN p covers every PSN up to p too; a NAK
    (PSN sequence error, RNR, or fatal) with PSN p covers the PSNs before p, as the requester
    reads it (rxe ``rxe_comp.c``: a response past a WQE completes it).  A selective NAK's
    BTH PSN is its cumulative ePSN and covers what lies before it; the PSN its MSN names out
    of order completes nothing.  A READ or atomic completes only by its own last response
    (its last READ response, its atomic ACK): an ACK past one whose response the capture has
    not shown is an implied NAK (docs/protocol.md, "Requester and completer"), and it then
    waits for its response.  A message never acknowledged in the capture is counted as
    unacknowledged (``unacknowledged_messages``), not timed; so is the oldest waiting one
    when a flow has ``MAX_OUTSTANDING`` waiting (ConnectX's send queue holds no more).  A
    message whose first packet is not in the capture (it began before the capture, or its
    head was never captured) is neither timed nor counted.  Requests that are malformed
    (walk status >= 10), and responses that are, take no part.
ACK round-trip times
    on the same flows: from a request packet with AckReq set, or the last packet of a
    message (Last, Only, a READ request, an atomic), to the first response covering its PSN
    (the coverage above); only for packets not retransmitted before that response (Karn's
    rule: a PSN seen twice gives no sample, ``ack_rtt_excluded`` counts them).
answering flow
    the responses of a flow (B to A, to QP a) answer the requests of one flow the other way
    (A to B): the one whose waiting requests the response covers, from the lowest waiting
    PSN to the PSN after its highest request (a READ reaching as far as its DMA length at
    the largest First/Middle payload seen, or at the smallest MTU while none was seen).
    Found once, at the first response that only one such flow explains, and kept while the
    responses fall in its range; a response outside it that one other flow explains moves
    the link there (a QP number reused).  Two candidates and nothing kept: the response
    counts for nothing.
latency histogram
    per flow, completion times and ACK round-trip times are kept as counts by bucket: exact
    below 2^``LATENCY_SUB_BITS`` ns, then 2^``LATENCY_SUB_BITS`` buckets per power of two
    (bucket width at most 2^-``LATENCY_SUB_BITS`` of its values), with the exact minimum and
    maximum; while there are at most ``LATENCY_EXACT`` values, the values themselves too.  A
    quantile is the nearest-rank one (rank ceil(q * n)): of at most ``LATENCY_EXACT`` values,
    the value of that rank, exact; of more, the middle of the bucket holding that rank,
    clamped to the minimum and maximum (the exact minimum at rank 1, the maximum at rank n):
    within 2^-(``LATENCY_SUB_BITS`` + 1) (0.78 %) of the exact value.  (A reservoir of
    samples would give quantiles with a random error that grows towards p99; the histogram's
    error is fixed and its memory does not grow with the samples.)  Memory: the buckets
    between the smallest and largest value seen, at most ``LATENCY_BUCKETS`` of 8 bytes (29
    KB), typically a few KB, and at most ``LATENCY_EXACT`` values of 8 bytes, whatever the
    number of messages.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from roce import locate
from roce.headers import (
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    ECN_CE,
    LAYOUTS,
    LRH_LAYOUT,
    LRH_WORD,
    NAK_PSN_SEQUENCE_ERROR,
    SACK_AHEAD,
    SIZE_OF,
    SYNDROME_VALUE_MASK,
    looks_selective_nak,
    nak_name,
    rnr_timer_us,
    syndrome_type,
    syndrome_value,
)
from roce.opcodes import OPCODES, Operation, Position, Transport
from roce.psn import PSN_MASK

BATCH = 1024  # frames per scan: 1024 keeps a batch's frames in the CPU caches
DEFAULT_MTU = 4096
IB_MTUS = (256, 512, 1024, 2048, 4096)
# A READ never takes more PSNs than half the PSN space (the most a requester may have
# outstanding); a bigger count only comes from an MTU inferred from a tiny First/Middle.
MAX_READ_PSNS = 1 << 23
MAX_EVENTS_PER_KIND = 10_000  # expert lines stored per event kind; the rest are only counted
MAX_OPEN_MESSAGES = 64  # abandoned messages per flow that a late packet may still complete
# Packets per flow and direction that wait behind a missing PSN for message reassembly
# (see "messages"): twice the selective-repeat window of 128 PSNs.
REORDER_HOLD = 256
# Messages, and probe packets (see "ACK round-trip times"), per flow that wait for their
# acknowledgement: ConnectX's largest send queue (max_qp_wr, 32,768 work requests; see
# docs/protocol.md, "Acknowledgement coverage and completion").  16 bytes each, allocated as
# they wait.
MAX_OUTSTANDING = 32768
LATENCY_SUB_BITS = 6  # the latency histogram's buckets per power of two: 2^6 (see above)
# Buckets a latency histogram can have: values from 0 to 2^63 - 1 ns.
LATENCY_BUCKETS = (64 - LATENCY_SUB_BITS) << LATENCY_SUB_BITS
# Values a latency histogram also keeps as they are, for exact quantiles while there are no
# more (see "latency histogram"): 512 bytes at most.
LATENCY_EXACT = 64
__all__ = ["BATCH", "COUNTERS", "EVENTS", "EVENT_KINDS", "KIND_KEYS", "KIND_NAMES",
           "OPINFO", "PSN_MASK", "SACK_AHEAD", "SEVERITIES", "TEXTS"]

# -- event kinds -------------------------------------------------------------------------------

SEV_ERROR, SEV_WARNING, SEV_NOTE = 0, 1, 2
SEVERITIES = ("error", "warning", "note")


class EventKind(NamedTuple):
    name: str
    severity: int  # SEV_*.  Errors: the frame or the QP is broken.  Warnings: the sequence is.
    text: str  # the expert line after "#frame QP 0x..", a %-template
    counter: str | None = None  # the flow counter each event bumps
    burst: str | None = None  # the text of a folded run of events (see "retransmission bursts")
    engine: bool = True  # raised by the flow engines (False: beside them, by another module)


EVENTS: tuple[EventKind, ...] = (
    EventKind("malformed", SEV_ERROR, "malformed: %s", "malformed"),
    EventKind("bad_icrc", SEV_ERROR, "bad ICRC: 0x%08x, should be 0x%08x", "bad_icrc"),
    # native InfiniBand only: the link-level CRC after the ICRC (IBA 7.8.2)
    EventKind("bad_vcrc", SEV_ERROR, "bad VCRC: 0x%04x, should be 0x%04x", "bad_vcrc"),
    EventKind("nak_fatal", SEV_ERROR, "NAK %s MSN=%d PSN=0x%06x"),
    EventKind("gap", SEV_WARNING, "%sPSN gap: expected 0x%06x, got 0x%06x (%d missing)"),
    EventKind("retransmission", SEV_WARNING, "retransmission of %sPSN 0x%06x",
              burst="retransmission of %sPSN 0x%06x..0x%06x, %d packets"),
    EventKind("out_of_order", SEV_WARNING,
              "%sPSN 0x%06x out of order (late: fills an earlier gap)"),
    EventKind("nak_sequence", SEV_WARNING, "NAK %s MSN=%d PSN=0x%06x"),
    EventKind("spurious_retransmission", SEV_NOTE,
              "spurious retransmission of PSN 0x%06x: already acknowledged", "spurious",
              burst="spurious retransmission of PSN 0x%06x..0x%06x, %d packets: already "
                    "acknowledged"),
    EventKind("selective_nak", SEV_NOTE,
              "selective NAK: ePSN 0x%06x, PSN 0x%06x arrived out of order", "selective_naks"),
    EventKind("rnr_nak", SEV_WARNING, "RNR NAK %sms PSN=0x%06x"),  # timer as rnr_ms() gives it
    EventKind("length_mismatch", SEV_WARNING,
              "%s length: RETH DMA length %d, message carried %d bytes"),
    EventKind("reserved_syndrome", SEV_WARNING, "reserved AETH syndrome 0x%02x",
              "reserved_syn"),
    EventKind("cnp", SEV_NOTE, "CNP", "cnps"),
    # A congestion-marked packet: IP ECN CE on RoCE, BTH FECN on native InfiniBand (see
    # "congestion marks").
    EventKind("ecn_ce", SEV_NOTE, "ECN CE", "ecn_ce"),
    # Native InfiniBand: a BECN returned on an ACK or other non-CNP packet (IBA Annex A10).
    EventKind("becn", SEV_NOTE, "BECN", "becns"),
    EventKind("incomplete_message", SEV_NOTE,
              "incomplete %s message: %s (%d packets, %d bytes seen)", "incomplete"),
    # PFC / PAUSE, found by roce.analysis.pauses beside the engines.
    EventKind("pause_storm", SEV_WARNING,
              "%s from %s paused %s without a break (%d frames; threshold %s)", engine=False),
    # CNPs to one QP closer than --cnp-interval, found by roce.analysis.ccstats.
    EventKind("cnp_interval", SEV_WARNING, "CNPs %s apart, below --cnp-interval %s",
              engine=False),
)
EVENT_BY_NAME: dict[str, EventKind] = {e.name: e for e in EVENTS}
EVENT_KINDS: dict[str, int] = {e.name: e.severity for e in EVENTS}  # kind -> severity
TEXTS: dict[str, str] = {e.name: e.text for e in EVENTS}
# Response trackers' events say so: "response PSN gap", "retransmission of response PSN".
SIDE_WORDS = ("", "response ")


def event_text(kind: EventKind, args: tuple[Any, ...], count: int = 1) -> str:
    """The expert text of one event, or of a folded run of ``count`` events."""
    return (kind.burst if count > 1 else kind.text) % args  # type: ignore[operator]


def rnr_ms(code: int) -> str:
    """An RNR timer code in milliseconds, as the expert line shows it (``0.64``)."""
    return f"{rnr_timer_us(code) / 1000:g}"


# -- flow counters -------------------------------------------------------------------------------


class Counter(NamedTuple):
    name: str  # the Flow attribute
    key: str  # its key in the flow's JSON
    total: str | None  # its key in the capture totals (the sum over flows), None: not totalled


COUNTERS: tuple[Counter, ...] = (
    Counter("packets", "packets", None),  # totals: by link and kind (flowmodel.totals)
    Counter("bytes", "bytes", "bytes"),
    Counter("payload", "payload_bytes", "payload_bytes"),
    Counter("unique_payload", "unique_payload_bytes", "unique_payload_bytes"),
    Counter("req_payload", "request_payload_bytes", "request_payload_bytes"),
    Counter("rsp_payload", "response_payload_bytes", None),
    Counter("incomplete", "incomplete_messages", "incomplete_messages"),
    Counter("acks", "acks", "acks"),
    Counter("atomic_acks", "atomic_acks", None),
    Counter("reserved_syn", "reserved_syndromes", None),
    Counter("selective_naks", "selective_naks", "selective_naks"),
    Counter("retx_selective", "selective_retransmissions", "selective_retransmissions"),
    Counter("retx_go_back", "go_back_retransmissions", "go_back_retransmissions"),
    Counter("spurious", "spurious_retransmissions", "spurious_retransmissions"),
    Counter("cnps", "cnps", "cnps"),
    Counter("ecn_ce", "ecn_ce", "ecn_ce"),
    Counter("becns", "becns", "becns"),
    Counter("bad_icrc", "bad_icrc", "bad_icrc"),
    Counter("bad_vcrc", "bad_vcrc", "bad_vcrc"),
    Counter("malformed", "malformed", "malformed"),
    Counter("truncated", "truncated", "truncated"),
    # "completion times", "ACK round-trip times": on the flow carrying the requests
    Counter("timed", "timed_messages", "timed_messages"),
    Counter("unacked", "unacknowledged_messages", "unacknowledged_messages"),
    Counter("rtt_samples", "ack_rtt_samples", "ack_rtt_samples"),
    Counter("rtt_excluded", "ack_rtt_excluded", "ack_rtt_excluded"),
)
COUNTER_INDEX: dict[str, int] = {c.name: i for i, c in enumerate(COUNTERS)}
assert all(e.counter is None or e.counter in COUNTER_INDEX for e in EVENTS)

# -- per-opcode facts, as small integers -----------------------------------------------------

C_DATA, C_READ, C_ATOMIC, C_ONLYREQ, C_READ_RESP, C_ACK, C_ATOMIC_ACK, C_CNP = range(8)
P_FIRST, P_MIDDLE, P_LAST, P_ONLY = range(4)
_POS = {Position.FIRST: P_FIRST, Position.MIDDLE: P_MIDDLE, Position.LAST: P_LAST,
        Position.ONLY: P_ONLY}

K_SEND, K_SEND_IMM, K_SEND_INV, K_WRITE, K_WRITE_IMM, K_READ, K_ATOMIC, K_FLUSH, \
    K_ATOMIC_WRITE, K_READ_RESP, K_RESYNC = range(11)
KIND_NAMES = ("SEND", "SEND with immediate", "SEND with invalidate", "RDMA WRITE",
              "RDMA WRITE with immediate", "RDMA READ", "ATOMIC", "FLUSH", "ATOMIC WRITE",
              "RDMA READ response", "RESYNC")
KIND_KEYS = ("send", "send_imm", "send_inv", "write", "write_imm", "read", "atomic", "flush",
             "atomic_write", "read_response", "resync")
WRITE_KINDS = (K_WRITE, K_WRITE_IMM)
REQUEST_CLASSES = (C_DATA, C_READ, C_ATOMIC, C_ONLYREQ)
# The transports whose responder acknowledges requests: messages on them are timed ("completion
# times"); UC and UD have no ACKs.
ACKED_TRANSPORTS = (Transport.RC, Transport.XRC, Transport.RD)
# An atomic message moves one operand: the width of AtomicETH's swap/add data (docs/protocol.md).
ATOMIC_BYTES = LAYOUTS["atomiceth"].field("swapdt").bits // 8


class OpInfo(NamedTuple):
    cls: int  # C_* class
    pos: int  # P_* position
    kind: int  # K_* message kind (imm/inv only on the Last/Only that carries them)
    seq: bool  # PSN-sequenced (not UD, not CNP)
    acked: bool  # a request of a transport with acknowledgements (RC, XRC, RD)


def _op_info(op: Any) -> OpInfo:
    o = op.operation
    if o in (Operation.SEND, Operation.RDMA_WRITE):
        cls = C_DATA
        if o is Operation.SEND:
            kind = K_SEND_IMM if op.immediate else K_SEND_INV if op.invalidate else K_SEND
        else:
            kind = K_WRITE_IMM if op.immediate else K_WRITE
    else:
        cls, kind = {
            Operation.RDMA_READ: (C_READ, K_READ), Operation.ATOMIC: (C_ATOMIC, K_ATOMIC),
            Operation.FLUSH: (C_ONLYREQ, K_FLUSH),
            Operation.ATOMIC_WRITE: (C_ONLYREQ, K_ATOMIC_WRITE),
            Operation.RESYNC: (C_ONLYREQ, K_RESYNC),
            Operation.READ_RESPONSE: (C_READ_RESP, K_READ_RESP),
            Operation.ACK: (C_ACK, -1), Operation.ATOMIC_ACK: (C_ATOMIC_ACK, -1),
            Operation.CNP: (C_CNP, -1)}[o]
    seq = op.transport not in (Transport.UD, Transport.CNP)
    acked = op.transport in ACKED_TRANSPORTS and cls in REQUEST_CLASSES
    return OpInfo(cls, _POS[op.position], kind, seq, acked)


OPINFO: list[OpInfo | None] = [None] * 256
for _code, _op in OPCODES.items():
    OPINFO[_code] = _op_info(_op)

# -- AETH syndromes and ECN: how a packet's marks become counters and events -------------------

SYN_ACK, SYN_RNR, SYN_NAK, SYN_RESERVED = range(4)
_SYN_RULE = {AETH_ACK: SYN_ACK, AETH_RNR_NAK: SYN_RNR, AETH_NAK: SYN_NAK}
# Syndrome byte -> (rule, value), split by roce.headers' helpers (IBA 9.7.5.1).
SYNDROMES: tuple[tuple[int, int], ...] = tuple(
    (_SYN_RULE.get(syndrome_type(s), SYN_RESERVED), syndrome_value(s)) for s in range(256))


def nak_event(code: int) -> str:
    """A NAK's event kind: a PSN sequence error is recoverable, every other NAK is fatal."""
    return "nak_sequence" if code == NAK_PSN_SEQUENCE_ERROR else "nak_fatal"


def is_selective_nak(code: int, psn: int, msn: int, ack_msn: int, nak_psn: int) -> bool:
    """A NAK that names an out-of-order PSN in its MSN (see "selective NAK" above);
    ``ack_msn``: the MSN of the flow's last ACK, ``nak_psn`` the PSN of its last sequence
    NAK, -1 before one."""
    return (looks_selective_nak(code, psn, msn)
            and (ack_msn >= 0 and msn != ack_msn or psn == nak_psn))


SYNDROME_VALUES = SYNDROME_VALUE_MASK + 1  # NAK codes, RNR timer codes, credit codes
NAK_TEXTS = tuple(nak_name(c) for c in range(SYNDROME_VALUES))
RNR_TEXTS = tuple(rnr_ms(c) for c in range(SYNDROME_VALUES))
# ECN is the low bits of the IPv6 traffic class as of the IPv4 DS field (RFC 3168).
ECN_MASK = LAYOUTS["ip"].field("dsfield.ecn").mask


class Mark(NamedTuple):
    """Where a congestion mark is (see "congestion marks"): a ``locate.FAST_FIELDS`` field,
    read from the BTH start (``at_bth``) or the L3 start, masked, equal to ``value``."""
    field: tuple[str, str]
    at_bth: bool
    mask: int
    value: int


_FECN = Mark(("bth", "fecn"), True, LAYOUTS["bth"].field("fecn").mask,
             LAYOUTS["bth"].field("fecn").mask)
_BECN = Mark(("bth", "becn"), True, LAYOUTS["bth"].field("becn").mask,
             LAYOUTS["bth"].field("becn").mask)
# L3 kind -> its forward congestion mark (an ``ecn_ce`` event).  RoCEv1 (GRH) has none.
CE_MARKS: dict[int, Mark] = {
    locate.L3_IPV4: Mark(("ip", "dsfield.ecn"), False, ECN_MASK, ECN_CE),
    locate.L3_IPV6: Mark(("ipv6", "tclass"), False, ECN_MASK, ECN_CE),
    locate.L3_LRH: _FECN,
    locate.L3_LRH_GRH: _FECN,
}
# L3 kind -> the backward notification a non-CNP packet may carry (a ``becn`` event).
BECN_FIELDS: dict[int, Mark] = {locate.L3_LRH: _BECN, locate.L3_LRH_GRH: _BECN}


def mark_specs(marks: dict[int, Mark]) -> dict[int, tuple[tuple[int, int, int, int], bool, int,
                                                         int]]:
    """``CE_MARKS`` or ``BECN_FIELDS`` with each field as its ``locate.SPECS`` entry: what
    ``marked`` reads."""
    return {k: (locate.SPECS[m.field], m.at_bth, m.mask, m.value) for k, m in marks.items()}


CE_SPECS = mark_specs(CE_MARKS)
BECN_SPECS = mark_specs(BECN_FIELDS)


def marked(data: bytes, table: dict[int, Any], l3_kind: int, l3_off: int, bth_off: int) -> bool:
    """Whether a walked frame carries the mark ``table`` (``CE_SPECS`` or ``BECN_SPECS``) has
    for its L3 kind (none: False)."""
    m = table.get(l3_kind)
    if m is None:
        return False
    (off, n, shift, fmask), at_bth, mask, value = m
    base = (bth_off if at_bth else l3_off) + off
    return (int.from_bytes(data[base:base + n], "big") >> shift) & fmask & mask == value


def malformed_text(w: locate.Walk) -> str:
    """The argument of a "malformed" event: why the walk failed, in words."""
    return str(locate.explain(w))


# -- where the addresses are: per L3 kind, pieces (offset from the L3 start, bytes) -----------
# The flow key is the source pieces then as many destination pieces, so its two halves are the
# two ends and swapping them gives the reverse flow.  IP and the GRH: one slice (the source
# and destination addresses are adjacent); native InfiniBand: the LIDs (Wireshark
# infiniband.lrh.slid / dlid), and the GIDs with a GRH (LNH 3).


def _addr_span(header: str, src: str, dst: str) -> tuple[tuple[int, int], ...]:
    s, d = LAYOUTS[header].field(src), LAYOUTS[header].field(dst)
    # src and dst are adjacent in IPv4, IPv6 and the GRH, so one slice makes the flow key.
    assert d.bit_offset == s.bit_offset + s.bits and s.bits == d.bits and not s.bit_offset % 8
    return ((s.byte_offset, (s.bits + d.bits) // 8),)


def _lrh_pieces(grh: bool) -> tuple[tuple[int, int], ...]:
    def piece(layout: Any, name: str, base: int) -> tuple[int, int]:
        f = layout.field(name)
        assert not f.bit_offset % 8 and not f.bits % 8
        return base + f.byte_offset, f.bits // 8

    lrh, g = LRH_LAYOUT, LAYOUTS["grh"]
    if not grh:
        return piece(lrh, "slid", 0), piece(lrh, "dlid", 0)
    return (piece(lrh, "slid", 0), piece(g, "sgid", lrh.size), piece(lrh, "dlid", 0),
            piece(g, "dgid", lrh.size))


ADDR_PIECES: dict[int, tuple[tuple[int, int], ...]] = {
    locate.L3_IPV4: _addr_span("ip", "src", "dst"),
    locate.L3_IPV6: _addr_span("ipv6", "src", "dst"),
    locate.L3_GRH: _addr_span("grh", "sgid", "dgid"),
    locate.L3_LRH: _lrh_pieces(False),
    locate.L3_LRH_GRH: _lrh_pieces(True),
}
# Bytes from the L3 start the key needs.
ADDR_NEED = {k: max(o + n for o, n in p) for k, p in ADDR_PIECES.items()}
L3_NAMES = {locate.L3_IPV4: "IPv4", locate.L3_IPV6: "IPv6", locate.L3_GRH: "GRH",
            locate.L3_LRH: "LRH", locate.L3_LRH_GRH: "LRH+GRH"}
IB_KINDS = frozenset((locate.L3_LRH, locate.L3_LRH_GRH))  # they carry a VCRC


def addr_key(data: bytes, l3_off: int, pieces: tuple[tuple[int, int], ...]) -> bytes:
    """The flow key's address bytes of a frame (source half, destination half)."""
    if len(pieces) == 1:
        o, n = pieces[0]
        return data[l3_off + o:l3_off + o + n]
    return b"".join(data[l3_off + o:l3_off + o + n] for o, n in pieces)


# L3 kind -> its length field, the bytes that length leaves out (the fixed header) and its
# unit in bytes: where a snapped frame's payload length comes from.  Native InfiniBand: the
# LRH PktLen, 4-byte words from the LRH through the ICRC (VCRC excluded; IBA 7.7.8), an
# ``("lrh", name)`` field of ``locate.LRH_FIELDS``.
L3_LEN_FIELDS = {locate.L3_IPV4: (("ip", "len"), 0, 1),
                 locate.L3_IPV6: (("ipv6", "plen"), SIZE_OF["ipv6"], 1),
                 locate.L3_GRH: (("grh", "paylen"), SIZE_OF["grh"], 1),
                 locate.L3_LRH: (("lrh", "pktlen"), 0, LRH_WORD),
                 locate.L3_LRH_GRH: (("lrh", "pktlen"), 0, LRH_WORD)}
