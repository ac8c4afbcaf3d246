"""The interface every congestion-control algorithm implements (docs/congestion-control.md).

An algorithm is one class, one instance per sending QP.  It is sans-I/O like the rest of the
emulator core: the driver (the host NIC) passes ``now`` in integer nanoseconds to every event
and reads back what the algorithm wants, it never reads a clock or a random source.

Events: a CNP arrived (``on_cnp``), an ACK arrived with its measured RTT and the count of
packets it newly acknowledged (``on_ack``), the NIC sent bytes of this QP (``on_sent``), the
QP's retransmission timer expired (``on_timeout``), one of the algorithm's named timers fired
(``on_timer``).  Each returns an ``Output``: the sending rate in bit/s, a window in packets
(or None for a rate-only algorithm) and the earliest timer deadline (or None).  ``timers()``
names every armed timer, as the QP core's own timers are named.

The window counts packets, not bytes: it is the requester's window of PSNs in flight
(``roce.emu.core.requester``, the count rxe and IRN's BDP flow control already keep), and
DCTCP's and Swift's papers count their windows in packets too.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_new = tuple.__new__

# rate_bps: float; window: int | None, packets (PSNs) in flight at most, at least 1, None: no
# window; deadline: int | None, the earliest armed timer (virtual ns)
Output = namedtuple("Output", ("rate_bps", "window", "deadline"))
Output.__doc__ = """What an algorithm asks of the NIC after an event (a named tuple: one is made
per event, and a tuple is built at a third of a frozen dataclass's cost)."""


class CongestionControl:
    """Base class: a QP sending at line rate that reacts to nothing (``--cc none``).

    A subclass says what it is in class attributes - ``name`` (what ``--cc`` takes),
    ``summary`` (what ``--cc``'s help says of it), ``PARAMS`` (``roce.emu.cc.params.Param``
    rows) and ``PROFILES`` (the first is the default), and the flags below - and overrides the
    events it reacts to.  ``uses_cnp`` says whether the receiving NIC must run a notification
    point (ECN-driven algorithms) for this algorithm to get its signal; ``uses_rtt`` whether
    the sending NIC must time packets to give ``on_ack`` RTT samples (with the packets each ACK
    acknowledged and the path's hops: a window algorithm needs ``on_ack`` even when it ignores
    the RTT); ``uses_int`` whether its data packets carry in-band telemetry (INT-MD,
    roce/families/intmd.py) that the switches stamp and the receiving NIC echoes on its ACKs,
    for ``on_telemetry`` (HPCC).  ``protocol`` is the transport it controls: ``roce`` (a QP,
    driven by ``roce.emu.cc.engine``) or ``uet`` (a PDC, driven by
    ``roce.emu.uet.congestion`` through the ``on_ack_cc``/``on_loss`` events); ``none``
    controls nothing and goes with either.  (Class attributes, not class-line keywords: the
    compiled build makes the base and the algorithms on the per-frame path extension types,
    which take no keywords, and the NIC's driver reads their per-frame state in C.)
    """

    name = "none"
    summary = ""
    uses_cnp = False
    uses_rtt = False  # the NIC must time its packets for ``on_ack``
    uses_int = False  # its packets carry INT; ACKs bring it back
    protocol = "roce"  # the transport it controls: roce | uet
    PARAMS: Mapping[str, Any] = {}
    PROFILES: Mapping[str, Mapping[str, Any]] = {"default": {}}
    # the per-event state lives in slots (an attribute read per event is a dictionary lookup
    # otherwise); a subclass lists its own, or gets a dictionary, and sets these without
    # declaring them again (a second slot would hide them from the driver: ``register``
    # refuses it).  ``window``: packets (PSNs) in flight allowed, None for a rate-only
    # algorithm
    __slots__ = ("params", "line_rate", "rate", "_timers", "counting", "byte_room", "hops",
                 "window")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        self.params = dict(params)
        self.line_rate = float(line_rate_bps)
        self.rate = self.line_rate
        self._timers: dict[str, int] = {}
        # True while ``on_sent`` matters (a driver skips the call otherwise: it runs per frame)
        self.counting = type(self).on_sent is not _BASE_ON_SENT
        # while counting, the bytes the QP may still send before ``on_sent`` can change
        # anything: a driver subtracts each frame's length here itself and calls ``on_sent``
        # (with that frame's length) only for the frame that reaches it, so a byte counter
        # costs one subtraction per frame.  0: call ``on_sent`` for every frame.
        self.byte_room = 0
        # switches on the QP's path as the NIC last counted them on an ACK (the IP TTL it was
        # sent with less the TTL it arrived with; the reverse path's, as long as an RTT sample
        # comes with it: ``uses_rtt``); None before the first
        self.hops: int | None = None
        self.window: int | None = None

    # -- events -------------------------------------------------------------------------

    def on_cnp(self, now: int) -> Output:
        return self.output()

    def on_ack(self, now: int, rtt_ns: int, acked: int = 0) -> Output:
        """An ACK: ``rtt_ns`` of the PSN it acknowledges, ``acked`` the packets (PSNs) it
        acknowledged that no earlier ACK had."""
        return self.output()

    def on_sent(self, now: int, nbytes: int) -> Output:
        return self.output()

    def on_timeout(self, now: int) -> Output:
        """The QP's retransmission timer expired (the NIC sees it when the QP resends)."""
        return self.output()

    def on_timer(self, now: int, name: str) -> Output:
        return self.output()

    # -- UET events (``protocol = "uet"``; roce.emu.uet.congestion) -------------------------

    def on_ack_cc(self, now: int, rtt_ns: int | None, acked_bytes: int, marked: bool
                  ) -> Output:
        """An ACK_CC: ``rtt_ns`` the round trip of the packet that triggered it less the
        receiver's service time (None: no sample, e.g. a retransmitted packet's), the bytes
        the receiver took since its last ACK, whether it saw a CE mark since."""
        return self.output()

    def on_loss(self, now: int) -> Output:
        """A packet of the PDC was lost (trimmed, found missing by SACK, or timed out)."""
        return self.output()

    # -- what the driver reads ------------------------------------------------------------

    def timers(self) -> dict[str, int]:
        """Every armed timer by name (virtual ns)."""
        return dict(self._timers)

    def deadline(self) -> int | None:
        """The earliest armed timer (virtual ns), or None."""
        d = None
        for t in self._timers.values():  # (one or two: a loop in C, not a call of ``min``)
            if d is None or t < d:
                d = t
        return d

    def output(self) -> Output:
        # tuple.__new__: a named tuple's own constructor is Python code, and this runs per event
        return _new(Output, (self.rate, self.window, self.deadline()))

    def fire_due(self, now: int) -> Output:
        """Fire every timer due at ``now``, earliest first (ties by name; a driver with one
        timer event per QP calls this)."""
        timers = self._timers
        while timers:
            t, name = min((t, n) for n, t in timers.items())
            if t > now:
                break
            del timers[name]
            self.on_timer(now, name)
        return self.output()


# the base's own ``on_sent``, as its class holds it (read through the class, a compiled
# method is not a value Cython can take)
_BASE_ON_SENT = vars(CongestionControl)["on_sent"]


class NoControl(CongestionControl):
    """``--cc none``: line rate whatever happens (PFC alone guards the fabric)."""

    name = "none"
    summary = "line rate; PFC alone"
    __slots__ = ()
