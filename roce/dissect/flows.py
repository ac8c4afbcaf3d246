"""Per-flow RoCE analysis: PSN gaps, retransmissions, NAKs, CNPs, ECN marks, bad ICRCs.

The engine does no I/O.  Feed it a capture reader or frames (``roce.pcapio.Frame`` objects
or plain ``bytes``) and read a :class:`Report`::

    from roce.dissect.flows import analyse
    report = analyse(open_capture("f.pcap"))
    report.totals["gaps"], [e.line() for e in report.events]

Two engines
-----------
This module is the specification and the pure-Python reference (:class:`Analyzer`).
``roce.dissect.cflows.CompiledAnalyzer`` runs the same rules in C (``_flowengine.pxi`` in
the fast path, function by function), frame by frame in capture order, reading a classic
pcap in place; :func:`analyse` and ``roce stats`` use it whenever the extension is built.
The reference gives the same report, whatever its batch size, and a property test holds
the two to it.

How the reference works
-----------------------
Frames are processed in batches (``BATCH`` frames).  ``roce.fast.scan`` walks a batch in C and
fills columns (status, opcode, QP, PSN, payload length, first extended header's key fields,
ICRC ok ...); the engine never builds a ``Packet`` and keeps no frame after its batch, so
memory stays flat whatever the capture size.  Each batch is split into per-flow groups (in
order of first appearance); a run of plain SEND/WRITE requests with consecutive PSNs, of
plain ACKs or of READ responses is accounted in bulk, everything else packet by packet.
Both paths give the same result (a test proves it) - the bulk path only exists for speed.
Taking a flow's packets together is exact because flows share only two things: the MTU of
their path (both directions), whose packets are taken in capture order while it may still
grow within the batch, and the cap on stored events, applied per batch in frame order.

Definitions
-----------
flow
    one direction to one QP: (L3 source, L3 destination, BTH destination QP).  A flow may carry
    requests (its source's send queue) and responses (ACKs / READ responses / atomic ACKs for
    requests going the other way).  CNPs are attributed to the flow of their destination QP.
connection
    the two flows of one RC queue-pair connection, A->B to QP b and B->A to QP a.  QPNs differ
    on the two sides, so pairing is a heuristic, done once at the end of the capture:

    1. PSN ranges: a flow's responses carry the PSNs of the requests they answer, so a flow Y
       (B->A) is paired with a flow X (A->B) when the first or last response PSN seen on Y lies
       inside X's request PSN range and X is the only such flow;
    2. otherwise, when an IP pair has exactly one unpaired flow in each direction, those two
       are paired;
    3. everything else is listed as a lone flow.
request PSNs
    one ``PSNTracker`` per flow.  A READ request consumes max(1, ceil(DMA length / MTU)) PSNs;
    the MTU is the largest First/Middle payload seen between the two addresses (either
    direction), 4096 until one is seen.  While no First/Middle has been seen the READ's PSN
    count is decided when the next request arrives: a distance that one of the five IB MTUs
    explains is taken as the READ's length (so a READ-only stream has no false gaps).
response PSNs
    a second tracker per flow, fed with READ responses and atomic ACKs (ACKs coalesce, so they
    are not sequenced).  A response First/Only or an atomic ACK may jump forward (the PSNs in
    between belong to requests without a data response); a Middle/Last must continue the
    sequence.  A lost READ response Only is therefore invisible here; the requester's repeated
    READ shows up as a retransmission on the request flow.
messages
    counted from First/Only and completed at Last/Only (immediate / invalidate are known at
    the Last), for packets that advance the sequence; retransmitted copies are not counted
    twice.  The size is the sum of the payloads; PSNs lost inside a message are filled in at
    the message's First payload (a First/Middle carries exactly one MTU), so sizes stay exact
    when a capture misses packets.  A message whose First or Last never shows up (also at the
    capture's edges) is incomplete; a late retransmission of the missing piece completes it.
    A WRITE whose size differs from the RETH DMA length is reported.
bad frames
    a malformed frame (walk status >= 10) is counted globally and, when its addresses and BTH
    are readable, in its flow; its PSN is still sequenced (so one bad frame is not also a gap)
    but it does not take part in message reassembly.  A frame cut by the capture's snap length
    (caplen < origlen) is "truncated", not malformed, and is analysed from what was captured.
    A frame with a bad ICRC is analysed normally (the capture point may see ICRCs before they
    are final); a receiver would drop it, so expect a retransmission after one.
UD
    not sequenced (one destination QP receives from many source QPs); SENDs are counted.
"""

from __future__ import annotations

import heapq
import re
import socket
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, compress, islice
from operator import itemgetter, sub
from typing import Any, NamedTuple

from .. import fast, locate
from ..headers import (
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    DECODERS,
    LAYOUTS,
    NAK_CODES,
    SIZE_OF,
    nak_name,
    rnr_timer_us,
    syndrome_type,
    syndrome_value,
)
from ..opcodes import OPCODES, Operation, Position, Transport
from ..psn import EV_DUPLICATE, EV_GAP, EV_IN_ORDER, EV_LATE

__all__ = ["Analyzer", "Event", "EventStore", "Flow", "Report", "analyse", "make_analyzer", "BATCH",
           "KIND_NAMES", "SEVERITIES", "TEXTS"]

BATCH = 1024  # frames per scan: 1024 keeps a batch's frames in the CPU caches
DEFAULT_MTU = 4096
IB_MTUS = (256, 512, 1024, 2048, 4096)
# A READ never takes more PSNs than half the PSN space (the most a requester may have
# outstanding); a bigger count only comes from an MTU inferred from a tiny First/Middle.
MAX_READ_PSNS = 1 << 23
MAX_EVENTS_PER_KIND = 10_000  # stored per event kind; the rest are only counted
MAX_OPEN_MESSAGES = 64  # abandoned messages per flow that a late packet may still complete
PSN_MASK = 0xFFFFFF

# -- event severities and kinds ------------------------------------------------------------

SEV_ERROR, SEV_WARNING, SEV_NOTE = 0, 1, 2
SEVERITIES = ("error", "warning", "note")

# kind -> severity.  Errors: the frame or the QP is broken.  Warnings: the sequence is.
EVENT_KINDS: dict[str, int] = {
    "malformed": SEV_ERROR,
    "bad_icrc": SEV_ERROR,
    "nak_fatal": SEV_ERROR,
    "gap": SEV_WARNING,
    "retransmission": SEV_WARNING,
    "out_of_order": SEV_WARNING,
    "nak_sequence": SEV_WARNING,
    "rnr_nak": SEV_WARNING,
    "length_mismatch": SEV_WARNING,
    "reserved_syndrome": SEV_WARNING,
    "cnp": SEV_NOTE,
    "ecn_ce": SEV_NOTE,
    "incomplete_message": SEV_NOTE,
    "pause_storm": SEV_WARNING,  # PFC / PAUSE, found by pauses.py (not the flow engine)
}

# kind -> the text of its expert line, a %-template (the compiled engine uses the same ones).
TEXTS: dict[str, str] = {
    "ecn_ce": "ECN CE",
    "cnp": "CNP",
    "bad_icrc": "bad ICRC: 0x%08x, should be 0x%08x",
    "rnr_nak": "RNR NAK %sms PSN=0x%06x",  # timer in ms, as rnr_ms() gives it
    "nak": "NAK %s MSN=%d PSN=0x%06x",
    "reserved_syndrome": "reserved AETH syndrome 0x%02x",
    "gap": "%sPSN gap: expected 0x%06x, got 0x%06x (%d missing)",
    "out_of_order": "%sPSN 0x%06x out of order (late: fills an earlier gap)",
    "retransmission": "retransmission of %sPSN 0x%06x",
    "length_mismatch": "%s length: RETH DMA length %d, message carried %d bytes",
    "incomplete_message": "incomplete %s message: %s (%d packets, %d bytes seen)",
    "pause_storm": "%s from %s paused %s without a break (%d frames; threshold %s)",
}


def malformed_text(w: locate.Walk) -> str:
    return f"malformed: {locate.explain(w)}"


def rnr_ms(code: int) -> str:
    """An RNR timer code in milliseconds, as the expert line shows it (``0.64``)."""
    return f"{rnr_timer_us(code) / 1000:g}"


# -- per-opcode facts the loop needs, as small integers ---------------------------------------

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
_WRITE_KINDS = (K_WRITE, K_WRITE_IMM)


class OpInfo(NamedTuple):
    cls: int  # C_* class
    pos: int  # P_* position
    kind: int  # K_* message kind (imm/inv only on the Last/Only that carries them)
    seq: bool  # PSN-sequenced (not UD, not CNP)


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
    return OpInfo(cls, _POS[op.position], kind, seq)


OPINFO: list[OpInfo | None] = [None] * 256
for _code, _op in OPCODES.items():
    OPINFO[_code] = _op_info(_op)
# Groups made only of these opcodes may take the bulk path.
# The scan's key columns hold the first extended header's fields.  RD and XRC put RDETH /
# XRCETH first, so for them a RETH or AETH further on is read from the frame (slow path).
_RETH_LATER = frozenset(c for c, op in OPCODES.items() if "reth" in op.headers[1:])
_AETH_LATER = frozenset(c for c, op in OPCODES.items() if "aeth" in op.headers[1:])
# Groups made only of these opcodes may take the bulk path (first headers as the columns say).
_BULK_DATA = frozenset(c for c, i in enumerate(OPINFO) if i and i.cls == C_DATA and i.seq
                       and c not in _RETH_LATER and OPCODES[c].transport in (Transport.RC,
                                                                            Transport.UC))
_BULK_ACK: frozenset[int] = frozenset(c for c, i in enumerate(OPINFO)
                                      if i and i.cls == C_ACK and c not in _AETH_LATER)
_BULK_RESP = frozenset(c for c, i in enumerate(OPINFO)
                       if i and i.cls == C_READ_RESP and c not in _AETH_LATER)
# Opcode -> which bulk path can take a run of it (0: none): runs are cut where this changes.
_BULK_CATEGORY = bytes(1 if c in _BULK_DATA else 2 if c in _BULK_ACK else
                       3 if c in _BULK_RESP else 0 for c in range(256))
_FIRST_OR_ONLY = b"FO"
# Opcode -> position letter (F, M, L, O) and -> 1 for First/Middle, for bytes.translate: a
# group's positions become a string that a regular expression checks in one call.
_POS_TABLE = bytes(b"FMLO"[i.pos] if i else 0x3F for i in OPINFO)
_FM_TABLE = bytes(1 if i and i.pos in (P_FIRST, P_MIDDLE) else 0 for i in OPINFO)
_BODY = re.compile(rb"(?:FM*L|O)*")  # whole messages only
_END = re.compile(rb"[LO]")
_END_TABLE = bytes.maketrans(b"FMLO", b"\0\0\1\1")
_KIND_TABLE = bytes(i.kind if i and i.kind >= 0 else 0xFF for i in OPINFO)

# -- where the addresses are: one slice [src, dst) per L3 kind, offsets from LAYOUTS ---------


def _addr_span(header: str, src: str, dst: str) -> tuple[int, int, int]:
    s, d = LAYOUTS[header].field(src), LAYOUTS[header].field(dst)
    # src and dst are adjacent in IPv4, IPv6 and the GRH, so one slice makes the flow key.
    assert d.bit_offset == s.bit_offset + s.bits and s.bits == d.bits and not s.bit_offset % 8
    return s.byte_offset, d.byte_offset + d.bits // 8, s.bits // 8


ADDR_SPANS: dict[int, tuple[int, int, int]] = {
    locate.L3_IPV4: _addr_span("ip", "src", "dst"),
    locate.L3_IPV6: _addr_span("ipv6", "src", "dst"),
    locate.L3_GRH: _addr_span("grh", "sgid", "dgid"),
}
L3_NAMES = {locate.L3_IPV4: "IPv4", locate.L3_IPV6: "IPv6", locate.L3_GRH: "GRH"}
_BTH_OPCODE = LAYOUTS["bth"].field("opcode").byte_offset
_BTH_TVER = locate.SPECS[("bth", "tver")]
_BTH_DESTQP = locate.SPECS[("bth", "destqp")]
_BTH_PSN = locate.SPECS[("bth", "psn")]
_BTH_PADCNT = locate.SPECS[("bth", "padcnt")]
_IP_ECN = locate.SPECS[("ip", "dsfield.ecn")]
_IP6_TCLASS = locate.SPECS[("ipv6", "tclass")]
# L3 kind -> its length field and the bytes that length leaves out (the fixed header).
L3_LEN_FIELDS = {locate.L3_IPV4: (("ip", "len"), 0),
                 locate.L3_IPV6: (("ipv6", "plen"), SIZE_OF["ipv6"]),
                 locate.L3_GRH: (("grh", "paylen"), SIZE_OF["grh"])}
_L3_LEN = {k: (locate.SPECS[hf], extra) for k, (hf, extra) in L3_LEN_FIELDS.items()}
_KEY_NAMES = {code: [n.split(".", 1)[1] for n in names]
              for code, names in fast.KEY_FIELDS.items()}


def _feed_many(t: Any, psns: tuple[int, ...]) -> None:
    """Feed PSNs known to be in order (the compiled tracker does it in one call)."""
    many = getattr(t, "feed_many", None)
    if many is not None:
        many(array("I", psns))
    else:
        for p in psns:
            t.feed(p, 1)


def _rd(buf: bytes, base: int, spec: tuple[int, int, int, int]) -> int:
    """One field by its ``locate.SPECS`` entry (byte offset, byte count, shift, mask)."""
    off, n, shift, mask = spec
    return (int.from_bytes(buf[base + off:base + off + n], "big") >> shift) & mask


def _eth_field(data: bytes, bth_off: int, op: int, header: str, name: str) -> int:
    """A field of an extended header that is not the first one; -1 if not captured."""
    off = bth_off + SIZE_OF["bth"]
    for h in OPCODES[op].headers:
        if h == header:
            break
        off += SIZE_OF[h]
    if bth_off < 0 or len(data) < off + SIZE_OF[header]:
        return -1
    return DECODERS[header](data, off)[name]


def _addr_text(kind: int, raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET if kind == locate.L3_IPV4 else socket.AF_INET6, raw)


psn_diff = fast.psn_diff

# -- results ----------------------------------------------------------------------------------


class Event(NamedTuple):
    """One expert-info item."""

    frame: int  # 1-based frame number in the capture
    severity: int  # SEV_*
    kind: str  # EVENT_KINDS key
    flow: int  # Flow.id, or -1 when the frame belongs to no flow
    qp: int  # the flow's destination QP, -1 when none
    text: str
    ts_ns: int

    def line(self) -> str:
        """``#1532 QP 0x000011 PSN gap: expected 0x0003e8, got 0x0003ea (2 missing)``."""
        if self.qp >= 0:
            return f"#{self.frame} QP 0x{self.qp:06x} {self.text}"
        return f"#{self.frame} {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return {"frame": self.frame, "severity": SEVERITIES[self.severity], "kind": self.kind,
                "flow": self.flow if self.flow >= 0 else None,
                "qp": self.qp if self.qp >= 0 else None, "text": self.text,
                "line": self.line(), "ts_ns": self.ts_ns}


class EventStore:
    """Counts events per kind and keeps, per kind, the ``cap`` first ones: earliest frame
    first, then the order they were made in (events of one frame all come from its flow).
    An event may be made after later frames were seen (a READ is sequenced when the next
    request comes, a message is sized at its Last), so "first" is not simply "first made";
    a max-heap per kind holds the kept ones once the cap is reached."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.counts: dict[str, int] = {}
        self._kept: dict[str, list[tuple[int, int, Event]]] = {}
        self._seq = 0

    def wants(self, kind: str, frame: int) -> bool:
        """Would an event of this kind and frame, made now, be kept?"""
        heap = self._kept.get(kind)
        return heap is None or len(heap) < self.cap or (self.cap > 0 and frame < -heap[0][0])

    def add(self, e: Event) -> None:
        kind = e.kind
        n = self.counts[kind] = self.counts.get(kind, 0) + 1
        self._seq += 1
        heap = self._kept.get(kind)
        if heap is None:
            heap = self._kept[kind] = []
        item = (-e.frame, -self._seq, e)
        if n <= self.cap:
            heap.append(item)
            if n == self.cap:
                heapq.heapify(heap)
        elif self.cap > 0 and item[:2] > heap[0][:2]:
            heapq.heapreplace(heap, item)

    def skip(self, kind: str) -> None:
        """Count an event that ``wants`` said would not be kept."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self._seq += 1

    def kept(self) -> list[Event]:
        """The kept events in frame order (made order within a frame)."""
        items = [item for heap in self._kept.values() for item in heap]
        items.sort(key=_earliest)
        return [e for _, _, e in items]


def _earliest(item: tuple[int, int, Event]) -> tuple[int, int]:
    return -item[0], -item[1]


class _Path:
    """What the two directions between two addresses share: the MTU seen so far."""

    __slots__ = ("mtu",)

    def __init__(self) -> None:
        self.mtu = 0  # largest First/Middle payload; 0 = none seen yet


class _Msgs:
    """Message reassembly state of one direction of one flow (requests or READ responses)."""

    __slots__ = ("kind", "first", "lo", "bytes", "pkts", "mtu", "dmalen", "frame", "ts",
                 "open", "evicted")

    def __init__(self) -> None:
        self.kind = -1  # -1 idle, else the message's base kind
        self.first: int | None = None  # PSN of the First (None: tail without head)
        self.lo = 0  # lowest PSN seen in the message
        self.bytes = self.pkts = self.mtu = 0
        self.dmalen = -1
        self.frame = self.ts = 0
        # Abandoned messages a late retransmission may still complete:
        # [first PSN or None, last PSN or None, lo, kind, bytes, pkts, mtu, dmalen, frame, ts]
        self.open: list[list[Any]] = []
        self.evicted = 0


class Flow:
    """Counters of one flow (src, dst, destination QP).  Times are integer nanoseconds."""

    __slots__ = ("id", "l3", "addr", "qp", "src", "dst", "path", "packets", "bytes", "payload",
                 "req_payload", "rsp_payload", "first_ts", "last_ts", "req", "rsp", "req_first",
                 "rsp_first", "rsp_last", "pending", "reqmsg", "rspmsg", "stats", "incomplete",
                 "acks", "naks", "rnr", "reserved_syn", "atomic_acks", "cnps", "ecn_ce",
                 "bad_icrc", "malformed", "truncated", "peer", "_batch")

    def __init__(self, fid: int, l3: int, addr: bytes, qp: int, path: _Path) -> None:
        half = len(addr) // 2
        self.id, self.l3, self.addr, self.qp, self.path = fid, l3, addr, qp, path
        self.src, self.dst = _addr_text(l3, addr[:half]), _addr_text(l3, addr[half:])
        self.packets = self.bytes = self.payload = self.req_payload = self.rsp_payload = 0
        self.first_ts = self.last_ts = -1
        self.req: Any = None  # PSNTracker of the requests this flow carries
        self.rsp: Any = None  # PSNTracker of its READ responses / atomic ACKs
        self.req_first = self.rsp_first = self.rsp_last = -1  # PSNs, for pairing
        self.pending: list[int] | None = None  # READ not yet sequenced: [frame, psn, dmalen, ts]
        self.reqmsg, self.rspmsg = _Msgs(), _Msgs()
        self.stats: dict[int, list[int]] = {}  # kind -> [count, bytes, min size, max size]
        self.incomplete = 0
        self.acks = self.reserved_syn = self.atomic_acks = self.cnps = self.ecn_ce = 0
        self.bad_icrc = self.malformed = self.truncated = 0
        self.naks: dict[int, int] = {}  # NAK code -> count
        self.rnr: dict[int, int] = {}  # RNR timer code -> count
        self.peer: Flow | None = None
        self._batch: list[int] = []

    def __repr__(self) -> str:
        return f"<Flow {self.id} {self.src} -> {self.dst} QP 0x{self.qp:06x} {self.packets} pkts>"

    @property
    def duration_ns(self) -> int:
        return max(self.last_ts - self.first_ts, 0) if self.packets else 0

    @property
    def goodput(self) -> float | None:
        """Request payload bytes per second; None when the flow lasted no time or carried no
        request payload."""
        d = self.duration_ns
        return self.req_payload * 1e9 / d if d and self.req_payload else None

    @property
    def mtu(self) -> int:
        return self.path.mtu

    @property
    def messages(self) -> dict[str, dict[str, int]]:
        return {KIND_KEYS[k]: {"count": c, "bytes": b, "min": lo, "max": hi}
                for k, (c, b, lo, hi) in sorted(self.stats.items())}

    def to_dict(self, t0: int = 0) -> dict[str, Any]:
        def psn(t: Any) -> dict[str, int] | None:
            return None if t is None else t.counts()

        return {
            "id": self.id, "l3": L3_NAMES[self.l3], "src": self.src, "dst": self.dst,
            "qp": self.qp, "peer": self.peer.id if self.peer else None,
            "packets": self.packets, "bytes": self.bytes, "payload_bytes": self.payload,
            "request_payload_bytes": self.req_payload,
            "response_payload_bytes": self.rsp_payload,
            "first_ns": self.first_ts, "last_ns": self.last_ts,
            "start": (self.first_ts - t0) / 1e9 if self.packets else None,
            "duration": self.duration_ns / 1e9, "goodput_Bps": self.goodput,
            "mtu": self.path.mtu or None,
            "messages": self.messages, "incomplete_messages": self.incomplete,
            "psn": psn(self.req), "response_psn": psn(self.rsp),
            "acks": self.acks, "atomic_acks": self.atomic_acks,
            "naks": {NAK_CODES.get(c, f"code {c}"): n for c, n in sorted(self.naks.items())},
            "rnr_naks": sum(self.rnr.values()),
            "rnr_timers_ms": {rnr_ms(c): n
                              for c, n in sorted(self.rnr.items())},
            "reserved_syndromes": self.reserved_syn,
            "cnps": self.cnps, "ecn_ce": self.ecn_ce, "bad_icrc": self.bad_icrc,
            "malformed": self.malformed, "truncated": self.truncated,
        }


@dataclass
class Report:
    """What :func:`analyse` returns."""

    flows: list[Flow]
    connections: list[tuple[Flow, Flow]]  # (flow carrying requests first, its reverse)
    lone: list[Flow]  # flows without a pair
    totals: dict[str, Any]
    events: list[Event]  # kept events in frame order (the first MAX_EVENTS_PER_KIND a kind)
    event_counts: dict[str, int]  # all events per kind, stored or not
    problems: list[str] = field(default_factory=list)  # reader problems, set by the caller

    def expert(self, limit: int | None = None) -> list[Event]:
        """Events by severity (errors first), then frame; ``limit`` of them."""
        ordered = sorted(self.events, key=lambda e: (e.severity, e.frame))
        return ordered if limit is None else ordered[:limit]

    def to_dict(self) -> dict[str, Any]:
        t0 = self.totals.get("first_ns") or 0
        return {
            "totals": self.totals,
            "connections": [{"flows": [a.id, b.id],
                             "endpoints": [{"address": b.dst, "qp": b.qp},
                                           {"address": a.dst, "qp": a.qp}]}
                            for a, b in self.connections],
            "flows": [f.to_dict(t0) for f in self.flows],
            "expert": {
                "counts": dict(sorted(self.event_counts.items())),
                "by_severity": {s: sum(n for k, n in self.event_counts.items()
                                       if SEVERITIES[EVENT_KINDS[k]] == s) for s in SEVERITIES},
                "stored": len(self.events),
                "events": [e.to_dict() for e in self.events],
            },
            "problems": self.problems,
        }


# -- the engine -------------------------------------------------------------------------------


class Analyzer:
    """Streaming analyser: ``feed`` frames (any number of times), then ``finish``."""

    def __init__(self, udp_port: int = locate.ROCE_PORT, batch: int = BATCH,
                 max_events: int = MAX_EVENTS_PER_KIND, bulk: bool = True) -> None:
        self.udp_port = udp_port
        self.batch = max(1, batch)
        self.max_events = max_events
        self.bulk = bulk  # False: every group packet by packet (tests compare the two)
        self.frames = self.not_roce = self.malformed_unattributed = 0
        self.truncated_unattributed = 0
        self.first_ts = self.last_ts = -1
        self.flows: list[Flow] = []
        self._maps: dict[int, dict[tuple[bytes, int], Flow]] = {k: {} for k in ADDR_SPANS}
        self._paths: dict[tuple[int, bytes], _Path] = {}
        self.store = EventStore(max_events)
        self.events: list[Event] = []  # filled by finish()
        self._cols = fast.scan_columns(self.batch)
        self._done = False

    # -- input ----------------------------------------------------------------------------

    def feed(self, frames: Iterable[Any]) -> None:
        """Analyse frames: ``pcapio.Frame`` objects or bytes (Ethernet, timestamp 0)."""
        for datas, tss, caps, lens, linktype in frame_columns(frames, self.batch):
            self._feed_batch(datas, tss, lens, caps, linktype)

    def feed_capture(self, reader: Any,
                     progress: Callable[[int, int | None], None] | None = None) -> None:
        """Analyse what is left of a ``CaptureReader``; ``progress(frames so far, None)``
        is called after each batch."""
        for batch in reader.batches(self.batch):
            self.feed_batch(batch)
            if progress is not None:
                progress(self.frames, None)

    def feed_batch(self, batch: Any) -> None:
        """Analyse one ``pcapio.Batch`` (frames of one link type as columns)."""
        for start in range(0, len(batch.datas), self.batch):
            end = start + self.batch
            self._feed_batch(batch.datas[start:end], batch.ts_ns[start:end],
                             batch.origlen[start:end], batch.caplen[start:end], batch.linktype)

    # -- one batch ------------------------------------------------------------------------

    def _feed_batch(self, datas: list[bytes], tss: Sequence[int], lens: Sequence[int],
                    caps: Sequence[int] | None, linktype: int) -> None:
        n = len(datas)
        base = self.frames
        self.frames += n
        if self.first_ts < 0:
            self.first_ts = tss[0]
        self.last_ts = tss[-1]
        cols = self._cols
        fast.scan(datas, linktype, self.udp_port, True, cols)
        B = _Batch(base, datas, tss, lens, linktype, cols, n)
        ok_all = B.status.count(0) == n
        # Frames the scan could not walk, by index: the malformed text, "" when truncated.
        special: dict[int, str] = {}
        if ok_all:
            idxs: Any = range(n)
        else:
            idxs = []
            B.to_lists()
            for i, st in enumerate(B.status):
                if st == 0:
                    idxs.append(i)
                elif st < 10:
                    self.not_roce += 1
                elif self._bad_frame(B, i, st, linktype, caps, special):
                    idxs.append(i)
            if not idxs:
                return
        # Flow keys: one address slice plus the destination QP.
        l3k, l3o, qps = B.l3k, B.l3o, B.destqp
        k0 = l3k[idxs[0]]
        o0 = l3o[idxs[0]]
        if ok_all and l3k.count(k0) == n and l3o.count(o0) == n:
            a, b, _ = ADDR_SPANS[k0]
            keys = list(zip(map(itemgetter(slice(o0 + a, o0 + b)), datas), qps))
            fmap = self._maps[k0]
            flows = list(map(fmap.get, keys))
            if None in flows:
                for key, f in zip(keys, flows):
                    if f is None and key not in fmap:
                        self._new_flow(k0, key[0], key[1])
                flows = list(map(fmap.get, keys))
        else:
            flows = []
            for i in idxs:
                k = l3k[i]
                a, b, _ = ADDR_SPANS[k]
                o = l3o[i]
                key = (datas[i][o + a:o + b], qps[i])
                f = self._maps[k].get(key)
                if f is None:
                    f = self._new_flow(k, key[0], key[1])
                flows.append(f)
        for i, f in zip(idxs, flows):
            f._batch.append(i)
        # Each flow's packets of the batch are taken together, flow after flow, except on a
        # path whose MTU may still grow within the batch: there the two directions read and
        # write the same MTU, so their packets are taken in capture order.
        growing: set[_Path] = set()
        groups = []
        for f in dict.fromkeys(flows):
            idx, f._batch = f._batch, []
            if f.first_ts < 0:
                f.first_ts = tss[idx[0]]
            f.last_ts = tss[idx[-1]]
            groups.append((f, idx))
            if f.path not in growing and self._mtu_may_grow(f, idx, B):
                growing.add(f.path)
        for f, idx in groups:
            if f.path not in growing:
                self._run(f, idx, B, special)
        if growing:
            run: list[int] = []
            last = None
            for i, f in zip(idxs, flows):
                if f.path not in growing:
                    continue
                if f is not last and run:
                    self._run(last, run, B, special)
                    run = []
                last = f
                run.append(i)
            if run:
                self._run(last, run, B, special)

    def _run(self, f: Flow, idx: list[int], B: _Batch, special: dict[int, str]) -> None:
        if self.bulk and not special:
            self._group(f, idx, B)
        else:
            self._slow_group(f, idx, B, special)

    @staticmethod
    def _mtu_may_grow(f: Flow, idx: list[int], B: _Batch) -> bool:
        """Does a First/Middle of this group carry more payload than the path's MTU?"""
        ops = bytes(map(B.opcode.__getitem__, idx)).translate(_FM_TABLE)
        if 1 not in ops:
            return False
        return max(compress(map(B.paylen.__getitem__, idx), ops)) > f.path.mtu

    def _group(self, f: Flow, idx: list[int], B: _Batch) -> None:
        """A flow's packets of one batch, in order: each run of packets the bulk path can
        take (plain data or plain ACKs) goes in bulk, the others one by one.  A READ or an
        atomic in the middle of a WRITE stream then costs only its own packet."""
        ops = B.opcode
        cat = _BULK_CATEGORY
        n = len(idx)
        start = 0
        while start < n:
            c = cat[ops[idx[start]]]
            end = start + 1
            while end < n and cat[ops[idx[end]]] == c:
                end += 1
            run = idx[start:end] if start or end < n else idx
            if not (c and self._bulk_group(f, run, B)):
                self._slow_group(f, run, B, {})
            start = end

    def _new_flow(self, l3: int, addr: bytes, qp: int) -> Flow:
        half = len(addr) // 2
        rev = addr[half:] + addr[:half]
        pkey = (l3, min(addr, rev))
        path = self._paths.get(pkey)
        if path is None:
            path = self._paths[pkey] = _Path()
        f = Flow(len(self.flows), l3, addr, qp, path)
        self.flows.append(f)
        self._maps[l3][(addr, qp)] = f
        return f

    def _bad_frame(self, B: _Batch, i: int, st: int, linktype: int,
                   caps: Sequence[int] | None, special: dict[int, str]) -> bool:
        """A frame the scan called malformed: count it, explain it, and when its addresses and
        BTH are readable, fill its columns so its flow can still use its PSN.  Returns whether
        the frame joins a flow."""
        data = B.datas[i]
        w = fast.walk(data, linktype, self.udp_port)
        snapped = (caps is not None and caps[i] < B.lens[i]
                   and st in (locate.BAD_TRUNCATED, locate.BAD_L3_LENGTH))
        fn, ts = B.base + i + 1, B.tss[i]
        bth = w.bth_off
        span = ADDR_SPANS.get(w.l3_kind)
        usable = (span is not None and w.l3_off >= 0 and bth >= 0
                  and len(data) >= bth + SIZE_OF["bth"] and len(data) >= w.l3_off + span[1]
                  and _rd(data, bth, _BTH_TVER) == 0
                  and OPINFO[data[bth + _BTH_OPCODE]] is not None)
        if not usable:
            if snapped:
                self.truncated_unattributed += 1
            else:
                self.malformed_unattributed += 1
                self._event(fn, ts, "malformed", None, malformed_text(w))
            return False
        op = data[bth + _BTH_OPCODE]
        B.opcode[i] = op
        B.destqp[i] = _rd(data, bth, _BTH_DESTQP)
        B.psn[i] = _rd(data, bth, _BTH_PSN)
        B.l3k[i], B.l3o[i], B.bth_off[i] = w.l3_kind, w.l3_off, bth
        if w.l3_kind == locate.L3_IPV4:
            B.ecn[i] = _rd(data, w.l3_off, _IP_ECN)
        elif w.l3_kind == locate.L3_IPV6:
            B.ecn[i] = _rd(data, w.l3_off, _IP6_TCLASS) & 3
        B.icrc[i] = 1  # not checked: it cannot be computed over a partial frame
        # Key fields when the first extended header was captured whole.
        names = _KEY_NAMES.get(op)
        hdr = OPCODES[op].headers[0] if OPCODES[op].headers else None
        keys = [0, 0, 0]
        if names and hdr and len(data) >= bth + SIZE_OF["bth"] + SIZE_OF[hdr]:
            vals = DECODERS[hdr](data, bth + SIZE_OF["bth"])
            keys[:len(names)] = [vals[n] for n in names]
        elif names:
            keys = [-1, -1, -1]  # unknown: a READ's length, an ACK's syndrome
        B.key0[i], B.key1[i], B.key2[i] = keys
        B.paylen[i] = 0
        if snapped and w.payload_off >= 0 and st == locate.BAD_L3_LENGTH:
            # All headers were captured: the L3 length says how much payload there was.
            spec, extra = _L3_LEN[w.l3_kind]
            end = w.l3_off + extra + _rd(data, w.l3_off, spec)
            pad = _rd(data, bth, _BTH_PADCNT)
            B.paylen[i] = max(end - 4 - pad - w.payload_off, 0)
        special[i] = "" if snapped else malformed_text(w)
        return True

    # -- per-flow groups --------------------------------------------------------------------

    def _bulk_group(self, f: Flow, idx: list[int], B: _Batch) -> bool:
        """Account a clean group in bulk; False when it needs the packet-by-packet path."""
        m = len(idx)
        g = itemgetter(*idx) if m > 1 else (lambda col: (col[idx[0]],))
        ops = g(B.opcode)
        opset = set(ops)
        if not B.clean and (3 in g(B.ecn) or 0 in g(B.icrc)):
            return False
        if opset <= _BULK_DATA:
            psns = g(B.psn)
            if f.pending is not None:  # as the packet path would: this run's first PSN
                self._resolve_read(f, psns[0])  # decides the pending READ's PSN count
            t = f.req
            start = t.next if t is not None and t.started else psns[0]
            if start + m > PSN_MASK + 1 or psns != tuple(range(start, start + m)):
                return False
            if t is None:
                t = f.req = fast.PSNTracker()
            if f.req_first < 0:
                f.req_first = psns[0]
            _feed_many(t, psns)
            pls = g(B.paylen)
            total = sum(pls)
            f.packets += m
            f.bytes += sum(g(B.lens))
            f.payload += total
            f.req_payload += total
            self._clean_messages(f, f.reqmsg, ops, psns, pls, idx, B)
            return True
        if opset <= _BULK_RESP:
            return self._bulk_responses(f, idx, B, ops, g)
        if opset <= _BULK_ACK:
            syns = g(B.key0)
            if max(syns) >= 0x20:  # not every one a plain ACK (bits 7:5 zero)
                return False
            psns = g(B.psn)
            if f.rsp_first < 0:
                f.rsp_first = psns[0]
            f.rsp_last = psns[-1]
            f.packets += m
            f.bytes += sum(g(B.lens))
            f.acks += m
            return True
        return False

    def _bulk_responses(self, f: Flow, idx: list[int], B: _Batch, ops: tuple[int, ...],
                        g: Callable[[Sequence[Any]], tuple[Any, ...]]) -> bool:
        """A run of READ responses: in PSN order within each message, a forward jump allowed
        at each First/Only (PSNs of requests without a data response), as the packet path."""
        psns = g(B.psn)
        pos = bytes(ops).translate(_POS_TABLE)
        t = f.rsp
        nxt = t.next if t is not None and t.started else psns[0]
        cuts = []  # (index where a message jumps ahead, new PSN)
        for j, p in enumerate(psns):
            if p != nxt:
                d = psn_diff(p, nxt)
                if d <= 0 or pos[j] not in _FIRST_OR_ONLY or (t is None and j == 0):
                    return False
                cuts.append((j, p))
            nxt = (p + 1) & PSN_MASK
        if t is None:
            t = f.rsp = fast.PSNTracker()
        start = 0
        for j, p in (*cuts, (len(psns), None)):
            if j > start:
                _feed_many(t, psns[start:j])
            if p is not None:
                if p < t.next:
                    t.wraps += 1
                t.next = p
            start = j
        pls = g(B.paylen)
        total = sum(pls)
        m = len(idx)
        if f.rsp_first < 0:
            f.rsp_first = psns[0]
        f.rsp_last = psns[-1]
        f.packets += m
        f.bytes += sum(g(B.lens))
        f.payload += total
        f.rsp_payload += total
        self._clean_messages(f, f.rspmsg, ops, psns, pls, idx, B)
        return True

    def _clean_messages(self, f: Flow, st: _Msgs, ops: tuple[int, ...], psns: tuple[int, ...],
                        pls: tuple[int, ...], idx: list[int], B: _Batch) -> None:
        """Message reassembly over packets that all advance the sequence in order.

        The run of whole messages in the middle of the group is sized from prefix sums, one
        step per message; the head (rest of a message begun earlier) and the tail (a message
        still open) go packet by packet through ``_advance``.
        """
        pos = bytes(ops).translate(_POS_TABLE)
        n = len(pos)
        h = 0
        if st.kind >= 0:
            m = _END.search(pos)
            h = m.end() if m else n
        t = max(pos.rfind(b"L"), pos.rfind(b"O")) + 1
        if t > h and _BODY.fullmatch(pos, h, t):
            self._advance_each(f, st, ops, psns, pls, idx, B, 0, h)
            self._whole_messages(f, pos, ops, pls, idx, B, h, t)
            self._advance_each(f, st, ops, psns, pls, idx, B, t, n)
        else:
            self._advance_each(f, st, ops, psns, pls, idx, B, 0, n)

    def _whole_messages(self, f: Flow, pos: bytes, ops: tuple[int, ...], pls: tuple[int, ...],
                        idx: list[int], B: _Batch, h: int, t: int) -> None:
        """Account the whole messages in ``pos[h:t]`` (First..Last or Only, in order): sizes
        from prefix sums, all in C except one step per kind."""
        if b"F" in pos or b"M" in pos:
            mtu = max(compress(pls[h:t], bytes(ops[h:t]).translate(_FM_TABLE)), default=0)
            if mtu > f.path.mtu:
                f.path.mtu = mtu
        pre = list(accumulate(pls[h:t], initial=0))
        ends = list(compress(range(1, t - h + 1), pos[h:t].translate(_END_TABLE)))
        starts = [0, *ends[:-1]]
        sizes = list(map(sub, map(pre.__getitem__, ends), map(pre.__getitem__, starts)))
        kinds = bytes(map(ops.__getitem__, map((h - 1).__add__, ends))).translate(_KIND_TABLE)
        for kind in set(kinds):
            if len(kinds) == 1 or kinds.count(kind) == len(kinds):
                ks, kstarts = sizes, starts
            else:
                sel = [k == kind for k in kinds]
                ks, kstarts = list(compress(sizes, sel)), list(compress(starts, sel))
            s = f.stats.get(kind)
            if s is None:
                s = f.stats[kind] = [0, 0, ks[0], ks[0]]
            s[0] += len(ks)
            s[1] += sum(ks)
            s[2] = min(s[2], min(ks))
            s[3] = max(s[3], max(ks))
            if kind == K_WRITE or kind == K_WRITE_IMM:
                # Each WRITE's RETH (on its First/Only) says how long the message should be.
                firsts = list(map(idx.__getitem__, map(h.__add__, kstarts)))
                dmalens = list(map(B.key2.__getitem__, firsts))
                if dmalens != ks:
                    for i, want, got in zip(firsts, dmalens, ks):
                        if want != got:
                            self._length_mismatch(f, kind, want, got, B.base + i + 1, B.tss[i])

    def _advance_each(self, f: Flow, st: _Msgs, ops: tuple[int, ...], psns: tuple[int, ...],
                      pls: tuple[int, ...], idx: list[int], B: _Batch, lo: int,
                      hi: int) -> None:
        info, advance = OPINFO, self._advance
        for j in range(lo, hi):
            i = idx[j]
            o = info[ops[j]]
            advance(f, st, o.pos, o.kind, psns[j], pls[j],  # type: ignore[union-attr]
                    B.key2[i], B.base + i + 1, B.tss[i])

    def _slow_group(self, f: Flow, idx: list[int], B: _Batch, special: dict[int, str]) -> None:
        """Every packet of a group, one at a time: the reference behaviour."""
        ops, psns, pls, lens = B.opcode, B.psn, B.paylen, B.lens
        ecns, icrcs, k0s, k1s, k2s = B.ecn, B.icrc, B.key0, B.key1, B.key2
        base, tss = B.base, B.tss
        for i in idx:
            op = ops[i]
            info = OPINFO[op]
            assert info is not None
            cls, pos, kind, seq = info
            fn, ts = base + i + 1, tss[i]
            bad = False  # malformed: sequenced, but no part of message reassembly
            if special and i in special:
                text = special[i]
                if text:
                    bad = True
                    f.malformed += 1
                    self._event(fn, ts, "malformed", f, text)
                else:
                    f.truncated += 1
            plen = pls[i]
            psn = psns[i]
            k0, k1, k2 = k0s[i], k1s[i], k2s[i]
            if op in _RETH_LATER:
                k2 = _eth_field(B.datas[i], B.bth_off[i], op, "reth", "dmalen")
            elif op in _AETH_LATER:
                k0 = _eth_field(B.datas[i], B.bth_off[i], op, "aeth", "syndrome")
                k1 = _eth_field(B.datas[i], B.bth_off[i], op, "aeth", "msn")
            f.packets += 1
            f.bytes += lens[i]
            f.payload += plen
            if ecns[i] == 3:
                f.ecn_ce += 1
                self._event(fn, ts, "ecn_ce", f, TEXTS["ecn_ce"])
            if not icrcs[i]:
                f.bad_icrc += 1
                _, calc, stored = fast.icrc_check(B.datas[i], B.linktype, self.udp_port)
                self._event(fn, ts, "bad_icrc", f, TEXTS["bad_icrc"] % (stored, calc))
            if cls <= C_ONLYREQ:  # a request
                f.req_payload += plen
                if not seq:  # UD: counted, not sequenced
                    self._complete(f, kind, plen, -1, fn, ts)
                    continue
                if f.req_first < 0:
                    f.req_first = psn
                if f.pending is not None:
                    self._resolve_read(f, psn)
                if cls == C_READ and k2 >= 0:
                    # Its PSN count depends on the MTU: decide when the next request comes.
                    f.pending = [fn, psn, k2, ts]
                    continue
                ev = self._feed_req(f, psn, 1, fn, ts)
                if ev == EV_DUPLICATE or bad:
                    continue
                if cls == C_DATA:
                    if ev == EV_LATE:
                        self._late(f, f.reqmsg, pos, kind, psn, plen, k2, fn, ts)
                    else:
                        self._advance(f, f.reqmsg, pos, kind, psn, plen, k2, fn, ts)
                elif cls == C_READ:  # a READ whose RETH was not captured
                    self._complete(f, kind, 0, -1, fn, ts)
                else:
                    self._complete(f, kind, 8 if cls == C_ATOMIC else plen, -1, fn, ts)
            elif cls == C_ACK:
                self._note_rsp_psn(f, psn)
                syn = k0
                if syn < 0:  # AETH not captured
                    continue
                t = syndrome_type(syn)
                v = syndrome_value(syn)
                if t == AETH_ACK:
                    f.acks += 1
                elif t == AETH_RNR_NAK:
                    f.rnr[v] = f.rnr.get(v, 0) + 1
                    self._event(fn, ts, "rnr_nak", f, TEXTS["rnr_nak"] % (rnr_ms(v), psn))
                elif t == AETH_NAK:
                    f.naks[v] = f.naks.get(v, 0) + 1
                    self._event(fn, ts, "nak_sequence" if v == 0 else "nak_fatal", f,
                                TEXTS["nak"] % (nak_name(v), k1, psn))
                else:
                    f.reserved_syn += 1
                    self._event(fn, ts, "reserved_syndrome", f,
                                TEXTS["reserved_syndrome"] % syn)
            elif cls == C_READ_RESP or cls == C_ATOMIC_ACK:
                self._note_rsp_psn(f, psn)
                f.rsp_payload += plen
                if cls == C_ATOMIC_ACK:
                    f.atomic_acks += 1
                t = f.rsp
                if t is None:
                    t = f.rsp = fast.PSNTracker()
                elif t.started and (pos == P_FIRST or pos == P_ONLY):
                    # A new response may skip PSNs used by requests without a data response.
                    d = psn_diff(psn, t.next)
                    if d > 0:
                        if psn < t.next:
                            t.wraps += 1
                        t.next = psn
                ev = self._feed(f, t, psn, 1, fn, ts, "response ")
                if cls == C_ATOMIC_ACK or ev == EV_DUPLICATE or bad:
                    continue
                if ev == EV_LATE:
                    self._late(f, f.rspmsg, pos, kind, psn, plen, -1, fn, ts)
                else:
                    self._advance(f, f.rspmsg, pos, kind, psn, plen, -1, fn, ts)
            else:  # CNP
                f.cnps += 1
                self._event(fn, ts, "cnp", f, TEXTS["cnp"])

    # -- PSN sequencing -----------------------------------------------------------------------

    def _feed_req(self, f: Flow, psn: int, count: int, fn: int, ts: int) -> int:
        t = f.req
        if t is None:
            t = f.req = fast.PSNTracker()
        return self._feed(f, t, psn, count, fn, ts, "")

    def _feed(self, f: Flow, t: Any, psn: int, count: int, fn: int, ts: int, what: str) -> int:
        exp = t.next
        started = t.started
        ev = t.feed(psn, count)
        if ev > EV_IN_ORDER and started:
            if ev == EV_GAP:
                self._event(fn, ts, "gap", f,
                            TEXTS["gap"] % (what, exp, psn, psn_diff(psn, exp)))
            elif ev == EV_LATE:
                self._event(fn, ts, "out_of_order", f, TEXTS["out_of_order"] % (what, psn))
            else:
                self._event(fn, ts, "retransmission", f, TEXTS["retransmission"] % (what, psn))
        return ev

    def _resolve_read(self, f: Flow, next_psn: int | None) -> None:
        """Sequence the pending READ now that the next request's PSN (or the end) is known."""
        fn, psn, dmalen, ts = f.pending  # type: ignore[misc]
        f.pending = None
        mtu = f.path.mtu
        count = min(max(1, -(-dmalen // (mtu or DEFAULT_MTU))), MAX_READ_PSNS)
        if not mtu and next_psn is not None:
            d = psn_diff(next_psn, psn)
            if d > 0 and any(d == max(1, -(-dmalen // m)) for m in IB_MTUS):
                count = d
        ev = self._feed_req(f, psn, count, fn, ts)
        if ev != EV_DUPLICATE:
            self._complete(f, K_READ, dmalen, -1, fn, ts)

    def _note_rsp_psn(self, f: Flow, psn: int) -> None:
        if f.rsp_first < 0:
            f.rsp_first = psn
        f.rsp_last = psn

    # -- message reassembly ----------------------------------------------------------------------

    def _advance(self, f: Flow, st: _Msgs, pos: int, kind: int, psn: int, plen: int,
                 dmalen: int, fn: int, ts: int) -> None:
        """A packet that advanced the sequence (in order, first, or after a gap)."""
        if pos == P_FIRST or pos == P_MIDDLE:
            if plen > f.path.mtu:
                f.path.mtu = plen
        if pos == P_MIDDLE:
            if st.kind < 0:  # a message whose First was not seen
                self._start(st, kind, None, psn, plen, -1, fn, ts)
            else:
                st.bytes += plen
                st.pkts += 1
            return
        if pos == P_FIRST:
            if st.kind >= 0:
                self._abandon(f, st)
            self._start(st, kind, psn, psn, plen, dmalen if kind in _WRITE_KINDS else -1, fn,
                        ts)
            return
        if pos == P_ONLY:
            if st.kind >= 0:
                self._abandon(f, st)
            self._complete(f, kind, plen, dmalen if kind in _WRITE_KINDS else -1, fn, ts)
            return
        # Last
        if st.kind < 0:
            self._start(st, kind, None, psn, 0, -1, fn, ts)
            st.pkts = 0
        st.bytes += plen
        st.pkts += 1
        if st.first is None:  # a tail without head: wait for a late First
            self._abandon(f, st, last=psn, kind=kind)
            return
        size = st.bytes + self._lost(st.first, psn, st.pkts, st.mtu or f.path.mtu)
        st.kind = -1
        self._complete(f, kind, size, st.dmalen, st.frame, st.ts)

    @staticmethod
    def _lost(first: int, last: int, pkts: int, mtu: int) -> int:
        """Bytes of the packets between First and Last that were not seen."""
        missing = psn_diff(last, first) + 1 - pkts
        return missing * mtu if missing > 0 else 0

    @staticmethod
    def _start(st: _Msgs, kind: int, first: int | None, psn: int, plen: int, dmalen: int,
               fn: int, ts: int) -> None:
        st.kind, st.first, st.lo = kind, first, psn
        st.bytes, st.pkts = plen, 1
        st.mtu = plen if first is not None else 0
        st.dmalen, st.frame, st.ts = dmalen, fn, ts

    def _abandon(self, f: Flow, st: _Msgs, last: int | None = None, kind: int = -1) -> None:
        """The current message stops without its Last (or lacks its First): keep it open so a
        late retransmission can complete it."""
        st.open.append([st.first, last, st.lo, kind if kind >= 0 else st.kind, st.bytes,
                        st.pkts, st.mtu, st.dmalen, st.frame, st.ts])
        st.kind = -1
        if len(st.open) > MAX_OPEN_MESSAGES:
            self._incomplete(f, st.open.pop(0))

    def _late(self, f: Flow, st: _Msgs, pos: int, kind: int, psn: int, plen: int, dmalen: int,
              fn: int, ts: int) -> None:
        """A packet that filled a hole: it may belong to the current or an abandoned message."""
        if st.kind >= 0 and st.first is None and pos == P_FIRST and psn_diff(st.lo, psn) > 0:
            # The head of the message in progress, resent.
            st.first, st.lo, st.mtu = psn, psn, plen
            st.bytes += plen
            st.pkts += 1
            st.frame, st.ts = fn, ts
            if kind in _WRITE_KINDS:
                st.dmalen = dmalen
            return
        if st.kind >= 0 and pos == P_MIDDLE and (
                psn_diff(psn, st.first if st.first is not None else st.lo) > 0
                or st.first is None):
            st.bytes += plen
            st.pkts += 1
            if st.first is None and psn_diff(psn, st.lo) < 0:
                st.lo = psn
            return
        if pos == P_ONLY:
            self._complete(f, kind, plen, dmalen if kind in _WRITE_KINDS else -1, fn, ts)
            return
        for j in range(len(st.open) - 1, -1, -1):
            e = st.open[j]
            first, last = e[0], e[1]
            if pos == P_FIRST:
                hit = first is None and psn_diff(e[2], psn) > 0
            elif pos == P_MIDDLE:
                hit = ((first is None or psn_diff(psn, first) > 0)
                       and (last is None or psn_diff(last, psn) > 0))
            else:
                hit = last is None and first is not None and psn_diff(psn, first) > 0
            if not hit:
                continue
            e[4] += plen
            e[5] += 1
            if pos == P_FIRST:
                e[0], e[6], e[8], e[9] = psn, plen, fn, ts
                if e[3] in _WRITE_KINDS:
                    e[7] = dmalen
            elif pos == P_LAST:
                e[1], e[3] = psn, kind
            if e[0] is not None and e[1] is not None:
                del st.open[j]
                size = e[4] + self._lost(e[0], e[1], e[5], e[6] or f.path.mtu)
                self._complete(f, e[3], size, e[7], e[8], e[9])
            return
        if pos == P_FIRST:  # a whole lost message being resent: follow it from here
            st.open.append([psn, None, psn, kind, plen, 1, plen,
                            dmalen if kind in _WRITE_KINDS else -1, fn, ts])
            if len(st.open) > MAX_OPEN_MESSAGES:
                self._incomplete(f, st.open.pop(0))

    def _complete(self, f: Flow, kind: int, size: int, dmalen: int, fn: int, ts: int) -> None:
        s = f.stats.get(kind)
        if s is None:
            f.stats[kind] = [1, size, size, size]
        else:
            s[0] += 1
            s[1] += size
            if size < s[2]:
                s[2] = size
            if size > s[3]:
                s[3] = size
        if dmalen >= 0 and dmalen != size:
            self._length_mismatch(f, kind, dmalen, size, fn, ts)

    def _length_mismatch(self, f: Flow, kind: int, dmalen: int, size: int, fn: int,
                         ts: int) -> None:
        self._event(fn, ts, "length_mismatch", f,
                    TEXTS["length_mismatch"] % (KIND_NAMES[kind], dmalen, size))

    def _incomplete(self, f: Flow, e: list[Any]) -> None:
        f.incomplete += 1
        first, last, kind = e[0], e[1], e[3]
        what = "First not captured" if first is None else "Last not captured"
        if first is None and last is None:
            what = "First and Last not captured"
        self._event(e[8], e[9], "incomplete_message", f,
                    TEXTS["incomplete_message"] % (KIND_NAMES[kind], what, e[5], e[4]))

    # -- events ------------------------------------------------------------------------------

    def _event(self, fn: int, ts: int, kind: str, f: Flow | None, text: str) -> None:
        self.store.add(Event(fn, EVENT_KINDS[kind], kind, f.id if f else -1, f.qp if f else -1,
                             text, ts))

    # -- the end -------------------------------------------------------------------------------

    def finish(self) -> Report:
        """Close open state (pending READs, unfinished messages), pair flows, total up."""
        if not self._done:
            self._done = True
            for f in self.flows:
                if f.pending is not None:
                    self._resolve_read(f, None)
                for st in (f.reqmsg, f.rspmsg):
                    if st.kind >= 0:
                        self._abandon(f, st)
                    for e in st.open:
                        self._incomplete(f, e)
                    st.open.clear()
            self.events = self.store.kept()
        connections = _pair(self.flows)
        paired = {f.id for c in connections for f in c}
        lone = [f for f in self.flows if f.id not in paired]
        return Report(self.flows, connections, lone, totals(self, self.flows, len(connections)),
                      self.events, dict(self.store.counts))


def frame_columns(frames: Iterable[Any], n: int) -> Iterator[tuple[list[bytes], Sequence[int],
                                                                  Sequence[int] | None,
                                                                  Sequence[int], int]]:
    """``Frame`` objects (or Ethernet frames as bytes) as columns of at most ``n`` frames of
    one link type: (datas, ts_ns, caplens or None for bytes, origlens, linktype)."""
    it = iter(frames)
    while chunk := list(islice(it, n)):
        if isinstance(chunk[0], (bytes, bytearray, memoryview)):
            datas = [bytes(d) for d in chunk]
            yield datas, [0] * len(datas), None, list(map(len, datas)), locate.LINKTYPE_ETHERNET
            continue
        datas, tss, caps, lens, lts, _ = zip(*chunk)  # Frame fields as columns, in C
        count = len(chunk)
        if lts.count(lts[0]) == count:
            yield list(datas), tss, caps, lens, lts[0]
            continue
        # A pcapng file may mix link types: each run of one link type on its own.
        start = 0
        while start < count:
            end = start + 1
            while end < count and lts[end] == lts[start]:
                end += 1
            yield (list(datas[start:end]), tss[start:end], caps[start:end], lens[start:end],
                   lts[start])
            start = end


def totals(src: Any, fl: list[Flow], nconn: int) -> dict[str, Any]:
    """The capture's totals: ``src`` has the frame counters (``frames``, ``not_roce``,
    ``malformed_unattributed``, ``truncated_unattributed``, ``first_ts``, ``last_ts``)."""

    def tsum(attr: str, which: str = "req") -> int:
        return sum(getattr(getattr(f, which), attr) for f in fl
                   if getattr(f, which) is not None)

    dur = max(src.last_ts - src.first_ts, 0) if src.frames else 0
    req_payload = sum(f.req_payload for f in fl)
    return {
        "frames": src.frames,
        "roce_packets": sum(f.packets for f in fl),
        "not_roce": src.not_roce,
        "malformed": sum(f.malformed for f in fl) + src.malformed_unattributed,
        "truncated": sum(f.truncated for f in fl) + src.truncated_unattributed,
        "bytes": sum(f.bytes for f in fl),
        "payload_bytes": sum(f.payload for f in fl),
        "request_payload_bytes": req_payload,
        "flows": len(fl), "connections": nconn,
        "first_ns": src.first_ts if src.frames else None,
        "last_ns": src.last_ts if src.frames else None,
        "duration": dur / 1e9,
        "goodput_Bps": req_payload * 1e9 / dur if dur else None,
        "messages": sum(s[0] for f in fl for s in f.stats.values()),
        "incomplete_messages": sum(f.incomplete for f in fl),
        "gaps": tsum("gaps") + tsum("gaps", "rsp"),
        "missing": tsum("missing") + tsum("missing", "rsp"),
        "retransmissions": tsum("duplicates") + tsum("duplicates", "rsp"),
        "out_of_order": tsum("late") + tsum("late", "rsp"),
        "wraps": tsum("wraps") + tsum("wraps", "rsp"),
        "acks": sum(f.acks for f in fl),
        "naks": sum(sum(f.naks.values()) for f in fl),
        "rnr_naks": sum(sum(f.rnr.values()) for f in fl),
        "cnps": sum(f.cnps for f in fl),
        "ecn_ce": sum(f.ecn_ce for f in fl),
        "bad_icrc": sum(f.bad_icrc for f in fl),
    }


class _Batch:
    """The columns of one scanned batch: the scan's arrays (cut to the batch length), or
    lists once a malformed frame's row has to be filled in by hand."""

    __slots__ = ("base", "datas", "tss", "lens", "linktype", "clean", "status", "opcode",
                 "destqp", "psn", "paylen", "l3k", "l3o", "ecn", "icrc", "key0", "key1", "key2",
                 "bth_off")
    _COLS = (("status", "status"), ("opcode", "opcode"), ("destqp", "destqp"), ("psn", "psn"),
             ("paylen", "payload_len"), ("l3k", "l3_kind"), ("l3o", "l3_off"), ("ecn", "ecn"),
             ("icrc", "icrc_ok"), ("key0", "key0"), ("key1", "key1"), ("key2", "key2"),
             ("bth_off", "bth_off"))
    _HOT = frozenset(("opcode", "destqp", "psn", "paylen"))

    def __init__(self, base: int, datas: list[bytes], tss: Sequence[int], lens: Sequence[int],
                 linktype: int, cols: dict[str, array], n: int) -> None:
        self.base, self.datas, self.tss, self.lens = base, datas, tss, lens
        self.linktype = linktype
        full = n == len(cols["status"])
        for attr, name in self._COLS:
            c = cols[name] if full else cols[name][:n]
            # Lists for the columns read per packet (a list hands out ints it already has),
            # arrays for those only searched or counted.
            setattr(self, attr, c.tolist() if attr in self._HOT else c)
        # No CE mark and no bad ICRC anywhere: the groups need not look for them.
        self.clean = 3 not in self.ecn and self.icrc.count(1) == n

    def to_lists(self) -> None:
        for attr, _ in self._COLS:
            c = getattr(self, attr)
            if not isinstance(c, list):
                setattr(self, attr, c.tolist())


def _pair(flows: list[Flow]) -> list[tuple[Flow, Flow]]:
    """Pair flows into connections (see the module docstring)."""
    for f in flows:
        f.peer = None
    by_addr: dict[tuple[int, bytes], list[Flow]] = {}
    for f in flows:
        by_addr.setdefault((f.l3, f.addr), []).append(f)

    def reverse(f: Flow) -> list[Flow]:
        h = len(f.addr) // 2
        return by_addr.get((f.l3, f.addr[h:] + f.addr[:h]), [])

    def answers(y: Flow, x: Flow) -> bool:
        """Do y's response PSNs fall in x's request PSN range?"""
        if y.rsp_first < 0 or x.req is None:
            return False
        lo, hi = x.req_first, x.req.next  # hi: a NAK may carry the next expected PSN
        return any(psn_diff(p, lo) >= 0 and psn_diff(hi, p) >= 0
                   for p in (y.rsp_first, y.rsp_last))

    pairs: list[tuple[Flow, Flow]] = []
    for y in flows:
        if y.peer is not None or y.rsp_first < 0:
            continue
        cands = [x for x in reverse(y) if x.peer is None and x is not y and answers(y, x)]
        if len(cands) == 1:
            x = cands[0]
            x.peer, y.peer = y, x
            pairs.append((x, y))
    # Unordered IP pair -> unpaired flows of each direction.
    left: dict[tuple[int, bytes], tuple[list[Flow], list[Flow]]] = {}
    for f in flows:
        if f.peer is None:
            h = len(f.addr) // 2
            rev = f.addr[h:] + f.addr[:h]
            sides = left.setdefault((f.l3, min(f.addr, rev)), ([], []))
            sides[f.addr > rev].append(f)
    for one, other in left.values():
        if len(one) == 1 and len(other) == 1:
            x, y = one[0], other[0]
            if x.req is None and y.req is not None or (
                    (x.req is None) == (y.req is None) and y.id < x.id):
                x, y = y, x
            x.peer, y.peer = y, x
            pairs.append((x, y))
    pairs.sort(key=lambda p: min(p[0].id, p[1].id))
    return pairs


def make_analyzer(udp_port: int = locate.ROCE_PORT, *, batch: int = BATCH,
                  max_events: int = MAX_EVENTS_PER_KIND, bulk: bool = True,
                  engine: str = "auto") -> Any:
    """An analyser: ``engine`` "compiled" (``cflows.CompiledAnalyzer``, the fast path),
    "reference" (:class:`Analyzer`, pure Python; ``bulk`` False takes every packet one by
    one) or "auto" (compiled when the extension is built)."""
    from . import cflows

    if engine not in ("auto", "compiled", "reference"):
        raise ValueError(f"unknown analysis engine {engine!r}")
    if engine == "compiled" or (engine == "auto" and cflows.AVAILABLE):
        return cflows.CompiledAnalyzer(udp_port, batch, max_events)
    return Analyzer(udp_port, batch, max_events, bulk)


def analyse(frames: Iterable[Any], udp_port: int = locate.ROCE_PORT, *, batch: int = BATCH,
            max_events: int = MAX_EVENTS_PER_KIND, bulk: bool = True,
            engine: str = "auto") -> Report:
    """Analyse a ``CaptureReader`` or an iterable of ``pcapio.Frame`` (or Ethernet frames as
    bytes); see :func:`make_analyzer` for ``engine``."""
    a = make_analyzer(udp_port, batch=batch, max_events=max_events, bulk=bulk, engine=engine)
    if hasattr(frames, "batches"):
        a.feed_capture(frames)
    else:
        a.feed(frames)
    return a.finish()
