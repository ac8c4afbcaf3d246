"""``roce craft pfc`` and ``roce craft pause``: MAC Control frames from the command line.

::

    roce craft pfc --prio 3 --quanta 65535          class 3 paused for 0xFFFF quanta
    roce craft pfc --prio 3=100 --prio 5=0 -w x.pcap class 3 for 100 quanta, XON for class 5
    roce craft pause --quanta 1000 --smac 02:00:00:00:00:09

The frames are ``roce.macc``'s (802.1Qbb PFC, 802.3x PAUSE: destination 01:80:C2:00:00:01,
EtherType 0x8808, padded to 60 bytes).  ``--count``, ``--interval``, ``-w``, ``-V`` and
``-q`` work as for any opcode; ``--smac`` sets the source MAC; the RoCE frame options do
not apply and are refused.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator

import roce
from roce import macc
from roce.errors import UsageError
from roce.options import bounded_int, mac_bytes

KINDS = ("pfc", "pause")


def parse_prio(text: str) -> tuple[int, int | None]:
    """``3`` or ``3=65535`` (argparse type): a priority and, optionally, its quanta."""
    prio_text, sep, quanta_text = text.partition("=")
    prio = _priority(prio_text)
    return prio, parse_quanta(quanta_text) if sep else None


_priority = bounded_int(min(macc.PRIORITIES), max(macc.PRIORITIES), "a priority")
parse_quanta = bounded_int(0, macc.MAX_QUANTA, "a number of quanta")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("MAC Control frames (OPCODE pfc or pause)")
    g.add_argument("--prio", action="append", type=parse_prio, default=[], metavar="P[=Q]",
                   help="pfc: pause priority P (0..7) for Q quanta, or for --quanta "
                        "(repeatable; Q 0 is XON)")
    g.add_argument("--quanta", type=parse_quanta, metavar="Q",
                   help=f"pause time in quanta of 512 bit times (default {macc.MAX_QUANTA}; "
                        "0 is XON)")


def wanted(args: argparse.Namespace) -> bool:
    """Does the command line ask for a MAC Control frame?"""
    return str(args.opcode).strip().lower() in KINDS


def build(args: argparse.Namespace, refused: list[str]) -> Iterator[bytes]:
    """The ``--count`` frames the options describe, one at a time (memory does not grow
    with ``--count``); ``refused`` lists the frame options given that do not apply
    (UsageError when there are any)."""
    kind = str(args.opcode).strip().lower()
    refused = [flag for flag in refused if flag != "--smac"]
    if refused:
        raise UsageError(f"{kind}: MAC Control frames take no {', '.join(refused)}")
    quanta = macc.MAX_QUANTA if args.quanta is None else args.quanta
    # the source MAC roce.craft gives any frame by default
    src = args.smac or roce.craft("RC_SEND_ONLY").headers["eth"]["src"]
    src_mac = mac_bytes(src)  # --smac was checked when parsed (roce.options)
    if kind == "pause":
        if args.prio:
            raise UsageError("pause: --prio is for pfc (an 802.3x PAUSE stops every priority)")
        frame = macc.build_pause(src_mac, quanta)
    else:
        if not args.prio:
            raise UsageError("pfc: give at least one --prio P[=QUANTA]")
        frame = macc.build_pfc(src_mac, {p: quanta if q is None else q for p, q in args.prio})
    return itertools.repeat(frame, args.count)


__all__ = ["KINDS", "add_arguments", "build", "wanted"]
