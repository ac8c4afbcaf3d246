"""The raw Ethernet driver: an emulated device's whole frames on one interface (AF_PACKET).

The socket comes from ``roce.iface.packet_socket`` -- the one packet-socket opener of
the project -- with the "udp dst port 4791 or arp" filter, so the kernel hands up nothing
else.  The driver answers ARP for the device's IP when asked (``arp=True``) and resolves
peers' MACs by ARP (``resolve``) or statically (``device.neighbors``).
"""

from __future__ import annotations

import errno
import socket
import time
from typing import Any

from roce import iface
from roce.emu.real.driver import SOCKET_BUFFER, Transport, TransportError, max_path_mtu
from roce.emu.real.loop import EventLoop
from roce.iface import ARP_REPLY, ARP_REQUEST, ZERO_MAC, arp_frame, parse_arp
from roce.locate import ROCE_PORT
from roce.options import mac_bytes

_ARP_TYPE = iface.ETH_P_ARP.to_bytes(2, "big")


class RawEthernetTransport(Transport):
    """The device's whole frames on an interface, through an AF_PACKET socket.

    ``arp=True`` answers ARP requests for the device's IP (needed when the kernel does not
    own that address).  The device's MAC defaults to the interface's; another MAC puts the
    interface in promiscuous mode so frames to it are not filtered by the NIC.
    """

    kind = "raw"

    def __init__(self, device: Any, ifname: str, arp: bool = False, *, record: Any = None,
                 loop: EventLoop | None = None, sink: bool = True) -> None:
        super().__init__(device, record=record, loop=loop)
        self.ifname = ifname
        self.arp = arp
        self.if_mac = iface.interface_mac(ifname)
        self.link_mtu = iface.interface_mtu(ifname)
        self.mac_b = mac_bytes(self.device.mac)
        # the link may come up after us (a namespace being set up): existence is enough
        self.sock = iface.packet_socket(
            ifname, iface.ROCE_OR_ARP, promiscuous=self.device.mac.lower() != self.if_mac,
            rcvbuf=SOCKET_BUFFER, sndbuf=SOCKET_BUFFER, ignore_outgoing=True,
            require_up=False)
        self.sink = self._sink() if sink else None
        self._start()

    def _sink(self) -> socket.socket | None:
        """When the kernel owns the device's IP it would answer every RoCE frame with an
        ICMP port unreachable (no socket on 4791; rxe sits there in a real stack).  A UDP
        socket bound to the port, never read, with a tiny buffer, silences it."""
        if ":" in self.device.ip:
            return None
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
            s.bind((self.device.ip, ROCE_PORT))
        except OSError:
            s.close()
            return None  # not a local address (no ICMP either) or the port is taken
        return s

    def _send(self, frame: bytes) -> bytes | None:
        assert self.sock is not None
        try:
            self.sock.send(frame)
        except OSError as e:
            if e.errno == errno.EMSGSIZE:
                raise TransportError(errno.EMSGSIZE,
                                     f"a {len(frame)}-byte frame does not fit {self.ifname} "
                                     f"(MTU {self.link_mtu}): use a path MTU of at most "
                                     f"{max_path_mtu(self.link_mtu)}") from None
            if e.errno in (errno.ENOBUFS, errno.EAGAIN):
                self.stats.send_drops += 1  # the qdisc is full: the frame is lost
                return None
            raise
        return frame

    def _received(self, frame: bytes, addr: Any) -> bytes | None:
        if addr[2] == iface.PACKET_OUTGOING:
            return None  # our own frame, looped back (kernels without IGNORE_OUTGOING)
        if frame[12:14] == _ARP_TYPE:
            self._arp_in(frame)
            return None
        if frame[:6] != self.mac_b:
            self.stats.ignored += 1  # RoCE for another MAC (promiscuous interface)
            return None
        return frame

    # -- ARP

    def _arp_in(self, frame: bytes) -> None:
        a = parse_arp(frame)
        if a is None:
            self.stats.ignored += 1
            return
        op, sha, spa, _tha, tpa = a
        dev = self.device
        if spa != dev.ip and spa != "0.0.0.0" and (op == ARP_REPLY or tpa == dev.ip):
            dev.neighbors[spa] = sha  # learn only from what concerns us (no cache poisoning)
        if op == ARP_REQUEST and tpa == dev.ip and self.arp:
            self._observe("rx", frame)
            self.transmit(arp_frame(ARP_REPLY, dev.mac, dev.ip, sha, spa))
            self.stats.arp_replies_sent += 1
        elif op == ARP_REPLY and tpa == dev.ip:
            self._observe("rx", frame)

    def resolve(self, ip: str, timeout: float = 3.0, interval: float = 0.25) -> str:
        """The MAC of ``ip``: from ``device.neighbors`` or by ARP (learned into it)."""
        dev = self.device
        if ip in dev.neighbors:
            return dev.neighbors[ip]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.transmit(arp_frame(ARP_REQUEST, dev.mac, dev.ip, ZERO_MAC, ip))
            self.stats.arp_requests_sent += 1
            self.loop.run(stop=lambda: ip in dev.neighbors,
                          timeout=min(interval, max(0.0, end - time.monotonic())))
            if ip in dev.neighbors:
                return dev.neighbors[ip]
        raise TransportError(errno.EHOSTUNREACH,
                             f"no ARP reply from {ip} on {self.ifname} in {timeout:g} s")

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            self.sink = None
        super().close()
