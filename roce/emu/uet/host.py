"""A UET host on the simulated network (``roce.emu.net``): its PDS and SES behind one link.

The host is an ``Endpoint`` the link pulls (``roce.emu.net.link.PullEndpoint``):
``receive`` hands each frame to the PDS through the UET family's codec (``uetframes``), and
``pull`` gives the wire the PDS's next packet as a frame.  It drives the PDS's named timers
on the network's event loop, and sets each packet's entropy, the UDP source port the
switches' ECMP hash reads:

* ``pdc``: one entropy per PDC, drawn when the PDC opens: every packet of a PDC takes one
  path, as a flow's does under ECMP;
* ``packet``: a new entropy for every packet (oblivious spraying, UE specification's
  "per-packet entropy"): the same ECMP hash then spreads one PDC over every equal-cost path;
* ``reps``: each request takes an entropy whose ACK came back unmarked, or a fresh one
  (``roce.emu.uet.reps``).

With a congestion-control configuration for UET (``--cc nscc|rccc``), the host's PDS
admits requests through ``roce.emu.uet.congestion`` (``cc``, which the run's statistics read).

ACKs and NACKs take the entropy of the PDC (or packet) they answer.  A frame whose DSCP is
``trim_dscp`` (a switch cut it to its headers) reaches the PDS as trimmed.  UET hosts send
no PFC frames and ignore those they receive: UET runs in a lossy class.
"""

from __future__ import annotations

import random
from typing import Any

from roce.emu.cc.algorithms import CcConfig
from roce.emu.core.memory import AddressSpace
from roce.emu.net.link import PullEndpoint
from roce.emu.net.pfc import PauseState
from roce.emu.uet import ENTROPY_MODES, uetframes
from roce.emu.uet.congestion import Congestion
from roce.emu.uet.pds import Pdc, Pds, PdsConfig
from roce.emu.uet.reps import Reps
from roce.emu.uet.ses import Ses
from roce.families.uet import codes as t

REQUESTS = t.REQUESTS  # what REPS sprays: requests (ACKs keep their PDC's entropy)
ENTROPY_LOW = 0xC000  # entropies are drawn from the dynamic ports (RFC 6335), as RoCE's are
ENTROPIES = 0x10000 - ENTROPY_LOW
_ENTROPY_BITS = ENTROPIES.bit_length()


class UetHost(PullEndpoint):
    """One host: ``ip``, a MAC derived from it, its memory (``space``), SES and PDS."""

    __slots__ = ("net", "name", "ip", "mac", "wire", "peer_mac", "tap", "entropy", "marking",
                 "trim_dscp", "rng", "space", "pd", "ses", "pds", "entropies", "ready",
                 "tx_frames", "rx_frames", "not_uet", "ip_id", "_timer_at", "pfc_sent", "cc",
                 "_pause", "reps")

    def __init__(self, net: Any, name: str, ip: str, config: PdsConfig, mtu: int,
                 entropy: str = "pdc", marking: uetframes.Marking = uetframes.MARKING,
                 trim_dscp: int | None = None, cc: CcConfig | None = None,
                 rendezvous: int = 0) -> None:
        if entropy not in ENTROPY_MODES:
            raise ValueError(f"entropy {entropy!r}: one of {', '.join(ENTROPY_MODES)}")
        self.net = net
        self.name = name
        self.ip = ip
        octets = [int(x) for x in ip.split(".")]
        self.mac = bytes([0x02, 0x00, *octets])
        self.wire: Any = None  # the outgoing link, set when the topology is built
        self.peer_mac = b"\0" * 6
        self.tap: Any = None
        self.entropy = entropy
        self.marking = marking
        self.trim_dscp = trim_dscp
        self.rng: random.Random = net.child_rng()
        self.space = AddressSpace()
        self.pd = object()
        self.ses = Ses(self.space, self.pd, mtu, rendezvous)
        self.pds = Pds(ip, config, self.ses, net.child_rng())
        self.ses.pds = self.pds
        self.entropies: dict[int, int] = {}  # PDC ID -> its entropy (``pdc``)
        self.ready: list[Any] | None = None  # the runner's: this host has completions
        self.tx_frames = 0
        self.rx_frames = 0
        self.not_uet = 0  # frames received that are not UET packets for this host
        self.ip_id = 0
        self._timer_at: int | None = None
        # what the network's statistics read of every host (``runner.fabric_stats``)
        self.pfc_sent = 0
        self.cc: Congestion | None = None
        if cc is not None and cc.enabled:
            self.cc = self.pds.cm = Congestion(cc, self._line_rate, mtu)
        self.reps: Reps | None = None
        if entropy == "reps":
            self.reps = Reps(self._draw)
            self.pds.on_acked_psns = self.reps.acked
        self._pause: PauseState | None = None

    @property
    def pause(self) -> PauseState:
        """Never paused: UET hosts ignore pause frames (a lossy class)."""
        if self._pause is None:
            self._pause = PauseState(self.wire.rate_bps if self.wire is not None else 1)
        return self._pause

    def open(self, peer: str) -> Pdc:
        pdc = self.pds.open(peer)
        self.entropies[pdc.id] = self._draw()
        return pdc

    def _line_rate(self) -> float:
        return float(self.wire.rate_bps) if self.wire is not None else 1e9

    def _draw(self) -> int:
        """``ENTROPY_LOW + rng.randrange(ENTROPIES)``, drawn as ``random.Random.randrange``
        draws it (bits of the range's length until one is below it: the same numbers) with
        no Python call per draw but ``getrandbits``'s."""
        r = self.rng.getrandbits(_ENTROPY_BITS)
        while r >= ENTROPIES:
            r = self.rng.getrandbits(_ENTROPY_BITS)
        return ENTROPY_LOW + r

    # -- Endpoint ----------------------------------------------------------------------------

    def receive(self, now: int, frame: bytes) -> None:
        self.rx_frames += 1
        for w in self.net.recorders:
            w.write(frame, ts_ns=now)
        if self.tap is not None:
            self.tap.write(frame, ts_ns=now)
        r = uetframes.decode(frame)
        if r is None:
            self.not_uet += 1
            return
        fields, payload, src, ce, dscp = r  # a tuple's items: no attribute lookups
        trimmed = self.trim_dscp is not None and dscp == self.trim_dscp
        self.pds.receive(now, fields, payload, src, ce, trimmed)
        self.changed(now, True, False)

    def pull(self, now: int) -> bytes | None:
        o = self.pds.pull(now)
        if o is None:
            return None
        if self.entropy == "packet":
            entropy = self._draw()
        elif self.reps is not None and o.pdc is not None and "uet.pds.psn" in o.fields \
                and o.fields.get("uet.pds.type") in REQUESTS:
            entropy = self.reps.pick(o.pdc, o.fields["uet.pds.psn"])
        elif o.pdc is not None:
            entropy = self.entropies.get(o.pdc.id)
            if entropy is None:  # a PDC this host accepted: its own entropy for answers
                entropy = self.entropies[o.pdc.id] = self._draw()
        else:
            entropy = ENTROPY_LOW
        self.ip_id = (self.ip_id + 1) & 0xFFFF
        frame = uetframes.frame_of(o.fields, o.payload, self.ip, o.dst, self.mac,
                                   self.peer_mac, entropy, self.marking, self.ip_id)
        self.tx_frames += 1
        if self.tap is not None:
            self.tap.write(frame, ts_ns=now)
        self.changed(now, False, False)
        return frame

    def next_tx(self, now: int) -> int | None:
        return now if self.pds.pending() else None

    # -- driving the PDS ----------------------------------------------------------------------

    def changed(self, now: int, kick: bool = True, anything: bool = True) -> None:
        """After anything the PDS did: wake the wire, arm the next timer, tell the runner
        about completions.  Not ``anything``: after a packet the PDS received or sent, whose
        timers then came forward only if it says so (``Pds.armed``); otherwise the timer
        armed, no later than the deadline was, stays right, and the deadline is not read."""
        if kick and self.wire is not None and not self.wire.busy:
            self.wire.kick(now)
        pds = self.pds
        at = self._timer_at
        if not (anything or pds.armed or at is None or at < now):
            if self.ready is not None and (self.ses.completions or self.ses.recv_completions):
                self.ready.append(self)
            return
        pds.armed = False
        d = pds.deadline()
        if d is not None and (at is None or d < at or at < now):
            self._timer_at = d
            self.net.at(max(d, now), self._on_timer, d)
        if self.ready is not None and (self.ses.completions or self.ses.recv_completions):
            self.ready.append(self)

    def _on_timer(self, now: int, d: int) -> None:
        if self._timer_at == d:
            self._timer_at = None
        self.pds.on_timer(now)
        self.changed(now)


__all__ = ["ENTROPY_MODES", "UetHost"]
