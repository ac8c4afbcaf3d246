"""``roce emulate --protocol uet``: a scenario's traffic as UET PDCs on the simulated network.

The topology, links, faults, switches (buffers, ECN, ECMP or spraying) and the traffic's
(source, destination) pairs are the RoCE runs' own (``roce.emu.net.topology``,
``roce.emu.net.runner``'s helpers); the hosts are ``UetHost``s.  Each pair gets ``qps``
PDCs; each PDC carries ``count`` messages of ``op`` (write, read or send) and ``size``
bytes, at most ``depth`` outstanding and never two at once in one buffer slot (RUD places a
message's packets in any order: two messages in one slot would leave it mixed).  When every
message completed (or failed) each PDC is closed.  The data is then checked as for RoCE
(``roce.emu.core.payload.Expected``: message ``i`` uses slot ``i % slots``; a SEND lands in
the receive buffer its first packet took) and the run summarised in
``roce.emu.scenario.Summary``, its ``uet`` part holding the PDS and SES counters.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from roce.emu import defaults
from roce.emu.budget import per_qp
from roce.emu.core.constants import ALL_ACCESS
from roce.emu.core.patterned import Patterned
from roce.emu.core.payload import Expected, fill
from roce.emu.net import schema
from roce.emu.net import topology as topo
from roce.emu.net.runner import (
    PATTERNED_OPS,
    fabric_stats,
    fct_stats,
    memory_of,
    options,
    topology_of,
    traffic_of,
)
from roce.emu.net.stages import Trimmer
from roce.emu.scenario import Scenario, Summary, kind
from roce.emu.uet import CLOSERS, PDC_MODES, uetframes
from roce.emu.uet.host import ENTROPY_MODES, UetHost
from roce.emu.uet.pds import PdsConfig
from roce.emu.uet.ses import AMO_BYTES, CARRIES, FAILED, KINDS, RI_MAX
from roce.errors import UsageError
from roce.families.uet import codes as t

MODES = dict(zip(PDC_MODES, (t.RUD_REQ, t.ROD_REQ, t.RUDI_REQ, t.UUD_REQ)))


@dataclass(frozen=True)
class UetOptions:
    """What a UET run adds to the scenario: the PDC mode and the entropy of its packets."""

    mode: str = PDC_MODES[0]  # rud | rod | rudi | uud
    entropy: str = ENTROPY_MODES[0]  # pdc | packet | reps (roce.emu.uet.host)
    trim: bool = False  # switches trim what they would drop (roce.emu.net.stages.Trimmer)
    close: str = CLOSERS[0]  # initiator | target: who starts each PDC's clear and close
    rendezvous: int = 0  # SENDs longer than this many bytes are rendezvous sends (0: none)


# Scenario fields a UET run has nothing for: (field, option, why).  Refused when not at
# their defaults, rather than silently ignored.
NOT_FOR_UET = (
    ("qp_type", "--qp-type", "UET has PDCs, not queue pairs"),
    ("recovery", "--recovery", "the PDS has its own (SACK, NACK, timeout)"),
    ("loss_rule", "--loss-rule", "the PDS finds losses with RACK over its SACK bitmaps"),
    ("psn", "--psn", "a PDC draws its start PSN"),
    ("retry_cnt", "--retry-cnt", "the PDS retries until its PDC fails"),
    ("rnr_retry", "--rnr-retry", "UET has no RNR NAK"),
    ("timeout", "--timeout", "the PDS's rto timer is its own"),
    ("storm", "--pfc-storm", "UET hosts send no PFC"),
    ("link_down", "--link-down", "not with --protocol uet yet"),
    ("ib_routing", "--ib-routing", "only with --protocol ib"),
    ("ib_cc", "--ib-cc", "only with --protocol ib"),
    ("ib_lmc", "--ib-lmc", "only with --protocol ib"),
    ("ib_ar", "--ib-ar", "only with --protocol ib"),
)


def refuse(sc: Scenario) -> None:
    """A UsageError naming the first option a UET run cannot honour."""
    base = Scenario()
    if sc.op not in (*KINDS, "mixed"):
        raise UsageError(f"--op {sc.op}: --protocol uet runs {', '.join(KINDS)} or mixed")
    for name, opt, why in NOT_FOR_UET:
        if getattr(sc, name) != getattr(base, name):
            raise UsageError(f"{opt}: not with --protocol uet ({why})")


def net_options(sc: Scenario, trimmer: Trimmer | None) -> topo.NetOptions:
    """The switched network of a UET run: RoCE's options, the switches trimming with
    ``trimmer``, and a corrupted frame discarded by the receiving port's FCS check (UET's
    packets carry no end-to-end CRC that would catch it at the endpoint)."""
    o = replace(options(sc, direct=False), trim=trimmer)
    return replace(o, faults={**o.faults, "fcs": True}) if o.faults.get("corrupt") else o


def check_options(opts: UetOptions) -> None:
    """A UsageError naming a PDC mode or entropy that does not exist, or a rendezvous
    threshold or closing end that cannot be."""
    if opts.mode not in MODES or opts.entropy not in ENTROPY_MODES:
        raise UsageError(f"--pdc-mode {opts.mode} / --entropy {opts.entropy}: "
                         f"{'|'.join(MODES)} and {'|'.join(ENTROPY_MODES)}")
    if not 0 <= opts.rendezvous <= 0xFFFFFFFF:
        raise UsageError(f"--rendezvous {opts.rendezvous}: 0 to {0xFFFFFFFF} bytes (the "
                         "eager length is 32 bits)")
    if opts.close not in CLOSERS:
        raise UsageError(f"--pdc-close {opts.close}: {'|'.join(CLOSERS)}")
    if opts.close == "target" and opts.mode in ("rudi", "uud"):
        raise UsageError(f"--pdc-close target: --pdc-mode {opts.mode} has no PDC on the "
                         "wire to close")


def uet_counters(hosts: Any) -> dict[str, Any]:
    """The PDS and SES counters of ``hosts`` (``UetHost``s), summed: ``pds``,
    ``nacks_received`` and ``nacks_sent`` by code, ``ses``, ``ses_errors`` by reason,
    ``ses_refused`` by return code,
    ``not_uet`` (frames received that were not UET packets for their host) and ``reps``
    (REPS's entropy counters, empty without ``--entropy reps``)."""
    pds: Counter = Counter()
    nacks: Counter = Counter()
    nacks_sent: Counter = Counter()
    ses: Counter = Counter()
    errors: Counter = Counter()
    refused: Counter = Counter()
    reps: Counter = Counter()
    not_uet = 0
    for h in hosts:
        c, sc_ = h.pds.counters, h.ses.counters
        pds.update({k: v for k, v in asdict(c).items() if isinstance(v, int)})
        ses.update({k: v for k, v in asdict(sc_).items() if isinstance(v, int)})
        nacks.update(c.nacks_received)
        nacks_sent.update(c.nacks_sent)
        errors.update(sc_.errors)
        refused.update(sc_.refused)
        not_uet += h.not_uet
        if h.reps is not None:
            reps.update(h.reps.stats())
    return {"pds": dict(pds), "nacks_received": dict(nacks), "nacks_sent": dict(nacks_sent),
            "ses": dict(ses), "ses_errors": dict(errors), "ses_refused": dict(refused),
            "not_uet": not_uet,
            "reps": dict(reps)}


@dataclass(eq=False)
class Flow:
    """One PDC: its initiator and target hosts, buffers and what they must hold."""

    index: int
    src: UetHost
    dst: UetHost
    pdc: Any
    local: Any
    remote: Any
    expected: Expected
    ri: int = 0  # its receive queue at the target (SEND): one per flow into a host
    posted: int = 0
    done: int = 0
    ok: int = 0
    statuses: Counter = field(default_factory=Counter)  # completions by status
    bytes: int = 0
    busy: set[int] = field(default_factory=set)  # slots of messages in flight
    slots_of: dict[int, tuple[int, ...]] = field(default_factory=dict)  # message -> its slots
    post_times: dict[int, int] = field(default_factory=dict)
    fct: list[int] = field(default_factory=list)
    msg_of: dict[int, int] = field(default_factory=dict)  # SES message ID -> message


class UetRun:
    """One run, built and ready (``net``, ``flows``); ``run()`` returns its summary."""

    def __init__(self, sc: Scenario, opts: UetOptions = UetOptions(),
                 topology: topo.Topology | None = None, real_memory: bool = False) -> None:
        sc = replace(sc, protocol="uet")
        # WRITE and SEND copy seeded slots: the regions hold patterns, not buffers
        # (``roce.emu.core.patterned``, as RoCE's ``NetRun``), unless ``real_memory``
        self.patterned = not real_memory and sc.op in PATTERNED_OPS
        sc.check(sides=2, patterned=self.patterned)
        refuse(sc)
        if sc.generated:
            raise UsageError("--workload and --collective over UET run through the "
                             "workload driver (roce.emu.uet.uettransport.UetTransport)")
        check_options(opts)
        carries = CARRIES[MODES[opts.mode]]
        if not all(kind(sc.op, i) in carries for i in range(4)):
            why = {"rudi": "idempotent operations only", "uud": "unreliable: nothing "
                   "would complete a lost READ or atomic or free a lost SEND's buffer"
                   }.get(opts.mode, "")
            raise UsageError(f"--op {sc.op}: --pdc-mode {opts.mode} carries "
                             f"{', '.join(carries)} ({why})")
        t_ = self.topology = topology if topology is not None else topology_of(sc)
        topo.oversubscribe(t_, sc.oversubscription, sc.rate_gbps)
        schema.check_flows(t_, sc.traffic, sc.qps,
                           per_qp(sc.size, sc.slots, 2, self.patterned),
                           sc.topology_file or f"--topology {sc.topology}")
        if not t_.switches:
            from roce.emu.net.runner import refuse_inapplicable
            refuse_inapplicable(sc, t_, True)
            if opts.trim:
                raise UsageError("--trim: the topology has no switch to trim packets; two "
                                 "hosts through one switch: --topology incast:1")
        if sc.time_limit_ns is None:
            sc = replace(sc, time_limit_ns=defaults.SWITCHED_TIME_LIMIT_NS)
        self.sc, self.opts = sc, opts
        config = PdsConfig(mode=MODES[opts.mode])
        marking = uetframes.Marking()
        trimmer = Trimmer() if opts.trim else None

        def host(net: Any, name: str, ip: str) -> UetHost:
            return UetHost(net, name, ip, config, sc.mtu, opts.entropy, marking,
                           trimmer.dscp if trimmer is not None else None, sc.cc,
                           opts.rendezvous)

        net = self.net = topo.build(t_, net_options(sc, trimmer), host)
        pairs = traffic_of(sc, t_, net)
        if len(pairs) > 1:
            sc.check(sides=2, qps=sc.qps * len(pairs), patterned=self.patterned)
        self.ready: list[UetHost] = []
        for h in net.hosts.values():
            h.ready = self.ready
        self.flows: list[Flow] = []
        self.names: list[tuple[str, str]] = []
        self.by_pdc: dict[tuple[str, int], Flow] = {}  # (initiator IP, its PDC ID) -> flow
        into: dict[str, int] = {}  # host -> the last resource index its flows took
        for src, dst in pairs:
            a, b = net.hosts[src], net.hosts[dst]
            for _ in range(sc.qps):
                i = len(self.flows)
                n = sc.slot * sc.slots
                if self.patterned:
                    local = a.space.register(a.pd, n, ALL_ACCESS, content=Patterned(
                        sc.seed, i, "local", sc.slot, sc.slots))
                    remote = b.space.register(b.pd, n, ALL_ACCESS, content=Patterned(
                        sc.seed, i, "remote", sc.slot, sc.slots, "local"))
                else:
                    local = a.space.register(a.pd, n, ALL_ACCESS)
                    remote = b.space.register(b.pd, n, ALL_ACCESS)
                    fill(local.buf, sc.seed, i, "local", sc.size, sc.slots)
                    fill(remote.buf, sc.seed, i, "remote", sc.size, sc.slots)
                ri = into[dst] = into.get(dst, -1) + 1
                if ri > RI_MAX:
                    raise UsageError(f"--protocol uet: host {dst} would receive {ri + 1} "
                                     f"flows, more than its {RI_MAX + 1} receive queues "
                                     "(12-bit resource indexes)")
                f = Flow(i, a, b, a.open(b.ip), local, remote,
                         Expected(sc.seed, i, sc.size, sc.slots), ri)
                self.flows.append(f)
                self.names.append((src, dst))
                self.by_pdc[a.ip, f.pdc.id] = f

    # -- posting and completing ----------------------------------------------------------

    def _post_more(self, f: Flow) -> None:
        sc, now = self.sc, self.net.now
        while f.posted < sc.count and f.posted - f.done < sc.depth:
            i = f.posted
            j = i % sc.slots
            what = kind(sc.op, i)
            # an atomic adds to the remote buffer's first 8 bytes (slot 0), as RoCE's do,
            # and fetches into its own slot: it waits for both, and they for it, so that
            # the check follows the order the target executed them in
            slots = (j, 0) if what == "atomic" else (j,)
            if any(x in f.busy for x in slots):
                break
            off = j * sc.slot
            if what == "send":
                f.dst.ses.post_recv(i, f.remote, f.remote.addr + off, sc.size, f.ri)
            if what == "atomic":
                m = f.src.ses.post(what, f.pdc, i, f.local, f.local.addr + off, AMO_BYTES,
                                   f.remote.rkey, f.remote.addr, f.ri)
            else:
                m = f.src.ses.post(what, f.pdc, i, f.local, f.local.addr + off, sc.size,
                                   f.remote.rkey, f.remote.addr + off, f.ri)
            f.msg_of[m.msg_id] = i
            f.busy.update(slots)
            f.slots_of[i] = slots
            f.post_times[i] = now
            f.posted += 1
        f.src.changed(now)

    def _completions(self) -> list[Flow]:
        touched: dict[int, Flow] = {}
        now, sc = self.net.now, self.sc
        for h in dict.fromkeys(self.ready):
            for c in h.ses.recv_completions:
                pdc = h.pds.pdcs[c.pdc]
                f = self.by_pdc[pdc.peer, pdc.peer_id]
                f.expected.received(f.msg_of[c.msg_id], c.wr_id)
            h.ses.recv_completions.clear()
            for c in h.ses.completions:
                f = self.by_pdc[h.ip, c.pdc]
                f.done += 1
                f.busy.difference_update(f.slots_of.pop(c.wr_id, ()))
                f.fct.append(now - f.post_times.pop(c.wr_id))
                f.statuses[c.status] += 1
                if c.ok:
                    f.ok += 1
                    f.bytes += c.bytes
                    if c.kind != "send":
                        f.expected.apply(c.kind, c.wr_id)
                elif c.status == FAILED and f.posted < sc.count:  # a failed PDC: no more work
                    f.done += sc.count - f.posted
                    f.posted = sc.count
                touched[f.index] = f
            h.ses.completions.clear()
        self.ready.clear()
        return list(touched.values())

    def run(self) -> Summary:
        sc, net = self.sc, self.net
        limit = sc.time_limit_ns
        cpu0 = time.process_time()
        left = sc.count * len(self.flows)
        for f in self.flows:
            self._post_more(f)
        finished = True
        while left > 0:
            for f in self._completions():
                self._post_more(f)
            left = sum(sc.count - f.done for f in self.flows)
            if left <= 0:
                break
            if not net.run_until_any(self.ready, limit):
                finished = False
                break
        end = net.now  # the work is done (or the limit passed): the run's virtual time
        for f in self.flows:  # close every PDC; let the handshakes finish
            target = f.dst.pds.by_peer.get((f.src.ip, f.pdc.id))
            if self.opts.close == "target" and target is not None \
                    and target.state == "established":
                # the target asks for a clear command, then for the close
                f.dst.pds.request_clear(target)
                f.dst.pds.request_close(target)
                f.dst.changed(net.now)
            else:
                f.src.pds.close(f.pdc)
                f.src.changed(net.now)
        net.run_until_any([], limit)  # (timers a PDC no longer needs fire here, idle)
        self._completions()
        return self._summary(time.process_time() - cpu0, finished, end)

    # -- the summary ------------------------------------------------------------------------

    def _verdict(self, finished: bool) -> str:
        sc = self.sc
        total = sc.count * len(self.flows)
        ok = sum(f.ok for f in self.flows)
        if ok != total:
            if not finished:
                return f"{total - ok} of {total} message(s) did not complete"
            statuses: Counter = Counter()
            for f in self.flows:
                statuses.update(f.statuses)
            statuses.pop("OK", None)
            return (f"{total - ok} of {total} message(s) failed (" + ", ".join(
                f"{k}={v}" for k, v in sorted(statuses.items())) + ")")
        if self.opts.mode == "uud":
            # a lost packet's slot may be written again by a later message: the count of
            # messages the targets executed is what tells
            done = sum(h.ses.counters.messages_executed for h in self.net.hosts.values())
            if done < total:
                return (f"{total - done} of {total} message(s) lost in part or whole (UUD: "
                        "nothing resends them)")
        for f in self.flows:
            for side, mr in (("remote", f.remote), ("local", f.local)):
                bad = f.expected.mismatched(side, memory_of(mr))
                if bad:
                    src, dst = self.names[f.index]
                    return (f"memory does not hold what the operations wrote (first "
                            f"{src}->{dst} PDC {f.pdc.id}: {side} slot {bad[0]})")
        return ""

    def _summary(self, cpu: float, finished: bool, end: int) -> Summary:
        sc, net = self.sc, self.net
        s = Summary(scenario=asdict(sc))
        u = uet_counters(net.hosts.values())
        pds, ses, nacks = Counter(u["pds"]), Counter(u["ses"]), u["nacks_received"]
        every: list[int] = []
        for f, (src, dst) in zip(self.flows, self.names):
            every += f.fct
            s.flows.append({"src": src, "dst": dst, "pdc": f.pdc.id, "bytes": f.bytes,
                            "state": f.pdc.state, "fct_ns": fct_stats(f.fct)})
        s.posted = sum(f.posted for f in self.flows)
        ok = sum(f.ok for f in self.flows)
        # by status: OK, the return code a target refused a message with, or FAILED (the
        # PDC failed); what was posted and never completed is ``outstanding``
        statuses: Counter = Counter()
        for f in self.flows:
            statuses.update(f.statuses)
        s.completed = {"OK": ok, **{k: v for k, v in sorted(statuses.items()) if k != "OK"}}
        s.bytes = sum(f.bytes for f in self.flows)
        s.delivered = ses["messages_executed"]  # at the targets: placed, or READs answered
        s.packets = pds["requests_sent"] + pds["retransmitted"]
        s.retransmitted = pds["retransmitted"]
        s.timeouts = pds["timeouts"]
        s.naks = dict(nacks)
        s.ooo_accepted = pds["out_of_order"]
        s.spurious_retransmissions = pds["duplicates"]
        s.virtual_ns = end
        s.goodput_gbps = s.bytes * 8 / s.virtual_ns if s.virtual_ns else 0.0
        for w in net.wires:
            s.link[w.name] = asdict(w.stats)
        s.cpu_s = cpu
        s.packets_per_cpu_s = s.packets / cpu if cpu > 0 else 0.0
        s.hops = net.hops
        s.hops_per_cpu_s = s.hops / cpu if cpu > 0 else 0.0
        s.finished = finished
        s.outstanding = sum(f.posted - f.done for f in self.flows) + \
            sum(sc.count - f.posted for f in self.flows)
        if not finished:
            s.stopped = (f"the virtual time limit ({sc.time_limit_ns / 1e9:g} s) ran out "
                         f"with {s.outstanding} message(s) outstanding")
        s.unverified = self._verdict(finished)
        s.data_verified = not s.unverified
        s.fct_ns = fct_stats(every)
        s.fabric = fabric_stats(net)
        s.warnings = list(net.warnings)
        lost = {}
        if self.opts.mode == "uud":  # what was sent once and never arrived
            # the targets keep no per-packet state, but their SES knows the pieces it
            # placed: a duplicate is one it placed before (``repeated``)
            lost = {"packets": pds["requests_sent"] - pds["received"] + ses["repeated"],
                          "trimmed": pds["uud_lost"],
                          "messages": s.posted - ses["messages_executed"]}
        controls: Counter = Counter()
        for h in net.hosts.values():
            controls.update(h.pds.counters.controls_sent)
        s.uet = {"pdc_mode": self.opts.mode, "entropy": self.opts.entropy,
                 "rendezvous": self.opts.rendezvous,
                 "close": self.opts.close, "controls_sent": dict(controls),
                 "trim": self.opts.trim,
                 "pds": u["pds"], "nacks_received": u["nacks_received"],
                 "nacks_sent": u["nacks_sent"], "ses": u["ses"],
                 "ses_errors": u["ses_errors"], "ses_refused": u["ses_refused"],
                 "pdcs_closed": sum(f.pdc.state == "closed" for f in self.flows),
                 "cc": sc.cc.algorithm if sc.cc is not None else "none",
                 "not_uet": u["not_uet"],
                 **({"uud_lost": lost} if lost else {})}
        if u["reps"]:
            s.uet["reps"] = u["reps"]
        return s


def run_uet(sc: Scenario, opts: UetOptions = UetOptions(), record: Any = None,
            topology: topo.Topology | None = None) -> Summary:
    """Run ``sc`` with UET endpoints (``record``: a writer of every frame a host
    receives)."""
    r = UetRun(sc, opts, topology)
    if record is not None:
        r.net.recorders.append(record)
    return r.run()


__all__ = ["MODES", "NOT_FOR_UET", "UetOptions", "UetRun", "check_options", "refuse", "run_uet",
           "uet_counters"]
