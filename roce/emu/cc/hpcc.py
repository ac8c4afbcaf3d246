"""HPCC's reaction point: the sender's window and rate from per-hop in-band telemetry (Li et
al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, Algorithm 1).

``--cc hpcc``: the sending NIC inserts INT-MD over UDP in the QP's data packets, each switch
pushes its record at the egress port the packet leaves by, the receiving NIC strips them and
echoes them on its ACK, and the sending NIC's driver (roce/emu/cc/engine.py) hands them to
``on_telemetry`` in path order (roce/families/intmd.py has the wire format).

A hop record (``Hop``) is what one switch reports about the egress port a data packet left
by: the bytes queued there, the bytes the port had sent in all (a counter), the time the
packet left (ns) and the port's line rate.  Per ACK carrying the records of the path, with
T = ``hpcc_base_rtt``, eta = ``hpcc_eta``, the previous ACK's records L:

- per hop i: txRate = (tx_bytes - L[i].tx_bytes) x 8 / (ts - L[i].ts) (the counter is INT's
  32-bit field: a difference below 0 wrapped once) and
  u_i = min(qlen, L[i].qlen) x 8 / (rate x T) + txRate / rate; u is the largest u_i and tau
  the time between that hop's two records, at most T;
- U = (1 - tau / T) U + (tau / T) u (U starts at 1: a flow starts at line rate);
- the window: when U >= eta or the increase stage reached ``hpcc_max_stage``,
  W = Wc / (U / eta) + W_AI, else W = Wc + W_AI; W_AI = W_init (1 - eta) / N, with
  W_init = line rate x T and N = ``hpcc_flows``;
- Wc (the reference window) and the stage are committed only once per RTT: when the ACK's
  PSN is past the PSN that was next to send at the last commit (the stage back to 0 after a
  decrease, one more after an increase); the ACKs in between compute W from Wc without
  committing (the paper's fast reaction);
- W stays within [``hpcc_min_rate`` x T, line rate x T] and the rate is R = W / T (an idle
  path, U = 0, gives the largest W); the first ACK only stores its records;
- the NIC keeps at most W bytes in flight (the paper's window: a sender paced at R may not
  outrun the ACKs the queue delays) as a window of ceil(W / packet) packets, at least one,
  the packet being the largest frame the QP sent (``on_sent``).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Mapping, Sequence

from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.params import Param
from roce.families.intmd import COUNTER_MOD
from roce.psn import psn_diff

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_new = tuple.__new__
_US = 1_000
_COUNTER = COUNTER_MOD  # INT's Tx utilization field, a byte counter here


# qlen: bytes queued at the port when the packet left; tx_bytes: bytes the port had sent
# since it started (a counter); ts: ns, when the packet left; rate_bps: the port's line rate
# (collections' namedtuple: typing's would import typing at start)
Hop = namedtuple("Hop", ("qlen", "tx_bytes", "ts", "rate_bps"))
Hop.__doc__ = "One switch's report on the egress port a packet left by."


PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("hpcc_eta", "factor", "eta: the utilization each link is held to", 0.01, 1, False),
    Param("hpcc_max_stage", "stages", "additive increases in a row before a multiplicative "
          "step", 0, 1_000),
    Param("hpcc_base_rtt", "us", "T: the base RTT (no queueing) the windows are sized for",
          0.001, 1_000_000, False),
    Param("hpcc_flows", "flows", "N: the concurrent flows per link W_AI is sized for", 1,
          1_000_000),
    Param("hpcc_min_rate", "Mb/s", "the rate never goes below this", 0.001, 1_000_000,
          False),
)}

PROFILES: dict[str, dict[str, Any]] = {
    # the paper's eta 95 % and maxStage 5; T the 16:1 incast's RTT without a queue (4.7 us,
    # docs/congestion-control.md) rounded up; N the incast's 16 senders
    "paper": {"hpcc_eta": 0.95, "hpcc_max_stage": 5, "hpcc_base_rtt": 5.0, "hpcc_flows": 16,
              "hpcc_min_rate": 100.0},
}


class Hpcc(CongestionControl):
    """HPCC's reaction point of one QP (rules in the module docstring)."""

    name = "hpcc"
    summary = "in-band telemetry, window and rate"
    PARAMS = PARAMS
    PROFILES = PROFILES
    uses_int = True

    __slots__ = ("eta", "max_stage", "t", "w_ai", "u", "wc", "w", "stage",
                 "last", "last_update_psn", "commits", "w_max", "w_min", "packet")

    def __init__(self, params: Mapping[str, Any], line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        p = self.params
        self.eta = p["hpcc_eta"]
        self.max_stage = p["hpcc_max_stage"]
        self.t = p["hpcc_base_rtt"] * _US  # ns
        w_init = self.line_rate * self.t / 8e9  # bytes: line rate x T
        self.w_ai = w_init * (1 - self.eta) / p["hpcc_flows"]
        self.w_max = w_init
        self.w_min = min(p["hpcc_min_rate"] * 1e6, self.line_rate) * self.t / 8e9
        self.u = 1.0
        self.wc = w_init  # the reference window (bytes), committed once per RTT
        self.w = w_init  # the window in force (bytes)
        self.stage = 0
        self.last: tuple[Hop, ...] = ()  # the previous ACK's records
        self.last_update_psn: int | None = None
        self.commits = 0
        self.packet = 0  # the largest frame the QP sent (bytes): the window's unit
        self.window: int | None = None  # packets in flight, once a packet size is known

    def _packets(self) -> int | None:
        """W as a window of packets (module docstring), None before the QP sent."""
        packet = self.packet
        if not packet:
            return None
        n = -(-self.w // packet)  # ceil
        return int(n) if n >= 1 else 1

    def on_sent(self, now: int, nbytes: int) -> Output:
        if nbytes > self.packet:
            self.packet = nbytes
            self.window = self._packets()
        return self.output()

    def utilization(self, hops: Sequence[Hop]) -> float:
        """U after this ACK's records (the paper's MeasureInflight); unchanged without a
        usable hop (no previous record of it, or no time between the two)."""
        u, tau = -1.0, 0  # no usable hop yet (an idle one's u is 0)
        for new, old in zip(hops, self.last):
            dt = new.ts - old.ts
            if dt <= 0 or new.rate_bps <= 0:
                continue
            sent = new.tx_bytes - old.tx_bytes
            if sent < 0:  # INT's 32-bit counter wrapped (at 100 Gb/s: every 343 ms)
                sent += _COUNTER
            tx_rate = sent * 8e9 / dt  # bit/s
            ui = min(new.qlen, old.qlen) * 8e9 / (new.rate_bps * self.t) + tx_rate / new.rate_bps
            if ui > u:
                u, tau = ui, dt
        if u < 0:
            return self.u
        tau = min(tau, self.t)
        return (1 - tau / self.t) * self.u + tau / self.t * u

    def on_telemetry(self, now: int, hops: Sequence[Hop], acked_psn: int,
                     next_psn: int) -> Output:
        """An ACK of PSN ``acked_psn`` carrying the path's ``hops`` (the data packet's, in
        path order), the QP's next PSN to send being ``next_psn``."""
        if not self.last:  # the first ACK: records to compare the next ones with
            self.last = tuple(hops)
            self.last_update_psn = next_psn
            return self.output()
        self.u = u = self.utilization(hops)
        commit = self.last_update_psn is None or psn_diff(acked_psn, self.last_update_psn) > 0
        if u >= self.eta or self.stage >= self.max_stage:
            # an idle path (U 0) allows any window: the largest
            w = self.wc / (u / self.eta) + self.w_ai if u > 0 else self.w_max
            stage = 0
        else:
            w = self.wc + self.w_ai
            stage = self.stage + 1
        # the rate's bounds as a window (the ns-3 model clamps the rate it commits alike):
        # a reference window past line rate x T would only slow the next decrease
        w = min(max(w, self.w_min), self.w_max)
        if commit:
            self.wc, self.stage = w, stage
            self.last_update_psn = next_psn
            self.commits += 1
        self.w = w
        self.last = tuple(hops)
        self.rate = w * 8e9 / self.t
        self.window = self._packets()
        return self.output()
