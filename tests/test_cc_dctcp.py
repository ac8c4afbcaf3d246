"""DCTCP behind the congestion-control interface (roce/emu/cc/dctcp.py): alpha's update per
window of data, the cut on an echo at most once per window, slow start and additive increase,
the timeout's loss window, each on hand-computed values; then the 16:1 incast on the switched
network, where its queue oscillates around the marking threshold K (the DCTCP paper's result)
and every CE mark comes back as one CNP."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce.emu.cc import Dctcp, configure
from roce.emu.cc.experiments import US, watched
from roce.emu.net.runner import NetScenario, run_network
from roce.errors import UsageError

L = 100e9


def flow(*overrides: str) -> Dctcp:
    d = configure("dctcp", None, overrides).create(L)
    assert isinstance(d, Dctcp)
    return d


def test_profile_echoes_every_mark():
    cfg = configure("dctcp")
    assert cfg.profile == "rfc8257" and cfg.uses_cnp
    assert cfg.np_interval_ns == 0  # the notification point answers every CE-marked packet
    d = cfg.create(L)
    assert (d.g, d.alpha, d.cwnd, d.min_cwnd, d.window) == (1 / 16, 1.0, 10.0, 2, 10)
    assert d.on_ack(0, 5 * US, 0).rate_bps == L  # the window paces: the rate stays at line


def test_alpha_moves_once_per_window_of_data():
    d = flow("dctcp_alpha_init=0")
    d.on_cnp(0)  # alpha 0: the cut keeps the window (10 x (1 - 0/2))
    d.on_cnp(1)
    assert (d.cwnd, d.alpha, d.echoes_in_window) == (10.0, 0.0, 2)
    d.on_ack(2, 0, 6)
    assert d.alpha == 0.0  # 6 of the window's 10 packets: not over yet
    d.on_ack(3, 0, 4)  # the window's 10th: F = 2 echoes / 10 packets
    assert d.alpha == pytest.approx(1 / 16 * 0.2)  # 0.0125
    assert (d.acked_in_window, d.echoes_in_window, d.window_left) == (0, 0, 10.0)
    d.on_ack(4, 0, 5)
    d.on_ack(5, 0, 5)  # a clean window: F = 0
    assert d.alpha == pytest.approx(0.0125 * 15 / 16)  # 0.01171875


@pytest.mark.parametrize("fraction", [0.05, 0.1, 0.25, 0.5, 0.9])
def test_alpha_converges_to_the_marked_fraction(fraction):
    """A steady share of marked packets, spread evenly (packet i is marked when
    floor((i + 1) f) > floor(i f)), each echo before its packet's ACK, the window free to cut
    and grow: after 200 windows of data alpha stays within 0.02 of the share (the DCTCP
    paper's estimate of the fraction of marked packets)."""
    d = flow()
    i = 0
    seen = []
    for _ in range(400):
        for _ in range(int(d.cwnd)):
            if int((i + 1) * fraction) > int(i * fraction):
                d.on_cnp(i)
            d.on_ack(i, 0, 1)
            i += 1
        seen.append(d.alpha)
    assert all(abs(a - fraction) < 0.02 for a in seen[200:]), (min(seen[200:]), max(seen[200:]))


def test_a_cut_takes_alpha_over_two_once_per_window():
    d = flow()  # alpha 1 at the start: the first echo halves the window
    out = d.on_cnp(0)
    assert (d.cwnd, d.ssthresh, out.window, d.cuts) == (5.0, 5.0, 5, 1)
    d.on_cnp(1)  # in the same window: counted, no second cut
    assert (d.cwnd, d.cuts, d.echoes) == (5.0, 1, 2)
    d.on_ack(2, 0, 9)  # 9 of the 10 packets in flight at the cut: still cutting
    assert d.cwnd == 5.0 and d.cwr_left == 1.0
    d.on_ack(3, 0, 1)  # the 10th: the cut is over (no increase on this ACK, as Linux's CWR)
    assert d.cwnd == 5.0 and d.cwr_left == 0.0
    # that ACK also ended alpha's window: F = 2/10, alpha = 15/16 + 0.2/16 = 0.95
    assert d.alpha == pytest.approx(0.95)
    d.on_cnp(4)  # a new window: cut by alpha / 2
    assert d.cwnd == pytest.approx(5 * (1 - 0.95 / 2)) and d.window == 2  # 2.625 packets


def test_slow_start_then_additive_increase():
    d = flow()
    d.on_ack(0, 0, 3)  # ssthresh infinite: slow start, one packet per packet acknowledged
    assert d.cwnd == 13.0
    d.on_cnp(1)
    d.on_ack(2, 0, 13)  # the cut's window of data: no increase
    d.on_ack(3, 0, 2)  # cwnd 6.5 = ssthresh: congestion avoidance, 2 / 6.5 packets
    assert d.cwnd == pytest.approx(6.5 + 2 / 6.5)
    assert d.window == 6


def test_window_bounds_and_timeout():
    d = flow("dctcp_max_cwnd=12")
    d.on_ack(0, 0, 50)
    assert d.cwnd == 12.0  # dctcp_max_cwnd
    for k in range(20):  # each cut after a window of data: never below dctcp_min_cwnd
        d.on_cnp(10 * k)
        d.on_ack(10 * k + 1, 0, 20)
    assert d.cwnd >= 2.0 and d.window >= 2
    d2 = flow()
    out = d2.on_timeout(0)  # RFC 5681: the loss window, and half the window as ssthresh
    assert (d2.cwnd, d2.ssthresh, out.window) == (1.0, 5.0, 1)
    d2.on_ack(1, 0, 1)
    assert d2.cwnd == 2.0  # slow start again


def test_knobs_checked():
    with pytest.raises(UsageError, match="dctcp_g"):
        configure("dctcp", None, ["dctcp_g=2"])
    with pytest.raises(UsageError, match="dctcp_min_cwnd"):
        configure("dctcp", None, ["dctcp_min_cwnd=0"])
    assert configure("dctcp", None, ["np_min_time_between_cnps=4"]).np_interval_ns == 4_000


@given(events=st.lists(st.tuples(st.sampled_from(["cnp", "ack", "timeout"]),
                                 st.integers(0, 40)), max_size=120))
def test_window_stays_a_whole_number_within_bounds(events):
    d = flow()
    for k, (kind, n) in enumerate(events):
        out = (d.on_cnp(k) if kind == "cnp" else d.on_timeout(k) if kind == "timeout"
               else d.on_ack(k, 0, n))
        assert isinstance(out.window, int) and 1 <= out.window <= 128
        assert 0.0 <= d.alpha <= 1.0 and out.rate_bps == L


def _incast(cc: str, ecn: str = "200K,200K,1", **kw):
    sc = NetScenario(topology="incast:16", op="write", size=1 << 20, count=1, depth=1,
                     ecn=ecn, cc=configure(cc), **kw)
    return watched(sc, 2 * US)


def test_incast_queue_oscillates_around_the_marking_threshold():
    """Step marking at K = 200 KB (--ecn K,K,1, as the DCTCP paper's switches mark): after
    the first windows the bottleneck queue stays near K, above it part of the time and below
    it part of the time, while 16 senders share the port."""
    k = 200_000
    s, w = _incast("dctcp")
    assert s.data_verified and s.fabric["drops"] == 0 and s.fabric["pfc_frames"] == 0
    q = [x for t, x in zip(w.times, w.queues[w.busiest()]) if 200 * US <= t <= 1200 * US]
    assert 0.8 * k <= statistics.mean(q) <= 1.2 * k
    assert 0.5 * k <= min(q) and max(q) <= 1.5 * k
    above = sum(x > k for x in q) / len(q)
    assert 0.2 <= above <= 0.8
    assert sum((a > k) != (b > k) for a, b in zip(q, q[1:])) >= 20  # it crosses K, often
    # the echo path: one CNP per CE-marked packet, each reaching its sender
    f = s.fabric
    ce = sum(fl["ce_received"] for fl in s.flows)
    assert f["cnps_sent"] == f["cnps_received"] == ce == f["ecn_marked"] > 0
    # and the port stays busy: the 16 MiB leave in about the time the link needs for them
    assert s.fct_ns["p99"] < 1.05 * (16 << 20) * 8 / 100


def test_incast_queue_is_bounded_where_none_is_not():
    none = run_network(NetScenario(topology="incast:16", op="write", size=1 << 20, count=1,
                                   depth=1))
    s, _ = _incast("dctcp", ecn="on")  # the rate-scaled RED defaults (docs)
    assert s.data_verified and none.data_verified
    assert none.fabric["pfc_frames"] > 0
    assert s.fabric["pfc_frames"] == 0 and s.fabric["drops"] == 0
    assert s.fabric["max_queue_bytes"] < none.fabric["max_queue_bytes"] / 4
