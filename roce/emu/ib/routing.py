"""LIDs and linear forwarding tables: what the subnet manager computes for a topology
(IBA Vol 1 ch. 18.2.4: a switch forwards a unicast packet by its DLID through its linear
forwarding table, DLID -> output port; ch. 14 has the SM fill the tables).

- ``assign_lids``: one LID per HCA port, 1, 2, ... in the topology's host order (unicast
  LIDs are 0x0001-0xBFFF); the switches' own LIDs are not needed to forward data.
- ``forwarding_tables``: per switch, DLID -> port index (ports numbered in the order the
  topology's links reach the switch, as the network is built).  Every route is a shortest
  path in switch hops (a switch's next hop toward a host is a neighbour one hop closer to
  the host's switch; hosts never forward).  Among equal next hops, by ``ROUTINGS``:

  - ``minhop``: the port that carries the fewest destinations so far, destinations taken
    in LID order (OpenSM's min-hop routing balances its ports so);
  - ``dmodk``: the DLID modulo the number of equal next hops (destination-mod-k, the
    fat-tree routing of Zahavi et al., "Optimized InfiniBand fat-tree routing for shift
    all-to-all communication patterns", 2010): consecutive destinations on successive
    uplinks, each destination on one path.

Building is one search of the switches per switch that has hosts, so linear in hosts and
links for a fixed number of such switches.
"""

from __future__ import annotations

from collections import deque
from typing import Any

ROUTINGS = ("minhop", "dmodk")
MAX_UNICAST_LID = 0xBFFF


def assign_lids(hosts: list[str]) -> dict[str, int]:
    if len(hosts) > MAX_UNICAST_LID:
        raise ValueError(f"{len(hosts)} HCAs: a subnet has {MAX_UNICAST_LID} unicast LIDs")
    return {h: i + 1 for i, h in enumerate(hosts)}


def ports_of(links: list[Any], switches: Any) -> dict[str, list[str]]:
    """Per switch, the node at the other end of each of its ports, in port order."""
    out: dict[str, list[str]] = {s: [] for s in switches}
    for ln in links:
        if ln.a in out:
            out[ln.a].append(ln.b)
        if ln.b in out:
            out[ln.b].append(ln.a)
    return out


def forwarding_tables(hosts: list[str], switches: Any, links: list[Any],
                      lids: dict[str, int], routing: str = "minhop"
                      ) -> dict[str, dict[int, int]]:
    """Per switch, its linear forwarding table: DLID -> port index (module docstring)."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing {routing!r}: one of {', '.join(ROUTINGS)}")
    ports = ports_of(links, switches)
    leaf: dict[str, str] = {}
    for s, peers in ports.items():
        for p in peers:
            if p not in ports:  # a host
                leaf[p] = s
    lft: dict[str, dict[int, int]] = {s: {} for s in ports}
    load: dict[tuple[str, int], int] = {}
    dist_from: dict[str, dict[str, int]] = {}
    for h in sorted(hosts, key=lids.__getitem__):
        top = leaf.get(h)
        if top is None:
            continue
        dist = dist_from.get(top)
        if dist is None:
            dist = dist_from[top] = _distances(top, ports)
        dlid = lids[h]
        for s in ports:
            if s not in dist:
                continue  # no path
            if s == top:
                lft[s][dlid] = ports[s].index(h)
                continue
            hops = [i for i, p in enumerate(ports[s]) if dist.get(p, -1) == dist[s] - 1
                    and p in ports]
            if routing == "dmodk":
                port = hops[dlid % len(hops)]
            else:
                port = min(hops, key=lambda i: (load.get((s, i), 0), i))
            load[(s, port)] = load.get((s, port), 0) + 1
            lft[s][dlid] = port
    return lft


def _distances(top: str, ports: dict[str, list[str]]) -> dict[str, int]:
    dist = {top: 0}
    todo = deque([top])
    while todo:
        n = todo.popleft()
        for p in ports[n]:
            if p in ports and p not in dist:
                dist[p] = dist[n] + 1
                todo.append(p)
    return dist


__all__ = ["MAX_UNICAST_LID", "ROUTINGS", "assign_lids", "forwarding_tables", "ports_of"]
