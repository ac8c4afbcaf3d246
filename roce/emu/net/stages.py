"""The replaceable stages of the switched network, each one class behind an interface
(``roce.emu.net.interfaces``; the forwarder, the marker and the pacer, which a switch or a
NIC calls per frame, are base classes here that every model subclasses):

- ``Classifier``: frame -> traffic class (= 802.1p priority here) by DSCP;
- ``Forwarder``: frame + equal-cost egress ports -> one port (ECMP hash, or spraying);
- ``Marker``: egress queue bytes at dequeue -> set CE or not (RED, or nothing);
- ``Pacer``: per-QP rate limiter in the NIC; congestion control drives ``rate_bps`` (a base
  class, as the forwarder and the marker are).

PFC accounting is the buffer's job (``roce.emu.net.buffer``); the facts behind the defaults
are in this package's docstring.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from roce import fast
from roce.emu.net import hop as frames
from roce.headers import ECN_ECT0

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from roce.emu.net.interfaces import T

CLASSES = 8
# NVIDIA's RoCE defaults (package docstring): data DSCP 26 on priority 3, CNP DSCP 48 on 6
DSCP_ROCE, DSCP_CNP = 26, 48
PRIO_ROCE, PRIO_CNP, PRIO_LOSSY = 3, 6, 0
ROCE_TRAFFIC_CLASS = DSCP_ROCE << 2 | ECN_ECT0  # what emulated hosts put in their IP headers


class DscpClassifier:
    """DSCP -> class through a 64-entry map (NVIDIA "trust dscp")."""

    def __init__(self, mapping: Mapping[int, int] | None = None,
                 lossless: frozenset[int] = frozenset({PRIO_ROCE}),
                 strict: frozenset[int] = frozenset({PRIO_CNP})) -> None:
        table = [PRIO_LOSSY] * 64
        for d, c in (mapping if mapping is not None
                     else {DSCP_ROCE: PRIO_ROCE, DSCP_CNP: PRIO_CNP}).items():
            table[d] = c
        self.table = bytes(table)
        self.lossless = frozenset(lossless)
        self.strict = frozenset(strict)
        self.classes = frozenset(self.table) | self.lossless | self.strict

    def classify(self, frame: bytes) -> int:
        return self.table[(frame[frames.TOS] >> frames.DSCP_SHIFT) & frames.DSCP_MASK]


class Forwarder:
    """Frame + equal-cost egress ports -> the port it leaves by.  A forwarder subclasses this
    and overrides ``pick`` (a switch calls it per frame with more than one port to choose
    from: in C in the compiled form)."""

    __slots__ = ()

    def pick(self, frame: bytes, ports: Sequence[T]) -> T:
        raise NotImplementedError


class EcmpForwarder(Forwarder):
    """One path per flow: a seeded hash (CRC-32) of the 5-tuple picks the port."""

    __slots__ = ("seed",)

    def __init__(self, seed: int) -> None:
        self.seed = seed & 0xFFFFFFFF

    def pick(self, frame: bytes, ports: Sequence[T]) -> T:
        return ports[zlib.crc32(frames.flow_key(frame), self.seed) % len(ports)]


class SprayForwarder(Forwarder):
    """Per-packet spraying: a seeded random port for every frame."""

    __slots__ = ("rng", "_bits")

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._bits = rng.getrandbits

    def pick(self, frame: bytes, ports: Sequence[T]) -> T:
        # ``rng.randrange(n)``, drawn as ``random.Random`` draws it (k = n's bit length,
        # getrandbits(k) until below n): the same port from the same stream, without the two
        # Python-level calls of ``random.py`` per frame (tests/test_net_units.py holds them
        # equal)
        n = len(ports)
        k = n.bit_length()
        r = self._bits(k)
        while r >= n:
            r = self._bits(k)
        return ports[r]


# packet trimming (UET's trimming switches, docs/protocol.md "Ultra Ethernet Transport
# emulated"): what survives of a packet, its new DSCP and the class it is forwarded in
TRIM_BYTES = 98  # Ethernet, IPv4, UDP, a PDS request (12) and an SES standard header (44)
TRIM_DSCP = 40  # CS5: ours (the feature takes any configured value)


@dataclass(frozen=True)
class Trimmer:
    """Cuts a packet the buffer would drop to its first ``size`` bytes (its headers), with
    the IPv4 total length, UDP length and header checksum rewritten, re-marked to ``dscp``
    and queued in class ``tc`` (a strict-priority class, so headers overtake data).  Only
    IPv4 UDP frames longer than ``size`` are trimmed; anything else is dropped as before."""

    size: int = TRIM_BYTES
    dscp: int = TRIM_DSCP
    tc: int = PRIO_CNP

    def cut(self, frame: bytes) -> bytes | None:
        size = self.size
        if len(frame) <= size or not frames.is_ipv4(frame) or frame[frames.PROTO] != 17:
            return None
        out = bytearray(frame[:size])
        ip = frames.L2
        out[ip + 2:ip + 4] = (size - ip).to_bytes(2, "big")  # total length
        u = frames.UDP_SPORT[0]
        out[u + 4:u + 6] = (size - u).to_bytes(2, "big")  # UDP length
        out[frames.TOS] = (self.dscp << frames.DSCP_SHIFT) | (out[frames.TOS] & 3)
        c = frames.CSUM[0]
        out[c:c + 2] = b"\0\0"
        out[c:c + 2] = fast.ip_checksum_reference(bytes(out[ip:ip + frames.IP_HDR])) \
            .to_bytes(2, "big")
        return bytes(out)


# the HPCC ns-3 rule for the default thresholds: per 25 Gb/s of port rate (package docstring)
KMIN_PER_25G, KMAX_PER_25G = 100_000, 400_000


@dataclass
class EcnConfig:
    """RED parameters in bytes; ``None`` means the defaults: scaled to the port rate, and
    kept below the buffer's drop point (package docstring)."""

    kmin: int | None = None
    kmax: int | None = None
    pmax: float = 0.2
    enabled: bool = True

    @property
    def given(self) -> bool:
        """The thresholds were given (``--ecn KMIN,KMAX,PMAX``), not derived."""
        return self.kmin is not None or self.kmax is not None

    def for_rate(self, rate_gbps: float, kmax_cap: float | None = None
                 ) -> tuple[int, int, float]:
        """(Kmin, Kmax, Pmax) for a port of ``rate_gbps``.  A default threshold is scaled to
        the rate, then - when ``kmax_cap`` is given - both defaults shrink by the same
        factor until Kmax is at most that: marking must reach Pmax before the tail drop or
        the PFC pause it is there to avoid (``topology.build`` says where that is).
        Thresholds given explicitly are kept as they are."""
        scale = rate_gbps / 25.0
        kmin, kmax = KMIN_PER_25G * scale, KMAX_PER_25G * scale
        if kmax_cap is not None and kmax > kmax_cap:
            shrink = kmax_cap / kmax
            kmin, kmax = kmin * shrink, kmax * shrink
        return (self.kmin if self.kmin is not None else round(kmin),
                self.kmax if self.kmax is not None else round(kmax), self.pmax)


class Marker:
    """Egress queue bytes at dequeue -> set CE or not.  A marker subclasses this and overrides
    ``mark`` (a switch calls it per frame dequeued: in C in the compiled form)."""

    __slots__ = ()

    def mark(self, queue_bytes: int) -> bool:
        raise NotImplementedError


class RedMarker(Marker):
    """RED at dequeue: P(mark) = 0 below Kmin, Pmax (q-Kmin)/(Kmax-Kmin) up to Kmax, 1 above."""

    __slots__ = ("kmin", "kmax", "pmax", "rng")

    def __init__(self, kmin: int, kmax: int, pmax: float, rng: random.Random) -> None:
        if not 0 <= kmin <= kmax or not 0.0 <= pmax <= 1.0:
            raise ValueError(f"ECN needs 0 <= Kmin <= Kmax and 0 <= Pmax <= 1, got {kmin}, "
                             f"{kmax}, {pmax}")
        self.kmin, self.kmax, self.pmax = kmin, kmax, pmax
        self.rng = rng

    def probability(self, q: int) -> float:
        b = q  # (bytes, the thresholds and Pmax: C numbers in the compiled form)
        if b <= self.kmin:
            return 0.0
        if b > self.kmax:
            return 1.0
        return self.pmax * (b - self.kmin) / max(self.kmax - self.kmin, 1)

    def mark(self, queue_bytes: int) -> bool:
        b = queue_bytes  # (a C integer in the compiled form)
        if b <= self.kmin:
            return False
        if b > self.kmax:
            return True
        return self.rng.random() < self.probability(b)


class NoMarker(Marker):
    """Never marks (ECN off)."""

    __slots__ = ()

    def mark(self, queue_bytes: int) -> bool:
        return False


class Pacer:
    """A per-QP rate limiter: when the QP may send next (``next_allowed``), what sending costs
    it (``sent``), at ``rate_bps``.  A pacer subclasses this and overrides both methods (a NIC
    calls them per frame: in C in the compiled form); congestion control drives
    ``rate_bps``."""

    __slots__ = ("rate_bps",)

    def next_allowed(self) -> int:
        raise NotImplementedError

    def sent(self, now: int, nbytes: int) -> None:
        raise NotImplementedError


class RatePacer(Pacer):
    """Spaces a QP's frames at ``rate_bps`` (line rate here: it never holds a frame back the
    link would not have held anyway; congestion control lowers it)."""

    __slots__ = ("_next", "bytes_sent")

    def __init__(self, rate_bps: int) -> None:
        self.rate_bps = rate_bps
        self._next = 0
        self.bytes_sent = 0

    def next_allowed(self) -> int:
        return self._next

    def sent(self, now: int, nbytes: int) -> None:
        self.bytes_sent += nbytes
        self._next = max(now, self._next) + nbytes * 8 * 1_000_000_000 // self.rate_bps
