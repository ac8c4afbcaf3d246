"""Real-network drivers for an emulated ``Device``: raw Ethernet (AF_PACKET) and UDP sockets.

A *driver* plays for a device the role the simulated ``Fabric`` plays for its hosts: it owns
the clock (here wall time, ``time.monotonic_ns``), the wire and the timers.  After every
event it drains the device's frames onto the wire and re-reads ``device.deadline()``; when
the verbs layer posts work the device calls ``on_activity`` and the driver sends at once.

* ``RawEthernetTransport(device, ifname, arp=False)`` sends the device's whole frames on an
  AF_PACKET socket bound to one interface, with a classic BPF filter (``udp dst port 4791 or
  arp``) so the kernel hands up nothing else.  It answers ARP for the device's IP when asked
  and resolves peers' MACs by ARP (``resolve``) or statically (``device.neighbors``).
* ``UdpTransport(device, bind_ip)`` lets the kernel build Ethernet/IP/UDP: it sends only
  BTH..ICRC to (dst IP, 4791) and rebuilds a whole frame for the device from each datagram.
  The ICRC covers the IP addresses, the UDP ports, the IP ID and flags, so both ends agree on
  the fixed values RoCE senders use (ID 0, DF, TTL 64, UDP source port = the socket's port);
  frames built with another source port or address are re-stamped before they leave.

Several transports can share one ``EventLoop`` (two devices in one process on loopback).
Every frame sent and received can be recorded to a pcap (``record=PcapWriter(...)``).

``Relay`` is an impairing wire between two interfaces: it forwards every frame and applies
the simulated fabric's fault model (``LinkConfig``: loss, bursts, reordering, duplication,
corruption) to the RoCE ones -- a stand-in for ``tc netem`` where the kernel lacks it::

    python -m roce.emu.transport relay IF_A IF_B --loss 0.05 --reorder 0.1 --dup 0.02
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import heapq
import ipaddress
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .. import fast
from ..errors import RoceError
from ..headers import LAYOUTS
from ..locate import L3_IPV4, OK, ROCE_PORT
from .device import Device

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
PACKET_OUTGOING = 4  # sockaddr_ll.sll_pkttype of a frame this host sent
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20+
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
SO_NO_CHECK = 11
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2
IPV6_MTU_DISCOVER = 23
IPV6_PMTUDISC_DO = 2

BROADCAST = "ff:ff:ff:ff:ff:ff"
ZERO_MAC = "00:00:00:00:00:00"
RX_BATCH = 256  # frames read per readable event before timers and sends get a turn
SOCKET_BUFFER = 8 << 20
# Bytes a RoCEv2 packet adds to its payload above L2, worst case: IPv6 40, UDP 8, BTH 12,
# RETH + ImmDt 20, ICRC 4.  The path MTU must fit the interface MTU with this on top.
ROCE_L3_OVERHEAD = 84
IB_MTUS = (4096, 2048, 1024, 512, 256)


class TransportError(RoceError, OSError):
    """The transport cannot do its job (interface missing, frame too big, no permission)."""

    def __str__(self) -> str:
        return str(self.strerror or super().__str__())


@dataclass
class TransportStats:
    frames_sent: int = 0
    frames_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    send_drops: int = 0  # the kernel refused a frame (ENOBUFS): lost, as on a busy NIC
    ignored: int = 0  # frames for another MAC or not RoCE / ARP
    arp_replies_sent: int = 0
    arp_requests_sent: int = 0
    restamped: int = 0  # UDP: frames whose source port / address had to be rewritten


# -- interface facts ---------------------------------------------------------------------------


def _sysfs(ifname: str, attr: str) -> str:
    try:
        with open(f"/sys/class/net/{ifname}/{attr}") as f:
            return f.read().strip()
    except FileNotFoundError:
        raise TransportError(errno.ENODEV, f"no network interface {ifname!r}") from None


def interface_mac(ifname: str) -> str:
    return _sysfs(ifname, "address")


def interface_mtu(ifname: str) -> int:
    return int(_sysfs(ifname, "mtu"))


def interface_ipv4(ifname: str) -> str | None:
    """The interface's first IPv4 address (SIOCGIFADDR), or None."""
    import fcntl

    _sysfs(ifname, "address")  # a clear error for a missing interface
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            req = struct.pack("256s", ifname.encode()[:15])
            res = fcntl.ioctl(s.fileno(), 0x8915, req)  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(res[20:24])


def max_path_mtu(link_mtu: int) -> int:
    """The largest IB path MTU whose packets fit an interface MTU of ``link_mtu`` bytes."""
    for m in IB_MTUS:
        if m + ROCE_L3_OVERHEAD <= link_mtu:
            return m
    raise TransportError(errno.EMSGSIZE,
                         f"interface MTU {link_mtu} is too small for RoCE (256 + "
                         f"{ROCE_L3_OVERHEAD} bytes needed)")


def source_ip_for(host: str) -> str:
    """The local address the kernel would use to reach ``host`` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, ROCE_PORT))
        return s.getsockname()[0]


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", "").replace("-", ""))


def _mac_text(b: bytes) -> str:
    return b.hex(":")


# -- the event loop ------------------------------------------------------------------------------


class EventLoop:
    """A selector over transports (and any extra readers), with the devices' timers.

    ``clock`` is the devices' clock: the loop hands it to the contexts it drives, so the
    requester's retransmission timers and the loop's waits are on the same time line.
    """

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.transports: list[Transport] = []
        self.closed = False

    def add(self, t: Transport) -> None:
        self.transports.append(t)
        self.selector.register(t.fileno(), selectors.EVENT_READ, t)

    def remove(self, t: Transport) -> None:
        if t in self.transports:
            self.transports.remove(t)
            try:
                self.selector.unregister(t.fileno())
            except (KeyError, ValueError, OSError):
                pass

    def add_reader(self, fileobj: Any, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` when ``fileobj`` is readable (e.g. the out-of-band socket),
        so a loop waiting on the wire also wakes for it."""
        self.selector.register(fileobj, selectors.EVENT_READ, callback)

    def remove_reader(self, fileobj: Any) -> None:
        try:
            self.selector.unregister(fileobj)
        except (KeyError, ValueError, OSError):
            pass

    def next_deadline(self) -> int | None:
        best = None
        for t in self.transports:
            d = t.device.deadline()
            if d is not None and (best is None or d < best):
                best = d
        return best

    def poll(self, timeout: float | None = 0.0) -> int:
        """Wait up to ``timeout`` seconds (None: until something happens) for frames or a
        timer, handle them, send what the devices queued.  Returns frames received."""
        now = self.clock()
        d = self.next_deadline()
        wait = timeout
        if d is not None:
            until_timer = max(0.0, (d - now) / 1e9)
            wait = until_timer if wait is None else min(wait, until_timer)
        n = 0
        for key, _ in self.selector.select(wait):
            obj = key.data
            if isinstance(obj, Transport):
                n += obj.on_readable(self.clock())
            else:
                obj()
        now = self.clock()
        for t in self.transports:
            t.on_timer(now)
            t.flush()
        return n

    def run(self, until: int | None = None, stop: Callable[[], bool] | None = None,
            timeout: float | None = None) -> bool:
        """Poll until ``stop()`` holds (True), or until the clock passes ``until`` (ns on
        this loop's clock) or ``timeout`` seconds went by (False; True if no ``stop``)."""
        end = until
        if timeout is not None:
            t_end = self.clock() + int(timeout * 1e9)
            end = t_end if end is None else min(end, t_end)
        while True:
            if stop is not None and stop():
                return True
            now = self.clock()
            if end is not None and now >= end:
                return stop is None
            self.poll(0.05 if end is None else min(0.05, (end - now) / 1e9))

    def close(self) -> None:
        for t in list(self.transports):
            t.close()
        self.selector.close()
        self.closed = True


# -- transports ------------------------------------------------------------------------------


Tap = Callable[[str, int, bytes], None]  # (direction "rx"/"tx", wall ns, frame)


class Transport:
    """What every real driver does; subclasses own a socket and ``_send`` / ``_receive``."""

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
        frame = self._send(frame)
        if frame is None:
            return
        self.stats.frames_sent += 1
        self.stats.bytes_sent += len(frame)
        self._observe("tx", frame)

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


# Classic BPF for "udp dst port 4791 or arp" (IPv4 unfragmented or IPv6 without extension
# headers), assembled here so no tcpdump is needed at run time.  Instructions are
# (code, k, jump-if-true label, jump-if-false label); labels resolve to relative offsets.
_BPF_LD_H_ABS, _BPF_LD_B_ABS, _BPF_LD_H_IND = 0x28, 0x30, 0x48
_BPF_LDX_B_MSH, _BPF_JEQ_K, _BPF_JSET_K, _BPF_RET_K = 0xB1, 0x15, 0x45, 0x06
_ROCE_FILTER: list[tuple[str | None, int, int, str | None, str | None]] = [
    (None, _BPF_LD_H_ABS, 12, None, None),            # A = ethertype
    (None, _BPF_JEQ_K, ETH_P_ARP, "accept", None),
    (None, _BPF_JEQ_K, ETH_P_IP, None, "ipv6"),
    (None, _BPF_LD_B_ABS, 23, None, None),            # IPv4 protocol
    (None, _BPF_JEQ_K, socket.IPPROTO_UDP, None, "reject"),
    (None, _BPF_LD_H_ABS, 20, None, None),            # flags + fragment offset
    (None, _BPF_JSET_K, 0x1FFF, "reject", None),      # a later fragment has no UDP header
    (None, _BPF_LDX_B_MSH, 14, None, None),           # X = IPv4 header length
    (None, _BPF_LD_H_IND, 16, None, None),            # UDP destination port
    (None, _BPF_JEQ_K, ROCE_PORT, "accept", "reject"),
    ("ipv6", _BPF_JEQ_K, ETH_P_IPV6, None, "reject"),  # A still holds the ethertype
    (None, _BPF_LD_B_ABS, 20, None, None),            # IPv6 next header
    (None, _BPF_JEQ_K, socket.IPPROTO_UDP, None, "reject"),
    (None, _BPF_LD_H_ABS, 56, None, None),
    (None, _BPF_JEQ_K, ROCE_PORT, "accept", "reject"),
    ("accept", _BPF_RET_K, 0x40000, None, None),
    ("reject", _BPF_RET_K, 0, None, None),
]


def assemble_bpf(program: list[tuple[str | None, int, int, str | None, str | None]]) -> bytes:
    """struct sock_filter[] bytes for a labelled program (jumps are forward only)."""
    where = {label: i for i, (label, *_rest) in enumerate(program) if label}
    out = b""
    for i, (_label, code, k, jt, jf) in enumerate(program):
        t = where[jt] - i - 1 if jt else 0
        f = where[jf] - i - 1 if jf else 0
        if not (0 <= t < 256 and 0 <= f < 256):
            raise ValueError(f"BPF jump out of range at instruction {i}")
        out += struct.pack("HBBI", code, t, f, k)
    return out


ROCE_BPF = assemble_bpf(_ROCE_FILTER)


def attach_filter(sock: socket.socket, program: bytes) -> None:
    buf = ctypes.create_string_buffer(program)
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def _packet_socket(ifname: str, program: bytes | None, promisc: bool) -> socket.socket:
    """An AF_PACKET socket on ``ifname`` that sees only what ``program`` accepts.

    Created with protocol 0 (it receives nothing) and bound to ETH_P_ALL only after the
    filter is attached, so no unfiltered frame slips in between."""
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except PermissionError:
        raise TransportError(errno.EPERM, "raw Ethernet needs root (CAP_NET_RAW)") from None
    try:
        if program is not None:
            attach_filter(sock, program)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            pass  # older kernels: outgoing copies are dropped by their packet type below
        sock.bind((ifname, ETH_P_ALL))
        if promisc:
            ifindex = socket.if_nametoindex(ifname)
            mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
            sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        _grow_buffers(sock)
    except OSError as e:
        sock.close()
        if e.errno == errno.ENODEV:
            raise TransportError(errno.ENODEV, f"no network interface {ifname!r}") from None
        raise
    return sock


def _grow_buffers(sock: socket.socket) -> None:
    # A burst of a full window (128 packets of 4 KiB) must fit while Python catches up;
    # root can go past net.core.rmem_max with the FORCE variants.
    for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER)


def arp_frame(op: int, smac: str, sip: str, tmac: str, tip: str, dst: str | None = None) -> bytes:
    """An Ethernet ARP request (op 1) or reply (op 2), padded to the 60-byte minimum."""
    eth = _mac_bytes(dst or (BROADCAST if op == 1 else tmac)) + _mac_bytes(smac)
    body = struct.pack("!HHBBH6s4s6s4s", 1, ETH_P_IP, 6, 4, op, _mac_bytes(smac),
                       socket.inet_aton(sip), _mac_bytes(tmac), socket.inet_aton(tip))
    return (eth + struct.pack("!H", ETH_P_ARP) + body).ljust(60, b"\0")


def parse_arp(frame: bytes) -> tuple[int, str, str, str, str] | None:
    """(op, sender MAC, sender IP, target MAC, target IP) of an Ethernet/IPv4 ARP frame."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x06":
        return None
    htype, ptype, hlen, plen, op = struct.unpack_from("!HHBBH", frame, 14)
    if htype != 1 or ptype != ETH_P_IP or hlen != 6 or plen != 4:
        return None
    sha, spa, tha, tpa = struct.unpack_from("!6s4s6s4s", frame, 22)
    return op, _mac_text(sha), socket.inet_ntoa(spa), _mac_text(tha), socket.inet_ntoa(tpa)


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
        self.if_mac = interface_mac(ifname)
        self.link_mtu = interface_mtu(ifname)
        self.mac_b = _mac_bytes(self.device.mac)
        self.sock = _packet_socket(ifname, ROCE_BPF,
                                   promisc=self.device.mac.lower() != self.if_mac.lower())
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
        if addr[2] == PACKET_OUTGOING:
            return None  # our own frame, looped back to the packet socket
        if frame[12:14] == b"\x08\x06":
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
        if spa != dev.ip and spa != "0.0.0.0" and (op == 2 or tpa == dev.ip):
            dev.neighbors[spa] = sha  # learn only from what concerns us (no cache poisoning)
        if op == 1 and tpa == dev.ip and self.arp:
            self._observe("rx", frame)
            self.transmit(arp_frame(2, dev.mac, dev.ip, sha, spa))
            self.stats.arp_replies_sent += 1
        elif op == 2 and tpa == dev.ip:
            self._observe("rx", frame)

    def resolve(self, ip: str, timeout: float = 3.0, interval: float = 0.25) -> str:
        """The MAC of ``ip``: from ``device.neighbors`` or by ARP (learned into it)."""
        dev = self.device
        if ip in dev.neighbors:
            return dev.neighbors[ip]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.transmit(arp_frame(1, dev.mac, dev.ip, ZERO_MAC, ip))
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
            _grow_buffers(self.sock)
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
        self.mac_b = _mac_bytes(dev.mac)
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
            l2 = self._l2_cache[src_ip] = self.mac_b + _mac_bytes(peer_mac) + struct.pack(
                "!H", ETH_P_IPV6 if self.ipv6 else ETH_P_IP)
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


# -- an impairing wire (netem stand-in) -----------------------------------------------------------


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
    fault model (``fabric.Link.fate`` with a ``LinkConfig`` per direction, seeded).

    Put it in a namespace between two others (A -- veth -- relay -- veth -- B): the
    emulators see one Ethernet segment with loss, reordering (extra delay for some frames),
    duplication and corruption, reproducible from the seed as far as the decisions go.
    Non-RoCE frames (ARP, the out-of-band TCP) pass untouched.
    """

    def __init__(self, if_a: str, if_b: str, config_ab: Any, config_ba: Any | None = None,
                 seed: int = 0) -> None:
        import random

        from .fabric import Link

        self.names = (if_a, if_b)
        self.socks = [_packet_socket(if_a, None, True), _packet_socket(if_b, None, True)]
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
                    if addr[2] != PACKET_OUTGOING:
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
    """One interface of the relay as a link ``Endpoint``: frames the link delivers go out of
    this interface; it never asks to transmit (frames enter from its socket)."""

    def __init__(self, relay: Relay, index: int) -> None:
        self.relay = relay
        self.index = index

    def receive(self, now: int, frame: bytes) -> None:
        self.relay._put(self.index, frame)

    def next_tx(self, now: int) -> int | None:
        return None


def _relay_main(argv: list[str]) -> int:
    from ..options import parse_positive_seconds, parse_probability, parse_seed, parse_time
    from .fabric import LinkConfig

    p = argparse.ArgumentParser(prog="python -m roce.emu.transport relay",
                                description="an impairing wire between two interfaces")
    p.add_argument("if_a")
    p.add_argument("if_b")
    for name in ("loss", "burst", "reorder", "dup", "corrupt"):
        p.add_argument(f"--{name}", type=parse_probability, default=0.0)
    p.add_argument("--delay", type=parse_time, default=0, help="base delay (0)")
    p.add_argument("--jitter", type=parse_time, default=1_000_000,
                   help="extra delay of a reordered frame, at most (1ms)")
    p.add_argument("--seed", type=parse_seed, default=0)
    p.add_argument("--duration", type=parse_positive_seconds, default=None,
                   help="seconds (forever)")
    args = p.parse_args(argv)
    cfg = LinkConfig(rate_gbps=1e6, delay_ns=args.delay, loss=args.loss, burst_p=args.burst,
                     reorder=args.reorder, reorder_jitter_ns=args.jitter, dup=args.dup,
                     corrupt=args.corrupt)
    relay = Relay(args.if_a, args.if_b, cfg, LinkConfig(**asdict(cfg)), seed=args.seed)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    print(f"relay {args.if_a} <-> {args.if_b} ready", flush=True)
    try:
        relay.run(args.duration, stop=lambda: bool(stopping))
    except KeyboardInterrupt:
        pass
    finally:
        print(json.dumps(relay.stats()), flush=True)
        relay.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "relay":
        sys.exit(_relay_main(sys.argv[2:]))
    print("usage: python -m roce.emu.transport relay IF_A IF_B [options]", file=sys.stderr)
    sys.exit(os.EX_USAGE)


_IP_CSUM = LAYOUTS["ip"].field("checksum").byte_offset
