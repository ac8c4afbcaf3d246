"""Swift behind the congestion-control interface (roce/emu/cc/swift.py): the target delay
with its flow-count and hop terms, additive increase, the multiplicative decrease at most once
per RTT, the timeout's cut and reset, pacing below one packet, each on hand-computed values;
then the 16:1 incast on the switched network, where the queueing delay settles near the
target."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce.emu.cc import Swift, configure
from roce.emu.cc.experiments import US, watched
from roce.emu.net.runner import NetScenario, run_network
from roce.errors import UsageError

L = 100e9
# the flow-scaling term of the htsim profile (fs_range 100 us over [0.1, 100] packets):
# a = 100 / (1/sqrt(0.1) - 1/sqrt(100)) = 32.655432 us, b = -a / 10, fs(cwnd) = a/sqrt(cwnd) + b
A = 32_655.43203371752  # ns


def flow(*overrides: str) -> Swift:
    s = configure("swift", None, overrides).create(L)
    assert isinstance(s, Swift)
    return s


def test_target_scales_with_flow_count_and_hops():
    s = flow()
    s.cwnd = 4.0  # fs = a/2 - a/10 = 0.4 a = 13.062 us
    assert s.target_delay() == pytest.approx(20_000 + 13_062.17, abs=0.01)
    s.hops = 3  # counted on the ACKs: 3 x 3.053 us more
    assert s.target_delay() == pytest.approx(20_000 + 9_159 + 13_062.17, abs=0.01)
    s.cwnd = 25.0  # fs = a/5 - a/10 = 3.266 us: a larger window, fewer flows, a lower target
    assert s.target_delay() == pytest.approx(20_000 + 9_159 + 3_265.54, abs=0.01)
    s.cwnd = 100.0  # fs_max_cwnd: no flow term
    assert s.target_delay() == pytest.approx(29_159)
    s.cwnd = 0.05  # below fs_min_cwnd: the term stops at fs_range
    assert s.target_delay() == pytest.approx(129_159)
    fixed = flow("swift_hops=2")  # a configured hop count wins over the ACKs' count
    fixed.hops, fixed.cwnd = 5, 100.0
    assert fixed.target_delay() == pytest.approx(20_000 + 6_106)


def test_additive_increase_below_target():
    s = flow()  # cwnd 15: target 20 + fs(15) = 25.166 us
    out = s.on_ack(0, 10 * US, 3)
    assert s.cwnd == pytest.approx(15 + 3 / 15) and out.window == 15
    assert s.target == pytest.approx(20_000 + A / 15 ** 0.5 - A / 10)
    s.cwnd = 0.5  # below one packet: ai per packet acknowledged, not per window
    s.on_ack(1, 10 * US, 2)
    assert s.cwnd == pytest.approx(2.5)


def test_multiplicative_decrease_once_per_rtt():
    s = flow()
    s.cwnd = 4.0  # target 33.062 us
    s.on_ack(0, 50 * US, 1)  # 1 - 0.8 (50 - 33.062) / 50 = 0.728995
    assert s.cwnd == pytest.approx(4 * (1 - 0.8 * (50_000 - 33_062.17) / 50_000))
    assert s.cwnd == pytest.approx(2.91598, abs=1e-5) and s.decreases == 1
    before = s.cwnd
    s.on_ack(49_999, 50 * US, 1)  # less than one RTT (this sample, 50 us) since: held
    assert s.cwnd == before
    s.on_ack(50 * US, 50 * US, 1)  # one RTT on: the next decrease
    assert s.cwnd < before and s.decreases == 2
    big = flow()
    big.cwnd = 4.0
    big.on_ack(0, 400 * US, 1)  # 1 - 0.8 x 367/400 = 0.27: max_mdf holds the cut to half
    assert big.cwnd == pytest.approx(2.0)


def test_timeouts_cut_once_per_rtt_then_reset():
    s = flow()
    s.on_ack(0, 10 * US, 0)  # an RTT sample of 10 us, no change
    assert s.on_timeout(100 * US).window == 7  # 15 x (1 - 0.5) = 7.5
    s.on_timeout(105 * US)  # within one RTT of that cut: counted, no cut
    assert s.cwnd == 7.5 and s.retransmits == 2
    s.on_timeout(120 * US)
    s.on_timeout(200 * US)
    assert s.cwnd == pytest.approx(1.875) and s.retransmits == 4
    s.on_timeout(300 * US)  # the fifth in a row: the window's floor
    assert s.cwnd == pytest.approx(0.001)
    s.on_ack(400 * US, 10 * US, 1)  # an ACK ends the run
    assert s.retransmits == 0


def test_paced_below_one_packet():
    s = flow()
    s.on_sent(0, 4_158)  # the largest frame the QP sent: 4 KiB of payload and headers
    s.cwnd = 0.25  # target 20 + 1.9 a = 82.045 us
    out = s.on_ack(1, 40 * US, 0)
    # one packet per RTT / cwnd = 160 us: 4158 bytes x 8 / 160 us
    assert out.window == 1
    assert out.rate_bps == pytest.approx(0.25 * 4_158 * 8 / 40e-6)  # 207.9 Mb/s
    s.on_ack(2, 40 * US, 3)  # back above one packet: the window alone, at line rate
    assert s.cwnd == pytest.approx(3.25) and s.on_sent(3, 100).rate_bps == L


def test_knobs_checked_together():
    with pytest.raises(UsageError, match="swift_fs_min_cwnd"):
        configure("swift", None, ["swift_fs_min_cwnd=50", "swift_fs_max_cwnd=10"])
    with pytest.raises(UsageError, match="swift_min_cwnd"):
        configure("swift", None, ["swift_min_cwnd=20", "swift_max_cwnd=10"])
    with pytest.raises(UsageError, match="swift_beta"):
        configure("swift", None, ["swift_beta=1.5"])


@given(events=st.lists(st.tuples(st.sampled_from(["ack", "timeout", "sent"]),
                                 st.integers(1, 2_000 * US), st.integers(0, 64)),
                       max_size=120))
def test_window_and_rate_stay_within_bounds(events):
    s = flow()
    now = 0
    for kind, x, n in events:
        now += x // 7
        out = (s.on_ack(now, x, n) if kind == "ack" else s.on_timeout(now)
               if kind == "timeout" else s.on_sent(now, 64 + n * 64))
        assert 0.001 <= s.cwnd <= 128 and 1 <= out.window <= 128
        assert 0 < out.rate_bps <= L
        if s.cwnd >= 1:
            assert out.rate_bps == L  # the window alone


def _incast(n: int):
    sc = NetScenario(topology=f"incast:{n}", op="write", size=1 << 20, count=1, depth=1,
                     cc=configure("swift"))
    return watched(sc, 2 * US, lambda algos: [(a.rtt, a.target, a.hops) for a in algos
                                              if a is not None and a.rtt is not None])


def test_incast_queueing_delay_settles_near_the_target():
    _, alone = _incast(1)  # one sender: the path's RTT without a queue
    base = min(r for p in alone.probes for r, _, _ in p)
    assert 3 * US < base < 8 * US
    s, w = _incast(16)
    assert s.data_verified and s.fabric["drops"] == 0 and s.fabric["pfc_frames"] == 0
    assert all(h == 1 for p in w.probes for _, _, h in p)  # one switch: TTL 64 -> 63
    mid = [i for i, t in enumerate(w.times) if 200 * US <= t <= 1200 * US]
    queue = w.queues[w.busiest()]
    queueing = statistics.mean(queue[i] for i in mid) * 8 / 100  # ns at 100 Gb/s
    target = statistics.mean(statistics.mean(t for _, t, _ in w.probes[i]) for i in mid)
    rtt = statistics.mean(statistics.mean(r for r, _, _ in w.probes[i]) for i in mid)
    # the target is 20 us + one hop + the flow term of ~6-packet windows: ~32 us
    assert 28 * US < target < 36 * US
    assert abs(queueing - (target - base)) < 0.15 * (target - base)
    assert abs(rtt - target) < 0.15 * target
    # the 16 MiB leave in about the time the link needs for them
    assert s.fct_ns["p99"] < 1.05 * (16 << 20) * 8 / 100


def test_incast_queue_is_bounded_where_none_is_not():
    none = run_network(NetScenario(topology="incast:16", op="write", size=1 << 20, count=1,
                                   depth=1))
    s, _ = _incast(16)
    assert s.data_verified and none.fabric["pfc_frames"] > 0
    # the first windows (16 x 15 packets) make the peak; after it the queue holds ~30 us
    assert s.fabric["max_queue_bytes"] < none.fabric["max_queue_bytes"] / 4


def test_a_zero_target_and_a_zero_delay_change_nothing():
    """Every target term at 0 (each knob's lower bound) and an RTT sample of 0 ns: the
    delay is not above the target, so there is nothing to decrease (and no division by
    the delay)."""
    s = flow("swift_base_target=0", "swift_hop_scale=0", "swift_fs_range=0")
    out = s.on_ack(0, 0, 1)
    assert s.target == 0 and s.cwnd == 15.0 and out.window == 15
    s.on_ack(1, 1, 1)  # 1 ns over a 0 target: the largest cut, max_mdf
    assert s.cwnd == 7.5
