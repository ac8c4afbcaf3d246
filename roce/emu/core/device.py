"""An emulated RoCE device (an RNIC): memory, queue pairs, and the frames in and out.

Sans-I/O like the queue pairs it holds: ``receive(now, frame)``, ``on_timer(now)``,
``drain()`` for the frames to transmit and ``deadline()`` for the next timer.  Whoever drives
it (the simulated fabric, a socket transport) owns the clock and the wire.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from roce.emu.core.constants import QPType
from roce.emu.core.frames import receive
from roce.emu.core.memory import AddressSpace
from roce.emu.core.qp import QPCap, QueuePair
from roce.locate import OK, is_malformed
from roce.qpn import qpn_range

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any


@dataclass
class DeviceCounters:
    """What a device counted of the frames it took in and sent."""

    frames_in: int = 0
    frames_out: int = 0
    icrc_drops: int = 0
    malformed: int = 0
    not_roce: int = 0
    unknown_qp: int = 0


@dataclass(eq=False)
class Device:
    """An RDMA device: its addresses, memory, QPs and neighbours, and its counters."""

    name: str
    mac: str
    ip: str
    memory: AddressSpace = field(default_factory=AddressSpace)
    qps: dict[int, QueuePair] = field(default_factory=dict)
    neighbors: dict[str, str] = field(default_factory=dict)  # IP -> MAC (static ARP)
    counters: DeviceCounters = field(default_factory=DeviceCounters)
    tx: list[bytes] = field(default_factory=list)
    next_qpn: int = 0x11  # rxe numbers QPs from 17
    on_activity: Callable[[Device], None] | None = None  # set by the driver
    # a NIC scheduler (roce.emu.net.nic) gives each QP its own transmit list and limit
    shared_tx: bool = True
    qp_tx_limit: int | None = None
    last_qp: QueuePair | None = None  # the QP the last received frame went to
    # QP timers: a heap of (deadline, QPN), entries checked against ``_armed`` (the live
    # deadline per QPN) when they surface.  Only QPs something happened to (``_touched``)
    # are asked for their deadline again, so a device with 10,000 QPs pays for the QPs
    # that moved, not for all of them, on every event.
    _heap: list[tuple[int, int]] = field(default_factory=list)
    _armed: dict[int, int] = field(default_factory=dict)
    _touched: dict[int, QueuePair] = field(default_factory=dict)
    recovery: Any = None  # the device's default RecoveryConfig (verbs ``set_recovery``)

    def peer_mac(self, ip: str) -> str:
        try:
            return self.neighbors[ip]
        except KeyError:
            raise ValueError(f"{self.name}: no neighbour entry for {ip}") from None

    def create_qp(self, pd: object, qp_type: QPType, send_cq: object, recv_cq: object,
                  cap: QPCap, sq_sig_all: bool = True) -> QueuePair:
        qpn = self.next_qpn
        qpn_range(qpn, 1)  # ValueError once the 24-bit QPNs are used up: never wrapped
        self.next_qpn = qpn + 1
        qp = QueuePair(self, pd, qpn, qp_type, send_cq, recv_cq, cap, sq_sig_all)
        if self.shared_tx:
            qp.tx = self.tx
        qp.tx_limit = self.qp_tx_limit
        self.qps[qpn] = qp
        return qp

    def destroy_qp(self, qp: QueuePair) -> None:
        if self.qps.get(qp.qpn) is qp:
            del self.qps[qp.qpn]
            self._armed.pop(qp.qpn, None)
            self._touched.pop(qp.qpn, None)

    def touch(self, qp: QueuePair) -> None:
        """``qp`` handled an event (a post, a modify, a packet, a timer): its deadline may
        have moved."""
        self._touched[qp.qpn] = qp

    # -- the sans-I/O surface --------------------------------------------------------------

    def receive(self, now: int, frame: bytes, icrc_checked: bool = False) -> None:
        """A frame from the wire (``icrc_checked``: ``frames.receive``'s)."""
        self.counters.frames_in += 1
        status, pkt = receive(frame, icrc_checked)
        if pkt is None:
            if status == -1:
                self.counters.icrc_drops += 1
            elif is_malformed(status):
                self.counters.malformed += 1
            else:
                self.counters.not_roce += 1
            return
        qp = self.qps.get(pkt.destqp)
        if qp is None:
            self.counters.unknown_qp += 1
            return
        self.last_qp = qp  # a driver that tracks timers per QP re-reads this one's
        qp.receive(now, pkt)
        self._touched[qp.qpn] = qp

    def _rearm(self) -> None:
        for qpn, qp in self._touched.items():
            if self.qps.get(qpn) is not qp:
                continue  # destroyed (or replaced) since
            d = qp.deadline()
            if d is None:
                self._armed.pop(qpn, None)
            elif self._armed.get(qpn) != d:
                self._armed[qpn] = d
                heapq.heappush(self._heap, (d, qpn))
        self._touched.clear()
        heap, armed = self._heap, self._armed
        while heap and armed.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # superseded or cleared

    def on_timer(self, now: int) -> None:
        self._rearm()
        heap, armed = self._heap, self._armed
        due = []
        while heap and heap[0][0] <= now:
            d, qpn = heapq.heappop(heap)
            if armed.get(qpn) == d:
                del armed[qpn]
                due.append(qpn)
        for qpn in due:
            qp = self.qps.get(qpn)
            if qp is not None:
                qp.on_timer(now)
                self._touched[qpn] = qp

    def deadline(self) -> int | None:
        self._rearm()
        return self._heap[0][0] if self._heap else None

    def next_tx(self, now: int) -> int | None:
        """The ``Endpoint`` interface: frames are waiting now, or nothing is."""
        return now if self.tx else None

    def drain(self) -> list[bytes]:
        if not self.tx:
            return []
        out = self.tx[:]
        self.tx.clear()
        self.counters.frames_out += len(out)
        return out

    def kick(self) -> None:
        """Tell the driver there is work (a post, a modify) to pick up now."""
        if self.on_activity is not None:
            self.on_activity(self)


__all__ = ["Device", "DeviceCounters", "OK"]
