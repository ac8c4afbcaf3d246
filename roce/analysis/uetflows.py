"""``roce stats`` on Ultra Ethernet Transport: the report of each PDC (packet delivery context)
of a capture, from the PDC engine.

The engine is ``roce.analysis.uetref``, written once (``uetrules`` its rules): interpreted it
is the reference, compiled by the build it is ``roce.analysis._uetengine``, the one ``roce
stats`` runs (``make_engine``; an edit since the build leaves the compiled form aside, with a
warning, as ``cflows`` does for RoCE's flow engine).  This module chooses the engine and
makes its report: the text section (``UetAnalysis.lines``), JSON (``to_dict``) and the
Parquet table (``pdc_schema``, ``pdc_rows``).

``Tap`` puts the analysis beside the RoCE flow engine: it stands in for the capture reader
and looks again only at the records in which the engine found frames that are not RoCE; the
PDC engine walks them (the fast path's C), reads the UET packets among them where the
family's layouts put their fields, and leaves to the family's dissector only what its byte
reader does not take (encrypted, cut short, tunnelled), so a plain RoCE capture pays one
comparison per block.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from roce import _compiled
from roce.analysis.uetrules import COUNTER_KEYS, TEXT_PSNS
from roce.errors import UsageError
from roce.pcapio import Batch

MODULE = "roce.analysis._uetengine"
ENGINES = ("auto", "compiled", "reference")
_BUILT = _compiled.built_twin(MODULE)
# The sources edited since the build (all of them when there was none): then the compiled
# form stands aside.
STALE = _compiled.stale_twin(MODULE)
if STALE and _BUILT:
    warnings.warn(f"roce: {', '.join(STALE)} edited after the build; the UET analysis runs "
                  "its .py form (slower). Rebuild with: pip install -e .", RuntimeWarning,
                  stacklevel=2)
# Either form is imported when the first engine is made (``make_engine``): both bring the UET
# family's layouts, which a capture without UET never needs (``roce stats`` on RoCE starts
# without them).
AVAILABLE = _BUILT and not STALE
_ext: list[Any] = []  # the compiled module once imported (None: it would not import)


def _compiled_form() -> Any:
    if not _ext:
        try:
            from roce.analysis import _uetengine
        except ImportError:  # the fast path it cimports is not built
            _ext.append(None)
        else:
            _ext.append(_uetengine)
    return _ext[0]


def __getattr__(name: str) -> Any:
    if name in ("Holes", "Pdc"):  # the interpreted form's, imported when asked for
        from roce.analysis import uetref

        return getattr(uetref, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_engine(udp_port: int, *, engine: str = "auto", fast: bool = True,
                interval_ns: int = 0) -> Any:
    """A PDC engine: ``engine`` "compiled" (the build's form of ``uetref``), "reference"
    (``uetref.Engine`` interpreted) or "auto" (compiled when it is built from the source now
    there); ``fast`` False reads every packet through the family's dissector; ``interval_ns``
    keeps a timeline of that interval (``Engine.timeline``)."""
    if engine not in ENGINES:
        raise UsageError(f"unknown UET analysis engine {engine!r}: use one of {ENGINES}")
    ext = _compiled_form() if AVAILABLE and engine != "reference" else None
    if engine == "compiled" and ext is None:
        why = "edited after the build" if STALE and _BUILT else "not built"
        raise UsageError(f"the compiled UET engine is not available ({why}): use the "
                         "reference engine")
    if ext is not None:
        return ext.Engine(udp_port, fast, interval_ns)
    from roce.analysis import uetref

    return uetref.Engine(udp_port, fast, interval_ns)


class UetAnalysis:
    """The UET packets of a capture, frame by frame (``frame``, or the ``tap.Side`` calls
    ``scan_records`` and ``scan_batch``), then ``to_dict``/``lines``."""

    def __init__(self, udp_port: int, *, engine: str = "auto", fast: bool = True) -> None:
        self.udp_port = udp_port
        self.kind, self.fast = engine, fast
        if engine not in ENGINES:
            make_engine(udp_port, engine=engine)  # refused now, not at the first frame
        self._engine: Any = None  # made when the first frame that is not RoCE comes
        self.timeline: dict[str, Any] | None = None  # add_timeline's

    @property
    def engine(self) -> Any:
        if self._engine is None:
            self._engine = make_engine(self.udp_port, engine=self.kind, fast=self.fast)
        return self._engine

    def add_timeline(self, frames: Iterable[Any], interval_ns: int) -> None:
        """``roce stats --timeline``: the capture's frames (``pcapio.Frame``) again, binned by
        ``interval_ns`` from the first (``uetref.Engine.timeline``)."""
        e = make_engine(self.udp_port, engine=self.kind, interval_ns=interval_ns)
        for i, f in enumerate(frames):
            e.frame(i + 1, f.ts_ns, f.data, f.linktype, f.origlen)
        self.timeline = e.timeline()

    @property
    def pdcs(self) -> dict[tuple[str, str, int], Any]:
        """The PDCs so far (``uetref.Pdc``), by (initiator, target, initiator's PDC ID)."""
        return self.engine.pdcs  # type: ignore[no-any-return]

    @property
    def packets(self) -> int:
        return 0 if self._engine is None else self._engine.packets  # type: ignore[no-any-return]

    def frame(self, number: int, ts: int, data: bytes, linktype: int,
              origlen: int | None = None) -> bool:
        """One frame the RoCE walk did not take: analysed if UET claims it; whether it did."""
        return bool(self.engine.frame(number, ts, data, linktype, origlen))

    def packet(self, number: int, ts: int, src: str, dst: str, f: dict[str, Any]) -> None:
        """One decoded UET packet from ``src`` to ``dst`` (its ``uet.*`` fields)."""
        self.engine.packet(number, ts, src, dst, f)

    def scan_batch(self, batch: Batch, base: int) -> None:
        self.engine.scan_batch(batch, base)

    def scan_records(self, buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                     linktype: int | None, base: int, count: int) -> None:
        self.engine.scan_records(buf, pos, end, big_endian, frac_mul, linktype, base, count)

    # -- output ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = self.engine.to_dict()
        if self.timeline is not None:
            d["timeline"] = self.timeline
        return d

    def lines(self) -> list[str]:
        """The text report's UET section (nothing when the capture has no UET)."""
        d = self.to_dict()
        if not d["packets"]:
            return []
        n = len(d["pdcs"])
        out = [f"Ultra Ethernet Transport: {d['packets']:,} packets, {n} PDC{'s' * (n != 1)}"
               f" ({d['encrypted']} encrypted, {d['malformed']} malformed, "
               f"{d['unreliable']} RUDI/UUD)"]
        for p in d["pdcs"]:
            dp = "?" if p["dpdcid"] is None else f"0x{p['dpdcid']:04x}"
            out.append(f"  PDC {p['initiator']} 0x{p['spdcid']:04x} -> {p['target']} {dp}")
            start = "-" if p["start_psn"] is None else str(p["start_psn"])
            out.append(f"    requests {p['requests']} ({p['request_bytes']:,} B), SYN "
                       f"{p['syn']}, start PSN {start}, highest PSN {p['highest_psn']}")
            out.append(f"    retransmissions {p['retransmissions']} (spurious "
                       f"{p['spurious_retransmissions']}); missing {p['missing']} (PSNs "
                       f"{_ranges(p['missing_psns'])}); recovered "
                       f"{_psns(p['recovered_psns'])}; reordered {_psns(p['reordered_psns'])}")
            out.append(f"    ACKs {p['acks']}, cumulative ACK PSN {p['first_cack_psn']} -> "
                       f"{p['cack_psn']} (moved by {p['cack_advances']}), ECN-marked "
                       f"{p['ecn_marked_acks']}, probes {p['probe_acks']}")
            out.append(f"    SACK holes {p['sack_holes']} (PSNs "
                       f"{_psns(p['sack_missing_psns'])}); PSNs SACKed past the cumulative "
                       f"ACK {p['sack_covered']}")
            c = p["nscc"]
            if c["acks"]:
                out.append(f"    NSCC: {c['acks']} ACKs, service time max "
                           f"{c['service_time_max']}, received bytes {c['rcvd_bytes_last']}, "
                           f"out-of-order count max {c['ooo_count_max']}")
            out.append(f"    trims {_counts(p['trims'])}; NACKs {_counts(p['nacks'])}; control "
                       f"{_counts(p['controls'])}; close {p['close_requests']}, clear "
                       f"{p['clear_requests']}")
            out.append(f"    handshakes: close {p['close_handshakes']} (unanswered "
                       f"{p['close_unanswered']}), clear {p['clear_handshakes']} (unanswered "
                       f"{p['clear_unanswered']})")
            m = p["messages"]
            out.append(f"    messages {m['completed']} ({m['bytes']:,} B, {m['min']:,}-"
                       f"{m['max']:,} B), open {m['open']}")
            out.append(f"    goodput {_rate(p['goodput_bps'])}, throughput "
                       f"{_rate(p['throughput_bps'])}")
        if self.timeline is not None:
            out += _timeline_lines(self.timeline)
        return out


def _timeline_lines(tl: dict[str, Any]) -> list[str]:
    """One line per interval and PDC that had packets in it (``PDC1`` .. as ``tl["pdcs"]``
    lists them): Gb/s of request payload, retransmissions, ECN-marked ACKs, trims, NACKs."""
    names = {label: f"PDC{i}" for i, label in enumerate(tl["pdcs"], 1)}
    out = [f"  Timeline: {tl['interval_ns'] / 1e3:g} us intervals"]
    out += [f"    {n} = {label}" for label, n in names.items()]
    out.append(f"    {'start (us)':>12} {'PDC':>6} {'Gb/s':>9} {'retx':>6} {'ECN':>6} "
               f"{'trims':>6} {'NACKs':>6}")
    for r in tl["rows"]:
        for label, c in r["pdcs"].items():
            out.append(f"    {r['start_ns'] / 1e3:>12.1f} {names[label]:>6} {c['gbps']:>9.2f} "
                       f"{c['retransmissions']:>6} {c['ecn_marked_acks']:>6} {c['trims']:>6} "
                       f"{c['nacks']:>6}")
    return out


def _psns(psns: list[Any]) -> str:
    if not psns:
        return "none"
    more = len(psns) - TEXT_PSNS
    return ",".join(map(str, psns[:TEXT_PSNS])) + (f" and {more} more" if more > 0 else "")


def _ranges(ranges: list[list[int]]) -> str:
    return _psns([f"{a}" if a == b else f"{a}-{b}" for a, b in ranges])


def _counts(c: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(c.items())) or "none"


def _rate(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e9:.3f} Gb/s"


# -- the Parquet table (``roce stats -T parquet``: DIR/uet_pdcs.parquet) ---------------------

_COUNTS = COUNTER_KEYS
_PSNS = ("start_psn", "highest_psn", "first_cack_psn", "cack_psn")
_MAPS = ("trims", "nacks", "controls")


def pdc_schema() -> Any:
    """One row per PDC, the JSON report's ``uet.pdcs`` (docs/columnar-schema.md)."""
    from roce.extras import need_pyarrow

    pa = need_pyarrow()
    name = pa.dictionary(pa.int32(), pa.string())
    psns = pa.list_(pa.uint32())
    fields = [("capture", name), ("initiator", name), ("target", name),
              ("spdcid", pa.uint16()), ("dpdcid", pa.uint16()), ("first_frame", pa.uint64()),
              ("duration", pa.duration("ns")), ("pdc_mode", pa.uint8())]
    fields += [(k, pa.uint64()) for k in _COUNTS]
    fields += [(k, pa.uint32()) for k in _PSNS]
    fields += [("missing_psns", pa.list_(psns)), ("recovered_psns", psns),
               ("reordered_psns", psns), ("sack_missing_psns", psns),
               ("nscc", pa.struct([("acks", pa.uint64()), ("service_time_max", pa.uint16()),
                                   ("rcvd_bytes_last", pa.uint32()),
                                   ("ooo_count_max", pa.uint16())])),
               ("messages", pa.struct([(k, pa.uint64()) for k in
                                       ("completed", "bytes", "min", "max", "open")])),
               ("goodput_bps", pa.float64()), ("throughput_bps", pa.float64())]
    fields += [(k, pa.map_(pa.string(), pa.uint64())) for k in _MAPS]
    return pa.schema(fields)


def pdc_rows(capture: str, uet: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Rows of the PDC table from a report's ``uet`` section (None: no UET in it)."""
    rows = []
    for d in (uet or {}).get("pdcs", ()):
        row = {"capture": capture, **{k: v for k, v in d.items() if k != "duration_ns"},
               "duration": d["duration_ns"]}
        row.update({k: list(d[k].items()) for k in _MAPS})
        rows.append(row)
    return rows


__all__ = ["AVAILABLE", "ENGINES", "UetAnalysis", "make_engine", "pdc_rows", "pdc_schema"]
