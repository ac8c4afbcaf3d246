"""Request timers start when a frame leaves the NIC, not when the QP builds it.

The switched network's NIC builds up to ``TX_LIMIT`` request frames ahead per QP and holds
them while the QP's pacer (DCQCN, a rate limit) spaces them out.  go-back-N's local ACK
timeout, selective repeat's RTO and RACK's send times count from transmission
(``Requester.on_wire``), as on a hardware NIC or rxe, which arms its timer when it sends."""

from __future__ import annotations

import pytest

from roce import fast
from roce.emu.net.link import PullEndpoint
from roce.emu.net.runner import NetRun, NetScenario
from roce.opcodes import OPCODES

SLOW_BPS = 100_000_000  # 100 Mb/s: one 4 KiB frame every ~330 us, past every RTO below
ACK_TIMEOUT = 5  # 4.096 us * 2^5 = 131 us


def _paced(recovery: str, ack_each: bool = True, **kw):
    run = NetRun(NetScenario(topology="incast:1", op="write", size=128 << 10, count=1,
                             depth=1, recovery=recovery, timeout=ACK_TIMEOUT, **kw))
    core = run.flows[0].qa.core
    # every frame asks for its ACK: an unacknowledged frame on the wire is answered within a
    # round trip, so only time spent waiting in the NIC could run a timer out
    if ack_each:
        core.requester.ack_every = 1

    def slow(now, _):
        core.tx.pacer.rate_bps = SLOW_BPS  # the NIC now holds what the QP builds ahead

    run.net.at(1_000, slow)
    return run, core


def _frame_ns(core) -> int:
    """How long the pacer spaces one full-MTU frame at ``SLOW_BPS``."""
    return (core.mtu * 8 * 10**9) // SLOW_BPS


@pytest.mark.parametrize("recovery", ["gbn", "sr"])
def test_frames_held_by_the_pacer_do_not_time_out(recovery):
    run, core = _paced(recovery)
    seen = {}

    def look(now, _):
        seen["held"] = len(core.tx)
        seen["timer"] = core.requester.timer
        seen["now"] = now

    run.net.at(3_000_000, look)
    s = run.run()
    # the QP did hold frames far longer than its timeout...
    assert seen["held"] >= 4 and _frame_ns(core) > core.timeout_ns
    assert core.timeout_ns < 200_000 and (recovery == "gbn" or _frame_ns(core) > 320_000)
    # ...and none of them timed out or was sent twice
    assert s.data_verified and s.completed == {"IBV_WC_SUCCESS": 1}
    assert s.timeouts == 0 and s.retransmitted == 0


class _Leaving(PullEndpoint):
    """Stands between a NIC and its outgoing wire (``Wire.src``) and shows each frame the NIC
    hands the wire, right after the NIC's ``pull`` (where the requester's ``on_wire`` ran).
    The NIC and the requester are compiled classes: their methods cannot be replaced per
    instance, so the tests watch at this seam."""

    def __init__(self, nic, seen) -> None:
        self.nic, self.seen = nic, seen
        nic.wire.src = self

    def pull(self, now):
        frame = self.nic.pull(now)
        if frame is not None:
            self.seen(now, frame)
        return frame

    def next_tx(self, now):
        return self.nic.next_tx(now)


def _request_psn(frame: bytes) -> int | None:
    w = fast.walk(frame)
    code, *_, psn = fast.bth_unpack(frame, w.bth_off)
    return psn if OPCODES[code].is_request else None


def test_the_timer_counts_from_the_frame_on_the_wire():
    run, core = _paced("gbn")
    req = core.requester
    left: list[tuple[int, int, int | None]] = []  # (wire time, PSN, timer after it)

    def seen(now, frame):
        psn = _request_psn(frame)
        if psn is not None:
            left.append((now, psn, req.timer))

    _Leaving(run.net.hosts["s1"], seen)
    s = run.run()
    assert s.timeouts == 0
    paced = [(t, p, d) for t, p, d in left if t > 10_000]
    assert len(paced) > 10
    for t, _, d in paced:
        # nothing before it was unacknowledged any more (the pacer's gap is far longer than
        # a round trip): the timer starts with this frame
        assert d == t + core.timeout_ns


class _SendSpy:
    """Stands for a requester's RACK (an extension type: its methods cannot be replaced on
    the instance) and records every ``on_send`` it passes on."""

    def __init__(self, rack, recorded: list[tuple[int, int]]) -> None:
        self._rack, self._recorded = rack, recorded

    def on_send(self, psn: int, now: int) -> None:
        self._recorded.append((psn, now))
        self._rack.on_send(psn, now)

    def __getattr__(self, name: str):
        return getattr(self._rack, name)


def test_rack_records_the_time_a_frame_left_not_when_it_was_built():
    run, core = _paced("sr")
    nic = run.net.hosts["s1"]
    rack = core.requester.rack
    left: list[tuple[int, int]] = []  # (PSN, time) of request frames as the NIC sends them
    recorded: list[tuple[int, int]] = []  # (PSN, time) as RACK records them
    held: list[int] = []  # frames waiting in the NIC when each one left

    def seen(now, frame):
        psn = _request_psn(frame)
        if psn is not None:
            left.append((psn, now))
            held.append(len(core.tx))

    _Leaving(nic, seen)
    core.requester.rack = _SendSpy(rack, recorded)
    s = run.run()
    assert s.data_verified and s.timeouts == 0
    assert max(held) >= 4  # frames did wait in the NIC, built long before they left
    assert recorded == left  # every send time is the wire time, in wire order
    times = [t for _, t in recorded if t > 10_000]
    gap = _frame_ns(core) * 9 // 10  # the pacer's spacing (its rounding aside)
    assert len(times) > 10 and all(b - a >= gap for a, b in zip(times, times[1:]))
