"""The workload pages say what the code does: docs/workloads.md's CDF, header and busbw
tables are the code's; docs/guide/workloads.md's Python examples run and print what the
page shows, and its error examples are the errors roce raises; the guide does not claim
options ``roce emulate`` does not have."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path

import pytest

from roce.cli import emulate
from roce.emu.workload import BUILTIN, cdf, collective, fct
from roce.errors import UsageError, WorkloadFileError

DOCS = Path(__file__).resolve().parent.parent / "docs"
NOTE = (DOCS / "workloads.md").read_text()
GUIDE = (DOCS / "guide" / "workloads.md").read_text()


def table_after(marker: str) -> list[list[str]]:
    body = NOTE.split(f"<!-- {marker} -->", 1)[1].lstrip("\n")
    rows = []
    for line in body.splitlines():
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return [r for r in rows if not set("".join(r)) <= set("-")]


@pytest.mark.parametrize("name", list(BUILTIN))
def test_cdf_tables_are_the_builtins(name: str) -> None:
    sizes, percents = table_after(f"cdf: {name}")
    assert sizes[0] == "size (bytes)" and percents[0] == "cumulative %"
    points = tuple((float(x), float(y)) for x, y in zip(sizes[1:], percents[1:]))
    assert points == BUILTIN[name].points
    m = re.search(rf"\| `{name}` \|[^|]*\|[^|]*\| ([\d.]+) \|", NOTE)
    assert m and float(m.group(1)) == pytest.approx(BUILTIN[name].mean())


def test_header_table_is_the_frames() -> None:
    rows = table_after("headers")[1:]
    assert [int(c) for c in rows[0][1:]] == [fct.headers("write", v)["first"]
                                            for v in (False, True)]
    assert [int(c) for c in rows[1][1:]] == [fct.headers("send", v)["middle"]
                                            for v in (False, True)]
    for v in (False, True):
        w, s = fct.headers("write", v), fct.headers("send", v)
        assert w["only"] == w["first"] and w["middle"] == w["last"] == s["only"] == s["last"]


def test_busbw_table_is_the_factors() -> None:
    rows = table_after("busbw")[1:]
    assert [r[0] for r in rows] == list(collective.BUS_FACTOR)
    for op, formula in rows:
        m = re.fullmatch(r"(\d*)\(n-1\)/n", formula)
        assert m, formula
        for n in (2, 3, 8, 100):
            want = int(m.group(1) or 1) * (n - 1) / n
            assert collective.bus_factor(op, n) == pytest.approx(want)


def examples() -> list[tuple[str, str | None]]:
    """(python block, the text block right after it or None)."""
    blocks = re.findall(r"```(\w+)\n(.*?)```\n*", GUIDE, re.S)
    out = []
    for i, (lang, body) in enumerate(blocks):
        if lang == "python":
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            follows = after is not None and after[0] == "text" and \
                re.search(re.escape(body) + r"```\n\n```text\n", GUIDE) is not None
            out.append((body, after[1] if follows else None))
    return out


def test_guide_examples_print_what_the_page_shows(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    found = examples()
    assert len(found) == 3
    for code, shown in found:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "guide", "exec"), {})
        assert shown is not None
        assert out.getvalue() == shown


def test_guide_error_examples_are_real(tmp_path) -> None:
    original = re.search(r"```text\n(# my storage cluster\n.*?)```", GUIDE, re.S).group(1)
    for edit, want in ((("65536 90", "1000 90"), "mine.cdf:4: "),
                       (("1048576 100", "1048576 97"), "mine.cdf:5: ")):
        path = tmp_path / "mine.cdf"
        path.write_text(original.replace(*edit))
        with pytest.raises(WorkloadFileError) as e:
            cdf.read(str(path))
        message = str(e.value).replace(str(tmp_path) + "/", "")
        assert message.startswith(want) and message in GUIDE


def test_guide_claims_no_option_emulate_lacks() -> None:
    """The planned options are marked as such, and none of them is accepted today (when one
    is, this test says to update the page)."""
    assert "Python API only" in GUIDE and "None of these options exist yet" in GUIDE
    with pytest.raises(UsageError) as e:
        collective.Collective("allreduce", 1 << 20, 6, "halving-doubling")
    assert f"`{e.value}`" in GUIDE
    planned = re.findall(r"^\| `(--[a-z-]+)", GUIDE.split("## Planned options")[1], re.M)
    assert "--workload" in planned and "--fct" in planned
    parser = argparse.ArgumentParser()
    emulate.add_arguments(parser)
    have = {s for a in parser._actions for s in a.option_strings}
    new = [o for o in planned if o != "--size"]  # --size is emulate's already (message size)
    assert [o for o in new if o in have] == [], "an option landed: update the guide page"
