"""The compiled per-flow analysis: ``_fastpath.FlowEngine`` fed and read out.

``roce.dissect.flows`` is the specification and the pure-Python twin; this module hands the
engine its tables (derived from the opcode table, the header layouts and ``flows``' own
constants and texts) and turns the engine's state into the same :class:`~flows.Report`.
The engine walks every frame, checks its ICRC and accounts it in C, in capture order - the
order in which the reference handles a batch of one frame - and reads classic pcap files
in place, record by record, without a Python object per frame.

    from roce.dissect.cflows import CompiledAnalyzer
    a = CompiledAnalyzer()
    a.feed_capture(open_capture("f.pcap"))
    report = a.finish()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import fast, locate
from ..headers import LAYOUTS, SIZE_OF
from ..opcodes import OPCODES
from ..pcapio import MAX_RECORD, Batch, CaptureReader
from ..psn import EV_DUPLICATE, EV_FIRST, EV_GAP, EV_IN_ORDER, EV_LATE
from . import flows as fl

__all__ = ["AVAILABLE", "CompiledAnalyzer"]

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


def _config() -> dict[str, Any]:
    specs = fast._KEY_SPECS
    for code, names in fast.KEY_FIELDS.items():
        # The engine reads the key fields with the scan's tables, the reference decodes them
        # by name: they must be the same fields.
        assert len(names) == len(specs[code]), (code, names)
    fields = list(locate.FAST_FIELDS)
    l3_len = {k: (fields.index(hf), extra) for k, (hf, extra) in fl.L3_LEN_FIELDS.items()}
    return {
        "classes": (fl.C_DATA, fl.C_READ, fl.C_ATOMIC, fl.C_ONLYREQ, fl.C_READ_RESP, fl.C_ACK,
                    fl.C_ATOMIC_ACK, fl.C_CNP),
        "positions": (fl.P_FIRST, fl.P_MIDDLE, fl.P_LAST, fl.P_ONLY),
        "psn_events": (EV_FIRST, EV_IN_ORDER, EV_GAP, EV_LATE, EV_DUPLICATE),
        "opinfo": {c: (i.cls, i.pos, i.kind, i.seq) for c, i in enumerate(fl.OPINFO) if i},
        "key_need": {c: SIZE_OF["bth"] + SIZE_OF[OPCODES[c].headers[0]]
                     for c, names in fast.KEY_FIELDS.items() if names},
        "dmalen_later": {c: _field_spec(c, "reth", "dmalen") for c in fl._RETH_LATER},
        "aeth_later": {c: (_field_spec(c, "aeth", "syndrome"), _field_spec(c, "aeth", "msn"))
                       for c in fl._AETH_LATER},
        "spans": {k: (a, b) for k, (a, b, _) in fl.ADDR_SPANS.items()},
        "l3_len": l3_len,
        "default_mtu": fl.DEFAULT_MTU,
        "ib_mtus": fl.IB_MTUS,
        "max_open": fl.MAX_OPEN_MESSAGES,
        "max_read_psns": fl.MAX_READ_PSNS,
        "write_kinds": (fl.K_WRITE, fl.K_WRITE_IMM),
        "read_kind": fl.K_READ,
        "event_kinds": list(fl.EVENT_KINDS.items()),
        "texts": fl.TEXTS,
        "kind_names": fl.KIND_NAMES,
        "nak_names": [fl.nak_name(c) for c in range(32)],
        "rnr_ms": [fl.rnr_ms(c) for c in range(32)],
        "event": fl.Event,
    }


def _explain(frame: bytes, linktype: int, udp_port: int) -> str:
    return fl.malformed_text(fast.walk(frame, linktype, udp_port))


if _ext is not None:
    _ext.configure_flows(_config())


class CompiledAnalyzer:
    """Streaming analyser with the interface of :class:`flows.Analyzer` (``feed``,
    ``feed_batch``, ``finish``) plus :meth:`feed_capture` for a whole capture."""

    def __init__(self, udp_port: int = locate.ROCE_PORT, batch: int = fl.BATCH,
                 max_events: int = fl.MAX_EVENTS_PER_KIND) -> None:
        if _ext is None:
            raise RuntimeError("the compiled fast path is not available")
        self.udp_port = udp_port
        self.batch = max(1, batch)
        self._e = _ext.FlowEngine(udp_port, fl.EventStore(max_events), _explain)
        self._report: fl.Report | None = None

    @property
    def frames(self) -> int:
        return self._e.frames

    @property
    def not_roce(self) -> int:
        return self._e.not_roce

    def feed(self, frames: Iterable[Any]) -> None:
        """Analyse frames: ``pcapio.Frame`` objects or bytes (Ethernet, timestamp 0)."""
        for datas, tss, caps, lens, linktype in fl.frame_columns(frames, self.batch):
            self._e.feed_frames(datas, tss, caps, lens, linktype)

    def feed_batch(self, batch: Batch) -> None:
        """Analyse one ``pcapio.Batch``."""
        self._e.feed_frames(batch.datas, batch.ts_ns, batch.caplen, batch.origlen,
                            batch.linktype)

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
        return self._e.feed_pcap(buf, pos, end, big_endian, frac_mul, linktype, MAX_RECORD)

    def finish(self) -> fl.Report:
        """Close open state, pair flows, total up (as ``flows.Analyzer.finish``)."""
        if self._report is not None:
            return self._report
        e = self._e
        e.finish()
        paths: dict[int, fl._Path] = {}
        flows = []
        for s in e.flows:
            path = paths.get(s.path)
            if path is None:
                path = paths[s.path] = fl._Path()
                path.mtu = e.path_mtu(s.path)
            f = fl.Flow(s.id, s.l3, s.addr, s.qp, path)
            for name in _COPIED:
                setattr(f, name, getattr(s, name))
            f.bytes = s.nbytes
            f.stats = s.message_stats()
            f.naks = s.nak_counts()
            f.rnr = s.rnr_counts()
            flows.append(f)
        connections = fl._pair(flows)
        paired = {f.id for c in connections for f in c}
        self._report = fl.Report(flows, connections, [f for f in flows if f.id not in paired],
                                 fl.totals(e, flows, len(connections)), e.events, e.event_counts())
        return self._report


_COPIED = ("packets", "payload", "req_payload", "rsp_payload", "first_ts", "last_ts", "req",
           "rsp", "req_first", "rsp_first", "rsp_last", "incomplete", "acks", "reserved_syn",
           "atomic_acks", "cnps", "ecn_ce", "bad_icrc", "malformed", "truncated")
