"""`roce emulate --workload` and `--collective` end to end: the generators' transfers on the
simulated network (roce.emu.net.workrun), their reports, the per-flow rows, the refusals."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from roce.cli import main
from roce.emu import defaults
from roce.emu.net import topology as topo
from roce.emu.net.workrun import WorkloadRun
from roce.emu.scenario import Scenario
from roce.emu.workload import fct

# A narrow distribution (1 KB .. 9 KB, uniform in between): thousands of flows in a short
# run, so the offered load is measured with little noise
NARROW = "# test\n1000 0\n9000 100\n"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # an option value the parser refused (roce.options)
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def emulate_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run_cli(["emulate", "-T", "json", "--no-progress", *args], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def narrow(tmp_path: Path) -> Path:
    p = tmp_path / "narrow.cdf"
    p.write_text(NARROW)
    return p


def test_offered_load_within_5_percent(narrow: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]):
    """The generator's offered load in a real run is within 5% of --load, by the summary
    and recomputed from the per-flow rows; a non-blocking star carries it all."""
    rows_path = tmp_path / "flows.csv"
    s = emulate_json(["--topology", "incast:7", "--workload", str(narrow), "--load", "0.3",
                      "--duration", "300us", "--fct", str(rows_path)], capsys)
    w = s["workload"]
    assert s["data_verified"] and s["finished"]
    assert w["kind"] == "flows" and w["hosts"] == 8
    assert w["flows"] > 1000 and w["unfinished"] == 0 and w["finished"] == w["flows"]
    assert abs(w["offered_load"] - 0.3) < 0.05 * 0.3
    with open(rows_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == w["finished"]
    offered = sum(int(r["size"]) for r in rows) * 8 / (8 * 100.0 * 300_000)
    assert offered == pytest.approx(w["offered_load"])
    # every flow arrived within the window, from a host to another one
    assert all(0 <= int(r["start_ns"]) < 300_000 and r["src"] != r["dst"] for r in rows)
    # what was offered was carried: every byte over the whole run's time
    assert w["carried_load"] == pytest.approx(offered * 300_000 / s["virtual_ns"])
    assert s["bytes"] == sum(int(r["size"]) for r in rows)


def _table(rows: list[dict], percent: int) -> list[dict]:
    """HPCC's fct_analysis.py binning, written again here from its description: flows
    sorted by (size, slowdown), bins of percent% of the flows, the value at floor(n*q)."""
    flows = sorted((int(r["size"]), max(1.0, int(r["fct_ns"]) / int(r["ideal_fct_ns"])))
                   for r in rows)
    n, out = len(flows), []
    for lo in range(0, 100, percent):
        part = flows[lo * n // 100:min(100, lo + percent) * n // 100]
        if part:
            s = sorted(x for _, x in part)
            out.append({"flows": len(part), "max_size": part[-1][0],
                        **{k: s[min(len(s) - 1, int(len(s) * q))]
                           for k, q in (("p50", .5), ("p95", .95), ("p99", .99))}})
    return out


def test_slowdown_table_from_the_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The summary's slowdown table and small/large figures, recomputed from the rows."""
    rows_path = tmp_path / "flows.csv"
    s = emulate_json(["--topology", "leafspine:2,1,3", "--workload", "alistorage",
                      "--load", "0.6", "--duration", "100us", "--fct", str(rows_path),
                      "--fct-bins", "10", "--seed", "3"], capsys)
    w = s["workload"]
    with open(rows_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and len(rows) == w["finished"]
    for r in rows:  # the slowdown column is FCT over ideal, at least 1
        assert float(r["slowdown"]) == pytest.approx(
            max(1.0, int(r["fct_ns"]) / int(r["ideal_fct_ns"])))
    got = [{k: b[k] for k in ("flows", "max_size", "p50", "p95", "p99")}
           for b in w["slowdown_table"]]
    assert got == _table(rows, 10)
    small = sorted(float(r["slowdown"]) for r in rows if int(r["size"]) < 100_000)
    assert w["slowdown"]["small"]["flows"] == len(small)
    assert w["slowdown"]["small"]["p99"] == small[min(len(small) - 1,
                                                      int(len(small) * 0.99))]
    # queueing on a shared spine: some flow was slowed, none beat its ideal
    assert max(float(r["slowdown"]) for r in rows) > 1.0


def test_ideal_fct_of_a_one_packet_flow():
    """A 100-byte flow across leafspine (4 links: host, leaf, spine, leaf, host): HPCC's
    base RTT, twice the delays and a full frame per hop, plus its own frame once."""
    sc = Scenario(topology="leafspine:2,1,1", cdf="alistorage", duration_ns=1000)
    run = WorkloadRun(sc)
    full = fct.wire_bytes(4096, 4096)
    # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4 around a 4096-byte payload
    assert full == 14 + 20 + 8 + 12 + 16 + 4096 + 4
    rtt = 2 * 4 * 1000 + 4 * math.ceil(full * 8 / 100)
    one = 14 + 20 + 8 + 12 + 16 + 100 + 4
    assert run.ideal()(0, 1, 100) == rtt + math.ceil(one * 8 / 100)
    assert [ln.a + "-" + ln.b for ln in topo.path(run.topology, "l1h1", "l2h1")] == [
        "l1h1-leaf1", "leaf1-spine1", "leaf2-spine1", "l2h1-leaf2"]


def test_ring_allreduce_near_line_rate(capsys: pytest.CaptureFixture[str]):
    """A ring all-reduce on a non-blocking leaf-spine reaches busbw within 10% of the line
    rate, every iteration timed, and the data verified."""
    s = emulate_json(["--topology", "leafspine:2,2,2", "--collective", "allreduce",
                      "--size", "8M", "--iterations", "2"], capsys)
    w = s["workload"]
    assert s["data_verified"]
    assert [r["iteration"] for r in w["iterations"]] == [0, 1]
    assert w["ranks"] == 4 and w["line_rate_GBps"] == 12.5
    assert w["busbw_GBps"] >= 0.9 * 12.5
    assert w["busbw_GBps"] == pytest.approx(w["algbw_GBps"] * 2 * 3 / 4)
    # every rank sends 2(n-1)/n of the buffer per iteration
    assert s["bytes"] == 2 * 2 * 3 * (8 << 20)
    for key in ("pfc_frames", "ecn_marked", "cnps", "retransmitted"):
        assert key in w


@pytest.mark.parametrize("op,algorithm", [("allgather", "ring"), ("reducescatter", "ring"),
                                          ("alltoall", "pairwise"),
                                          ("allreduce", "halving-doubling")])
def test_every_collective_runs(op: str, algorithm: str, capsys: pytest.CaptureFixture[str]):
    s = emulate_json(["--topology", "incast:3", "--collective", op, "--algorithm", algorithm,
                      "--size", "256K", "--chunk", "32K", "--window", "2"], capsys)
    w = s["workload"]
    assert s["data_verified"] and w["completed_iterations"] == 1
    assert w["op"] == op and w["algorithm"] == algorithm
    assert 0 < w["busbw_GBps"] <= 12.5


def test_two_ranks_on_p2p(capsys: pytest.CaptureFixture[str]):
    s = emulate_json(["--collective", "allreduce", "--size", "1M"], capsys)
    assert s["data_verified"] and s["workload"]["ranks"] == 2
    assert "fabric" in s  # the counters beside the bandwidths


def test_a_changed_byte_is_caught(narrow: Path):
    """Verification can fail: the source's bytes change under a flow in flight, so what
    lands differs from what the source holds when the flow completes."""
    big = narrow.with_name("big.cdf")
    big.write_text("1000000 0\n1000001 100\n")
    run = WorkloadRun(Scenario(topology="incast:1", cdf=str(big), load=0.2,
                               duration_ns=1_000_000))
    first = run.src.next_time()
    assert first is not None

    def flip(now: int, arg: object) -> None:
        run.pattern[0] ^= 0xFF
    # 20 us into the first flow: its first packets are out, its last (80 us) are not
    run.net.at(first + 20_000, flip)
    s = run.run()
    assert not s.data_verified
    assert "not what was sent" in s.unverified


def test_same_seed_same_run(capsys: pytest.CaptureFixture[str]):
    args = ["--topology", "incast:3", "--workload", "fbhadoop", "--duration", "50us"]
    a = emulate_json(args, capsys)
    b = emulate_json(args, capsys)
    for s in (a, b):
        for k in ("cpu_s", "packets_per_cpu_s", "hops_per_cpu_s"):
            s.pop(k)
    assert a == b


@pytest.mark.parametrize("args,message", [
    (["--workload", "websearch", "--collective", "allreduce"], "exclude each other"),
    (["--workload", "websearch"], "need a switched --topology"),
    (["--workload", "websearch", "--topology", "incast:2", "--count", "3"], "--count 3"),
    (["--workload", "websearch", "--topology", "incast:2", "--traffic", "all-to-all"],
     "--traffic"),
    (["--workload", "websearch", "--topology", "incast:2", "--op", "mixed"], "--op mixed"),
    (["--workload", "websearch", "--topology", "incast:2", "--size", "4K"], "--size"),
    (["--workload", "websearch", "--topology", "incast:2", "--fct", "x.txt"],
     ".csv or .parquet"),
    (["--workload", "nosuch", "--topology", "incast:2"], "nosuch"),
    (["--collective", "allreduce", "--ranks", "3"], "--ranks 3: the network has 2"),
    (["--collective", "allreduce", "--fct", "x.csv"], "--fct"),
    (["--collective", "allreduce", "--fct-bins", "10"], "--fct-bins"),
    (["--load", "0.3"], "--load: only with --workload"),
    (["--duration", "2ms"], "--duration: only with --workload"),
    (["--fct", "a.csv"], "--fct: only with --workload"),
    (["--ranks", "2"], "--ranks: only with --collective"),
    (["--chunk", "1M"], "--chunk: only with --collective"),
    (["--collective", "allreduce", "--load", "0.2"], "--load"),
    (["--collective", "allreduce", "--algorithm", "pairwise"], "--algorithm pairwise"),
    (["--collective", "allreduce", "--trace", "t.csv"], "--trace"),
])
def test_refusals(args: list[str], message: str, capsys: pytest.CaptureFixture[str]):
    code, out, err = run_cli(["emulate", *args], capsys)
    assert code in (1, 2) and message in err, err
    assert not out


@pytest.mark.parametrize("args", [["--load", "0"], ["--load", "1.5"], ["--duration", "0"],
                                  ["--fct-bins", "0"], ["--fct-bins", "101"],
                                  ["--collective", "broadcast"], ["--ranks", "0"]])
def test_bad_values_exit_1(args: list[str], capsys: pytest.CaptureFixture[str]):
    code, _, err = run_cli(["emulate", *args], capsys)
    assert code == 1 and "--" + args[0].lstrip("-") in err


def test_memory_checked_before_building():
    """A duration whose flows could not be held is refused naming --duration, before the
    network is built."""
    from roce.errors import UsageError

    with pytest.raises(UsageError, match="--duration"):
        WorkloadRun(Scenario(topology="incast:2", cdf="alistorage",
                             duration_ns=10 ** 18))


def test_sweep_axes(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """--workload and --load as grid axes: one row each, the slowdown in flat columns."""
    out = tmp_path / "s.csv"
    code, _, err = run_cli(["sweep", "--grid", "workload=alistorage,fbhadoop", "load=0.2,0.4",
                            "--topology", "incast:2", "--duration", "30us", "-j", "1",
                            "-o", str(out)], capsys)
    assert code == 0, err
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["workload"], r["load"]) for r in rows] == [
        ("alistorage", "0.2"), ("alistorage", "0.4"), ("fbhadoop", "0.2"), ("fbhadoop", "0.4")]
    for r in rows:
        assert r["error"] == "" and r["data_verified"] == "True"
        assert float(r["workload.slowdown.all.p50"]) >= 1
        assert "workload.offered_load" in r
    code, _, err = run_cli(["sweep", "--grid", "collective=allreduce,allgather",
                            "--size", "256K", "-j", "1", "-o", str(tmp_path / "c.csv")],
                           capsys)
    assert code == 0, err
    with open(tmp_path / "c.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["collective"] for r in rows] == ["allreduce", "allgather"]
    assert all(float(r["workload.busbw_GBps"]) > 0 for r in rows)
    code, _, err = run_cli(["sweep", "--grid", "fct=a.csv,b.csv", "-o",
                            str(tmp_path / "d.csv")], capsys)
    assert code == 1 and "not a sweep parameter" in err


def test_defaults_are_the_modules():
    sc = Scenario()
    assert (sc.load, sc.duration_ns, sc.fct_bins) == (defaults.LOAD, defaults.DURATION_NS,
                                                      defaults.FCT_BINS)
    assert not sc.generated


def test_each_flow_has_its_own_qp_destroyed_when_it_completes():
    """A flow's QP pair is made when it arrives and destroyed when it completes (as the HPCC
    simulator gives each flow a QP): none is left at the end, and what they counted is in
    the summary."""
    run = WorkloadRun(Scenario(topology="incast:3", cdf="fbhadoop", duration_ns=100_000,
                               cc=None))
    s = run.run()
    w = s.workload
    assert s.data_verified and w["finished"] == w["flows"] > 10
    assert run.transport.connections == {}
    assert all(not nic.device.qps for nic in run.net.hosts.values())
    assert s.delivered == w["finished"]
    assert s.packets >= w["finished"] * 2  # a request and an ACK each, at least



def test_fct_parquet_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """--fct FILE.parquet holds the same rows as the CSV of the same run."""
    args = ["--topology", "incast:3", "--workload", "fbhadoop", "--duration", "50us"]
    a = emulate_json([*args, "--fct", str(tmp_path / "f.parquet")], capsys)
    b = emulate_json([*args, "--fct", str(tmp_path / "f.csv")], capsys)
    assert a["workload"]["finished"] == b["workload"]["finished"] > 0
    assert (fct.read_rows(str(tmp_path / "f.parquet"))
            == fct.read_rows(str(tmp_path / "f.csv")))
