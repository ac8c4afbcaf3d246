"""docs/congestion-control.md's knob tables say what roce/emu/cc's profiles hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roce.emu.cc import Dcqcn, Timely

DOC = (Path(__file__).parent.parent / "docs" / "congestion-control.md").read_text()


def rows(cls) -> dict[str, list[str]]:
    out = {}
    for line in DOC.splitlines():
        m = re.match(r"\| `([a-z_]+)` \|(.*)\|$", line)
        if m and m.group(1) in cls.PARAMS:
            out[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return out


def value(cell: str, line_gbps: float) -> float:
    m = re.fullmatch(r"([\d.]+) x line/25G", cell)
    return float(m.group(1)) * line_gbps / 25 if m else float(cell)


@pytest.mark.parametrize("cls", [Dcqcn, Timely])
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
