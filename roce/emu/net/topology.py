"""Topologies: what hosts, switches and links exist (``Topology``), the named ones
(``p2p``, ``incast:N``, ``dumbbell:N``, ``leafspine:L,S,H``, a TOML file), their default
traffic, and ``build`` that turns one into a running ``Network`` with routes.

Routes are shortest paths by hop count: a switch's next hops toward a host are every
neighbour one hop closer to it (hosts never forward), so equal-cost paths give ECMP sets.

Hosts come in two kinds (``build``): the switched network's ``Nic`` (a transmit scheduler:
queues per priority that PFC pauses, a pacer per QP that congestion control drives), or, on
a topology without switches, the ``DirectNic`` of ``roce.emu.net.direct`` (frames go onto
the link as the device builds them: the two-host model, ``roce.emu.fabric.Fabric``'s) unless
``NetOptions.direct`` is off.
"""

from __future__ import annotations

import random
from argparse import ArgumentTypeError
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from roce.emu import defaults
from roce.emu.core.verbs import Context
from roce.emu.net.buffer import BufferConfig
from roce.emu.net.direct import DirectNic, Link
from roce.emu.net.faults import Faults, LinkConfig
from roce.emu.net.link import Wire
from roce.emu.net.nic import Nic
from roce.emu.net.sim import Network
from roce.emu.net.stages import (
    DscpClassifier,
    EcmpForwarder,
    EcnConfig,
    NoMarker,
    RedMarker,
    SprayForwarder,
)
from roce.emu.net.switch import Switch, SwitchPort
from roce.errors import InputError, UsageError


@dataclass
class LinkSpec:
    a: str
    b: str
    rate_gbps: float | None = None  # None: the default (--rate)
    delay_ns: int | None = None
    faults: dict[str, Any] = field(default_factory=dict)  # LinkConfig fields, a -> b
    reverse_faults: dict[str, Any] | None = None  # b -> a (default: the same)


@dataclass
class SwitchSpec:
    name: str
    buffer: int | None = None
    ecn: EcnConfig | None = None
    pfc: bool | None = None


@dataclass
class Topology:
    hosts: dict[str, str] = field(default_factory=dict)  # name -> IPv4 address
    switches: dict[str, SwitchSpec] = field(default_factory=dict)
    links: list[LinkSpec] = field(default_factory=list)
    traffic: list[tuple[str, str]] = field(default_factory=list)  # default (src, dst) pairs
    leaf_of: dict[str, str] = field(default_factory=dict)  # host -> its switch

    def host(self, name: str) -> None:
        self.hosts[name] = _ip(len(self.hosts))

    def link(self, a: str, b: str) -> None:
        self.links.append(LinkSpec(a, b))
        if a in self.hosts:
            self.leaf_of[a] = b


def _ip(k: int) -> str:
    return f"10.0.{k // 250}.{k % 250 + 1}"


def p2p() -> Topology:
    """Two hosts cabled back to back, A sending to B."""
    t = Topology()
    t.host("A")
    t.host("B")
    t.link("A", "B")
    t.traffic = [("A", "B")]
    return t


def incast(n: int) -> Topology:
    t = Topology()
    t.switches["sw"] = SwitchSpec("sw")
    for i in range(1, n + 1):
        t.host(f"s{i}")
        t.link(f"s{i}", "sw")
    t.host("r")
    t.link("r", "sw")
    t.traffic = [(f"s{i}", "r") for i in range(1, n + 1)]
    return t


def dumbbell(n: int) -> Topology:
    t = Topology()
    t.switches["L"] = SwitchSpec("L")
    t.switches["R"] = SwitchSpec("R")
    for i in range(1, n + 1):
        t.host(f"a{i}")
        t.link(f"a{i}", "L")
    for i in range(1, n + 1):
        t.host(f"b{i}")
        t.link(f"b{i}", "R")
    t.link("L", "R")
    t.traffic = [(f"a{i}", f"b{i}") for i in range(1, n + 1)]
    return t


def leafspine(leaves: int, spines: int, per_leaf: int) -> Topology:
    t = Topology()
    for s in range(1, spines + 1):
        t.switches[f"spine{s}"] = SwitchSpec(f"spine{s}")
    for leaf in range(1, leaves + 1):
        t.switches[f"leaf{leaf}"] = SwitchSpec(f"leaf{leaf}")
        for s in range(1, spines + 1):
            t.link(f"leaf{leaf}", f"spine{s}")
    for leaf in range(1, leaves + 1):
        for h in range(1, per_leaf + 1):
            t.host(f"l{leaf}h{h}")
            t.link(f"l{leaf}h{h}", f"leaf{leaf}")
    return t


def permutation(t: Topology, rng: random.Random) -> list[tuple[str, str]]:
    """Each host sends to exactly one host on another switch and receives from exactly one:
    a seeded derangement across switches (rejection sampling)."""
    names = list(t.hosts)
    if len(set(t.leaf_of[h] for h in names)) < 2:
        raise UsageError("--traffic permutation needs hosts on at least two switches")
    for _ in range(10_000):
        dst = names[:]
        rng.shuffle(dst)
        if all(t.leaf_of[a] != t.leaf_of[b] for a, b in zip(names, dst)):
            return list(zip(names, dst))
    raise UsageError("--traffic permutation: no derangement across switches found")


def all_to_all(t: Topology) -> list[tuple[str, str]]:
    names = list(t.hosts)
    return [(a, b) for a in names for b in names if a != b]


def parse(spec: str) -> Topology:
    """``p2p``, ``incast:N``, ``dumbbell:N`` or ``leafspine:L,S,H``."""
    if spec == "p2p":
        return p2p()
    kind, _, arg = spec.partition(":")
    try:
        nums = [int(x) for x in arg.split(",")] if arg else []
    except ValueError:
        nums = []
    if kind == "incast" and len(nums) == 1 and nums[0] >= 1:
        return incast(nums[0])
    if kind == "dumbbell" and len(nums) == 1 and nums[0] >= 1:
        return dumbbell(nums[0])
    if kind == "leafspine" and len(nums) == 3 and min(nums) >= 1:
        return leafspine(*nums)
    raise UsageError(f"--topology {spec!r}: expected p2p, incast:N, dumbbell:N or "
                     "leafspine:L,S,H (positive integers)")


def load(path: str) -> Topology:
    """A topology from TOML (Python's tomllib):

        [hosts.h1]                       # ip optional
        ip = "10.0.0.1"
        [switches.sw]
        buffer = "2M"                     # optional: size, ECN, PFC per switch
        ecn = "100K,400K,0.2"             # or "off"
        pfc = true
        [[links]]
        a = "h1"; b = "sw"; rate = "100G"; delay = "1us"
        faults = { loss = 0.01 }          # LinkConfig fields, a -> b
        reverse_faults = { dup = 0.01 }   # b -> a (default: the same as faults)
        [[traffic]]
        src = "h1"; dst = "h2"
    """
    from roce.options import parse_rate, parse_size, parse_time
    from roce.tomlfile import load as load_toml

    doc = load_toml(path)
    t = Topology()
    try:
        for name, h in doc.get("hosts", {}).items():
            t.hosts[name] = h.get("ip", _ip(len(t.hosts)))
        for name, s in doc.get("switches", {}).items():
            t.switches[name] = SwitchSpec(
                name, parse_size(str(s["buffer"])) if "buffer" in s else None,
                parse_ecn(str(s["ecn"])) if "ecn" in s else None, s.get("pfc"))
        for ln in doc.get("links", []):
            spec = LinkSpec(ln["a"], ln["b"],
                            parse_rate(str(ln["rate"])) if "rate" in ln else None,
                            parse_time(str(ln["delay"])) if "delay" in ln else None,
                            dict(ln.get("faults", {})), ln.get("reverse_faults"))
            for end in (spec.a, spec.b):
                if end not in t.hosts and end not in t.switches:
                    raise InputError(f"{path}: link end {end!r} is neither a host nor a switch")
            for fields in (spec.faults, spec.reverse_faults or {}):
                unknown = set(fields) - set(LinkConfig.__dataclass_fields__)
                if unknown:
                    raise InputError(f"{path}: unknown fault field(s) {sorted(unknown)}")
            t.links.append(spec)
            for h, s in ((spec.a, spec.b), (spec.b, spec.a)):
                if h in t.hosts:
                    t.leaf_of[h] = s
        t.traffic = [(x["src"], x["dst"]) for x in doc.get("traffic", [])]
    except (KeyError, TypeError, AttributeError, ValueError, ArgumentTypeError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"{path}: bad topology entry: {e}") from None
    for a, b in t.traffic:
        if a not in t.hosts or b not in t.hosts:
            raise InputError(f"{path}: traffic {a} -> {b} names an unknown host")
    return t


def parse_ecn(text: str) -> EcnConfig:
    """``off`` or ``KMIN,KMAX,PMAX`` (sizes with K/M suffixes, PMAX in [0, 1])."""
    from roce.options import parse_size

    if text.strip().lower() == "off":
        return EcnConfig(enabled=False)
    parts = text.split(",")
    try:
        if len(parts) != 3:
            raise ValueError
        kmin, kmax, pmax = parse_size(parts[0]), parse_size(parts[1]), float(parts[2])
    except (ValueError, TypeError, ArgumentTypeError):
        raise UsageError(f"--ecn {text!r}: expected KMIN,KMAX,PMAX (e.g. 100K,400K,0.2) or "
                         "off") from None
    if not (0 <= kmin <= kmax and 0.0 <= pmax <= 1.0):
        raise UsageError(f"--ecn {text!r}: needs 0 <= KMIN <= KMAX and 0 <= PMAX <= 1")
    return EcnConfig(kmin, kmax, pmax)


@dataclass
class NetOptions:
    """Network-wide defaults; a topology file may override them per switch or link."""

    seed: int = defaults.SEED
    rate_gbps: float = defaults.RATE_GBPS
    delay_ns: int = defaults.DELAY_NS
    faults: dict[str, Any] = field(default_factory=dict)  # LinkConfig fields for every link
    buffer: int = defaults.BUFFER
    ecn: EcnConfig = field(default_factory=EcnConfig)
    pfc: bool = defaults.PFC
    lb: str = defaults.LB
    max_frame: int = defaults.MTU + 128
    # hosts of a topology without switches: DirectNic (True) or the scheduling Nic
    direct: bool = True


def build(t: Topology, o: NetOptions) -> Network:
    net = Network(o.seed)
    direct = o.direct and not t.switches
    classifier = DscpClassifier()
    degree: dict[str, int] = {}
    for ln in t.links:
        for end in (ln.a, ln.b):
            degree[end] = degree.get(end, 0) + 1
    for i, (name, spec) in enumerate(t.switches.items()):
        fwd = (SprayForwarder(net.child_rng()) if o.lb == "spray"
               else EcmpForwarder(net.rng.getrandbits(32)))
        pfc = o.pfc if spec.pfc is None else spec.pfc
        net.switches[name] = Switch(
            net, name, i + 1, buffer=BufferConfig(spec.buffer or o.buffer),
            classifier=classifier, forwarder=fwd, pfc=pfc, max_frame=o.max_frame)
    for name, ip in t.hosts.items():
        if degree.get(name, 0) != 1:
            raise UsageError(f"host {name} needs exactly one link, has {degree.get(name, 0)}")
        ctx = Context(name, ip)
        net.hosts[name] = DirectNic(net, ctx) if direct else Nic(net, ctx, classifier)
    ends: dict[str, list[tuple[Any, Any]]] = {}  # node -> [(its endpoint, peer endpoint)]
    for ln in t.links:
        rate = ln.rate_gbps or o.rate_gbps
        delay = o.delay_ns if ln.delay_ns is None else ln.delay_ns
        ea, eb = _endpoint(net, ln.a), _endpoint(net, ln.b)
        for src, dst, fields, a in (
                (ea, eb, ln.faults, ln.a),
                (eb, ea, ln.reverse_faults if ln.reverse_faults is not None else ln.faults,
                 ln.b)):
            cfg = LinkConfig(**{**o.faults, **fields, "rate_gbps": rate, "delay_ns": delay})
            name = _link_name(src, dst)
            if direct:
                w = Link(src, dst, cfg, net.child_rng(), name)
                src.attach(w, dst.mac)
            else:
                w = Wire(net, src, dst, rate, delay, Faults(cfg, net.child_rng()), name)
                if isinstance(src, Nic):
                    src.attach(w)
                    # a NIC obeys pause frames when PFC is on at its peer: the switch's
                    # setting, or the network's with a host at the other end
                    src.pfc = dst.switch.pfc_enabled if isinstance(dst, SwitchPort) else o.pfc
                else:
                    src.wire = w
                    src.peer_mac = dst.mac
            net.wires.append(w)
            ends.setdefault(a, []).append((src, dst))
    _routes(t, net, ends)
    for name, nic in net.hosts.items():
        gw = ends[name][0][1].mac.hex(":")
        for other, ip in t.hosts.items():
            if other != name:
                nic.device.neighbors[ip] = gw

    def marker_for(sw: Switch, port: Any, rate_gbps: float) -> Any:
        spec = t.switches[sw.name]
        ecn = spec.ecn or o.ecn
        if not ecn.enabled:
            return NoMarker()
        kmin, kmax, pmax = ecn.for_rate(rate_gbps, kmax_cap(sw))
        if sw.lossless and ecn.given and kmin >= pfc_at(sw) and sw.name not in warned:
            warned.add(sw.name)
            net.warnings.append(
                f"--ecn: switch {sw.name} marks from {kmin} bytes, but two senders into one "
                f"of its ports trigger PFC at {pfc_at(sw)} bytes of queue (--buffer "
                f"{sw.buffer.size}): ECN marks nothing before PFC pauses them")
        return RedMarker(kmin, kmax, pmax, net.child_rng())

    def pfc_at(sw: Switch) -> int:
        """The egress queue at which the smallest incast (two senders; one with a port
        fewer) makes the switch pause its senders."""
        return sw.buffer.pfc_trigger(max(1, min(2, len(sw.ports) - 1)))

    def kmax_cap(sw: Switch) -> float:
        """The most a default Kmax may be.  ECN must mark before the buffer stops a queue
        (deployment guides: the ECN thresholds below the PFC ones): without PFC half the
        tail-drop point of a queue alone in the pool, with PFC the queue at which two
        senders into one port make the switch pause them."""
        return pfc_at(sw) if sw.lossless else sw.buffer.queue_limit() / 2

    warned: set[str] = set()

    for sw in net.switches.values():
        sw.finish(marker_for)
    return net


def _endpoint(net: Network, node: str) -> Any:
    if node in net.hosts:
        return net.hosts[node]
    if node in net.switches:
        return net.switches[node].add_port()
    raise UsageError(f"link end {node!r} is neither a host nor a switch")


def _link_name(src: Any, dst: Any) -> str:
    """``h1->sw:0``: a link by its ends' names (a switch port's is ``switch:index``); a link
    between two hosts by the addresses it joins (``10.0.0.1->10.0.0.2``, as the two-host
    ``Fabric`` names it)."""
    if isinstance(src, (Nic, DirectNic)) and isinstance(dst, (Nic, DirectNic)):
        return f"{src.device.ip}->{dst.device.ip}"
    return f"{src.name}->{dst.name}"


def _routes(t: Topology, net: Network, ends: dict[str, list[tuple[Any, Any]]]) -> None:
    """Every switch's equal-cost next-hop ports toward every host."""
    owner: dict[int, str] = {}  # id(endpoint) -> node
    for node, pairs in ends.items():
        for mine, _ in pairs:
            owner[id(mine)] = node
    adj: dict[str, list[tuple[Any, str]]] = {}  # node -> [(my port, neighbour node)]
    for node, pairs in ends.items():
        for mine, peer in pairs:
            adj.setdefault(node, []).append((mine, owner[id(peer)]))
    for host, ip in t.hosts.items():
        dist = {host: 0}
        todo = deque([host])
        while todo:
            n = todo.popleft()
            if n != host and n in t.hosts:
                continue  # hosts do not forward
            for _, nb in adj.get(n, []):
                if nb not in dist:
                    dist[nb] = dist[n] + 1
                    todo.append(nb)
        key = bytes(int(x) for x in ip.split("."))
        for name, sw in net.switches.items():
            if name not in dist:
                continue
            hops = [port for port, nb in adj.get(name, [])
                    if nb in dist and dist[nb] == dist[name] - 1]
            if hops:
                sw.routes[key] = hops
