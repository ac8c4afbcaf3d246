"""The ``roce emulate`` options of the simulated network: the topology, its switches and what
to watch (taps, the trace, a PFC storm).  Every topology runs through the same runner
(``roce.emu.net.runner``); ``--topology p2p``, the default, is two hosts cabled back to back.
"""

from __future__ import annotations

import argparse

from roce.emu import defaults
from roce.emu.ib.routing import ROUTINGS
from roce.emu.net.failures import parse_spec
from roce.emu.net.observe import parse_tap
from roce.emu.net.schema import parse_ecn_text, parse_topology
from roce.options import (
    bounded_int,
    parse_oversubscription,
    parse_positive_time,
    parse_size,
    parse_time,
)


class Given(argparse.Action):
    """``store``, and the option's destination noted in the namespace's ``given_options``:
    an option some runs refuse however it is set (``--pfc on`` with ``--protocol ib``),
    which its value alone cannot tell from the default."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        given = getattr(namespace, "given_options", None)
        if given is None:
            given = namespace.given_options = set()
        given.add(self.dest)


def _lmc(text: str) -> int:
    """``--ib-lmc``: an LMC, 0..``roce.emu.ib.lft.MAX_LMC``, read when the option is given
    (a RoCE run imports nothing of InfiniBand's routing)."""
    from roce.emu.ib.lft import MAX_LMC
    return bounded_int(0, MAX_LMC, "an LMC (3 bits)")(text)


def given(args: argparse.Namespace) -> frozenset[str]:
    """The destinations of the ``Given`` options typed on the command line."""
    return frozenset(getattr(args, "given_options", None) or ())


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "simulated network",
        "two hosts cabled back to back, or hosts behind switches with shared buffers, ECN, "
        "PFC and ECMP (not with --listen)")
    g.add_argument("--topology", type=parse_topology, default=defaults.TOPOLOGY,
                   metavar="KIND",
                   help="p2p (two hosts cabled back to back; the default), incast:N, "
                        "dumbbell:N, leafspine:L,S,H, fattree:K (K pods, K^3/4 hosts)")
    g.add_argument("--protocol", choices=defaults.PROTOCOLS, default=defaults.PROTOCOL,
                   help="the link family: roce (Ethernet: PFC, ECN; the default), ib "
                        "(native InfiniBand: HCAs and switches with credit-based flow "
                        "control per VL, routed by LID; pcaps in link type 247) or uet "
                        "(Ultra Ethernet Transport PDCs carrying SES writes, reads or "
                        "sends on the Ethernet network)")
    g.add_argument("--ib-routing", choices=ROUTINGS, default=defaults.IB_ROUTING,
                   help="--protocol ib: how the subnet manager fills the forwarding "
                        "tables: minhop (shortest paths, each switch's ports balanced), "
                        "dmodk (destination mod the number of uplinks), updn (up/down "
                        "from the root switches) or ftree (OpenSM's fat-tree routing: "
                        f"fat trees and leaf-spines only; {defaults.IB_ROUTING})")
    g.add_argument("--ib-lmc", type=_lmc, default=0,
                   metavar="N",
                   help="--protocol ib: LID mask control: 2^N LIDs per HCA port (N 0-7), "
                        "each routed by its own path, a QP's by its destination QPN (0)")
    g.add_argument("--ib-ar", choices=("on", "off"), default="off",
                   help="--protocol ib: adaptive routing: a switch sends each packet out "
                        "of the least queued of its destination's equal next hops (off)")
    g.add_argument("--ib-cc", choices=("on", "off"), default="off",
                   help="--protocol ib: InfiniBand congestion control (IBA Annex A10): "
                        "switches mark FECN above a queue threshold, receivers return "
                        "CNPs with BECN, senders step their congestion control table "
                        "index up and let it decay by timer (off)")
    g.add_argument("--topology-file", metavar="FILE", help="hosts, switches, links and "
                   "traffic from a TOML file")
    g.add_argument("--traffic", choices=("permutation", "all-to-all"),
                   help="who sends to whom (default: the topology's own; leaf-spine: "
                        "permutation)")
    g.add_argument("--buffer", type=parse_size, default=defaults.BUFFER, metavar="SIZE",
                   action=Given,
                   help=f"shared buffer per switch ({defaults.BUFFER >> 20}M)")
    g.add_argument("--ecn", type=parse_ecn_text, default=defaults.ECN, metavar="KMIN,KMAX,PMAX",
                   action=Given,
                   help="RED marking per egress queue, e.g. 100K,400K,0.2; off; default: "
                        "100K,400K,0.2 per 25 Gb/s of port rate, shrunk until the queue "
                        "reaches KMAX before the buffer drops (PFC off: half its drop point) "
                        "or pauses (PFC on: where two senders into one port trigger PFC)")
    g.add_argument("--pfc", choices=("on", "off"), default="on" if defaults.PFC else "off",
                   action=Given,
                   help="PFC for the lossless class (DSCP 26, priority 3; default on): "
                        "switches send pause frames, NICs obey them")
    g.add_argument("--lb", choices=("ecmp", "spray"), default=defaults.LB, action=Given,
                   help="equal-cost paths: per-flow hash or per-packet spraying (ecmp)")
    g.add_argument("--oversubscription", type=parse_oversubscription,
                   default=defaults.OVERSUBSCRIPTION, metavar="R",
                   help="every uplink of a switch with hosts (a leaf, a fat tree's edge) "
                        "runs at --rate / R: its hosts can send R times what it forwards "
                        "up (1)")
    g.add_argument("--link-down", action="append", type=parse_spec, default=[],
                   metavar="A-B@T[,up@T2]",
                   help="fault: the link between nodes A and B fails at virtual time T (frames "
                        "on it are lost) and, with up@T2, is repaired at T2; repeatable")
    g.add_argument("--detect-delay", type=parse_time, default=defaults.DETECT_DELAY_NS,
                   metavar="TIME",
                   help="--link-down: time until the switches' routes know of a failure or "
                        f"a repair ({defaults.DETECT_DELAY_NS // 1000}us)")
    g.add_argument("--tap", action="append", type=parse_tap, default=[],
                   metavar="NODE:PORT[=FILE]",
                   help="record both directions of a port (a switch's, e.g. sw:0, or a "
                        "host's, e.g. A:0) to a pcap (default file tap-NODE-PORT.pcap; "
                        "with --protocol ib an ERF file, flow-control packets included); "
                        "repeatable")
    g.add_argument("--trace", metavar="FILE", help="sampled queues, QP rates, pause states "
                   "(CSV; JSON lines if FILE ends in .json or .jsonl)")
    g.add_argument("--trace-interval", type=parse_positive_time,
                   default=defaults.TRACE_INTERVAL_NS, metavar="TIME",
                   help=f"virtual time between trace samples "
                        f"({defaults.TRACE_INTERVAL_NS // 1000}us)")
    g.add_argument("--pfc-storm", action="append", default=[], metavar="HOST",
                   help="fault: HOST sends PFC pause frames continuously; repeatable")
