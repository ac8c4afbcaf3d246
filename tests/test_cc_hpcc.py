"""HPCC's reaction point (roce/emu/cc/hpcc.py) on hand-made hop records: the utilization of
a hop from its queue and transmit rate, the largest hop chosen, the smoothing over tau / T,
the multiplicative step toward eta, the additive stages, the commit once per RTT; then a
fluid model of sixteen flows on one link, where the queue drains to near zero while the link
stays at eta (the HPCC paper's claim, on the algorithm alone; tests/test_cc_hpcc_net.py
holds it on the switched network, telemetry on the wire)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce.emu.cc.algorithms import ALGORITHMS
from roce.emu.cc.hpcc import PARAMS, PROFILES, Hop, Hpcc
from roce.emu.cc.params import resolve

L = 100e9
T = 5_000  # ns: the profile's base RTT
W_INIT = 62_500  # bytes: 100 Gb/s x 5 us
W_AI = W_INIT * 0.05 / 16  # 195.3125 bytes


def flow(**overrides: float) -> Hpcc:
    params = resolve(PARAMS, PROFILES, "paper", [f"{k}={v}" for k, v in overrides.items()],
                     100.0, "hpcc")
    return Hpcc(params, L)


def primed(h: Hpcc, *hops: Hop) -> Hpcc:
    """The first ACK: its records only."""
    out = h.on_telemetry(0, hops, acked_psn=0, next_psn=10)
    assert out.rate_bps == L and h.commits == 0 and h.u == 1.0
    return h


def test_behind_cc_reading_telemetry():
    assert ALGORITHMS["hpcc"] is Hpcc and Hpcc.uses_int and not Hpcc.uses_cnp


def test_the_byte_counter_wraps_as_ints_field():
    """INT's Tx utilization field is 32 bits: a counter that went back wrapped once."""
    h = primed(flow(), Hop(0, (1 << 32) - 31_250, 0, L))
    h.on_telemetry(T, [Hop(0, 31_250, T, L)], acked_psn=11, next_psn=30)
    assert h.u == pytest.approx(1.0)  # 62500 bytes in T: the link full


def test_a_full_link_without_a_queue_steps_to_eta():
    h = primed(flow(), Hop(0, 0, 0, L))
    # 62500 bytes in 5 us: 100 Gb/s, u = 1, tau = T: U = 1
    out = h.on_telemetry(T, [Hop(0, 62_500, T, L)], acked_psn=11, next_psn=30)
    assert h.u == pytest.approx(1.0)
    assert h.w == pytest.approx(W_INIT * 0.95 + W_AI)  # 59570.3125 bytes
    assert out.rate_bps == pytest.approx(59_570.3125 * 8 / 5e-6)  # 95.3125 Gb/s
    assert (h.wc, h.stage, h.commits, h.last_update_psn) == (h.w, 0, 1, 30)


def test_a_standing_queue_counts_once_in_both_records():
    h = primed(flow(), Hop(31_250, 0, 0, L))
    # half a BDP queued in both records and the link full: u = 0.5 + 1
    h.on_telemetry(T, [Hop(31_250, 62_500, T, L)], acked_psn=11, next_psn=30)
    assert h.u == pytest.approx(1.5)
    assert h.w == pytest.approx(W_INIT / (1.5 / 0.95) + W_AI)  # 39778.6 bytes
    # a queue in only one of the two records is not standing: min(qlen, previous) is 0
    g = primed(flow(), Hop(0, 0, 0, L))
    g.on_telemetry(T, [Hop(62_500, 62_500, T, L)], acked_psn=11, next_psn=30)
    assert g.u == pytest.approx(1.0)


def test_the_busiest_hop_sets_u_and_tau_smooths_it():
    h = primed(flow(), Hop(0, 0, 0, L), Hop(0, 0, 0, 25e9))
    # hop 1 at 50 % of 100 G over 1 us; hop 2 full at 25 G over 1 us with 7812.5 bytes queued
    # twice: u2 = 7812.5 x 8 / (25e9 x 5 us) + 1 = 1.5, the larger; tau = 1 us
    h.on_telemetry(1_000, [Hop(0, 6_250, 1_000, L), Hop(7_812, 3_125, 1_000, 25e9)],
                   acked_psn=11, next_psn=30)
    h2 = primed(flow(), Hop(0, 0, 0, L), Hop(7_812, 0, 0, 25e9))
    h2.on_telemetry(1_000, [Hop(0, 6_250, 1_000, L), Hop(7_812, 3_125, 1_000, 25e9)],
                    acked_psn=11, next_psn=30)
    u2 = 7_812 * 8 / (25e9 * 5e-6) + 1  # 1.49984
    assert h.u == pytest.approx(0.8 * 1 + 0.2 * 1.0)  # hop 2's queue was not in both: u = 1
    assert h2.u == pytest.approx(0.8 * 1 + 0.2 * u2)  # U = (1 - tau/T) U + tau/T u


def test_additive_stages_then_a_multiplicative_step():
    h = flow()
    h.wc = h.w = 20_000.0
    primed(h, Hop(0, 0, 0, L))
    now, sent, psn = 0, 0, 10
    for k in range(5):  # the link at 32 %: below eta, Wc + W_AI, one stage per RTT
        now += T
        sent += 20_000
        h.on_telemetry(now, [Hop(0, sent, now, L)], acked_psn=psn + 1, next_psn=psn + 20)
        psn += 20
        assert h.stage == k + 1
        assert h.wc == pytest.approx(20_000 + (k + 1) * W_AI)
    # maxStage reached: the multiplicative step, Wc / (U / eta) (up, as U < eta), stage 0
    now += T
    sent += 20_000
    u = 0.32
    wc = h.wc
    h.on_telemetry(now, [Hop(0, sent, now, L)], acked_psn=psn + 1, next_psn=psn + 20)
    assert h.u == pytest.approx(u)
    assert h.wc == pytest.approx(wc / (u / 0.95) + W_AI) and h.stage == 0


def test_wc_is_committed_once_per_rtt():
    h = primed(flow(), Hop(0, 0, 0, L))
    h.on_telemetry(T, [Hop(0, 62_500, T, L)], acked_psn=11, next_psn=30)
    wc = h.wc
    # ACKs up to PSN 30 were sent before that commit: they react, they do not commit
    h.on_telemetry(T + 1_000, [Hop(31_250, 75_000, T + 1_000, L)], acked_psn=20,
                   next_psn=40)
    assert h.wc == wc and h.commits == 1 and h.last_update_psn == 30
    assert h.w < wc  # the fast reaction: a queue seen now lowers the window now
    h.on_telemetry(T + 2_000, [Hop(31_250, 87_500, T + 2_000, L)], acked_psn=31,
                   next_psn=50)
    assert h.commits == 2 and h.wc == h.w and h.last_update_psn == 50


def test_no_usable_record_keeps_u_and_an_idle_path_allows_line_rate():
    h = primed(flow(), Hop(0, 0, 100, L))
    h.on_telemetry(100, [Hop(0, 0, 100, L)], acked_psn=11, next_psn=30)  # no time between
    assert h.u == 1.0
    idle = primed(flow(hpcc_max_stage=0), Hop(0, 0, 0, L))
    out = idle.on_telemetry(T, [Hop(0, 0, T, L)], acked_psn=11, next_psn=30)
    assert idle.u == 0.0 and out.rate_bps == L  # U = 0: the largest window, not a division


@given(st.lists(st.tuples(st.integers(0, 10 << 20), st.integers(0, 1 << 20),
                          st.integers(0, 20_000), st.integers(0, 1 << 24)), max_size=60))
def test_rate_stays_within_its_bounds(steps):
    h = primed(flow(), Hop(0, 0, 0, L))
    sent = ts = 0
    for k, (qlen, nbytes, dt, psn) in enumerate(steps):
        sent += nbytes
        ts += dt
        out = h.on_telemetry(ts, [Hop(qlen, sent, ts, L)], acked_psn=psn, next_psn=psn + k)
        assert 100e6 - 1e-3 <= out.rate_bps <= L
        assert h.u >= 0


def test_sixteen_flows_hold_the_link_at_eta_with_no_queue():
    """A fluid model of one 100 Gb/s link shared by sixteen flows that start at line rate
    (the 16:1 incast): every 1 us the queue grows by the rates' excess over the link, each
    flow gets an ACK carrying the link's record, and the PSNs advance by the packets sent.
    After the first 20 RTTs the queue stays under 1 KB and the link busy at >= 94 %."""
    n, dt = 16, 1_000
    flows = [flow() for _ in range(n)]
    q = 0.0
    sent = 0.0
    psns = [0] * n
    busy, queues = [], []
    for step in range(1, 400):
        now = step * dt
        offered = sum(f.rate for f in flows) * dt / 8e9  # bytes this microsecond
        out = min(offered + q, L * dt / 8e9)
        q = q + offered - out
        sent += out
        for i, f in enumerate(flows):
            psns[i] += max(1, int(f.rate * dt / 8e9 / 4096))
            f.on_telemetry(now, [Hop(int(q), int(sent), now, L)], acked_psn=psns[i] - 1,
                           next_psn=psns[i] + 5)
        if now > 20 * T:
            busy.append(out / (L * dt / 8e9))
            queues.append(q)
    assert max(queues) < 1_000
    assert sum(busy) / len(busy) >= 0.94
