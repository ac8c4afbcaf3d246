"""Min-hop routing (OpenSM's default ``minhop`` engine): every route a shortest path in
switch hops; among a switch's equal next hops toward a destination, the port that carries
the fewest destinations so far (destinations taken in LID order), lowest port on a tie.
LIDs of a port beyond its base by ``Fabric.spread`` (``roce.emu.ib.lft``)."""

from __future__ import annotations

from roce.emu.ib.lft import Fabric, Routes, route_host_port


def route(fabric: Fabric) -> Routes:
    routes = Routes.empty(fabric)
    load: dict[tuple[str, int], int] = {}
    for host, dlid, j in fabric.destinations():
        top = route_host_port(fabric, routes, host, dlid)
        dist = fabric.distances(top)
        for s in fabric.ports:
            if s == top or s not in dist:
                continue
            hops = fabric.closer(s, dist)
            if j == 0:
                port = min(hops, key=lambda i: (load.get((s, i), 0), i))
            else:
                port = fabric.spread(s, hops, routes.lft[s][dlid - j], j)
            load[(s, port)] = load.get((s, port), 0) + 1
            routes.set(s, dlid, port, hops)
    return routes


__all__ = ["route"]
