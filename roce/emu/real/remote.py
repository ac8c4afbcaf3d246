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
   answers ``result``; each side returns its ``Summary`` (the real link's part: wall time
   instead of virtual), which ``roce emulate`` prints.

The run is a ``roce.emu.scenario.Scenario``, as every run is (``roce.cli.emulate.scenario``
makes it with the real link's defaults); only its workload's fields and its time limit
(``time_limit_ns``: wall-clock here) are read, and only they travel (``scenario_fields``).

The loss recovery (``--recovery gbn|sr``, ``--loss-rule``) is part of the scenario: both ends
must run the same one before the first packet (docs/protocol.md, "Selective repeat (IRN)
encoding"), so the listener follows the connector's hello; a listener given a ``--recovery``
or ``--loss-rule`` of its own that differs refuses the run (``RecoveryMismatch``, naming both
values), and the connector fails with that reason.  Selective repeat's timeouts scale with
the wall-clock link's ACK timeout (``--timeout``; ``sr_config``).  The simulated fabric's
options (link faults, rate and delay, switched networks, congestion control) have no meaning
on a real link and are refused by name (``roce.cli.emulate.refuse_simulated``).

Data is checked end to end without shipping it: both sides derive the initial contents of
every buffer from the seed and replay the operation sequence (an RC responder executes in
PSN order, so the outcome is determined), the listener checks what was written to it, the
connector what it read and fetched.  Each side's verdict is its own memory's; the
listener's, which the connector cannot check, arrives as a claim and is shown as one.

The peer is untrusted.  Every message is checked against the protocol's schema
(``roce.emu.real.messages``) as it arrives; then what no single field can say is checked before
anything is allocated (``_check_hello``, ``_check_params``): as many QPs as the scenario
says, of its type and this side's address family, a path MTU no larger than offered, memory
regions that hold the plan, and a request that fits this host's memory (receive queues and UD
rings included) and the run's time limit -- the listener's own ``--time-limit``, which the
connector's can shorten but not extend.  What breaks a rule is a ``PeerMessageError`` naming
the field (exit 2), told to the peer, which exits 2 with it.  Nothing after set-up costs more
than the work done: the listener follows the plan's SENDs as a range, and replays the plan to
check its memory only once every message was executed.
"""

from __future__ import annotations

import gc
import re
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from roce.emu import budget, defaults
from roce.emu.core.constants import ACK_TIMEOUT_UNIT_NS, ALL_ACCESS, GRH_BYTES, WCStatus, WROpcode
from roce.emu.core.payload import Expected, fill
from roce.emu.core.qp import AHAttr, QPAttr, QPCap
from roce.emu.core.recovery import LOSS_RULES, MODES, RTO_HIGH_NS, RTO_LOW_NS, RecoveryConfig
from roce.emu.core.verbs import AH, CQ, MR, PD, QP, Context, QPInitAttr
from roce.emu.core.work import SGE, RecvWR, SendWR
from roce.emu.real import messages as schema
from roce.emu.real import oob
from roce.emu.real.driver import Transport, max_path_mtu
from roce.emu.real.loop import EventLoop
from roce.emu.real.raw import RawEthernetTransport
from roce.emu.real.udp import UdpTransport
from roce.emu.scenario import (
    QKEY,
    QP_TYPES,
    Scenario,
    Summary,
    Workload,
    add_qp_counts,
    kind,
    message_bytes,
)
from roce.errors import (
    InputError,
    PeerMessageError,
    RecoveryMismatch,
    RemoteError,
    RoceError,
    UsageError,
)
from roce.iface import interface_ipv4, interface_mac, interface_mtu
from roce.locate import ROCE_PORT

UD_RING = 4096  # receive buffers a UD listener keeps posted (UD has no flow control)
MIN_RNR_TIMER = 4  # 0.04 ms: the listener reposts receives within a poll


@dataclass
class Endpoint:
    """How this side reaches the wire."""

    transport: str = "raw"  # raw | udp
    interface: str | None = None
    ip: str | None = None
    mac: str | None = None
    arp: bool = False
    oob_port: int = defaults.OOB_PORT
    udp_port: int = ROCE_PORT
    oob_timeout: float = defaults.OOB_TIMEOUT_S


def time_limit_ns(sc: Scenario) -> int:
    """The wall-clock nanoseconds a real-link run may take: the scenario's, else the default
    (``roce.emu.defaults.REAL_TIME_LIMIT_S``, which ``roce emulate`` applies too)."""
    if sc.time_limit_ns is not None:
        return sc.time_limit_ns
    return int(defaults.REAL_TIME_LIMIT_S * 1e9)


def scenario_fields(sc: Scenario) -> dict[str, Any]:
    """What both ends of a run agree on, as the hello carries it (``messages.SCENARIO``) and
    the summary shows it: the workload's fields and the run's time limit in seconds."""
    return {**sc.workload(), "time_limit_s": time_limit_ns(sc) / 1e9}


# -- the plan both sides replay ---------------------------------------------------------------


def expected(sc: Scenario, qp_index: int) -> Expected:
    """What both buffers of one QP hold after every message of the plan, applied in order
    -- what an RC responder's PSN order guarantees.  UD sends land in receive buffers, not
    the MR: the MR keeps its initial contents."""
    exp = Expected(sc.seed, qp_index, sc.size, sc.slots)
    if sc.qp_type != "ud":
        for i in range(sc.count):
            exp.apply(kind(sc.op, i), i)
    return exp


def sends(sc: Workload) -> range:
    """The numbers of the plan's messages that are SENDs (what ``kind`` says), as a range: a
    listener follows them without a list of ``count`` numbers."""
    if sc.op == "send":
        return range(sc.count)
    if sc.op == "mixed":
        return range(2, sc.count, 4)
    return range(0)


def plan_bytes(sc: Workload) -> int:
    """Payload bytes the plan moves on all QPs (an atomic moves 8)."""
    atomics = sc.count if sc.op == "atomic" else sc.count // 4 if sc.op == "mixed" else 0
    per_qp = atomics * message_bytes("atomic", sc.size) + (sc.count - atomics) * sc.size
    return per_qp * sc.qps


def _recv_cap(sc: Workload) -> int:
    """Receive work requests a listener's QP keeps posted."""
    return UD_RING if sc.qp_type == "ud" else max(sc.depth * 2, 16)


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
    """One flow's QP, CQ, buffers and peer, on either side."""

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
    sends: range = range(0)  # listener: the numbers of the messages that are SENDs
    recv_posted: int = 0
    recv_done: int = 0
    recv_bad: int = 0
    failed: bool = False
    plan: Expected | None = None  # UD listener: what the connector's buffer holds


def _make_flows(ctx: Context, sc: Scenario, role: str) -> list[_Flow]:
    pd = PD(ctx)
    flows = []
    n = sc.slot * sc.slots
    for q in range(sc.qps):
        cq = CQ(ctx, 1 << 16)
        cap = QPCap(max_send_wr=max(sc.depth, 1), max_recv_wr=_recv_cap(sc))
        qp = QP(pd, QPInitAttr(qp_type=QP_TYPES[sc.qp_type], send_cq=cq, recv_cq=cq, cap=cap))
        mr = MR(pd, n, ALL_ACCESS)
        fill(mr.buf, sc.seed, q, "local" if role == "connector" else "remote", sc.size,
             sc.slots)
        f = _Flow(q, qp, cq, mr)
        if role == "listener":
            f.sends = sends(sc)
            if sc.qp_type == "ud":
                ring = min(len(f.sends), UD_RING) or 1
                f.recv_mr = MR(pd, ring * (GRH_BYTES + sc.slot), ALL_ACCESS)
                f.plan = Expected(sc.seed, q, sc.size, sc.slots)
        flows.append(f)
    return flows


def _info(ctx: Context, f: _Flow, sc: Scenario, mtu: int) -> oob.QPInfo:
    return oob.QPInfo(qpn=f.qp.qp_num, psn=sc.psn, ip=ctx.ip, gid=oob.gid_of(ctx.ip),
                      mac=ctx.mac, rkey=f.mr.rkey, va=f.mr.addr, size=f.mr.length, mtu=mtu,
                      qp_type=sc.qp_type, qkey=QKEY if sc.qp_type == "ud" else 0)


def _bring_up(f: _Flow, sc: Scenario, peer: oob.QPInfo, mtu: int, sport: int | None,
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


def _post(sc: Scenario, f: _Flow, i: int) -> None:
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


def _post_receives(sc: Scenario, f: _Flow) -> None:
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


def _ud_check(sc: Scenario, f: _Flow, j: int, byte_len: int) -> bool:
    """Listener: UD receive ``j`` (its wr_id) holds message ``j``'s bytes after the GRH
    area -- UD keeps no order promise, but one link with nothing lost delivers in order."""
    assert f.recv_mr is not None and f.plan is not None
    unit = GRH_BYTES + sc.slot
    ring = f.recv_mr.length // unit
    if byte_len != GRH_BYTES + sc.size:
        return False
    got = f.recv_mr.read(sc.size, (j % ring) * unit + GRH_BYTES)
    return got == f.plan.read("local", j % sc.slots, sc.size)


def _counters(s: Summary, ctx: Context, flows: list[_Flow], t: Transport) -> None:
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


# -- what a peer may ask: checked before anything is allocated ----------------------------------

_OPTION = re.compile(r"--([a-z][a-z-]*)")


def _as_field(e: UsageError) -> PeerMessageError:
    """A scenario check's ``UsageError`` (its sentence names an option: ``--qps 5: ...``)
    as the hello's field of that option."""
    m = _OPTION.match(str(e))
    name = m.group(1).replace("-", "_") if m else ""
    return PeerMessageError("hello", f"scenario.{name}" if name in schema.SCENARIO.names
                            else "scenario", str(e))


def _receive_budget(sc: Scenario) -> None:
    """The listener's memory beyond the slots ``Workload.check`` counted: the receives it
    keeps posted for the SENDs (a UD QP: and their ring of buffers), on every QP."""
    n = len(sends(sc))
    if not n:
        return
    have = budget.available()
    base = sc.qps * (budget.QP_OVERHEAD + sc.slots * sc.slot)
    posted = min(n, _recv_cap(sc))
    if sc.qp_type == "ud":
        per_qp = posted * (GRH_BYTES + sc.slot + budget.RECV_WR_BYTES)
        most = have // (budget.QP_OVERHEAD + sc.slots * sc.slot + per_qp)
        budget.check(base + sc.qps * per_qp, "--qps", sc.qps, str(most),
                     f"{sc.qps} UD QP(s) with a ring of {posted} receives each")
    else:
        room = max(0, have - base) // sc.qps // budget.RECV_WR_BYTES
        budget.check(base + sc.qps * posted * budget.RECV_WR_BYTES, "--depth", sc.depth,
                     str(max(1, room // 2)), f"{sc.qps} QP(s) keeping {posted} receives posted")


def _check_hello(msg: dict[str, Any], hint: Scenario | None) -> Scenario:
    """The connector's scenario, once it fits this host and the run's time limit: the
    listener's own (``hint``'s, else the default), which the connector's may shorten."""
    workload = dict(msg["scenario"])
    theirs = int(workload.pop("time_limit_s") * 1e9)
    own = time_limit_ns(hint if hint is not None else Scenario())
    sc = Scenario(**workload, time_limit_ns=min(theirs, own))
    try:
        sc.check(sides=1)
        _receive_budget(sc)
        budget.duration(sc.count, sc.qps, plan_bytes(sc), sc.time_limit_ns / 1e9)
    except UsageError as e:
        raise _as_field(e) from None
    agree(sc, hint)
    if len(msg["qps"]) != sc.qps:
        raise PeerMessageError("hello", "qps", f"{len(msg['qps'])} QPs described for "
                               f"scenario.qps {sc.qps}")
    _check_qps("hello", msg["qps"], sc)
    return sc


def _check_qps(mtype: str, qps: list[dict[str, Any]], sc: Scenario,
               local_ip: str | None = None) -> None:
    """Each QP a peer describes is of the scenario's type and, given ``local_ip``, of its
    address family."""
    for i, d in enumerate(qps):
        if d["qp_type"] != sc.qp_type:
            raise PeerMessageError(mtype, f"qps[{i}].qp_type", f"{d['qp_type']} is not the "
                                   f"scenario's {sc.qp_type}")
        if local_ip is not None and (":" in d["ip"]) != (":" in local_ip):
            raise PeerMessageError(mtype, f"qps[{i}].ip", f"{d['ip']} is not of this side's "
                                   f"address family ({local_ip})")


def _check_params(params: dict[str, Any], sc: Scenario, offered: int,
                  local_ip: str) -> list[oob.QPInfo]:
    """The listener's QPs, once they are what the plan needs: one per flow, at the MTU this
    side offered or below, memory regions that hold every slot the plan addresses."""
    if params["mtu"] > offered:
        raise PeerMessageError("params", "mtu", f"{params['mtu']} is larger than the "
                               f"{offered} this side offered")
    qps = params["qps"]
    if len(qps) != sc.qps:
        raise PeerMessageError("params", "qps", f"{len(qps)} QPs offered for this side's "
                               f"{sc.qps}")
    _check_qps("params", qps, sc, local_ip)
    kinds = {kind(sc.op, i) for i in range(min(sc.count, 4))}
    span = sc.slot * sc.slots
    for i, d in enumerate(qps):
        if sc.qp_type == "ud" or not kinds - {"send"}:
            continue  # no RDMA: the region is not addressed
        if d["size"] < span:
            raise PeerMessageError("params", f"qps[{i}].size", f"{d['size']} bytes, fewer "
                                   f"than the {span} the plan addresses")
        if d["va"] + d["size"] > 1 << 64:
            raise PeerMessageError("params", f"qps[{i}].va", f"{d['va']:#x} + size "
                                   f"{d['size']:#x} passes the end of a 64-bit address space")
        if "atomic" in kinds and d["va"] % 8:
            raise PeerMessageError("params", f"qps[{i}].va", f"{d['va']:#x} is not 8-byte "
                                   "aligned, as an atomic's target must be")
    return [oob.QPInfo(**d) for d in qps]


def _rates(s: Summary) -> None:
    if s.wall_ns:
        s.goodput_gbps = s.bytes * 8 / s.wall_ns
        s.goodput_mbps = s.bytes * 1e3 / s.wall_ns


# -- the two roles -------------------------------------------------------------------------------


def run_connector(host: str, sc: Scenario, ep: Endpoint, record: Any = None,
                  log: Callable[[str], None] | None = None) -> Summary:
    sc.check(sides=1)
    budget.duration(sc.count, sc.qps, plan_bytes(sc), time_limit_ns(sc) / 1e9)
    ch = oob.connect(host, ep.oob_port, timeout=ep.oob_timeout)
    try:
        return _connector(ch, sc, ep, record, log)
    except (RoceError, OSError) as e:
        ch.error(str(e))
        raise
    finally:
        ch.close()


def _connector(ch: oob.Channel, sc: Scenario, ep: Endpoint, record: Any,
               log: Callable[[str], None] | None) -> Summary:
    ctx, t, limit = open_endpoint(ep, "connector", ch.sock.getsockname()[0], record)
    try:
        ctx.set_recovery(sr_config(sc))
        flows = _make_flows(ctx, sc, "connector")
        mine = [_info(ctx, f, sc, limit).to_dict() for f in flows]
        hello = schema.build("hello", scenario=scenario_fields(sc), qps=mine, max_mtu=limit)
        size = len(oob.encode(hello))
        if size > schema.MAX_LINE:
            each = [len(oob.encode(q)) for q in mine]  # a QP's JSON and its comma
            most = max(0, schema.MAX_LINE - (size - sum(each))) // max(each)
            raise UsageError(f"--qps {sc.qps}: the hello describing them would take {size} "
                             f"bytes, more than the out-of-band protocol's {schema.MAX_LINE} "
                             f"(--qps at most {most})")
        ch.send_message(hello)
        params = _recv_serving(ch, t, "params", ep.oob_timeout)
        mtu = params["mtu"]
        peers = _check_params(params, sc, min(sc.mtu, limit), ctx.ip)
        sport = ep.udp_port if ep.transport == "udp" else None
        for f, p in zip(flows, peers):
            _bring_up(f, sc, p, mtu, sport, _peer_mac(t, ep, p))
        if log:
            log(f"connected to {peers[0].ip}: path MTU {mtu}")
        s = Summary(scenario={**scenario_fields(sc), "mtu": mtu}, role="connector",
                          transport=t.kind, interface=ep.interface)
        _quiet_gc()
        cpu0, t0 = time.process_time(), time.monotonic_ns()
        limit_ns = t0 + time_limit_ns(sc)

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
        ch.send("done", posted=s.posted, completed=s.completed, finished=finished)
        try:
            result = _recv_serving(ch, t, "result", ep.oob_timeout)
        except PeerMessageError:
            raise  # a result that breaks the protocol is refused, not taken as "no answer"
        except oob.OOBError as e:
            if log:
                log(f"no result from the listener: {e}")
        else:
            # the listener's claim: its verdict and counters, typed by the schema
            s.peer_summary = result["summary"]
            s.peer_verified = result["verified"]
            for name in RESPONDER_COUNTS:
                setattr(s, name, getattr(s, name) + s.peer_summary[name])
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


def run_listener(sc_hint: Scenario | None, ep: Endpoint, record: Any = None,
                 bind: str = "", log: Callable[[str], None] | None = None,
                 accept_timeout: float | None = None) -> Summary:
    """Serve one connector: its hello decides the scenario; ``sc_hint``, this side's own
    options, gives the time limit the connector's may shorten (default
    ``defaults.REAL_TIME_LIMIT_S``) and a loss recovery that must agree (``agree``).  The
    endpoint is checked first: a missing interface or address is an error now, not after a
    connector came and went."""
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


def _listener(ch: oob.Channel, sc_hint: Scenario | None, ep: Endpoint, record: Any,
              log: Callable[[str], None] | None) -> Summary:
    msg = ch.recv(ep.oob_timeout, "hello")
    sc = _check_hello(msg, sc_hint)
    peers = [oob.QPInfo(**d) for d in msg["qps"]]
    ctx, t, limit = open_endpoint(ep, "listener", ch.sock.getsockname()[0], record)
    try:
        _check_qps("hello", msg["qps"], sc, ctx.ip)
        mtu = min(sc.mtu, limit, msg["max_mtu"])
        ctx.set_recovery(sr_config(sc))
        flows = _make_flows(ctx, sc, "listener")
        sport = ep.udp_port if ep.transport == "udp" else None
        for f, p in zip(flows, peers):
            _bring_up(f, sc, p, mtu, sport, _peer_mac(t, ep, p))
            _post_receives(sc, f)
        ch.send("params", mtu=mtu, qps=[_info(ctx, f, sc, mtu).to_dict() for f in flows])
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
        # the connector's time limit (capped by this side's), and the out-of-band wait for
        # its done message after that
        limit_ns = t0 + time_limit_ns(sc) + int(ep.oob_timeout * 1e9)
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
        s = Summary(scenario={**scenario_fields(sc), "mtu": mtu}, role="listener",
                          transport=t.kind, interface=ep.interface)
        s.wall_ns = time.monotonic_ns() - t0
        s.cpu_s = time.process_time() - cpu0
        s.completed = dict(status)
        s.finished = finished and bool(done) and done[0]["finished"]
        for f in flows:
            # messages the responder executed (RC: as MSN counts them, each once however
            # often it was retransmitted; UC: whole messages taken; UD: receives)
            n = f.qp.core.counters.messages_executed
            s.messages += n
            s.bytes += sum(message_bytes(kind(sc.op, i), sc.size) for i in range(min(n, sc.count)))
        # the connector's claim: every message completed there
        peer_ok = bool(done) and done[0]["completed"].get("IBV_WC_SUCCESS", 0) == \
            done[0]["posted"] == sc.count * sc.qps
        recv_ok = all(status.get(k, 0) == 0 for k in status if k != "IBV_WC_SUCCESS")
        # every message executed on every QP (UD: counted by its receives): only then is the
        # memory worth replaying the plan for, at a cost the work done already paid
        counted = sc.qp_type == "ud" or all(
            f.qp.core.counters.messages_executed >= sc.count for f in flows)
        if sc.qp_type == "ud":
            mem_ok = all(f.recv_done == len(f.sends) and not f.recv_bad for f in flows)
        else:
            mem_ok = peer_ok and counted and recv_ok and all(
                expected(sc, f.index).matches("remote", f.mr.buf) for f in flows)
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
            ch.send("result", verified=s.data_verified, summary=schema.pick(schema.CLAIM,
                                                                            s.as_dict()))
        return s
    finally:
        t.close()
