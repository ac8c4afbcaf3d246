"""The NIC-side congestion-control driver on real frames: CNPs consumed and acted on, the
notification point answering CE marks with spaced CNPs, RTT samples from ACKs, named timers
through the scheduler it is given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce.emu.cc import configure
from roce.emu.cc.engine import CcDriver
from roce.emu.cc.np import cnp_frame
from roce.emu.core.frames import FrameBuilder, Path, select
from roce.headers import ECN_CE, ECN_ECT0
from roce.opcodes import CNP_OPCODE, Operation, Position, Transport
from roce.packet import parse

US = 1_000
L = 100e9
TO_B = Path("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2",
            tclass=26 << 2 | ECN_ECT0)
TO_A = Path(TO_B.dmac, TO_B.smac, TO_B.dip, TO_B.sip, tclass=26 << 2 | ECN_ECT0)
QP_A, QP_B = 0x11, 0x22
WRITE = select(Transport.RC, Operation.RDMA_WRITE, Position.MIDDLE)
ACK = select(Transport.RC, Operation.ACK, Position.ONLY)


class Harness:
    def __init__(self, algorithm: str, qps: dict, *overrides: str) -> None:
        self.events: list[tuple[int, object]] = []
        self.sent: list[tuple[int, bytes]] = []
        self.d = CcDriver(configure(algorithm, None, overrides), L, qps,
                          lambda t, fn: self.events.append((t, fn)),
                          lambda t, f: self.sent.append((t, f)))

    def run_until(self, t: int) -> None:
        while True:
            due = sorted((x for x in self.events if x[0] <= t), key=lambda x: x[0])
            if not due:
                return
            self.events.remove(due[0])
            due[0][1](due[0][0])


def test_cnp_cuts_the_sending_qp_and_timer_recovers():
    h = Harness("dcqcn", {QP_A: SimpleNamespace()})
    pacer = h.d.pacer(QP_A)
    assert pacer.rate_bps == int(L)
    assert h.d.received(10 * US, cnp_frame(TO_A, QP_B, QP_A)) is True
    cut = int(L * 1025 / 2048)
    assert pacer.rate_bps == cut
    assert [t for t, _ in h.events] == [10 * US + 300 * US]  # rate_increase
    h.run_until(310 * US)
    assert pacer.rate_bps == int((L + L * 1025 / 2048) / 2)  # fast recovery
    assert h.d.cnps_received == 1
    # a CNP for a QP without an algorithm is still consumed (never reaches the device)
    assert h.d.received(0, cnp_frame(TO_A, QP_B, 0x99)) is True


def test_byte_counter_through_transmitted():
    h = Harness("dcqcn", {QP_A: SimpleNamespace()}, "rp_byte_reset=1000")
    pacer = h.d.pacer(QP_A)
    h.d.received(0, cnp_frame(TO_A, QP_B, QP_A))
    frame = FrameBuilder(TO_B, QP_A).build(WRITE, QP_B, 0, payload=bytes(1000))
    h.d.transmitted(1, QP_A, frame)  # > 1000 bytes: one byte-counter event
    assert pacer.rate_bps == int((L + L * 1025 / 2048) / 2)


def test_np_answers_ce_with_spaced_cnps():
    receiver = SimpleNamespace(builder=FrameBuilder(TO_A, QP_B), attr=SimpleNamespace(
        dest_qp_num=QP_A))
    h = Harness("dcqcn", {QP_B: receiver})
    ce = FrameBuilder(Path(TO_B.smac, TO_B.dmac, TO_B.sip, TO_B.dip,
                           tclass=26 << 2 | ECN_CE), QP_A)
    plain = FrameBuilder(TO_B, QP_A)
    for t, fb in [(0, plain), (1 * US, ce), (2 * US, ce), (4 * US, ce), (5 * US, ce)]:
        assert h.d.received(t, fb.build(WRITE, QP_B, t, payload=bytes(64))) is False
    assert [t for t, _ in h.sent] == [1 * US, 5 * US]  # 4 us apart (NVIDIA's default)
    f = parse(h.sent[0][1]).fields()
    assert (f["bth.opcode"], f["bth.destqp"], f["bth.becn"]) == (CNP_OPCODE, QP_A, True)
    assert (f["ip.src"], f["ip.dst"], f["ip.dsfield.dscp"]) == ("10.0.0.2", "10.0.0.1", 48)
    assert (h.d.np.ce_packets, h.d.np.cnps_sent, h.d.np.suppressed) == (4, 2, 2)


def test_no_np_without_an_ecn_algorithm():
    receiver = SimpleNamespace(builder=FrameBuilder(TO_A, QP_B), attr=SimpleNamespace(
        dest_qp_num=QP_A))
    h = Harness("timely", {QP_B: receiver})
    ce = FrameBuilder(Path(TO_B.smac, TO_B.dmac, TO_B.sip, TO_B.dip, tclass=ECN_CE), QP_A)
    h.d.received(0, ce.build(WRITE, QP_B, 0, payload=bytes(64)))
    assert h.sent == []


def test_timely_rtt_from_ack():
    h = Harness("timely", {QP_A: SimpleNamespace()})
    pacer = h.d.pacer(QP_A)
    fb, back = FrameBuilder(TO_B, QP_A), FrameBuilder(TO_A, QP_B)
    aeth = {"aeth": {"syndrome": 0, "msn": 0}}
    for psn in range(4):
        h.d.transmitted(psn * US, QP_A, fb.build(WRITE, QP_B, psn, payload=bytes(64)))
    h.d.received(100 * US, back.build(ACK, QP_A, 1, aeth))  # RTT 99 us: first sample
    assert h.d.algos[QP_A].prev_rtt == 99 * US and pacer.rate_bps == int(L)
    h.d.received(140 * US, back.build(ACK, QP_A, 3, aeth))  # RTT 137 us: rising
    t = h.d.algos[QP_A]
    assert t.gradient == pytest.approx(0.875 * 38 / 20)
    assert pacer.rate_bps == int(max(L * (1 - 0.8 * t.gradient), 10e6))
    assert h.d.rtt_samples == 2 and h.d._sent_at[QP_A] == {}


def test_cnps_push_the_timer_back_without_an_event_each():
    h = Harness("dcqcn", {QP_A: SimpleNamespace()})
    pacer = h.d.pacer(QP_A)
    cnp = cnp_frame(TO_A, QP_B, QP_A)
    for k in range(10):  # a cut every 10 us: rate_increase moves to the last cut + 300 us
        h.d.received(10 * US * (k + 1), cnp)
    last = 100 * US
    assert [t for t, _ in h.events] == [10 * US + 300 * US]  # one pending event, not ten
    cut = pacer.rate_bps
    h.run_until(last + 300 * US - 1)  # the early event re-arms itself: nothing fires yet
    assert pacer.rate_bps == cut and [t for t, _ in h.events] == [last + 300 * US]
    h.run_until(last + 300 * US)
    assert pacer.rate_bps > cut  # the increase came exactly at the deadline
    assert h.d.algos[QP_A].t_stage == 1


@given(frames=st.lists(st.sampled_from([1000]) | st.integers(64, 9000), max_size=80),
       cnp_every=st.integers(3, 40), reset=st.sampled_from([5 * 1058, 20000]))
def test_byte_room_agrees_with_on_sent_per_frame(frames, cnp_every, reset):
    # the driver's per-frame subtraction (CongestionControl.byte_room) against a reference
    # instance that gets on_sent for every frame: same stages, rates and byte count (a
    # WRITE middle packet of 1000 bytes is a 1058-byte frame: five reach the reset exactly)
    h = Harness("dcqcn", {QP_A: SimpleNamespace()}, f"rp_byte_reset={reset}")
    h.d.pacer(QP_A)
    ref = configure("dcqcn", None, [f"rp_byte_reset={reset}"]).create(L)
    fast = h.d.algos[QP_A]
    fb = FrameBuilder(TO_B, QP_A)
    cnp = cnp_frame(TO_A, QP_B, QP_A)
    now = 0
    for i, size in enumerate(frames):
        now += 1_000
        if i % cnp_every == 0:
            h.d.received(now, cnp)
            ref.on_cnp(now)
        frame = fb.build(WRITE, QP_B, i, payload=bytes(size))
        assert size != 1000 or len(frame) == 1058
        h.d.transmitted(now, QP_A, frame)
        ref.on_sent(now, len(frame))
        assert (fast.rate, fast.target, fast.b_stage, fast.byte_count, fast.recovering) == \
            (ref.rate, ref.target, ref.b_stage, ref.byte_count, ref.recovering)


def _sender(window: int = 128, ack_every: int = 64) -> SimpleNamespace:
    """A sending RC QP as the driver sees it: its requester's window, ACK spacing and oldest
    unacknowledged PSN, its completer, its timeout count."""
    return SimpleNamespace(requester=SimpleNamespace(window=window, ack_every=ack_every, una=0),
                           completer=object(), counters=SimpleNamespace(timeouts=0))


def test_a_window_becomes_the_requesters():
    qp = _sender()
    h = Harness("dctcp", {QP_A: qp})
    h.d.pacer(QP_A)
    req = qp.requester
    assert (req.window, req.ack_every) == (10, 2)  # dctcp's first window; an ACK every 10/4
    h.d.received(0, cnp_frame(TO_A, QP_B, QP_A))  # an echo: alpha 1 halves it
    assert (req.window, req.ack_every) == (5, 1)
    assert h.d.stats()["windows"] == {QP_A: 5}
    # never above what the requester allowed on its own (selective repeat's BDP, say)
    small = _sender(window=4, ack_every=1)
    h2 = Harness("swift", {QP_A: small})
    h2.d.pacer(QP_A)
    assert (small.requester.window, small.requester.ack_every) == (4, 1)
    # a rate-only algorithm leaves the requester alone, and UC/UD QPs have no window
    rate = _sender()
    Harness("timely", {QP_A: rate}).d.pacer(QP_A)
    uc = SimpleNamespace(requester=SimpleNamespace(window=128, ack_every=64), completer=None)
    Harness("dctcp", {QP_A: uc}).d.pacer(QP_A)
    assert rate.requester.window == uc.requester.window == 128


def test_acks_bring_packets_acknowledged_and_hops_naks_no_sample():
    qp = _sender()
    h = Harness("swift", {QP_A: qp})
    h.d.pacer(QP_A)
    s = h.d.algos[QP_A]
    fb = FrameBuilder(TO_B, QP_A)
    back = FrameBuilder(TO_A, QP_B, ttl=61)  # three switches took one each
    aeth = {"aeth": {"syndrome": 0, "msn": 0}}
    nak = {"aeth": {"syndrome": 0x60, "msn": 0}}  # NAK, PSN sequence error
    for psn in range(8):
        h.d.transmitted(psn * US, QP_A, fb.build(WRITE, QP_B, psn, payload=bytes(64)))
    h.d.received(20 * US, back.build(ACK, QP_A, 3, aeth))  # PSNs 0..3 (una 0): four
    assert (s.rtt, s.hops, s.cwnd) == (17 * US, 3, pytest.approx(15 + 4 / 15))
    qp.requester.una = 4
    cwnd = s.cwnd
    h.d.received(30 * US, back.build(ACK, QP_A, 5, nak))  # 4 is missing: no RTT sample
    assert (h.d.rtt_samples, s.cwnd) == (1, cwnd)
    assert sorted(h.d._sent_at[QP_A]) == [6, 7]


def test_a_timeout_reaches_the_algorithm_when_the_qp_resends():
    qp = _sender()
    h = Harness("swift", {QP_A: qp})
    h.d.pacer(QP_A)
    s = h.d.algos[QP_A]
    fb = FrameBuilder(TO_B, QP_A)
    first = fb.build(WRITE, QP_B, 0, payload=bytes(64))
    h.d.transmitted(0, QP_A, first)
    h.d.transmitted(1, QP_A, first)  # resent without a timeout (a NAK's go-back): nothing
    assert s.retransmits == 0 and s.cwnd == 15
    qp.counters.timeouts = 1
    h.d.transmitted(500 * US, QP_A, first)  # the resend after the QP's timer expired
    assert s.retransmits == 1 and s.cwnd == 7.5
    h.d.transmitted(501 * US, QP_A, first)  # the same timeout: once
    assert s.retransmits == 1
