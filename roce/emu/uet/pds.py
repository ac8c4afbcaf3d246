"""The packet delivery sublayer (PDS) of one UET host, sans-I/O: its PDCs (packet delivery
contexts), what each sends and what it does with what it receives.

Nothing here reads a clock, a socket or global randomness: every entry point takes ``now``
(integer virtual nanoseconds), packets are flat field dictionaries named as the UET family
names them (``uet.pds.psn``...; ``roce.emu.uet.uetframes`` turns them into frames with the
family's codec), and the layer above (``Upper``: the SES) is called back with what arrived
and what was acknowledged.  A driver calls ``receive``, ``pull`` while it may transmit, and
``on_timer`` when ``deadline()`` passes; ``armed`` tells it whether a packet received or sent
may have brought the deadline forward (otherwise the timer it armed stays right).

The rules, as the tables below write them (sources in docs/protocol.md, "Ultra Ethernet
Transport emulated"):

* **Establishment** (0-RTT, the reference provider's default): an initiator's requests carry
  SYN, the PSN offset from its start PSN and, in the PDS type, the PDC mode (RUD or ROD),
  until the first ACK names the target's PDC ID; the target makes its PDC from the first
  SYN request that reaches it (``TRANSITIONS``).  Each end sends requests in its own PSN
  space; the target's (READ response data) starts at the same start PSN (our choice).
* **Delivery**: RUD accepts any PSN within ``window`` PSNs of its cumulative PSN, once each;
  ROD only the next PSN, and answers any other with NACK ``ROD_OOO`` naming the expected
  one (``RECEIVE_CHECKS``).
* **Connectionless modes** (``CONNECTIONLESS``): RUDI (reliable unordered delivery of
  idempotent operations) and UUD (unreliable unordered) have no PDC on the wire: no SYN, no
  PDC IDs, no PSNs, no close handshake.  A RUDI request carries a packet ID (one counter per
  host, so that the response names the packet and the context that sent it) and is answered
  by a RUDI response with the same ID and an SES response (the return code); the target keeps
  no per-packet state: a duplicate executes again, harmlessly, and is answered again.  The
  sender resends on RACK (a later ID answered) and on the ``rto`` timer, as for RUD.  A UUD
  request is sent once: no response, no retransmission; the sender counts it done when it
  leaves, the target counts what arrives, and what is lost stays lost.  At each end the
  context of a peer's requests is one per peer address (``Pds.peer_context``).
* **Acknowledgement**: an ACK_CC (NSCC state) carries the cumulative ACK PSN, the PSN that
  triggered it and a 64-bit SACK bitmap from the PSN after the cumulative one; it is sent at
  once for the reasons in ``ACK_NOW``, otherwise after ``ack_every`` requests or when the
  named ``ack`` timer (``ack_delay_ns`` after the first unacknowledged request) fires.
* **Retransmission**: on a NACK as ``NACK_ACTIONS`` says; on a SACK gap when RACK
  (``roce.emu.core.rack``, RFC 8985) finds a PSN lost past the reordering window, so that
  spraying's reordering is no loss (the named ``reorder`` timer); on the named ``rto``
  timer, doubled at each expiry without progress, the PDC failing after ``max_retries``:
  the expiry resends every PSN sent longer than the current timeout ago, and the earliest
  PSN not acknowledged once it was sent a timeout (undoubled) ago (RFC 6298, 5.4: the one a
  lost retransmission leaves missing, sent after the others when a full window lets
  nothing new go).
* **Close**: once every request is acknowledged, the initiator sends a close command
  (control type CLOSE) in its PSN space; the target acknowledges it when every PSN before
  it has arrived and closes; the ACK closes the initiator's end.
* **SES refusals**: a request the SES cannot execute (``Upper.on_request`` returns a return
  code) is held: the SES response carrying the code goes as a request of this end, and the
  refused PSN is accepted and acknowledged only once that response is acknowledged, so the
  initiator has the code before its message could complete; RUDI carries it in the RUDI
  response.
* **Handshakes from either end** (``CONTROLS``): control packets travel in their sender's
  PSN space, so they are acknowledged and resent as requests are, and act when every PSN
  before them has arrived.  The target asks for a close with CLOSE_REQ: the initiator closes
  as above once its work is done.  Either end clears: the initiator with a clear command
  (CLEAR, its payload the clear PSN: everything up to it is acknowledged and may be
  forgotten), acknowledged by the target; the target asks for one with CLEAR_REQ.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from roce.emu.core.rack import Rack
from roce.families.uet import codes as t
from roce.families.uet.layouts import PSN_MASK

_HALF = 0x80000000
SACK_BITS = 64  # the ACK_CC's SACK bitmap
MPR_UNIT = 128  # PSNs per unit of the ACK's MPR (uet-ref-prov UET_PDS_MPR_GRANULARITY)
PSN_OFFSET_MAX = 0xFFF  # the SYN request's PSN offset: 12 bits
NSCC_BYTES_MAX = 0xFFFFFF  # ACK_CC NSCC received byte count: 24 bits
NSCC_OOO_MAX = 0xFFFF
NSCC_SERVICE_MAX = 0xFFFF  # ACK_CC NSCC service time: 16 bits (ns, ours: saturating)

# -- states and transitions -----------------------------------------------------------------

IDLE = "idle"  # an initiator's PDC before its first request
SYN_SENT = "syn-sent"  # requests carry SYN: no ACK has named the target's PDC yet
ESTABLISHED = "established"
CLOSING = "closing"  # the initiator sent its close command
CLOSED = "closed"
FAILED = "failed"  # retries ran out, or the peer refused the PDC
STATES = (IDLE, SYN_SENT, ESTABLISHED, CLOSING, CLOSED, FAILED)
# PDC modes with no PDC on the wire (no SYN, PDC IDs, PSNs or close handshake)
CONNECTIONLESS = frozenset((t.RUDI_REQ, t.UUD_REQ))
MODES = (t.RUD_REQ, t.ROD_REQ, *sorted(CONNECTIONLESS))

# (state, event) -> next state; anything else is a bug in this module (``Pdc.move``)
TRANSITIONS: dict[tuple[str, str], str] = {
    (IDLE, "send"): SYN_SENT,
    (IDLE, "close"): CLOSED,  # nothing was ever sent: nothing to close on the wire
    (SYN_SENT, "send"): SYN_SENT,
    (SYN_SENT, "ack"): ESTABLISHED,
    (SYN_SENT, "fail"): FAILED,
    (ESTABLISHED, "send"): ESTABLISHED,
    (ESTABLISHED, "ack"): ESTABLISHED,
    (ESTABLISHED, "close"): CLOSING,
    (ESTABLISHED, "fail"): FAILED,
    (ESTABLISHED, "closed"): CLOSED,  # the target: the close command is in sequence
    (CLOSING, "ack"): CLOSING,
    (CLOSING, "closed"): CLOSED,  # the initiator: its close command was acknowledged
    (CLOSING, "fail"): FAILED,
    (CLOSED, "ack"): CLOSED,
    (FAILED, "ack"): FAILED,
    (FAILED, "fail"): FAILED,
    # RUDI and UUD: open with the first request, released locally once idle
    (IDLE, "open"): ESTABLISHED,
    (ESTABLISHED, "release"): CLOSED,
}

# -- the receiver's checks, in order: a request failing one is answered with that NACK -------

RECEIVE_CHECKS: tuple[tuple[str, int], ...] = (
    ("no PDC has this destination PDC ID and the request has no SYN", 0x0E),  # INV_DPDCID
    ("the PDC's peer or source PDC ID differs", 0x0F),  # PDC_HDR_MISMATCH
    ("the PDS type is not the PDC's mode", 0x16),  # PDC_MODE_MISMATCH
    ("the PDC is closed", 0x10),  # CLOSING
    ("the packet was trimmed", 0x01),  # TRIMMED
    ("the PSN is past the receive window", 0x0B),  # PSN_OOR_WINDOW
    ("an ROD PDC received a PSN other than the next", 0x0D),  # ROD_OOO
)
NO_PDC_AVAIL = 0x04
INV_DPDCID, PDC_HDR_MISMATCH, PDC_MODE_MISMATCH, NACK_CLOSING = 0x0E, 0x0F, 0x16, 0x10
TRIMMED, PSN_OOR_WINDOW, ROD_OOO = 0x01, 0x0B, 0x0D

# -- what an ACK is sent at once for (otherwise: coalesced) -----------------------------------

ACK_NOW: tuple[str, ...] = (
    "ar",  # the request asked for one (AR flag: the last packet of a message)
    "out-of-order",  # a PSN past a hole: the SACK bitmap tells the sender at once
    "hole-filled",  # the cumulative PSN jumped: the sender stops waiting at once
    "duplicate",  # the sender retransmitted what arrived: its ACK may have been lost
    "control",  # a control packet (close, clear, or a request for one) is in sequence
    "every",  # ``ack_every`` requests since the last ACK
)

# -- what a NACK makes the sender do, by code ---------------------------------------------------

RETRANSMIT = "retransmit"  # send the NACKed PSN again now
GO_BACK = "go-back"  # ROD: send every unacknowledged PSN from the expected one, in order
RETRY_LATER = "retry-later"  # resources at the target: the rto timer resends it
FAIL = "fail"  # the PDC cannot go on
NACK_ACTIONS: dict[int, str] = {
    0x01: RETRANSMIT, 0x02: RETRANSMIT, 0x03: RETRANSMIT,  # TRIMMED, _LASTHOP, _ACK
    0x04: RETRY_LATER, 0x05: RETRY_LATER, 0x06: RETRY_LATER, 0x07: RETRY_LATER,
    0x09: RETRY_LATER, 0x0A: RETRY_LATER, 0x0B: RETRY_LATER,  # no resources, window
    0x0D: GO_BACK,  # ROD_OOO
    0x0E: FAIL, 0x0F: FAIL, 0x10: FAIL, 0x11: FAIL, 0x15: FAIL, 0x16: FAIL,
}

CTRL_CLEAR, CTRL_CLEAR_REQ, CTRL_CLOSE, CTRL_CLOSE_REQ = 2, 3, 4, 5  # codes.CTRL_TYPES
# -- control packets: (control type) -> what its receiver does, and who may send it ------------
CLOSE_NOW = "close"  # the close command: close when every PSN before it arrived
CLOSE_SOON = "close-when-done"  # the target asks: the initiator closes once its work is done
CLEARED = "cleared"  # the clear command: forget the receive state up to its clear PSN
CLEAR_SOON = "clear"  # the target asks: the initiator sends a clear command
CONTROLS: dict[int, tuple[str, str]] = {  # type -> (action, sender)
    CTRL_CLOSE: (CLOSE_NOW, "initiator"),
    CTRL_CLOSE_REQ: (CLOSE_SOON, "target"),
    CTRL_CLEAR: (CLEARED, "initiator"),
    CTRL_CLEAR_REQ: (CLEAR_SOON, "target"),
}
RC_OK = 1  # SES return code OK (codes.RETURN_CODES)
# the packet types read per packet, as module globals (compiled: no attribute lookup on
# ``codes`` each time)
_CTRL, _RUDI_RESP, _ROD_REQ = t.CTRL, t.RUDI_RESP, t.ROD_REQ
_REQUESTS, _ACKS, _NACKS = t.REQUESTS, t.ACKS, t.NACKS


@dataclass(frozen=True)
class PdsConfig:
    """One host's PDS parameters (``roce.emu.uet.run`` sets them from the options)."""

    mode: int = t.RUD_REQ  # RUD_REQ, ROD_REQ, RUDI_REQ or UUD_REQ: the PDS type (``MODES``)
    window: int = MPR_UNIT  # PSNs in flight past the cumulative ACK (uet-ref-prov: 128)
    ack_every: int = 8  # requests per coalesced ACK
    ack_delay_ns: int = 2_000  # the ``ack`` timer: the longest an ACK waits
    # the ``rto`` timer, doubled at each expiry without progress: ours, 1 ms, above the
    # queueing delay a window of 128 PSNs per PDC builds without congestion control (100 us
    # fired on queued packets in bench/bench_uet_emulate.py's leaf-spine)
    rto_ns: int = 1_000_000
    max_retries: int = 7  # rto expiries without progress before the PDC fails
    max_pdcs: int = 1 << 16  # PDCs a host holds (PDC IDs are 16 bits)

    def check(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"PDC mode {self.mode}: one of "
                             + ", ".join(f"{t.PDS_TYPES[m][0]} ({m})" for m in MODES))
        if not 1 <= self.window <= PSN_OFFSET_MAX:
            # SYN requests carry their PSN offset in 12 bits: the whole window must fit it
            raise ValueError(f"PDS window {self.window}: 1 to {PSN_OFFSET_MAX} PSNs")
        if self.ack_every < 1 or self.ack_delay_ns < 0 or self.rto_ns < 1:
            raise ValueError("ack_every and rto_ns must be >= 1, ack_delay_ns >= 0")
        if not 1 <= self.max_pdcs <= 1 << 16:
            raise ValueError(f"max_pdcs {self.max_pdcs}: 1 to 65536 (16-bit PDC IDs)")


class Upper(Protocol):
    """What the PDS calls back (the SES)."""

    def on_request(self, pdc: Pdc, fields: dict[str, Any], payload: bytes) -> int | None:
        """A request arrived, once (duplicates are the PDS's; RUDI's come again): its SES
        return code (None: OK)."""

    def on_acked(self, pdc: Pdc, token: Any) -> None:
        """The request submitted with ``token`` was acknowledged."""

    def on_failed(self, pdc: Pdc, token: Any) -> None:
        """The request submitted with ``token`` will never be acknowledged (the PDC
        failed)."""

    def on_error(self, pdc: Pdc, token: Any, rc: int) -> None:
        """The RUDI request submitted with ``token`` was answered with return code ``rc``
        (not OK), before ``on_acked``."""


@dataclass
class Counters:
    """What a PDS counted: requests, retransmissions by cause, timeouts."""

    requests_sent: int = 0  # first transmissions
    retransmitted: int = 0
    retx_nack: int = 0
    retx_sack: int = 0  # found lost by RACK over the SACK bitmaps
    retx_timeout: int = 0
    timeouts: int = 0
    syn_sent: int = 0
    acks_sent: int = 0
    acks_received: int = 0
    ecn_acks: int = 0  # ACKs with the M flag
    nacks_sent: dict[str, int] = field(default_factory=dict)
    nacks_received: dict[str, int] = field(default_factory=dict)
    received: int = 0  # requests accepted (each PSN once)
    duplicates: int = 0
    out_of_order: int = 0  # accepted past a hole
    trimmed: int = 0
    ce_received: int = 0
    pdcs_opened: int = 0
    pdcs_accepted: int = 0
    pdcs_closed: int = 0
    pdcs_failed: int = 0
    controls_sent: dict[str, int] = field(default_factory=dict)  # by control type name
    controls_received: dict[str, int] = field(default_factory=dict)
    rudi_responses_sent: int = 0
    ses_responses_sent: int = 0  # SES responses carrying an error (a return code not OK)
    rudi_responses_received: int = 0
    uud_lost: int = 0  # UUD requests trimmed at the target (a dropped one is never seen)


def ahead(a: int, b: int) -> int:
    """How far PSN ``a`` is past ``b`` (32-bit serial arithmetic; negative when before)."""
    d = (a - b) & PSN_MASK
    return d - (1 << 32) if d >= _HALF else d


@dataclass(eq=False)
class Sent:
    """A request sent and not yet acknowledged: what to send again."""

    fields: dict[str, Any]
    payload: Any  # bytes, or where they lie (``ses.Piece``: ``payload.data()`` reads them)
    token: Any
    sent_at: int = 0
    sends: int = 0
    why: str = ""  # what queued it to be sent again: nack, sack or timeout (``_queue``)


class Pdc:
    """One end of a PDC: its sending half (PSNs it sends) and its receiving half (PSNs its
    peer sends)."""

    __slots__ = ("id", "peer", "peer_id", "mode", "initiator", "state", "start_psn", "next_psn",
                 "cack", "syn", "sent", "fresh", "resend", "resend_set", "rack", "backoff",
                 "close_wanted", "holds", "close_psn", "go_back_at", "rx_cack", "rx_above",
                 "rx_close", "unacked", "ack_at", "ack_psn", "rx_ce", "rx_bytes", "rx_ooo",
                 "ack_psn_at", "rx_cleared", "rx_held")

    def __init__(self, pdc_id: int, peer: str, mode: int, initiator: bool,
                 start_psn: int) -> None:
        self.id = pdc_id
        self.peer = peer
        self.peer_id: int | None = None
        self.mode = mode
        self.initiator = initiator
        self.state = IDLE if initiator else ESTABLISHED
        # sending half
        self.start_psn = start_psn
        self.next_psn = start_psn
        self.cack = (start_psn - 1) & PSN_MASK  # the peer's cumulative ACK
        self.syn = initiator
        self.sent: dict[int, Sent] = {}
        self.fresh: deque[tuple[dict[str, Any], bytes, Any]] = deque()
        self.resend: deque[int] = deque()
        self.resend_set: set[int] = set()
        self.rack = Rack()
        self.backoff = 0
        self.close_wanted = False
        self.holds = 0  # what the layer above still awaits on this PDC (READ responses)
        self.close_psn: int | None = None
        self.go_back_at: dict[int, int] = {}  # ROD: PSN -> when a go-back last resent it
        # receiving half
        self.rx_cack = (start_psn - 1) & PSN_MASK
        self.rx_above: set[int] = set()
        self.rx_close: int | None = None
        self.rx_cleared: int | None = None  # the clear PSN of the peer's last clear command
        # PSNs the SES refused: (request, payload bytes, CE) until their answer is acknowledged
        self.rx_held: dict[int, tuple[dict[str, Any], int, bool]] = {}
        self.unacked = 0
        self.ack_at: int | None = None
        self.ack_psn = self.rx_cack
        self.rx_ce = False
        self.rx_bytes = 0
        self.rx_ooo = 0
        self.ack_psn_at = 0  # when the packet that the next ACK names arrived

    def move(self, event: str) -> None:
        nxt = TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise RuntimeError(f"PDC {self.id}: no transition from {self.state} on {event}")
        self.state = nxt

    @property
    def idle(self) -> bool:
        """Nothing queued, in flight or to close."""
        return not self.fresh and not self.sent and not self.resend

    def rto_deadline(self, rto_ns: int) -> int | None:
        """When the ``rto`` timer expires: the oldest sending not queued to be sent again
        (one queued waits for its turn on the wire, and its timer starts when it goes; else
        expiries would follow each other at once, doubling the timeout with nothing
        resent)."""
        queued = self.resend_set
        if not queued:  # the oldest sending of all
            for sent_at, _n in self.rack.sent.values():
                return sent_at + (rto_ns << self.backoff)
            return None
        for psn, (sent_at, _n) in self.rack.sent.items():  # send order: oldest first
            if psn not in queued:
                return sent_at + (rto_ns << self.backoff)
        return None


@dataclass(frozen=True)
class _Held:
    """The token of an SES error response: the refused PSN it releases once acknowledged."""

    psn: int


def ses_response(f: dict[str, Any], rc: int, n: int) -> dict[str, Any]:
    """The SES response (next header RSP, opcode RESPONSE) to request ``f``, return code
    ``rc``, ``n`` bytes modified."""
    mid = f.get("uet.ses.std.message_id", f.get("uet.ses.rsp.read_req_message_id", 0))
    return {"uet.pds.nh": t.NH_RSP, "uet.ses.rsp.opcode": t.RSP_RESPONSE,
            "uet.ses.rsp.return_code": rc, "uet.ses.rsp.message_id": mid,
            "uet.ses.rsp.job_id": f.get("uet.ses.std.job_id", f.get("uet.ses.rsp.job_id", 0)),
            "uet.ses.rsp.mod_length": n}


@dataclass
class Out:
    """A packet to put on the wire: to ``dst`` on ``pdc`` (None: a NACK without a PDC)."""

    dst: str
    fields: dict[str, Any]
    payload: Any  # bytes, or a request's data as a view of memory: framed as it is pulled
    pdc: Pdc | None


class Pds:
    """The PDCs of one host at ``ip``; ``rng`` draws the initiators' start PSNs."""

    __slots__ = ("ip", "config", "upper", "rng", "pdcs", "by_peer", "next_id", "ctrl", "rr",
                 "counters", "on_change", "cm", "on_acked_psns", "next_pkt_id", "by_pkt",
                 "peers", "armed")

    def __init__(self, ip: str, config: PdsConfig, upper: Upper, rng: random.Random) -> None:
        config.check()
        self.ip = ip
        self.config = config
        self.upper = upper
        self.rng = rng
        self.pdcs: dict[int, Pdc] = {}
        self.by_peer: dict[tuple[str, int], Pdc] = {}
        self.next_id = 1
        self.ctrl: deque[Out] = deque()
        self.rr: deque[Pdc] = deque()  # PDCs that may have requests to send, round robin
        self.counters = Counters()
        self.on_change: Callable[[], None] | None = None  # the driver's: work or a timer
        # congestion management (roce.emu.uet.congestion.Congestion); None: PSN windows alone
        self.cm: Any = None
        # REPS (roce.emu.uet.reps): told which PSNs each ACK acknowledged, and how marked
        self.on_acked_psns: Callable[[Pdc, list[int], bool], None] | None = None
        # RUDI and UUD: the host's packet IDs, the RUDI packets awaiting a response (ID ->
        # the context that sent it), and the context of each peer's requests
        self.next_pkt_id: int | None = None  # drawn by the first RUDI or UUD request
        self.by_pkt: dict[int, Pdc] = {}
        self.peers: dict[tuple[str, int], Pdc] = {}
        # a timer may have come forward (``deadline()`` may be earlier) since the driver last
        # cleared this: set by a send that arms an ``rto`` timer, a request that arms the
        # ``ack`` timer, and any packet received other than a request.  Nothing else that
        # ``pull`` or a request received does can bring the deadline forward (every other
        # change disarms a timer or moves it later), so a driver re-reads ``deadline()``
        # after those only when this is set (``UetHost.changed``).
        self.armed = False

    # -- the API of the layer above -----------------------------------------------------------

    def open(self, peer: str, mode: int | None = None) -> Pdc:
        """A new initiator PDC to ``peer`` (no packet yet: the first request carries SYN).
        Its start PSN is random, at least 2^16 and below 2^31 (as the reference provider
        draws it)."""
        pdc_id = self._new_id()
        start = self.rng.randrange(1 << 16, 1 << 31)
        mode = self.config.mode if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"PDC mode {mode}: one of {MODES}")
        pdc = Pdc(pdc_id, peer, mode, True, start)
        self.pdcs[pdc_id] = pdc
        self.counters.pdcs_opened += 1
        return pdc

    def submit(self, pdc: Pdc, fields: dict[str, Any], payload: bytes, token: Any) -> None:
        """Queue one request (its SES fields; the PDS adds its own when it sends it)."""
        self.submit_all(pdc, [(fields, payload, token)])

    def submit_all(self, pdc: Pdc, requests: list[tuple[dict[str, Any], Any, Any]]) -> None:
        """Queue requests (fields, payload, token), in order: a message's packets at once."""
        # after ``close``, only what the layer above still holds the PDC for (``holds``)
        if pdc.state in (CLOSING, CLOSED, FAILED) or (pdc.close_wanted and not pdc.holds):
            raise RuntimeError(f"PDC {pdc.id} is {pdc.state}: no more requests")
        pdc.fresh.extend(requests)
        self._ready(pdc)

    def close(self, pdc: Pdc) -> None:
        """Close ``pdc`` once everything it sent is acknowledged and the layer above holds
        it no more (an initiator's)."""
        if pdc.state == IDLE and pdc.idle and not pdc.holds:
            pdc.move("close")
            self._forget(pdc)
            return
        if pdc.mode in CONNECTIONLESS and pdc.idle and not pdc.holds:
            self._release(pdc)
            return
        pdc.close_wanted = True
        self._ready(pdc)

    def clear(self, pdc: Pdc) -> None:
        """Send a clear command on ``pdc`` (an initiator's, established): its clear PSN is
        the cumulative ACK PSN when it leaves."""
        self._control(pdc, CTRL_CLEAR)

    def request_close(self, pdc: Pdc) -> None:
        """Ask the initiator of ``pdc`` (a target's) to close it."""
        self._control(pdc, CTRL_CLOSE_REQ)

    def request_clear(self, pdc: Pdc) -> None:
        """Ask the initiator of ``pdc`` (a target's) for a clear command."""
        self._control(pdc, CTRL_CLEAR_REQ)

    def _control(self, pdc: Pdc, ctl: int) -> None:
        sender = CONTROLS[ctl][1]
        if (sender == "initiator") != pdc.initiator or pdc.mode in CONNECTIONLESS:
            raise RuntimeError(f"PDC {pdc.id}: {t.CTRL_TYPES[ctl][0]} is the {sender}'s, on "
                               "a PDC (RUD or ROD)")
        if pdc.state != ESTABLISHED or pdc.close_wanted or pdc.peer_id is None:
            raise RuntimeError(f"PDC {pdc.id} is {pdc.state}: no {t.CTRL_TYPES[ctl][0]}")
        pdc.fresh.append(({"uet.pds.type": t.CTRL, "uet.pds.ctl_type": ctl,
                           "uet.pds.ctrl_payload": 0}, b"", None))
        self._ready(pdc)

    # -- the driver's API ----------------------------------------------------------------------

    def pending(self) -> bool:
        """Whether ``pull`` has a packet now."""
        if self.ctrl:
            return True
        for pdc in self.rr:
            if self._sendable(pdc):
                return True
        return False

    def pull(self, now: int) -> Out | None:
        """The next packet to send: ACKs and NACKs first, then the PDCs' requests round
        robin (retransmissions first within a PDC)."""
        if self.ctrl:
            return self.ctrl.popleft()
        rr = self.rr
        for _ in range(len(rr)):
            pdc = rr[0]
            rr.rotate(-1)
            out = self._next_request(pdc, now)
            if out is not None:
                return out
        # every PDC in the ring had nothing: keep only those with work in flight (the ring
        # is left as it is when that is every one of them, as it mostly is: a window full)
        for pdc in rr:
            if pdc.state in (CLOSED, FAILED) or (pdc.idle and not pdc.close_wanted):
                self.rr = deque([p for p in rr if p.state not in (CLOSED, FAILED)
                                 and (not p.idle or p.close_wanted)])
                break
        return None

    def deadline(self) -> int | None:
        """The earliest of the named timers of every PDC (None: none armed)."""
        best: int | None = None
        rto = self.config.rto_ns
        for pdc in self.pdcs.values():
            d = pdc.ack_at
            if d is not None and (best is None or d < best):
                best = d
            if pdc.state in (CLOSED, FAILED):
                continue  # its sending half is over: only an ACK may be due
            d = pdc.rack.deadline
            if d is not None and (best is None or d < best):
                best = d
            d = pdc.rto_deadline(rto)
            if d is not None and (best is None or d < best):
                best = d
        return best

    def timers(self, pdc: Pdc) -> dict[str, int]:
        """The named timers armed on ``pdc`` (name -> deadline)."""
        out = {"ack": pdc.ack_at, "reorder": pdc.rack.deadline,
               "rto": pdc.rto_deadline(self.config.rto_ns)}
        return {k: v for k, v in out.items() if v is not None}

    def on_timer(self, now: int) -> None:
        for pdc in list(self.pdcs.values()):
            if pdc.ack_at is not None and pdc.ack_at <= now:
                self._send_ack(pdc, now)
            if pdc.state in (CLOSED, FAILED):
                continue
            if pdc.rack.deadline is not None and pdc.rack.deadline <= now:
                self._queue_lost(pdc, pdc.rack.lost(now, pdc.resend_set), "sack", now)
            rto = pdc.rto_deadline(self.config.rto_ns)
            if rto is not None and rto <= now:
                self._timeout(pdc, now)

    def receive(self, now: int, f: dict[str, Any], payload: bytes, src: str,
                ce: bool = False, trimmed: bool = False) -> None:
        """One decoded UET packet from ``src`` (``ce``: its IP header said Congestion
        Experienced; ``trimmed``: a switch cut it to its headers)."""
        typ = f.get("uet.pds.type")
        if typ in _REQUESTS or (typ == _CTRL and f.get("uet.pds.ctl_type") in CONTROLS):
            self._on_request(now, f, payload, src, ce, trimmed)
            return
        self.armed = True  # acknowledgements move every timer of a sending half
        if typ in CONNECTIONLESS:
            self._on_connectionless(now, f, payload, src, ce, trimmed)
        elif typ == _RUDI_RESP:
            self._on_rudi_response(now, f, src)
        elif typ in _ACKS:
            self._on_ack(now, f, src)
        elif typ in _NACKS:
            self._on_nack(now, f, src)

    # -- sending ----------------------------------------------------------------------------

    def _new_id(self) -> int:
        if len(self.pdcs) >= self.config.max_pdcs:
            raise RuntimeError(f"host {self.ip}: all {self.config.max_pdcs} PDC IDs in use")
        while self.next_id in self.pdcs or self.next_id == 0:
            self.next_id = (self.next_id + 1) & 0xFFFF
        pdc_id = self.next_id
        self.next_id = (self.next_id + 1) & 0xFFFF
        return pdc_id

    def _ready(self, pdc: Pdc) -> None:
        if pdc not in self.rr:
            self.rr.append(pdc)
        if self.on_change is not None:
            self.on_change()

    def _in_window(self, pdc: Pdc) -> bool:
        if pdc.mode in CONNECTIONLESS:
            return len(pdc.sent) < self.config.window
        return ahead(pdc.next_psn, pdc.cack) <= self.config.window

    def _sendable(self, pdc: Pdc) -> bool:
        if pdc.state in (CLOSED, FAILED):
            return False
        if pdc.resend:
            return True
        if not self._in_window(pdc):
            return False
        if pdc.fresh:
            return self._admits(pdc)
        return self._may_close(pdc)

    def _admits(self, pdc: Pdc) -> bool:
        """Congestion management lets the PDC's next fresh request go (``cm``)."""
        return self.cm is None or self.cm.admits(pdc, len(pdc.fresh[0][1]))

    @staticmethod
    def _may_close(pdc: Pdc) -> bool:
        return (pdc.close_wanted and pdc.close_psn is None and not pdc.sent and not pdc.fresh
                and not pdc.holds)

    def wake(self, pdc: Pdc) -> None:
        """The layer above stopped holding ``pdc`` (``Pdc.holds``): a close may go."""
        if pdc.close_wanted:
            self._ready(pdc)

    def _next_request(self, pdc: Pdc, now: int) -> Out | None:
        if pdc.state in (CLOSED, FAILED):
            return None
        while pdc.resend:
            psn = pdc.resend.popleft()
            pdc.resend_set.discard(psn)
            s = pdc.sent.get(psn)
            if s is not None:
                return self._transmit(pdc, psn, s, now, retx=True)
        if not self._in_window(pdc):
            return None
        if pdc.fresh and pdc.mode in CONNECTIONLESS:
            return self._connectionless(pdc, now)
        if pdc.fresh:
            if not self._admits(pdc):
                return None
            fields, payload, token = pdc.fresh.popleft()
            psn = pdc.next_psn
            pdc.next_psn = (psn + 1) & PSN_MASK
            s = pdc.sent[psn] = Sent(fields, payload, token)
            if pdc.state == IDLE:
                pdc.move("send")
            if fields.get("uet.pds.type") != _CTRL:
                self.counters.requests_sent += 1
            return self._transmit(pdc, psn, s, now, retx=False)
        if self._may_close(pdc) and pdc.mode in CONNECTIONLESS:
            self._release(pdc)
            return None
        if self._may_close(pdc):
            psn = pdc.close_psn = pdc.next_psn
            pdc.next_psn = (psn + 1) & PSN_MASK
            pdc.move("close")
            s = pdc.sent[psn] = Sent({"uet.pds.type": t.CTRL, "uet.pds.ctl_type": CTRL_CLOSE,
                                      "uet.pds.ctrl_payload": 0}, b"", None)
            return self._transmit(pdc, psn, s, now, retx=False)
        return None

    def _transmit(self, pdc: Pdc, psn: int, s: Sent, now: int, retx: bool) -> Out:
        f = dict(s.fields)
        ctrl = f.get("uet.pds.type") == _CTRL
        if pdc.mode in CONNECTIONLESS:
            f["uet.pds.type"] = pdc.mode
            f.pop("uet.pds.flags.ar", None)  # no such flag: every RUDI request is answered
            if pdc.mode == t.RUDI_REQ:
                f["uet.pds.rudi.pkt_id"] = psn
        elif not ctrl:
            f["uet.pds.type"] = pdc.mode
            f["uet.pds.flags.syn"] = pdc.syn
            if pdc.syn:
                f["uet.pds.psn_offset"] = ahead(psn, pdc.start_psn)
                self.counters.syn_sent += 1
            else:
                f["uet.pds.dpdcid"] = pdc.peer_id
            # the clear PSN: everything up to the cumulative ACK may be forgotten
            f["uet.pds.clear_psn_offset"] = ahead(pdc.cack, psn)
        else:
            f["uet.pds.dpdcid"] = pdc.peer_id or 0
            f["uet.pds.flags.ar"] = True
            ctl = f["uet.pds.ctl_type"]
            if ctl == CTRL_CLEAR:  # the clear PSN: what the peer acknowledged by now
                f["uet.pds.ctrl_payload"] = pdc.cack
            if not retx:
                name = t.CTRL_TYPES[ctl][0]
                c = self.counters.controls_sent
                c[name] = c.get(name, 0) + 1
        if pdc.mode not in CONNECTIONLESS:
            f["uet.pds.psn"] = psn
            f["uet.pds.spdcid"] = pdc.id
            f["uet.pds.flags.retx"] = retx
        s.sends += 1
        s.sent_at = now
        rack = pdc.rack
        # the rto timer is armed by this send only if every other PSN in flight is queued
        # to be sent again (``rto_deadline``): then no more of them are in flight than
        # queued (this one, if a retransmission, in flight and no longer queued)
        if len(rack.sent) - (psn in rack.sent) <= len(pdc.resend_set):
            self.armed = True
        rack.on_send(psn, now)
        if retx:  # counted as sent, by what queued it (a PSN queued may be acknowledged
            # before its turn, and is not sent again then)
            c = self.counters
            c.retransmitted += 1
            setattr(c, f"retx_{s.why}", getattr(c, f"retx_{s.why}") + 1)
        # read now, at each sending (``ses.Piece``): a packet in flight is held as where its
        # data lies, as a NIC re-reads host memory to resend, not as a copy; the frame is
        # built from it at once (the driver's ``pull``), so a view of it is all it needs
        p = s.payload
        data = p if type(p) is bytes else p.data() if hasattr(p, "data") else bytes(p)
        if self.cm is not None:
            self.cm.sent(pdc, psn, len(data), now, retx)
        return Out(pdc.peer, f, data, pdc)

    def _queue(self, pdc: Pdc, psns: Any, why: str, now: int = 0) -> int:
        queued = []
        for psn in psns:
            if psn in pdc.sent and psn not in pdc.resend_set:
                pdc.resend.append(psn)
                pdc.resend_set.add(psn)
                pdc.sent[psn].why = why
                queued.append(psn)
        n = len(queued)
        if n and self.cm is not None:
            self.cm.lost(pdc, queued, now)
        if n:
            self._ready(pdc)
        return n

    def _queue_lost(self, pdc: Pdc, psns: list[int], why: str, now: int = 0) -> None:
        self._queue(pdc, psns, why, now)

    def _timeout(self, pdc: Pdc, now: int) -> None:
        self.counters.timeouts += 1
        pdc.backoff += 1
        if pdc.backoff > self.config.max_retries:
            self._fail(pdc)
            return
        rto = self.config.rto_ns << (pdc.backoff - 1)
        late = [psn for psn, (sent_at, _n) in pdc.rack.sent.items() if sent_at + rto <= now]
        # the earliest PSN not acknowledged, once its own last sending is a timeout old: the
        # doubled timeout alone can pass over it for ever when it was resent after the
        # others (each expiry then resends only the oldest of them)
        first, gap = None, 0
        for psn in pdc.sent:
            d = ahead(psn, pdc.cack)
            if first is None or d < gap:
                first, gap = psn, d
        if first is not None and first not in late \
                and pdc.sent[first].sent_at + self.config.rto_ns <= now:
            late.insert(0, first)
        self._queue(pdc, late, "timeout", now)

    def _fail(self, pdc: Pdc) -> None:
        if pdc.mode in CONNECTIONLESS:  # nothing of it is on the wire: fail it locally
            pdc.state = FAILED
            for psn in pdc.sent:
                self.by_pkt.pop(psn, None)
        else:
            pdc.move("fail")
        self.counters.pdcs_failed += 1
        tokens = [s.token for s in pdc.sent.values()] + [tok for _f, _p, tok in pdc.fresh]
        pdc.sent.clear()
        pdc.fresh.clear()
        pdc.resend.clear()
        pdc.resend_set.clear()
        pdc.rack.forget()
        for tok in tokens:
            if tok is not None:
                self.upper.on_failed(pdc, tok)

    def _forget(self, pdc: Pdc) -> None:
        if pdc.initiator:
            self.pdcs.pop(pdc.id, None)

    # -- RUDI and UUD ------------------------------------------------------------------------

    def _connectionless(self, pdc: Pdc, now: int) -> Out:
        """The next fresh request of a RUDI or UUD context, under a new packet ID."""
        fields, payload, token = pdc.fresh.popleft()
        pid = self.next_pkt_id
        if pid is None:  # as a start PSN is drawn
            pid = self.rng.randrange(1 << 16, 1 << 31)
        self.next_pkt_id = (pid + 1) & PSN_MASK
        if pdc.state == IDLE:
            pdc.move("open")
        self.counters.requests_sent += 1
        s = Sent(fields, payload, token)
        if pdc.mode == t.UUD_REQ:  # sent once: done as it leaves
            out = self._transmit(pdc, pid, s, now, retx=False)
            pdc.rack.forget()
            if token is not None:
                self.upper.on_acked(pdc, token)
            return out
        pdc.sent[pid] = s
        self.by_pkt[pid] = pdc
        return self._transmit(pdc, pid, s, now, retx=False)

    def _release(self, pdc: Pdc) -> None:
        """A RUDI or UUD context with nothing left to send or await: closed, locally."""
        if pdc.state == IDLE:
            pdc.move("close")
        elif pdc.state == ESTABLISHED:
            pdc.move("release")
            self.counters.pdcs_closed += 1
        self._forget(pdc)

    def peer_context(self, src: str, mode: int) -> Pdc:
        """The context of ``src``'s RUDI or UUD requests here (made by the first)."""
        key = (src, mode)
        pdc = self.peers.get(key)
        if pdc is None:
            pdc = self.peers[key] = Pdc(self._new_id(), src, mode, False, 0)
            self.pdcs[pdc.id] = pdc
            self.counters.pdcs_accepted += 1
        return pdc

    def _on_connectionless(self, now: int, f: dict[str, Any], payload: bytes, src: str,
                           ce: bool, trimmed: bool) -> None:
        c = self.counters
        typ = f["uet.pds.type"]
        if ce:
            c.ce_received += 1
        if trimmed:
            c.trimmed += 1
            if typ == t.UUD_REQ:
                c.uud_lost += 1  # unreliable: nobody resends it
            else:
                self._nack(TRIMMED, {"uet.pds.psn": f["uet.pds.rudi.pkt_id"]}, src, None)
            return
        if len(self.pdcs) >= self.config.max_pdcs and (src, typ) not in self.peers:
            return  # no context left: a RUDI sender's timer resends it
        pdc = self.peer_context(src, typ)
        c.received += 1
        code = self.upper.on_request(pdc, f, payload)
        if typ == t.RUDI_REQ:
            ok = code is None or code == RC_OK
            r = {"uet.pds.type": t.RUDI_RESP, "uet.pds.rudi.pkt_id": f["uet.pds.rudi.pkt_id"],
                 **ses_response(f, RC_OK if ok else code, len(payload) if ok else 0)}
            if not ok:
                c.ses_responses_sent += 1
            c.rudi_responses_sent += 1
            self.ctrl.append(Out(src, r, b"", pdc))
            if self.on_change is not None:
                self.on_change()

    def _on_rudi_response(self, now: int, f: dict[str, Any], src: str) -> None:
        pid = f.get("uet.pds.rudi.pkt_id", 0)
        pdc = self.by_pkt.get(pid)
        if pdc is None or pdc.peer != src:
            return  # a duplicate's response, or a packet given up
        self.counters.rudi_responses_received += 1
        del self.by_pkt[pid]
        s = pdc.sent.pop(pid)
        pdc.resend_set.discard(pid)
        pdc.backoff = 0
        pdc.rack.on_ack([pid], now, {pid} if s.sends > 1 else set())
        code = f.get("uet.ses.rsp.return_code", RC_OK)
        if s.token is not None:
            if code != RC_OK:
                self.upper.on_error(pdc, s.token, code)
            self.upper.on_acked(pdc, s.token)
        self._queue_lost(pdc, pdc.rack.lost(now, pdc.resend_set), "sack", now)
        self._ready(pdc)

    # -- receiving requests --------------------------------------------------------------------

    def _nack(self, code: int, f: dict[str, Any], src: str, pdc: Pdc | None) -> None:
        c = self.counters
        name = t.NACK_CODES[code][0]
        c.nacks_sent[name] = c.nacks_sent.get(name, 0) + 1
        expected = (pdc.rx_cack + 1) & PSN_MASK if pdc is not None else 0
        nack = {"uet.pds.type": t.NACK, "uet.pds.nack.code": code,
                "uet.pds.nack.psn": f.get("uet.pds.psn", 0),
                "uet.pds.spdcid": pdc.id if pdc is not None else 0,
                "uet.pds.dpdcid": f.get("uet.pds.spdcid", 0),
                "uet.pds.nack.max_recv_psn_plus_1": expected}
        self.ctrl.append(Out(src, nack, b"", pdc))
        if self.on_change is not None:
            self.on_change()

    def _find(self, f: dict[str, Any], src: str, now: int) -> tuple[Pdc | None, int]:
        """The PDC a request belongs to, made from a SYN if new; or the NACK code."""
        typ = f["uet.pds.type"]
        if f.get("uet.pds.flags.syn"):
            key = (src, f["uet.pds.spdcid"])
            pdc = self.by_peer.get(key)
            if pdc is None:
                if len(self.pdcs) >= self.config.max_pdcs:
                    return None, NO_PDC_AVAIL
                start = f["uet.pds.start_psn"]
                pdc = Pdc(self._new_id(), src, typ, False, start)
                pdc.peer_id = f["uet.pds.spdcid"]
                self.pdcs[pdc.id] = pdc
                self.by_peer[key] = pdc
                self.counters.pdcs_accepted += 1
            elif pdc.mode != typ:
                return pdc, PDC_MODE_MISMATCH
            return pdc, 0
        pdc = self.pdcs.get(f.get("uet.pds.dpdcid", 0))
        if pdc is None:
            return None, INV_DPDCID
        if pdc.peer_id is None and pdc.initiator and pdc.peer == src:
            pdc.peer_id = f["uet.pds.spdcid"]  # the target's data came before its first ACK
        if pdc.peer != src or pdc.peer_id != f["uet.pds.spdcid"]:
            return None, PDC_HDR_MISMATCH
        if typ != _CTRL and pdc.mode != typ:
            return pdc, PDC_MODE_MISMATCH
        return pdc, 0

    def _on_request(self, now: int, f: dict[str, Any], payload: bytes, src: str, ce: bool,
                    trimmed: bool) -> None:
        c = self.counters
        pdc, code = self._find(f, src, now)
        if code:
            self._nack(code, f, src, pdc)
            return
        assert pdc is not None
        psn = f["uet.pds.psn"]
        d = ahead(psn, pdc.rx_cack)
        duplicate = d <= 0 or psn in pdc.rx_above
        if pdc.state == CLOSED and not duplicate:
            self._nack(NACK_CLOSING, f, src, pdc)
            return
        if trimmed:
            c.trimmed += 1
            self._nack(TRIMMED, f, src, pdc)
            return
        if duplicate:
            c.duplicates += 1
            pdc.ack_psn = psn
            pdc.ack_psn_at = now
            self._send_ack(pdc, now)
            return
        if psn in pdc.rx_held:  # refused by the SES: acknowledged once its answer is
            c.duplicates += 1
            return
        if d > self.config.window:
            self._nack(PSN_OOR_WINDOW, f, src, pdc)
            return
        if pdc.mode == _ROD_REQ and d != 1:
            self._nack(ROD_OOO, f, src, pdc)
            return
        if f["uet.pds.type"] != _CTRL:
            rc = self.upper.on_request(pdc, f, payload)
            if rc is not None and rc != RC_OK:
                self._hold(pdc, f, rc, len(payload), ce)
                return
        self._accept(now, pdc, f, len(payload), ce)

    def _hold(self, pdc: Pdc, f: dict[str, Any], rc: int, n: int, ce: bool) -> None:
        """The SES could not execute the request: answer with its SES response (return code
        ``rc``) as a request of this end, and acknowledge the refused PSN only once that
        answer is acknowledged, so that the initiator learns the error before its message
        could complete (whatever order the packets take)."""
        psn = f["uet.pds.psn"]
        pdc.rx_held[psn] = (f, n, ce)
        self.counters.ses_responses_sent += 1
        self.submit(pdc, {**ses_response(f, rc, 0), "uet.pds.flags.ar": True}, b"",
                    _Held(psn))

    def _accept(self, now: int, pdc: Pdc, f: dict[str, Any], n: int, ce: bool) -> None:
        """A request in the window, new and executed (a control packet: about to act):
        the receive state moves, and an ACK goes now or later (``ACK_NOW``)."""
        c = self.counters
        psn = f["uet.pds.psn"]
        d = ahead(psn, pdc.rx_cack)
        c.received += 1
        now_ack = bool(f.get("uet.pds.flags.ar"))
        if d == 1:
            pdc.rx_cack = psn
            above = pdc.rx_above
            if above:
                nxt = (psn + 1) & PSN_MASK
                while nxt in above:
                    above.discard(nxt)
                    pdc.rx_cack = nxt
                    nxt = (nxt + 1) & PSN_MASK
                    now_ack = True  # hole-filled
        else:
            pdc.rx_above.add(psn)
            pdc.rx_ooo += 1
            c.out_of_order += 1
            now_ack = True  # out-of-order
        if ce:
            pdc.rx_ce = True
            c.ce_received += 1
        pdc.rx_bytes += n
        cm = self.cm
        if cm is not None and cm.credit:  # only RCCC's receiver counts arrivals (grants)
            cm.arrived(pdc, now, n)
        pdc.unacked += 1
        pdc.ack_psn = psn
        pdc.ack_psn_at = now
        if f["uet.pds.type"] == _CTRL:
            self._on_control(pdc, f)
            now_ack = True
        if pdc.rx_close is not None and ahead(pdc.rx_cack, pdc.rx_close) >= 0 \
                and pdc.state != CLOSED:
            pdc.move("closed")  # close: every PSN before the close command arrived
            c.pdcs_closed += 1
            now_ack = True
        if now_ack or pdc.unacked >= self.config.ack_every:
            self._send_ack(pdc, now)
        elif pdc.ack_at is None:
            pdc.ack_at = now + self.config.ack_delay_ns
            self.armed = True
            if self.on_change is not None:
                self.on_change()

    def _on_control(self, pdc: Pdc, f: dict[str, Any]) -> None:
        """A control packet in sequence: what ``CONTROLS`` says its receiver does."""
        ctl = f["uet.pds.ctl_type"]
        name = t.CTRL_TYPES[ctl][0]
        c = self.counters.controls_received
        c[name] = c.get(name, 0) + 1
        action, sender = CONTROLS[ctl]
        if (sender == "initiator") == pdc.initiator:
            return  # sent by the wrong end: nothing to do (the ACK still answers it)
        if action == CLOSE_NOW:
            pdc.rx_close = f["uet.pds.psn"]
        elif action == CLOSE_SOON:
            if pdc.state not in (CLOSING, CLOSED, FAILED):
                self.close(pdc)
        elif action == CLEARED:
            pdc.rx_cleared = f.get("uet.pds.ctrl_payload", 0)
        elif action == CLEAR_SOON and pdc.state == ESTABLISHED and not pdc.close_wanted:
            self.clear(pdc)

    def _send_ack(self, pdc: Pdc, now: int) -> None:
        cack = pdc.rx_cack
        bitmap = 0
        base = (cack + 1) & PSN_MASK
        for psn in pdc.rx_above:
            i = ahead(psn, base)
            if 0 <= i < SACK_BITS:
                bitmap |= 1 << i
        ack_psn = pdc.ack_psn
        if not -0x8000 <= ahead(ack_psn, cack) <= 0x7FFF:
            ack_psn = cack  # the offset is 16 bits signed
        f = {"uet.pds.type": t.ACK_CC, "uet.pds.cack_psn": cack, "uet.pds.ack_psn": ack_psn,
             "uet.pds.spdcid": pdc.id, "uet.pds.dpdcid": pdc.peer_id or 0,
             "uet.pds.flags.m": pdc.rx_ce, "uet.pds.ack.cc_type": t.CC_NSCC,
             "uet.pds.ack.mpr": max(1, self.config.window // MPR_UNIT),
             "uet.pds.ack.sack_psn": base, "uet.pds.ack.sack_bitmap": bitmap,
             # NSCC state: the time the named packet waited here for this ACK, the bytes
             # received since the last ACK, the packets accepted out of order so far
             "uet.pds.ack.cc_state.service_time": min(now - pdc.ack_psn_at,
                                                      NSCC_SERVICE_MAX),
             "uet.pds.ack.cc_state.rcvd_bytes": min(pdc.rx_bytes, NSCC_BYTES_MAX),
             "uet.pds.ack.cc_state.ooo_count": min(pdc.rx_ooo, NSCC_OOO_MAX)}
        if self.cm is not None:
            credit = self.cm.ack_state(pdc, now)
            if credit is not None:  # RCCC: the credit CC state in place of NSCC's
                for k in ("uet.pds.ack.cc_state.service_time", "uet.pds.ack.cc_state.rcvd_bytes"):
                    del f[k]
                f.update(credit)
        pdc.unacked = 0
        pdc.ack_at = None
        pdc.rx_ce = False
        pdc.rx_bytes = 0
        self.counters.acks_sent += 1
        self.ctrl.append(Out(pdc.peer, f, b"", pdc))
        if self.on_change is not None:
            self.on_change()

    # -- receiving ACKs and NACKs -------------------------------------------------------------

    def _mine(self, f: dict[str, Any], src: str) -> Pdc | None:
        pdc = self.pdcs.get(f.get("uet.pds.dpdcid", 0))
        if pdc is None or pdc.peer != src:
            return None
        return pdc

    def _on_ack(self, now: int, f: dict[str, Any], src: str) -> None:
        pdc = self._mine(f, src)
        if pdc is None or pdc.state in (IDLE, CLOSED, FAILED):
            return
        c = self.counters
        c.acks_received += 1
        if f.get("uet.pds.flags.m"):
            c.ecn_acks += 1
        if pdc.peer_id is None or pdc.syn:
            pdc.peer_id = f["uet.pds.spdcid"]
            pdc.syn = False
        pdc.move("ack")
        rtt = self._rtt_sample(pdc, now, f)
        cack = f["uet.pds.cack_psn"]
        newly: list[int] = []
        sent = pdc.sent
        n = ahead(cack, pdc.cack)
        if 0 < n and ahead(cack, pdc.next_psn) < 0:
            psn = pdc.cack
            for _ in range(n):
                psn = (psn + 1) & PSN_MASK
                if psn in sent:
                    newly.append(psn)
            pdc.cack = cack
        bitmap = f.get("uet.pds.ack.sack_bitmap") or 0
        if bitmap:
            base = f["uet.pds.ack.sack_psn"]
            while bitmap:
                low = bitmap & -bitmap
                psn = (base + low.bit_length() - 1) & PSN_MASK
                if psn in sent and ahead(psn, pdc.cack) > 0:
                    newly.append(psn)
                bitmap ^= low
        if self.cm is not None:
            self.cm.acked(pdc, now, newly, rtt, f)
        if self.on_acked_psns is not None and newly:
            self.on_acked_psns(pdc, newly, bool(f.get("uet.pds.flags.m")))
        if newly:
            pdc.backoff = 0
            resent = {psn for psn in newly if sent[psn].sends > 1}
            pdc.rack.on_ack(newly, now, resent)
            for psn in newly:
                s = sent.pop(psn)
                if psn in pdc.resend_set:
                    pdc.resend_set.discard(psn)
                if isinstance(s.token, _Held):  # the answer arrived: the refused PSN too
                    f0, n0, ce0 = pdc.rx_held.pop(s.token.psn)
                    self._accept(now, pdc, f0, n0, ce0)
                elif s.token is not None:
                    self.upper.on_acked(pdc, s.token)
        if pdc.close_psn is not None and ahead(pdc.cack, pdc.close_psn) >= 0:
            pdc.move("closed")
            c.pdcs_closed += 1
            pdc.sent.clear()
            pdc.resend.clear()
            self._forget(pdc)
            return
        if pdc.resend:
            pdc.resend = deque(p for p in pdc.resend if p in pdc.resend_set)
        self._queue_lost(pdc, pdc.rack.lost(now, pdc.resend_set), "sack", now)
        self._ready(pdc)

    @staticmethod
    def _rtt_sample(pdc: Pdc, now: int, f: dict[str, Any]) -> int | None:
        """The round trip of the packet an ACK_CC names, less the service time the receiver
        reports: None if it was acknowledged before or sent more than once (ambiguous)."""
        s = pdc.sent.get(f.get("uet.pds.ack_psn", -1))
        if s is None or s.sends != 1:
            return None
        return max(now - s.sent_at - f.get("uet.pds.ack.cc_state.service_time", 0), 0)

    def _on_nack(self, now: int, f: dict[str, Any], src: str) -> None:
        pdc = self._mine(f, src)
        if not f.get("uet.pds.dpdcid"):  # a RUDI packet's NACK names its packet ID
            rudi = self.by_pkt.get(f.get("uet.pds.nack.psn", 0))
            if rudi is not None and rudi.peer == src:
                pdc = rudi
        if pdc is None or pdc.state in (CLOSED, FAILED):
            return
        c = self.counters
        code = f.get("uet.pds.nack.code", 0)
        name = t.NACK_CODES.get(code, (f"0x{code:02x}", ""))[0]
        c.nacks_received[name] = c.nacks_received.get(name, 0) + 1
        action = NACK_ACTIONS.get(code)
        psn = f.get("uet.pds.nack.psn", 0)
        if action == RETRANSMIT:
            self._queue(pdc, (psn,), "nack", now)
            if code in (TRIMMED, 0x02, 0x03) and self.on_acked_psns is not None:
                self.on_acked_psns(pdc, [psn], True)  # a trimmed packet's path was full
        elif action == GO_BACK:
            expected = f.get("uet.pds.nack.max_recv_psn_plus_1", psn)
            s = pdc.sent.get(psn)
            first = pdc.sent.get(expected)
            # one go-back per hole: not again while the expected PSN's resend, sent after
            # the NACKed packet, is in flight
            if s is not None and first is not None and first.sent_at <= s.sent_at:
                n = ahead(pdc.next_psn, expected)
                self._queue(pdc, ((expected + i) & PSN_MASK for i in range(max(n, 0))),
                            "nack", now)
        elif action == FAIL:
            self._fail(pdc)
        # RETRY_LATER and unknown codes: the rto timer resends


__all__ = ["ACK_NOW", "CLOSED", "CLOSING", "ESTABLISHED", "FAILED", "IDLE", "NACK_ACTIONS",
           "RECEIVE_CHECKS", "SYN_SENT", "TRANSITIONS", "Counters", "Out", "Pdc", "Pds",
           "PdsConfig", "Upper", "ahead"]
