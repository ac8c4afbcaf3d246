"""Loss recovery mode of an RC queue pair: go-back-N (rxe, the default) or selective repeat.

Owns the per-QP choice and its knobs (``RecoveryConfig``), and the timer rule of selective
repeat (``rto_ns``).  The selective-repeat requester, responder and completer are in
``roce.emu.core.selective``; ``QueuePair`` builds them when its config says ``sr``.

Selective repeat follows IRN (Mittal et al., "Revisiting Network Support for RDMA", SIGCOMM
2018; docs/protocol.md, "Selective repeat (IRN) encoding"):
- two retransmission timeouts: ``rto_low_ns`` while at most ``rto_n`` packets are in flight,
  ``rto_high_ns`` otherwise (IRN's defaults: 100 us, 320 us, N = 3);
- BDP flow control: at most ``bdp_packets`` PSNs between the oldest unacknowledged one and the
  next new one;
- the loss rule (``loss_rule``): ``rack``, time-based (RFC 8985; ``roce.emu.core.rack``), robust to
  multipath reordering; or ``dupthresh``, IRN's / TCP's count of PSNs acknowledged above a hole.
"""

from __future__ import annotations

from dataclasses import dataclass

from roce.errors import RecoveryError

MODES = ("gbn", "sr")
# selective repeat's loss rule: time-based (RFC 8985 RACK, ``roce.emu.core.rack``; the default) or
# IRN's / TCP's packet count (a PSN is lost once ``DUPTHRESH`` PSNs above it were acknowledged)
LOSS_RULES = ("rack", "dupthresh")

RTO_LOW_NS = 100_000  # IRN section 4.1 defaults
RTO_HIGH_NS = 320_000
RTO_N = 3


@dataclass(frozen=True)
class RecoveryConfig:
    """How a requester recovers what was lost: the mode (MODES), the retransmission
    timer's bounds, the window in packets and selective repeat's loss rule."""

    mode: str = MODES[0]
    rto_low_ns: int = RTO_LOW_NS
    rto_high_ns: int = RTO_HIGH_NS
    rto_n: int = RTO_N
    bdp_packets: int | None = None  # None: the rxe window (MAX_UNACKED_PSNS) only
    loss_rule: str = LOSS_RULES[0]  # sr only: one of LOSS_RULES

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise RecoveryError(f"recovery mode {self.mode!r}: choose one of "
                                f"{', '.join(MODES)}")
        if self.loss_rule not in LOSS_RULES:
            raise RecoveryError(f"loss rule {self.loss_rule!r}: choose one of "
                                f"{', '.join(LOSS_RULES)}")
        if self.rto_low_ns <= 0 or self.rto_high_ns < self.rto_low_ns or self.rto_n < 0:
            raise RecoveryError("recovery timeouts need 0 < rto_low_ns <= rto_high_ns and "
                                "rto_n >= 0")
        if self.bdp_packets is not None and self.bdp_packets < 1:
            raise RecoveryError(f"bdp_packets {self.bdp_packets} must be at least 1")

    @property
    def selective(self) -> bool:
        return self.mode == "sr"

    def rto_ns(self, in_flight: int) -> int:
        """IRN's timer rule: the low timeout when few packets are in flight (a tail loss has
        no later packet to trigger a NAK), the high one otherwise."""
        return self.rto_low_ns if in_flight <= self.rto_n else self.rto_high_ns


GBN = RecoveryConfig()


def bdp_packets(rate_gbps: float, rtt_ns: int, mtu: int) -> int:
    """The bandwidth-delay product in MTU packets (at least 2): what BDP flow control allows
    in flight."""
    return max(2, -(-int(rate_gbps * rtt_ns) // (8 * mtu)))


def configure(mode: str | RecoveryConfig | None = MODES[0],
              **knobs: int | str | None) -> RecoveryConfig:
    """A config from a mode name and knobs (``rto_low_ns``, ``rto_high_ns``, ``rto_n``,
    ``bdp_packets``, ``loss_rule``), or a ready config."""
    if isinstance(mode, RecoveryConfig):
        return mode
    try:
        return RecoveryConfig(mode or MODES[0], **{k: v for k, v in knobs.items() if v is not None})
    except TypeError as e:
        raise RecoveryError(f"recovery: {e}") from None
