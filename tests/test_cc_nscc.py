"""NSCC (roce/emu/cc/nscc.py): its rules one by one, and on the emulated fabric behind UET's
PDS: two flows on one bottleneck converge to their fair share, an 8:1 incast holds the
queue near the target delay, the ACK_CC carries real NSCC state, and ``--cc`` takes it for
UET runs only."""

from __future__ import annotations

import json
import statistics

import pytest

from roce.cli import main
from roce.emu.cc import ALGORITHMS, configure
from roce.emu.cc.nscc import Nscc
from roce.emu.scenario import Scenario
from roce.emu.uet import uetframes
from roce.emu.uet.run import UetOptions, UetRun
from roce.errors import UsageError
from roce.families.uet import codes as t

LINE = 100e9
MTU = 4096
RTT_US = 10  # a fixed base RTT for the rule tests: target 7.5 us with the trim profile


def nscc(*overrides: str, profile: str | None = None) -> Nscc:
    cc = configure("nscc", profile, [f"nscc_base_rtt={RTT_US}", *overrides],
                   LINE / 1e9).create(LINE)
    assert isinstance(cc, Nscc)
    cc.set_mtu(MTU)
    return cc


def test_registered_for_uet_with_the_scalings_of_its_parameters():
    assert ALGORITHMS["nscc"] is Nscc and Nscc.protocol == "uet"
    cc = nscc()
    bdp = LINE / 8 * RTT_US * 1e-6  # 125 000 bytes
    a = bdp / 150_000  # the specification's 100 Gb/s x 12 us
    assert cc.target == 0.75 * RTT_US * 1_000
    b = cc.target / 12_000
    assert cc.max_wnd == pytest.approx(1.5 * bdp) and cc.cwnd == cc.max_wnd
    assert cc.fi == pytest.approx(5 * MTU * a) and cc.eta == pytest.approx(0.15 * MTU * a)
    assert cc.alpha == pytest.approx(4 * MTU * a * b / cc.target)
    assert nscc(profile="drop").target == RTT_US * 1_000


def test_proportional_increase_below_the_target_without_ecn():
    cc = nscc()
    cc.cwnd = before = 50_000.0
    delay = 2_000
    cc.on_ack_cc(1_000, RTT_US * 1_000 + delay, 8 * MTU, False)  # 8 MTUs: an adjustment
    want = before + cc.alpha * 8 * MTU * (cc.target - delay) / before + cc.eta
    assert cc.cwnd == pytest.approx(want)


def test_fair_increase_at_or_above_the_target_without_ecn():
    cc = nscc()
    cc.cwnd = before = 50_000.0
    cc.on_ack_cc(1_000, RTT_US * 1_000 + int(cc.target) + 500, 8 * MTU, False)
    assert cc.cwnd == pytest.approx(before + cc.fi * 8 * MTU / before + cc.eta)


def test_ecn_below_the_target_changes_nothing_but_the_periodic_eta():
    cc = nscc()
    cc.cwnd = before = 50_000.0
    cc.on_ack_cc(1_000, RTT_US * 1_000 + 1_000, 8 * MTU, True)
    assert cc.cwnd == pytest.approx(before + cc.eta) and cc.decreases == 0


def test_multiplicative_decrease_once_per_base_rtt_and_bounded():
    cc = nscc()
    high = RTT_US * 1_000 + 3 * int(cc.target)  # a queueing delay of 3 targets
    # the average delay (an EWMA per packet) must see the queue first: unmarked, it is
    # the fair-increase quadrant
    for i in range(40):
        cc.on_ack_cc(i * 10, high, 8 * MTU, False)
    assert cc.decreases == 0 and cc.avg_delay > cc.target
    cc.cwnd = w = 100_000.0
    t0 = 1_000
    cc.on_ack_cc(t0, high, MTU, True)
    assert cc.decreases == 1
    avg = cc.avg_delay  # the factor from the average delay, never below nscc_max_md_jump
    assert cc.cwnd == pytest.approx(w * max(1 - 0.8 * (avg - cc.target) / avg, 0.5),
                                    abs=cc.eta)
    for i in range(1, 10):  # within the same base RTT: no second decrease
        cc.on_ack_cc(t0 + i * 500, high, MTU, True)
    assert cc.decreases == 1
    w = cc.cwnd
    cc.on_ack_cc(t0 + RTT_US * 1_000, high, MTU, True)
    assert cc.decreases == 2 and cc.cwnd < w
    assert cc.cwnd >= 0.5 * w  # one decrease takes at most half
    cc2 = nscc("nscc_max_md_jump=0.9")
    for i in range(40):
        cc2.on_ack_cc(i * 10, high, 8 * MTU, False)
    cc2.cwnd = 100_000.0
    cc2.on_ack_cc(t0, high, MTU, True)
    assert cc2.cwnd == pytest.approx(90_000.0, abs=cc2.eta)  # 1 - 0.8 x 2/3 < 0.9


def test_quick_adapt_on_a_loss_sets_the_window_to_what_the_path_delivered():
    cc = nscc()
    cc.cwnd = cc.max_wnd
    cc.on_ack_cc(100, RTT_US * 1_000, 2 * MTU, False)  # 2 MTUs acknowledged this period
    cc.on_loss(200)  # armed: acts at the end of the base-RTT period
    assert cc.quick_adapts == 0
    cc.on_loss(RTT_US * 1_000 + 1)
    assert cc.quick_adapts == 1 and cc.cwnd == 2 * MTU
    # not when the period delivered MaxWnd / 2^qa_gate or more
    cc2 = nscc()
    cc2.on_ack_cc(100, RTT_US * 1_000, int(cc2.max_wnd), False)
    cc2.on_loss(RTT_US * 1_000 + 1)
    assert cc2.quick_adapts == 0


def test_quick_adapt_on_delay_with_the_drop_profile():
    cc = nscc(profile="drop")
    cc.on_ack_cc(100, RTT_US * 1_000 + 5 * int(cc.target), MTU, False)  # above 4 targets
    cc.on_ack_cc(RTT_US * 1_000 + 200, RTT_US * 1_000, MTU, False)
    assert cc.quick_adapts == 1 and cc.cwnd == pytest.approx(2 * MTU + cc.eta, abs=cc.eta)


def test_the_window_stays_within_one_mtu_and_maxwnd():
    cc = nscc()
    for i in range(200):
        cc.on_ack_cc(i * RTT_US * 1_000, RTT_US * 1_000, 64 * MTU, False)
    assert cc.cwnd == cc.max_wnd
    for i in range(200):
        cc.on_ack_cc((300 + i) * RTT_US * 1_000, RTT_US * 100_000, MTU, True)
    assert cc.cwnd >= MTU and cc.window >= 1


# -- on the fabric -------------------------------------------------------------------------


def bottleneck(run: UetRun, dst: str):
    return next(p for sw in run.net.switches.values() for p in sw.ports
                if p.wire.dst.name == dst)


def test_two_flows_converge_to_their_fair_share():
    """Two senders into one receiver (the switch's port to it is the bottleneck); the second
    PDC starts at one MTU while the first starts at MaxWnd.  Marking RED from the target
    queue (0.75 x 5 us at 100 Gb/s) to four times it.  After 600 us (~100 base RTTs) each
    flow's share of what both sent is within 15 % of one half."""
    sc = Scenario(op="write", size=12 << 20, count=1, topology="incast:2", pfc=False,
                  ecn="47000,188000,1", cc=configure("nscc", None, [], 100.0))
    run = UetRun(sc, UetOptions())
    a, b = run.flows
    late = b.src.cc.algo(b.pdc)
    late.cwnd = float(late.mtu)
    rows: list[tuple[int, int, int]] = []

    def sample(now: int, _arg: object) -> None:
        rows.append((now, a.src.pds.counters.requests_sent, b.src.pds.counters.requests_sent))
        if a.pdc.state != "closed" and b.pdc.state != "closed":
            run.net.at(now + 100_000, sample)

    run.net.at(0, sample)
    s = run.run()
    assert s.data_verified
    both = [(t1, a1 - a0, b1 - b0) for (_t0, a0, b0), (t1, a1, b1) in zip(rows, rows[1:])
            if a1 - a0 > 0 and b1 - b0 > 0]
    start = [(x, y) for t_, x, y in both if t_ <= 300_000]
    assert sum(y for _x, y in start) / sum(x + y for x, y in start) < 0.3  # unfair at first
    late_rows = [(x, y) for t_, x, y in both[:-1] if t_ > 600_000]  # (the last: one ends)
    assert len(late_rows) >= 5
    share = sum(y for _x, y in late_rows) / sum(x + y for x, y in late_rows)
    assert abs(share - 0.5) <= 0.15 * 0.5, share


def test_incast_holds_the_queue_near_the_target_delay():
    """8:1 incast, base RTT fixed at 5 us (the incast path's: 4 links of 1 us and the
    serialisations), so target = 0.75 x 5 us = 3.75 us = 46 875 bytes at 100 Gb/s; switches
    mark RED from the target queue to four times it.  Once the start's burst (every PDC
    starts at MaxWnd) drained: the windows may overshoot the target by at most what they
    grow in the base RTT before a mark returns, N x (fi + eta), plus a packet each in
    flight regardless of window: bound = target + N x (fi + eta + MTU).  90 % of the queue
    samples are within it, the mean is within [0.5, 2] targets, and the link stays busy."""
    n = 8
    sc = Scenario(op="write", size=256 * 1024, count=2, topology=f"incast:{n}", pfc=False,
                  ecn="46875,187500,1",
                  cc=configure("nscc", None, ["nscc_base_rtt=5"], 100.0))
    run = UetRun(sc, UetOptions())
    port = bottleneck(run, "r")
    samples: list[tuple[int, int]] = []

    def sample(now: int, _arg: object) -> None:
        samples.append((now, sum(port.qbytes)))
        if any(f.done < sc.count for f in run.flows):
            run.net.at(now + 500, sample)

    run.net.at(0, sample)
    s = run.run()
    assert s.data_verified and s.retransmitted == 0
    cc = run.flows[0].src.cc.algo(run.flows[0].pdc)
    target_bytes = cc.target * 100e9 / 8e9
    assert target_bytes == pytest.approx(46_875)
    bound = target_bytes + n * (cc.fi + cc.eta + cc.mtu)
    end = s.virtual_ns
    steady = sorted(q for t_, q in samples if 0.25 * end < t_ < 0.9 * end)
    assert len(steady) > 100
    p90 = steady[int(len(steady) * 0.9)]
    assert p90 <= bound, (p90, bound)
    assert 0.5 * target_bytes <= statistics.mean(steady) <= 2 * target_bytes
    assert s.goodput_gbps > 85
    assert port.max_queue_bytes > bound  # the start's burst: the bound is NSCC's doing


def test_without_nscc_the_same_incast_queue_is_not_held():
    sc = Scenario(op="write", size=256 * 1024, count=2, topology="incast:8", pfc=False,
                  ecn="46875,187500,1")
    s = UetRun(sc, UetOptions()).run()
    assert s.retransmitted > 0  # the windows of PSNs alone overflow the buffer


def test_ack_cc_carries_real_nscc_state():
    sc = Scenario(op="write", size=64 * 1024, count=2, topology="incast:2", pfc=False,
                  cc=configure("nscc", None, [], 100.0))
    frames: list[bytes] = []

    class Keep:
        def write(self, frame: bytes, ts_ns: int = 0) -> None:
            frames.append(bytes(frame))

    run = UetRun(sc, UetOptions())
    run.net.recorders.append(Keep())
    assert run.run().data_verified
    acks = [r.fields for r in map(uetframes.decode, frames)
            if r is not None and r.fields["uet.pds.type"] == t.ACK_CC]
    assert acks and all(f["uet.pds.ack.cc_type"] == t.CC_NSCC for f in acks)
    assert max(f["uet.pds.ack.cc_state.service_time"] for f in acks) > 0  # timer ACKs
    assert max(f["uet.pds.ack.cc_state.rcvd_bytes"] for f in acks) >= 4096


# -- the command line ----------------------------------------------------------------------


def emulate(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["emulate", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_runs_uet_with_nscc_and_reports_it(capsys):
    code, out, _ = emulate(capsys, "--protocol", "uet", "--topology", "incast:2", "--pfc",
                           "off", "--size", "64K", "--count", "2", "--cc", "nscc", "-T",
                           "json")
    s = json.loads(out)
    assert code == 0 and s["data_verified"] and s["uet"]["cc"] == "nscc"
    hosts = s["fabric"]["hosts"]
    assert hosts["s1"]["cc"]["algorithm"] == "nscc" and hosts["s1"]["cc"]["rtt_samples"] > 0


@pytest.mark.parametrize("protocol,cc", [("uet", "dcqcn"), ("uet", "swift"),
                                         ("roce", "nscc"), ("roce", "rccc")])
def test_cc_of_another_transport_is_refused_by_name(capsys, protocol, cc):
    code, _, err = emulate(capsys, "--protocol", protocol, "--topology", "incast:2",
                           "--size", "4K", "--count", "1", "--cc", cc)
    assert code == 1 and f"--cc {cc}" in err and f"--protocol {protocol}" in err


def test_scenario_check_refuses_it_too():
    with pytest.raises(UsageError, match="--cc nscc: UET's"):
        Scenario(protocol="roce", cc=configure("nscc")).check()
    with pytest.raises(UsageError, match="--cc dctcp: ROCE's"):
        Scenario(protocol="uet", cc=configure("dctcp")).check()
