"""TIMELY behind the congestion-control interface: each rule of Algorithm 1 on hand-computed
RTT sequences, and two flows fed the same RTT signal converging to a fair share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce.emu.cc import ALGORITHMS, Timely, configure
from roce.emu.cc.base import CongestionControl
from roce.errors import UsageError

L = 100e9
US = 1_000


def flow(start_gbps: float = 50.0, *overrides: str) -> Timely:
    t = configure("timely", None, overrides, L / 1e9).create(L)
    t.rate = start_gbps * 1e9
    return t


def test_first_sample_only_remembers():
    t = flow()
    assert t.on_ack(0, 100 * US).rate_bps == 50e9 and t.prev_rtt == 100 * US


def test_below_t_low_additive():
    t = flow()
    t.on_ack(0, 30 * US)
    assert t.on_ack(1, 40 * US).rate_bps == pytest.approx(50e9 + 10e6)
    assert t.rule == "t_low"


def test_above_t_high_multiplicative():
    t = flow()
    t.on_ack(0, 600 * US)
    r = t.on_ack(1, 1000 * US).rate_bps
    assert r == pytest.approx(50e9 * (1 - 0.8 * (1 - 500 / 1000)))  # 30 Gb/s
    assert t.rule == "t_high"


def test_positive_gradient_decreases():
    t = flow()
    t.on_ack(0, 100 * US)
    # new diff 20 us; EWMA from 0: 0.875 x 20 = 17.5 us; / min RTT 20 us = 0.875
    r = t.on_ack(1, 120 * US).rate_bps
    assert t.gradient == pytest.approx(0.875)
    assert r == pytest.approx(50e9 * (1 - 0.8 * 0.875))
    # next: diff -10 us -> EWMA 0.125 x 17.5 + 0.875 x (-10) = -6.5625 us: additive
    r2 = t.on_ack(2, 110 * US).rate_bps
    assert t.rtt_diff == pytest.approx(-6_562.5)
    assert r2 == pytest.approx(r + 10e6) and t.rule == "additive"


def test_hai_after_n_negative_completions():
    t = flow()
    t.on_ack(0, 200 * US)
    rates = [t.on_ack(k, (200 - k) * US).rate_bps for k in range(1, 8)]
    steps = [round((b - a) / 1e6) for a, b in zip([50e9] + rates, rates)]
    assert steps == [10, 10, 10, 10, 50, 50, 50]  # N = 5: the fifth on takes N x delta
    t.on_ack(9, 300 * US)  # a positive gradient ends the run
    assert t.negative_run == 0


def test_rate_bounds():
    t = flow(99.999)
    t.on_ack(0, 10 * US)
    assert t.on_ack(1, 10 * US).rate_bps == L
    t2 = flow(0.02)
    t2.on_ack(0, 100 * US)
    assert t2.on_ack(1, 400 * US).rate_bps == 10e6  # timely_min_rate


def test_overrides_and_profiles():
    t = configure("timely", "paper", ["timely_beta=0.5"]).create(L)
    assert t.beta == 0.5
    with pytest.raises(UsageError, match="timely"):
        configure("timely", "nvidia")
    with pytest.raises(UsageError, match="rp_ai_rate"):
        configure("timely", None, ["rp_ai_rate=5"])


def test_interface_is_shared():
    for name, cls in ALGORITHMS.items():
        assert issubclass(cls, CongestionControl) and cls.name == name
        inst = configure(name).create(L)
        for out in (inst.on_cnp(0), inst.on_ack(1, 10 * US), inst.on_sent(2, 1000),
                    inst.fire_due(3)):
            assert 0 < out.rate_bps <= L


def test_two_flows_converge():
    """Closed loop: one 10 Gb/s bottleneck queue (the TIMELY paper's NIC speed); both flows
    see the RTT it makes every 10 us, starting at 90 % / 10 % of the link."""
    cap = 10e9
    a, b = (configure("timely", None, (), cap / 1e9).create(cap) for _ in range(2))
    a.rate, b.rate = 0.9 * cap, 0.1 * cap
    q = 0.0  # bytes
    dt = 10 * US
    shares = []
    for k in range(40_000):
        q = max(0.0, q + (a.rate + b.rate - cap) * dt / 1e9 / 8)
        rtt = 20 * US + int(q * 8 / cap * 1e9)
        a.on_ack(k * dt, rtt)
        b.on_ack(k * dt, rtt)
        if k >= 30_000:
            shares.append(a.rate / (a.rate + b.rate))
    assert abs(sum(shares) / len(shares) - 0.5) < 0.05
    jain = (a.rate + b.rate) ** 2 / (2 * (a.rate ** 2 + b.rate ** 2))
    assert jain > 0.99
    assert a.rate + b.rate > 0.9 * cap  # and they still fill the link


@given(rtts=st.lists(st.integers(1, 2_000 * US), min_size=1, max_size=80),
       start=st.floats(0.01, 100.0))
def test_timely_rate_stays_within_bounds(rtts, start):
    t = flow(start)
    for k, rtt in enumerate(rtts):
        out = t.on_ack(k * US, rtt)
        assert 10e6 <= out.rate_bps <= L or (k == 0 and out.rate_bps == start * 1e9)
        assert out.deadline is None and out.window is None
