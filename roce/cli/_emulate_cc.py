"""The congestion-control options of ``roce emulate`` (docs/congestion-control.md)."""

from __future__ import annotations

import argparse

from roce.cli import Deferred
from roce.emu.cc.algorithms import (
    ALGORITHMS,
    ECN_CODEPOINTS,
    CcConfig,
    choices_help,
    configure,
    profiles,
)


def _profiles_help() -> str:
    names = ", ".join(f"{a}: {'/'.join(ps)}" for a, ps in profiles().items() if a != "none")
    return f"published parameter set ({names}; default the first)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "congestion control", "per-QP rate control in the emulated NICs (switched network)")
    g.add_argument("--cc", choices=list(ALGORITHMS), default="none", help=Deferred(choices_help))
    g.add_argument("--cc-profile", metavar="NAME",
                   help=Deferred(_profiles_help))
    g.add_argument("--cc-param", action="append", default=[], metavar="NAME=VALUE",
                   help="override one parameter, e.g. rp_ai_rate=40 (repeatable; names and "
                        "units in docs/congestion-control.md)")
    g.add_argument("--ecn-codepoint", choices=list(ECN_CODEPOINTS), default="ect0",
                   help="the ECN codepoint data packets carry (ect0)")


def config(args: argparse.Namespace, line_rate_gbps: float) -> CcConfig:
    """The validated configuration (a UsageError names a bad profile or parameter)."""
    return configure(args.cc, args.cc_profile, args.cc_param, line_rate_gbps,
                     args.ecn_codepoint)
