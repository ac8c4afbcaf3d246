"""The pure-Python reference flow engine: ``flowrules`` applied frame by frame.

``roce._flowengine.pxi`` is its compiled twin, function for function (``_packet``, ``_feed``,
``_advance``, ``_late`` ...); a property test (tests/test_stats.py) feeds both the same faulty
traffic at every batch size and compares the reports event for event.

Frames are scanned in batches (``BATCH`` frames): ``roce.fast.scan`` fills columns (status,
opcode, QP, PSN, payload length, first extended header's key fields, ICRC ok ...), then every
frame is accounted in capture order.  No ``Packet`` is built and no frame is kept after its
batch, so memory stays flat whatever the capture size.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from roce import fast, locate
from roce.analysis.flowinput import frame_columns
from roce.analysis.flowmodel import Event, EventStore, Flow, Path, Report, totals
from roce.analysis.flowpair import pair
from roce.analysis.flowrules import (
    ADDR_NEED,
    ADDR_PIECES,
    AETH_LATER,
    ATOMIC_BYTES,
    BATCH,
    BECN_SPECS,
    C_ACK,
    C_ATOMIC,
    C_ATOMIC_ACK,
    C_CNP,
    C_DATA,
    C_ONLYREQ,
    C_READ,
    C_READ_RESP,
    CE_SPECS,
    DEFAULT_MTU,
    EVENT_BY_NAME,
    IB_KINDS,
    IB_MTUS,
    K_READ,
    K_READ_RESP,
    KIND_NAMES,
    L3_LEN_FIELDS,
    MAX_EVENTS_PER_KIND,
    MAX_OPEN_MESSAGES,
    MAX_READ_PSNS,
    NAK_TEXTS,
    OPINFO,
    P_FIRST,
    P_LAST,
    P_MIDDLE,
    P_ONLY,
    PSN_MASK,
    REORDER_HOLD,
    RETH_LATER,
    RNR_TEXTS,
    SACK_AHEAD,
    SIDE_WORDS,
    SYN_ACK,
    SYN_NAK,
    SYN_RNR,
    SYNDROMES,
    WRITE_KINDS,
    addr_key,
    event_text,
    is_selective_nak,
    malformed_text,
    marked,
    nak_event,
)
from roce.headers import DECODERS, LAYOUTS, NAK_PSN_SEQUENCE_ERROR, SIZE_OF
from roce.opcodes import OPCODES
from roce.psn import EV_DUPLICATE, EV_GAP, EV_IN_ORDER, EV_LATE

__all__ = ["Analyzer"]

_BTH_OPCODE = LAYOUTS["bth"].field("opcode").byte_offset
_BTH_TVER = locate.SPECS[("bth", "tver")]
_BTH_DESTQP = locate.SPECS[("bth", "destqp")]
_BTH_PSN = locate.SPECS[("bth", "psn")]
_BTH_PADCNT = locate.SPECS[("bth", "padcnt")]
# flowrules' L3 lengths, as field specs.
_L3_LEN = {k: (locate.LRH_SPECS[hf[1]] if hf[0] == "lrh" else locate.SPECS[hf], extra, unit)
           for k, (hf, extra, unit) in L3_LEN_FIELDS.items()}
_KEY_NAMES = {code: [n.split(".", 1)[1] for n in names]
              for code, names in fast.KEY_FIELDS.items()}
_COLUMNS = ("status", "opcode", "destqp", "psn", "payload_len", "l3_kind", "l3_off", "icrc_ok",
            "key0", "key1", "key2", "bth_off")
psn_diff = fast.psn_diff


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


class _Msgs:
    """Message reassembly state of one direction of one flow (requests or READ responses)."""

    __slots__ = ("kind", "first", "lo", "bytes", "pkts", "mtu", "dmalen", "frame", "ts",
                 "open", "held", "heap", "base", "hi", "floor")

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
        # Reassembly in PSN order (flowrules, "messages"): packets waiting behind a hole, by
        # PSN ([pos, kind, plen, dmalen, frame, ts]), a heap of (distance from ``base``,
        # PSN), the highest PSN reassembled (-1: none) and the PSN below which holes are no
        # longer waited for (-1: none).
        self.held: dict[int, tuple[int, int, int, int, int, int]] = {}
        self.heap: list[tuple[int, int]] = []
        self.base = 0
        self.hi = self.floor = -1


class _RefFlow(Flow):
    """A flow and the reference engine's working state for it."""

    __slots__ = ("pending", "reqmsg", "rspmsg", "bursts", "acked", "sacks", "back")

    def __init__(self, fid: int, l3: int, addr: bytes, qp: int, path: Path) -> None:
        super().__init__(fid, l3, addr, qp, path)
        self.pending: list[int] | None = None  # READ not yet sequenced: [frame, psn, dmalen, ts]
        self.reqmsg, self.rspmsg = _Msgs(), _Msgs()
        # Open retransmission burst per tracker (requests, responses):
        # [first frame, its ts, first PSN, last frame, last PSN, packets] or None; the third
        # is the open run of spurious request retransmissions.
        self.bursts: list[list[int] | None] = [None, None, None]
        # What this flow's ACKs / NAKs acknowledged (flowrules, "acknowledged PSNs"): the
        # cumulative acknowledgement (-1: none yet) and the selectively acknowledged PSNs,
        # a bitmap by PSN % SACK_AHEAD made at the first selective NAK.
        self.acked = -1
        self.sacks: bytearray | None = None
        self.back: list[_RefFlow] = []  # the flows the other way between the same addresses


class Analyzer:
    """Streaming analyser: ``feed`` frames (any number of times), then ``finish``."""

    def __init__(self, udp_port: int = locate.ROCE_PORT, batch: int = BATCH,
                 max_events: int = MAX_EVENTS_PER_KIND) -> None:
        self.udp_port = udp_port
        self.batch = max(1, batch)
        self.frames = self.not_roce = self.malformed_unattributed = 0
        self.truncated_unattributed = 0
        self.first_ts = self.last_ts = -1
        self.flows: list[_RefFlow] = []
        self._map: dict[tuple[int, bytes, int], _RefFlow] = {}
        self._by_addr: dict[tuple[int, bytes], list[_RefFlow]] = {}  # (l3, src+dst) -> flows
        self._paths: dict[tuple[int, bytes], Path] = {}
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

    # -- one batch, frame by frame -----------------------------------------------------------

    def _feed_batch(self, datas: list[bytes], tss: Sequence[int], lens: Sequence[int],
                    caps: Sequence[int] | None, linktype: int) -> None:
        n = len(datas)
        base = self.frames
        linktype = locate.flow_linktype(linktype)  # native InfiniBand: the walk's code
        if self.first_ts < 0:
            self.first_ts = tss[0]
        cols = self._cols
        fast.scan(datas, linktype, self.udp_port, True, cols)
        (status, ops, qps, psns, plens, l3ks, l3os, icrcs, k0s, k1s, k2s,
         bths) = (cols[c][:n].tolist() for c in _COLUMNS)
        for i in range(n):
            self.frames += 1
            fn, ts = base + i + 1, tss[i]
            self.last_ts = ts
            st = status[i]
            data = datas[i]
            bad: str | None = None
            truncated = False
            if st == locate.OK:
                row = (ops[i], qps[i], psns[i], plens[i], l3ks[i], l3os[i],
                       bool(icrcs[i]), k0s[i], k1s[i], k2s[i], bths[i])
            elif locate.is_not_roce(st):
                self.not_roce += 1
                continue
            else:
                got = self._bad_frame(data, st, linktype, caps is not None and
                                      caps[i] < lens[i], fn, ts)
                if got is None:
                    continue
                row, bad = got
                truncated = bad == ""
            op, qp, psn, plen, l3k, l3o, icrc_ok, k0, k1, k2, bth = row
            key = (l3k, addr_key(data, l3o, ADDR_PIECES[l3k]), qp)
            f = self._map.get(key)
            if f is None:
                f = self._new_flow(*key)
            if f.first_ts < 0:
                f.first_ts = ts
            f.last_ts = ts
            if op in RETH_LATER:
                k2 = _eth_field(data, bth, op, "reth", "dmalen")
            elif op in AETH_LATER:
                k0 = _eth_field(data, bth, op, "aeth", "syndrome")
                k1 = _eth_field(data, bth, op, "aeth", "msn")
            self._packet(f, data, linktype, fn, ts, op, psn, plen, lens[i],
                         marked(data, CE_SPECS, l3k, l3o, bth),
                         marked(data, BECN_SPECS, l3k, l3o, bth),
                         icrc_ok, k0, k1, k2, bad or None, truncated)

    def _new_flow(self, l3: int, addr: bytes, qp: int) -> _RefFlow:
        half = len(addr) // 2
        rev = addr[half:] + addr[:half]
        pkey = (l3, min(addr, rev))
        path = self._paths.get(pkey)
        if path is None:
            path = self._paths[pkey] = Path()
        f = _RefFlow(len(self.flows), l3, addr, qp, path)
        self.flows.append(f)
        self._map[(l3, addr, qp)] = f
        self._by_addr.setdefault((l3, addr), []).append(f)
        f.back = self._by_addr.setdefault((l3, rev), [])
        return f

    def _bad_frame(self, data: bytes, st: int, linktype: int, cut: bool, fn: int,
                   ts: int) -> tuple[tuple[Any, ...], str] | None:
        """A frame the walk called malformed: count it and, when its addresses and BTH are
        readable, return its row and its malformed text ("" when only cut by the snap length)
        so its flow can still use its PSN."""
        w = fast.walk(data, linktype, self.udp_port)
        snapped = cut and st in (locate.BAD_TRUNCATED, locate.BAD_L3_LENGTH)
        bth = w.bth_off
        need = ADDR_NEED.get(w.l3_kind)
        usable = (need is not None and w.l3_off >= 0 and bth >= 0
                  and len(data) >= bth + SIZE_OF["bth"] and len(data) >= w.l3_off + need
                  and _rd(data, bth, _BTH_TVER) == 0
                  and OPINFO[data[bth + _BTH_OPCODE]] is not None)
        if not usable:
            if snapped:
                self.truncated_unattributed += 1
            else:
                self.malformed_unattributed += 1
                self._event(fn, ts, "malformed", None, (malformed_text(w),))
            return None
        op = data[bth + _BTH_OPCODE]
        # Key fields when the first extended header was captured whole.
        names = _KEY_NAMES.get(op)
        hdr = OPCODES[op].headers[0] if OPCODES[op].headers else None
        keys = [0, 0, 0]
        if names and hdr and len(data) >= bth + SIZE_OF["bth"] + SIZE_OF[hdr]:
            vals = DECODERS[hdr](data, bth + SIZE_OF["bth"])
            keys[:len(names)] = [vals[n] for n in names]
        elif names:
            keys = [-1, -1, -1]  # unknown: a READ's length, an ACK's syndrome
        plen = 0
        if (snapped and w.payload_off >= 0 and st == locate.BAD_L3_LENGTH
                and w.l3_kind in _L3_LEN):
            # All headers were captured: the L3 length says how much payload there was.
            lspec, extra, unit = _L3_LEN[w.l3_kind]
            end = w.l3_off + extra + _rd(data, w.l3_off, lspec) * unit
            pad = _rd(data, bth, _BTH_PADCNT)
            plen = max(end - 4 - pad - w.payload_off, 0)
        row = (op, _rd(data, bth, _BTH_DESTQP), _rd(data, bth, _BTH_PSN), plen, w.l3_kind,
               w.l3_off, True,  # ICRC not checked: it cannot be over a partial frame
               *keys, bth)
        return row, "" if snapped else malformed_text(w)

    def _vcrc(self, f: _RefFlow, data: bytes, linktype: int, fn: int, ts: int) -> None:
        """Native InfiniBand: the VCRC after the ICRC, when captured (IBA 7.8.2)."""
        from roce.families.ib import crc as ibcrc

        end = fast.walk(data, linktype, self.udp_port).l4_end
        if len(data) < end + ibcrc.VCRC_SIZE:
            return
        stored = int.from_bytes(data[end:end + ibcrc.VCRC_SIZE], "big")
        calc = ibcrc.vcrc(memoryview(data)[:end])
        if calc != stored:
            self._event(fn, ts, "bad_vcrc", f, (stored, calc))

    # -- one packet ----------------------------------------------------------------------------

    def _packet(self, f: _RefFlow, data: bytes, linktype: int, fn: int, ts: int, op: int,
                psn: int, plen: int, origlen: int, ce: bool, becn: bool, icrc_ok: bool,
                k0: int, k1: int, k2: int, bad: str | None, truncated: bool) -> None:
        cls, pos, kind, seq = OPINFO[op]  # type: ignore[misc]
        if bad is not None:  # malformed: sequenced, but no part of message reassembly
            self._event(fn, ts, "malformed", f, (bad,))
        elif truncated:
            f.truncated += 1
        f.packets += 1
        f.bytes += origlen
        f.payload += plen
        if ce:  # flowrules "congestion marks": IP ECN CE, native InfiniBand's FECN
            self._event(fn, ts, "ecn_ce", f, ())
        if becn and cls != C_CNP:  # a CNP is counted as one below
            self._event(fn, ts, "becn", f, ())
        if not icrc_ok:
            _, calc, stored = fast.icrc_check(data, linktype, self.udp_port)
            self._event(fn, ts, "bad_icrc", f, (stored, calc))
        if f.l3 in IB_KINDS and bad is None and not truncated:
            self._vcrc(f, data, linktype, fn, ts)
        if cls <= C_ONLYREQ:  # a request
            f.req_payload += plen
            if not seq:  # UD: counted, not sequenced
                f.unique_payload += plen
                self._complete(f, kind, plen, -1, fn, ts)
                return
            if f.req_first < 0:
                f.req_first = psn
            if f.pending is not None:
                self._resolve_read(f, psn)
            if cls == C_READ and k2 >= 0:
                # Its PSN count depends on the MTU: decide when the next request comes.
                f.pending = [fn, psn, k2, ts]
                return
            ev = self._feed_req(f, psn, 1, fn, ts, cls == C_READ)
            if ev == EV_DUPLICATE:
                return
            f.unique_payload += plen
            if bad is not None:
                return
            if cls == C_DATA:
                self._reassemble(f, f.reqmsg, f.req, pos, kind, psn, plen, k2, fn, ts)
            elif cls == C_READ:  # a READ whose RETH was not captured
                self._complete(f, kind, 0, -1, fn, ts)
            else:
                self._complete(f, kind, ATOMIC_BYTES if cls == C_ATOMIC else plen, -1, fn, ts)
        elif cls == C_ACK:
            self._note_rsp_psn(f, psn)
            if k0 < 0:  # AETH not captured
                return
            rule, v = SYNDROMES[k0]
            if rule == SYN_ACK:
                f.acks += 1
                f.ack_msn = k1
                self._ack_to(f, (psn + 1) & PSN_MASK)
            elif rule == SYN_RNR:
                f.rnr[v] = f.rnr.get(v, 0) + 1
                self._event(fn, ts, "rnr_nak", f, (RNR_TEXTS[v], psn))
            elif rule == SYN_NAK:
                selective = is_selective_nak(v, psn, k1, f.ack_msn, f.nak_psn)
                if v == NAK_PSN_SEQUENCE_ERROR:
                    f.nak_psn = psn
                    self._ack_to(f, psn)
                    self._nak_below_start(f, psn)
                if selective:
                    self._sack(f, k1)
                    self._event(fn, ts, "selective_nak", f, (psn, k1))
                    return
                f.naks[v] = f.naks.get(v, 0) + 1
                self._event(fn, ts, nak_event(v), f, (NAK_TEXTS[v], k1, psn))
            else:
                self._event(fn, ts, "reserved_syndrome", f, (k0,))
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
            ev = self._feed(f, t, psn, 1, fn, ts, 1)
            if ev == EV_DUPLICATE:
                return
            f.unique_payload += plen
            if cls == C_ATOMIC_ACK or bad is not None:
                return
            self._reassemble(f, f.rspmsg, t, pos, kind, psn, plen, -1, fn, ts)
        else:  # CNP
            self._event(fn, ts, "cnp", f, ())

    # -- PSN sequencing -----------------------------------------------------------------------

    def _feed_req(self, f: _RefFlow, psn: int, count: int, fn: int, ts: int,
                  read: bool) -> int:
        t = f.req
        if t is None:
            t = f.req = fast.PSNTracker()
        elif t.early and psn_diff(psn, t.first) < 0 and self._acknowledged(f, psn):
            t.early = 0  # flowrules, "request PSNs": acknowledged, no late first arrival
        ev = self._feed(f, t, psn, count, fn, ts, 0)
        if ev == EV_LATE:
            f.req_first = t.first  # a late first arrival moves the start back
        b = f.bursts[2]
        if ev == EV_DUPLICATE and not read and self._acknowledged(f, psn):
            if b is not None:  # flowrules, "spurious retransmissions": runs fold
                if psn == (b[4] + 1) & PSN_MASK:
                    b[3], b[4] = fn, psn
                    b[5] += 1
                    return ev
                self._close_spurious(f)
            f.bursts[2] = [fn, ts, psn, fn, psn, 1]
        elif b is not None:
            self._close_spurious(f)
        return ev

    def _close_spurious(self, f: _RefFlow) -> None:
        fn, ts, lo, last, hi, n = f.bursts[2]  # type: ignore[misc]
        f.bursts[2] = None
        self._event(fn, ts, "spurious_retransmission", f, (lo,) if n == 1 else (lo, hi, n),
                    n, last if n > 1 else 0)

    # -- acknowledged PSNs (flowrules, "acknowledged PSNs", "spurious retransmissions") -----

    @staticmethod
    def _ack_to(f: _RefFlow, psn: int) -> None:
        """The cumulative acknowledgement moves forward to ``psn`` (never back); selective
        marks it passes are cleared, so the bitmap only holds PSNs ahead of it."""
        old = f.acked
        if old >= 0:
            d = psn_diff(psn, old)
            if d <= 0:
                return
            sacks = f.sacks
            if sacks is not None:
                if d >= SACK_AHEAD:
                    sacks[:] = bytes(len(sacks))
                else:
                    for i in range(d):
                        p = (old + i) & (SACK_AHEAD - 1)
                        sacks[p >> 3] &= ~(1 << (p & 7))
        f.acked = psn

    @staticmethod
    def _nak_below_start(f: _RefFlow, psn: int) -> None:
        """A sequence NAK's ePSN a little below the first PSN of the one flow it answers
        (flowrules, "request PSNs"): that flow started there, the PSN is missing."""
        x = None
        for c in f.back:
            t = c.req
            if t is not None and t.early and 0 < psn_diff(t.first, psn) <= t.early:
                if x is not None:
                    return  # two candidates: ambiguous
                x = c
        if x is not None and x.req.start_at(psn):
            x.req_first = psn

    @staticmethod
    def _sack(f: _RefFlow, psn: int) -> None:
        """A selective NAK named ``psn`` (after its ePSN moved the cumulative one)."""
        if 0 < psn_diff(psn, f.acked) < SACK_AHEAD:
            if f.sacks is None:
                f.sacks = bytearray(SACK_AHEAD // 8)
            p = psn & (SACK_AHEAD - 1)
            f.sacks[p >> 3] |= 1 << (p & 7)

    def _acknowledged(self, x: _RefFlow, psn: int) -> bool:
        """Had the flow answering ``x``'s requests acknowledged ``psn``?"""
        y = None
        for c in x.back:
            if c.acked >= 0 and psn_diff(c.acked, x.req_first) >= 0 and \
                    psn_diff(x.req.next, c.acked) >= 0:
                if y is not None:
                    return False  # two candidates: ambiguous
                y = c
        if y is None:
            return False
        d = psn_diff(psn, y.acked)
        if d < 0:
            return True
        p = psn & (SACK_AHEAD - 1)
        return d < SACK_AHEAD and y.sacks is not None and bool(y.sacks[p >> 3] >> (p & 7) & 1)

    def _feed(self, f: _RefFlow, t: Any, psn: int, count: int, fn: int, ts: int,
              side: int) -> int:
        """Sequence one packet on tracker ``t`` (``side`` 0 requests, 1 responses); a
        retransmission opens or extends that tracker's burst, anything else ends it."""
        exp = t.next
        started = t.started
        ev = t.feed(psn, count)
        b = f.bursts[side]
        if ev == EV_DUPLICATE:
            if b is not None:
                if psn == (b[4] + 1) & PSN_MASK:
                    b[3], b[4] = fn, psn
                    b[5] += 1
                    return ev
                self._close_burst(f, side)
            f.bursts[side] = [fn, ts, psn, fn, psn, 1]
            return ev
        if b is not None:
            self._close_burst(f, side)
        if ev > EV_IN_ORDER and started:
            what = SIDE_WORDS[side]
            if ev == EV_GAP:
                self._event(fn, ts, "gap", f, (what, exp, psn, psn_diff(psn, exp)))
            elif ev == EV_LATE:
                self._event(fn, ts, "out_of_order", f, (what, psn))
        return ev

    def _close_burst(self, f: _RefFlow, side: int) -> None:
        fn, ts, lo, last, hi, n = f.bursts[side]  # type: ignore[misc]
        f.bursts[side] = None
        if n == 1:
            f.retx_selective += 1
        else:
            f.retx_go_back += n
        if n == 1:
            self._event(fn, ts, "retransmission", f, (SIDE_WORDS[side], lo))
        else:
            self._event(fn, ts, "retransmission", f, (SIDE_WORDS[side], lo, hi, n), n, last)

    def _resolve_read(self, f: _RefFlow, next_psn: int | None) -> None:
        """Sequence the pending READ now that the next request's PSN (or the end) is known."""
        fn, psn, dmalen, ts = f.pending  # type: ignore[misc]
        f.pending = None
        mtu = f.path.mtu
        count = min(max(1, -(-dmalen // (mtu or DEFAULT_MTU))), MAX_READ_PSNS)
        if not mtu and next_psn is not None:
            d = psn_diff(next_psn, psn)
            if d > 0 and any(d == max(1, -(-dmalen // m)) for m in IB_MTUS):
                count = d
        ev = self._feed_req(f, psn, count, fn, ts, True)
        if ev != EV_DUPLICATE:
            self._complete(f, K_READ, dmalen, -1, fn, ts)

    @staticmethod
    def _note_rsp_psn(f: _RefFlow, psn: int) -> None:
        if f.rsp_first < 0:
            f.rsp_first = psn
        f.rsp_last = psn

    # -- message reassembly ----------------------------------------------------------------------

    def _reassemble(self, f: _RefFlow, st: _Msgs, t: Any, pos: int, kind: int, psn: int,
                    plen: int, dmalen: int, fn: int, ts: int) -> None:
        """Reassemble in PSN order (flowrules, "messages"): a packet with a PSN missing below
        it waits (at most REORDER_HOLD per direction); what no longer waits goes on."""
        if t.missing_below(psn, st.floor):
            if psn in st.held:  # twice "new" only after PSN jumps the tracker cannot order
                return
            if not st.held:
                st.base = psn
            st.held[psn] = (pos, kind, plen, dmalen, fn, ts)
            heapq.heappush(st.heap, (psn_diff(psn, st.base), psn))
            if len(st.held) <= REORDER_HOLD:
                return
            _, p = heapq.heappop(st.heap)
            st.floor = p  # give up on what is missing below the oldest waiting packet
            self._place(f, st, p, *st.held.pop(p))
        else:
            self._place(f, st, psn, pos, kind, plen, dmalen, fn, ts)
        while st.heap:
            p = st.heap[0][1]
            if t.missing_below(p, st.floor):
                return
            heapq.heappop(st.heap)
            self._place(f, st, p, *st.held.pop(p))

    def _place(self, f: _RefFlow, st: _Msgs, psn: int, pos: int, kind: int, plen: int,
               dmalen: int, fn: int, ts: int) -> None:
        """One packet into its message: past every PSN reassembled so far it advances the
        message, else it fills a hole of one (``_late``)."""
        if st.hi < 0 or psn_diff(psn, st.hi) > 0:
            if pos == P_FIRST and kind == K_READ_RESP and st.kind == K_READ_RESP and \
                    st.first is not None and psn == (st.hi + 1) & PSN_MASK:
                pos = P_MIDDLE  # a READ resumed (flowrules, "messages")
            st.hi = psn
            self._advance(f, st, pos, kind, psn, plen, dmalen, fn, ts)
        else:
            self._late(f, st, pos, kind, psn, plen, dmalen, fn, ts)

    def _release(self, f: _RefFlow, st: _Msgs) -> None:
        """The end: every waiting packet goes on, in PSN order."""
        while st.heap:
            _, p = heapq.heappop(st.heap)
            self._place(f, st, p, *st.held.pop(p))

    def _advance(self, f: _RefFlow, st: _Msgs, pos: int, kind: int, psn: int, plen: int,
                 dmalen: int, fn: int, ts: int) -> None:
        """A packet that advanced the sequence (in order, first, or after a gap)."""
        if (pos == P_FIRST or pos == P_ONLY) and kind in WRITE_KINDS and \
                st.kind in WRITE_KINDS and st.first is not None and st.mtu > 0 and \
                dmalen == st.dmalen - psn_diff(psn, st.first) * st.mtu and \
                (pos == P_FIRST or dmalen == plen):
            pos = P_MIDDLE if pos == P_FIRST else P_LAST  # flowrules, "selective repeat WRITE"
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
            self._start(st, kind, psn, psn, plen, dmalen if kind in WRITE_KINDS else -1, fn,
                        ts)
            return
        if pos == P_ONLY:
            if st.kind >= 0:
                self._abandon(f, st)
            self._complete(f, kind, plen, dmalen if kind in WRITE_KINDS else -1, fn, ts)
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

    def _abandon(self, f: _RefFlow, st: _Msgs, last: int | None = None, kind: int = -1) -> None:
        """The current message stops without its Last (or lacks its First): keep it open so a
        late retransmission can complete it."""
        st.open.append([st.first, last, st.lo, kind if kind >= 0 else st.kind, st.bytes,
                        st.pkts, st.mtu, st.dmalen, st.frame, st.ts])
        st.kind = -1
        if len(st.open) > MAX_OPEN_MESSAGES:
            self._incomplete(f, st.open.pop(0))

    def _late(self, f: _RefFlow, st: _Msgs, pos: int, kind: int, psn: int, plen: int,
              dmalen: int, fn: int, ts: int) -> None:
        """A packet that filled a hole: it may belong to the current or an abandoned message."""
        if pos == P_FIRST and kind in WRITE_KINDS and st.kind in WRITE_KINDS and \
                st.first is not None and st.mtu > 0 and psn_diff(psn, st.first) > 0 and \
                dmalen == st.dmalen - psn_diff(psn, st.first) * st.mtu:
            pos = P_MIDDLE  # a late Middle (flowrules, "selective repeat WRITE")
        if st.kind >= 0 and st.first is None and pos == P_FIRST and psn_diff(st.lo, psn) > 0:
            # The head of the message in progress, resent.
            st.first, st.lo, st.mtu = psn, psn, plen
            st.bytes += plen
            st.pkts += 1
            st.frame, st.ts = fn, ts
            if kind in WRITE_KINDS:
                st.dmalen = dmalen
            return
        if st.kind in WRITE_KINDS and kind in WRITE_KINDS and st.first is not None and \
                pos == P_FIRST and st.mtu > 0 and psn_diff(st.first, psn) > 0 and \
                dmalen == st.dmalen + psn_diff(st.first, psn) * st.mtu:
            # A selective-repeat WRITE's true First, late: its DMA length covers the
            # message's from there (flowrules, "selective repeat WRITE").
            st.first, st.lo, st.dmalen = psn, psn, dmalen
            st.bytes += plen
            st.pkts += 1
            st.frame, st.ts = fn, ts
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
            self._complete(f, kind, plen, dmalen if kind in WRITE_KINDS else -1, fn, ts)
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
                if e[3] in WRITE_KINDS:
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
                            dmalen if kind in WRITE_KINDS else -1, fn, ts])
            if len(st.open) > MAX_OPEN_MESSAGES:
                self._incomplete(f, st.open.pop(0))

    def _complete(self, f: _RefFlow, kind: int, size: int, dmalen: int, fn: int,
                  ts: int) -> None:
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
            self._event(fn, ts, "length_mismatch", f, (KIND_NAMES[kind], dmalen, size))

    def _incomplete(self, f: _RefFlow, e: list[Any]) -> None:
        first, last, kind = e[0], e[1], e[3]
        what = "First not captured" if first is None else "Last not captured"
        if first is None and last is None:
            what = "First and Last not captured"
        self._event(e[8], e[9], "incomplete_message", f, (KIND_NAMES[kind], what, e[5], e[4]))

    # -- events ------------------------------------------------------------------------------

    def _event(self, fn: int, ts: int, name: str, f: _RefFlow | None, args: tuple[Any, ...],
               count: int = 1, last: int = 0) -> None:
        """One event (or a folded run of ``count``): its row in ``flowrules.EVENTS`` gives
        its severity, text and the flow counter it bumps."""
        kind = EVENT_BY_NAME[name]
        if f is not None and kind.counter is not None:
            setattr(f, kind.counter, getattr(f, kind.counter) + count)
        self.store.add(Event(fn, kind.severity, name, f.id if f else -1, f.qp if f else -1,
                             event_text(kind, args, count), ts, count, last))

    # -- the end -------------------------------------------------------------------------------

    def finish(self) -> Report:
        """Close open state (pending READs, bursts, unfinished messages), pair flows, total
        up."""
        if not self._done:
            self._done = True
            for f in self.flows:
                if f.pending is not None:
                    self._resolve_read(f, None)
                for side in (0, 1):
                    if f.bursts[side] is not None:
                        self._close_burst(f, side)
                if f.bursts[2] is not None:
                    self._close_spurious(f)
                for st in (f.reqmsg, f.rspmsg):
                    self._release(f, st)
                    if st.kind >= 0:
                        self._abandon(f, st)
                    for e in st.open:
                        self._incomplete(f, e)
                    st.open.clear()
            self.events = self.store.kept()
        connections, lone = pair(self.flows)  # type: ignore[arg-type]
        return Report(self.flows, connections, lone,  # type: ignore[arg-type]
                      totals(self, self.flows, len(connections)),  # type: ignore[arg-type]
                      self.events, dict(self.store.counts), dict(self.store.lines))
