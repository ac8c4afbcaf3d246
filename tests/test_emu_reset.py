"""A QP taken back to RESET forgets its transport state: it can be connected again with new
PSNs, and the responder's MSN starts over."""

import roce
from roce.emu import CQ, MR, PD, QP, Fabric, QPAttr, QPInitAttr, SendWR, connect
from roce.emu.core.constants import (
    IBV_ACCESS_LOCAL_WRITE,
    IBV_ACCESS_REMOTE_WRITE,
    IBV_QPS_RESET,
    IBV_QPT_RC,
    IBV_WC_SUCCESS,
    IBV_WR_RDMA_WRITE,
)
from roce.headers import syndrome_type


class Recorder:
    def __init__(self):
        self.frames = []

    def write(self, frame, ts_ns=0):
        self.frames.append(frame)


def test_reset_then_reconnect_starts_fresh():
    fab = Fabric(seed=1)
    a, b = fab.add_host("a", "10.0.0.1"), fab.add_host("b", "10.0.0.2")
    fab.connect(a, b)
    rec = Recorder()
    fab.record(rec)
    acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
    pa, pb = PD(a), PD(b)
    src, dst = MR(pa, 8192, acc), MR(pb, 8192, acc)
    src.write(b"first" + bytes(8187))
    cqa, cqb = CQ(a), CQ(b)
    qa = QP(pa, QPInitAttr(qp_type=IBV_QPT_RC, send_cq=cqa, recv_cq=cqa))
    qb = QP(pb, QPInitAttr(qp_type=IBV_QPT_RC, send_cq=cqb, recv_cq=cqb))

    def write_once(wr_id):
        qa.post_send(SendWR(wr_id=wr_id, opcode=IBV_WR_RDMA_WRITE, sg_list=[src.sge(0, 5)],
                            remote_addr=dst.addr, rkey=dst.rkey))
        fab.run_until_idle()
        return [(w.wr_id, w.status) for w in cqa.poll(4)]

    connect(qa, qb, psn_a=1000)
    assert write_once(1) == [(1, IBV_WC_SUCCESS)]
    assert write_once(2) == [(2, IBV_WC_SUCCESS)]
    for q in (qa, qb):
        q.modify(QPAttr(qp_state=IBV_QPS_RESET), 1)
        assert q.qp_state == IBV_QPS_RESET
    src.write(b"again")
    connect(qa, qb, psn_a=50)
    assert write_once(3) == [(3, IBV_WC_SUCCESS)]
    assert dst.read(5) == b"again"
    acks = [roce.parse(f).fields() for f in rec.frames if roce.parse(f).opcode.code == 0x11]
    assert all(syndrome_type(f["aeth.syndrome"]) == 0 for f in acks)
    # MSN 1, 2 before the reset; 1 again after it, for the ACK of PSN 50
    assert [(f["bth.psn"], f["aeth.msn"]) for f in acks] == [(1000, 1), (1001, 2), (50, 1)]
