"""An output-queued switch: 8 traffic classes per egress port, a shared buffer, L3 forwarding.

A frame entering a port is classified (DSCP map), routed by destination IP over the routes the
topology computed (several equal-cost ports: the forwarder picks one), admitted by the shared
buffer (lossy: tail drop; lossless with PFC: pause the ingress port above the threshold) and
queued at its egress port.  The egress port's wire pulls: PFC frames first, then the strict
class (CNPs), then the other classes round robin, skipping classes the downstream peer paused.
At dequeue RED may set CE (ECN-capable frames only), and the frame is routed on: new MACs,
TTL - 1, header checksum.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from ... import macc
from . import frames
from .buffer import Account, BufferConfig, SharedBuffer, headroom_bytes
from .pfc import CLASSES, PauseState, PfcSender
from .stages import Classifier, DscpClassifier, Forwarder, Marker, NoMarker

_MACC = macc.ETHERTYPE_MACC.to_bytes(2, "big")
_ETYPE0, _ETYPE1 = frames.ETYPE
_DST0, _DST1 = frames.DST_IP
_TOS, _DSCP_SHIFT, _DSCP_MASK = frames.TOS, frames.DSCP_SHIFT, frames.DSCP_MASK


@dataclass
class PortStats:
    rx_frames: int = 0
    tx_frames: int = 0
    drops: int = 0
    lossless_drops: int = 0
    ecn_marked: int = 0
    max_queue_bytes: int = 0


class SwitchPort:
    """One port: its egress queues and the pause state its peer imposed (``PullEndpoint``)."""

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
        self.ctrl: deque[bytes] = deque()
        self.rr = 0
        self.stats = PortStats()
        self.pause: PauseState | None = None
        self.pfc: PfcSender | None = None
        self.in_acct: list[Account | None] = [None] * CLASSES  # lossless, at ingress
        self.eg_acct: list[Account | None] = [None] * CLASSES  # lossy, at egress
        self.marker: Marker = NoMarker()
        self.tap: Any = None

    # -- Endpoint ----------------------------------------------------------------------------

    def receive(self, now: int, frame: bytes) -> None:
        self.switch.ingress(now, self, frame)

    def pull(self, now: int) -> bytes | None:
        if self.ctrl:
            frame = self.ctrl.popleft()
        else:
            tc = self._pick(now)
            if tc < 0:
                return None
            frame = self.switch.dequeue(now, self, tc)
        self.stats.tx_frames += 1
        if self.tap is not None:
            self.tap.write(frame, ts_ns=now)
        return frame

    def next_tx(self, now: int) -> int | None:
        if self.ctrl:
            return now
        if not self.queued:
            return None
        best = None
        until = self.pause.until
        for tc in range(CLASSES):
            if self.queues[tc]:
                t = until[tc] if until[tc] > now else now
                if best is None or t < best:
                    best = t
        return best

    # -- scheduling ----------------------------------------------------------------------

    def _pick(self, now: int) -> int:
        if not self.queued:
            return -1
        until = self.pause.until
        q = self.queues
        for tc in self.switch.strict_order:
            if q[tc] and until[tc] <= now:
                return tc
        rr = self.rr
        for i in range(CLASSES):
            tc = (rr + i) % CLASSES
            if q[tc] and until[tc] <= now and tc not in self.switch.strict:
                self.rr = (tc + 1) % CLASSES
                return tc
        return -1

    def send_control(self, frame: bytes) -> None:
        self.ctrl.append(frame)
        self.wire.kick(self.switch.net.now)


class Switch:
    def __init__(self, net: Any, name: str, index: int, *, buffer: BufferConfig,
                 classifier: Classifier | None = None, forwarder: Forwarder,
                 pfc: bool = True, max_frame: int = 4096 + 128) -> None:
        self.net = net
        self.name = name
        self.index = index
        self.ports: list[SwitchPort] = []
        self.routes: dict[bytes, list[SwitchPort]] = {}
        self.classifier = classifier or DscpClassifier()
        # the DSCP map's table read inline (the per-hop path); any other Classifier is called
        self._table = getattr(self.classifier, "table", None)
        self.lossless = self.classifier.lossless if pfc else frozenset()
        self.strict = self.classifier.strict
        self.strict_order = sorted(self.strict, reverse=True)
        self.forwarder = forwarder
        self.buffer = SharedBuffer(buffer, max_frame)
        self.pfc_enabled = pfc
        self.no_route = 0
        self.not_ip = 0
        self.max_frame = max_frame

    def add_port(self) -> SwitchPort:
        i = len(self.ports)
        mac = bytes([0x02, 0x5E, self.index >> 8 & 0xFF, self.index & 0xFF, i >> 8 & 0xFF,
                     i & 0xFF])
        port = SwitchPort(self, i, mac)
        self.ports.append(port)
        return port

    def finish(self, marker_for: Any) -> None:
        """Carve reserves and headroom once every port is linked; set up PFC and ECN."""
        used = set(self.classifier.table) | set(self.classifier.lossless) | self.strict
        for port in self.ports:
            rate_gbps = port.wire.rate_bps / 1e9
            port.pause = PauseState(port.wire.rate_bps)
            port.marker = marker_for(self, port, rate_gbps)
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

    # -- the data path -------------------------------------------------------------------

    def ingress(self, now: int, port: SwitchPort, frame: bytes) -> None:
        port.stats.rx_frames += 1
        if port.tap is not None:
            port.tap.write(frame, ts_ns=now)
        etype = frame[_ETYPE0:_ETYPE1]
        if etype != frames.IPV4_TYPE:
            if etype == _MACC and port.pause.on_frame(now, frame):
                port.wire.kick(now)  # an XON may let queued frames go now
            else:
                self.not_ip += 1
            return
        out_ports = self.routes.get(frame[_DST0:_DST1])
        if not out_ports:
            self.no_route += 1
            return
        out = out_ports[0] if len(out_ports) == 1 else self.forwarder.pick(frame, out_ports)
        tc = (self._table[(frame[_TOS] >> _DSCP_SHIFT) & _DSCP_MASK] if self._table is not None
              else self.classifier.classify(frame))
        n = len(frame)
        buf = self.buffer
        if tc in self.lossless:
            acct = port.in_acct[tc]
            pool = buf.admit(acct, n, True)
            if pool < 0:
                out.stats.drops += 1
                out.stats.lossless_drops += 1
                return
            if buf.should_pause(acct):
                acct.xoff = True
                port.pfc.xoff(now, tc, lambda a=acct: a.xoff)
        else:
            acct = out.eg_acct[tc]
            pool = buf.admit(acct, n, False)
            if pool < 0:
                out.stats.drops += 1
                return
        out.queues[tc].append((frame, acct, pool, port))
        out.queued += 1
        q = out.qbytes[tc] + n
        out.qbytes[tc] = q
        if q > out.stats.max_queue_bytes:
            out.stats.max_queue_bytes = q
        if not out.wire.busy:
            out.wire.kick(now)

    def dequeue(self, now: int, port: SwitchPort, tc: int) -> bytes:
        frame, acct, pool, inport = port.queues[tc].popleft()
        port.queued -= 1
        n = len(frame)
        port.qbytes[tc] -= n
        buf = self.buffer
        buf.release(acct, pool, n)
        if acct.xoff and buf.should_resume(acct):
            acct.xoff = False
            inport.pfc.xon(now, tc)
        ecn = (frame[frames.TOS] >> frames.ECN_SHIFT) & frames.ECN_MASK
        mark = ecn != frames.NOT_ECT and port.marker.mark(port.qbytes[tc])
        if mark and ecn != frames.CE:
            port.stats.ecn_marked += 1
        return frames.routed(frame, port.mac, port.peer_mac, mark)
