"""The UDP driver: RoCEv2 over a kernel UDP socket on port 4791, no raw-socket privilege.

The kernel builds Ethernet/IP/UDP: the driver sends only BTH..ICRC to (dst IP, 4791) and
rebuilds a whole frame for the device from each datagram.  The ICRC covers the IP
addresses, the UDP ports, the IP ID and flags, so both ends agree on the fixed values RoCE
senders use (ID 0, DF, TTL 64, UDP source port = the socket's port); frames built with
another source port or address are re-stamped before they leave.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from typing import Any

from roce import fast, iface
from roce.emu.real.driver import SOCKET_BUFFER, Transport, TransportError
from roce.emu.real.loop import EventLoop
from roce.headers import LAYOUTS
from roce.iface import ZERO_MAC
from roce.locate import L3_IPV4, OK, ROCE_PORT
from roce.options import mac_bytes

SO_NO_CHECK = 11
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2
IPV6_MTU_DISCOVER = 23
IPV6_PMTUDISC_DO = 2
_IP_CSUM = LAYOUTS["ip"].field("checksum").byte_offset


class UdpTransport(Transport):
    """RoCEv2 over a kernel UDP socket on (``bind_ip``, 4791): only BTH..ICRC is sent.

    Received datagrams become whole frames again (Ethernet to the device's MAC, IP with ID 0,
    DF, TTL 64 and the real addresses, UDP with the real source port and destination port
    4791) so the device checks the ICRC the sender computed.  ``port`` other than 4791 is for
    tests that cannot have 4791; ``peer_port`` is where frames go (default: ``port``).
    """

    kind = "udp"

    def __init__(self, device: Any, bind_ip: str | None = None, *, port: int = ROCE_PORT,
                 peer_port: int | None = None, record: Any = None,
                 loop: EventLoop | None = None) -> None:
        super().__init__(device, record=record, loop=loop)
        dev = self.device
        bind_ip = bind_ip or dev.ip
        if bind_ip != dev.ip:
            raise ValueError(f"UdpTransport: bind address {bind_ip} is not the device's IP "
                             f"{dev.ip}: the ICRC covers the source address")
        self.ipv6 = ":" in bind_ip
        self.port = port
        self.peer_port = port if peer_port is None else peer_port
        family = socket.AF_INET6 if self.ipv6 else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if self.ipv6:
                self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO)
            else:
                # DF set and, on an unconnected socket, IP ID 0: what the ICRC was computed
                # with; UDP checksum 0 as RoCE senders do (the ICRC protects the packet).
                self.sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
                self.sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
            iface.grow_buffers(self.sock, SOCKET_BUFFER, SOCKET_BUFFER)
            self.sock.bind((bind_ip, port))
        except OSError as e:
            self.sock.close()
            if e.errno == errno.EADDRINUSE:
                raise TransportError(errno.EADDRINUSE, f"UDP {bind_ip}:{port} is in use "
                                     "(another RoCE stack or emulator?)") from None
            if e.errno == errno.EADDRNOTAVAIL:
                raise TransportError(errno.EADDRNOTAVAIL,
                                     f"{bind_ip} is not an address of this host") from None
            raise
        self.local_b = socket.inet_pton(family, bind_ip)
        self.mac_b = mac_bytes(dev.mac)
        self._dst_cache: dict[bytes, str] = {}
        self._l2_cache: dict[str, bytes] = {}
        self._start()

    def _send(self, frame: bytes) -> bytes | None:
        assert self.sock is not None
        w = fast.walk(frame)
        if w.status != OK:
            self.stats.ignored += 1  # not RoCE (nothing else goes over this transport)
            return None
        a_len = 4 if w.l3_kind == L3_IPV4 else 16
        src_off = w.l3_off + (12 if w.l3_kind == L3_IPV4 else 8)
        src = frame[src_off:src_off + a_len]
        dst_b = frame[src_off + a_len:src_off + 2 * a_len]
        sport = int.from_bytes(frame[w.udp_off:w.udp_off + 2], "big")
        if sport != self.port or src != self.local_b:
            frame = self._restamp(frame, w, src_off)
        dst = self._dst_cache.get(dst_b)
        if dst is None:
            dst = self._dst_cache[dst_b] = str(ipaddress.ip_address(dst_b))
        try:
            self.sock.sendto(memoryview(frame)[w.bth_off:w.l4_end], (dst, self.peer_port))
        except OSError as e:
            if e.errno == errno.EMSGSIZE:
                raise TransportError(errno.EMSGSIZE,
                                     f"a {w.l4_end - w.bth_off}-byte RoCE datagram to {dst} "
                                     "is bigger than the path MTU allows: lower the RoCE "
                                     "path MTU") from None
            if e.errno in (errno.ENOBUFS, errno.EAGAIN, errno.ECONNREFUSED,
                           errno.EHOSTUNREACH, errno.ENETUNREACH):
                self.stats.send_drops += 1
                return None
            raise
        return frame

    def _restamp(self, frame: bytes, w: Any, src_off: int) -> bytes:
        """Put the socket's source port and address in the frame and recompute its ICRC: the
        receiver rebuilds the headers from what the kernel really sent."""
        self.stats.restamped += 1
        b = bytearray(frame)
        b[w.udp_off:w.udp_off + 2] = self.port.to_bytes(2, "big")
        b[src_off:src_off + len(self.local_b)] = self.local_b
        if w.l3_kind == L3_IPV4:
            lo = w.l3_off + _IP_CSUM
            b[lo:lo + 2] = b"\0\0"
            b[lo:lo + 2] = fast.ip_checksum(
                bytes(b[w.l3_off:w.l3_off + w.l3_len])).to_bytes(2, "big")
        out = bytes(b)
        icrc = fast.icrc_of(out, w)
        return out[:w.icrc_off] + icrc.to_bytes(4, "big") + out[w.l4_end:]

    # e.g. a queued ICMP error on some kernels: not a frame
    _RECV_SKIP = (OSError,)

    def _received(self, data: bytes, addr: Any) -> bytes | None:
        return self.rebuild(data, addr[0], addr[1])

    def rebuild(self, data: bytes, src_ip: str, sport: int) -> bytes:
        """The whole frame a RoCE NIC would have received for this datagram."""
        l2 = self._l2_cache.get(src_ip)
        if l2 is None:
            peer_mac = self.device.neighbors.get(src_ip, ZERO_MAC)
            l2 = self._l2_cache[src_ip] = self.mac_b + mac_bytes(peer_mac) + struct.pack(
                "!H", iface.ETH_P_IPV6 if self.ipv6 else iface.ETH_P_IP)
        udp = struct.pack("!HHHH", sport, ROCE_PORT, 8 + len(data), 0)
        if self.ipv6:
            src = socket.inet_pton(socket.AF_INET6, src_ip.split("%")[0])
            l3 = struct.pack("!IHBB16s16s", 6 << 28, 8 + len(data), socket.IPPROTO_UDP, 64,
                             src, self.local_b)
        else:
            hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(data), 0, 0x4000,
                                        64, socket.IPPROTO_UDP, 0,
                                        socket.inet_aton(src_ip), self.local_b))
            hdr[10:12] = fast.ip_checksum(bytes(hdr)).to_bytes(2, "big")
            l3 = bytes(hdr)
        return l2 + l3 + udp + data
