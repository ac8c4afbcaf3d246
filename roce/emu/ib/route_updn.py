"""Up/down routing (OpenSM's ``updn`` engine; Schroeder et al., "Autonet", 1991): deadlock
free on any topology because no route turns from a down link to an up link.

- Roots: the switches farthest from the hosts (the largest rank, ``roce.emu.ib.lft``: a fat
  tree's cores, a leaf-spine's spines; every switch when every switch has hosts).  Each
  switch's up-rank is its distance from the nearest root, breadth first.
- Direction: a link from a to b goes up when b's (up-rank, name) is below a's, down
  otherwise (OpenSM breaks equal ranks by GUID; here by name), so every link has one.
- Routes: a legal path is zero or more up links, then zero or more down links.  For each
  destination a switch takes a shortest legal path; it goes down whenever a shortest legal
  path of down links alone exists (so a packet that came down keeps going down), else up.
  Among the equal next hops so allowed, the port carrying the fewest destinations so far
  (destinations in LID order), lowest port on a tie: destinations spread over uplinks.
  LIDs of a port beyond its base by ``Fabric.spread``.

A destination some switch has no legal path to (roots that share no descendant) is refused,
naming both.
"""

from __future__ import annotations

import heapq
from collections import deque

from roce.emu.ib.lft import Fabric, Routes, Unroutable, bfs, route_host_port, route_least_loaded

INF = 1 << 30


def route(fabric: Fabric) -> Routes:
    ports = fabric.ports
    rank = fabric.ranks()
    top_rank = max(rank.values(), default=0)
    up_rank = bfs(ports, sorted(s for s, r in rank.items() if r == top_rank))

    def key(s: str) -> tuple[int, str]:
        return (up_rank.get(s, INF), s)

    def is_up(a: str, b: str) -> bool:
        return key(b) < key(a)

    routes = Routes.empty(fabric)
    load: dict[tuple[str, int], int] = {}
    legal: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for host, dlid, j in fabric.destinations():
        top = route_host_port(fabric, routes, host, dlid)
        if top not in legal:
            legal[top] = _legal_distances(ports, top, is_up)
        down, any_ = legal[top]
        for s in ports:
            if s == top:
                continue
            if any_.get(s, INF) >= INF:
                raise Unroutable(f"updn: switch {s} has no up/down path to {host}'s switch "
                                 f"{top}")
            if down.get(s, INF) == any_[s]:
                hops = [i for i, p in enumerate(ports[s])
                        if p in ports and not is_up(s, p) and down.get(p, INF) == down[s] - 1]
            else:
                hops = [i for i, p in enumerate(ports[s])
                        if p in ports and is_up(s, p) and any_.get(p, INF) == any_[s] - 1]
            route_least_loaded(fabric, routes, load, s, dlid, j, hops)
    return routes


def _legal_distances(ports: dict[str, list[str]], top: str, is_up: object
                     ) -> tuple[dict[str, int], dict[str, int]]:
    """To ``top``: the length of the shortest path of down links alone, and of the
    shortest legal (up, then down) path, from every switch."""
    down = {top: 0}
    todo = deque([top])
    while todo:  # backwards over down links: u -> v down
        v = todo.popleft()
        for u in ports[v]:
            if u in ports and u not in down and not is_up(u, v):  # type: ignore[operator]
                down[u] = down[v] + 1
                todo.append(u)
    any_ = dict(down)
    heap = [(d, s) for s, d in down.items()]
    heapq.heapify(heap)
    while heap:  # backwards over up links: x -> y up, a legal path from y after it
        d, y = heapq.heappop(heap)
        if d > any_.get(y, INF):
            continue
        for x in ports[y]:
            if x in ports and is_up(x, y) and d + 1 < any_.get(x, INF):  # type: ignore[operator]
                any_[x] = d + 1
                heapq.heappush(heap, (d + 1, x))
    return down, any_


__all__ = ["route"]
