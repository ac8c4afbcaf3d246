"""Flow completion times (roce/emu/workload/fct.py): bytes on the wire are what the
emulator's links carry, the ideal FCT is HPCC's and an idle link meets it, per-flow rows
round-trip through CSV and Parquet, and the slowdown table is recomputed here from the CSV
alone, by HPCC's binning, written out again."""

from __future__ import annotations

import csv
import random

import pytest
from workload_helpers import drive

import roce
from roce.emu.net.runner import run_scenario
from roce.emu.scenario import Scenario
from roce.emu.workload import BUILTIN, OpenLoop, fct
from roce.emu.workload.fct import FlowRow
from roce.errors import InputError, UsageError


@pytest.mark.parametrize("op", ["write", "send"])
@pytest.mark.parametrize("mtu", [256, 1024, 4096])
@pytest.mark.parametrize("size", [0, 1, 3, 255, 1024, 4097, 100_003])
def test_wire_bytes_are_what_the_link_carries(op: str, mtu: int, size: int) -> None:
    """One message over the two-host fabric: the requester's link carried exactly
    ``wire_bytes`` (no loss, so no retransmission)."""
    s = run_scenario(Scenario(op=op, size=size, count=1, mtu=mtu))
    assert s.link["10.0.0.1->10.0.0.2"]["bytes"] == fct.wire_bytes(size, mtu, op)


@pytest.mark.parametrize("ipv6", [False, True])
def test_wire_bytes_match_crafted_frames(ipv6: bool) -> None:
    """The same sum from ``roce.craft``'s frames, one per packet, IPv6 included."""
    size, mtu = 10_000, 4096
    lengths = [4096, 4096, 1808]
    names = ["RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"]
    total = sum(len(roce.craft(name, b"\0" * n, ipv6=ipv6, dqpn=0x11, psn=i).to_bytes())
                for i, (name, n) in enumerate(zip(names, lengths)))
    assert fct.wire_bytes(size, mtu, "write", ipv6) == total
    assert fct.headers("write", ipv6)["only"] == fct.headers("send", ipv6)["only"] + 16  # RETH


def test_base_rtt_and_ideal_are_hpccs() -> None:
    """rtt = 2 * delays + one frame's serialization per hop; ideal = rtt + wire bytes at the
    rate (HPCC third.cc: standalone_fct = base_rtt + total_bytes * 8e9 / bw)."""
    rtt = fct.base_rtt_ns([1000, 500, 1000], [100, 400, 100], 4170)
    assert rtt == 2 * 2500 + 334 + 84 + 334  # ceil(4170 * 8 / 100) = 334, / 400 = 84
    size, mtu = 1_000_000, 4096
    wire = fct.wire_bytes(size, mtu)
    assert wire == size + 245 * 58 + 16  # 245 packets, one RETH
    assert fct.ideal_fct_ns(size, 100, rtt, mtu) == rtt + -(-wire * 8 // 100)
    with pytest.raises(ValueError):
        fct.base_rtt_ns([1000], [100, 100], 4170)


@pytest.mark.parametrize("size", [1, 4096, 100_000, 1 << 20])
def test_an_idle_link_meets_the_ideal(size: int) -> None:
    """One flow alone on a link completes within its ideal FCT (HPCC's ideal counts a whole
    frame of store-and-forward a two-host link does not have), and not much faster:
    slowdown 1."""
    mtu, rate, delay = 4096, 100.0, 1000
    s = run_scenario(Scenario(op="write", size=size, count=1, mtu=mtu, rate_gbps=rate,
                              delay_ns=delay))
    ideal = fct.ideal_fct_ns(size, rate, fct.base_rtt_ns([delay], [rate],
                                                         fct.wire_bytes(mtu, mtu)), mtu)
    assert 0.85 * ideal <= s.virtual_ns <= ideal
    assert fct.slowdown(s.virtual_ns, ideal) == 1.0


def rows(n: int, seed: int) -> list[FlowRow]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.choice([rng.randint(1, 100), rng.randint(1000, 5000), 1 << 20, 64])
        ideal = 2000 + size * 8 // 100
        out.append(FlowRow(f"h{rng.randrange(8)}", f"h{rng.randrange(8)}", size, i * 1000,
                           int(ideal * rng.uniform(0.9, 20)), ideal))
    return out


def recompute(path: str, step: int) -> list[tuple]:
    """The slowdown table from the CSV alone, as HPCC's fct_analysis.py computes it: each
    flow's slowdown FCT/ideal (at least 1); flows sorted by size, then slowdown; bin i of
    ``step`` % is rows [i*n/100, (i+step)*n/100); per bin its last size and
    a[int(len(a)*p)] of its sorted slowdowns for p = 0.5, 0.95, 0.99."""
    with open(path, newline="") as f:
        table = [(int(r["size"]), max(1.0, int(r["fct_ns"]) / int(r["ideal_fct_ns"])))
                 for r in csv.DictReader(f)]
    table.sort()
    n = len(table)
    out = []
    for i in range(0, 100, step):
        chunk = table[i * n // 100:min(100, i + step) * n // 100]
        if not chunk:
            continue
        slow = sorted(s for _, s in chunk)
        out.append((i, min(100, i + step), len(chunk), chunk[-1][0],
                    *(slow[int(len(slow) * p)] for p in (0.5, 0.95, 0.99))))
    return out


@pytest.mark.parametrize("n,step", [(1000, 5), (37, 5), (5, 5), (997, 10), (100, 30),
                                    (1, 100)])
def test_slowdown_table_recomputed_from_the_csv(tmp_path, n: int, step: int) -> None:
    data = rows(n, n + step)
    path = tmp_path / "fct.csv"
    assert fct.write_rows(str(path), data) == n
    with open(path, newline="") as f:
        assert tuple(next(csv.reader(f))) == fct.COLUMNS
    bins = fct.slowdown_table(data, step)
    assert [(b.lo, b.hi, b.flows, b.max_size, b.p50, b.p95, b.p99) for b in bins] == \
        recompute(str(path), step)
    assert sum(b.flows for b in bins) == n
    assert all(1.0 <= b.p50 <= b.p95 <= b.p99 for b in bins)
    text = fct.table_text(bins)
    assert len(text.splitlines()) == len(bins) + 1


def test_table_of_nothing_and_bad_bins() -> None:
    assert fct.slowdown_table([]) == []
    with pytest.raises(UsageError, match=r"--fct-bins 0: a bin is 1\.\.100 percent"):
        fct.slowdown_table(rows(10, 1), 0)


def test_parquet_round_trip(tmp_path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    data = rows(200, 3)
    path = tmp_path / "fct.parquet"
    assert fct.write_rows(str(path), data) == 200
    table = pq.read_table(path)
    assert table.column_names == list(fct.COLUMNS)
    assert [tuple(r.values()) for r in table.to_pylist()] == [r.values() for r in data]
    assert str(table.schema.field("size").type) == "uint64"
    assert fct.write_rows(str(tmp_path / "none.parquet"), []) == 0
    assert pq.read_table(tmp_path / "none.parquet").num_rows == 0


def test_bad_paths(tmp_path) -> None:
    with pytest.raises(UsageError, match=r"--fct out.txt: the file name ends in .csv or "
                       r"\.parquet"):
        fct.write_rows("out.txt", [])
    with pytest.raises(InputError, match=str(tmp_path / "no" / "such.csv")):
        fct.write_rows(str(tmp_path / "no" / "such.csv"), rows(3, 1))


def test_rows_of_an_open_loop_run(tmp_path) -> None:
    """A FlowSource's completions become rows: names, sizes, start, FCT and ideal."""
    hosts = ["a", "b", "c", "d"]
    w = OpenLoop(BUILTIN["alistorage"], 0.5, 500_000)
    src = w.start(hosts, 100.0, random.Random(4))
    drive(src, lambda t: 3000 + t.size * 8 // 50)  # at half the rate
    rtt = fct.base_rtt_ns([1000, 1000], [100.0, 100.0], fct.wire_bytes(4096, 4096))

    def ideal(s: int, d: int, size: int) -> int:
        return fct.ideal_fct_ns(size, 100.0, rtt, 4096)

    out = list(fct.flow_rows(src.completions, hosts, ideal))
    assert len(out) == src.generated > 10
    for r, (t, end) in zip(out, src.completions):
        assert (r.src, r.dst, r.size, r.start_ns) == (hosts[t.src], hosts[t.dst], t.size,
                                                      t.at_ns)
        assert r.fct_ns == end - t.at_ns and r.ideal_fct_ns == ideal(t.src, t.dst, t.size)
        assert r.slowdown >= 1
    path = tmp_path / "run.csv"
    fct.write_rows(str(path), out)
    assert len(recompute(str(path), 5)) == len(fct.slowdown_table(out))
