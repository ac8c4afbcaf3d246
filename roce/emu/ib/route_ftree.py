"""Fat-tree routing, as OpenSM's ``ftree`` engine routes (Zahavi, Johnson, Kerbyson, Lang,
"Optimized InfiniBand fat-tree routing for shift all-to-all communication patterns", 2010;
OpenSM's osm_ucast_ftree.c: ``fabric_route_downgoing_by_going_up`` and
``fabric_route_upgoing_by_going_down``).

Shape: switches ranked by distance from the leaves (``roce.emu.ib.lft``), every link
between two switches joining adjacent ranks and every switch below the top rank having an
uplink, as ``fattree:K`` and ``leafspine:L,S,H`` are; any other shape is refused, naming
the switches that break it.

Per destination LID, in LID order (OpenSM takes leaves and their ports in index order):

1. Down: from the destination's leaf the main path climbs, at each rank taking the uplink
   whose upper end's port down to it carries the fewest destinations so far (lowest port on
   a tie), to a top switch; every switch on it points down along it.  Every other switch
   that reaches the destination by down links alone (a secondary path) points down toward
   it, by the same least-loaded choice.
2. Up: from each switch of the main path, lowest first, every switch below it that has no
   entry yet points up to it, and so on down: a leaf elsewhere sends the destination up
   toward the lowest switch of its main path it can reach.
3. What neither reaches (switches no path to the destination crosses; OpenSM leaves them
   unset) points to a neighbour that has an entry, one closer to the destination if any,
   the least loaded as in step 2, so that every switch routes every LID.

The main path's choices spread destinations over every rank's uplinks, and every leaf's
traffic to one destination converges on one top switch.  LIDs of a port beyond its base
rotate the main path's choices by ``Fabric.spread`` (2^LMC distinct top switches where
there are as many).
"""

from __future__ import annotations

from collections import deque

from roce.emu.ib.lft import Fabric, Routes, Unroutable, route_host_port


def check(fabric: Fabric) -> dict[str, int]:
    """The ranks of a fabric ftree can route, or ``Unroutable`` naming what breaks it."""
    ports = fabric.ports
    rank = fabric.ranks()
    top = max(rank.values(), default=0)
    for s in ports:
        if s not in rank:
            raise Unroutable(f"ftree: switch {s} is not connected to a switch with hosts")
        for p in ports[s]:
            if p in ports and abs(rank[p] - rank[s]) != 1:
                raise Unroutable(f"ftree: switches {s} and {p} are joined at ranks "
                                 f"{rank[s]} and {rank[p]}: not a fat tree (ranks from the "
                                 "leaves; use minhop, dmodk or updn)")
        if rank[s] < top and not fabric.uplinks(s):
            raise Unroutable(f"ftree: switch {s} at rank {rank[s]} has no uplink below the "
                             f"top rank {top}: not a fat tree")
    return rank


def route(fabric: Fabric) -> Routes:
    rank = check(fabric)
    ports = fabric.ports
    routes = Routes.empty(fabric)
    down_load: dict[tuple[str, int], int] = {}
    up_load: dict[tuple[str, int], int] = {}
    chosen: dict[int, list[int]] = {}  # base LID -> its main path's uplink, by rank

    def down_port(s: str, toward: list[int]) -> int:
        return min(toward, key=lambda i: (down_load.get((s, i), 0), i))

    for host, dlid, j in fabric.destinations():
        leaf = route_host_port(fabric, routes, host, dlid)
        entry: dict[str, int] = {leaf: routes.lft[leaf][dlid]}
        dist = fabric.distances(leaf)
        # 1. the main path, then the secondary down paths, rank by rank
        main = [leaf]
        s = leaf
        level = 0
        while True:
            ups = fabric.uplinks(s)
            if not ups:
                break
            if j == 0:  # the uplink whose upper end's port down to s is least loaded
                i = min(ups, key=lambda i, s=s: (down_load.get(
                    (ports[s][i], ports[ports[s][i]].index(s)), 0), i))
                chosen.setdefault(dlid, []).append(ups.index(i))
            else:  # LMC: the base LID's choice at this rank, rotated
                at = chosen[dlid - j][level]
                i = ups[(at + j // fabric.stride(s)) % len(ups)]
            upper = ports[s][i]
            entry[upper] = ports[upper].index(s)
            down_load[(upper, entry[upper])] = down_load.get((upper, entry[upper]), 0) + 1
            main.append(upper)
            s = upper
            level += 1
        reach = {leaf}
        level = [leaf]
        while level:
            above = sorted({ports[x][i] for x in level for i in fabric.uplinks(x)})
            for a in above:
                if a not in entry:
                    toward = [i for i, p in enumerate(ports[a])
                              if p in reach and rank.get(p, -1) == rank[a] - 1]
                    entry[a] = down_port(a, toward)
            reach.update(above)
            level = above
        # 2. up: below each switch of the main path, lowest first
        for m in main[1:]:
            todo = deque([m])
            while todo:
                x = todo.popleft()
                for p in sorted({ports[x][i] for i, q in enumerate(ports[x])
                                 if q in ports and rank[q] == rank[x] - 1}):
                    if p in entry:
                        continue
                    toward = [i for i, q in enumerate(ports[p]) if q == x]
                    entry[p] = min(toward, key=lambda i, p=p: (up_load.get((p, i), 0), i))
                    up_load[(p, entry[p])] = up_load.get((p, entry[p]), 0) + 1
                    todo.append(p)
        # 3. the rest: toward a neighbour with an entry, a closer one if there is,
        # least loaded (the uplink counts of step 2)
        while True:
            frontier = sorted({p for x in entry for p in ports[x]
                               if p in ports and p not in entry})
            if not frontier:
                break
            new = {}
            for p in frontier:
                toward = [i for i, q in enumerate(ports[p]) if q in entry]
                near = [i for i in fabric.closer(p, dist) if ports[p][i] in entry]
                new[p] = min(near or toward, key=lambda i, p=p: (up_load.get((p, i), 0), i))
                up_load[(p, new[p])] = up_load.get((p, new[p]), 0) + 1
            entry.update(new)
        for s, port in entry.items():
            if s != leaf:
                routes.set(s, dlid, port, fabric.closer(s, dist) if s in dist else ())
    return routes


__all__ = ["check", "route"]
