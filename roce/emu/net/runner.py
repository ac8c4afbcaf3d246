"""Run a workload over a switched network and summarise it (``roce emulate --topology``).

Every (source, destination) pair of the traffic gets ``qps`` RC connections; each source QP
posts ``count`` messages of ``op``/``size`` keeping ``depth`` outstanding, exactly as the
two-host scenario does (``roce.emu.scenario``: same posting and data checks).  The summary adds
the ``fabric`` object (drops, ECN marks, PFC frames, queue peaks, per switch port) and message
completion times (post to completion, per flow and overall).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from roce.emu.budget import per_qp
from roce.emu.core.constants import ALL_ACCESS, QPType, WCStatus
from roce.emu.core.payload import Expected, fill
from roce.emu.core.qp import QPCap
from roce.emu.core.verbs import CQ, MR, PD, QP, QPInitAttr, connect
from roce.emu.net import schema
from roce.emu.net import topology as topo
from roce.emu.net.observe import tap_port
from roce.emu.net.stages import DSCP_ROCE, PRIO_ROCE, ROCE_TRAFFIC_CLASS, EcnConfig
from roce.emu.scenario import Scenario, Summary, _Flow, _post, add_qp_counts, kind, set_recovery


@dataclass(eq=False)
class NetFlow(_Flow):
    """A two-host scenario flow plus the completion queues the network runner times."""

    cq_a: Any = None
    cq_b: Any = None


@dataclass
class NetScenario(Scenario):
    topology: str = "incast:2"
    topology_file: str | None = None
    traffic: str | None = None  # None: the topology's default; permutation; all-to-all
    buffer: int = 12 << 20
    ecn: str = "on"  # on (rate-scaled defaults), off, or KMIN,KMAX,PMAX
    pfc: bool = True
    lb: str = "ecmp"
    storm: list[str] = field(default_factory=list)  # hosts that emit PFC continuously
    cc: Any = None  # roce.emu.cc.CcConfig for every host; None: no congestion control
    time_limit_ns: int = 10_000_000_000


@dataclass
class NetSummary(Summary):
    fabric: dict[str, Any] = field(default_factory=dict)
    fct_ns: dict[str, float] = field(default_factory=dict)
    flows: list[dict[str, Any]] = field(default_factory=list)
    hops: int = 0
    hops_per_cpu_s: float = 0.0

    def text(self) -> str:
        s = self.scenario
        fab = self.fabric
        lines = super().text().splitlines()
        warning = [] if self.finished else [lines.pop()]  # the time-limit warning stays last
        lines[1] = (f"network       {s['topology_file'] or s['topology']}, "
                    f"{len(self.flows)} flows, {s['rate_gbps']:g} Gb/s, {s['delay_ns']} ns, "
                    f"lb={s['lb']} pfc={'on' if s['pfc'] else 'off'} ecn={s['ecn']}")
        extra = [
            f"fabric        drops {fab['drops']}, ECN marked {fab['ecn_marked']}, PFC frames "
            f"{fab['pfc_frames']}, max queue {fab['max_queue_bytes']} bytes, CNPs "
            f"{fab['cnps_sent']}",
            f"completion    mean {self.fct_ns.get('mean', 0) / 1e3:.1f} us, p50 "
            f"{self.fct_ns.get('p50', 0) / 1e3:.1f} us, p99 {self.fct_ns.get('p99', 0) / 1e3:.1f}"
            " us",
            f"hops          {self.hops} ({self.hops_per_cpu_s:,.0f} packet-hops per CPU-second)",
        ]
        return "\n".join(lines + extra + warning)


class _TimedCQ(CQ):
    """A CQ that tells the runner when it gets an entry and stamps the virtual time."""

    def __init__(self, ctx: Any, ready: list, clock: Callable[[], int]) -> None:
        super().__init__(ctx, 1 << 16)
        self.ready = ready
        self.clock = clock
        self.times: list[int] = []

    def push(self, wc: Any) -> None:
        super().push(wc)
        self.times.append(self.clock())
        self.ready.append(self)


def options(sc: NetScenario) -> topo.NetOptions:
    faults = {k: v for k, v in (("loss", sc.loss), ("burst_p", sc.burst),
                                ("reorder", sc.reorder), ("dup", sc.dup),
                                ("corrupt", sc.corrupt)) if v}
    ecn = (EcnConfig() if sc.ecn == "on" else topo.parse_ecn(sc.ecn))
    return topo.NetOptions(seed=sc.seed, rate_gbps=sc.rate_gbps, delay_ns=sc.delay_ns,
                           faults=faults, buffer=sc.buffer, ecn=ecn, pfc=sc.pfc, lb=sc.lb,
                           max_frame=sc.mtu + 128)


def topology_of(sc: NetScenario) -> topo.Topology:
    return topo.load(sc.topology_file) if sc.topology_file else topo.parse(sc.topology)


def traffic_of(sc: NetScenario, t: topo.Topology, net: Any) -> list[tuple[str, str]]:
    if sc.traffic == "all-to-all":
        return topo.all_to_all(t)
    if sc.traffic == "permutation" or (sc.traffic is None and not t.traffic):
        return topo.permutation(t, net.child_rng())
    return t.traffic


class NetRun:
    """One run, built and ready: ``net`` (the ``Network``), ``flows`` and their ``names``
    ((source, destination) host names) can be inspected or hooked before ``run()``.
    ``topology``: one already loaded (the command's, with its drop filters compiled);
    by default ``sc``'s."""

    def __init__(self, sc: NetScenario, record: Any = None,
                 taps: dict[str, Any] | None = None, trace: Any = None,
                 topology: topo.Topology | None = None) -> None:
        from roce.errors import UsageError

        if sc.qp_type != "rc":
            raise UsageError(f"--qp-type {sc.qp_type}: a switched network (--topology) runs RC "
                             "queue pairs")
        sc.check(sides=2)  # the two-host scenario's limits (--op, --size, memory) hold here
        self.sc = sc
        self.trace = trace
        t = self.topology = topology if topology is not None else topology_of(sc)
        # every flow's QPs and buffers, and the network, fit before any is made
        schema.check_flows(t, sc.traffic, sc.qps, per_qp(sc.size, sc.slots, 2),
                           sc.topology_file or f"--topology {sc.topology}")
        net = self.net = topo.build(t, options(sc))
        if record is not None:
            net.recorders.append(record)
        for spec, writer in (taps or {}).items():
            attach_tap(net, spec, writer)
        pairs = traffic_of(sc, t, net)
        for name in sc.storm:
            if name not in net.hosts:
                raise UsageError(f"--pfc-storm {name}: no such host")
            net.hosts[name].storm(PRIO_ROCE)
        tclass = ROCE_TRAFFIC_CLASS
        if sc.cc is not None:
            tclass = DSCP_ROCE << 2 | sc.cc.ecn  # --ecn-codepoint
            if sc.cc.enabled:
                for nic in net.hosts.values():
                    nic.ctx.set_congestion_control(sc.cc)
        # selective repeat's BDP cap: a path of up to 4 links (leaf-spine), store-and-forward
        set_recovery([nic.ctx for nic in net.hosts.values()], sc,
                     8 * sc.delay_ns + 6 * (sc.mtu + 100) * 8 // max(1, int(sc.rate_gbps)))
        self.ready: list[_TimedCQ] = []
        slot = sc.slot
        self.flows: list[NetFlow] = []
        self.names: list[tuple[str, str]] = []
        self.post_times: dict[int, list[int]] = {}
        self.recv_done: dict[int, int] = {}
        pds: dict[str, PD] = {}
        for src, dst in pairs:
            a, b = net.hosts[src].ctx, net.hosts[dst].ctx
            pd_a = pds.setdefault(src, PD(a))
            pd_b = pds.setdefault(dst, PD(b))
            for _ in range(sc.qps):
                cq_a = _TimedCQ(a, self.ready, lambda: net.now)
                cq_b = _TimedCQ(b, self.ready, lambda: net.now)
                cap = QPCap(max_send_wr=max(sc.depth, 1), max_recv_wr=max(sc.depth, 1) * 2)
                qa = QP(pd_a, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_a,
                                         recv_cq=cq_a, cap=cap))
                qb = QP(pd_b, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_b,
                                         recv_cq=cq_b, cap=cap))
                connect(qa, qb, path_mtu=sc.mtu, psn_a=sc.psn, psn_b=sc.psn,
                        timeout=sc.timeout, retry_cnt=sc.retry_cnt, rnr_retry=sc.rnr_retry,
                        traffic_class=tclass, resolve=True)
                # the two-host scenario's buffers and data model (roce.emu.core.payload)
                index, slots = len(self.flows), sc.slots
                local = MR(pd_a, slot * slots, ALL_ACCESS)
                remote = MR(pd_b, slot * slots, ALL_ACCESS)
                fill(local.buf, sc.seed, index, "local", sc.size, slots)
                fill(remote.buf, sc.seed, index, "remote", sc.size, slots)
                f = NetFlow(index, qa, qb, local, remote,
                            Expected(sc.seed, index, sc.size, slots), cq_a=cq_a, cq_b=cq_b)
                self.flows.append(f)
                self.names.append((src, dst))
                self.post_times[id(f)] = []
                self.recv_done[id(f)] = 0

    def post(self, f: NetFlow) -> None:
        """Post ``f``'s next message, as the two-host scenario posts it."""
        _post(self.sc, f, f.posted, None)
        f.posted += 1

    def run(self, progress: Callable[[int, int], None] | None = None) -> NetSummary:
        sc, net, flows, ready = self.sc, self.net, self.flows, self.ready
        by_cq = {id(f.cq_a): f for f in flows}
        by_recv_cq = {id(f.cq_b): f for f in flows}
        total = sc.count * len(flows)
        if self.trace is not None:
            self.trace.start(net, flows, self.names)
        cpu0 = time.process_time()

        def post_more(f: NetFlow) -> None:
            while f.posted < sc.count and f.posted - f.done < sc.depth:
                self.post(f)
                self.post_times[id(f)].append(net.now)

        for f in flows:
            post_more(f)
        finished = True
        done = 0
        while True:
            while ready:
                cq = ready.pop()
                f = by_cq.get(id(cq))
                if f is None:  # receive completions: counted (exactly-once checks)
                    rf = by_recv_cq[id(cq)]
                    self.recv_done[id(rf)] += len(cq.poll(1 << 16))
                    continue
                for wc in cq.poll(1 << 16):
                    f.done += 1
                    done += 1
                    f.status[WCStatus(wc.status).name] += 1
                    f.bytes += wc.byte_len
                    if wc.status == WCStatus.IBV_WC_SUCCESS:
                        f.expected.apply(kind(sc.op, wc.wr_id), wc.wr_id)
                    else:
                        f.posted = sc.count
                post_more(f)
            if progress is not None:
                progress(done, total)
            if all(f.done >= f.posted and f.posted >= sc.count for f in flows):
                break
            if not net.run_until_any(ready, sc.time_limit_ns):
                finished = False
                if net.events:  # the limit ended the run, not a lack of events
                    net.now = max(net.now, sc.time_limit_ns)
                break
        cpu = time.process_time() - cpu0
        if self.trace is not None:
            self.trace.finish(net)
        return summarise(sc, net, flows, self.names, self.post_times, cpu, finished,
                         self.recv_done)


def run_network(sc: NetScenario, record: Any = None, taps: dict[str, Any] | None = None,
                trace: Any = None,
                progress: Callable[[int, int], None] | None = None) -> NetSummary:
    return NetRun(sc, record, taps, trace).run(progress)


def attach_tap(net: Any, spec: str, writer: Any) -> None:
    tap_port(net, spec).tap = writer


def _percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, -(-int(q * len(sorted_values) * 1000) // 1000) - 1))
    return float(sorted_values[k])


def _fct(values: list[int]) -> dict[str, float]:
    v = sorted(values)
    return {"messages": len(v), "mean": sum(v) / len(v) if v else 0.0,
            "p50": _percentile(v, 0.5), "p99": _percentile(v, 0.99)}


def fabric_stats(net: Any) -> dict[str, Any]:
    ports = {}
    tot = Counter()
    for sw in net.switches.values():
        for p in sw.ports:
            st = p.stats
            row = {"peer": p.wire.dst.name, "drops": st.drops,
                   "lossless_drops": st.lossless_drops, "ecn_marked": st.ecn_marked,
                   "pfc_pause_sent": p.pfc.pauses_sent if p.pfc else 0,
                   "pfc_xon_sent": p.pfc.xons_sent if p.pfc else 0,
                   "pfc_pause_received": p.pause.xoffs,
                   "paused_ns": p.pause.paused_ns_at(net.now),
                   "max_queue_bytes": p.max_queue_bytes,
                   "tx_frames": p.tx_frames, "rx_frames": p.rx_frames}
            ports[p.name] = row
            tot["drops"] += st.drops
            tot["ecn_marked"] += st.ecn_marked
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
    return {"drops": tot["drops"], "ecn_marked": tot["ecn_marked"],
            "pfc_frames": tot["pfc_frames"], "max_queue_bytes": tot["max_queue_bytes"],
            "cnps_sent": tot["cnps_sent"], "cnps_received": tot["cnps_received"],
            "link_lost": link_lost, "ports": ports, "hosts": hosts}


def summarise(sc: NetScenario, net: Any, flows: list[NetFlow], names: list[tuple[str, str]],
              post_times: dict[int, list[int]], cpu: float, finished: bool,
              recv_done: dict[int, int] | None = None) -> NetSummary:
    s = NetSummary(scenario=asdict(sc))
    status: Counter = Counter()
    naks: Counter = Counter()
    every: list[int] = []
    for f, (src, dst) in zip(flows, names):
        status.update(f.status)
        add_qp_counts(s, naks, [f.qa.core, f.qb.core])
        fct = [c - p for p, c in zip(post_times[id(f)], f.cq_a.times)]
        every += fct
        s.flows.append({"src": src, "dst": dst, "qpn": f.qa.qp_num, "bytes": f.bytes,
                        "retransmitted": f.qa.core.counters.retransmitted,
                        "spurious_retransmissions": f.qb.core.counters.duplicate_requests,
                        "out_of_sequence": f.qb.core.counters.out_of_sequence,
                        "ce_received": f.qb.core.counters.ce_received,
                        "recv_completions": (recv_done or {}).get(id(f), 0),
                        "fct_ns": _fct(fct)})
    s.posted = sum(f.posted for f in flows)
    s.completed = dict(status)
    s.naks = dict(naks)
    s.bytes = sum(f.bytes for f in flows)
    s.virtual_ns = net.now
    s.goodput_gbps = s.bytes * 8 / s.virtual_ns if s.virtual_ns else 0.0
    for nic in net.hosts.values():
        s.icrc_drops += nic.device.counters.icrc_drops
    for w in net.wires:
        s.link[w.name] = asdict(w.stats)
    ok = status.get("IBV_WC_SUCCESS", 0)
    s.data_verified = finished and ok == s.posted and all(
        f.expected.matches("remote", f.remote.buf) and f.expected.matches("local", f.local.buf)
        for f in flows)
    s.cpu_s = cpu
    s.packets_per_cpu_s = s.packets / cpu if cpu > 0 else 0.0
    s.hops = net.hops
    s.hops_per_cpu_s = s.hops / cpu if cpu > 0 else 0.0
    s.finished = finished
    s.fabric = fabric_stats(net)
    s.fct_ns = _fct(every)
    return s
