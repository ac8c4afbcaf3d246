"""The ``roce emulate`` options of a ``--protocol uet`` run (Ultra Ethernet Transport endpoints,
``roce.emu.uet``, on the simulated Ethernet network): the PDC mode, the entropy of its
packets, trimming switches.  ``--protocol`` itself is the network's option
(``roce.cli._emulate_net``)."""

from __future__ import annotations

import argparse

from roce.emu.uet.host import ENTROPY_MODES
from roce.emu.uet.run import MODES, UetOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "Ultra Ethernet Transport", "what a --protocol uet run adds: the PDC mode, the "
        "entropy switches hash, trimming switches")
    g.add_argument("--pdc-mode", choices=tuple(MODES), default=UetOptions.mode,
                   help="--protocol uet: reliable unordered (rud; the default) or ordered "
                        "(rod) delivery")
    g.add_argument("--entropy", choices=ENTROPY_MODES, default=UetOptions.entropy,
                   help="--protocol uet: the entropy (UDP source port) switches hash: one "
                        "per PDC (pdc; the default) or a new one per packet (packet: "
                        "spraying over every equal-cost path)")
    g.add_argument("--trim", action="store_true",
                   help="--protocol uet: switches trim a packet they would drop to its "
                        "headers, re-marked (DSCP 40) and sent on ahead in the strict "
                        "class; the receiver answers NACK TRIMMED")


def options(args: argparse.Namespace) -> UetOptions | None:
    """The UET run's options, or None for a RoCE run; a UsageError when a UET option is
    given to a RoCE run."""
    from roce.errors import UsageError

    if getattr(args, "protocol", None) == "uet":
        return UetOptions(mode=args.pdc_mode, entropy=args.entropy, trim=args.trim)
    for opt, dest, default in (("--pdc-mode", "pdc_mode", UetOptions.mode),
                               ("--entropy", "entropy", UetOptions.entropy),
                               ("--trim", "trim", UetOptions.trim)):
        if getattr(args, dest, default) != default:
            raise UsageError(f"{opt}: only with --protocol uet")
    return None
