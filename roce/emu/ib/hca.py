"""An InfiniBand HCA on the simulated network: ``Hca``, the switched network's ``Nic`` with an
InfiniBand port.

Everything above the port is the ``Nic``'s, unchanged: the device and its RC QPs, the
transmit scheduler (a ring of QPs per priority, round robin, pacing), the QPs' timers.  The
port adds, per data VL, what InfiniBand's link layer asks:

- out: the scheduler's next frame gets its LRH, ICRC and VCRC (``framing.Framer``), its SL
  from the scheduler's priority and its VL from the SL-to-VL table; it goes only with the
  credit the peer granted on that VL (``credits.Credits``).  A packet without credit waits
  in its VL's one slot, and the scheduler's priorities on that VL are held until credit
  comes, so the QPs behind it keep their place.  The VL arbiter chooses among the slots
  that may go; flow-control packets go first.
- in: a flow-control packet updates the credits; a data packet is counted against the
  receive buffer, handed up at once (the HCA's buffer is free again, and a flow-control
  packet is owed), as the RoCEv2 frame the device reads.
- with congestion control (``roce.emu.ib.ibcc``): a FECN-marked packet is answered with a
  CNP (sent after flow-control packets, before data, with credit); a CNP with BECN raises
  its QP's CCTI and lowers the QP's pacer to the table's rate, and is not handed up.

The pcap records every data packet a host receives as it arrived (link type 247); a
``tap`` (``--tap HOST:0``) records what the port sends and receives in ERF, flow-control
packets (type 25) included.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from roce import fast
from roce.emu.ib.credits import Credits
from roce.emu.ib.framing import BTH_BYTE4, Framer
from roce.emu.ib.ibcc import BECN, FECN, CcAgent
from roce.emu.ib.ibswitch import (
    LINK_PACKET,
    link_packet,
    start_refresh,
    tap_write,
    wake_refresh,
)
from roce.emu.ib.ibswitch import on_refresh as _on_refresh
from roce.emu.ib.vltables import SlToVl, VlArbiter
from roce.emu.net.nic import Nic
from roce.families.ib.native import LRH_SIZE
from roce.opcodes import IB_CNP_OPCODE

HELD = 1 << 62  # a priority held for credit: "until" far past any run (never a deadline)


def prios_by_vl(table: tuple[int, ...], prios: int, vls: int) -> tuple[tuple[int, ...], ...]:
    """Per VL, the scheduler's priorities (0 .. ``prios``-1) the SL-to-VL ``table`` maps to it."""
    out: list[list[int]] = [[] for _ in range(vls)]
    for p in range(prios):
        if table[p] < vls:
            out[table[p]].append(p)
    return tuple(map(tuple, out))


class Hca(Nic):
    """A ``Nic`` whose port speaks InfiniBand's link layer (module docstring)."""

    # ``refresh_at``: the ``refresh`` timer's deadline, apart from the Nic's QP timer
    # (``_timer_at``: sharing it, a refresh superseded a pending QP timeout, and a pending QP
    # timeout kept an idle link's refresh from starting again)
    # ``waiting``: how many of ``slots`` hold a packet (asked per pull and per flow-control
    # packet: a count, not a scan); ``prios_of``: per VL, the scheduler's priorities on it
    __slots__ = ("refresh_at", "ib_config", "framer", "credits", "sl2vl", "arbiter", "slots",
                 "waiting", "prios_of", "ib_recorders",
                 "erf_tap", "overflows", "bad_crc", "cc_agent", "cnps", "cnps_sent",
                 "fecn_received")

    def __init__(self, net: Any, ctx: Any, classifier: Any, config: Any) -> None:
        Nic.__init__(self, net, ctx, classifier)
        self.pfc = False  # InfiniBand has no PFC: credits
        self.icrc_checked = True  # ``Framer.to_roce`` checked VCRC and ICRC
        self.ib_config = config
        self.framer: Framer | None = None  # the subnet's addresses (``build``)
        self.credits: Credits | None = None
        self.sl2vl: SlToVl = config.sl2vl
        self.arbiter: VlArbiter = config.arbiter()
        self.slots: list[bytes | None] = [None] * config.vls
        self.waiting = 0
        self.prios_of: tuple[tuple[int, ...], ...] = ()  # (``attach``: the scheduler's)
        self.ib_recorders: list[Any] = []
        self.erf_tap: Any = None  # ERF writer of what the port sends and receives
        self.overflows = 0
        self.bad_crc = 0
        self.refresh_at: int | None = None
        self.cc_agent: CcAgent | None = None  # with congestion control (``attach``)
        self.cnps: deque[bytes] = deque()  # CNPs to send, built
        self.cnps_sent = 0
        self.fecn_received = 0

    def attach(self, wire: Any) -> None:
        Nic.attach(self, wire)
        cfg = self.ib_config
        self.prios_of = prios_by_vl(self.sl2vl.table, len(self.pause.until), cfg.vls)
        self.credits = cfg.credits(wire)
        if cfg.cc is not None:
            self.cc_agent = CcAgent(cfg.cc, wire.rate_bps, cfg.max_frame)
        start_refresh(self, self.credits)

    def on_refresh(self, now: int, seen: int) -> None:
        _on_refresh(self, now, seen)

    # -- Endpoint ----------------------------------------------------------------------

    def receive(self, now: int, frame: bytes) -> None:
        if self.erf_tap is not None:
            tap_write(self.erf_tap, frame, now, True)
        cr = self.credits
        if len(frame) == LINK_PACKET:
            if cr.on_packet(frame) and self.waiting:
                self.wire.kick(now)
            return
        if self.refresh_at is None:
            wake_refresh(self, now)
        for w in self.ib_recorders:
            w.write(frame, ts_ns=now)
        vl = frame[0] >> 4
        n = len(frame)
        if vl >= cr.vls or not cr.received(vl, n):
            self.overflows += 1
            return
        cr.released(vl, n)  # handed up at once: the buffer is free again
        cc = self.cc_agent
        if cc is not None:
            flags = frame[BTH_BYTE4]
            if frame[BTH_BYTE4 - 4] == IB_CNP_OPCODE:  # congestion control's, not a QP's
                if flags & BECN:
                    self._becn(now, int.from_bytes(frame[BTH_BYTE4 + 1:BTH_BYTE4 + 4], "big"))
                if not self.wire.busy:
                    self.wire.kick(now)
                return
            if flags & FECN:
                self.fecn_received += 1
                self._return_cnp(frame)
        # (the RoCE ICRC only for a recorder or a tap of the frames the NIC receives)
        roce = self.framer.to_roce(frame, self.tap is not None or bool(self.net.recorders))
        if roce is None:
            self.bad_crc += 1
        else:
            Nic.receive(self, now, roce)
        if not self.wire.busy:
            self.wire.kick(now)  # the flow-control packet owed

    def pull(self, now: int) -> bytes | None:
        cr = self.credits
        if cr.owed:  # (``link_packet`` has one exactly then)
            return link_packet(cr, self.erf_tap, now)
        cnps = self.cnps
        if cnps and not self.waiting:
            vl = cnps[0][0] >> 4
            if cr.may_send(vl, len(cnps[0])):
                self.cnps_sent += 1
                return self._send(now, vl, cnps.popleft())
        slots = self.slots
        alone = False  # the one waiting packet is the one just found without credit
        while True:
            ready = self._ready() if self.waiting and not alone else None
            if ready is not None:
                vl = self.arbiter.pick(ready.__getitem__)
            else:  # nothing waits, or nothing may go: the turn passes as a pick finding none
                self.arbiter.idle()
                vl = None
            if vl is not None:
                frame = slots[vl]
                slots[vl] = None
                self.waiting -= 1
                self._hold(vl, 0)  # its priorities may send again
                return self._send(now, vl, frame)
            frame = Nic.pull(self, now)
            if frame is None:
                return None
            sl = self._sl(frame)
            vl = self.sl2vl.table[sl]  # (the table itself: per packet, no call)
            packet = self.framer.to_ib(frame, sl, vl)
            alone = not self.waiting
            if alone and cr.may_send(vl, len(packet)):  # no packet waits
                return self._send(now, vl, packet)
            if slots[vl] is None:
                slots[vl] = packet
                self.waiting += 1
                cr.stalls += 1
                self._hold(vl, HELD)
            else:  # cannot happen: a VL with a waiting packet is held
                raise AssertionError(f"VL {vl} of {self.name} had a packet waiting")

    # -- congestion control (roce.emu.ib.ibcc) -----------------------------------------

    def _return_cnp(self, packet: bytes) -> None:
        """Rule 2: a CNP with BECN to the sender of a FECN-marked packet, to its QP."""
        qp = self.device.qps.get(int.from_bytes(packet[BTH_BYTE4 + 1:BTH_BYTE4 + 4], "big"))
        if qp is None:
            return
        sl = packet[1] >> 4
        bth = bytearray(fast.bth_pack(IB_CNP_OPCODE, False, 0, 0xFFFF, qp.attr.dest_qp_num,
                                      False, 0))
        bth[BTH_BYTE4 - LRH_SIZE] |= BECN
        fr = self.framer
        self.cnps.append(fr.packet(bytes(bth), sl, self.sl2vl[sl],
                                   int.from_bytes(packet[6:8], "big"),
                                   int.from_bytes(packet[2:4], "big") & fr.paths))

    def _becn(self, now: int, qpn: int) -> None:
        """Rule 3: the QP's CCTI up, its rate down, its ``ccti_timer`` (re)armed."""
        t = self.cc_agent.on_becn(now, qpn)
        self._set_rate(qpn)
        self.net.at(t, self._ccti_timer, qpn)

    def _ccti_timer(self, now: int, qpn: int) -> None:
        """Rule 4 (the named timer ``ccti_timer``): the CCTI down, the rate up."""
        agent = self.cc_agent
        if agent.deadline_of.get(qpn) != now:
            return  # a later BECN moved the deadline
        t = agent.on_timer(now, qpn)
        if t is not None:
            self.net.at(t, self._ccti_timer, qpn)
        self._set_rate(qpn)
        self.wire.kick(now)

    def _set_rate(self, qpn: int) -> None:
        pacer = self.pacers.get(qpn)
        if pacer is not None:
            pacer.rate_bps = self.cc_agent.rate_bps(qpn)

    def _ready(self) -> list[bool] | None:
        """Per VL, whether its slot holds a packet the peer's credit lets go (the arbiter's
        ``ready``, asked up front: ``may_send`` changes nothing); None when none may go."""
        slots = self.slots
        cr = self.credits
        out = None
        for vl in range(len(slots)):
            s = slots[vl]
            if s is not None and cr.may_send(vl, len(s)):
                if out is None:
                    out = [False] * len(slots)
                out[vl] = True
        return out

    def _sl(self, frame: bytes) -> int:
        """A frame's SL: the scheduler's priority for it (its traffic class, one map)."""
        return self.classifier.classify(frame)

    def _hold(self, vl: int, until: int) -> None:
        """Hold (``HELD``) or free (0) the scheduler's priorities that map to ``vl``."""
        u = self.pause.until
        for prio in self.prios_of[vl]:
            u[prio] = until

    def _send(self, now: int, vl: int, packet: bytes) -> bytes:
        self.arbiter.charge(len(packet))
        self.credits.sent(vl, len(packet))
        if self.refresh_at is None:
            wake_refresh(self, now)
        if self.erf_tap is not None:
            tap_write(self.erf_tap, packet, now, False)
        return packet

    def next_tx(self, now: int) -> int | None:
        cr = self.credits
        if cr.owed or (self.cnps and cr.may_send(self.cnps[0][0] >> 4, len(self.cnps[0]))):
            return now
        if self.waiting:
            slots = self.slots
            for vl in range(len(slots)):
                s = slots[vl]
                if s is not None and cr.may_send(vl, len(s)):
                    return now
        t = Nic.next_tx(self, now)
        return None if t is None or t >= HELD else t


__all__ = ["HELD", "Hca"]
