"""Error paths of the emulator: what goes on the wire (the NAK, decoded from the recorded pcap:
AETH syndrome type and code per docs/protocol.md), the completion statuses, the QP states and the
flushing of the work behind an error; the QP state table."""

from __future__ import annotations

import pytest
from emu_helpers import (
    FULL,
    acks,
    atomic,
    finish,
    from_a,
    from_b,
    idle,
    naks,
    pair,
    poll_all,
    post_recv,
    read,
    send,
    write,
)

from roce.emu import (
    CQ,
    MR,
    PD,
    QP,
    SGE,
    LinkConfig,
    QPAttr,
    QPInitAttr,
    QPStateError,
    RecvWR,
    SendWR,
)
from roce.emu.core.constants import (
    ACK_TIMEOUT_UNIT_NS,
    IBV_ACCESS_LOCAL_WRITE,
    IBV_ACCESS_REMOTE_ATOMIC,
    IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE,
    IBV_QP_ACCESS_FLAGS,
    IBV_QP_AV,
    IBV_QP_DEST_QPN,
    IBV_QP_MAX_DEST_RD_ATOMIC,
    IBV_QP_MAX_QP_RD_ATOMIC,
    IBV_QP_MIN_RNR_TIMER,
    IBV_QP_PATH_MTU,
    IBV_QP_PKEY_INDEX,
    IBV_QP_PORT,
    IBV_QP_QKEY,
    IBV_QP_RETRY_CNT,
    IBV_QP_RNR_RETRY,
    IBV_QP_RQ_PSN,
    IBV_QP_STATE,
    IBV_QP_TIMEOUT,
    IBV_QPS_ERR,
    IBV_QPS_INIT,
    IBV_QPS_RESET,
    IBV_QPS_RTR,
    IBV_QPS_RTS,
    IBV_QPS_SQD,
    IBV_QPT_UD,
    IBV_WC_LOC_LEN_ERR,
    IBV_WC_LOC_PROT_ERR,
    IBV_WC_RDMA_READ,
    IBV_WC_RDMA_WRITE,
    IBV_WC_RECV,
    IBV_WC_REM_ACCESS_ERR,
    IBV_WC_REM_INV_REQ_ERR,
    IBV_WC_RETRY_EXC_ERR,
    IBV_WC_RNR_RETRY_EXC_ERR,
    IBV_WC_SEND,
    IBV_WC_SUCCESS,
    IBV_WC_WR_FLUSH_ERR,
    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_RDMA_READ,
    IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM,
)
from roce.emu.core.qp import AHAttr
from roce.headers import (
    AETH_ACK,
    AETH_NAK,
    AETH_RNR_NAK,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR,
    rnr_timer_ns,
)
from roce.opcodes import Operation, lookup

# Error runs are short; a cap keeps a QP stuck in an RNR loop from spinning for long.
LIMIT = 20_000_000

def statuses(cq):
    return [(w.wr_id, w.status) for w in poll_all(cq)]


def assert_one_nak(frames, code, psn):
    """Exactly one answer from the responder: a NAK with ``code`` for ``psn``."""
    answers = from_b(frames)
    assert len(answers) == 1, [(f.op.ident, f.psn, f.f.get("aeth.syndrome")) for f in answers]
    nak = answers[0]
    assert nak.op.operation is Operation.ACK
    assert (nak.syn_type, nak.syn_value, nak.psn) == (AETH_NAK, code, psn)
    return nak


def fatal_then_flush(p, post_bad, code, status, *, recv_status=IBV_WC_WR_FLUSH_ERR):
    """Post a receive on b, the bad request and two good ones behind it: one NAK on the wire,
    the bad WR completes with ``status``, the rest flush, both QPs end in ERR, and b's
    memory is untouched."""
    post_recv(p, 500, 0, 4096)
    before = bytes(p.dst.buf)
    post_bad()
    send(p, 2, 0, 100)
    write(p, 3, 0, 100, 0)
    frames = finish(p, LIMIT)
    assert idle(p)
    assert statuses(p.cqa) == [(1, status), (2, IBV_WC_WR_FLUSH_ERR), (3, IBV_WC_WR_FLUSH_ERR)]
    assert statuses(p.cqb) == [(500, recv_status)]
    assert p.qa.qp_state == IBV_QPS_ERR and p.qb.qp_state == IBV_QPS_ERR
    assert bytes(p.dst.buf) == before
    first = from_a(frames)[0]
    assert_one_nak(frames, code, first.psn)
    # posting to a QP in ERR completes at once with FLUSH_ERR, nothing is sent
    write(p, 4, 0, 8, 0)
    p.qb.post_recv(RecvWR(wr_id=501, sg_list=[p.rbuf.sge(0, 8)]))
    p.fab.run_until_idle()
    assert statuses(p.cqa) == [(4, IBV_WC_WR_FLUSH_ERR)]
    assert statuses(p.cqb) == [(501, IBV_WC_WR_FLUSH_ERR)]
    return frames


# -- remote access errors ---------------------------------------------------------------


def _other_pd_mr(p):
    return MR(PD(p.b), 4096, FULL)


REMOTE_ACCESS_CASES = {
    "write-wrong-rkey": lambda p: write(p, 1, 0, 64, 0, rkey=p.dst.rkey ^ 0x01),
    "write-unknown-index": lambda p: write(p, 1, 0, 64, 0, rkey=0x7700 | (p.dst.rkey & 0xFF)),
    "write-out-of-bounds": lambda p: write(p, 1, 0, 64, p.dst.length - 32),
    "write-below-mr": lambda p: write(p, 1, 0, 64, -8),
    "read-wrong-rkey": lambda p: read(p, 1, 0, 64, 0, rkey=p.dst.rkey + 0x100),
    "read-out-of-bounds": lambda p: read(p, 1, 0, 3000, p.dst.length - 100),
    "atomic-wrong-rkey": lambda p: atomic(p, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 0,
                                          compare_add=1, rkey=p.dst.rkey ^ 0x80),
    "atomic-out-of-bounds": lambda p: atomic(p, 1, IBV_WR_ATOMIC_CMP_AND_SWP, 0,
                                             p.dst.length, compare_add=0, swap=1),
}


@pytest.mark.parametrize("case", sorted(REMOTE_ACCESS_CASES))
def test_remote_access_error(tmp_path, case):
    p = pair(pcap=tmp_path / "e.pcap")
    fatal_then_flush(p, lambda: REMOTE_ACCESS_CASES[case](p), NAK_REMOTE_ACCESS_ERROR,
                     IBV_WC_REM_ACCESS_ERR)
    assert p.qb.core.counters.naks_sent == {"remote access error": 1}
    assert p.qa.core.counters.naks_received == {"remote access error": 1}


MR_ACCESS_CASES = {
    # (access of the target MR, how to reach it)
    "write-needs-REMOTE_WRITE": (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ
                                 | IBV_ACCESS_REMOTE_ATOMIC, "write"),
    "read-needs-REMOTE_READ": (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
                               | IBV_ACCESS_REMOTE_ATOMIC, "read"),
    "atomic-needs-REMOTE_ATOMIC": (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
                                   | IBV_ACCESS_REMOTE_READ, "atomic"),
}


def _hit(p, mr, how):
    if how == "write":
        p.qa.post_send(SendWR(wr_id=1, opcode=IBV_WR_RDMA_WRITE, sg_list=[p.src.sge(0, 64)],
                              remote_addr=mr.addr, rkey=mr.rkey))
    elif how == "read":
        p.qa.post_send(SendWR(wr_id=1, opcode=IBV_WR_RDMA_READ, sg_list=[p.lbuf.sge(0, 64)],
                              remote_addr=mr.addr, rkey=mr.rkey))
    else:
        p.qa.post_send(SendWR(wr_id=1, opcode=IBV_WR_ATOMIC_FETCH_AND_ADD,
                              sg_list=[p.lbuf.sge(0, 8)], remote_addr=mr.addr, rkey=mr.rkey,
                              compare_add=1))


@pytest.mark.parametrize("case", sorted(MR_ACCESS_CASES))
def test_mr_access_flag_missing(tmp_path, case):
    access, how = MR_ACCESS_CASES[case]
    p = pair(pcap=tmp_path / "e.pcap")
    mr = MR(p.pdb, 4096, access)
    mr.write(bytes(range(256)) * 16)
    fatal_then_flush(p, lambda: _hit(p, mr, how), NAK_REMOTE_ACCESS_ERROR,
                     IBV_WC_REM_ACCESS_ERR)
    assert mr.read(4096) == bytes(range(256)) * 16


@pytest.mark.parametrize("how", ["write", "read", "atomic"])
def test_mr_in_another_pd(tmp_path, how):
    p = pair(pcap=tmp_path / "e.pcap")
    mr = _other_pd_mr(p)
    fatal_then_flush(p, lambda: _hit(p, mr, how), NAK_REMOTE_ACCESS_ERROR,
                     IBV_WC_REM_ACCESS_ERR)
    assert mr.read(4096) == bytes(4096)


def test_invalidated_rkey_is_remote_access_error(tmp_path):
    p = pair(pcap=tmp_path / "e.pcap")
    assert p.b.device.memory.invalidate(p.dst.rkey)
    fatal_then_flush(p, lambda: write(p, 1, 0, 64, 0), NAK_REMOTE_ACCESS_ERROR,
                     IBV_WC_REM_ACCESS_ERR)


def test_deregistered_mr_is_remote_access_error(tmp_path):
    p = pair(pcap=tmp_path / "e.pcap")
    p.dst.close()
    fatal_then_flush(p, lambda: read(p, 1, 0, 64, 0), NAK_REMOTE_ACCESS_ERROR,
                     IBV_WC_REM_ACCESS_ERR)


def test_zero_length_read_and_write_skip_the_rkey_check(tmp_path):
    """docs/protocol.md: zero-length READ/WRITE skip the rkey check."""
    p = pair(pcap=tmp_path / "z.pcap")
    write(p, 1, 0, 0, 0, rkey=0xDEAD00)
    read(p, 2, 0, 0, 1 << 30, rkey=0xBEEF00)
    frames = finish(p, LIMIT)
    assert statuses(p.cqa) == [(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    assert naks(frames) == []
    assert p.qb.qp_state == IBV_QPS_RTS


@pytest.mark.parametrize("opcode", [IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ])
def test_zero_length_sge_outside_any_mr_is_not_looked_up(opcode):
    """A zero-length READ or WRITE whose SGE names no MR succeeds, as in rxe (copy_data
    returns before any lookup for an empty range); the next WR, with data, still checks."""
    p = pair()
    p.qa.post_send(SendWR(wr_id=1, opcode=opcode, sg_list=[SGE(0x1234, 0, 0x77700)],
                          remote_addr=p.dst.addr, rkey=p.dst.rkey))
    finish(p, LIMIT)
    assert statuses(p.cqa) == [(1, IBV_WC_SUCCESS)]
    p.qa.post_send(SendWR(wr_id=2, opcode=opcode, sg_list=[SGE(0x1234, 8, 0x77700)],
                          remote_addr=p.dst.addr, rkey=p.dst.rkey))
    finish(p, LIMIT)
    assert statuses(p.cqa) == [(2, IBV_WC_LOC_PROT_ERR)]


def test_out_of_bounds_multi_packet_write_writes_nothing(tmp_path):
    p = pair(mtu=256, size=4096, pcap=tmp_path / "e.pcap")
    # three packets, the third past the end of dst: nothing may be written
    fatal_then_flush(p, lambda: write(p, 1, 0, 3 * 256, 4096 - 300), NAK_REMOTE_ACCESS_ERROR,
                     IBV_WC_REM_ACCESS_ERR)


# -- invalid request ----------------------------------------------------------------------


@pytest.mark.parametrize("opcode", [IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD])
@pytest.mark.parametrize("offset", [4, 1, 12])
def test_misaligned_atomic_is_invalid_request(tmp_path, opcode, offset):
    p = pair(pcap=tmp_path / "e.pcap", rnr_retry=3)
    fatal_then_flush(p, lambda: atomic(p, 1, opcode, 0, offset, compare_add=1, swap=2),
                     NAK_INVALID_REQUEST, IBV_WC_REM_INV_REQ_ERR)


QP_ACCESS_CASES = {
    "no-REMOTE_WRITE": (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ
                        | IBV_ACCESS_REMOTE_ATOMIC, "write"),
    "no-REMOTE_READ": (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
                       | IBV_ACCESS_REMOTE_ATOMIC, "read"),
    "no-REMOTE_ATOMIC": (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
                         | IBV_ACCESS_REMOTE_READ, "atomic"),
}


@pytest.mark.parametrize("case", sorted(QP_ACCESS_CASES))
def test_qp_access_flags_missing_is_invalid_request(tmp_path, case):
    access, how = QP_ACCESS_CASES[case]
    p = pair(pcap=tmp_path / "e.pcap", access=access, rnr_retry=3)
    fatal_then_flush(p, lambda: _hit(p, p.dst, how), NAK_INVALID_REQUEST,
                     IBV_WC_REM_INV_REQ_ERR)


def test_qp_access_flags_allow_sends(tmp_path):
    """A QP with no remote access at all still takes SENDs."""
    p = pair(pcap=tmp_path / "e.pcap", access=IBV_ACCESS_LOCAL_WRITE)
    post_recv(p, 7, 0, 256)
    send(p, 1, 0, 200)
    finish(p, LIMIT)
    assert statuses(p.cqa) == [(1, IBV_WC_SUCCESS)]
    assert statuses(p.cqb) == [(7, IBV_WC_SUCCESS)]


@pytest.mark.parametrize("n,mtu", [(101, 1024), (3000, 1024), (600, 256)])
def test_send_longer_than_receive_buffer(tmp_path, n, mtu):
    p = pair(pcap=tmp_path / "e.pcap", mtu=mtu, rnr_retry=3)
    post_recv(p, 600, 0, 100)
    post_recv(p, 601, 4096, 4096)
    send(p, 1, 0, n)
    send(p, 2, 0, 10)
    frames = finish(p, LIMIT)
    assert statuses(p.cqa) == [(1, IBV_WC_REM_INV_REQ_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    wcs = poll_all(p.cqb)
    assert [(w.wr_id, w.status) for w in wcs] == [(600, IBV_WC_LOC_LEN_ERR),
                                                  (601, IBV_WC_WR_FLUSH_ERR)]
    assert wcs[0].opcode == IBV_WC_RECV
    assert p.qa.qp_state == IBV_QPS_ERR and p.qb.qp_state == IBV_QPS_ERR
    # the NAK names the packet that overflowed the buffer (the first one past 100 bytes)
    overflow = from_a(frames)[(100 // mtu)]
    nak = [f for f in naks(frames) if f.syn_type == AETH_NAK]
    assert [(f.syn_value, f.psn) for f in nak][:1] == [(NAK_INVALID_REQUEST, overflow.psn)]
    assert [f for f in naks(frames) if f.syn_type == AETH_RNR_NAK] == []


def _inject(p, ident, psn, ext=None, payload=b"", ackreq=True):
    """Send a hand-made request from a's device to qb (as a buggy peer would)."""
    core = p.qa.core
    frame = core.builder.build(lookup(ident), p.qb.qp_num, psn, ext, payload, ackreq=ackreq)
    p.a.device.tx.append(frame)
    p.a.device.kick()


INJECTED = {
    "middle-without-first": ("RC_SEND_MIDDLE", None, b"x" * 1024),
    "last-without-first": ("RC_RDMA_WRITE_LAST", None, b"x" * 4),
    "write-only-length-differs": ("RC_RDMA_WRITE_ONLY", "reth-100", b"x" * 60),
    "payload-over-mtu": ("RC_SEND_ONLY", None, b"x" * 1028),
    "first-short-of-mtu": ("RC_SEND_FIRST", None, b"x" * 100),
    "flush-unsupported": ("RC_FLUSH", "reth-8", b""),
}


@pytest.mark.parametrize("case", sorted(INJECTED))
def test_bad_request_is_invalid_request(tmp_path, case):
    ident, ext, payload = INJECTED[case]
    p = pair(pcap=tmp_path / "e.pcap", mtu=1024)
    post_recv(p, 700, 0, 8192)
    if ext is not None:
        ext = {"reth": {"va": p.dst.addr, "r_key": p.dst.rkey,
                        "dmalen": int(ext.split("-")[1])}}
    before = bytes(p.dst.buf)
    _inject(p, ident, 0, ext, payload)
    frames = finish(p, LIMIT)
    assert_one_nak(frames, NAK_INVALID_REQUEST, 0)
    assert p.qb.qp_state == IBV_QPS_ERR
    assert statuses(p.cqb) == [(700, IBV_WC_WR_FLUSH_ERR)]
    assert bytes(p.dst.buf) == before


# -- local errors ---------------------------------------------------------------------------


LOCAL_CASES = {
    "send-bad-lkey": lambda p: p.qa.post_send(SendWR(
        wr_id=1, sg_list=[SGE(p.src.addr, 10, p.src.lkey + 1)])),
    "send-sge-past-mr": lambda p: p.qa.post_send(SendWR(
        wr_id=1, sg_list=[SGE(p.src.addr + p.src.length - 4, 10, p.src.lkey)])),
    "send-lkey-of-other-pd": lambda p: p.qa.post_send(SendWR(
        wr_id=1, sg_list=[MR(PD(p.a), 64, FULL).sge(0, 10)])),
    "write-bad-lkey": lambda p: p.qa.post_send(SendWR(
        wr_id=1, opcode=IBV_WR_RDMA_WRITE, sg_list=[SGE(p.src.addr, 10, 0x99900)],
        remote_addr=p.dst.addr, rkey=p.dst.rkey)),
    "read-bad-lkey": lambda p: p.qa.post_send(SendWR(
        wr_id=1, opcode=IBV_WR_RDMA_READ, sg_list=[SGE(p.lbuf.addr, 10, p.lbuf.lkey ^ 1)],
        remote_addr=p.dst.addr, rkey=p.dst.rkey)),
}


@pytest.mark.parametrize("case", sorted(LOCAL_CASES))
def test_bad_local_key_is_local_protection_error(tmp_path, case):
    p = pair(pcap=tmp_path / "e.pcap")
    before = bytes(p.dst.buf)
    LOCAL_CASES[case](p)
    send(p, 2, 0, 10)
    frames = finish(p, LIMIT)
    assert statuses(p.cqa) == [(1, IBV_WC_LOC_PROT_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    assert p.qa.qp_state == IBV_QPS_ERR
    assert from_a(frames) == []  # nothing went on the wire
    assert bytes(p.dst.buf) == before


def test_atomic_with_wrong_local_length_is_local_length_error():
    p = pair()
    p.qa.post_send(SendWR(wr_id=1, opcode=IBV_WR_ATOMIC_FETCH_AND_ADD,
                          sg_list=[p.lbuf.sge(0, 4)], remote_addr=p.dst.addr, rkey=p.dst.rkey))
    p.fab.run_until_idle(LIMIT)
    assert statuses(p.cqa) == [(1, IBV_WC_LOC_LEN_ERR)]
    assert p.qa.qp_state == IBV_QPS_ERR


# -- RNR --------------------------------------------------------------------------------------


@pytest.mark.parametrize("imm_write", [False, True])
def test_rnr_naks_then_success_once_a_receive_is_posted(tmp_path, imm_write):
    code = 3  # 0.03 ms
    p = pair(pcap=tmp_path / "r.pcap", min_rnr_timer=code)
    if imm_write:
        write(p, 1, 0, 2500, 0, opcode=IBV_WR_RDMA_WRITE_WITH_IMM, imm_data=5)
    else:
        send(p, 1, 0, 2500)
    p.fab.run(until=100_000)  # 100 us: a few RNR rounds
    post_recv(p, 9, 0, 4096)
    frames = finish(p, LIMIT)
    assert idle(p)
    wc = poll_all(p.cqa)
    assert [(w.wr_id, w.status) for w in wc] == [(1, IBV_WC_SUCCESS)]
    rwc = poll_all(p.cqb)
    assert [(w.wr_id, w.status, w.byte_len) for w in rwc] == [(9, IBV_WC_SUCCESS, 2500)]
    if imm_write:
        assert p.dst.read(2500) == p.src.read(2500)
    else:
        assert p.rbuf.read(2500) == p.src.read(2500)
    rnr = [f for f in naks(frames) if f.syn_type == AETH_RNR_NAK]
    assert len(rnr) >= 3
    assert {f.syn_value for f in rnr} == {code}
    assert p.qa.core.counters.rnr_naks_received == len(rnr)
    assert p.qb.core.counters.rnr_naks_sent == len(rnr)
    # the RNR NAK names the packet that needed the receive WQE: the first SEND packet, or
    # the last packet of the WRITE with immediate
    reqs = from_a(frames)
    need = reqs[-1].psn if imm_write else reqs[0].psn
    assert {f.psn for f in rnr} == {need}
    # the requester waits at least the RNR timer before it resends
    resends = [f.ts for f in reqs if f.psn == need]
    gaps = [b - a for a, b in zip(resends, resends[1:])]
    assert gaps and min(gaps) >= rnr_timer_ns(code)
    last = acks(frames)[-1]
    assert (last.syn_type, last.f["aeth.msn"]) == (AETH_ACK, 1)


def test_rnr_retry_exhausted(tmp_path):
    p = pair(pcap=tmp_path / "r.pcap", rnr_retry=2, min_rnr_timer=1)
    send(p, 1, 0, 10)
    send(p, 2, 0, 10)
    frames = finish(p, LIMIT)
    assert idle(p)
    assert statuses(p.cqa) == [(1, IBV_WC_RNR_RETRY_EXC_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    assert p.qa.qp_state == IBV_QPS_ERR
    assert p.qb.qp_state == IBV_QPS_RTS  # RNR leaves the responder alone
    rnr = [f for f in naks(frames) if f.syn_type == AETH_RNR_NAK]
    assert len(rnr) == 3  # the first try and rnr_retry=2 retries
    assert all(f.syn_value == 1 and f.psn == 0 for f in rnr)
    assert len([f for f in from_a(frames) if f.psn == 0]) == 3


# -- local ACK timeout ----------------------------------------------------------------------


@pytest.mark.parametrize("retry_cnt,timeout", [(0, 5), (3, 5), (7, 8), (2, 12)])
def test_acks_black_holed_retry_exceeded(tmp_path, retry_cnt, timeout):
    """Every ACK is lost: the request goes out exactly retry_cnt + 1 times, one local ACK
    timeout (4.096 us * 2^timeout) apart, then RETRY_EXC_ERR."""
    p = pair(pcap=tmp_path / "t.pcap", retry_cnt=retry_cnt, timeout=timeout,
             config=LinkConfig(), reverse=LinkConfig(loss=1.0))
    post_recv(p, 9, 0, 4096)
    send(p, 1, 0, 100)
    send(p, 2, 0, 100)
    frames = finish(p, 1 << 40)
    assert idle(p)
    assert statuses(p.cqa) == [(1, IBV_WC_RETRY_EXC_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    assert p.qa.qp_state == IBV_QPS_ERR
    reqs = from_a(frames)
    first = [f.ts for f in reqs if f.psn == 0]
    assert len(first) == retry_cnt + 1
    period = ACK_TIMEOUT_UNIT_NS << timeout
    assert [b - a for a, b in zip(first, first[1:])] == [period] * retry_cnt
    assert p.qa.core.counters.timeouts == retry_cnt + 1
    assert p.qa.core.counters.retransmitted == len(reqs) - 2
    # the responder delivered the SEND once, whatever the duplicates
    assert [(w.wr_id, w.status) for w in poll_all(p.cqb)] == [(9, IBV_WC_SUCCESS)]
    assert p.ba.stats.lost == p.ba.stats.frames > 0


def test_requests_black_holed_retry_exceeded():
    """The forward direction loses everything: count transmissions at the link."""
    p = pair(retry_cnt=4, timeout=6, config=LinkConfig(loss=1.0), reverse=LinkConfig())
    sent = []
    p.ab.watch = lambda now, frame: sent.append(now)
    write(p, 1, 0, 100, 0)
    p.fab.run_until_idle(1 << 40)
    assert statuses(p.cqa) == [(1, IBV_WC_RETRY_EXC_ERR)]
    assert len(sent) == 5
    assert [b - a for a, b in zip(sent, sent[1:])] == [ACK_TIMEOUT_UNIT_NS << 6] * 4
    assert p.ab.stats.frames == p.ab.stats.lost == 5


def test_timeout_zero_means_no_timer():
    p = pair(timeout=0, config=LinkConfig(loss=1.0), reverse=LinkConfig())
    write(p, 1, 0, 100, 0)
    p.fab.run_until_idle(1 << 40)
    assert idle(p)
    assert poll_all(p.cqa) == []  # waits forever: no retry, no completion
    assert p.ab.stats.frames == 1
    assert p.qa.core.deadline() is None


def test_psn_sequence_error_nak_sent_once(tmp_path):
    """The first packet of a 4-packet WRITE is lost: the other three arrive ahead of ePSN and
    draw one PSN-sequence NAK carrying ePSN, not one each."""
    p = pair(mtu=256, pcap=tmp_path / "s.pcap", config=LinkConfig(drop_nth=frozenset({1})),
             reverse=LinkConfig())
    write(p, 1, 0, 4 * 256, 0)
    frames = finish(p, LIMIT)
    assert statuses(p.cqa) == [(1, IBV_WC_SUCCESS)]
    assert p.dst.read(1024) == p.src.read(1024)
    seq = [f for f in naks(frames) if (f.syn_type, f.syn_value) == (AETH_NAK,
                                                                   NAK_PSN_SEQUENCE_ERROR)]
    assert [f.psn for f in seq] == [0]
    assert p.qb.core.counters.out_of_sequence == 3
    assert p.qb.qp_state == IBV_QPS_RTS
    # go-back-N from the NAK's PSN: all four packets again
    assert [f.psn for f in from_a(frames)] == [1, 2, 3, 0, 1, 2, 3]


# -- QP state table ---------------------------------------------------------------------


def fresh_qp(p, qp_type=2):
    return QP(p.pda, QPInitAttr(qp_type=qp_type, send_cq=CQ(p.a)))


ILLEGAL = [
    (IBV_QPS_RESET, IBV_QPS_RTS),
    (IBV_QPS_RESET, IBV_QPS_RTR),
    (IBV_QPS_RESET, IBV_QPS_SQD),
    (IBV_QPS_INIT, IBV_QPS_RTS),
    (IBV_QPS_RTR, IBV_QPS_INIT),
    (IBV_QPS_RTS, IBV_QPS_RTR),
    (IBV_QPS_RTS, IBV_QPS_INIT),
    (IBV_QPS_ERR, IBV_QPS_RTS),
    (IBV_QPS_ERR, IBV_QPS_INIT),
]


def drive_to(p, qp, state):
    """Bring a fresh RC QP to ``state`` along the legal path."""
    if state == IBV_QPS_RESET:
        return
    if state == IBV_QPS_ERR:
        qp.modify(QPAttr(qp_state=IBV_QPS_ERR), IBV_QP_STATE)
        return
    qp.to_init(QPAttr(qp_access_flags=FULL))
    if state == IBV_QPS_INIT:
        return
    qp.to_rtr(QPAttr(path_mtu=3, dest_qp_num=p.qb.qp_num, ah_attr=AHAttr(dmac=p.b.mac,
                                                                          dip=p.b.ip)))
    if state == IBV_QPS_RTR:
        return
    qp.to_rts(QPAttr())
    assert qp.qp_state == IBV_QPS_RTS


@pytest.mark.parametrize("src,dst", ILLEGAL, ids=lambda s: s.name[8:])
def test_illegal_transition_raises(src, dst):
    p = pair()
    qp = fresh_qp(p)
    drive_to(p, qp, src)
    assert qp.qp_state == src
    with pytest.raises(QPStateError, match="illegal"):
        qp.modify(QPAttr(qp_state=dst), 0x3FFFFF)  # every attribute: only the edge is wrong
    assert qp.qp_state == src


def test_missing_attributes_are_named():
    p = pair()
    qp = fresh_qp(p)
    with pytest.raises(QPStateError) as e:
        qp.modify(QPAttr(qp_state=IBV_QPS_INIT), IBV_QP_STATE | IBV_QP_PORT)
    assert "IBV_QP_PKEY_INDEX" in str(e.value) and "IBV_QP_ACCESS_FLAGS" in str(e.value)
    assert "IBV_QP_PORT" not in str(e.value)
    assert qp.qp_state == IBV_QPS_RESET
    qp.to_init(QPAttr(qp_access_flags=FULL))
    mask = (IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
    with pytest.raises(QPStateError, match="IBV_QP_PATH_MTU") as e:
        qp.modify(QPAttr(qp_state=IBV_QPS_RTR), mask)
    assert "IBV_QP_AV" not in str(e.value)
    assert qp.qp_state == IBV_QPS_INIT
    qp.modify(QPAttr(qp_state=IBV_QPS_RTR, ah_attr=AHAttr(dmac=p.b.mac, dip=p.b.ip)),
              mask | IBV_QP_PATH_MTU)
    assert qp.qp_state == IBV_QPS_RTR
    with pytest.raises(QPStateError, match="IBV_QP_SQ_PSN") as e:
        qp.modify(QPAttr(qp_state=IBV_QPS_RTS), IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT
                  | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
    assert "IBV_QP_TIMEOUT" not in str(e.value)
    assert qp.qp_state == IBV_QPS_RTR


def test_ud_init_needs_qkey_not_access_flags():
    p = pair()
    qp = fresh_qp(p, IBV_QPT_UD)
    with pytest.raises(QPStateError, match="IBV_QP_QKEY"):
        qp.modify(QPAttr(qp_state=IBV_QPS_INIT),
                  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
    qp.modify(QPAttr(qp_state=IBV_QPS_INIT),
              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
    assert qp.qp_state == IBV_QPS_INIT


def test_legal_paths_and_any_state_to_reset_or_err():
    p = pair()
    for target in (IBV_QPS_RESET, IBV_QPS_ERR):
        for start in (IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_ERR):
            qp = fresh_qp(p)
            drive_to(p, qp, start)
            qp.modify(QPAttr(qp_state=target), IBV_QP_STATE)
            assert qp.qp_state == target
    qp = fresh_qp(p)
    drive_to(p, qp, IBV_QPS_RTS)
    qp.modify(QPAttr(qp_state=IBV_QPS_SQD), IBV_QP_STATE)
    assert qp.qp_state == IBV_QPS_SQD
    qp.modify(QPAttr(qp_state=IBV_QPS_RTS), IBV_QP_STATE)
    assert qp.qp_state == IBV_QPS_RTS
    qp.modify(QPAttr(qp_state=IBV_QPS_RTS, timeout=3), IBV_QP_STATE | 1 << 9)  # RTS -> RTS
    assert qp.core.attr.timeout == 3


@pytest.mark.parametrize("state", [IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR],
                         ids=lambda s: s.name)
def test_post_send_before_rts_raises(state):
    p = pair()
    qp = fresh_qp(p)
    drive_to(p, qp, state)
    with pytest.raises(QPStateError):
        qp.post_send(SendWR(wr_id=1, sg_list=[p.src.sge(0, 8)]))
    assert qp.core.requester.sq == []


def test_post_recv_in_reset_raises_and_in_init_is_kept():
    p = pair()
    qp = fresh_qp(p)
    with pytest.raises(QPStateError):
        qp.post_recv(RecvWR(wr_id=1, sg_list=[p.lbuf.sge(0, 8)]))
    drive_to(p, qp, IBV_QPS_INIT)
    qp.post_recv(RecvWR(wr_id=2, sg_list=[p.lbuf.sge(0, 8)]))
    assert len(qp.core.rq) == 1
    qp.modify(QPAttr(qp_state=IBV_QPS_RESET), IBV_QP_STATE)
    assert len(qp.core.rq) == 0  # RESET drops the queues without completions


def test_modify_to_err_flushes_everything_outstanding():
    p = pair(config=LinkConfig(loss=1.0), reverse=LinkConfig())
    for i in range(3):
        p.qa.post_recv(RecvWR(wr_id=100 + i, sg_list=[p.lbuf.sge(0, 8)]))
    send(p, 1, 0, 8)
    write(p, 2, 0, 8, 0)
    read(p, 3, 0, 8, 0)
    p.fab.run(until=1000)
    sent = p.ab.stats.frames
    assert sent == 3
    p.qa.modify(QPAttr(qp_state=IBV_QPS_ERR), IBV_QP_STATE)
    wcs = poll_all(p.cqa)
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == [
        (1, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND), (2, IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_WRITE),
        (3, IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_READ), (100, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV),
        (101, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV), (102, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV)]
    assert all(w.qp_num == p.qa.qp_num for w in wcs)
    # no timer is left to retransmit anything
    p.fab.run_until_idle(1 << 40)
    assert p.ab.stats.frames == sent and poll_all(p.cqa) == []


def test_qp_in_err_drops_incoming_requests(tmp_path):
    p = pair(pcap=tmp_path / "e.pcap", retry_cnt=1, timeout=4)
    p.qb.modify(QPAttr(qp_state=IBV_QPS_ERR), IBV_QP_STATE)
    write(p, 1, 0, 8, 0)
    frames = finish(p, LIMIT)
    assert from_b(frames) == []  # an ERR QP answers nothing
    assert statuses(p.cqa) == [(1, IBV_WC_RETRY_EXC_ERR)]


# -- ordering of checks and completions ----------------------------------------------------


def test_local_error_behind_outstanding_work_completes_in_order():
    p = pair()
    write(p, 1, 0, 100, 0)  # in flight when the next WR fails locally
    p.qa.post_send(SendWR(wr_id=2, sg_list=[SGE(p.src.addr, 10, p.src.lkey + 1)]))
    p.fab.run_until_idle(p.fab.now + LIMIT)
    wcs = poll_all(p.cqa)
    assert [w.wr_id for w in wcs] == [1, 2]
    assert wcs[0].status in (IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR)
    assert wcs[1].status == IBV_WC_LOC_PROT_ERR


def test_misaligned_atomic_with_bad_rkey_is_remote_access_error(tmp_path):
    p = pair(pcap=tmp_path / "e.pcap", rnr_retry=1)
    fatal_then_flush(p, lambda: atomic(p, 1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 4,
                                       compare_add=1, rkey=p.dst.rkey ^ 1),
                     NAK_REMOTE_ACCESS_ERROR, IBV_WC_REM_ACCESS_ERR)


@pytest.mark.parametrize("how", ["read", "atomic"])
def test_read_atomic_without_responder_resources_is_invalid_request(tmp_path, how):
    p = pair(pcap=tmp_path / "e.pcap", rnr_retry=1)
    # a second QP pair on the same hosts; b's side grants no READ/ATOMIC resources
    qa = QP(p.pda, QPInitAttr(send_cq=p.cqa))
    qb = QP(p.pdb, QPInitAttr(send_cq=p.cqb))
    for me, peer, dest_rd in ((qa, qb, 4), (qb, qa, 0)):
        me.to_init(QPAttr(qp_access_flags=FULL))
        me.to_rtr(QPAttr(path_mtu=3, dest_qp_num=peer.qp_num, max_dest_rd_atomic=dest_rd,
                         min_rnr_timer=1, ah_attr=AHAttr(dmac=peer.ctx.mac, dip=peer.ctx.ip)))
        me.to_rts(QPAttr(timeout=8, retry_cnt=7, rnr_retry=1, max_rd_atomic=4))
    p.qa, p.qb = qa, qb
    fatal_then_flush(p, lambda: _hit(p, p.dst, how), NAK_INVALID_REQUEST,
                     IBV_WC_REM_INV_REQ_ERR)
