"""Units of the switched network: pause state, the lean PFC reader, the pacer, buffers,
spraying."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from roce import macc
from roce.emu.net.buffer import BufferConfig, SharedBuffer, headroom_bytes
from roce.emu.net.pfc import PauseState, class_times, pause_ns
from roce.emu.net.stages import RatePacer, SprayForwarder

RATE = 100_000_000_000
MAC = bytes.fromhex("020000000001")


def test_pause_time_is_512_bit_times_per_quantum():
    # 65535 x 512 bits at 100 Gb/s = 335539.2 ns, rounded up
    assert pause_ns(macc.MAX_QUANTA, RATE) == 335_540
    assert pause_ns(1, 25_000_000_000) == 21  # 20.48 ns
    assert pause_ns(0, RATE) == 0


@given(st.dictionaries(st.sampled_from(list(macc.PRIORITIES)), st.integers(0, 0xFFFF)))
def test_lean_reader_agrees_with_the_codec(times):
    f = macc.build_pfc(MAC, times)
    assert class_times(f) == macc.parse_macc(f).class_times() == times


@given(st.integers(0, 0xFFFF))
def test_lean_reader_pause(quanta):
    f = macc.build_pause(MAC, quanta)
    assert class_times(f) == macc.parse_macc(f).class_times()


def test_pause_state_stops_exactly_the_enabled_priorities():
    s = PauseState(RATE)
    assert s.on_frame(1000, macc.build_pfc(MAC, {3: 100}))
    d = pause_ns(100, RATE)
    assert [s.paused(p, 1000) for p in range(8)] == [p == 3 for p in range(8)]
    assert not s.paused(3, 1000 + d)
    # a new pause time replaces the running one; XON ends it; paused time adds up exactly
    s.on_frame(1100, macc.build_pfc(MAC, {3: 100}))
    s.on_frame(1200, macc.build_pfc(MAC, {3: 0}))
    assert not s.paused(3, 1200) and s.paused_ns_at(5000) == 200
    assert (s.xoffs, s.xons, s.frames) == (2, 1, 3)
    # 802.3x PAUSE holds every priority
    s.on_frame(2000, macc.build_pause(MAC, 10))
    assert all(s.paused(p, 2000) for p in range(8))
    assert s.paused_ns_at(2001) == 200 + 8
    assert not s.on_frame(0, b"\x01" * 60)  # not MAC Control


def test_pacer_spaces_frames_at_its_rate():
    p = RatePacer(10_000_000_000)
    p.sent(0, 1250)  # 1000 ns at 10 Gb/s
    assert p.next_allowed() == 1000
    p.sent(500, 1250)  # sent early (a burst): the next slot moves on from the last
    assert p.next_allowed() == 2000 and p.bytes_sent == 2500


def test_shared_buffer_threshold_reserve_headroom():
    b = SharedBuffer(BufferConfig(size=1 << 20), max_frame=4224)
    hr = headroom_bytes(100, 1000, 4224)
    assert hr == 25_000 + 2 * 4224 + 64
    lossless = b.account(hr)
    lossy = b.account()
    assert b.shared_size == (1 << 20) - 2 * 4224 - hr
    assert b.admit(lossless, 4000, True) == 0  # the reserve first
    # lossy fills up to alpha x free shared, then tail-drops
    n = 0
    while b.admit(lossy, 1000, False) >= 0:
        n += 1
    assert lossy.held[1] <= b.alpha * (b.shared_size - b.shared_used) + 1000
    assert n > 0 and b.shared_used == lossy.held[1]
    # lossless above the threshold asks for a pause, then uses headroom, then drops
    while not b.should_pause(lossless):
        assert b.admit(lossless, 1000, True) >= 0
    lossless.xoff = True
    used = 0
    while b.admit(lossless, 1000, True) == 2:
        used += 1000
    assert used == hr // 1000 * 1000 and b.lossless_drops == 1


def test_a_qps_deadline_is_the_earliest_of_its_named_timers():
    from emu_helpers import pair, send

    p = pair(timeout=8)
    core = p.qa.core
    assert core.timers() == {} and core.deadline() is None
    send(p, 1, 0, 100)  # no receive posted at b: an RNR NAK will come back
    t = core.timers()
    assert set(t) == {"ack_timeout"} and core.deadline() == t["ack_timeout"]
    p.fab.run_until(lambda: p.qa.core.requester.rnr_until is not None, 10_000_000)
    assert set(core.timers()) == {"rnr"}  # the ACK timer waits while the RNR timer runs
    core.extra_timers["cc_rate_increase"] = 5
    assert core.timers()["cc_rate_increase"] == 5 and core.deadline() == 5
    core.extra_timers.clear()
    assert core.deadline() == core.timers()["rnr"]


def test_a_paced_qp_sends_at_its_pacers_rate():
    from net_helpers import scenario

    from roce.emu.net.runner import NetRun

    size = 1 << 20
    times = {}
    for rate in (100, 25):
        r = NetRun(scenario(topology="incast:1", size=size, ecn="off"))
        nic = r.net.hosts["s1"]
        for p in nic.pacers.values():
            p.rate_bps = rate * 1_000_000_000  # what congestion control will do
        s = r.run()
        assert s.data_verified
        times[rate] = s.fct_ns["mean"]
    wire_time = size * 8 / 100  # ns at line rate, payload only
    assert wire_time < times[100] < 1.2 * wire_time
    assert 3.8 * wire_time < times[25] < 4.4 * wire_time


@given(st.integers(0, 2**32), st.lists(st.integers(1, 70), min_size=1, max_size=40))
def test_spraying_draws_the_port_randrange_would(seed, widths):
    """``SprayForwarder.pick`` draws from the generator itself (``getrandbits``); the port
    and the stream after it are ``randrange``'s: a seeded run sprays as it always did."""
    fwd, ref = SprayForwarder(random.Random(seed)), random.Random(seed)
    for n in widths:
        ports = list(range(n))
        assert fwd.pick(b"", ports) == ports[ref.randrange(n)]
    assert fwd.rng.random() == ref.random()


@given(st.integers(-(1 << 64), 1 << 64), st.integers(-(1 << 64), 1 << 70),
       st.integers(-3, 1 << 64), st.integers(-3, 1 << 64))
def test_the_serialization_clock_twins_agree(start, bits, num, den):
    """A wire's frame end, start + ceil(bits * num / den): the compiled twin (128 bits, the
    reference's integers outside them) equals the reference everywhere, errors included."""
    from roce import fast
    from roce.emu.net import serial

    outs = []
    for twin in ((fast._ext.serial_end, serial.serial_end_reference) if fast.COMPILED
                 else (serial.serial_end_reference,)):
        try:
            outs.append(twin(start, bits, num, den))
        except ZeroDivisionError as e:
            outs.append(type(e))
    assert len(set(outs)) == 1
    if den > 0 and outs[0] is not ZeroDivisionError:
        assert outs[0] == start + -(-bits * num // den)  # the ceiling of the exact quotient


def test_the_serialization_clock_at_the_edges_of_64_bits():
    from roce import fast
    from roce.emu.net import serial

    top = (1 << 63) - 1
    for args in [(0, 0, 1, 1), (top, 0, 1, 1), (top - 10, 10, 1, 1), (top - 10, 11, 1, 1),
                 (0, top, top, 1), (5, (1 << 62) + 3, 7, 3), (0, 1, 1, top)]:
        want = serial.serial_end_reference(*args)
        assert serial.serial_end(*args) == want
        if fast.COMPILED:
            assert fast._ext.serial_end(*args) == want
