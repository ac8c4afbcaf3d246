"""An InfiniBand switch on the simulated network: ``IbSwitch`` and its ``IbPort``s.

A packet arriving on a port is held in that port's receive buffer for its VL (what the port
advertised to its peer as credit: ``roce.emu.ib.credits``), forwarded by its DLID through
the switch's linear forwarding table (``roce.emu.ib.routing``) to an output port, and
queued there per VL.  The output port sends when its wire is free: flow-control packets it
owes first, then the packet of the VL the arbiter picks (``roce.emu.ib.vltables``) among
those whose head packet fits the credit the next hop granted.  When a packet starts out of
the switch its blocks leave the input port's buffer, which then owes its peer a
flow-control packet: credits return hop by hop, so nothing is ever dropped for lack of
buffer, and a full buffer holds everything behind it (congestion spreads upstream, as with
PFC).  A packet whose DLID the table does not have is dropped and counted.

Adaptive routing (``--ib-ar on``; IBA leaves it to vendors: NVIDIA's switches choose, per
packet, among the ports of the DLID's AR group by their egress load, per NVIDIA's "Adaptive
Routing" notes for its Quantum switches and OpenSM's ar_updn/AR manager): the switch's
``ar`` holds each DLID's equal next hops as the routing computed them (``Routes.groups``:
every one closer to the destination along the paths the routing allows, so still loop-free),
and a packet leaves by the one whose output queue holds the fewest bytes, the forwarding
table's own port on a tie (then the lowest).  Packets of one QP may so take different paths
and arrive out of order: the run asks for the RC QPs' selective repeat
(``--recovery sr``), as NVIDIA enables adaptive routing for RC traffic only on HCAs that
accept packets out of order.

The VL out of a port is the SL-to-VL table's for the packet's SL; when it differs from the
VL it came on, the LRH's VL and the VCRC are rewritten (``roce.emu.ib.framing.set_vl``).
Ports are also the ends of links to HCAs (``roce.emu.ib.hca``), whose flow control is the
same ``Credits``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from roce.emu.ib.credits import Credits
from roce.emu.ib.framing import BTH_BYTE4, set_bits, set_vl
from roce.emu.ib.ibcc import FECN
from roce.emu.ib.vltables import SlToVl, VlArbiter
from roce.emu.net.link import PullEndpoint, Wire
from roce.families import erf
from roce.families.ib import flowcontrol as link
from roce.opcodes import IB_CNP_OPCODE

LINK_PACKET = link.SIZE  # a frame this long on an IB wire is a flow-control packet
# ERF flags: bit 0 is the capture interface (Wireshark: set = received, clear = sent)
ERF_SENT, ERF_RECEIVED = 0, 1


def link_packet(credits: Credits, tap: Any, now: int) -> bytes | None:
    """The flow-control packet a port owes its link (``credits``), if any, written to its ERF
    ``tap`` (None: no tap): it goes out ahead of data (an HCA's and a switch port's ``pull``
    alike; each hands its own typed credits, so taking the packet is a C call)."""
    pkt = credits.take()
    if pkt is not None and tap is not None:
        tap_write(tap, pkt, now, False)
    return pkt


def tap_write(tap: Any, frame: bytes, now: int, received: bool) -> None:
    """One ERF record of what a port sent or received: type 25 for a flow-control packet,
    21 for a data packet."""
    rtype = (erf.ERF_TYPE_INFINIBAND_LINK if len(frame) == LINK_PACKET
             else erf.ERF_TYPE_INFINIBAND)
    tap.write(erf.record(frame, rtype=rtype, ts=erf.fixed_ts(now),
                         flags=ERF_RECEIVED if received else ERF_SENT), ts_ns=now)


class IbPort(PullEndpoint):
    """One port of an ``IbSwitch``: the receive side of its link and the sending side."""

    __slots__ = ("switch", "index", "name", "wire", "credits", "sl2vl", "arbiter", "queues",
                 "erf_tap", "tx_frames", "rx_frames", "drops", "queued_bytes", "max_queue_bytes",
                 "refresh_at", "peer", "busy", "congested", "fecn_marked",
                 "starved", "cc")

    def __init__(self, switch: IbSwitch, index: int) -> None:
        self.switch = switch
        self.index = index
        self.name = f"{switch.name}:{index}"
        self.wire: Any = None
        self.peer: Any = None
        cfg = switch.config
        self.credits: Credits | None = None  # made when the wire is known (its rate)
        self.sl2vl: SlToVl = cfg.sl2vl
        self.arbiter: VlArbiter = cfg.arbiter()
        # per VL: (packet, the input port, the VL it arrived on)
        self.queues: list[deque[tuple[bytes, IbPort, int]]] = [deque()
                                                                for _ in range(cfg.vls)]
        self.erf_tap: Any = None
        self.tx_frames = self.rx_frames = self.drops = 0
        self.queued_bytes = self.max_queue_bytes = 0
        self.refresh_at: int | None = None  # the ``refresh`` timer's deadline (None: idle)
        self.busy: set[int] = set()  # VLs with a packet queued
        self.congested = 0  # packets sent above the marking threshold since the last mark
        self.fecn_marked = 0
        self.starved = False  # waited for credit since the last packet it sent
        self.cc = cfg.cc  # congestion control's marking (roce.emu.ib.ibcc), or None

    def attach(self, wire: Any) -> None:
        self.wire = wire
        self.credits = self.switch.config.credits(wire)
        start_refresh(self, self.credits)

    # -- Endpoint ----------------------------------------------------------------------

    def receive(self, now: int, frame: bytes) -> None:
        if self.erf_tap is not None:
            tap_write(self.erf_tap, frame, now, True)
        cr = self.credits
        if len(frame) == LINK_PACKET:
            if cr.on_packet(frame):
                self.switch.kick(now, self)  # credit: this port may send again
            return
        self.rx_frames += 1
        if self.refresh_at is None:
            wake_refresh(self, now)
        vl = frame[0] >> 4
        if vl >= cr.vls or not cr.received(vl, len(frame)):
            self.drops += 1  # beyond the buffer: a flow-control violation (never, by rule)
            return
        out = self.switch.route(frame)
        if out is None:
            self.drops += 1
            cr.released(vl, len(frame))
            self.wire.kick(now)
            return
        out.enqueue(now, frame, self, vl)

    def enqueue(self, now: int, frame: bytes, inp: IbPort, vl_in: int) -> None:
        vl = self.sl2vl.table[frame[1] >> 4]  # (the table itself: per packet, no call)
        self.queues[vl].append((frame, inp, vl_in))
        self.busy.add(vl)
        self.queued_bytes += len(frame)
        if self.queued_bytes > self.max_queue_bytes:
            self.max_queue_bytes = self.queued_bytes
        self.wire.kick(now)

    def pull(self, now: int) -> bytes | None:
        cr = self.credits
        if cr.owed:  # (``link_packet`` has one exactly then)
            return link_packet(cr, self.erf_tap, now)
        queues = self.queues
        busy = self.busy
        if not busy:
            return None
        arbitrated = len(busy) > 1
        if not arbitrated:  # one VL waiting: nothing to arbitrate
            vl = next(iter(busy))
            if not cr.may_send(vl, len(queues[vl][0][0])):
                cr.stalls += 1
                self.starved = True
                return None
        else:
            vl = self.arbiter.pick(self.ready)
            if vl is None:
                cr.stalls += 1
                self.starved = True
                return None
        q = queues[vl]
        frame, inp, vl_in = q.popleft()
        if not q:
            busy.discard(vl)
        n = len(frame)
        if arbitrated:
            self.arbiter.charge(n)
        cr.sent(vl, n)
        self.queued_bytes -= n
        self.tx_frames += 1
        inp.credits.released(vl_in, n)  # the packet left the input buffer: credit returns
        inp.wire.kick(now)
        if self.refresh_at is None:
            wake_refresh(self, now)
        if frame[0] >> 4 != vl:
            frame = set_vl(frame, vl)
        cc = self.cc
        victim, self.starved = self.starved, False
        if cc is not None and self.queued_bytes + n > cc.threshold_bytes and \
                frame[BTH_BYTE4 - 4] != IB_CNP_OPCODE and (not victim or cc.victim_marking):
            self.congested += 1  # rule 1 of roce.emu.ib.ibcc: every marking_rate + 1
            if self.congested > cc.marking_rate:
                self.congested = 0
                self.fecn_marked += 1
                frame = set_bits(frame, BTH_BYTE4, FECN)
        if self.erf_tap is not None:
            tap_write(self.erf_tap, frame, now, False)
        return frame

    def ready(self, vl: int) -> bool:
        """Whether ``vl`` has a packet queued that the next hop's credit lets go."""
        q = self.queues[vl]
        return bool(q) and self.credits.may_send(vl, len(q[0][0]))

    def next_tx(self, now: int) -> int | None:
        if self.credits.owed:
            return now
        return None  # data waits for a packet or credit to arrive (both kick the wire)

    def on_refresh(self, now: int, seen: int) -> None:
        on_refresh(self, now, seen)


def start_refresh(port: Any, credits: Credits) -> None:
    """Arm a port's ``refresh`` timer (its ``Credits.deadline``) on the network's clock."""
    port.refresh_at = t = credits.deadline()
    port.wire.net.at(t, port.on_refresh, credits.activity())


def on_refresh(port: Any, now: int, seen: int) -> None:
    """The ``refresh`` timer fired: every VL owes a packet.  It goes again while the link
    carries data (``seen``: the link's block count when it was armed); an idle link stops
    refreshing until its next packet (``wake_refresh``), so a run whose traffic ended has
    no events left."""
    cr = port.credits
    port.refresh_at = t = refresh(cr, port.wire, now, seen)
    if t is not None:
        port.wire.net.at(t, port.on_refresh, cr.activity())


def refresh(credits: Credits, wire: Wire, now: int, seen: int) -> int | None:
    """``on_refresh``'s work on a port's typed ``credits`` and ``wire`` (in C): the timer's
    packets owed and the wire kicked; the timer's next deadline, or None when idle."""
    credits.on_timer(now)
    wire.kick(now)
    if credits.activity() != seen or credits.batched:
        return credits.deadline()
    return None


def wake_refresh(port: Any, now: int) -> None:
    """A data packet on an idle link: the ``refresh`` timer runs again."""
    if port.refresh_at is None:
        cr = port.credits
        cr.next_refresh = now + cr.refresh_ns
        start_refresh(port, cr)


class IbSwitch:
    __slots__ = ("net", "name", "config", "ports", "lft", "unrouted", "ar", "ar_moved")

    def __init__(self, net: Any, name: str, config: Any) -> None:
        self.net = net
        self.name = name
        self.config = config
        self.ports: list[IbPort] = []
        self.lft: dict[int, int] = {}  # DLID -> port index (roce.emu.ib.routing)
        self.unrouted = 0
        self.ar: dict[int, tuple[int, ...]] | None = None  # adaptive routing's groups
        self.ar_moved = 0  # packets adaptive routing sent off the table's port

    def add_port(self) -> IbPort:
        p = IbPort(self, len(self.ports))
        self.ports.append(p)
        return p

    def route(self, frame: bytes) -> IbPort | None:
        dlid = frame[2] << 8 | frame[3]  # the LRH's DLID
        i = self.lft.get(dlid)
        if i is None:
            self.unrouted += 1
            return None
        ports = self.ports
        ar = self.ar
        if ar is not None:
            group = ar.get(dlid)
            if group is not None:  # the least queued; the table's port, then the lowest, on a tie
                best = i
                least = ports[i].queued_bytes
                for j in group:
                    q = ports[j].queued_bytes
                    if q < least or (q == least and best != i and j < best):
                        best, least = j, q
                if best != i:
                    self.ar_moved += 1
                    i = best
        return ports[i]

    def kick(self, now: int, port: IbPort) -> None:
        port.wire.kick(now)


__all__ = ["IbPort", "IbSwitch", "link_packet", "tap_write"]
