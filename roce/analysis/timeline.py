"""Per-QP time series from a capture: what ``roce plot`` draws and ``roce stats`` reports
about congestion control (CNPs, CE marks, the per-interval timeline).

One pass over the frames, no I/O of its own.  A *QP* here is a data flow: (L3 source, L3
destination, BTH destination QP) of packets that carry requests (or READ responses).  For each
it keeps every data packet (time, PSN, bytes, retransmission?, CE?), the ACKs, the CNPs and
the BECNs that answer it, and the capture's PFC/PAUSE frames.  Memory grows with the capture: a plot
draws every packet.

Rules:

- retransmission: a data packet whose PSN is not after the highest PSN its flow has sent
  (tcptrace's rule for TCP sequence numbers; roce.psn's 24-bit serial arithmetic);
- ACKs and CNPs travel B->A to QP a, the data A->B to QP b: a (B, A, a) flow is attached to
  the A->B data flow whose PSN range holds its first ACK's PSN, or else to the only A->B data
  flow (the pairing roce/analysis/flows.py documents); CNPs use the attachment of their key,
  else the only A->B data flow, else stay unattached (``cnp_only``); a BECN (native
  InfiniBand's notification on a packet other than a CNP) is attached as a CNP is, and the
  packet counts as what it is too;
- CE and BECN: the marks ``roce stats`` counts, by the same tables (flowrules "congestion
  marks", ``CE_SPECS`` / ``BECN_SPECS``): IP ECN CE on RoCEv2, the BTH FECN / BECN on native
  InfiniBand.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from roce import fast, locate, macc
from roce.analysis.flowmodel import addr_text
from roce.analysis.flowrules import ADDR_PIECES, BECN_SPECS, CE_SPECS, IB_KINDS, addr_key, marked
from roce.errors import DecodeError
from roce.headers import LAYOUTS
from roce.opcodes import OPCODES, Operation, Transport
from roce.psn import psn_diff

_DESTQP = locate.SPECS[("bth", "destqp")]
_PSN = locate.SPECS[("bth", "psn")]
_ADDR = {k: (LAYOUTS[h].field(s), LAYOUTS[h].field(d)) for k, h, s, d in (
    (locate.L3_IPV4, "ip", "src", "dst"), (locate.L3_IPV6, "ipv6", "src", "dst"),
    (locate.L3_GRH, "grh", "sgid", "dgid"))}
_ACKS = (Operation.ACK, Operation.ATOMIC_ACK)


def _rd(buf: bytes, base: int, spec: tuple[int, int, int, int]) -> int:
    off, n, shift, mask = spec
    return (int.from_bytes(buf[base + off:base + off + n], "big") >> shift) & mask


def _addr(raw: bytes) -> str:
    a = ipaddress.ip_address(raw)
    return str(a.ipv4_mapped or a) if a.version == 6 else str(a)


@dataclass
class QpSeries:
    """One data flow and what answers it."""

    src: str
    dst: str
    qpn: int
    data: list[tuple[int, int, int, bool, bool]] = field(default_factory=list)
    # (ts, psn, bytes on the wire, retransmission, CE)
    acks: list[tuple[int, int]] = field(default_factory=list)  # (ts, psn)
    cnps: list[int] = field(default_factory=list)  # ts
    becns: list[int] = field(default_factory=list)  # ts: BECNs on packets other than CNPs
    max_psn: int | None = None
    min_psn: int | None = None

    @property
    def label(self) -> str:
        return f"{self.src} -> {self.dst} QP 0x{self.qpn:06x}"

    def holds(self, psn: int) -> bool:
        return (self.min_psn is not None and psn_diff(psn, self.min_psn) >= 0
                and psn_diff(self.max_psn, psn) >= 0)

    # -- summaries ------------------------------------------------------------------------

    @property
    def retransmissions(self) -> int:
        return sum(1 for d in self.data if d[3])

    @property
    def ce_fraction(self) -> float:
        return sum(1 for d in self.data if d[4]) / len(self.data) if self.data else 0.0

    def cnp_min_gap(self) -> int | None:
        gaps = [b - a for a, b in zip(self.cnps, self.cnps[1:])]
        return min(gaps) if gaps else None


@dataclass
class Timeline:
    """What a capture's timeline holds: each QP's series, the pauses and the CNPs."""

    qps: dict[tuple[str, str, int], QpSeries] = field(default_factory=dict)
    pauses: list[tuple[int, str, int, bool]] = field(default_factory=list)
    # (ts, source MAC, class-enable vector (0xFF for 802.3x PAUSE), XON?)
    cnp_only: list[tuple[int, str, str, int]] = field(default_factory=list)
    first_ts: int | None = None
    last_ts: int | None = None

    @property
    def duration_ns(self) -> int:
        return (self.last_ts - self.first_ts) if self.first_ts is not None else 0

    def series(self) -> list[QpSeries]:
        return [q for q in self.qps.values() if q.data]


class Collector:
    """Feed frames (``roce.pcapio.Frame`` or ``(bytes, ts_ns)``), then ``finish()``."""

    def __init__(self, udp_port: int = locate.ROCE_PORT) -> None:
        self.udp_port = udp_port
        self.tl = Timeline()
        self._answers: dict[tuple[str, str, int], list[tuple[str, int, Any]]] = {}

    def feed(self, data: bytes, ts: int, linktype: int = locate.LINKTYPE_ETHERNET) -> None:
        tl = self.tl
        if tl.first_ts is None:
            tl.first_ts = ts
        tl.last_ts = ts
        w = fast.walk(data, locate.flow_linktype(linktype), self.udp_port)
        if w.status != locate.OK:
            if linktype == locate.LINKTYPE_ETHERNET:
                self._macc(data, ts)
            return
        spans = _ADDR.get(w.l3_kind)
        if w.l3_kind in IB_KINDS:  # native InfiniBand: LIDs (and GIDs), as roce stats names
            raw = addr_key(data, w.l3_off, ADDR_PIECES[w.l3_kind])
            half = len(raw) // 2
            src, dst = addr_text(w.l3_kind, raw[:half]), addr_text(w.l3_kind, raw[half:])
        elif spans is None:
            return
        else:
            s, d = spans
            src = _addr(data[w.l3_off + s.byte_offset:w.l3_off + s.byte_offset + s.bits // 8])
            dst = _addr(data[w.l3_off + d.byte_offset:w.l3_off + d.byte_offset + d.bits // 8])
        op = OPCODES.get(w.opcode)
        if op is None:
            return
        qpn = _rd(data, w.bth_off, _DESTQP)
        psn = _rd(data, w.bth_off, _PSN)
        key = (src, dst, qpn)
        if op.transport is Transport.CNP:
            self._answers.setdefault(key, []).append(("cnp", ts, None))
            return
        if marked(data, BECN_SPECS, w.l3_kind, w.l3_off, w.bth_off):
            self._answers.setdefault(key, []).append(("becn", ts, None))
        if op.operation in _ACKS:
            self._answers.setdefault(key, []).append(("ack", ts, psn))
            return
        ce = marked(data, CE_SPECS, w.l3_kind, w.l3_off, w.bth_off)
        q = tl.qps.get(key)
        if q is None:
            q = tl.qps[key] = QpSeries(src, dst, qpn)
        retx = q.max_psn is not None and psn_diff(psn, q.max_psn) <= 0
        if not retx:
            q.max_psn = psn
        if q.min_psn is None or psn_diff(psn, q.min_psn) < 0:
            q.min_psn = psn
        q.data.append((ts, psn, len(data), retx, ce))

    def _macc(self, data: bytes, ts: int) -> None:
        try:
            m = macc.parse_macc(data)
        except DecodeError:  # a cut-short MAC Control frame: nothing to plot
            return
        if m is None:
            return
        times = m.class_times()
        if not times:
            return
        vector = sum(1 << p for p in times)
        self.tl.pauses.append((ts, m.src.hex(":"), vector, not any(times.values())))

    def finish(self) -> Timeline:
        """Attach ACKs and CNPs to their data flows (module docstring)."""
        tl = self.tl
        for (src, dst, qpn), items in self._answers.items():
            target = None
            back = [q for q in tl.qps.values() if q.src == dst and q.dst == src and q.data]
            first_ack = next((p for kind, _, p in items if kind == "ack"), None)
            if first_ack is not None:
                holding = [q for q in back if q.holds(first_ack)]
                if len(holding) == 1:
                    target = holding[0]
            if target is None and len(back) == 1:
                target = back[0]
            for kind, ts, p in items:
                if target is None:
                    if kind == "cnp":
                        tl.cnp_only.append((ts, src, dst, qpn))
                elif kind == "cnp":
                    target.cnps.append(ts)
                elif kind == "becn":
                    target.becns.append(ts)
                else:
                    target.acks.append((ts, p))
        self._answers = {}
        return tl


def collect(frames: Iterable[Any], udp_port: int = locate.ROCE_PORT) -> Timeline:
    """A ``Timeline`` of frames: ``roce.pcapio.Frame`` objects or ``(bytes, ts_ns)`` pairs."""
    c = Collector(udp_port)
    for f in frames:
        if isinstance(f, tuple) and len(f) == 2:
            c.feed(f[0], f[1])
        else:
            c.feed(f.data, f.ts_ns, f.linktype)
    return c.finish()


def binned(tl: Timeline, interval_ns: int) -> list[dict[str, Any]]:
    """Per interval (from the first frame): per-QP bytes, Gb/s, CNPs, BECNs, retransmissions,
    and PAUSE/PFC frames (XOFF) on the link.  Only intervals that saw something are listed."""
    if interval_ns <= 0:
        raise ValueError("interval must be positive")
    t0 = tl.first_ts or 0
    rows: dict[int, dict[str, Any]] = {}

    def row(ts: int) -> dict[str, Any]:
        k = (ts - t0) // interval_ns
        r = rows.get(k)
        if r is None:
            r = rows[k] = {"start_ns": k * interval_ns, "qps": {}, "pauses": 0}
        return r

    def slot(ts: int, q: QpSeries) -> dict[str, Any]:
        return row(ts)["qps"].setdefault(q.label, {"bytes": 0, "gbps": 0.0, "cnps": 0,
                                                  "becns": 0, "retransmissions": 0})

    for q in tl.series():
        for ts, _, n, retx, _ in q.data:
            s = slot(ts, q)
            s["bytes"] += n
            s["retransmissions"] += retx
        for ts in q.cnps:
            slot(ts, q)["cnps"] += 1
        for ts in q.becns:
            slot(ts, q)["becns"] += 1
    for ts, _, _, xon in tl.pauses:
        if not xon:
            row(ts)["pauses"] += 1
    for r in rows.values():
        for s in r["qps"].values():
            s["gbps"] = round(s["bytes"] * 8 / interval_ns, 6)  # bits per ns = Gb/s
    return [rows[k] for k in sorted(rows)]
