"""``roce emulate --listen`` / ``--connect HOST``: the emulator's scenarios across a real link.

Two processes, usually on two hosts (or two network namespaces), each drive an emulated
device with a real transport (raw Ethernet on ``-i IFACE`` or UDP with ``--transport
udp``).  As with perftest, a TCP connection sets things up (``roce.emu.real.oob``):

1. the connector sends ``hello``: the scenario (op, size, count, qps, mtu, depth, seed ...),
   its QPs (QPN, PSN, IP/GID, MAC) and the largest path MTU its link carries;
2. the listener builds its QPs and the memory it exposes (rkey, VA, size), brings the QPs
   to RTS, posts receives and answers ``params``; the path MTU is the smallest of the three;
3. the connector brings its QPs up and drives the operations, ``depth`` outstanding per QP;
4. when every work request completed it sends ``done``; the listener checks its memory and
   answers ``result``; both print a summary (``Summary`` with wall time instead of virtual).

The loss recovery (``--recovery gbn|sr``, ``--loss-rule``) is part of the scenario: both ends
must run the same one before the first packet (docs/protocol.md, "Selective repeat (IRN)
encoding"), so the listener follows the connector's hello; a listener given a ``--recovery``
or ``--loss-rule`` of its own that differs refuses the run (``RecoveryMismatch``, naming both
values), and the connector fails with that reason.  Selective repeat's timeouts scale with
the wall-clock link's ACK timeout (``--timeout``; ``sr_config``).  The simulated fabric's
options (link faults, rate and delay, switched networks, congestion control) have no meaning
on a real link and are refused by name (``refuse_simulated``).

Data is checked end to end without shipping it: both sides derive the initial contents of
every buffer from the seed and replay the operation sequence (an RC responder executes in
PSN order, so the outcome is determined), the listener checks what was written to it, the
connector what it read and fetched.
"""

from __future__ import annotations

import argparse
import gc
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from roce.emu.core.constants import ACK_TIMEOUT_UNIT_NS, ALL_ACCESS, WCStatus, WROpcode
from roce.emu.core.payload import Expected, fill
from roce.emu.core.qp import AHAttr, QPAttr, QPCap
from roce.emu.core.recovery import LOSS_RULES, MODES, RTO_HIGH_NS, RTO_LOW_NS, RecoveryConfig
from roce.emu.core.unreliable import GRH_BYTES
from roce.emu.core.verbs import AH, CQ, MR, PD, QP, Context, QPInitAttr
from roce.emu.core.work import SGE, RecvWR, SendWR
from roce.emu.real import oob
from roce.emu.real.driver import Transport, max_path_mtu
from roce.emu.real.loop import EventLoop
from roce.emu.real.raw import RawEthernetTransport
from roce.emu.real.udp import UdpTransport
from roce.emu.record import pcap_writer
from roce.emu.scenario import (
    QKEY,
    QP_TYPES,
    Summary,
    Workload,
    add_qp_counts,
    emit,
    kind,
    message_bytes,
    recovery_name,
)
from roce.errors import InputError, RecoveryMismatch, RemoteError, RoceError, UsageError
from roce.iface import interface_ipv4, interface_mac, interface_mtu

UD_RING = 4096  # receive buffers a UD listener keeps posted (UD has no flow control)
MIN_RNR_TIMER = 4  # 0.04 ms: the listener reposts receives within a poll


@dataclass
class RemoteScenario(Workload):
    """What both ends must agree on; sent in the connector's hello."""

    timeout: int = 14  # wall-clock links: a longer ACK timeout than the simulated default
    qp_type: str = "rc"
    time_limit_s: float = 120.0

@dataclass
class Endpoint:
    """How this side reaches the wire."""

    transport: str = "raw"  # raw | udp
    interface: str | None = None
    ip: str | None = None
    mac: str | None = None
    arp: bool = False
    oob_port: int = oob.DEFAULT_PORT
    udp_port: int = 4791
    oob_timeout: float = 30.0


@dataclass
class RemoteSummary(Summary):
    role: str = ""
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

    def text(self) -> str:
        s = self.scenario
        ok = self.completed.get("IBV_WC_SUCCESS", 0)
        errs = ", ".join(f"{k}={v}" for k, v in sorted(self.completed.items())
                         if k != "IBV_WC_SUCCESS") or "none"
        naks_in = ", ".join(f"{k}={v}" for k, v in sorted(self.naks.items())) or "none"
        naks_out = ", ".join(f"{k}={v}" for k, v in sorted(self.naks_sent.items())) or "none"
        where = f"raw Ethernet on {self.interface}" if self.transport == "raw" else "UDP"
        lo, pe = self.local, self.peer
        qpns = ",".join(f"0x{q:x}" for q in lo.get("qpns", []))
        pqpns = ",".join(f"0x{q:x}" for q in pe.get("qpns", []))
        lines = [
            f"role          {self.role} over {where}",
            f"scenario      {s['op']} size={s['size']} count={s['count']} qps={s['qps']} "
            f"mtu={s['mtu']} depth={s['depth']} qp={s['qp_type']} seed={s['seed']}",
            f"endpoints     {lo.get('ip')} ({lo.get('mac')}) QP {qpns} <-> {pe.get('ip')} "
            f"({pe.get('mac')}) QP {pqpns}",
        ]
        if self.role == "connector":
            lines.append(f"messages      posted {self.posted}, completed OK {ok}, errors: {errs}")
        else:
            lines.append(f"messages      executed {self.messages} of {s['count'] * s['qps']}, "
                         f"receives completed OK {ok}, errors: {errs}")
        lines += [
            f"bytes         {self.bytes}",
            f"wall time     {self.wall_ns / 1e6:.3f} ms",
            f"goodput       {self.goodput_gbps:.3f} Gb/s ({self.goodput_mbps:.1f} MB/s)",
            f"packets       sent {self.packets} ({self.retransmitted} retransmitted), "
            f"received {self.frames_received} ({self.duplicates} duplicates)",
            f"recovery      {recovery_name(s)}: {self.selective_retransmitted} selective, "
            f"{self.retransmitted - self.selective_retransmitted} go-back, "
            f"{self.spurious_retransmissions} spurious; {self.ooo_accepted} out-of-order "
            f"accepted, {self.selective_naks} selective NAKs",
            f"NAKs          received {naks_in}; sent {naks_out}; RNR NAKs received "
            f"{self.rnr_naks}, sent {self.rnr_naks_sent}; timeouts {self.timeouts}",
            f"ICRC drops    {self.icrc_drops}",
        ]
        verdict = "yes" if self.data_verified else "NO"
        if self.role == "connector":
            peer = {None: "no answer", True: "yes", False: "NO"}[self.peer_verified]
            verdict += (f" (here: {'yes' if self.local_verified else 'NO'}; "
                        f"listener: {peer})")
        if self.latency_us:
            lat = self.latency_us
            lines.append(f"latency       post to completion: min {lat['min']:.1f} us, median "
                         f"{lat['median']:.1f} us, p99 {lat['p99']:.1f} us")
        lines.append(f"data verified {verdict}")
        lines.append(f"CPU           {self.cpu_s:.3f} s")
        if not self.finished:
            lines.append("WARNING       the time limit ran out before every message completed")
        return "\n".join(lines)


# -- the plan both sides replay ---------------------------------------------------------------


def expected(sc: RemoteScenario, qp_index: int) -> Expected:
    """What both buffers of one QP hold after every message of the plan, applied in order
    -- what an RC responder's PSN order guarantees.  UD sends land in receive buffers, not
    the MR: the MR keeps its initial contents."""
    exp = Expected(sc.seed, qp_index, sc.size, sc.slots)
    if sc.qp_type != "ud":
        for i in range(sc.count):
            exp.apply(kind(sc.op, i), i)
    return exp


# -- endpoints ------------------------------------------------------------------------------


def interface_of(ip: str) -> str | None:
    """The interface that holds ``ip`` (loopback for 127/8), if any."""
    if ip.startswith("127."):
        return "lo"
    for _, name in socket.if_nameindex():
        try:
            if interface_ipv4(name) == ip:
                return name
        except OSError:
            continue
    return None


def open_endpoint(ep: Endpoint, name: str, default_ip: str | None, record: Any,
                  loop: EventLoop | None = None) -> tuple[Context, Transport, int]:
    """(context, transport, largest path MTU this side's link carries)."""
    if ep.transport == "raw":
        if not ep.interface:
            raise RemoteError("raw Ethernet needs -i IFACE (or use --transport udp)")
        ip = ep.ip or interface_ipv4(ep.interface)
        if not ip:
            raise RemoteError(f"{ep.interface} has no IPv4 address: give the device one "
                              "with --ip")
        ctx = Context(name, ip, ep.mac or interface_mac(ep.interface))
        t: Transport = RawEthernetTransport(ctx, ep.interface, arp=ep.arp, record=record,
                                            loop=loop)
        limit = max_path_mtu(interface_mtu(ep.interface))
    else:
        ip = ep.ip or default_ip
        if not ip:
            raise RemoteError("UDP needs the address to bind: --ip ADDR")
        ctx = Context(name, ip, ep.mac)
        t = UdpTransport(ctx, ip, port=ep.udp_port, record=record, loop=loop)
        ifname = ep.interface or interface_of(ip)
        limit = max_path_mtu(interface_mtu(ifname)) if ifname else 1024
    return ctx, t, limit


def check_endpoint(ep: Endpoint) -> None:
    """Raise ``InputError`` unless the interface exists (raw) and the address to bind is
    this host's (UDP, when given): what ``open_endpoint`` would find out later."""
    if ep.transport == "raw" and ep.interface:
        interface_mtu(ep.interface)  # InterfaceError (exit 2) for a missing one
    if ep.transport == "udp" and ep.ip:
        family = socket.AF_INET6 if ":" in ep.ip else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                s.bind((ep.ip, 0))
            except OSError:
                raise InputError(f"{ep.ip} is not an address of this host (--ip)") from None


@dataclass(eq=False)
class _Flow:
    index: int
    qp: QP
    cq: CQ
    mr: MR  # connector: the local buffer; listener: the buffer it exposes
    recv_mr: MR | None = None  # UD listener: the receive ring
    peer: oob.QPInfo | None = None
    ah: AH | None = None
    posted: int = 0
    done: int = 0
    bytes: int = 0
    status: Counter = field(default_factory=Counter)
    sends: list[int] = field(default_factory=list)  # listener: message numbers that are SENDs
    recv_posted: int = 0
    recv_done: int = 0
    recv_bad: int = 0
    failed: bool = False
    plan: Expected | None = None  # UD listener: what the connector's buffer holds


def _make_flows(ctx: Context, sc: RemoteScenario, role: str) -> list[_Flow]:
    pd = PD(ctx)
    flows = []
    n = sc.slot * sc.slots
    for q in range(sc.qps):
        cq = CQ(ctx, 1 << 16)
        recv_cap = UD_RING if sc.qp_type == "ud" else max(sc.depth * 2, 16)
        cap = QPCap(max_send_wr=max(sc.depth, 1), max_recv_wr=recv_cap)
        qp = QP(pd, QPInitAttr(qp_type=QP_TYPES[sc.qp_type], send_cq=cq, recv_cq=cq, cap=cap))
        mr = MR(pd, n, ALL_ACCESS)
        fill(mr.buf, sc.seed, q, "local" if role == "connector" else "remote", sc.size,
             sc.slots)
        f = _Flow(q, qp, cq, mr)
        if role == "listener":
            f.sends = [i for i in range(sc.count) if kind(sc.op, i) == "send"]
            if sc.qp_type == "ud":
                ring = min(len(f.sends), UD_RING) or 1
                f.recv_mr = MR(pd, ring * (GRH_BYTES + sc.slot), ALL_ACCESS)
                f.plan = Expected(sc.seed, q, sc.size, sc.slots)
        flows.append(f)
    return flows


def _info(ctx: Context, f: _Flow, sc: RemoteScenario, mtu: int) -> oob.QPInfo:
    return oob.QPInfo(qpn=f.qp.qp_num, psn=sc.psn, ip=ctx.ip, gid=oob.gid_of(ctx.ip),
                      mac=ctx.mac, rkey=f.mr.rkey, va=f.mr.addr, size=f.mr.length, mtu=mtu,
                      qp_type=sc.qp_type, qkey=QKEY if sc.qp_type == "ud" else 0)


def _bring_up(f: _Flow, sc: RemoteScenario, peer: oob.QPInfo, mtu: int, sport: int | None,
              dmac: str) -> None:
    """RESET -> INIT -> RTR -> RTS toward the peer's QP (the verbs a perftest would call)."""
    qp = f.qp
    ah = AHAttr(dmac=dmac, dip=peer.ip, ipv6=":" in peer.ip, sport=sport)
    f.peer = peer
    if sc.qp_type == "ud":
        qp.to_init(QPAttr(qkey=QKEY))
        qp.to_rtr(QPAttr())
        qp.to_rts(QPAttr(sq_psn=sc.psn))
        f.ah = AH(qp.pd, ah)
        return
    qp.to_init(QPAttr(qp_access_flags=ALL_ACCESS))
    qp.to_rtr(QPAttr(path_mtu=mtu, dest_qp_num=peer.qpn, rq_psn=peer.psn,
                     max_dest_rd_atomic=16, min_rnr_timer=MIN_RNR_TIMER, ah_attr=ah))
    qp.to_rts(QPAttr(sq_psn=sc.psn, timeout=sc.timeout, retry_cnt=sc.retry_cnt,
                     rnr_retry=sc.rnr_retry, max_rd_atomic=16))


def _peer_mac(t: Transport, ep: Endpoint, info: oob.QPInfo) -> str:
    """Raw Ethernet with --arp learns the peer's MAC by ARP; otherwise the exchange's."""
    if isinstance(t, RawEthernetTransport) and ep.arp:
        return t.resolve(info.ip)
    return info.mac


def _quiet_gc() -> None:
    """Keep the cyclic collector off the wire's critical path: a full collection walks
    every object the imports made (several ms here), and one in the middle of a round trip
    shows as a latency spike (and, at worst, a spurious retransmission).  What exists after
    set-up lives for the whole run: freeze it so collections only scan what the run makes."""
    gc.collect()
    gc.freeze()


def _recv_serving(ch: oob.Channel, t: Transport, expect: str, timeout: float) -> dict[str, Any]:
    """The peer's next out-of-band message, while the transport keeps serving the wire:
    the peer may be resolving us by ARP, or still answering, meanwhile."""
    got: list[dict[str, Any]] = []

    def readable() -> None:
        # one read, then only what it brought: reading on could hit the peer's EOF (it
        # closes right after its last message) and lose the message in hand
        m = ch.poll()
        while m is not None:
            got.append(m)
            m = ch.poll() if ch.buffered() else None

    readable()  # a message may be buffered already
    if not got:
        t.loop.add_reader(ch.sock, readable)
        try:
            t.loop.run(stop=lambda: bool(got), timeout=timeout)
        finally:
            t.loop.remove_reader(ch.sock)
    if not got:
        raise oob.OOBError(f"timed out after {timeout:g} s waiting for a {expect!r} message "
                           f"from {ch.peer}")
    if got[0]["type"] != expect:
        raise oob.OOBError(f"expected a {expect!r} message from {ch.peer}, got "
                           f"{got[0]['type']!r}")
    return got[0]


def _post(sc: RemoteScenario, f: _Flow, i: int) -> None:
    """Post message ``i`` of the plan on the connector."""
    what = kind(sc.op, i)
    off = (i % sc.slots) * sc.slot
    size = sc.size
    peer = f.peer
    assert peer is not None
    if sc.qp_type == "ud":
        f.qp.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_SEND,
                              sg_list=[f.mr.sge(off, size)], ah=f.ah, remote_qpn=peer.qpn,
                              remote_qkey=peer.qkey))
    elif what == "write":
        f.qp.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[f.mr.sge(off, size)], remote_addr=peer.va + off,
                              rkey=peer.rkey))
    elif what == "read":
        f.qp.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_READ,
                              sg_list=[f.mr.sge(off, size)], remote_addr=peer.va + off,
                              rkey=peer.rkey))
    elif what == "send":
        f.qp.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_SEND,
                              sg_list=[f.mr.sge(off, size)]))
    else:
        f.qp.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                              sg_list=[SGE(f.mr.addr + off, 8, f.mr.lkey)],
                              remote_addr=peer.va, rkey=peer.rkey, compare_add=1))


def _post_receives(sc: RemoteScenario, f: _Flow) -> None:
    """Listener: keep receive WQEs posted for the SENDs still to come, in order."""
    cap = f.qp.core.cap.max_recv_wr
    while f.recv_posted < len(f.sends) and f.recv_posted - f.recv_done < cap:
        if sc.qp_type == "ud":
            assert f.recv_mr is not None
            unit = GRH_BYTES + sc.slot
            ring = f.recv_mr.length // unit
            sge = f.recv_mr.sge((f.recv_posted % ring) * unit, GRH_BYTES + sc.size)
        else:
            i = f.sends[f.recv_posted]
            sge = f.mr.sge((i % sc.slots) * sc.slot, sc.size)
        f.qp.post_recv(RecvWR(wr_id=f.recv_posted, sg_list=[sge]))
        f.recv_posted += 1


def _ud_check(sc: RemoteScenario, f: _Flow, j: int, byte_len: int) -> bool:
    """Listener: UD receive ``j`` (its wr_id) holds message ``j``'s bytes after the GRH
    area -- UD keeps no order promise, but one link with nothing lost delivers in order."""
    assert f.recv_mr is not None and f.plan is not None
    unit = GRH_BYTES + sc.slot
    ring = f.recv_mr.length // unit
    if byte_len != GRH_BYTES + sc.size:
        return False
    got = f.recv_mr.read(sc.size, (j % ring) * unit + GRH_BYTES)
    return got == f.plan.read("local", j % sc.slots, sc.size)


def _counters(s: RemoteSummary, ctx: Context, flows: list[_Flow], t: Transport) -> None:
    naks_in: Counter = Counter()
    naks_out: Counter = Counter()
    add_qp_counts(s, naks_in, [f.qp.core for f in flows])
    for f in flows:
        c = f.qp.core.counters
        s.rnr_naks_sent += c.rnr_naks_sent
        s.duplicates += c.duplicates
        naks_out.update(c.naks_sent)
    s.naks, s.naks_sent = dict(naks_in), dict(naks_out)
    s.icrc_drops = ctx.device.counters.icrc_drops
    s.frames_received = t.stats.frames_received
    s.transport_stats = asdict(t.stats)


# the loss-recovery counters the responder keeps: the connector's summary takes the
# listener's, so that one summary tells the whole run (its requester counts the rest)
RESPONDER_COUNTS = ("spurious_retransmissions", "ooo_accepted", "selective_naks")


def sr_config(sc: Workload) -> RecoveryConfig | None:
    """Selective repeat for a wall-clock link, or None for go-back-N.  IRN's 100/320 us
    timeouts suit a hardware NIC; two processes on a real link answer in tens of us to
    ms, so both timeouts scale to the local ACK timeout (``--timeout``; RTO_high is it, RTO_low
    keeps IRN's ratio).  No BDP cap: the link's rate is unknown here (the rxe window)."""
    if sc.recovery != "sr":
        return None
    high = ACK_TIMEOUT_UNIT_NS << min(sc.timeout, 31) if sc.timeout else RTO_HIGH_NS
    return RecoveryConfig("sr", rto_low_ns=max(1, high * RTO_LOW_NS // RTO_HIGH_NS),
                          rto_high_ns=high, loss_rule=sc.loss_rule)


def agree(sc: Workload, mine: Workload | None) -> None:
    """The listener runs the connector's loss recovery (``sc``, from its hello); a choice of
    its own (``mine``: not the default) that differs is a ``RecoveryMismatch``."""
    if mine is None:
        return
    wanted = [("recovery", MODES[0])]
    if sc.recovery == "sr":
        wanted.append(("loss_rule", LOSS_RULES[0]))
    for name, default in wanted:
        here, there = getattr(mine, name), getattr(sc, name)
        if here != default and here != there:
            opt = "--" + name.replace("_", "-")
            raise RecoveryMismatch(
                f"{opt} {here} on the listener, {opt} {there} on the connector: both ends of "
                f"a connection recover alike; give both the same {opt} (or none to the "
                "listener, which follows the connector)")


def _rates(s: RemoteSummary) -> None:
    if s.wall_ns:
        s.goodput_gbps = s.bytes * 8 / s.wall_ns
        s.goodput_mbps = s.bytes * 1e3 / s.wall_ns


# -- the two roles -------------------------------------------------------------------------------


def run_connector(host: str, sc: RemoteScenario, ep: Endpoint, record: Any = None,
                  log: Callable[[str], None] | None = None) -> RemoteSummary:
    sc.check(sides=1)
    ch = oob.connect(host, ep.oob_port, timeout=ep.oob_timeout)
    try:
        return _connector(ch, sc, ep, record, log)
    except (RoceError, OSError) as e:
        ch.error(str(e))
        raise
    finally:
        ch.close()


def _connector(ch: oob.Channel, sc: RemoteScenario, ep: Endpoint, record: Any,
               log: Callable[[str], None] | None) -> RemoteSummary:
    ctx, t, limit = open_endpoint(ep, "connector", ch.sock.getsockname()[0], record)
    try:
        ctx.set_recovery(sr_config(sc))
        flows = _make_flows(ctx, sc, "connector")
        mine = [_info(ctx, f, sc, limit) for f in flows]
        ch.send(oob.hello(asdict(sc), mine, max_mtu=limit))
        params = _recv_serving(ch, t, "params", ep.oob_timeout)
        mtu = int(params["mtu"])
        peers = [oob.QPInfo.from_dict(d) for d in params["qps"]]
        if len(peers) != len(flows):
            raise oob.OOBError(f"listener offered {len(peers)} QPs for {len(flows)}")
        sport = ep.udp_port if ep.transport == "udp" else None
        for f, p in zip(flows, peers):
            _bring_up(f, sc, p, mtu, sport, _peer_mac(t, ep, p))
        if log:
            log(f"connected to {peers[0].ip}: path MTU {mtu}")
        s = RemoteSummary(scenario={**asdict(sc), "mtu": mtu}, role="connector",
                          transport=t.kind, interface=ep.interface)
        _quiet_gc()
        cpu0, t0 = time.process_time(), time.monotonic_ns()
        limit_ns = t0 + int(sc.time_limit_s * 1e9)

        posted_at: dict[tuple[int, int], int] = {}
        latencies: list[int] = []

        def post_more(f: _Flow) -> None:
            while not f.failed and f.posted < sc.count and f.posted - f.done < sc.depth:
                posted_at[(f.index, f.posted)] = time.monotonic_ns()
                _post(sc, f, f.posted)
                f.posted += 1

        def unfinished(f: _Flow) -> bool:
            return f.done < f.posted or not (f.failed or f.posted >= sc.count)

        for f in flows:
            post_more(f)
        # the flows with work left, in QP order: a wake-up visits only these (with
        # thousands of QPs most are done long before the last)
        pending = {f.index: f for f in flows if unfinished(f)}
        finished = True
        while pending:
            t.poll(0.05)
            now = time.monotonic_ns()
            for f in list(pending.values()):
                for wc in f.cq.poll(1 << 16):
                    f.done += 1
                    f.status[WCStatus(wc.status).name] += 1
                    latencies.append(now - posted_at.pop((f.index, wc.wr_id), now))
                    if wc.status == WCStatus.IBV_WC_SUCCESS:
                        f.bytes += message_bytes(kind(sc.op, wc.wr_id), sc.size)
                    else:
                        f.failed = True  # the QP is in ERR: the rest comes back flushed
                post_more(f)
                if not unfinished(f):
                    del pending[f.index]
            if time.monotonic_ns() > limit_ns:
                finished = False
                break
        s.wall_ns = time.monotonic_ns() - t0
        s.cpu_s = time.process_time() - cpu0
        s.finished = finished
        status: Counter = Counter()
        for f in flows:
            status.update(f.status)
        s.completed = dict(status)
        s.posted = sum(f.posted for f in flows)
        s.bytes = sum(f.bytes for f in flows)
        ok = status.get("IBV_WC_SUCCESS", 0) == s.posted == sc.count * sc.qps
        s.local_verified = finished and ok and all(
            expected(sc, f.index).matches("local", f.mr.buf) for f in flows)
        _counters(s, ctx, flows, t)
        _rates(s)
        if latencies:
            latencies.sort()
            n = len(latencies)
            s.latency_us = {"min": latencies[0] / 1e3, "median": latencies[n // 2] / 1e3,
                            "p99": latencies[min(n - 1, n * 99 // 100)] / 1e3,
                            "max": latencies[-1] / 1e3}
        ch.send({"type": "done", "posted": s.posted, "completed": s.completed,
                 "finished": finished})
        try:
            result = _recv_serving(ch, t, "result", ep.oob_timeout)
            s.peer_summary = result.get("summary")
            s.peer_verified = bool(result.get("verified"))
            for name in RESPONDER_COUNTS:
                setattr(s, name, getattr(s, name) + int((s.peer_summary or {}).get(name, 0)))
        except oob.OOBError as e:
            if log:
                log(f"no result from the listener: {e}")
        s.data_verified = s.local_verified and s.peer_verified is True
        if not s.local_verified:
            s.unverified = (f"{s.posted - s.completed.get('IBV_WC_SUCCESS', 0)} of "
                            f"{sc.count * sc.qps} message(s) did not complete here"
                            if not ok or not finished else
                            "this side's memory does not hold what the operations read")
        elif s.peer_verified is not True:
            s.unverified = ("the listener's memory or receives did not check out"
                            if s.peer_verified is False else "no verdict from the listener")
        s.local = {"ip": ctx.ip, "mac": ctx.mac, "qpns": [f.qp.qp_num for f in flows]}
        s.peer = {"ip": peers[0].ip, "mac": peers[0].mac, "qpns": [p.qpn for p in peers]}
        return s
    finally:
        t.close()


def run_listener(sc_hint: RemoteScenario | None, ep: Endpoint, record: Any = None,
                 bind: str = "", log: Callable[[str], None] | None = None,
                 accept_timeout: float | None = None) -> RemoteSummary:
    """Serve one connector: its hello decides the scenario (``sc_hint`` is unused but for
    the time limit when given).  The endpoint is checked first: a missing interface or
    address is an error now, not after a connector came and went."""
    check_endpoint(ep)
    with oob.Listener(bind, ep.oob_port) as lst:
        if log:
            log(f"listening on port {lst.port}")
        ch = lst.accept(accept_timeout if accept_timeout is not None else ep.oob_timeout * 4)
    try:
        return _listener(ch, sc_hint, ep, record, log)
    except (RoceError, OSError) as e:
        ch.error(str(e))
        raise
    finally:
        ch.close()


def _listener(ch: oob.Channel, sc_hint: RemoteScenario | None, ep: Endpoint, record: Any,
              log: Callable[[str], None] | None) -> RemoteSummary:
    msg = ch.recv(ep.oob_timeout, "hello")
    oob.check_hello(msg)
    names = set(RemoteScenario.__dataclass_fields__)
    try:
        sc = RemoteScenario(**{k: v for k, v in msg["scenario"].items() if k in names})
        sc.check(sides=1)
    except (TypeError, UsageError) as e:
        raise oob.OOBError(f"connector's scenario: {e}") from None
    agree(sc, sc_hint)
    if sc_hint is not None:
        sc.time_limit_s = max(sc.time_limit_s, sc_hint.time_limit_s)
    peers = [oob.QPInfo.from_dict(d) for d in msg["qps"]]
    if len(peers) != sc.qps:
        raise oob.OOBError(f"connector described {len(peers)} QPs for --qps {sc.qps}")
    ctx, t, limit = open_endpoint(ep, "listener", ch.sock.getsockname()[0], record)
    try:
        mtu = min(sc.mtu, limit, int(msg.get("max_mtu", limit)))
        ctx.set_recovery(sr_config(sc))
        flows = _make_flows(ctx, sc, "listener")
        sport = ep.udp_port if ep.transport == "udp" else None
        for f, p in zip(flows, peers):
            _bring_up(f, sc, p, mtu, sport, _peer_mac(t, ep, p))
            _post_receives(sc, f)
        ch.send({"type": "params", "mtu": mtu, "qps": [_info(ctx, f, sc, mtu).to_dict()
                                                       for f in flows]})
        if log:
            log(f"serving {peers[0].ip}: {sc.op} x{sc.count} on {sc.qps} QP(s), MTU {mtu}")
        done: list[dict[str, Any]] = []

        def oob_readable() -> None:
            m = ch.poll()
            while m is not None:
                if m["type"] != "done":
                    raise oob.OOBError(f"unexpected {m['type']!r} message from the connector")
                done.append(m)
                m = ch.poll() if ch.buffered() else None

        t.loop.add_reader(ch.sock, oob_readable)
        _quiet_gc()
        cpu0, t0 = time.process_time(), time.monotonic_ns()
        limit_ns = t0 + int((sc.time_limit_s + ep.oob_timeout) * 1e9)
        status: Counter = Counter()
        finished = True
        # the flows still waiting for receive completions, in QP order: a listener's QPs
        # post no sends, so once every SEND's receive completed (any status, flushes
        # included) its CQ stays empty and nothing is left to post; a wake-up skips it
        pending = {f.index: f for f in flows if f.recv_done < len(f.sends)}
        while not done:
            t.poll(0.05)
            for f in list(pending.values()):
                for wc in f.cq.poll(1 << 16):
                    status[WCStatus(wc.status).name] += 1
                    if sc.qp_type == "ud" and wc.status == WCStatus.IBV_WC_SUCCESS and \
                            not _ud_check(sc, f, wc.wr_id, wc.byte_len):
                        f.recv_bad += 1
                    f.recv_done += 1
                _post_receives(sc, f)
                if f.recv_done >= len(f.sends):
                    del pending[f.index]
            if time.monotonic_ns() > limit_ns:
                finished = False
                break
        t.loop.remove_reader(ch.sock)
        s = RemoteSummary(scenario={**asdict(sc), "mtu": mtu}, role="listener",
                          transport=t.kind, interface=ep.interface)
        s.wall_ns = time.monotonic_ns() - t0
        s.cpu_s = time.process_time() - cpu0
        s.completed = dict(status)
        s.finished = finished and bool(done) and bool(done[0].get("finished"))
        for f in flows:
            # messages the responder executed (RC: as MSN counts them, each once however
            # often it was retransmitted; UC: whole messages taken; UD: receives)
            n = f.qp.core.counters.messages_executed
            s.messages += n
            s.bytes += sum(message_bytes(kind(sc.op, i), sc.size) for i in range(min(n, sc.count)))
        peer_ok = bool(done) and done[0].get("completed", {}).get("IBV_WC_SUCCESS", 0) == \
            done[0].get("posted") == sc.count * sc.qps
        if sc.qp_type == "ud":
            mem_ok = all(f.recv_done == len(f.sends) and not f.recv_bad for f in flows)
        else:
            mem_ok = all(expected(sc, f.index).matches("remote", f.mr.buf) for f in flows)
        recv_ok = all(status.get(k, 0) == 0 for k in status if k != "IBV_WC_SUCCESS")
        counted = sc.qp_type != "rc" or s.messages == sc.count * sc.qps
        s.local_verified = s.data_verified = peer_ok and mem_ok and recv_ok and counted
        s.unverified = ("" if s.data_verified else
                        "the connector's messages did not all complete" if not peer_ok else
                        f"{s.messages} of {sc.count * sc.qps} message(s) executed here"
                        if not counted else "failed receives" if not recv_ok else
                        "this side's memory or receives do not hold what was sent")
        _counters(s, ctx, flows, t)
        _rates(s)
        s.local = {"ip": ctx.ip, "mac": ctx.mac, "qpns": [f.qp.qp_num for f in flows]}
        s.peer = {"ip": peers[0].ip, "mac": peers[0].mac, "qpns": [p.qpn for p in peers]}
        if done:
            ch.send({"type": "result", "verified": s.data_verified, "summary": s.as_dict()})
        return s
    finally:
        t.close()


# -- the command line (called by roce.cli.emulate) ---------------------------------------


def endpoint_from_args(args: argparse.Namespace) -> Endpoint:
    transport = args.transport or ("raw" if args.interface else None)
    if transport is None:
        raise RemoteError("say how to reach the wire: -i IFACE (raw Ethernet) or "
                          "--transport udp")
    if transport == "raw" and not args.interface:
        raise RemoteError("--transport raw needs -i IFACE")
    return Endpoint(transport=transport, interface=args.interface, ip=args.ip, mac=args.mac,
                    arp=args.arp, oob_port=args.port, udp_port=args.udp_port,
                    oob_timeout=args.oob_timeout)


def scenario_from_args(args: argparse.Namespace) -> RemoteScenario:
    return RemoteScenario(op=args.op, size=args.size, count=args.count, mtu=args.mtu,
                          qps=args.qps, depth=args.depth, seed=args.seed,
                          psn=args.psn & 0xFFFFFF,
                          timeout=14 if args.timeout is None else args.timeout,
                          retry_cnt=args.retry_cnt, rnr_retry=args.rnr_retry,
                          qp_type=args.qp_type, time_limit_s=args.time_limit,
                          recovery=args.recovery, loss_rule=args.loss_rule)


def run_cli(args: argparse.Namespace) -> int:
    """``roce emulate --listen | --connect HOST``: 0 verified; errors propagate to the
    CLI's exit-code table (1 options, 2 interface/peer, 4 data not verified)."""
    prog = "roce emulate"
    if args.listen and args.connect:
        raise RemoteError("--listen and --connect exclude each other")

    def log(text: str) -> None:
        if args.format != "json":
            print(f"{prog}: {text}", file=sys.stderr, flush=True)

    ep = endpoint_from_args(args)
    sc = scenario_from_args(args)
    sc.check(sides=1)
    try:
        with pcap_writer(args.pcap) as writer:
            if args.listen:
                summary = run_listener(sc, ep, writer, bind=args.bind or "", log=log)
            else:
                summary = run_connector(args.connect, sc, ep, writer, log=log)
    except PermissionError as e:
        raise InputError(f"{e.strerror or e}: raw Ethernet needs root (CAP_NET_RAW)") from None
    return emit(summary, args.format, args.pcap)
