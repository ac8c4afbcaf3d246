"""The tables of ``roce stats -T parquet -w DIR``: flows, expert events, congestion control,
PFC/PAUSE, CM connections and UET PDCs, one Parquet file each, from the report's JSON sections
(docs/columnar-schema.md).
"""

from __future__ import annotations

import os
from typing import Any

from roce import interrupts
from roce.analysis import uetflows
from roce.analysis.flowrules import COUNTERS
from roce.extras import need_pyarrow
from roce.outfile import Output, make_directory


def _psn_keys() -> list[str]:
    from roce import fast

    return [k for k in fast.PSNTracker(0).counts() if k != "next"]


# Every flow counter (flowrules.COUNTERS, by its JSON key), and the RNR NAKs' sum.
_FLOW_INTS = (*(c.key for c in COUNTERS), "rnr_naks")
# The latency summaries of a flow (JSON key: column prefix; flowrules, "completion times"),
# each min, p50, p99 and max as durations.
_LATENCIES = (("completion_ns", "completion"), ("ack_rtt_ns", "ack_rtt"))
_QUANTILES = ("min", "p50", "p99", "max")


def flow_schema() -> Any:
    pa = need_pyarrow()
    name = pa.dictionary(pa.int32(), pa.string())
    msg = pa.struct([(k, pa.uint64()) for k in ("count", "bytes", "min", "max")])
    fields = [("capture", name), ("id", pa.uint32()), ("l3", name), ("src", name),
              ("dst", name), ("qp", pa.uint32()), ("peer", pa.uint32()),
              ("first", pa.timestamp("ns", tz="UTC")), ("last", pa.timestamp("ns", tz="UTC")),
              ("duration", pa.duration("ns")), ("goodput_Bps", pa.float64()),
              ("mtu", pa.uint32())]
    fields += [(k, pa.uint64()) for k in _FLOW_INTS]
    fields += [(f"psn.{k}", pa.uint64()) for k in _psn_keys()]
    fields += [(f"response_psn.{k}", pa.uint64()) for k in _psn_keys()]
    fields += [(f"{col}.{q}", pa.duration("ns")) for _, col in _LATENCIES for q in _QUANTILES]
    fields += [("naks", pa.map_(pa.string(), pa.uint64())),
               ("rnr_timers_ms", pa.map_(pa.string(), pa.uint64())),
               ("messages", pa.map_(pa.string(), msg))]
    return pa.schema(fields)


def flow_rows(capture: str, flows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the flow table from ``Report.to_dict()["flows"]``."""
    rows = []
    for d in flows:
        row = {"capture": capture, "id": d["id"], "l3": d["l3"], "src": d["src"],
               "dst": d["dst"], "qp": d["qp"], "peer": d["peer"],
               "first": d["first_ns"] if d["packets"] else None,
               "last": d["last_ns"] if d["packets"] else None,
               "duration": d["last_ns"] - d["first_ns"] if d["packets"] else 0,
               "goodput_Bps": d["goodput_Bps"], "mtu": d["mtu"],
               "naks": list(d["naks"].items()), "rnr_timers_ms": list(d["rnr_timers_ms"].items()),
               "messages": list(d["messages"].items())}
        row.update({k: d[k] for k in _FLOW_INTS})
        for which in ("psn", "response_psn"):
            counts = d[which] or {}
            row.update({f"{which}.{k}": counts.get(k) for k in _psn_keys()})
        for key, col in _LATENCIES:
            summary = d[key] or {}
            row.update({f"{col}.{q}": summary.get(q) for q in _QUANTILES})
        rows.append(row)
    return rows


def event_schema() -> Any:
    pa = need_pyarrow()
    name = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([("capture", name), ("frame", pa.uint64()),
                      ("time", pa.timestamp("ns", tz="UTC")), ("severity", name),
                      ("kind", name), ("flow", pa.uint32()), ("qp", pa.uint32()),
                      ("text", pa.string())])


def event_rows(capture: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the expert table from ``Report.to_dict()["expert"]["events"]``."""
    return [{"capture": capture, "frame": e["frame"], "time": e["ts_ns"],
             "severity": e["severity"], "kind": e["kind"], "flow": e["flow"], "qp": e["qp"],
             "text": e["text"]} for e in events]


def rows_table(rows: list[dict[str, Any]], schema: Any) -> Any:
    pa = need_pyarrow()
    arrays = []
    for fld in schema:
        values = [r[fld.name] for r in rows]
        t = fld.type
        if pa.types.is_dictionary(t):
            arrays.append(pa.array(values, pa.string()).dictionary_encode())
        elif pa.types.is_timestamp(t) or pa.types.is_duration(t):
            arrays.append(pa.array(values, pa.int64()).cast(t))
        else:
            arrays.append(pa.array(values, t))
    return pa.Table.from_arrays(arrays, schema=schema)


def congestion_schema() -> Any:
    pa = need_pyarrow()
    name = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([("capture", name), ("flow", pa.uint32()), ("src", name), ("dst", name),
                      ("qp", pa.uint32()), ("cnps", pa.uint64()), ("becns", pa.uint64()),
                      ("cnp_rate_per_s", pa.float64()), ("cnp_min_gap", pa.duration("ns")),
                      ("ecn_ce", pa.uint64()), ("data_packets", pa.uint64()),
                      ("ce_fraction", pa.float64())])


def congestion_rows(capture: str, congestion: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the congestion table from ``CcReport.to_dict()`` (a row per flow with CNPs,
    BECNs or CE marks)."""
    return [{**r, "capture": capture, "cnp_min_gap": r["cnp_min_gap_ns"]}
            for r in congestion["flows"]]  # ``rows_table`` takes the schema's columns


def pfc_schema() -> Any:
    pa = need_pyarrow()
    name = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([("capture", name), ("from", name), ("priority", name),
                      ("pauses", pa.uint64()), ("xons", pa.uint64()),
                      ("paused", pa.duration("ns")), ("stretches", pa.uint64()),
                      ("longest", pa.duration("ns")), ("storms", pa.uint64())])


def pfc_rows(capture: str, pfc: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the PFC / PAUSE table from ``PauseReport.to_dict()``: one per sender and
    priority (``priority`` is the class number as text, or ``link`` for 802.3x PAUSE)."""
    return [{**r, "capture": capture, "priority": str(r["priority"]),
             "paused": round(r["paused_ns"]), "longest": round(r["longest_ns"])}
            for r in pfc["classes"]]


def cm_schema() -> Any:
    pa = need_pyarrow()
    name = pa.dictionary(pa.int32(), pa.string())
    return pa.schema([("capture", name), ("active_lid", pa.uint32()),
                      ("passive_lid", pa.uint32()), ("comm_id", pa.uint32()),
                      ("active_qpn", pa.uint32()), ("passive_qpn", pa.uint32()),
                      ("active_start_psn", pa.uint32()), ("passive_start_psn", pa.uint32()),
                      ("path_mtu", pa.uint32()), ("state", name),
                      ("cm_frames", pa.list_(pa.uint64())),
                      ("first_psn_to_passive", pa.uint32()),
                      ("first_psn_to_active", pa.uint32()), ("problems", pa.list_(pa.string()))])


def cm_rows(capture: str, connections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the CM table from the report's ``cm_connections`` (native InfiniBand)."""
    return [{"capture": capture, **c} for c in connections]


def latency_schema() -> Any:
    pa = need_pyarrow()
    fields: list[tuple[str, Any]] = [("capture", pa.dictionary(pa.int32(), pa.string()))]
    fields += [(f"{col}.{q}", pa.duration("ns")) for _, col in _LATENCIES for q in _QUANTILES]
    fields += [(k, pa.uint64()) for k in _LATENCY_COUNTS]
    return pa.schema(fields)


# The capture's counts of what was timed (the totals' keys; flowrules, "completion times").
_LATENCY_COUNTS = ("timed_messages", "unacknowledged_messages", "ack_rtt_samples")


def latency_rows(capture: str, d: dict[str, Any]) -> list[dict[str, Any]]:
    """The row of the latency table: the capture's completion and ACK round-trip times, every
    flow's together (``Report.to_dict()["latency"]``), and how many were timed."""
    row: dict[str, Any] = {"capture": capture}
    for key, col in _LATENCIES:
        summary = d["latency"][key] or {}
        row.update({f"{col}.{q}": summary.get(q) for q in _QUANTILES})
    row.update({k: d["totals"][k] for k in _LATENCY_COUNTS})
    return [row]


# ``roce stats -T parquet -w DIR``: DIR/<name>.parquet for each, from a report's sections
STATS_TABLES: dict[str, tuple[Any, Any]] = {
    "flows": (flow_schema, lambda cap, d: flow_rows(cap, d["flows"])),
    "expert": (event_schema, lambda cap, d: event_rows(cap, d["expert"]["events"])),
    "congestion": (congestion_schema, lambda cap, d: congestion_rows(cap, d["congestion"])),
    "pfc": (pfc_schema, lambda cap, d: pfc_rows(cap, d["pfc"])),
    "cm": (cm_schema, lambda cap, d: cm_rows(cap, d.get("cm_connections", []))),
    "latency": (latency_schema, latency_rows),
    "uet_pdcs": (uetflows.pdc_schema, lambda cap, d: uetflows.pdc_rows(cap, d.get("uet"))),
}


def stats_rows(reports: list[tuple[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Every stats table's rows from (capture name, JSON report) pairs."""
    return {name: [row for cap, d in reports for row in rows(cap, d)]
            for name, (_, rows) in STATS_TABLES.items()}


def write_stats(directory: str, tables: dict[str, list[dict[str, Any]]]) -> list[str]:
    """``DIR/<table>.parquet`` for each table of ``STATS_TABLES``; the paths written.  All
    of them or none: each is written under a temporary name (``roce.outfile``), and they
    are renamed together once every one is complete."""
    import pyarrow.parquet as pq

    make_directory(directory)
    outputs: list[Output] = []
    try:
        for name, (schema, _) in STATS_TABLES.items():
            out = Output(os.path.join(directory, f"{name}.parquet"), dash=False)
            outputs.append(out)
            pq.write_table(rows_table(tables[name], schema()), out.file, compression="snappy")
        with interrupts.held():  # the renames: a stop signal waits for the last one
            for out in outputs:
                out.commit()
    except BaseException as exc:
        for out in outputs:
            out.discard(exc)
        raise
    return [out.path for out in outputs]


__all__ = ["STATS_TABLES", "event_rows", "event_schema", "flow_rows", "flow_schema",
           "rows_table", "stats_rows", "write_stats"]
