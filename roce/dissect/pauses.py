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
exact (fractions of a nanosecond), and converted to float only for output.

A stretch longer than ``--pause-storm`` is a pause storm, an expert warning.  The default,
100 ms, is the "auto" timeout of the Linux mlx5e driver's PFC stall prevention (ethtool
tunable ``pfc-prevention-tout``; range 80..8000 ms, commit "net/mlx5e: PFC stall
prevention support"): a NIC kept from sending that long is declared stalled.

The compiled flow engine counts MAC Control frames as "not RoCE" and moves on, so
``Tap`` looks at them beside it: for each block of records the engine consumed, if its
"not RoCE" counter moved and the block holds the MAC Control multicast address
01:80:C2:00:00:01, the block's records are split and the frames sent to that address are
decoded here.  A capture of RoCE alone costs two counter reads per 8 MiB block.  Only
Ethernet link types are looked at; a PAUSE sent to a unicast address (which 802.3 allows,
and Wireshark flags) is counted as "not RoCE" only.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

from .. import fast, macc
from ..errors import DecodeError
from ..locate import LINKTYPE_ETHERNET
from ..pcapio import MAX_RECORD, Batch, pcap_split_reference
from . import flows as fl

NS = 1_000_000_000
DEFAULT_LINK_RATE = "100G"
DEFAULT_STORM = "100ms"  # mlx5e PFC stall prevention "auto" timeout (see above)
LINK = "all"  # the priority column of an 802.3x PAUSE
KIND = "pause_storm"  # the expert event kind (flows.EVENT_KINDS)
_SPLIT = fast._ext.pcap_split if fast._ext is not None else pcap_split_reference
_SPLIT_MAX = 1 << 16  # records per split call


def duration(ns: Fraction | float) -> str:
    """``8.120 us`` below a millisecond, ``3.036 ms`` from there on."""
    ns = float(ns)
    return f"{ns / 1e3:.3f} us" if ns < 1e6 else f"{ns / 1e6:.3f} ms"


class _Class:
    """One direction's one priority: counters and the running pause stretch."""

    __slots__ = ("pauses", "xons", "paused", "longest", "stretches", "storms", "start",
                 "until", "first", "frames")

    def __init__(self) -> None:
        self.pauses = self.xons = self.stretches = self.storms = 0
        self.paused: Fraction = Fraction(0)
        self.longest: Fraction = Fraction(0)
        self.start: int = 0  # the running stretch: start (ns), end of its timer, 1st frame
        self.until: Fraction | None = None
        self.first = 0
        self.frames = 0  # frames that kept the running stretch going


class PauseAccount:
    """Feeds on MAC Control frames in capture order; ``finish`` gives the report."""

    def __init__(self, link_rate_bps: float, storm_ns: int,
                 max_events: int = fl.MAX_EVENTS_PER_KIND) -> None:
        if link_rate_bps <= 0:
            raise ValueError(f"link rate {link_rate_bps!r} b/s must be positive")
        self.rate = Fraction(link_rate_bps)
        self.storm_ns = storm_ns
        self.max_events = max_events
        # ns per quantum, exact: 512 bits at the link rate
        self.quantum = Fraction(macc.QUANTUM_BITS * NS) / self.rate
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
                     linktype: int | None, base: int) -> None:
        """The pcap records in ``buf[pos:end]``, numbered from ``base + 1``: only read when
        the block holds the MAC Control address at all."""
        if linktype != LINKTYPE_ETHERNET or buf.find(macc.PFC_DST_MAC, pos, end) < 0:
            return
        while pos < end:
            ts, cap, orig = (array("q", bytes(8 * _SPLIT_MAX)) for _ in range(3))
            out: list[bytes] = []
            count, pos, status = _SPLIT(buf, pos, big_endian, frac_mul, _SPLIT_MAX, out, ts,
                                        cap, orig, MAX_RECORD, end)
            self._frames(out, ts, linktype, base)
            base += count
            if status or not count:
                return

    def scan_batch(self, batch: Batch, base: int) -> None:
        """A batch of frames numbered from ``base + 1``."""
        if batch.linktype != LINKTYPE_ETHERNET or macc.PFC_DST_MAC not in b"".join(
                batch.datas):
            return
        self._frames(batch.datas, batch.ts_ns, batch.linktype, base)

    def _frames(self, datas: list[bytes], tss: Any, linktype: int, base: int) -> None:
        dst = macc.PFC_DST_MAC
        for i, data in enumerate(datas):
            if data.startswith(dst):
                self.frame(base + i + 1, tss[i], data)

    # -- the timer of one class -----------------------------------------------------------

    def _apply(self, src: str, prio: int | str, quanta: int, number: int, ts: int) -> None:
        c = self.classes.get((src, prio))
        if c is None:
            c = self.classes[(src, prio)] = _Class()
        if quanta:
            c.pauses += 1
        else:
            c.xons += 1
        if c.until is not None and ts < c.until:  # paused now: refresh or resume
            if quanta:
                c.until = ts + quanta * self.quantum
                c.frames += 1
            else:
                self._close(src, prio, c, Fraction(ts))
            return
        if c.until is not None:  # the last stretch ran out before this frame
            self._close(src, prio, c, c.until)
        if quanta:
            c.start, c.until, c.first, c.frames = ts, ts + quanta * self.quantum, number, 1

    def _close(self, src: str, prio: int | str, c: _Class, end: Fraction) -> None:
        length = end - c.start
        c.paused += length
        c.stretches += 1
        c.longest = max(c.longest, length)
        c.until = None
        if length > self.storm_ns:
            c.storms += 1
            self.storms += 1
            if len(self.events) < self.max_events:
                what = "PAUSE storm: link" if prio == LINK else f"PFC pause storm: priority {prio}"
                text = fl.TEXTS[KIND] % (what, src, duration(length), c.frames,
                                         duration(self.storm_ns))
                self.events.append(fl.Event(c.first, fl.EVENT_KINDS[KIND], KIND, -1, -1, text,
                                            c.start))

    def finish(self) -> PauseReport:
        """Close the running stretches (at the end of their timers) and report."""
        for (src, prio), c in self.classes.items():
            if c.until is not None:
                self._close(src, prio, c, c.until)
        return PauseReport(self)


class PauseReport:
    """Rows per direction and priority, the storm events, and the JSON form."""

    def __init__(self, acc: PauseAccount) -> None:
        self.link_rate_bps = float(acc.rate)
        self.storm_ns = acc.storm_ns
        self.frames = acc.frames
        self.malformed = acc.malformed
        self.events = acc.events
        self.storms = acc.storms
        order = sorted(acc.classes, key=lambda k: (k[0], k[1] == LINK, str(k[1])))
        self.rows: list[dict[str, Any]] = [
            {"from": src, "priority": prio, "pauses": c.pauses, "xons": c.xons,
             "paused_ns": float(c.paused), "stretches": c.stretches,
             "longest_ns": float(c.longest), "storms": c.storms}
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


class Tap:
    """A ``CaptureReader`` stand-in that hands an analyser the reader's records and shows
    the blocks in which the analyser saw frames that are not RoCE to a ``PauseAccount``."""

    def __init__(self, reader: Any, analyzer: Any, account: PauseAccount) -> None:
        self._reader = reader
        self._an = analyzer
        self._acc = account

    def can_scan_records(self) -> bool:
        return bool(self._reader.can_scan_records())

    def scan_records(self, consume: Callable[..., tuple[int, int]],
                     *args: Any) -> Iterator[int]:
        an, acc = self._an, self._acc

        def tapped(buf: Any, pos: int, end: int, big_endian: bool, frac_mul: int,
                   linktype: int | None) -> tuple[int, int]:
            base, other = an.frames, an.not_roce
            new, status = consume(buf, pos, end, big_endian, frac_mul, linktype)
            if an.not_roce != other:
                acc.scan_records(buf, pos, new, big_endian, frac_mul, linktype, base)
            return new, status

        return self._reader.scan_records(tapped, *args)

    def batches(self, n: int) -> Iterator[Batch]:
        an = self._an
        for batch in self._reader.batches(n):
            base, other = an.frames, an.not_roce
            yield batch
            if an.not_roce != other:
                self._acc.scan_batch(batch, base)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


__all__ = ["DEFAULT_LINK_RATE", "DEFAULT_STORM", "PauseAccount", "PauseReport", "Tap"]
