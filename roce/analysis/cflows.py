"""The compiled flow engine (``_fastpath.FlowEngine``, ``roce/analysis/_flowengine.pxi``)
configured, fed and read out.

``engine_config()`` hands the engine every table it runs on, derived from ``flowrules`` (the
one definition of the rules), the opcode table and the header layouts; the engine holds no
rule table of its own.  :class:`CompiledAnalyzer` turns its state into the same
``flowmodel.Report`` the pure-Python reference (``flowref``) gives.  The engine walks every
frame, checks its ICRC and accounts it in C, in capture order, and reads classic pcap files
in place, record by record, without a Python object per frame.

    from roce.analysis.cflows import CompiledAnalyzer
    a = CompiledAnalyzer()
    a.feed_capture(open_capture("f.pcap"))
    report = a.finish()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from roce import fast, locate
from roce.analysis import flowrules as R
from roce.analysis.flowinput import frame_columns
from roce.analysis.flowmodel import Event, EventStore, Flow, Path, Report, totals
from roce.analysis.flowpair import pair
from roce.errors import UsageError
from roce.headers import LAYOUTS, NAK_PSN_SEQUENCE_ERROR, SIZE_OF
from roce.opcodes import OPCODES
from roce.pcapio import MAX_RECORD, Batch, CaptureReader
from roce.psn import EV_DUPLICATE, EV_FIRST, EV_GAP, EV_IN_ORDER, EV_LATE

__all__ = ["AVAILABLE", "CompiledAnalyzer", "engine_config"]

_ext = fast._ext
AVAILABLE = _ext is not None


def _field_spec(op: int, header: str, name: str) -> tuple[int, int, int, int, int]:
    """(byte offset from the BTH start, byte count, shift, mask, bytes from the BTH start that
    hold the whole header) of one field of an extended header of ``op``."""
    start = SIZE_OF["bth"]
    for h in OPCODES[op].headers:
        if h == header:
            break
        start += SIZE_OF[h]
    f = LAYOUTS[header].field(name)
    bit = start * 8 + f.bit_offset
    first, last = bit // 8, (bit + f.bits - 1) // 8
    n = last - first + 1
    assert n <= 8, (header, name)
    return first, n, n * 8 - bit % 8 - f.bits, f.mask, start + SIZE_OF[header]


def engine_config() -> dict[str, Any]:
    """Every table the compiled engine runs on, from flowrules, the opcode table and the
    header layouts."""
    specs = fast._KEY_SPECS
    for code, names in fast.KEY_FIELDS.items():
        # The engine reads the key fields with the scan's tables, the reference decodes them
        # by name: they must be the same fields.
        assert len(names) == len(specs[code]), (code, names)
    fields = list(locate.FAST_FIELDS)
    counters = [c.name for c in R.COUNTERS]
    return {
        "classes": (R.C_DATA, R.C_READ, R.C_ATOMIC, R.C_ONLYREQ, R.C_READ_RESP, R.C_ACK,
                    R.C_ATOMIC_ACK, R.C_CNP),
        "positions": (R.P_FIRST, R.P_MIDDLE, R.P_LAST, R.P_ONLY),
        "psn_events": (EV_FIRST, EV_IN_ORDER, EV_GAP, EV_LATE, EV_DUPLICATE),
        "syndrome_rules": (R.SYN_ACK, R.SYN_RNR, R.SYN_NAK, R.SYN_RESERVED),
        "opinfo": {c: (i.cls, i.pos, i.kind, i.seq) for c, i in enumerate(R.OPINFO) if i},
        "key_need": {c: SIZE_OF["bth"] + SIZE_OF[OPCODES[c].headers[0]]
                     for c, names in fast.KEY_FIELDS.items() if names},
        "dmalen_later": {c: _field_spec(c, "reth", "dmalen") for c in R.RETH_LATER},
        "aeth_later": {c: (_field_spec(c, "aeth", "syndrome"), _field_spec(c, "aeth", "msn"))
                       for c in R.AETH_LATER},
        "syndromes": R.SYNDROMES,
        "pieces": R.ADDR_PIECES,
        # (field index, bytes left out, unit, an LRH field: locate.LRH_FIELDS index)
        "l3_len": {k: (locate.LRH_FIELDS.index(hf[1]) if hf[0] == "lrh" else fields.index(hf),
                       extra, unit, hf[0] == "lrh")
                   for k, (hf, extra, unit) in R.L3_LEN_FIELDS.items()},
        "ce_marks": {k: (fields.index(m.field), m.at_bth, m.mask, m.value)
                     for k, m in R.CE_MARKS.items()},
        "becn_fields": {k: (fields.index(m.field), m.at_bth, m.mask, m.value)
                        for k, m in R.BECN_FIELDS.items()},
        "first_bad_status": locate.FIRST_BAD_STATUS,
        "atomic_bytes": R.ATOMIC_BYTES,
        "psn_mask": R.PSN_MASK,
        "default_mtu": R.DEFAULT_MTU,
        "ib_mtus": R.IB_MTUS,
        "max_open": R.MAX_OPEN_MESSAGES,
        "reorder_hold": R.REORDER_HOLD,
        "read_response_kind": R.K_READ_RESP,
        "max_read_psns": R.MAX_READ_PSNS,
        "write_kinds": R.WRITE_KINDS,
        "read_kind": R.K_READ,
        "events": [(e.name, e.severity, e.text, e.burst,
                    counters.index(e.counter) if e.counter else -1) for e in R.EVENTS],
        "side_words": R.SIDE_WORDS,
        "counters": counters,
        "kind_names": R.KIND_NAMES,
        "nak_events": [R.nak_event(c) for c in range(R.SYNDROME_VALUES)],
        "nak_texts": R.NAK_TEXTS,
        "sack": (NAK_PSN_SEQUENCE_ERROR, R.SACK_AHEAD),
        "rnr_texts": R.RNR_TEXTS,
        "event": Event,
    }


def _explain(frame: bytes, linktype: int, udp_port: int) -> str:
    return R.malformed_text(fast.walk(frame, linktype, udp_port))


if _ext is not None:
    _ext.configure_flows(engine_config())


def _link(linktype: int) -> int:
    """The walk code for ``linktype`` (``locate.flow_linktype``), once the engine can read
    it: native InfiniBand's VCRC table is handed over by ``roce.families.ib.crc`` on import
    (a plain RoCE run never imports it)."""
    if linktype == locate.LINKTYPE_INFINIBAND:
        from roce.families.ib import crc as ibcrc  # noqa: F401
    return locate.flow_linktype(linktype)


class CompiledAnalyzer:
    """Streaming analyser with the interface of ``flowref.Analyzer`` (``feed``,
    ``feed_batch``, ``finish``) plus :meth:`feed_capture` for a whole capture."""

    def __init__(self, udp_port: int = locate.ROCE_PORT, batch: int = R.BATCH,
                 max_events: int = R.MAX_EVENTS_PER_KIND) -> None:
        if _ext is None:
            raise UsageError("the compiled fast path is not available (the extension is "
                             "not built): use the reference engine")
        self.udp_port = udp_port
        self.batch = max(1, batch)
        self._e = _ext.FlowEngine(udp_port, EventStore(max_events), _explain)
        self._report: Report | None = None

    @property
    def frames(self) -> int:
        return self._e.frames

    @property
    def not_roce(self) -> int:
        return self._e.not_roce

    def feed(self, frames: Iterable[Any]) -> None:
        """Analyse frames: ``pcapio.Frame`` objects or bytes (Ethernet, timestamp 0)."""
        for datas, tss, caps, lens, linktype in frame_columns(frames, self.batch):
            self._e.feed_frames(datas, tss, caps, lens, _link(linktype))

    def feed_batch(self, batch: Batch) -> None:
        """Analyse one ``pcapio.Batch``."""
        self._e.feed_frames(batch.datas, batch.ts_ns, batch.caplen, batch.origlen,
                            _link(batch.linktype))

    def feed_capture(self, reader: CaptureReader,
                     progress: Callable[[int, int | None], None] | None = None) -> None:
        """Analyse what is left of a capture; ``progress(frames so far, stream offset or
        None)`` is called now and then.  A classic pcap is analysed in place, anything else
        batch by batch."""
        if reader.can_scan_records():
            for offset in reader.scan_records(self._consume):
                if progress is not None:
                    progress(self._e.frames, offset)
            return
        for batch in reader.batches(self.batch):
            self.feed_batch(batch)
            if progress is not None:
                progress(self._e.frames, None)

    def _consume(self, buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                 linktype: int) -> tuple[int, int]:
        return self._e.feed_pcap(buf, pos, end, big_endian, frac_mul, _link(linktype),
                                 MAX_RECORD)

    def finish(self) -> Report:
        """Close open state, pair flows, total up (as ``flowref.Analyzer.finish``)."""
        if self._report is not None:
            return self._report
        e = self._e
        e.finish()
        paths: dict[int, Path] = {}
        flows = []
        for s in e.flows:
            path = paths.get(s.path)
            if path is None:
                path = paths[s.path] = Path()
                path.mtu = e.path_mtu(s.path)
            f = Flow(s.id, s.l3, s.addr, s.qp, path)
            for c, value in zip(R.COUNTERS, s.counters()):
                setattr(f, c.name, value)
            for name in _MARKS:
                setattr(f, name, getattr(s, name))
            f.stats = s.message_stats()
            f.naks = s.nak_counts()
            f.rnr = s.rnr_counts()
            flows.append(f)
        connections, lone = pair(flows)
        self._report = Report(flows, connections, lone, totals(e, flows, len(connections)),
                              e.events, e.event_counts(), e.event_lines())
        return self._report


# What a flow carries besides its counters: times, trackers and PSNs for pairing.
_MARKS = ("first_ts", "last_ts", "req", "rsp", "req_first", "rsp_first", "rsp_last")
