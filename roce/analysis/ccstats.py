"""Congestion-control figures for ``roce stats``, worked out beside the flow engines from what
they report (docs/congestion-control.md):

- per flow that received CNPs or BECNs or carried CE marks: its CNPs, its BECNs (native
  InfiniBand returns congestion on any packet of the QP, an ACK most often, instead of a CNP),
  the rate of both over the flow's duration, the smallest gap between two of them, and the
  fraction of its data packets marked CE (CE-marked packets over the flow's packets that are
  not ACKs or CNPs; on native InfiniBand the mark is the BTH FECN: flowrules "congestion
  marks");
- an expert warning (``cnp_interval``, a ``flowrules`` row raised here) for each flow whose
  smallest CNP gap is below ``--cnp-interval``: a notification point sending faster than the
  spacing the user configured (``np_min_time_between_cnps``);
- with ``--timeline INTERVAL``: per interval, each QP's throughput, CNPs and retransmissions,
  and the PAUSE/PFC frames (``roce.analysis.timeline``, a second pass over the capture).

The gaps come from the engines' stored ``cnp`` and ``becn`` events (each notification is one,
with its time).  The engines keep the first ``MAX_EVENTS_PER_KIND`` of a kind: past that many
in a capture the smallest gap is the smallest among the stored ones, and the report says so
(``gap_exact``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from roce.analysis import flowrules as rules
from roce.analysis.flowmodel import Event

KIND = "cnp_interval"  # the expert event kind (flowrules.EVENTS)
NOTIFICATIONS = ("cnp", "becn")  # the event kinds that tell a sender to slow down


def _us(ns: float) -> str:
    return f"{ns / 1e3:.3f} us"


class CcReport:
    """The per-flow rows, the expert events, the optional timeline, and the JSON form."""

    def __init__(self, report: Any, cnp_interval_ns: int | None = None) -> None:
        self.cnp_interval_ns = cnp_interval_ns
        t0 = report.totals.get("first_ns") or 0
        stored = [e for e in report.events if e.kind in NOTIFICATIONS]
        self.gap_exact = len(stored) == sum(report.event_counts.get(k, 0)
                                            for k in NOTIFICATIONS)
        times: dict[int, list[tuple[int, int]]] = {}
        for e in stored:
            times.setdefault(e.flow, []).append((e.ts_ns, e.frame))
        self.rows: list[dict[str, Any]] = []
        self.events: list[Any] = []
        for f in report.flows:
            d = f.to_dict(t0)
            if not d["cnps"] and not d["becns"] and not d["ecn_ce"]:
                continue
            told = d["cnps"] + d["becns"]
            data = d["packets"] - d["acks"] - d["atomic_acks"] - d["cnps"]
            seen = sorted(times.get(f.id, []))
            gap, at = None, None
            for (t1, _), (t2, frame) in zip(seen, seen[1:]):
                if gap is None or t2 - t1 < gap:
                    gap, at = t2 - t1, (t2, frame)
            dur = d["duration"]
            self.rows.append({
                "flow": f.id, "src": f.src, "dst": f.dst, "qp": f.qp, "cnps": d["cnps"],
                "becns": d["becns"], "cnp_rate_per_s": told / dur if dur > 0 else None,
                "cnp_min_gap_ns": gap, "ecn_ce": d["ecn_ce"], "data_packets": data,
                "ce_fraction": d["ecn_ce"] / data if data > 0 else None})
            if cnp_interval_ns is not None and gap is not None and gap < cnp_interval_ns:
                text = rules.TEXTS[KIND] % (_us(gap), _us(cnp_interval_ns))
                self.events.append(Event(at[1], rules.EVENT_KINDS[KIND], KIND, f.id, f.qp,
                                         text, at[0]))
        self.timeline: dict[str, Any] | None = None

    def merge_into(self, report: Any) -> None:
        """Add the ``cnp_interval`` warnings to a flow report's expert list (frame order)."""
        if not self.events:
            return
        report.event_counts[KIND] = report.event_counts.get(KIND, 0) + len(self.events)
        report.events = sorted([*report.events, *self.events], key=lambda e: e.frame)

    def add_timeline(self, frames: Iterable[Any], interval_ns: int, udp_port: int) -> None:
        from roce.analysis.timeline import binned, collect

        tl = collect(frames, udp_port)
        self.timeline = {"interval_ns": interval_ns,
                         "qps": [q.label for q in tl.series()],
                         "rows": binned(tl, interval_ns)}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cnp_interval_ns": self.cnp_interval_ns,
                               "gap_exact": self.gap_exact, "flows": self.rows}
        if self.timeline is not None:
            out["timeline"] = self.timeline
        return out

    def table(self) -> tuple[list[str], list[tuple[str, list[str]]]]:
        """(header, rows) for the text report: one row per flow (its name the row's label),
        so the table is as wide for 64 QPs as for one."""
        becns = any(r["becns"] for r in self.rows)  # native InfiniBand
        header = ["flow", "CNPs", *(["BECNs"] if becns else []), "CNPs/s", "smallest gap",
                  "data marked CE"]
        rows = []
        for r in self.rows:
            rate = r["cnp_rate_per_s"]
            cells = [f"{r['cnps']:,}", *([f"{r['becns']:,}"] if becns else []),
                     "-" if rate is None else f"{rate:,.0f}",
                     "-" if r["cnp_min_gap_ns"] is None else _us(r["cnp_min_gap_ns"]),
                     "-" if r["ce_fraction"] is None else
                     f"{r['ce_fraction']:.2%} ({r['ecn_ce']:,}/{r['data_packets']:,})"]
            rows.append((f"{r['src']} -> {r['dst']} QP 0x{r['qp']:06x}", cells))
        return header, rows

    def timeline_table(self) -> tuple[list[str], list[tuple[str, list[str]]]]:
        """One line per interval and QP that sent in it (``QP1`` .. as ``timeline["qps"]``
        lists them): Gb/s, CNPs (with BECNs, ``cnp+becn``, when native InfiniBand returned
        BECNs: both tell the sender to slow down), retransmissions; the interval's PAUSE
        frames on its first line.  As wide for 64 QPs as for one."""
        assert self.timeline is not None
        qps = self.timeline["qps"]
        becns = any(s["becns"] for r in self.timeline["rows"] for s in r["qps"].values())
        header = ["start (us)", "QP", "Gb/s", "cnp+becn" if becns else "cnp", "retx",
                  "pauses"]
        rows = []
        for r in self.timeline["rows"]:
            start, pauses = f"{r['start_ns'] / 1e3:.1f}", str(r["pauses"])
            sent = [(i, r["qps"][label]) for i, label in enumerate(qps, 1)
                    if label in r["qps"]]
            if not sent:
                rows.append((start, ["-", "-", "-", "-", pauses]))
            for j, (i, s) in enumerate(sent):
                rows.append((start, [f"QP{i}", f"{s['gbps']:.2f}",
                                     str(s["cnps"] + s["becns"]), str(s["retransmissions"]),
                                     pauses if j == 0 else ""]))
        return header, rows
