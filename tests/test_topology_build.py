"""Building a switched network is linear in its hosts and links: a host resolves every peer
to its gateway without an entry per peer, and routes come from one search per switch that
has hosts (``roce.emu.net.topology.build``), the same shortest paths as a search from every
host (the definition, below)."""

from __future__ import annotations

import ipaddress
import tracemalloc
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from roce.emu.net import topology


def build_bytes(spec: str) -> int:
    """Bytes of Python objects ``topology.build`` allocates for ``spec`` (tracemalloc)."""
    t = topology.parse(spec)
    tracemalloc.start()
    try:
        net = topology.build(t, topology.NetOptions(buffer=1 << 30))
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del net
    return size


@pytest.mark.parametrize("kind", ["incast:{}", "dumbbell:{}", "leafspine:4,2,{}"])
def test_building_is_linear_in_hosts(kind: str) -> None:
    small, big = build_bytes(kind.format(250)), build_bytes(kind.format(1000))
    # four times the hosts: four times the memory (quadratic was sixteen)
    assert big < 4.6 * small, (small, big)


def test_neighbour_tables_hold_no_entry_per_peer() -> None:
    t = topology.incast(50)
    net = topology.build(t, topology.NetOptions())
    nic = net.hosts["s1"]
    gw = net.switches["sw"].ports[0].mac.hex(":")
    assert all(nic.device.peer_mac(ip) == gw for h, ip in t.hosts.items() if h != "s1")
    assert len(nic.device.neighbors) == 0
    with pytest.raises(ValueError):
        nic.device.peer_mac("192.0.2.1")  # not a host of this network
    with pytest.raises(ValueError):
        nic.device.peer_mac(t.hosts["s1"])  # itself


def _reference_routes(t: topology.Topology, net) -> dict[str, dict[int, list[str]]]:
    """Shortest paths by hop count, by the definition: a search from every host over every
    node (hosts other than the source do not forward); a switch's next hops toward the host
    are its neighbours one hop closer."""
    adj: dict[str, list[tuple[str, str]]] = {}  # node -> [(my port's name, neighbour)]
    node_of = {p.name: sw for sw in net.switches.values() for p in sw.ports}
    for w in net.wires:
        src, dst = w.src.name, w.dst.name
        a = node_of[src].name if src in node_of else src
        b = node_of[dst].name if dst in node_of else dst
        adj.setdefault(a, []).append((src, b))
    out: dict[str, dict[int, list[str]]] = {name: {} for name in net.switches}
    for host, ip in t.hosts.items():
        dist = {host: 0}
        todo = deque([host])
        while todo:
            n = todo.popleft()
            if n != host and n in t.hosts:
                continue
            for _, nb in adj.get(n, []):
                if nb not in dist:
                    dist[nb] = dist[n] + 1
                    todo.append(nb)
        for name in net.switches:
            hops = [port for port, nb in adj.get(name, [])
                    if name in dist and nb in dist and dist[nb] == dist[name] - 1]
            if hops:
                out[name][int(ipaddress.IPv4Address(ip))] = hops
    return out


@settings(max_examples=examples(60))
@given(switches=st.integers(1, 6), data=st.data())
def test_routes_are_the_shortest_paths_of_every_host(switches: int, data) -> None:
    t = topology.Topology()
    names = [f"s{i}" for i in range(switches)]
    for s in names:
        t.switches[s] = topology.SwitchSpec(s)
    for _ in range(data.draw(st.integers(0, 10))):  # parallel links and cycles included
        a, b = data.draw(st.lists(st.sampled_from(names), min_size=2, max_size=2))
        if a != b:
            t.link(a, b)
    for i in range(data.draw(st.integers(1, 8))):
        t.host(f"h{i}")
        t.link(f"h{i}", data.draw(st.sampled_from(names)))
    if data.draw(st.booleans()):  # two hosts linked to each other: no switch routes them
        t.host("x1")
        t.host("x2")
        t.link("x1", "x2")
    net = topology.build(t, topology.NetOptions(buffer=1 << 30))
    got = {name: {k: [p.name for p in v] for k, v in sw.routes.items()}
           for name, sw in net.switches.items()}
    assert got == _reference_routes(t, net)


@pytest.mark.parametrize("spec,o", [
    ("leafspine:2,2,4", {}),
    ("incast:5", {"pfc": False}),
    ("dumbbell:3", {"rate_gbps": 400.0, "delay_ns": 3000}),
    ("leafspine:3,2,2", {"max_frame": 1200}),
])
def test_carved_is_what_switches_set_apart(spec: str, o: dict) -> None:
    """What the check before building counts is what the built switches carve."""
    t = topology.parse(spec)
    opts = topology.NetOptions(**o)
    net = topology.build(t, opts)
    want = topology.carved(t, opts, next(iter(net.switches.values())).classifier)
    assert want == {n: sw.buffer.carved for n, sw in net.switches.items()}
    assert all(v > 0 for v in want.values())


def test_a_buffer_reserves_do_not_fit_is_refused_before_building(monkeypatch) -> None:
    """A 256-port spine at 400 Gb/s sets apart ~31 MB: the default 12 MiB is refused before
    a switch is made, naming the least --buffer that fits, and that one builds."""
    from roce.emu.net import switch

    made = []
    real = switch.Switch
    monkeypatch.setattr(switch, "Switch", lambda *a, **k: made.append(1) or real(*a, **k))
    t = topology.parse("dumbbell:255")
    opts = topology.NetOptions(rate_gbps=400.0)
    with pytest.raises(topology.UsageError,
                       match=r"--buffer 12M: too small for switch \S+: its 256 ports set "
                             r"apart \d+ bytes .*--buffer (\d+)M\)") as e:
        topology.build(t, opts)
    assert made == []
    least = int(str(e.value).rsplit("--buffer ", 1)[1].rstrip("M)")) << 20
    with pytest.raises(topology.UsageError):  # a MiB less does not fit
        topology.build(t, topology.NetOptions(rate_gbps=400.0, buffer=least - (1 << 20)))
    topology.build(t, topology.NetOptions(rate_gbps=400.0, buffer=least))
    assert made
