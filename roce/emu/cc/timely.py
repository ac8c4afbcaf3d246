"""TIMELY: RTT-gradient rate control (Mittal et al., "TIMELY: RTT-based Congestion Control for
the Datacenter", SIGCOMM 2015, Algorithm 1; docs/congestion-control.md).

On every completion event (here: every ACK that carries an RTT sample):

    new_rtt_diff = new_rtt - prev_rtt;  prev_rtt = new_rtt
    rtt_diff = (1 - alpha) rtt_diff + alpha new_rtt_diff          (EWMA)
    gradient = rtt_diff / min_rtt                                 (normalised)
    new_rtt < T_low:   rate += delta
    new_rtt > T_high:  rate *= 1 - beta (1 - T_high / new_rtt)
    gradient <= 0:     rate += N delta, N = timely_hai_n once that many consecutive
                       completions had a gradient <= 0 (hyper-active increase), else 1
    gradient > 0:      rate *= 1 - beta gradient

The first sample only sets prev_rtt.  The rate stays in [timely_min_rate, line rate].  The
count of consecutive gradient <= 0 completions restarts whenever another rule applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.params import Param

_US = 1_000
_MBPS = 1_000_000

PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("timely_t_low", "us", "RTT below this: additive increase", 0, 10_000_000, False),
    Param("timely_t_high", "us", "RTT above this: multiplicative decrease", 0, 10_000_000,
          False),
    Param("timely_delta", "Mb/s", "additive step delta", 0, 10_000_000, False),
    Param("timely_beta", "factor", "multiplicative decrease factor beta", 0, 1, False),
    Param("timely_alpha", "factor", "EWMA weight of the newest RTT difference", 0, 1, False),
    Param("timely_min_rtt", "us", "minimum RTT the gradient is normalised by", 0.001,
          10_000_000, False),
    Param("timely_hai_n", "completions", "N: consecutive gradient <= 0 completions before "
          "hyper-active increase (step N delta)", 1, 1_000_000),
    Param("timely_min_rate", "Mb/s", "the rate never goes below this", 0, 10_000_000, False),
)}

PROFILES: dict[str, dict[str, Any]] = {
    # the TIMELY paper's settings; alpha and min RTT as HPCC's ns-3 TIMELY model sets them
    "paper": {"timely_t_low": 50, "timely_t_high": 500, "timely_delta": 10,
              "timely_beta": 0.8, "timely_alpha": 0.875, "timely_min_rtt": 20,
              "timely_hai_n": 5, "timely_min_rate": 10},
}


class Timely(CongestionControl):
    """TIMELY's rate control of one QP (rules in the module docstring)."""

    name = "timely"
    summary = "RTT gradient"
    PARAMS = PARAMS
    PROFILES = PROFILES
    uses_rtt = True

    __slots__ = ("t_low", "t_high", "delta", "beta", "ewma", "min_rtt", "hai_n", "min_rate",
                 "prev_rtt", "rtt_diff", "gradient", "negative_run", "rule")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        p = self.params
        self.t_low = p["timely_t_low"] * _US
        self.t_high = p["timely_t_high"] * _US
        self.delta = p["timely_delta"] * _MBPS
        self.beta = p["timely_beta"]
        self.ewma = p["timely_alpha"]
        self.min_rtt = p["timely_min_rtt"] * _US
        self.hai_n = p["timely_hai_n"]
        self.min_rate = min(p["timely_min_rate"] * _MBPS, self.line_rate)
        self.prev_rtt: int | None = None
        self.rtt_diff = 0.0
        self.gradient = 0.0
        self.negative_run = 0
        self.rule = ""  # the rule the last sample applied (for traces and tests)

    def on_ack(self, now: int, rtt_ns: int, acked: int = 0) -> Output:
        if self.prev_rtt is None:
            self.prev_rtt = rtt_ns
            return self.output()
        new_diff = rtt_ns - self.prev_rtt
        self.prev_rtt = rtt_ns
        self.rtt_diff = (1 - self.ewma) * self.rtt_diff + self.ewma * new_diff
        self.gradient = self.rtt_diff / self.min_rtt
        if rtt_ns < self.t_low:
            self.negative_run = 0
            self.rule = "t_low"
            rate = self.rate + self.delta
        elif rtt_ns > self.t_high:
            self.negative_run = 0
            self.rule = "t_high"
            rate = self.rate * (1 - self.beta * (1 - self.t_high / rtt_ns))
        elif self.gradient <= 0:
            self.negative_run += 1
            n = self.hai_n if self.negative_run >= self.hai_n else 1
            self.rule = "hai" if n > 1 else "additive"
            rate = self.rate + n * self.delta
        else:
            self.negative_run = 0
            self.rule = "gradient"
            rate = self.rate * (1 - self.beta * self.gradient)
        self.rate = min(max(rate, self.min_rate), self.line_rate)
        return self.output()
