"""Congestion management of one UET host: the glue between its PDS (``pds.Pds``, which calls
the hooks below) and the congestion-control algorithms of ``roce.emu.cc`` whose ``protocol``
is ``uet`` (NSCC, ``cc/nscc.py``; RCCC, ``cc/rccc.py``; docs/congestion-control.md).

* **Sending halves.**  Each PDC that sends requests gets its own algorithm instance (made at
  its first packet, told the PDS's MTU).  The bytes of payload it has in flight are the
  first transmissions and retransmissions not yet acknowledged nor found lost; a new
  request goes only when the algorithm admits it: under NSCC when in flight + the packet
  fit its window (``cwnd``, bytes), under RCCC when its credit covers the packet.  Either
  admits a packet when nothing of the PDC is in flight, so a PDC always makes progress.
  A retransmission needs no room (as for RoCE's windows, roce/emu/cc/engine.py).
* **ACK_CC** (``acked``): the packets it newly acknowledged leave the flight; NSCC gets the
  RTT of the packet that triggered the ACK (if sent once) less the service time the
  receiver reports, the received bytes it reports and its ECN echo (the M flag); RCCC the
  cumulative credit it carries.
* **Losses** (``lost``): a trimmed packet's NACK, a SACK gap found by RACK, a timeout: the
  packets leave the flight (their resends enter it again) and the algorithm hears
  ``on_loss``.
* **Receiving halves.**  Under RCCC the host's ``Grants`` counts the new data each PDC
  brings (``arrived``) and each ACK_CC carries the PDC's cumulative grant in the credit CC
  state (``ack_state``); otherwise the ACK_CC carries the NSCC state the PDS fills.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roce.emu.cc.algorithms import CcConfig
from roce.emu.cc.base import CongestionControl
from roce.emu.cc.rccc import Grants
from roce.families.uet import codes as t

NSCC_OOO_MAX = 0xFFFF


class Congestion:
    """One host's congestion management; ``line_rate`` gives its link's rate (b/s) when the
    first algorithm is made (the link is cabled after the host)."""

    def __init__(self, config: CcConfig, line_rate: Callable[[], float], mtu: int) -> None:
        self.config = config
        self.line_rate = line_rate
        self.mtu = mtu
        self.credit = config.algorithm == "rccc"
        self.algos: dict[int, CongestionControl] = {}  # PDC ID -> its sending half's
        self.flight: dict[int, dict[int, int]] = {}  # PDC ID -> PSN -> payload bytes
        self.in_flight: dict[int, int] = {}  # PDC ID -> payload bytes in flight
        self.grants: Grants | None = None
        self.rtt_samples = 0
        self.losses = 0
        self.held = 0  # times a request was held for want of window or credit

    def algo(self, pdc: Any) -> CongestionControl:
        cc = self.algos.get(pdc.id)
        if cc is None:
            cc = self.algos[pdc.id] = self.config.create(self.line_rate())
            set_mtu = getattr(cc, "set_mtu", None)
            if set_mtu is not None:
                set_mtu(self.mtu)
        return cc

    # -- the sending half ------------------------------------------------------------------

    def admits(self, pdc: Any, nbytes: int) -> bool:
        """Whether PDC ``pdc`` may send a new request of ``nbytes`` of payload now."""
        n = self.in_flight.get(pdc.id, 0)
        if n == 0:
            return True
        cc = self.algos.get(pdc.id)
        if cc is None:
            cc = self.algo(pdc)
        ok = cc.balance() >= nbytes if self.credit else n + nbytes <= cc.cwnd
        if not ok:
            self.held += 1
        return ok

    def sent(self, pdc: Any, psn: int, nbytes: int, now: int, retx: bool) -> None:
        i = pdc.id
        cc = self.algos.get(i)
        if cc is None:
            cc = self.algo(pdc)
        if not retx and self.credit:
            cc.on_sent(now, nbytes)
        flight = self.flight.get(i)
        if flight is None:
            flight = self.flight[i] = {}
        if psn not in flight:
            flight[psn] = nbytes
            self.in_flight[i] = self.in_flight.get(i, 0) + nbytes

    def _leave(self, pdc: Any, psns: Any) -> None:
        flight = self.flight.get(pdc.id)
        if not flight:
            return
        n = 0
        for psn in psns:
            n += flight.pop(psn, 0)
        if n:
            self.in_flight[pdc.id] -= n

    def acked(self, pdc: Any, now: int, psns: list[int], rtt_ns: int | None,
              f: dict[str, Any]) -> None:
        """An ACK_CC of ``pdc`` that newly acknowledged ``psns``; ``rtt_ns`` as the NSCC
        sample (None: none)."""
        self._leave(pdc, psns)
        cc = self.algos.get(pdc.id)
        if cc is None:
            cc = self.algo(pdc)
        if self.credit:
            if f.get("uet.pds.ack.cc_type") == t.CC_CREDIT:
                cc.on_credit(now, f.get("uet.pds.ack.cc_state.credit", 0))
            return
        if rtt_ns is not None:
            self.rtt_samples += 1
        cc.on_ack_cc(now, rtt_ns, f.get("uet.pds.ack.cc_state.rcvd_bytes", 0),
                     bool(f.get("uet.pds.flags.m")))

    def lost(self, pdc: Any, psns: list[int], now: int) -> None:
        """Packets of ``pdc`` found lost (trimmed, SACK gap, timeout)."""
        self._leave(pdc, psns)
        self.losses += 1
        self.algo(pdc).on_loss(now)

    # -- the receiving half ------------------------------------------------------------------

    def arrived(self, pdc: Any, now: int, nbytes: int) -> None:
        """New data (a PSN accepted once) on ``pdc``'s receiving half."""
        if self.credit:
            if self.grants is None:
                self.grants = Grants(self.config.params, self.line_rate())
            self.grants.arrived(pdc.id, now, nbytes)

    def ack_state(self, pdc: Any, now: int) -> dict[str, Any] | None:
        """The CC state of an ACK_CC about to go on ``pdc``: the credit state under RCCC,
        else None (the PDS's NSCC state)."""
        if not self.credit:
            return None
        if self.grants is None:
            self.grants = Grants(self.config.params, self.line_rate())
        return {"uet.pds.ack.cc_type": t.CC_CREDIT,
                "uet.pds.ack.cc_state.credit": self.grants.grant(pdc.id, now),
                "uet.pds.ack.cc_state.ooo_count": min(pdc.rx_ooo, NSCC_OOO_MAX)}

    def stats(self) -> dict[str, Any]:
        """What the run's summary shows of this host (``runner.fabric_stats``)."""
        out: dict[str, Any] = {
            "algorithm": self.config.algorithm, "profile": self.config.profile,
            "cnps_sent": 0, "cnps_received": 0, "rtt_samples": self.rtt_samples,
            "losses": self.losses, "held": self.held}
        if self.credit:
            out["credit_bytes"] = {i: a.credit for i, a in self.algos.items()}
        else:
            out["windows_bytes"] = {i: int(a.cwnd) for i, a in self.algos.items()}
            out["decreases"] = sum(a.decreases for a in self.algos.values())
            out["quick_adapts"] = sum(a.quick_adapts for a in self.algos.values())
        return out
