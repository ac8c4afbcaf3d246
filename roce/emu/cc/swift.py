"""Swift: delay-based window control with a target scaled by hops and flow count (Kumar et al.,
"Swift: Delay is Simple and Effective for Congestion Control in the Datacenter", SIGCOMM 2020,
Algorithm 1 and section 3.5; docs/congestion-control.md has every rule, knob and source).

Per QP, with cwnd the window in packets and delay the RTT of the PSN an ACK acknowledges (the
sending NIC's timestamps, as Swift's NIC timestamps; the emulated hosts add no endpoint delay,
so it is all the paper's fabric delay):

- target = ``swift_base_target`` + hops x ``swift_hop_scale`` + fs, where
  fs = clamp(a / sqrt(cwnd) + b, 0, ``swift_fs_range``) with a = fs_range / (1/sqrt(fs_min_cwnd)
  - 1/sqrt(fs_max_cwnd)) and b = -a / sqrt(fs_max_cwnd): fs_range at ``swift_fs_min_cwnd``
  packets, 0 at ``swift_fs_max_cwnd`` (the flow-count term: many flows, small windows, a
  larger target).  hops: ``swift_hops``, or when it is 0 the switches the NIC counted on the
  ACKs (the IP TTL a host sends with less the TTL they arrived with, as the paper does);
- an ACK of n packets: delay < target: additive increase, cwnd += ``swift_ai`` x n / cwnd
  (``swift_ai`` x n below one packet); otherwise, if the last decrease is at least one RTT
  (this sample) old, cwnd = cwnd x max(1 - ``swift_beta`` x (delay - target) / delay,
  1 - ``swift_max_mdf``).  An ACK also ends a run of timeouts;
- a retransmission timeout: after ``swift_retx_reset`` in a row cwnd = ``swift_min_cwnd``,
  else, if the last decrease is at least one RTT old, cwnd = cwnd x (1 - ``swift_max_mdf``);
- cwnd stays within [``swift_min_cwnd``, ``swift_max_cwnd``].  At one packet or more the
  NIC enforces floor(cwnd) packets in flight at line rate; below one packet (the paper lets
  it fall to 0.001) one packet may be in flight and the QP is paced at one packet per
  RTT / cwnd: a rate of cwnd x packet / RTT, the packet being the largest frame it sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.params import Param
from roce.emu.core.constants import MAX_UNACKED_PSNS
from roce.errors import UsageError

_new = tuple.__new__
_US = 1_000

PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("swift_base_target", "us", "target delay of a one-hop path with few flows", 0,
          10_000_000, False),
    Param("swift_hop_scale", "us", "h: target added per hop", 0, 10_000_000, False),
    Param("swift_hops", "hops", "hops on the path (0: counted on the ACKs' IP TTL)", 0, 255),
    Param("swift_fs_range", "us", "flow-scaling term's largest value", 0, 10_000_000, False),
    Param("swift_fs_min_cwnd", "packets", "window at which the flow-scaling term is largest",
          0.001, MAX_UNACKED_PSNS, False),
    Param("swift_fs_max_cwnd", "packets", "window at which the flow-scaling term reaches 0",
          0.001, MAX_UNACKED_PSNS, False),
    Param("swift_ai", "packets", "additive increment per window of ACKs", 0, 1_000, False),
    Param("swift_beta", "factor", "multiplicative decrease per unit of relative excess delay",
          0, 1, False),
    Param("swift_max_mdf", "factor", "largest share of the window one decrease takes", 0, 1,
          False),
    Param("swift_min_cwnd", "packets", "the window never goes below this (paced below 1)",
          0.0001, MAX_UNACKED_PSNS, False),
    Param("swift_max_cwnd", "packets", "the window never grows above this", 1,
          MAX_UNACKED_PSNS, False),
    Param("swift_init_cwnd", "packets", "the window a QP starts with", 0.001,
          MAX_UNACKED_PSNS, False),
    Param("swift_retx_reset", "timeouts", "timeouts in a row that reset the window to "
          "swift_min_cwnd", 1, 1_000),
)}

PROFILES: dict[str, dict[str, Any]] = {
    # csg-htsim's Swift model (sim/swift.cpp, sim/datacenter/main_swift.cpp), the paper's
    # 0.001-packet floor, and the requester's 128-PSN window as the ceiling
    "htsim": {"swift_base_target": 20, "swift_hop_scale": 3.053, "swift_hops": 0,
              "swift_fs_range": 100, "swift_fs_min_cwnd": 0.1, "swift_fs_max_cwnd": 100,
              "swift_ai": 1.0, "swift_beta": 0.8, "swift_max_mdf": 0.5,
              "swift_min_cwnd": 0.001, "swift_max_cwnd": MAX_UNACKED_PSNS,
              "swift_init_cwnd": 15, "swift_retx_reset": 5},
}


class Swift(CongestionControl):
    """Swift's window of one QP (rules in the module docstring)."""

    name = "swift"
    summary = "delay target, window"
    PARAMS = PARAMS
    PROFILES = PROFILES
    uses_rtt = True

    __slots__ = ("base", "hop_scale", "fixed_hops", "fs_range", "fs_a", "fs_b", "ai", "beta",
                 "max_mdf", "min_cwnd", "max_cwnd", "retx_reset", "cwnd", "rtt",
                 "target", "last_decrease", "retransmits", "packet", "decreases")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        p = self.params
        if not p["swift_fs_min_cwnd"] < p["swift_fs_max_cwnd"]:
            raise UsageError(f"--cc-param swift_fs_min_cwnd ({p['swift_fs_min_cwnd']}) must be "
                             f"below swift_fs_max_cwnd ({p['swift_fs_max_cwnd']})")
        if p["swift_min_cwnd"] > p["swift_max_cwnd"]:
            raise UsageError(f"--cc-param swift_min_cwnd ({p['swift_min_cwnd']}) is above "
                             f"swift_max_cwnd ({p['swift_max_cwnd']})")
        self.base = p["swift_base_target"] * _US
        self.hop_scale = p["swift_hop_scale"] * _US
        self.fixed_hops = p["swift_hops"]
        self.fs_range = p["swift_fs_range"] * _US
        self.fs_a = self.fs_range / (1 / math.sqrt(p["swift_fs_min_cwnd"])
                                     - 1 / math.sqrt(p["swift_fs_max_cwnd"]))
        self.fs_b = -self.fs_a / math.sqrt(p["swift_fs_max_cwnd"])
        self.ai = p["swift_ai"]
        self.beta = p["swift_beta"]
        self.max_mdf = p["swift_max_mdf"]
        self.min_cwnd = p["swift_min_cwnd"]
        self.max_cwnd = p["swift_max_cwnd"]
        self.retx_reset = p["swift_retx_reset"]
        self.cwnd = float(min(max(p["swift_init_cwnd"], self.min_cwnd), self.max_cwnd))
        self.window = max(int(self.cwnd), 1)
        self.rtt: int | None = None  # the latest RTT sample (ns)
        self.target = self.target_delay()  # the target the latest sample was held to (ns)
        self.last_decrease: int | None = None
        self.retransmits = 0  # timeouts since the last ACK
        self.packet = 0  # the largest frame the QP sent (bytes): what pacing spaces
        self.decreases = 0

    # -- the rules -------------------------------------------------------------------------

    def target_delay(self) -> float:
        """The target delay (ns) at the current window and hop count."""
        fs = min(max(self.fs_a / math.sqrt(self.cwnd) + self.fs_b, 0.0), self.fs_range)
        hops = self.fixed_hops or self.hops or 0
        return self.base + hops * self.hop_scale + fs

    def can_decrease(self, now: int) -> bool:
        """At most one decrease per RTT (the latest sample)."""
        last = self.last_decrease
        return last is None or self.rtt is None or now - last >= self.rtt

    def _limit(self, now: int, before: float) -> Output:
        self.cwnd = min(max(self.cwnd, self.min_cwnd), self.max_cwnd)
        if self.cwnd < before:
            self.last_decrease = now
            self.decreases += 1
        return self.output()

    def output(self) -> Output:
        cwnd = self.cwnd
        if cwnd >= 1:
            self.window = int(cwnd)
            self.rate = self.line_rate
        else:
            self.window = 1
            if self.packet and self.rtt:
                self.rate = min(cwnd * self.packet * 8e9 / self.rtt, self.line_rate)
        return _new(Output, (self.rate, self.window, None))

    # -- events ------------------------------------------------------------------------------

    def on_ack(self, now: int, rtt_ns: int, acked: int = 0) -> Output:
        before = self.cwnd
        self.retransmits = 0
        self.rtt = rtt_ns
        target = self.target = self.target_delay()
        if rtt_ns < target:
            if self.cwnd >= 1:
                self.cwnd += self.ai * acked / self.cwnd
            else:
                self.cwnd += self.ai * acked
        elif rtt_ns > target and self.can_decrease(now):
            # (at the target exactly the factor is 1: nothing to cut, and a 0 ns sample
            # against a 0 target must not divide by it)
            self.cwnd *= max(1 - self.beta * (rtt_ns - target) / rtt_ns, 1 - self.max_mdf)
        return self._limit(now, before)

    def on_timeout(self, now: int) -> Output:
        before = self.cwnd
        self.retransmits += 1
        if self.retransmits >= self.retx_reset:
            self.cwnd = self.min_cwnd
        elif self.can_decrease(now):
            self.cwnd *= 1 - self.max_mdf
        return self._limit(now, before)

    def on_sent(self, now: int, nbytes: int) -> Output:
        if nbytes > self.packet:
            self.packet = nbytes
        return self.output()
