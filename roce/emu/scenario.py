"""What an emulator run is and what it reports: ``Workload`` (what both ends of a run agree
on), ``Scenario`` (a workload on the simulated network: links, topology, congestion control)
and ``Summary`` (the one model of every run's result, simulated or across a real link, with
its one text form).

Defaults come from ``roce.emu.defaults``; ``Workload.check`` refuses what cannot run before
any memory is taken.  The runner (``roce.emu.net.runner.run_scenario``) turns a scenario into
a summary; ``roce emulate`` prints it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields

from roce.emu import budget, defaults
from roce.emu.cc.algorithms import CcConfig, check_protocol
from roce.emu.core.constants import QPType
from roce.emu.core.payload import slot_bytes, slots_for
from roce.emu.core.recovery import LOSS_RULES, MODES
from roce.errors import UsageError
from roce.psn import PSN_MASK

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

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
    """What to run, wherever it runs (the simulated network or a real link)."""

    op: str = defaults.OP
    size: int = defaults.SIZE
    count: int = defaults.COUNT
    mtu: int = defaults.MTU
    qps: int = defaults.QPS
    depth: int = defaults.DEPTH
    seed: int = defaults.SEED
    psn: int = defaults.PSN
    timeout: int = defaults.ACK_TIMEOUT_SIMULATED
    retry_cnt: int = defaults.RETRY_CNT
    rnr_retry: int = defaults.RNR_RETRY
    qp_type: str = defaults.QP_TYPE
    recovery: str = defaults.RECOVERY  # gbn | sr (roce.emu.core.recovery)
    loss_rule: str = defaults.LOSS_RULE  # sr's loss rule (roce.emu.core.recovery)

    def check(self, sides: int = 2, qps: int | None = None, patterned: bool = False) -> None:
        """Refuse what cannot run (``UsageError`` naming the option), before any memory is
        taken: ``sides`` is how many of the two devices live in this process, ``qps`` how
        many QP pairs the run makes (default ``--qps``: one pair of hosts); ``patterned``:
        its regions hold seeded patterns, not buffers (``roce.emu.core.patterned``)."""
        if self.op not in OPS:
            raise UsageError(f"--op must be one of {', '.join(OPS)}")
        if self.qp_type not in ALLOWED:
            raise UsageError(f"--qp-type must be one of {', '.join(ALLOWED)}")
        if self.recovery not in MODES:
            raise UsageError(f"--recovery must be one of {', '.join(MODES)}")
        if self.loss_rule not in LOSS_RULES:
            raise UsageError(f"--loss-rule must be one of {', '.join(LOSS_RULES)}")
        if not 0 <= self.psn <= PSN_MASK:
            raise UsageError(f"--psn {self.psn:#x}: a PSN is 24 bits (at most {PSN_MASK:#x})")
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
        check_protocol(self.cc, self.protocol)
        budget.workload(self.size, self.slots, self.qps if qps is None else qps, sides,
                        patterned)

    @property
    def slot(self) -> int:
        return slot_bytes(self.size)

    @property
    def slots(self) -> int:
        return slots_for(self.size, self.count)

    def workload(self) -> dict[str, Any]:
        """The workload's fields alone (what a real link's two ends exchange)."""
        return {f.name: getattr(self, f.name) for f in fields(Workload)}


@dataclass
class Scenario(Workload):
    """A workload on the simulated network: the links' rate, delay and faults, the topology
    (``p2p``: two hosts cabled back to back) and what runs in its switches and NICs."""

    rate_gbps: float = defaults.RATE_GBPS
    delay_ns: int = defaults.DELAY_NS
    loss: float = 0.0
    burst: float = 0.0
    reorder: float = 0.0
    dup: float = 0.0
    corrupt: float = 0.0
    # virtual ns the run may take; None: ``defaults.time_limit_ns`` for the hosts it builds
    time_limit_ns: int | None = None
    topology: str = defaults.TOPOLOGY  # p2p, incast:N, dumbbell:N, leafspine:L,S,H
    topology_file: str | None = None
    traffic: str | None = None  # None: the topology's default; permutation; all-to-all
    buffer: int = defaults.BUFFER
    ecn: str = defaults.ECN  # on (derived thresholds), off, or KMIN,KMAX,PMAX
    pfc: bool = defaults.PFC
    lb: str = defaults.LB
    oversubscription: float = defaults.OVERSUBSCRIPTION  # leaf uplinks at rate / this
    # the link family: roce (Ethernet, PFC, ECN) or ib (native InfiniBand: credits, LIDs,
    # roce.emu.ib) and the subnet manager's routing of ib
    protocol: str = defaults.PROTOCOL
    ib_routing: str = defaults.IB_ROUTING
    ib_cc: bool = False  # InfiniBand congestion control (roce.emu.ib.ibcc): FECN, BECN, CCT
    ib_lmc: int = 0  # LID mask control: 2^ib_lmc LIDs per HCA port (roce.emu.ib.lft)
    ib_ar: bool = False  # adaptive routing at the switches (roce.emu.ib.ibswitch)
    # links that fail (and are repaired) during the run (roce.emu.net.failures.LinkDown)
    link_down: list[Any] = field(default_factory=list)
    detect_delay_ns: int = defaults.DETECT_DELAY_NS
    storm: list[str] = field(default_factory=list)  # hosts that emit PFC continuously
    # every host's congestion control and the ECN codepoint of data packets (--cc,
    # --ecn-codepoint); None: none, ECT(0), as the default
    cc: CcConfig | None = field(default_factory=CcConfig)
    # the traffic of real clusters in place of --count messages per pair
    # (roce.emu.net.workrun): open-loop flows of a CDF at a load, or a collective
    cdf: str | None = None  # --workload: websearch | fbhadoop | alistorage | FILE.cdf
    load: float = defaults.LOAD
    duration_ns: int = defaults.DURATION_NS
    collective: str | None = None  # allreduce | allgather | reducescatter | alltoall
    algorithm: str = ""  # "": the collective's first (roce.emu.workload.collective)
    ranks: int | None = None  # None: every host
    iterations: int = 1
    chunk: int | None = None  # None: the collective's default
    window: int | None = None
    fct: str | None = None  # per-flow rows: FILE.csv or FILE.parquet
    fct_bins: int = defaults.FCT_BINS

    @property
    def congestion_control(self) -> bool:
        return self.cc is not None and self.cc.enabled

    @property
    def generated(self) -> bool:
        """The run's traffic is a workload generator's (--workload, --collective)."""
        return self.cdf is not None or self.collective is not None


@dataclass
class Summary:
    """What a run reports.  Every run fills the common fields; a run through the switched
    network's NICs or switches adds the network's (``fabric`` and the fields after it), a
    run across a real link the link's (``role`` and the fields after it).  ``as_dict``
    leaves out the part a run does not have; ``text`` is the one text form of every run."""

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
    unverified: str = ""  # why the data did not check out: which messages, and how
    # --protocol uet (roce.emu.uet.run): PDC mode, entropy, PDS and SES counters; absent
    # from ``as_dict`` for RoCE runs
    uet: dict[str, Any] = field(default_factory=dict)
    # -- the switched network's NICs and switches -----------------------------------------
    fabric: dict[str, Any] = field(default_factory=dict)  # drops, marks, PFC, per port/host
    fct_ns: dict[str, float] = field(default_factory=dict)  # post to completion
    flows: list[dict[str, Any]] = field(default_factory=list)
    hops: int = 0
    hops_per_cpu_s: float = 0.0
    warnings: list[str] = field(default_factory=list)  # settings that defeat themselves
    # --workload / --collective (roce.emu.net.workrun): load, slowdown, bandwidths
    workload: dict[str, Any] = field(default_factory=dict)
    # -- a real link ----------------------------------------------------------------------
    role: str = ""  # connector | listener
    transport: str = ""
    interface: str | None = None
    local: dict[str, Any] = field(default_factory=dict)
    peer: dict[str, Any] = field(default_factory=dict)
    wall_ns: int = 0
    goodput_mbps: float = 0.0
    messages: int = 0  # listener: messages executed (RC MSN) or received
    frames_received: int = 0
    naks_sent: dict[str, int] = field(default_factory=dict)
    rnr_naks_sent: int = 0
    duplicates: int = 0
    local_verified: bool = False
    peer_verified: bool | None = None
    peer_summary: dict[str, Any] | None = None
    transport_stats: dict[str, int] = field(default_factory=dict)
    latency_us: dict[str, float] = field(default_factory=dict)  # post -> completion

    @property
    def networked(self) -> bool:
        """The run went through the switched network's NICs or switches."""
        return bool(self.fabric)

    @property
    def real(self) -> bool:
        return bool(self.role)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.uet:
            del d["uet"]
        for name in (() if self.networked else NETWORK_FIELDS) + (
                () if self.real else REAL_FIELDS):
            d.pop(name, None)
        return d

    @property
    def total(self) -> int:
        """The messages the run was to complete: ``count`` for every flow."""
        s = self.scenario
        return s["count"] * (len(self.flows) if self.flows else s["qps"])

    def errors_text(self) -> str:
        errs = ", ".join(f"{k}={v}" for k, v in sorted(self.completed.items())
                         if k not in SUCCESS) or "none"
        if self.outstanding:
            errs += f"; {self.outstanding} not completed"
        return errs

    def text(self) -> str:
        """The summary as ``roce emulate`` prints it."""
        return _real_text(self) if self.real else _simulated_text(self)


# the ``completed`` key of messages that completed well: a RoCE work completion's status,
# a UET run's (roce.emu.uet.run)
SUCCESS = ("IBV_WC_SUCCESS", "OK")
_NAMES = [f.name for f in fields(Summary)]
NETWORK_FIELDS = tuple(_NAMES[_NAMES.index("fabric"):_NAMES.index("role")])
REAL_FIELDS = tuple(_NAMES[_NAMES.index("role"):])


def _naks_text(naks: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(naks.items())) or "none"


def _recovery_line(s: Summary) -> str:
    return (f"recovery      {recovery_name(s.scenario)}: {s.selective_retransmitted} "
            f"selective, {s.retransmitted - s.selective_retransmitted} go-back, "
            f"{s.spurious_retransmissions} spurious; {s.ooo_accepted} out-of-order "
            f"accepted, {s.selective_naks} selective NAKs")


def _where_line(s: Summary) -> str:
    """The link (two hosts cabled back to back) or the network the run used."""
    sc = s.scenario
    if sc.get("topology", defaults.TOPOLOGY) == defaults.TOPOLOGY and not sc.get(
            "topology_file") and sc.get("protocol") != "ib":
        return (f"link          {sc['rate_gbps']:g} Gb/s, {sc['delay_ns']} ns, loss="
                f"{sc['loss']:g} burst={sc['burst']:g} reorder={sc['reorder']:g} "
                f"dup={sc['dup']:g} corrupt={sc['corrupt']:g}")
    flows = f"{len(s.flows)} flows, " if not s.workload else ""
    links = (f"protocol=ib routing={sc['ib_routing']}"
             f"{' lmc=' + str(sc['ib_lmc']) if sc.get('ib_lmc') else ''}"
             f"{' ar=on' if sc.get('ib_ar') else ''} ib-cc="
             f"{'on' if sc.get('ib_cc') else 'off'}" if sc.get("protocol") == "ib" else
             f"lb={sc['lb']} pfc={'on' if sc['pfc'] else 'off'} ecn={sc['ecn']}")
    return (f"network       {sc['topology_file'] or sc['topology']}, {flows}"
            f"{sc['rate_gbps']:g} Gb/s, {sc['delay_ns']} ns, {links}")


def _simulated_text(s: Summary) -> str:
    ok = sum(s.completed.get(k, 0) for k in SUCCESS)
    sc = s.scenario
    if s.workload:
        head = _workload_head(s)
    else:
        head = [
            f"scenario      {sc['op']} size={sc['size']} count={sc['count']} qps={sc['qps']} "
            f"mtu={sc['mtu']} qp={sc.get('qp_type', defaults.QP_TYPE)} seed={sc['seed']}",
            _where_line(s),
            f"messages      posted {s.posted}, completed OK {ok}, errors: {s.errors_text()}",
            f"delivered     {s.delivered} of {s.total} messages reached the responder"]
    if s.uet:
        head[0] = head[0].replace(f"qp={sc.get('qp_type', defaults.QP_TYPE)}",
                                  f"protocol=uet pdc={s.uet['pdc_mode']}")
    lines = head + [
        f"bytes         {s.bytes}",
        f"virtual time  {s.virtual_ns / 1e6:.3f} ms",
        f"goodput       {s.goodput_gbps:.3f} Gb/s",
        f"packets       {s.packets} ({s.retransmitted} retransmitted)",
        *(_uet_lines(s) if s.uet else [
            _recovery_line(s),
            f"NAKs          {_naks_text(s.naks)}; RNR NAKs {s.rnr_naks}; timeouts "
            f"{s.timeouts}",
            f"ICRC drops    {s.icrc_drops}"]),
        f"data verified {'yes' if s.data_verified else 'NO: ' + s.unverified}",
        f"CPU           {s.cpu_s:.3f} s ({s.packets_per_cpu_s:,.0f} emulated packets per "
        "CPU-second)",
    ]
    if s.networked:
        fab, fct = s.fabric, s.fct_ns
        lines += [
            f"fabric        drops {fab['drops']}, credit overflows {fab['credit_overflows']}, "
            f"flow-control packets {fab['fc_packets']}, credit stalls "
            f"{fab['credit_stalls']}, max queue {fab['max_queue_bytes']} bytes, FECN marked "
            f"{fab['fecn_marked']}, CNPs {fab['cnps_sent']}"
            + (f", adaptively rerouted {fab['ar_moved']}" if "ar_moved" in fab else "")
            if "credit_overflows" in fab else  # InfiniBand (roce.emu.ib.subnet.stats)
            f"fabric        drops {fab['drops']}, ECN marked {fab['ecn_marked']}, PFC frames "
            f"{fab['pfc_frames']}, max queue {fab['max_queue_bytes']} bytes, CNPs "
            f"{fab['cnps_sent']}",
            f"completion    mean {fct.get('mean', 0) / 1e3:.1f} us, p50 "
            f"{fct.get('p50', 0) / 1e3:.1f} us, p99 {fct.get('p99', 0) / 1e3:.1f} us",
            f"hops          {s.hops} ({s.hops_per_cpu_s:,.0f} packet-hops per CPU-second)",
        ]
        lf = fab.get("link_failures")
        if lf:
            down = ", ".join(lf["down_at_end"]) or "none"
            lines.append(f"link failures {lf['failures']} failed, {lf['reroutes']} reroutes, "
                         f"{fab['link_lost']} frames lost on links ({lf['lost_in_flight']} in "
                         f"flight when they failed); down at the end: {down}")
    if s.workload:
        lines += _workload_lines(s.workload)
    lines += [f"WARNING       {w}" for w in s.warnings]
    if not s.finished:
        lines.append(f"WARNING       {s.stopped}")
    return "\n".join(lines)


def _uet_lines(s: Summary) -> list[str]:
    """The PDS's part of a --protocol uet run (roce.emu.uet.run)."""
    u, p = s.uet, s.uet["pds"]
    return [
        f"PDS           entropy={u['entropy']}: {p['syn_sent']} SYN requests, "
        f"{p['acks_sent']} ACKs ({p['ecn_acks']} ECN-marked), {s.ooo_accepted} out-of-order "
        f"accepted, {p['duplicates']} duplicates, {p['trimmed']} trimmed",
        f"recovery      {s.retransmitted} retransmitted: {p['retx_nack']} on NACK, "
        f"{p['retx_sack']} on SACK gap, {p['retx_timeout']} on timeout",
        f"NACKs         {_naks_text(u['nacks_received'])}; timeouts {s.timeouts}",
        f"PDCs          {p['pdcs_opened']} opened, {u['pdcs_closed']} closed, "
        f"{p['pdcs_failed']} failed" + (
            "; control packets " + _naks_text(u["controls_sent"])
            if u.get("close") == "target" else ""),
        *([f"RUDI          {p['rudi_responses_sent']} responses sent, "
           f"{u['ses']['repeated']} pieces executed again (duplicates)"]
          if u['pdc_mode'] == "rudi" else []),
        *([f"UUD lost      {lo['packets']} packets ({lo['trimmed']} trimmed), "
           f"{lo['messages']} messages incomplete"] if (lo := u.get("uud_lost")) else []),
        # UET's packets carry no end-to-end CRC: the receiving port's FCS discards them
        *([f"FCS drops     {bad} frames corrupted on links, discarded by the receiving port"]
          if (bad := (s.fabric or {}).get("link_corrupted")) else [])]


def _workload_head(s: Summary) -> list[str]:
    """The first lines of a --workload or --collective run: what ran, where, the
    transfers."""
    sc, w = s.scenario, s.workload
    ok = sum(s.completed.get(k, 0) for k in SUCCESS)
    if w["kind"] == "flows":
        what = (f"workload      {w['cdf']} load={w['load']:g} duration="
                f"{w['duration_ns'] / 1e6:g}ms over {w['hosts']} hosts")
    else:
        what = (f"collective    {w['op']} {w['algorithm']} size={w['size']} ranks={w['ranks']} "
                f"iterations={sc['iterations']} chunk={w['chunk']} window={w['window']}")
    where = _where_line(s)
    if s.uet:  # the --count run's scenario line names it; a workload's network line does
        where = where.replace(" lb=", f" protocol=uet pdc={s.uet['pdc_mode']} lb=", 1)
    return [
        what + f" mtu={sc['mtu']} seed={sc['seed']}",
        where,
        f"transfers     posted {s.posted}, completed OK {ok}, errors: {s.errors_text()}",
    ]


def _workload_lines(w: dict[str, Any]) -> list[str]:
    """The workload's report: load, flows and slowdown; or a collective's iterations."""
    if w["kind"] == "flows":
        def q(part: dict[str, Any]) -> str:
            return (f"{part['flows']} flows, p50 {part['p50']:.3f} p95 {part['p95']:.3f} "
                    f"p99 {part['p99']:.3f}")
        small = w["small_bytes"]
        lines = [
            f"load          offered {w['offered_load']:.3f}, carried {w['carried_load']:.3f} "
            "of the hosts' line rate",
            f"flows         {w['flows']} generated, {w['finished']} finished, "
            f"{w['unfinished']} unfinished",
            f"slowdown      small (< {small} B): {q(w['slowdown']['small'])}",
            f"slowdown      large (>= {small} B): {q(w['slowdown']['large'])}",
            f"{'flows %':>9} {'count':>7} {'max size':>10} {'p50':>8} {'p95':>8} {'p99':>8}",
        ]
        lines += [f"{b['lo']:>4g}-{b['hi']:<4g} {b['flows']:>7} {b['max_size']:>10} "
                  f"{b['p50']:>8.3f} {b['p95']:>8.3f} {b['p99']:>8.3f}"
                  for b in w["slowdown_table"]]
        if w["fct_file"]:
            lines.append(f"per-flow rows {w['fct_file']}")
        return lines
    lines = [f"iteration {r['iteration']:<3} {r['time_ns'] / 1e3:.1f} us, algbw "
             f"{r['algbw_GBps']:.3f} GB/s, busbw {r['busbw_GBps']:.3f} GB/s"
             for r in w["iterations"]]
    return lines + [
        f"busbw         {w['busbw_GBps']:.3f} GB/s mean of {w['completed_iterations']} "
        f"iteration(s), line rate {w['line_rate_GBps']:.3f} GB/s",
        f"beside them   PFC frames {w['pfc_frames']}, ECN marked {w['ecn_marked']}, CNPs "
        f"{w['cnps']}, retransmitted {w['retransmitted']}",
    ]


def _real_text(s: Summary) -> str:
    sc = s.scenario
    ok = s.completed.get("IBV_WC_SUCCESS", 0)
    errs = ", ".join(f"{k}={v}" for k, v in sorted(s.completed.items())
                     if k != "IBV_WC_SUCCESS") or "none"
    where = f"raw Ethernet on {s.interface}" if s.transport == "raw" else "UDP"
    lo, pe = s.local, s.peer
    qpns = ",".join(f"0x{q:x}" for q in lo.get("qpns", []))
    pqpns = ",".join(f"0x{q:x}" for q in pe.get("qpns", []))
    lines = [
        f"role          {s.role} over {where}",
        f"scenario      {sc['op']} size={sc['size']} count={sc['count']} qps={sc['qps']} "
        f"mtu={sc['mtu']} depth={sc['depth']} qp={sc['qp_type']} seed={sc['seed']}",
        f"endpoints     {lo.get('ip')} ({lo.get('mac')}) QP {qpns} <-> {pe.get('ip')} "
        f"({pe.get('mac')}) QP {pqpns}",
    ]
    if s.role == "connector":
        lines.append(f"messages      posted {s.posted}, completed OK {ok}, errors: {errs}")
    else:
        lines.append(f"messages      executed {s.messages} of {sc['count'] * sc['qps']}, "
                     f"receives completed OK {ok}, errors: {errs}")
    lines += [
        f"bytes         {s.bytes}",
        f"wall time     {s.wall_ns / 1e6:.3f} ms",
        f"goodput       {s.goodput_gbps:.3f} Gb/s ({s.goodput_mbps:.1f} MB/s)",
        f"packets       sent {s.packets} ({s.retransmitted} retransmitted), "
        f"received {s.frames_received} ({s.duplicates} duplicates)",
        _recovery_line(s),
        f"NAKs          received {_naks_text(s.naks)}; sent {_naks_text(s.naks_sent)}; RNR "
        f"NAKs received {s.rnr_naks}, sent {s.rnr_naks_sent}; timeouts {s.timeouts}",
        f"ICRC drops    {s.icrc_drops}",
    ]
    verdict = "yes" if s.data_verified else "NO"
    if s.role == "connector":
        peer = {None: "no answer", True: "yes", False: "NO"}[s.peer_verified]
        # the listener's verdict is its claim: this side cannot check the listener's memory
        verdict += (f" (here: {'yes' if s.local_verified else 'NO'}; listener reports: "
                    f"{peer})")
    if s.latency_us:
        lat = s.latency_us
        lines.append(f"latency       post to completion: min {lat['min']:.1f} us, median "
                     f"{lat['median']:.1f} us, p99 {lat['p99']:.1f} us")
    lines.append(f"data verified {verdict}")
    lines.append(f"CPU           {s.cpu_s:.3f} s")
    if not s.finished:
        lines.append("WARNING       the time limit ran out before every message completed")
    return "\n".join(lines)


def recovery_name(scenario: dict[str, Any]) -> str:
    """The recovery mode as the summary shows it: ``gbn``, or ``sr`` with its loss rule."""
    mode = scenario.get("recovery", defaults.RECOVERY)
    return (f"{mode} ({scenario.get('loss_rule', defaults.LOSS_RULE)})"
            if mode != defaults.RECOVERY else mode)


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
