"""The ``roce emulate`` options of a ``--protocol uet`` run (Ultra Ethernet Transport endpoints,
``roce.emu.uet``, on the simulated Ethernet network): the PDC mode, the entropy of its
packets, trimming switches.  ``--protocol`` itself is the network's option
(``roce.cli._emulate_net``)."""

from __future__ import annotations

import argparse

from roce.emu.uet import CLOSERS, ENTROPY_MODES, PDC_MODES
from roce.options import parse_size

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "Ultra Ethernet Transport", "what a --protocol uet run adds: the PDC mode, the "
        "entropy switches hash, trimming switches")
    g.add_argument("--pdc-mode", choices=PDC_MODES, default=PDC_MODES[0],
                   help="--protocol uet: reliable unordered (rud; the default), reliable "
                        "ordered (rod), reliable unordered for idempotent operations (rudi: "
                        "write, read) or unreliable unordered (uud: write) delivery")
    g.add_argument("--entropy", choices=ENTROPY_MODES, default=ENTROPY_MODES[0],
                   help="--protocol uet: the entropy (UDP source port) switches hash: one "
                        "per PDC (pdc; the default), a new one per packet (packet: "
                        "spraying over every equal-cost path), or REPS (reps: entropies "
                        "whose ACKs came back unmarked are used again)")
    g.add_argument("--pdc-close", choices=CLOSERS, default=CLOSERS[0],
                   help="--protocol uet: who ends each PDC when the run's messages are "
                        "done: the initiator closes (the default), or the target asks for a "
                        "clear command and then a close (CLEAR_REQ, CLOSE_REQ)")
    g.add_argument("--rendezvous", type=parse_size, default=0, metavar="SIZE",
                   help="--protocol uet: a SEND longer than SIZE is a rendezvous send: its "
                        "first SIZE bytes go eagerly, the target pulls the rest with a READ "
                        "(0, the default: every SEND is eager)")
    g.add_argument("--trim", action="store_true",
                   help="--protocol uet: switches trim a packet they would drop to its "
                        "headers, re-marked (DSCP 40) and sent on ahead in the strict "
                        "class; the receiver answers NACK TRIMMED")


def options(args: argparse.Namespace) -> Any:
    """The UET run's options (``roce.emu.uet.run.UetOptions``), or None for another
    protocol; a UsageError when a UET option is given to another protocol's run."""
    from roce.errors import UsageError

    if getattr(args, "protocol", None) == "uet":
        from roce.emu.uet.run import UetOptions

        return UetOptions(mode=args.pdc_mode, entropy=args.entropy, trim=args.trim,
                          close=args.pdc_close, rendezvous=args.rendezvous)
    for opt, dest, default in (("--pdc-mode", "pdc_mode", PDC_MODES[0]),
                               ("--entropy", "entropy", ENTROPY_MODES[0]),
                               ("--trim", "trim", False),
                               ("--pdc-close", "pdc_close", CLOSERS[0]),
                               ("--rendezvous", "rendezvous", 0)):
        if getattr(args, dest, default) != default:
            raise UsageError(f"{opt}: only with --protocol uet")
    return None
