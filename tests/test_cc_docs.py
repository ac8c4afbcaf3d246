"""docs/congestion-control.md's knob tables say what roce/emu/cc's profiles hold, and its
incast comparison is what bench/cc_incast.py measures."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from roce.emu.cc import ALGORITHMS, Dcqcn, Dctcp, Swift, Timely
from roce.emu.cc.hpcc import Hpcc
from roce.emu.cc.nscc import Nscc
from roce.emu.cc.rccc import Rccc

DOC = (Path(__file__).parent.parent / "docs" / "congestion-control.md").read_text()


def tables() -> list[dict[str, list[str]]]:
    """Every table of knob rows in the page: knob name -> its cells after the name."""
    out: list[dict[str, list[str]]] = [{}]
    for line in DOC.splitlines():
        m = re.match(r"\| `([a-z_]+)` \|(.*)\|$", line)
        if m:
            out[-1][m.group(1)] = [c.strip() for c in m.group(2).split("|")]
        elif out[-1]:
            out.append({})
    return [t for t in out if t]


def rows(cls) -> dict[str, list[str]]:
    """The one table that lists exactly ``cls``'s knobs (a knob two algorithms share, as
    ``np_min_time_between_cnps``, is in each one's table)."""
    found = [t for t in tables() if set(t) == set(cls.PARAMS)]
    assert len(found) == 1, (cls.name, [sorted(t) for t in tables()])
    return found[0]


def value(cell: str, line_gbps: float) -> float:
    m = re.fullmatch(r"([\d.]+) x line/25G", cell)
    return float(m.group(1)) * line_gbps / 25 if m else float(cell)


def test_every_algorithm_with_knobs_is_checked():
    assert {c for c in ALGORITHMS.values() if c.PARAMS} == {Dcqcn, Timely, Dctcp, Swift, Hpcc,
                                                                 Nscc, Rccc}


@pytest.mark.parametrize("cls", [Dcqcn, Timely, Dctcp, Swift, Hpcc, Nscc, Rccc])
def test_doc_tables_match_profiles(cls):
    table = rows(cls)
    assert set(table) == set(cls.PARAMS)
    for name, cells in table.items():
        p = cls.PARAMS[name]
        assert cells[0] == p.unit, name
        for profile, cell in zip(cls.PROFILES, cells[2:]):
            raw = cls.PROFILES[profile][name]
            for gbps in (25.0, 100.0):
                want = raw(gbps) if callable(raw) else raw
                assert value(cell, gbps) == pytest.approx(want), (name, profile)


def test_incast_table_is_the_scripts():
    path = Path(__file__).parent.parent / "bench" / "cc_incast.py"
    spec = importlib.util.spec_from_file_location("cc_incast", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    shown = DOC.split("<!-- cc-incast -->\n", 1)[1].split("<!-- /cc-incast -->", 1)[0]
    rows = [bench.case(cc, ecn) for cc, ecn in bench.RUNS]
    assert shown.splitlines() == bench.table(rows)
