"""One line per packet, tshark style: ``number time source -> destination protocol length Info``.

Two ways to the same text:

* ``Summarizer.fast_lines`` formats a whole batch of frames from the columns of
  ``roce.fast.scan`` (BTH and the first extended header read in C, no Python object per
  header).  This is the default ``roce decode`` path and the one that has to be quick, so
  it is written as one flat loop with table look-ups instead of helper calls.
* ``info_text`` / ``Summarizer.columns`` build the same columns from a frame's flat field
  dict (``bth.psn``, ``reth.va`` ...); they serve frames the fast path does not handle
  (malformed, truncated, not RoCE) and the ``-Y`` / ``-T`` paths, where the fields are
  decoded anyway.  Tests hold the two paths to identical output.

The flat fields come from ``roce.families.base.fields``.

The Info text follows Wireshark's InfiniBand dissector (short opcode name, ``QP=0x%06x``)
and adds what a RoCE reader looks for first: PSN, the key fields of each extended header,
the AETH syndrome in words, and flags (``[AckReq]``, ``[ECN CE]``, ``[BAD ICRC]``,
``[Truncated]``, ``[Malformed: why]``).
"""

from __future__ import annotations

import socket
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from roce import fast
from roce.families.base import macctrl
from roce.families.base.fields import (
    header_fields,
    is_capture_cut,
    is_roce_like,
    known_headers,
)
from roce.headers import (
    DECODERS,
    ECN_CE,
    LAYOUTS,
    NAK_CODE_OF,
    NAK_PSN_SEQUENCE_ERROR,
    SIZE_OF,
    describe_syndrome,
    selective_aeth,
    syndrome_type,
)
from roce.locate import (
    FLAG_A,
    L3_GRH,
    L3_IPV4,
    L3_IPV6,
    NR_ETHERTYPE,
    NR_FRAGMENT,
    NR_LINKTYPE,
    NR_PORT,
    NR_PROTO,
    OK,
    Walk,
    is_malformed,
    is_not_roce,
)
from roce.macc import ETHERTYPE_MACC
from roce.opcodes import CNP_OPCODES, OPCODES, Transport

NS = 1_000_000_000
# tshark prints "→"; plain ASCII keeps every line one byte per character, which makes the
# text cheaper to build and to encode (a tenth of the one-line path's time) and safe on
# any terminal encoding.
ARROW = "->"

Fields = Mapping[str, Any]

# -- Info text pieces -----------------------------------------------------------------------


def _syndrome_parts(syn: int) -> tuple[str, str]:
    """(text before ``MSN=``, text after it): ``ACK MSN=5 credits=31``, ``NAK ... MSN=5``."""
    text = describe_syndrome(syn)
    if syndrome_type(syn) == 0:  # "ACK credits=N": MSN goes between the two words
        word, _, rest = text.partition(" ")
        return word, " " + rest
    return text, ""


SYNDROME_PARTS: tuple[tuple[str, str], ...] = tuple(_syndrome_parts(s) for s in range(256))
# Syndromes that may be a selective NAK (headers.selective_aeth decides): the fast path
# formats every other AETH inline.
_MAYBE_SACK = tuple(NAK_CODE_OF[s] == NAK_PSN_SEQUENCE_ERROR for s in range(256))


def aeth_text(syn: int, psn: int, msn: int) -> str:
    """``ACK MSN=5 credits=31``; a selective NAK names its ePSN (BTH PSN) and the PSN that
    arrived out of order (its MSN; docs/protocol.md, "Selective repeat (IRN) encoding")."""
    pre, post = SYNDROME_PARTS[syn]
    if psn >= 0 and selective_aeth(syn, psn, msn):
        return f"{pre}, selective: ePSN={psn}, PSN={msn} out of order"
    return f"{pre} MSN={msn}{post}"


def eth_facts(name: str, f: Fields, opcode: int) -> str:
    """The key facts of one extended header for the Info column ("" if none)."""
    if name == "reth":
        return f"VA=0x{f['reth.va']:x} RKey=0x{f['reth.r_key']:08x} Len={f['reth.dmalen']}"
    if name == "aeth":
        return aeth_text(f["aeth.syndrome"], f.get("bth.psn", -1), f["aeth.msn"])
    if name == "deth":
        return f"QKey=0x{f['deth.q_key']:08x} SrcQP=0x{f['deth.srcqp']:06x}"
    if name == "atomiceth":
        va, rkey, swap = f["atomiceth.va"], f["atomiceth.r_key"], f["atomiceth.swapdt"]
        # Fetch&Add has no compare operand; the swap field is its addend.
        if OPCODES[opcode].ident.endswith("FETCH_ADD"):
            return f"VA=0x{va:x} RKey=0x{rkey:08x} Add=0x{swap:x}"
        return f"VA=0x{va:x} RKey=0x{rkey:08x} Swap=0x{swap:x} Cmp=0x{f['atomiceth.cmpdt']:x}"
    if name == "atomicacketh":
        return f"Orig=0x{f['atomicacketh.origremdt']:x}"
    if name == "immdt":
        return f"ImmDt=0x{f['immdt']:08x}"
    if name == "ieth":
        return f"InvRKey=0x{f['ieth']:08x}"
    if name == "rdeth":
        return f"EECnxt=0x{f['rdeth.eecnxt']:06x}"
    if name == "xrceth":
        return f"XRCSRQ=0x{f['xrceth.xrcsrq']:06x}"
    if name == "feth":
        return f"Sel={f['feth.sel']} PLT={f['feth.plt']}"
    return ""  # CNP padding


def opcode_name(code: int) -> str:
    op = OPCODES.get(code)
    return op.short_name if op is not None else f"Unknown opcode 0x{code:02x}"


def info_text(f: Fields) -> str:
    """Info column for a frame whose BTH was decoded, without flags."""
    code = f["bth.opcode"]
    if code in CNP_OPCODES:  # RoCE's or native InfiniBand's: no PSN to show (PSN 0)
        return f"{opcode_name(code)} QP=0x{f['bth.destqp']:06x}"
    parts = [f"{opcode_name(code)} QP=0x{f['bth.destqp']:06x} PSN={f['bth.psn']}"]
    op = OPCODES.get(code)
    for name in op.headers if op is not None else ():
        if name not in f:
            break
        facts = eth_facts(name, f, code)
        if facts:
            parts.append(facts)
    return " ".join(parts)


# Flag suffix by (AckReq | ECN CE << 1 | bad ICRC << 2): a table, not string building.
FLAG_TEXT: tuple[str, ...] = tuple(
    "".join(t for bit, t in ((1, " [AckReq]"), (2, " [ECN CE]"), (4, " [BAD ICRC]")) if i & bit)
    for i in range(8))
# The same, indexed straight from the scan columns: BTH flags & FLAG_A (bit 2), the ECN
# bits (3-4) and ICRC ok (bit 5).
FLAGS_BY_BITS: tuple[str, ...] = tuple(
    FLAG_TEXT[(1 if i & FLAG_A else 0) | (2 if (i >> 3) & 3 == 3 else 0)
              | (0 if i >> 5 else 4)] for i in range(64))


def ecn_of(f: Fields) -> int:
    if "ip.dsfield.ecn" in f:
        return f["ip.dsfield.ecn"]
    if "ipv6.tclass" in f:
        return f["ipv6.tclass"] & 3
    return 0


# -- colour -----------------------------------------------------------------------------------

RESET = "\x1b[0m"
RED, YELLOW, MAGENTA, DIM, RED_BOLD = "\x1b[31m", "\x1b[33m", "\x1b[35m", "\x1b[2m", "\x1b[1;31m"
_ACK_OPS = frozenset(c for c, op in OPCODES.items() if op.operation.value in ("ack", "atomic_ack"))


def colour_of(opcode: int, syndrome: int | None, ecn: int, bad: bool) -> str:
    """ANSI colour for a RoCE line: problems first, then what the line is about."""
    if bad:
        return RED_BOLD
    if syndrome is not None:
        kind = syndrome_type(syndrome)
        if kind == 3:
            return RED
        if kind == 1:
            return YELLOW
    if opcode in CNP_OPCODES or ecn == ECN_CE:
        return MAGENTA
    if opcode in _ACK_OPS:
        return DIM
    return ""


# -- non-RoCE frames ----------------------------------------------------------------------------

_IP_PROTOCOLS = {1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 47: "GRE", 50: "ESP", 58: "ICMPv6",
                 89: "OSPF", 132: "SCTP"}
_ETHERTYPES = {0x0806: "ARP", 0x88CC: "LLDP", ETHERTYPE_MACC: "MAC-Ctrl", 0x88F7: "PTP",
               0x8100: "VLAN", 0x88A8: "VLAN", 0x8863: "PPPoED", 0x8864: "PPPoES",
               0x8847: "MPLS", 0x88E5: "MACsec", 0x0842: "WoL", 0x22F3: "TRILL"}


def _ether_info(data: bytes, etype: int, off: int) -> tuple[str, str]:
    """Protocol and Info for a frame with a non-IP EtherType (payload at ``off``)."""
    if etype == 0x0806 and len(data) >= off + 28:  # ARP for IPv4 over Ethernet
        oper = int.from_bytes(data[off + 6:off + 8], "big")
        sha = data[off + 8:off + 14].hex(":")
        spa = socket.inet_ntoa(data[off + 14:off + 18])
        tpa = socket.inet_ntoa(data[off + 24:off + 28])
        if oper == 1:
            return "ARP", f"Who has {tpa}? Tell {spa}"
        if oper == 2:
            return "ARP", f"{spa} is at {sha}"
        return "ARP", f"ARP opcode {oper}"
    if etype == ETHERTYPE_MACC:  # PAUSE or PFC (802.1Qbb)
        return macctrl.columns(data, off)
    return _ETHERTYPES.get(etype, "Ethernet"), f"EtherType 0x{etype:04x}"


def other_columns(data: bytes, w: Walk, f: Fields, linktype: int,
                  arrow: str = ARROW) -> tuple[str, str]:
    """(protocol, Info) for a frame that is not RoCE (walk status below 10)."""
    st = w.status
    if st == NR_PORT and "udp" in f:
        return "UDP", (f"{f['udp.srcport']} {arrow} {f['udp.dstport']} "
                       f"Len={max(f['udp.length'] - 8, 0)}")
    if st == NR_PROTO:
        l3 = "ip" if "ip" in f else "ipv6"
        proto = f.get("ip.proto" if l3 == "ip" else "ipv6.nxt", -1)
        name = _IP_PROTOCOLS.get(proto)
        tcp = w.l3_off + w.l3_len
        if proto == 6 and len(data) >= tcp + 4:
            sport = int.from_bytes(data[tcp:tcp + 2], "big")
            dport = int.from_bytes(data[tcp + 2:tcp + 4], "big")
            return "TCP", f"{sport} {arrow} {dport}"
        if name is not None:
            return name, f"{name} (IP protocol {proto})"
        return ("IPv4" if l3 == "ip" else "IPv6"), f"IP protocol {proto}"
    if st == NR_FRAGMENT:
        return "IPv4", f"Fragmented IP protocol (proto={f.get('ip.proto', -1)})"
    if st == NR_LINKTYPE:
        return "Unknown", f"link type {linktype} is not supported"
    if st == NR_ETHERTYPE:
        etype = w.err_a
        off = w.err_offset + 2  # the walk points at the last EtherType field
        return _ether_info(data, etype, off)
    return "Ethernet", ""


def l3_protocol(f: Fields) -> str:
    for name, proto in (("grh", "RoCE"), ("ipv6", "IPv6"), ("ip", "IPv4"), ("eth", "Ethernet"),
                        ("sll", "SLL"), ("sll2", "SLL")):
        if name in f:
            return proto
    return "Frame"


def source_destination(f: Fields) -> tuple[str, str]:
    """IP addresses, GIDs for RoCEv1, MACs when there is no network layer."""
    for src, dst in (("ip.src", "ip.dst"), ("ipv6.src", "ipv6.dst"), ("grh.sgid", "grh.dgid"),
                     ("eth.src", "eth.dst")):
        if src in f:
            return str(f[src]), str(f[dst])
    return "", ""


# -- time column --------------------------------------------------------------------------------

TIME_MODES = ("r", "a", "ad", "adoy", "d", "dd", "e", "u", "ud", "udoy")


def seconds(ns: int, digits: int) -> str:
    """Signed nanoseconds as seconds with ``digits`` decimals (6 or 9), exactly."""
    sign = ""
    if ns < 0:
        sign, ns = "-", -ns
    if digits == 9:
        return f"{sign}{ns // NS}.{ns % NS:09d}"
    us = ns // 1000
    return f"{sign}{us // 1_000_000}.{us % 1_000_000:06d}"


class TimeColumn:
    """The time column in one of tshark's ``-t`` formats.

    ``r`` since the first frame, ``d`` since the previous captured frame, ``dd`` since the
    previous displayed one, ``a``/``ad``/``adoy`` local wall clock (time, date and time,
    day of year), ``u``/``ud``/``udoy`` the same in UTC, ``e`` seconds since the epoch.
    Digits follow the capture: 9 for nanosecond files, 6 for microsecond ones.
    """

    def __init__(self, mode: str = "r", digits: int = 9) -> None:
        if mode not in TIME_MODES:
            raise ValueError(f"unknown time format {mode!r}")
        self.mode = mode
        self.digits = digits
        self.first: int | None = None
        self.prev: int | None = None  # previous captured frame
        self.prev_shown: int | None = None
        self._clock: dict[int, str] = {}  # whole second -> wall-clock text

    def _wall(self, ts: int) -> str:
        sec, frac = divmod(ts, NS)
        text = self._clock.get(sec)
        if text is None:
            utc = self.mode[0] == "u"
            tm = time.gmtime(sec) if utc else time.localtime(sec)
            fmt = {"a": "%H:%M:%S", "ad": "%Y-%m-%d %H:%M:%S", "adoy": "%Y/%j %H:%M:%S"}[
                "a" + self.mode[1:]]
            text = time.strftime(fmt, tm)
            if len(self._clock) > 4096:
                self._clock.clear()
            self._clock[sec] = text
        if self.digits == 9:
            return f"{text}.{frac:09d}"
        return f"{text}.{frac // 1000:06d}"

    def batch(self, stamps: Sequence[int], shown: Sequence[int]) -> list[str]:
        """Time texts for the frames ``shown`` (indexes into ``stamps``, ascending).

        ``stamps`` holds every captured frame of the batch, in order, so that ``d`` can
        refer to frames that are not shown.
        """
        if not stamps:
            return []
        if self.first is None:
            self.first = stamps[0]
        mode, digits = self.mode, self.digits
        if mode == "r":
            t0 = self.first
            picked = stamps if len(shown) == len(stamps) else [stamps[i] for i in shown]
            out = self._relative(picked, t0, digits)
        elif mode == "d":
            prev = self.prev if self.prev is not None else stamps[0]
            out = [seconds(stamps[i] - (stamps[i - 1] if i else prev), digits) for i in shown]
        elif mode == "dd":
            out = []
            last = self.prev_shown
            for i in shown:
                t = stamps[i]
                out.append(seconds(t - (last if last is not None else t), digits))
                last = t
            self.prev_shown = last
        elif mode == "e":
            out = [seconds(stamps[i], digits) for i in shown]
        else:
            out = [self._wall(stamps[i]) for i in shown]
        self.prev = stamps[-1]
        if shown and mode != "dd":
            self.prev_shown = stamps[shown[-1]]
        return out

    def relative_plan(self, stamps: Sequence[int], n: int) -> tuple[str, int, int] | None:
        """For the default ``-t r`` column, when the first ``n`` frames of a batch (all of
        them shown) lie in one second since the first frame: (the seconds and the point,
        the nanosecond they count from, digits), from which a compiled formatter writes
        each text as ``_relative`` would; the column then moves on as ``batch`` moves it.
        None when the plan does not apply (call ``batch``)."""
        if self.mode != "r" or not n:
            return None
        if self.first is None:
            self.first = stamps[0]
        t0 = self.first
        picked = stamps[:n]
        lo, hi = min(picked) - t0, max(picked) - t0
        if lo < 0 or lo // NS != hi // NS:
            return None
        self.prev = stamps[-1]
        self.prev_shown = stamps[n - 1]
        sec = lo // NS
        return f"{sec}.", t0 + sec * NS, self.digits

    @staticmethod
    def _relative(picked: Sequence[int], t0: int, digits: int) -> list[str]:
        """Seconds since ``t0`` for the default ``-t r`` column: the hot spot of the time
        column, so it avoids a division per frame where it can."""
        if not picked:
            return []
        lo, hi = min(picked) - t0, max(picked) - t0
        if lo >= 0 and lo // NS == hi // NS:
            # The whole batch lies in one second (the usual case): the seconds go into
            # the format and each frame costs one subtraction and one %-format.
            sec = lo // NS
            base = t0 + sec * NS
            if digits == 9:
                fmt = f"{sec}.%09d"
                return [fmt % x for x in [t - base for t in picked]]
            fmt = f"{sec}.%06d"
            return [fmt % (x // 1000) for x in [t - base for t in picked]]
        return [seconds(t - t0, digits) for t in picked]

    def record_text(self, ts: int, rel_ns: int, delta_ns: int) -> str:
        """Time text for a shown frame whose offsets from the first and the previous
        captured frame are known (the record path, where hidden frames never get here)."""
        mode = self.mode
        if mode == "r":
            text = seconds(rel_ns, self.digits)
        elif mode == "d":
            text = seconds(delta_ns, self.digits)
        elif mode == "dd":
            last = self.prev_shown
            text = seconds(ts - (last if last is not None else ts), self.digits)
        elif mode == "e":
            text = seconds(ts, self.digits)
        else:
            text = self._wall(ts)
        self.prev_shown = ts
        return text


# -- the summarizer -----------------------------------------------------------------------------

# How the fast path formats the first extended header from the scan's key columns.
K_NONE, K_RETH, K_AETH, K_DETH, K_IMM, K_IETH, K_CNP, K_SLOW = range(8)
_SIMPLE_KINDS = {(): K_NONE, ("reth",): K_RETH, ("aeth",): K_AETH, ("deth",): K_DETH,
                 ("immdt",): K_IMM, ("ieth",): K_IETH, ("cnp",): K_CNP}
KIND: tuple[int, ...] = tuple(
    K_SLOW if c not in OPCODES else K_CNP if OPCODES[c].transport is Transport.CNP
    else _SIMPLE_KINDS.get(OPCODES[c].headers, K_SLOW) for c in range(256))
NAMES: tuple[str, ...] = tuple(opcode_name(c) for c in range(256))
_L3_PROTO = {L3_IPV4: "RRoCE", L3_IPV6: "RRoCE", L3_GRH: "RoCE"}


# The bytes that decide a line's middle part (addresses, ports, opcode, QP): from the L3
# source address to the end of BTH's DestQP.
_SRC4 = LAYOUTS["ip"].field("src").byte_offset
_SRC6 = LAYOUTS["ipv6"].field("src").byte_offset
_BTH_QP_END = (LAYOUTS["bth"].field("destqp").bit_offset + LAYOUTS["bth"].field("destqp").bits) // 8


class Summarizer:
    """Formats one-line summaries; keeps the state that spans frames (time, caches)."""

    def __init__(self, times: TimeColumn, udp_port: int = 4791, colour: bool = False,
                 arrow: str = ARROW) -> None:
        self.times = times
        self.udp_port = udp_port
        self.colour = colour
        self.arrow = arrow
        self._addr: dict[bytes, str] = {}
        self._mid: dict[bytes, tuple[str, int]] = {}
        self._cols: dict[str, Any] | None = None
        self._cols_size = 0

    # -- slow path: from decoded headers

    def columns(self, data: bytes, w: Walk, f: Fields, linktype: int, caplen: int,
                origlen: int, error: str | None) -> tuple[str, str, str, str, str]:
        """(source, destination, protocol, Info, colour) for any frame, from its flat
        fields (``roce.decoder.decode.Record.fields``)."""
        src, dst = source_destination(f)
        st = w.status
        if is_not_roce(st):
            proto, info = other_columns(data, w, f, linktype, self.arrow)
            return src, dst, proto, info, ""
        icrc_ok = f.get("icrc.valid")
        if "bth" in f:
            proto = "RoCE" if "grh" in f else "RRoCE"
            info = info_text(f)
            ecn = ecn_of(f)
            bits = ((1 if f["bth.a"] else 0) | (2 if ecn == ECN_CE else 0)
                    | (4 if icrc_ok is False else 0))
            info += FLAG_TEXT[bits]
            syn = f.get("aeth.syndrome")
        else:
            proto = "RoCE" if w.l3_kind == L3_GRH else (
                "RRoCE" if is_roce_like(w) else l3_protocol(f))
            info, ecn, syn = "", 0, None
        bad = False
        if st != OK:
            if is_capture_cut(w, caplen, origlen):
                # cut by the snaplen after the headers: nothing wrong with the packet
                tail = "[Truncated]" if w.payload_off >= 0 else f"[Truncated: {error}]"
            else:
                tail, bad = f"[Malformed: {error}]", True
            info = f"{info} {tail}" if info else tail
        colour = colour_of(f.get("bth.opcode", -1), syn, ecn,
                           bad or icrc_ok is False) if self.colour else ""
        return src, dst, proto, info, colour

    def line(self, number: int, time_text: str, origlen: int,
             cols: tuple[str, str, str, str, str]) -> str:
        src, dst, proto, info, colour = cols
        text = (f"{number:5d} {time_text} {src:>12} {self.arrow} {dst:<12} {proto} {origlen} "
                f"{info}")
        return f"{colour}{text}{RESET}" if colour else text

    # -- fast path: a batch straight from the scan columns

    def _scan(self, datas: list[bytes], linktype: int) -> dict[str, Any]:
        """Scan columns (arrays, reused from batch to batch; only the first len(datas)
        entries are this batch's)."""
        n = len(datas)
        if self._cols is None or self._cols_size < n:
            self._cols_size = max(n, 2048)
            self._cols = fast.scan_columns(self._cols_size)
        return fast.scan(datas, linktype, self.udp_port, True, self._cols)

    def _address(self, kind: int, key: bytes) -> str:
        if kind == L3_IPV4:
            src, dst = socket.inet_ntoa(key[:4]), socket.inet_ntoa(key[4:])
        else:
            src = socket.inet_ntop(socket.AF_INET6, key[:16])
            dst = socket.inet_ntop(socket.AF_INET6, key[16:])
        if len(self._addr) > 65536:
            self._addr.clear()
        text = self._addr[key] = f"{src:>12} {self.arrow} {dst:<12}"
        return text

    def _middle(self, key: bytes, kind3: int, op: int, qp: int,
                origlen: int) -> tuple[str, int]:
        """The columns between time and PSN: they depend only on bytes from the IP
        addresses to BTH DestQP (the cache key) and on the frame length."""
        akey = key[:8] if kind3 == L3_IPV4 else key[:32]
        addr = self._addr.get(akey)
        if addr is None:
            addr = self._address(kind3, akey)
        text = f"{addr} {_L3_PROTO[kind3]} {origlen} {NAMES[op]} QP=0x{qp:06x}"
        cache = self._mid
        if len(cache) > 65536:
            cache.clear()
        value = cache[key] = (text, origlen)
        return value

    def fast_lines(self, batch: Any, first_number: int, only_roce: bool, limit: int,
                   slow: Callable[[int, str], str],
                   rests: Callable[[], list[str | None] | None] | None = None) -> list[str]:
        """Lines for a ``pcapio.Batch`` (frames of one link type as columns), numbered from
        ``first_number``.

        At most ``limit`` lines; ``slow(i, time_text)`` makes the line of frame ``i`` when
        the walk did not succeed (malformed, truncated or not RoCE).  Without colour, and
        when every frame of the batch is shown, the compiled formatter
        (``roce._fastpath.roce_lines``) writes the lines it can, then the lines of frames
        another family wrote the text after the time column of (``rests()``, asked once a
        frame is left: per frame a str, or None; ``rest_lines``), and ``python_lines`` the
        rest; otherwise ``python_lines`` writes them all.
        """
        datas, stamps = batch.datas, batch.ts_ns
        n = len(datas)
        c = self._scan(datas, batch.linktype)
        if _LINES is not None and not self.colour and not only_roce and n <= limit and n:
            texts: list[str] | None = None
            times = None
            plan = self.times.relative_plan(stamps, n)
            if plan is None:
                texts = self.times.batch(stamps, range(n))
            else:
                if not (isinstance(stamps, array) and stamps.typecode == "q"):
                    stamps = array("q", stamps)
                times = (plan[0].encode(), plan[1], plan[2], stamps)
            out, missing = _LINES(datas, c, n, first_number, texts, list(batch.origlen),
                                  self.arrow.encode(), times)
            status = c["status"]
            # asked only for frames the scan did not pass (what ``slow`` would get): making
            # another family's texts may import it
            if missing and rests is not None and any(status[i] for i in missing):
                made = rests()
                if made is not None:
                    missing = _REST_LINES(out, missing, made, first_number, texts, times,
                                          status)
            if missing:
                rest = self.python_lines(batch, c, first_number, missing, [
                    texts[i] if texts is not None else _planned_time(times, i)
                    for i in missing], slow)
                for i, line in zip(missing, rest):
                    out[i] = line
            return out
        index: Sequence[int]
        if only_roce or limit < n:
            status = c["status"]
            index = [i for i in range(n) if not only_roce or status[i] == OK
                     or is_malformed(status[i])][:limit]
        else:
            index = range(n)
        return self.python_lines(batch, c, first_number, index,
                                 self.times.batch(stamps, index), slow)

    def python_lines(self, batch: Any, c: dict[str, Any], first_number: int,
                     index: Sequence[int], texts: list[str],
                     slow: Callable[[int, str], str]) -> list[str]:
        """The lines of frames ``index`` of a scanned batch (``c``: the scan's columns),
        ``texts`` their time texts, in Python: the reference of the compiled formatter."""
        datas = batch.datas
        n = len(datas)
        names = ("status", "l3_kind", "l3_off", "bth_off", "opcode", "destqp", "psn", "flags",
                 "ecn", "icrc_ok", "key0", "key1", "key2")
        columns: list[Sequence[Any]]
        numbers: Sequence[int]
        if isinstance(index, range) and len(index) == n:
            # lists, not the arrays: zip over arrays costs three times as much per item
            columns = [(c[name] if len(c[name]) == n else c[name][:n]).tolist()
                       for name in names]
            columns.insert(1, datas)
            columns.append(list(batch.origlen))
            numbers = range(first_number, first_number + n)
        else:  # some frames (what the compiled formatter left): their items alone
            columns = [[col[i] for i in index] for col in (
                c["status"], datas, *(c[name] for name in names[1:]), batch.origlen)]
            numbers = [first_number + i for i in index]
        # Numbers as text up front: past 9999 no padding is needed and map(str) is cheap.
        if numbers and numbers[0] >= 10000:
            labels = list(map(str, numbers))
        else:
            labels = [f"{x:5d}" for x in numbers]
        mid_cache, kinds, ft, syn_parts = self._mid, KIND, FLAGS_BY_BITS, SYNDROME_PARTS
        maybe_sack = _MAYBE_SACK
        colour = self.colour
        lines: list[str] = []
        add = lines.append
        for i, num, tt, st, data, k3, o, b, op, qp, psn, fl, e, ok, k0, k1, k2, ln in zip(
                index, labels, texts, *columns):
            if st:
                add(slow(i, tt))
                continue
            key = data[o + (_SRC4 if k3 == L3_IPV4 else _SRC6):b + _BTH_QP_END]
            mid = mid_cache.get(key)
            if mid is None or mid[1] != ln:
                mid = self._middle(key, k3, op, qp, ln)
            m = mid[0]
            kind = kinds[op]
            if kind == K_NONE:
                line = f"{num} {tt} {m} PSN={psn}{ft[(fl & 4) | (e << 3) | (ok << 5)]}"
            elif kind == K_RETH:
                line = (f"{num} {tt} {m} PSN={psn} VA=0x{k0:x} RKey=0x{k1:08x} Len={k2}"
                        f"{ft[(fl & 4) | (e << 3) | (ok << 5)]}")
            elif kind == K_AETH:
                if maybe_sack[k0]:
                    line = (f"{num} {tt} {m} PSN={psn} {aeth_text(k0, psn, k1)}"
                            f"{ft[(fl & 4) | (e << 3) | (ok << 5)]}")
                else:
                    pre, post = syn_parts[k0]
                    line = (f"{num} {tt} {m} PSN={psn} {pre} MSN={k1}{post}"
                            f"{ft[(fl & 4) | (e << 3) | (ok << 5)]}")
            elif kind == K_CNP:
                line = f"{num} {tt} {m}{ft[(fl & 4) | (e << 3) | (ok << 5)]}"
            elif kind == K_DETH:
                line = (f"{num} {tt} {m} PSN={psn} QKey=0x{k0:08x} SrcQP=0x{k1:06x}"
                        f"{ft[(fl & 4) | (e << 3) | (ok << 5)]}")
            elif kind == K_IMM:
                line = (f"{num} {tt} {m} PSN={psn} ImmDt=0x{k0:08x}"
                        f"{ft[(fl & 4) | (e << 3) | (ok << 5)]}")
            elif kind == K_IETH:
                line = (f"{num} {tt} {m} PSN={psn} InvRKey=0x{k0:08x}"
                        f"{ft[(fl & 4) | (e << 3) | (ok << 5)]}")
            else:  # several extended headers: decode them (rare opcodes)
                line = (f"{num} {tt} {m} PSN={psn}{self._eth_text(data, b, op, psn)}"
                        f"{ft[(fl & 4) | (e << 3) | (ok << 5)]}")
            if colour:
                paint = colour_of(op, self._syndrome_at(data, b, op), e, not ok)
                if paint:
                    line = f"{paint}{line}{RESET}"
            add(line)
        return lines

    @staticmethod
    def _eth_text(data: bytes, bth_off: int, code: int, psn: int = -1) -> str:
        pos = bth_off + SIZE_OF["bth"]
        h = {}
        for name in OPCODES[code].headers:
            h[name] = DECODERS[name](data, pos)
            pos += SIZE_OF[name]
        f: dict[str, Any] = {"bth.psn": psn}
        header_fields(h, f)
        return "".join(" " + t for t in (eth_facts(n, f, code) for n in h) if t)

    @staticmethod
    def _syndrome_at(data: bytes, bth_off: int, code: int) -> int | None:
        pos = bth_off + SIZE_OF["bth"]
        for name in OPCODES[code].headers:
            if name == "aeth":
                return data[pos]
            pos += SIZE_OF[name]
        return None


def _planned_time(times: Any, i: int) -> str:
    """Frame ``i``'s time text from a ``TimeColumn.relative_plan`` (as ``_relative``)."""
    prefix, base, digits, stamps = times
    x = stamps[i] - base
    return prefix.decode() + (f"{x:09d}" if digits == 9 else f"{x // 1000:06d}")


def configure_lines(ext: Any) -> None:
    """Hand the compiled formatter (``roce_lines``) its text tables, all from this module."""
    protocol: list[bytes | None] = [None] * 256
    for kind, name in _L3_PROTO.items():
        protocol[kind] = name.encode()
    ext.roce_lines_configure({
        "names": [t.encode() for t in NAMES],
        "syn_pre": [SYNDROME_PARTS[s][0].encode() for s in range(256)],
        "syn_post": [SYNDROME_PARTS[s][1].encode() for s in range(256)],
        "flags": [t.encode() for t in FLAGS_BY_BITS], "protocol": protocol,
        "kinds": list(KIND), "maybe_sack": list(_MAYBE_SACK),
        "k": {"none": K_NONE, "reth": K_RETH, "aeth": K_AETH, "deth": K_DETH, "imm": K_IMM,
              "ieth": K_IETH, "cnp": K_CNP},
        "flag_a": FLAG_A, "l3_ipv4": L3_IPV4, "src4": _SRC4, "src6": _SRC6})


def _compiled_lines() -> tuple[Any, Any]:
    ext = getattr(fast, "_ext", None)
    if ext is None or not hasattr(ext, "roce_lines"):
        return None, None
    configure_lines(ext)
    return ext.roce_lines, ext.rest_lines


_LINES, _REST_LINES = _compiled_lines()


__all__ = ["ARROW", "FLAG_TEXT", "Summarizer", "TimeColumn", "TIME_MODES", "eth_facts",
           "header_fields", "info_text", "known_headers", "other_columns", "source_destination",
           "seconds",
           "is_capture_cut", "is_roce_like"]
