"""Scenarios between two emulated hosts on the simulated fabric, and their summary.

``run_scenario(Scenario(...))`` builds hosts A and B, ``qps`` connected queue pairs of one
type (RC, UC or UD), posts ``count`` messages per QP (keeping ``depth`` outstanding), runs
the fabric until everything completed, verifies the data and returns a ``Summary``.  This
is what ``roce emulate`` prints.

The runner's cost is linear in the work: each side has one CQ shared by all its QPs
(completions name their QP), so a pass over the loop handles what completed, never every
flow; the fabric stops as soon as a completion is there.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from roce.emu import budget
from roce.emu.core.constants import ALL_ACCESS, QPType, WCStatus, WROpcode
from roce.emu.core.payload import Expected, fill, slot_bytes, slots_for
from roce.emu.core.qp import AHAttr, QPAttr, QPCap
from roce.emu.core.recovery import LOSS_RULES, MODES
from roce.emu.core.unreliable import GRH_BYTES
from roce.emu.core.verbs import AH, CQ, MR, PD, QP, QPInitAttr, connect
from roce.emu.core.work import SGE, RecvWR, SendWR
from roce.emu.fabric import Fabric, LinkConfig
from roce.errors import UsageError, VerificationError

OPS = ("send", "write", "read", "atomic", "mixed")
QP_TYPES = {"rc": QPType.IBV_QPT_RC, "uc": QPType.IBV_QPT_UC, "ud": QPType.IBV_QPT_UD}
ALLOWED = {"rc": set(OPS), "uc": {"send", "write"}, "ud": {"send"}}  # IBA 9.8.3, 9.8.4
MAX_MESSAGE = 1 << 31  # IBA: a message is at most 2^31 bytes (DMA Length is 32 bits)
QKEY = 0x11111111


def kind(op: str, i: int) -> str:
    """The operation of message ``i``: ``mixed`` cycles write, read, send, atomic."""
    return ("write", "read", "send", "atomic")[i % 4] if op == "mixed" else op


def message_bytes(what: str, size: int) -> int:
    return 8 if what == "atomic" else size


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
    qp_type: str = "rc"
    recovery: str = "gbn"  # gbn | sr (roce.emu.core.recovery)
    loss_rule: str = "rack"  # sr's loss rule: rack | dupthresh (roce.emu.core.recovery)

    def check(self, sides: int = 2) -> None:
        """Refuse what cannot run (``UsageError`` naming the option), before any memory is
        taken: ``sides`` is how many of the two devices live in this process."""
        if self.op not in OPS:
            raise UsageError(f"--op must be one of {', '.join(OPS)}")
        if self.qp_type not in ALLOWED:
            raise UsageError(f"--qp-type must be one of {', '.join(ALLOWED)}")
        if self.recovery not in MODES:
            raise UsageError(f"--recovery must be one of {', '.join(MODES)}")
        if self.loss_rule not in LOSS_RULES:
            raise UsageError(f"--loss-rule must be one of {', '.join(LOSS_RULES)}")
        if self.count < 0 or self.qps < 1 or self.depth < 1 or self.size < 0:
            raise UsageError("--count and --size must be >= 0, --qps and --depth >= 1")
        if self.size > MAX_MESSAGE:
            raise UsageError(f"--size {self.size}: a message is at most 2^31 bytes (IBA; the "
                             f"RETH DMA length is 32 bits): --size at most 2G")
        kinds = {kind(self.op, i) for i in range(min(self.count, 4))} or {self.op}
        bad = kinds - ALLOWED[self.qp_type]
        if bad:
            raise UsageError(f"--qp-type {self.qp_type}: {self.qp_type.upper()} QPs cannot do "
                             f"{', '.join(sorted(bad))} (--op)")
        if self.qp_type == "ud" and self.size > self.mtu:
            raise UsageError(f"--size {self.size}: a UD message is one packet, at most --mtu "
                             f"{self.mtu} bytes")
        budget.workload(self.size, self.slots, self.qps, sides)

    @property
    def slot(self) -> int:
        return slot_bytes(self.size)

    @property
    def slots(self) -> int:
        return slots_for(self.size, self.count)


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
    outstanding: int = 0  # messages neither completed nor given up when the run ended
    delivered: int = 0  # messages the responders executed (RC, UC) or received (UD)
    stopped: str = ""  # why the run ended before every message completed
    unverified: str = ""  # why the data did not check out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def errors_text(self) -> str:
        errs = ", ".join(f"{k}={v}" for k, v in sorted(self.completed.items())
                         if k != "IBV_WC_SUCCESS") or "none"
        if self.outstanding:
            errs += f"; {self.outstanding} not completed"
        return errs

    def text(self) -> str:
        ok = self.completed.get("IBV_WC_SUCCESS", 0)
        naks = ", ".join(f"{k}={v}" for k, v in sorted(self.naks.items())) or "none"
        s = self.scenario
        lines = [
            f"scenario      {s['op']} size={s['size']} count={s['count']} qps={s['qps']} "
            f"mtu={s['mtu']} qp={s.get('qp_type', 'rc')} seed={s['seed']}",
            f"link          {s['rate_gbps']:g} Gb/s, {s['delay_ns']} ns, loss={s['loss']:g} "
            f"burst={s['burst']:g} reorder={s['reorder']:g} dup={s['dup']:g} "
            f"corrupt={s['corrupt']:g}",
            f"messages      posted {self.posted}, completed OK {ok}, errors: "
            f"{self.errors_text()}",
            f"delivered     {self.delivered} of {s['count'] * s['qps']} messages reached "
            "the responder",
            f"bytes         {self.bytes}",
            f"virtual time  {self.virtual_ns / 1e6:.3f} ms",
            f"goodput       {self.goodput_gbps:.3f} Gb/s",
            f"packets       {self.packets} ({self.retransmitted} retransmitted)",
            f"recovery      {recovery_name(s)}: {self.selective_retransmitted} "
            f"selective, {self.retransmitted - self.selective_retransmitted} go-back, "
            f"{self.spurious_retransmissions} spurious; {self.ooo_accepted} out-of-order "
            f"accepted, {self.selective_naks} selective NAKs",
            f"NAKs          {naks}; RNR NAKs {self.rnr_naks}; timeouts {self.timeouts}",
            f"ICRC drops    {self.icrc_drops}",
            f"data verified {'yes' if self.data_verified else 'NO: ' + self.unverified}",
            f"CPU           {self.cpu_s:.3f} s ({self.packets_per_cpu_s:,.0f} emulated "
            "packets per CPU-second)",
        ]
        if not self.finished:
            lines.append(f"WARNING       {self.stopped}")
        return "\n".join(lines)


def recovery_name(scenario: dict[str, Any]) -> str:
    """The recovery mode as the summary shows it: ``gbn``, or ``sr`` with its loss rule."""
    mode = scenario.get("recovery", "gbn")
    return f"{mode} ({scenario.get('loss_rule', 'rack')})" if mode == "sr" else mode


def emit(summary: Any, fmt: str, pcap: str | None) -> int:
    """Print a summary as ``roce emulate`` does; raise ``VerificationError`` (exit 4) when
    the data did not check out (the run ended, but not every message arrived intact:
    scripts can tell)."""
    if fmt == "json":
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        print(summary.text())
        if pcap:
            print(f"pcap          {pcap}")
    if not summary.data_verified:
        why = getattr(summary, "unverified", "") or "see the summary"
        raise VerificationError(f"data not verified: {why}")
    return 0


@dataclass(eq=False)
class _Flow:
    index: int
    qa: QP
    qb: QP
    local: MR
    remote: MR
    expected: Expected
    ah: AH | None = None  # UD: where A's sends go
    posted: int = 0
    done: int = 0
    bytes: int = 0
    status: Counter = field(default_factory=Counter)


def _make_flow(sc: Scenario, i: int, pd_a: PD, pd_b: PD, cq_a: CQ, cq_b: CQ) -> _Flow:
    qtype = QP_TYPES[sc.qp_type]
    unreliable = sc.qp_type != "rc"
    # UC/UD receives lost on the wire stay posted: room for every message (the work)
    recv_wr = max(sc.depth, 1) * 2 + (sc.count if unreliable else 0)
    cap = QPCap(max_send_wr=max(sc.depth, 1), max_recv_wr=recv_wr)
    qa = QP(pd_a, QPInitAttr(qp_type=qtype, send_cq=cq_a, recv_cq=cq_a, cap=cap))
    qb = QP(pd_b, QPInitAttr(qp_type=qtype, send_cq=cq_b, recv_cq=cq_b, cap=cap))
    ah = None
    if sc.qp_type == "ud":
        for qp in (qa, qb):
            qp.to_init(QPAttr(qkey=QKEY))
            qp.to_rtr(QPAttr())
            qp.to_rts(QPAttr(sq_psn=sc.psn))
        b = pd_b.ctx
        ah = AH(pd_a, AHAttr(dmac=b.mac, dip=b.ip))
    else:
        connect(qa, qb, path_mtu=sc.mtu, psn_a=sc.psn, psn_b=sc.psn, timeout=sc.timeout,
                retry_cnt=sc.retry_cnt, rnr_retry=sc.rnr_retry)
    n = sc.slot * sc.slots
    local, remote = MR(pd_a, n, ALL_ACCESS), MR(pd_b, n, ALL_ACCESS)
    fill(local.buf, sc.seed, i, "local", sc.size, sc.slots)
    fill(remote.buf, sc.seed, i, "remote", sc.size, sc.slots)
    return _Flow(i, qa, qb, local, remote, Expected(sc.seed, i, sc.size, sc.slots), ah)


def run_scenario(sc: Scenario, record: Any = None,
                 progress: Callable[[int, int], None] | None = None) -> Summary:
    sc.check(sides=2)
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
    total = sc.count * sc.qps
    # one CQ per side for every QP; UC/UD sends complete as they go out, so a whole
    # window of every QP can be waiting in A's CQ
    cqe = max(1 << 16, 2 * sc.qps * sc.depth)
    cq_a, cq_b = CQ(a, cqe), CQ(b, cqe)
    grh = MR(pd_b, GRH_BYTES, ALL_ACCESS) if sc.qp_type == "ud" else None
    flows = [_make_flow(sc, i, pd_a, pd_b, cq_a, cq_b) for i in range(sc.qps)]
    by_qpn = {f.qa.qp_num: f for f in flows}
    cpu0 = time.process_time()
    left = total  # messages not yet completed or given up

    def post_more(f: _Flow) -> None:
        while f.posted < sc.count and f.posted - f.done < sc.depth:
            _post(sc, f, f.posted, grh)
            f.posted += 1

    for f in flows:
        post_more(f)
    finished = True
    while True:
        touched = {}
        for wc in cq_a.poll(len(cq_a)):
            f = by_qpn[wc.qp_num]
            f.done += 1
            left -= 1
            f.status[WCStatus(wc.status).name] += 1
            f.bytes += wc.byte_len
            if wc.status == WCStatus.IBV_WC_SUCCESS:
                f.expected.apply(kind(sc.op, wc.wr_id), wc.wr_id)
            elif f.posted < sc.count:  # a failed QP takes no more work
                left -= sc.count - f.posted
                f.posted = sc.count
            touched[f.index] = f
        cq_b.poll(len(cq_b))  # receive completions: counted by the responders
        for f in touched.values():
            post_more(f)
        if progress is not None:
            progress(total - left, total)
        if left <= 0:
            break
        if not fab.run_until(lambda: len(cq_a) > 0, sc.time_limit_ns):
            finished = False
            break
    if sc.qp_type != "rc":
        # UC and UD complete a send once it is on the wire: let the frames still in flight
        # land before the memory is checked (no timers: the fabric runs dry)
        fab.run_until(lambda: False, sc.time_limit_ns)
    cpu = time.process_time() - cpu0
    return _summarise(sc, fab, flows, cpu, finished, left)


def _post(sc: Scenario, f: _Flow, i: int, grh: MR | None) -> None:
    what = kind(sc.op, i)
    off = (i % sc.slots) * sc.slot
    size = sc.size
    if what == "write":
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[f.local.sge(off, size)], remote_addr=f.remote.addr + off,
                              rkey=f.remote.rkey))
    elif what == "read":
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_READ,
                              sg_list=[f.local.sge(off, size)], remote_addr=f.remote.addr + off,
                              rkey=f.remote.rkey))
    elif what == "send":
        # UD: the 40-byte GRH area goes to a scratch MR, the message to the slot
        sges = ([grh.sge(0, GRH_BYTES)] if grh is not None else []) + [f.remote.sge(off, size)]
        f.qb.post_recv(RecvWR(wr_id=i, sg_list=sges))
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_SEND,
                              sg_list=[f.local.sge(off, size)], ah=f.ah,
                              remote_qpn=f.qb.qp_num, remote_qkey=QKEY))
    else:  # atomic: fetch-and-add 1 on the first 8 bytes of the remote buffer
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                              sg_list=[SGE(f.local.addr + off, 8, f.local.lkey)],
                              remote_addr=f.remote.addr, rkey=f.remote.rkey, compare_add=1))


def _stopped(sc: Scenario, fab: Fabric, left: int) -> str:
    """Why the fabric stopped with ``left`` messages outstanding, in words."""
    timers = [d for d in (ctx.device.deadline() for ctx in fab.hosts.values())
              if d is not None]
    limit = sc.time_limit_ns / 1e9
    if timers and min(timers) > sc.time_limit_ns:
        return (f"the virtual time limit ({limit:g} s) ran out with {left} message(s) "
                f"outstanding: the next event, a timer at {min(timers) / 1e9:.3f} s "
                "(--timeout), lies past it")
    if not timers:
        return (f"the run stalled with {left} message(s) outstanding: no frame in flight "
                "and no timer armed (--timeout 0 disables retransmission)")
    return f"the virtual time limit ({limit:g} s) ran out with {left} message(s) outstanding"


def set_recovery(contexts: Any, sc: Scenario, rtt_ns: int) -> None:
    """The scenario's recovery mode on every device; selective repeat's BDP cap from the
    link rate and ``rtt_ns`` plus one MTU frame each way."""
    if sc.recovery == "gbn":
        return
    from roce.emu.core.recovery import bdp_packets

    frame_ns = int((sc.mtu + 100) * 8 / sc.rate_gbps)
    bdp = bdp_packets(sc.rate_gbps, rtt_ns + 2 * frame_ns, sc.mtu)
    for ctx in contexts:
        ctx.set_recovery(sc.recovery, bdp_packets=bdp, loss_rule=sc.loss_rule)


def add_qp_counts(s: Any, naks: Counter, qps: list) -> None:
    """The wire counters of ``qps`` (QP cores) into summary ``s``, NAKs by kind into ``naks``;
    the loss-recovery counters too."""
    for qp in qps:
        c = qp.counters
        s.packets += c.packets_sent
        s.retransmitted += c.retransmitted
        s.timeouts += c.timeouts
        s.rnr_naks += c.rnr_naks_received
        naks.update(c.naks_received)
        s.selective_retransmitted += c.selective_retransmitted
        s.spurious_retransmissions += c.duplicate_requests
        s.ooo_accepted += c.ooo_accepted
        s.selective_naks += c.sacks_sent


def _summarise(sc: Scenario, fab: Fabric, flows: list[_Flow], cpu: float, finished: bool,
               left: int) -> Summary:
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
        s.delivered += f.qb.core.counters.messages_executed
    add_qp_counts(s, naks, [q.core for f in flows for q in (f.qa, f.qb)])
    s.naks = dict(naks)
    for ctx in fab.hosts.values():
        s.icrc_drops += ctx.device.counters.icrc_drops
    for (src, _), link in fab.links.items():
        s.link[f"{src}->{link.dst.ip}"] = asdict(link.stats)
    total = sc.count * sc.qps
    s.finished = finished
    s.outstanding = max(left, 0) if not finished else 0
    if not finished:
        s.stopped = _stopped(sc, fab, left)
        s.unverified = f"{left} of {total} message(s) did not complete"
    elif ok != s.posted or s.posted != total:
        s.unverified = f"{total - ok} of {total} message(s) did not complete successfully"
    elif s.delivered != total:
        s.unverified = f"{total - s.delivered} of {total} message(s) never reached the responder"
    elif not all(f.expected.matches("remote", f.remote.buf)
                 and f.expected.matches("local", f.local.buf) for f in flows):
        s.unverified = "memory does not hold what the operations wrote"
    s.data_verified = not s.unverified
    s.cpu_s = cpu
    s.packets_per_cpu_s = s.packets / cpu if cpu > 0 else 0.0
    return s
