"""Selective repeat (IRN, roce.emu.core.selective): exactly-once delivery under faults, the frames
on the wire, goodput under random loss, and the go-back-N default left as it was."""

from __future__ import annotations

import subprocess

import pytest
from emu_helpers import pair, poll_all
from hypothesis import given, settings
from hypothesis import strategies as st
from test_emu_property import EXAMPLES, SAFE_TARGETS, Run, scenarios
from tshark_oracle import FIELDS, TSHARK, fields_command, our_key, tshark_value

import roce
from roce.analysis.flowrules import K_WRITE
from roce.emu import LinkConfig, SendWR, WROpcode
from roce.emu.core.recovery import RecoveryConfig, RecoveryError, configure
from roce.emu.net.runner import run_scenario
from roce.emu.scenario import Scenario
from roce.headers import AETH_NAK, NAK_PSN_SEQUENCE_ERROR, syndrome_type, syndrome_value
from roce.opcodes import Operation, Position
from roce.pcapio import PcapWriter, open_capture

# -- exactly once, byte exact, in completion order (the generators that hold gbn) ----------


@settings(max_examples=EXAMPLES, deadline=None)
@given(scenarios(SAFE_TARGETS, min_recv=4096))
def test_sr_random_verbs_keep_every_invariant(sc):
    r = Run(sc, recovery="sr")
    r.check_basic()
    r.check_data()


@settings(max_examples=EXAMPLES, deadline=None)
@given(scenarios(SAFE_TARGETS + ["cross"], min_recv=0, phases=False))
def test_sr_random_verbs_complete_with_the_right_status(sc):
    r = Run(sc, recovery="sr")
    r.check_basic()
    r.check_data()
    r.check_oracle()


def test_sr_qps_are_built_selective_and_gbn_stays_default():
    p = pair()
    assert type(p.qa.core.requester).__name__ == "Requester"
    q = pair(recovery="sr")
    assert type(q.qa.core.requester).__name__ == "SRRequester"
    assert q.qa.core.recovery.selective and not p.qa.core.recovery.selective


def test_recovery_is_set_in_reset_only_and_checked():
    p = pair()
    with pytest.raises(RecoveryError, match="RESET"):
        p.qa.set_recovery("sr")
    with pytest.raises(RecoveryError, match="gbn, sr"):
        configure("tcp")
    with pytest.raises(RecoveryError):
        RecoveryConfig("sr", rto_low_ns=5, rto_high_ns=1)


def test_rto_low_with_few_packets_in_flight_high_otherwise():
    cfg = RecoveryConfig("sr")
    assert cfg.rto_ns(0) == cfg.rto_ns(cfg.rto_n) == cfg.rto_low_ns
    assert cfg.rto_ns(cfg.rto_n + 1) == cfg.rto_high_ns > cfg.rto_low_ns


def _one_write_lossy(recovery: str, drop: int, size: int = 16 * 1024, pcap=None):
    """One WRITE of ``size`` bytes with the ``drop``-th data frame lost."""
    from roce.emu import LinkConfig

    p = pair(recovery=recovery, mtu=1024, size=64 * 1024, pcap=pcap,
             config=LinkConfig(drop_nth=(drop,)), reverse=LinkConfig())
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                          sg_list=[p.src.sge(0, size)], remote_addr=p.dst.addr, rkey=p.dst.rkey))
    p.fab.run_until_idle(p.fab.now + 10**9)
    if p.writer is not None:
        p.writer.close()
    return p


@pytest.mark.parametrize("recovery", ["gbn", "sr"])
@pytest.mark.parametrize("op", ["atomic", "read", "write"])
def test_a_resend_for_a_lost_answer_is_not_spurious(recovery, op):
    """The responder's first answer (atomic ACK, READ response, ACK) is lost: the requester
    times out and resends.  A WRITE resent is spurious (the responder had it and its ACK
    carries nothing else); a READ or atomic resent is not: its answer was lost, and only
    the resend brings it back (docs/protocol.md, Counting)."""
    from roce.emu import LinkConfig

    p = pair(recovery=recovery, mtu=1024, config=LinkConfig(),
             reverse=LinkConfig(drop_nth=(1,)))
    if op == "atomic":
        wr = SendWR(wr_id=1, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                    sg_list=[p.lbuf.sge(0, 8)], remote_addr=p.dst.addr, rkey=p.dst.rkey,
                    compare_add=5)
    else:
        wr = SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_READ if op == "read" else
                    WROpcode.IBV_WR_RDMA_WRITE, sg_list=[p.lbuf.sge(0, 512)],
                    remote_addr=p.dst.addr, rkey=p.dst.rkey)
    before = p.dst.read(8)
    p.qa.post_send(wr)
    p.fab.run_until_idle(p.fab.now + 10**9)
    [wc] = poll_all(p.cqa)
    assert wc.status == 0
    a, b = p.qa.core.counters, p.qb.core.counters
    assert a.timeouts == 1 and a.retransmitted == 1  # the answer was lost: resent once
    assert b.duplicates == 1  # the responder saw it twice ...
    assert b.duplicate_requests == (op == "write")  # ... but only a WRITE was spurious
    if op == "atomic":  # executed once: the saved result answered the resend
        assert int.from_bytes(p.dst.read(8), "little") == int.from_bytes(before, "little") + 5
        assert p.lbuf.read(8) == before


@pytest.mark.parametrize("rule", ["rack", "dupthresh"])
def test_acknowledgements_behind_a_lost_read_response_are_kept(rule):
    """A READ's only response is lost; the WRITEs posted after it are acknowledged while
    the READ still misses its answer.  Selective repeat asks for the READ alone: what the
    acknowledgements said of the WRITEs is kept (no loss rule resends them) and applied
    once the READ completed.  Go-back-N resends them all."""
    results = {}
    for recovery in ("gbn", "sr"):
        p = pair(recovery=RecoveryConfig(recovery, loss_rule=rule), mtu=1024,
                 config=LinkConfig(), reverse=LinkConfig(drop_nth=(1,)))
        read, write = (p.lbuf.sge(0, 1024), 0), (p.src.sge(0, 8192), 4096)
        for wr_id, op, (sge, at) in ((1, WROpcode.IBV_WR_RDMA_READ, read),
                                     (2, WROpcode.IBV_WR_RDMA_WRITE, write)):
            p.qa.post_send(SendWR(wr_id=wr_id, opcode=op, sg_list=[sge],
                                  remote_addr=p.dst.addr + at, rkey=p.dst.rkey))
        want = p.dst.read(1024)
        p.fab.run_until_idle(p.fab.now + 10**9)
        assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(1, 0), (2, 0)]
        assert p.lbuf.read(1024) == want
        assert p.dst.read(8192, 4096) == p.src.read(8192)
        results[recovery] = (p.qa.core.counters, p.qb.core.counters)
    a, b = results["sr"]
    assert (a.retransmitted, a.selective_retransmitted) == (1, 1)  # the READ alone
    assert b.duplicate_requests == 0
    assert results["gbn"][0].retransmitted == 1 + 8  # the READ and every WRITE packet


def test_one_loss_costs_one_selective_retransmission():
    sr = _one_write_lossy("sr", drop=3)
    [wc] = poll_all(sr.cqa)
    assert wc.status == 0
    assert sr.dst.read(16 * 1024) == sr.src.read(16 * 1024)
    c = sr.qa.core.counters
    assert (c.retransmitted, c.selective_retransmitted) == (1, 1)
    b = sr.qb.core.counters
    assert b.ooo_accepted == b.sacks_sent == 16 - 3  # every later packet held and SACKed
    assert b.duplicate_requests == 0  # nothing resent that the responder had
    gbn = _one_write_lossy("gbn", drop=3)
    assert gbn.qa.core.counters.retransmitted == 16 - 2  # go-back-N resends the rest


# -- frames: plain RoCEv2, the IRN information where docs/protocol.md says -------------------


def _frames(path) -> list[roce.Packet]:
    with open_capture(path) as cap:
        return [roce.parse(bytes(r.data)) for r in cap]


def test_sr_frames_carry_reth_on_every_write_packet_and_the_sack_in_the_msn(tmp_path):
    path = tmp_path / "sr.pcap"
    _one_write_lossy("sr", drop=3, pcap=PcapWriter(str(path)) and str(path))
    pkts = _frames(path)
    writes = [p for p in pkts if p.opcode.operation is Operation.RDMA_WRITE]
    assert writes and all("reth" in p.opcode.headers for p in writes)
    first = {p.opcode.position for p in writes}
    assert first == {Position.FIRST, Position.ONLY}
    for p in writes:  # RETH: this packet's address, the bytes from it to the message end
        f = p.fields()
        off = f["reth.va"] - writes[0].fields()["reth.va"]
        assert f["reth.dmalen"] == 16 * 1024 - off
        assert (p.opcode.position is Position.ONLY) == (f["reth.dmalen"] == len(p.payload))
    naks = [p.fields() for p in pkts if p.opcode.operation is Operation.ACK
            and syndrome_type(p.fields()["aeth.syndrome"]) == AETH_NAK]
    assert naks and all(syndrome_value(f["aeth.syndrome"]) == NAK_PSN_SEQUENCE_ERROR
                        for f in naks)
    lost = writes[0].fields()["bth.psn"] + 2  # the third data frame
    assert all(f["bth.psn"] == lost for f in naks)  # the cumulative ePSN
    assert sorted(f["aeth.msn"] for f in naks) == list(range(lost + 1, lost + 14))


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_every_sr_frame_decodes_in_tshark_as_we_do(tmp_path):
    path = tmp_path / "sr.pcap"
    sc = Scenario(op="mixed", size=9000, count=12, mtu=1024, loss=0.05, reorder=0.1, seed=3,
                  recovery="sr")
    with PcapWriter(str(path)) as w:
        s = run_scenario(sc, w)
    assert s.data_verified and s.selective_naks and s.selective_retransmitted
    names = list(FIELDS)
    cmd = fields_command(path, ["frame.number", "_ws.malformed", "_ws.expert.severity",
                                *names])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = [line.split("\t") for line in res.stdout.splitlines()]
    pkts = _frames(path)
    assert len(rows) == len(pkts) > 100
    for p, row in zip(pkts, rows):
        assert row[1] == "", (row[0], "malformed")
        ours = p.fields()
        for i, ws_name in enumerate(names):
            want = ours.get(our_key(ws_name, p.opcode.headers))
            if isinstance(want, bool):
                want = int(want)
            assert tshark_value(ws_name, row[i + 3]) == want, (row[0], ws_name)


# -- goodput under random loss (virtual time; bench/bench_recovery.py has the curve) ---------


def _goodput(recovery: str, loss: float) -> float:
    s = run_scenario(Scenario(op="write", size=1 << 20, count=20, loss=loss, seed=7,
                              recovery=recovery))
    assert s.data_verified
    return s.goodput_gbps


def test_sr_goodput_at_one_percent_loss_is_at_least_90_percent_of_the_rest():
    sr, gbn = _goodput("sr", 0.01), _goodput("gbn", 0.01)
    assert sr >= 0.9 * 100 * (1 - 0.01)
    assert gbn < 0.6 * sr  # go-back-N resends about half its packets here


def test_sr_on_a_clean_link_is_as_fast_as_gbn():
    assert _goodput("sr", 0.0) >= 0.97 * _goodput("gbn", 0.0)


@pytest.mark.parametrize("rule", ["dupthresh", "rack"])
def test_reordering_below_the_threshold_causes_no_spurious_retransmission(rule):
    """Frames delayed by less than DUPTHRESH packet times (4 KiB at 100 Gb/s: 330 ns) arrive
    at most DUPTHRESH - 1 places late: none may be declared lost (by either loss rule: the
    time-based one's first window, a quarter of the min RTT, is wider)."""
    from roce.emu import LinkConfig
    from roce.emu.core.selective import DUPTHRESH

    link = LinkConfig(reorder=0.2, reorder_jitter_ns=330 * (DUPTHRESH - 1))
    p = pair(recovery=RecoveryConfig("sr", loss_rule=rule), mtu=4096, size=1 << 20,
             config=link, reverse=LinkConfig(), seed=5)
    for i in range(4):
        p.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[p.src.sge(i << 18, 1 << 18)],
                              remote_addr=p.dst.addr + (i << 18), rkey=p.dst.rkey))
    p.fab.run_until_idle(p.fab.now + 10**9)
    assert [w.status for w in poll_all(p.cqa)] == [0] * 4
    assert p.dst.read(1 << 20) == p.src.read(1 << 20)
    assert p.ab.stats.reordered > 20 and p.qb.core.counters.ooo_accepted > 0
    assert p.qa.core.counters.retransmitted == 0
    assert p.qb.core.counters.duplicate_requests == 0


# -- roce stats: selective NAKs, both engines ------------------------------------------------


def _sr_capture(path, seed: int = 3, loss: float = 0.02, reverse_loss: float = 0.0,
                reorder: float = 0.05) -> object:
    from roce.emu import LinkConfig

    p = pair(recovery="sr", mtu=1024, size=1 << 18, seed=seed, pcap=str(path),
             config=LinkConfig(loss=loss, reorder=reorder), reverse=LinkConfig(loss=reverse_loss))
    for i in range(8):
        n = 1 << 14
        p.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[p.src.sge(i * n, n)], remote_addr=p.dst.addr + i * n,
                              rkey=p.dst.rkey))
    p.fab.run_until_idle(p.fab.now + 10**9)
    p.writer.close()
    assert [w.status for w in poll_all(p.cqa)] == [0] * 8
    return p


def _frames_of(path) -> list[bytes]:
    with open_capture(path) as cap:
        return [bytes(r.data) for r in cap]


def test_stats_counts_every_selective_nak_the_responder_sent(tmp_path):
    from roce.analysis.flows import analyse

    path = tmp_path / "sr.pcap"
    p = _sr_capture(path)  # the reverse direction is lossless: every NAK is in the capture
    sent = p.qb.core.counters.sacks_sent
    assert sent > 5
    r = analyse(_frames_of(path), engine="reference")
    [back] = [f for f in r.flows if f.qp == p.qa.qp_num]
    # all of them, but the first if it came before any ACK (flowrules: "selective NAK")
    assert back.selective_naks + back.naks.get(0, 0) == sent
    assert back.naks.get(0, 0) <= 1 and r.totals["selective_naks"] == back.selective_naks


@pytest.mark.skipif(not __import__("roce.analysis.cflows", fromlist=["AVAILABLE"]).AVAILABLE,
                    reason="fast path not built")
@settings(max_examples=EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**16), loss=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
       reverse=st.sampled_from([0.0, 0.05]))
def test_both_engines_agree_on_sr_captures(tmp_path_factory, seed, loss, reverse):
    from roce.analysis.flows import analyse

    path = tmp_path_factory.mktemp("sr") / "sr.pcap"
    _sr_capture(path, seed=seed, loss=loss, reverse_loss=reverse)
    frames = _frames_of(path)
    ref = analyse(frames, engine="reference")
    got = analyse(frames, engine="compiled")
    assert got.to_dict() == ref.to_dict()
    assert got.event_counts == ref.event_counts


@pytest.mark.parametrize("engine", ["reference", "compiled"])
def test_stats_reassembles_sr_writes(tmp_path, engine):
    """WRITE First ... WRITE Only with a RETH each: one message of the right size each."""
    from roce.analysis.cflows import AVAILABLE
    from roce.analysis.flows import analyse

    if engine == "compiled" and not AVAILABLE:
        pytest.skip("fast path not built")
    path = tmp_path / "sr.pcap"
    p = _sr_capture(path, loss=0.0, reorder=0.0)
    [req] = [f for f in analyse(_frames_of(path), engine=engine).flows
             if f.qp == p.qb.qp_num]
    assert req.incomplete == 0
    assert req.stats == {K_WRITE: [8, 8 << 14, 1 << 14, 1 << 14]}  # count, bytes, min, max


def test_sr_places_read_responses_out_of_order():
    """One lost READ response: the ones after it are placed as they come; DUPTHRESH of them
    ask again for the missing one alone, once; the READ completes with the right bytes."""
    from roce.emu import LinkConfig
    from roce.emu.core.selective import DUPTHRESH

    size = 16 * 1024
    p = pair(recovery="sr", mtu=1024, size=64 * 1024, config=LinkConfig(),
             reverse=LinkConfig(drop_nth=(3,)))
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_READ,
                          sg_list=[p.lbuf.sge(0, size)], remote_addr=p.dst.addr,
                          rkey=p.dst.rkey))
    p.fab.run_until_idle(p.fab.now + 10**9)
    [wc] = poll_all(p.cqa)
    assert wc.status == 0 and p.lbuf.read(size) == p.dst.read(size)
    c = p.qa.core.counters
    assert (c.retransmitted, c.selective_retransmitted, c.timeouts) == (1, 1, 0)
    # asked again once, for response 3 alone (4..16 placed already): 15 responses, then 1
    assert c.packets_received == 15 + 1
    assert DUPTHRESH < 16 - 3


def test_sr_reads_at_depth_4_under_loss_ask_again_only_for_the_missing_responses():
    """Four 64 KiB READs outstanding, 1% loss: each re-request asks for the missing run of
    one READ, not for it to its end nor for the READs after it (measured over four seeds:
    9-10 responses sent again for 10-11 re-requests; before, 117-181 for 12-18)."""
    sc = Scenario(op="read", size=64 << 10, count=64, depth=4, loss=0.01, seed=2,
                  recovery="sr")
    s = run_scenario(sc)
    assert s.data_verified and s.retransmitted > 0
    npsn = -(-sc.size // sc.mtu)
    again = s.packets - sc.count * (1 + npsn) - s.retransmitted - s.selective_naks
    assert again <= s.retransmitted


def test_rto_low_counts_the_packets_sent_not_the_psns_assigned():
    """A 16-packet WRITE under a BDP cap of 2 packets: both go and are lost.  Two packets are
    in flight, so the timeout is IRN's RTO_low, although the message's 16 PSNs were all
    assigned when it started (it used to count them and wait RTO_high)."""
    cfg = RecoveryConfig("sr", bdp_packets=2)
    assert cfg.rto_n >= 2
    p = pair(recovery=cfg, mtu=1024, size=64 * 1024,
             config=LinkConfig(drop_nth=(1, 2)), reverse=LinkConfig())
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                          sg_list=[p.src.sge(0, 16 * 1024)], remote_addr=p.dst.addr,
                          rkey=p.dst.rkey))
    rq = p.qa.core.requester
    assert (rq.una, rq.high, rq.psn) == (0, 1, 16)  # 2 sent of 16 assigned
    assert rq.in_flight() == 2
    assert rq.timer - p.fab.now == cfg.rto_low_ns
    p.fab.run_until_idle(p.fab.now + 10**9)
    [wc] = poll_all(p.cqa)
    assert wc.status == 0 and p.dst.read(16 * 1024) == p.src.read(16 * 1024)
    assert p.qa.core.counters.timeouts == 1
