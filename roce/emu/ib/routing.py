"""The subnet manager's routings, by name (``ROUTINGS``), and what every one of them shares:
LIDs and linear forwarding tables (IBA Vol 1 ch. 18.2.4: a switch forwards a unicast packet
by its DLID through its linear forwarding table, DLID -> output port; ch. 14 has the SM fill
the tables).  One module per routing, each ``route(Fabric) -> Routes``:

- ``minhop`` (``route_minhop``): shortest paths, each switch's equal next hops balanced by
  how many destinations each port carries (OpenSM's default);
- ``dmodk`` (``route_dmodk``): shortest paths, destination-mod-k over the equal next hops;
- ``updn`` (``route_updn``): up/down from the root switches, no down-then-up turn, the
  allowed next hops balanced as minhop's;
- ``ftree`` (``route_ftree``): OpenSM's fat-tree routing, on fat trees and leaf-spines only.

What they share (LIDs and LMC, ranks, LMC multipath, the equal next hops adaptive routing
chooses among) is ``roce.emu.ib.lft``.  Building is one search per destination switch (and
per destination for ftree), so linear in LIDs times switches.
"""

from __future__ import annotations

import importlib

from roce.lazyexports import lazy_exports

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from roce.emu.ib.lft import Fabric, Routes

# lft's names this module re-exports, imported when first read: ``roce emulate`` reads
# ROUTINGS for its options at every start, and a RoCE run routes nothing
_LFT = ("MAX_LMC", "MAX_UNICAST_LID", "Routes", "Unroutable", "ports_of")
__getattr__, _ = lazy_exports(__package__, dict.fromkeys(_LFT, "lft"))

# routing -> the module of this package whose ``route`` it is, imported when a run uses it
# (``roce emulate`` lists the names among its options; a RoCE run routes nothing)
ROUTINGS: dict[str, str] = {
    "minhop": "route_minhop",
    "dmodk": "route_dmodk",
    "updn": "route_updn",
    "ftree": "route_ftree",
}


def router(routing: str) -> Callable[[Fabric], Routes]:
    """The ``route`` function of ``routing`` (a name of ROUTINGS)."""
    module = ROUTINGS.get(routing)
    if module is None:
        raise ValueError(f"routing {routing!r}: one of {', '.join(ROUTINGS)}")
    return importlib.import_module(f"{__package__}.{module}").route


def assign_lids(hosts: list[str], lmc: int = 0) -> dict[str, int]:
    """Each HCA port's base LID (``roce.emu.ib.lft.lids``)."""
    from roce.emu.ib.lft import lids
    return lids(hosts, lmc)


def compute(hosts: list[str], switches: Any, links: list[Any], base: dict[str, int],
            routing: str = "minhop", lmc: int = 0) -> Routes:
    """Every switch's forwarding table and equal next hops by ``routing``; ``Unroutable``
    when that routing cannot route the topology."""
    from roce.emu.ib.lft import Fabric
    return router(routing)(Fabric.of(hosts, switches, links, base, lmc))


def forwarding_tables(hosts: list[str], switches: Any, links: list[Any],
                      base: dict[str, int], routing: str = "minhop", lmc: int = 0
                      ) -> dict[str, dict[int, int]]:
    """Per switch, its linear forwarding table: DLID -> port index."""
    return compute(hosts, switches, links, base, routing, lmc).lft


__all__ = sorted(["ROUTINGS", "assign_lids", "compute", "forwarding_tables", "router", *_LFT])
