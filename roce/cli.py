"""The ``roce`` command.  Each subcommand is a thin wrapper over a module that owns the work;
the module provides ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from . import __version__

# subcommand -> (module, one-line help).  Modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "decode": ("roce.dissect.decode", "decode a capture, one line or a full tree per packet"),
    "stats": ("roce.dissect.stats", "per-flow analysis: PSN gaps, retransmissions, NAKs, CNPs"),
    "emulate": ("roce.emu.cli", "run RC queue pairs over a simulated fabric, print a summary"),
    "opcodes": ("roce.opcodes_cli", "list the BTH opcode table"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roce", description="RoCEv2 at the packet level: craft, decode, analyse.")
    parser.add_argument("--version", action="version", version=f"roce {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        try:
            importlib.import_module(module).add_arguments(p)
        except ImportError:  # pragma: no cover - a module not written yet in a dev tree
            p.set_defaults(_missing=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 1
    if getattr(args, "_missing", False):
        parser.error(f"{args.command}: not available in this build")
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `roce decode f | head`: the reader went away; exit quietly like other tools.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
