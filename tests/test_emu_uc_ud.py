"""UC and UD queue pairs: UC drops a message that lost a packet and goes on with the next;
UD checks the Q_Key, reports the source QP and leaves 40 bytes of GRH space."""

import pytest

import roce
from roce.emu import AH, CQ, MR, PD, QP, AHAttr, Fabric, QPAttr, QPInitAttr, RecvWR, SendWR
from roce.emu.core.constants import (
    IBV_ACCESS_LOCAL_WRITE,
    IBV_ACCESS_REMOTE_WRITE,
    IBV_MTU_1024,
    IBV_QPT_UC,
    IBV_QPT_UD,
    IBV_WC_GRH,
    IBV_WC_RECV,
    IBV_WC_RECV_RDMA_WITH_IMM,
    IBV_WC_SUCCESS,
    IBV_WR_RDMA_READ,
    IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,
)
from roce.emu.core.verbs import connect
from roce.pcapio import open_capture


class Recorder:
    def __init__(self):
        self.frames = []

    def write(self, frame, ts_ns=0):
        self.frames.append(frame)


def hosts(**link):
    fab = Fabric(seed=3)
    a, b = fab.add_host("a", "10.0.0.1"), fab.add_host("b", "10.0.0.2")
    fab.connect(a, b, **link)
    rec = Recorder()
    fab.record(rec)
    acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
    pa, pb = PD(a), PD(b)
    src, dst = MR(pa, 1 << 16, acc), MR(pb, 1 << 16, acc)
    src.write(bytes((i * 7 + 3) & 0xFF for i in range(1 << 16)))
    return fab, rec, pa, pb, src, dst, CQ(a), CQ(b)


def uc_pair(**link):
    fab, rec, pa, pb, src, dst, cqa, cqb = hosts(**link)
    qa = QP(pa, QPInitAttr(qp_type=IBV_QPT_UC, send_cq=cqa, recv_cq=cqa))
    qb = QP(pb, QPInitAttr(qp_type=IBV_QPT_UC, send_cq=cqb, recv_cq=cqb))
    connect(qa, qb, path_mtu=IBV_MTU_1024, access=IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
    return fab, rec, qa, qb, src, dst, cqa, cqb


def test_uc_send_and_write_complete_without_acks():
    fab, rec, qa, qb, src, dst, cqa, cqb = uc_pair()
    qb.post_recv(RecvWR(wr_id=7, sg_list=[dst.sge(0, 8192)]))
    qa.post_send(SendWR(wr_id=1, opcode=IBV_WR_SEND_WITH_IMM, imm_data=0xAB,
                        sg_list=[src.sge(0, 2500)]))
    qa.post_send(SendWR(wr_id=2, opcode=IBV_WR_RDMA_WRITE, sg_list=[src.sge(4096, 3000)],
                        remote_addr=dst.addr + 10000, rkey=dst.rkey))
    fab.run_until_idle()
    assert [(w.wr_id, w.status) for w in cqa.poll(10)] == [(1, IBV_WC_SUCCESS),
                                                         (2, IBV_WC_SUCCESS)]
    wc = cqb.poll(10)
    assert [(w.wr_id, w.opcode, w.byte_len, w.imm_data) for w in wc] == [
        (7, IBV_WC_RECV, 2500, 0xAB)]
    assert dst.buf[:2500] == src.buf[:2500]
    assert dst.buf[10000:13000] == src.buf[4096:7096]
    ops = [roce.parse(f).opcode for f in rec.frames]
    assert all(op.transport.value == "UC" for op in ops)
    assert not any(op.operation.value == "ack" for op in ops)  # UC has no ACKs
    assert [op.ident for op in ops] == [
        "UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST_WITH_IMMEDIATE",
        "UC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_MIDDLE", "UC_RDMA_WRITE_LAST"]


def test_uc_lost_packet_drops_that_message_only():
    # frame 2 is the middle packet of the first 3-packet SEND
    fab, rec, qa, qb, src, dst, cqa, cqb = uc_pair(drop_nth=frozenset({2}))
    for i in range(3):
        qb.post_recv(RecvWR(wr_id=100 + i, sg_list=[dst.sge(i * 8192, 8192)]))
    for i in range(3):
        qa.post_send(SendWR(wr_id=i, opcode=IBV_WR_SEND, sg_list=[src.sge(i * 4096, 3000)]))
    fab.run_until_idle()
    assert [w.status for w in cqa.poll(10)] == [IBV_WC_SUCCESS] * 3  # the sender never knows
    wc = cqb.poll(10)
    # message 0 is lost; its receive WQE (100) is reused by message 1, 101 by message 2
    assert [(w.wr_id, w.byte_len) for w in wc] == [(100, 3000), (101, 3000)]
    assert dst.buf[:3000] == src.buf[4096:7096]
    assert dst.buf[8192:8192 + 3000] == src.buf[8192:11192]
    assert qb.core.counters.out_of_sequence >= 1


def test_uc_write_with_imm_and_unsupported_read():
    fab, rec, qa, qb, src, dst, cqa, cqb = uc_pair()
    qb.post_recv(RecvWR(wr_id=9, sg_list=[dst.sge(60000, 16)]))
    qa.post_send(SendWR(wr_id=3, opcode=IBV_WR_RDMA_WRITE_WITH_IMM, imm_data=0x1234,
                        sg_list=[src.sge(0, 100)], remote_addr=dst.addr, rkey=dst.rkey))
    fab.run_until_idle()
    wc = cqb.poll(10)
    assert [(w.wr_id, w.opcode, w.byte_len, w.imm_data) for w in wc] == [
        (9, IBV_WC_RECV_RDMA_WITH_IMM, 100, 0x1234)]
    assert dst.buf[:100] == src.buf[:100]
    with pytest.raises(ValueError, match="does not support"):
        qa.post_send(SendWR(wr_id=4, opcode=IBV_WR_RDMA_READ, sg_list=[src.sge(0, 8)],
                            remote_addr=dst.addr, rkey=dst.rkey))


def ud_pair():
    fab, rec, pa, pb, src, dst, cqa, cqb = hosts()
    ua = QP(pa, QPInitAttr(qp_type=IBV_QPT_UD, send_cq=cqa, recv_cq=cqa))
    ub = QP(pb, QPInitAttr(qp_type=IBV_QPT_UD, send_cq=cqb, recv_cq=cqb))
    for q in (ua, ub):
        q.to_init(QPAttr(qkey=0x11110000))
        q.to_rtr(QPAttr())
        q.to_rts(QPAttr(sq_psn=5))
    return fab, rec, pa, ua, ub, src, dst, cqa, cqb


def test_ud_send_grh_space_source_qp_and_qkey():
    fab, rec, pa, ua, ub, src, dst, cqa, cqb = ud_pair()
    ub.post_recv(RecvWR(wr_id=1, sg_list=[dst.sge(0, 40 + 200)]))
    ub.post_recv(RecvWR(wr_id=2, sg_list=[dst.sge(1000, 40 + 200)]))
    ah = AH(pa, AHAttr(dip="10.0.0.2"))
    ua.post_send(SendWR(wr_id=10, opcode=IBV_WR_SEND_WITH_IMM, imm_data=77,
                        sg_list=[src.sge(0, 200)], ah=ah, remote_qpn=ub.qp_num,
                        remote_qkey=0x11110000))
    ua.post_send(SendWR(wr_id=11, opcode=IBV_WR_SEND, sg_list=[src.sge(0, 50)], ah=ah,
                        remote_qpn=ub.qp_num, remote_qkey=0xBAD))
    fab.run_until_idle()
    assert [w.status for w in cqa.poll(10)] == [IBV_WC_SUCCESS] * 2
    wc = cqb.poll(10)
    assert len(wc) == 1
    w = wc[0]
    assert (w.wr_id, w.byte_len, w.imm_data, w.src_qp) == (1, 240, 77, ua.qp_num)
    assert w.wc_flags & IBV_WC_GRH
    assert dst.buf[40:240] == src.buf[:200]
    assert dst.buf[20:40] == rec.frames[0][14:34]  # the IPv4 header in the GRH area
    assert ub.core.responder.qkey_drops == 1  # wrong Q_Key: dropped and counted
    first = roce.parse(rec.frames[0])
    assert first.opcode.ident == "UD_SEND_ONLY_WITH_IMMEDIATE"
    f = first.fields()
    assert (f["deth.q_key"], f["deth.srcqp"], f["bth.destqp"], f["bth.psn"]) == (
        0x11110000, ua.qp_num, ub.qp_num, 5)
    assert first.icrc_valid


def test_ud_send_larger_than_mtu_is_a_local_length_error():
    fab, rec, pa, ua, ub, src, dst, cqa, cqb = ud_pair()
    ah = AH(pa, AHAttr(dip="10.0.0.2"))
    ua.post_send(SendWR(wr_id=1, opcode=IBV_WR_SEND, sg_list=[src.sge(0, 5000)], ah=ah,
                        remote_qpn=ub.qp_num, remote_qkey=0x11110000))
    fab.run_until_idle()
    assert [w.status.name for w in cqa.poll(5)] == ["IBV_WC_LOC_LEN_ERR"]
    assert rec.frames == []


def test_uc_frames_recorded_to_pcap_have_valid_icrc(tmp_path):
    from roce.pcapio import PcapWriter

    fab, rec, qa, qb, src, dst, cqa, cqb = uc_pair()
    path = tmp_path / "uc.pcap"
    with PcapWriter(path) as w:
        fab.record(w)
        qa.post_send(SendWR(wr_id=2, opcode=IBV_WR_RDMA_WRITE, sg_list=[src.sge(0, 5000)],
                            remote_addr=dst.addr, rkey=dst.rkey))
        fab.run_until_idle()
    frames = [f.data for f in open_capture(path)]
    assert len(frames) == 5 and all(roce.parse(f).icrc_valid for f in frames)
    assert [roce.parse(f).fields()["bth.psn"] for f in frames] == [0, 1, 2, 3, 4]
