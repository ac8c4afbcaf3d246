"""``roce replay``: put a capture back on the wire, with its timing and optional rewrites.

::

    roce replay capture.pcap -i eth1                      original timing
    roce replay capture.pcap -i eth1 --speed 2            twice as fast
    roce replay capture.pcap -i eth1 --pps 100000         fixed rate
    roce replay capture.pcap -i eth1 --topspeed --loop 10
    roce replay capture.pcap -i eth1 --rewrite-dqpn 0x12 --psn-offset 1000 \\
        --rewrite-src 10.0.0.9 --rewrite-dmac 02:00:00:00:00:09
    roce replay capture.pcap --rewrite-dst 10.0.0.7 -w rewritten.pcap   (no sending)

Rewrites apply to RoCE frames only (the walk of ``roce.fast`` succeeds); every other frame is
sent as it was captured, or dropped with ``--only-roce`` (which keeps malformed frames that
claim RoCE, the point of many captures).  ``--rewrite-src/--rewrite-dst`` take an IPv4 or
an IPv6 address and may be given twice, once per family; an IPv6 address also rewrites the
GIDs of RoCEv1 frames.  ``--psn-offset`` leaves CNPs alone (their PSN is reserved, 0).
After a rewrite the frame is patched in place: IPv4 header checksum, UDP checksum (only when
it was not 0) and ICRC are recomputed.  An ICRC that was wrong in the capture stays wrong
by the same bits and a wrong checksum is left as it was, so negative-test captures keep
testing what they tested.
MACs: a replayed Ethernet capture keeps its MACs (a capture is replayed as it was; the
``--rewrite-smac/--rewrite-dmac`` options change them).  Frames of other link types (Linux
cooked, raw IP) have none: they are sent as Ethernet II from the interface's MAC to the
MAC of their destination IP (``PeerMacs``: the neighbour table, else ARP), unless the
rewrite options give them; written without sending (``-w``, no ``-i``), they carry
placeholders (02:00:00:00:00:01 to 02:00:00:00:00:02).  Frames no interface sends
(shorter than an Ethernet header) are left out, counted, and reported once; the rest go.

Timing: deadlines on the monotonic clock; each wait sleeps, then spins the last 150 us.
Frames already due when the sender looks are sent in one ``sendmmsg`` call.  Gaps come from
the capture's timestamps (negative gaps count as 0; ``--max-gap`` caps long pauses) divided by
``--speed``; ``--pps`` ignores them.  ``--topspeed`` pre-builds every frame and hands them to
the kernel 1024 per system call.  The report gives frames and bytes sent, the achieved rate
(from the first to the last send) and the timing error: mean and maximum absolute
difference between when each frame was handed to the kernel and when it was scheduled.

Exit status: 0 replayed, 1 bad usage, 2 unreadable capture or an interface problem (unknown,
down, no privilege, frames it refused), 130 interrupted (the report is still printed).
"""

from __future__ import annotations

import argparse
import bisect
import ipaddress
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from roce import fast, iface
from roce.cli.craft import InputError, UsageError, fail, write_frames
from roce.headers import LAYOUTS
from roce.locate import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_ROCEV1,
    L3_GRH,
    L3_IPV4,
    L3_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
    OK,
    ROCE_PORT,
    is_malformed,
)
from roce.opcodes import CNP_OPCODES
from roce.options import (
    MAX_NS,
    bounded_int,
    parse_ip,
    parse_mac_bytes,
    parse_port,
    parse_pps,
    parse_qpn,
    parse_rate,
    parse_seconds,
)
from roce.pcapio import CaptureError, open_capture

NS = 1_000_000_000
PSN_MASK = LAYOUTS["bth"].field("psn").mask
MAX_LOOPS = (1 << 63) - 1


def _bytes_of(header: str, field: str) -> tuple[int, int]:
    """(start, end) byte offsets of a byte-aligned field inside its header."""
    f = LAYOUTS[header].field(field)
    assert f.bit_offset % 8 == 0 and f.bits % 8 == 0, (header, field)
    return f.bit_offset // 8, (f.bit_offset + f.bits) // 8


def _bits_of(header: str, field: str) -> tuple[int, int, int, int]:
    """(byte offset, byte count, shift, mask) of any field of up to 32 bits."""
    f = LAYOUTS[header].field(field)
    first, last = f.bit_offset // 8, (f.bit_offset + f.bits - 1) // 8
    n = last - first + 1
    return first, n, n * 8 - (f.bit_offset % 8) - f.bits, f.mask


ETH_DST, ETH_SRC = _bytes_of("eth", "dst"), _bytes_of("eth", "src")
IP4_SRC, IP4_DST = _bytes_of("ip", "src"), _bytes_of("ip", "dst")
IP4_CSUM = _bytes_of("ip", "checksum")
IP6_SRC, IP6_DST = _bytes_of("ipv6", "src"), _bytes_of("ipv6", "dst")
GRH_SRC, GRH_DST = _bytes_of("grh", "sgid"), _bytes_of("grh", "dgid")
UDP_SPORT, UDP_CSUM = _bytes_of("udp", "srcport"), _bytes_of("udp", "checksum")
BTH_DESTQP, BTH_PSN = _bits_of("bth", "destqp"), _bits_of("bth", "psn")
_ADDR = {L3_IPV4: (IP4_SRC, IP4_DST), L3_IPV6: (IP6_SRC, IP6_DST), L3_GRH: (GRH_SRC, GRH_DST)}
IPPROTO_UDP = 17


def _get(buf: bytearray, base: int, spec: tuple[int, int, int, int]) -> int:
    off, n, shift, mask = spec
    return (int.from_bytes(buf[base + off:base + off + n], "big") >> shift) & mask


def _put(buf: bytearray, base: int, spec: tuple[int, int, int, int], value: int) -> None:
    off, n, shift, mask = spec
    old = int.from_bytes(buf[base + off:base + off + n], "big")
    new = (old & ~(mask << shift)) | ((value & mask) << shift)
    buf[base + off:base + off + n] = new.to_bytes(n, "big")


# -- rewriting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rewrite:
    """What to change in each RoCE frame (None: leave it)."""

    smac: bytes | None = None
    dmac: bytes | None = None
    src4: bytes | None = None
    dst4: bytes | None = None
    src6: bytes | None = None  # IPv6 source, or RoCEv1 source GID
    dst6: bytes | None = None
    sport: int | None = None
    dqpn: int | None = None
    psn_offset: int = 0

    @property
    def active(self) -> bool:
        return self.touches_icrc or self.smac is not None or self.dmac is not None

    @property
    def touches_icrc(self) -> bool:
        """Changes to bytes the ICRC covers (everything but the MACs)."""
        return (any(v is not None for v in (self.src4, self.dst4, self.src6, self.dst6,
                                            self.sport, self.dqpn))
                or self.psn_offset % (PSN_MASK + 1) != 0)


def _udp_checksum(buf: bytearray, w: fast.Walk) -> int:
    """RFC 768 checksum of the UDP datagram with its pseudo-header (IPv4 or IPv6)."""
    l3 = w.l3_off
    if w.l3_kind == L3_IPV4:
        src, dst = buf[l3 + IP4_SRC[0]:l3 + IP4_SRC[1]], buf[l3 + IP4_DST[0]:l3 + IP4_DST[1]]
    else:
        src, dst = buf[l3 + IP6_SRC[0]:l3 + IP6_SRC[1]], buf[l3 + IP6_DST[0]:l3 + IP6_DST[1]]
    udp = bytearray(buf[w.udp_off:w.l4_end])
    udp[UDP_CSUM[0]:UDP_CSUM[1]] = b"\0\0"
    length = len(udp)
    if w.l3_kind == L3_IPV4:
        pseudo = src + dst + bytes((0, IPPROTO_UDP)) + length.to_bytes(2, "big")
    else:
        pseudo = src + dst + length.to_bytes(4, "big") + bytes((0, 0, 0, IPPROTO_UDP))
    value = fast.ip_checksum(bytes(pseudo) + bytes(udp))
    return value or 0xFFFF  # 0 means "no checksum" in UDP


def rewrite_frame(frame: bytes, rw: Rewrite, udp_port: int = ROCE_PORT) -> bytes:
    """``frame`` (Ethernet) with the rewrites applied; frames that are not a whole RoCE
    packet come back unchanged (the same object)."""
    if not rw.active:
        return frame
    w = fast.walk(frame, LINKTYPE_ETHERNET, udp_port)
    if w.status != OK:
        return frame
    buf = bytearray(frame)
    if rw.dmac is not None:
        buf[ETH_DST[0]:ETH_DST[1]] = rw.dmac
    if rw.smac is not None:
        buf[ETH_SRC[0]:ETH_SRC[1]] = rw.smac
    if not rw.touches_icrc:
        return bytes(buf)
    l3, b = w.l3_off, w.bth_off
    (s0, s1), (d0, d1) = _ADDR[w.l3_kind]
    src, dst = (rw.src4, rw.dst4) if w.l3_kind == L3_IPV4 else (rw.src6, rw.dst6)
    if src is not None:
        buf[l3 + s0:l3 + s1] = src
    if dst is not None:
        buf[l3 + d0:l3 + d1] = dst
    if rw.sport is not None and w.udp_off >= 0:
        buf[w.udp_off + UDP_SPORT[0]:w.udp_off + UDP_SPORT[1]] = rw.sport.to_bytes(2, "big")
    if rw.dqpn is not None:
        _put(buf, b, BTH_DESTQP, rw.dqpn)
    if rw.psn_offset and w.opcode not in CNP_OPCODES:
        _put(buf, b, BTH_PSN, _get(buf, b, BTH_PSN) + rw.psn_offset)
    if w.l3_kind == L3_IPV4 and (src is not None or dst is not None):
        _fix_ip_checksum(frame, buf, l3, w.l3_len)
    stored = int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
    error = stored ^ fast.icrc_of(frame, w)  # 0 for a good ICRC
    icrc = fast.icrc_of(bytes(buf), w) ^ error
    buf[w.icrc_off:w.l4_end] = icrc.to_bytes(4, "big")
    # The UDP checksum covers the ICRC (the ICRC masks the checksum): it comes last.  A zero
    # checksum means "none" and stays; a wrong one stays as it was.
    if w.udp_off >= 0:
        c0, c1 = w.udp_off + UDP_CSUM[0], w.udp_off + UDP_CSUM[1]
        old_sum = frame[c0:c1]
        if old_sum != b"\0\0" and _udp_checksum(bytearray(frame), w).to_bytes(2, "big") == \
                old_sum:
            buf[c0:c1] = _udp_checksum(buf, w).to_bytes(2, "big")
    return bytes(buf)


def _fix_ip_checksum(old: bytes, buf: bytearray, l3: int, hlen: int) -> None:
    """Recompute the IPv4 header checksum if it was right; a wrong one stays as it was
    (patching it would silently repair a negative test)."""
    c0, c1 = l3 + IP4_CSUM[0], l3 + IP4_CSUM[1]
    header = bytearray(old[l3:l3 + hlen])
    header[IP4_CSUM[0]:IP4_CSUM[1]] = b"\0\0"
    if fast.ip_checksum(bytes(header)).to_bytes(2, "big") != old[c0:c1]:
        return
    header = bytearray(buf[l3:l3 + hlen])
    header[IP4_CSUM[0]:IP4_CSUM[1]] = b"\0\0"
    buf[c0:c1] = fast.ip_checksum(bytes(header)).to_bytes(2, "big")


_DEFAULT_SMAC = bytes.fromhex("020000000001")
_DEFAULT_DMAC = bytes.fromhex("020000000002")
_SLL_ETYPE = _bytes_of("sll", "etype")
_SLL2_ETYPE = _bytes_of("sll2", "etype")
_SLL_SIZE, _SLL2_SIZE = LAYOUTS["sll"].size, LAYOUTS["sll2"].size


def to_ethernet(data: bytes, linktype: int, smac: bytes | None = None,
                dmac: bytes | None = None) -> bytes | None:
    """An Ethernet II frame for a captured frame of another link type (None if unknown)."""
    if linktype == LINKTYPE_ETHERNET:
        return data
    if linktype == LINKTYPE_LINUX_SLL and len(data) >= _SLL_SIZE:
        etype, body = data[_SLL_ETYPE[0]:_SLL_ETYPE[1]], data[_SLL_SIZE:]
    elif linktype == LINKTYPE_LINUX_SLL2 and len(data) >= _SLL2_SIZE:
        etype, body = data[_SLL2_ETYPE[0]:_SLL2_ETYPE[1]], data[_SLL2_SIZE:]
    elif linktype == LINKTYPE_RAW and data:
        version = data[0] >> 4
        if version not in (4, 6):
            return None
        etype = (ETHERTYPE_IPV4 if version == 4 else ETHERTYPE_IPV6).to_bytes(2, "big")
        body = data
    else:
        return None
    return (dmac or _DEFAULT_DMAC) + (smac or _DEFAULT_SMAC) + etype + body


# The shortest frame an Ethernet interface takes: its header.  A capture may hold shorter
# ones (a snap length of a few bytes, a damaged file); the kernel refuses them (EINVAL).
MIN_FRAME = LAYOUTS["eth"].size


def short_frames_warning(command: str, count: int) -> str:
    """The one line ``send -r`` and ``replay`` print for the frames they left out as too
    short to send."""
    return (f"roce {command}: warning: {count} frames shorter than an Ethernet header "
            f"({MIN_FRAME} bytes) cannot be sent and were left out")


_L3_DST = {ETHERTYPE_IPV4: (L3_IPV4, IP4_DST), ETHERTYPE_IPV6: (L3_IPV6, IP6_DST),
           ETHERTYPE_ROCEV1: (L3_GRH, GRH_DST)}


class PeerMacs:
    """MACs for the frames of a capture of another link type (Linux cooked, raw IP), which
    carry none of their own: the sending interface's MAC as the source, and as the
    destination the MAC of the frame's destination IP (or RoCEv1 GID) on that interface
    (``roce.iface.resolve_mac``: the neighbour table or ARP, once per address).  ``smac``
    and ``dmac``, when given (``--rewrite-smac/--rewrite-dmac``), win.  Frames without an
    IP destination keep the placeholder destination."""

    def __init__(self, interface: str, smac: bytes | None = None,
                 dmac: bytes | None = None) -> None:
        self.interface = interface
        self.smac, self.dmac = smac, dmac
        self._peers: dict[str, bytes] = {}

    def __call__(self, frame: bytes) -> bytes:
        """``frame`` (Ethernet, as ``to_ethernet`` made it) with its MACs filled in."""
        if self.smac is None:
            self.smac = parse_mac_bytes(iface.interface_mac(self.interface))
        dmac = self.dmac
        if dmac is None:
            dst = self._destination(frame)
            dmac = _DEFAULT_DMAC if dst is None else self._peer(dst)
        return dmac + self.smac + frame[ETH_SRC[1]:]

    @staticmethod
    def _destination(frame: bytes) -> str | None:
        etype = int.from_bytes(frame[ETH_SRC[1]:ETH_SRC[1] + 2], "big")
        if etype not in _L3_DST:
            return None
        kind, (d0, d1) = _L3_DST[etype]
        at = MIN_FRAME
        if len(frame) < at + d1:
            return None
        return str(ipaddress.ip_address(frame[at + d0:at + d1]))

    def _peer(self, ip: str) -> bytes:
        mac = self._peers.get(ip)
        if mac is None:
            mac = self._peers[ip] = parse_mac_bytes(iface.resolve_mac(self.interface, ip))
        return mac


class Prepared(NamedTuple):
    frames: list[bytes]
    stamps: list[int]  # capture timestamps (ns)
    read: int  # frames in the capture
    rewritten: int
    dropped_not_roce: int  # --only-roce
    dropped_linktype: int  # link types that cannot become Ethernet
    dropped_short: int = 0  # shorter than MIN_FRAME: no interface sends them
    converted: tuple[int, ...] = ()  # frames made Ethernet from another link type (indexes)


def prepare(records: Iterable[tuple[bytes, int, int]], rw: Rewrite, only_roce: bool = False,
            udp_port: int = ROCE_PORT) -> Prepared:
    """Frames to send from (data, ts_ns, linktype) records: Ethernet, filtered, rewritten."""
    frames: list[bytes] = []
    stamps: list[int] = []
    converted: list[int] = []
    read = rewritten = not_roce = bad_link = short = 0
    walk = fast.walk
    for data, ts, linktype in records:
        read += 1
        eth = to_ethernet(data, linktype, rw.smac, rw.dmac)
        if eth is None:
            bad_link += 1
            continue
        if len(eth) < MIN_FRAME:
            short += 1
            continue
        if linktype != LINKTYPE_ETHERNET:
            converted.append(len(frames))
        w = walk(eth, LINKTYPE_ETHERNET, udp_port)
        if w.status != OK:
            if only_roce and not (is_malformed(w.status) and w.bth_off >= 0
                                  or w.l3_kind == L3_GRH):
                not_roce += 1
                continue
            frames.append(eth)
        else:
            new = rewrite_frame(eth, rw, udp_port)
            rewritten += new is not eth
            frames.append(new)
        stamps.append(ts)
    return Prepared(frames, stamps, read, rewritten, not_roce, bad_link, short,
                    tuple(converted))


# -- scheduling -----------------------------------------------------------------------------


def schedule(stamps: Sequence[int], speed: float = 1.0, pps: float | None = None,
             max_gap: float | None = None) -> tuple[list[int], int]:
    """(send offset of each frame in ns from the start, period of one loop in ns).

    With ``pps`` frame i goes at i/pps.  Otherwise at the sum of the capture's gaps before
    it, each divided by ``speed`` (negative gaps count as 0, ``max_gap`` seconds caps them).
    The next loop starts one average gap after the last frame, so loops join smoothly.
    """
    n = len(stamps)
    if n == 0:
        return [], 0
    if pps is not None:
        _fits((n - 1) / pps * NS, n)
        return [round(i * NS / pps) for i in range(n)], round(n * NS / pps)
    cap = None if max_gap is None else max_gap * NS
    # the gaps are summed as integers, then divided once: the last offset is checked
    # before any float of it is rounded (a tiny speed makes it infinite)
    total = 0
    prev = stamps[0]
    gaps = []
    for ts in stamps[1:]:
        gap = ts - prev if ts > prev else 0
        prev = ts
        if cap is not None and gap > cap:
            gap = int(cap)
        total += gap
        gaps.append(gap)
    _fits(total / speed, n)
    out = [0]
    t = 0.0
    for gap in gaps:
        t += gap / speed
        out.append(round(t))
    period = out[-1] + (round(out[-1] / (n - 1)) if n > 1 else 0)
    return out, period


def _fits(last_ns: float, n: int) -> None:
    """ValueError when the last frame of a schedule is due past what the pacer's 64-bit
    nanosecond deadlines hold (an OverflowError, or a sleep too long, otherwise)."""
    if not last_ns <= MAX_NS:  # inf and nan included
        raise ValueError(f"the {n} frames would take {last_ns / NS:.3g} s, past the "
                         f"{MAX_NS // NS} s a schedule holds")


class Report(NamedTuple):
    sent: int
    nbytes: int
    failed: int
    first_ns: int  # monotonic clock at the first and after the last send
    last_ns: int
    timing: iface.TimingStats | None  # None at top speed
    interrupted: KeyboardInterrupt | None  # the stop signal that ended the sending, if one did

    @property
    def pps(self) -> float:
        """Frames per second from the first send to the last."""
        span = (self.last_ns - self.first_ns) / NS
        if self.sent < 2 or span <= 0:
            return 0.0
        return (self.sent - 1) / span

    @property
    def mbps(self) -> float:
        return self.pps * (self.nbytes / self.sent) * 8 / 1e6 if self.sent else 0.0


def send_paced(sender: iface.Sender, batch: iface.FrameBatch, offsets: Sequence[int],
               period: int, loops: int | None, lead_ns: int = 2_000_000,
               start_ns: int | None = None) -> Report:
    """Send ``batch`` on schedule ``offsets`` (ns), ``loops`` times (None: until Ctrl-C).

    The schedule starts ``lead_ns`` from now, or at ``start_ns`` (monotonic ns) when given:
    a run sent in several batches keeps one schedule.

    One frame due: one ``send``.  Several due (a slow wake-up, a high rate): they go in one
    ``send_many`` and each counts its own lateness.  The loop body is kept flat because at
    100 kpps it has 10 us per frame, Python included.
    """
    pacer = iface.Pacer()
    timing = iface.TimingStats()
    clock = time.monotonic_ns
    spin = pacer.spin_ns
    n = batch.count
    frames = batch.frames
    sizes = [len(f) for f in frames]
    send, send_many = sender.send, sender.send_many
    sent = nbytes = failed = 0
    total_err = worst = count = 0
    start = clock() + lead_ns if start_ns is None else start_ns
    first = last = 0
    loop = 0
    interrupted: KeyboardInterrupt | None = None
    try:
        while loops is None or loop < loops:
            base = start + loop * period
            i = 0
            while i < n:
                target = base + offsets[i]
                now = clock()
                if target - now > spin:
                    now = pacer.wait(target, now)
                else:
                    while now < target:
                        now = clock()
                if not first:
                    first = now
                late = now - base
                if i + 1 == n or offsets[i + 1] > late:
                    if send(frames[i]):
                        sent += 1
                        nbytes += sizes[i]
                    else:
                        failed += 1
                    err = now - target
                    total_err += err
                    count += 1
                    if err > worst:
                        worst = err
                    i += 1
                    continue
                # everything due by now leaves in one system call
                j = bisect.bisect_right(offsets, late, i + 1, min(n, i + 1024))
                res = send_many(batch, i, j - i)
                for k in range(i, j):
                    err = late - offsets[k]
                    total_err += err
                    if err > worst:
                        worst = err
                count += j - i
                bad = len(res.failed)
                failed += bad
                sent += j - i - bad
                nbytes += sum(sizes[i:j]) - sum(sizes[k] for k in res.failed)
                i = j
            last = clock()
            loop += 1
    except KeyboardInterrupt as exc:
        interrupted = exc
        last = clock()
    timing.count, timing.total, timing.worst = count, total_err, worst
    return Report(sent, nbytes, failed, first, last or first, timing, interrupted)


def send_topspeed(sender: iface.Sender, batch: iface.FrameBatch, loops: int | None) -> Report:
    """Send ``batch`` as fast as the kernel takes it."""
    clock = time.monotonic_ns
    sent = nbytes = failed = 0
    first = clock()
    loop = 0
    interrupted: KeyboardInterrupt | None = None
    sizes = None
    try:
        while loops is None or loop < loops:
            res = sender.send_many(batch, 0, batch.count)
            if res.failed:
                if sizes is None:
                    sizes = [len(f) for f in batch.frames]
                failed += len(res.failed)
                nbytes -= sum(sizes[k] for k in res.failed)
            sent += batch.count - len(res.failed)
            nbytes += batch.nbytes
            loop += 1
    except KeyboardInterrupt as exc:
        interrupted = exc
    return Report(sent, nbytes, failed, first, clock(), None, interrupted)


# -- command line ---------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("exit status: 0 replayed, 1 bad usage, 2 unreadable capture or "
                     "interface problem, 130 interrupted.")
    parser.add_argument("file", metavar="FILE", help="pcap/pcapng capture (gzip ok)")
    parser.add_argument("-i", "--interface", metavar="IFACE",
                        help="interface to send on (nothing is sent without it)")
    parser.add_argument("-w", "--write", metavar="FILE",
                        help="also write the frames to send (rewritten) to a pcap")
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument("--speed", type=parse_rate, metavar="X",
                        help="multiply the original speed by X (default 1)")
    timing.add_argument("--pps", type=parse_pps, metavar="N", help="send N frames per second")
    timing.add_argument("--topspeed", action="store_true", help="send as fast as possible")
    parser.add_argument("--max-gap", type=parse_seconds, metavar="SEC",
                        help="cap each pause of the original timing at SEC seconds")
    parser.add_argument("--loop", type=bounded_int(0, MAX_LOOPS, "a loop count"), default=1,
                        metavar="N",
                        help="replay N times (0: until interrupted)")
    parser.add_argument("--only-roce", action="store_true",
                        help="drop frames that are not RoCE (malformed RoCE is kept)")
    parser.add_argument("--udp-port", type=parse_port, default=ROCE_PORT, metavar="N",
                        help=f"RoCEv2 UDP port (default {ROCE_PORT})")
    g = parser.add_argument_group("rewrites (RoCE frames; ICRC and checksums recomputed)")
    g.add_argument("--rewrite-smac", type=parse_mac_bytes, metavar="MAC")
    g.add_argument("--rewrite-dmac", type=parse_mac_bytes, metavar="MAC")
    g.add_argument("--rewrite-src", type=parse_ip, action="append", default=[], metavar="IP",
                   help="source IPv4 or IPv6 (GID for RoCEv1); once per family")
    g.add_argument("--rewrite-dst", type=parse_ip, action="append", default=[], metavar="IP")
    g.add_argument("--rewrite-sport", type=parse_port, metavar="PORT", help="UDP source port")
    g.add_argument("--rewrite-dqpn", type=parse_qpn, metavar="QPN", help="BTH destination QP")
    g.add_argument("--psn-offset", type=bounded_int(-PSN_MASK, PSN_MASK, "a PSN offset"),
                   default=0, metavar="N",
                   help="add N to every PSN, modulo 2^24 (negative allowed)")
    parser.add_argument("--backend", choices=("auto", "packet", "scapy"), default="auto",
                        help="how frames are sent: AF_PACKET socket (auto) or Scapy")


def _addresses(values: list, option: str) -> tuple[bytes | None, bytes | None]:
    v4 = [a for a in values if a.version == 4]
    v6 = [a for a in values if a.version == 6]
    if len(v4) > 1 or len(v6) > 1:
        raise UsageError(f"{option}: at most one IPv4 and one IPv6 address")
    return (v4[0].packed if v4 else None), (v6[0].packed if v6 else None)


def rewrite_from_args(args: argparse.Namespace) -> Rewrite:
    src4, src6 = _addresses(args.rewrite_src, "--rewrite-src")
    dst4, dst6 = _addresses(args.rewrite_dst, "--rewrite-dst")
    return Rewrite(smac=args.rewrite_smac, dmac=args.rewrite_dmac, src4=src4, dst4=dst4,
                   src6=src6, dst6=dst6, sport=args.rewrite_sport, dqpn=args.rewrite_dqpn,
                   psn_offset=args.psn_offset % (PSN_MASK + 1))


def report_text(rep: Report, iface_name: str, elapsed: float) -> str:
    parts = [f"replayed {rep.sent} frames ({rep.nbytes} bytes) on {iface_name} in "
             f"{elapsed:.3f} s"]
    if rep.sent > 1:
        parts.append(f"{rep.pps:.0f} pps, {rep.mbps:.2f} Mb/s")
    if rep.timing is not None and rep.timing.count:
        parts.append(f"timing error mean {rep.timing.mean / 1000:.1f} us, "
                     f"max {rep.timing.worst / 1000:.1f} us")
    return "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (UsageError, InputError, iface.InterfaceError) as exc:
        return fail("replay", exc if not isinstance(exc, iface.InterfaceError)
                    else InputError(str(exc)))
    except CaptureError as exc:
        return fail("replay", InputError(str(exc)))


def _run(args: argparse.Namespace) -> int:
    if args.interface is None and args.write is None:
        raise UsageError("-i IFACE is required (or -w FILE to write the rewritten capture "
                         "without sending)")
    if args.max_gap is not None and (args.pps or args.topspeed):
        raise UsageError("--max-gap applies to the original timing only")
    rw = rewrite_from_args(args)
    with open_capture(args.file) as reader:
        prep = prepare(((f.data, f.ts_ns, f.linktype) for f in reader), rw, args.only_roce,
                       args.udp_port)
        problems = reader.problems
    if problems:
        print(f"roce replay: warning: {args.file}: {problems[0].message}", file=sys.stderr)
    if prep.dropped_linktype:
        print(f"roce replay: warning: {prep.dropped_linktype} frames of a link type that "
              "cannot be sent as Ethernet were left out", file=sys.stderr)
    if prep.dropped_short:
        print(short_frames_warning("replay", prep.dropped_short), file=sys.stderr)
    offsets: list[int] = []
    period = 0
    if args.interface is not None:
        if not args.topspeed:  # a schedule this capture's timing cannot hold is bad usage
            try:
                offsets, period = schedule(prep.stamps, args.speed or 1.0, args.pps,
                                           args.max_gap)
            except ValueError as exc:
                flag = ("--pps" if args.pps is not None else "--speed" if args.speed
                        is not None else "the capture's timing (--max-gap caps its pauses)")
                raise UsageError(f"{flag}: {exc}") from None
        iface.check_interface(args.interface)
        if prep.converted:  # frames that had no MACs: ours, and the peer's
            macs = PeerMacs(args.interface, rw.smac, rw.dmac)
            for i in prep.converted:
                prep.frames[i] = macs(prep.frames[i])
    out = sys.stderr if args.write == "-" else sys.stdout  # -w -: the pcap has stdout
    if args.write is not None:
        write_frames(args.write, zip(prep.frames, prep.stamps))
    if args.interface is None:
        print(f"wrote {len(prep.frames)} frames to {args.write} ({prep.rewritten} rewritten)",
              file=out)
        return 0
    if not prep.frames:
        print(f"roce replay: nothing to send ({prep.read} frames read, "
              f"{prep.dropped_not_roce} not RoCE)", file=sys.stderr)
        return 0
    sender = iface.open_sender(args.interface, args.backend)
    loops = None if args.loop == 0 else args.loop
    with sender:  # a stop signal ends the sending; the report is printed, then exit 130
        batch = iface.FrameBatch(prep.frames)
        t0 = time.monotonic()
        if args.topspeed:
            rep = send_topspeed(sender, batch, loops)
        else:
            rep = send_paced(sender, batch, offsets, period, loops)
        elapsed = time.monotonic() - t0
    print(report_text(rep, args.interface, elapsed), file=out)
    if prep.dropped_not_roce:
        print(f"{prep.dropped_not_roce} frames per loop were not RoCE and were left out "
              "(--only-roce)", file=out)
    if rep.failed:
        print(f"roce replay: {args.interface} refused {rep.failed} frames (longer than its "
              f"MTU {sender.mtu} allows?)", file=sys.stderr)
        return 2
    if rep.interrupted:
        rep.interrupted.add_note(f"after {rep.sent:,} frames sent")
        raise rep.interrupted
    return 0


__all__ = ["MIN_FRAME", "PeerMacs", "Prepared", "Report", "Rewrite", "add_arguments", "prepare",
           "rewrite_frame", "run", "schedule", "send_paced", "send_topspeed",
           "short_frames_warning", "to_ethernet"]
