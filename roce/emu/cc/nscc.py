"""NSCC, Ultra Ethernet's network-signal congestion control: a sender window, in bytes, driven
by ECN marks and the measured queueing delay (UE specification 1.0.3, section 3.6.13.3 and its
NSCC parameter table, Table 3-82; uet-htsim, UEC's congestion-management simulator,
``uec.cpp``; docs/congestion-control.md has every rule, knob and source).

Per PDC (the sending half), with ``cwnd`` the bytes it may have in flight:

- **base RTT and its scalings.**  The base RTT is ``nscc_base_rtt``, or when that is 0 the
  least RTT measured on the PDC (each sample is the round trip of the packet an ACK_CC names,
  less the receiver's service time that ACK reports; 12 us, the specification's reference
  RTT, until the first sample).  BDP = line rate x base RTT; a = BDP / (100 Gb/s x 12 us),
  b = target / 12 us; target = ``nscc_target_qdelay`` x base RTT (0.75 where switches trim, 1
  where they drop); MaxWnd = ``nscc_max_window`` x BDP, the window's ceiling and its start.
  alpha = ``nscc_alpha`` x MTU x a x b / target, fi = ``nscc_fi`` x MTU x a, eta =
  ``nscc_eta`` x MTU x a.
- **Per ACK_CC** (delay = the sample less the base RTT, the queueing delay; avg_delay its
  EWMA of weight ``nscc_delay_ewma`` per packet acknowledged), the four quadrants:
  no ECN, delay < target: proportional increase, inc += alpha x acked x (target - delay);
  no ECN, delay >= target: fair increase, inc += fi x acked;
  ECN, delay >= target: multiplicative decrease, cwnd x= max(1 - gamma x (avg_delay -
  target) / avg_delay, ``nscc_max_md_jump``), at most once per base RTT;
  ECN, delay < target: no change (the mark is a path's, not the PDC's: REPS takes another
  entropy, roce/emu/uet/reps.py).
- **Adjustment.**  The increases accumulated in ``inc`` are applied, cwnd += inc / cwnd +
  eta, once ``nscc_adjust_bytes`` MTUs were acknowledged since the last adjustment or
  ``nscc_adjust_period`` base RTTs passed.
- **Quick adapt.**  A loss (a trimmed packet's NACK, a SACK gap, a timeout), or a delay above
  ``nscc_qa_threshold`` x target when that is not 0, arms it; at the end of each base-RTT
  period in which it was armed, if the bytes acknowledged in that period are below MaxWnd /
  2^``nscc_qa_gate``, cwnd becomes those bytes (what the path delivered) and the pending
  increases are dropped.
- cwnd stays within [MTU, MaxWnd].

Not modelled: the specification's fast increase (``fi_scale``, after a run of ACKs with no
queueing delay), and the receiver's cwnd-penalty and restore-cwnd bits (the ACK_CC carries
them as 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.params import Param
from roce.errors import UsageError

_new = tuple.__new__
_US = 1_000
REF_RTT_NS = 12_000  # the specification's reference RTT for the scalings (12 us)
REF_RATE_BPS = 100e9  # and its reference rate (100 Gb/s): a = BDP / 150 000 bytes
DEFAULT_MTU = 4096  # until the PDS tells the algorithm its MTU (``mtu``)

PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("nscc_base_rtt", "us", "the network's base RTT (0: the least RTT measured)", 0,
          10_000_000, False),
    Param("nscc_target_qdelay", "base RTTs", "queueing delay from which an ACK counts as "
          "congested", 0.01, 100, False),
    Param("nscc_max_window", "BDPs", "MaxWnd: the window's ceiling and its start", 0.01, 100,
          False),
    Param("nscc_gamma", "factor", "multiplicative decrease per unit of relative excess "
          "delay", 0, 1, False),
    Param("nscc_max_md_jump", "factor", "the smallest factor one decrease leaves", 0, 1,
          False),
    Param("nscc_alpha", "MTU x a x b / target", "proportional increase gain", 0, 1_000,
          False),
    Param("nscc_fi", "MTU x a", "fair increase per window of ACKs", 0, 1_000, False),
    Param("nscc_eta", "MTU x a", "additive increase per adjustment", 0, 1_000, False),
    Param("nscc_adjust_bytes", "MTUs", "bytes acknowledged between adjustments", 1,
          1_000_000),
    Param("nscc_adjust_period", "base RTTs", "the longest time between adjustments", 0.01,
          1_000, False),
    Param("nscc_qa_gate", "power of 2", "quick adapt acts when the bytes acknowledged in a "
          "base RTT are below MaxWnd / 2^gate", 0, 63),
    Param("nscc_qa_threshold", "targets", "queueing delay that arms quick adapt (0: only "
          "losses do)", 0, 1_000, False),
    Param("nscc_delay_ewma", "weight", "weight of a new delay sample in avg_delay", 0.0001,
          1, False),
)}

_COMMON: dict[str, Any] = {
    "nscc_base_rtt": 0, "nscc_max_window": 1.5, "nscc_gamma": 0.8, "nscc_max_md_jump": 0.5,
    "nscc_alpha": 4.0, "nscc_fi": 5.0, "nscc_eta": 0.15, "nscc_adjust_bytes": 8,
    "nscc_adjust_period": 1.0, "nscc_qa_gate": 3, "nscc_delay_ewma": 0.0125}
PROFILES: dict[str, dict[str, Any]] = {
    # UE specification 1.0.3 Table 3-82 and section 3.6.13.3, uet-htsim's defaults: with
    # trimming switches, the target is 0.75 base RTT and only losses (trims) quick-adapt
    "trim": {**_COMMON, "nscc_target_qdelay": 0.75, "nscc_qa_threshold": 0},
    # without trimming: a target of one base RTT, and quick adapt above 4 targets of delay
    "drop": {**_COMMON, "nscc_target_qdelay": 1.0, "nscc_qa_threshold": 4},
}


class Nscc(CongestionControl):
    """NSCC's window of one PDC (rules in the module docstring)."""

    name = "nscc"
    summary = "UET: ECN and delay, window"
    PARAMS = PARAMS
    PROFILES = PROFILES
    protocol = "uet"

    __slots__ = ("mtu", "fixed_rtt", "base_rtt", "target", "max_wnd", "alpha", "fi", "eta",
                 "cwnd", "inc", "avg_delay", "delay", "last_md", "last_adjust",
                 "adjust_acked", "qa_end", "qa_armed", "qa_acked", "decreases",
                 "quick_adapts")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        p = self.params
        for k in PARAMS:
            if k not in p:
                raise UsageError(f"--cc nscc: parameter {k} missing")
        self.mtu = DEFAULT_MTU
        self.fixed_rtt = int(p["nscc_base_rtt"] * _US)
        self.base_rtt = self.fixed_rtt or REF_RTT_NS
        self.target = self.max_wnd = self.alpha = self.fi = self.eta = 0.0
        self._scale()
        self.cwnd = self.max_wnd
        self.window = self._packets()
        self.inc = 0.0  # increases accumulated since the last adjustment (bytes x bytes)
        self.avg_delay = 0.0
        self.delay: int | None = None  # the latest queueing delay (ns)
        self.last_md: int | None = None
        self.last_adjust = now
        self.adjust_acked = 0
        self.qa_end = now + self.base_rtt
        self.qa_armed = False
        self.qa_acked = 0
        self.decreases = 0
        self.quick_adapts = 0

    # -- the scalings ----------------------------------------------------------------------

    def set_mtu(self, mtu: int) -> None:
        """The PDC's payload per packet (the PDS's MTU): the unit of fi, eta, alpha."""
        if mtu > 0 and mtu != self.mtu:
            self.mtu = mtu
            self._scale()
            self.cwnd = min(max(self.cwnd, float(mtu)), self.max_wnd)
            self.window = self._packets()

    def _scale(self) -> None:
        p = self.params
        rtt = self.base_rtt
        bdp = self.line_rate / 8 * rtt / 1e9
        a = bdp / (REF_RATE_BPS / 8 * REF_RTT_NS / 1e9)
        self.target = p["nscc_target_qdelay"] * rtt
        b = self.target / REF_RTT_NS
        self.max_wnd = max(p["nscc_max_window"] * bdp, float(self.mtu))
        self.alpha = p["nscc_alpha"] * self.mtu * a * b / self.target
        self.fi = p["nscc_fi"] * self.mtu * a
        self.eta = p["nscc_eta"] * self.mtu * a

    def _packets(self) -> int:
        return max(1, int(self.cwnd // self.mtu))

    def output(self) -> Output:
        return _new(Output, (self.rate, self.window, None))

    # -- events ------------------------------------------------------------------------------

    def on_ack_cc(self, now: int, rtt_ns: int | None, acked_bytes: int, marked: bool
                  ) -> Output:
        p = self.params
        if rtt_ns is not None:
            if not self.fixed_rtt and (self.delay is None or rtt_ns < self.base_rtt):
                self.base_rtt = max(rtt_ns, 1)  # the first sample, or a smaller one
                self._scale()
            delay = max(rtt_ns - self.base_rtt, 0)
            self.delay = delay
            # the weight is per packet (uet-htsim acknowledges each one): an ACK_CC for n
            # packets moves the average as n samples of this delay would
            n = max(acked_bytes / self.mtu, 1.0)
            w = 1 - (1 - p["nscc_delay_ewma"]) ** n
            self.avg_delay += w * (delay - self.avg_delay)
        delay = self.delay if self.delay is not None else 0
        target = self.target
        self.qa_acked += acked_bytes
        qa = p["nscc_qa_threshold"]
        if qa and delay > qa * target:
            self.qa_armed = True
        if self._quick_adapt(now):
            return self.output()
        if delay >= target:
            if marked:
                if self.last_md is None or now - self.last_md >= self.base_rtt:
                    avg = self.avg_delay
                    factor = 1 - p["nscc_gamma"] * (avg - target) / avg if avg > 0 else 1
                    factor = min(max(factor, p["nscc_max_md_jump"]), 1.0)
                    if factor < 1:
                        self.cwnd *= factor
                        self.last_md = now
                        self.decreases += 1
                        self.inc = 0.0
            else:
                self.inc += self.fi * acked_bytes
        elif not marked:
            self.inc += self.alpha * acked_bytes * (target - delay)
        self.adjust_acked += acked_bytes
        if (self.adjust_acked >= p["nscc_adjust_bytes"] * self.mtu
                or now - self.last_adjust >= p["nscc_adjust_period"] * self.base_rtt):
            self.cwnd += self.inc / self.cwnd + self.eta
            self.inc = 0.0
            self.adjust_acked = 0
            self.last_adjust = now
        return self._limit()

    def on_loss(self, now: int) -> Output:
        self.qa_armed = True
        self._quick_adapt(now)
        return self.output()

    def on_timeout(self, now: int) -> Output:
        return self.on_loss(now)

    def _quick_adapt(self, now: int) -> bool:
        """At the end of a base-RTT period: act if armed (module docstring); True if it
        set the window."""
        if now < self.qa_end:
            return False
        acted = False
        if self.qa_armed and self.qa_acked < self.max_wnd / (1 << self.params["nscc_qa_gate"]):
            self.cwnd = float(self.qa_acked)
            self.inc = 0.0
            self.quick_adapts += 1
            acted = True
            self._limit()
        self.qa_armed = False
        self.qa_acked = 0
        self.qa_end = now + self.base_rtt
        return acted

    def _limit(self) -> Output:
        self.cwnd = min(max(self.cwnd, float(self.mtu)), self.max_wnd)
        self.window = self._packets()
        return self.output()
