"""PFC (802.1Qbb) and PAUSE (802.3x) accounting for ``roce stats``: per direction and priority,
the pause frames, the XONs, the time the peer was held paused, and pause storms.

A *direction* is the MAC address that sent the frames: a port asks its link peer to stop,
so "from 02:..:01, priority 3, paused 1.2 ms" means 02:..:01's peer could not send
priority 3 for 1.2 ms.  An 802.3x PAUSE stops the whole link: it is counted under the
priority ``all``.

Paused time follows the receiver's rules (802.1Qbb 36.1.3.2; 802.3 31B.3): a frame with
time *q* > 0 (re)starts the class's timer at *q* quanta of 512 bit times at the link rate
(``--link-rate``), replacing the running one; time 0 (XON) ends it at once.  A *stretch*
is a span during which the class stays paused without a break, however many refreshes
kept it so; its length counts when the timer runs out or an XON comes.  The arithmetic is
exact: times are integers in units of 1/N ns for a link rate of N/D b/s (one quantum is then
512e9 * D units), converted to float nanoseconds only for output.

A stretch longer than ``--pause-storm`` is a pause storm, an expert warning.  The default,
100 ms, is the "auto" timeout of the Linux mlx5e driver's PFC stall prevention (ethtool
tunable ``pfc-prevention-tout``; range 80..8000 ms, commit "net/mlx5e: PFC stall
prevention support"): a NIC kept from sending that long is declared stalled.

The compiled flow engine counts MAC Control frames as "not RoCE" and moves on, so
``Tap`` looks at them beside it: only for a block of records in which the engine's "not
RoCE" counter moved, the record headers are walked and the frames sent to the MAC Control
multicast address 01:80:C2:00:00:01 are decoded (the walk stops once it has seen as many
as the counter moved).  A capture of RoCE alone costs two counter reads per 8 MiB block.
Only Ethernet link types are looked at; a PAUSE sent to a unicast address (which 802.3
allows, and Wireshark flags) is counted as "not RoCE" only.
"""

from __future__ import annotations

import math
import struct
import sys
from typing import Any

from roce import macc
from roce.analysis import flows as fl
from roce.errors import DecodeError
from roce.headers import SIZE_OF
from roce.locate import LINKTYPE_ETHERNET
from roce.pcapio import Batch

NS = 1_000_000_000
DEFAULT_LINK_RATE = "100G"
DEFAULT_STORM = "100ms"  # mlx5e PFC stall prevention "auto" timeout (see above)
LINK = "all"  # the priority column of an 802.3x PAUSE
KIND = "pause_storm"  # the expert event kind (flows.EVENT_KINDS)
_RECORD = 16  # a classic pcap record header: seconds, fraction, captured and wire lengths
_LENGTH = {True: struct.Struct(">8xI"), False: struct.Struct("<8xI")}  # its captured length
_STAMP = {True: struct.Struct(">II"), False: struct.Struct("<II")}  # seconds, fraction
_DA = len(macc.PFC_DST_MAC)
_ETH = SIZE_OF["eth"]
# The link rates (Gb/s) the accounting can represent: in b/s a finite float (the report,
# JSON), and the longest pause (0xFFFF quanta) a count of nanoseconds in 64 bits, as every
# time in a report is.  ``--link-rate`` takes these.
MAX_NS = (1 << 63) - 1
LINK_RATE_GBPS = (macc.MAX_QUANTA * macc.QUANTUM_BITS * NS / MAX_NS / 1e9,
                  sys.float_info.max / 1e9)


def duration(ns: float) -> str:
    """``8.120 us`` below a millisecond, ``3.036 ms`` from there on."""
    return f"{ns / 1e3:.3f} us" if ns < 1e6 else f"{ns / 1e6:.3f} ms"


class _Class:
    """One direction's one priority: counters and the running pause stretch."""

    __slots__ = ("pauses", "xons", "paused", "longest", "stretches", "storms", "start",
                 "until", "first", "frames")

    def __init__(self) -> None:
        self.pauses = self.xons = self.stretches = self.storms = 0
        self.paused = self.longest = 0  # in the account's units (1/N ns)
        self.start = 0  # the running stretch: start and end of its timer (units), 1st frame
        self.until: int | None = None
        self.first = 0
        self.frames = 0  # frames that kept the running stretch going


class PauseAccount:
    """Feeds on MAC Control frames in capture order; ``finish`` gives the report."""

    def __init__(self, link_rate_bps: float, storm_ns: int,
                 max_events: int = fl.MAX_EVENTS_PER_KIND) -> None:
        lo, hi = (g * 1e9 for g in LINK_RATE_GBPS)
        if not (math.isfinite(link_rate_bps) and lo <= link_rate_bps <= hi):
            raise ValueError(f"link rate {link_rate_bps!r} b/s is outside {lo:g}..{hi:g}")
        self.link_rate_bps = float(link_rate_bps)
        # rate = num / den b/s exactly; a time unit is 1/num ns, a quantum 512e9 * den units
        self.num, den = self.link_rate_bps.as_integer_ratio()
        self.quantum = macc.QUANTUM_BITS * NS * den
        self.storm_ns = storm_ns
        self.max_events = max_events
        self.classes: dict[tuple[str, int | str], _Class] = {}
        self.frames = self.malformed = 0
        self.events: list[fl.Event] = []
        self.storms = 0

    # -- input ----------------------------------------------------------------------------

    def frame(self, number: int, ts_ns: int, data: bytes) -> None:
        """One Ethernet frame (any: frames that are not MAC Control are ignored)."""
        try:
            m = macc.parse_macc(data)
        except DecodeError:
            self.frames += 1
            self.malformed += 1
            return
        if m is None:
            return
        self.frames += 1
        src = m.src.hex(":")
        if m.is_pause:
            self._apply(src, LINK, m.times[0], number, ts_ns)
            return
        for prio, quanta in m.class_times().items():
            self._apply(src, prio, quanta, number, ts_ns)

    def scan_records(self, buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                     linktype: int | None, base: int, others: int) -> None:
        """The pcap records in ``buf[pos:end]``, numbered from ``base + 1``, among which the
        engine found ``others`` frames that are not RoCE: the frames sent to the MAC
        Control address are decoded.  A walk over the record headers comparing 6 bytes a
        frame costs less than searching the block for the address (measured)."""
        if linktype != LINKTYPE_ETHERNET:
            return
        dst = macc.PFC_DST_MAC
        unpack, stamp = _LENGTH[big_endian].unpack_from, _STAMP[big_endian].unpack_from
        p, number = pos, base
        while p < end and others:
            caplen, = unpack(buf, p)
            start = p + _RECORD
            p = start + caplen
            number += 1
            if buf[start:start + _DA] == dst:
                if caplen >= _ETH:  # then it is one of the engine's "not RoCE"
                    others -= 1
                sec, frac = stamp(buf, start - _RECORD)
                self.frame(number, sec * NS + frac * frac_mul, bytes(buf[start:p]))

    def scan_batch(self, batch: Batch, base: int) -> None:
        """A batch of frames numbered from ``base + 1``."""
        if batch.linktype != LINKTYPE_ETHERNET or macc.PFC_DST_MAC not in b"".join(
                batch.datas):
            return
        self._frames(batch.datas, batch.ts_ns, batch.linktype, base)

    def _frames(self, datas: list[bytes], tss: Any, linktype: int, base: int) -> None:
        dst = macc.PFC_DST_MAC
        for i in [i for i, data in enumerate(datas) if data.startswith(dst)]:
            self.frame(base + i + 1, tss[i], datas[i])

    # -- the timer of one class -----------------------------------------------------------

    def _apply(self, src: str, prio: int | str, quanta: int, number: int, ts: int) -> None:
        c = self.classes.get((src, prio))
        if c is None:
            c = self.classes[(src, prio)] = _Class()
        if quanta:
            c.pauses += 1
        else:
            c.xons += 1
        ts *= self.num  # to units
        if c.until is not None and ts < c.until:  # paused now: refresh or resume
            if quanta:
                c.until = ts + quanta * self.quantum
                c.frames += 1
            else:
                self._close(src, prio, c, ts)
            return
        if c.until is not None:  # the last stretch ran out before this frame
            self._close(src, prio, c, c.until)
        if quanta:
            c.start, c.until, c.first, c.frames = ts, ts + quanta * self.quantum, number, 1

    def _close(self, src: str, prio: int | str, c: _Class, end: int) -> None:
        length = end - c.start
        c.paused += length
        c.stretches += 1
        c.longest = max(c.longest, length)
        c.until = None
        if length > self.storm_ns * self.num:
            c.storms += 1
            self.storms += 1
            if len(self.events) < self.max_events:
                what = "PAUSE storm: link" if prio == LINK else f"PFC pause storm: priority {prio}"
                text = fl.TEXTS[KIND] % (what, src, duration(length / self.num), c.frames,
                                         duration(self.storm_ns))
                self.events.append(fl.Event(c.first, fl.EVENT_KINDS[KIND], KIND, -1, -1, text,
                                            c.start // self.num))

    def finish(self) -> PauseReport:
        """Close the running stretches (at the end of their timers) and report."""
        for (src, prio), c in self.classes.items():
            if c.until is not None:
                self._close(src, prio, c, c.until)
        return PauseReport(self)


class PauseReport:
    """Rows per direction and priority, the storm events, and the JSON form."""

    def __init__(self, acc: PauseAccount) -> None:
        self.link_rate_bps = acc.link_rate_bps
        self.storm_ns = acc.storm_ns
        self.frames = acc.frames
        self.malformed = acc.malformed
        self.events = acc.events
        self.storms = acc.storms
        order = sorted(acc.classes, key=lambda k: (k[0], k[1] == LINK, str(k[1])))
        self.rows: list[dict[str, Any]] = [
            {"from": src, "priority": prio, "pauses": c.pauses, "xons": c.xons,
             "paused_ns": c.paused / acc.num, "stretches": c.stretches,
             "longest_ns": c.longest / acc.num, "storms": c.storms}
            for src, prio in order for c in (acc.classes[(src, prio)],)]

    def to_dict(self) -> dict[str, Any]:
        return {"link_rate_bps": self.link_rate_bps, "storm_threshold_ns": self.storm_ns,
                "frames": self.frames, "malformed": self.malformed, "storms": self.storms,
                "classes": self.rows}

    def table(self) -> tuple[list[str], list[tuple[str, list[str]]]]:
        """(header, rows) for the text report."""
        header = ["", "pauses", "XONs", "paused", "longest", "storms"]
        rows = [(f"from {r['from']} prio {r['priority']}",
                 [f"{r['pauses']:,}", f"{r['xons']:,}", duration(r["paused_ns"]),
                  duration(r["longest_ns"]), f"{r['storms']:,}"]) for r in self.rows]
        return header, rows

    def merge_into(self, report: fl.Report) -> None:
        """Add the storm events to a flow report's expert list (kept in frame order)."""
        if not self.storms:
            return
        report.event_counts[KIND] = report.event_counts.get(KIND, 0) + self.storms
        report.events = sorted([*report.events, *self.events], key=lambda e: e.frame)


__all__ = ["DEFAULT_LINK_RATE", "DEFAULT_STORM", "PauseAccount", "PauseReport"]
