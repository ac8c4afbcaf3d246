"""The subnet as its subnet manager sees it, for the routings (``Fabric``), and what a routing
computes (``Routes``): every switch's linear forwarding table and, per DLID, the equal next
hops adaptive routing may choose among.

Shared rules of every routing (``roce.emu.ib.routing`` lists them):

- LIDs: each HCA port has a base LID and, with LMC ``n`` (IBA Vol 1 7.11.1, PortInfo:LMC),
  the 2^n LIDs base .. base + 2^n - 1, base a multiple of 2^n (``lids``).  A switch's
  table has an entry for every LID, and routes each by its own path.
- Ranks: a switch's rank is its distance in switch hops to the nearest switch with hosts
  (a leaf: rank 0); an uplink is a port to a switch of the next rank.
- LMC multipath (``spread``): LID base + j of a port leaves each switch by the port its
  base LID takes there, rotated among the switch's candidate ports by the j's digit for the
  switch's rank: (j // stride) mod k, the stride the product of the uplink counts of the
  ranks below (as destination-mod-k divides by the lower levels' arities; Zahavi et al.,
  2010).  On a fat tree or a leaf-spine the 2^n LIDs of a port so take distinct paths from
  a leaf below, as many as there are.
- Loop-free: a routing's next hop is always a neighbour strictly closer to the destination
  along the paths it allows, so following a table always ends at the destination.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_UNICAST_LID = 0xBFFF  # unicast LIDs are 0x0001-0xBFFF (IBA Vol 1 4.1.3)
MAX_LMC = 7  # PortInfo:LMC is 3 bits


class Unroutable(ValueError):
    """A routing that cannot route the topology (it names the routing and the reason)."""


def lids(hosts: list[str], lmc: int = 0) -> dict[str, int]:
    """Each HCA port's base LID, in host order: host i has LIDs (i + 1) * 2^lmc onwards."""
    if not 0 <= lmc <= MAX_LMC:
        raise ValueError(f"LMC {lmc}: 0-{MAX_LMC}")
    top = (len(hosts) + 1 << lmc) - 1
    if top > MAX_UNICAST_LID:
        raise ValueError(f"{len(hosts)} HCAs with LMC {lmc} need LIDs up to {top}: a subnet "
                         f"has {MAX_UNICAST_LID} unicast LIDs")
    return {h: (i + 1) << lmc for i, h in enumerate(hosts)}


def ports_of(links: list[Any], switches: Any) -> dict[str, list[str]]:
    """Per switch, the node at the other end of each of its ports, in port order."""
    out: dict[str, list[str]] = {s: [] for s in switches}
    for ln in links:
        if ln.a in out:
            out[ln.a].append(ln.b)
        if ln.b in out:
            out[ln.b].append(ln.a)
    return out


@dataclass
class Fabric:
    """Switches and their ports, the hosts' switches and LIDs, and the LMC."""

    ports: dict[str, list[str]]  # switch -> the node at each port
    base: dict[str, int]  # host -> base LID
    lmc: int = 0
    leaf: dict[str, str] = field(default_factory=dict)  # host -> its switch
    _dist: dict[str, dict[str, int]] = field(default_factory=dict)
    _rank: dict[str, int] | None = None
    _stride: dict[str, int] | None = None

    def __post_init__(self) -> None:
        for s, peers in self.ports.items():
            for p in peers:
                if p not in self.ports and p in self.base:
                    self.leaf.setdefault(p, s)

    @classmethod
    def of(cls, hosts: list[str], switches: Any, links: list[Any], base: dict[str, int],
           lmc: int = 0) -> Fabric:
        return cls(ports_of(links, switches), {h: base[h] for h in hosts}, lmc)

    def destinations(self) -> Iterator[tuple[str, int, int]]:
        """(host, DLID, LMC offset) of every LID of every host with a switch, in LID order."""
        for h in sorted(self.base, key=self.base.__getitem__):
            if h in self.leaf:
                for j in range(1 << self.lmc):
                    yield h, self.base[h] + j, j

    def is_switch(self, node: str) -> bool:
        return node in self.ports

    def distances(self, top: str) -> dict[str, int]:
        """Switch hops from every switch to ``top`` (breadth first, cached)."""
        d = self._dist.get(top)
        if d is None:
            d = self._dist[top] = bfs(self.ports, [top])
        return d

    def closer(self, s: str, dist: dict[str, int]) -> list[int]:
        """The ports of ``s`` to switches one hop closer by ``dist``: its equal next hops."""
        want = dist[s] - 1
        return [i for i, p in enumerate(self.ports[s]) if dist.get(p, -2) == want]

    def ranks(self) -> dict[str, int]:
        if self._rank is None:
            self._rank = bfs(self.ports, sorted(set(self.leaf.values())))
        return self._rank

    def uplinks(self, s: str) -> list[int]:
        r = self.ranks()
        return [i for i, p in enumerate(self.ports[s]) if r.get(p, -1) == r.get(s, -3) + 1]

    def stride(self, s: str) -> int:
        """The LMC digit's divisor at ``s``: the product of uplink counts of lower ranks."""
        if self._stride is None:
            r = self.ranks()
            most: dict[int, int] = {}
            for x in self.ports:
                if x in r:
                    most[r[x]] = max(most.get(r[x], 1), len(self.uplinks(x)) or 1)
            self._stride = {}
            for x in self.ports:
                p = 1
                for lower in range(r.get(x, 0)):
                    p *= most.get(lower, 1)
                self._stride[x] = p
        return self._stride[s]

    def spread(self, s: str, candidates: list[int], base_port: int, offset: int) -> int:
        """LMC multipath (module docstring): the port of LID base + ``offset`` at ``s``."""
        k = len(candidates)
        if offset == 0 or k < 2:
            return base_port
        i = candidates.index(base_port)
        return candidates[(i + offset // self.stride(s)) % k]


@dataclass
class Routes:
    """Per switch, DLID -> output port (the LFT) and DLID -> its equal next hops."""

    lft: dict[str, dict[int, int]]
    groups: dict[str, dict[int, tuple[int, ...]]]

    @classmethod
    def empty(cls, fabric: Fabric) -> Routes:
        return cls({s: {} for s in fabric.ports}, {s: {} for s in fabric.ports})

    def set(self, s: str, dlid: int, port: int, group: list[int] | tuple[int, ...]) -> None:
        self.lft[s][dlid] = port
        if len(group) > 1:
            self.groups[s][dlid] = tuple(group)


def bfs(ports: dict[str, list[str]], starts: list[str]) -> dict[str, int]:
    """Switch hops from the nearest of ``starts`` to every switch reachable."""
    dist = {s: 0 for s in starts}
    todo = deque(starts)
    while todo:
        n = todo.popleft()
        for p in ports[n]:
            if p in ports and p not in dist:
                dist[p] = dist[n] + 1
                todo.append(p)
    return dist


def route_host_port(fabric: Fabric, routes: Routes, host: str, dlid: int) -> str:
    """The host's own switch forwards its LIDs to the host's port; that switch's name."""
    top = fabric.leaf[host]
    routes.set(top, dlid, fabric.ports[top].index(host), ())
    return top


def route_least_loaded(fabric: Fabric, routes: Routes, load: dict[tuple[str, int], int],
                       s: str, dlid: int, offset: int, hops: list[int]) -> int:
    """Switch ``s`` forwards LID ``dlid`` (``offset`` past its port's base LID) on one of
    its equal next hops ``hops``: a base LID on the one that carries the fewest LIDs so far
    (``load``, counted here; the lowest port on a tie), another LID of the port by LMC
    multipath (``Fabric.spread``).  The port chosen."""
    if offset == 0:
        port = min(hops, key=lambda i: (load.get((s, i), 0), i))
    else:
        port = fabric.spread(s, hops, routes.lft[s][dlid - offset], offset)
    load[(s, port)] = load.get((s, port), 0) + 1
    routes.set(s, dlid, port, hops)
    return port


__all__ = ["MAX_LMC", "MAX_UNICAST_LID", "Fabric", "Routes", "Unroutable", "bfs", "lids",
           "ports_of", "route_host_port", "route_least_loaded"]
