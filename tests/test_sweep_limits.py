"""``roce sweep``'s grid is bounded before any work: its size (the product of its axes) is
checked against ``MAX_RUNS`` before a point is made, the points are made lazily, and every
value is checked by emulate's own option types (a topology too big for this machine is
refused there).  The hostile grids of the issue "The newcomer's first hour" run in a child
limited to 1 GB and 10 s: one line, exit 1 or 2, never 3."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from test_hostile_options import assert_one_line_error, run_limited

from roce.cli.sweep import emulate_parser
from roce.emu import grid as sweep

VALUES = ",".join(str(i) for i in range(1, 1001))


@pytest.mark.parametrize("words", [
    [f"seed={VALUES}", f"depth={VALUES}", f"qps={VALUES}"],
    ["seed=1..1000", "depth=1..1000", "qps=1..1000"],
    ["seed=0..18446744073709551615"],  # one axis past the limit: never listed
])
def test_a_grid_past_the_limit_is_refused_before_any_run(tmp_path: Path,
                                                         words: list[str]) -> None:
    out = tmp_path / "out.csv"
    res = run_limited("sweep", "--grid", *words, "-o", str(out))
    size = 1000 ** 3 if len(words) == 3 else 1 << 64
    assert_one_line_error(res, (1,), f"{size} runs", f"at most {sweep.MAX_RUNS}")
    assert not out.exists()


def test_a_toml_grid_past_the_limit_is_refused(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    values = "[" + VALUES + "]"
    grid.write_text(f"[grid]\nseed = {values}\ndepth = {values}\nqps = {values}\n")
    res = run_limited("sweep", "--grid", str(grid), "-o", str(tmp_path / "out.csv"))
    assert_one_line_error(res, (1,), "1000000000 runs", f"at most {sweep.MAX_RUNS}")


@pytest.mark.parametrize(("word", "what"), [
    ("topology=incast:100000000", "64000 hosts"),
    ("topology=incast:2|ring:3", "ring:3"),
    ("topology=dumbbell:1000000", "64000 hosts"),
])
def test_grid_topologies_are_checked_before_any_run(tmp_path: Path, word: str,
                                                    what: str) -> None:
    out = tmp_path / "out.csv"
    res = run_limited("sweep", "--grid", word, "--size", "4K", "--count", "1", "-o", str(out))
    assert_one_line_error(res, (1,), "--grid topology=", what)
    assert not out.exists()


def test_integer_ranges_are_axes() -> None:
    params = sweep.parse_grid(emulate_parser(), ["seed=3..5", "depth=2..2", "loss=0,0.1"])
    assert [p.values for p in params] == [(3, 4, 5), (2,), (0.0, 0.1)]
    assert sweep.size(params) == 6


@pytest.mark.parametrize(("word", "message"), [
    ("seed=5..3", "5..3"),  # empty
    ("depth=0..3", "out of range"),  # each end checked by the option's own type
    ("psn=1..0x1000000", "out of range"),
    ("mtu=256..4096", "not one of"),  # a choice: every value is checked
])
def test_bad_ranges_are_usage_errors(word: str, message: str) -> None:
    with pytest.raises(Exception) as exc:
        sweep.parse_grid(emulate_parser(), [word])
    assert type(exc.value).__name__ == "UsageError" and message in str(exc.value)


def test_points_are_made_lazily_in_grid_order() -> None:
    params = sweep.parse_grid(emulate_parser(), ["seed=1..4", "loss=0,0.1,0.2"])
    pts = sweep.points(params)
    assert iter(pts) is pts  # an iterator, not a list
    want = [{"seed": s, "loss": v} for s, v in itertools.product((1, 2, 3, 4),
                                                                 (0.0, 0.1, 0.2))]
    assert list(pts) == want
