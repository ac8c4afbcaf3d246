"""A workload's transfers as UET messages on PDCs: ``UetTransport``.

The workload driver (``roce.emu.net.workrun``) posts transfers through the interface every
transport has (``roce.emu.net.transport``); this one carries them on ``UetHost``s
(``roce.emu.uet.host``) over the switched Ethernet network the RoCE runs use, with the
run's PDC mode, entropy and trimming (``roce.emu.uet.run.UetOptions``) and its congestion
management (``--cc nscc|rccc``: each host's PDS admits requests through it, as in a
``--count`` UET run).

- Every ordered pair of hosts has one PDC, opened when its first transfer is posted: a PDC
  carries any number of messages (a QP per flow is RoCE's way to give each flow fresh
  congestion state; a PDC's packets are acknowledged out of order and its messages are
  independent).  Each PDC into a host takes a receive queue (resource index) of its own.
- An open-loop flow is a WRITE (``pattern`` into the target's ``sink``), complete at the
  initiator when the PDS has every packet acknowledged; a collective's transfer is a SEND,
  for which the target posts one receive buffer over its sink, complete at the target when
  every byte landed: the receive completion names its PDC and message ID, which name the
  transfer (RUD completes a PDC's messages in any order).
- A message that fails (its PDC failed) is reported failed; the run's data check says so.

The summary's ``uet`` part holds the PDS and SES counters (``run.uet_counters``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roce.emu.core.constants import ALL_ACCESS
from roce.emu.net import topology as topo
from roce.emu.net.stages import Trimmer
from roce.emu.net.transport import Shared, Transport
from roce.emu.scenario import Scenario, Summary
from roce.emu.uet import uetframes
from roce.emu.uet.host import UetHost
from roce.emu.uet.pds import PdsConfig
from roce.emu.uet.run import MODES, UetOptions, check_options, net_options, refuse, uet_counters
from roce.emu.uet.ses import RI_MAX
from roce.emu.workload.traffic import Transfer
from roce.errors import UsageError


@dataclass
class _Host:
    """One host's UET endpoint for a run, with its source and sink regions."""

    host: UetHost
    source: Any  # MemoryRegion over the shared pattern
    sink: Any  # MemoryRegion over the shared sink


class UetTransport(Transport):
    """Transfers as SES messages on one PDC per ordered pair of hosts (module docstring)."""

    name = "uet"

    def __init__(self, opts: UetOptions | None = None) -> None:
        super().__init__()
        opts = opts if opts is not None else UetOptions()
        check_options(opts)
        self.opts = opts
        self._hosts: dict[int, _Host] = {}
        self.pdcs: dict[tuple[int, int], tuple[Any, int]] = {}  # pair -> (PDC, its RI)
        self.into: dict[int, int] = {}  # host -> receive queues its PDCs took
        # (initiator IP, PDC ID, message ID) -> transfer, for the target's completion
        self.by_msg: dict[tuple[str, int, int], Transfer] = {}
        self.by_id: dict[int, Transfer] = {}  # transfer ID -> transfer, posted, not done

    def check(self, sc: Scenario) -> None:
        if sc.protocol != "uet":
            raise UsageError(f"--protocol {sc.protocol}: a UET transport runs --protocol uet")
        refuse(sc)

    def build(self, t: topo.Topology, sc: Scenario) -> Any:
        opts = self.opts
        if not t.switches and opts.trim:
            raise UsageError("--trim: the topology has no switch to trim packets; two "
                             "hosts through one switch: --topology incast:1")
        config = PdsConfig(mode=MODES[opts.mode])
        marking = uetframes.Marking()
        trimmer = Trimmer() if opts.trim else None

        def host(net: Any, name: str, ip: str) -> UetHost:
            return UetHost(net, name, ip, config, sc.mtu, opts.entropy, marking,
                           trimmer.dscp if trimmer is not None else None, sc.cc)

        return topo.build(t, net_options(sc, trimmer), host)

    def start(self, net: Any, shared: Shared) -> None:
        super().start(net, shared)
        for h in net.hosts.values():
            h.ready = self.ready

    def _host(self, i: int) -> _Host:
        h = self._hosts.get(i)
        if h is None:
            sh = self.shared
            assert sh is not None
            u = self.net.hosts[sh.hosts[i]]
            source = u.space.register(u.pd, sh.largest, ALL_ACCESS)
            source.buf = sh.pattern  # every host's source and sink: the same bytes
            sink = u.space.register(u.pd, sh.largest, ALL_ACCESS)
            sink.buf = sh.sink
            h = self._hosts[i] = _Host(u, source, sink)
        return h

    def _pdc(self, src: int, dst: int) -> tuple[Any, int]:
        got = self.pdcs.get((src, dst))
        if got is None:
            a, b = self._host(src), self._host(dst)
            ri = self.into[dst] = self.into.get(dst, -1) + 1
            if ri > RI_MAX:
                raise UsageError(f"--protocol uet: host {b.host.name} would receive from "
                                 f"{ri + 1} hosts, more than its {RI_MAX + 1} receive "
                                 "queues (12-bit resource indexes)")
            got = self.pdcs[(src, dst)] = (a.host.open(b.host.ip), ri)
        return got

    def post(self, t: Transfer, op: str) -> None:
        a, b = self._host(t.src), self._host(t.dst)
        pdc, ri = self._pdc(t.src, t.dst)
        src, sink = a.source, b.sink
        if op == "send":
            b.host.ses.post_recv(t.id, sink, sink.addr, sink.length, ri)
        m = a.host.ses.post(op, pdc, t.id, src, src.addr, t.size, sink.rkey, sink.addr, ri)
        self.by_id[t.id] = t
        if op == "send":
            self.by_msg[a.host.ip, pdc.id, m.msg_id] = t
        a.host.changed(self.net.now)

    def reap(self) -> None:
        done = self.done
        assert done is not None
        hosts = [h for h in dict.fromkeys(self.ready) if h is not None]
        self.ready.clear()
        for h in hosts:
            recvs, h.ses.recv_completions = h.ses.recv_completions, []
            for c in recvs:
                pdc = h.pds.pdcs[c.pdc]
                t = self.by_msg.pop((pdc.peer, pdc.peer_id, c.msg_id), None)
                if t is not None and self.by_id.pop(t.id, None) is not None:
                    done(t, c.ok, c.bytes, "OK" if c.ok else "FAILED")
            sends, h.ses.completions = h.ses.completions, []
            for c in sends:
                t = self.by_id.get(c.wr_id)
                if t is None:
                    continue
                if c.kind == "write" or not c.ok:  # a SEND completes at its target
                    del self.by_id[c.wr_id]
                    done(t, c.ok, c.bytes, "OK" if c.ok else "FAILED")

    def count(self, s: Summary) -> None:
        u = uet_counters(self.net.hosts.values())
        pds = u["pds"]
        s.packets = pds.get("requests_sent", 0) + pds.get("retransmitted", 0)
        s.retransmitted = pds.get("retransmitted", 0)
        s.timeouts = pds.get("timeouts", 0)
        s.naks = dict(u["nacks_received"])
        s.ooo_accepted = pds.get("out_of_order", 0)
        s.spurious_retransmissions = pds.get("duplicates", 0)
        s.delivered = u["ses"].get("messages_executed", 0)
        sc = self.shared.sc  # type: ignore[union-attr]
        reps = u.pop("reps")
        s.uet = {"pdc_mode": self.opts.mode, "entropy": self.opts.entropy,
                 "trim": self.opts.trim, **u,
                 "cc": sc.cc.algorithm if sc.cc is not None else "none",
                 # PDCs stay open to the end of the run, as a collective's QPs do
                 "pdcs_closed": sum(pdc.state == "closed" for pdc, _ in self.pdcs.values())}
        if reps:
            s.uet["reps"] = reps

    def stopped(self, sc: Scenario, left: int) -> str:
        return (f"the virtual time limit ({sc.time_limit_ns / 1e9:g} s) ran out with {left} "
                "transfer(s) outstanding")


__all__ = ["UetTransport"]
