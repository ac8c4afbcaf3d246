"""A run on a native InfiniBand subnet (``roce emulate --protocol ib``): ``IbRun``.

The switched network's run (``roce.emu.net.runner.NetRun``: the flows of RC queue pairs,
their messages, the data checks, the summary) on the subnet ``subnet.build`` makes of the same
topology; received packets are recorded as they arrived (link type 247) and the summary's
``fabric`` holds the subnet's counters (``subnet.stats``).  ``IbTransport`` is the same
for ``--workload`` and ``--collective`` runs: the workload driver's RC queue pairs
(``roce.emu.net.transport.QpTransport``) on the HCAs of the subnet.
"""

from __future__ import annotations

from typing import Any

from roce.emu.ib.ibcc import IbCcConfig
from roce.emu.ib.lft import MAX_LMC, Unroutable
from roce.emu.ib.subnet import IbConfig, build, stats
from roce.emu.net import runner
from roce.emu.net.stages import ROCE_TRAFFIC_CLASS
from roce.emu.net.transport import QpTransport
from roce.errors import UsageError
from roce.locate import LINKTYPE_INFINIBAND


def build_subnet(t: Any, sc: Any) -> Any:
    """The subnet of ``sc`` on topology ``t``; a topology file's switch keys an InfiniBand
    switch has nothing for are a UsageError naming them."""
    for name, spec in t.switches.items():
        for key, value in (("buffer", spec.buffer), ("ecn", spec.ecn), ("pfc", spec.pfc)):
            if value is not None:
                raise UsageError(f"{sc.topology_file}: switches.{name}.{key}: an "
                                 "InfiniBand switch has credits per VL, not a shared "
                                 "buffer, ECN or PFC (--protocol ib)")
    if not 0 <= sc.ib_lmc <= MAX_LMC:
        raise UsageError(f"--ib-lmc {sc.ib_lmc}: LMC is 0-{MAX_LMC} (PortInfo:LMC, 3 "
                         "bits)")
    if sc.ib_ar and sc.recovery != "sr":
        raise UsageError("--ib-ar on: a QP's packets take different paths and arrive "
                         "out of order, which RC QPs take only with --recovery sr "
                         "(NVIDIA runs adaptive routing for RC traffic only on HCAs that "
                         "accept packets out of order)")
    cc = IbCcConfig() if sc.ib_cc else None
    where = sc.topology_file or sc.topology
    try:
        return build(t, runner.options(sc, direct=False),
                     IbConfig(routing=sc.ib_routing, cc=cc, lmc=sc.ib_lmc,
                              adaptive=sc.ib_ar), ROCE_TRAFFIC_CLASS)
    except Unroutable as e:
        raise UsageError(f"--ib-routing {sc.ib_routing} on {where}: {e}") from None
    except ValueError as e:
        if "LIDs" not in str(e):
            raise
        raise UsageError(f"--ib-lmc {sc.ib_lmc} on {where}: {e}") from None


def record_ib(net: Any, writer: Any) -> None:
    """Every InfiniBand packet a host receives, as it arrived, to ``writer``."""
    for hca in net.hosts.values():
        hca.ib_recorders.append(writer)


class IbRun(runner.NetRun):
    protocol = "ib"

    def build_network(self, t: Any, sc: Any) -> Any:
        return build_subnet(t, sc)

    def record(self, writer: Any) -> None:
        record_ib(self.net, writer)

    def fabric_stats(self) -> dict[str, Any]:
        return stats(self.net)


class IbTransport(QpTransport):
    """A workload's transfers as RC queue pairs on the subnet's HCAs."""

    name = "ib"
    linktype = LINKTYPE_INFINIBAND

    def check(self, sc: Any) -> None:
        if sc.protocol != "ib":
            raise UsageError(f"--protocol {sc.protocol}: an InfiniBand transport runs "
                             "--protocol ib")

    def build(self, t: Any, sc: Any) -> Any:
        return build_subnet(t, sc)

    def record(self, writer: Any) -> None:
        record_ib(self.net, writer)

    def fabric_stats(self, failures: Any) -> dict[str, Any]:
        return stats(self.net)


def run_scenario(sc: Any, record: Any = None, taps: dict[str, Any] | None = None) -> Any:
    """Run ``sc`` on its subnet and summarise it (``record``: a writer of every packet a
    host receives)."""
    return IbRun(sc, record, taps).run()


__all__ = ["IbRun", "IbTransport", "build_subnet", "record_ib", "run_scenario"]
