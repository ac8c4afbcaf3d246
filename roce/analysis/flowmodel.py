"""What a flow analysis produces: events, the event store, flows, the report and its totals.

The flow engine (``flowref``, in either form) fills these; the rules that decide what goes in
them are in ``flowrules``.  Counters, their JSON keys and totals come from ``flowrules.COUNTERS``,
event severities and kinds from ``flowrules.EVENTS``.
"""

from __future__ import annotations

import heapq
import socket
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from roce import locate
from roce.analysis.flowrules import (
    ADDR_PIECES,
    COUNTERS,
    EVENT_BY_NAME,
    EVENT_KINDS,
    IB_KINDS,
    KIND_KEYS,
    L3_NAMES,
    SEVERITIES,
    rnr_ms,
)
from roce.headers import NAK_CODES

__all__ = ["FRAME_PARTS", "Event", "EventStore", "Flow", "Path", "Report", "totals"]


class Event(NamedTuple):
    """One expert-info item: one event, or a folded run of ``count`` events of one flow
    (frames ``frame`` .. ``last``)."""

    frame: int  # 1-based frame number in the capture
    severity: int  # flowrules.SEV_*
    kind: str  # flowrules.EVENTS name
    flow: int  # Flow.id, or -1 when the frame belongs to no flow
    qp: int  # the flow's destination QP, -1 when none
    text: str
    ts_ns: int
    count: int = 1  # events folded into this line
    last: int = 0  # frame of the last folded event (0: only ``frame``)

    def line(self) -> str:
        """``#1532 QP 0x000011 PSN gap: expected 0x0003e8, got 0x0003ea (2 missing)``;
        a folded run reads ``#260-#291 QP 0x000011 retransmission of ...``."""
        where = f"#{self.frame}-#{self.last}" if self.last > self.frame else f"#{self.frame}"
        if self.qp >= 0:
            return f"{where} QP 0x{self.qp:06x} {self.text}"
        return f"{where} {self.text}"

    def to_dict(self) -> dict[str, Any]:
        d = {"frame": self.frame, "severity": SEVERITIES[self.severity], "kind": self.kind,
             "flow": self.flow if self.flow >= 0 else None,
             "qp": self.qp if self.qp >= 0 else None, "text": self.text,
             "line": self.line(), "ts_ns": self.ts_ns}
        if EVENT_BY_NAME[self.kind].burst is not None:  # kinds that fold say how much
            d["count"] = self.count
            d["last_frame"] = self.last or self.frame
        return d


class EventStore:
    """Counts events per kind and keeps, per kind, the ``cap`` first expert lines: earliest
    frame first, then the order they were made in (events of one frame all come from its
    flow).  An event may be made after later frames were seen (a READ is sequenced when the
    next request comes, a message is sized at its Last, a retransmission burst ends), so
    "first" is not simply "first made"; a max-heap per kind holds the kept ones once the cap
    is reached.  ``counts`` adds up folded events one by one, ``lines`` the lines made."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.counts: dict[str, int] = {}
        self.lines: dict[str, int] = {}
        self._kept: dict[str, list[tuple[int, int, Event]]] = {}
        self._seq = 0

    def wants(self, kind: str, frame: int) -> bool:
        """Would an event of this kind and frame, made now, be kept?"""
        heap = self._kept.get(kind)
        return heap is None or len(heap) < self.cap or (self.cap > 0 and frame < -heap[0][0])

    def add(self, e: Event) -> None:
        kind = e.kind
        self.counts[kind] = self.counts.get(kind, 0) + e.count
        n = self.lines[kind] = self.lines.get(kind, 0) + 1
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

    def skip(self, kind: str, count: int = 1) -> None:
        """Count an event (a line of ``count`` folded ones) that ``wants`` said would not be
        kept."""
        self.counts[kind] = self.counts.get(kind, 0) + count
        self.lines[kind] = self.lines.get(kind, 0) + 1
        self._seq += 1

    def kept(self) -> list[Event]:
        """The kept events in frame order (made order within a frame)."""
        items = [item for heap in self._kept.values() for item in heap]
        items.sort(key=_earliest)
        return [e for _, _, e in items]


def _earliest(item: tuple[int, int, Event]) -> tuple[int, int]:
    return -item[0], -item[1]


class Path:
    """What the two directions between two addresses share: the MTU seen so far."""

    __slots__ = ("mtu",)

    def __init__(self) -> None:
        self.mtu = 0  # largest First/Middle payload; 0 = none seen yet


def lid_text(lid: int) -> str:
    """A native InfiniBand LID as flows and the CM pairing show it: ``LID 0x0001``, in hex
    as Wireshark shows ``infiniband.lrh.slid`` / ``dlid``."""
    return f"LID 0x{lid:04x}"


def addr_text(kind: int, raw: bytes) -> str:
    """One end of a flow: an IP address or GID; native InfiniBand ``LID 0x0001`` (and the
    GID when there is a GRH: ``LID 0x0001 GID fe80::1``), the LID as Wireshark's
    ``infiniband.lrh.slid`` / ``dlid``."""
    if kind in IB_KINDS:
        n = ADDR_PIECES[kind][0][1]  # the SLID's bytes
        lid, gid = raw[:n], raw[n:]
        text = lid_text(int.from_bytes(lid, "big"))
        return f"{text} GID {socket.inet_ntop(socket.AF_INET6, gid)}" if gid else text
    return socket.inet_ntop(socket.AF_INET if kind == locate.L3_IPV4 else socket.AF_INET6, raw)


class Flow:
    """Counters of one flow (src, dst, destination QP).  Times are integer nanoseconds."""

    __slots__ = ("id", "l3", "addr", "qp", "src", "dst", "path", "first_ts", "last_ts", "req",
                 "rsp", "req_first", "rsp_first", "rsp_last", "stats", "naks", "rnr", "peer",
                 "completion", "ack_rtt", *(c.name for c in COUNTERS))

    def __init__(self, fid: int, l3: int, addr: bytes, qp: int, path: Path) -> None:
        half = len(addr) // 2
        self.id, self.l3, self.addr, self.qp, self.path = fid, l3, addr, qp, path
        self.src, self.dst = addr_text(l3, addr[:half]), addr_text(l3, addr[half:])
        for c in COUNTERS:
            setattr(self, c.name, 0)
        self.first_ts = self.last_ts = -1
        self.req: Any = None  # PSNTracker of the requests this flow carries
        self.rsp: Any = None  # PSNTracker of its READ responses / atomic ACKs
        self.req_first = self.rsp_first = self.rsp_last = -1  # PSNs, for pairing
        self.stats: dict[int, list[int]] = {}  # kind -> [count, bytes, min size, max size]
        self.naks: dict[int, int] = {}  # NAK code -> count
        self.rnr: dict[int, int] = {}  # RNR timer code -> count
        self.peer: Flow | None = None
        # flowrules, "completion times", "ACK round-trip times": min, p50, p99, max in ns of
        # its requests (None: none timed)
        self.completion: dict[str, int] | None = None
        self.ack_rtt: dict[str, int] | None = None

    def __repr__(self) -> str:
        return f"<Flow {self.id} {self.src} -> {self.dst} QP 0x{self.qp:06x} {self.packets} pkts>"

    @property
    def duration_ns(self) -> int:
        return max(self.last_ts - self.first_ts, 0) if self.packets else 0

    def _rate(self, nbytes: int) -> float | None:
        d = self.duration_ns
        return nbytes * 1e9 / d if d and nbytes else None

    @property
    def goodput(self) -> float | None:
        """Unique payload bytes (each PSN's once) per second; None when the flow lasted no
        time or carried no payload."""
        return self._rate(self.unique_payload)

    @property
    def throughput(self) -> float | None:
        """All payload bytes (retransmissions included) per second."""
        return self._rate(self.payload)

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
            **{c.key: getattr(self, c.name) for c in COUNTERS},
            "first_ns": self.first_ts, "last_ns": self.last_ts,
            "start": (self.first_ts - t0) / 1e9 if self.packets else None,
            "duration": self.duration_ns / 1e9, "goodput_Bps": self.goodput,
            "throughput_Bps": self.throughput,
            "mtu": self.path.mtu or None,
            "messages": self.messages,
            "psn": psn(self.req), "response_psn": psn(self.rsp),
            "naks": {NAK_CODES.get(c, f"code {c}"): n for c, n in sorted(self.naks.items())},
            "rnr_naks": sum(self.rnr.values()),
            "rnr_timers_ms": {rnr_ms(c): n for c, n in sorted(self.rnr.items())},
            "completion_ns": self.completion, "ack_rtt_ns": self.ack_rtt,
        }


# A report's ``latency`` when nothing was timed.
LATENCY_NONE: dict[str, Any] = {"completion_ns": None, "ack_rtt_ns": None}


@dataclass
class Report:
    """What an analysis returns."""

    flows: list[Flow]
    connections: list[tuple[Flow, Flow]]  # (flow carrying requests first, its reverse)
    lone: list[Flow]  # flows without a pair
    totals: dict[str, Any]
    events: list[Event]  # kept expert lines in frame order (the first MAX_EVENTS_PER_KIND)
    event_counts: dict[str, int]  # all events per kind, stored or not, folded ones one by one
    event_lines: dict[str, int] = field(default_factory=dict)  # expert lines made per kind
    problems: list[str] = field(default_factory=list)  # reader problems, set by the caller
    # the capture's completion and ACK round-trip times, every flow's together:
    # {"completion_ns": {min, p50, p99, max} or None, "ack_rtt_ns": ...}
    latency: dict[str, Any] = field(default_factory=lambda: dict(LATENCY_NONE))
    # the same as histograms in plain data (flowref ``_Hist.state``), for the totals of
    # several captures (``flows.merged_latency``); not part of the JSON report
    latency_hists: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> dict[str, int]:
        """Expert lines made per kind (a kind that does not fold: one line per event)."""
        return {k: self.event_lines.get(k, n) for k, n in sorted(self.event_counts.items())}

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
            "latency": self.latency,
            "expert": {
                "counts": dict(sorted(self.event_counts.items())),
                "by_severity": {s: sum(n for k, n in self.event_counts.items()
                                       if SEVERITIES[EVENT_KINDS[k]] == s) for s in SEVERITIES},
                "lines": self.lines(),
                "stored": len(self.events),
                "events": [e.to_dict() for e in self.events],
            },
            "problems": self.problems,
        }


# The parts of ``frames`` in the totals: every frame is counted in exactly one of them.
FRAME_PARTS = ("roce_packets", "ib_packets", "malformed", "truncated", "not_roce")


def totals(src: Any, fl: list[Flow], nconn: int) -> dict[str, Any]:
    """The capture's totals: ``src`` has the frame counters (``frames``, ``not_roce``,
    ``malformed_unattributed``, ``truncated_unattributed``, ``first_ts``, ``last_ts``).

    Each frame is counted once, by what it was (``FRAME_PARTS`` add up to ``frames``): a
    whole packet of a RoCE flow (``roce_packets``) or of a native InfiniBand one
    (``ib_packets``), malformed, cut short by the capture's snap length (both whether or not
    a flow could take them), or not RoCE at all (``not_roce``: PFC, ARP, an LRH without the
    IBA transport ...).  A flow's ``packets`` count its malformed and cut ones too."""

    def tsum(attr: str) -> int:
        return sum(getattr(t, attr) for f in fl for t in (f.req, f.rsp) if t is not None)

    dur = max(src.last_ts - src.first_ts, 0) if src.frames else 0
    sums = {c.total: sum(getattr(f, c.name) for f in fl) for c in COUNTERS if c.total}
    sums["malformed"] += src.malformed_unattributed
    sums["truncated"] += src.truncated_unattributed
    whole = [0, 0]  # RoCE, native InfiniBand
    for f in fl:
        whole[f.l3 in IB_KINDS] += f.packets - f.malformed - f.truncated

    def rate(nbytes: int) -> float | None:
        return nbytes * 1e9 / dur if dur else None

    return {
        "frames": src.frames,
        "roce_packets": whole[0],
        "ib_packets": whole[1],
        "malformed": sums.pop("malformed"),
        "truncated": sums.pop("truncated"),
        "not_roce": src.not_roce,
        **sums,
        "flows": len(fl), "connections": nconn,
        "first_ns": src.first_ts if src.frames else None,
        "last_ns": src.last_ts if src.frames else None,
        "duration": dur / 1e9,
        "goodput_Bps": rate(sums["unique_payload_bytes"]),
        "throughput_Bps": rate(sums["payload_bytes"]),
        "messages": sum(s[0] for f in fl for s in f.stats.values()),
        "gaps": tsum("gaps"),
        "missing": tsum("missing"),
        "retransmissions": tsum("duplicates"),
        "out_of_order": tsum("late"),
        "wraps": tsum("wraps"),
        "naks": sum(sum(f.naks.values()) for f in fl),
        "rnr_naks": sum(sum(f.rnr.values()) for f in fl),
    }
