"""The run of a scenario on the simulated network, whatever its topology: ``run_scenario``.

``p2p`` (two hosts cabled back to back, ``roce emulate``'s default) is a topology like the
others.  Every (source, destination) pair of the traffic gets ``qps`` queue pairs (RC; UC and
UD between two hosts cabled back to back); each source QP posts ``count`` messages of
``op``/``size`` keeping ``depth`` outstanding, and the run ends when every message completed
or was given up (a QP in error takes no more work), or when the virtual time limit passes.
Then the data is checked against what the operations must have made of the buffers
(``roce.emu.core.payload``) and the run summarised (``roce.emu.scenario.Summary``): through
the switched network's NICs it adds the ``fabric`` object (drops, ECN marks, PFC frames,
queue peaks, per switch port and host) and message completion times.

The runner's cost is linear in the work: each host has one CQ shared by all its QPs
(completions name their QP), which tells the runner when it gets an entry, so a pass over the
loop handles what completed, never every flow; the network stops as soon as a completion is
there.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from roce.emu import budget, defaults
from roce.emu.budget import per_qp
from roce.emu.core.constants import ALL_ACCESS, GRH_BYTES, MAX_UNACKED_PSNS, WCStatus, WROpcode
from roce.emu.core.patterned import Patterned
from roce.emu.core.payload import Expected, fill
from roce.emu.core.qp import AHAttr, QPAttr, QPCap
from roce.emu.core.verbs import AH, CQ, MR, PD, QP, QPInitAttr, connect
from roce.emu.core.work import SGE, RecvWR, SendWR
from roce.emu.net import schema
from roce.emu.net import topology as topo
from roce.emu.net.observe import tap_port
from roce.emu.net.stages import DSCP_ROCE, PRIO_ROCE, ROCE_TRAFFIC_CLASS, EcnConfig
from roce.emu.scenario import QKEY, QP_TYPES, Scenario, Summary, add_qp_counts, kind
from roce.errors import UsageError

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

# the operations whose runs hold patterns rather than buffers (``NetRun``)
PATTERNED_OPS = ("write", "send")


def memory_of(mr: MR) -> Any:
    """What ``mr`` holds, for ``Expected.mismatched``: its bytes or its pattern content."""
    return mr.content if mr.content is not None else mr.buf


@dataclass
class NetScenario(Scenario):
    """A scenario on a switched network: ``incast:2`` unless ``topology`` says otherwise."""

    topology: str = defaults.NET_TOPOLOGY


@dataclass(eq=False)
class Flow:
    """One QP pair: the source's ``qa``, the destination's ``qb``, their buffers and what
    they must hold, and what the runner counted."""

    index: int
    qa: QP
    qb: QP
    local: MR
    remote: MR
    expected: Expected
    ah: AH | None = None  # UD: where the source's sends go
    grh: MR | None = None  # UD: the destination's scratch area for the 40-byte GRH
    posted: int = 0
    done: int = 0
    bytes: int = 0
    status: Counter = field(default_factory=Counter)
    post_times: list[int] = field(default_factory=list)  # virtual ns each message was posted
    done_times: list[int] = field(default_factory=list)  # ... and completed
    recv_done: int = 0


NetFlow = Flow  # its name when it ran only on switched networks


class HostCQ(CQ):
    """A host's CQ, shared by all its QPs: it tells the runner when it gets an entry, and
    knows each QP's flow (``flows``: QPN -> (flow, True for the sending QP); a workload run's
    connections there, ``roce.emu.net.workrun``)."""

    def __init__(self, ctx: Any, cqe: int, ready: list) -> None:
        super().__init__(ctx, cqe)
        self.ready = ready
        self.flows: dict[int, tuple[Flow, bool]] = {}

    def push(self, wc: Any) -> None:
        super().push(wc)
        self.ready.append(self)


def options(sc: Scenario, direct: bool = True) -> topo.NetOptions:
    faults = {k: v for k, v in (("loss", sc.loss), ("burst_p", sc.burst),
                                ("reorder", sc.reorder), ("dup", sc.dup),
                                ("corrupt", sc.corrupt)) if v}
    ecn = (EcnConfig() if sc.ecn == "on" else topo.parse_ecn(sc.ecn))
    telemetry = sc.cc is not None and sc.cc.cls.uses_int
    grown = 0
    if telemetry:
        # a frame carrying INT grows by its headers and a record per hop (PFC headroom);
        # imported here: only such a run needs INT's layout
        from roce.families import intmd

        grown = intmd.HEAD + intmd.MAX_HOPS * intmd.HOP_SIZE
    return topo.NetOptions(seed=sc.seed, rate_gbps=sc.rate_gbps, delay_ns=sc.delay_ns,
                           faults=faults, buffer=sc.buffer, ecn=ecn, pfc=sc.pfc, lb=sc.lb,
                           max_frame=sc.mtu + 128 + grown, direct=direct,
                           telemetry=telemetry)


def topology_of(sc: Scenario) -> topo.Topology:
    return topo.load(sc.topology_file) if sc.topology_file else topo.parse(sc.topology)


def traffic_of(sc: Scenario, t: topo.Topology, net: Any) -> list[tuple[str, str]]:
    """The (source, destination) pairs of ``--count`` traffic.  A permutation is drawn from
    a generator seeded by ``--seed`` alone (not the network's), so every protocol, load
    balancing and switch configuration pairs the hosts alike."""
    if sc.traffic == "all-to-all":
        return topo.all_to_all(t)
    if sc.traffic == "permutation" or (sc.traffic is None and not t.traffic):
        return topo.permutation(t, random.Random(f"permutation/{sc.seed}"))
    return t.traffic


def needs_nics(sc: Scenario, t: topo.Topology) -> bool:
    """Whether the run needs the switched network's NICs: there are switches, or something
    only a transmit scheduler does (congestion control's pacing, obeying a PFC storm), or
    a link fails (``failures`` acts on the network's wires)."""
    return (bool(t.switches) or sc.congestion_control or bool(sc.storm)
            or bool(sc.link_down) or sc.protocol == "ib")


# Scenario fields of --workload and --collective runs (roce.emu.net.workrun): refused
# without one, not ignored
WORKLOAD_ONLY = (("load", "--load", "--workload"), ("duration_ns", "--duration", "--workload"),
                 ("fct", "--fct", "--workload"), ("fct_bins", "--fct-bins", "--workload"),
                 ("algorithm", "--algorithm", "--collective"),
                 ("ranks", "--ranks", "--collective"),
                 ("iterations", "--iterations", "--collective"),
                 ("chunk", "--chunk", "--collective"), ("window", "--window", "--collective"))


# What a native InfiniBand run (--protocol ib) has nothing for: (Scenario field, option,
# why).  InfiniBand is lossless by credits, routes by LIDs, and has its own congestion
# control (FECN/BECN, --ib-cc).
IB_REFUSED = (("pfc", "--pfc", "InfiniBand is lossless by credits, without PFC"),
              ("buffer", "--buffer", "each InfiniBand port holds one round trip of credit "
               "per VL"),
              ("storm", "--pfc-storm", "InfiniBand has no PFC"),
              ("ecn", "--ecn", "InfiniBand switches mark FECN, not ECN (--ib-cc on)"),
              ("lb", "--lb", "switches forward by their forwarding tables (--ib-routing)"),
              ("link_down", "--link-down", "the subnet manager's rerouting is not emulated"))


def refuse_inapplicable(sc: Scenario, t: topo.Topology, nics: bool) -> None:
    """A UsageError naming the first option the run's topology gives nothing to act on."""
    base = Scenario()
    if sc.protocol == "ib":
        for name, opt, why in IB_REFUSED:
            if getattr(sc, name) != getattr(base, name):
                raise UsageError(f"{opt} with --protocol ib: {why}")
        if sc.congestion_control:
            raise UsageError("--cc with --protocol ib: InfiniBand's congestion control is "
                             "--ib-cc on (FECN, BECN, the HCA's table)")
    else:
        for name, opt in (("ib_routing", "--ib-routing"), ("ib_cc", "--ib-cc"),
                          ("ib_lmc", "--ib-lmc"), ("ib_ar", "--ib-ar")):
            if getattr(sc, name) != getattr(base, name):
                raise UsageError(f"{opt}: only with --protocol ib")
    if sc.qp_type != "rc" and nics:
        why = ("a switched network runs RC queue pairs" if t.switches else
               "InfiniBand's HCAs run RC queue pairs" if sc.protocol == "ib" else
               "--cc and --pfc-storm run RC queue pairs")
        raise UsageError(f"--qp-type {sc.qp_type}: {why} (UC and UD run between two hosts "
                         "cabled back to back: --topology p2p)")
    base = Scenario()
    if sc.detect_delay_ns != base.detect_delay_ns and not sc.link_down:
        raise UsageError("--detect-delay: only with --link-down")
    if not sc.generated:
        for name, opt, only in WORKLOAD_ONLY:
            if getattr(sc, name) != getattr(base, name):
                raise UsageError(f"{opt}: only with {only}")
    if t.switches:
        return
    for name, opt, why in (
            ("buffer", "--buffer", "no switch holds a buffer"),
            ("ecn", "--ecn", "no switch marks ECN"),
            ("lb", "--lb", "no switch picks among paths")):
        if getattr(sc, name) != getattr(base, name):
            raise UsageError(f"{opt} {getattr(sc, name)}: the topology has no switch ({why}); "
                             "two hosts through one switch: --topology incast:1")
    if not nics and sc.pfc != base.pfc:
        raise UsageError("--pfc off: two hosts cabled back to back send no pause frames; with "
                         "--pfc-storm HOST the other host ignores the storm's")
    if not nics and sc.cc is not None and sc.cc.ecn != ROCE_TRAFFIC_CLASS & 3:
        raise UsageError("--ecn-codepoint: two hosts cabled back to back have no switch to "
                         "mark ECN; use it with --cc or a switched --topology")


class NetRun:
    """One run, built and ready: ``net`` (the ``Network``), ``flows`` and their ``names``
    ((source, destination) host names) can be inspected or hooked before ``run()``.
    ``topology``: one already loaded (the command's, with its drop filters compiled);
    by default ``sc``'s.  A link family other than Ethernet subclasses it: its
    ``protocol``, the network it builds (``build_network``), where received frames are
    recorded (``record``) and its counters (``fabric_stats``); ``roce.emu.ib.ibrun``."""

    protocol = "roce"

    def __init__(self, sc: Scenario, record: Any = None,
                 taps: dict[str, Any] | None = None, trace: Any = None,
                 topology: topo.Topology | None = None, real_memory: bool = False) -> None:
        # WRITE and SEND only copy seeded slots: their regions hold patterns, not bytes
        # (``roce.emu.core.patterned``), unless ``real_memory``; READ and atomics change the
        # requester's memory and the responder's in place, so their runs hold bytes
        self.patterned = not real_memory and sc.op in PATTERNED_OPS
        sc.check(sides=2, patterned=self.patterned)  # before anything is read or allocated
        t = self.topology = topology if topology is not None else topology_of(sc)
        topo.oversubscribe(t, sc.oversubscription, sc.rate_gbps)
        # every flow's QPs, buffers and frames in flight, and the network, fit before any
        # is made
        schema.check_flows(t, sc.traffic, sc.qps, flow_bytes(sc, t, self.patterned),
                           sc.topology_file or f"--topology {sc.topology}")
        nics = self.nics = needs_nics(sc, t)
        refuse_inapplicable(sc, t, nics)
        if sc.time_limit_ns is None:
            sc = replace(sc, time_limit_ns=defaults.time_limit_ns(nics))
        self.sc = sc
        self.trace = trace
        if sc.protocol != self.protocol:  # the link family's own run builds its network
            raise UsageError(f"--protocol {sc.protocol}: its runs are roce.emu.ib.ibrun.IbRun's"
                             if sc.protocol == "ib" else f"--protocol {sc.protocol}: unknown")
        net = self.net = self.build_network(t, sc)
        self.failures = start_failures(sc, t, net)
        if record is not None:
            self.record(record)
        for spec, writer in (taps or {}).items():
            attach_tap(net, spec, writer)
        pairs = traffic_of(sc, t, net)
        if len(pairs) > 1:  # the memory of every pair's QPs, not one pair's
            sc.check(sides=2, qps=sc.qps * len(pairs), patterned=self.patterned)
        for name in sc.storm:
            if name not in net.hosts:
                raise UsageError(f"--pfc-storm {name}: no such host (the hosts: "
                                 f"{_names(net.hosts)})")
            net.hosts[name].storm(PRIO_ROCE)
        tclass = 0  # hosts cabled back to back: no switch reads DSCP or ECN
        if nics:
            tclass = ROCE_TRAFFIC_CLASS
            if sc.cc is not None:
                tclass = DSCP_ROCE << 2 | sc.cc.ecn  # --ecn-codepoint
                if sc.cc.enabled:
                    for nic in net.hosts.values():
                        nic.ctx.set_congestion_control(sc.cc)
        set_recovery([nic.ctx for nic in net.hosts.values()], sc, rtt_ns(sc, t))
        self.ready: list[HostCQ] = []
        self.flows: list[Flow] = []
        self.names: list[tuple[str, str]] = []
        self.left = 0  # messages not yet completed or given up (``run``)
        qps_of: Counter = Counter()  # host -> its QPs
        for src, dst in pairs:
            qps_of[src] += sc.qps
            qps_of[dst] += sc.qps
        pds: dict[str, PD] = {}
        cqs: dict[str, HostCQ] = {}
        grhs: dict[str, MR] = {}
        for src, dst in pairs:
            a, b = net.hosts[src].ctx, net.hosts[dst].ctx
            for name, ctx in ((src, a), (dst, b)):
                if name not in pds:
                    pds[name] = PD(ctx)
                    # UC/UD sends complete as they go out: a whole window of every QP can
                    # wait in the CQ
                    cqs[name] = HostCQ(ctx, max(1 << 16, 2 * qps_of[name] * sc.depth),
                                        self.ready)
            if sc.qp_type == "ud" and dst not in grhs:
                grhs[dst] = MR(pds[dst], GRH_BYTES, ALL_ACCESS)
            for _ in range(sc.qps):
                f = self._flow(sc, a, b, pds[src], pds[dst], cqs[src], cqs[dst],
                               grhs.get(dst), tclass)
                self.flows.append(f)
                self.names.append((src, dst))

    def _flow(self, sc: Scenario, a: Any, b: Any, pd_a: PD, pd_b: PD, cq_a: HostCQ,
              cq_b: HostCQ, grh: MR | None, tclass: int) -> Flow:
        qtype = QP_TYPES[sc.qp_type]
        unreliable = sc.qp_type != "rc"
        # UC/UD receives lost on the wire stay posted: room for every message (the work)
        recv_wr = sc.depth * 2 + (sc.count if unreliable else 0)
        cap = QPCap(max_send_wr=sc.depth, max_recv_wr=recv_wr)
        qa = QP(pd_a, QPInitAttr(qp_type=qtype, send_cq=cq_a, recv_cq=cq_a, cap=cap))
        qb = QP(pd_b, QPInitAttr(qp_type=qtype, send_cq=cq_b, recv_cq=cq_b, cap=cap))
        ah = None
        if sc.qp_type == "ud":
            for qp in (qa, qb):
                qp.to_init(QPAttr(qkey=QKEY))
                qp.to_rtr(QPAttr())
                qp.to_rts(QPAttr(sq_psn=sc.psn))
            ah = AH(pd_a, AHAttr(dmac=a.device.peer_mac(b.ip), dip=b.ip,
                                 traffic_class=tclass))
        else:
            connect(qa, qb, path_mtu=sc.mtu, psn_a=sc.psn, psn_b=sc.psn, timeout=sc.timeout,
                    retry_cnt=sc.retry_cnt, rnr_retry=sc.rnr_retry, traffic_class=tclass,
                    resolve=True)
        index, slots = len(self.flows), sc.slots
        if self.patterned:  # no buffers: the bytes are made as frames are built and checked
            local = MR(pd_a, sc.slot * slots, ALL_ACCESS,
                       content=Patterned(sc.seed, index, "local", sc.slot, slots))
            remote = MR(pd_b, sc.slot * slots, ALL_ACCESS,
                        content=Patterned(sc.seed, index, "remote", sc.slot, slots, "local"))
        else:
            local = MR(pd_a, sc.slot * slots, ALL_ACCESS)
            remote = MR(pd_b, sc.slot * slots, ALL_ACCESS)
            fill(local.buf, sc.seed, index, "local", sc.size, slots)
            fill(remote.buf, sc.seed, index, "remote", sc.size, slots)
        f = Flow(index, qa, qb, local, remote, Expected(sc.seed, index, sc.size, slots), ah,
                 grh)
        cq_a.flows[qa.qp_num] = (f, True)
        cq_b.flows[qb.qp_num] = (f, False)
        return f

    def build_network(self, t: topo.Topology, sc: Scenario) -> Any:
        """The network of the run: Ethernet switches and NICs (or two hosts cabled back to
        back)."""
        return topo.build(t, options(sc, direct=not self.nics))

    def record(self, writer: Any) -> None:
        """Write every frame a host receives to ``writer`` (a pcap of link type 1)."""
        self.net.recorders.append(writer)

    def fabric_stats(self) -> dict[str, Any]:
        """The network's counters for the summary's ``fabric``."""
        return fabric_stats(self.net, self.failures)

    def post(self, f: Flow) -> None:
        """Post ``f``'s next message."""
        _post(self.sc, f, f.posted)
        f.posted += 1

    def completions(self) -> list[Flow]:
        """Take what the CQs that got entries hold: count each completion against its flow
        (a failed flow takes no more work: its messages not posted are given up), and
        return the flows whose sends completed, in the order they first did.  Each CQ once,
        in the order it got its first entry: one event may complete several QPs' work (UC
        and UD sends complete as they are built); what posting completes at once waits for
        the next call."""
        sc, now = self.sc, self.net.now
        batch = list(dict.fromkeys(self.ready))
        self.ready.clear()
        touched: dict[int, Flow] = {}
        for cq in batch:
            flows = cq.flows
            for wc in cq.poll(len(cq)):
                f, sending = flows[wc.qp_num]
                if not sending:  # receive completions: counted (exactly-once checks)
                    f.recv_done += 1
                    continue
                f.done += 1
                self.left -= 1
                f.done_times.append(now)
                f.status[WCStatus(wc.status).name] += 1
                f.bytes += wc.byte_len
                if wc.status == WCStatus.IBV_WC_SUCCESS:
                    f.expected.apply(kind(sc.op, wc.wr_id), wc.wr_id)
                elif f.posted < sc.count:  # a failed QP takes no more work
                    self.left -= sc.count - f.posted
                    f.posted = sc.count
                touched[f.index] = f
        return list(touched.values())

    def run(self, progress: Callable[[int, int], None] | None = None) -> Summary:
        sc, net, flows, ready = self.sc, self.net, self.flows, self.ready
        total = sc.count * len(flows)
        self.left = total
        limit = sc.time_limit_ns
        if self.trace is not None:
            self.trace.start(net, flows, self.names)
        cpu0 = time.process_time()

        def post_more(f: Flow) -> None:
            while f.posted < sc.count and f.posted - f.done < sc.depth:
                self.post(f)
                f.post_times.append(net.now)

        for f in flows:
            post_more(f)
        finished = True
        while True:
            for f in self.completions():
                post_more(f)
            if progress is not None:
                progress(total - self.left, total)
            if self.left <= 0:
                break
            if not net.run_until_any(ready, limit):
                finished = False
                if net.events:  # the limit ended the run, not a lack of events
                    net.now = max(net.now, limit)
                break
        if sc.qp_type != "rc":
            # UC and UD complete a send once it is on the wire: let the frames still in flight
            # land before the memory is checked (no timers: the network runs dry)
            net.run_until_any([], limit)
        cpu = time.process_time() - cpu0
        if self.trace is not None:
            self.trace.finish(net)
        return summarise(self, cpu, finished, self.left)


def start_failures(sc: Scenario, t: topo.Topology, net: Any) -> Any:
    """The run's ``--link-down`` failures, checked against ``t`` and scheduled on ``net``
    (None without any)."""
    if not sc.link_down:
        return None
    from roce.emu.net.failures import LinkFailures

    f = LinkFailures(net, t, sc.link_down, sc.detect_delay_ns)
    f.start()
    return f


def run_scenario(sc: Scenario, record: Any = None,
                 progress: Callable[[int, int], None] | None = None,
                 taps: dict[str, Any] | None = None, trace: Any = None) -> Summary:
    """Run ``sc`` and summarise it (``record``: a writer of every frame a host receives;
    ``taps``: NODE:PORT -> writer; ``trace``: a ``roce.emu.net.observe.Trace``)."""
    return NetRun(sc, record, taps, trace).run(progress)


def run_network(sc: Scenario, record: Any = None, taps: dict[str, Any] | None = None,
                trace: Any = None,
                progress: Callable[[int, int], None] | None = None) -> Summary:
    return run_scenario(sc, record, progress, taps, trace)


def flow_bytes(sc: Scenario, t: topo.Topology, patterned: bool) -> int:
    """What one QP pair of ``sc`` on ``t`` costs at most (``budget.per_qp``): its QPs, its
    buffers unless ``patterned``, and the frames its window lets be in flight (of the
    messages it has outstanding at once)."""
    return per_qp(sc.size, sc.slots, 2, patterned,
                  budget.in_flight(sc.size, min(sc.depth, sc.count), sc.mtu, window(sc, t)),
                  sc.mtu)


def rtt_ns(sc: Scenario, t: topo.Topology) -> int:
    """The round trip selective repeat's BDP cap is made for: one link between two hosts
    cabled back to back; a path of up to 4 links (leaf-spine), store-and-forward, through
    switches."""
    return (2 * sc.delay_ns if not t.switches else
            8 * sc.delay_ns + 6 * (sc.mtu + 100) * 8 // max(1, int(sc.rate_gbps)))


def bdp_of(sc: Scenario, rtt: int) -> int:
    """Selective repeat's BDP cap: the link rate and ``rtt`` plus one MTU frame each way."""
    from roce.emu.core.recovery import bdp_packets

    frame_ns = int((sc.mtu + 100) * 8 / sc.rate_gbps)
    return bdp_packets(sc.rate_gbps, rtt + 2 * frame_ns, sc.mtu)


def window(sc: Scenario, t: topo.Topology) -> int | None:
    """The frames of its own an RC QP pair of ``sc`` has in flight at most: the PSNs its
    requester keeps in flight (None: no bound but the messages: UC and UD have no window,
    and a READ's responder sends its whole response at once)."""
    if sc.qp_type != "rc" or sc.op in ("read", "mixed"):
        return None
    if sc.recovery == defaults.RECOVERY:
        return MAX_UNACKED_PSNS
    return min(MAX_UNACKED_PSNS, bdp_of(sc, rtt_ns(sc, t)))


def set_recovery(contexts: Any, sc: Scenario, rtt: int) -> None:
    """The scenario's recovery mode on every device; selective repeat's BDP cap
    (``bdp_of``)."""
    if sc.recovery == defaults.RECOVERY:
        return
    bdp = bdp_of(sc, rtt)
    for ctx in contexts:
        ctx.set_recovery(sc.recovery, bdp_packets=bdp, loss_rule=sc.loss_rule)


def _post(sc: Scenario, f: Flow, i: int) -> None:
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
        grh = f.grh
        sges = ([grh.sge(0, GRH_BYTES)] if grh is not None else []) + [f.remote.sge(off, size)]
        f.qb.post_recv(RecvWR(wr_id=i, sg_list=sges))
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_SEND,
                              sg_list=[f.local.sge(off, size)], ah=f.ah,
                              remote_qpn=f.qb.qp_num, remote_qkey=QKEY))
    else:  # atomic: fetch-and-add 1 on the first 8 bytes of the remote buffer
        f.qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                              sg_list=[SGE(f.local.addr + off, 8, f.local.lkey)],
                              remote_addr=f.remote.addr, rkey=f.remote.rkey, compare_add=1))


def attach_tap(net: Any, spec: str, writer: Any) -> None:
    tap_port(net, spec).tap = writer


def _names(hosts: dict[str, Any], most: int = 12) -> str:
    names = list(hosts)
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


# -- the summary ----------------------------------------------------------------------------


def _percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, -(-int(q * len(sorted_values) * 1000) // 1000) - 1))
    return float(sorted_values[k])


def fct_stats(values: list[int]) -> dict[str, float]:
    v = sorted(values)
    return {"messages": len(v), "mean": sum(v) / len(v) if v else 0.0,
            "p50": _percentile(v, 0.5), "p99": _percentile(v, 0.99)}


def fabric_stats(net: Any, failures: Any = None) -> dict[str, Any]:
    """Drops, ECN marks, PFC frames and queue peaks: per switch port, per host, in total;
    with ``failures`` (``roce.emu.net.failures``) what the link failures did."""
    ports = {}
    tot = Counter()
    for sw in net.switches.values():
        for p in sw.ports:
            st = p.stats
            row = {"peer": p.wire.dst.name, "drops": st.drops,
                   "lossless_drops": st.lossless_drops, "ecn_marked": st.ecn_marked,
                   "trimmed": st.trimmed,
                   "pfc_pause_sent": p.pfc.pauses_sent if p.pfc else 0,
                   "pfc_xon_sent": p.pfc.xons_sent if p.pfc else 0,
                   "pfc_pause_received": p.pause.xoffs,
                   "paused_ns": p.pause.paused_ns_at(net.now),
                   "max_queue_bytes": p.max_queue_bytes,
                   "tx_frames": p.tx_frames, "rx_frames": p.rx_frames}
            ports[p.name] = row
            tot["drops"] += st.drops
            tot["ecn_marked"] += st.ecn_marked
            tot["trimmed"] += st.trimmed
            tot["pfc_frames"] += row["pfc_pause_sent"] + row["pfc_xon_sent"]
            tot["max_queue_bytes"] = max(tot["max_queue_bytes"], p.max_queue_bytes)
    hosts = {}
    for name, nic in net.hosts.items():
        tot["pfc_frames"] += nic.pfc_sent
        hosts[name] = {"pfc_pause_received": nic.pause.xoffs,
                       "paused_ns": nic.pause.paused_ns_at(net.now),
                       "pfc_sent": nic.pfc_sent, "tx_frames": nic.tx_frames,
                       "rx_frames": nic.rx_frames}
        if nic.cc is not None:
            cc = nic.cc.stats()
            hosts[name]["cc"] = cc
            tot["cnps_sent"] += cc["cnps_sent"]
            tot["cnps_received"] += cc["cnps_received"]
    link_lost = sum(w.stats.lost for w in net.wires)
    out = {"drops": tot["drops"], "ecn_marked": tot["ecn_marked"], "trimmed": tot["trimmed"],
           "pfc_frames": tot["pfc_frames"], "max_queue_bytes": tot["max_queue_bytes"],
           "cnps_sent": tot["cnps_sent"], "cnps_received": tot["cnps_received"],
           "link_lost": link_lost, "ports": ports, "hosts": hosts}
    corrupted = sum(w.stats.corrupted for w in net.wires)
    if corrupted:  # a run with --corrupt: caught by the ICRC, or (UET) by the port's FCS
        out["link_corrupted"] = corrupted
    if failures is not None:
        out["link_failures"] = failures.stats()
    return out


def stopped_why(sc: Scenario, net: Any, left: int) -> str:
    """Why the network stopped with ``left`` messages outstanding, in words."""
    timers = [d for d in (nic.device.deadline() for nic in net.hosts.values())
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


def _which(run: NetRun, bad: list[tuple[Flow, str]], most: int = 4) -> str:
    """`` (flows: A->B QP 0x11: ..., ...)`` naming the flows ``bad`` lists, when the run
    has more than one (with one, the count says it all)."""
    if len(run.flows) < 2 or not bad:
        return ""
    parts = [f"{run.names[f.index][0]}->{run.names[f.index][1]} QP 0x{f.qa.qp_num:x}: {what}"
             for f, what in bad[:most]]
    more = f"; {len(bad) - most} more flow(s)" if len(bad) > most else ""
    return " (" + "; ".join(parts) + more + ")"


def _verdict(run: NetRun, s: Summary, finished: bool, left: int) -> str:
    """Why the data did not check out ('' when it did): how many messages, and, with
    several flows, which flows lost, corrupted or did not complete them."""
    sc, flows = run.sc, run.flows
    total = sc.count * len(flows)
    ok = s.completed.get("IBV_WC_SUCCESS", 0)
    if not finished:
        bad = [(f, f"{sc.count - f.status.get('IBV_WC_SUCCESS', 0)} of {sc.count} not "
                   "completed") for f in flows if f.status.get("IBV_WC_SUCCESS", 0) < sc.count]
        return f"{left} of {total} message(s) did not complete" + _which(run, bad)
    if ok != s.posted or s.posted != total:
        bad = [(f, ", ".join(f"{k}={v}" for k, v in sorted(f.status.items())
                             if k != "IBV_WC_SUCCESS") or "not posted")
               for f in flows if f.status.get("IBV_WC_SUCCESS", 0) < sc.count]
        return (f"{total - ok} of {total} message(s) did not complete successfully"
                + _which(run, bad))
    if s.delivered != total:
        bad = [(f, f"{sc.count - n} of {sc.count} lost") for f in flows
               if (n := f.qb.core.counters.messages_executed) != sc.count]
        return (f"{total - s.delivered} of {total} message(s) never reached the responder"
                + _which(run, bad))
    bad = []
    for f in flows:
        slots = [f"{side} slot {j}" for side, buf in (("remote", memory_of(f.remote)),
                                                      ("local", memory_of(f.local)))
                 for j in f.expected.mismatched(side, buf)]
        if slots:
            bad.append((f, ", ".join(slots)))
    if not bad:
        return ""
    f, where = bad[0]
    src, dst = run.names[f.index]
    return (f"memory does not hold what the operations wrote ({len(bad)} of {len(flows)} "
            f"flow(s); first {src}->{dst} QP 0x{f.qa.qp_num:x}: {where}; message i uses slot "
            f"i mod {sc.slots})")


def network_totals(s: Summary, net: Any, cpu: float) -> None:
    """What every simulated run reports of its network once its QPs are counted (``s.bytes``
    and ``s.packets`` filled): virtual time, goodput, ICRC drops, each link's counters, and
    the speed of the run in packets and packet-hops per CPU-second."""
    s.virtual_ns = net.now
    s.goodput_gbps = s.bytes * 8 / s.virtual_ns if s.virtual_ns else 0.0
    for nic in net.hosts.values():
        device = getattr(nic, "device", None)  # a UET host has no RoCE device
        if device is not None:
            s.icrc_drops += device.counters.icrc_drops
    for w in net.wires:
        s.link[w.name] = asdict(w.stats)
    s.cpu_s = cpu
    s.packets_per_cpu_s = s.packets / cpu if cpu > 0 else 0.0
    s.hops = net.hops
    s.hops_per_cpu_s = s.hops / cpu if cpu > 0 else 0.0


def summarise(run: NetRun, cpu: float, finished: bool, left: int) -> Summary:
    sc, net, flows = run.sc, run.net, run.flows
    s = Summary(scenario=asdict(sc))
    status: Counter = Counter()
    naks: Counter = Counter()
    every: list[int] = []
    for f, (src, dst) in zip(flows, run.names):
        status.update(f.status)
        add_qp_counts(s, naks, [f.qa.core, f.qb.core])
        s.delivered += f.qb.core.counters.messages_executed
        fct = [c - p for p, c in zip(f.post_times, f.done_times)]
        every += fct
        s.flows.append({"src": src, "dst": dst, "qpn": f.qa.qp_num, "bytes": f.bytes,
                        "retransmitted": f.qa.core.counters.retransmitted,
                        "spurious_retransmissions": f.qb.core.counters.duplicate_requests,
                        "out_of_sequence": f.qb.core.counters.out_of_sequence,
                        "ce_received": f.qb.core.counters.ce_received,
                        "recv_completions": f.recv_done, "fct_ns": fct_stats(fct)})
    s.posted = sum(f.posted for f in flows)
    s.completed = dict(status)
    s.naks = dict(naks)
    s.bytes = sum(f.bytes for f in flows)
    network_totals(s, net, cpu)
    s.finished = finished
    s.outstanding = max(left, 0) if not finished else 0
    if not finished:
        s.stopped = stopped_why(sc, net, left)
    s.unverified = _verdict(run, s, finished, left)
    s.data_verified = not s.unverified
    s.fct_ns = fct_stats(every)
    if run.nics:
        s.fabric = run.fabric_stats()
        s.warnings = list(net.warnings)
    return s

