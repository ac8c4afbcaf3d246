"""An impairing wire between two interfaces: a stand-in for ``tc netem`` where the kernel
lacks it.

``Relay`` forwards every frame and applies the simulated fabric's fault model
(``roce.emu.net.direct.Link.fate`` with a ``LinkConfig`` per direction: loss, bursts, reordering,
duplication, corruption) to the RoCE ones; other frames (ARP, the out-of-band TCP) pass
untouched::

    roce relay IF_A IF_B --loss 0.05 --reorder 0.1 --dup 0.02

(the command is ``roce.cli.relay``).
"""

from __future__ import annotations

import heapq
import random
import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from roce import fast, iface
from roce.emu.real.driver import RX_BATCH
from roce.locate import OK


def fix_tcp_checksum(frame: bytes) -> bytes:
    """The frame with a correct TCP checksum (IPv4).

    A veth hands a packet socket TCP segments whose checksum the NIC was to finish
    (checksum offload): the field holds only the pseudo-header sum.  Sent on as a raw frame
    nothing would finish it and the receiver would drop the segment."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != socket.IPPROTO_TCP:
        return frame
    ihl = (frame[14] & 0x0F) * 4
    total = int.from_bytes(frame[16:18], "big")
    l4 = 14 + ihl
    end = min(len(frame), 14 + total)
    if end - l4 < 20:
        return frame
    seg = bytearray(frame[l4:end])
    seg[16:18] = b"\0\0"
    pseudo = frame[26:34] + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(seg))
    csum = fast.ip_checksum(pseudo + bytes(seg))
    return frame[:l4 + 16] + csum.to_bytes(2, "big") + frame[l4 + 18:]


class Relay:
    """Forwards every frame between two interfaces; RoCE frames meet the simulated fabric's
    fault model (``roce.emu.net.direct.Link.fate`` with a ``LinkConfig`` per direction, seeded).

    Put it in a namespace between two others (A -- veth -- relay -- veth -- B): the
    emulators see one Ethernet segment with loss, reordering (extra delay for some frames),
    duplication and corruption, reproducible from the seed as far as the decisions go.
    Non-RoCE frames (ARP, the out-of-band TCP) pass untouched.
    """

    def __init__(self, if_a: str, if_b: str, config_ab: Any, config_ba: Any | None = None,
                 seed: int = 0) -> None:
        from roce.emu.net.direct import Link

        self.names = (if_a, if_b)
        self.socks = [iface.packet_socket(name, None, promiscuous=True, ignore_outgoing=True,
                                          require_up=False) for name in (if_a, if_b)]
        ends = (_RelaySide(self, 0), _RelaySide(self, 1))
        rng = random.Random(seed)
        self.links = [Link(ends[0], ends[1], config_ab, random.Random(rng.getrandbits(64))),
                      Link(ends[1], ends[0], config_ba or config_ab,
                           random.Random(rng.getrandbits(64)))]
        self.queue: list[tuple[int, int, int, bytes]] = []  # (release ns, seq, link, frame)
        self.seq = 0
        self.passed = 0
        self.selector = selectors.DefaultSelector()
        for i, s in enumerate(self.socks):
            self.selector.register(s, selectors.EVENT_READ, i)

    def _forward(self, side: int, frame: bytes, now: int) -> None:
        out = 1 - side
        w = fast.walk(frame)
        if w.status != OK:
            self.passed += 1
            self._put(out, fix_tcp_checksum(frame))
            return
        link = self.links[side]
        for t, f in link.fate(now, frame):
            if t <= now:
                link.dst.receive(now, f)  # the other side's interface
            else:
                self.seq += 1
                heapq.heappush(self.queue, (t, self.seq, side, f))

    def _put(self, out: int, frame: bytes) -> None:
        try:
            self.socks[out].send(frame)
        except OSError:
            pass  # a full qdisc drops, as a switch would

    def run(self, duration: float | None = None, stop: Callable[[], bool] | None = None) -> None:
        end = None if duration is None else time.monotonic_ns() + int(duration * 1e9)
        while not (stop and stop()):
            now = time.monotonic_ns()
            if end is not None and now >= end:
                return
            while self.queue and self.queue[0][0] <= now:
                _, _, side, f = heapq.heappop(self.queue)
                self.links[side].dst.receive(now, f)
            wait = 0.05
            if self.queue:
                wait = min(wait, max(0.0, (self.queue[0][0] - now) / 1e9))
            for key, _ in self.selector.select(wait):
                side = key.data
                sock = self.socks[side]
                for _ in range(RX_BATCH):
                    try:
                        frame, addr = sock.recvfrom(65536, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    if addr[2] != iface.PACKET_OUTGOING:
                        self._forward(side, frame, time.monotonic_ns())

    def stats(self) -> dict[str, Any]:
        return {f"{self.names[0]}->{self.names[1]}": asdict(self.links[0].stats),
                f"{self.names[1]}->{self.names[0]}": asdict(self.links[1].stats),
                "passed_other": self.passed}

    def close(self) -> None:
        self.selector.close()
        for s in self.socks:
            s.close()


class _RelaySide:
    """One interface of the relay as a link ``Endpoint`` (roce.emu.core.endpoint): frames the link
    delivers go out of this interface; it never asks to transmit (frames enter from its
    socket)."""

    def __init__(self, relay: Relay, index: int) -> None:
        self.relay = relay
        self.index = index

    def receive(self, now: int, frame: bytes) -> None:
        self.relay._put(self.index, frame)

    def next_tx(self, now: int) -> int | None:
        return None
