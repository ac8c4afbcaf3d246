"""Destination-mod-k routing (Zahavi et al., "Optimized InfiniBand fat-tree routing for
shift all-to-all communication patterns", 2010): every route a shortest path; among a
switch's k equal next hops toward destination d (the d-th port in LID order, its base LID
over 2^LMC), hop (d // stride) mod k, stride the product of the uplink counts of the ranks
below the switch (``Fabric.stride``): consecutive destinations leave a leaf on successive
uplinks and, one level up, on successive uplinks again, so a fat tree's top switches each
carry an equal share.  LIDs of a port beyond its base by ``Fabric.spread``."""

from __future__ import annotations

from roce.emu.ib.lft import Fabric, Routes, route_host_port


def route(fabric: Fabric) -> Routes:
    routes = Routes.empty(fabric)
    for host, dlid, j in fabric.destinations():
        top = route_host_port(fabric, routes, host, dlid)
        dist = fabric.distances(top)
        d = dlid >> fabric.lmc
        for s in fabric.ports:
            if s == top or s not in dist:
                continue
            hops = fabric.closer(s, dist)
            port = hops[(d // fabric.stride(s)) % len(hops)]
            if j:
                port = fabric.spread(s, hops, port, j)
            routes.set(s, dlid, port, hops)
    return routes


__all__ = ["route"]
