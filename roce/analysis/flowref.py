"""The flow engine, written once: ``flowrules`` applied frame by frame, in capture order.

This file is both engines.  Interpreted, it is the reference (``make_analyzer(engine=
"reference")``).  The build compiles it with Cython, unchanged, into
``roce.analysis._flowengine`` (the "compiled" engine, the one ``roce stats`` runs); the C
types of its state, tables and locals are declared beside it in ``_flowengine.pxd``, and
``roce/_compiled.py`` keeps the compiled form from running once this file or its
declarations changed since the build.  A rule changed here is changed in both forms; the twin
tests (tests/test_stats.py and others) feed both the same faulty traffic at every batch size
and require equal reports, event for event.

Written so that the two forms compute the same:

- numbers stay inside their C types: PSNs are 24 bits (``_psn_diff``), frame numbers, times
  and byte counts signed 64 bits; a byte count that would pass 2^63 - 1 stops the analysis
  with ``OverflowError`` in both forms (``_add``), and so does a timestamp outside 64 bits;
- tables are lists the compiled form copies into C arrays at import, of the sizes written
  here (``_NOPS``, ``_MAX_COUNTERS`` ...; tests/test_flowrules.py holds the ``.pxd`` to
  them); a flowrules table that outgrows its room stops the import of either form;
- frames are read byte by byte through ``p``: a pointer into the frame in C, the frame's
  ``bytes`` here;
- what happens rarely (held packets, abandoned messages, events) uses Python objects in
  both forms;
- the forms differ only where they reach the fast path or read bytes in place, a few small
  functions that ask ``cython.compiled`` (section "where the two forms differ") and the
  record cutting of ``feed_pcap``: C there (``roce/_fastpath.pxd``: the walk, the ICRC,
  the VCRC and the PSN tracker's hole count; ``memcmp``; a pcap record read where it lies,
  without a Python object per frame), the fast path's Python functions and ``bytes`` here.
  No rule is written there.

Frames come as ``bytes`` (``feed``, ``feed_batch``) or as the records of a classic pcap
(``feed_capture``); no frame is kept after it is accounted, so memory stays flat whatever the
capture size.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from typing import Any

try:
    import cython
except ImportError:  # Cython builds the compiled form; the interpreted one needs only this
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)

from roce import fast, locate
from roce.analysis import flowrules as R
from roce.analysis.flowinput import frame_columns
from roce.analysis.flowmodel import Event, EventStore, Flow, Path, Report, totals
from roce.analysis.flowpair import pair
from roce.headers import LAYOUTS, SIZE_OF
from roce.opcodes import OPCODES
from roce.pcapio import MAX_RECORD
from roce.psn import EV_DUPLICATE, EV_GAP, EV_IN_ORDER, EV_LATE

__all__ = ["Analyzer"]

# -- the tables the engine runs on, from flowrules, the opcode table and the layouts ----------
# The compiled form holds them in C arrays of these sizes (_flowengine.pxd declares the same;
# tests/test_flowrules.py holds the two equal): opcodes are a byte, L3 kinds below 8 (LNH and
# IP version numbers), NAK and RNR codes 5 bits; a flowrules table that outgrows its room
# stops the import, in both forms alike.
_NOPS, _NL3, _NCODES = 256, 8, 32
_MAX_PIECES, _MAX_SPECS, _MAX_EVENTS, _MAX_COUNTERS, _MAX_KINDS = 4, 64, 32, 32, 16
if (max(R.ADDR_PIECES) >= _NL3 or max(map(len, R.ADDR_PIECES.values())) > _MAX_PIECES
        or len(R.EVENTS) > _MAX_EVENTS or len(R.COUNTERS) > _MAX_COUNTERS
        or len(R.KIND_NAMES) > _MAX_KINDS or R.SYNDROME_VALUES != _NCODES
        or len(R.IB_MTUS) != 5):
    raise ValueError("flow engine: a flowrules table outgrew its arrays (flowref.py and "
                     "_flowengine.pxd size them)")
# Field specs: (byte offset, byte count, shift, mask) from a header's start, and the bytes
# from that start that hold the whole header (what must be captured to read the field).
_specs: list[tuple[int, int, int, int, int]] = []


def _spec(off: int, n: int, shift: int, mask: int, need: int = 0) -> int:
    """The row of a field spec in the spec table (one row per distinct spec)."""
    row = (off, n, shift, mask, need)
    if row not in _specs:
        _specs.append(row)
    return _specs.index(row)


def _eth_spec(op: int, header: str, name: str) -> int:
    """A field of an extended header of ``op`` (-1: it has none), from the BTH start."""
    headers = OPCODES[op].headers if op in OPCODES else ()
    if header not in headers:
        return -1
    start = SIZE_OF["bth"] + sum(SIZE_OF[h] for h in headers[:headers.index(header)])
    f = LAYOUTS[header].field(name)
    bit = start * 8 + f.bit_offset
    first, last = bit // 8, (bit + f.bits - 1) // 8
    n = last - first + 1
    assert n <= 8, (header, name)
    return _spec(first, n, n * 8 - bit % 8 - f.bits, f.mask, start + SIZE_OF[header])


def _zeros(n: int) -> list[int]:
    """A row of C array ``n`` long, zero (a list; the compiled form copies it into the
    array)."""
    return [0] * n


def _by_l3(table: dict[int, Any], default: Any) -> list[Any]:
    return [table.get(k, default) for k in range(_NL3)]


_F_OPCODE = _spec(*locate.SPECS[("bth", "opcode")])
_F_TVER = _spec(*locate.SPECS[("bth", "tver")])
_F_DESTQP = _spec(*locate.SPECS[("bth", "destqp")])
_F_PSN = _spec(*locate.SPECS[("bth", "psn")])
_F_PADCNT = _spec(*locate.SPECS[("bth", "padcnt")])
_F_ACKREQ = _spec(*locate.SPECS[("bth", "a")])
_SZ_BTH = SIZE_OF["bth"]
# By opcode (flowrules.OPINFO): a row, class, position, message kind, sequenced.
_VALID = [int(info is not None) for info in R.OPINFO]
_CLS = [info.cls if info else 0 for info in R.OPINFO]
_POS = [info.pos if info else 0 for info in R.OPINFO]
_KIND = [info.kind if info else 0 for info in R.OPINFO]
_SEQ = [int(info.seq) if info else 0 for info in R.OPINFO]
_ACKED = [int(info.acked) if info else 0 for info in R.OPINFO]
# By opcode: the RETH DMA length, the AETH syndrome and MSN, wherever the header is (-1: none).
_DMALEN = [_eth_spec(op, "reth", "dmalen") for op in range(_NOPS)]
_SYN = [_eth_spec(op, "aeth", "syndrome") for op in range(_NOPS)]
_MSN = [_eth_spec(op, "aeth", "msn") for op in range(_NOPS)]
# By L3 kind: the flow key's address pieces (flowrules.ADDR_PIECES), each (offset from the L3
# start, bytes) at row L3 kind * _MAX_PIECES + piece, and the bytes the key needs from the L3
# start (0: no key, not attributable).
_NPIECE = [len(p) for p in _by_l3(R.ADDR_PIECES, ())]
_POFF = _zeros(_NL3 * _MAX_PIECES)
_PLEN = _zeros(_NL3 * _MAX_PIECES)
for _k, _pieces in R.ADDR_PIECES.items():
    for _j, (_o, _n) in enumerate(_pieces):
        assert _n % 2 == 0, (_k, _pieces)  # _hash takes 16 bits a step
        _POFF[_k * _MAX_PIECES + _j], _PLEN[_k * _MAX_PIECES + _j] = _o, _n
_SPAN = _by_l3(R.ADDR_NEED, 0)
_KEYLEN = [sum(n for _, n in p) for p in _by_l3(R.ADDR_PIECES, ())]  # the key's bytes
# By L3 kind: its length field (-1: none), what that length leaves out and its unit, where a
# snapped frame's payload length comes from (flowrules.L3_LEN_FIELDS).
_l3len = {k: (_spec(*(locate.LRH_SPECS[n] if h == "lrh" else locate.SPECS[(h, n)])), x, u)
          for k, ((h, n), x, u) in R.L3_LEN_FIELDS.items()}
_L3LEN = [row[0] for row in _by_l3(_l3len, (-1, 0, 1))]
_L3LEN_X = [row[1] for row in _by_l3(_l3len, (-1, 0, 1))]
_L3LEN_U = [row[2] for row in _by_l3(_l3len, (-1, 0, 1))]
# Congestion marks (flowrules.CE_MARKS, BECN_FIELDS), row _NL3 * table + L3 kind: the field
# (-1: none), read at the BTH or the L3 start, masked, equal to the marked value.
_CE, _BECN = 0, 1
_marks = [m for table in (R.CE_MARKS, R.BECN_FIELDS) for m in _by_l3(table, None)]
_MARK = [_spec(*locate.SPECS[m.field]) if m else -1 for m in _marks]
_MARK_AT_BTH = [int(m.at_bth) if m else 0 for m in _marks]
_MARK_MASK = [m.mask if m else 0 for m in _marks]
_MARK_VALUE = [m.value if m else 0 for m in _marks]
# The spec table, padded to its room.
if len(_specs) > _MAX_SPECS:
    raise ValueError("flow engine: more field specs than _MAX_SPECS")
_specs += [(0, 0, 0, 0, 0)] * (_MAX_SPECS - len(_specs))
_S_OFF = [row[0] for row in _specs]
_S_N = [row[1] for row in _specs]
_S_SHIFT = [row[2] for row in _specs]
_S_MASK = [row[3] for row in _specs]
_S_NEED = [row[4] for row in _specs]
# By syndrome byte: its rule (flowrules.SYN_*) and value.
_SYN_RULE = [rule for rule, _ in R.SYNDROMES]
_SYN_VALUE = [value for _, value in R.SYNDROMES]
_IB_MTUS = list(R.IB_MTUS)
# Event kinds by their row in flowrules.EVENTS: severity, the flow counter each bumps (-1:
# none), texts; flow counters by their row in flowrules.COUNTERS.
_EV_INDEX = {e.name: k for k, e in enumerate(R.EVENTS)}
_EV_KINDS = list(R.EVENTS)
_EV_SEV = [e.severity for e in R.EVENTS] + [0] * (_MAX_EVENTS - len(R.EVENTS))
_EV_CTR = [R.COUNTER_INDEX[e.counter] if e.counter else -1 for e in R.EVENTS] + \
    [-1] * (_MAX_EVENTS - len(R.EVENTS))
_NC = len(R.COUNTERS)
_SPURIOUS = 2  # the side of the spurious request retransmissions' runs (beside 0 and 1)
_NKINDS = len(R.KIND_NAMES)
_SIDE_WORDS = list(R.SIDE_WORDS)
_KIND_NAMES = list(R.KIND_NAMES)
_NAK_TEXTS = list(R.NAK_TEXTS)
_RNR_TEXTS = list(R.RNR_TEXTS)
# The counters the engine bumps itself (an event bumps its row's counter).
_CT_PACKETS = R.COUNTER_INDEX["packets"]
_CT_BYTES = R.COUNTER_INDEX["bytes"]
_CT_PAYLOAD = R.COUNTER_INDEX["payload"]
_CT_UNIQUE = R.COUNTER_INDEX["unique_payload"]
_CT_REQ_PAYLOAD = R.COUNTER_INDEX["req_payload"]
_CT_RSP_PAYLOAD = R.COUNTER_INDEX["rsp_payload"]
_CT_ACKS = R.COUNTER_INDEX["acks"]
_CT_ATOMIC_ACKS = R.COUNTER_INDEX["atomic_acks"]
_CT_TRUNCATED = R.COUNTER_INDEX["truncated"]
_CT_RETX_SELECTIVE = R.COUNTER_INDEX["retx_selective"]
_CT_RETX_GO_BACK = R.COUNTER_INDEX["retx_go_back"]
_CT_TIMED = R.COUNTER_INDEX["timed"]
_CT_UNACKED = R.COUNTER_INDEX["unacked"]
_CT_RTT = R.COUNTER_INDEX["rtt_samples"]
_CT_RTT_EXCLUDED = R.COUNTER_INDEX["rtt_excluded"]
# Numbers the rules switch on, from flowrules, roce.psn and roce.locate.
_C_DATA, _C_READ, _C_ATOMIC, _C_ONLYREQ = R.C_DATA, R.C_READ, R.C_ATOMIC, R.C_ONLYREQ
_C_READ_RESP, _C_ACK, _C_ATOMIC_ACK, _C_CNP = R.C_READ_RESP, R.C_ACK, R.C_ATOMIC_ACK, R.C_CNP
_P_FIRST, _P_MIDDLE, _P_LAST, _P_ONLY = R.P_FIRST, R.P_MIDDLE, R.P_LAST, R.P_ONLY
_K_WRITE, _K_WRITE_IMM = R.WRITE_KINDS
_K_READ, _K_READ_RESP = R.K_READ, R.K_READ_RESP
_SYN_ACK, _SYN_RNR, _SYN_NAK = R.SYN_ACK, R.SYN_RNR, R.SYN_NAK
_EV_DUPLICATE, _EV_GAP, _EV_IN_ORDER, _EV_LATE = EV_DUPLICATE, EV_GAP, EV_IN_ORDER, EV_LATE
_OK, _FIRST_BAD = locate.OK, locate.FIRST_BAD_STATUS
_BAD_TRUNCATED, _BAD_L3_LENGTH = locate.BAD_TRUNCATED, locate.BAD_L3_LENGTH
_L3_LRH, _L3_LRH_GRH = locate.L3_LRH, locate.L3_LRH_GRH
_PSN_MASK = R.PSN_MASK
_SACK_AHEAD = R.SACK_AHEAD
_ATOMIC_BYTES = R.ATOMIC_BYTES
_DEFAULT_MTU = R.DEFAULT_MTU
_MAX_OPEN = R.MAX_OPEN_MESSAGES
_REORDER_HOLD = R.REORDER_HOLD
_MAX_READ_PSNS = R.MAX_READ_PSNS
_MIN_MTU = R.IB_MTUS[0]
# Completion times (flowrules, "completion times"): the requests waiting for their
# acknowledgement, at most _MAX_OUTSTANDING per ring (a power of two: rings index by mask).
# A waiting message is a word: its first PSN in the low 24 bits, the PSN after its last above
# them, and flags: its end known, its head not seen, completed by its own response (a READ,
# an atomic).  A waiting probe packet: its PSN, and a flag once it was retransmitted.
_MAX_OUTSTANDING = R.MAX_OUTSTANDING
if _MAX_OUTSTANDING & (_MAX_OUTSTANDING - 1) or _MAX_OUTSTANDING < 8:
    raise ValueError("flow engine: MAX_OUTSTANDING must be a power of two, at least 8")
_W_END_SHIFT = 24
_W_END_MASK = R.PSN_MASK << _W_END_SHIFT  # (from the Python number: 64 bits in both forms)
_W_ENDED, _W_HEADLESS, _W_OWN_RESPONSE = 1 << 48, 1 << 49, 1 << 50
_W_RETX = 1 << 24
# The latency histogram (flowrules, "latency histogram"): buckets per power of two.
_LSUB_BITS = R.LATENCY_SUB_BITS
_LSUB = 1 << _LSUB_BITS
_LBUCKETS = R.LATENCY_BUCKETS
_LEXACT = R.LATENCY_EXACT  # values kept as they are, for exact quantiles of few values
_VCRC_SIZE = 2  # native InfiniBand's VCRC after the ICRC (roce.families.ib.crc.VCRC_SIZE)
_M32, _SIGN32, _WRAP32 = (1 << 32) - 1, 1 << 31, 1 << 32
_I64_MAX = (1 << 63) - 1
_I64_MIN = -_I64_MAX - 1
# FNV-1a over the flow key (the flow table's hash): 64-bit, wrapping in both forms.
_M64 = (1 << 64) - 1
_FNV_BASIS = 1469598103934665603
_FNV_PRIME = 1099511628211
_NS = 1_000_000_000


# -- reading a frame ----------------------------------------------------------------------------

def _field(p, base, s):
    """Field ``s`` of the spec table, from ``base`` in the frame."""
    q = base + _S_OFF[s]
    v = 0
    for k in range(_S_N[s]):
        v = (v << 8) | p[q + k]
    return (v >> _S_SHIFT[s]) & _S_MASK[s]


def _u32(p, at):
    """Four bytes big-endian."""
    b0, b1, b2, b3 = p[at], p[at + 1], p[at + 2], p[at + 3]
    return (b0 << 24) | (b1 << 16) | (b2 << 8) | b3


def _u32_pcap(p, at, big_endian):
    """A pcap record header's word, in the file's byte order."""
    if big_endian:
        return _u32(p, at)
    b0, b1, b2, b3 = p[at], p[at + 1], p[at + 2], p[at + 3]
    return (b3 << 24) | (b2 << 16) | (b1 << 8) | b0


def _marked(p, row, l3_off, bth):
    """Whether the frame carries the congestion mark of ``_MARK`` row ``row`` (flowrules,
    "congestion marks"; as ``flowrules.marked``)."""
    s = _MARK[row]
    if s < 0:
        return False
    return (_field(p, bth if _MARK_AT_BTH[row] else l3_off, s) & _MARK_MASK[row]) == \
        _MARK_VALUE[row]


def _link(linktype: int) -> int:
    """The walk code for ``linktype`` (``locate.flow_linktype``), once the engine can read it:
    native InfiniBand's VCRC table comes with ``roce.families.ib.crc`` (a plain RoCE run never
    imports it)."""
    if linktype == locate.LINKTYPE_INFINIBAND:
        from roce.families.ib import crc as ibcrc  # noqa: F401
    return locate.flow_linktype(linktype)


# -- where the two forms differ: the fast path's C, and bytes where they lie ---------------------

def _walk(p, n, linktype, udp_port):
    """Where the headers are (``roce.locate.walk``)."""
    if cython.compiled:
        do_walk(p, n, linktype, udp_port, cython.address(w))  # noqa: F821 (C: _fastpath.pxd)
    else:
        w = fast.walk(p, linktype, udp_port)
    return w


def _icrc(p, w):
    """The ICRC the walked frame should carry, read big-endian as the trailer is."""
    if cython.compiled:
        crc = icrc_raw(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)  # noqa: F821
        crc = ((crc & 0xFF) << 24) | ((crc & 0xFF00) << 8) | ((crc >> 8) & 0xFF00) | (crc >> 24)
    else:
        crc = fast.icrc_at(p, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
    return crc


def _vcrc(p, end):
    """Native InfiniBand's VCRC over the frame up to ``end`` (``roce.families.ib.crc.vcrc``;
    its table is the fast path's once ``_link`` imported ibcrc)."""
    if cython.compiled:
        crc = vcrc_raw(p, end)  # noqa: F821 (C: _fastpath.pxd)
    else:
        from roce.families.ib import crc as ibcrc

        crc = ibcrc.vcrc(memoryview(p)[:end])
    return crc


def _same_bytes(a, i, p, o, n):
    """Are ``a[i:i + n]`` and ``p[o:o + n]`` the same bytes?"""
    if cython.compiled:
        same = memcmp(a + i, p + o, n) == 0  # noqa: F821 (C: libc.string)
    else:
        same = a[i:i + n] == p[o:o + n]
    return same


def _no_holes(t):
    """Has the tracker no hole (so nothing is missing below any PSN)?  The compiled form reads
    the fast path's count; the reference asks ``missing_below`` every time."""
    if cython.compiled:
        none = t.nholes == 0
    else:
        none = False
    return none


# -- numbers ----------------------------------------------------------------------------------

def _psn_diff(a, b):
    """Signed distance ``a - b`` between 24-bit PSNs (``roce.psn.psn_diff``)."""
    d = ((a - b) << 8) & _M32
    if d >= _SIGN32:
        d -= _WRAP32
    return d >> 8


def _add(total, n):
    """``total + n`` for a 64-bit count (both non-negative): past 2^63 - 1 an error in both
    forms, where C would wrap."""
    if n > _I64_MAX - total:
        raise OverflowError("flow analysis: a byte count passed 2^63 - 1")
    return total + n


def _lost(first, last, pkts, mtu):
    """Bytes of the packets between First and Last that were not seen."""
    missing = _psn_diff(last, first) + 1 - pkts
    return missing * mtu if missing > 0 else 0


def _hash(p, l3_off, l3, qp):
    """FNV-1a of the flow key, 16 bits a step (every address piece is a whole number of
    them): destination QP, L3 kind and the address pieces."""
    h = _FNV_BASIS ^ (qp << 8) ^ l3
    for k in range(_NPIECE[l3]):
        o = l3_off + _POFF[l3 * _MAX_PIECES + k]
        for j in range(0, _PLEN[l3 * _MAX_PIECES + k], 2):
            h = ((h ^ ((p[o + j] << 8) | p[o + j + 1])) * _FNV_PRIME) & _M64
    return h ^ (h >> 29)


def _is_flow(f, p, l3_off, l3, qp):
    """Is the frame (L3 kind, address pieces, destination QP) of flow ``f``?"""
    if f is None or f.qp != qp or f.l3 != l3:
        return False
    a = f.addr
    k = _NPIECE[l3] - 1  # the key's last byte first: the other direction differs there
    if a[_KEYLEN[l3] - 1] != p[l3_off + _POFF[l3 * _MAX_PIECES + k]
                               + _PLEN[l3 * _MAX_PIECES + k] - 1]:
        return False
    i = 0
    for k in range(_NPIECE[l3]):
        n = _PLEN[l3 * _MAX_PIECES + k]
        if not _same_bytes(a, i, p, l3_off + _POFF[l3 * _MAX_PIECES + k], n):
            return False
        i += n
    return True


def _addr(p, l3_off, l3):
    """The flow key's address bytes (source half, destination half): ``flowrules.addr_key``."""
    pieces = []
    for k in range(_NPIECE[l3]):
        o = l3_off + _POFF[l3 * _MAX_PIECES + k]
        pieces.append(p[o:o + _PLEN[l3 * _MAX_PIECES + k]])
    return b"".join(pieces)


# -- state --------------------------------------------------------------------------------------

class _Path:
    """What the two directions between two addresses share: the largest First/Middle payload
    (0: none yet), which is the MTU."""

    __slots__ = ("mtu",)

    def __init__(self) -> None:
        self.mtu = 0


class _Held:
    """A packet waiting behind a hole for message reassembly: ``key`` orders the waiting ones
    (its PSN's distance from the first PSN held)."""

    __slots__ = ("key", "psn", "pos", "kind", "plen", "dmalen", "fn", "ts")


class _Msgs:
    """Message reassembly state of one direction of one flow (requests or READ responses)."""

    __slots__ = ("kind", "has_first", "first", "lo", "nbytes", "pkts", "mtu", "dmalen",
                 "frame", "ts", "open", "held", "base", "hi", "floor")

    def __init__(self) -> None:
        self.kind = -1  # -1 idle, else the message's base kind
        self.has_first = False  # its First seen (False: a tail without head)
        self.first = 0  # PSN of the First
        self.lo = 0  # lowest PSN seen in the message
        self.nbytes = self.pkts = self.mtu = 0
        self.dmalen = -1
        self.frame = self.ts = 0
        # Abandoned messages a late retransmission may still complete:
        # [first PSN or None, last PSN or None, lo, kind, bytes, pkts, mtu, dmalen, frame, ts]
        self.open: list[list[Any]] = []
        # Reassembly in PSN order (flowrules, "messages"): packets waiting behind a hole in
        # key order (``_Held``), ``base`` the PSN keys count from; the highest PSN reassembled
        # (-1: none) and the PSN below which holes are no longer waited for (-1: none).
        self.held: list[_Held] = []
        self.base = 0
        self.hi = self.floor = -1

    def hold(self, psn, pos, kind, plen, dmalen, fn, ts):
        """Put a packet among the waiting ones, in key order; 1 when that PSN waits already
        (nothing changes: twice "new" only after PSN jumps the tracker cannot order)."""
        held = self.held
        if not held:
            self.base = psn
        key = _psn_diff(psn, self.base)
        i = len(held)
        while i > 0:  # from the end: a packet held is most often the newest
            e = held[i - 1]
            if e.key < key:
                break
            if e.key == key:
                return 1
            i -= 1
        e = _Held.__new__(_Held)  # (its fields set here: no arguments to convert)
        e.key, e.psn, e.pos, e.kind = key, psn, pos, kind
        e.plen, e.dmalen, e.fn, e.ts = plen, dmalen, fn, ts
        held.insert(i, e)
        return 0


class _Ring:
    """Waiting requests of one flow in PSN order, oldest first (flowrules, "completion
    times"): a word (PSN and flags) and a time each, in a ring of ``cap`` slots (a power of
    two) that doubles when full, up to ``_MAX_OUTSTANDING``."""

    __slots__ = ("w", "t", "head", "n", "cap")

    def __init__(self) -> None:
        self.cap = 8
        self.w = array("q", [0]) * 8
        self.t = array("q", [0]) * 8
        self.head = self.n = 0

    def word(self, i):
        return self.w[(self.head + i) & (self.cap - 1)]

    def time(self, i):
        return self.t[(self.head + i) & (self.cap - 1)]

    def set_word(self, i, w):
        self.w[(self.head + i) & (self.cap - 1)] = w
        return 0

    def set_time(self, i, t):
        self.t[(self.head + i) & (self.cap - 1)] = t
        return 0

    def pop(self):
        """The oldest entry goes."""
        self.head = (self.head + 1) & (self.cap - 1)
        self.n -= 1
        return 0

    def insert(self, i, w, t):
        """An entry at position ``i`` (0 .. n), the later ones moved up; the caller keeps
        ``n`` below ``_MAX_OUTSTANDING``."""
        if self.n == self.cap:
            self._grow()
        mask = self.cap - 1
        j = self.n
        while j > i:
            self.w[(self.head + j) & mask] = self.w[(self.head + j - 1) & mask]
            self.t[(self.head + j) & mask] = self.t[(self.head + j - 1) & mask]
            j -= 1
        self.w[(self.head + i) & mask] = w
        self.t[(self.head + i) & mask] = t
        self.n += 1
        return 0

    def _grow(self):
        cap = self.cap * 2
        w = array("q", [0]) * cap
        t = array("q", [0]) * cap
        for k in range(self.n):
            w[k] = self.word(k)
            t[k] = self.time(k)
        self.w, self.t, self.cap, self.head = w, t, cap, 0
        return 0

    def find(self, psn):
        """The position of the first entry whose PSN is not below ``psn`` (``n``: none),
        PSNs ordered from the oldest entry's."""
        lo = 0
        hi = self.n
        if hi == 0:
            return 0
        base = self.word(0) & _PSN_MASK
        key = _psn_diff(psn, base)
        while lo < hi:
            mid = (lo + hi) >> 1
            if _psn_diff(self.word(mid) & _PSN_MASK, base) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo


def _log2(v):
    """The exponent of the power of two at or below ``v`` (> 0)."""
    n = 0
    if v >= _WRAP32:
        v >>= 32
        n += 32
    if v >= 65536:
        v >>= 16
        n += 16
    if v >= 256:
        v >>= 8
        n += 8
    if v >= 16:
        v >>= 4
        n += 4
    if v >= 4:
        v >>= 2
        n += 2
    if v >= 2:
        n += 1
    return n


def _bucket(v):
    """The latency histogram's bucket of ``v`` ns (flowrules, "latency histogram"): ``v``
    itself below 2^_LSUB_BITS, then _LSUB buckets per power of two."""
    if v < _LSUB:
        return v
    e = _log2(v)
    return ((e - _LSUB_BITS + 1) << _LSUB_BITS) + (v >> (e - _LSUB_BITS)) - _LSUB


def _bucket_low(k):
    """The smallest value of bucket ``k``."""
    if k < _LSUB:
        return k
    e = (k >> _LSUB_BITS) + _LSUB_BITS - 1
    return (_LSUB + (k & (_LSUB - 1))) << (e - _LSUB_BITS)


def _bucket_width(k):
    """How many values bucket ``k`` holds."""
    if k < _LSUB:
        return 1
    return 1 << ((k >> _LSUB_BITS) - 1)


class _Hist:
    """Latencies in ns (flowrules, "latency histogram"): how many, the least and the most,
    and counts by bucket from bucket ``lo``, over the buckets met so far; while there are at
    most ``_LEXACT``, the values themselves too, in order (``ex``, room for ``excap``)."""

    __slots__ = ("n", "least", "most", "lo", "size", "b", "ex", "excap")

    def __init__(self) -> None:
        self.n = self.least = self.most = 0
        self.lo = self.size = self.excap = 0
        self.b = array("q")
        self.ex = array("q")

    def add(self, v, count):
        """``count`` values of ``v`` ns."""
        if self.n == 0 or v < self.least:
            self.least = v
        if self.n == 0 or v > self.most:
            self.most = v
        if self.n + count <= _LEXACT:
            for k in range(count):
                self._keep(self.n + k, v)
        self.n += count
        k = _bucket(v)
        if k < self.lo or k >= self.lo + self.size:
            self._widen(k)
        self.b[k - self.lo] += count
        return 0

    def _widen(self, k):
        """Room for bucket ``k``: from a power of two's first bucket to one's last."""
        lo = k if self.size == 0 or k < self.lo else self.lo
        hi = k + 1 if self.size == 0 or k >= self.lo + self.size else self.lo + self.size
        lo -= lo & (_LSUB - 1)
        hi += (_LSUB - (hi & (_LSUB - 1))) & (_LSUB - 1)
        if hi > _LBUCKETS:
            hi = _LBUCKETS
        b = array("q", [0]) * (hi - lo)
        for j in range(self.size):
            b[self.lo - lo + j] = self.b[j]
        self.b, self.lo, self.size = b, lo, hi - lo
        return 0

    def _keep(self, i, v):
        """``v`` into the values kept in order, of which there are ``i``."""
        if i == self.excap:
            cap = 4 if self.excap == 0 else 2 * self.excap
            if cap > _LEXACT:
                cap = _LEXACT
            e = array("q", [0]) * cap
            for j in range(i):
                e[j] = self.ex[j]
            self.ex, self.excap = e, cap
        j = i
        while j > 0 and self.ex[j - 1] > v:
            self.ex[j] = self.ex[j - 1]
            j -= 1
        self.ex[j] = v
        return 0

    def merge(self, other):
        """Add the values of ``other``."""
        if other.n == 0:
            return 0
        if self.n == 0 or other.least < self.least:
            self.least = other.least
        if self.n == 0 or other.most > self.most:
            self.most = other.most
        if self.n + other.n <= _LEXACT:
            for j in range(other.n):
                self._keep(self.n + j, other.ex[j])
        self.n += other.n
        if self.size == 0 or other.lo < self.lo:
            self._widen(other.lo)
        if other.lo + other.size > self.lo + self.size:
            self._widen(other.lo + other.size - 1)
        for j in range(other.size):
            self.b[other.lo - self.lo + j] += other.b[j]
        return 0

    def quantile(self, num, den):
        """The nearest-rank quantile ``num / den``: the value of rank ceil(n * num / den)
        while the values are kept, else the middle of the bucket that holds that rank, within
        the least and the most (themselves at the first and the last rank)."""
        rank = (self.n * num + den - 1) // den
        if self.n <= _LEXACT:
            return self.ex[rank - 1 if rank > 0 else 0]
        if rank <= 1:
            return self.least
        if rank >= self.n:
            return self.most
        seen = 0
        for j in range(self.size):
            seen += self.b[j]
            if seen >= rank:
                k = self.lo + j
                v = _bucket_low(k) + (_bucket_width(k) >> 1)
                return min(max(v, self.least), self.most)
        return self.most

    def state(self):
        """The histogram as plain data, for reports of several captures whose percentiles
        need every capture's values together (``roce.analysis.flows.merged_latency``)."""
        kept = self.n if self.n <= _LEXACT else 0
        return {"n": self.n, "least": self.least, "most": self.most, "lo": self.lo,
                "b": [self.b[j] for j in range(self.size)],
                "ex": [self.ex[j] for j in range(kept)]}

    def load(self, state):
        """Take the values of ``state`` (``state()``'s plain data) in place of its own."""
        self.n, self.least, self.most = state["n"], state["least"], state["most"]
        self.lo, self.size = state["lo"], len(state["b"])
        self.b = array("q", state["b"])
        self.ex, self.excap = array("q", state["ex"]), len(state["ex"])
        return 0

    def summary(self) -> dict[str, int] | None:
        """min, p50, p99, max in ns (None: no values)."""
        if self.n == 0:
            return None
        return {"min": self.least, "p50": self.quantile(50, 100),
                "p99": self.quantile(99, 100), "max": self.most}


def merged_latency(hists):
    """The summaries of several reports' ``latency_hists`` merged (run interpreted: the
    totals of several captures, ``roce.analysis.flows.merged_latency``)."""
    out = {}
    for key in ("completion_ns", "ack_rtt_ns"):
        total = _Hist()
        for h in hists:
            if h.get(key):
                one = _Hist()
                one.load(h[key])
                total.merge(one)
        out[key] = total.summary()
    return out


class _Timing:
    """A flow's requests waiting for their acknowledgement and what came of them (flowrules,
    "completion times", "ACK round-trip times"); made at its first request of a transport
    with acknowledgements."""

    __slots__ = ("msgs", "probes", "aside", "cov", "hi", "mct", "rtt")

    def __init__(self) -> None:
        self.msgs = _Ring()  # waiting messages
        self.probes = _Ring()  # waiting probe packets (AckReq, a message's last)
        # READs and atomics an acknowledgement passed before their response: [first PSN,
        # end PSN, time], waiting for their response (an implied NAK resends them)
        self.aside: list[list[int]] = []
        self.cov = -1  # every PSN before it acknowledged (-1: nothing yet)
        self.hi = -1  # the PSN after the highest request PSN (a READ's at its largest)
        self.mct, self.rtt = _Hist(), _Hist()


class _Flow:
    """One flow and the engine's working state for it; ``finish`` makes a
    ``flowmodel.Flow`` of it."""

    __slots__ = ("id", "l3", "addr", "qp", "hash", "path", "first_ts", "last_ts", "req", "rsp",
                 "req_first", "rsp_first", "rsp_last", "c", "stats", "naks", "rnr",
                 "has_pending", "pend_fn", "pend_psn", "pend_dmalen", "pend_ts", "reqmsg",
                 "rspmsg", "b_open", "b_first", "b_ts", "b_last", "b_count", "b_lo", "b_hi",
                 "ack_msn", "nak_psn", "acked", "sacks", "back", "tm", "ack_of", "acked_by")

    def __init__(self, fid, l3, addr, qp, h, path) -> None:
        self.id, self.l3, self.addr, self.qp, self.hash, self.path = fid, l3, addr, qp, h, path
        self.first_ts = self.last_ts = -1
        self.req = self.rsp = None  # PSN trackers of its requests / READ responses, atomic ACKs
        self.req_first = self.rsp_first = self.rsp_last = -1  # PSNs, for pairing
        self.c = _zeros(_MAX_COUNTERS)  # flowrules.COUNTERS, in its order
        self.stats = _zeros(4 * _MAX_KINDS)  # by message kind: count, bytes, min, max size
        self.naks = _zeros(_NCODES)  # by NAK code
        self.rnr = _zeros(_NCODES)  # by RNR timer code
        # a READ not yet sequenced (its PSN count waits for the next request)
        self.has_pending = False
        self.pend_fn = self.pend_psn = self.pend_dmalen = self.pend_ts = 0
        self.reqmsg, self.rspmsg = _Msgs(), _Msgs()
        # Open runs of retransmissions (flowrules, "retransmission bursts"), by side: the
        # requests, the responses and the spurious request retransmissions (_SPURIOUS): open,
        # first and last frame, the first's time, packets, first and last PSN.
        self.b_open, self.b_first, self.b_ts, self.b_last = _zeros(3), _zeros(3), _zeros(3), \
            _zeros(3)
        self.b_count, self.b_lo, self.b_hi = _zeros(3), _zeros(3), _zeros(3)
        self.ack_msn = self.nak_psn = -1  # last ACK's MSN, last sequence NAK's PSN, -1: none
        # flowrules, "acknowledged PSNs": the cumulative acknowledgement (-1: none yet) and
        # the selectively acknowledged PSNs, SACK_AHEAD bits by PSN % SACK_AHEAD, made at the
        # first selective NAK
        self.acked = -1
        self.sacks: bytearray | None = None
        self.back: list[_Flow] = []  # the flows the other way between the same addresses
        # flowrules, "completion times": the requests waiting for acknowledgement (made at
        # the first request that will get one); the flow whose requests this one's responses
        # answer, and the flow whose responses answer this one's requests ("answering flow")
        self.tm: _Timing | None = None
        self.ack_of: _Flow | None = None
        self.acked_by: _Flow | None = None

    def counters(self) -> list[int]:
        return [self.c[k] for k in range(_NC)]

    def message_stats(self) -> dict[int, list[int]]:
        """kind -> [count, bytes, min size, max size]"""
        return {k: [self.stats[4 * k + j] for j in range(4)] for k in range(_NKINDS)
                if self.stats[4 * k]}

    def nak_counts(self) -> dict[int, int]:
        return {c: self.naks[c] for c in range(_NCODES) if self.naks[c]}

    def rnr_counts(self) -> dict[int, int]:
        return {c: self.rnr[c] for c in range(_NCODES) if self.rnr[c]}


def _burst_start(f, side, fn, ts, psn):
    """A run of retransmissions opens at ``psn``."""
    f.b_open[side] = 1
    f.b_first[side] = f.b_last[side] = fn
    f.b_ts[side] = ts
    f.b_lo[side] = f.b_hi[side] = psn
    f.b_count[side] = 1


def _burst_extends(f, side, fn, psn):
    """The next PSN of the open run joins it (True); any other does not."""
    if psn != ((f.b_hi[side] + 1) & _PSN_MASK):
        return False
    f.b_last[side] = fn
    f.b_hi[side] = psn
    f.b_count[side] += 1
    return True


def _start(st, kind, has_first, psn, plen, dmalen, fn, ts):
    st.kind = kind
    st.has_first = has_first
    st.first = st.lo = psn
    st.nbytes = plen
    st.pkts = 1
    st.mtu = plen if has_first else 0
    st.dmalen = dmalen
    st.frame = fn
    st.ts = ts


def _note_rsp_psn(f, psn):
    if f.rsp_first < 0:
        f.rsp_first = psn
    f.rsp_last = psn


def _is_write(kind):
    return kind == _K_WRITE or kind == _K_WRITE_IMM


# -- acknowledged PSNs (flowrules, "acknowledged PSNs", "spurious retransmissions") -----------

def _ack_to(f, psn):
    """The cumulative acknowledgement moves forward to ``psn`` (never back); selective marks
    it passes are cleared, so the bitmap only holds PSNs ahead of it."""
    if f.acked >= 0:
        d = _psn_diff(psn, f.acked)
        if d <= 0:
            return
        sacks = f.sacks
        if sacks is not None:
            if d >= _SACK_AHEAD:
                for i in range(_SACK_AHEAD // 8):
                    sacks[i] = 0
            else:
                for i in range(d):
                    q = (f.acked + i) & (_SACK_AHEAD - 1)
                    sacks[q >> 3] &= ~(1 << (q & 7)) & 0xFF
    f.acked = psn


def _sack(f, psn):
    """A selective NAK named ``psn`` (after its ePSN moved the cumulative one)."""
    d = _psn_diff(psn, f.acked)
    if 0 < d < _SACK_AHEAD:
        if f.sacks is None:
            f.sacks = bytearray(_SACK_AHEAD // 8)
        q = psn & (_SACK_AHEAD - 1)
        f.sacks[q >> 3] |= 1 << (q & 7)


def _nak_below_start(f, psn):
    """A sequence NAK's ePSN a little below the first PSN of the one flow it answers
    (flowrules, "request PSNs"): that flow started there, the PSN is missing."""
    x = None
    for c in f.back:
        t = c.req
        if t is not None and t.early:
            d = _psn_diff(t.first, psn)
            if 0 < d <= t.early:
                if x is not None:
                    return  # two candidates: ambiguous
                x = c
    if x is not None and x.req.start_at(psn):
        x.req_first = psn


def _acknowledged(x, psn):
    """Had the flow answering ``x``'s requests acknowledged ``psn``?"""
    y = None
    for c in x.back:
        if c.acked >= 0 and _psn_diff(c.acked, x.req_first) >= 0 and \
                _psn_diff(x.req.next, c.acked) >= 0:
            if y is not None:
                return False  # two candidates: ambiguous
            y = c
    if y is None:
        return False
    d = _psn_diff(psn, y.acked)
    if d < 0:
        return True
    q = psn & (_SACK_AHEAD - 1)
    return d < _SACK_AHEAD and y.sacks is not None and ((y.sacks[q >> 3] >> (q & 7)) & 1) == 1


# -- completion and round-trip times (flowrules, "completion times", "ACK round-trip times") --

def _elapsed(t0, ts):
    """``ts - t0`` ns, 0 when the capture's clock went back, within 64 bits."""
    if t0 >= ts:
        return 0
    if t0 < 0 and ts > _I64_MAX + t0:
        return _I64_MAX
    return ts - t0


def _time_request(f, psn, pos, cls, ackreq, dup, dmalen, ts):
    """A request of flow ``f`` (of a transport with acknowledgements) into its waiting
    messages and probes; ``dup`` 1 when the tracker found it a retransmission, 0 when not, 2
    when not yet known (a READ waiting to be sequenced)."""
    tm = f.tm
    if tm is None:
        tm = f.tm = _Timing()
    n = 1
    if cls == _C_READ and dmalen > 0:
        # as far as the path's MTU takes it: the largest First/Middle payload seen, never
        # above the path MTU (the smallest MTU while none was seen)
        m = f.path.mtu if f.path.mtu > 0 else _MIN_MTU
        n = (dmalen + m - 1) // m
        if n > _MAX_READ_PSNS:
            n = _MAX_READ_PSNS
    end = (psn + n) & _PSN_MASK
    if tm.hi < 0 or _psn_diff(end, tm.hi) > 0:
        tm.hi = end
    if tm.cov >= 0 and _psn_diff(psn, tm.cov) < 0:
        return 0  # acknowledged already: nothing waits for it
    last = pos == _P_LAST or pos == _P_ONLY or cls != _C_DATA
    if dup == 2:  # a READ: asked again when its message waits already
        dup = 1 if _waits(tm.msgs, psn) else 0
    if dup == 0:
        if cls != _C_DATA or pos == _P_FIRST or pos == _P_ONLY:
            _msg_head(f, tm, psn, cls, pos, ts)
        else:
            _msg_part(f, tm, psn, pos == _P_LAST, ts)
    if last or ackreq or dup:
        _probe(tm, psn, dup, ts)
    return 0


def _extends(f, psn):
    """Is the request at ``psn`` the next packet of flow ``f``'s newest waiting message,
    still open?  Then it only moves the highest PSN (the usual packet: ``_time_request``
    is not called)."""
    return (f.tm is not None and f.tm.hi == psn and f.tm.msgs.n > 0
            and not f.tm.msgs.word(f.tm.msgs.n - 1) & _W_ENDED)


def _only_covers(y, c):
    """Does a response of flow ``y`` covering the PSNs before ``c``, not the last of a READ,
    only move the coverage of the flow it answers: within its range and past its coverage,
    with no waiting message ending and no probe before ``c``?  (The usual READ response
    Middle: ``_time_response`` is not called.)"""
    return (y.ack_of is not None and y.ack_of.tm.cov >= 0
            and _psn_diff(c, y.ack_of.tm.cov) > 0 and _psn_diff(y.ack_of.tm.hi, c) >= 0
            and (y.ack_of.tm.msgs.n == 0
                 or not y.ack_of.tm.msgs.word(0) & _W_ENDED
                 or _psn_diff(c, (y.ack_of.tm.msgs.word(0) >> _W_END_SHIFT) & _PSN_MASK) < 0)
            and (y.ack_of.tm.probes.n == 0
                 or _psn_diff(c, y.ack_of.tm.probes.word(0) & _PSN_MASK) <= 0))


def _waits(r, psn):
    """Is an entry of ``r`` at ``psn``?"""
    i = r.find(psn)
    return i < r.n and (r.word(i) & _PSN_MASK) == psn


def _msg_head(f, tm, psn, cls, pos, ts):
    """A message starts at ``psn`` (seen for the first time)."""
    r = tm.msgs
    w = psn
    if cls == _C_READ or cls == _C_ATOMIC:
        w |= _W_OWN_RESPONSE
    if cls != _C_READ and (cls != _C_DATA or pos == _P_ONLY):  # one PSN: it ends here
        w |= _W_ENDED | (((psn + 1) & _PSN_MASK) << _W_END_SHIFT)
    if r.n == 0 or _psn_diff(psn, r.word(r.n - 1) & _PSN_MASK) > 0:
        # past every waiting message, the usual case: the newest one ends here if it had not
        if r.n:
            b = r.word(r.n - 1)
            if not b & _W_ENDED:
                r.set_word(r.n - 1, b | _W_ENDED | (psn << _W_END_SHIFT))
        _push(f, tm, r.n, w, ts)
        return 0
    i = r.find(psn)
    if i < r.n and (r.word(i) & _PSN_MASK) == psn:
        return 0  # a copy of a head seen
    # a late head, below the newest message: the messages around it end where they meet it
    if i > 0:
        p = r.word(i - 1)
        if not p & _W_ENDED or _psn_diff((p >> _W_END_SHIFT) & _PSN_MASK, psn) > 0:
            r.set_word(i - 1, (p & ~_W_END_MASK) | _W_ENDED | (psn << _W_END_SHIFT))
    if i < r.n:
        nxt = r.word(i)
        if nxt & _W_HEADLESS and not w & _W_ENDED:
            # the head of the message whose later packets came first: it starts here, at
            # the earlier of the two times
            r.set_word(i, (nxt & ~(_W_HEADLESS | _PSN_MASK)) | psn)
            if ts < r.time(i):
                r.set_time(i, ts)
            return 0
        if not w & _W_ENDED:
            w |= _W_ENDED | ((nxt & _PSN_MASK) << _W_END_SHIFT)
    _push(f, tm, i, w, ts)
    return 0


def _msg_part(f, tm, psn, last, ts):
    """A Middle or Last seen for the first time: it ends the newest message at a Last, or
    starts one whose head was not seen."""
    r = tm.msgs
    if r.n:
        b = r.word(r.n - 1)
        if _psn_diff(psn, b & _PSN_MASK) <= 0:
            return 0  # below the newest message's start: a late piece of a known message
        if not b & _W_ENDED:
            if last:
                r.set_word(r.n - 1, b | _W_ENDED | (((psn + 1) & _PSN_MASK) << _W_END_SHIFT))
            return 0
        if _psn_diff(psn, (b >> _W_END_SHIFT) & _PSN_MASK) < 0:
            return 0  # inside the newest message
    w = psn | _W_HEADLESS
    if last:
        w |= _W_ENDED | (((psn + 1) & _PSN_MASK) << _W_END_SHIFT)
    _push(f, tm, r.n, w, ts)
    return 0


def _push(f, tm, i, w, ts):
    """A message into the waiting ones at position ``i``; when ``_MAX_OUTSTANDING`` wait,
    the oldest is counted unacknowledged."""
    r = tm.msgs
    if r.n == _MAX_OUTSTANDING:
        if i == 0:  # older than every one waiting: it is that oldest
            if not w & _W_HEADLESS:
                f.c[_CT_UNACKED] += 1
            return 0
        if not r.word(0) & _W_HEADLESS:
            f.c[_CT_UNACKED] += 1
        r.pop()
        i -= 1
    r.insert(i, w, ts)
    return 0


def _probe(tm, psn, dup, ts):
    """A probe packet at ``psn`` (its first sighting, ``dup`` 0), or a retransmission of
    one: that one gives no sample (Karn's rule)."""
    r = tm.probes
    if r.n == 0 or _psn_diff(psn, r.word(r.n - 1) & _PSN_MASK) > 0:
        i = r.n
    else:
        i = r.find(psn)
        if i < r.n and (r.word(i) & _PSN_MASK) == psn:
            r.set_word(i, r.word(i) | _W_RETX)
            return 0
    if dup:
        return 0  # a retransmission of a packet that is no probe
    if r.n == _MAX_OUTSTANDING:
        if i == 0:
            return 0
        r.pop()
        i -= 1
    r.insert(i, psn, ts)
    return 0


def _answered(y, c):
    """The flow whose requests the responses of ``y`` answer, by a response covering the
    PSNs before ``c`` (flowrules, "answering flow"); None when none or two explain it."""
    x = y.ack_of
    if x is not None:
        tm = x.tm
        if tm.cov >= 0 and _psn_diff(c, tm.cov) > 0 and _psn_diff(tm.hi, c) >= 0:
            return x  # the usual response: it moves the coverage, within what was sent
        if _explains(tm, c) >= 0:
            return x
    z = None
    for cand in y.back:
        if cand is x or cand is y or cand.acked_by is not None or cand.tm is None:
            continue
        if _explains(cand.tm, c) > 0:
            if z is not None:
                return x  # two candidates: the link stays as it is
            z = cand
    if z is None:
        return x
    if x is not None:
        x.acked_by = None
    y.ack_of = z
    z.acked_by = y
    return z


def _explains(tm, c):
    """Does a response covering the PSNs before ``c`` answer the requests waiting in
    ``tm``: 1 yes, 0 nothing waits, -1 no."""
    r = tm.msgs
    if r.n:
        lo = r.word(0) & _PSN_MASK
    elif tm.probes.n:
        lo = tm.probes.word(0) & _PSN_MASK
    elif tm.aside:
        lo = tm.aside[0][0]
    else:
        return 0
    if tm.probes.n and _psn_diff(tm.probes.word(0) & _PSN_MASK, lo) < 0:
        lo = tm.probes.word(0) & _PSN_MASK
    if tm.aside and _psn_diff(tm.aside[0][0], lo) < 0:
        lo = tm.aside[0][0]
    if _psn_diff(c, lo) > 0 and _psn_diff(tm.hi, c) >= 0:
        return 1
    return -1


def _time_response(y, c, done, ts):
    """A response on flow ``y`` acknowledging every request PSN before ``c``; ``done`` the
    PSN of a READ's last response or of an atomic ACK (-1: neither), which completes that
    READ or atomic."""
    x = _answered(y, c)
    if x is None:
        return 0
    tm = x.tm
    if tm is None:
        return 0
    if tm.cov < 0 or _psn_diff(c, tm.cov) > 0:
        tm.cov = c
    r = tm.msgs
    while r.n:
        w = r.word(0)
        if not w & _W_ENDED:
            if done >= 0 and w & _W_OWN_RESPONSE and _psn_diff(done, w & _PSN_MASK) >= 0:
                w |= _W_ENDED | (((done + 1) & _PSN_MASK) << _W_END_SHIFT)  # a READ's last
            else:
                break
        end = (w >> _W_END_SHIFT) & _PSN_MASK
        if _psn_diff(c, end) < 0:
            break
        t0 = r.time(0)
        r.pop()
        if w & _W_HEADLESS:
            continue
        if w & _W_OWN_RESPONSE and not (done >= 0 and end == ((done + 1) & _PSN_MASK)):
            # passed without its own response: it waits for one (an implied NAK)
            tm.aside.append([w & _PSN_MASK, end, t0])
            if len(tm.aside) > _MAX_OUTSTANDING:
                tm.aside.pop(0)
                x.c[_CT_UNACKED] += 1
            continue
        tm.mct.add(_elapsed(t0, ts), 1)
        x.c[_CT_TIMED] += 1
    if done >= 0 and tm.aside:
        for j in range(len(tm.aside)):
            e = tm.aside[j]
            if e[1] == ((done + 1) & _PSN_MASK):
                del tm.aside[j]
                tm.mct.add(_elapsed(e[2], ts), 1)
                x.c[_CT_TIMED] += 1
                break
    r = tm.probes
    while r.n:
        w = r.word(0)
        if _psn_diff(c, w & _PSN_MASK) <= 0:
            break
        t0 = r.time(0)
        r.pop()
        if w & _W_RETX:
            x.c[_CT_RTT_EXCLUDED] += 1
        else:
            tm.rtt.add(_elapsed(t0, ts), 1)
            x.c[_CT_RTT] += 1
    return 0


def _unacknowledged(f):
    """The end: the messages still waiting were never acknowledged (those whose head was not
    seen are not counted)."""
    tm = f.tm
    r = tm.msgs
    for i in range(r.n):
        if not r.word(i) & _W_HEADLESS:
            f.c[_CT_UNACKED] += 1
    f.c[_CT_UNACKED] += len(tm.aside)
    return 0


# -- the engine ---------------------------------------------------------------------------------

class Analyzer:
    """Streaming analyser: ``feed`` frames, ``feed_batch`` or ``feed_capture`` (any number of
    times), then ``finish``."""

    __slots__ = ("udp_port", "batch", "store", "ev_cap", "frames", "not_roce",
                 "malformed_unattributed", "truncated_unattributed", "first_ts", "last_ts",
                 "flows", "events", "lines", "slots", "cap", "used", "last", "last2", "paths",
                 "by_addr", "_report")

    def __init__(self, udp_port: int = locate.ROCE_PORT, batch: int = R.BATCH,
                 max_events: int = R.MAX_EVENTS_PER_KIND) -> None:
        self.udp_port = udp_port
        self.batch = max(1, batch)
        self.store = EventStore(max_events)  # counts events, keeps the first lines per kind
        self.ev_cap = self.store.cap
        self.frames = self.not_roce = self.malformed_unattributed = 0
        self.truncated_unattributed = 0
        self.first_ts = self.last_ts = -1
        self.flows: list[_Flow] = []
        self.events: list[Event] = []  # filled by finish()
        self.lines = _zeros(_MAX_EVENTS)  # lines made per event kind
        # The flow table: open addressing, flow numbers by their key's hash (-1: empty).
        self.cap = 64
        self.slots = array("i", [-1]) * self.cap
        self.used = 0
        self.last: _Flow | None = None  # the flow the table found last
        self.last2: _Flow | None = None  # and the one before it
        self.paths: dict[tuple[int, bytes], _Path] = {}
        self.by_addr: dict[tuple[int, bytes], list[_Flow]] = {}  # (l3, src+dst) -> flows
        self._report: Report | None = None

    # -- input ------------------------------------------------------------------------------

    def feed(self, frames: Iterable[Any]) -> None:
        """Analyse frames: ``pcapio.Frame`` objects or bytes (Ethernet, timestamp 0)."""
        for datas, tss, caps, lens, linktype in frame_columns(frames, self.batch):
            self.feed_frames(datas, tss, caps, lens, _link(linktype))

    def feed_batch(self, batch: Any) -> None:
        """Analyse one ``pcapio.Batch`` (frames of one link type as columns)."""
        self.feed_frames(batch.datas, batch.ts_ns, batch.caplen, batch.origlen,
                         _link(batch.linktype))

    def feed_capture(self, reader: Any,
                     progress: Callable[[int, int | None], None] | None = None) -> None:
        """Analyse what is left of a ``CaptureReader``; ``progress(frames so far, stream
        offset or None)`` is called now and then.  A classic pcap is read in place, record by
        record; anything else batch by batch."""
        if reader.can_scan_records():
            for offset in reader.scan_records(self._consume):
                if progress is not None:
                    progress(self.frames, offset)
            return
        for batch in reader.batches(self.batch):
            self.feed_batch(batch)
            if progress is not None:
                progress(self.frames, None)

    def _consume(self, buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                 linktype: int) -> tuple[int, int]:
        return self.feed_pcap(buf, pos, end, big_endian, frac_mul, _link(linktype), MAX_RECORD)

    def feed_frames(self, datas, ts_ns, caplen, origlen, linktype):
        """Frames as columns (``pcapio.Batch``'s), ``linktype`` a walk code; ``caplen`` None
        when unknown (plain bytes)."""
        for i in range(len(datas)):
            data = datas[i]
            if not isinstance(data, bytes):
                data = bytes(data)
            ts = ts_ns[i]
            if not _I64_MIN <= ts <= _I64_MAX:  # (compiled: the conversion above raises)
                raise OverflowError(f"flow analysis: timestamp {ts} ns out of 64 bits")
            self._frame(data, data, len(data), caplen is not None, origlen[i], ts, linktype)

    def feed_pcap(self, buf, pos, end, big_endian, frac_mul, linktype, max_record):
        """Classic pcap records found whole in ``buf[pos:end]``, analysed where they lie.
        Returns (new pos, status): 0 stopped before an incomplete record (or at the end), 1
        before a record longer than ``max_record``."""
        if pos < 0:
            raise ValueError("feed_pcap: negative position")
        if end > len(buf):
            end = len(buf)
        while end - pos >= 16:
            if cython.compiled:
                q = cython.address(buf[pos])  # the record, where it lies
            else:
                q = bytes(buf[pos:pos + 16])  # its header, copied
            caplen = _u32_pcap(q, 8, big_endian)
            if caplen > max_record:
                return pos, 1
            if end - pos - 16 < caplen:
                break
            ts = _u32_pcap(q, 0, big_endian) * _NS + _u32_pcap(q, 4, big_endian) * frac_mul
            if cython.compiled:
                p = q + 16
            else:
                p = bytes(buf[pos + 16:pos + 16 + caplen])
            self._frame(None, p, caplen, True, _u32_pcap(q, 12, big_endian), ts, linktype)
            pos += 16 + caplen
        return pos, 0

    # -- one frame --------------------------------------------------------------------------

    def _frame(self, obj, p, n, have_caps, origlen, ts, linktype):
        """One frame, ``n`` bytes at ``p`` (``obj``: the frame as bytes, None when read in
        place): walked, checked, given to its flow."""
        self.frames += 1
        fn = self.frames
        if self.first_ts < 0:
            self.first_ts = ts
        self.last_ts = ts
        w = _walk(p, n, linktype, self.udp_port)
        st = w.status
        bth = w.bth_off
        l3k = w.l3_kind
        l3o = w.l3_off
        bad = truncated = False
        if st == _OK:
            op = w.opcode
            plen = w.pad_off - w.payload_off
        elif st < _FIRST_BAD:
            self.not_roce += 1
            return 0
        else:
            # Malformed: counted, and given to its flow when its addresses and BTH are
            # readable, so that its PSN is still sequenced (flowrules, "bad frames").
            snapped = have_caps and n < origlen and (st == _BAD_TRUNCATED or
                                                     st == _BAD_L3_LENGTH)
            if not (0 <= l3k < _NL3 and _SPAN[l3k] > 0 and l3o >= 0 and bth >= 0
                    and n >= bth + _SZ_BTH and n >= l3o + _SPAN[l3k]
                    and _field(p, bth, _F_TVER) == 0 and _VALID[_field(p, bth, _F_OPCODE)]):
                if snapped:
                    self.truncated_unattributed += 1
                else:
                    self.malformed_unattributed += 1
                    # the text only for an event that is kept: a capture may hold millions
                    # of alike malformed frames (zero-length records)
                    self._event(fn, ts, "malformed", None,
                                (self._malformed(obj, p, n, linktype),)
                                if self._stored("malformed", fn) else None)
                return 0
            op = _field(p, bth, _F_OPCODE)
            plen = 0
            s = _L3LEN[l3k]
            if snapped and w.payload_off >= 0 and st == _BAD_L3_LENGTH and s >= 0:
                # All headers were captured: the L3 length says how much payload there was.
                plen = (l3o + _L3LEN_X[l3k] + _field(p, l3o, s) * _L3LEN_U[l3k] - 4
                        - _field(p, bth, _F_PADCNT) - w.payload_off)
                if plen < 0:
                    plen = 0
            truncated = snapped
            bad = not snapped
        f = self._flow(p, l3o, l3k, _field(p, bth, _F_DESTQP))
        if f.first_ts < 0:
            f.first_ts = ts
        f.last_ts = ts
        if bad:  # malformed: sequenced, but no part of message reassembly
            self._event(fn, ts, "malformed", f, (self._malformed(obj, p, n, linktype),)
                        if self._stored("malformed", fn) else None)
        self._packet(f, p, n, w, fn, ts, op, plen, origlen, bad, truncated)
        return 0

    def _malformed(self, obj, p, n, linktype):
        """The text of a malformed event: why the walk failed, in words."""
        if obj is None:
            obj = p[:n]
        return R.malformed_text(fast.walk(obj, linktype, self.udp_port))

    def _flow(self, p, l3_off, l3, qp):
        """The frame's flow (a new one at its first frame): one of the last two found, or found
        in an open-addressing table of flow numbers by the hash of the key."""
        if _is_flow(self.last, p, l3_off, l3, qp):  # the two directions of a connection
            return self.last
        if _is_flow(self.last2, p, l3_off, l3, qp):
            return self.last2
        h = _hash(p, l3_off, l3, qp)
        mask = self.cap - 1
        i = h & mask
        while True:
            k = self.slots[i]
            if k < 0:
                f = self._new_flow(p, l3_off, l3, qp, h)
                break
            f = self.flows[k]
            if f.hash == h and _is_flow(f, p, l3_off, l3, qp):
                break
            i = (i + 1) & mask
        self.last2, self.last = self.last, f
        return f

    def _new_flow(self, p, l3_off, l3, qp, h):
        addr = _addr(p, l3_off, l3)
        half = len(addr) // 2
        rev = addr[half:] + addr[:half]
        pkey = (l3, min(addr, rev))
        path = self.paths.get(pkey)
        if path is None:
            path = self.paths[pkey] = _Path()
        f = _Flow(len(self.flows), l3, addr, qp, h, path)
        self.flows.append(f)
        self.by_addr.setdefault((l3, addr), []).append(f)
        f.back = self.by_addr.setdefault((l3, rev), [])
        if (self.used + 1) * 2 > self.cap:  # at most half full: grow, put every flow back
            self.cap *= 2
            self.slots = array("i", [-1]) * self.cap
            self.used = 0
            for g in self.flows:
                self._insert(g.id, g.hash)
        else:
            self._insert(f.id, h)
        return f

    def _insert(self, fid, h):
        mask = self.cap - 1
        i = h & mask
        while self.slots[i] >= 0:
            i = (i + 1) & mask
        self.slots[i] = fid
        self.used += 1

    # -- one packet -------------------------------------------------------------------------

    def _packet(self, f, p, n, w, fn, ts, op, plen, origlen, bad, truncated):
        """One packet of flow ``f``, its headers where ``w`` found them (``bad``: malformed;
        ``truncated``: cut by the snap length), by flowrules."""
        bth = w.bth_off
        l3o = w.l3_off
        psn = _field(p, bth, _F_PSN)
        # RETH DMA length, AETH syndrome and MSN when captured whole (-1: not).
        dmalen = syn = msn = -1
        s = _DMALEN[op]
        if s >= 0 and n >= bth + _S_NEED[s]:
            dmalen = _field(p, bth, s)
        s = _SYN[op]
        if s >= 0 and n >= bth + _S_NEED[s]:
            syn = _field(p, bth, s)
            msn = _field(p, bth, _MSN[op])
        cls = _CLS[op]
        pos = _POS[op]
        kind = _KIND[op]
        if truncated:
            f.c[_CT_TRUNCATED] += 1
        f.c[_CT_PACKETS] += 1
        f.c[_CT_BYTES] = _add(f.c[_CT_BYTES], origlen)
        f.c[_CT_PAYLOAD] += plen
        # flowrules "congestion marks": IP ECN CE, native InfiniBand's FECN
        if _marked(p, _CE * _NL3 + f.l3, l3o, bth):
            self._event(fn, ts, "ecn_ce", f, ())
        # a BECN on a CNP is the CNP, counted as one below
        if _marked(p, _BECN * _NL3 + f.l3, l3o, bth) and cls != _C_CNP:
            self._event(fn, ts, "becn", f, ())
        if w.status == _OK:  # (the ICRC cannot be computed over a partial frame)
            icrc = _icrc(p, w)
            icrc_stored = _u32(p, w.icrc_off)
            if icrc != icrc_stored:
                if self._stored("bad_icrc", fn):
                    self._event(fn, ts, "bad_icrc", f, (icrc_stored, icrc))
                else:
                    self._event(fn, ts, "bad_icrc", f, None)
            if f.l3 == _L3_LRH or f.l3 == _L3_LRH_GRH:
                # native InfiniBand: the VCRC after the ICRC, when captured (IBA 7.8.2)
                if n >= w.l4_end + _VCRC_SIZE:
                    calc = _vcrc(p, w.l4_end)
                    got = (p[w.l4_end] << 8) | p[w.l4_end + 1]
                    if calc != got:
                        self._event(fn, ts, "bad_vcrc", f, (got, calc))
        if cls <= _C_ONLYREQ:  # a request
            f.c[_CT_REQ_PAYLOAD] += plen
            if not _SEQ[op]:  # UD: counted, not sequenced
                f.c[_CT_UNIQUE] += plen
                self._complete(f, kind, plen, -1, fn, ts)
                return 0
            if f.req_first < 0:
                f.req_first = psn
            if f.has_pending:
                self._resolve_read(f, psn, True)
            timed = _ACKED[op] and not bad  # flowrules, "completion times"
            if cls == _C_READ and dmalen >= 0:
                # Its PSN count depends on the MTU: decide when the next request comes.
                f.has_pending = True
                f.pend_fn, f.pend_psn, f.pend_dmalen, f.pend_ts = fn, psn, dmalen, ts
                if timed:
                    _time_request(f, psn, pos, cls, _field(p, bth, _F_ACKREQ), 2, dmalen, ts)
                return 0
            ev = self._feed_req(f, psn, 1, fn, ts, cls == _C_READ)
            if timed:
                ackreq = _field(p, bth, _F_ACKREQ)
                if ev != _EV_DUPLICATE and pos == _P_MIDDLE and not ackreq and _extends(f, psn):
                    f.tm.hi = (psn + 1) & _PSN_MASK  # the usual packet: nothing else to do
                else:
                    _time_request(f, psn, pos, cls, ackreq, 1 if ev == _EV_DUPLICATE else 0,
                                  dmalen, ts)
            if ev == _EV_DUPLICATE:
                return 0
            f.c[_CT_UNIQUE] += plen
            if bad:
                return 0
            if cls == _C_DATA:
                self._reassemble(f, f.reqmsg, f.req, pos, kind, psn, plen, dmalen, fn, ts)
            elif cls == _C_READ:  # a READ whose RETH was not captured
                self._complete(f, kind, 0, -1, fn, ts)
            else:
                self._complete(f, kind, _ATOMIC_BYTES if cls == _C_ATOMIC else plen, -1, fn,
                               ts)
        elif cls == _C_ACK:
            _note_rsp_psn(f, psn)
            if syn < 0:  # AETH not captured
                return 0
            rule = _SYN_RULE[syn]
            v = _SYN_VALUE[syn]
            if not bad and (rule == _SYN_ACK or rule == _SYN_RNR or rule == _SYN_NAK):
                # flowrules, "completion times": an ACK covers its PSN, a NAK what lies before
                _time_response(f, (psn + 1) & _PSN_MASK if rule == _SYN_ACK else psn, -1, ts)
            if rule == _SYN_ACK:
                f.c[_CT_ACKS] += 1
                f.ack_msn = msn
                _ack_to(f, (psn + 1) & _PSN_MASK)
            elif rule == _SYN_RNR:
                f.rnr[v] += 1
                self._event(fn, ts, "rnr_nak", f, (_RNR_TEXTS[v], psn))
            elif rule == _SYN_NAK:
                selective = R.is_selective_nak(v, psn, msn, f.ack_msn, f.nak_psn)
                if v == R.NAK_PSN_SEQUENCE_ERROR:
                    f.nak_psn = psn
                    _ack_to(f, psn)
                    _nak_below_start(f, psn)
                if selective:
                    _sack(f, msn)
                    self._event(fn, ts, "selective_nak", f, (psn, msn))
                    return 0
                f.naks[v] += 1
                self._event(fn, ts, R.nak_event(v), f, (_NAK_TEXTS[v], msn, psn))
            else:
                self._event(fn, ts, "reserved_syndrome", f, (syn,))
        elif cls == _C_READ_RESP or cls == _C_ATOMIC_ACK:
            _note_rsp_psn(f, psn)
            f.c[_CT_RSP_PAYLOAD] += plen
            if cls == _C_ATOMIC_ACK:
                f.c[_CT_ATOMIC_ACKS] += 1
            if not bad:  # flowrules, "completion times": a READ's last response, an atomic's
                if pos == _P_MIDDLE and _only_covers(f, (psn + 1) & _PSN_MASK):
                    f.ack_of.tm.cov = (psn + 1) & _PSN_MASK  # the usual READ response
                else:
                    _time_response(f, (psn + 1) & _PSN_MASK, psn if cls == _C_ATOMIC_ACK or
                                   pos == _P_LAST or pos == _P_ONLY else -1, ts)
            t = f.rsp
            if t is None:
                t = f.rsp = fast.PSNTracker()
            elif t.started and (pos == _P_FIRST or pos == _P_ONLY):
                # A new response may skip PSNs used by requests without a data response.
                if _psn_diff(psn, t.next) > 0:
                    if psn < t.next:
                        t.wraps += 1
                    t.next = psn
            if self._feed(f, t, psn, 1, fn, ts, 1) == _EV_DUPLICATE:
                return 0
            f.c[_CT_UNIQUE] += plen
            if cls == _C_ATOMIC_ACK or bad:
                return 0
            self._reassemble(f, f.rspmsg, t, pos, kind, psn, plen, -1, fn, ts)
        else:  # CNP
            self._event(fn, ts, "cnp", f, ())
        return 0

    # -- PSN sequencing -----------------------------------------------------------------------

    def _feed_req(self, f, psn, count, fn, ts, read):
        t = f.req
        if t is None:
            t = f.req = fast.PSNTracker()
        elif t.early and _psn_diff(psn, t.first) < 0 and _acknowledged(f, psn):
            t.early = 0  # flowrules, "request PSNs": acknowledged, no late first arrival
        ev = self._feed(f, t, psn, count, fn, ts, 0)
        if ev == _EV_LATE:
            f.req_first = t.first  # a late first arrival moves the start back
        if ev == _EV_DUPLICATE and not read and _acknowledged(f, psn):
            if f.b_open[_SPURIOUS]:  # flowrules, "spurious retransmissions": runs fold
                if _burst_extends(f, _SPURIOUS, fn, psn):
                    return ev
                self._close_spurious(f)
            _burst_start(f, _SPURIOUS, fn, ts, psn)
        elif f.b_open[_SPURIOUS]:
            self._close_spurious(f)
        return ev

    def _close_spurious(self, f):
        s = _SPURIOUS
        f.b_open[s] = 0
        args = None
        if self._stored("spurious_retransmission", f.b_first[s]):
            args = (f.b_lo[s],)
            if f.b_count[s] > 1:
                args = (f.b_lo[s], f.b_hi[s], f.b_count[s])
        self._event(f.b_first[s], f.b_ts[s], "spurious_retransmission", f, args, f.b_count[s],
                    f.b_last[s] if f.b_count[s] > 1 else 0)
        return 0

    def _feed(self, f, t, psn, count, fn, ts, side):
        """Sequence one packet on tracker ``t`` (``side`` 0 requests, 1 responses); a
        retransmission opens or extends that tracker's burst, anything else ends it."""
        exp = t.next
        started = t.started
        ev = t.feed(psn, count)
        if ev == _EV_DUPLICATE:
            if f.b_open[side]:
                if _burst_extends(f, side, fn, psn):
                    return ev
                self._close_burst(f, side)
            _burst_start(f, side, fn, ts, psn)
            return ev
        if f.b_open[side]:
            self._close_burst(f, side)
        if ev > _EV_IN_ORDER and started:
            if ev == _EV_GAP:
                if self._stored("gap", fn):
                    self._event(fn, ts, "gap", f, (_SIDE_WORDS[side], exp, psn,
                                                   _psn_diff(psn, exp)))
                else:
                    self._event(fn, ts, "gap", f, None)
            elif ev == _EV_LATE:
                if self._stored("out_of_order", fn):
                    self._event(fn, ts, "out_of_order", f, (_SIDE_WORDS[side], psn))
                else:
                    self._event(fn, ts, "out_of_order", f, None)
        return ev

    def _close_burst(self, f, side):
        f.b_open[side] = 0
        n = f.b_count[side]
        if n == 1:  # flowrules, "retransmission bursts"
            f.c[_CT_RETX_SELECTIVE] += 1
        else:
            f.c[_CT_RETX_GO_BACK] += n
        args = None
        if self._stored("retransmission", f.b_first[side]):
            args = (_SIDE_WORDS[side], f.b_lo[side])
            if n > 1:
                args = (_SIDE_WORDS[side], f.b_lo[side], f.b_hi[side], n)
        self._event(f.b_first[side], f.b_ts[side], "retransmission", f, args, n,
                    f.b_last[side] if n > 1 else 0)
        return 0

    def _resolve_read(self, f, next_psn, have_next):
        """Sequence the pending READ now that the next request's PSN (or the end) is known."""
        fn, psn, dmalen, ts = f.pend_fn, f.pend_psn, f.pend_dmalen, f.pend_ts
        f.has_pending = False
        mtu = f.path.mtu
        m = mtu if mtu else _DEFAULT_MTU
        count = (dmalen + m - 1) // m
        if count < 1:
            count = 1
        if not mtu and have_next:
            d = _psn_diff(next_psn, psn)
            if d > 0:
                for k in range(len(_IB_MTUS)):
                    c = (dmalen + _IB_MTUS[k] - 1) // _IB_MTUS[k]
                    if (c if c > 1 else 1) == d:
                        count = d
                        break
        if count > _MAX_READ_PSNS:
            count = _MAX_READ_PSNS
        if self._feed_req(f, psn, count, fn, ts, True) != _EV_DUPLICATE:
            self._complete(f, _K_READ, dmalen, -1, fn, ts)
        return 0

    # -- message reassembly ---------------------------------------------------------------------

    def _reassemble(self, f, st, t, pos, kind, psn, plen, dmalen, fn, ts):
        """Reassemble in PSN order (flowrules, "messages"): a packet with a PSN missing below
        it waits (at most REORDER_HOLD per direction); what no longer waits goes on."""
        if not _no_holes(t) and t.missing_below(psn, st.floor):
            if st.hold(psn, pos, kind, plen, dmalen, fn, ts):
                return 0
            if len(st.held) <= _REORDER_HOLD:
                return 0
            e = st.held.pop(0)
            st.floor = e.psn  # give up on what is missing below the oldest waiting packet
            self._place(f, st, e.pos, e.kind, e.psn, e.plen, e.dmalen, e.fn, e.ts)
        else:
            self._place(f, st, pos, kind, psn, plen, dmalen, fn, ts)
        while st.held:
            e = st.held[0]
            if t.missing_below(e.psn, st.floor):
                return 0
            st.held.pop(0)
            self._place(f, st, e.pos, e.kind, e.psn, e.plen, e.dmalen, e.fn, e.ts)
        return 0

    def _place(self, f, st, pos, kind, psn, plen, dmalen, fn, ts):
        """One packet into its message: past every PSN reassembled so far it advances the
        message, else it fills a hole of one (``_late``)."""
        if st.hi < 0 or _psn_diff(psn, st.hi) > 0:
            if pos == _P_FIRST and kind == _K_READ_RESP and st.kind == _K_READ_RESP and \
                    st.has_first and psn == ((st.hi + 1) & _PSN_MASK):
                pos = _P_MIDDLE  # a READ resumed (flowrules, "messages")
            st.hi = psn
            return self._advance(f, st, pos, kind, psn, plen, dmalen, fn, ts)
        return self._late(f, st, pos, kind, psn, plen, dmalen, fn, ts)

    def _release(self, f, st):
        """The end: every waiting packet goes on, in PSN order."""
        while st.held:
            e = st.held.pop(0)
            self._place(f, st, e.pos, e.kind, e.psn, e.plen, e.dmalen, e.fn, e.ts)
        return 0

    def _advance(self, f, st, pos, kind, psn, plen, dmalen, fn, ts):
        """A packet that advanced the sequence (in order, first, or after a gap)."""
        if (pos == _P_FIRST or pos == _P_ONLY) and _is_write(kind) and st.kind >= 0 and \
                _is_write(st.kind) and st.has_first and st.mtu > 0 and \
                dmalen == st.dmalen - _psn_diff(psn, st.first) * st.mtu and \
                (pos == _P_FIRST or dmalen == plen):
            # flowrules, "selective repeat WRITE"
            pos = _P_MIDDLE if pos == _P_FIRST else _P_LAST
        if pos == _P_FIRST or pos == _P_MIDDLE:
            if plen > f.path.mtu:
                f.path.mtu = plen
        if pos == _P_MIDDLE:
            if st.kind < 0:  # a message whose First was not seen
                _start(st, kind, False, psn, plen, -1, fn, ts)
            else:
                st.nbytes += plen
                st.pkts += 1
            return 0
        if pos == _P_FIRST:
            if st.kind >= 0:
                self._abandon(f, st, False, 0, -1)
            _start(st, kind, True, psn, plen, dmalen if _is_write(kind) else -1, fn, ts)
            return 0
        if pos == _P_ONLY:
            if st.kind >= 0:
                self._abandon(f, st, False, 0, -1)
            self._complete(f, kind, plen, dmalen if _is_write(kind) else -1, fn, ts)
            return 0
        # Last
        if st.kind < 0:
            _start(st, kind, False, psn, 0, -1, fn, ts)
            st.pkts = 0
        st.nbytes += plen
        st.pkts += 1
        if not st.has_first:  # a tail without head: wait for a late First
            self._abandon(f, st, True, psn, kind)
            return 0
        size = st.nbytes + _lost(st.first, psn, st.pkts, st.mtu if st.mtu else f.path.mtu)
        st.kind = -1
        self._complete(f, kind, size, st.dmalen, st.frame, st.ts)
        return 0

    def _abandon(self, f, st, has_last, last, kind):
        """The current message stops without its Last (or lacks its First): keep it open so a
        late retransmission can complete it."""
        st.open.append([st.first if st.has_first else None, last if has_last else None,
                        st.lo, kind if kind >= 0 else st.kind, st.nbytes, st.pkts, st.mtu,
                        st.dmalen, st.frame, st.ts])
        st.kind = -1
        if len(st.open) > _MAX_OPEN:
            self._incomplete(f, st.open.pop(0))
        return 0

    def _late(self, f, st, pos, kind, psn, plen, dmalen, fn, ts):
        """A packet that filled a hole: it may belong to the current or an abandoned
        message."""
        if pos == _P_FIRST and _is_write(kind) and _is_write(st.kind) and st.has_first and \
                st.mtu > 0 and _psn_diff(psn, st.first) > 0 and \
                dmalen == st.dmalen - _psn_diff(psn, st.first) * st.mtu:
            pos = _P_MIDDLE  # a late Middle (flowrules, "selective repeat WRITE")
        if st.kind >= 0 and not st.has_first and pos == _P_FIRST and \
                _psn_diff(st.lo, psn) > 0:
            # The head of the message in progress, resent.
            st.has_first = True
            st.first = st.lo = psn
            st.mtu = plen
            st.nbytes += plen
            st.pkts += 1
            st.frame = fn
            st.ts = ts
            if _is_write(kind):
                st.dmalen = dmalen
            return 0
        if _is_write(st.kind) and _is_write(kind) and st.has_first and pos == _P_FIRST and \
                st.mtu > 0 and _psn_diff(st.first, psn) > 0 and \
                dmalen == st.dmalen + _psn_diff(st.first, psn) * st.mtu:
            # A selective-repeat WRITE's true First, late: its DMA length covers the
            # message's from there (flowrules, "selective repeat WRITE").
            st.first = st.lo = psn
            st.dmalen = dmalen
            st.nbytes += plen
            st.pkts += 1
            st.frame = fn
            st.ts = ts
            return 0
        if st.kind >= 0 and pos == _P_MIDDLE and (not st.has_first or
                                                   _psn_diff(psn, st.first) > 0):
            st.nbytes += plen
            st.pkts += 1
            if not st.has_first and _psn_diff(psn, st.lo) < 0:
                st.lo = psn
            return 0
        if pos == _P_ONLY:
            self._complete(f, kind, plen, dmalen if _is_write(kind) else -1, fn, ts)
            return 0
        for j in range(len(st.open) - 1, -1, -1):
            e = st.open[j]
            first, last = e[0], e[1]
            if pos == _P_FIRST:
                hit = first is None and _psn_diff(e[2], psn) > 0
            elif pos == _P_MIDDLE:
                hit = ((first is None or _psn_diff(psn, first) > 0)
                       and (last is None or _psn_diff(last, psn) > 0))
            else:
                hit = last is None and first is not None and _psn_diff(psn, first) > 0
            if not hit:
                continue
            e[4] += plen
            e[5] += 1
            if pos == _P_FIRST:
                e[0], e[6], e[8], e[9] = psn, plen, fn, ts
                if _is_write(e[3]):
                    e[7] = dmalen
            elif pos == _P_LAST:
                e[1], e[3] = psn, kind
            if e[0] is not None and e[1] is not None:
                del st.open[j]
                size = e[4] + _lost(e[0], e[1], e[5], e[6] if e[6] else f.path.mtu)
                self._complete(f, e[3], size, e[7], e[8], e[9])
            return 0
        if pos == _P_FIRST:  # a whole lost message being resent: follow it from here
            st.open.append([psn, None, psn, kind, plen, 1, plen,
                            dmalen if _is_write(kind) else -1, fn, ts])
            if len(st.open) > _MAX_OPEN:
                self._incomplete(f, st.open.pop(0))
        return 0

    def _complete(self, f, kind, size, dmalen, fn, ts):
        s = 4 * kind
        if f.stats[s] == 0:
            f.stats[s], f.stats[s + 1], f.stats[s + 2], f.stats[s + 3] = 1, size, size, size
        else:
            f.stats[s] += 1
            f.stats[s + 1] = _add(f.stats[s + 1], size)
            if size < f.stats[s + 2]:
                f.stats[s + 2] = size
            if size > f.stats[s + 3]:
                f.stats[s + 3] = size
        if dmalen >= 0 and dmalen != size:
            self._event(fn, ts, "length_mismatch", f, (_KIND_NAMES[kind], dmalen, size))
        return 0

    def _incomplete(self, f, e):
        first, last, kind = e[0], e[1], e[3]
        what = "First not captured" if first is None else "Last not captured"
        if first is None and last is None:
            what = "First and Last not captured"
        self._event(e[8], e[9], "incomplete_message", f, (_KIND_NAMES[kind], what, e[5], e[4]))
        return 0

    # -- events -------------------------------------------------------------------------------

    def _stored(self, name, fn):
        """Will an event of this kind and frame be kept (so that its text is worth making)?"""
        return self.lines[_EV_INDEX[name]] < self.ev_cap or self.store.wants(name, fn)

    def _event(self, fn, ts, name, f, args, count=1, last=0):
        """One event (or a folded run of ``count``) of the flowrules.EVENTS row ``name``: its
        row gives its severity, text and the flow counter it bumps; ``args`` None when
        ``_stored`` said it would not be kept."""
        k = _EV_INDEX[name]
        if f is not None and _EV_CTR[k] >= 0:
            f.c[_EV_CTR[k]] += count
        self.lines[k] += 1
        if args is None:
            self.store.skip(name, count)
        else:
            self.store.add(tuple.__new__(Event, (
                fn, _EV_SEV[k], name, f.id if f is not None else -1,
                f.qp if f is not None else -1, R.event_text(_EV_KINDS[k], args, count), ts,
                count, last)))
        return 0

    # -- the end ------------------------------------------------------------------------------

    def finish(self) -> Report:
        """Close open state (pending READs, bursts, unfinished messages), pair flows, total
        up."""
        if self._report is None:
            self._close_all()
            self.events = self.store.kept()
            flows = self._flows_out()
            connections, lone = pair(flows)
            latency, hists = self._latency()
            self._report = Report(flows, connections, lone,
                                  totals(self, flows, len(connections)), self.events,
                                  dict(self.store.counts), dict(self.store.lines),
                                  latency=latency, latency_hists=hists)
        return self._report

    def _close_all(self):
        for f in self.flows:
            if f.has_pending:
                self._resolve_read(f, 0, False)
            for side in range(2):
                if f.b_open[side]:
                    self._close_burst(f, side)
            if f.b_open[_SPURIOUS]:
                self._close_spurious(f)
            if f.tm is not None:  # flowrules, "completion times": never acknowledged
                _unacknowledged(f)
            for st in (f.reqmsg, f.rspmsg):
                self._release(f, st)
                if st.kind >= 0:
                    self._abandon(f, st, False, 0, -1)
                for e in st.open:
                    self._incomplete(f, e)
                st.open = []
        return 0

    def _flows_out(self):
        """The flows as ``flowmodel.Flow`` (the two directions of a path share a ``Path``)."""
        paths: dict[int, Path] = {}
        flows = []
        for s in self.flows:
            path = paths.get(id(s.path))
            if path is None:
                path = paths[id(s.path)] = Path()
                path.mtu = s.path.mtu
            out = Flow(s.id, s.l3, s.addr, s.qp, path)
            for c, value in zip(R.COUNTERS, s.counters()):
                setattr(out, c.name, value)
            out.first_ts, out.last_ts = s.first_ts, s.last_ts
            out.req, out.rsp = s.req, s.rsp
            out.req_first, out.rsp_first, out.rsp_last = s.req_first, s.rsp_first, s.rsp_last
            out.stats = s.message_stats()
            out.naks = s.nak_counts()
            out.rnr = s.rnr_counts()
            if s.tm is not None:
                out.completion, out.ack_rtt = s.tm.mct.summary(), s.tm.rtt.summary()
            flows.append(out)
        return flows

    def _latency(self):
        """The capture's completion and round-trip times, every flow's together: their
        summaries, and their histograms as plain data."""
        mct, rtt = _Hist(), _Hist()
        for f in self.flows:
            if f.tm is not None:
                mct.merge(f.tm.mct)
                rtt.merge(f.tm.rtt)
        return ({"completion_ns": mct.summary(), "ack_rtt_ns": rtt.summary()},
                {"completion_ns": mct.state(), "ack_rtt_ns": rtt.state()})
