"""Out-of-band connection setup, as perftest does it: a TCP socket carrying JSON lines.

Before two RoCE endpoints can talk each must know the other's QPN, first PSN, address (IP/GID
and MAC), and for RDMA the rkey, virtual address and size of the memory it may touch, plus
the path MTU and the parameters of the run.  ``Listener`` waits for one peer, ``connect``
reaches one (retrying while the listener is not up yet); both give a ``Channel`` whose
messages are JSON objects with a ``type``, one per line, each as ``roce.emu.real.messages``
declares it: ``send`` builds through the schema, and every line received is checked against
it before anyone sees it.

The peer is untrusted.  A line is read up to ``MAX_LINE`` bytes and no further (a longer one
is refused, not buffered), then decoded and checked whole: a ``PeerMessageError`` names the
message and the field that broke the protocol.  An ``error`` message from the peer becomes an
``OOBError`` quoting its text with the control characters escaped.  Every wait has a timeout,
and every other failure raises ``OOBError`` with a sentence that names the peer and what was
expected: a timeout, a refused connection, a peer that went away, a message of the wrong type.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import select
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from roce.emu import defaults
from roce.emu.real import messages as schema
from roce.emu.real.messages import MAX_LINE, PROTOCOL, printable
from roce.errors import OOBError, PeerMessageError
from roce.options import MAX_SECONDS

DEFAULT_PORT = defaults.OOB_PORT  # perftest's default port


@dataclass
class QPInfo:
    """What a peer must know about one of our queue pairs and the memory behind it: the
    fields of ``schema.QP``, which checks a peer's."""

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


def gid_of(ip: str) -> str:
    """The RoCEv2 GID of an address (IPv4-mapped IPv6 for IPv4), in its normal form."""
    return str(ipaddress.IPv6Address(ip if ":" in ip else f"::ffff:{ip}"))


class Channel:
    """One TCP connection carrying the protocol's messages, one JSON object per line."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self._buf = b""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, mtype: str, **fields: Any) -> None:
        """Send a message of type ``mtype`` built from ``fields`` (``schema.build``)."""
        self.send_message(schema.build(mtype, **fields))

    def send_message(self, msg: dict[str, Any]) -> None:
        data = encode(msg)
        if len(data) > MAX_LINE:
            raise OOBError(f"our {msg['type']} would be {len(data)} bytes, more than the "
                           f"out-of-band protocol's {MAX_LINE}")
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise OOBError(f"out-of-band send to {self.peer} failed: {e.strerror or e}") from None

    def error(self, message: str) -> None:
        """Tell the peer why we give up (best effort), so it fails with our reason."""
        try:
            self.send("error", message=message[:schema.MAX_TEXT])
        except (OOBError, ValueError):
            pass

    def _line(self) -> bytes | None:
        i = self._buf.find(b"\n", 0, MAX_LINE + 1)
        if i < 0:
            if len(self._buf) > MAX_LINE:
                raise PeerMessageError("message", "", f"a line from {self.peer} longer "
                                       f"than {MAX_LINE} bytes")
            return None
        line, self._buf = self._buf[:i], self._buf[i + 1:]
        return line

    def _decode(self, line: bytes) -> dict[str, Any]:
        msg = schema.decode(line)
        if msg["type"] == "error":
            raise OOBError(f"peer {self.peer} reported: {printable(msg['message'])}")
        return msg

    def recv(self, timeout: float | None = 30.0, expect: str | None = None) -> dict[str, Any]:
        """The next message (waiting up to ``timeout`` s), checked; ``expect`` its type."""
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
            # never more than the rest of one line: a peer cannot make us hold more
            chunk = self.sock.recv(max(1, min(65536, MAX_LINE + 1 - len(self._buf))))
        except OSError as e:
            raise OOBError(f"out-of-band connection to {self.peer} failed: "
                           f"{e.strerror or e}") from None
        if not chunk:
            raise OOBError(f"peer {self.peer} closed the out-of-band connection")
        self._buf += chunk

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encode(msg: dict[str, Any]) -> bytes:
    """A message as its line: compact JSON, ASCII only, and the newline."""
    return json.dumps(msg, separators=(",", ":"), allow_nan=False).encode() + b"\n"


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
        if timeout is not None:
            timeout = min(timeout, MAX_SECONDS)  # what select's clock holds
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


__all__ = ["Channel", "DEFAULT_PORT", "Listener", "OOBError", "PROTOCOL", "QPInfo", "connect",
           "encode", "gid_of"]
