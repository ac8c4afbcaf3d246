"""DCQCN reaction point, notification point and CNP frames: hand-computed sequences per
profile (docs/congestion-control.md has the rules these numbers follow)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import fast
from roce.emu.cc import Dcqcn, NotificationPoint, cnp_frame, configure
from roce.emu.cc.dcqcn import PROFILES
from roce.emu.core.frames import Path
from roce.errors import UsageError
from roce.headers import ECN_NOT_ECT
from roce.opcodes import CNP_OPCODE
from roce.packet import icrc_of_frame, parse

L = 100e9  # line rate, b/s
US = 1_000


def rp(profile: str, *overrides: str) -> Dcqcn:
    return configure("dcqcn", profile, overrides, L / 1e9).create(L)


def g_of(profile: str) -> float:
    return (1024 - PROFILES[profile]["rp_dce_tcp_g"]) / 1024


# -- first CNP -----------------------------------------------------------------------------

def test_first_cnp_nvidia_exact():
    d = rp("nvidia")
    out = d.on_cnp(0)
    # alpha = 1023/1024; RC = 100G (1 - 1023/2048) = 100G x 1025/2048
    assert d.alpha == 1023 / 1024
    assert out.rate_bps == 100e9 * 1025 / 2048 == 50_048_828_125.0
    assert d.target == L
    assert out.deadline == 300 * US == d.timers()["rate_increase"]


@pytest.mark.parametrize("profile", ["paper", "hpcc-ns3"])
def test_first_cnp_alpha_one_halves(profile):
    d = rp(profile)
    assert d.on_cnp(7).rate_bps == 50e9
    assert d.alpha == 1.0


def test_rate_to_set_on_first_cnp():
    d = rp("nvidia", "rp_rate_to_set_on_first_cnp=20000")
    out = d.on_cnp(0)
    assert out.rate_bps == 20e9 and d.target == 20e9


# -- alpha growth and decay ----------------------------------------------------------------

@pytest.mark.parametrize("profile", ["nvidia", "paper", "hpcc-ns3"])
def test_alpha_grows_on_cnp_and_decays_per_period(profile):
    d = rp(profile)
    g = g_of(profile)
    period = PROFILES[profile]["rp_dce_tcp_rtt"] * US
    d.on_cnp(0)
    a0 = PROFILES[profile]["rp_initial_alpha_value"] / 1024
    # 3.5 periods later: three whole decays
    assert d.alpha_at(3 * period + period // 2) == pytest.approx(a0 * (1 - g) ** 3, rel=1e-12)
    # a CNP then: one more step of (1-g) alpha + g on the decayed value
    t = 10 * period
    d.on_cnp(t)
    a = a0 * (1 - g) ** 10
    assert d.alpha == pytest.approx((1 - g) * a + g, rel=1e-12)
    # the period restarts at the CNP: nothing decays before t + period
    before = d.alpha
    assert d.alpha_at(t + period - 1) == before
    assert d.alpha_at(t + period) == pytest.approx(before * (1 - g), rel=1e-12)


def test_nvidia_gain_reading():
    # NVIDIA's dce_tcp_g 1019 in 1/1024: alpha keeps 1019/1024 of itself, gains 5/1024
    d = rp("nvidia")
    d.on_cnp(0)
    d.on_cnp(4 * US)  # 4 periods decayed first
    a = 1023 / 1024 * (1019 / 1024) ** 4
    assert d.alpha == pytest.approx(1019 / 1024 * a + 5 / 1024, rel=1e-12)


# -- cuts and clamps -----------------------------------------------------------------------

def test_monitor_period_defers_second_cut():
    d = rp("nvidia")
    r1 = d.on_cnp(0).rate_bps
    out = d.on_cnp(2 * US)  # inside rate_reduce_monitor_period (4 us): no cut yet
    assert out.rate_bps == r1 and d.cut_pending
    assert d.timers()["rate_reduce"] == 4 * US
    alpha_cnp = d.alpha
    out = d.fire_due(4 * US)
    alpha = alpha_cnp * (1019 / 1024) ** 2  # two periods since the CNP's update
    assert out.rate_bps == pytest.approx(r1 * (1 - alpha / 2), rel=1e-12)
    assert d.cuts == 2 and not d.cut_pending and "rate_reduce" not in d.timers()


def test_paper_cuts_on_every_cnp():
    d = rp("paper")
    d.on_cnp(0)
    d.on_cnp(1)
    assert d.cuts == 2
    # alpha stays 1 (1 - g + g); second cut halves again; RT = RC before the cut (clamp 1)
    assert d.rate == 25e9 and d.target == 50e9


def test_min_dec_fac_clamps_a_cut():
    d = rp("nvidia", "rp_min_dec_fac=80")
    assert d.on_cnp(0).rate_bps == 80e9  # 1 - alpha/2 ~ 0.5 < 0.8


def test_min_rate_clamps_a_cut():
    d = rp("nvidia", "rp_min_rate=60000")
    assert d.on_cnp(0).rate_bps == 60e9
    d2 = rp("hpcc-ns3")
    rate = L
    t = 0
    for _ in range(20):  # halving 20 times would reach 95 kb/s; the floor is 1000 Mb/s
        rate = d2.on_cnp(t).rate_bps
        t += 4 * US
    assert rate == 1e9


def test_clamp_tgt_rate_off_keeps_target_until_a_rise():
    d = rp("nvidia", "rp_byte_reset=0")
    d.on_cnp(0)
    d.on_cnp(10 * US)  # no increase event between the cuts: RT stays
    assert d.target == L
    d.fire_due(10 * US + 300 * US)  # timer increase: the rate rose
    before = d.rate
    d.on_cnp(400 * US)
    assert d.target == before


def test_clamp_tgt_rate_on_always_sets_target():
    d = rp("nvidia", "rp_clamp_tgt_rate=1")
    d.on_cnp(0)
    r = d.rate
    d.on_cnp(10 * US)
    assert d.target == r


# -- increase stages ------------------------------------------------------------------------

def _second_cut(d: Dcqcn, profile: str) -> tuple[float, float, int]:
    """First CNP, one fast-recovery event, a second CNP: RT < line for the stage tests."""
    p = PROFILES[profile]
    d.on_cnp(0)
    if p["rp_byte_reset"]:
        d.on_sent(1, p["rp_byte_reset"])
    else:
        d.fire_due(p["rp_time_reset"] * US)
    rc = d.rate
    assert rc == pytest.approx((L + L * (1 - d.alpha / 2)) / 2, rel=1e-9)
    t = p["rp_time_reset"] * US + 100 * US
    d.on_cnp(t)
    assert d.target == rc  # the rate rose since the first cut
    return d.target, d.rate, t


@pytest.mark.parametrize("profile", ["nvidia", "paper"])
def test_stages_byte_counter_then_timer(profile):
    p = PROFILES[profile]
    d = rp(profile)
    rt, rc, t = _second_cut(d, profile)
    f, B = p["rp_threshold"], p["rp_byte_reset"]
    ai, hai = p["rp_ai_rate"] * 1e6, p["rp_hai_rate"] * 1e6
    # F byte-counter events: fast recovery
    for bc in range(1, f + 1):
        d.on_sent(t, B)
        assert d.stage() == "fast_recovery"
        rc = (rt + rc) / 2
        assert (d.b_stage, d.rate, d.target) == (bc, pytest.approx(rc), pytest.approx(rt))
    # one more: BC = F+1 > F, T = 0: additive increase
    d.on_sent(t, B)
    assert d.stage() == "additive"
    rt += ai
    rc = (rt + rc) / 2
    assert d.rate == pytest.approx(rc) and d.target == pytest.approx(rt)
    # timer events: T = 1..F keep additive (min(T, BC) <= F) ...
    deadline = t + p["rp_time_reset"] * US
    for tt in range(1, f + 1):
        assert d.deadline() == deadline
        d.fire_due(deadline)
        rt += ai
        rc = (rt + rc) / 2
        assert (d.t_stage, d.rate, d.target) == (tt, pytest.approx(rc), pytest.approx(rt))
        deadline += p["rp_time_reset"] * US
    # ... T = F+1: both exceed F: hyper increase with i = min(T, BC) - F = 1
    d.fire_due(deadline)
    assert d.stage() == "hyper"
    rt += 1 * hai
    rc = (rt + rc) / 2
    assert d.rate == pytest.approx(rc) and d.target == pytest.approx(rt)
    # BC = F+2, T = F+1: i = 1 again; then T = F+2: i = 2
    d.on_sent(deadline, B)
    rt += 1 * hai
    rc = (rt + rc) / 2
    assert d.rate == pytest.approx(rc)
    deadline += p["rp_time_reset"] * US
    d.fire_due(deadline)
    rt += 2 * hai
    rc = (rt + rc) / 2
    assert d.rate == pytest.approx(rc) and d.target == pytest.approx(rt)


def test_stages_timer_only_hpcc():
    p = PROFILES["hpcc-ns3"]
    d = rp("hpcc-ns3")
    rt, rc, t = _second_cut(d, "hpcc-ns3")
    ai, hai = 5e6 * 100 / 25, 50e6 * 100 / 25  # per 25 Gb/s, at 100 Gb/s
    assert d.ai == ai and d.hai == hai
    d.on_sent(t, 10 << 20)  # no byte counter: bytes change nothing
    assert d.rate == rc
    step = p["rp_time_reset"] * US
    expected = [("fast_recovery", 0), ("additive", 0), ("hyper", 1), ("hyper", 2)]
    for k, (stage, i) in enumerate(expected, start=1):
        d.fire_due(t + k * step)
        assert d.stage() == stage
        if stage == "additive":
            rt += ai
        elif stage == "hyper":
            rt += i * hai
        rc = (rt + rc) / 2
        assert d.rate == pytest.approx(rc) and d.target == pytest.approx(rt)


def test_recovery_ends_at_line_rate_and_timer_stops():
    d = rp("nvidia", "rp_byte_reset=0")
    d.on_cnp(0)
    t = 0
    for _ in range(100):
        if d.deadline() is None:
            break
        t = d.deadline()
        d.fire_due(t)
    assert d.rate == L and d.target == L and d.deadline() is None and not d.recovering


def test_byte_counter_needs_a_cut_first():
    d = rp("nvidia")
    d.on_sent(0, 10 << 20)
    assert d.rate == L and d.b_stage == 0


# -- parameters ------------------------------------------------------------------------------

@pytest.mark.parametrize("override, word", [
    ("rp_nonsense=1", "rp_nonsense"), ("rp_ai_rate=fast", "rp_ai_rate"),
    ("rp_min_dec_fac=101", "rp_min_dec_fac"), ("rp_threshold=1.5", "rp_threshold"),
    ("rp_ai_rate", "NAME=VALUE")])
def test_bad_cc_param_is_usage_error(override, word):
    with pytest.raises(UsageError, match=word):
        configure("dcqcn", "nvidia", [override])


def test_bad_profile_and_algorithm():
    with pytest.raises(UsageError, match="--cc-profile"):
        configure("dcqcn", "vendor-x")
    with pytest.raises(UsageError, match="--cc 'reno'"):
        configure("reno")


def test_profiles_cover_every_knob():
    for name, values in PROFILES.items():
        assert set(values) == set(Dcqcn.PARAMS), name


# -- notification point and CNP frames ---------------------------------------------------------

def test_np_spacing_per_qp():
    np_ = NotificationPoint(50 * US)
    got = [(t, q, np_.on_ce(t, q)) for t, q in
           [(0, 1), (10 * US, 1), (0, 2), (49_999, 1), (50 * US, 1), (60 * US, 2)]]
    assert [x[2] for x in got] == [True, False, True, False, True, True]
    assert (np_.cnps_sent, np_.suppressed, np_.ce_packets) == (4, 2, 6)


def test_cnp_frame():
    path = Path("02:00:00:00:00:02", "02:00:00:00:00:01", "10.0.0.2", "10.0.0.1")
    frame = cnp_frame(path, 0x12, 0x345, p_key=0x8001)
    f = parse(frame).fields()
    assert f["bth.opcode"] == CNP_OPCODE
    assert f["bth.becn"] is True and f["bth.fecn"] is False
    assert f["bth.destqp"] == 0x345 and f["bth.p_key"] == 0x8001 and f["bth.psn"] == 0
    assert f["ip.dsfield.dscp"] == 48 and f["ip.dsfield.ecn"] == ECN_NOT_ECT
    w = fast.walk(frame)
    assert w.icrc_off - w.bth_off == 12 + 16  # BTH + 16 reserved bytes
    assert int.from_bytes(frame[w.icrc_off:w.icrc_off + 4], "big") == icrc_of_frame(frame)
    assert frame[w.bth_off + 12:w.icrc_off] == bytes(16)


# -- invariants over any sequence of events -------------------------------------------------------

_EVENTS = st.lists(st.tuples(st.sampled_from(["cnp", "sent", "timer"]),
                             st.integers(0, 400 * US), st.integers(64, 1 << 20)), max_size=60)


@given(profile=st.sampled_from(sorted(PROFILES)), events=_EVENTS)
def test_rate_stays_bounded_and_below_target(profile, events):
    d = rp(profile)
    now = 0
    floor = PROFILES[profile]["rp_min_rate"] * 1e6
    for kind, dt, nbytes in events:
        now += dt
        while d.deadline() is not None and d.deadline() < now:  # as a driver fires them
            d.fire_due(d.deadline())
        if kind == "cnp":
            out = d.on_cnp(now)
        elif kind == "sent":
            out = d.on_sent(now, nbytes)
        else:
            now = max(now, d.deadline() or now)
            out = d.fire_due(now)
        assert min(floor, L) <= out.rate_bps <= d.target <= L
        assert 0.0 <= d.alpha <= 1.0
        assert out.deadline is None or out.deadline >= now
        assert d.recovering == (out.rate_bps < L)
