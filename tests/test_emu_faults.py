"""The emulator under seeded link faults: loss, bursts, reordering, duplication, corruption,
lost ACKs, targeted drops and display-filter drops.  Whatever the fault, every message is
delivered exactly once, in order and byte-exact, every work request completes once, and the
recovery is visible (retransmission counters, repeated PSNs in the pcap).  Same seed, same
pcap bytes."""

from __future__ import annotations

from collections import Counter

import pytest
from emu_helpers import (
    IP_A,
    IP_B,
    acks,
    atomic,
    finish,
    from_a,
    from_b,
    idle,
    pair,
    poll_all,
    post_recv,
    read,
    read_frames,
    send,
    write,
)

from roce.decoder.filter import compile_filter
from roce.emu import LinkConfig
from roce.emu.core.constants import (
    IBV_QPS_RTS,
    IBV_WC_RETRY_EXC_ERR,
    IBV_WC_SUCCESS,
    IBV_WC_WR_FLUSH_ERR,
    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
)
from roce.emu.core.frames import receive
from roce.opcodes import Operation, Position

MTU = 1024
SIZE = 1 << 18
SLOT = 4096            # SEND i: src[i*SLOT:], received into rbuf[i*SLOT:]
SEND_LEN = 2500        # 3 packets
WRITE_BASE, WRITE_LEN = 128 * 1024, 10_000   # src[WRITE_BASE + i*WRITE_LEN] -> dst[i*WRITE_LEN]
READ_BASE, READ_LEN = 128 * 1024, 7000       # dst[READ_BASE + i*READ_LEN] -> lbuf[i*READ_LEN]
EXTRA_RECVS = 4


class Workload:
    """Sequence-numbered SENDs interleaved with WRITEs and READs."""

    def __init__(self, p, nsend=24, nwrite=4, nread=4):
        self.p, self.nsend, self.nwrite, self.nread = p, nsend, nwrite, nread
        for i in range(nsend + EXTRA_RECVS):
            post_recv(p, 1000 + i, i * SLOT, SLOT)
        self.expected = []
        for i in range(max(nsend, nwrite, nread)):
            if i < nsend:
                p.src.write(i.to_bytes(4, "little"), offset=i * SLOT)
                send(p, i, i * SLOT, SEND_LEN)
                self.expected.append(i)
            if i < nwrite:
                write(p, 100 + i, WRITE_BASE + i * WRITE_LEN, WRITE_LEN, i * WRITE_LEN)
                self.expected.append(100 + i)
            if i < nread:
                read(p, 200 + i, i * READ_LEN, READ_LEN, READ_BASE + i * READ_LEN)
                self.expected.append(200 + i)

    def check(self):
        """Everything completed once, in order, byte-exact; no duplicate delivered."""
        p = self.p
        assert idle(p), "the run hit the time cap"
        wcs = poll_all(p.cqa)
        assert [(w.wr_id, w.status) for w in wcs] == [(i, IBV_WC_SUCCESS)
                                                      for i in self.expected]
        rwcs = poll_all(p.cqb)
        assert [(w.wr_id, w.status, w.byte_len) for w in rwcs] == [
            (1000 + i, IBV_WC_SUCCESS, SEND_LEN) for i in range(self.nsend)]
        # the spare receive WQEs are still there: no SEND was delivered twice
        assert len(p.qb.core.rq) == EXTRA_RECVS
        for i in range(self.nsend):
            got = p.rbuf.read(SEND_LEN, i * SLOT)
            assert int.from_bytes(got[:4], "little") == i
            assert got == p.src.read(SEND_LEN, i * SLOT)
        assert p.rbuf.read(SLOT * EXTRA_RECVS, self.nsend * SLOT) == bytes(SLOT * EXTRA_RECVS)
        for i in range(self.nwrite):
            assert p.dst.read(WRITE_LEN, i * WRITE_LEN) == p.src.read(
                WRITE_LEN, WRITE_BASE + i * WRITE_LEN)
        for i in range(self.nread):
            assert p.lbuf.read(READ_LEN, i * READ_LEN) == p.dst.read(
                READ_LEN, READ_BASE + i * READ_LEN)
        assert p.qa.qp_state == IBV_QPS_RTS and p.qb.qp_state == IBV_QPS_RTS


def repeated_request_psns(frames):
    """PSNs of a's requests seen more than once on the wire (retransmissions)."""
    c = Counter(f.psn for f in from_a(frames) if f.is_request)
    return {psn for psn, n in c.items() if n > 1}


def faulty(tmp_path, seed, **faults):
    p = pair(seed=seed, mtu=MTU, size=SIZE, pcap=tmp_path / "f.pcap", retry_cnt=7, **faults)
    w = Workload(p)
    frames = finish(p)
    w.check()
    return p, frames


# -- random faults ------------------------------------------------------------------------


@pytest.mark.parametrize("loss,seed", [(0.01, 1), (0.05, 2), (0.1, 3), (0.3, 2)])
def test_random_loss(tmp_path, loss, seed):
    p, frames = faulty(tmp_path, seed, loss=loss)
    assert p.ab.stats.lost > 0
    assert p.qa.core.counters.retransmitted > 0
    assert repeated_request_psns(frames)
    assert p.qb.core.counters.duplicates > 0 or p.qb.core.counters.out_of_sequence > 0


def test_reordering(tmp_path):
    p, frames = faulty(tmp_path, 4, reorder=0.2, reorder_jitter_ns=5000)
    assert p.ab.stats.reordered > 0
    assert p.ab.stats.lost == p.ba.stats.lost == 0
    assert p.qb.core.counters.out_of_sequence > 0  # late packets looked like gaps
    psns = [f.psn for f in from_a(frames)]
    assert any(b < a for a, b in zip(psns, psns[1:]))  # out of order on the wire
    assert p.qa.core.counters.retransmitted > 0


def test_duplication(tmp_path):
    p, frames = faulty(tmp_path, 5, dup=0.2)
    assert p.ab.stats.duplicated > 0 and p.ba.stats.duplicated > 0
    assert p.qb.core.counters.duplicates > 0
    assert repeated_request_psns(frames)
    # nothing was lost, so nothing had to be resent: the repeats are the link's copies
    assert p.qa.core.counters.retransmitted == 0


def test_corruption_dropped_by_icrc(tmp_path):
    p, frames = faulty(tmp_path, 6, corrupt=0.1)
    assert p.ab.stats.corrupted > 0 and p.ba.stats.corrupted > 0
    assert p.b.device.counters.icrc_drops > 0
    assert p.a.device.counters.icrc_drops > 0
    dropped = p.b.device.counters.icrc_drops + p.b.device.counters.malformed
    assert 0 < dropped <= p.ab.stats.corrupted
    assert p.qa.core.counters.retransmitted > 0
    # the corrupted frames are in the capture (recorded on delivery): they do not decode
    # any more or carry a bad ICRC
    every = read_frames(tmp_path / "f.pcap", keep_bad=True)
    bad = [f for f in every if f.pkt is None or not f.pkt.icrc_valid]
    assert 0 < len(bad) <= p.ab.stats.corrupted + p.ba.stats.corrupted


def test_every_corrupted_frame_fails_the_icrc_check(tmp_path):
    p = pair(mtu=256, pcap=tmp_path / "c.pcap")
    post_recv(p, 1, 0, 4096)
    send(p, 1, 0, 1000)
    write(p, 2, 0, 300, 0)
    frames = finish(p)
    link = p.ab
    link.config = LinkConfig(corrupt=1.0)
    accepted = []
    for f in frames * 100:  # ~1000 corruptions of ACKs and requests, seeded
        for _, out in link.fate(p.fab.now, f.raw):
            status, pkt = receive(out)
            if pkt is not None:
                accepted.append(out)
    assert link.stats.corrupted == len(frames) * 100
    assert accepted == []


def test_burst_loss(tmp_path):
    p, frames = faulty(tmp_path, 7, burst_p=0.02, burst_r=0.3)
    assert p.ab.stats.lost > 0
    assert p.qa.core.counters.retransmitted > 0
    assert repeated_request_psns(frames)


def test_everything_at_once(tmp_path):
    p, frames = faulty(tmp_path, 8, loss=0.1, reorder=0.05, dup=0.05, corrupt=0.05,
                       burst_p=0.01)
    assert p.qa.core.counters.retransmitted > 0


def test_mtu_256_under_loss(tmp_path):
    p = pair(seed=9, mtu=256, size=SIZE, pcap=tmp_path / "f.pcap", loss=0.05)
    w = Workload(p)
    finish(p)
    w.check()


# -- lost ACKs ----------------------------------------------------------------------------


def test_ack_loss_window(tmp_path):
    """Every ACK b sends during the first 30 us is dropped."""
    p = pair(seed=10, mtu=MTU, size=SIZE, pcap=tmp_path / "f.pcap", config=LinkConfig(),
             reverse=LinkConfig(drop_acks_between=(0, 30_000)))
    w = Workload(p)
    frames = finish(p)
    w.check()
    assert p.ba.stats.filtered > 0
    assert p.ba.stats.lost == p.ba.stats.filtered
    assert p.qa.core.counters.retransmitted > 0
    assert p.qb.core.counters.duplicates > 0  # the resent requests were duplicates at b
    assert repeated_request_psns(frames)
    # READ responses are not ACKs: none was filtered
    assert all(f.op.operation is not Operation.ACK or f.ts >= 30_000 for f in from_b(frames))


def test_ack_loss_coalesced_by_later_ack(tmp_path):
    """Losing the ACK of message 3 costs nothing: the ACK of message 4 covers it."""
    p = pair(seed=0, mtu=MTU, pcap=tmp_path / "f.pcap", config=LinkConfig(),
             reverse=LinkConfig(drop_filter=compile_filter("bth.opcode == 0x11 and aeth.msn == 3")))
    for i in range(6):
        post_recv(p, 100 + i, i * 1024, 1024)
        send(p, i, i * 1024, 1000)
    frames = finish(p)
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(i, IBV_WC_SUCCESS)
                                                              for i in range(6)]
    assert len(poll_all(p.cqb)) == 6
    assert p.ba.stats.filtered == 1
    assert [f.f["aeth.msn"] for f in acks(frames)] == [1, 2, 4, 5, 6]
    assert p.qa.core.counters.retransmitted == 0 and p.qa.core.counters.timeouts == 0


# -- targeted drops ------------------------------------------------------------------------


def targeted(p):
    """One 5-packet WRITE, one 5-packet READ, one SEND."""
    post_recv(p, 900, 0, 1024)
    write(p, 1, 0, 5 * MTU, 0)
    read(p, 2, 0, 5 * MTU, 64 * 1024)
    send(p, 3, 0, 100)


def clean_run(tmp_path):
    p = pair(mtu=MTU, size=SIZE, pcap=tmp_path / "clean.pcap")
    targeted(p)
    return finish(p)


def check_targeted(p):
    assert idle(p)
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(1, IBV_WC_SUCCESS),
                                                              (2, IBV_WC_SUCCESS),
                                                              (3, IBV_WC_SUCCESS)]
    assert [w.wr_id for w in poll_all(p.cqb)] == [900]
    assert p.dst.read(5 * MTU) == p.src.read(5 * MTU)
    assert p.lbuf.read(5 * MTU) == p.dst.read(5 * MTU, 64 * 1024)
    assert p.rbuf.read(100) == p.src.read(100)


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_drop_one_write_packet(tmp_path, which):
    clean = clean_run(tmp_path)
    sent = from_a(clean)  # the a->b direction, in sending order
    writes = [i for i, f in enumerate(sent) if f.op.operation is Operation.RDMA_WRITE]
    assert len(writes) == 5
    index = {"first": writes[0], "middle": writes[2], "last": writes[4]}[which]
    victim = sent[index].psn
    p = pair(mtu=MTU, size=SIZE, pcap=tmp_path / "drop.pcap",
             config=LinkConfig(drop_nth=frozenset({index + 1})), reverse=LinkConfig())
    targeted(p)
    frames = finish(p)
    check_targeted(p)
    assert p.ab.stats.lost == 1
    assert p.qa.core.counters.retransmitted > 0
    psns = [f.psn for f in from_a(frames)]
    assert psns.count(victim) == 1  # the lost copy never arrived, the resent one did
    assert repeated_request_psns(frames)  # go-back-N resent what followed it
    assert p.qb.core.counters.duplicates + p.qb.core.counters.out_of_sequence > 0


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_drop_one_read_response(tmp_path, which):
    clean = clean_run(tmp_path)
    back = from_b(clean)  # the b->a direction, in sending order
    resp = [i for i, f in enumerate(back) if f.op.operation is Operation.READ_RESPONSE]
    assert len(resp) == 5
    k = {"first": 0, "middle": 2, "last": 4}[which]
    index = resp[k]
    read_psn = back[resp[0]].psn
    p = pair(mtu=MTU, size=SIZE, pcap=tmp_path / "drop.pcap", config=LinkConfig(),
             reverse=LinkConfig(drop_nth=frozenset({index + 1})))
    targeted(p)
    frames = finish(p)
    check_targeted(p)
    assert p.ba.stats.lost == 1
    assert p.qa.core.counters.retransmitted > 0
    # the READ was asked again from the first missing response: RETH moved on by k packets
    reads = [f for f in from_a(frames) if f.op.operation is Operation.RDMA_READ]
    assert len(reads) == 2
    again = reads[1]
    assert again.psn == read_psn + k
    reth = again.pkt["reth"]
    assert reth["va"] == p.dst.addr + 64 * 1024 + k * MTU
    assert reth["dmalen"] == (5 - k) * MTU
    resent = [f for f in from_b(frames) if f.op.operation is Operation.READ_RESPONSE
              and f.ts > again.ts]
    assert [f.psn for f in resent] == [read_psn + j for j in range(k, 5)]
    assert resent[0].op.position is (Position.ONLY if k == 4 else Position.FIRST)


def test_lost_atomic_ack_is_replayed_not_reexecuted(tmp_path):
    p = pair(mtu=MTU, pcap=tmp_path / "a.pcap", config=LinkConfig(),
             reverse=LinkConfig(drop_nth=frozenset({1, 2})))
    p.dst.write((41).to_bytes(8, "little"), offset=0)
    p.dst.write((7).to_bytes(8, "little"), offset=8)
    atomic(p, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 0, compare_add=1)
    atomic(p, 2, IBV_WR_ATOMIC_CMP_AND_SWP, 8, 8, compare_add=7, swap=99)
    frames = finish(p)
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(1, IBV_WC_SUCCESS),
                                                              (2, IBV_WC_SUCCESS)]
    assert int.from_bytes(p.dst.read(8), "little") == 42  # added once
    assert int.from_bytes(p.lbuf.read(8), "little") == 41
    assert int.from_bytes(p.dst.read(8, 8), "little") == 99  # swapped once
    assert int.from_bytes(p.lbuf.read(8, 8), "little") == 7  # the saved original, replayed
    assert repeated_request_psns(frames) == {0, 1}
    assert p.qb.core.counters.duplicates >= 2


# -- display-filter drops -------------------------------------------------------------------


def test_drop_filter_read_middle_response(tmp_path):
    """Every READ response Middle with PSN 3 is dropped; the READ restarts at PSN 3 and that
    answer is a First, which passes."""
    p = pair(mtu=MTU, pcap=tmp_path / "f.pcap", config=LinkConfig(),
             reverse=LinkConfig(drop_filter=compile_filter("bth.opcode == 0x0e and bth.psn == 3")))
    read(p, 1, 0, 6 * MTU, 0)
    frames = finish(p)
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(1, IBV_WC_SUCCESS)]
    assert p.lbuf.read(6 * MTU) == p.dst.read(6 * MTU)
    assert p.ba.stats.filtered == 1
    reqs = from_a(frames)
    assert [(f.psn, f.pkt["reth"]["dmalen"]) for f in reqs] == [(0, 6 * MTU), (3, 3 * MTU)]
    assert 3 not in [f.psn for f in from_b(frames) if f.op.ident.endswith("MIDDLE")]


def test_drop_filter_every_read_response_first(tmp_path):
    """'bth.opcode == 0x0d' drops every READ response First: single-packet READs (answered
    by Only, 0x10) complete; a multi-packet READ never can and ends with RETRY_EXC_ERR after
    retry_cnt + 1 requests."""
    p = pair(mtu=MTU, pcap=tmp_path / "f.pcap", retry_cnt=3, timeout=6, config=LinkConfig(),
             reverse=LinkConfig(drop_filter=compile_filter("bth.opcode == 0x0d")))
    read(p, 1, 0, MTU, 0)
    read(p, 2, MTU, 3 * MTU, MTU)
    send(p, 3, 0, 10)
    frames = finish(p)
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [
        (1, IBV_WC_SUCCESS), (2, IBV_WC_RETRY_EXC_ERR), (3, IBV_WC_WR_FLUSH_ERR)]
    assert p.lbuf.read(MTU) == p.dst.read(MTU)
    assert [f.psn for f in from_a(frames) if f.op.operation is Operation.RDMA_READ] == \
        [0] + [1] * 4
    assert p.ba.stats.filtered == 4
    assert not [f for f in from_b(frames) if f.op.code == 0x0D]


# -- reproducibility ---------------------------------------------------------------------


FAULTS = dict(loss=0.05, reorder=0.05, dup=0.05, corrupt=0.02)


def recorded(tmp_path, name, seed):
    p = pair(seed=seed, mtu=MTU, size=SIZE, pcap=tmp_path / name, **FAULTS)
    Workload(p, nsend=12, nwrite=2, nread=2)
    finish(p)
    return (tmp_path / name).read_bytes()


def test_same_seed_same_pcap(tmp_path):
    a = recorded(tmp_path, "a.pcap", 11)
    b = recorded(tmp_path, "b.pcap", 11)
    assert len(a) > 10_000
    assert a == b


def test_different_seeds_different_pcaps(tmp_path):
    runs = {recorded(tmp_path, f"s{seed}.pcap", seed) for seed in (11, 12, 13)}
    assert len(runs) == 3


def test_clean_runs_do_not_depend_on_the_seed(tmp_path):
    """Without faults nothing random happens on the wire (the data differs by seed, so
    compare the headers only)."""
    shapes = []
    for seed in (1, 2):
        p = pair(seed=seed, mtu=MTU, size=SIZE, pcap=tmp_path / f"c{seed}.pcap")
        Workload(p, nsend=4, nwrite=1, nread=1)
        frames = finish(p)
        shapes.append([(f.ts, f.op.code, f.psn, f.src) for f in frames])
    assert shapes[0] == shapes[1]
    assert {s for *_, s in shapes[0]} == {IP_A, IP_B}


def test_capture_matches_link_counters(tmp_path):
    p, frames = faulty(tmp_path, 3, loss=0.05, dup=0.05)
    delivered_ab = p.ab.stats.frames - p.ab.stats.lost + p.ab.stats.duplicated
    delivered_ba = p.ba.stats.frames - p.ba.stats.lost + p.ba.stats.duplicated
    assert len(from_a(frames)) == delivered_ab
    assert len(from_b(frames)) == delivered_ba
    assert read_frames(tmp_path / "f.pcap")[0].ts > 0


# -- implied NAK ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["read", "atomic"])
def test_implied_nak_retries_before_the_timeout(tmp_path, kind):
    """The answer to a READ/ATOMIC is lost but the ACK of the SEND behind it arrives: the
    requester asks again at once (implied NAK), not after the local ACK timeout."""
    p = pair(mtu=MTU, pcap=tmp_path / "i.pcap", timeout=14, config=LinkConfig(),
             reverse=LinkConfig(drop_nth=frozenset({1})))
    post_recv(p, 9, 0, 1024)
    if kind == "read":
        read(p, 1, 0, 512, 0)
    else:
        p.dst.write((5).to_bytes(8, "little"), offset=0)
        atomic(p, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 0, compare_add=10)
    send(p, 2, 0, 100)
    frames = finish(p)
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(1, IBV_WC_SUCCESS),
                                                              (2, IBV_WC_SUCCESS)]
    assert [w.wr_id for w in poll_all(p.cqb)] == [9]
    if kind == "read":
        assert p.lbuf.read(512) == p.dst.read(512)
    else:
        assert int.from_bytes(p.lbuf.read(8), "little") == 5
        assert int.from_bytes(p.dst.read(8), "little") == 15  # executed once
    assert p.qa.core.counters.timeouts == 0
    reqs = from_a(frames)
    # READ/ATOMIC, SEND, then go-back-N from the READ/ATOMIC: both again
    assert [f.psn for f in reqs] == [0, 1, 0, 1]
    assert reqs[2].ts - reqs[0].ts < 100_000  # far below the 67 ms timeout
    assert p.qb.core.counters.duplicates == 2
