"""``roce sweep``: a grid of emulator runs, one row each.  The same 12 runs give the same
rows in one process, in two worker processes and on a Dask LocalCluster this file starts;
an interrupted sweep resumes; a failed run is a row; bad grids are usage errors."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from distributed import LocalCluster

from roce.cli import build_parser
from roce.cli.sweep import emulate_parser
from roce.emu import grid as sweep
from roce.plot.sweep import series

# 12 tiny scenarios: 3 loss rates x 2 ops x 2 MTUs
GRID = ["loss=0,0.02,0.05", "op=write,read", "mtu=1024,4096"]
FIXED = ["--size", "16K", "--count", "3", "--seed", "7"]


def roce(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roce", *argv], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def rows_of(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        return [{k: "" if v is None else str(v) for k, v in r.items()}
                for r in pq.read_table(path).to_pylist()]
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def stable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without what the machine measures (CPU seconds and rates per CPU second)."""
    return [{k: v for k, v in r.items() if "cpu_s" not in k} for r in rows]


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp",
                      dashboard_address=None, scheduler_port=0) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("sweep") / "ref.csv"
    r = roce("sweep", "--grid", *GRID, *FIXED, "-o", str(out), "-j", "1")
    assert r.returncode == 0, r.stderr
    return rows_of(out)


def test_twelve_runs_one_row_each(reference: list[dict[str, Any]]):
    assert len(reference) == 12
    assert [(r["loss"], r["op"], r["mtu"]) for r in reference[:3]] == [
        ("0.0", "write", "1024"), ("0.0", "write", "4096"), ("0.0", "read", "1024")]
    assert all(r["error"] == "" and r["data_verified"] == "True" for r in reference)
    # the options reached the runs: the summary's scenario echoes them
    for r in reference:
        assert float(r["scenario.loss"]) == float(r["loss"])
        assert r["scenario.op"] == r["op"] and r["scenario.mtu"] == r["mtu"]
        assert r["scenario.size"] == str(16 << 10) and r["scenario.seed"] == r["seed"]
        assert float(r["run_cpu_s"]) > 0
    # each run has its own seed, the documented one
    assert len({r["seed"] for r in reference}) == 12
    point = {"loss": 0.05, "op": "read", "mtu": 4096}
    row = next(r for r in reference if (r["loss"], r["op"], r["mtu"]) == ("0.05", "read",
                                                                           "4096"))
    assert int(row["seed"]) == sweep.derive_seed(7, point)
    # loss shows: no retransmission without it, some with 5%
    assert all(r["retransmitted"] == "0" for r in reference if r["loss"] == "0.0")
    assert sum(int(r["retransmitted"]) for r in reference if r["loss"] == "0.05") > 0


def test_local_workers_and_cluster_agree(reference: list[dict[str, Any]], scheduler: str,
                                         tmp_path: Path):
    for name, how in (("j2", ["-j", "2"]), ("dask", ["--scheduler", scheduler])):
        out = tmp_path / f"{name}.csv"
        r = roce("sweep", "--grid", *GRID, *FIXED, "-o", str(out), *how)
        assert r.returncode == 0, r.stderr
        assert stable(rows_of(out)) == stable(reference), name


def test_resumes_after_a_stop(reference: list[dict[str, Any]], tmp_path: Path):
    out = tmp_path / "part.csv"
    r = roce("sweep", "--grid", *GRID, *FIXED, "-o", str(out), "-j", "1",
             env={"ROCE_SWEEP_STOP_AFTER": "5"})
    assert r.returncode == 130
    first = rows_of(out)
    assert len(first) == 5
    r = roce("sweep", "--grid", *GRID, *FIXED, "-o", str(out), "-j", "2")
    assert r.returncode == 0, r.stderr
    assert "12 runs, 5 already in" in r.stderr and "7 to run" in r.stderr
    rows = rows_of(out)
    assert stable(rows) == stable(reference)
    # the first 5 rows were kept as they were, not run again
    saved = {r["seed"]: r["run_cpu_s"] for r in first}
    assert {r["seed"]: r["run_cpu_s"] for r in rows if r["seed"] in saved} == saved
    r = roce("sweep", "--grid", *GRID, *FIXED, "-o", str(out))
    assert "12 already in" in r.stderr and "0 to run" in r.stderr
    assert rows_of(out) == rows


def test_resumes_after_a_kill(tmp_path: Path):
    out = tmp_path / "killed.csv"
    argv = [sys.executable, "-m", "roce", "sweep", "--grid", "loss=0,0.01,0.02,0.03",
            "seed=1,2,3", "--size", "1M", "--count", "6", "-o", str(out), "-j", "1"]
    # saved after every row, so a kill loses no finished run
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ROCE_SWEEP_SAVE_EVERY": "0"})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and len(rows_of(out)) >= 1:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        proc.stderr.close()
    kept = rows_of(out)
    assert 1 <= len(kept) < 12  # killed part way (if this fails, the runs got too fast)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"{len(kept)} already in" in r.stderr
    rows = rows_of(out)
    assert len(rows) == 12 and all(r["error"] == "" for r in rows)
    assert sorted(r["seed"] for r in rows) == sorted(["1", "2", "3"] * 4)  # seeds as given


def test_a_failed_run_is_a_row(tmp_path: Path):
    out = tmp_path / "fail.csv"
    # spraying needs switches: on the default p2p link that run fails, alone
    r = roce("sweep", "--grid", "lb=ecmp,spray", "--size", "8K", "--count", "2",
             "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "1 runs failed" in r.stderr
    ok, bad = rows_of(out)
    assert ok["lb"] == "ecmp" and ok["error"] == "" and float(ok["goodput_gbps"]) > 0
    assert bad["lb"] == "spray" and "the topology has no switch" in bad["error"]
    assert bad["goodput_gbps"] == ""


@pytest.mark.parametrize("argv,message", [
    (["--grid", "loss=0,0.5x"], "--grid loss=0.5x: bad probability"),
    (["--grid", "lb=ecmp,hash"], "--grid lb=hash: not one of ecmp, spray"),
    (["--grid", "mtu=1000"], "--grid mtu=1000: not one of"),
    (["--grid", "size=1M,lots"], "--grid size=lots: bad size"),
    (["--grid", "nope=1,2"], "roce emulate has no option --nope"),
    (["--grid", "loss"], "give NAME=V1,V2"),
    (["--grid", "loss=0", "loss=1"], "given twice"),
    (["--grid", "pcap=a.pcap"], "not a sweep parameter"),
    (["--grid", "loss=0", "-T", "json"], "not a sweep option"),
    (["--grid", "loss=0", "--loss", "0.1"], "both fixed and a grid parameter"),
    (["--op", "read"], "give a grid"),
    (["--grid", "loss=0", "-j", "0"], "-j must be 1 or more"),
])
def test_bad_grids_are_usage_errors(argv: list[str], message: str, tmp_path: Path):
    out = tmp_path / "never.csv"
    r = roce("sweep", *argv, "-o", str(out))
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert not out.exists()  # nothing ran


def test_bad_output_name(tmp_path: Path):
    r = roce("sweep", "--grid", "loss=0", "-o", str(tmp_path / "x.json"))
    assert r.returncode == 1 and "must end in .csv or .parquet" in r.stderr


def test_toml_grid_and_options(tmp_path: Path):
    grid = tmp_path / "grid.toml"
    grid.write_text('[grid]\ntopology = ["incast:2", "leafspine:2,1,2"]\nlb = ["ecmp", '
                    '"spray"]\n\n[options]\nsize = "8K"\ncount = 2\npfc = "off"\n')
    out = tmp_path / "t.csv"
    r = roce("sweep", "--grid", str(grid), "-o", str(out))
    assert r.returncode == 0, r.stderr
    rows = rows_of(out)
    assert [(r["topology"], r["lb"]) for r in rows] == [
        ("incast:2", "ecmp"), ("incast:2", "spray"), ("leafspine:2,1,2", "ecmp"),
        ("leafspine:2,1,2", "spray")]
    # the switched network's fabric object is flattened into columns
    assert all(r["fabric.drops"] != "" and r["scenario.size"] == "8192" for r in rows)
    assert all(r["scenario.pfc"] == "False" for r in rows)
    bad = tmp_path / "bad.toml"
    bad.write_text('[grid]\nloss = [0, 2]\n')
    r = roce("sweep", "--grid", str(bad), "-o", str(tmp_path / "b.csv"))
    assert r.returncode == 1 and "--grid loss=2: probability" in r.stderr
    bad.write_text('[grid\n')
    r = roce("sweep", "--grid", str(bad), "-o", str(tmp_path / "b.csv"))
    assert r.returncode == 2 and f"{bad}: not TOML" in r.stderr
    bad.write_text('[other]\nloss = [0]\n')
    r = roce("sweep", "--grid", str(bad), "-o", str(tmp_path / "b.csv"))
    assert r.returncode == 1 and "expected a [grid] table" in r.stderr


def test_parquet_and_csv_hold_the_same_rows(tmp_path: Path):
    argv = ["--grid", "loss=0,0.05", "dup=0,0.1", "--size", "8K", "--count", "2"]
    r1 = roce("sweep", *argv, "-o", str(tmp_path / "s.csv"))
    r2 = roce("sweep", *argv, "-o", str(tmp_path / "s.parquet"))
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    table = pq.read_table(tmp_path / "s.parquet")
    assert table.num_rows == 4
    assert str(table.schema.field("goodput_gbps").type) == "double"
    assert str(table.schema.field("retransmitted").type) == "int64"
    as_csv = stable(rows_of(tmp_path / "s.csv"))
    as_pq = stable(rows_of(tmp_path / "s.parquet"))
    for a, b in zip(as_csv, as_pq):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == b[k] or float(a[k]) == float(b[k]), k
    # resuming a Parquet table: nothing to run
    r = roce("sweep", *argv, "-o", str(tmp_path / "s.parquet"))
    assert "4 already in" in r.stderr


def test_plot_data_and_file(tmp_path: Path):
    rows = [{"loss": "0.0", "lb": "ecmp", "goodput_gbps": "90", "error": ""},
            {"loss": "0.01", "lb": "ecmp", "goodput_gbps": "50", "error": ""},
            {"loss": "0.001", "lb": "ecmp", "goodput_gbps": "80", "error": ""},
            {"loss": "0.0", "lb": "spray", "goodput_gbps": "", "error": "boom"},
            {"loss": "0.01", "lb": "spray", "goodput_gbps": "70", "error": ""}]
    data = series(rows, "loss", "goodput_gbps", ["lb"])
    assert data == {"lb=ecmp": [("0.0", 90.0), ("0.001", 80.0), ("0.01", 50.0)],
                    "lb=spray": [("0.01", 70.0)]}
    out, fig = tmp_path / "s.csv", tmp_path / "s.png"
    r = roce("sweep", "--grid", "loss=0,0.05", "op=write,read", "--size", "8K", "--count",
             "2", "-o", str(out), "--plot", str(fig), "--plot-metric", "retransmitted")
    assert r.returncode == 0, r.stderr
    assert fig.read_bytes()[:4] == b"\x89PNG"
    r = roce("sweep", "--grid", "loss=0", "-o", str(out), "--plot", str(fig),
             "--plot-x", "lb")
    assert r.returncode == 1 and "--plot-x lb: not a grid parameter" in r.stderr


def test_every_emulate_option_is_a_sweep_option():
    emulate = build_parser("emulate")._subparsers._group_actions[0].choices["emulate"]
    swp = build_parser("sweep")._subparsers._group_actions[0].choices["sweep"]
    have = {s for a in swp._actions for s in a.option_strings}
    assert {s for a in emulate._actions for s in a.option_strings} <= have
    # and a grid name is any of emulate's options, converted by its own type
    params = sweep.parse_grid(emulate_parser(), ["retry-cnt=1,2", "delay=2us",
                                                 "cc-param=rp_ai_rate=40"])
    assert [(p.name, p.values) for p in params] == [
        ("retry-cnt", (1, 2)), ("delay", (2000,)), ("cc-param", ("rp_ai_rate=40",))]


def test_seed_is_stable_and_per_point():
    a = sweep.derive_seed(7, {"loss": 0.01, "lb": "spray"})
    assert a == sweep.derive_seed(7, {"lb": "spray", "loss": 0.01})  # order-free
    assert a != sweep.derive_seed(8, {"loss": 0.01, "lb": "spray"})
    assert a != sweep.derive_seed(7, {"loss": 0.02, "lb": "spray"})
    assert 0 <= a < 2 ** 31
    assert sweep.run_seed(7, {"seed": 3, "loss": 0.0}) == 3


@pytest.mark.parametrize("blocked,argv,code,message", [
    ("pyarrow", ["-o", "x.parquet"], 1, 'pip install "roce[parquet]"'),
    ("distributed", ["-o", "x.csv", "--scheduler", "tcp://h:8786"], 1,
     'pip install "roce[dask]"'),
])
def test_without_an_extra_names_it(blocked: str, argv: list[str], code: int, message: str,
                                   tmp_path: Path):
    prog = (f"import sys; sys.modules[{blocked!r}] = None; from roce.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", prog, "sweep", "--grid", "loss=0", "--size",
                        "4K", "--count", "1", *argv], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == code and message in r.stderr, r.stderr


def test_unreachable_scheduler_is_an_input_error(tmp_path: Path):
    r = roce("sweep", "--grid", "loss=0", "-o", str(tmp_path / "x.csv"), "--scheduler",
             "tcp://127.0.0.1:9")
    assert r.returncode == 2 and "cannot reach the Dask scheduler" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "x.csv").exists()


def test_refused_options_are_emulate_options():
    """The options a sweep refuses are named by dest: each must still be one of emulate's
    (a renamed option would otherwise slip through, silently ignored by every run)."""
    dests = {a.dest for a in emulate_parser()._actions}
    assert set(sweep.NOT_SWEPT) <= dests


def test_resume_reuses_rows_only_under_the_same_fixed_options(tmp_path: Path):
    out = tmp_path / "fixed.csv"
    grid = ["--grid", "loss=0,0.02"]
    r = roce("sweep", *grid, "--size", "16K", "--count", "2", "-o", str(out), "-j", "1")
    assert r.returncode == 0, r.stderr
    first = rows_of(out)
    assert [row["fixed"] for row in first] == ["--count=2 --size=16384"] * 2
    # the same grid with another fixed size is another pair of runs, not a resume
    r = roce("sweep", *grid, "--size", "32K", "--count", "2", "-o", str(out), "-j", "1")
    assert r.returncode == 0, r.stderr
    assert "2 runs, 0 already in" in r.stderr and "2 rows of other" in r.stderr
    rows = rows_of(out)
    assert len(rows) == 4
    assert rows[:2] == first  # the earlier rows kept, in front
    assert {row["scenario.size"] for row in rows[2:]} == {str(32 << 10)}
    # and the first fixed options again find their rows
    r = roce("sweep", *grid, "--count", "2", "--size", "16K", "-o", str(out), "-j", "1")
    assert "2 already in" in r.stderr and "0 to run" in r.stderr
