"""Congestion control inside one emulated NIC: the glue between the NIC's transmit scheduler
and receive path and the per-QP algorithms (docs/congestion-control.md).

The NIC hands the driver every frame it receives (``received``: a CNP is consumed here and
reaches the QP's algorithm; a CE-marked request goes to the notification point, which may
answer with a CNP frame the NIC sends; an ACK gives an RTT sample, the packets it newly
acknowledged and the path's hop count to algorithms that use RTT, a NAK none), every frame it
transmits (``transmitted``: send times for RTT samples; a resent PSN after the QP's
retransmission timer expired is ``on_timeout``), and builds each QP's rate limiter with
``pacer``.  Timers: the driver keeps one event per QP at its algorithm's earliest named timer
through the ``schedule(t, callback)`` it is given; a superseded event is ignored when it
fires.  Nothing here reads a clock: ``now`` comes in.

Windows: an algorithm's window (packets) becomes the QP requester's window of PSNs in flight
(``Requester.window``, the count rxe's 128-PSN limit and IRN's BDP flow control already
keep), never above what the requester allowed on its own, and the requester asks for an ACK
at least every window / 4 packets (IRN's rule for its BDP window), so a window never waits
for an AckReq.  A retransmission needs no room: go-back-N resends from the oldest
unacknowledged PSN, which the window always admits.

In-band telemetry (``telemetry``: some QP's algorithm ``uses_int``, HPCC): the NIC hands the
driver each frame it is about to send (``int_out``: a data packet of such a QP gets an empty
INT-MD stack, an ACK carries the records its QP's last data packet brought, roce/families/
intmd.py) and each INT frame it receives before anything else (``int_in``: the records are
taken off, as an INT sink does, before the QP checks the ICRC; a data packet's are kept for
its QP's next ACK, an ACK's go to the algorithm's ``on_telemetry`` in path order).  Such a
QP's requester asks for an ACK of every data packet (AckReq), as HPCC's ns-3 model acknowledges
each packet: the algorithm reacts per ACK.

Configuration: the device's ``CcConfig``, or a QP's own (``QueuePair.cc_config``, set through
the verbs API), read when the QP first sends; the notification point answers CE marks for a
receiving QP whose configuration uses CNPs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from roce import fast, locate
from roce.emu.cc.algorithms import ALGORITHMS, CcConfig
from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.hpcc import Hop
from roce.emu.cc.np import CNP_DSCP, CnpBuilder, NotificationPoint
from roce.emu.core.frames import TTL
from roce.emu.net.stages import Pacer
from roce.families import intmd
from roce.headers import AETH_ACK, ECN_CE, LAYOUTS, SIZE_OF, syndrome_type
from roce.opcodes import OPCODES, Operation, Transport
from roce.psn import PSN_MASK, psn_diff

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_DESTQP = locate.SPECS[("bth", "destqp")]
_PSN = locate.SPECS[("bth", "psn")]
_DQ_OFF, _DQ_END, _DQ_SHIFT, _DQ_MASK = (_DESTQP[0], _DESTQP[0] + _DESTQP[1], _DESTQP[2],
                                         _DESTQP[3])
# ``received`` reads the destination QP as three whole bytes (IBA 9.2: DestQP, bits 8-31 of
# BTH's second word)
assert (_DQ_END - _DQ_OFF, _DQ_SHIFT, _DQ_MASK) == (3, 0, 0xFFFFFF)
_IP_ECN = locate.SPECS[("ip", "dsfield.ecn")]
_IP6_TCLASS = locate.SPECS[("ipv6", "tclass")]
_ACKS = frozenset(c for c, op in OPCODES.items()
                  if op.operation in (Operation.ACK, Operation.ATOMIC_ACK))
_CNP = frozenset(c for c, op in OPCODES.items() if op.transport is Transport.CNP)
_REQUESTS = frozenset(c for c, op in OPCODES.items()
                      if op.is_request and op.transport is not Transport.CNP)
# algorithm name -> whether its receiving NIC runs a notification point (read per CE mark)
_DATA = _REQUESTS | frozenset(c for c, op in OPCODES.items()
                              if op.operation is Operation.READ_RESPONSE)
# what a received frame is to the driver, by opcode: one byte read per frame (``received``)
_OTHER, _IS_CNP, _IS_ACK, _IS_DATA = 0, 1, 2, 3
_CE = ECN_CE
_KIND = bytes(_IS_CNP if c in _CNP else _IS_ACK if c in _ACKS else _IS_DATA if c in _DATA
              else _OTHER for c in range(256))


# The frames emulated hosts build: Ethernet, IPv4 without options, UDP to 4791, then BTH.  A
# frame of that shape is read at fixed offsets; any other goes through roce.locate's walk.
_ETYPE = LAYOUTS["eth"].field("type").byte_offset
_L3 = SIZE_OF["eth"]
_PROTO = _L3 + LAYOUTS["ip"].field("proto").byte_offset
_DPORT = _L3 + SIZE_OF["ip"] + LAYOUTS["udp"].field("dstport").byte_offset
_BTH = _L3 + SIZE_OF["ip"] + SIZE_OF["udp"]
_OPCODE = LAYOUTS["bth"].field("opcode").byte_offset
_UDP = _L3 + SIZE_OF["ip"]
_NO_LIMIT = 1 << 30  # a window no requester reaches: it keeps its own


_ET0, _ET1 = locate.ETHERTYPE_IPV4.to_bytes(2, "big")  # the EtherType's two bytes
_VIHL_B = 4 << 4 | SIZE_OF["ip"] // 4  # version 4, IHL 5 (no options)
_OP_AT = _BTH + _OPCODE
_ECN_AT, _ECN_SHIFT, _ECN_MASK = _L3 + _IP_ECN[0], _IP_ECN[2], _IP_ECN[3]
_MIN_LEN = _BTH + SIZE_OF["bth"]
assert _IP_ECN[1] == 1  # the ECN bits sit in one byte (the DS field, RFC 3168)
_TTL_AT = _L3 + LAYOUTS["ip"].field("ttl").byte_offset
_TTL_OFF = LAYOUTS["ip"].field("ttl").byte_offset
_HLIM_OFF = LAYOUTS["ipv6"].field("hlim").byte_offset
# an ACK's AETH follows its BTH; the syndrome is its first byte
_SYNDROME = SIZE_OF["bth"] + LAYOUTS["aeth"].field("syndrome").byte_offset


def _fixed(frame: bytes, port: int = locate.ROCE_PORT) -> bool:
    """Whether ``frame`` has the fixed shape emulated hosts build (Ethernet, IPv4 without
    options, UDP), to ``port``."""
    f = frame  # (bytes; its offsets and the port C integers in the compiled form: read in C)
    want = port
    return (len(f) > _MIN_LEN and f[_ETYPE] == _ET0 and f[_ETYPE + 1] == _ET1
            and f[_L3] == _VIHL_B and f[_PROTO] == 17
            and (f[_DPORT] << 8 | f[_DPORT + 1]) == want)


def _locate(frame: bytes) -> tuple[int, int, int] | None:
    """(opcode, BTH offset, ECN bits) of a RoCE frame, or None."""
    if _fixed(frame):
        return frame[_OP_AT], _BTH, (frame[_ECN_AT] >> _ECN_SHIFT) & _ECN_MASK
    w = fast.walk(frame)
    if w.status != locate.OK:
        return None
    if w.l3_kind == locate.L3_IPV4:
        ecn = _rd(frame, w.l3_off, _IP_ECN)
    elif w.l3_kind == locate.L3_IPV6:
        ecn = _rd(frame, w.l3_off, _IP6_TCLASS) & 3
    else:
        ecn = 0
    return w.opcode, w.bth_off, ecn


def _ttl(frame: bytes) -> int | None:
    """The IPv4 TTL or IPv6 hop limit a RoCE frame arrived with, or None."""
    if _fixed(frame):
        return frame[_TTL_AT]
    w = fast.walk(frame)
    if w.status != locate.OK:
        return None
    if w.l3_kind == locate.L3_IPV4:
        return frame[w.l3_off + _TTL_OFF]
    if w.l3_kind == locate.L3_IPV6:
        return frame[w.l3_off + _HLIM_OFF]
    return None


def _rd(buf: bytes, base: int, spec: tuple[int, int, int, int]) -> int:
    off, n, shift, mask = spec
    return (int.from_bytes(buf[base + off:base + off + n], "big") >> shift) & mask


class CcPacer(Pacer):
    """A QP's rate limiter (the fabric's ``Pacer`` interface) at its algorithm's rate.

    A frame released at time s holds the next one until s + bits / rate.  When the rate
    changes that gap is re-timed at the new rate (a NIC's rate limiter applies a new rate at
    once: a frame sent at 1 Mb/s must not hold the QP for 33 ms after the rate recovered)."""

    __slots__ = ("_next", "_start", "_bits", "bytes_sent")

    def __init__(self, rate_bps: float) -> None:
        self.rate_bps = max(int(rate_bps), 1)
        self._next = self._start = self._bits = 0
        self.bytes_sent = 0

    def next_allowed(self) -> int:
        return self._next

    def sent(self, now: int, nbytes: int) -> None:
        # the time, the frame's bytes and bits and the rate (an int, at least 1 b/s): C
        # integers in the compiled form, the quotient taken in C
        t = now
        n = nbytes
        self.bytes_sent += n
        start = max(t, self._next)
        self._start = start
        bits = n * 8
        rate = self.rate_bps
        self._bits = bits
        self._next = start + bits * 1_000_000_000 // rate

    def set_rate(self, rate_bps: float, now: int) -> bool:
        """A new rate; True when a frame held until later than ``now`` may now go earlier."""
        rate_bps = int(rate_bps) or 1  # a rate is never negative: at least 1 b/s
        if rate_bps == self.rate_bps:
            return False
        self.rate_bps = rate_bps
        old = self._next
        if self._bits:
            self._next = self._start + self._bits * 1_000_000_000 // rate_bps
        return now < old and self._next < old


class CcDriver:
    __slots__ = ("config", "line", "qps", "schedule", "send", "on_faster", "cnp_dscp", "algos",
                 "pacers", "np", "_cnps", "_sent_at", "_armed", "_want", "cnps_received",
                 "rtt_samples", "now", "_own", "_timeouts", "telemetry", "_echo",
                 "int_acks", "_uses_cnp")

    def __init__(self, config: CcConfig, line_rate_bps: float, qps: Mapping[int, Any],
                 schedule: Callable[[int, Callable[[int], None]], None],
                 send: Callable[[int, bytes], None], cnp_dscp: int = CNP_DSCP,
                 on_faster: Callable[[int], None] | None = None) -> None:
        self.config = config
        self.line = float(line_rate_bps)
        self.qps = qps  # the device's QPs by number
        self.schedule = schedule
        self.send = send
        self.on_faster = on_faster  # a pacer may release a frame earlier: re-run the scheduler
        self.cnp_dscp = cnp_dscp
        self.algos: dict[int, CongestionControl] = {}
        self.pacers: dict[int, CcPacer] = {}
        self.np = NotificationPoint(config.np_interval_ns)
        self._cnps: dict[int, tuple[Any, int, bytes]] = {}  # QPN -> (builder, peer, CNP)
        self._sent_at: dict[int, dict[int, int]] = {}  # QPN -> PSN -> first send time
        self._armed: dict[int, int] = {}  # QPN -> when its one pending timer event fires
        self._want: dict[int, int] = {}  # QPN -> its algorithm's earliest timer deadline
        # QPN -> (its requester, the window and ACK spacing that requester had of its own):
        # a window algorithm's window never exceeds them; a new requester (a QP reset) is
        # read again
        self._own: dict[int, tuple[Any, int, int]] = {}
        self._timeouts: dict[int, int] = {}  # QPN -> its retransmission timeouts seen so far
        self.cnps_received = 0
        self.rtt_samples = 0
        self.now = 0
        # some QP's algorithm reads in-band telemetry: the NIC calls ``int_out``/``int_in``
        self.telemetry = config.cls.uses_int
        self._echo: dict[int, bytes] = {}  # QPN -> the records its last data packet brought
        self.int_acks = 0  # ACKs whose records reached an algorithm
        self._uses_cnp: dict[str, bool] = {}  # algorithm name -> its ``uses_cnp``

    # -- set-up ------------------------------------------------------------------------------

    def config_for(self, qpn: int) -> CcConfig:
        qp = self.qps.get(qpn)
        return getattr(qp, "cc_config", None) or self.config

    def pacer(self, qpn: int, now: int = 0) -> CcPacer:
        """The rate limiter of QP ``qpn`` (its algorithm is created with it, at ``now``)."""
        cfg = self.config_for(qpn)
        cc = self.algos[qpn] = cfg.create(self.line, now)
        if cfg.cls.uses_rtt:
            self._sent_at[qpn] = {}
        if cfg.cls.uses_int:
            self.telemetry = True
        p = self.pacers[qpn] = CcPacer(cc.rate)
        if cc.window is not None:
            self._window(qpn, cc.window)
        elif cfg.cls.uses_int:  # no window until a packet size is known: AckReq per packet
            self._window(qpn, _NO_LIMIT)
        return p

    # -- frames ------------------------------------------------------------------------------

    def received(self, now: int, frame: bytes) -> bool:
        """Look at a frame the NIC received; True when it was a CNP (consumed here)."""
        self.now = now
        # the fixed shape of the frames emulated hosts build, read at fixed offsets (in C in
        # the compiled form: the offsets are C constants); anything else goes through
        # roce.locate's walk
        f = frame
        if _fixed(f):
            kind = _KIND[f[_OP_AT]]
            ecn = (f[_ECN_AT] >> _ECN_SHIFT) & _ECN_MASK
            bth = _BTH
        else:
            found = _locate(frame)
            if found is None:
                return False
            code, bth, ecn = found
            kind = _KIND[code]
        # the destination QP, its three bytes read in place (``_rd``'s value: C integers in
        # the compiled form)
        at = bth + _DQ_OFF
        qpn = (f[at] << 16) | (f[at + 1] << 8) | f[at + 2]
        if kind == _IS_CNP:
            self.cnps_received += 1
            cc = self.algos.get(qpn)
            if cc is not None:
                self._apply(now, qpn, cc.on_cnp(now))
            return True
        if kind == _IS_ACK:
            if self._sent_at:
                sent = self._sent_at.get(qpn)
                if sent:
                    self._rtt(now, qpn, sent, _rd(frame, bth, _PSN),
                              syndrome_type(frame[bth + _SYNDROME]) == AETH_ACK, frame)
        elif ecn == _CE and kind == _IS_DATA:
            self._congestion_experienced(now, qpn)
        return False

    def int_out(self, qpn: int, frame: bytes) -> bytes:
        """A frame QP ``qpn`` is about to send (``telemetry`` on): a request of a QP whose
        algorithm reads INT gets an empty stack (the INT source); an ACK carries the records
        the QP's last data packet brought, if not carried yet (the sink's echo).  Frames of
        another shape go as they are."""
        if not _fixed(frame):
            return frame
        code = frame[_OP_AT]
        if code in _ACKS:
            stack = self._echo.pop(qpn, None)
            if stack is not None:
                return intmd.insert(frame, _L3, _UDP, 0, stack)
            return frame
        cc = self.algos.get(qpn)
        if cc is not None and cc.uses_int and code in _REQUESTS:
            return intmd.insert(frame, _L3, _UDP)
        return frame

    def int_in(self, now: int, frame: bytes) -> bytes:
        """A frame the NIC received (``telemetry`` on): INT taken off (the frame as its
        source built it, ICRC and all); a request's records kept for its QP's next ACK, an
        ACK's handed to its QP's algorithm."""
        if not _fixed(frame, intmd.INT_PORT):
            return frame
        got = intmd.strip(frame, _L3, _UDP)
        if got is None:
            return frame
        inner, stack = got
        if len(inner) <= _BTH + _SYNDROME:
            return inner
        code = inner[_OP_AT]
        qpn = (int.from_bytes(inner[_BTH + _DQ_OFF:_BTH + _DQ_END], "big")
               >> _DQ_SHIFT) & _DQ_MASK
        if code in _REQUESTS:
            self._echo[qpn] = stack
        elif code in _ACKS and syndrome_type(inner[_BTH + _SYNDROME]) == AETH_ACK:
            cc = self.algos.get(qpn)
            req = getattr(self.qps.get(qpn), "requester", None)
            if cc is not None and cc.uses_int and req is not None:
                # the stack holds the last hop first: the algorithm reads the path in order
                hops = [Hop(h.qlen, h.tx_bytes, h.egress_ts, h.rate_bps)
                        for h in reversed(intmd.hops(stack))]
                self.int_acks += 1
                self.now = now
                # the next PSN to send: after the highest that left the NIC (snd_nxt)
                high = req.wire_high
                nxt = req.psn if high is None else (high + 1) & PSN_MASK
                self._apply(now, qpn, cc.on_telemetry(now, hops, _rd(inner, _BTH, _PSN), nxt))
        return inner

    def _congestion_experienced(self, now: int, qpn: int) -> None:
        """A CE-marked packet for receiving QP ``qpn``: the notification point may answer."""
        qp = self.qps.get(qpn)
        if qp is None or qp.builder is None:
            return
        cfg = getattr(qp, "cc_config", None) or self.config  # ``config_for``, inline
        # whether the algorithm answers CE marks, by its name (``ALGORITHMS``' lookup is
        # Python code: once per algorithm here, not per CE mark)
        uses = self._uses_cnp.get(cfg.algorithm)
        if uses is None:
            uses = self._uses_cnp[cfg.algorithm] = ALGORITHMS[cfg.algorithm].uses_cnp
        if not uses or not self.np.on_ce(now, qpn):
            return
        # a QP's CNPs are all alike (PSN 0, same headers): one frame per (builder, peer QP),
        # the builder compared by identity (a QP gets a new one when its path changes)
        builder, peer = qp.builder, qp.attr.dest_qp_num
        cached = self._cnps.get(qpn)
        if cached is None or cached[0] is not builder or cached[1] != peer:
            cached = self._cnps[qpn] = (builder, peer, CnpBuilder(builder.path, qpn,
                                                                   self.cnp_dscp).build(peer))
        self.send(now, cached[2])

    def transmitted(self, now: int, qpn: int, frame: bytes) -> None:
        """The NIC put a frame of QP ``qpn`` on the wire: the algorithm's byte count, and the
        send time of its PSN for RTT samples (a retransmission keeps the first time and tells
        the algorithm of a retransmission timeout since the last)."""
        cc = self.algos.get(qpn)
        if cc is None:
            return
        if cc.window is not None:
            own = self._own.get(qpn)
            if own is None or own[0] is not getattr(self.qps.get(qpn), "requester", None):
                self._window(qpn, cc.window)  # a requester made since (a reset QP)
        if self._sent_at:
            sent = self._sent_at.get(qpn)
            if sent is not None:
                found = _locate(frame)
                if found is not None and found[0] in _REQUESTS:
                    psn = _rd(frame, found[1], _PSN)
                    if psn not in sent:
                        sent[psn] = now
                    else:
                        self._resent(now, qpn, cc)
        if cc.counting:
            # the byte counter: one subtraction per frame, a call only for the frame that
            # reaches the next event (CongestionControl.byte_room)
            room = cc.byte_room - len(frame)
            if room > 0:
                cc.byte_room = room
            else:
                self._apply(now, qpn, cc.on_sent(now, len(frame)))

    def _rtt(self, now: int, qpn: int, sent: dict[int, int], psn: int, ack: bool,
             frame: bytes) -> None:
        """An ACK up to ``psn``: the RTT of that PSN, the packets it newly acknowledged and the
        hops it took; forget the PSNs it covers.  A NAK (``ack`` False: its PSN is the one
        missing) is no RTT sample: its PSN's send time is the lost packet's."""
        t = sent.get(psn) if ack else None
        for p in [p for p in sent if psn_diff(p, psn) <= 0]:
            del sent[p]
        if t is not None:
            self.rtt_samples += 1
            cc = self.algos[qpn]
            req = getattr(self.qps.get(qpn), "requester", None)
            # the requester has not seen this ACK yet: ``una`` is the oldest PSN it covers
            acked = max(psn_diff(psn, req.una) + 1, 0) if req is not None else 0
            ttl = _ttl(frame)
            if ttl is not None:
                cc.hops = TTL - ttl
            self._apply(now, qpn, cc.on_ack(now, now - t, acked))

    def _resent(self, now: int, qpn: int, cc: CongestionControl) -> None:
        """QP ``qpn`` sent a PSN again: if its retransmission timer expired since the last
        time, the algorithm hears of it (``on_timeout``)."""
        counters = getattr(self.qps.get(qpn), "counters", None)
        if counters is None:
            return
        n = counters.timeouts
        if n != self._timeouts.get(qpn, 0):
            self._timeouts[qpn] = n
            self._apply(now, qpn, cc.on_timeout(now))

    def _window(self, qpn: int, window: int) -> None:
        """The algorithm's window becomes QP ``qpn``'s requester window (module docstring)."""
        qp = self.qps.get(qpn)
        req = getattr(qp, "requester", None)
        if req is None or getattr(qp, "completer", None) is None:
            return  # UC, UD: no ACKs, nothing to count a window against
        own = self._own.get(qpn)
        if own is None or own[0] is not req:
            own = self._own[qpn] = (req, req.window, req.ack_every)
        w = max(1, min(window, own[1]))
        req.window = w
        cc = self.algos.get(qpn)
        # an algorithm reading INT reacts per ACK: one per data packet (HPCC's ns-3 model too)
        req.ack_every = 1 if cc is not None and cc.uses_int else max(1, min(own[2], w // 4))

    # -- rates and timers ----------------------------------------------------------------------

    def _apply(self, now: int, qpn: int, out: Output) -> None:
        rate, window, d = out
        if window is not None:
            self._window(qpn, window)
        pacer = self.pacers[qpn]
        if pacer.set_rate(rate, now) and self.on_faster is not None:
            self.on_faster(now)
        # Lazy timers: one pending event per QP.  A deadline later than the pending event
        # only updates ``_want`` (a DCQCN cut pushes the rate-increase timer back at every
        # CNP: re-arming would leave a stale heap entry per CNP); the pending event, when it
        # fires early, re-arms itself at the wanted deadline.  An earlier deadline arms a
        # new event and the old one is ignored when it comes.
        if d is None:
            self._want.pop(qpn, None)
            return
        self._want[qpn] = d
        armed = self._armed.get(qpn)
        if armed is None or d < armed:
            self._arm(now, qpn, d)

    def _arm(self, now: int, qpn: int, d: int) -> None:
        at = max(d, now)
        self._armed[qpn] = at
        self.schedule(at, partial(self._fire, qpn, at))

    def _fire(self, qpn: int, at: int, now: int) -> None:
        if self._armed.get(qpn) != at:
            return  # superseded by an earlier deadline
        del self._armed[qpn]
        d = self._want.get(qpn)
        if d is None:
            return  # the timers were stopped
        if d > now:
            self._arm(now, qpn, d)  # pushed back since it was armed
            return
        self.now = now
        self._apply(now, qpn, self.algos[qpn].fire_due(now))

    def stats(self) -> dict[str, Any]:
        return {"algorithm": self.config.algorithm, "profile": self.config.profile,
                "cnps_sent": self.np.cnps_sent, "cnps_received": self.cnps_received,
                "ce_received": self.np.ce_packets, "cnps_suppressed": self.np.suppressed,
                "rtt_samples": self.rtt_samples,
                "rates_bps": {q: p.rate_bps for q, p in self.pacers.items()},
                "windows": {q: a.window for q, a in self.algos.items() if a.window is not None}}
