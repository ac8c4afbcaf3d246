"""``roce sweep``'s grid and runs: which ``roce emulate`` options vary, the runs they make, the
seed of each run, and one run turned into one flat row.

Nothing here lists emulate's options: the grid names and the fixed values are checked
against emulate's own argument parser (``roce.cli.emulate.add_arguments``, which brings in the
switched-network and congestion-control options; ``roce.cli.sweep`` hands it in, as it
hands in the function that runs one scenario, since only command modules import command
modules), with each option's own ``type`` and ``choices``.  An option emulate gains
(``--recovery``) is a grid parameter at once.

A grid's size is the product of its axes' lengths, checked against ``MAX_RUNS`` before a value
is converted or a point made (an integer range ``LO..HI`` is an axis of HI - LO + 1 values,
counted by arithmetic); ``points`` then makes the runs lazily, in order.

Seeds (docs/architecture.md, "roce sweep"): unless ``seed`` is itself a grid parameter, run
*i* uses ``derive_seed(base, point)``: the first 4 bytes of SHA-256 over the base ``--seed``
and the grid point as canonical JSON (parameter names sorted), as a 31-bit integer.  The
seed of a point does not depend on the grid's other points, its order or the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from roce.errors import RoceError, UsageError
from roce.options import read_int

# emulate options that are not part of a simulated scenario: where its output goes, and the
# run across a real network.  A sweep writes one table, so these are refused.
NOT_SWEPT = ("format", "pcap", "trace", "tap", "no_progress", "listen", "connect",
             "interface", "transport", "ip", "mac", "arp", "port", "bind", "udp_port",
             "oob_timeout")
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
ERROR = "error"  # the column naming why a run failed ("" when it did not)
FIXED = "fixed"  # the column holding the options every run of the sweep shared (fixed_text)
CPU = "run_cpu_s"  # CPU seconds of the run in its worker (setup and summary included)
# The most runs one sweep makes.  The sweep holds every row it writes (a switched network's
# row has hundreds of columns) and rewrites the table as runs finish; a larger study is
# several sweeps into the same table (rows of other grids are kept).
MAX_RUNS = 10_000


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each option by its long name without dashes (``loss``, ``cc-param``) and by dest."""
    out: dict[str, argparse.Action] = {}
    for a in parser._actions:
        if not a.option_strings or a.dest == "help":
            continue
        for s in a.option_strings:
            if s.startswith("--"):
                out[s[2:]] = a
        out.setdefault(a.dest, a)
    return out


def long_name(action: argparse.Action) -> str:
    return next((s[2:] for s in action.option_strings if s.startswith("--")),
                action.option_strings[0].lstrip("-"))


def convert(action: argparse.Action, text: Any, where: str) -> Any:
    """One value for ``action`` from a grid or TOML value, checked as argparse checks it."""
    if action.dest in NOT_SWEPT:
        raise UsageError(f"{where}: --{long_name(action)} is not a sweep parameter "
                         "(each run is on the simulated fabric; the sweep writes one table)")
    if isinstance(text, bool):
        text = "true" if text else "false"
    s = str(text)
    if action.nargs == 0:  # a flag (store_true): the grid says whether it is set
        if s.lower() in TRUE:
            return True
        if s.lower() in FALSE:
            return False
        raise UsageError(f"{where}: --{long_name(action)} is a flag, give true or false")
    try:
        value = action.type(s) if callable(action.type) else s
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise UsageError(f"{where}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        raise UsageError(f"{where}: not one of {', '.join(map(str, action.choices))}")
    return value


@dataclass(frozen=True)
class Param:
    """One grid parameter: its column name, the emulate option and the values it takes."""

    name: str
    action: argparse.Action
    values: tuple[Any, ...]


def split_values(spec: str) -> list[str]:
    """``0,0.001,0.01``; values that contain commas themselves (``leafspine:4,2,4``,
    ``--ecn 100K,400K,0.2``) are separated by ``|`` instead."""
    return spec.split("|") if "|" in spec else spec.split(",")


def integer_range(text: Any) -> range | None:
    """``LO..HI`` (integers as options read them, ends included) as a range, else None."""
    if not isinstance(text, str) or ".." not in text:
        return None
    lo, _, hi = text.partition("..")
    try:
        return range(read_int(lo), read_int(hi) + 1)
    except ValueError:
        return None


def _axis(vals: list[Any]) -> list[Any] | range:
    """A word's or a TOML array's values; one ``LO..HI`` alone is a range (not listed)."""
    if len(vals) == 1:
        r = integer_range(vals[0])
        if r is not None:
            return r
    return vals


def _count(vals: list[Any] | range) -> int:
    return max(0, vals.stop - vals.start) if isinstance(vals, range) else len(vals)


def _check_ends(action: argparse.Action, col: str, vals: range) -> None:
    """A range's ends, by the option's own type (so its bounds are named), before the grid's
    size is known."""
    text = f"{vals.start}..{vals.stop - 1}"
    if vals.stop <= vals.start:
        raise UsageError(f"--grid {col}={text}: an empty range (LO..HI with LO <= HI)")
    for end in (vals.start, vals.stop - 1):
        convert(action, str(end), f"--grid {col}={text}")


def _convert_axis(action: argparse.Action, col: str, vals: list[Any] | range) -> tuple[Any, ...]:
    if isinstance(vals, range):
        text = f"{vals.start}..{vals.stop - 1}"
        return tuple(convert(action, str(v), f"--grid {col}={text}: {v}") for v in vals)
    return tuple(convert(action, v, f"--grid {col}={v}") for v in vals)


def parse_grid(parser: argparse.ArgumentParser, specs: Iterable[str],
               table: Mapping[str, Any] | None = None) -> list[Param]:
    """Grid parameters from ``NAME=V1,V2`` words and/or a TOML ``[grid]`` table, each value
    converted by the option's own type in emulate's ``parser`` (a bad one is a UsageError
    naming it)."""
    opts = options(parser)
    raw: list[tuple[str, list[Any] | range]] = []
    for name, vals in (table or {}).items():
        raw.append((name, _axis(list(vals) if isinstance(vals, list) else [vals])))
    for spec in specs:
        name, eq, vals = spec.partition("=")
        if not eq or not name:
            raise UsageError(f"--grid {spec}: give NAME=V1,V2,... (an emulate option name)")
        raw.append((name, _axis(split_values(vals))))
    axes: list[tuple[str, argparse.Action, list[Any] | range]] = []
    seen: set[str] = set()
    for name, vals in raw:
        key = name.strip().lstrip("-")
        action = opts.get(key) or opts.get(key.replace("-", "_"))
        if action is None:
            raise UsageError(f"--grid {name}: roce emulate has no option --{key}")
        col = long_name(action)
        if col in seen:
            raise UsageError(f"--grid {name}: given twice")
        if isinstance(vals, range):
            _check_ends(action, col, vals)
        elif not vals:
            raise UsageError(f"--grid {name}: no values")
        seen.add(col)
        axes.append((col, action, vals))
    if not axes:
        raise UsageError("give a grid: --grid NAME=V1,V2 ... or --grid FILE.toml")
    runs = math.prod(_count(vals) for _, _, vals in axes)
    if runs > MAX_RUNS:
        each = " x ".join(f"{_count(v)} {c}" for c, _, v in axes)
        raise UsageError(f"--grid: {runs} runs ({each}); a sweep makes at most {MAX_RUNS} "
                         "runs (split it: sweeps into the same table keep each other's rows)")
    return [Param(col, action, _convert_axis(action, col, vals)) for col, action, vals in axes]


def size(params: Sequence[Param]) -> int:
    """How many runs the grid makes."""
    return math.prod(len(p.values) for p in params)


def points(params: Sequence[Param]) -> Iterator[dict[str, Any]]:
    """Every combination, the first parameter varying slowest, made as it is asked for."""
    names = [p.name for p in params]
    return (dict(zip(names, combo)) for combo in itertools.product(*(p.values for p in params)))


def derive_seed(base: int, point: Mapping[str, Any]) -> int:
    """The seed of one run (see the module docstring)."""
    text = json.dumps({"base": base, "point": dict(point)}, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF


def run_seed(base: int, point: Mapping[str, Any]) -> int:
    return int(point["seed"]) if "seed" in point else derive_seed(base, point)


def fixed_text(parser: argparse.ArgumentParser, fixed: Mapping[str, Any]) -> str:
    """The options every run shares, as one canonical text (``--count=4 --size=262144``):
    long names sorted, values as converted; the base ``--seed`` is left out (each row's
    seed column already depends on it).  A row computed under other fixed options is not
    the same run, so this text is part of the resume key."""
    names = {a.dest: long_name(a) for a in parser._actions if a.option_strings}
    words = []
    for dest, value in fixed.items():
        if dest == "seed":
            continue
        for v in value if isinstance(value, list) else [value]:
            words.append(f"--{names.get(dest, dest)}={v}")
    return " ".join(sorted(words))


def key(point: Mapping[str, Any], seed: Any, fixed: Any = "") -> tuple[str, ...]:
    """What identifies a row for resuming: the grid point, the seed and the fixed options,
    as text (a CSV gives text back, Parquet typed values: both compare equal this way; an
    empty cell reads back as None from Parquet)."""
    return (*(f"{k}={v}" for k, v in sorted(point.items())), f"seed={seed}",
            f"fixed={fixed or ''}")


def run_options(base: argparse.Namespace, params: Sequence[Param], point: Mapping[str, Any],
                seed: int) -> dict[str, Any]:
    """The emulate options of one run: emulate's defaults, the fixed values, the point."""
    ns = dict(vars(base))
    for p in params:
        v = point[p.name]
        if isinstance(p.action, argparse._AppendAction):
            ns[p.action.dest] = [*(ns.get(p.action.dest) or []), v]
        else:
            ns[p.action.dest] = v
    ns["seed"] = seed
    ns["format"], ns["no_progress"], ns["pcap"] = "json", True, None
    return ns


# -- one run, in a worker -----------------------------------------------------------------------


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"fct_ns": {"p99": 5}}`` -> ``{"fct_ns.p99": 5}``; lists stay whole, as JSON text."""
    out: dict[str, Any] = {}
    for k, v in doc.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, name + "."))
        elif isinstance(v, (list, tuple)):
            out[name] = json.dumps(v, sort_keys=True)
        else:
            out[name] = v
    return out


def measure(simulate: Callable[[argparse.Namespace], Any], opts: dict[str, Any],
            ticker: Any = None) -> dict[str, Any]:
    """One scenario, ``simulate(options)`` returning its summary: the summary flattened, the
    CPU time and the error, if any.  It never raises: a failed run is a row saying why."""
    start = time.process_time()
    metrics: dict[str, Any] = {}
    error = ""
    try:
        metrics = flatten(simulate(argparse.Namespace(**opts)).as_dict())
    except RoceError as exc:
        error = str(exc)
    except Exception as exc:  # a bug in a run is still one row, not a lost sweep
        error = f"internal error: {type(exc).__name__}: {exc}"
    metrics[CPU] = time.process_time() - start
    metrics[ERROR] = error
    if ticker is not None:
        ticker(1)
    return metrics


__all__ = ["CPU", "ERROR", "FIXED", "MAX_RUNS", "Param", "derive_seed", "fixed_text", "flatten",
           "integer_range", "key", "measure", "parse_grid", "points", "run_options", "run_seed",
           "size"]
