"""Topologies: what hosts, switches and links exist (``Topology``), the named ones
(``p2p``, ``incast:N``, ``dumbbell:N``, ``leafspine:L,S,H``, ``fattree:K``, a TOML file),
their default traffic, and ``build`` that turns one into a running ``Network`` with routes.

Routes are shortest paths by hop count: a switch's next hops toward a host are every
neighbour one hop closer to it (hosts never forward), so equal-cost paths give ECMP sets.

Hosts come in two kinds (``build``): the switched network's ``Nic`` (a transmit scheduler:
queues per priority that PFC pauses, a pacer per QP that congestion control drives), or, on
a topology without switches, the ``DirectNic`` of ``roce.emu.net.direct`` (frames go onto
the link as the device builds them: the two-host model, ``roce.emu.fabric.Fabric``'s) unless
``NetOptions.direct`` is off.

What a topology may be (a file's keys, the strings, the limits, what building costs) is
``roce.emu.net.schema``'s, checked before anything here is built; building is linear in
hosts and links (``build``).
"""

from __future__ import annotations

import random
from argparse import ArgumentTypeError
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from roce.addresses import ip4_enc
from roce.emu import defaults
from roce.emu.budget import human
from roce.emu.core.verbs import Context
from roce.emu.net import schema
from roce.emu.net.direct import DirectNic, Link
from roce.emu.net.faults import Faults, LinkConfig
from roce.emu.net.sim import Network
from roce.emu.net.stages import (
    DSCP_CNP,
    DSCP_ROCE,
    PRIO_CNP,
    PRIO_ROCE,
    DscpClassifier,
    EcmpForwarder,
    EcnConfig,
    NoMarker,
    RedMarker,
    SprayForwarder,
    Trimmer,
)
from roce.errors import InputError, UsageError
from roce.options import MIN_LINK_GBPS

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
# The switched network's classes (its switches, their buffers, the scheduling NIC with its
# pause frames and congestion control) are imported by the functions that build one: a
# network of two hosts cabled straight never loads them (a few milliseconds of its start).
if TYPE_CHECKING:
    from typing import Any

    from roce.emu.net.switch import Switch


@dataclass
class LinkSpec:
    """One link of a topology: its two ends, and its rate, delay and faults where they
    are not the run's defaults."""

    a: str
    b: str
    rate_gbps: float | None = None  # None: the default (--rate)
    delay_ns: int | None = None
    faults: dict[str, Any] = field(default_factory=dict)  # LinkConfig fields, a -> b
    reverse_faults: dict[str, Any] | None = None  # b -> a (default: the same)


@dataclass
class SwitchSpec:
    """One switch of a topology, and what of the run's defaults it overrides (None: the
    default)."""

    name: str
    buffer: int | None = None
    ecn: EcnConfig | None = None
    pfc: bool | None = None


@dataclass
class Topology:
    """A network to build: hosts and their addresses, switches, links, the default
    traffic pairs and each host's switch."""

    hosts: dict[str, str] = field(default_factory=dict)  # name -> IPv4 address
    switches: dict[str, SwitchSpec] = field(default_factory=dict)
    links: list[LinkSpec] = field(default_factory=list)
    traffic: list[tuple[str, str]] = field(default_factory=list)  # default (src, dst) pairs
    leaf_of: dict[str, str] = field(default_factory=dict)  # host -> its switch

    def host(self, name: str) -> None:
        self.hosts[name] = schema.auto_ip(len(self.hosts))

    def link(self, a: str, b: str) -> None:
        self.links.append(LinkSpec(a, b))
        if a in self.hosts:
            self.leaf_of[a] = b


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


def fattree(k: int) -> Topology:
    """The three-tier k-ary fat tree (Al-Fares et al., SIGCOMM 2008): ``k`` pods, each of
    ``k/2`` edge switches ``eP.I`` and ``k/2`` aggregation switches ``aP.J``, every edge
    linked to every aggregation switch of its pod; ``(k/2)^2`` cores ``cJ.M``, core ``cJ.M``
    linked to aggregation switch ``J`` of every pod; ``k/2`` hosts ``hP.I.H`` per edge.
    Hosts are listed pod by pod, edge by edge (a collective's ranks are neighbours).
    Every pair of hosts in different pods has ``(k/2)^2`` equal-cost paths."""
    t = Topology()
    half = k // 2
    for j in range(1, half + 1):
        for m in range(1, half + 1):
            t.switches[f"c{j}.{m}"] = SwitchSpec(f"c{j}.{m}")
    for p in range(1, k + 1):
        for j in range(1, half + 1):
            agg = f"a{p}.{j}"
            t.switches[agg] = SwitchSpec(agg)
            for m in range(1, half + 1):
                t.link(agg, f"c{j}.{m}")
        for i in range(1, half + 1):
            edge = f"e{p}.{i}"
            t.switches[edge] = SwitchSpec(edge)
            for j in range(1, half + 1):
                t.link(edge, f"a{p}.{j}")
    for p in range(1, k + 1):
        for i in range(1, half + 1):
            for h in range(1, half + 1):
                t.host(f"h{p}.{i}.{h}")
                t.link(f"h{p}.{i}.{h}", f"e{p}.{i}")
    return t


def oversubscribe(t: Topology, ratio: float, rate_gbps: float) -> None:
    """``--oversubscription ratio`` at the leaves: every link from a switch with hosts (a
    leaf, a fat tree's edge) to another switch runs at its rate over ``ratio``, so a leaf's
    uplinks carry ``1/ratio`` of what its hosts can send (with as many uplinks as hosts, as
    ``fattree`` and ``leafspine:L,S,S`` have, the leaf is ``ratio``:1 oversubscribed).
    Slower uplinks rather than fewer keep every equal-cost path.  A UsageError when the
    topology has no such link."""
    if ratio == 1:
        return
    leaves = set(t.leaf_of.values())
    uplinks = [ln for ln in t.links if ln.a in t.switches and ln.b in t.switches
               and (ln.a in leaves or ln.b in leaves)]
    if not uplinks:
        raise UsageError(f"--oversubscription {ratio:g}: the topology has no link from a "
                         "switch with hosts to another switch")
    slowest = min(ln.rate_gbps or rate_gbps for ln in uplinks) / ratio
    if slowest < MIN_LINK_GBPS:  # what a wire can represent (whole bits per second)
        raise UsageError(f"--oversubscription {ratio:g}: an uplink would run at "
                         f"{slowest:g} Gb/s, below the least link rate {MIN_LINK_GBPS:g} Gb/s")
    for ln in uplinks:
        ln.rate_gbps = (ln.rate_gbps or rate_gbps) / ratio


# Rejection sampling draws a uniform derangement but expects e^LAMBDA draws, LAMBDA the
# number of pairs a random permutation keeps within a switch (sum of k^2 / n over switches
# of k hosts); past this, 10,000 draws would find none (odds below 1e-9): repair instead
_MAX_SAME_SWITCH_PAIRS = 30
_DRAWS = 10_000


def permutation(t: Topology, rng: random.Random) -> list[tuple[str, str]]:
    """Each host sends to exactly one host on another switch and receives from exactly one:
    a seeded derangement across switches.  Drawn by rejection sampling where that ends
    quickly; with many hosts per switch (32 per leaf keep ~32 pairs within a leaf: e^32
    draws) a random permutation whose pairs within a switch are then swapped away."""
    names = list(t.hosts)
    per_switch = Counter(t.leaf_of[h] for h in names)
    if len(per_switch) < 2:
        raise UsageError("--traffic permutation needs hosts on at least two switches")
    switch, most = per_switch.most_common(1)[0]
    if 2 * most > len(names):
        raise UsageError(f"--traffic permutation: no host may send to its own switch, but "
                         f"{switch} holds {most} of the {len(names)} hosts")
    if sum(k * k for k in per_switch.values()) <= _MAX_SAME_SWITCH_PAIRS * len(names):
        for _ in range(_DRAWS):
            dst = names[:]
            rng.shuffle(dst)
            if all(t.leaf_of[a] != t.leaf_of[b] for a, b in zip(names, dst)):
                return list(zip(names, dst))
    return _repaired(t, names, rng)


def _repaired(t: Topology, names: list[str], rng: random.Random) -> list[tuple[str, str]]:
    """A random permutation of ``names`` with each pair inside one switch swapped with a
    randomly chosen pair such that neither is then inside one (a scan finds one when the
    random picks do not: one exists while no switch holds more than half the hosts)."""
    leaf = [t.leaf_of[h] for h in names]
    dst = list(range(len(names)))
    rng.shuffle(dst)
    n = len(names)
    for i in range(n):
        if leaf[i] != leaf[dst[i]]:
            continue
        for _ in range(64):
            j = rng.randrange(n)
            if leaf[i] != leaf[dst[j]] and leaf[j] != leaf[dst[i]]:
                break
        else:
            j = next((j for j in range(n)
                      if leaf[i] != leaf[dst[j]] and leaf[j] != leaf[dst[i]]), -1)
            if j < 0:
                raise UsageError("--traffic permutation: no derangement across switches found")
        dst[i], dst[j] = dst[j], dst[i]
    return [(names[i], names[d]) for i, d in enumerate(dst)]


def all_to_all(t: Topology) -> list[tuple[str, str]]:
    names = list(t.hosts)
    return [(a, b) for a in names for b in names if a != b]


def path(t: Topology, src: str, dst: str) -> list[LinkSpec]:
    """The links of one shortest path from host ``src`` to host ``dst`` (by hop count, as
    routes are; every equal-cost path has as many links), in order: what a flow's base RTT
    is made of (``roce.emu.workload.fct.base_rtt_ns``).  Linear in the links."""
    adj: dict[str, list[tuple[str, LinkSpec]]] = {}
    for ln in t.links:
        adj.setdefault(ln.a, []).append((ln.b, ln))
        adj.setdefault(ln.b, []).append((ln.a, ln))
    back: dict[str, tuple[str, LinkSpec] | None] = {src: None}
    todo = deque([src])
    while todo and dst not in back:
        n = todo.popleft()
        for nb, ln in adj.get(n, []):
            # hosts never forward: only the destination host ends a path
            if nb not in back and (nb in t.switches or nb == dst):
                back[nb] = (n, ln)
                todo.append(nb)
    if dst not in back:
        raise UsageError(f"no path from host {src} to host {dst}")
    out = []
    node = dst
    while (step := back[node]) is not None:
        node, ln = step
        out.append(ln)
    return out[::-1]


def parse(spec: str) -> Topology:
    """``p2p``, ``incast:N``, ``dumbbell:N``, ``leafspine:L,S,H`` or ``fattree:K``, checked
    (syntax, limits, memory: ``schema.check_named``, a UsageError naming ``--topology``)
    before it is made."""
    schema.check_named(spec)
    if spec == "p2p":
        return p2p()
    kind, nums = schema.named(spec)
    return {"incast": incast, "dumbbell": dumbbell, "leafspine": leafspine,
            "fattree": fattree}[kind](*nums)


FilterCompiler = Callable[[str], Callable[[dict], bool]]


def load(path: str, compile_filter: FilterCompiler | None = None) -> Topology:
    """A topology from TOML (Python's tomllib), checked key by key against
    ``schema.FILE`` and as a whole, its size against the memory budget, before anything is
    built; an ``InputError`` naming ``path`` and the key otherwise::

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

    A link's ``drop_filter`` is a display filter: ``compile_filter`` (the command's, from
    the decoder this package may not import) turns it into the predicate ``LinkConfig``
    takes, and is required when a file has one."""
    from roce.tomlfile import load as load_toml

    c = schema.check(load_toml(path), path)
    t = Topology()
    t.hosts = c.hosts
    for name, s in c.switches.items():
        t.switches[name] = SwitchSpec(name, s.get("buffer"), s.get("ecn"), s.get("pfc"))
    for i, ln in enumerate(c.links):
        faults, reverse = ln.get("faults", {}), ln.get("reverse_faults")
        for key, fields in ((f"links[{i}].faults", faults),
                            (f"links[{i}].reverse_faults", reverse or {})):
            if "drop_filter" in fields:
                fields["drop_filter"] = _compiled(path, f"{key}.drop_filter",
                                                  fields["drop_filter"], compile_filter)
        t.links.append(LinkSpec(ln["a"], ln["b"], ln.get("rate"), ln.get("delay"), faults,
                                reverse))
        for h, s in ((ln["a"], ln["b"]), (ln["b"], ln["a"])):
            if h in t.hosts:
                t.leaf_of[h] = s
    t.traffic = c.traffic
    schema.check_shape(schema.shape_of(t), path)
    return t


def _compiled(path: str, key: str, text: str,
              compile_filter: FilterCompiler | None) -> Callable[[dict], bool]:
    if compile_filter is None:
        raise InputError(f"{path}: {key}: a display filter needs the command's filter "
                         "compiler (load(path, compile_filter=...))")
    try:
        return compile_filter(text)
    except (ValueError, ArgumentTypeError) as exc:  # FilterError is a ValueError
        why = getattr(exc, "message", None) or str(exc)
        at = getattr(exc, "position", None)
        raise InputError(f"{path}: {key}: not a display filter: {why}"
                         + (f" at position {at}" if at is not None else "")) from None


def parse_ecn(text: str) -> EcnConfig:
    """``on``, ``off`` or ``KMIN,KMAX,PMAX`` (``schema.ecn``); a UsageError naming --ecn."""
    try:
        return schema.ecn(text)
    except ArgumentTypeError as exc:
        raise UsageError(f"--ecn {exc}") from None


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
    # switches stamp in-band telemetry (congestion control that reads it: HPCC)
    telemetry: bool = False
    trim: Trimmer | None = None  # switches trim what they would drop (UET runs)


if TYPE_CHECKING:
    HostFactory = Callable[[Network, str, str], Any]


def carved(t: Topology, o: NetOptions, classifier: Any) -> dict[str, int]:
    """Bytes each switch's buffer sets apart before sharing any (``Switch.finish``): on every
    port, a reserve per class, and for each lossless class its PFC headroom for the link
    feeding the port (``buffer.headroom_bytes``)."""
    out = dict.fromkeys(t.switches, 0)
    if not out:
        return out
    from roce.emu.net.buffer import BufferConfig, headroom_bytes

    for ln in t.links:
        rate = ln.rate_gbps or o.rate_gbps
        delay = o.delay_ns if ln.delay_ns is None else ln.delay_ns
        for sw in (ln.a, ln.b):
            if sw not in out:
                continue
            spec = t.switches[sw]
            pfc = o.pfc if spec.pfc is None else spec.pfc
            lossless = classifier.lossless if pfc else frozenset()
            size = BufferConfig(spec.buffer or o.buffer)
            reserve = size.reserve if size.reserve is not None else o.max_frame
            out[sw] += sum(reserve + (headroom_bytes(rate, delay, o.max_frame)
                                      if tc in lossless else 0)
                           for tc in classifier.classes)
    return out


def check_buffers(t: Topology, o: NetOptions, classifier: Any) -> None:
    """Refuse, before building, a switch whose buffer its reserves and PFC headroom leave
    without a shared frame, naming the least ``--buffer`` (or the file's ``buffer``) that
    fits it: a 256-port spine at 400 Gb/s needs ~31 MB where the default is 12 MiB."""
    for name, need in carved(t, o, classifier).items():
        spec = t.switches[name]
        size = spec.buffer or o.buffer
        if size - need < o.max_frame:
            ports = sum((ln.a == name) + (ln.b == name) for ln in t.links)
            least = -(-(need + o.max_frame) // (1 << 20)) << 20
            where = (f"the buffer of switch {name} in the topology file" if spec.buffer
                     else f"--buffer {human(o.buffer)}")
            raise UsageError(f"{where}: too small for switch {name}: its {ports} ports set "
                             f"apart {need} bytes for reserves and PFC headroom, leaving its "
                             f"{size}-byte buffer no room for a shared frame (a buffer of at "
                             f"least {least >> 20}M fits: --buffer {least >> 20}M)")


def build(t: Topology, o: NetOptions, host: HostFactory | None = None) -> Network:
    """The running network of ``t``; ``host(net, name, ip)`` makes each host when given
    (``roce.emu.uet.host``: a host the link pulls, with its own neighbours), else a RoCE
    ``Nic`` or ``DirectNic``."""
    net = Network(o.seed)
    direct = o.direct and not t.switches
    if not direct:
        from roce.emu.net.buffer import BufferConfig
        from roce.emu.net.link import Wire
        from roce.emu.net.nic import Nic
        from roce.emu.net.switch import Switch, SwitchPort
    classifier = (DscpClassifier() if o.trim is None else  # trimmed headers: their class
                  DscpClassifier({DSCP_ROCE: PRIO_ROCE, DSCP_CNP: PRIO_CNP,
                                  o.trim.dscp: o.trim.tc}))
    degree: dict[str, int] = {}
    for ln in t.links:
        for end in (ln.a, ln.b):
            degree[end] = degree.get(end, 0) + 1
    check_buffers(t, o, classifier)  # before any switch is made
    for i, (name, spec) in enumerate(t.switches.items()):
        fwd = (SprayForwarder(net.child_rng()) if o.lb == "spray"
               else EcmpForwarder(net.rng.getrandbits(32)))
        pfc = o.pfc if spec.pfc is None else spec.pfc
        net.switches[name] = Switch(
            net, name, i + 1, buffer=BufferConfig(spec.buffer or o.buffer),
            classifier=classifier, forwarder=fwd, pfc=pfc, max_frame=o.max_frame,
            telemetry=o.telemetry, trimmer=o.trim)
    for name, ip in t.hosts.items():
        if degree.get(name, 0) != 1:
            raise UsageError(f"host {name} needs exactly one link, has {degree.get(name, 0)}")
        if host is not None:
            net.hosts[name] = host(net, name, ip)
            continue
        ctx = Context(name, ip)
        net.hosts[name] = DirectNic(net, ctx) if direct else Nic(net, ctx, classifier)
    ends: dict[str, list[tuple[Any, Any]]] = {}  # node -> [(its endpoint, peer endpoint)]
    for ln in t.links:
        rate = ln.rate_gbps or o.rate_gbps
        delay = o.delay_ns if ln.delay_ns is None else ln.delay_ns
        ea, eb = endpoint(net, ln.a), endpoint(net, ln.b)
        for src, dst, fields, a in (
                (ea, eb, ln.faults, ln.a),
                (eb, ea, ln.reverse_faults if ln.reverse_faults is not None else ln.faults,
                 ln.b)):
            cfg = LinkConfig(**{**o.faults, **fields, "rate_gbps": rate, "delay_ns": delay})
            name = _link_name(src, dst, host is None and ln.a in net.hosts
                              and ln.b in net.hosts)
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
    routes(t, net, ends)
    addresses = frozenset(t.hosts.values())
    for name, nic in net.hosts.items() if host is None else ():
        nic.device.neighbors = Gateway(ends[name][0][1].mac.hex(":"), addresses, nic.ctx.ip)

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


def endpoint(net: Network, node: str) -> Any:
    """The host or a new port of the switch that a link end ``node`` names."""
    if node in net.hosts:
        return net.hosts[node]
    if node in net.switches:
        return net.switches[node].add_port()
    raise UsageError(f"link end {node!r} is neither a host nor a switch")


def _link_name(src: Any, dst: Any, hosts: bool) -> str:
    """``h1->sw:0``: a link by its ends' names (a switch port's is ``switch:index``); a link
    between two RoCE hosts (``hosts``) by the addresses it joins (``10.0.0.1->10.0.0.2``, as
    the two-host ``Fabric`` names it)."""
    if hosts:
        return f"{src.device.ip}->{dst.device.ip}"
    return f"{src.name}->{dst.name}"


class Gateway(dict):
    """A host's neighbour table in a routed network: every other host of the network
    resolves to the gateway's MAC, without an entry per peer (which would make building
    quadratic in hosts).  Anything else is not a neighbour (``Device.peer_mac`` says so)."""

    __slots__ = ("gateway", "addresses", "own")

    def __init__(self, gateway: str, addresses: frozenset[str], own: str) -> None:
        super().__init__()
        self.gateway, self.addresses, self.own = gateway, addresses, own

    def __missing__(self, ip: str) -> str:
        if ip != self.own and ip in self.addresses:
            return self.gateway
        raise KeyError(ip)


def routes(t: Topology, net: Network, ends: dict[str, list[tuple[Any, Any]]]) -> None:
    """Every switch's equal-cost next-hop ports toward every host, over the link ends
    ``ends`` (node -> [(its endpoint, the peer's)]: all of them when building, those of
    the links up after a failure, ``roce.emu.net.failures``).  A host without a link, or a
    switch with no path to a host, gets no route to it.

    A host has one link and never forwards, so a switch's distance to a host is one more
    than its distance to the host's switch: one search of the switches from each switch
    that has hosts gives the next hops toward all of them (one list, shared by their
    route entries).  Linear in hosts and links for a fixed number of such switches."""
    owner: dict[int, str] = {}  # id(endpoint) -> node
    for node, pairs in ends.items():
        for mine, _ in pairs:
            owner[id(mine)] = node
    adj: dict[str, list[tuple[Any, str]]] = {}  # node -> [(my port, neighbour node)]
    for node, pairs in ends.items():
        for mine, peer in pairs:
            adj.setdefault(node, []).append((mine, owner[id(peer)]))
    switches = net.switches
    on: dict[str, list[str]] = {}  # switch -> the hosts linked to it
    for host in t.hosts:
        if host not in adj:
            continue
        nb = adj[host][0][1]
        if nb in switches:
            on.setdefault(nb, []).append(host)
    key = {host: ip4_enc(ip) for host, ip in t.hosts.items()}  # a switch's route key
    for leaf, hosts in on.items():
        dist = {leaf: 0}
        order = [leaf]
        todo = deque(order)
        while todo:
            n = todo.popleft()
            for _, nb in adj.get(n, []):
                if nb in switches and nb not in dist:
                    dist[nb] = dist[n] + 1
                    order.append(nb)
                    todo.append(nb)
        for port, nb in adj[leaf]:
            if nb in key:  # a host on this switch: the port facing it
                switches[leaf].routes[key[nb]] = [port]
        for name in order[1:]:
            hops = [port for port, nb in adj[name]
                    if nb in dist and dist[nb] == dist[name] - 1]
            if not hops:
                continue
            table = switches[name].routes
            for host in hosts:
                table[key[host]] = hops
