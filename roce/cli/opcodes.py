"""``roce opcodes``: print the opcode table (the one in roce.opcodes)."""

from __future__ import annotations

import argparse

from roce.opcodes import OPCODES, Link, Transport

_LINK_NAMES = {Link.ROCE: "RoCE", Link.IB: "native InfiniBand"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", type=str.upper, choices=[t.value for t in Transport],
                        help="only this transport")


def run(args: argparse.Namespace) -> int:
    print(f"{'code':>4}  {'ident':<36} {'Wireshark name':<34} headers")
    for code, op in OPCODES.items():
        if args.transport and op.transport.value != args.transport:
            continue
        hdrs = " ".join(op.headers) or "-"
        payload = "" if op.payload else "  (no payload)"
        only = "" if len(op.links) > 1 else f"  ({_LINK_NAMES[next(iter(op.links))]} only)"
        print(f"0x{code:02x}  {op.ident:<36} {op.short_name:<34} {hdrs}{payload}{only}")
    return 0
