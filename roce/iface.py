"""Raw-socket plumbing shared by ``roce send``, ``roce replay``, ``roce sniff`` and the
emulator's raw Ethernet transport and relay (Linux).

* Interface facts: MTU, MAC, IPv4 address, hardware type, from SIOCGIF* ioctls.
* Interface checks: :func:`check_interface` names what is wrong (unknown, administratively
  down, no carrier) before anything is opened; the CLIs turn :class:`InterfaceError` into
  one line and exit status 2.
* Sending: :func:`open_sender` gives an ``AF_PACKET`` socket bound to the interface
  (protocol 0, so it never queues received frames) with ``send_many`` going through
  ``sendmmsg(2)`` (ctypes) when libc has it: one system call per batch instead of one per
  frame is what lets a Python sender keep up with ``tcpreplay``.  Scapy's L2 socket is the
  fallback where ``AF_PACKET`` does not exist.
* Packet sockets: :func:`packet_socket` is the one way an ``AF_PACKET`` socket that
  receives is opened (filter attached before it is bound, so no unfiltered frame slips
  in); the capture socket and the emulator's transport are options of it.  The emulator's
  filter ("udp dst port 4791 or arp") is assembled here (:data:`ROCE_OR_ARP`), so it needs
  no libpcap or tcpdump at run time.
* Capturing: :func:`open_capture_socket` attaches a classic BPF program compiled by libpcap
  (ctypes, ``pcap_compile`` on a dead handle) or by ``tcpdump -ddd``, asks for kernel
  timestamps and ``PACKET_AUXDATA``, and :func:`receive` puts VLAN tags the kernel took off
  back into the frame, as libpcap does.
* Pacing: :class:`Pacer` waits for a monotonic deadline by sleeping, then spinning the
  last stretch, with the timer slack lowered so that sleeps end close to when they should.
* Neighbours: ARP frames (:func:`arp_frame`, :func:`parse_arp`; the emulator's raw
  transport answers and asks with them), the kernel's neighbour table (:func:`neighbour_mac`,
  netlink), and :func:`resolve_mac`, the MAC a frame to an IP address goes to on an
  interface, as ``roce send`` and ``roce replay`` find it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import ipaddress
import os
import select
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from roce.errors import FilterError, InterfaceError
from roce.locate import ROCE_PORT
from roce.options import mac_bytes

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_AUXDATA = 8
PACKET_QDISC_BYPASS = 20
SO_ATTACH_FILTER = 26
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SCM_TIMESTAMPNS = 35  # also SO_TIMESTAMPNS
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
PACKET_OUTGOING = 4
PACKET_IGNORE_OUTGOING = 23  # Linux 4.20+
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD

SIOCGIFFLAGS = 0x8913
SIOCGIFMTU = 0x8921
SIOCGIFHWADDR = 0x8927
SIOCGIFADDR = 0x8915
ARPHRD_ETHER, ARPHRD_LOOPBACK = 1, 772  # link types whose frames start with Ethernet II
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40

_AUXDATA = struct.Struct("IIIHHHH")  # struct tpacket_auxdata
_TIMESPEC = struct.Struct("qq")
_ANC_SIZE = socket.CMSG_SPACE(_AUXDATA.size) + socket.CMSG_SPACE(_TIMESPEC.size)

HAVE_AF_PACKET = hasattr(socket, "AF_PACKET")


# -- interfaces -----------------------------------------------------------------------------


def _ifreq(name: str, request: int) -> bytes:
    """One SIOCGIF* ioctl.  Any socket of the current network namespace answers it, no
    privilege needed, so this is right under ``ip netns exec`` even where /sys is stale."""
    raw = name.encode()
    if len(raw) >= 16:
        raise InterfaceError(f"interface name {name!r} is too long (15 characters at most)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            return fcntl.ioctl(s.fileno(), request, struct.pack("16s24x", raw))
        except OSError as exc:
            if exc.errno in (errno.ENODEV, errno.ENXIO):
                raise InterfaceError(f"no such interface {name!r}") from None
            raise InterfaceError(f"cannot query interface {name!r}: {exc.strerror}") from None


def interface_flags(name: str) -> int:
    return struct.unpack_from("H", _ifreq(name, SIOCGIFFLAGS), 16)[0]


def interface_mtu(name: str) -> int:
    return struct.unpack_from("i", _ifreq(name, SIOCGIFMTU), 16)[0]


def interface_hatype(name: str) -> int:
    """The ARPHRD_* hardware type (1 Ethernet, 772 loopback, 65534 none/tun ...)."""
    return struct.unpack_from("H", _ifreq(name, SIOCGIFHWADDR), 16)[0]


def interface_mac(name: str) -> str:
    """The hardware address, ``aa:bb:cc:dd:ee:ff`` (SIOCGIFHWADDR: struct ifreq's sockaddr
    at offset 16, its two-byte family, then the address)."""
    return _ifreq(name, SIOCGIFHWADDR)[18:24].hex(":")


def interface_ipv4(name: str) -> str | None:
    """The first IPv4 address (SIOCGIFADDR: a sockaddr_in at offset 16, the address 4 bytes
    in), or None when it has none; an unknown interface is an InterfaceError."""
    interface_flags(name)
    try:
        return socket.inet_ntoa(_ifreq(name, SIOCGIFADDR)[20:24])
    except InterfaceError:  # EADDRNOTAVAIL: no address
        return None


def check_interface(name: str) -> None:
    """Raise InterfaceError unless ``name`` exists, is Ethernet, is up and has a carrier."""
    if not name:
        raise InterfaceError("empty interface name")
    flags = interface_flags(name)
    hatype = interface_hatype(name)
    if hatype not in (ARPHRD_ETHER, ARPHRD_LOOPBACK):
        raise InterfaceError(f"interface {name} is not Ethernet (hardware type {hatype}); "
                             "RoCE frames need an Ethernet interface")
    if not flags & IFF_UP:
        raise InterfaceError(f"interface {name} is down (ip link set {name} up)")
    if not flags & IFF_RUNNING:
        # a veth whose peer is down, a cable pulled: frames would vanish without an error
        raise InterfaceError(f"interface {name} is up but has no carrier (lower layer down)")


def _privilege_error(name: str) -> InterfaceError:
    return InterfaceError(f"no permission to open a raw socket on {name} "
                          "(run as root or grant CAP_NET_RAW)")


# -- sending --------------------------------------------------------------------------------


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("msg_name", ctypes.c_void_p), ("msg_namelen", ctypes.c_uint32),
                ("msg_iov", ctypes.c_void_p), ("msg_iovlen", ctypes.c_size_t),
                ("msg_control", ctypes.c_void_p), ("msg_controllen", ctypes.c_size_t),
                ("msg_flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


_MMSG_SIZE = ctypes.sizeof(_MMsgHdr)
_libc: Any = None


def _load_libc() -> Any:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        except OSError:
            _libc = False
    return _libc


def _sendmmsg() -> Any:
    libc = _load_libc()
    fn = getattr(libc, "sendmmsg", None) if libc else None
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
        fn.restype = ctypes.c_int
    return fn


class FrameBatch:
    """Frames laid out for ``sendmmsg``: one contiguous buffer, one iovec and one mmsghdr
    per frame, built once and reused for every loop of a replay."""

    def __init__(self, frames: Sequence[bytes]) -> None:
        self.frames = frames
        self.count = len(frames)
        self.nbytes = sum(map(len, frames))
        self._blob = bytearray(b"".join(frames))
        n = self.count
        self._iov = (_IOVec * max(n, 1))()
        self._msgs = (_MMsgHdr * max(n, 1))()
        if not n:
            self.base = 0
            return
        base = ctypes.addressof((ctypes.c_char * len(self._blob)).from_buffer(self._blob))
        iov_base = ctypes.addressof(self._iov)
        iov_size = ctypes.sizeof(_IOVec)
        off = 0
        iov, msgs = self._iov, self._msgs
        for i, f in enumerate(frames):
            v = iov[i]
            v.iov_base = base + off
            v.iov_len = len(f)
            h = msgs[i].msg_hdr
            h.msg_iov = iov_base + i * iov_size
            h.msg_iovlen = 1
            off += len(f)
        self.base = ctypes.addressof(self._msgs)

    def address(self, index: int) -> int:
        return self.base + index * _MMSG_SIZE


class SendResult(NamedTuple):
    done: int  # frames handled: sent or failed
    failed: list[int]  # indexes (into the batch) the interface refused


class Sender:
    """Frames out of one interface.  ``send_many`` handles a slice of a ``FrameBatch``."""

    name: str
    mtu: int
    backend: str

    def send(self, frame: bytes) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def send_many(self, batch: FrameBatch, start: int, count: int) -> SendResult:
        failed = []
        frames, send = batch.frames, self.send
        for i in range(start, start + count):
            if not send(frames[i]):
                failed.append(i)
        return SendResult(count, failed)

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_RETRY = (errno.ENOBUFS, errno.EAGAIN)  # queue full: the frame was not sent, try again
_GONE = (errno.ENETDOWN, errno.ENXIO, errno.ENODEV)
# One frame the device will not take: longer than its MTU (EMSGSIZE), or shorter than its
# link header (EINVAL, dev_validate_header): that frame is refused, the next one may go.
_REFUSED = (errno.EMSGSIZE, errno.EINVAL)
# A full queue drains in microseconds; a device that refuses every frame for this long is
# dropping them (a veth whose peer went down answers ENOBUFS forever).
STALL_LIMIT = 2.0


class _Stall:
    """Time since the last frame got through, while the device keeps answering 'retry'."""

    __slots__ = ("since", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.since = 0.0

    def wait(self) -> None:
        now = time.monotonic()
        if not self.since:
            self.since = now
        elif now - self.since > STALL_LIMIT:
            raise InterfaceError(f"interface {self.name} has refused every frame for "
                                 f"{STALL_LIMIT:.0f} s (no buffer space; link or peer down?)")
        time.sleep(20e-6)

    def progress(self) -> None:
        self.since = 0.0


class PacketSender(Sender):
    """An ``AF_PACKET`` raw socket bound to one interface."""

    backend = "packet"

    def __init__(self, name: str) -> None:
        self.name = name
        self.mtu = interface_mtu(name)
        try:
            # protocol 0: bound for sending only, the kernel hands this socket no frames
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError:
            raise _privilege_error(name) from None
        try:
            self.sock.bind((name, 0))
        except OSError as exc:
            self.sock.close()
            raise InterfaceError(f"cannot bind a raw socket to {name}: {exc.strerror}") from None
        with contextlib.suppress(OSError):
            # more frames in flight before send() blocks: fewer stalls at top speed
            self.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 4 << 20)
        self.fd = self.sock.fileno()
        self._sendmmsg = _sendmmsg()

    def _error(self, err: int, stall: _Stall) -> bool:
        """True to retry; False when this frame is refused (too long, or too short for the
        link header); raises otherwise."""
        if err in _RETRY:
            stall.wait()
            return True
        if err in _REFUSED:
            return False
        if err in _GONE:
            raise InterfaceError(f"interface {self.name} went away or down while sending")
        raise InterfaceError(f"sending on {self.name} failed: {os.strerror(err)}")

    def send(self, frame: bytes) -> bool:
        stall = _Stall(self.name)
        while True:
            try:
                self.sock.send(frame)
                return True
            except OSError as exc:
                if not self._error(exc.errno or 0, stall):
                    return False

    def send_many(self, batch: FrameBatch, start: int, count: int) -> SendResult:
        fn = self._sendmmsg
        if fn is None:
            return super().send_many(batch, start, count)
        failed: list[int] = []
        stall = _Stall(self.name)
        i, end = start, start + count
        while i < end:
            n = fn(self.fd, batch.address(i), min(end - i, 1024), 0)
            if n > 0:
                i += n
                stall.progress()
                continue
            if n == 0:  # nothing accepted and no error: wait for room like EAGAIN
                stall.wait()
                continue
            if not self._error(ctypes.get_errno(), stall):
                failed.append(i)  # the first frame of the call was refused: skip it
                i += 1
        return SendResult(count, failed)

    def close(self) -> None:
        self.sock.close()


class ScapySender(Sender):
    """Scapy's layer-2 socket: the fallback where ``AF_PACKET`` is missing."""

    backend = "scapy"

    def __init__(self, name: str) -> None:
        self.name = name
        try:
            self.mtu = interface_mtu(name)
        except InterfaceError:
            self.mtu = 1500
        try:
            import scapy.arch  # noqa: F401 - fills conf.L2socket for this platform
            from scapy.config import conf
        except ImportError:  # pragma: no cover - scapy is a dependency
            raise InterfaceError("neither AF_PACKET nor Scapy is available") from None
        if conf.L2socket is None:  # pragma: no cover - platform without a Scapy L2 socket
            raise InterfaceError("Scapy has no layer-2 socket on this platform")
        try:
            self.sock = conf.L2socket(iface=name)
        except PermissionError:
            raise _privilege_error(name) from None
        except Exception as exc:  # Scapy raises assorted types; the CLI shows one line
            raise InterfaceError(f"Scapy cannot open {name}: {exc}") from None

    def send(self, frame: bytes) -> bool:
        stall = _Stall(self.name)
        while True:
            try:
                self.sock.send(frame)
                return True
            except OSError as exc:
                if exc.errno in _RETRY:
                    stall.wait()
                    continue
                if exc.errno in _REFUSED:
                    return False
                raise InterfaceError(f"sending on {self.name} failed: {exc}") from None

    def close(self) -> None:
        self.sock.close()


def open_sender(name: str, backend: str = "auto") -> Sender:
    """A sender on interface ``name`` after checking it is up; ``backend`` is ``auto``,
    ``packet`` (AF_PACKET) or ``scapy``."""
    check_interface(name)
    if backend == "scapy" or (backend == "auto" and not HAVE_AF_PACKET):
        return ScapySender(name)
    if not HAVE_AF_PACKET:
        raise InterfaceError("AF_PACKET sockets are not available on this system")
    return PacketSender(name)


# -- pacing ---------------------------------------------------------------------------------

SPIN_NS = 150_000  # the last stretch before a deadline is spun, not slept


def lower_timer_slack() -> None:
    """Ask for 1 us timer slack (Linux defaults to 50 us): sleeps then end near their
    deadline and the spin that follows stays short."""
    libc = _load_libc()
    prctl = getattr(libc, "prctl", None) if libc else None
    if prctl is not None:
        with contextlib.suppress(Exception):
            prctl(29, ctypes.c_ulong(1000), 0, 0, 0)  # PR_SET_TIMERSLACK, in ns


class Pacer:
    """Waits for monotonic-clock deadlines (nanoseconds) accurately."""

    def __init__(self, spin_ns: int = SPIN_NS) -> None:
        self.spin_ns = spin_ns
        lower_timer_slack()

    def wait(self, deadline: int, now: int | None = None) -> int:
        """Return the clock reading at (or just after) ``deadline``."""
        clock = time.monotonic_ns
        if now is None:
            now = clock()
        spin = self.spin_ns
        while deadline - now > spin:
            time.sleep((deadline - now - spin) / 1e9)
            now = clock()
        while now < deadline:
            now = clock()
        return now


class TimingStats:
    """Running mean and maximum of |actual - scheduled| send times, in nanoseconds."""

    __slots__ = ("count", "total", "worst")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.worst = 0

    def add(self, error_ns: int, n: int = 1) -> None:
        error_ns = abs(error_ns)
        self.count += n
        self.total += error_ns * n
        if error_ns > self.worst:
            self.worst = error_ns

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


# -- capturing ------------------------------------------------------------------------------


class _BpfProgram(ctypes.Structure):
    _fields_ = [("bf_len", ctypes.c_uint), ("bf_insns", ctypes.c_void_p)]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


Bpf = list[tuple[int, int, int, int]]


def _compile_libpcap(expr: str, snaplen: int) -> Bpf | None:
    """Compile with libpcap through ctypes; None if libpcap cannot be loaded."""
    path = ctypes.util.find_library("pcap")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    lib.pcap_open_dead.restype = ctypes.c_void_p
    lib.pcap_open_dead.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.pcap_compile.argtypes = [ctypes.c_void_p, ctypes.POINTER(_BpfProgram), ctypes.c_char_p,
                                 ctypes.c_int, ctypes.c_uint32]
    lib.pcap_geterr.restype = ctypes.c_char_p
    lib.pcap_geterr.argtypes = [ctypes.c_void_p]
    lib.pcap_freecode.argtypes = [ctypes.POINTER(_BpfProgram)]
    lib.pcap_close.argtypes = [ctypes.c_void_p]
    handle = lib.pcap_open_dead(1, snaplen)  # DLT_EN10MB
    if not handle:
        return None
    prog = _BpfProgram()
    try:
        if lib.pcap_compile(handle, ctypes.byref(prog), expr.encode(), 1, 0xFFFFFFFF) != 0:
            message = (lib.pcap_geterr(handle) or b"syntax error").decode(errors="replace")
            raise FilterError(f"capture filter {expr!r}: {message}")
        insns = ctypes.cast(prog.bf_insns, ctypes.POINTER(_SockFilter))
        out = [(insns[i].code, insns[i].jt, insns[i].jf, insns[i].k) for i in range(prog.bf_len)]
        lib.pcap_freecode(ctypes.byref(prog))
        return out
    finally:
        lib.pcap_close(handle)


def _compile_tcpdump(expr: str, snaplen: int) -> Bpf | None:
    """Compile with ``tcpdump -ddd`` (decimal: a count, then "code jt jf k" lines)."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        return None
    res = subprocess.run([tcpdump, "-ddd", "-y", "EN10MB", "-s", str(snaplen), expr],
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        why = res.stderr.strip().splitlines()
        raise FilterError(f"capture filter {expr!r}: {why[-1] if why else 'rejected'}")
    lines = res.stdout.split("\n")
    n = int(lines[0])
    return [tuple(int(x) for x in line.split()) for line in lines[1:n + 1]]  # type: ignore


def compile_filter(expr: str, snaplen: int = 262144) -> Bpf | None:
    """Classic BPF for a tcpdump-syntax expression; None when no compiler is at hand."""
    prog = _compile_libpcap(expr, snaplen)
    if prog is None:
        prog = _compile_tcpdump(expr, snaplen)
    return prog


def attach_filter(sock: socket.socket, prog: Bpf) -> None:
    insns = (_SockFilter * len(prog))(*(_SockFilter(*i) for i in prog))
    fprog = _SockFprog(len(prog), ctypes.addressof(insns))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(fprog))


# "udp dst port 4791 or arp" (IPv4 unfragmented or IPv6 without extension headers), as
# labelled classic BPF: (label, code, k, jump-if-true label, jump-if-false label).
_LD_H_ABS, _LD_B_ABS, _LD_H_IND, _LDX_B_MSH = 0x28, 0x30, 0x48, 0xB1
_JEQ_K, _JSET_K, _RET_K = 0x15, 0x45, 0x06
Labelled = list[tuple[str | None, int, int, str | None, str | None]]
_ROCE_OR_ARP: Labelled = [
    (None, _LD_H_ABS, 12, None, None),              # A = ethertype
    (None, _JEQ_K, ETH_P_ARP, "accept", None),
    (None, _JEQ_K, ETH_P_IP, None, "ipv6"),
    (None, _LD_B_ABS, 23, None, None),              # IPv4 protocol
    (None, _JEQ_K, socket.IPPROTO_UDP, None, "reject"),
    (None, _LD_H_ABS, 20, None, None),              # flags + fragment offset
    (None, _JSET_K, 0x1FFF, "reject", None),        # a later fragment has no UDP header
    (None, _LDX_B_MSH, 14, None, None),             # X = IPv4 header length
    (None, _LD_H_IND, 16, None, None),              # UDP destination port
    (None, _JEQ_K, ROCE_PORT, "accept", "reject"),
    ("ipv6", _JEQ_K, ETH_P_IPV6, None, "reject"),  # A still holds the ethertype
    (None, _LD_B_ABS, 20, None, None),              # IPv6 next header
    (None, _JEQ_K, socket.IPPROTO_UDP, None, "reject"),
    (None, _LD_H_ABS, 56, None, None),
    (None, _JEQ_K, ROCE_PORT, "accept", "reject"),
    ("accept", _RET_K, 0x40000, None, None),
    ("reject", _RET_K, 0, None, None),
]


def assemble(program: Labelled) -> Bpf:
    """Classic BPF (code, jt, jf, k) for a labelled program; jumps go forward only."""
    where = {label: i for i, (label, *_rest) in enumerate(program) if label}
    out: Bpf = []
    for i, (_label, code, k, jt, jf) in enumerate(program):
        t = where[jt] - i - 1 if jt else 0
        f = where[jf] - i - 1 if jf else 0
        if not (0 <= t < 256 and 0 <= f < 256):
            raise ValueError(f"BPF jump out of range at instruction {i}")
        out.append((code, t, f, k))
    return out


ROCE_OR_ARP: Bpf = assemble(_ROCE_OR_ARP)
ARP_ONLY: Bpf = assemble([  # "arp": ARP frames only (resolve_mac's socket)
    (None, _LD_H_ABS, 12, None, None),              # A = ethertype
    (None, _JEQ_K, ETH_P_ARP, "accept", "reject"),
    ("accept", _RET_K, 0x40000, None, None),
    ("reject", _RET_K, 0, None, None),
])


def grow_buffers(sock: socket.socket, rcvbuf: int | None, sndbuf: int | None = None) -> None:
    """Deep socket queues: a burst waits there while Python catches up.  Root can go past
    net.core.rmem_max / wmem_max with the FORCE variants; others get what the cap allows."""
    for force, plain, size in ((SO_RCVBUFFORCE, socket.SO_RCVBUF, rcvbuf),
                               (SO_SNDBUFFORCE, socket.SO_SNDBUF, sndbuf)):
        if size:
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, size)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, size)


def packet_socket(name: str, prog: Bpf | None, *, promiscuous: bool = False,
                  rcvbuf: int = 8 << 20, sndbuf: int | None = None, metadata: bool = False,
                  ignore_outgoing: bool = False, require_up: bool = True) -> socket.socket:
    """An AF_PACKET socket bound to ``name`` that receives the frames ``prog`` accepts.

    Created with protocol 0 (it receives nothing) and bound to ETH_P_ALL only after the
    filter is on, so no unfiltered frame slips in between.  ``metadata`` asks for kernel
    timestamps and ``PACKET_AUXDATA`` (VLAN tags; see :func:`receive`); ``ignore_outgoing``
    keeps this host's own frames out where the kernel can (4.20+); ``require_up`` checks
    the interface is up with a carrier, otherwise only that it exists."""
    if require_up:
        check_interface(name)
    else:
        interface_flags(name)  # InterfaceError for a missing interface
    if not HAVE_AF_PACKET:
        raise InterfaceError("AF_PACKET sockets are not available on this system")
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    except PermissionError:
        raise _privilege_error(name) from None
    try:
        if prog is not None:
            attach_filter(sock, prog)
        if metadata:
            sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            sock.setsockopt(socket.SOL_SOCKET, SCM_TIMESTAMPNS, 1)
        if ignore_outgoing:
            with contextlib.suppress(OSError):  # older kernels: callers check the type
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        grow_buffers(sock, rcvbuf, sndbuf)
        sock.bind((name, ETH_P_ALL))
        if promiscuous:
            index = socket.if_nametoindex(name)
            mreq = struct.pack("iHH8s", index, PACKET_MR_PROMISC, 0, b"")
            sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ENODEV, errno.ENXIO):
            raise InterfaceError(f"no such interface {name!r}") from None
        raise InterfaceError(f"cannot open a packet socket on {name}: "
                             f"{exc.strerror or exc}") from None
    return sock


def open_capture_socket(name: str, prog: Bpf | None, promiscuous: bool = True,
                        rcvbuf: int = 32 << 20) -> socket.socket:
    """An AF_PACKET socket that receives the frames of ``name`` accepted by ``prog``, with
    kernel timestamps and VLAN metadata (what :func:`receive` reads)."""
    return packet_socket(name, prog, promiscuous=promiscuous, rcvbuf=rcvbuf, metadata=True)


def capture_stats(sock: socket.socket) -> tuple[int, int]:
    """(frames received, frames dropped) since the last call (PACKET_STATISTICS)."""
    try:
        return struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    except OSError:
        return 0, 0


class Captured(NamedTuple):
    data: bytes
    ts_ns: int
    origlen: int
    outgoing: bool


def receive(sock: socket.socket, snaplen: int, deadline: float | None,
            on_idle: Callable[[], None] = lambda: None) -> Iterator[Captured]:
    """Frames from a capture socket until ``deadline`` (``time.monotonic()``; None: no end).

    ``on_idle`` runs whenever the queue is empty, before waiting: the place to flush output,
    so that a burst is written in one go and a trickle line by line.
    """
    buf = bytearray(snaplen)
    view = memoryview(buf)
    sock.setblocking(False)
    recv = sock.recvmsg_into
    vlan = struct.Struct("!HH").pack
    aux_unpack, ts_unpack = _AUXDATA.unpack_from, _TIMESPEC.unpack_from
    while True:
        try:
            n, anc, _flags, addr = recv([view], _ANC_SIZE)
        except BlockingIOError:
            on_idle()
            if deadline is None:
                select.select([sock], [], [])
            else:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([sock], [], [], left)[0]:
                    return
            continue
        data = bytes(view[:n])
        ts = 0
        origlen = n
        for level, kind, value in anc:
            if level == SOL_PACKET and kind == PACKET_AUXDATA:
                status, tp_len, _snap, _mac, _net, tci, tpid = aux_unpack(value)
                origlen = tp_len
                if status & TP_STATUS_VLAN_VALID or tci:
                    # the kernel moved the 802.1Q tag out of the frame: put it back
                    if not status & TP_STATUS_VLAN_TPID_VALID:
                        tpid = 0x8100
                    data = data[:12] + vlan(tpid, tci) + data[12:]
                    origlen += 4
            elif level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
                sec, nsec = ts_unpack(value)
                ts = sec * 1_000_000_000 + nsec
        if not ts:
            ts = time.time_ns()
        yield Captured(data, ts, origlen, addr[2] == PACKET_OUTGOING)
        if deadline is not None and time.monotonic() >= deadline:
            return


# -- neighbours: ARP, the kernel's table, resolution ----------------------------------------

BROADCAST = "ff:ff:ff:ff:ff:ff"
ZERO_MAC = "00:00:00:00:00:00"
ARP_REQUEST, ARP_REPLY = 1, 2
_ARP = struct.Struct("!HHBBH6s4s6s4s")  # RFC 826 for Ethernet and IPv4
_ETH_HEADER = 14
ARP_MIN_FRAME = 60  # the Ethernet minimum the frame is padded to


def arp_frame(op: int, smac: str, sip: str, tmac: str, tip: str, dst: str | None = None) -> bytes:
    """An Ethernet ARP request (op 1) or reply (op 2), padded to the 60-byte minimum."""
    eth = mac_bytes(dst or (BROADCAST if op == ARP_REQUEST else tmac)) + mac_bytes(smac)
    body = _ARP.pack(1, ETH_P_IP, 6, 4, op, mac_bytes(smac), socket.inet_aton(sip),
                     mac_bytes(tmac), socket.inet_aton(tip))
    return (eth + struct.pack("!H", ETH_P_ARP) + body).ljust(ARP_MIN_FRAME, b"\0")


def parse_arp(frame: bytes) -> tuple[int, str, str, str, str] | None:
    """(op, sender MAC, sender IP, target MAC, target IP) of an Ethernet/IPv4 ARP frame."""
    if len(frame) < _ETH_HEADER + _ARP.size or \
            int.from_bytes(frame[12:14], "big") != ETH_P_ARP:
        return None
    htype, ptype, hlen, plen, op, sha, spa, tha, tpa = _ARP.unpack_from(frame, _ETH_HEADER)
    if htype != 1 or ptype != ETH_P_IP or hlen != 6 or plen != 4:
        return None
    return op, sha.hex(":"), socket.inet_ntoa(spa), tha.hex(":"), socket.inet_ntoa(tpa)


# netlink (rtnetlink(7)): a dump of the neighbour table, one address family at a time
_NLMSG = struct.Struct("=IHHII")      # struct nlmsghdr
_NDMSG = struct.Struct("=BBHiHBB")    # struct ndmsg
_RTA = struct.Struct("=HH")           # struct rtattr
_RTM_NEWNEIGH, _RTM_GETNEIGH = 28, 30
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NDA_DST, _NDA_LLADDR = 1, 2
# entries whose MAC is known: reachable, stale (still right, not confirmed lately), delay,
# probe, permanent (``ip neigh add ... nud permanent``); not incomplete, failed or noarp
_NUD_KNOWN = 0x02 | 0x04 | 0x08 | 0x10 | 0x80


def _align4(n: int) -> int:
    return (n + 3) & ~3


def neighbour_mac(name: str, ip: str) -> str | None:
    """The MAC the kernel's neighbour table holds for ``ip`` on interface ``name`` (IPv4
    or IPv6; netlink, so it is this network namespace's table), None when it has none."""
    addr = ipaddress.ip_address(ip)
    family = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
    try:
        index = socket.if_nametoindex(name)
    except OSError:
        raise InterfaceError(f"no such interface {name!r}") from None
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    except (OSError, AttributeError):  # no netlink here: no table to read
        return None
    with sock:
        body = _NDMSG.pack(family, 0, 0, 0, 0, 0, 0)
        sock.send(_NLMSG.pack(_NLMSG.size + len(body), _RTM_GETNEIGH,
                              _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + body)
        found = None
        while True:
            data = sock.recv(1 << 16)
            off = 0
            while off + _NLMSG.size <= len(data):
                length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, off)
                if kind in (_NLMSG_DONE, _NLMSG_ERROR) or length < _NLMSG.size:
                    return found
                if kind == _RTM_NEWNEIGH:
                    entry = _neighbour(data[off + _NLMSG.size:off + length], index, family)
                    if entry is not None and ipaddress.ip_address(entry[0]) == addr:
                        found = entry[1]
                off += _align4(length)
            if not data:
                return found


def _neighbour(msg: bytes, index: int, family: int) -> tuple[bytes, str] | None:
    """(address, MAC) of one RTM_NEWNEIGH on interface ``index`` whose MAC is known."""
    if len(msg) < _NDMSG.size:
        return None
    fam, _p1, _p2, ifindex, state, _flags, _type = _NDMSG.unpack_from(msg)
    if fam != family or ifindex != index or not state & _NUD_KNOWN:
        return None
    dst = mac = None
    off = _NDMSG.size
    while off + _RTA.size <= len(msg):
        rlen, rtype = _RTA.unpack_from(msg, off)
        if rlen < _RTA.size:
            break
        value = msg[off + _RTA.size:off + rlen]
        if rtype == _NDA_DST:
            dst = value
        elif rtype == _NDA_LLADDR and len(value) == 6:
            mac = value.hex(":")
        off += _align4(rlen)
    return (dst, mac) if dst is not None and mac is not None else None


def _fixed_mac(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """The MAC an address maps to without asking anyone: broadcast, IPv4 multicast
    (RFC 1112: 01:00:5e + 23 bits), IPv6 multicast (RFC 2464: 33:33 + 32 bits), and a
    link-local IPv6 address or RoCEv1 GID built from a MAC (EUI-64: ff:fe in the middle,
    the universal/local bit flipped; IBA A16, RFC 4291 appendix A)."""
    if addr.version == 4:
        if addr == ipaddress.IPv4Address("255.255.255.255"):
            return BROADCAST
        if addr.is_multicast:
            return (bytes.fromhex("01005e") + (int(addr) & 0x7FFFFF).to_bytes(3, "big")
                    ).hex(":")
        return None
    raw = addr.packed
    if addr.is_multicast:
        return (b"\x33\x33" + raw[12:]).hex(":")
    if addr.is_link_local and raw[11:13] == b"\xff\xfe":
        return bytes([raw[8] ^ 0x02]).hex() + ":" + (raw[9:11] + raw[13:16]).hex(":")
    return None


def resolve_mac(name: str, ip: str, timeout: float = 2.0, interval: float = 0.25) -> str:
    """The MAC that frames to ``ip`` go to on interface ``name``: a fixed mapping
    (broadcast, multicast, an EUI-64 link-local address or GID), the interface's own MAC on
    a loopback interface, the kernel's neighbour table, or, for IPv4, ARP requests of our
    own (every ``interval`` s for ``timeout`` s; from the interface's IPv4 address, or
    0.0.0.0 when it has none).  InterfaceError naming the address when none answers."""
    addr = ipaddress.ip_address(ip)
    fixed = _fixed_mac(addr)
    if fixed is not None:
        return fixed
    if interface_flags(name) & IFF_LOOPBACK:
        return interface_mac(name)
    known = neighbour_mac(name, ip)
    if known is not None:
        return known
    if addr.version == 6:
        raise InterfaceError(f"no neighbour entry for {ip} on {name} (IPv6 neighbours are "
                             "read from the kernel's table, not discovered: reach it once, "
                             "e.g. ping, or give the MAC)")
    mine = interface_mac(name)
    request = arp_frame(ARP_REQUEST, mine, interface_ipv4(name) or "0.0.0.0", ZERO_MAC, ip)
    with packet_socket(name, ARP_ONLY, rcvbuf=1 << 16, ignore_outgoing=True) as sock:
        end = time.monotonic() + timeout
        while True:
            try:
                sock.send(request)
            except OSError as exc:
                raise InterfaceError(f"cannot send an ARP request on {name}: "
                                     f"{exc.strerror or exc}") from None
            until = min(end, time.monotonic() + interval)
            for got in receive(sock, 128, until):
                a = parse_arp(got.data)
                if a is not None and not got.outgoing and a[0] == ARP_REPLY and a[2] == ip:
                    return a[1]
                if time.monotonic() >= until:
                    break
            if time.monotonic() >= end:
                raise InterfaceError(f"no ARP reply from {ip} on {name} in {timeout:g} s "
                                     "(is it the peer's address? or give the MAC)")


# -- signals --------------------------------------------------------------------------------


__all__ = ["ARP_ONLY", "ARP_REPLY", "ARP_REQUEST", "BROADCAST", "ROCE_OR_ARP", "ZERO_MAC",
           "Bpf", "Captured", "FilterError", "FrameBatch", "InterfaceError", "Pacer",
           "PacketSender", "ScapySender", "SendResult", "Sender", "TimingStats", "arp_frame",
           "assemble", "attach_filter", "capture_stats", "check_interface", "compile_filter",
           "grow_buffers", "interface_flags", "interface_hatype", "interface_ipv4",
           "interface_mac", "interface_mtu", "neighbour_mac", "open_capture_socket",
           "open_sender", "packet_socket", "parse_arp", "receive", "resolve_mac"]
