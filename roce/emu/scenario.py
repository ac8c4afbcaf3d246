"""Scenarios between two emulated hosts on the simulated fabric, and their summary.

``run_scenario(Scenario(...))`` builds hosts A and B, ``qps`` connected RC queue pairs, posts
``count`` messages per QP (keeping ``depth`` outstanding), runs the fabric until everything
completed, verifies the data and returns a ``Summary``.  This is what ``roce emulate`` prints.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .constants import ALL_ACCESS, QPType, WCStatus, WROpcode
from .fabric import Fabric, LinkConfig
from .qp import QPCap
from .verbs import CQ, MR, PD, QP, QPInitAttr, connect
from .work import SGE, RecvWR, SendWR

OPS = ("send", "write", "read", "atomic", "mixed")
SLOTS = 4  # message buffers per QP: message i uses slot i % SLOTS


@dataclass
class Workload:
    """What to run, wherever it runs (the simulated fabric or a real link)."""

    op: str = "write"
    size: int = 1 << 20
    count: int = 10
    mtu: int = 4096
    qps: int = 1
    depth: int = 16
    seed: int = 0
    psn: int = 0
    timeout: int = 12
    retry_cnt: int = 7
    rnr_retry: int = 7


@dataclass
class Scenario(Workload):
    """A workload on the simulated fabric, with the link's rate, delay and faults."""

    rate_gbps: float = 100.0
    delay_ns: int = 1000
    loss: float = 0.0
    burst: float = 0.0
    reorder: float = 0.0
    dup: float = 0.0
    corrupt: float = 0.0
    time_limit_ns: int = 600_000_000_000
    recovery: str = "gbn"  # gbn | sr (roce.emu.recovery)


@dataclass
class Summary:
    scenario: dict[str, Any]
    posted: int = 0
    completed: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    virtual_ns: int = 0
    goodput_gbps: float = 0.0
    packets: int = 0
    retransmitted: int = 0
    naks: dict[str, int] = field(default_factory=dict)
    rnr_naks: int = 0
    timeouts: int = 0
    icrc_drops: int = 0
    # loss recovery: retransmitted = selective + go-back; spurious = resent PSNs the
    # responder already had (docs/protocol.md, "Selective repeat (IRN) encoding")
    selective_retransmitted: int = 0
    spurious_retransmissions: int = 0
    ooo_accepted: int = 0
    selective_naks: int = 0
    link: dict[str, dict[str, int]] = field(default_factory=dict)
    data_verified: bool = False
    cpu_s: float = 0.0
    packets_per_cpu_s: float = 0.0
    finished: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        ok = self.completed.get("IBV_WC_SUCCESS", 0)
        errs = ", ".join(f"{k}={v}" for k, v in sorted(self.completed.items())
                         if k != "IBV_WC_SUCCESS") or "none"
        naks = ", ".join(f"{k}={v}" for k, v in sorted(self.naks.items())) or "none"
        s = self.scenario
        lines = [
            f"scenario      {s['op']} size={s['size']} count={s['count']} qps={s['qps']} "
            f"mtu={s['mtu']} seed={s['seed']}",
            f"link          {s['rate_gbps']:g} Gb/s, {s['delay_ns']} ns, loss={s['loss']:g} "
            f"burst={s['burst']:g} reorder={s['reorder']:g} dup={s['dup']:g} "
            f"corrupt={s['corrupt']:g}",
            f"messages      posted {self.posted}, completed OK {ok}, errors: {errs}",
            f"bytes         {self.bytes}",
            f"virtual time  {self.virtual_ns / 1e6:.3f} ms",
            f"goodput       {self.goodput_gbps:.3f} Gb/s",
            f"packets       {self.packets} ({self.retransmitted} retransmitted)",
            f"recovery      {s.get('recovery', 'gbn')}: {self.selective_retransmitted} "
            f"selective, {self.retransmitted - self.selective_retransmitted} go-back, "
            f"{self.spurious_retransmissions} spurious; {self.ooo_accepted} out-of-order "
            f"accepted, {self.selective_naks} selective NAKs",
            f"NAKs          {naks}; RNR NAKs {self.rnr_naks}; timeouts {self.timeouts}",
            f"ICRC drops    {self.icrc_drops}",
            f"data verified {'yes' if self.data_verified else 'NO'}",
            f"CPU           {self.cpu_s:.3f} s ({self.packets_per_cpu_s:,.0f} emulated "
            "packets per CPU-second)",
        ]
        if not self.finished:
            lines.append("WARNING       the time limit ran out before every message completed")
        return "\n".join(lines)


@dataclass
class _Flow:
    qa: QP
    qb: QP
    cq_a: CQ
    cq_b: CQ
    local: MR
    remote: MR
    posted: int = 0
    done: int = 0
    recv_posted: int = 0
    expected_remote: bytearray = field(default_factory=bytearray)
    expected_local: bytearray = field(default_factory=bytearray)
    bytes: int = 0
    status: Counter = field(default_factory=Counter)


def emit(summary: Any, fmt: str, pcap: str | None) -> int:
    """Print a summary as ``roce emulate`` does; exit status 3 when the data did not check
    out (the run finished, but not every message arrived intact: scripts can tell)."""
    if fmt == "json":
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        print(summary.text())
        if pcap:
            print(f"pcap          {pcap}")
    return 0 if summary.data_verified else 3


def _kind(sc: Scenario, i: int) -> str:
    return ("write", "read", "send", "atomic")[i % 4] if sc.op == "mixed" else sc.op


def run_scenario(sc: Scenario, record: Any = None,
                 progress: Callable[[int, int], None] | None = None) -> Summary:
    if sc.op not in OPS:
        raise ValueError(f"--op must be one of {', '.join(OPS)}")
    rng = random.Random(sc.seed)
    fab = Fabric(seed=sc.seed)
    a = fab.add_host("A", "10.0.0.1")
    b = fab.add_host("B", "10.0.0.2")
    link = LinkConfig(rate_gbps=sc.rate_gbps, delay_ns=sc.delay_ns, loss=sc.loss,
                      burst_p=sc.burst, reorder=sc.reorder, dup=sc.dup, corrupt=sc.corrupt)
    fab.connect(a, b, config=link, reverse=LinkConfig(**asdict(link)))
    if record is not None:
        fab.record(record)
    set_recovery((a, b), sc, 2 * sc.delay_ns)
    pd_a, pd_b = PD(a), PD(b)
    slot = max(sc.size, 8)
    flows = []
    for _ in range(sc.qps):
        cq_a, cq_b = CQ(a, 1 << 16), CQ(b, 1 << 16)
        cap = QPCap(max_send_wr=max(sc.depth, 1), max_recv_wr=max(sc.depth, 1) * 2)
        qa = QP(pd_a, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_a, recv_cq=cq_a,
                                 cap=cap))
        qb = QP(pd_b, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_b, recv_cq=cq_b,
                                 cap=cap))
        connect(qa, qb, path_mtu=sc.mtu, psn_a=sc.psn, psn_b=sc.psn, timeout=sc.timeout,
                retry_cnt=sc.retry_cnt, rnr_retry=sc.rnr_retry)
        local, remote = MR(pd_a, slot * SLOTS, ALL_ACCESS), MR(pd_b, slot * SLOTS, ALL_ACCESS)
        local.write(rng.randbytes(slot * SLOTS))
        remote.write(rng.randbytes(slot * SLOTS))
        flows.append(_Flow(qa, qb, cq_a, cq_b, local, remote, expected_remote=bytearray(
            remote.buf), expected_local=bytearray(local.buf)))
    total = sc.count * sc.qps
    cpu0 = time.process_time()

    def post_more(f: _Flow) -> None:
        while f.posted < sc.count and f.posted - f.done < sc.depth:
            _post(sc, f, f.posted, slot)
            f.posted += 1

    for f in flows:
        post_more(f)
    finished = True
    while True:
        for f in flows:
            for wc in f.cq_a.poll(1 << 16):
                f.done += 1
                f.status[WCStatus(wc.status).name] += 1
                f.bytes += wc.byte_len
                if wc.status != WCStatus.IBV_WC_SUCCESS:
                    f.posted = sc.count  # a failed QP takes no more work
            f.cq_b.poll(1 << 16)
            post_more(f)
        done = sum(f.done for f in flows)
        if progress is not None:
            progress(done, total)
        if all(f.done >= f.posted for f in flows) and all(
                f.posted >= sc.count for f in flows):
            break
        if not fab.run_until(lambda: any(len(f.cq_a) for f in flows), sc.time_limit_ns):
            finished = False
            break
    cpu = time.process_time() - cpu0
    return _summarise(sc, fab, flows, cpu, finished, slot)


def _post(sc: Scenario, f: _Flow, i: int, slot: int) -> None:
    kind = _kind(sc, i)
    off = (i % SLOTS) * slot
    size = sc.size
    if kind == "write":
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[f.local.sge(off, size)], remote_addr=f.remote.addr + off,
                              rkey=f.remote.rkey))
        f.expected_remote[off:off + size] = f.local.buf[off:off + size]
    elif kind == "read":
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_READ,
                              sg_list=[f.local.sge(off, size)], remote_addr=f.remote.addr + off,
                              rkey=f.remote.rkey))
        f.expected_local[off:off + size] = f.expected_remote[off:off + size]
    elif kind == "send":
        f.qb.post_recv(RecvWR(wr_id=i, sg_list=[f.remote.sge(off, size)]))
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_SEND,
                              sg_list=[f.local.sge(off, size)]))
        f.expected_remote[off:off + size] = f.local.buf[off:off + size]
    else:  # atomic: fetch-and-add 1 on the first 8 bytes of the remote buffer
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                              sg_list=[SGE(f.local.addr + off, 8, f.local.lkey)],
                              remote_addr=f.remote.addr, rkey=f.remote.rkey, compare_add=1))
        counter = int.from_bytes(f.expected_remote[:8], "little")
        f.expected_local[off:off + 8] = counter.to_bytes(8, "little")
        f.expected_remote[:8] = ((counter + 1) % (1 << 64)).to_bytes(8, "little")


def set_recovery(contexts: Any, sc: Scenario, rtt_ns: int) -> None:
    """The scenario's recovery mode on every device; selective repeat's BDP cap from the
    link rate and ``rtt_ns`` plus one MTU frame each way."""
    if sc.recovery == "gbn":
        return
    from .recovery import bdp_packets

    frame_ns = int((sc.mtu + 100) * 8 / sc.rate_gbps)
    bdp = bdp_packets(sc.rate_gbps, rtt_ns + 2 * frame_ns, sc.mtu)
    for ctx in contexts:
        ctx.set_recovery(sc.recovery, bdp_packets=bdp)


def add_recovery_counts(s: Any, qps: list) -> None:
    """Loss-recovery counters of ``qps`` into summary ``s``."""
    for qp in qps:
        c = qp.counters
        s.selective_retransmitted += c.selective_retransmitted
        s.spurious_retransmissions += c.duplicate_requests
        s.ooo_accepted += c.ooo_accepted
        s.selective_naks += c.sacks_sent


def _summarise(sc: Scenario, fab: Fabric, flows: list[_Flow], cpu: float, finished: bool,
               slot: int) -> Summary:
    s = Summary(scenario=asdict(sc))
    status: Counter = Counter()
    for f in flows:
        status.update(f.status)
    s.posted = sum(f.posted for f in flows)
    s.completed = dict(status)
    ok = status.get("IBV_WC_SUCCESS", 0)
    s.bytes = sum(f.bytes for f in flows)
    s.virtual_ns = fab.now
    s.goodput_gbps = s.bytes * 8 / s.virtual_ns if s.virtual_ns else 0.0
    naks: Counter = Counter()
    for f in flows:
        for qp in (f.qa.core, f.qb.core):
            s.packets += qp.counters.packets_sent
            s.retransmitted += qp.counters.retransmitted
            s.timeouts += qp.counters.timeouts
            s.rnr_naks += qp.counters.rnr_naks_received
            naks.update(qp.counters.naks_received)
    add_recovery_counts(s, [q.core for f in flows for q in (f.qa, f.qb)])
    s.naks = dict(naks)
    for ctx in fab.hosts.values():
        s.icrc_drops += ctx.device.counters.icrc_drops
    for (src, _), link in fab.links.items():
        s.link[f"{src}->{link.dst.ip}"] = asdict(link.stats)
    s.data_verified = finished and ok == s.posted and all(
        f.remote.buf == f.expected_remote and f.local.buf == f.expected_local for f in flows)
    s.cpu_s = cpu
    s.packets_per_cpu_s = s.packets / cpu if cpu > 0 else 0.0
    s.finished = finished
    return s
