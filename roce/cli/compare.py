"""``roce compare``: run named configurations (contenders) of ``roce emulate`` on one topology
and workload and print them side by side (a table, ``-T json``, a figure with ``--plot``).

The shared scenario is given as emulate's options (``--topology``, ``--workload``...); each
contender adds its own (``--contender NAME=OPTIONS``, or a TOML file's ``[contenders.NAME]``
tables), parsed with emulate's own parser, so a bad option or value is a usage error naming
the contender.  Without any, the four of ``roce.emu.contenders.DEFAULT_CONTENDERS`` run.
Each contender is one ``roce.cli.emulate.simulate`` run; the rows, the check that they ran
the same transfers and the table are ``roce.emu.contenders``'; the figure
``roce.plot.compare``'s.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from roce.cli import emulate as emu_cli
from roce.emu import contenders as cmp
from roce.emu import grid
from roce.errors import RoceError, UsageError, VerificationError

# emulate options a comparison cannot take: where one run's output goes, a real link.  Each
# contender is one run on the simulated network; the report is the output.
NOT_COMPARED = tuple(d for d in grid.NOT_SWEPT if d not in ("format", "no_progress"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contender", action="append", default=[], metavar="NAME=OPTIONS",
                   help="a configuration to run: a name, '=', and roce emulate options "
                        "(e.g. 'uet=--protocol uet --trim --pfc off'); repeatable; default: "
                        + ", ".join(n for n, _ in cmp.DEFAULT_CONTENDERS))
    p.add_argument("--contenders", metavar="FILE.toml",
                   help="contenders as TOML: a [contenders.NAME] table of emulate options "
                        "each, and an optional [options] table every contender shares")
    p.add_argument("--plot", metavar="FILE",
                   help="a figure of the table (FILE.png, .svg or .pdf; pip install "
                        "'roce[plot]')")
    # every roce emulate option, shared by all contenders; only those given are kept
    first = len(p._actions)
    emu_cli.add_arguments(p)
    for a in p._actions[first:]:
        a.default = argparse.SUPPRESS


class _Parser(argparse.ArgumentParser):
    """Emulate's parser for one contender's options: a bad one is a UsageError naming the
    contender, not an exit."""

    where = ""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.where}: {message}")


def _parser(where: str) -> _Parser:
    p = _Parser(prog="roce emulate", add_help=False)
    emu_cli.add_arguments(p)
    p.where = where
    return p


def _given(p: argparse.ArgumentParser, words: list[str], where: str) -> dict[str, Any]:
    """The options ``words`` give (not the defaults), checked by emulate's parser."""
    for a in p._actions:
        a.default = argparse.SUPPRESS
    got = vars(p.parse_args(words))
    for dest in got:
        if dest in NOT_COMPARED:
            raise UsageError(f"{where}: {_option(p, dest)} is not for a comparison (each "
                             "contender is one run on the simulated network; the report "
                             "is the output)")
    return got


def _option(p: argparse.ArgumentParser, dest: str) -> str:
    return next((f"--{grid.long_name(a)}" for a in p._actions if a.dest == dest), dest)


def _from_toml(path: str) -> tuple[list[tuple[cmp.Contender, dict[str, Any]]], dict[str, Any]]:
    from roce.tomlfile import load

    doc = load(path)
    unknown = set(doc) - {"contenders", "options"}
    table = doc.get("contenders", {})
    if unknown or not isinstance(table, dict) or not isinstance(doc.get("options", {}), dict):
        raise UsageError(f"{path}: expected [contenders.NAME] tables (and an optional "
                         f"[options] table), found {', '.join(sorted(doc)) or 'nothing'}")
    opts = grid.options(_parser(path))

    def convert(values: Any, where: str) -> dict[str, Any]:
        if not isinstance(values, dict):
            raise UsageError(f"{where}: expected a table of roce emulate options")
        out: dict[str, Any] = {}
        for name, value in values.items():
            action = opts.get(str(name).lstrip("-")) or opts.get(str(name).replace("-", "_"))
            if action is None:
                raise UsageError(f"{where}: {name}: roce emulate has no such option")
            if action.dest in NOT_COMPARED:
                raise UsageError(f"{where}: {name}: not for a comparison")
            if isinstance(value, list):
                out[action.dest] = [grid.convert(action, v, f"{where}: {name}={v}")
                                    for v in value]
            else:
                out[action.dest] = grid.convert(action, value, f"{where}: {name}")
        return out

    shared = convert(doc.get("options", {}), f"{path}: [options]")
    found = []
    for name, values in table.items():
        where = f"{path}: [contenders.{name}]"
        cmp.check_name(str(name), where)
        given = convert(values, where)
        words = tuple(f"{k}={v}" for k, v in sorted(given.items()))
        # a contender's own options are typed, as on its --contender line (given_options:
        # what ``emulate.refuse_given_ib`` reads)
        found.append((cmp.Contender(str(name), words),
                      {**given, "given_options": set(given)}))
    return found, shared


def _nscc_available() -> bool:
    """Whether emulate's --cc offers NSCC (Ultra Ethernet's sender-side congestion control)."""
    p = _parser("--cc")
    return any(a.dest == "cc" and a.choices is not None and "nscc" in a.choices
               for a in p._actions)


def plan(args: argparse.Namespace) -> tuple[list[tuple[cmp.Contender, argparse.Namespace]],
                                            list[str]]:
    """Each contender with the emulate options of its run (emulate's defaults, the shared
    options, its own), and the notes the report carries.  Every option and value is checked
    here, before any run; what a run's protocol has nothing for is refused when that
    contender's run is built (a UsageError naming the contender)."""
    base_parser = _parser("roce compare")
    shared: dict[str, Any] = {}
    for a in base_parser._actions:
        if a.option_strings and hasattr(args, a.dest) and a.dest not in ("help",):
            if a.dest in NOT_COMPARED:
                raise UsageError(f"{_option(base_parser, a.dest)} is not for a comparison "
                                 "(each contender is one run on the simulated network; the "
                                 "report is the output)")
            shared[a.dest] = getattr(args, a.dest)
    notes: list[str] = []
    found: list[tuple[cmp.Contender, dict[str, Any]]] = []
    if args.contenders:
        from_file, file_shared = _from_toml(args.contenders)
        found += from_file
        shared = {**file_shared, **shared}
    if "topology" not in shared and "topology_file" not in shared:
        raise UsageError("give the network: --topology (incast:8, leafspine:L,S,H, "
                         "fattree:K ...) or --topology-file; the contenders differ in what "
                         "switches and links do, which two hosts cabled back to back lack")
    for spec in args.contender:
        name, eq, words = spec.partition("=")
        where = f"--contender {spec}"
        if not eq:
            raise UsageError(f"{where}: give NAME=OPTIONS (roce emulate options)")
        cmp.check_name(name.strip(), where)
        try:
            split = shlex.split(words)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
        found.append((cmp.Contender(name.strip(), tuple(split)),
                      _given(_parser(where), split, where)))
    if not found:
        nscc = _nscc_available()
        for name, words in cmp.DEFAULT_CONTENDERS:
            split = shlex.split(words)
            if name == cmp.NSCC[0]:
                if nscc:
                    split += shlex.split(cmp.NSCC[1])
                else:
                    notes.append(f"{name}: this emulator has no NSCC (--cc nscc); UET ran "
                                 "without congestion control")
            found.append((cmp.Contender(name, tuple(split)),
                          _given(_parser(f"contender {name}"), split, f"contender {name}")))
    cmp.check_unique([c for c, _ in found])
    out = []
    for c, given in found:
        ns = base_parser.parse_args([])
        for dest, value in {**shared, **given}.items():
            setattr(ns, dest, value)
        ns.format, ns.no_progress, ns.pcap = "json", True, None
        out.append((c, ns))
    return out, notes


def run(args: argparse.Namespace) -> int:
    if args.plot:
        from roce.plot.figure import output_format

        output_format(args.plot)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install 'roce[plot]'") from None
    runs, notes = plan(args)
    fmt = getattr(args, "format", "text")
    results = []
    for i, (c, ns) in enumerate(runs, 1):
        if not getattr(args, "no_progress", False):
            print(f"roce compare: {c.name} ({i} of {len(runs)})", file=sys.stderr, flush=True)
        try:
            summary = emu_cli.simulate(ns)
        except RoceError as exc:
            exc.args = (f"contender {c.name}: {exc}",)
            raise
        results.append((c, summary.as_dict()))
    rep = cmp.report(results, notes)
    if fmt == "json":
        print(json.dumps(rep, indent=2))
    else:
        print(cmp.text(rep))
    if args.plot:
        from roce.plot.compare import compare_figure
        from roce.plot.figure import save

        save(compare_figure(rep), args.plot)
    bad = [r["name"] for r in rep["contenders"] if not r["verified"]]
    if bad:
        raise VerificationError(f"data not verified: contender(s) {', '.join(bad)}")
    return 0
