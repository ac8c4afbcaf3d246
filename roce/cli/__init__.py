"""The ``roce`` command.  Each subcommand is a thin wrapper over a module that owns the work;
the module provides ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from roce import __version__, interrupts, outfile
from roce.errors import InputError, RoceError, UsageError, VerificationError

# The exit statuses of every command, in one table (README shows it).  The commands return
# 0 themselves; an error class maps to its status here, most specific class first.
EXIT_OK = 0
EXIT_USAGE = 1       # bad option, bad filter, bad combination
EXIT_INPUT = 2       # unreadable or unusable file, interface or peer
INTERNAL_ERROR = 3   # a bug in roce: an exception that is not a RoceError
EXIT_UNVERIFIED = 4  # roce emulate: the run ended but its data did not check out
EXIT_INTERRUPTED = 130  # SIGINT, SIGTERM or SIGHUP (roce.errors.Interrupted): 128 + SIGINT
EXIT_CODES: tuple[tuple[type[RoceError], int], ...] = (
    (UsageError, EXIT_USAGE),
    (InputError, EXIT_INPUT),
    (VerificationError, EXIT_UNVERIFIED),
    (RoceError, EXIT_USAGE),
)


def exit_code(exc: RoceError) -> int:
    """The exit status for an error roce raised on purpose."""
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))

# subcommand -> (module, one-line help).  Modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "decode": ("roce.cli.decode", "decode a capture, one line or a full tree per packet"),
    "stats": ("roce.cli.stats", "per-flow analysis: PSN gaps, retransmissions, NAKs, CNPs"),
    "craft": ("roce.cli.craft", "build RoCE frames from the command line"),
    "send": ("roce.cli.send", "put crafted frames on a network interface"),
    "replay": ("roce.cli.replay", "replay a capture on an interface, with rewrites"),
    "sniff": ("roce.cli.sniff", "capture and decode RoCE live on an interface"),
    "emulate": ("roce.cli.emulate", "run RC queue pairs over a simulated fabric, print a summary"),
    "sweep": ("roce.cli.sweep",
              "run emulate over a grid of options, one table row per run (CSV, Parquet)"),
    "compare": ("roce.cli.compare",
                "run named configurations (RoCE, UET, InfiniBand) on one workload, side by "
                "side"),
    "relay": ("roce.cli.relay",
              "an impairing wire between two interfaces (loss, reordering, delay)"),
    "target": ("roce.cli.target",
               "an emulated RoCE responder for outside peers (raw Ethernet or UDP)"),
    "fuzz": ("roce.cli.fuzz",
             "fuzz the decoder, the emulated responder or a device on a wire"),
    "opcodes": ("roce.cli.opcodes", "list the BTH opcode table"),
    "plot": ("roce.cli.plot", "plot per-QP throughput, PSNs, queues, rates and pauses"),
}


class Deferred(str):
    """A help text made only when help is shown: it reads a registry (``--cc``'s algorithms,
    ``--workload``'s generators) whose modules a run that does not use them never imports
    (the fixed cost of ``roce emulate``, bench/RESULTS.md "roce against ns-3")."""

    make: Callable[[], str]

    def __new__(cls, make: Callable[[], str]) -> Deferred:
        self = super().__new__(cls, "")
        self.make = make
        return self


_INNERMOST = "_roce_parser"  # namespace attribute: the sub-command that left words over


class _Parser(argparse.ArgumentParser):
    """Bad usage exits 1 (2 is kept for unreadable files) with one line: argparse's message,
    which names the option, and where to read the usage (scripts parse that one line).

    The line names the command being parsed (``roce fuzz wire: error: ...``).  argparse
    hands the words a sub-command did not take back to the top-level parser, which would
    report them under its own name: each parser notes itself on the namespace when it
    leaves words over (the innermost notes first), and ``parse_args`` lets that one speak.
    """

    _laying_out = False  # True while help or usage is being formatted

    def format_help(self) -> str:
        for action in self._actions:
            if isinstance(action.help, Deferred):
                action.help = action.help.make()
        return self._laid_out(super().format_help)

    def format_usage(self) -> str:
        return self._laid_out(super().format_usage)

    def _laid_out(self, fmt: Callable[[], str]) -> str:
        self._laying_out = True
        try:
            return fmt()
        finally:
            self._laying_out = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter at every add_argument, only to check the metavar; the
        # terminal's width matters only to help and usage (asking for it imports shutil, with
        # bz2 and lzma: a millisecond or two of every start of every command)
        if self._laying_out:
            return super()._get_formatter()
        return self.formatter_class(prog=self.prog, width=80)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(1, f"{self.prog}: error: {message} (see {self.prog} -h)\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None,
                         ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras and getattr(ns, _INNERMOST, None) is None:
            setattr(ns, _INNERMOST, self)
        return ns, extras

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        owner = vars(ns).pop(_INNERMOST, None) or self
        if extras:
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported, and only its sub-parser built when
    it is one of COMMANDS (start-up time matters when a command runs over a pipe or in a
    loop; ``roce -h`` and a word that is no command get every one)."""
    parser = _Parser(prog="roce",
                     description="RoCEv2 at the packet level: craft, decode, analyse, emulate.")
    parser.add_argument("--version", action="version", version=f"roce {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in COMMANDS.items():
        if command in COMMANDS and name != command:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: its exit status, an error or a stop signal mapped to one (the only
    place that does).  SIGINT, SIGTERM and SIGHUP stop every command alike
    (``roce.interrupts``): 130, and one line on stderr saying what was interrupted."""
    is_process = argv is None  # this process is the command, not a caller's library call
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    prog = f"roce {command}" if command in COMMANDS else "roce"
    with interrupts.raising():
        try:
            with outfile.whole_stdout():
                return _run(argv, command, frozen=is_process)
        except KeyboardInterrupt as exc:
            print(f"{prog}: {interrupted_line(exc)}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except RoceError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return exit_code(exc)
        except BrokenPipeError:
            # `roce decode f | head`: the reader went away; exit quietly like other tools.
            sys.stderr.close()
            return 0
        except Exception as exc:  # a bug: one line, not a traceback (unless asked for)
            if os.environ.get("ROCE_DEBUG"):
                raise
            print(f"{prog}: internal error: {type(exc).__name__}: {exc} "
                  "(a bug; ROCE_DEBUG=1 shows the traceback)", file=sys.stderr)
            return INTERNAL_ERROR


def interrupted_line(exc: KeyboardInterrupt) -> str:
    """``interrupted (SIGTERM) after 12,345 frames; out.parquet removed``: the signal, then
    the notes the layers it passed through added (``after ...`` first, the rest after
    semicolons)."""
    notes = list(getattr(exc, "__notes__", ()))
    after = [n for n in notes if n.startswith("after ")]
    return " ".join([f"interrupted ({getattr(exc, 'signal', 'SIGINT')})", *after[:1]]) + \
        "".join(f"; {n}" for n in notes if n not in after[:1])


def _run(argv: list[str], command: str | None, frozen: bool = False) -> int:
    # The command's imports and its parser make objects that live as long as the process:
    # the cyclic collector, run as they are made, would only walk them (4 % of a short
    # `roce emulate`); it runs again from the command's own work on.
    collecting = gc.isenabled()
    gc.disable()
    try:
        parser = build_parser(command if command in COMMANDS else None)
        args = parser.parse_args(argv)
        module = importlib.import_module(args._module) if args.command else None
        if frozen:
            # what the imports made lives as long as the process: out of the collector's
            # sight for good, so that neither the run's full collections nor the one at exit
            # walk it (~8 % of a short `roce emulate`'s instructions)
            gc.freeze()
    finally:
        if collecting:
            gc.enable()
    if module is None:
        parser.print_help()
        return 1
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
