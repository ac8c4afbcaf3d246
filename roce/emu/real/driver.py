"""What every real-network driver of an emulated ``Device`` does, whatever its socket.

A *driver* plays for a device the role the simulated ``Fabric`` plays for its hosts: it owns
the clock (wall time, through its ``EventLoop``), the wire and the timers.  After every
event it drains the device's frames onto the wire and re-reads ``device.deadline()``; when
the verbs layer posts work the device calls ``on_activity`` and the driver sends at once.
Every frame sent and received can be recorded to a pcap (``record=PcapWriter(...)``) and
shown to taps.  Subclasses (``raw.RawEthernetTransport``, ``udp.UdpTransport``) own a socket
and say how a frame goes out (``_send``) and what a datagram read means (``_received``).
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roce.emu.core.device import Device
from roce.emu.real.loop import EventLoop
from roce.errors import TransportError

RX_BATCH = 256  # frames read per readable event before timers and sends get a turn
SOCKET_BUFFER = 8 << 20  # a full window (128 packets of 4 KiB) fits while Python catches up
# Bytes a RoCEv2 packet adds to its payload above L2, worst case: IPv6 40, UDP 8, BTH 12,
# RETH + ImmDt 20, ICRC 4.  The path MTU must fit the interface MTU with this on top.
ROCE_L3_OVERHEAD = 84
IB_MTUS = (4096, 2048, 1024, 512, 256)


@dataclass
class TransportStats:
    """What a real link carried, refused and ignored."""

    frames_sent: int = 0
    frames_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    send_drops: int = 0  # the kernel refused a frame (ENOBUFS): lost, as on a busy NIC
    ignored: int = 0  # frames for another MAC or not RoCE / ARP
    arp_replies_sent: int = 0
    arp_requests_sent: int = 0
    restamped: int = 0  # UDP: frames whose source port / address had to be rewritten


def max_path_mtu(link_mtu: int) -> int:
    """The largest IB path MTU whose packets fit an interface MTU of ``link_mtu`` bytes."""
    for m in IB_MTUS:
        if m + ROCE_L3_OVERHEAD <= link_mtu:
            return m
    raise TransportError(errno.EMSGSIZE,
                         f"interface MTU {link_mtu} is too small for RoCE (256 + "
                         f"{ROCE_L3_OVERHEAD} bytes needed)")


Tap = Callable[[str, int, bytes], None]  # (direction "rx"/"tx", wall ns, frame)


class Transport:
    """What every real driver does; subclasses own a socket and ``_send`` / ``_received``."""

    kind = "transport"

    def __init__(self, device: Any, *, record: Any = None, loop: EventLoop | None = None) -> None:
        ctx = None
        if not isinstance(device, Device):  # a verbs Context: it reads our clock from now on
            ctx, device = device, device.device
        self.device: Device = device
        self.loop = loop or EventLoop()
        if ctx is not None:
            ctx.clock = self.loop.clock
        self.record = record
        self.taps: list[Tap] = []  # observers of every frame, called before the device sees it
        self.stats = TransportStats()
        self.sock: socket.socket | None = None

    def _start(self) -> None:
        """Called by subclasses once the socket is ready."""
        self.device.on_activity = self._on_activity
        self.loop.add(self)

    # -- driver surface

    def fileno(self) -> int:
        assert self.sock is not None
        return self.sock.fileno()

    def _on_activity(self, device: Device) -> None:
        # A post or a modify from the application: its frames go out now, not at the next
        # poll -- the verbs caller may not poll for a while.
        self.flush()

    def flush(self) -> int:
        frames = self.device.drain()
        for f in frames:
            self.transmit(f)
        return len(frames)

    def on_timer(self, now: int) -> None:
        d = self.device.deadline()
        if d is not None and d <= now:
            self.device.on_timer(now)

    def transmit(self, frame: bytes) -> None:
        """Put one whole Ethernet frame (as the device built it) on the wire."""
        sent = self._send(frame)
        if sent is None:
            return
        self.stats.frames_sent += 1
        self.stats.bytes_sent += len(sent)
        self._observe("tx", sent)

    def deliver(self, now: int, frame: bytes) -> None:
        """Hand one received frame to the device."""
        self.stats.frames_received += 1
        self.stats.bytes_received += len(frame)
        self._observe("rx", frame)
        self.device.receive(now, frame)

    def _observe(self, direction: str, frame: bytes) -> None:
        if self.record is None and not self.taps:
            return
        ts = time.time_ns()
        if self.record is not None:
            self.record.write(frame, ts_ns=ts)
        for tap in self.taps:
            tap(direction, ts, frame)

    def poll(self, timeout: float | None = 0.0) -> int:
        return self.loop.poll(timeout)

    def run(self, until: int | None = None, stop: Callable[[], bool] | None = None,
            timeout: float | None = None) -> bool:
        return self.loop.run(until, stop, timeout)

    def close(self) -> None:
        self.loop.remove(self)
        if self.device.on_activity == self._on_activity:
            self.device.on_activity = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- for subclasses

    def _send(self, frame: bytes) -> bytes | None:
        """Send ``frame``; the frame as it went out, or None if it was dropped."""
        raise NotImplementedError

    # recvfrom errors that mean "no frame this time" rather than a broken socket
    _RECV_SKIP: tuple[type[OSError], ...] = ()

    def on_readable(self, now: int) -> int:
        """Read up to RX_BATCH datagrams; deliver each that ``_received`` makes a frame of."""
        assert self.sock is not None
        n = 0
        recv = self.sock.recvfrom
        for _ in range(RX_BATCH):
            try:
                data, addr = recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except self._RECV_SKIP:
                continue
            frame = self._received(data, addr)
            if frame is not None:
                self.deliver(now, frame)
                n += 1
        return n

    def _received(self, data: bytes, addr: Any) -> bytes | None:
        """The frame to deliver for what the socket read, or None to pass it by."""
        raise NotImplementedError
