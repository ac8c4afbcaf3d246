"""``roce stats`` on Ultra Ethernet Transport: the packets of each PDC (packet delivery context)
of a capture, analysed from the UET family's decoded fields.

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
* NACKs by code name, the three trim codes counted apart from the resource NACKs;
* control packets by type, close and clear requests among them;
* messages by SES message ID: complete when every PSN from its SOM to its EOM packet came,
  with their sizes (each PSN's payload counted once); goodput (each PSN's payload once) and
  throughput (every request's payload) over the PDC's time span.

``Tap`` puts the analysis beside the RoCE flow engine: it stands in for the capture reader
and looks again only at the records in which the engine found frames that are not RoCE, and
among them only at those the walk stopped at an IP protocol or UDP port (the registry then
says whether UET claims them), so a plain RoCE capture pays one comparison per block.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Any

from roce import fast
from roce.families import dispatch
from roce.families.uet import HANDLERS
from roce.families.uet import codes as t
from roce.locate import NR_PORT, NR_PROTO, WALK_LINKTYPES
from roce.pcapio import Batch

PSN_MASK = 0xFFFFFFFF
_HALF = 0x80000000
_UET = frozenset(HANDLERS.values())  # the family's handlers, both readings and carriages
# a classic pcap record header: seconds, fraction, captured length, wire length
_RECORD = 16
_HEADER = (struct.Struct("<IIII"), struct.Struct(">IIII"))
# PSNs listed in the text report before "and N more"
TEXT_PSNS = 8


def _ahead(a: int, b: int) -> int:
    """How far PSN ``a`` is past ``b`` (32-bit serial arithmetic; negative when before)."""
    d = (a - b) & PSN_MASK
    return d - (1 << 32) if d >= _HALF else d


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
        return [[(lo + base) & PSN_MASK, (hi + base) & PSN_MASK]
                for lo, hi in zip(self.los, self.his)]


@dataclass
class Pdc:
    """What the capture shows of one PDC."""

    initiator: str
    target: str
    spdcid: int  # the initiator's PDC ID
    dpdcid: int | None = None  # the target's, once a packet says it
    first_frame: int = 0
    first_ns: int = -1
    last_ns: int = -1
    # requests
    requests: int = 0
    request_bytes: int = 0
    unique_bytes: int = 0
    syns: int = 0
    start_psn: int | None = None
    pdc_mode: int | None = None
    highest_psn: int | None = None
    # PSNs are kept unwrapped, counted from the first request's PSN (``base``)
    base: int = 0
    highest: int = 0
    retransmissions: int = 0
    spurious: int = 0
    holes: Holes = field(default_factory=Holes)  # skipped, not seen since
    recovered: list[int] = field(default_factory=list)  # skipped, then resent (RETX)
    reordered: list[int] = field(default_factory=list)  # skipped, then came without RETX
    seen: set[int] = field(default_factory=set)
    # ACKs
    acks: int = 0
    first_cack: int | None = None
    cack: int | None = None
    cack_advances: int = 0
    ecn_marked_acks: int = 0
    probe_acks: int = 0
    sack_holes: int = 0  # ACKs whose bitmap has a hole
    sack_missing: set[int] = field(default_factory=set)  # PSNs a SACK bitmap said missing
    sacked: set[int] = field(default_factory=set)  # PSNs past the CACK a bitmap holds
    nscc_acks: int = 0
    service_time_max: int = 0
    rcvd_bytes_last: int | None = None
    ooo_max: int = 0
    # NACKs and control
    trims: dict[str, int] = field(default_factory=dict)
    nacks: dict[str, int] = field(default_factory=dict)
    nack_psns: list[int] = field(default_factory=list)
    controls: dict[str, int] = field(default_factory=dict)
    close_requests: int = 0  # ACKs asking to close, CLOSE and CLOSE_REQ control packets
    clear_requests: int = 0  # ACKs asking to clear, CLEAR and CLEAR_REQ control packets
    # messages by SES message ID: [unwrapped PSN of SOM, of EOM (-1: not seen yet), bytes,
    # packets]; complete when every PSN from SOM to EOM came (``message_sizes``)
    open_messages: dict[int, list[int]] = field(default_factory=dict)
    message_sizes: list[int] = field(default_factory=list)


    def to_dict(self) -> dict[str, Any]:
        span = self.last_ns - self.first_ns
        sizes = self.message_sizes
        return {
            "initiator": self.initiator, "target": self.target, "spdcid": self.spdcid,
            "dpdcid": self.dpdcid, "first_frame": self.first_frame,
            "duration_ns": span,
            "requests": self.requests, "request_bytes": self.request_bytes,
            "syn": self.syns, "start_psn": self.start_psn, "pdc_mode": self.pdc_mode,
            "highest_psn": self.highest_psn,
            "missing": self.holes.count(), "missing_psns": self.holes.ranges(self.base),
            "recovered_psns": self.recovered, "reordered_psns": self.reordered,
            "retransmissions": self.retransmissions, "spurious_retransmissions": self.spurious,
            "acks": self.acks, "first_cack_psn": self.first_cack, "cack_psn": self.cack,
            "cack_advances": self.cack_advances, "ecn_marked_acks": self.ecn_marked_acks,
            "probe_acks": self.probe_acks, "sack_holes": self.sack_holes,
            "sack_missing_psns": sorted(self.sack_missing),
            "nscc": {"acks": self.nscc_acks, "service_time_max": self.service_time_max,
                     "rcvd_bytes_last": self.rcvd_bytes_last, "ooo_count_max": self.ooo_max},
            "trims": dict(sorted(self.trims.items())),
            "nacks": dict(sorted(self.nacks.items())),
            "controls": dict(sorted(self.controls.items())),
            "close_requests": self.close_requests, "clear_requests": self.clear_requests,
            "messages": {"completed": len(sizes), "bytes": sum(sizes),
                         "min": min(sizes, default=0), "max": max(sizes, default=0),
                         "open": len(self.open_messages)},
            "goodput_bps": self.unique_bytes * 8e9 / span if span > 0 else None,
            "throughput_bps": self.request_bytes * 8e9 / span if span > 0 else None,
        }


class UetAnalysis:
    """The UET packets of a capture, frame by frame (``packet``), then ``to_dict``/``lines``."""

    def __init__(self, udp_port: int) -> None:
        self.udp_port = udp_port
        self.pdcs: dict[tuple[str, str, int], Pdc] = {}
        self.packets = self.encrypted = self.malformed = self.unreliable = 0

    # -- input ----------------------------------------------------------------------------

    def frame(self, number: int, ts: int, data: bytes, linktype: int,
              origlen: int | None = None) -> bool:
        """One frame the RoCE walk did not take: analysed if UET claims it; whether it did."""
        w = fast.walk(data, linktype, self.udp_port)
        if w.status != NR_PROTO and w.status != NR_PORT:
            return False
        res = dispatch.resolve(data, linktype, w, self.udp_port)
        if res is None or res.family is None or res.family.name not in _UET:
            return False
        n = len(res.data)
        cut = 0 if origlen is None else max(origlen - len(data), 0)
        d = res.family.decode(res.data, n, n + cut)  # type: ignore[misc]
        self.packets += 1
        if d.error is not None:
            self.malformed += 1
            return True
        f = d.fields
        if f.get("uet.tss"):
            self.encrypted += 1
            return True
        src, dst = _addresses(res.carrier_fields)
        self.packet(number, ts, src, dst, f)
        return True

    def packet(self, number: int, ts: int, src: str, dst: str, f: dict[str, Any]) -> None:
        """One decoded UET packet from ``src`` to ``dst`` (its ``uet.*`` fields)."""
        typ = f["uet.pds.type"]
        if typ in t.REQUESTS:
            self._request(self._pdc(src, dst, f["uet.pds.spdcid"], number, ts), f)
        elif typ in t.ACKS:
            self._ack(self._pdc(dst, src, f["uet.pds.dpdcid"], number, ts, f["uet.pds.spdcid"]),
                      f)
        elif typ in t.NACKS:
            self._nack(self._pdc(dst, src, f["uet.pds.dpdcid"], number, ts,
                                 f["uet.pds.spdcid"]), f)
        elif typ == t.CTRL:
            key = (src, dst, f["uet.pds.spdcid"])
            # a SYN control packet (the reference provider's) has no DPDCID: the initiator's
            if key in self.pdcs or "uet.pds.dpdcid" not in f:  # from the initiator
                p = self._pdc(src, dst, f["uet.pds.spdcid"], number, ts)
            else:  # from the target, or a PDC first seen by its control packet
                rkey = (dst, src, f["uet.pds.dpdcid"])
                p = (self._pdc(dst, src, f["uet.pds.dpdcid"], number, ts, f["uet.pds.spdcid"])
                     if rkey in self.pdcs else self._pdc(src, dst, f["uet.pds.spdcid"], number,
                                                          ts))
            self._control(p, f)
        else:  # RUDI and UUD: no PDC
            self.unreliable += 1

    def scan_batch(self, batch: Batch, base: int) -> None:
        """A batch of frames numbered from ``base + 1`` (those the walk takes as RoCE are
        passed over: ``frame``)."""
        if batch.linktype not in WALK_LINKTYPES:
            return
        for i, data in enumerate(batch.datas):
            self.frame(base + i + 1, batch.ts_ns[i], bytes(data), batch.linktype,
                       batch.origlen[i])

    def scan_records(self, buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                     linktype: int | None, base: int, count: int) -> None:
        """Pcap records ``buf[pos:end]``, the first numbered ``base + 1`` (``count`` of them
        not RoCE: the walk's count, not needed here, where each frame is read)."""
        if linktype not in WALK_LINKTYPES:
            return
        unpack = _HEADER[bool(big_endian)].unpack_from
        p, number = pos, base
        while p < end:
            sec, frac, caplen, origlen = unpack(buf, p)
            start = p + _RECORD
            p = start + caplen
            number += 1
            self.frame(number, sec * 1_000_000_000 + frac * frac_mul, bytes(buf[start:p]),
                       linktype, origlen)

    # -- per kind -------------------------------------------------------------------------

    def _pdc(self, initiator: str, target: str, pdcid: int, number: int, ts: int,
             other: int | None = None) -> Pdc:
        key = (initiator, target, pdcid)
        p = self.pdcs.get(key)
        if p is None:
            p = self.pdcs[key] = Pdc(initiator, target, pdcid, first_frame=number,
                                     first_ns=ts)
        if other is not None and p.dpdcid is None:
            p.dpdcid = other
        p.last_ns = ts
        return p

    def _request(self, p: Pdc, f: dict[str, Any]) -> None:
        psn = f["uet.pds.psn"]
        size = f.get("payload.len", 0)
        p.requests += 1
        p.request_bytes += size
        if f["uet.pds.flags.syn"]:
            p.syns += 1
            if p.start_psn is None:
                p.start_psn, p.pdc_mode = f["uet.pds.start_psn"], f["uet.pds.pdc_mode"]
        elif p.dpdcid is None:
            p.dpdcid = f["uet.pds.dpdcid"]
        if p.highest_psn is None:
            p.highest_psn, p.base = psn, psn
        ahead = _ahead(psn, p.highest_psn)
        u = p.highest + ahead
        retx = bool(f["uet.pds.flags.retx"])
        again = u in p.seen
        if retx or again:
            p.retransmissions += 1
            if again and self._acknowledged(p, psn):
                p.spurious += 1
        if ahead > 1:
            p.holes.add(p.highest + 1, u - 1)
        if ahead > 0:
            p.highest_psn, p.highest = psn, u
        elif p.holes.fill(u):
            (p.recovered if retx else p.reordered).append(psn)
        if again:
            return
        p.seen.add(u)
        p.unique_bytes += size
        mid = f.get("uet.ses.std.message_id")
        if mid is None:
            return
        m = p.open_messages.get(mid)
        if m is None:
            m = p.open_messages[mid] = [-1, -1, 0, 0]
        if f["uet.ses.std.som"]:
            m[0] = u
        if f["uet.ses.std.eom"]:
            m[1] = u
        m[2] += size
        m[3] += 1
        if m[0] >= 0 and m[1] >= m[0] and m[3] == m[1] - m[0] + 1:  # every PSN of it came
            p.message_sizes.append(m[2])
            del p.open_messages[mid]

    @staticmethod
    def _acknowledged(p: Pdc, psn: int) -> bool:
        return (p.cack is not None and _ahead(psn, p.cack) <= 0) or psn in p.sacked

    def _ack(self, p: Pdc, f: dict[str, Any]) -> None:
        p.acks += 1
        cack = f["uet.pds.cack_psn"]
        if p.first_cack is None:
            p.first_cack = cack
        elif p.cack is not None and _ahead(cack, p.cack) > 0:
            p.cack_advances += 1
        if p.cack is None or _ahead(cack, p.cack) > 0:
            p.cack = cack
        if f["uet.pds.flags.m"]:
            p.ecn_marked_acks += 1
        if f["uet.pds.flags.p"]:
            p.probe_acks += 1
        req = f.get("uet.pds.flags.req")  # the specification: one 2-bit field
        if req == 2 or f.get("uet.pds.flags.req_cls"):  # the reference provider: two bits
            p.close_requests += 1
        if req == 1 or f.get("uet.pds.flags.req_clr"):
            p.clear_requests += 1
        bitmap = f.get("uet.pds.ack.sack_bitmap")
        if bitmap is None:
            return
        base = f["uet.pds.ack.sack_psn"]
        holes = False
        top = bitmap.bit_length()
        for i in range(top):
            q = (base + i) & PSN_MASK
            if _ahead(q, cack) <= 0:
                continue
            if (bitmap >> i) & 1:
                p.sacked.add(q)
            else:
                holes = True
                p.sack_missing.add(q)
        if holes:
            p.sack_holes += 1
        if f.get("uet.pds.ack.cc_type") == t.CC_NSCC and \
                "uet.pds.ack.cc_state.service_time" in f:
            p.nscc_acks += 1
            p.service_time_max = max(p.service_time_max,
                                     f["uet.pds.ack.cc_state.service_time"])
            p.rcvd_bytes_last = f["uet.pds.ack.cc_state.rcvd_bytes"]
            p.ooo_max = max(p.ooo_max, f["uet.pds.ack.cc_state.ooo_count"])

    def _nack(self, p: Pdc, f: dict[str, Any]) -> None:
        code = f["uet.pds.nack.code"]
        name = t.NACK_CODES.get(code, (f"0x{code:02x}", ""))[0]
        table = p.trims if code in t.TRIM_NACKS else p.nacks
        table[name] = table.get(name, 0) + 1
        p.nack_psns.append(f["uet.pds.nack.psn"])

    def _control(self, p: Pdc, f: dict[str, Any]) -> None:
        ct = f["uet.pds.ctl_type"]
        name = t.REF_PROV_CTRL_TYPES.get(ct, (f"0x{ct:x}", ""))[0]
        p.controls[name] = p.controls.get(name, 0) + 1
        if ct in (4, 5):  # CLOSE, CLOSE_REQ
            p.close_requests += 1
        elif ct in (2, 3):  # CLEAR, CLEAR_REQ
            p.clear_requests += 1

    # -- output ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"packets": self.packets, "encrypted": self.encrypted,
                "malformed": self.malformed, "unreliable": self.unreliable,
                "pdcs": [p.to_dict() for p in self.pdcs.values()]}

    def lines(self) -> list[str]:
        """The text report's UET section (nothing when the capture has no UET)."""
        if not self.packets:
            return []
        n = len(self.pdcs)
        out = [f"Ultra Ethernet Transport: {self.packets:,} packets, {n} PDC{'s' * (n != 1)}"
               f" ({self.encrypted} encrypted, {self.malformed} malformed, "
               f"{self.unreliable} RUDI/UUD)"]
        for p in self.pdcs.values():
            d = p.to_dict()
            dp = "?" if p.dpdcid is None else f"0x{p.dpdcid:04x}"
            out.append(f"  PDC {p.initiator} 0x{p.spdcid:04x} -> {p.target} {dp}")
            start = "-" if p.start_psn is None else str(p.start_psn)
            out.append(f"    requests {p.requests} ({p.request_bytes:,} B), SYN {p.syns}, "
                       f"start PSN {start}, highest PSN {p.highest_psn}")
            out.append(f"    retransmissions {p.retransmissions} (spurious {p.spurious}); "
                       f"missing {d['missing']} (PSNs {_ranges(d['missing_psns'])}); recovered "
                       f"{_psns(d['recovered_psns'])}; reordered {_psns(d['reordered_psns'])}")
            out.append(f"    ACKs {p.acks}, cumulative ACK PSN {p.first_cack} -> {p.cack} "
                       f"(moved by {p.cack_advances}), ECN-marked {p.ecn_marked_acks}, "
                       f"probes {p.probe_acks}")
            out.append(f"    SACK holes {p.sack_holes} (PSNs {_psns(d['sack_missing_psns'])})")
            if p.nscc_acks:
                out.append(f"    NSCC: {p.nscc_acks} ACKs, service time max "
                           f"{p.service_time_max}, received bytes {p.rcvd_bytes_last}, "
                           f"out-of-order count max {p.ooo_max}")
            out.append(f"    trims {_counts(p.trims)}; NACKs {_counts(p.nacks)}; control "
                       f"{_counts(p.controls)}; close {p.close_requests}, clear "
                       f"{p.clear_requests}")
            m = d["messages"]
            out.append(f"    messages {m['completed']} ({m['bytes']:,} B, {m['min']:,}-"
                       f"{m['max']:,} B), open {m['open']}")
            out.append(f"    goodput {_rate(d['goodput_bps'])}, throughput "
                       f"{_rate(d['throughput_bps'])}")
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


def _addresses(f: dict[str, Any]) -> tuple[str, str]:
    for src, dst in (("ip.src", "ip.dst"), ("ipv6.src", "ipv6.dst"), ("eth.src", "eth.dst")):
        if src in f:
            return str(f[src]), str(f[dst])
    return "", ""


# -- the Parquet table (``roce stats -T parquet``: DIR/uet_pdcs.parquet) ---------------------

_COUNTS = ("requests", "request_bytes", "syn", "missing", "retransmissions",
           "spurious_retransmissions", "acks", "cack_advances", "ecn_marked_acks",
           "probe_acks", "sack_holes", "close_requests", "clear_requests")
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


__all__ = ["Holes", "Pdc", "UetAnalysis", "pdc_rows", "pdc_schema"]
