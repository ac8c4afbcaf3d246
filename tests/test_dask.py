"""``--scheduler``: the per-capture tasks of ``roce stats`` and ``roce decode -T parquet`` on
a Dask cluster (a LocalCluster this test starts, listening on TCP like a real one).  Three
ways agree: the cluster, local worker processes and one process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from distributed import LocalCluster
from fleet_helpers import make_capture, split_capture

PACKETS = 3000


@pytest.fixture(scope="module")
def pieces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("dask")
    assert make_capture(d / "whole.pcap", PACKETS) == PACKETS
    return split_capture(d / "whole.pcap", d / "pieces", [700, 1500, 2222])


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp",
                      dashboard_address=None, scheduler_port=0) as cluster:
        yield cluster.scheduler_address


def roce(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roce", *argv], capture_output=True,
                          text=True, timeout=120)


def test_stats_three_ways_agree(pieces: list[Path], scheduler: str):
    d = str(pieces[0].parent)
    runs = [roce("stats", "-T", "json", *how, d) for how in
            (["--scheduler", scheduler], ["-j", "2"], ["-j", "1"])]
    for r in runs:
        assert r.returncode == 0, r.stderr
    docs = [json.loads(r.stdout) for r in runs]
    assert docs[0] == docs[1] == docs[2]
    assert docs[0]["total"]["totals"]["frames"] == PACKETS
    text = [roce("stats", *how, d).stdout for how in (["--scheduler", scheduler], ["-j", "1"])]
    assert text[0] == text[1] and "Totals: 4 of 4 captures" in text[0]


def test_decode_parquet_three_ways_agree(pieces: list[Path], scheduler: str,
                                        tmp_path: Path):
    d = str(pieces[0].parent)
    outs = []
    for name, how in (("dask", ["--scheduler", scheduler]), ("j2", ["-j", "2"]),
                      ("j1", ["-j", "1"])):
        out = tmp_path / name
        r = roce("decode", "-T", "parquet", "-w", str(out), *how, d)
        assert r.returncode == 0, r.stderr
        outs.append(sorted(out.iterdir()))
    assert [p.name for p in outs[0]] == [p.with_suffix(".parquet").name for p in pieces]
    for a, b, c in zip(*outs):
        ta, tb, tc = pq.read_table(a), pq.read_table(b), pq.read_table(c)
        assert ta.equals(tb) and tb.equals(tc) and ta.num_rows > 0


def test_bad_member_on_the_cluster(pieces: list[Path], scheduler: str, tmp_path: Path):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture")
    r = roce("stats", "-T", "json", "--scheduler", scheduler, str(junk), str(pieces[0]))
    assert r.returncode == 2 and "junk.pcap" in r.stderr
    doc = json.loads(r.stdout)
    assert [f["capture"]["file"] for f in doc["files"]] == [str(pieces[0])]


def test_unreachable_scheduler_is_an_input_error(pieces: list[Path]):
    r = roce("stats", "--scheduler", "tcp://127.0.0.1:9", str(pieces[0]))
    assert r.returncode == 2 and "cannot reach the Dask scheduler" in r.stderr
    assert "Traceback" not in r.stderr


def test_without_dask_names_the_extra(pieces: list[Path]):
    code = ("import sys; sys.modules['distributed'] = None; from roce.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "stats", "--scheduler", "tcp://h:8786",
                        str(pieces[0])], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and 'pip install "roce[dask]"' in r.stderr


def test_a_workers_registry_gets_the_runs_decode_as_rows(tmp_path: Path, scheduler: str):
    # A Dask worker is another process: the run's `-d` rows must travel with its tasks,
    # and a worker serving the next run must not keep them.
    d = tmp_path / "caps"
    d.mkdir()
    for name in ("a", "b"):
        r = roce("craft", "uet-rud-req", "--uet-port", "49150", "--count", "5",
                 "-w", str(d / f"{name}.pcap"), "-q")
        assert r.returncode == 0, r.stderr
    rows = ["-d", "udp.port==49150,uet"]
    docs = []
    for how in (["--scheduler", scheduler], ["-j", "1"]):
        r = roce("stats", "-T", "json", *rows, *how, str(d))
        assert r.returncode == 0, r.stderr
        docs.append(json.loads(r.stdout))
    assert docs[0] == docs[1]
    assert [f["uet"]["packets"] for f in docs[0]["files"]] == [5, 5]
    out = tmp_path / "pq"
    r = roce("decode", "-T", "parquet", "-w", str(out), *rows, "--scheduler", scheduler, str(d))
    assert r.returncode == 0, r.stderr
    table = pq.read_table(out / "a.parquet")
    assert table.num_rows == 5
    assert "uet" in table.column_names or any(c.startswith("uet") for c in table.column_names)
    # the next run on the same worker, without -d: port 49150 is plain UDP again
    r = roce("stats", "-T", "json", "--scheduler", scheduler, str(d))
    assert r.returncode == 0, r.stderr
    assert [f.get("uet") for f in json.loads(r.stdout)["files"]] == [None, None]
