"""DCQCN's reaction point: one instance per sending QP (Zhu et al., "Congestion Control for
Large-Scale RDMA Deployments", SIGCOMM 2015; NVIDIA ConnectX knobs; docs/congestion-control.md
has every rule, knob, unit, profile and source).

Rules, with RC the current rate, RT the target rate, alpha the congestion estimate and g the
gain ``(1024 - rp_dce_tcp_g) / 1024``:

- CNP: alpha = (1 - g) alpha + g (the first CNP of a flow sets alpha = rp_initial_alpha_value
  / 1024 instead, and RC = RT = rp_rate_to_set_on_first_cnp when that is not 0).  At most one
  rate cut per rp_rate_reduce_monitor_period: RT = RC (always with rp_clamp_tgt_rate, else
  only if the rate rose since the last cut), RC = RC (1 - alpha/2), not below RC x
  rp_min_dec_fac % nor rp_min_rate.  A cut zeroes the stage counters and the byte count and
  restarts the rate-increase timer.
- alpha decays, alpha = (1 - g) alpha, for every whole rp_dce_tcp_rtt without a CNP: the
  update period is a timer evaluated lazily (alpha is brought up to date when it is read), so
  an idle QP costs no events.
- Increase events: the ``rate_increase`` timer every rp_time_reset (T += 1) and every
  rp_byte_reset bytes sent (BC += 1; 0 turns the byte counter off).  With F = rp_threshold:
  fast recovery RC = (RT + RC)/2 while both counters <= F; additive increase RT += AI then
  RC = (RT + RC)/2 when one exceeds F; hyper increase RT += i HAI, i = min(T, BC) - F, when
  both do.  Without a byte counter the timer alone drives the stages (HPCC's ns-3 model):
  fast recovery while T <= F, additive at T = F + 1, hyper with i = T - F - 1 after.
- Recovery ends when RC is within one AI step of the line rate: RC = RT = line rate and the
  timer stops (the published models let it run forever; a finite run needs it to stop).
"""

from __future__ import annotations

from collections.abc import Mapping

from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.params import Param, per_25g

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_US = 1_000
_MBPS = 1_000_000

PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("rp_clamp_tgt_rate", "0/1", "1: every rate cut sets the target rate to the current "
          "rate; 0: only if the rate rose since the last cut", 0, 1),
    Param("rp_time_reset", "us", "period of the rate-increase timer", 1, 10_000_000),
    Param("rp_byte_reset", "bytes", "bytes sent per byte-counter increase event (0: off)",
          0, 1 << 40),
    Param("rp_threshold", "events", "F: increase events of a counter before it leaves fast "
          "recovery", 1, 1_000_000),
    Param("rp_ai_rate", "Mb/s", "additive-increase step of the target rate", 0, 10_000_000,
          False),
    Param("rp_hai_rate", "Mb/s", "hyper-increase step of the target rate", 0, 10_000_000,
          False),
    Param("rp_min_dec_fac", "%", "a cut keeps at least this share of the current rate",
          0, 100),
    Param("rp_min_rate", "Mb/s", "the rate never goes below this", 0, 10_000_000, False),
    Param("rp_rate_to_set_on_first_cnp", "Mb/s", "current and target rate after the first "
          "CNP of a flow (0: cut as usual)", 0, 10_000_000, False),
    Param("rp_dce_tcp_g", "1/1024", "alpha gain: g = (1024 - value) / 1024", 0, 1023),
    Param("rp_dce_tcp_rtt", "us", "alpha update period", 1, 10_000_000),
    Param("rp_initial_alpha_value", "1/1024", "alpha set by the first CNP of a flow",
          0, 1024),
    Param("rp_rate_reduce_monitor_period", "us", "at most one rate cut per period "
          "(0: every CNP cuts)", 0, 10_000_000),
    Param("np_min_time_between_cnps", "us", "notification point: at most one CNP per QP per "
          "period", 0, 10_000_000),
)}

PROFILES: dict[str, dict[str, Any]] = {
    # NVIDIA ConnectX firmware defaults (DOCA "DCQCN CC Parameters"; mlxconfig query)
    "nvidia": {
        "rp_clamp_tgt_rate": 0, "rp_time_reset": 300, "rp_byte_reset": 32767,
        "rp_threshold": 1, "rp_ai_rate": 5, "rp_hai_rate": 50, "rp_min_dec_fac": 50,
        "rp_min_rate": 1, "rp_rate_to_set_on_first_cnp": 0, "rp_dce_tcp_g": 1019,
        "rp_dce_tcp_rtt": 1, "rp_initial_alpha_value": 1023,
        "rp_rate_reduce_monitor_period": 4, "np_min_time_between_cnps": 4,
    },
    # the DCQCN paper as Zhu's ns-3 model (qbb-net-device.cc) sets it by default
    "paper": {
        "rp_clamp_tgt_rate": 1, "rp_time_reset": 1500, "rp_byte_reset": 150_000,
        "rp_threshold": 5, "rp_ai_rate": 5, "rp_hai_rate": 50, "rp_min_dec_fac": 0,
        "rp_min_rate": 1, "rp_rate_to_set_on_first_cnp": 0, "rp_dce_tcp_g": 1024 - 64,
        "rp_dce_tcp_rtt": 55, "rp_initial_alpha_value": 1024,
        "rp_rate_reduce_monitor_period": 0, "np_min_time_between_cnps": 50,
    },
    # HPCC's ns-3 simulator, run.py --cc dcqcn (its "Mellanox version" of DCQCN)
    "hpcc-ns3": {
        "rp_clamp_tgt_rate": 0, "rp_time_reset": 300, "rp_byte_reset": 0,
        "rp_threshold": 1, "rp_ai_rate": per_25g(5), "rp_hai_rate": per_25g(50),
        "rp_min_dec_fac": 0, "rp_min_rate": 1000, "rp_rate_to_set_on_first_cnp": 0,
        "rp_dce_tcp_g": 1024 - 4, "rp_dce_tcp_rtt": 1, "rp_initial_alpha_value": 1024,
        "rp_rate_reduce_monitor_period": 4, "np_min_time_between_cnps": 4,
    },
}


class Dcqcn(CongestionControl):
    """The DCQCN reaction point of one QP (rules in the module docstring)."""

    name = "dcqcn"
    summary = "ECN marks, CNPs"
    PARAMS = PARAMS
    PROFILES = PROFILES
    uses_cnp = True

    __slots__ = ("g", "alpha_period", "time_reset", "byte_reset", "threshold", "ai", "hai",
                 "min_rate", "min_dec", "monitor", "clamp", "target", "alpha", "_alpha_t",
                 "seen_cnp", "t_stage", "b_stage", "recovering", "rose", "last_cut",
                 "cut_pending", "cnps", "cuts")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        p = self.params
        self.g = (1024 - p["rp_dce_tcp_g"]) / 1024
        self.alpha_period = p["rp_dce_tcp_rtt"] * _US
        self.time_reset = p["rp_time_reset"] * _US
        self.byte_reset = p["rp_byte_reset"]
        self.threshold = p["rp_threshold"]
        self.ai = p["rp_ai_rate"] * _MBPS
        self.hai = p["rp_hai_rate"] * _MBPS
        self.min_rate = min(p["rp_min_rate"] * _MBPS, self.line_rate)
        self.min_dec = p["rp_min_dec_fac"] / 100
        self.monitor = p["rp_rate_reduce_monitor_period"] * _US
        self.clamp = bool(p["rp_clamp_tgt_rate"])
        self.target = self.line_rate
        self.alpha = 1.0
        self._alpha_t = now
        self.seen_cnp = False
        self.t_stage = 0
        self.b_stage = 0
        self.byte_room = self.byte_reset  # bytes to the next byte-counter event (base.py)
        self.recovering = False
        self.counting = False  # the byte counter runs while recovering (when it is on)
        self.rose = False  # an increase event since the last cut
        self.last_cut: int | None = None
        self.cut_pending = False
        self.cnps = 0
        self.cuts = 0

    # -- alpha -----------------------------------------------------------------------------

    def alpha_at(self, now: int) -> float:
        """alpha at ``now``: decayed once per whole update period since its last update."""
        k = (now - self._alpha_t) // self.alpha_period
        if k > 0:
            self.alpha *= (1 - self.g) ** k
            self._alpha_t += k * self.alpha_period
        return self.alpha

    # -- events ------------------------------------------------------------------------------

    def on_cnp(self, now: int) -> Output:
        self.cnps += 1
        if not self.seen_cnp:
            self.seen_cnp = True
            self.alpha = self.params["rp_initial_alpha_value"] / 1024
            self._alpha_t = now
            first = self.params["rp_rate_to_set_on_first_cnp"] * _MBPS
            if first:
                self.rate = self.target = max(min(first, self.line_rate), self.min_rate)
                self._after_cut(now)
                return self.output()
            self._cut(now)
            return self.output()
        self.alpha = (1 - self.g) * self.alpha_at(now) + self.g
        self._alpha_t = now
        if self.last_cut is None or now - self.last_cut >= self.monitor:
            self._cut(now)
        elif not self.cut_pending:
            self.cut_pending = True
            self._timers["rate_reduce"] = self.last_cut + self.monitor
        return self.output()

    @property
    def byte_count(self) -> int:
        """Bytes counted toward the next byte-counter event (kept as the room left to it, which
        the driver lowers per frame without a call)."""
        return self.byte_reset - self.byte_room

    def on_sent(self, now: int, nbytes: int) -> Output:
        if self.recovering and self.byte_reset:
            count = self.byte_reset - self.byte_room + nbytes
            while self.recovering and count >= self.byte_reset:
                count -= self.byte_reset
                self.b_stage += 1
                self._increase(now)
            self.byte_room = self.byte_reset - count
        return self.output()

    def on_timer(self, now: int, name: str) -> Output:
        self._timers.pop(name, None)
        if name == "rate_reduce":
            if self.cut_pending:
                self._cut(now)
        elif name == "rate_increase" and self.recovering:
            self.t_stage += 1
            self._timers["rate_increase"] = now + self.time_reset
            self._increase(now)
        return self.output()

    # -- the rules ---------------------------------------------------------------------------

    def _cut(self, now: int) -> None:
        alpha = self.alpha_at(now)
        if self.clamp or self.rose or not self.recovering:
            self.target = self.rate
        floor = max(self.rate * self.min_dec, self.min_rate)
        self.rate = max(self.rate * (1 - alpha / 2), floor)
        self.cuts += 1
        self._after_cut(now)

    def _after_cut(self, now: int) -> None:
        self.cut_pending = False
        self._timers.pop("rate_reduce", None)
        self.last_cut = now
        self.t_stage = self.b_stage = 0
        self.byte_room = self.byte_reset
        self.rose = False
        self.recovering = True
        self.counting = bool(self.byte_reset)
        self._timers["rate_increase"] = now + self.time_reset

    def stage(self) -> str:
        """The increase rule the stage counters select now (an increase event bumps its counter,
        then applies this): fast_recovery, additive or hyper."""
        f, t, b = self.threshold, self.t_stage, self.b_stage
        if not self.byte_reset:
            return "fast_recovery" if t <= f else "additive" if t == f + 1 else "hyper"
        if max(t, b) <= f:
            return "fast_recovery"
        return "additive" if min(t, b) <= f else "hyper"

    def _increase(self, now: int) -> None:
        stage = self.stage()
        if stage == "additive":
            self.target += self.ai
        elif stage == "hyper":
            i = (self.t_stage - self.threshold - 1 if not self.byte_reset
                 else min(self.t_stage, self.b_stage) - self.threshold)
            self.target += i * self.hai
        line = self.line_rate
        self.target = min(self.target, line)
        self.rate = min((self.target + self.rate) / 2, line)
        self.rose = True
        if line - self.rate <= max(self.ai, 1.0):
            self.rate = self.target = line
            self.recovering = self.counting = False
            self._timers.pop("rate_increase", None)
