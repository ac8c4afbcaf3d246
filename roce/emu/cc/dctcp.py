"""DCTCP's window control on ECN echoes, for RoCE (Alizadeh et al., "Data Center TCP (DCTCP)",
SIGCOMM 2010; RFC 8257; docs/congestion-control.md has every rule, knob and source).

The echo: a RoCE receiver has no ACK flag to echo a mark with, but it has the CNP.  With
``np_min_time_between_cnps`` 0 its notification point (roce.emu.cc.np) answers every CE-marked
packet with one CNP, which a ConnectX NIC can be set to do; one CNP is one marked packet.

Per QP, with cwnd the window in packets, alpha the estimate of the marked fraction and g the
gain ``dctcp_g``:

- a window of data: the packets acknowledged since it began reach the cwnd it began with
  (RFC 8257 ends it when the ACKs pass the sequence number sent when it began: with the window
  full, the same data).  At its end F = echoes / packets acknowledged in it (at most 1),
  alpha = (1 - g) alpha + g F, and the next window begins;
- an echo while no cut is in progress: cwnd = max(cwnd (1 - alpha/2), ``dctcp_min_cwnd``)
  (a cut never raises a window below it, as the loss window),
  ssthresh = cwnd; the cut is in progress (TCP's CWR) until the packets acknowledged reach the
  cwnd before it;
- an ACK of n packets outside a cut: slow start (cwnd += n) while cwnd < ssthresh, else
  congestion avoidance (cwnd += n / cwnd: one packet per window of ACKs, RFC 5681);
- a retransmission timeout: TCP's (RFC 5681, which RFC 8257 keeps): ssthresh = max(cwnd / 2,
  ``dctcp_min_cwnd``), cwnd = 1 packet (the loss window), and slow start again;
- cwnd stays within [``dctcp_min_cwnd``, ``dctcp_max_cwnd``] but for the loss window; the NIC
  enforces floor(cwnd) packets in flight (roce.emu.cc.engine).  The rate stays at line rate:
  the window paces.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.dcqcn import PARAMS as DCQCN_PARAMS
from roce.emu.cc.params import Param
from roce.emu.core.constants import MAX_UNACKED_PSNS

_new = tuple.__new__

PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("dctcp_g", "factor", "g: weight of the newest window's marked fraction in alpha",
          0, 1, False),
    Param("dctcp_alpha_init", "factor", "alpha before the first window ends", 0, 1, False),
    Param("dctcp_init_cwnd", "packets", "the window a QP starts with", 1, MAX_UNACKED_PSNS,
          False),
    Param("dctcp_min_cwnd", "packets", "a cut never takes the window below this", 1,
          MAX_UNACKED_PSNS, False),
    Param("dctcp_max_cwnd", "packets", "the window never grows above this", 1,
          MAX_UNACKED_PSNS, False),
    # the echo path: the receiving NIC's notification point (the same knob as DCQCN's)
    DCQCN_PARAMS["np_min_time_between_cnps"],
)}

PROFILES: dict[str, dict[str, Any]] = {
    # RFC 8257 and Linux tcp_dctcp.c: g = 1/16, alpha 1 at the start, a cut never below two
    # packets; the initial window of RFC 6928; every CE mark echoed
    "rfc8257": {"dctcp_g": 1 / 16, "dctcp_alpha_init": 1.0, "dctcp_init_cwnd": 10,
                "dctcp_min_cwnd": 2, "dctcp_max_cwnd": MAX_UNACKED_PSNS,
                "np_min_time_between_cnps": 0},
}


class Dctcp(CongestionControl):
    """DCTCP's window of one QP (rules in the module docstring).  ``uses_rtt``: the NIC's
    ACK samples bring the count of packets each ACK acknowledged; the RTT goes unused."""

    name = "dctcp"
    summary = "ECN echoes, window"
    PARAMS = PARAMS
    PROFILES = PROFILES
    uses_cnp = True
    uses_rtt = True

    __slots__ = ("g", "min_cwnd", "max_cwnd", "cwnd", "ssthresh", "alpha", "acked_in_window",
                 "echoes_in_window", "window_left", "cwr_left", "echoes", "cuts")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        p = self.params
        self.g = p["dctcp_g"]
        self.min_cwnd = p["dctcp_min_cwnd"]
        self.max_cwnd = max(p["dctcp_max_cwnd"], self.min_cwnd)
        self.cwnd = float(min(max(p["dctcp_init_cwnd"], self.min_cwnd), self.max_cwnd))
        self.ssthresh = float("inf")
        self.alpha = p["dctcp_alpha_init"]
        self.window = int(self.cwnd)
        self.acked_in_window = 0
        self.echoes_in_window = 0
        self.window_left = self.cwnd  # packets to acknowledge before this window ends
        self.cwr_left = 0.0  # packets to acknowledge before another cut (0: none in progress)
        self.echoes = 0
        self.cuts = 0

    def output(self) -> Output:
        self.window = int(self.cwnd)
        return _new(Output, (self.rate, self.window, None))

    def on_cnp(self, now: int) -> Output:
        self.echoes += 1
        self.echoes_in_window += 1
        if self.cwr_left <= 0:
            self.cwr_left = self.cwnd
            # never below dctcp_min_cwnd, nor up to it from the loss window
            self.cwnd = max(self.cwnd * (1 - self.alpha / 2), min(self.cwnd, self.min_cwnd))
            self.ssthresh = self.cwnd
            self.cuts += 1
        return self.output()

    def on_ack(self, now: int, rtt_ns: int, acked: int = 0) -> Output:
        if acked <= 0:
            return self.output()
        self.acked_in_window += acked
        self.window_left -= acked
        if self.window_left <= 0:
            f = min(self.echoes_in_window / self.acked_in_window, 1.0)
            self.alpha = (1 - self.g) * self.alpha + self.g * f
            self.acked_in_window = self.echoes_in_window = 0
            self.window_left = self.cwnd
        if self.cwr_left > 0:
            self.cwr_left -= acked  # no increase while a cut is in progress (Linux's CWR)
        elif self.cwnd < self.ssthresh:
            self.cwnd = min(self.cwnd + acked, self.max_cwnd)
        else:
            self.cwnd = min(self.cwnd + acked / self.cwnd, self.max_cwnd)
        return self.output()

    def on_timeout(self, now: int) -> Output:
        self.ssthresh = max(self.cwnd / 2, self.min_cwnd)
        self.cwnd = 1.0
        self.cwr_left = 0.0
        return self.output()
