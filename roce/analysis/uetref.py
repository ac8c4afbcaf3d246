"""The PDC engine of ``roce stats`` on Ultra Ethernet Transport, written once: ``uetrules``
applied packet by packet, in capture order.

This file is both engines, as ``flowref.py`` is RoCE's.  Interpreted, it is the reference
(``uetflows.make_engine(engine="reference")``); the build compiles it with Cython, unchanged,
into ``roce.analysis._uetengine`` (the engine ``roce stats`` runs), with the C types of its
state, shapes and locals in ``_uetengine.pxd`` beside it; ``roce/_compiled.py`` keeps the
compiled form from running once this file or its declarations changed since the build.  The
twin tests (tests/test_uet_engine.py) feed both forms the same drawn traffic and require
equal reports.

A PDC is keyed by its initiator's address, its target's address and the initiator's PDC ID
(SPDCID of its requests; DPDCID of the ACKs, NACKs and control packets the target sends
back): the target's PDC ID is unknown until the target answers (a SYN request carries the PDC
mode and PSN offset where the DPDCID would be).  Per PDC, from the capture alone:

* requests: packets, payload bytes, SYN requests and the start PSN they declare (PSN less the
  PSN offset), PSNs skipped and whether each came later as a retransmission (RETX flag),
  without it (reordered, as spraying makes them) or never (missing at the end of the
  capture), retransmissions (RETX set, or a PSN seen before) and the spurious ones (the PSN
  had been acknowledged, cumulatively or by a SACK bit, by an ACK seen before the resend);
* ACKs: how many, the cumulative ACK PSN's progress (first, last, ACKs that moved it), the
  SACK bitmaps with holes (PSNs past the cumulative ACK, below a PSN the bitmap holds, not
  received), ECN-marked ACKs (the M flag), probes, and the NSCC state they carry (service
  time, received bytes, out-of-order count);
* NACKs by code name, the trim codes counted apart from the resource NACKs;
* control packets by type, close and clear requests among them;
* messages by SES message ID: complete when every PSN from its SOM to its EOM packet came,
  with their sizes (each PSN's payload counted once); goodput (each PSN's payload once) and
  throughput (every request's payload) over the PDC's time span.

How a packet is read.  The walk (the fast path's C) says where a frame stopped being RoCE: at
an IP protocol or a UDP port.  The registry says once per such value whether UET claims it
(and in which reading, over UDP or with the entropy header); a claimed packet is read from
its bytes where the family's layouts put the fields (``_shape`` and ``_ses_shape`` work the
places out from ``roce.families.uet.layouts`` once per PDS type and flags, and per SES next
header and opcode).  What the byte reader does not take (a TSS header, a packet shorter than
its layouts, a tunnel, a row that is not UET's) goes through the family's dissector
(``roce.families.dispatch``), and its fields feed the same rules (``packet``).  Both forms
take both paths; ``fast=False`` sends every packet through the dissector, which is how the
tests hold the byte reader to the dissector.

Written so that the two forms compute the same: PSNs are 32-bit serial numbers, counts and
times 64-bit; what is rare or grows (holes, PSN sets, messages) is Python objects in both.
"""

from __future__ import annotations

import bisect
from typing import Any

try:
    import cython
except ImportError:  # Cython builds the compiled form; the interpreted one needs only this
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)

from roce import fast
from roce.analysis import uetrules as R
from roce.families import dispatch, registry
from roce.families.uet import HANDLERS
from roce.families.uet import codes as t
from roce.families.uet.layouts import (
    ACK_CC_STATE,
    AMO,
    PROLOGUE,
    READINGS,
    SES_HEADERS,
    STD_TAIL,
    ack_cc_key,
    carries_ses,
    pds_chain,
    ses_chain,
)
from roce.locate import L3_IPV4, L3_IPV6, NR_PORT, NR_PROTO, WALK_LINKTYPES

__all__ = ["Engine", "Holes", "Pdc"]

_M32 = 0xFFFFFFFF
_HALF = 0x80000000
_READINGS = tuple(READINGS)  # a reading's index: its place here
_HANDLER_ROUTE = {name: i * 2 + int(entropy) for (reading, entropy), name in HANDLERS.items()
                  for i in (_READINGS.index(reading),)}
_NO_ROUTE, _SLOW = -1, -2  # not UET; the dissector decides
_NSHAPES = 1 << 12  # PDS type (5 bits) and flags (7 bits)
_NSES = 1 << 10  # SES next header (4 bits) and opcode (6 bits)
# the prologue's three fields: (shift, mask) in its first 16 bits
_PRO = [(16 - f.bit_offset - f.bits, f.mask) for f in PROLOGUE.layout.fields]
_TYPE_SHIFT, _TYPE_MASK = _PRO[0][0], _PRO[0][1]
_NH_SHIFT, _NH_MASK = _PRO[1][0], _PRO[1][1]
_FLAGS_SHIFT, _FLAGS_MASK = _PRO[2][0], _PRO[2][1]
if PROLOGUE.size != 2 or _TYPE_MASK >= 32 or _FLAGS_MASK >= 128 or _NH_MASK >= 16:
    raise ValueError("UET engine: the PDS prologue is no longer 5 + 4 + 7 bits")
_RECORD = 16  # a classic pcap record header
_NS = 1_000_000_000
# numbers the rules switch on, as module constants (C integers in the compiled form)
_TSS, _NH_NONE, _CC_NSCC = t.TSS_TYPE, t.NH_NONE, t.CC_NSCC
_CSWAP = t.CSWAP_OPCODES
_K_OTHER, _K_REQUEST, _K_ACK, _K_NACK = R.K_OTHER, R.K_REQUEST, R.K_ACK, R.K_NACK
_NR_PORT, _NR_PROTO, _L3_IPV4, _L3_IPV6 = NR_PORT, NR_PROTO, L3_IPV4, L3_IPV6


# -- field specs: where a field is, packed in one integer ---------------------------------------
# byte offset << 16 | bytes << 12 | shift << 6 | (bits - 1); -1: the layout has no such field

def _spec_of(at: int, layout: Any, key: str, keys: tuple[str, ...]) -> int:
    f = layout.fields[keys.index(key)]
    first, end = f.bit_offset // 8, (f.bit_offset + f.bits + 7) // 8
    if end - first > 8:
        raise ValueError(f"UET engine: {key} spans more than 8 bytes")
    return ((at + first) << 16) | ((end - first) << 12) | ((end * 8 - f.bit_offset - f.bits)
                                                           << 6) | (f.bits - 1)


def _find(h: dict[str, Any], chain: list[tuple[int, str]], key: str) -> int:
    """The spec of flat field ``key`` in a chain of (offset, layout key), or -1."""
    for at, name in chain:
        hd = h[name]
        if key in hd.keys:
            return _spec_of(at, hd.layout, key, hd.keys)
    return -1


def _read(p, at, spec):
    """The field ``spec`` of the layouts starting at ``at`` (big-endian, as UET is)."""
    o = at + (spec >> 16)
    v = 0
    for k in range((spec >> 12) & 15):
        v = (v << 8) | p[o + k]
    v >>= (spec >> 6) & 63
    bits = (spec & 63) + 1
    if bits < 64:
        one = 1
        v &= (one << bits) - one
    return v


# -- numbers ------------------------------------------------------------------------------------

def _ahead(a, b):
    """How far PSN ``a`` is past ``b`` (32-bit serial arithmetic; negative when before)."""
    d = (a - b) & _M32
    if d >= _HALF:
        d -= 0x100000000
    return d


def _signed16(v):
    return v - 0x10000 if v & 0x8000 else v


# -- shapes: what the layouts say about the packets of one kind ---------------------------------

class _Pds:
    """The PDS header of one (reading, type, flags): its size from the prologue on, what the
    flags say, and where the fields the rules read are (specs from the prologue's start)."""

    __slots__ = ("kind", "size", "ses", "syn", "retx", "marked", "probe", "close", "clear",
                 "s_psn", "s_spdcid", "s_dpdcid", "s_psn_offset", "s_pdc_mode", "s_cack",
                 "s_sack_off", "s_bitmap", "s_cc_type", "state_at", "s_service", "s_rcvd",
                 "s_ooo", "s_code", "s_npsn")

    def __init__(self, reading: Any, typ: int, flags: int) -> None:
        h = reading.headers
        self.kind = R.kind_of(typ)
        self.ses = carries_ses(typ)
        f: dict[str, Any] = {}
        for name, mask in reading.flags.get(typ, ()):
            v = flags & mask
            f[name] = v >> ((mask & -mask).bit_length() - 1) if mask & (mask - 1) else v != 0
        self.syn = bool(f.get("uet.pds.flags.syn"))
        self.retx = bool(f.get("uet.pds.flags.retx"))
        self.marked = bool(f.get("uet.pds.flags.m"))
        self.probe = bool(f.get("uet.pds.flags.p"))
        self.close = R.ack_close(f)
        self.clear = R.ack_clear(f)
        chain: list[tuple[int, str]] = [(0, "prologue")]
        at = PROLOGUE.size
        self.state_at = -1
        for key in pds_chain(typ, flags, reading):
            if key == ACK_CC_STATE:  # its layout by CC type: NSCC's is the one read
                self.state_at = at
                at += 8
                continue
            chain.append((at, key))
            at += h[key].size
        self.size = at
        specs = [_find(h, chain, k) for k in R.FIELDS]
        (self.s_psn, self.s_spdcid, self.s_dpdcid, self.s_psn_offset, self.s_cack,
         self.s_sack_off, self.s_bitmap, self.s_cc_type, self.s_code, self.s_npsn) = specs
        self.s_pdc_mode = _find(h, chain, R.PDC_MODE_FIELD)
        if self.s_pdc_mode >= 0:  # the whole byte
            self.s_pdc_mode = (self.s_pdc_mode >> 16 << 16) | (1 << 12) | 7
        nscc = h[ack_cc_key(t.CC_NSCC)]
        self.s_service, self.s_rcvd, self.s_ooo = (
            _spec_of(max(self.state_at, 0), nscc.layout, k, nscc.keys) for k in R.NSCC_FIELDS)
        # what the rules read of each kind is there: a layout that lost a field stops here, in
        # both forms, rather than be read past its header
        need = {_K_REQUEST: [self.s_psn, self.s_spdcid] + (
                    [self.s_psn_offset, self.s_pdc_mode] if self.syn else [self.s_dpdcid]),
                _K_ACK: [self.s_cack, self.s_spdcid, self.s_dpdcid],
                _K_NACK: [self.s_code, self.s_npsn, self.s_spdcid, self.s_dpdcid],
                R.K_CTRL: [self.s_spdcid]}.get(self.kind, [])
        if self.s_bitmap >= 0:
            need += [self.s_sack_off, self.s_cc_type]
        if min(need, default=0) < 0:
            raise ValueError(f"UET engine: the layouts of PDS type {typ} (flags {flags:#x}) "
                             "lack a field the analysis reads")


class _Ses:
    """The SES header of one (reading, next header, opcode): its size before an atomic
    extension, where that extension starts (-1: none) and its two sizes, where a standard
    request's message ID, SOM and EOM are (-1: not a standard request), and, for an opcode
    that carries data, where its request length and (past the first packet) payload length
    are (-1: no data, so no length to hold the payload to)."""

    __slots__ = ("size", "amo_at", "atomic", "cswap", "s_mid", "s_som", "s_eom", "s_rlen",
                 "s_plen")

    def __init__(self, reading: Any, nh: int, op: int) -> None:
        h = reading.headers
        if h["std.som"].size != h["std.cont"].size:
            raise ValueError("UET engine: the standard request's two tails differ in size")
        chain: list[tuple[int, str]] = []
        cont: list[tuple[int, str]] = []  # the same chain with the tail past the first packet
        at = 0
        self.amo_at = -1
        for key in ses_chain(nh, op, reading):
            if key == AMO:
                self.amo_at = at
                break
            cont.append((at, "std.cont" if key == STD_TAIL else key))
            key = "std.som" if key == STD_TAIL else key
            chain.append((at, key))
            at += h[key].size
        self.size = at
        self.atomic, self.cswap = h["atomic"].size, h["cswap"].size
        self.s_mid, self.s_som, self.s_eom = (_find(h, chain, k) for k in R.SES_FIELDS)
        if min(self.s_mid, self.s_som, self.s_eom) < 0 <= max(self.s_mid, self.s_som,
                                                             self.s_eom):
            raise ValueError("UET engine: the standard request lacks a message field")
        self.s_rlen = self.s_plen = -1
        if self.s_mid >= 0 and op in R.DATA_OPCODES:
            self.s_rlen = _find(h, chain, R.LENGTH_FIELDS[0])
            self.s_plen = _find(h, cont, R.LENGTH_FIELDS[1])
            if min(self.s_rlen, self.s_plen) < 0:
                raise ValueError("UET engine: the standard request lacks a length field")


def _op_spec(reading: Any, nh: int) -> int:
    """Where an SES header's opcode is (-1: a header without one, or none)."""
    first = SES_HEADERS.get(nh)
    if first not in ("std", "small", "medium"):
        return -1
    h = reading.headers[first]
    return _spec_of(0, h.layout, "uet.ses.std.opcode", h.keys)


# -- state ------------------------------------------------------------------------------------

class Holes:
    """PSNs skipped and not yet seen, as inclusive ranges of unwrapped PSNs (a jump of a
    billion PSNs is one range, not a billion entries)."""

    __slots__ = ("los", "his")

    def __init__(self) -> None:
        self.los: list[int] = []
        self.his: list[int] = []

    def add(self, lo: int, hi: int) -> None:
        """Skipped ``lo`` to ``hi``, past every range held (the highest PSN moved on)."""
        self.los.append(lo)
        self.his.append(hi)

    def fill(self, u: int) -> bool:
        """``u`` came: whether it was a hole (then it is one no longer)."""
        if not self.los:
            return False
        i = bisect.bisect_right(self.los, u) - 1
        if i < 0 or u > self.his[i]:
            return False
        lo, hi = self.los[i], self.his[i]
        if lo == hi:
            del self.los[i], self.his[i]
        elif u == lo:
            self.los[i] = u + 1
        elif u == hi:
            self.his[i] = u - 1
        else:
            self.his[i] = u - 1
            self.los.insert(i + 1, u + 1)
            self.his.insert(i + 1, hi)
        return True

    def count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in zip(self.los, self.his))

    def ranges(self, base: int) -> list[list[int]]:
        """[first, last] PSN of each range (``base``: the PSN unwrapped PSN 0 stands for)."""
        return [[(lo + base) & _M32, (hi + base) & _M32]
                for lo, hi in zip(self.los, self.his)]


class _Msg:
    """A message by SES message ID: unwrapped PSN of its SOM and EOM packets (``ends``: bit 1
    when the SOM packet came, bit 2 the EOM packet; an unwrapped PSN may be negative, a PSN
    before the first one the capture shows), its bytes and packets so far."""

    __slots__ = ("som", "eom", "ends", "nbytes", "pkts")

    def __init__(self) -> None:
        self.som = self.eom = self.ends = 0
        self.nbytes = self.pkts = 0


class Pdc:
    """What the capture shows of one PDC.  -1 stands for "not seen" in the PSN, PDC ID and
    mode fields (``to_dict`` says None)."""

    __slots__ = ("initiator", "target", "spdcid", "dpdcid", "first_frame", "first_ns",
                 "last_ns", "requests", "request_bytes", "unique_bytes", "syns", "start_psn",
                 "pdc_mode", "highest_psn", "base", "highest", "retransmissions", "spurious",
                 "holes", "recovered", "reordered", "seen", "acks", "first_cack", "cack",
                 "cack_advances", "ecn_marked_acks", "probe_acks", "sack_holes",
                 "sack_missing", "sacked", "nscc_acks", "service_time_max", "rcvd_bytes_last",
                 "ooo_max", "trims", "nacks", "nack_psns", "controls", "close_requests",
                 "clear_requests", "close_asked", "clear_asked", "close_handshakes",
                 "clear_handshakes", "open_messages", "message_sizes", "bin", "mark")

    def __init__(self, initiator: str, target: str, spdcid: int, first_frame: int,
                 first_ns: int) -> None:
        self.initiator, self.target, self.spdcid = initiator, target, spdcid
        self.dpdcid = -1
        self.first_frame, self.first_ns, self.last_ns = first_frame, first_ns, first_ns
        self.requests = self.request_bytes = self.unique_bytes = self.syns = 0
        self.start_psn = self.pdc_mode = self.highest_psn = -1
        # PSNs are kept unwrapped, counted from the first request's PSN (``base``)
        self.base = self.highest = 0
        self.retransmissions = self.spurious = 0
        self.holes = Holes()  # skipped, not seen since
        self.recovered: list[int] = []  # skipped, then resent (RETX)
        self.reordered: list[int] = []  # skipped, then came without RETX
        self.seen: set[int] = set()
        self.acks = self.cack_advances = self.ecn_marked_acks = self.probe_acks = 0
        self.first_cack = self.cack = -1
        self.sack_holes = 0  # ACKs whose bitmap has a hole
        self.sack_missing: set[int] = set()  # PSNs a SACK bitmap said missing
        self.sacked: set[int] = set()  # PSNs past the CACK a bitmap holds
        self.nscc_acks = self.service_time_max = self.ooo_max = 0
        self.rcvd_bytes_last = -1
        self.trims: dict[str, int] = {}
        self.nacks: dict[str, int] = {}
        self.nack_psns: list[int] = []
        self.controls: dict[str, int] = {}
        self.close_requests = self.clear_requests = 0
        # handshakes: requests waiting for their command, requests answered
        self.close_asked = self.clear_asked = self.close_handshakes = self.clear_handshakes = 0
        # messages by SES message ID; complete when every PSN from SOM to EOM came
        self.open_messages: dict[int, _Msg] = {}
        self.message_sizes: list[int] = []
        # --timeline: the interval this PDC's last packet fell in, and its counters then
        self.bin = -1
        self.mark: tuple[int, ...] = ()

    def counts(self) -> tuple[int, ...]:
        """What a timeline row shows, so far: request bytes, retransmissions, ECN-marked
        ACKs, trims, other NACKs."""
        return (self.request_bytes, self.retransmissions, self.ecn_marked_acks,
                sum(self.trims.values()), sum(self.nacks.values()))

    def to_dict(self) -> dict[str, Any]:
        span = self.last_ns - self.first_ns
        sizes = self.message_sizes

        def opt(v: int) -> int | None:
            return None if v < 0 else v

        return {
            "initiator": self.initiator, "target": self.target, "spdcid": self.spdcid,
            "dpdcid": opt(self.dpdcid), "first_frame": self.first_frame,
            "duration_ns": span,
            "requests": self.requests, "request_bytes": self.request_bytes,
            "syn": self.syns, "start_psn": opt(self.start_psn),
            "pdc_mode": opt(self.pdc_mode), "highest_psn": opt(self.highest_psn),
            "missing": self.holes.count(), "missing_psns": self.holes.ranges(self.base),
            "recovered_psns": list(self.recovered), "reordered_psns": list(self.reordered),
            "retransmissions": self.retransmissions, "spurious_retransmissions": self.spurious,
            "acks": self.acks, "first_cack_psn": opt(self.first_cack),
            "cack_psn": opt(self.cack), "cack_advances": self.cack_advances,
            "ecn_marked_acks": self.ecn_marked_acks, "probe_acks": self.probe_acks,
            "sack_holes": self.sack_holes, "sack_missing_psns": sorted(self.sack_missing),
            "sack_covered": len(self.sacked),
            "nscc": {"acks": self.nscc_acks, "service_time_max": self.service_time_max,
                     "rcvd_bytes_last": opt(self.rcvd_bytes_last),
                     "ooo_count_max": self.ooo_max},
            "trims": dict(sorted(self.trims.items())),
            "nacks": dict(sorted(self.nacks.items())),
            "controls": dict(sorted(self.controls.items())),
            "close_requests": self.close_requests, "clear_requests": self.clear_requests,
            "close_handshakes": self.close_handshakes, "clear_handshakes": self.clear_handshakes,
            "close_unanswered": self.close_asked, "clear_unanswered": self.clear_asked,
            "messages": {"completed": len(sizes), "bytes": sum(sizes),
                         "min": min(sizes, default=0), "max": max(sizes, default=0),
                         "open": len(self.open_messages)},
            "goodput_bps": self.unique_bytes * 8e9 / span if span > 0 else None,
            "throughput_bps": self.request_bytes * 8e9 / span if span > 0 else None,
        }


# -- the rules, per kind of packet --------------------------------------------------------------

def _request(p, psn, size, syn, start_psn, pdc_mode, dpdcid, retx, mid, som, eom, cut):
    """A PSN-sequenced request (``mid`` -1: no standard SES header; ``cut``: its payload is
    shorter than its SES header says, ``_cut``: a trimmed copy, whose PSN counts as
    seen on the wire but whose data did not arrive, so it is neither a PSN received nor part
    of its message)."""
    p.requests += 1
    p.request_bytes += size
    if syn:
        p.syns += 1
        if p.start_psn < 0:
            p.start_psn, p.pdc_mode = start_psn, pdc_mode
    elif p.dpdcid < 0:
        p.dpdcid = dpdcid
    if p.highest_psn < 0:
        p.highest_psn = psn
        p.base = psn
    ahead = _ahead(psn, p.highest_psn)
    u = p.highest + ahead
    again = u in p.seen
    if retx or again:
        p.retransmissions += 1
        if again and _acknowledged(p, psn):
            p.spurious += 1
    if ahead > 1:
        p.holes.add(p.highest + 1, u - 1)
    if ahead > 0:
        p.highest_psn = psn
        p.highest = u
    elif p.holes.fill(u):
        if retx:
            p.recovered.append(psn)
        else:
            p.reordered.append(psn)
    if again or cut:
        return 0
    p.seen.add(u)
    p.unique_bytes += size
    if mid < 0:
        return 0
    m = p.open_messages.get(mid)
    if m is None:
        m = _Msg()
        p.open_messages[mid] = m
    if som:
        m.som = u
        m.ends |= 1
    if eom:
        m.eom = u
        m.ends |= 2
    m.nbytes += size
    m.pkts += 1
    if m.ends == 3 and m.eom >= m.som and m.pkts == m.eom - m.som + 1:  # every PSN of it came
        p.message_sizes.append(m.nbytes)
        del p.open_messages[mid]
    return 0


def _cut(size, som, eom, request_length, payload_length):
    """Is a data request's payload (``size`` bytes) shorter than its SES header says: a
    trimmed copy (UE specification: a trimming switch keeps the headers and drops the
    payload)?  Past the first packet the header says its payload length; a first packet that
    is also the last carries the whole request length; a first packet of a longer message at
    least one byte (its size, one MTU, is not in the header)."""
    if not som:
        return size < payload_length
    if eom:
        return size < request_length
    return size == 0 < request_length


def _acknowledged(p, psn):
    return (p.cack >= 0 and _ahead(psn, p.cack) <= 0) or psn in p.sacked


def _ack(p, cack, marked, probe, close, clear, has_sack, sack_base, bitmap, nscc, service,
         rcvd, ooo):
    p.acks += 1
    if p.first_cack < 0:
        p.first_cack = cack
    elif p.cack >= 0 and _ahead(cack, p.cack) > 0:
        p.cack_advances += 1
    if p.cack < 0 or _ahead(cack, p.cack) > 0:
        p.cack = cack
    if marked:
        p.ecn_marked_acks += 1
    if probe:
        p.probe_acks += 1
    if close:
        p.close_requests += 1
        p.close_asked += 1
    if clear:
        p.clear_requests += 1
        p.clear_asked += 1
    if not has_sack:
        return 0
    holes = False
    top = 0
    while top < 64 and bitmap >> top:
        top += 1
    for i in range(top):
        q = (sack_base + i) & _M32
        if _ahead(q, cack) <= 0:
            continue
        if (bitmap >> i) & 1:
            p.sacked.add(q)
        else:
            holes = True
            p.sack_missing.add(q)
    if holes:
        p.sack_holes += 1
    if nscc:
        p.nscc_acks += 1
        if service > p.service_time_max:
            p.service_time_max = service
        p.rcvd_bytes_last = rcvd
        if ooo > p.ooo_max:
            p.ooo_max = ooo
    return 0


def _nack(p, code, psn):
    name = R.nack_name(code)
    table = p.trims if code in R.TRIM_NACKS else p.nacks
    table[name] = table.get(name, 0) + 1
    p.nack_psns.append(psn)
    return 0


def _control(p, ct):
    name = R.control_name(ct)
    p.controls[name] = p.controls.get(name, 0) + 1
    if ct in R.CLOSE_CONTROLS:
        p.close_requests += 1
        if ct == R.CLOSE_REQUEST:
            p.close_asked += 1
        elif p.close_asked:
            p.close_handshakes += 1
            p.close_asked = 0
    elif ct in R.CLEAR_CONTROLS:
        p.clear_requests += 1
        if ct == R.CLEAR_REQUEST:
            p.clear_asked += 1
        elif p.clear_asked:
            p.clear_handshakes += 1
            p.clear_asked = 0
    return 0


def _label(p: Pdc) -> str:
    return f"{p.initiator} 0x{p.spdcid:04x} -> {p.target}"


def _addresses(f: dict[str, Any]) -> tuple[str, str]:
    for src, dst in (("ip.src", "ip.dst"), ("ipv6.src", "ipv6.dst"), ("eth.src", "eth.dst")):
        if src in f:
            return str(f[src]), str(f[dst])
    return "", ""


# -- where the two forms differ: the fast path's C, and bytes where they lie ---------------------

def _walk(p, n, linktype, udp_port):
    """Where the headers are (``roce.locate.walk``)."""
    if cython.compiled:
        do_walk(p, n, linktype, udp_port, cython.address(w))  # noqa: F821 (C: _fastpath.pxd)
    else:
        w = fast.walk(p, linktype, udp_port)
    return w


def _u32_pcap(p, at, big_endian):
    """A pcap record header's word, in the file's byte order."""
    b0, b1, b2, b3 = p[at], p[at + 1], p[at + 2], p[at + 3]
    if big_endian:
        return (b0 << 24) | (b1 << 16) | (b2 << 8) | b3
    return (b3 << 24) | (b2 << 16) | (b1 << 8) | b0


# -- the engine ---------------------------------------------------------------------------------

class Engine:
    """The UET packets of a capture, frame by frame (``frame``, ``scan_records``,
    ``scan_batch``; ``packet`` for fields already decoded), then ``to_dict``.  ``fast``
    False: every packet through the family's dissector."""

    __slots__ = ("udp_port", "fast", "pdcs", "packets", "encrypted", "malformed", "unreliable",
                 "interval", "t0", "bins", "_routes", "_names", "_shapes", "_ses", "_ops")

    def __init__(self, udp_port: int, fast: bool = True, interval_ns: int = 0) -> None:
        self.udp_port = udp_port
        self.fast = fast
        # --timeline: intervals of ``interval_ns`` from the first frame (0: none), and per
        # interval the counts of each PDC that had packets in it (``timeline``)
        self.interval = interval_ns
        self.t0 = -1
        self.bins: dict[int, dict[Pdc, list[int]]] = {}
        self.pdcs: dict[tuple[str, str, int], Pdc] = {}
        self.packets = self.encrypted = self.malformed = self.unreliable = 0
        self._routes: dict[int, int] = {}  # walk stop (ip.proto or udp.port value) -> route
        self._names: dict[bytes, tuple[str, str]] = {}  # address bytes -> their names
        self._shapes: list[Any] = [None] * (len(_READINGS) * _NSHAPES)
        self._ses: list[Any] = [None] * (len(_READINGS) * _NSES)
        self._ops = [_op_spec(READINGS[r], nh) for r in _READINGS for nh in range(16)]

    # -- input ----------------------------------------------------------------------------

    def frame(self, number: int, ts: int, data: bytes, linktype: int,
              origlen: int | None = None) -> bool:
        """One frame the RoCE walk did not take: analysed if UET claims it; whether it did."""
        if self.t0 < 0:
            self.t0 = ts
        if linktype not in WALK_LINKTYPES:
            return False
        return self._frame(data, data, len(data), number, ts, linktype,
                           -1 if origlen is None else origlen) != 0

    def scan_batch(self, batch: Any, base: int) -> None:
        """A batch of frames numbered from ``base + 1`` (those the walk takes as RoCE are
        passed over: ``frame``)."""
        if batch.linktype not in WALK_LINKTYPES:
            return
        datas, tss, lens = batch.datas, batch.ts_ns, batch.origlen
        for i in range(len(datas)):
            data = datas[i]
            if not isinstance(data, bytes):
                data = bytes(data)
            self._frame(data, data, len(data), base + i + 1, tss[i], batch.linktype, lens[i])

    def scan_records(self, buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                     linktype: int | None, base: int, count: int) -> None:
        """Pcap records ``buf[pos:end]``, the first numbered ``base + 1`` (``count`` of them
        not RoCE: the walk's count, not needed here, where each frame is read)."""
        if linktype not in WALK_LINKTYPES:
            return
        self._records(buf, pos, end, big_endian, frac_mul, linktype, base)

    def _records(self, buf, pos, end, big_endian, frac_mul, linktype, base):
        number = base
        while end - pos >= _RECORD:
            if cython.compiled:
                q = cython.address(buf[pos])  # the record, where it lies
            else:
                q = bytes(buf[pos:pos + _RECORD])  # its header, copied
            caplen = _u32_pcap(q, 8, big_endian)
            if end - pos - _RECORD < caplen:
                break
            ts = _u32_pcap(q, 0, big_endian) * _NS + \
                _u32_pcap(q, 4, big_endian) * frac_mul
            if cython.compiled:
                p = q + _RECORD
            else:
                p = bytes(buf[pos + _RECORD:pos + _RECORD + caplen])
            number += 1
            self._frame(None, p, caplen, number, ts, linktype, _u32_pcap(q, 12, big_endian))
            pos += _RECORD + caplen

    # -- one frame ----------------------------------------------------------------------------

    def _frame(self, obj, p, n, number, ts, linktype, origlen):
        """One frame, ``n`` bytes at ``p`` (``obj``: the frame as bytes, None when read in
        place): 1 when UET claimed it, else 0."""
        w = _walk(p, n, linktype, self.udp_port)
        st = w.status
        if st == _NR_PORT:
            code = 0x10000 | w.err_a
            start = w.udp_off + 8
            end = w.udp_off + ((p[w.udp_off + 4] << 8) | p[w.udp_off + 5])
        elif st == _NR_PROTO:
            code = w.err_a
            start = w.l3_off + w.l3_len
            if w.l3_kind == _L3_IPV4:
                end = w.l3_off + ((p[w.l3_off + 2] << 8) | p[w.l3_off + 3])
            else:
                end = w.l3_off + w.l3_len + ((p[w.l3_off + 4] << 8) | p[w.l3_off + 5])
        else:
            return 0
        route = self._routes.get(code, _SLOW - 1)
        if route == _SLOW - 1:
            route = self._route(st, w.err_a)
        if route == _NO_ROUTE:
            return 0
        if end > n or end < start:  # a cut frame, or a bad length: as the dissector takes it
            end = n if end > n else start
        if route >= 0 and self.fast and (w.l3_kind == _L3_IPV4 or w.l3_kind == _L3_IPV6):
            if self._bytes(p, start, end, number, ts, route, w.l3_kind, w.l3_off):
                return 1
        if obj is None:
            obj = p[:n]
        return self._dissected(obj, number, ts, linktype, origlen)

    def _route(self, st: int, value: int) -> int:
        """What the registry makes of frames stopped at this IP protocol or UDP port: a
        UET handler's route (reading and carriage), not UET, or the dissector's to say."""
        handler = registry().lookup("udp.port" if st == _NR_PORT else "ip.proto", value)
        if handler is None:
            route = _NO_ROUTE
        else:
            route = _HANDLER_ROUTE.get(handler.name, _SLOW)
        self._routes[(0x10000 if st == _NR_PORT else 0) | value] = route
        return route

    def _dissected(self, data: bytes, number: int, ts: int, linktype: int,
                   origlen: int) -> int:
        """A frame through the registry and the family's dissector (what the byte reader
        left)."""
        w = fast.walk(data, linktype, self.udp_port)
        res = dispatch.resolve(data, linktype, w, self.udp_port)
        if res is None or res.family is None or res.family.name not in _HANDLER_ROUTE:
            return 0
        n = len(res.data)
        cut = 0 if origlen < 0 else max(origlen - len(data), 0)
        d = res.family.decode(res.data, n, n + cut)
        self.packets += 1
        if d.error is not None:
            self.malformed += 1
            return 1
        f = d.fields
        if f.get("uet.tss"):
            self.encrypted += 1
            return 1
        src, dst = _addresses(res.carrier_fields)
        self.packet(number, ts, src, dst, f)
        return 1

    def _bytes(self, p, start, end, number, ts, route, l3k, l3o):
        """The UET bytes ``p[start:end]`` read where the layouts put the fields: 1 when done,
        0 when the dissector should read them (encrypted, shorter than its layouts)."""
        r = route >> 1
        pos = start + (4 if route & 1 else 0)  # the entropy header
        if end - pos < 2:
            return 0
        b0 = p[pos]
        if b0 >> 3 == _TSS:
            return 0
        word = (b0 << 8) | p[pos + 1]
        typ = (word >> _TYPE_SHIFT) & _TYPE_MASK
        nh = (word >> _NH_SHIFT) & _NH_MASK
        flags = (word >> _FLAGS_SHIFT) & _FLAGS_MASK
        i = r * _NSHAPES + ((typ << 7) | flags)
        sh = self._shapes[i]
        if sh is None:
            sh = _Pds(READINGS[_READINGS[r]], typ, flags)
            self._shapes[i] = sh
        body = pos + sh.size
        if body > end:
            return 0
        mid = -1
        som = eom = cut = False
        if sh.ses and nh != _NH_NONE:
            o = self._ops[r * 16 + nh]
            op = 0
            if o >= 0:
                if body + 2 > end:
                    return 0
                op = _read(p, body, o)
            j = r * _NSES + ((nh << 6) | op)
            ses = self._ses[j]
            if ses is None:
                ses = _Ses(READINGS[_READINGS[r]], nh, op)
                self._ses[j] = ses
            top = body + ses.size
            if top > end:
                return 0
            if ses.amo_at >= 0:
                if top >= end:
                    return 0
                top += ses.cswap if p[top] in _CSWAP else ses.atomic
                if top > end:
                    return 0
            if ses.s_mid >= 0:
                mid = _read(p, body, ses.s_mid)
                som = _read(p, body, ses.s_som) != 0
                eom = _read(p, body, ses.s_eom) != 0
                if ses.s_rlen >= 0:
                    cut = _cut(end - top, som, eom, _read(p, body, ses.s_rlen),
                                0 if som else _read(p, body, ses.s_plen))
            body = top
        self.packets += 1
        k = sh.kind
        if k == _K_OTHER:
            self.unreliable += 1
            return 1
        if l3k == _L3_IPV4:
            key = p[l3o + 12:l3o + 20]
        else:
            key = p[l3o + 8:l3o + 40]
        names = self._names.get(key)
        if names is None:
            names = self._name(key, l3k)
        src = names[0]
        dst = names[1]
        if k == _K_REQUEST:
            psn = _read(p, pos, sh.s_psn)
            q = self._pdc(src, dst, _read(p, pos, sh.s_spdcid), number, ts, -1)
            if sh.syn:
                _request(q, psn, end - body, True, (psn - _read(p, pos, sh.s_psn_offset)) & _M32,
                         _read(p, pos, sh.s_pdc_mode), -1, sh.retx, mid, som, eom, cut)
            else:
                _request(q, psn, end - body, False, 0, 0, _read(p, pos, sh.s_dpdcid), sh.retx,
                         mid, som, eom, cut)
        elif k == _K_ACK:
            q = self._pdc(dst, src, _read(p, pos, sh.s_dpdcid), number, ts,
                          _read(p, pos, sh.s_spdcid))
            cack = _read(p, pos, sh.s_cack)
            if sh.s_bitmap >= 0:
                nscc = sh.state_at >= 0 and _read(p, pos, sh.s_cc_type) == _CC_NSCC
                _ack(q, cack, sh.marked, sh.probe, sh.close, sh.clear, True,
                     (cack + _signed16(_read(p, pos, sh.s_sack_off))) & _M32,
                     _read(p, pos, sh.s_bitmap), nscc,
                     _read(p, pos, sh.s_service) if nscc else 0,
                     _read(p, pos, sh.s_rcvd) if nscc else 0,
                     _read(p, pos, sh.s_ooo) if nscc else 0)
            else:
                _ack(q, cack, sh.marked, sh.probe, sh.close, sh.clear, False, 0, 0, False, 0,
                     0, 0)
        elif k == _K_NACK:
            q = self._pdc(dst, src, _read(p, pos, sh.s_dpdcid), number, ts,
                          _read(p, pos, sh.s_spdcid))
            _nack(q, _read(p, pos, sh.s_code), _read(p, pos, sh.s_npsn))
        else:
            spdcid = _read(p, pos, sh.s_spdcid)
            dpdcid = _read(p, pos, sh.s_dpdcid) if sh.s_dpdcid >= 0 else -1
            _control(self._ctrl_pdc(src, dst, spdcid, dpdcid, number, ts, nh), nh)
        return 1

    def _name(self, key: bytes, l3k: int) -> tuple[str, str]:
        """The names of a pair of addresses (as the carrier's fields give them)."""
        import ipaddress

        half = len(key) // 2
        names = (str(ipaddress.ip_address(key[:half])), str(ipaddress.ip_address(key[half:])))
        if len(self._names) > 4096:
            self._names.clear()
        self._names[key] = names
        return names

    # -- decoded fields (the dissector's path, and tests) ---------------------------------

    def packet(self, number: int, ts: int, src: str, dst: str, f: dict[str, Any]) -> None:
        """One decoded UET packet from ``src`` to ``dst`` (its ``uet.*`` fields)."""
        k = R.kind_of(f["uet.pds.type"])
        if k == _K_REQUEST:
            syn = bool(f["uet.pds.flags.syn"])
            mid = f.get("uet.ses.std.message_id")
            som = mid is not None and bool(f["uet.ses.std.som"])
            eom = mid is not None and bool(f["uet.ses.std.eom"])
            size = f.get("payload.len", 0)
            cut = mid is not None and f.get("uet.ses.std.opcode") in R.DATA_OPCODES and \
                _cut(size, som, eom, f.get("uet.ses.std.request_length", 0),
                      f.get("uet.ses.std.payload_length", 0))
            _request(self._pdc(src, dst, f["uet.pds.spdcid"], number, ts, -1),
                     f["uet.pds.psn"], size, syn,
                     f["uet.pds.start_psn"] if syn else 0, f["uet.pds.pdc_mode"] if syn else 0,
                     -1 if syn else f["uet.pds.dpdcid"], bool(f["uet.pds.flags.retx"]),
                     -1 if mid is None else mid, som, eom, cut)
        elif k == _K_ACK:
            q = self._pdc(dst, src, f["uet.pds.dpdcid"], number, ts, f["uet.pds.spdcid"])
            bitmap = f.get("uet.pds.ack.sack_bitmap")
            nscc = bitmap is not None and f.get("uet.pds.ack.cc_type") == _CC_NSCC and \
                "uet.pds.ack.cc_state.service_time" in f
            _ack(q, f["uet.pds.cack_psn"], bool(f["uet.pds.flags.m"]),
                 bool(f["uet.pds.flags.p"]), R.ack_close(f), R.ack_clear(f), bitmap is not None,
                 f.get("uet.pds.ack.sack_psn", 0), bitmap or 0, nscc,
                 f["uet.pds.ack.cc_state.service_time"] if nscc else 0,
                 f["uet.pds.ack.cc_state.rcvd_bytes"] if nscc else 0,
                 f["uet.pds.ack.cc_state.ooo_count"] if nscc else 0)
        elif k == _K_NACK:
            q = self._pdc(dst, src, f["uet.pds.dpdcid"], number, ts, f["uet.pds.spdcid"])
            _nack(q, f["uet.pds.nack.code"], f["uet.pds.nack.psn"])
        elif k == R.K_CTRL:
            ct = f["uet.pds.ctl_type"]
            _control(self._ctrl_pdc(src, dst, f["uet.pds.spdcid"], f.get("uet.pds.dpdcid", -1),
                                    number, ts, ct), ct)
        else:  # RUDI and UUD: no PDC
            self.unreliable += 1

    # -- PDCs ---------------------------------------------------------------------------------

    def _pdc(self, initiator, target, pdcid, number, ts, other):
        key = (initiator, target, pdcid)
        p = self.pdcs.get(key)
        if p is None:
            p = Pdc(initiator, target, pdcid, number, ts)
            self.pdcs[key] = p
        if other >= 0 and p.dpdcid < 0:
            p.dpdcid = other
        p.last_ns = ts
        if self.interval > 0:
            self._bin(p, ts)
        return p

    def _bin(self, p: Pdc, ts: int) -> None:
        """--timeline: the PDC's counts since its last interval closed, when this packet
        opens another (before the packet is counted)."""
        k = max(ts - (ts if self.t0 < 0 else self.t0), 0) // self.interval  # earlier: the first
        if k != p.bin:
            self._close_bin(p)
            p.bin, p.mark = k, p.counts()

    def _close_bin(self, p: Pdc) -> None:
        if p.bin < 0:
            return
        now = p.counts()
        row = self.bins.setdefault(p.bin, {}).setdefault(p, [0] * len(now))
        for i in range(len(now)):
            row[i] += now[i] - p.mark[i]
        p.bin = -1

    def timeline(self) -> dict[str, Any]:
        """Per interval (from the first frame), each PDC that had packets in it: request
        bytes and Gb/s, retransmissions, ECN-marked ACKs, trims, other NACKs.  Only
        intervals with packets are listed; PDCs are named as ``pdcs`` lists them."""
        for p in self.pdcs.values():
            self._close_bin(p)
        order = {p: i for i, p in enumerate(self.pdcs.values())}
        rows = []
        for k in sorted(self.bins):
            cells = {}
            for p, c in sorted(self.bins[k].items(), key=lambda pc: order[pc[0]]):
                cells[_label(p)] = {"bytes": c[0], "gbps": round(c[0] * 8 / self.interval, 6),
                                    "retransmissions": c[1], "ecn_marked_acks": c[2],
                                    "trims": c[3], "nacks": c[4]}
            rows.append({"start_ns": k * self.interval, "pdcs": cells})
        return {"interval_ns": self.interval, "pdcs": [_label(p) for p in order],
                "rows": rows}

    def _ctrl_pdc(self, src, dst, spdcid, dpdcid, number, ts, ct):
        """A control packet's PDC: a target's request (``uetrules.TARGET_CONTROLS``) the PDC
        its DPDCID names at the initiator, when known (the target's own requests, READ
        response data, are a PSN space of their own under its PDC ID); else the initiator's
        when it is known by this side's PDC ID or the packet has no DPDCID (the reference
        provider's SYN control packet); else the target's answer to a PDC known by the other
        side's, or a PDC first seen here."""
        if ct in R.TARGET_CONTROLS and dpdcid >= 0 and (dst, src, dpdcid) in self.pdcs:
            return self._pdc(dst, src, dpdcid, number, ts, spdcid)
        if (src, dst, spdcid) in self.pdcs or dpdcid < 0:
            return self._pdc(src, dst, spdcid, number, ts, -1)
        if (dst, src, dpdcid) in self.pdcs:
            return self._pdc(dst, src, dpdcid, number, ts, spdcid)
        return self._pdc(src, dst, spdcid, number, ts, -1)

    # -- output ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"packets": self.packets, "encrypted": self.encrypted,
                "malformed": self.malformed, "unreliable": self.unreliable,
                "pdcs": [p.to_dict() for p in self.pdcs.values()]}
