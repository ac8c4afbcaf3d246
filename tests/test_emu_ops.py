"""The emulator's operations on a clean link: every verb completes with byte-exact data and the
right completion fields, and the wire (recorded to a pcap, decoded with ``roce.parse``) shows
the segmentation, headers, PSNs, AckReq and MSN rules of docs/protocol.md."""

from __future__ import annotations

import pytest
from emu_helpers import (
    IP_A,
    MTUS,
    acks,
    atomic,
    finish,
    from_a,
    from_b,
    pair,
    poll_all,
    post_recv,
    read,
    run,
    send,
    write,
)

import roce
from roce.emu import CQ, QP, SGE, LinkConfig, QPInitAttr, RecvWR, SendWR, connect
from roce.emu.core.constants import (
    ACK_TIMEOUT_UNIT_NS,
    IBV_QPS_ERR,
    IBV_SEND_SIGNALED,
    IBV_SEND_SOLICITED,
    IBV_WC_COMP_SWAP,
    IBV_WC_FETCH_ADD,
    IBV_WC_RDMA_READ,
    IBV_WC_RDMA_WRITE,
    IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM,
    IBV_WC_REM_ACCESS_ERR,
    IBV_WC_RETRY_EXC_ERR,
    IBV_WC_SEND,
    IBV_WC_SUCCESS,
    IBV_WC_WITH_IMM,
    IBV_WC_WITH_INV,
    IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_SEND_WITH_IMM,
    IBV_WR_SEND_WITH_INV,
    MAX_PKT_PER_ACK,
    MAX_UNACKED_PSNS,
)
from roce.headers import AETH_ACK, AETH_NAK, NAK_REMOTE_ACCESS_ERROR, syndrome_type
from roce.opcodes import Operation, Position
from roce.packet import udp_source_port
from roce.psn import PSN_MASK


def sizes(mtu: int) -> list[int]:
    return [0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu]


MTU_SIZES = [(m, n) for m in MTUS for n in sizes(m)]


def npkts(n: int, mtu: int) -> int:
    return max(1, -(-n // mtu))


def expected_positions(k: int) -> list[Position]:
    if k == 1:
        return [Position.ONLY]
    return [Position.FIRST] + [Position.MIDDLE] * (k - 2) + [Position.LAST]


def one_wc(cq):
    wcs = poll_all(cq)
    assert len(wcs) == 1, wcs
    return wcs[0]


def check_wc(wc, wr_id, opcode, byte_len, qp_num, status=IBV_WC_SUCCESS, imm=0, flags=0):
    assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num, wc.imm_data,
            wc.wc_flags) == (wr_id, status, opcode, byte_len, qp_num, imm, flags), wc


def check_segments(reqs, n, mtu, operation, first_psn, *, imm=False, inv=False):
    """Request packets of one SEND/WRITE message: positions, payload sizes, headers, PSNs."""
    k = npkts(n, mtu)
    assert len(reqs) == k
    for i, (f, pos) in enumerate(zip(reqs, expected_positions(k))):
        assert f.op.operation is operation
        assert f.op.position is pos, (i, f.op.ident)
        last = pos in (Position.LAST, Position.ONLY)
        assert f.psn == (first_psn + i) & PSN_MASK
        assert f.ackreq == (last or (i + 1) % MAX_PKT_PER_ACK == 0)
        assert len(f.pkt.payload) == (min(mtu, n - i * mtu) if last else mtu)
        assert f.f["bth.padcnt"] == -len(f.pkt.payload) & 3
        assert f.pkt.icrc_valid
        heads = f.op.headers
        assert ("reth" in heads) == (operation is Operation.RDMA_WRITE and i == 0)
        assert ("immdt" in heads) == (imm and last)
        assert ("ieth" in heads) == (inv and last)


# -- SEND ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mtu,n", MTU_SIZES)
def test_send_sizes(tmp_path, mtu, n):
    p = pair(mtu=mtu, pcap=tmp_path / "s.pcap", psn_a=100)
    post_recv(p, 77, 64, 4 * mtu)
    send(p, 5, 3, n)
    frames = finish(p)
    check_wc(one_wc(p.cqa), 5, IBV_WC_SEND, n, p.qa.qp_num)
    check_wc(one_wc(p.cqb), 77, IBV_WC_RECV, n, p.qb.qp_num)
    assert p.rbuf.read(n, 64) == p.src.read(n, 3)
    assert p.rbuf.buf[:64] == bytes(64) and p.rbuf.buf[64 + n:] == bytes(p.rbuf.length - 64 - n)
    reqs = from_a(frames)
    assert all(f.f["bth.destqp"] == p.qb.qp_num for f in reqs)
    check_segments(reqs, n, mtu, Operation.SEND, 100)
    [ack] = from_b(frames)
    assert ack.op.operation is Operation.ACK and ack.syn_type == AETH_ACK
    assert ack.psn == (100 + npkts(n, mtu) - 1) & PSN_MASK
    assert ack.f["aeth.msn"] == 1
    assert ack.f["bth.destqp"] == p.qa.qp_num


@pytest.mark.parametrize("n", [0, 5, 1024, 2500])
def test_send_with_imm(tmp_path, n):
    p = pair(mtu=1024, pcap=tmp_path / "s.pcap")
    post_recv(p, 9, 0, 4096)
    send(p, 1, 0, n, opcode=IBV_WR_SEND_WITH_IMM, imm_data=0xDEADBEEF)
    frames = finish(p)
    check_wc(one_wc(p.cqa), 1, IBV_WC_SEND, n, p.qa.qp_num)
    check_wc(one_wc(p.cqb), 9, IBV_WC_RECV, n, p.qb.qp_num, imm=0xDEADBEEF,
             flags=IBV_WC_WITH_IMM)
    assert p.rbuf.read(n) == p.src.read(n)
    reqs = from_a(frames)
    check_segments(reqs, n, 1024, Operation.SEND, 0, imm=True)
    assert reqs[-1].f["immdt"] == 0xDEADBEEF


@pytest.mark.parametrize("n", [16, 3000])
def test_send_with_inv_invalidates_rkey(tmp_path, n):
    p = pair(mtu=1024, pcap=tmp_path / "s.pcap")
    post_recv(p, 9, 0, 4096)
    rkey = p.dst.rkey
    send(p, 1, 0, n, opcode=IBV_WR_SEND_WITH_INV, invalidate_rkey=rkey)
    run(p)
    check_wc(one_wc(p.cqa), 1, IBV_WC_SEND, n, p.qa.qp_num)
    wc = one_wc(p.cqb)
    check_wc(wc, 9, IBV_WC_RECV, n, p.qb.qp_num, flags=IBV_WC_WITH_INV)
    assert wc.invalidated_rkey == rkey
    assert p.rbuf.read(n) == p.src.read(n)

    # the rkey is dead: a WRITE through it is a remote access error
    before = bytes(p.dst.buf)
    write(p, 2, 0, 64, 0)
    frames = finish(p)
    wc = one_wc(p.cqa)
    assert (wc.wr_id, wc.status) == (2, IBV_WC_REM_ACCESS_ERR)
    assert p.qa.qp_state == IBV_QPS_ERR
    assert bytes(p.dst.buf) == before
    reqs = from_a(frames)
    check_segments(reqs[:-1], n, 1024, Operation.SEND, 0, inv=True)
    assert reqs[-2].f["ieth"] == rkey
    answers = from_b(frames)
    assert [(f.syn_type, f.syn_value) for f in answers] == [
        (AETH_ACK, 31), (AETH_NAK, NAK_REMOTE_ACCESS_ERROR)]


def test_send_gathers_and_scatters_sges():
    p = pair(mtu=256)
    parts = [(0, 100), (1000, 300), (5000, 7)]
    total = sum(n for _, n in parts)
    p.qb.post_recv(RecvWR(wr_id=3, sg_list=[p.rbuf.sge(0, 200), p.rbuf.sge(4096, 300)]))
    p.qa.post_send(SendWR(wr_id=4, sg_list=[p.src.sge(o, n) for o, n in parts]))
    finish(p)
    check_wc(one_wc(p.cqa), 4, IBV_WC_SEND, total, p.qa.qp_num)
    check_wc(one_wc(p.cqb), 3, IBV_WC_RECV, total, p.qb.qp_num)
    data = b"".join(p.src.read(n, o) for o, n in parts)
    assert p.rbuf.read(200) + p.rbuf.read(total - 200, 4096) == data


# -- RDMA WRITE --------------------------------------------------------------------------


@pytest.mark.parametrize("mtu,n", MTU_SIZES)
def test_rdma_write_sizes(tmp_path, mtu, n):
    p = pair(mtu=mtu, pcap=tmp_path / "w.pcap", psn_a=7)
    before = bytes(p.dst.buf)
    write(p, 11, 5, n, 96)
    frames = finish(p)
    check_wc(one_wc(p.cqa), 11, IBV_WC_RDMA_WRITE, n, p.qa.qp_num)
    assert poll_all(p.cqb) == []
    after = bytes(p.dst.buf)
    assert after[96:96 + n] == p.src.read(n, 5)
    assert after[:96] == before[:96] and after[96 + n:] == before[96 + n:]
    reqs = from_a(frames)
    check_segments(reqs, n, mtu, Operation.RDMA_WRITE, 7)
    reth = reqs[0].pkt["reth"]
    assert (reth["va"], reth["r_key"], reth["dmalen"]) == (p.dst.addr + 96, p.dst.rkey, n)
    [ack] = from_b(frames)
    assert ack.psn == 7 + npkts(n, mtu) - 1 and ack.f["aeth.msn"] == 1


@pytest.mark.parametrize("n", [0, 8, 1024, 4000])
def test_rdma_write_with_imm(tmp_path, n):
    p = pair(mtu=1024, pcap=tmp_path / "w.pcap")
    post_recv(p, 42, 0, 16)  # the receive buffer is not touched by a WRITE with immediate
    write(p, 12, 0, n, 128, opcode=IBV_WR_RDMA_WRITE_WITH_IMM, imm_data=0x01020304)
    frames = finish(p)
    check_wc(one_wc(p.cqa), 12, IBV_WC_RDMA_WRITE, n, p.qa.qp_num)
    check_wc(one_wc(p.cqb), 42, IBV_WC_RECV_RDMA_WITH_IMM, n, p.qb.qp_num, imm=0x01020304,
             flags=IBV_WC_WITH_IMM)
    assert p.dst.read(n, 128) == p.src.read(n)
    assert p.rbuf.read(16) == bytes(16)
    reqs = from_a(frames)
    check_segments(reqs, n, 1024, Operation.RDMA_WRITE, 0, imm=True)
    assert reqs[-1].f["immdt"] == 0x01020304


# -- RDMA READ ------------------------------------------------------------------------------


@pytest.mark.parametrize("mtu,n", MTU_SIZES)
def test_rdma_read_sizes(tmp_path, mtu, n):
    p = pair(mtu=mtu, pcap=tmp_path / "r.pcap", psn_a=1000)
    read(p, 13, 8, n, 40)
    send(p, 14, 0, 1)  # the next request's PSN follows the READ's PSN range
    post_recv(p, 1, 0, 16)
    frames = finish(p)
    wcs = poll_all(p.cqa)
    assert len(wcs) == 2
    check_wc(wcs[0], 13, IBV_WC_RDMA_READ, n, p.qa.qp_num)
    check_wc(wcs[1], 14, IBV_WC_SEND, 1, p.qa.qp_num)
    assert p.lbuf.read(n, 8) == p.dst.read(n, 40)
    assert p.lbuf.buf[:8] == bytes(8) and p.lbuf.buf[8 + n:] == bytes(p.lbuf.length - 8 - n)
    k = npkts(n, mtu)
    reqs = from_a(frames)
    assert [f.op.operation for f in reqs] == [Operation.RDMA_READ, Operation.SEND]
    rr = reqs[0]
    assert rr.psn == 1000 and rr.ackreq and rr.pkt.payload == b""
    assert (rr.pkt["reth"]["va"], rr.pkt["reth"]["r_key"], rr.pkt["reth"]["dmalen"]) == (
        p.dst.addr + 40, p.dst.rkey, n)
    assert reqs[1].psn == 1000 + k  # a READ consumes max(1, ceil(len/MTU)) PSNs
    resp = [f for f in from_b(frames) if f.op.operation is Operation.READ_RESPONSE]
    assert len(resp) == k
    for i, (f, pos) in enumerate(zip(resp, expected_positions(k))):
        assert f.op.position is pos
        assert f.psn == 1000 + i
        assert ("aeth" in f.op.headers) == (pos is not Position.MIDDLE)
        if pos is not Position.MIDDLE:
            assert syndrome_type(f.f["aeth.syndrome"]) == AETH_ACK and f.f["aeth.msn"] == 1
        last = pos in (Position.LAST, Position.ONLY)
        assert len(f.pkt.payload) == (n - i * mtu if last else mtu)
        assert f.pkt.icrc_valid
    assert b"".join(f.pkt.payload for f in resp) == p.dst.read(n, 40)


def test_rdma_read_scatters_into_sges():
    p = pair(mtu=512)
    sg = [p.lbuf.sge(0, 700), p.lbuf.sge(2048, 1000), p.lbuf.sge(8192, 300)]
    p.qa.post_send(SendWR(wr_id=1, opcode=4, sg_list=sg, remote_addr=p.dst.addr + 3,
                          rkey=p.dst.rkey))
    finish(p)
    check_wc(one_wc(p.cqa), 1, IBV_WC_RDMA_READ, 2000, p.qa.qp_num)
    got = p.lbuf.read(700) + p.lbuf.read(1000, 2048) + p.lbuf.read(300, 8192)
    assert got == p.dst.read(2000, 3)


# -- atomics -----------------------------------------------------------------------------


def u64(mr, off: int) -> int:
    return int.from_bytes(mr.read(8, off), "little")


@pytest.mark.parametrize("match", [True, False])
def test_compare_and_swap(tmp_path, match):
    p = pair(pcap=tmp_path / "a.pcap")
    orig = 0x1122334455667788
    p.dst.write(orig.to_bytes(8, "little"), offset=64)
    compare = orig if match else orig ^ 1
    swap = 0xA5A5A5A5_5A5A5A5A
    before = bytes(p.dst.buf)
    atomic(p, 21, IBV_WR_ATOMIC_CMP_AND_SWP, 16, 64, compare_add=compare, swap=swap)
    frames = finish(p)
    check_wc(one_wc(p.cqa), 21, IBV_WC_COMP_SWAP, 8, p.qa.qp_num)
    assert p.lbuf.read(8, 16) == orig.to_bytes(8, "little")
    assert u64(p.dst, 64) == (swap if match else orig)
    after = bytes(p.dst.buf)
    assert after[:64] == before[:64] and after[72:] == before[72:]
    [req] = from_a(frames)
    assert req.op.ident == "RC_COMPARE_SWAP" and req.ackreq
    a = req.pkt["atomiceth"]
    assert (a["va"], a["r_key"], a["swapdt"], a["cmpdt"]) == (p.dst.addr + 64, p.dst.rkey,
                                                               swap, compare)
    [ack] = from_b(frames)
    assert ack.op.operation is Operation.ATOMIC_ACK and ack.psn == req.psn
    assert ack.pkt["atomicacketh"]["origremdt"] == orig and ack.f["aeth.msn"] == 1


def test_fetch_and_add(tmp_path):
    p = pair(pcap=tmp_path / "a.pcap")
    orig = 0xFFFFFFFF_FFFFFFF0
    p.dst.write(orig.to_bytes(8, "little"), offset=8)
    atomic(p, 22, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 8, compare_add=0x20)
    atomic(p, 23, IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 8, compare_add=1)
    frames = finish(p)
    wcs = poll_all(p.cqa)
    check_wc(wcs[0], 22, IBV_WC_FETCH_ADD, 8, p.qa.qp_num)
    check_wc(wcs[1], 23, IBV_WC_FETCH_ADD, 8, p.qa.qp_num)
    assert p.lbuf.read(8) == orig.to_bytes(8, "little")  # the original, little-endian
    assert u64(p.lbuf, 8) == 0x10  # wrapped modulo 2^64
    assert u64(p.dst, 8) == 0x11
    reqs = from_a(frames)
    assert [f.op.ident for f in reqs] == ["RC_FETCH_ADD"] * 2
    assert reqs[0].pkt["atomiceth"]["swapdt"] == 0x20
    assert [f.psn for f in reqs] == [0, 1]


# -- the wire: AckReq, MSN, PSN wrap -------------------------------------------------------


def test_ackreq_every_64_packets(tmp_path):
    mtu = 256
    k = 200
    p = pair(mtu=mtu, pcap=tmp_path / "w.pcap", size=k * mtu)
    write(p, 1, 0, k * mtu, 0)
    frames = finish(p)
    check_wc(one_wc(p.cqa), 1, IBV_WC_RDMA_WRITE, k * mtu, p.qa.qp_num)
    assert p.dst.read(k * mtu) == p.src.read(k * mtu)
    reqs = from_a(frames)
    check_segments(reqs, k * mtu, mtu, Operation.RDMA_WRITE, 0)
    assert [i for i, f in enumerate(reqs) if f.ackreq] == [63, 127, 191, 199]
    got = [(f.psn, f.f["aeth.msn"]) for f in acks(from_b(frames))]
    assert got == [(63, 0), (127, 0), (191, 0), (199, 1)]


def test_msn_increments_per_message(tmp_path):
    p = pair(mtu=256, pcap=tmp_path / "m.pcap")
    post_recv(p, 1, 0, 4096)
    post_recv(p, 2, 4096, 4096)
    send(p, 10, 0, 600)                       # PSN 0-2, MSN 1
    write(p, 11, 0, 300, 0)                   # PSN 3-4, MSN 2
    read(p, 12, 0, 700, 1024)                 # PSN 5-7, MSN 3
    atomic(p, 13, IBV_WR_ATOMIC_FETCH_AND_ADD, 1024, 4096, compare_add=1)  # PSN 8, MSN 4
    send(p, 14, 0, 10, opcode=IBV_WR_SEND_WITH_IMM, imm_data=1)           # PSN 9, MSN 5
    frames = finish(p)
    assert [w.status for w in poll_all(p.cqa)] == [IBV_WC_SUCCESS] * 5
    answers = [f for f in from_b(frames) if "aeth" in f.op.headers]
    got = [(f.op.operation, f.psn, f.f["aeth.msn"]) for f in answers]
    assert got == [(Operation.ACK, 2, 1), (Operation.ACK, 4, 2),
                   (Operation.READ_RESPONSE, 5, 3), (Operation.READ_RESPONSE, 7, 3),
                   (Operation.ATOMIC_ACK, 8, 4), (Operation.ACK, 9, 5)]
    assert [f.psn for f in from_a(frames)] == [0, 1, 2, 3, 4, 5, 8, 9]


def test_psn_wraps_in_a_large_write(tmp_path):
    mtu, k = 512, 40
    p = pair(mtu=mtu, pcap=tmp_path / "w.pcap", psn_a=0xFFFFF0, size=k * mtu)
    write(p, 1, 0, k * mtu, 0)
    write(p, 2, 0, 100, 0)
    frames = finish(p)
    wcs = poll_all(p.cqa)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    assert p.dst.read(k * mtu) == p.src.read(k * mtu)
    reqs = from_a(frames)
    psns = [f.psn for f in reqs]
    assert psns == [(0xFFFFF0 + i) & PSN_MASK for i in range(k + 1)]
    assert psns[15:18] == [0xFFFFFF, 0, 1]
    check_segments(reqs[:k], k * mtu, mtu, Operation.RDMA_WRITE, 0xFFFFF0)
    assert [f.psn for f in acks(from_b(frames))] == [(0xFFFFF0 + k - 1) & PSN_MASK,
                                                     (0xFFFFF0 + k) & PSN_MASK]


def test_psn_wraps_in_a_large_read(tmp_path):
    mtu, k = 256, 40
    p = pair(mtu=mtu, pcap=tmp_path / "r.pcap", psn_a=0xFFFFF0, size=k * mtu + 4096)
    read(p, 1, 0, k * mtu, 0)
    write(p, 2, 0, 10, k * mtu)
    frames = finish(p)
    wcs = poll_all(p.cqa)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    assert p.lbuf.read(k * mtu) == p.dst.read(k * mtu)
    reqs = from_a(frames)
    assert [f.psn for f in reqs] == [0xFFFFF0, (0xFFFFF0 + k) & PSN_MASK]
    resp = [f for f in from_b(frames) if f.op.operation is Operation.READ_RESPONSE]
    assert [f.psn for f in resp] == [(0xFFFFF0 + i) & PSN_MASK for i in range(k)]
    assert [f.op.position for f in resp] == expected_positions(k)


def test_psn_wrap_at_responder_side_and_both_directions(tmp_path):
    """b starts at 0xFFFFFE and sends toward a while a's stream also wraps."""
    p = pair(mtu=256, pcap=tmp_path / "b.pcap", psn_a=0xFFFFFD, psn_b=0xFFFFFE)
    for i in range(4):
        p.qa.post_recv(RecvWR(wr_id=200 + i, sg_list=[p.lbuf.sge(i * 1024, 1024)]))
        post_recv(p, 100 + i, i * 1024, 1024)
    for i in range(4):
        send(p, i, i * 1024, 1000)
        p.qb.post_send(SendWR(wr_id=50 + i, sg_list=[p.dst.sge(i * 1024, 1000)]))
    frames = finish(p)
    sa = [w for w in poll_all(p.cqa)]
    sb = [w for w in poll_all(p.cqb)]
    assert sorted((w.wr_id, w.status) for w in sa) == sorted(
        [(i, IBV_WC_SUCCESS) for i in range(4)] + [(200 + i, IBV_WC_SUCCESS) for i in range(4)])
    assert sorted((w.wr_id, w.status) for w in sb) == sorted(
        [(50 + i, IBV_WC_SUCCESS) for i in range(4)] + [(100 + i, IBV_WC_SUCCESS)
                                                        for i in range(4)])
    for i in range(4):
        assert p.rbuf.read(1000, i * 1024) == p.src.read(1000, i * 1024)
        assert p.lbuf.read(1000, i * 1024) == p.dst.read(1000, i * 1024)
    b_reqs = [f for f in from_b(frames) if f.is_request]
    assert [f.psn for f in b_reqs][:4] == [0xFFFFFE, 0xFFFFFF, 0, 1]


def test_nak_wire_helper_sanity(tmp_path):
    """A remote access error seen on the wire as the helpers decode it (used by other files)."""
    p = pair(pcap=tmp_path / "n.pcap")
    write(p, 1, 0, 8, 0, rkey=p.dst.rkey ^ 0xFF)
    frames = finish(p)
    [nak] = from_b(frames)
    assert (nak.syn_type, nak.syn_value) == (AETH_NAK, NAK_REMOTE_ACCESS_ERROR)
    assert one_wc(p.cqa).status == IBV_WC_REM_ACCESS_ERR


def test_sge_dataclass_matches_mr_sge():
    p = pair()
    assert p.src.sge(4, 10) == SGE(p.src.addr + 4, 10, p.src.lkey)


# -- flow limits ---------------------------------------------------------------------------


def test_at_most_128_unacknowledged_psns():
    """rxe's window: with every ACK lost, a 300-packet WRITE stops after 128 PSNs until the
    local ACK timeout."""
    p = pair(mtu=256, size=300 * 256, timeout=10, retry_cnt=1, config=LinkConfig(),
             reverse=LinkConfig(loss=1.0))
    sent = []
    p.ab.watch = lambda now, frame: sent.append((now, roce.parse(frame)["bth"]["psn"]))
    write(p, 1, 0, 300 * 256, 0)
    run(p)
    before_timeout = [psn for t, psn in sent if t < ACK_TIMEOUT_UNIT_NS << 10]
    assert before_timeout == list(range(MAX_UNACKED_PSNS))
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(1, IBV_WC_RETRY_EXC_ERR)]


def test_max_rd_atomic_bounds_outstanding_reads(tmp_path):
    """max_rd_atomic=2: a third READ waits for an answer (responses take 50 us back)."""
    p = pair(mtu=1024, max_rd_atomic=2, pcap=tmp_path / "r.pcap", config=LinkConfig(),
             reverse=LinkConfig(delay_ns=50_000))
    for i in range(5):
        read(p, i, i * 1024, 1024, i * 1024)
    atomic(p, 5, IBV_WR_ATOMIC_FETCH_AND_ADD, 8192, 8192, compare_add=1)
    frames = finish(p)
    assert [(w.wr_id, w.status) for w in poll_all(p.cqa)] == [(i, IBV_WC_SUCCESS)
                                                              for i in range(6)]
    assert p.lbuf.read(5 * 1024) == p.dst.read(5 * 1024)
    outstanding = peak = 0
    for f in frames:
        if f.src == IP_A:
            outstanding += 1
        else:
            outstanding -= 1
        peak = max(peak, outstanding)
    assert peak == 2


# -- encapsulation and BTH flags -------------------------------------------------------------


def test_encapsulation(tmp_path):
    """RoCEv2 per docs/protocol.md: UDP dport 4791, sport 0xC000 + hash(QPN) (rxe), UDP checksum 0,
    IPv4 DF, BTH TVer 0, P_Key 0xFFFF, DestQP the peer's QP, valid ICRC."""
    p = pair(mtu=256, pcap=tmp_path / "e.pcap")
    post_recv(p, 1, 0, 4096)
    send(p, 1, 0, 1001)
    read(p, 2, 0, 700, 0)
    frames = finish(p)
    for f in frames:
        me, peer = (p.qa, p.qb) if f.src == IP_A else (p.qb, p.qa)
        assert f.f["eth.type"] == 0x0800 and f.f["ip.proto"] == 17
        assert f.f["ip.flags.df"] == 1
        assert f.f["udp.dstport"] == 4791 and f.f["udp.checksum"] == 0
        assert f.f["udp.srcport"] == udp_source_port(me.qp_num)
        assert f.f["bth.tver"] == 0 and f.f["bth.p_key"] == 0xFFFF
        assert f.f["bth.destqp"] == peer.qp_num
        assert not f.f["bth.fecn"] and not f.f["bth.becn"]
        assert f.pkt.icrc_valid
        assert f.pkt.pad == bytes(f.f["bth.padcnt"])


def test_solicited_event_bit_on_last_packet(tmp_path):
    p = pair(mtu=256, pcap=tmp_path / "s.pcap")
    post_recv(p, 1, 0, 4096)
    post_recv(p, 2, 0, 4096)
    send(p, 1, 0, 600, send_flags=IBV_SEND_SOLICITED)
    send(p, 2, 0, 600)
    frames = finish(p)
    reqs = from_a(frames)
    assert [f.f["bth.se"] for f in reqs] == [False, False, True, False, False, False]


def test_unsignaled_work_completes_silently_unless_it_fails():
    p = pair()
    cq = CQ(p.a)
    qa = QP(p.pda, QPInitAttr(send_cq=cq, sq_sig_all=0))
    qb = QP(p.pdb, QPInitAttr(send_cq=CQ(p.b)))
    connect(qa, qb, path_mtu=1024, timeout=8)
    for i in range(3):
        qa.post_send(SendWR(wr_id=i, opcode=0, sg_list=[p.src.sge(0, 100)],
                            remote_addr=p.dst.addr, rkey=p.dst.rkey,
                            send_flags=IBV_SEND_SIGNALED if i == 1 else 0))
    qa.post_send(SendWR(wr_id=3, opcode=0, sg_list=[p.src.sge(0, 100)],
                        remote_addr=p.dst.addr, rkey=p.dst.rkey ^ 1))
    run(p)
    assert [(w.wr_id, w.status) for w in poll_all(cq)] == [(1, IBV_WC_SUCCESS),
                                                           (3, IBV_WC_REM_ACCESS_ERR)]
