"""Out-of-band connection setup, as perftest does it: a TCP socket carrying JSON lines.

Before two RoCE endpoints can talk each must know the other's QPN, first PSN, address (IP/GID
and MAC), and for RDMA the rkey, virtual address and size of the memory it may touch, plus
the path MTU and the parameters of the run.  ``Listener`` waits for one peer, ``connect``
reaches one (retrying while the listener is not up yet); both give a ``Channel`` whose
messages are JSON objects with a ``type``, one per line.

Every wait has a timeout, and every failure raises ``OOBError`` with a sentence that names
the peer and what was expected: a timeout, a refused connection, a peer that went away, a
line that is not JSON, a message of the wrong type, or an ``error`` message the peer sent.
"""

from __future__ import annotations

import errno
import json
import select
import socket
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from roce.errors import OOBError

DEFAULT_PORT = 18515  # perftest's default port
MAX_LINE = 1 << 20
# 2: the hello carries the recovery mode and loss rule (a version-1 listener would drop them
# and run go-back-N against a selective-repeat connector: refused instead)
PROTOCOL = "roce-emulate/2"


@dataclass
class QPInfo:
    """What a peer must know about one of our queue pairs and the memory behind it."""

    qpn: int
    psn: int
    ip: str
    gid: str
    mac: str
    rkey: int = 0
    va: int = 0
    size: int = 0
    mtu: int = 4096
    qp_type: str = "rc"
    qkey: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QPInfo:
        names = {f.name for f in fields(cls)}
        missing = {"qpn", "psn", "ip", "gid", "mac"} - set(d)
        if missing:
            raise OOBError(f"peer's QP description lacks {', '.join(sorted(missing))}")
        try:
            return cls(**{k: v for k, v in d.items() if k in names})
        except TypeError as e:
            raise OOBError(f"bad QP description from peer: {e}") from None


def gid_of(ip: str) -> str:
    """The RoCEv2 GID of an address: IPv4-mapped IPv6 for IPv4."""
    return ip if ":" in ip else f"::ffff:{ip}"


class Channel:
    """One TCP connection carrying JSON objects, one per line."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self._buf = b""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise OOBError(f"out-of-band send to {self.peer} failed: {e.strerror or e}") from None

    def error(self, message: str) -> None:
        """Tell the peer why we give up (best effort), so it fails with our reason."""
        try:
            self.send({"type": "error", "message": message})
        except OOBError:
            pass

    def _line(self) -> bytes | None:
        i = self._buf.find(b"\n")
        if i < 0:
            if len(self._buf) > MAX_LINE:
                raise OOBError(f"out-of-band line from {self.peer} longer than {MAX_LINE} bytes")
            return None
        line, self._buf = self._buf[:i], self._buf[i + 1:]
        return line

    def _decode(self, line: bytes) -> dict[str, Any]:
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            raise OOBError(f"out-of-band message from {self.peer} is not JSON: "
                           f"{line[:60]!r}") from None
        if not isinstance(obj, dict) or "type" not in obj:
            raise OOBError(f"out-of-band message from {self.peer} has no type: {line[:60]!r}")
        if obj["type"] == "error":
            raise OOBError(f"peer {self.peer} reported: {obj.get('message', 'an error')}")
        return obj

    def recv(self, timeout: float | None = 30.0, expect: str | None = None) -> dict[str, Any]:
        """The next message (waiting up to ``timeout`` s); ``expect`` checks its type."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            line = self._line()
            if line is not None:
                obj = self._decode(line)
                if expect is not None and obj["type"] != expect:
                    raise OOBError(f"expected a {expect!r} message from {self.peer}, got "
                                   f"{obj['type']!r}")
                return obj
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                what = f"a {expect!r} message" if expect else "a message"
                raise OOBError(f"timed out after {timeout:g} s waiting for {what} from "
                               f"{self.peer}")
            ready, _, _ = select.select([self.sock], [], [], left)
            if ready:
                self._fill()

    def buffered(self) -> bool:
        """A whole message is already here (``poll`` returns it without reading)."""
        return b"\n" in self._buf

    def poll(self) -> dict[str, Any] | None:
        """A message if one is complete (reading what arrived), else None; never waits."""
        line = self._line()
        if line is None:
            ready, _, _ = select.select([self.sock], [], [], 0)
            if ready:
                self._fill()
            line = self._line()
        return None if line is None else self._decode(line)

    def _fill(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except OSError as e:
            raise OOBError(f"out-of-band connection to {self.peer} failed: "
                           f"{e.strerror or e}") from None
        if not chunk:
            raise OOBError(f"peer {self.peer} closed the out-of-band connection")
        self._buf += chunk

    def exchange(self, mine: dict[str, Any], expect: str,
                 timeout: float | None = 30.0) -> dict[str, Any]:
        """Send ``mine``, return the peer's message of type ``expect``."""
        self.send(mine)
        return self.recv(timeout, expect)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _addrinfo(host: str, port: int) -> tuple[int, tuple]:
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise OOBError(f"cannot resolve {host!r}: {e.strerror}") from None
    family, _, _, _, addr = info[0]
    return family, addr


class Listener:
    """A TCP listening socket for the out-of-band exchange (``host`` "" = every address)."""

    def __init__(self, host: str = "", port: int = DEFAULT_PORT) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as e:
            self.sock.close()
            raise OOBError(f"cannot listen on {host or '*'}:{port}: {e.strerror}") from None
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.host = host

    def accept(self, timeout: float | None = 60.0) -> Channel:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            raise OOBError(f"no peer connected to port {self.port} within {timeout:g} s")
        conn, addr = self.sock.accept()
        return Channel(conn, f"{addr[0]}:{addr[1]}")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(host: str, port: int = DEFAULT_PORT, timeout: float = 30.0,
            retry_interval: float = 0.1) -> Channel:
    """Connect to a listener, retrying refused connections until ``timeout`` (the listener
    may be starting in parallel, as with perftest's client and server)."""
    family, addr = _addrinfo(host, port)
    end = time.monotonic() + timeout
    last = ""
    while True:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(max(0.1, end - time.monotonic()))
        try:
            s.connect(addr)
            s.settimeout(None)
            return Channel(s, f"{host}:{port}")
        except OSError as e:
            s.close()
            last = e.strerror or str(e)
            if e.errno not in (errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH,
                               errno.ENETUNREACH, errno.ETIMEDOUT, None) \
                    and not isinstance(e, TimeoutError):
                raise OOBError(f"cannot connect to {host}:{port}: {last}") from None
        if time.monotonic() + retry_interval >= end:
            raise OOBError(f"cannot connect to {host}:{port} within {timeout:g} s: {last}")
        time.sleep(retry_interval)


def hello(scenario: dict[str, Any], qps: list[QPInfo], **extra: Any) -> dict[str, Any]:
    """The connector's first message: who it is, the run's parameters, its QPs."""
    return {"type": "hello", "protocol": PROTOCOL, "scenario": scenario,
            "qps": [q.to_dict() for q in qps], **extra}


def check_hello(msg: dict[str, Any]) -> None:
    if msg.get("protocol") != PROTOCOL:
        raise OOBError(f"peer speaks {msg.get('protocol')!r}, not {PROTOCOL!r}")
    if not isinstance(msg.get("scenario"), dict) or not isinstance(msg.get("qps"), list):
        raise OOBError("peer's hello lacks the scenario or the QP list")


__all__ = ["Channel", "DEFAULT_PORT", "Listener", "OOBError", "PROTOCOL", "QPInfo",
           "check_hello", "connect", "gid_of", "hello"]
