"""RCCC, Ultra Ethernet's receiver credit congestion control: the receiver grants credit, the
sender transmits new data only within the credit it holds (UE specification 1.0: the
receiver-credit congestion control beside NSCC, its grant carried in the ACK_CC's credit CC
state, cc_type 1, as the UET family's codec reads it).  The specification's credit
algorithm itself is not in the sources we read: the grant rule below is ours, and
docs/congestion-control.md says so beside every knob.

Credit counts payload bytes of first transmissions; a retransmission spends none (the
credit of a lost packet is still outstanding at the receiver until the packet arrives).

- **Receiver** (``Grants``, one per host, every PDC it receives on): its credit pool is
  ``rccc_pool`` x BDP of its link (line rate x ``rccc_base_rtt``).  A PDC is active while it
  sent data in the last ``rccc_idle_rtts`` base RTTs.  A PDC's outstanding credit is what it
  was granted (its start credit included) less the new data that arrived; each ACK_CC to it
  raises its grant towards an equal share of the pool, pool / active PDCs, never beyond the
  pool's total outstanding: grant += max(0, min(share - outstanding, pool - all
  outstanding)).  The ACK carries the PDC's cumulative grant modulo 2^24 (the credit field is
  24 bits; a lost ACK loses nothing, the next one carries the total).
- **Sender** (``Rccc``, per PDC): starts with ``rccc_initial_credit`` x BDP, adds what each
  ACK_CC's cumulative credit grew by, and sends a new packet only when its credit covers it
  or nothing of the PDC is in flight (so a PDC whose grants all went to others asks again
  with one packet rather than wait forever).

The bound this gives an N-to-1 incast's bottleneck queue: at most N x (initial credit +
one packet) + pool - what the link drains in a base RTT (tests/test_cc_rccc.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.params import Param
from roce.errors import UsageError

_new = tuple.__new__
_US = 1_000
CREDIT_MOD = 1 << 24  # the ACK_CC credit field's width

PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("rccc_base_rtt", "us", "the network's base RTT: the BDP the pool and start credit "
          "are counted in", 0.01, 10_000_000, False),
    Param("rccc_pool", "BDPs", "credit a receiver has outstanding at most, all PDCs "
          "together", 0.01, 100, False),
    Param("rccc_initial_credit", "BDPs", "credit a PDC starts with, before any grant", 0,
          100, False),
    Param("rccc_idle_rtts", "base RTTs", "a PDC silent this long no longer shares the pool",
          0.1, 1_000, False),
)}

PROFILES: dict[str, dict[str, Any]] = {
    # ours (module docstring): one BDP of credit in flight per receiver keeps its link busy
    # with no standing queue; a quarter BDP of start credit lets a PDC send in its first RTT;
    # 8 us: the round trip of a leaf-spine path at the emulator's default 1 us per link
    "default": {"rccc_base_rtt": 8, "rccc_pool": 1.0, "rccc_initial_credit": 0.25,
                "rccc_idle_rtts": 4},
}


def _bdp(params: Mapping[str, Any], line_rate_bps: float) -> float:
    return line_rate_bps / 8 * params["rccc_base_rtt"] * _US / 1e9


class Rccc(CongestionControl):
    """The sending half of one PDC under receiver credit (module docstring)."""

    name = "rccc"
    summary = "UET: receiver credit"
    PARAMS = PARAMS
    PROFILES = PROFILES
    protocol = "uet"

    __slots__ = ("credit", "spent", "last_field", "grants")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        for k in PARAMS:
            if k not in self.params:
                raise UsageError(f"--cc rccc: parameter {k} missing")
        self.credit = int(self.params["rccc_initial_credit"] * _bdp(self.params,
                                                                     line_rate_bps))
        self.spent = 0
        self.last_field: int | None = None  # the last cumulative grant an ACK carried
        self.grants = 0  # ACKs that raised the credit

    def balance(self) -> int:
        """Bytes of new data the PDC may still send."""
        return self.credit - self.spent

    def on_credit(self, now: int, field: int) -> Output:
        """An ACK_CC's credit field (the receiver's cumulative grant modulo 2^24)."""
        last = self.last_field
        if last is None:
            grown = field  # the receiver's total so far, its start credit not included
        else:
            grown = (field - last) % CREDIT_MOD
            if grown >= CREDIT_MOD // 2:
                grown = 0  # an older ACK overtaken by a newer one: nothing new
        if last is None or grown:
            self.last_field = field
        if grown:
            self.credit += grown
            self.grants += 1
        return self.output()

    def on_sent(self, now: int, nbytes: int) -> Output:
        self.spent += nbytes
        return self.output()


class Grants:
    """The receiving host's credit: every PDC's grant (module docstring)."""

    __slots__ = ("pool", "initial", "idle_ns", "granted", "received", "last_seen")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float) -> None:
        bdp = _bdp(params, line_rate_bps)
        self.pool = int(params["rccc_pool"] * bdp)
        self.initial = int(params["rccc_initial_credit"] * bdp)
        self.idle_ns = int(params["rccc_idle_rtts"] * params["rccc_base_rtt"] * _US)
        self.granted: dict[Any, int] = {}  # PDC -> its grants beyond its start credit
        self.received: dict[Any, int] = {}  # PDC -> new payload bytes that arrived
        self.last_seen: dict[Any, int] = {}  # PDC -> when its last data arrived

    def outstanding(self, key: Any) -> int:
        return max(self.initial + self.granted.get(key, 0) - self.received.get(key, 0), 0)

    def arrived(self, key: Any, now: int, nbytes: int) -> None:
        """New data of PDC ``key`` (each PSN once)."""
        self.received[key] = self.received.get(key, 0) + nbytes
        self.last_seen[key] = now

    def grant(self, key: Any, now: int) -> int:
        """Raise PDC ``key``'s grant for the ACK about to go: its cumulative grant modulo
        2^24, for the ACK's credit field."""
        active = [k for k, t in self.last_seen.items() if now - t <= self.idle_ns]
        for k in [k for k in self.last_seen if k not in active and k != key]:
            del self.last_seen[k]  # silent: no longer shares the pool (its counts stay)
        share = self.pool // max(len(active), 1)
        total = sum(self.outstanding(k) for k in active)
        mine = self.outstanding(key)
        more = max(0, min(share - mine, self.pool - total))
        g = self.granted[key] = self.granted.get(key, 0) + more
        return g % CREDIT_MOD

    def forget(self, key: Any) -> None:
        """PDC ``key`` closed."""
        for d in (self.granted, self.received, self.last_seen):
            d.pop(key, None)
