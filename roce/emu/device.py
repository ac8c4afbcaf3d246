"""An emulated RoCE device (an RNIC): memory, queue pairs, and the frames in and out.

Sans-I/O like the queue pairs it holds: ``receive(now, frame)``, ``on_timer(now)``,
``drain()`` for the frames to transmit and ``deadline()`` for the next timer.  Whoever drives
it (the simulated fabric, a socket transport) owns the clock and the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..locate import OK, is_malformed
from .constants import QPType
from .memory import AddressSpace
from .qp import QPCap, QueuePair
from .wire import receive


@dataclass
class DeviceCounters:
    frames_in: int = 0
    frames_out: int = 0
    icrc_drops: int = 0
    malformed: int = 0
    not_roce: int = 0
    unknown_qp: int = 0


@dataclass(eq=False)
class Device:
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

    def peer_mac(self, ip: str) -> str:
        try:
            return self.neighbors[ip]
        except KeyError:
            raise ValueError(f"{self.name}: no neighbour entry for {ip}") from None

    def create_qp(self, pd: object, qp_type: QPType, send_cq: object, recv_cq: object,
                  cap: QPCap, sq_sig_all: bool = True) -> QueuePair:
        qpn = self.next_qpn
        self.next_qpn += 1
        qp = QueuePair(self, pd, qpn, qp_type, send_cq, recv_cq, cap, sq_sig_all)
        if self.shared_tx:
            qp.tx = self.tx
        qp.tx_limit = self.qp_tx_limit
        self.qps[qpn] = qp
        return qp

    def destroy_qp(self, qp: QueuePair) -> None:
        self.qps.pop(qp.qpn, None)

    # -- the sans-I/O surface --------------------------------------------------------------

    def receive(self, now: int, frame: bytes) -> None:
        self.counters.frames_in += 1
        status, pkt = receive(frame)
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

    def on_timer(self, now: int) -> None:
        for qp in list(self.qps.values()):
            d = qp.deadline()
            if d is not None and d <= now:
                qp.on_timer(now)

    def deadline(self) -> int | None:
        best = None
        for qp in self.qps.values():
            d = qp.deadline()
            if d is not None and (best is None or d < best):
                best = d
        return best

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
