"""The wire harness: mutated RC requests to a real device under test over an AF_PACKET
socket (``roce.iface``), paced, with liveness probes; everything sent and received can
go to a pcap.  Its failures are not replayed here: the saved pcap goes to the target again
with ``roce replay``.
"""

from __future__ import annotations

import random
import select
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roce import iface
from roce.errors import InputError
from roce.headers import NAK_PSN_SEQUENCE_ERROR, SIZE_OF
from roce.packet import craft
from roce.pcapio import PcapWriter
from roce.psn import PSN_MASK
from roce.testing.fuzz.answers import describe_answer
from roce.testing.fuzz.frame_fields import eth_dst, eth_src, mac_bytes
from roce.testing.fuzz.results import Failure, Summary
from roce.testing.mutate import Mutator

NAME = "wire"
SNAPLEN = 65536


class EnvironmentProblem(InputError):
    """What stops a wire run before it starts: no interface, no privilege, no answer to ARP
    (exit status 2)."""


@dataclass
class WireConfig:
    """The device under test and how to fuzz it (``roce fuzz wire``'s options)."""

    interface: str
    target: str  # its IPv4 address
    qpn: int  # its RC QP
    seed: int = 0
    rkey: int | None = None  # an rkey of its memory (probes READ it)
    va: int = 0  # the address of that MR
    size: int = 4096  # its length
    target_mac: str | None = None  # skip ARP
    psn: int | None = None  # its expected PSN if known (else learnt from its answers)
    pps: float = 1000.0  # frames per second
    probe_every: int = 100  # a liveness probe every this many frames (0: none)
    probe_timeout: float = 0.5  # seconds
    pcap: str | None = None  # record every frame sent and received


class _Link:
    """Whole frames out of and into one interface: a sender and a capture socket."""

    def __init__(self, name: str) -> None:
        self.sender = iface.open_sender(name, "packet")
        try:
            self.sock = iface.open_capture_socket(name, None, promiscuous=False)
        except BaseException:
            self.sender.close()
            raise

    def send(self, frame: bytes) -> bool:
        """False when the interface refuses the frame (longer than its MTU)."""
        return self.sender.send(frame)

    def receive(self, timeout: float) -> list[bytes]:
        """Frames that arrived (not our own outgoing ones), waiting up to ``timeout`` for
        the first."""
        if timeout > 0:
            select.select([self.sock], [], [], timeout)
        out = []
        while True:  # iface.receive stops after one frame once its deadline is past
            got = list(iface.receive(self.sock, SNAPLEN, time.monotonic()))
            if not got:
                return out
            out.extend(c.data for c in got if not c.outgoing)

    def close(self) -> None:
        self.sender.close()
        self.sock.close()


def _resolve(interface: str, target: str) -> bytes:
    """The target's MAC: the kernel's neighbour table, else ARP (``roce.iface``)."""
    try:
        return mac_bytes(iface.resolve_mac(interface, target))
    except iface.InterfaceError as exc:
        raise EnvironmentProblem(f"{exc} (give --target-mac)") from None


class WireFuzzer:
    """Mutated RC requests to a device under test, with liveness probes.

    Frames go out paced at ``pps``; every ``probe_every`` frames a valid probe (an RDMA READ
    of the target's MR when its rkey is known, else a SEND) is sent at the expected PSN
    learnt from the target's answers (an ACK for PSN p means p+1 is expected next; a
    PSN-sequence NAK carries the expected PSN) and must be answered within
    ``probe_timeout``.  When it is not (twice), the run stops with a ``liveness`` failure
    listing the last frames sent.  Everything sent and received can be recorded to a pcap.
    """

    name = NAME

    def __init__(self, config: WireConfig) -> None:
        self.config = config
        self.rng = random.Random(f"wire:{config.seed}")
        self.mutator = Mutator(self.rng)
        self.summary = Summary(self.name, config.seed)
        self.link = _Link(config.interface)
        try:
            self.mac = mac_bytes(iface.interface_mac(config.interface))
            ip = iface.interface_ipv4(config.interface)
            if ip is None:
                raise EnvironmentProblem(f"interface {config.interface!r} has no IPv4 address")
            self.ip = ip
            if config.target_mac:
                self.tmac = mac_bytes(config.target_mac)
            else:
                self.tmac = _resolve(config.interface, config.target)
        except BaseException:
            self.link.close()
            raise
        self.epsn = config.psn if config.psn is not None else 0
        self.sent: deque[bytes] = deque(maxlen=16)
        self.writer = PcapWriter(config.pcap) if config.pcap else None

    def _craft(self, ident: str, psn: int, payload: bytes = b"", **fields: Any) -> bytes:
        a = self.config
        return craft(ident, payload, dmac=self.tmac.hex(":"), smac=self.mac.hex(":"),
                     src=self.ip, dst=a.target, dqpn=a.qpn, psn=psn & PSN_MASK, ackreq=True,
                     **fields).to_bytes()

    def _base(self) -> bytes:
        """A valid-looking request near the expected PSN, for the mutator."""
        rng, a = self.rng, self.config
        psn = self.epsn + rng.choice((0, 0, 1, -1, rng.randint(-1000, 1000)))
        rkey = a.rkey if a.rkey is not None and rng.random() < 0.8 else rng.getrandbits(32)
        n = rng.randint(0, min(a.size, 256))
        va = a.va + rng.randrange(max(a.size - n, 1))
        kind = rng.choice(("send", "write", "read", "atomic"))
        if kind == "send":
            return self._craft("RC_SEND_ONLY", psn, rng.randbytes(n))
        if kind == "write":
            return self._craft("RC_RDMA_WRITE_ONLY", psn, rng.randbytes(n), va=va, rkey=rkey,
                               dmalen=n)
        if kind == "read":
            return self._craft("RC_RDMA_READ_REQUEST", psn, va=va, rkey=rkey, dmalen=n)
        return self._craft(rng.choice(("RC_FETCH_ADD", "RC_COMPARE_SWAP")), psn,
                           va=va & ~7, rkey=rkey, swap=rng.getrandbits(64), compare=0)

    def _record(self, frame: bytes) -> None:
        if self.writer is not None:
            self.writer.write(frame, ts_ns=time.time_ns())

    def _send(self, frame: bytes) -> bool:
        if len(frame) < SIZE_OF["eth"]:
            self.summary.counts["not sent (shorter than Ethernet)"] += 1
            return False
        if not self.link.send(frame):
            self.summary.counts["not sent (longer than the interface MTU)"] += 1
            return False
        self.sent.append(frame)
        self._record(frame)
        return True

    def _answers(self, timeout: float) -> list[tuple]:
        """Answers from the target (recorded, and the expected PSN learnt from them)."""
        out = []
        for f in self.link.receive(timeout):
            if eth_src(f) != self.tmac or eth_dst(f) != self.mac:
                continue
            self._record(f)
            d = describe_answer(f)
            if d[0] == "malformed":
                continue
            self.summary.counts["answers " + d[0]] += 1
            if d[0] == "ack":
                self.epsn = (d[1] + 1) & PSN_MASK
            elif d[0] == "nak":
                self.summary.counts[f"answers nak code {d[1]}"] += 1
                if d[1] == NAK_PSN_SEQUENCE_ERROR:
                    self.epsn = d[2]  # the PSN it expects
            out.append(d)
        return out

    def _probe(self) -> bool:
        a = self.config
        for _attempt in range(3):
            psn = self.epsn
            if a.rkey is not None:
                frame = self._craft("RC_RDMA_READ_REQUEST", psn, va=a.va, rkey=a.rkey,
                                    dmalen=min(a.size, 64))
            else:
                frame = self._craft("RC_SEND_ONLY", psn, b"roce fuzz probe!")
            self.link.send(frame)
            self._record(frame)
            end = time.monotonic() + a.probe_timeout
            while time.monotonic() < end:
                for d in self._answers(min(0.05, max(end - time.monotonic(), 0))):
                    if d[0] in ("ack", "read", "rnr") and d[1] == psn or d[0] == "nak":
                        if d[0] == "nak" and d[1] == NAK_PSN_SEQUENCE_ERROR and d[2] != psn:
                            break  # out of sequence: try again at the PSN it named
                        self.summary.counts["probes answered"] += 1
                        if d[0] == "read":
                            # at most 64 bytes: one response at any path MTU (256 or more)
                            self.epsn = (psn + 1) & PSN_MASK
                        return True
                else:
                    continue
                break
        return False

    def run(self, count: int | None, time_limit: float | None,
            progress: Callable[[Summary], None] | None = None) -> Summary:
        a = self.config
        start = time.monotonic()
        deadline = None if time_limit is None else start + time_limit
        interval = 1.0 / a.pps
        next_at = time.monotonic()
        s = self.summary
        try:
            if a.probe_every and not self._probe():
                s.add_failure(Failure(self.name, "liveness", f"{a.target} QP 0x{a.qpn:x} does "
                                      "not answer a valid probe before fuzzing",
                                      [], context={"seed": a.seed, "sent": 0}))
                return s
            while (count is None or s.inputs < count) and (
                    deadline is None or time.monotonic() < deadline):
                m = self.mutator.mutate(self._base())
                wait = next_at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                next_at = max(next_at + interval, time.monotonic() - 1.0)
                if not self._send(m.frame):
                    continue
                s.inputs += 1
                s.counts["sent " + m.ops[0]] += 1
                self._answers(0)
                if a.probe_every and s.inputs % a.probe_every == 0:
                    if not self._probe():
                        s.add_failure(Failure(
                            self.name, "liveness",
                            f"{a.target} QP 0x{a.qpn:x} stopped answering after {s.inputs} "
                            f"frames; the last {len(self.sent)} sent are attached",
                            list(self.sent), context={"seed": a.seed, "sent": s.inputs}))
                        break
                if progress is not None and s.inputs % 64 == 0:
                    progress(s)
            self._answers(0.2)
        finally:
            s.elapsed = time.monotonic() - start
            self.link.close()
            if self.writer is not None:
                self.writer.close()
        return s


def fuzz_wire(config: WireConfig, count: int | None, time_limit: float | None = None,
              progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run the wire harness; see ``WireFuzzer``."""
    return WireFuzzer(config).run(count, time_limit, progress)
