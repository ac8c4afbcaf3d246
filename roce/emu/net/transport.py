"""What the workload driver (``roce.emu.net.workrun``) asks of a transport, and RoCE's answer.

One driver runs every workload and collective; a transport carries its transfers.  The
driver hands a transport each transfer with ``post(transfer, op)`` and hears back through
the callback it set, ``done(transfer, ok, nbytes, status)``, when the transfer completed:

- ``op == "write"``: an open-loop flow, one RDMA-WRITE-like message that completes at its
  sender once every byte is acknowledged (HPCC's FCT: the last ACK);
- ``op == "send"``: a collective's transfer, a SEND that completes at its receiver when
  the last byte landed in a posted buffer.

Every transfer of ``n`` bytes carries the driver's ``pattern[0:n]`` into its ``sink[0:n]``
(the two buffers every host registers over the same bytes); the driver checks the sink when
``done`` is called.  In between, the transport's ``ready`` list is what the network's loop
waits on (``Network.run_until_any``): something appended there means completions wait, and
the driver calls ``reap()`` which calls ``done`` for each.

A transport also builds the network of its link family (``build``), refuses what it cannot
honour (``check``), records received frames (``record``, ``linktype``), and adds its own
counters to the run's summary (``count``, ``fabric_stats``, ``stopped``).

``QpTransport`` is RoCE's: RC queue pairs on the switched network's NICs.  Native InfiniBand
(``roce.emu.ib.ibrun.IbTransport``) is the same queue pairs on HCAs; Ultra Ethernet
(``roce.emu.uet.uettransport.UetTransport``) posts SES messages on PDCs.

How RoCE maps transfers to QPs: each open-loop flow has a QP pair of its own, made when it
is posted and destroyed when it completes, as the HPCC simulator gives each flow a QP (no
flow queues behind another, and each starts with fresh congestion-control state: a QP
reused after a throttled flow would start the next one at that flow's rate); what a
destroyed QP counted is kept for the summary first.  A collective has one QP pair per
connection (source, destination); the receiver keeps ``window`` receives posted, and the
sender's queue holds twice the window (a receive completes before the sender hears the ACK),
a transfer beyond that waiting for a send to complete.  Receive completions match the
connection's transfers in order (RC delivers a connection's messages in order).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from roce.emu.budget import QP_OVERHEAD
from roce.emu.core.constants import ALL_ACCESS, WCStatus, WROpcode
from roce.emu.core.qp import QPCap
from roce.emu.core.verbs import PD, QP, QPInitAttr, connect
from roce.emu.core.work import SGE, RecvWR, SendWR
from roce.emu.net import runner
from roce.emu.net import topology as topo
from roce.emu.net.stages import DSCP_ROCE, ROCE_TRAFFIC_CLASS
from roce.emu.scenario import QP_TYPES, Scenario, Summary, add_qp_counts
from roce.emu.workload.traffic import Transfer

# Bytes a transport keeps per transfer in flight: a flow may make a QP on each host, and
# its bookkeeping.
PER_TRANSFER = 2 * QP_OVERHEAD + 256
CQ_ENTRIES = 1 << 30  # a host's CQ: bounded by its QPs' work, never by this number
OPS = ("write", "send")

# done(transfer, ok, bytes that arrived, status name)
Done = Callable[[Transfer, bool, int, str], None]


@dataclass
class Shared:
    """What the driver hands a transport once the network is built: the run's scenario,
    the host names (a transfer's ``src``/``dst`` index them), the source pattern and the
    sink every host registers (``largest`` bytes each), a collective's ``window`` (the most
    transfers in flight on one connection), and the base RTT between the farthest hosts
    (selective repeat's BDP cap)."""

    sc: Scenario
    hosts: list[str]
    pattern: bytearray
    sink: bytearray
    largest: int
    window: int
    far_rtt_ns: int


class Transport:
    """The interface (module docstring); ``done`` is set by the driver before ``post``."""

    name = ""
    linktype = 1  # of the frames ``record`` writes: Ethernet

    def __init__(self) -> None:
        self.ready: list[Any] = []
        self.done: Done | None = None
        self.net: Any = None
        self.shared: Shared | None = None

    def check(self, sc: Scenario) -> None:
        """Refuse, with a UsageError naming the option, what this transport cannot honour."""

    def build(self, t: topo.Topology, sc: Scenario) -> Any:
        """The network of the run on topology ``t``."""
        raise NotImplementedError

    def start(self, net: Any, shared: Shared) -> None:
        """The network is built: set up the hosts (congestion control, recovery)."""
        self.net, self.shared = net, shared

    def post(self, t: Transfer, op: str) -> None:
        raise NotImplementedError

    def reap(self) -> None:
        """Call ``done`` for every transfer that completed since the last call."""
        raise NotImplementedError

    def count(self, s: Summary) -> None:
        """The transport's counters (packets, retransmissions, NAKs...) into ``s``."""

    def record(self, writer: Any) -> None:
        """Write every frame a host receives to ``writer``."""
        self.net.recorders.append(writer)

    def fabric_stats(self, failures: Any) -> dict[str, Any]:
        return runner.fabric_stats(self.net, failures)

    def stopped(self, sc: Scenario, left: int) -> str:
        """Why the network stopped with ``left`` transfers outstanding, in words."""
        return runner.stopped_why(sc, self.net, left)


@dataclass(eq=False)
class Connection:
    """One QP pair from host ``src`` to ``dst`` (host indexes) and what it carries: an
    open-loop flow's pair carries one flow (``flow``), a collective's connection its
    transfers in order (``queue``)."""

    src: int
    dst: int
    qa: QP
    qb: QP
    flow: Transfer | None = None
    queue: deque = field(default_factory=deque)  # posted, not yet received, in order
    backlog: deque = field(default_factory=deque)  # handed out, waiting for the send queue
    sending: int = 0  # sends posted and not yet completed at the sender


@dataclass
class _Host:
    """One host's verbs objects for a run: its PD, CQ, source and sink regions."""

    pd: PD
    cq: runner.HostCQ
    source: Any  # MemoryRegion over the shared pattern
    sink: Any  # MemoryRegion over the shared sink


class QpTransport(Transport):
    """RoCE: RC queue pairs on the switched network's NICs (module docstring)."""

    name = "roce"

    def __init__(self) -> None:
        super().__init__()
        self._hosts: dict[int, _Host] = {}
        self.connections: dict[int, Connection] = {}  # alive, by id
        self.conn_of: dict[tuple[int, int], Connection] = {}
        self.counts = Summary(scenario={})  # what destroyed QPs counted
        self.naks: Counter = Counter()
        self.delivered = 0
        self.tclass = ROCE_TRAFFIC_CLASS

    def build(self, t: topo.Topology, sc: Scenario) -> Any:
        return topo.build(t, runner.options(sc, direct=False))

    def start(self, net: Any, shared: Shared) -> None:
        super().start(net, shared)
        sc = shared.sc
        if sc.cc is not None:
            self.tclass = DSCP_ROCE << 2 | sc.cc.ecn
            if sc.cc.enabled:
                for nic in net.hosts.values():
                    nic.ctx.set_congestion_control(sc.cc)
        runner.set_recovery([nic.ctx for nic in net.hosts.values()], sc, shared.far_rtt_ns)

    # -- hosts and connections ---------------------------------------------------------

    def _host(self, i: int) -> _Host:
        h = self._hosts.get(i)
        if h is None:
            sh = self.shared
            assert sh is not None
            ctx = self.net.hosts[sh.hosts[i]].ctx
            pd = PD(ctx)
            memory = ctx.device.memory
            source = memory.register(pd, sh.largest, ALL_ACCESS)
            source.buf = sh.pattern  # every host's source and sink: the same bytes
            sink = memory.register(pd, sh.largest, ALL_ACCESS)
            sink.buf = sh.sink
            h = self._hosts[i] = _Host(pd, runner.HostCQ(ctx, CQ_ENTRIES, self.ready),
                                       source, sink)
        return h

    def _connect(self, src: int, dst: int, depth: int) -> Connection:
        sc = self.shared.sc  # type: ignore[union-attr]
        a, b = self._host(src), self._host(dst)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth)
        qa = QP(a.pd, QPInitAttr(qp_type=QP_TYPES["rc"], send_cq=a.cq, recv_cq=a.cq, cap=cap))
        qb = QP(b.pd, QPInitAttr(qp_type=QP_TYPES["rc"], send_cq=b.cq, recv_cq=b.cq, cap=cap))
        connect(qa, qb, path_mtu=sc.mtu, psn_a=sc.psn, psn_b=sc.psn, timeout=sc.timeout,
                retry_cnt=sc.retry_cnt, rnr_retry=sc.rnr_retry, traffic_class=self.tclass,
                resolve=True)
        c = Connection(src, dst, qa, qb)
        a.cq.flows[qa.qp_num] = (c, True)
        b.cq.flows[qb.qp_num] = (c, False)
        self.connections[id(c)] = c
        return c

    def _retire(self, c: Connection) -> None:
        """Destroy a flow's QP pair, its counters kept for the summary first."""
        add_qp_counts(self.counts, self.naks, [c.qa.core, c.qb.core])
        self.delivered += c.qb.core.counters.messages_executed
        for qp, host in ((c.qa, c.src), (c.qb, c.dst)):
            del self._host(host).cq.flows[qp.qp_num]
            qp.close()
        del self.connections[id(c)]

    # -- posting -----------------------------------------------------------------------

    def post(self, t: Transfer, op: str) -> None:
        if op == "write":
            self._write(self._connect(t.src, t.dst, 1), t)
            return
        c = self.conn_of.get((t.src, t.dst))
        window = self.shared.window  # type: ignore[union-attr]
        if c is None:
            c = self.conn_of[(t.src, t.dst)] = self._connect(t.src, t.dst, 2 * window)
            for _ in range(window):
                self._recv(c)
        if c.sending >= 2 * window:
            c.backlog.append(t)
        else:
            self._send(c, t)

    def _recv(self, c: Connection) -> None:
        sink = self._host(c.dst).sink
        c.qb.post_recv(RecvWR(wr_id=0, sg_list=[SGE(sink.addr, sink.length, sink.lkey)]))

    def _send(self, c: Connection, t: Transfer) -> None:
        c.queue.append(t)
        c.sending += 1
        source = self._host(t.src).source
        c.qa.post_send(SendWR(wr_id=t.id, opcode=WROpcode.IBV_WR_SEND,
                              sg_list=[SGE(source.addr, t.size, source.lkey)]))

    def _write(self, c: Connection, t: Transfer) -> None:
        c.flow = t
        source, sink = self._host(t.src).source, self._host(t.dst).sink
        c.qa.post_send(SendWR(wr_id=t.id, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[SGE(source.addr, t.size, source.lkey)],
                              remote_addr=sink.addr, rkey=sink.rkey))

    # -- completions -------------------------------------------------------------------

    def reap(self) -> None:
        done = self.done
        assert done is not None
        batch = [cq for cq in dict.fromkeys(self.ready) if cq is not None]
        self.ready.clear()
        for cq in batch:
            for wc in cq.poll(len(cq)):
                c, sending = cq.flows[wc.qp_num]
                ok = wc.status == WCStatus.IBV_WC_SUCCESS
                status = WCStatus(wc.status).name
                if c.flow is not None:
                    t, c.flow = c.flow, None
                    self._retire(c)
                    done(t, ok, wc.byte_len, status)
                elif sending:
                    c.sending -= 1
                    if not ok:  # the QP takes no more work: its oldest transfer failed
                        pending = c.queue or c.backlog
                        if pending:
                            done(pending.popleft(), False, 0, status)
                    elif c.backlog:
                        self._send(c, c.backlog.popleft())
                else:
                    t = c.queue.popleft()
                    if ok:
                        self._recv(c)
                    done(t, ok, wc.byte_len, status)

    # -- the summary -------------------------------------------------------------------

    def count(self, s: Summary) -> None:
        k = self.counts
        for name in ("packets", "retransmitted", "timeouts", "rnr_naks",
                     "selective_retransmitted", "spurious_retransmissions", "ooo_accepted",
                     "selective_naks"):
            setattr(s, name, getattr(k, name))
        naks = Counter(self.naks)
        delivered = self.delivered
        for c in self.connections.values():
            add_qp_counts(s, naks, [c.qa.core, c.qb.core])
            delivered += c.qb.core.counters.messages_executed
        s.naks = dict(naks)
        s.delivered = delivered


__all__ = ["CQ_ENTRIES", "OPS", "PER_TRANSFER", "Connection", "Done", "QpTransport",
           "Shared", "Transport"]
