"""An output-queued switch: 8 traffic classes per egress port, a shared buffer, L3 forwarding.

A frame entering a port is classified (DSCP map), routed by destination IP over the routes the
topology computed (several equal-cost ports: the forwarder picks one), admitted by the shared
buffer (lossy: tail drop; lossless with PFC: pause the ingress port above the threshold) and
queued at its egress port.  The egress port's wire pulls: PFC frames first, then the strict
class (CNPs), then the other classes round robin, skipping classes the downstream peer paused.
At dequeue RED may set CE (ECN-capable frames only), and the frame is routed on: new MACs,
TTL - 1, header checksum.  With ``telemetry`` on (a run whose congestion control reads INT:
HPCC) each port counts the bytes it sends and a frame carrying INT-MD gets this hop's record
as it leaves (roce/families/intmd.py); off, the data path does not look.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import partial

from roce import macc
from roce.emu.net import hop as frames
from roce.emu.net.buffer import Account, BufferConfig, BufferPolicy, SharedBuffer, headroom_bytes
from roce.emu.net.hop import routed  # per frame at egress (a C call in the compiled form)
from roce.emu.net.link import PullEndpoint
from roce.emu.net.pfc import CLASSES, PauseState, PfcSender
from roce.emu.net.stages import (
    DscpClassifier,
    Forwarder,
    Marker,
    NoMarker,
    Trimmer,
)
from roce.families import intmd

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

    from roce.emu.net.interfaces import Classifier

_MACC = macc.ETHERTYPE_MACC.to_bytes(2, "big")
_ETYPE0, _ETYPE1 = frames.ETYPE
_DST0, _DST1 = frames.DST_IP
assert _DST1 - _DST0 == 4  # ``ingress`` reads the IPv4 destination as four bytes
_TOS, _DSCP_SHIFT, _DSCP_MASK = frames.TOS, frames.DSCP_SHIFT, frames.DSCP_MASK
_ECN_SHIFT, _ECN_MASK, _NOT_ECT, _CE = frames.ECN_SHIFT, frames.ECN_MASK, frames.NOT_ECT, frames.CE
_IPV4 = frames.IPV4_TYPE
_L2, _UDP = frames.L2, frames.L2 + frames.IP_HDR
_PROTO, (_DPORT0, _DPORT1) = frames.PROTO, frames.UDP_DPORT
_INT_PORT = intmd.INT_PORT.to_bytes(2, "big")
# the highest class a mask of classes holds (``bit_length() - 1``), by mask
_TOP_CLASS = bytes(max(m.bit_length() - 1, 0) for m in range(1 << CLASSES))
# a frame's ECN bits by its whole TOS byte (one byte read at egress, in C compiled)
_ECN_OF = bytes((tos >> _ECN_SHIFT) & _ECN_MASK for tos in range(256))


def _stage(what: str, stage: Any, base: type) -> Any:
    """``stage``, refused (TypeError) unless it subclasses the base class a switch calls."""
    if not isinstance(stage, base):
        raise TypeError(f"{what}: a {type(stage).__name__} is not a {base.__module__}."
                        f"{base.__name__} (a model of this stage subclasses it)")
    return stage


@dataclass
class PortStats:
    """A switch port's counters of drops, ECN marks and trims."""

    drops: int = 0
    lossless_drops: int = 0
    ecn_marked: int = 0
    trimmed: int = 0  # cut to their headers in place of a drop (``stages.Trimmer``)


class SwitchPort(PullEndpoint):
    """One port: its egress queues and the pause state its peer imposed (``PullEndpoint``)."""

    __slots__ = ("switch", "index", "mac", "name", "peer_mac", "wire", "queues", "qbytes",
                 "queued", "mask", "ctrl", "rr", "stats", "rx_frames", "tx_frames",
                 "max_queue_bytes", "pause", "pfc", "in_acct", "eg_acct", "marker", "tap",
                 "_strict_mask", "receive", "int_tx")

    def __init__(self, switch: Switch, index: int, mac: bytes) -> None:
        self.switch = switch
        self.index = index
        self.mac = mac
        self.name = f"{switch.name}:{index}"
        self.peer_mac = b"\0" * 6
        self.wire: Any = None  # outgoing Wire, set when linked
        self.queues: list[deque] = [deque() for _ in range(CLASSES)]
        self.qbytes = [0] * CLASSES
        self.queued = 0  # frames in all queues
        self.mask = 0  # bit c set: queue c holds frames
        self.ctrl: deque[bytes] = deque()
        self.rr = 0
        self.stats = PortStats()
        # the per-frame counters, kept as plain attributes (one attribute write per hop)
        self.rx_frames = 0
        self.tx_frames = 0
        self.max_queue_bytes = 0
        self.int_tx = 0  # bytes sent, counted while the switch stamps telemetry
        self.pause: PauseState | None = None
        self.pfc: PfcSender | None = None
        self.in_acct: list[Account | None] = [None] * CLASSES  # lossless, at ingress
        self.eg_acct: list[Account | None] = [None] * CLASSES  # lossy, at egress
        self.marker: Marker = NoMarker()
        self.tap: Any = None
        self._strict_mask = switch.strict_mask
        # the ``Endpoint`` receive: the switch's ingress bound to this port (a C-level
        # partial); a frame's arrival is ``fire``, which calls the ingress itself
        self.receive = partial(switch.ingress, self)

    # -- Endpoint ----------------------------------------------------------------------------

    def fire(self, now: int, frame: bytes) -> None:
        """A frame arrived (``Callback``): the switch's ingress, called in C compiled."""
        self.switch.ingress(self, now, frame)

    def pull(self, now: int) -> bytes | None:
        if self.ctrl:
            frame = self.ctrl.popleft()
        else:
            m = self.mask
            if m and not m & (m - 1):  # one class waiting (the common case): ``_pick`` inline
                top = _TOP_CLASS  # (its class read in C in the compiled form)
                tc = top[m]
                if self.pause.until[tc] > now:
                    return None
                if not self._strict_mask >> tc & 1:
                    k = CLASSES  # (C integers in the compiled form)
                    self.rr = (tc + 1) % k
            else:
                tc = self._pick(now)
                if tc < 0:
                    return None
            frame = self.switch.dequeue(now, self, tc)
        self.tx_frames += 1
        if self.tap is not None:
            self.tap.write(frame, ts_ns=now)
        return frame

    def next_tx(self, now: int) -> int | None:
        if self.ctrl:
            return now
        m = self.mask  # the classes holding frames
        if not m:
            return None
        until = self.pause.until
        if not m & (m - 1):  # one class (the common case)
            t = until[m.bit_length() - 1]
            return t if t > now else now
        best = None
        while m:
            low = m & -m
            t = until[low.bit_length() - 1]
            if t < now:
                t = now
            if best is None or t < best:
                best = t
            m ^= low
        return best

    # -- scheduling ----------------------------------------------------------------------

    def _pick(self, now: int) -> int:
        """The class to send next: strict classes (highest first), then round robin from
        ``rr``; classes the peer paused are skipped.  -1: nothing may go."""
        m = self.mask
        if not m:
            return -1
        until = self.pause.until
        strict = self.switch.strict_mask
        s = m & strict
        while s:
            tc = s.bit_length() - 1
            if until[tc] <= now:
                return tc
            s &= ~(1 << tc)
        m &= ~strict
        for cand in (m >> self.rr << self.rr, m):  # at or after rr first, then wrap
            while cand:
                low = cand & -cand
                tc = low.bit_length() - 1
                if until[tc] <= now:
                    self.rr = (tc + 1) % CLASSES
                    return tc
                cand ^= low
        return -1

    def send_control(self, frame: bytes) -> None:
        self.ctrl.append(frame)
        self.wire.kick(self.switch.net.now)


class Switch:
    __slots__ = ("net", "name", "index", "ports", "routes", "classifier", "_table", "lossless",
                 "_lossless_mask",
                 "strict", "strict_mask", "forwarder", "buffer", "pfc_enabled", "no_route",
                 "not_ip", "max_frame", "telemetry", "trimmer")

    def __init__(self, net: Any, name: str, index: int, *, buffer: BufferConfig | BufferPolicy,
                 classifier: Classifier | None = None, forwarder: Forwarder,
                 pfc: bool = True, max_frame: int = 4096 + 128,
                 telemetry: bool = False, trimmer: Trimmer | None = None) -> None:
        self.net = net
        self.name = name
        self.index = index
        self.ports: list[SwitchPort] = []
        # destination IPv4 address (an int: read from a frame's four bytes in C, hashed as
        # itself) -> the ports toward it
        self.routes: dict[int, list[SwitchPort]] = {}
        self.classifier = classifier or DscpClassifier()
        # the DSCP map's table read inline (the per-hop path), by the whole TOS byte (one
        # lookup, in C in the compiled form); any other Classifier is called
        table = getattr(self.classifier, "table", None)
        self._table = (None if table is None else
                       bytes(table[(tos >> _DSCP_SHIFT) & _DSCP_MASK] for tos in range(256)))
        self.lossless = self.classifier.lossless if pfc else frozenset()
        self._lossless_mask = sum(1 << c for c in self.lossless)  # (tested per frame)
        self.strict = self.classifier.strict
        self.strict_mask = sum(1 << c for c in self.strict)
        self.forwarder = _stage(f"switch {name}'s forwarder", forwarder, Forwarder)
        self.buffer = _stage(f"switch {name}'s buffer", SharedBuffer(buffer, max_frame)
                             if isinstance(buffer, BufferConfig) else buffer, BufferPolicy)
        self.pfc_enabled = pfc
        self.no_route = 0
        self.not_ip = 0
        self.max_frame = max_frame
        self.telemetry = telemetry  # stamp INT-MD frames (module docstring)
        self.trimmer = trimmer  # packet trimming in place of lossy drops (stages.Trimmer)

    def add_port(self) -> SwitchPort:
        i = len(self.ports)
        mac = bytes([0x02, 0x5E, self.index >> 8 & 0xFF, self.index & 0xFF, i >> 8 & 0xFF,
                     i & 0xFF])
        port = SwitchPort(self, i, mac)
        self.ports.append(port)
        return port

    def finish(self, marker_for: Any) -> None:
        """Carve reserves and headroom once every port is linked; set up PFC and ECN."""
        used = self.classifier.classes
        for port in self.ports:
            rate_gbps = port.wire.rate_bps / 1e9
            port.pause = PauseState(port.wire.rate_bps)
            for tc in sorted(used):
                if tc in self.lossless:
                    # headroom covers the link that feeds this ingress port (the reverse
                    # direction has the same delay in every topology we build)
                    port.in_acct[tc] = self.buffer.account(
                        headroom_bytes(rate_gbps, port.wire.delay_ns, self.max_frame))
                else:
                    port.eg_acct[tc] = self.buffer.account()
            if self.lossless:
                port.pfc = PfcSender(port.mac, port.wire.rate_bps, port.send_control,
                                     self.net.at)
        self.buffer.check(f"switch {self.name}")
        # the markers once the buffer is carved: default ECN thresholds stay below the
        # buffer's drop point (``EcnConfig.for_rate``)
        for port in self.ports:
            port.marker = _stage(f"{port.name}'s marker",
                                 marker_for(self, port, port.wire.rate_bps / 1e9), Marker)

    # -- the data path -------------------------------------------------------------------

    def ingress(self, port: SwitchPort, now: int, frame: bytes) -> None:
        port.rx_frames += 1
        if port.tap is not None:
            port.tap.write(frame, ts_ns=now)
        f = frame  # (bytes: its EtherType compared in place, in C in the compiled form)
        if not f.startswith(_IPV4, _ETYPE0):
            if f.startswith(_MACC, _ETYPE0) and port.pause.on_frame(now, frame):
                port.wire.kick(now)  # an XON may let queued frames go now
            else:
                self.not_ip += 1
            return
        at = _DST0  # (C integers in the compiled form: the address read in C, no slice)
        dst = (f[at] << 24) | (f[at + 1] << 16) | (f[at + 2] << 8) | f[at + 3]
        out_ports = self.routes.get(dst)
        if not out_ports:
            self.no_route += 1
            return
        out = out_ports[0] if len(out_ports) == 1 else self.forwarder.pick(frame, out_ports)
        table = self._table
        if table is not None:
            at = _TOS  # (a C integer in the compiled form: the byte read in C)
            tc = table[f[at]]
        else:
            tc = self.classifier.classify(frame)
        n = len(frame)
        buf = self.buffer
        if self._lossless_mask >> tc & 1:
            acct = port.in_acct[tc]
            pool = buf.admit(acct, n, True)
            if pool < 0:
                out.stats.drops += 1
                out.stats.lossless_drops += 1
                return
            if buf.should_pause(acct):
                acct.xoff = True
                port.pfc.xoff(now, tc, acct.congested)
        else:
            acct = out.eg_acct[tc]
            pool = buf.admit(acct, n, False)
            if pool < 0:
                cut = self.trimmer.cut(frame) if self.trimmer is not None else None
                if cut is None:
                    out.stats.drops += 1
                    return
                frame, tc = cut, self.trimmer.tc  # trimmed: the headers go on, ahead
                n = len(frame)
                acct = out.eg_acct[tc]
                pool = buf.admit(acct, n, False)
                if pool < 0:
                    out.stats.drops += 1
                    return
                out.stats.trimmed += 1
        out.queues[tc].append((frame, acct, pool, port))
        out.queued += 1
        out.mask |= 1 << tc
        q = out.qbytes[tc] + n
        out.qbytes[tc] = q
        if q > out.max_queue_bytes:
            out.max_queue_bytes = q
        if not out.wire.busy:
            out.wire.kick(now)

    def dequeue(self, now: int, port: SwitchPort, tc: int) -> bytes:
        c = tc  # (a C integer in the compiled form: the port's lists indexed in C)
        queue = port.queues[c]
        frame, acct, pool, inport = queue.popleft()
        port.queued -= 1
        if not queue:
            port.mask &= ~(1 << c)
        n = len(frame)
        q = port.qbytes[c] - n
        port.qbytes[c] = q
        buf = self.buffer
        buf.release(acct, pool, n)
        if acct.xoff and buf.should_resume(acct):
            acct.xoff = False
            inport.pfc.xon(now, tc)
        f = frame  # (bytes: its ECN bits read in C in the compiled form)
        at = _TOS
        ecns = _ECN_OF
        ecn = ecns[f[at]]
        mark = ecn != _NOT_ECT and port.marker.mark(q)
        if mark and ecn != _CE:
            port.stats.ecn_marked += 1
        if self.telemetry:
            return self.stamp(now, port, tc, routed(frame, port.mac, port.peer_mac, mark))
        return routed(frame, port.mac, port.peer_mac, mark)

    def stamp(self, now: int, port: SwitchPort, tc: int, frame: bytes) -> bytes:
        """An INT transit hop at egress: an INT-MD frame gets this hop's record (queue
        occupancy of its class behind it, the port's bytes sent before it, now, the line
        rate); every frame counts in the port's bytes sent."""
        sent = port.int_tx
        if (frame[_PROTO] == 17 and frame[_DPORT0:_DPORT1] == _INT_PORT
                and frame[_ETYPE0:_ETYPE1] == _IPV4):
            frame = intmd.push(frame, _L2, _UDP, intmd.hop_record(
                self.index, tc, port.qbytes[tc], now, sent, port.wire.rate_bps))
        port.int_tx = sent + len(frame)
        return frame
