"""A native InfiniBand subnet on the simulated network: ``IbConfig`` and ``build``.

The topology is the switched network's (``roce.emu.net.topology``: p2p, incast, dumbbell,
leaf-spine, fat tree, a file), its links the same ``Wire``s (rate, delay, faults); its hosts
are ``hca.Hca``, its switches ``ibswitch.IbSwitch``.  The subnet manager's part is done here
once: LIDs (``routing.assign_lids``), every switch's linear forwarding table
(``routing.compute``; with adaptive routing each DLID's equal next hops too), the SL-to-VL
and VL arbitration tables of every port (``vltables``), and the address maps the HCAs'
framing reads.

Receive buffer per port and data VL (what each port grants in credits): a round trip of the
link at its rate plus three largest packets, in 64-byte blocks.  A round trip and two
packets keep one VL of a link at line rate while every packet waits for credit (a smaller
buffer leaves the link idle part of each round trip); the third lets a receiver batch its
flow-control packets (``credits`` rule 5, ``low`` the buffer less that packet) without
the sender ever waiting for one (bench/RESULTS.md, "Native InfiniBand against RoCE",
measures both).  Like PFC's headroom (``roce.emu.net.buffer``) it grows with the
link, not with anything the user typed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roce.emu import defaults
from roce.emu.core.verbs import Context
from roce.emu.ib.credits import Credits, blocks, refresh_ns
from roce.emu.ib.framing import Framer, packed
from roce.emu.ib.hca import Hca
from roce.emu.ib.ibcc import IbCcConfig
from roce.emu.ib.ibswitch import IbPort, IbSwitch
from roce.emu.ib.routing import assign_lids, compute
from roce.emu.ib.vltables import SlToVl, VlArbiter
from roce.emu.net.faults import Faults, LinkConfig
from roce.emu.net.link import Wire
from roce.emu.net.sim import Network
from roce.emu.net.stages import DscpClassifier
from roce.emu.net.topology import Gateway, NetOptions, Topology, endpoint
from roce.errors import UsageError

# The MAC the device's frames carry toward the subnet: an InfiniBand port has none, the
# device's RoCE frames need one (locally administered).
SUBNET_MAC = "02:1b:00:00:00:01"


@dataclass
class IbConfig:
    """What the subnet manager sets on every port: VLs, routing, SL-to-VL, arbitration."""

    vls: int = defaults.IB_VLS
    routing: str = defaults.IB_ROUTING
    max_frame: int = defaults.MTU + 128
    sl2vl: SlToVl = field(default_factory=lambda: SlToVl.spread(defaults.IB_VLS))
    # a fresh arbiter per port: its pointers are the port's
    arbitration: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]] | None = None
    cc: IbCcConfig | None = None  # congestion control (Annex A10), off by default
    lmc: int = 0  # 2^lmc LIDs per HCA port (roce.emu.ib.lft)
    adaptive: bool = False  # adaptive routing at the switches (roce.emu.ib.ibswitch)

    def buffer_blocks(self, rate_bps: int, delay_ns: int) -> int:
        """A port's receive buffer per VL (module docstring): a round trip, three packets."""
        round_trip = 2 * delay_ns * rate_bps // 8 // 1_000_000_000
        return blocks(round_trip + 3 * self.max_frame)

    def credits(self, wire: Any) -> Credits:
        """The flow-control state of the port that sends on ``wire``."""
        cap = self.buffer_blocks(wire.rate_bps, wire.delay_ns)
        return Credits(self.vls, cap, refresh_ns(wire.rate_bps),
                       cap - blocks(self.max_frame))  # a round trip, two largest packets

    def arbiter(self) -> VlArbiter:
        if self.arbitration is None:
            return VlArbiter.round_robin(self.vls)
        high, low = self.arbitration
        return VlArbiter(high, low)


def build(t: Topology, o: NetOptions, cfg: IbConfig, tclass: int = 0) -> Network:
    """The subnet of ``t``, ready to run (module docstring)."""
    net = Network(o.seed)
    cfg.max_frame = o.max_frame
    classifier = DscpClassifier()
    degree: dict[str, int] = {}
    for ln in t.links:
        for end in (ln.a, ln.b):
            degree[end] = degree.get(end, 0) + 1
    for name in t.switches:
        net.switches[name] = IbSwitch(net, name, cfg)
    for name, ip in t.hosts.items():
        if degree.get(name, 0) != 1:
            raise UsageError(f"host {name} needs exactly one link, has {degree.get(name, 0)}")
        net.hosts[name] = Hca(net, Context(name, ip), classifier, cfg)
    for ln in t.links:
        rate = ln.rate_gbps or o.rate_gbps
        delay = o.delay_ns if ln.delay_ns is None else ln.delay_ns
        ea, eb = endpoint(net, ln.a), endpoint(net, ln.b)
        for src, dst, fields in ((ea, eb, ln.faults),
                                 (eb, ea, ln.reverse_faults if ln.reverse_faults is not None
                                  else ln.faults)):
            lc = LinkConfig(**{**o.faults, **fields, "rate_gbps": rate, "delay_ns": delay})
            w = Wire(net, src, dst, rate, delay, Faults(lc, net.child_rng()),
                     f"{src.name}->{dst.name}")
            src.attach(w)
            if isinstance(src, IbPort):
                src.peer = dst
            net.wires.append(w)
    lids = assign_lids(list(t.hosts), cfg.lmc)
    routes = compute(list(t.hosts), t.switches, t.links, lids, cfg.routing, cfg.lmc)
    for name, table in routes.lft.items():
        sw = net.switches[name]
        sw.lft = table
        if cfg.adaptive:
            sw.ar = routes.groups[name]
    lid_of = {packed(t.hosts[h]): lid for h, lid in lids.items()}
    ip_of = {lid: t.hosts[h] for h, lid in lids.items()}
    addresses = frozenset(t.hosts.values())
    for name, hca in net.hosts.items():
        dev = hca.device
        dev.neighbors = Gateway(SUBNET_MAC, addresses, hca.ctx.ip)
        hca.framer = Framer(lids[name], hca.ctx.ip, lid_of, ip_of, dev.mac, SUBNET_MAC, tclass,
                            cfg.lmc)
    return net


def stats(net: Network) -> dict[str, Any]:
    """The subnet's counters: per switch port and HCA, and in total.  ``credit_overflows``
    (packets that arrived beyond the buffer their receiver granted) is zero by rule."""
    ports: dict[str, Any] = {}
    tot = {"drops": 0, "credit_overflows": 0, "fc_packets": 0, "credit_stalls": 0,
           "max_queue_bytes": 0, "unrouted": 0, "fecn_marked": 0, "cnps_sent": 0,
           "becns_received": 0}
    for sw in net.switches.values():
        tot["unrouted"] += sw.unrouted
        if sw.ar is not None:
            tot["ar_moved"] = tot.get("ar_moved", 0) + sw.ar_moved
        for p in sw.ports:
            cr = p.credits
            ports[p.name] = {"peer": p.wire.dst.name, "drops": p.drops,
                             "credit_overflows": cr.overflows, "fc_sent": cr.packets_sent,
                             "fc_received": cr.packets_received, "credit_stalls": cr.stalls,
                             "max_buffer_blocks": max(cr.max_used), "buffer_blocks": cr.capacity,
                             "max_queue_bytes": p.max_queue_bytes, "tx_frames": p.tx_frames,
                             "rx_frames": p.rx_frames, "fecn_marked": p.fecn_marked}
            tot["fecn_marked"] += p.fecn_marked
            tot["drops"] += p.drops
            tot["credit_overflows"] += cr.overflows
            tot["fc_packets"] += cr.packets_sent
            tot["credit_stalls"] += cr.stalls
            tot["max_queue_bytes"] = max(tot["max_queue_bytes"], p.max_queue_bytes)
    hosts: dict[str, Any] = {}
    for name, h in net.hosts.items():
        cr = h.credits
        hosts[name] = {"lid": h.framer.lid, "credit_overflows": cr.overflows,
                       "fc_sent": cr.packets_sent, "fc_received": cr.packets_received,
                       "credit_stalls": cr.stalls, "bad_crc": h.bad_crc,
                       "tx_frames": h.tx_frames, "rx_frames": h.rx_frames,
                       "cnps_sent": h.cnps_sent}
        agent = h.cc_agent
        if agent is not None:
            hosts[name]["becns_received"] = agent.becns
            hosts[name]["fecn_received"] = h.fecn_received
            hosts[name]["max_ccti"] = agent.max_ccti
            tot["becns_received"] += agent.becns
        tot["cnps_sent"] += h.cnps_sent
        tot["credit_overflows"] += cr.overflows
        tot["fc_packets"] += cr.packets_sent
        tot["credit_stalls"] += cr.stalls
    link_lost = sum(w.stats.lost for w in net.wires)
    return {**tot, "link_lost": link_lost, "ports": ports, "hosts": hosts}


__all__ = ["SUBNET_MAC", "IbConfig", "build", "stats"]
