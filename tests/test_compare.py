"""`roce compare`: named configurations side by side (roce.emu.contenders, roce.cli.compare,
roce.plot.compare), and `roce sweep` over the protocols with a workload."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from roce.cli import compare as compare_cli
from roce.cli import main
from roce.emu import contenders as cmp
from roce.plot.compare import panels

RING = ["--topology", "incast:3", "--collective", "allreduce", "--size", "256K"]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def ring_report() -> dict:
    """The default contenders on a small all-reduce, as JSON (run once for the module)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["compare", "-T", "json", "--no-progress", *RING]) == 0
    return json.loads(out.getvalue())


def test_default_contenders_side_by_side(ring_report: dict):
    """The four default contenders ran the same collective, each verified, and the JSON has
    the schema's keys and types."""
    rep = ring_report
    for key, typ in cmp.SCHEMA.items():
        assert isinstance(rep[key], typ), key
    assert rep["kind"] == "collective" and rep["same_transfers"] is True
    names = [r["name"] for r in rep["contenders"]]
    assert names == [n for n, _ in cmp.DEFAULT_CONTENDERS]
    assert [r["protocol"] for r in rep["contenders"]] == ["roce", "roce", "uet", "ib"]
    for r in rep["contenders"]:
        assert set(r) == {k for k, *_ in cmp.COLUMNS} | {"options", "digest"}
        for key, typ, _, _ in cmp.COLUMNS:
            assert r[key] is None or isinstance(r[key], typ), (r["name"], key)
        assert r["verified"] and r["completed"] == r["transfers"] > 0
        assert r["slowdown_p99"] is None and 0 < r["busbw_GBps"] <= 12.5
    assert len({r["digest"] for r in rep["contenders"]}) == 1
    if not compare_cli._nscc_available():
        assert any("no NSCC" in n for n in rep["notes"])


def test_a_row_holds_its_runs_figures(ring_report: dict, capsys: pytest.CaptureFixture[str]):
    """A contender's row is what `roce emulate` with its options reports for the same
    scenario: goodput, busbw, retransmissions, drops, trims, credit stalls."""
    for r in ring_report["contenders"]:
        code, out, err = run_cli(["emulate", "-T", "json", "--no-progress", *RING,
                                  *r["options"].split()], capsys)
        assert code == 0, err
        d = json.loads(out)
        assert r["goodput_gbps"] == d["goodput_gbps"]
        assert r["busbw_GBps"] == d["workload"]["busbw_GBps"]
        assert r["retransmitted"] == d["retransmitted"]
        assert r["drops"] == d["fabric"]["drops"]
        assert r["trims"] == d["fabric"].get("trimmed", 0)
        assert r["pauses"] == (d["fabric"]["credit_stalls"] if r["protocol"] == "ib"
                               else d["fabric"]["pfc_frames"])


def test_plot_data_is_the_report(ring_report: dict, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]):
    """The figure's panels hold the report's figures in the contenders' order: goodput,
    busbw (the tail of a collective), the events, CPU."""
    ps = panels(ring_report)
    rows = ring_report["contenders"]
    assert [p["title"] for p in ps] == ["goodput", "bus bandwidth", "events", "CPU time"]
    assert ps[0]["series"]["goodput_gbps"] == [r["goodput_gbps"] for r in rows]
    assert ps[1]["series"]["busbw_GBps"] == [r["busbw_GBps"] for r in rows]
    assert ps[2]["series"]["pauses"] == [r["pauses"] for r in rows]
    assert ps[2]["series"]["retransmitted"] == [r["retransmitted"] for r in rows]
    assert all(p["names"] == [r["name"] for r in rows] for p in ps)
    pytest.importorskip("matplotlib")
    png = tmp_path / "cmp.png"
    code, out, err = run_cli(["compare", "--no-progress", "--plot", str(png), "--contender",
                              "one=--protocol ib", *RING], capsys)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_flows_report_slowdown_and_text(capsys: pytest.CaptureFixture[str]):
    """Open-loop flows: slowdown columns, no busbw; user contenders named on the command
    line; the text table lists each contender and its options."""
    code, out, err = run_cli(["compare", "--no-progress", "--topology", "leafspine:2,2,2",
                              "--workload", "fbhadoop", "--duration", "40us", "--seed", "1",
                              "--contender", "ecmp=--lb ecmp", "--contender",
                              "spray=--lb spray --pfc off --recovery sr"], capsys)
    assert code == 0, err
    head = out.splitlines()[0].split()
    assert "slowdown" in head and "busbw" not in head
    lines = [line.split(None, 1) for line in out.splitlines()]
    assert ["ecmp", "--lb ecmp"] in lines
    assert ["spray", "--lb spray --pfc off --recovery sr"] in lines
    assert "same transfers on every contender: yes" in out
    assert "no NSCC" not in out  # the note is about the default UET contender


def test_contenders_from_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    f = tmp_path / "c.toml"
    f.write_text('[options]\ntopology = "incast:2"\ncollective = "allgather"\n'
                 'size = "64K"\n\n[contenders.uet]\nprotocol = "uet"\ntrim = true\n'
                 'pfc = "off"\n\n[contenders.ib]\nprotocol = "ib"\nib-cc = "on"\n')
    code, out, err = run_cli(["compare", "-T", "json", "--no-progress", "--contenders",
                              str(f)], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert [(r["name"], r["protocol"]) for r in rep["contenders"]] == [("uet", "uet"),
                                                                       ("ib", "ib")]
    assert rep["kind"] == "collective" and rep["same_transfers"]


@pytest.mark.parametrize("args,what", [
    (["--contender", "x=--protocol tcp"], "--contender x=--protocol tcp: argument --protocol"),
    (["--contender", "x=--no-such"], "--contender x=--no-such: unrecognized arguments"),
    (["--contender", "noequals"], "give NAME=OPTIONS"),
    (["--contender", "bad name=--pfc off"], "contender name 'bad name'"),
    (["--contender", "a=--pfc off", "--contender", "a=--pfc on"], "contender a: named twice"),
    (["--contender", "a=-w x.pcap"], "--write is not for a comparison"),
    (["-w", "x.pcap"], "--write is not for a comparison"),
    (["--contender", "a=--protocol ib --cc dcqcn"], "contender a: --cc with --protocol ib"),
    (["--contender", "a=--protocol ib --lb ecmp"], "contender a: --lb with --protocol ib"),
    (["--contender", "a=--protocol 'uet"], "No closing quotation"),
    (["--topology", "p2p"], None),
])
def test_bad_contenders_are_usage_errors(args: list[str], what: str | None,
                                         capsys: pytest.CaptureFixture[str]):
    code, out, err = run_cli(["compare", "--no-progress", *RING, *args], capsys)
    if what is None:  # p2p: the first contender needing a switch is refused by name
        assert code == 1 and "contender roce-sr-spray: --lb spray: the topology has no " \
            "switch" in err, err
        return
    assert code == 1 and what in err, err
    assert out == ""


def test_a_network_is_required(capsys: pytest.CaptureFixture[str]):
    code, out, err = run_cli(["compare", "--no-progress", "--collective", "allreduce"],
                             capsys)
    assert code == 1 and "give the network: --topology" in err


@pytest.mark.parametrize("text,what", [
    ('[contenders.a]\nprotocol = "tcp"\n', "[contenders.a]: protocol: not one of"),
    ('[contenders.a]\nwarp = 9\n', "warp: roce emulate has no such option"),
    ('[contender.a]\nprotocol = "ib"\n', "expected [contenders.NAME] tables"),
    ('[contenders]\na = 3\n', "[contenders.a]: expected a table"),
    ('[contenders.a]\ntap = "sw:1"\n', "tap: not for a comparison"),
    # a contender's own option is typed: refused with its default value too
    ('[contenders.a]\nprotocol = "ib"\npfc = "on"\n', "contender a: --pfc with --protocol ib"),
])
def test_bad_toml_contenders(tmp_path: Path, text: str, what: str,
                             capsys: pytest.CaptureFixture[str]):
    f = tmp_path / "c.toml"
    f.write_text(text)
    code, out, err = run_cli(["compare", "--no-progress", *RING, "--contenders", str(f)],
                             capsys)
    assert code == 1 and what in err, err


def test_sweep_over_protocols_with_a_workload(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]):
    """`roce sweep --grid protocol=roce,uet,ib seed=1` with a workload: a row per protocol,
    none failed, each with the workload's columns and the same transfers."""
    table = tmp_path / "p.csv"
    code, out, err = run_cli(["sweep", "--grid", "protocol=roce,uet,ib", "seed=1", "-j", "1",
                              "--topology", "leafspine:2,2,2", "--pfc", "off", "--collective",
                              "allgather", "--size", "128K", "-o", str(table)], capsys)
    assert code == 0, err  # a failed run is a row saying why
    with open(table) as fh:
        rows = {r["protocol"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"roce", "uet", "ib"}
    assert "--pfc with --protocol ib" in rows["ib"]["error"]
    code, out, err = run_cli(["sweep", "--grid", "protocol=roce,uet,ib", "seed=1", "-j", "1",
                              "--topology", "leafspine:2,2,2", "--collective", "allgather",
                              "--size", "128K", "-o", str(tmp_path / "q.csv")], capsys)
    with open(tmp_path / "q.csv") as fh:
        rows = {r["protocol"]: r for r in csv.DictReader(fh)}
    assert all(r["error"] == "" for r in rows.values()), rows
    assert all(r["data_verified"] == "True" for r in rows.values())
    assert len({r["workload.transfers_digest"] for r in rows.values()}) == 1
    assert all(float(r["workload.busbw_GBps"]) > 0 for r in rows.values())
