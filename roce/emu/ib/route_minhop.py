"""Min-hop routing (OpenSM's default ``minhop`` engine): every route a shortest path in
switch hops; among a switch's equal next hops toward a destination, the port that carries
the fewest destinations so far (destinations taken in LID order), lowest port on a tie.
LIDs of a port beyond its base by ``Fabric.spread`` (``roce.emu.ib.lft``)."""

from __future__ import annotations

from roce.emu.ib.lft import Fabric, Routes, route_host_port, route_least_loaded


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
            route_least_loaded(fabric, routes, load, s, dlid, j, hops)
    return routes


__all__ = ["route"]
