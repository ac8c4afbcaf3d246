"""Spurious retransmissions in ``roce stats`` (flowrules, "acknowledged PSNs" and "spurious
retransmissions"): crafted frames through both engines, the engines' twin test on
acknowledgement-heavy traffic, and emulator captures taken at the receiver's port, where the
count must be the responder's own ``duplicate_requests``."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from emu_helpers import pair, poll_all
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples
from test_stats import (
    ENGINES,
    QA,
    QB,
    A,
    B,
    ack,
    flow,
    lines,
    read_req,
    stamped,
    write_capture,
    write_only,
)

import roce
from roce.analysis.cflows import AVAILABLE
from roce.analysis.flowrules import K_WRITE, REORDER_HOLD, SACK_AHEAD
from roce.analysis.flows import analyse
from roce.emu import LinkConfig, SendWR, WROpcode
from roce.emu.core.recovery import RecoveryConfig
from roce.headers import AETH_ACK, AETH_NAK, NAK_PSN_SEQUENCE_ERROR, syndrome
from roce.pcapio import PcapWriter, open_capture
from roce.psn import PSN_MASK


@pytest.fixture(params=ENGINES)
def run(request: pytest.FixtureRequest, tmp_path: Path):
    def go(frames: list[bytes]):
        with open_capture(write_capture(tmp_path / "t.pcap", frames)) as rd:
            return analyse(rd, engine=request.param)

    return go


def to_qp(qp: int, psn: int) -> bytes:
    """A one-packet WRITE A -> B to ``qp``."""
    return roce.craft("RC_RDMA_WRITE_ONLY", bytes(64), dqpn=qp, psn=psn, src=A, dst=B, va=0,
                      rkey=1, dmalen=64).to_bytes()


def sack(epsn: int, ooo: int) -> bytes:
    """A selective NAK: BTH PSN the ePSN, the out-of-order PSN in the MSN."""
    return ack(epsn, AETH_NAK, NAK_PSN_SEQUENCE_ERROR, msn=ooo)


def spurious_lines(r) -> list[str]:
    return [x for x in lines(r) if "spurious" in x]


# -- the rule, on crafted frames ----------------------------------------------------------------


def test_a_resend_the_cumulative_ack_covered_is_spurious(run) -> None:
    w = [write_only(p) for p in range(4)]
    r = run([*w, ack(1, msn=2), w[1], w[2]])  # 1 was acknowledged, 2 was not
    assert flow(r).spurious == 1 and r.totals["spurious_retransmissions"] == 1
    assert spurious_lines(r) == [
        "#6 QP 0x000011 spurious retransmission of PSN 0x000001: already acknowledged"]
    assert flow(r).req.counts()["duplicates"] == 2  # both are retransmissions
    assert r.to_dict()["flows"][flow(r).id]["spurious_retransmissions"] == 1


def test_a_sequence_nak_acknowledges_what_lies_before_its_epsn(run) -> None:
    w = [write_only(p) for p in range(4)]
    r = run([*w, ack(2, AETH_NAK, NAK_PSN_SEQUENCE_ERROR, msn=0), w[1], w[2]])
    assert flow(r).spurious == 1  # 1 < ePSN 2; 2 itself is what the responder wants


def test_a_resend_a_selective_nak_named_is_spurious_the_hole_is_not(run) -> None:
    w = [write_only(p) for p in range(6)]
    r = run([w[0], w[1], ack(1, msn=2), w[3], sack(2, 3), w[4], sack(2, 4),
             w[2], w[3], w[5]])  # the hole 2 arrives late; 3 is resent, 5 is new
    assert flow(r, QA).selective_naks == 2
    assert flow(r).spurious == 1
    assert spurious_lines(r) == [
        "#9 QP 0x000011 spurious retransmission of PSN 0x000003: already acknowledged"]
    r = run([w[0], w[1], ack(1, msn=2), w[3], sack(2, 3), w[2], w[2]])
    assert flow(r).spurious == 0  # 2 was never acknowledged before its second copy


def test_no_acknowledgement_no_spurious(run) -> None:
    r = run([write_only(p) for p in (0, 1, 2, 0, 1, 2)])
    assert flow(r).req.counts()["duplicates"] == 3 and flow(r).spurious == 0
    assert "spurious_retransmission" not in r.event_counts


def test_consecutive_spurious_resends_fold_the_counter_counts_packets(run) -> None:
    w = [write_only(p) for p in range(8)]
    r = run([*w, ack(7, msn=8), *w[2:6], w[0]])  # go back to 2 after all was acked
    assert flow(r).spurious == 5 and r.event_counts["spurious_retransmission"] == 5
    assert spurious_lines(r) == [
        "#10-#13 QP 0x000011 spurious retransmission of PSN 0x000002..0x000005, 4 packets: "
        "already acknowledged",
        "#14 QP 0x000011 spurious retransmission of PSN 0x000000: already acknowledged"]
    assert r.event_lines["spurious_retransmission"] == 2
    assert [e["count"] for e in r.to_dict()["expert"]["events"]
            if e["kind"] == "spurious_retransmission"] == [4, 1]


def test_a_read_asked_again_is_not_spurious(run) -> None:
    r = run([read_req(0, 100), write_only(1), ack(1, msn=2), read_req(0, 100), write_only(1)])
    assert flow(r).req.counts()["duplicates"] == 2
    assert flow(r).spurious == 1  # the WRITE only


def test_acknowledgements_never_move_back(run) -> None:
    w = [write_only(p) for p in range(6)]
    r = run([*w, ack(5, msn=6), ack(1, msn=2), w[4]])  # a late, older ACK changes nothing
    assert flow(r).spurious == 1


def test_a_selective_mark_is_cleared_once_passed(run) -> None:
    """The bitmap holds PSNs by PSN % SACK_AHEAD: a mark the cumulative acknowledgement passed
    must not make PSN + SACK_AHEAD look acknowledged."""
    base = 10
    far = base + SACK_AHEAD + 1
    frames = [write_only(base), ack(base, msn=1), write_only(base + 2), sack(base + 1, base + 2),
              write_only(base + 1), ack(base + 2, msn=3)]  # passes the mark at base + 2
    frames += [write_only(p) for p in range(base + 3, far + 2)]
    frames += [ack(far - 1, msn=4), write_only(far + 1)]  # far + 1 has base + 2's bit
    r = run(frames)
    assert flow(r).spurious == 0 and flow(r).req.counts()["duplicates"] == 1


def test_two_answering_flows_in_range_count_nothing(run) -> None:
    """Two QPs between the same addresses, PSN ranges overlapping: whose ACK is whose is not
    known, so nothing is called spurious (flowrules, "spurious retransmissions")."""
    other = roce.craft("RC_ACKNOWLEDGE", dqpn=0x55, psn=3, src=B, dst=A,
                       syndrome=syndrome(AETH_ACK, 31), msn=1).to_bytes()
    w = [write_only(p) for p in range(4)]
    assert flow(run([*w, ack(3, msn=4), w[1]])).spurious == 1
    assert flow(run([*w, ack(3, msn=4), other, w[1]])).spurious == 0


# -- the engines agree --------------------------------------------------------------------------


def acked_traffic(seed: int, n: int) -> list[bytes]:
    """Requests, cumulative ACKs, sequence and selective NAKs, and resends before and after
    them, on one connection and a second QP between the same hosts."""
    rnd = random.Random(seed)
    nxt = {QB: rnd.randrange(1 << 24), 0x77: rnd.randrange(1 << 24)}
    out: list[bytes] = []
    while len(out) < n:
        qp = rnd.choice(list(nxt))
        p = nxt[qp]
        k = rnd.random()
        if k < 0.45:
            out.append(to_qp(qp, p))
            nxt[qp] = (p + 1) & PSN_MASK
        elif k < 0.6:  # resend a run from a little way back
            back = rnd.randrange(1, 8)
            out += [to_qp(qp, (p - back + i) & PSN_MASK) for i in range(rnd.randrange(1, back + 1))]
        elif k < 0.8:
            out.append(ack((p - rnd.randrange(1, 6)) & PSN_MASK, msn=rnd.randrange(50)))
        elif k < 0.95:
            e = (p - rnd.randrange(1, 8)) & PSN_MASK
            out.append(sack(e, (e + rnd.randrange(1, 6)) & PSN_MASK))
        else:
            out.append(read_req(p, 100))
            nxt[qp] = (p + 1) & PSN_MASK
        if len(out) > 2 and rnd.random() < 0.1:
            out[-1], out[-2] = out[-2], out[-1]
    return out


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([30, 120, 400]),
       batch=st.sampled_from([1, 3, 16, 1024]), max_events=st.sampled_from([2, 10_000]))
def test_engines_agree_on_spurious_retransmissions(seed: int, n: int, batch: int,
                                                   max_events: int) -> None:
    frames = stamped(acked_traffic(seed, n), seed)  # at random times: MCTs and RTTs differ
    ref = analyse(frames, batch=batch, max_events=max_events, engine="reference")
    got = analyse(frames, max_events=max_events, engine="compiled")
    assert got.to_dict() == ref.to_dict()
    assert got.event_counts == ref.event_counts


def test_the_twin_traffic_has_spurious_resends() -> None:
    """So the property test above compares something."""
    counts = [analyse(acked_traffic(s, 120), engine="reference").totals[
        "spurious_retransmissions"] for s in range(10)]
    assert sum(1 for c in counts if c) >= 8


# -- emulator captures at the receiver's port ----------------------------------------------------


def receiver_port(p: SimpleNamespace, path: Path) -> PcapWriter:
    """Record what b's port sees: frames delivered to b, and frames b sends as it sends them
    (before the b -> a direction's faults)."""
    w = PcapWriter(str(path))
    to_b = bytes(int(x) for x in p.b.ip.split("."))

    class Delivered:
        def write(self, frame: bytes, ts_ns: int) -> None:
            if frame[30:34] == to_b:  # IPv4 destination (Ethernet + 16)
                w.write(frame, ts_ns=ts_ns)

    p.fab.record(Delivered())
    p.ba.watch = lambda now, frame: w.write(frame, ts_ns=now)
    return w


def _writes(p: SimpleNamespace, n: int, size: int) -> None:
    for i in range(n):
        p.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[p.src.sge(i * size, size)],
                              remote_addr=p.dst.addr + i * size, rkey=p.dst.rkey))
    p.fab.run_until_idle(p.fab.now + 10**9)
    assert [w.status for w in poll_all(p.cqa)] == [0] * n


def _capture(path: Path) -> list[bytes]:
    with open_capture(path) as cap:
        return [bytes(r.data) for r in cap]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("ack_lost", "spurious", "duplicates"), [
    # Two 4-packet WRITEs (PSNs 0-3, 4-7), the second's Last (7) lost: the timeout resends
    # from the first PSN the requester has no ACK for.  With the first WRITE's ACK (PSN 3)
    # lost after the receiver's port, that is 0: 0-3 were acknowledged (spurious); the
    # responder re-ACKs up to 6 at the first duplicate, so 4-6 are too.  With that ACK
    # delivered, the resend starts at 4: executed but never acknowledged before (not
    # spurious); 5 and 6 follow the re-ACK (spurious).
    (True, 7, 7),
    (False, 2, 3),
])
def test_go_back_n_resends_are_spurious_only_when_acknowledged(
        tmp_path: Path, engine: str, ack_lost: bool, spurious: int, duplicates: int) -> None:
    p = pair(recovery="gbn", mtu=1024, config=LinkConfig(drop_nth=frozenset({8})),
             reverse=LinkConfig(drop_nth=frozenset({1} if ack_lost else ())))
    w = receiver_port(p, tmp_path / "b.pcap")
    _writes(p, 2, 4096)
    w.close()
    assert p.qb.core.counters.duplicate_requests == duplicates  # the scenario did that
    r = analyse(_capture(tmp_path / "b.pcap"), engine=engine)
    [req_flow] = [f for f in r.flows if f.qp == p.qb.qp_num]
    assert req_flow.spurious == spurious
    assert req_flow.req.counts()["duplicates"] == duplicates
    assert r.totals["go_back_retransmissions"] == duplicates


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("size", [1024, 16 * 1024])
def test_sr_timeouts_before_the_acks_return_are_all_spurious(tmp_path: Path, engine: str,
                                                             size: int) -> None:
    """A short timeout and a slow way back: the requester resends what the responder had
    already acknowledged; the capture at the responder's port shows each ACK first.  (Under
    selective repeat the timeout is the recovery's RTO, not the QP's local ACK timeout.)"""
    short = RecoveryConfig("sr", rto_low_ns=8_192, rto_high_ns=8_192)
    p = pair(recovery=short, mtu=1024, config=LinkConfig(),
             reverse=LinkConfig(delay_ns=20_000))
    w = receiver_port(p, tmp_path / "b.pcap")
    _writes(p, 4, size)
    w.close()
    dup = p.qb.core.counters.duplicate_requests
    assert dup >= 4 and p.qa.core.counters.timeouts >= 1
    r = analyse(_capture(tmp_path / "b.pcap"), engine=engine)
    [req_flow] = [f for f in r.flows if f.qp == p.qb.qp_num]
    assert req_flow.spurious == dup == r.totals["spurious_retransmissions"]


@pytest.mark.parametrize("topology,size,loss,seed,moves", [
    ("leafspine:2,4,4", 256 << 10, 0.0, 0, 1), ("leafspine:2,4,4", 256 << 10, 0.0, 1, 0),
    # lossy: PSN 0 reordered behind later PSNs, or lost and resent after them
    ("leafspine:4,2,4", 64 << 10, 0.01, 0, 3), ("leafspine:4,2,4", 64 << 10, 0.01, 1, 2)])
def test_sr_under_spray_matches_the_responders_count(tmp_path: Path, topology: str, size: int,
                                                     loss: float, seed: int,
                                                     moves: int) -> None:
    """Selective repeat over a sprayed leaf-spine: at each receiver's leaf port, the
    spurious resends of the flow to it are the responder's ``duplicate_requests``, and its
    reordered WRITEs reassemble into the messages posted, also when a later PSN was
    captured before the flow's first (a late first arrival, flowrules "request PSNs"; in
    these runs ``moves`` captures do not start with PSN 0)."""
    from roce.emu.net.runner import NetRun, NetScenario, attach_tap

    sc = NetScenario(topology=topology, traffic="permutation", op="write", size=size,
                     count=2, lb="spray", recovery="sr", seed=seed, psn=0, loss=loss,
                     buffer=4 << 20)
    run_ = NetRun(sc)
    writers, tapped = {}, {}
    for _, dst in run_.names:
        [(spec, port)] = [(f"{name}:{i}", port) for name, sw in run_.net.switches.items()
                          for i, port in enumerate(sw.ports) if port.wire.dst.name == dst]
        writers[dst] = PcapWriter(str(tmp_path / f"{dst}.pcap"))
        attach_tap(run_.net, spec, writers[dst])
        tapped[dst] = port
    s = run_.run()
    assert s.data_verified
    # the run ends at the last completion: let resends still on a wire arrive
    run_.net.run(run_.net.now + 1_000_000)
    for w in writers.values():
        w.close()
    exact = moved = 0
    for nf, (_, dst) in zip(run_.flows, run_.names):
        frames = _capture(tmp_path / f"{dst}.pcap")
        ref = analyse(frames, engine="reference")
        if AVAILABLE:
            assert analyse(frames, engine="compiled").to_dict() == ref.to_dict()
        [f] = [f for f in ref.flows if f.qp == nf.qb.qp_num and f.req is not None
               and f.dst == run_.topology.hosts[dst]]
        dup = nf.qb.core.counters.duplicate_requests
        # with loss, a resend of PSNs executed but not yet acknowledged is an ordinary one;
        # and the tap sees a frame before its link may lose it: a resend of a frame lost
        # after the tap looks spurious in the capture though the responder never had it
        lost_after_tap = tapped[dst].wire.stats.lost
        assert f.spurious == dup if not loss else f.spurious <= dup + lost_after_tap, dst
        assert f.req_first == sc.psn, dst  # the start moved back to PSN 0 when late
        assert f.stats == {K_WRITE: [2, 2 * sc.size, sc.size, sc.size]}, dst
        assert f.incomplete == 0
        exact += f.req.counts()["late"] > 0
        # PSN 0 out of order: a later PSN of the flow was captured first (no hole can hold
        # PSN 0 otherwise)
        moved += any(e.kind == "out_of_order" and e.flow == f.id and "PSN 0x000000 " in e.text
                     for e in ref.events)
    assert exact >= 4  # flows that were reordered
    assert moved == moves


# -- message reassembly in PSN order (flowrules, "messages", "selective repeat WRITE") -------


def sr_write(psn: int, size: int, va: int = 0x10000, mtu: int = 1024) -> list[bytes]:
    """One WRITE as selective repeat sends it (docs/protocol.md): WRITE First with a RETH
    per packet (DMA length: the bytes left), then a WRITE Only with RETH."""
    out = []
    for i, off in enumerate(range(0, size, mtu)):
        n = min(mtu, size - off)
        op = "RC_RDMA_WRITE_ONLY" if off + n == size else "RC_RDMA_WRITE_FIRST"
        out.append(roce.craft(op, bytes(n), dqpn=QB, psn=(psn + i) & PSN_MASK, src=A, dst=B,
                              va=va + off, rkey=7, dmalen=size - off).to_bytes())
    return out


def test_reordered_sr_writes_make_one_message_each(run) -> None:
    a, b = sr_write(0, 4096), sr_write(4, 2500, va=0x20000)
    # b's head before a's end and a's second packet, a Middle of b last
    r = run([a[0], b[0], a[2], a[3], a[1], b[2], b[1]])
    f = flow(r)
    assert f.stats == {K_WRITE: [2, 4096 + 2500, 2500, 4096]}
    assert f.incomplete == 0 and "length_mismatch" not in r.event_counts


# -- a late first arrival (flowrules, "request PSNs") -----------------------------------------


def _write_message(f, size: int) -> bool:
    return f.stats == {K_WRITE: [1, size, size, size]} and f.incomplete == 0


@pytest.mark.parametrize("order", [[1, 0, 2, 3], [2, 0, 1, 3], [3, 2, 1, 0]])
def test_a_late_first_arrival_is_out_of_order_not_a_retransmission(run, order) -> None:
    a = sr_write(0, 3 * 1024 + 500)  # PSNs 0..3, each a WRITE First with RETH but the last
    r = run([a[i] for i in order])
    f = flow(r)
    c = f.req.counts()
    assert (c["duplicates"], c["gaps"], c["still_missing"]) == (0, 0, 0)
    # late: each PSN below one seen before it
    assert c["late"] == sum(1 for i, x in enumerate(order) if i and x < max(order[:i]))
    assert f.req_first == 0 and "retransmission" not in r.event_counts
    assert r.event_counts["out_of_order"] == c["late"]
    if order[-1] != 0:  # the message's Last comes after its First: one exact message
        assert _write_message(f, 3 * 1024 + 500)


def test_a_hole_between_the_late_first_and_the_old_start_is_missing(run) -> None:
    r = run([write_only(10), write_only(7), write_only(9)])
    c = flow(r).req.counts()
    # 7 moves the start back: 8 and 9 missing (no gap: no packet jumped); 9 then fills
    assert (c["late"], c["gaps"], c["missing"], c["still_missing"], c["duplicates"]) == \
        (2, 0, 2, 1, 0)
    assert flow(r).req_first == 7


def test_an_acknowledged_start_or_a_far_psn_keeps_the_retransmission_rule(run) -> None:
    from roce.psn import EARLY_WINDOW

    # an ACK covering the first PSN came back: a PSN below it is a (spurious) resend
    r = run([write_only(5), ack(5), write_only(4)])
    f = flow(r)
    assert f.req.counts()["duplicates"] == 1 and f.req.counts()["late"] == 0
    assert f.spurious == 1 and f.req_first == 5
    # no ACK: within the window a late first arrival, beyond it a retransmission
    far = 1000
    r = run([write_only(far), write_only(far - EARLY_WINDOW)])
    assert flow(r).req.counts()["late"] == 1
    r = run([write_only(far), write_only(far - EARLY_WINDOW - 1)])
    assert flow(r).req.counts()["duplicates"] == 1 and flow(r).req_first == far


def test_a_sequence_nak_below_the_start_holds_reassembly_for_the_lost_first(run) -> None:
    """PSN 0 lost on the way, resent after the rest: the responder's NAK (ePSN 0) tells the
    flow starts at 0, so PSNs 1..3 wait for it and the message comes out exact."""
    a = sr_write(0, 3 * 1024 + 500)
    nak = ack(0, AETH_NAK, NAK_PSN_SEQUENCE_ERROR)
    r = run([a[1], nak, a[2], a[3], a[0]])
    f = flow(r)
    assert _write_message(f, 3 * 1024 + 500) and f.req_first == 0
    assert f.req.counts()["late"] == 1 and f.req.counts()["duplicates"] == 0
    # without the NAK the message ends (its Last) before its First is seen: not exact
    assert not _write_message(flow(run([a[1], a[2], a[3], a[0]])), 3 * 1024 + 500)


def test_a_hole_never_filled_is_waited_for_at_most_reorder_hold_packets(run) -> None:
    """PSN 1 never comes: the messages after it wait until REORDER_HOLD packets do, then go
    on (message 0 is sized with the lost packet filled in)."""
    frames = sr_write(0, 3 * 1024)
    del frames[1]
    n = REORDER_HOLD + 10
    frames += [write_only(p) for p in range(3, 3 + n)]
    r = run(frames)
    f = flow(r)
    assert f.stats[K_WRITE] == [1 + n, 3 * 1024 + 100 * n, 100, 3 * 1024]
    assert f.incomplete == 0


def reordered_sr(seed: int, n: int) -> list[bytes]:
    """sr WRITEs and SENDs with a window's reordering, drops, copies and resends."""
    rnd = random.Random(seed)
    psn, out = rnd.randrange(1 << 24), []
    while len(out) < n:
        size = rnd.choice([100, 1024, 3000, 8192])
        pkts = sr_write(psn, size) if rnd.random() < 0.7 else message_at(psn, size)
        psn = (psn + len(pkts)) & PSN_MASK
        out += pkts
    for _ in range(len(out) // 4):  # local reordering
        i = rnd.randrange(len(out))
        j = min(len(out) - 1, i + rnd.randrange(1, 12))
        out[i], out[j] = out[j], out[i]
    keep = [x for x in out if rnd.random() > 0.05]
    keep += [rnd.choice(out) for _ in range(len(out) // 10)]  # resends
    return keep


def message_at(psn: int, size: int) -> list[bytes]:
    from test_stats import message

    return [x[:42 + 9] + ((int.from_bytes(x[42 + 9:42 + 12], "big") + psn) & PSN_MASK)
            .to_bytes(3, "big") + x[42 + 12:] for x in message("SEND", 0, size)]


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([20, 100, 600]),
       batch=st.sampled_from([1, 3, 16, 1024]))
def test_engines_agree_on_reordered_sr_writes(seed: int, n: int, batch: int) -> None:
    frames = reordered_sr(seed, n)
    ref = analyse(frames, batch=batch, engine="reference")
    got = analyse(frames, engine="compiled")
    assert got.to_dict() == ref.to_dict()


@pytest.mark.parametrize("engine", ENGINES)
def test_reordering_alone_changes_no_message(engine: str) -> None:
    """Reordered (not lost) sr WRITEs: the same messages as in order."""
    for seed in range(6):
        rnd = random.Random(seed)
        frames, psn = [], 5
        sizes = [rnd.choice([100, 1024, 3000, 8192]) for _ in range(20)]
        for size in sizes:
            frames += sr_write(psn, size)
            psn += -(-size // 1024)
        first = frames[0]
        rest = frames[1:]
        for _ in range(len(rest)):
            i = rnd.randrange(len(rest))
            j = min(len(rest) - 1, i + rnd.randrange(1, 30))
            rest[i], rest[j] = rest[j], rest[i]
        f = flow(analyse([first, *rest], engine=engine))
        assert f.stats == {K_WRITE: [20, sum(sizes), min(sizes), max(sizes)]}, seed
        assert f.incomplete == 0 and f.req.counts()["late"] > 0
