"""``roce sweep``: run ``roce emulate`` over a grid of options, one table row per run, in
worker processes or on a Dask cluster, resuming where an earlier sweep of the same table
stopped.  The grid and runs are ``roce.emu.grid``'s, the table ``roce.cli._sweep_table``'s,
the workers ``roce.decoder.multifile``'s, the figure ``roce.plot.sweep``'s."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from roce.cli import _sweep_table as sweep_table
from roce.cli import emulate as emu_cli
from roce.emu import grid as sweep
from roce.errors import UsageError
from roce.options import parse_jobs

SAVE_EVERY = "ROCE_SWEEP_SAVE_EVERY"  # seconds between saves while runs finish (default 1)
STOP_AFTER = "ROCE_SWEEP_STOP_AFTER"  # test hook: stop as Ctrl-C would after N new rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grid", action="extend", nargs="+", default=[], metavar="NAME=V1,V2",
                   help="an emulate option and its values (comma-separated, or |-separated "
                        "when values hold commas), repeatable; or a TOML file")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the table: FILE.csv or FILE.parquet; rows already there are kept "
                        "and their runs skipped")
    p.add_argument("-j", "--jobs", type=parse_jobs, metavar="N",
                   help="worker processes (default: all cores)")
    p.add_argument("--scheduler", metavar="tcp://HOST:8786",
                   help="run on this Dask cluster instead (pip install 'roce[dask]')")
    p.add_argument("--plot", metavar="FILE", help="a figure of --plot-metric against "
                   "--plot-x (FILE.png, .svg or .pdf; pip install 'roce[plot]')")
    p.add_argument("--plot-metric", default="goodput_gbps", metavar="COLUMN",
                   help="the metric to plot (goodput_gbps)")
    p.add_argument("--plot-x", metavar="PARAM", help="the x axis (the first grid parameter)")
    # every roce emulate option, fixed for all runs; only those given are kept (SUPPRESS)
    first = len(p._actions)
    emu_cli.add_arguments(p)
    for a in p._actions[first:]:
        a.default = argparse.SUPPRESS


def emulate_parser() -> argparse.ArgumentParser:
    """``roce emulate``'s own parser: the one source of the options a sweep can set."""
    p = argparse.ArgumentParser(prog="roce emulate", add_help=False)
    emu_cli.add_arguments(p)
    return p


def run_one(opts: dict[str, Any], ticker: Any = None) -> dict[str, Any]:
    """One run's row (a ``multifile.run`` task: top level, so a Dask worker can load it)."""
    return sweep.measure(emu_cli.simulate, opts, ticker)


def _load_toml(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from roce.tomlfile import load

    doc = load(path)
    unknown = set(doc) - {"grid", "options"}
    if unknown or not isinstance(doc.get("grid", {}), dict) or not isinstance(
            doc.get("options", {}), dict):
        raise UsageError(f"{path}: expected a [grid] table (and an optional [options] "
                         f"table), found {', '.join(sorted(doc)) or 'nothing'}")
    return doc.get("grid", {}), doc.get("options", {})


def plan(args: argparse.Namespace) -> tuple[list[sweep.Param], argparse.Namespace, int, str]:
    """The grid, the emulate options every run shares (as a namespace, and as the text of
    the ones given: ``sweep.fixed_text``), the base seed; all checked."""
    parser = emulate_parser()
    opts = sweep.options(parser)
    files = [g for g in args.grid if "=" not in g and g.endswith(".toml")]
    words = [g for g in args.grid if g not in files]
    table: dict[str, Any] = {}
    fixed: dict[str, Any] = {}
    for path in files:
        grid, options = _load_toml(path)
        table.update(grid)
        for name, value in options.items():
            action = opts.get(name.lstrip("-")) or opts.get(name.replace("-", "_"))
            if action is None:
                raise UsageError(f"{path}: [options] {name}: roce emulate has no such option")
            v = [sweep.convert(action, x, f"{path}: {name}={x}") for x in value] if \
                isinstance(value, list) else sweep.convert(action, value, f"{path}: {name}")
            fixed[action.dest] = v
    params = sweep.parse_grid(parser, words, table)
    for a in parser._actions:
        if a.option_strings and hasattr(args, a.dest):
            if a.dest in sweep.NOT_SWEPT:
                raise UsageError(f"--{sweep.long_name(a)} is not a sweep option (each run "
                                 "is on the simulated fabric; the sweep writes one table)")
            fixed[a.dest] = getattr(args, a.dest)
    for p in params:
        if p.action.dest in fixed and not isinstance(p.action, argparse._AppendAction):
            raise UsageError(f"--{p.name} is both fixed and a grid parameter")
    base = parser.parse_args([])
    for dest, v in fixed.items():
        setattr(base, dest, v)
    return params, base, int(base.seed), sweep.fixed_text(parser, fixed)


def run(args: argparse.Namespace) -> int:
    from roce.decoder import multifile

    if args.jobs is not None and args.jobs < 1:
        raise UsageError("-j must be 1 or more")
    params, base, base_seed, fixed = plan(args)
    sweep_table.table_format(args.output)
    if args.plot:
        from roce.plot.figure import output_format

        output_format(args.plot)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install 'roce[plot]'") from None
    names = [p.name for p in params]
    x = args.plot_x or names[0]
    if args.plot and x not in names:
        raise UsageError(f"--plot-x {x}: not a grid parameter ({', '.join(names)})")

    pts = list(sweep.points(params))  # at most sweep.MAX_RUNS (parse_grid checked)
    seeds = [sweep.run_seed(base_seed, pt) for pt in pts]
    keys = [sweep.key(pt, s, fixed) for pt, s in zip(pts, seeds)]
    index = {k: i for i, k in enumerate(keys)}
    old = sweep_table.read(args.output)
    slots: list[dict[str, Any] | None] = [None] * len(pts)
    # rows of points not in this grid, or run under other fixed options: kept, in front
    stale: list[dict[str, Any]] = []
    for r in old:
        i = index.get(sweep.key({n: r.get(n) for n in names}, r.get("seed"),
                                r.get(sweep.FIXED)))
        if i is None or slots[i] is not None:
            stale.append(r)
        else:
            slots[i] = r
    todo = [i for i, r in enumerate(slots) if r is None]
    print(f"roce sweep: {len(pts)} runs, {len(pts) - len(todo)} already in {args.output}, "
          f"{len(todo)} to run"
          + (f"; {len(stale)} rows of other grid points or fixed options kept as they are"
             if stale else ""), file=sys.stderr)

    stop_after = int(os.environ.get(STOP_AFTER, "0") or 0)
    every = float(os.environ.get(SAVE_EVERY, "1") or 1)
    done = 0
    last_save = time.monotonic()

    def save() -> None:
        nonlocal last_save
        sweep_table.write(args.output, stale + [r for r in slots if r is not None])
        last_save = time.monotonic()

    def on_result(j: int, metrics: dict[str, Any]) -> None:
        nonlocal done
        i = todo[j]
        slots[i] = {**pts[i], "seed": seeds[i], sweep.FIXED: fixed, **metrics}
        done += 1
        if time.monotonic() - last_save >= every:
            save()
        if stop_after and done >= stop_after:
            raise KeyboardInterrupt

    jobs = args.jobs or multifile.default_jobs()
    try:
        if todo:
            multifile.run(run_one,
                          [sweep.run_options(base, params, pts[i], seeds[i]) for i in todo],
                          (), jobs=jobs, scheduler=args.scheduler, label="sweep",
                          sizes=[1] * len(todo), on_result=on_result, unit="runs")
    except BaseException as exc:
        # stopped: the runs finished are saved, whole rows (nothing new: the file stays as
        # it was, or absent), and the next sweep of this table goes on from them
        if done:
            save()
        if isinstance(exc, KeyboardInterrupt):
            exc.add_note(f"{done} new rows saved in {args.output}" if done
                         else f"{args.output} unchanged")
        raise
    if done:
        save()
    rows = [r for r in slots if r is not None]
    failed = sum(1 for r in rows if r.get(sweep.ERROR))
    print(f"roce sweep: wrote {len(rows)} rows to {args.output}"
          + (f"; {failed} runs failed (see the {sweep.ERROR} column)" if failed else ""),
          file=sys.stderr)
    if args.plot:
        from roce.plot.figure import save as save_figure
        from roce.plot.sweep import sweep_figure

        save_figure(sweep_figure(rows, x, args.plot_metric, [n for n in names if n != x]),
                    args.plot)
    return 0
