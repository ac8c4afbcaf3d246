"""The text report of ``roce stats``: one table per connection (both directions side by side)
or lone flow, the capture totals, PFC and congestion tables, then the expert list.

It renders a :class:`~roce.analysis.flowmodel.Report` with its sections (PFC, congestion
control, CM connections), as text (``write_text``) or as the JSON document (``sections``),
and owns nothing else; the command (``roce.cli.stats``) and the many-capture driver
(``roce.cli._fleet``) both call it, so every report has the same sections.
Tables use rich when the output is a terminal and plain aligned text otherwise.  Every table
and heading fits ``WIDTH`` columns: tables of flows have a row per flow, and names too long for
a row or a column (IPv6 addresses, many flows) are given short keys (``F1``, ``A``) spelt out
above the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from roce.analysis import flowrules as rules
from roce.analysis import flows as fl
from roce.analysis import pauses
from roce.analysis.flowmodel import FRAME_PARTS

EXPERT_DEFAULT = 20  # expert lines shown without --expert
WIDTH = 100  # columns every table and heading fits in



def _si(n: float, unit: str) -> str:
    for prefix in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or prefix == "T":
            return f"{n:.0f} {unit}" if prefix == "" else f"{n:.2f} {prefix}{unit}"
        n /= 1000
    return f"{n} {unit}"  # pragma: no cover


def _rate(bps: float | None) -> str:
    if bps is None:
        return "-"
    return f"{_si(bps, 'B/s')} ({_si(bps * 8, 'bit/s')})"


def _psn_rows(key: str, label: str, dicts: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    ts = [d[key] for d in dicts]
    if all(t is None for t in ts):
        return []
    rows = []
    for field, name in (("in_order", "in order"), ("gaps", "gaps"), ("missing", "missing"),
                        ("still_missing", "never seen"), ("late", "out of order (late)"),
                        ("duplicates", "retransmitted"), ("wraps", "wraps")):
        vals = [t[field] if t else 0 for t in ts]
        if field == "in_order" or any(vals):
            rows.append((f"{label} {name}", [f"{v:,}" if t else "-" for v, t in zip(vals, ts)]))
    return rows


def flow_rows(dicts: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(label, one value per flow) rows for flows side by side; empty counters are left out."""
    rows: list[tuple[str, list[str]]] = []

    def add(label: str, vals: list[Any], always: bool = False,
            fmt: Callable[[Any], str] = lambda v: f"{v:,}") -> None:
        if always or any(vals):
            rows.append((label, [fmt(v) for v in vals]))

    add("packets", [d["packets"] for d in dicts], True)
    add("bytes", [d["bytes"] for d in dicts], True)
    add("payload bytes", [d["payload_bytes"] for d in dicts], True)
    add("start (s)", [d["start"] for d in dicts], True,
        lambda v: "-" if v is None else f"{v:.6f}")
    add("duration (s)", [d["duration"] for d in dicts], True, lambda v: f"{v:.6f}")
    add("goodput", [d["goodput_Bps"] for d in dicts], True, _rate)
    add("throughput", [d["throughput_Bps"] for d in dicts], True, _rate)
    add("MTU (inferred)", [d["mtu"] for d in dicts], False, lambda v: f"{v}" if v else "-")
    kinds = [k for k in rules.KIND_KEYS if any(k in d["messages"] for d in dicts)]
    for k in kinds:
        cells = []
        for d in dicts:
            m = d["messages"].get(k)
            cells.append(f"{m['count']:,} ({_si(m['bytes'], 'B')}, {m['min']:,}..{m['max']:,})"
                         if m else "0")
        rows.append((f"{rules.KIND_NAMES[rules.KIND_KEYS.index(k)]} msgs", cells))
    add("incomplete messages", [d["incomplete_messages"] for d in dicts])
    add("messages timed", [d["timed_messages"] for d in dicts])
    add("messages unacknowledged", [d["unacknowledged_messages"] for d in dicts])
    rows += latency_rows([d["completion_ns"] for d in dicts], [d["ack_rtt_ns"] for d in dicts])
    add("ACK RTT samples", [d["ack_rtt_samples"] for d in dicts])
    add("ACK RTTs not taken (resent)", [d["ack_rtt_excluded"] for d in dicts])
    rows += _psn_rows("psn", "PSN", dicts)
    rows += _psn_rows("response_psn", "resp PSN", dicts)
    for key, label in _RECOVERY:
        add(label, [d[key] for d in dicts])
    add("ACKs", [d["acks"] for d in dicts])
    add("atomic ACKs", [d["atomic_acks"] for d in dicts])
    for name in sorted({n for d in dicts for n in d["naks"]}):
        add(f"NAK {name}", [d["naks"].get(name, 0) for d in dicts], True)
    rnr = [d["rnr_naks"] for d in dicts]
    if any(rnr):
        rows.append(("RNR NAKs", [
            f"{n:,}" + (" (" + ", ".join(f"{t}ms x{c}" for t, c in d["rnr_timers_ms"].items())
                        + ")" if n else "") for n, d in zip(rnr, dicts)]))
    add("reserved AETH syndromes", [d["reserved_syndromes"] for d in dicts])
    add("CNPs", [d["cnps"] for d in dicts])
    add("ECN CE", [d["ecn_ce"] for d in dicts])
    add("bad ICRC", [d["bad_icrc"] for d in dicts])
    add("malformed", [d["malformed"] for d in dicts])
    add("truncated by capture", [d["truncated"] for d in dicts])
    return rows


def latency_rows(completion: list[dict[str, int] | None], rtt: list[dict[str, int] | None],
                 ) -> list[tuple[str, list[str]]]:
    """Message completion times and ACK round-trip times (flowrules, "completion times"),
    one value per flow (or one for the capture); rows only for what was timed."""
    def pair(summaries: list[dict[str, int] | None], a: str, b: str) -> list[str]:
        return [f"{pauses.duration(s[a])} / {pauses.duration(s[b])}" if s else "-"
                for s in summaries]

    rows = []
    if any(completion):
        rows.append(("completion min / max", pair(completion, "min", "max")))
        rows.append(("completion p50 / p99", pair(completion, "p50", "p99")))
    if any(rtt):
        rows.append(("ACK RTT min / max", pair(rtt, "min", "max")))
        rows.append(("ACK RTT p50 / p99", pair(rtt, "p50", "p99")))
    return rows


# The frames and their parts (flowmodel.FRAME_PARTS: each frame in one), indented under them.
_FRAME_LINES = (("roce_packets", "RoCE packets"), ("ib_packets", "InfiniBand packets"),
                ("malformed", "malformed"), ("truncated", "truncated by capture"),
                ("not_roce", "not RoCE"))
assert tuple(k for k, _ in _FRAME_LINES) == FRAME_PARTS
_TOTALS = (("flows", "flows"), ("connections", "connections"), ("bytes", "bytes"),
           ("payload_bytes", "payload bytes"), ("unique_payload_bytes", "unique payload bytes"),
           ("duration", "duration (s)"), ("goodput_Bps", "goodput"),
           ("throughput_Bps", "throughput"), ("messages", "messages"),
           ("incomplete_messages", "incomplete messages"), ("timed_messages", "messages timed"),
           ("unacknowledged_messages", "messages unacknowledged"), ("gaps", "PSN gaps"),
           ("missing", "PSNs missing"), ("retransmissions", "retransmitted PSNs"),
           ("out_of_order", "out of order (late)"), ("wraps", "PSN wraps"), ("acks", "ACKs"),
           ("ack_rtt_samples", "ACK RTT samples"),
           ("naks", "NAKs"), ("rnr_naks", "RNR NAKs"), ("cnps", "CNPs"), ("ecn_ce", "ECN CE"),
           ("bad_icrc", "bad ICRC"))


# Loss-recovery counters (flowrules, "retransmission bursts", "spurious retransmissions",
# "selective NAK"): shown when not zero.
_RECOVERY = (("selective_retransmissions", "retransmitted alone (selective)"),
             ("go_back_retransmissions", "retransmitted in runs (go-back)"),
             ("spurious_retransmissions", "retransmitted spuriously (acked)"),
             ("selective_naks", "selective NAKs"))


def total_rows(t: dict[str, Any]) -> list[tuple[str, list[str]]]:
    def cell(key: str) -> str:
        if key == "duration":
            return f"{t[key]:.6f}"
        if key.endswith("_Bps"):
            return _rate(t[key])
        return f"{t[key]:,}"

    ib = bool(t.get("ib_packets"))
    rows = [("frames", [cell("frames")])]
    for key, label in _FRAME_LINES:
        # the packets of the links the capture holds: RoCE's line unless it holds native
        # InfiniBand alone; what is neither is "not RoCE or InfiniBand" where both are known
        if key == "roce_packets" and ib and not t[key]:
            continue
        if key == "ib_packets" and not ib:
            continue
        if key == "not_roce" and ib:
            label = "not RoCE or InfiniBand"
        rows.append((f"  {label}", [cell(key)]))
    rows += [(label, [cell(key)]) for key, label in _TOTALS]
    at = next(i for i, (label, _) in enumerate(rows) if label == "retransmitted PSNs") + 1
    rows[at:at] = [(label, [cell(key)]) for key, label in _RECOVERY if t.get(key)]
    return rows


def table_width(header: list[str], rows: list[tuple[str, list[str]]]) -> int:
    """The columns a table takes as ``_Plain`` lays it out (rich's is no wider)."""
    ncol = 1 + max([len(v) for _, v in rows] + [len(header) - 1])
    cells = [header + [""] * (ncol - len(header))] if header else []
    cells += [[label, *vals] for label, vals in rows]
    return 2 + sum(max(len(r[c]) for r in cells) for c in range(ncol)) + 2 * (ncol - 1)


def keyed_labels(header: list[str], rows: list[tuple[str, list[str]]], key: str,
                 ) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """A table of one row per flow (or direction and priority) that fits ``WIDTH`` as it is
    comes back as it is with no legend; a wider one has its row labels replaced by ``key``
    and a number (``F1``), and the legend (``F1 = 10.0.0.1 -> ...``) says which is which."""
    if table_width(header, rows) <= WIDTH:
        return [], rows
    return ([f"{key}{i} = {label}" for i, (label, _) in enumerate(rows, 1)],
            [(f"{key}{i}", vals) for i, (_, vals) in enumerate(rows, 1)])


class _Plain:
    """Aligned plain-text tables (stdout is not a terminal)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def heading(self, text: str) -> None:
        self.out.write(f"\n{text}\n{'=' * len(text)}\n")

    def table(self, header: list[str], rows: list[tuple[str, list[str]]]) -> None:
        ncol = 1 + max([len(v) for _, v in rows] + [len(header) - 1])
        cells = [header + [""] * (ncol - len(header))] if header else []
        cells += [[label, *vals] for label, vals in rows]
        widths = [max(len(r[c]) for r in cells) for c in range(ncol)]
        for r in cells:
            line = "  " + r[0].ljust(widths[0])
            line += "".join("  " + v.rjust(w) for v, w in zip(r[1:], widths[1:]))
            self.out.write(line.rstrip() + "\n")

    def lines(self, items: list[tuple[str, str]]) -> None:
        for sev, text in items:
            self.out.write(f"  {sev:<7}  {text}\n")

    def text(self, text: str) -> None:
        self.out.write(f"  {text}\n")

    def blank(self) -> None:
        self.out.write("\n")


class _Rich:
    """The same tables drawn by rich (stdout is a terminal)."""

    STYLES = {"error": "bold red", "warning": "yellow", "note": "cyan"}

    def __init__(self, out: IO[str]) -> None:
        from rich.console import Console

        self.console = Console(file=out, highlight=False)

    def heading(self, text: str) -> None:
        self.console.print()
        self.console.rule(f"[bold]{text}", align="left")

    def table(self, header: list[str], rows: list[tuple[str, list[str]]]) -> None:
        from rich.table import Table

        t = Table(show_header=bool(header), box=None, pad_edge=False)
        ncol = 1 + max([len(v) for _, v in rows] + [len(header) - 1])
        names = header + [""] * (ncol - len(header)) if header else [""] * ncol
        t.add_column(names[0], style="bold")
        for name in names[1:]:
            t.add_column(name, justify="right")
        for label, vals in rows:
            t.add_row(label, *vals)
        self.console.print(t)

    def lines(self, items: list[tuple[str, str]]) -> None:
        for sev, text in items:
            self.console.print(f"  [{self.STYLES.get(sev, '')}]{sev:<7}[/]  {text}",
                               markup=True, soft_wrap=True)

    def text(self, text: str) -> None:
        self.console.print(f"  {text}", markup=False)

    def blank(self) -> None:
        self.console.print()


def render(report: fl.Report, name: str, out: IO[str], expert_all: bool = False,
           rich: bool | None = None, pfc: pauses.PauseReport | None = None,
           cc: Any = None, cm: Any = None) -> None:
    """Write the text report; rich tables when ``out`` is a terminal (or ``rich=True``);
    ``pfc`` adds the PFC / PAUSE table when the capture had such frames, ``cm`` the CM
    connections of native InfiniBand (their problems are expert warnings)."""
    if rich is None:
        rich = out.isatty()
    r: Any = _Rich(out) if rich else _Plain(out)
    t = report.totals
    t0 = t.get("first_ns") or 0
    dicts = {f.id: f.to_dict(t0) for f in report.flows}

    for n, (a, b) in enumerate(report.connections, 1):
        ends = [f"{a.src} QP 0x{b.qp:06x}", f"{a.dst} QP 0x{a.qp:06x}"]
        rows = [("", [f"to QP 0x{a.qp:06x}", f"to QP 0x{b.qp:06x}"]),
                *flow_rows([dicts[a.id], dicts[b.id]])]
        header = ["", f"{a.src} -> {a.dst}", f"{b.src} -> {b.dst}"]
        heading = f"Connection {n}: {ends[0]} <-> {ends[1]}"
        if len(heading) > WIDTH or table_width(header, rows) > WIDTH:  # long addresses
            heading, header = f"Connection {n}: A <-> B", ["", "A -> B", "B -> A"]
            r.heading(heading)
            r.text(f"A = {ends[0]}")
            r.text(f"B = {ends[1]}")
        else:
            r.heading(heading)
        r.table(header, rows)
    for f in report.lone:
        heading = f"Flow {f.src} -> {f.dst} QP 0x{f.qp:06x}"
        if len(heading) > WIDTH:
            r.heading(f"Flow to QP 0x{f.qp:06x}")
            r.text(f"from {f.src}")
            r.text(f"to {f.dst}")
        else:
            r.heading(heading)
        r.table([], flow_rows([dicts[f.id]]))
    r.heading(f"Totals: {name}")
    lat = report.latency
    r.table([], total_rows(t) + latency_rows([lat["completion_ns"]], [lat["ack_rtt_ns"]]))
    if pfc is not None and pfc.frames:
        r.heading(f"PFC / PAUSE: {pfc.frames:,} frames, link rate "
                  f"{pfc.link_rate_bps / 1e9:g} Gb/s")
        _keyed_table(r, *pfc.table(), "P")
    if cc is not None and cc.rows:
        r.heading("Congestion control: CNPs and ECN CE per QP")
        _keyed_table(r, *cc.table(), "F")
    if cc is not None and cc.timeline is not None:
        r.heading(f"Timeline: {cc.timeline['interval_ns'] / 1e3:g} us intervals "
                  "(per QP: Gb/s, CNPs, retransmissions; PAUSE/PFC frames)")
        for i, label in enumerate(cc.timeline["qps"], 1):
            r.text(f"QP{i} = {label}")
        r.table(*cc.timeline_table())
    cm_warnings: list[str] = []
    if cm is not None and cm.connections:
        r.heading(f"CM connections: {len(cm.connections):,}")
        for line in cm.report_lines(warnings=False):
            r.text(line)
        cm_warnings = cm.warnings()

    counts = report.event_counts
    total = sum(counts.values()) + len(cm_warnings)
    by_sev = {s: sum(v for k, v in counts.items() if rules.SEVERITIES[rules.EVENT_KINDS[k]] == s)
              for s in rules.SEVERITIES}
    by_sev["warning"] += len(cm_warnings)
    r.heading("Expert info: " + ", ".join(f"{n:,} {s}{'s' * (n != 1)}"
                                          for s, n in by_sev.items()))
    if not total:
        r.text("no findings")
        return
    rows = [(k.replace("_", " "), [f"{v:,}", rules.SEVERITIES[rules.EVENT_KINDS[k]]])
            for k, v in sorted(counts.items(), key=lambda kv: (rules.EVENT_KINDS[kv[0]], kv[0]))]
    if cm_warnings:
        rows.append(("CM connection", [f"{len(cm_warnings):,}", "warning"]))
    r.table([], rows)
    shown = report.expert(None if expert_all else EXPERT_DEFAULT)
    r.blank()
    r.lines([(rules.SEVERITIES[e.severity], e.line()) for e in shown]
            + [("warning", w) for w in cm_warnings])
    # Consecutive retransmissions fold into one line: count lines here, events above.
    made = sum(report.lines().values())
    stored = len(report.events)
    kept = f"at most {rules.MAX_EVENTS_PER_KIND:,} lines of each kind are kept"
    if len(shown) < stored:
        r.text(f"... {len(shown)} of {made:,} shown; --expert lists "
               + ("all" if stored == made else f"{stored:,} ({kept})"))
    elif stored < made:
        r.text(f"... {made - stored:,} more not listed ({kept})")


def _keyed_table(r: Any, header: list[str], rows: list[tuple[str, list[str]]],
                 key: str) -> None:
    legend, rows = keyed_labels(header, rows, key)
    for line in legend:
        r.text(line)
    r.table(header, rows)


def sections(report: fl.Report, pfc: pauses.PauseReport, cc: Any, cm: Any) -> dict[str, Any]:
    """The JSON report of one capture (or of a merged session) bar its ``capture`` key: the
    flow report, PFC, congestion control, and the CM connections of native InfiniBand."""
    doc = {**report.to_dict(), "pfc": pfc.to_dict(), "congestion": cc.to_dict()}
    if cm is not None:
        doc["cm_connections"] = [c.to_dict() for c in cm.connections]
    return doc


def write_text(report: fl.Report, name: str, out: IO[str], expert_all: bool,
               pfc: pauses.PauseReport, cc: Any, cm: Any, rich: bool | None = None) -> None:
    """The text report (``render``), the CM connections of native InfiniBand included."""
    render(report, name, out, expert_all=expert_all, rich=rich, pfc=pfc, cc=cc, cm=cm)
