"""Columnar output: ``roce decode -T parquet|arrow`` and ``roce stats -T parquet``.

The compiled bulk extractor against its twin; the Parquet file read back with pyarrow and
with DuckDB against what ``roce decode -T fields`` prints, every row and field; the bulk
and record builders against each other on frames that are not whole RoCE; types, -e, -Y,
Arrow IPC, memory, the stats tables under real SQL, and the message without pyarrow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
from fleet_helpers import make_capture, roce_cli
from hypothesis import given
from hypothesis import strategies as st
from test_fastpath import LINKTYPES, any_frames

import roce
from roce import fast, macc
from roce.analysis import tables
from roce.decoder import colscan, columnar
from roce.decoder.decode import known_fields
from roce.headers import LAYOUTS
from roce.pcapio import PcapWriter

NS = 1_000_000_000
PACKETS = 3000


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("columnar") / "emu.pcap"
    assert make_capture(path, PACKETS) == PACKETS
    return path


@pytest.fixture(scope="module")
def odd_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Whole RoCE frames mixed with cut, malformed, non-RoCE, VLAN, IPv6, RoCEv1, CNP, PFC
    and PAUSE frames."""
    path = tmp_path_factory.mktemp("columnar") / "odd.pcap"
    good = roce.craft("RC_RDMA_WRITE_FIRST", bytes(64), dqpn=0x11, psn=5).to_bytes()
    frames = [
        (good, None),
        (roce.craft("rc-acknowledge", syndrome=0x60, dqpn=3, psn=9).to_bytes(), None),
        (roce.craft("RC_SEND_ONLY", bytes(8), ipv6=True).to_bytes(), None),
        (roce.craft("RC_SEND_ONLY", bytes(8), roce_version=1).to_bytes(), None),
        (roce.craft("RC_SEND_ONLY", bytes(8), vlan=7).to_bytes(), None),
        (roce.craft("cnp", dqpn=0x22).to_bytes(), None),
        (good[:60], len(good)),  # cut by the snap length
        (good[:-7], None),  # malformed: lengths disagree
        (bytes(14) + b"\x45" + bytes(40), None),  # not RoCE
        (roce.craft("RC_RDMA_READ_REQUEST", dqpn=8, psn=77).to_bytes(), None),
        (macc.build_pfc(bytes.fromhex("020000000009"), {3: 0xFFFF, 5: 7}), None),
        (macc.build_pause(bytes.fromhex("02000000000a"), 99), None),
    ]
    with PcapWriter(path) as w:
        for i, (data, orig) in enumerate(frames * 3):
            w.write(data, ts_ns=1_700_000_000 * NS + i * 1234, origlen=orig)
    return path


# -- the compiled extractor and its twin ------------------------------------------------------


ALL_SPECS = [colscan.field_spec(c.header, c.field) for c in columnar.all_columns().values()
             if c.field is not None]


@given(st.lists(any_frames(), max_size=20), st.booleans(),
       st.sampled_from(LINKTYPES), st.sampled_from([4791, 4792]))
def test_extract_compiled_equals_reference(cases, check_icrc, linktype, port):
    assert fast._ext is not None, "the fast path is not built"
    frames = [f for f, _, _ in cases]
    got = colscan.buffers(ALL_SPECS, len(frames))
    for buf in got.values + got.valid:  # junk: everything must be written
        buf[:] = b"\xa5" * len(buf)
    fast._ext.extract(frames, linktype, port, [tuple(s) for s in ALL_SPECS], got.values,
                      got.valid, colscan.VLAN2_SLOT, got.status, got.paylen, got.icrc,
                      got.icrc_ok, check_icrc)
    want = colscan.buffers(ALL_SPECS, len(frames))
    colscan.extract_reference(frames, linktype, port, ALL_SPECS, want, check_icrc)
    assert got == want


def test_specs_come_from_the_layouts():
    s = colscan.field_spec("bth", "psn")
    f = LAYOUTS["bth"].field("psn")
    assert (s.off, s.n, s.mask) == (f.bit_offset // 8, f.bits // 8, f.mask)
    assert colscan.field_spec("ip", "src").kind == colscan.X_RAW
    assert colscan.field_spec("vlan2", "id").slot == colscan.VLAN2_SLOT


# -- schema -----------------------------------------------------------------------------------


def test_columns_are_the_decoders_fields():
    cols = columnar.all_columns()
    assert set(cols) == known_fields() - columnar.PAIR_FIELDS
    schema = columnar.packet_schema(list(cols.values()))
    t = {f.name: f.type for f in schema}
    assert t["bth.psn"] == pa.uint32() and t["reth.va"] == pa.uint64()
    assert t["aeth.syndrome"] == pa.uint8() and t["bth.a"] == pa.bool_()
    assert t["icrc.valid"] == pa.bool_() and t["bth.p_key"] == pa.uint16()
    assert t["ip.src"] == pa.dictionary(pa.int32(), pa.string())
    assert t["frame.time_epoch"] == pa.timestamp("ns", tz="UTC")
    assert t["frame.time_delta"] == pa.duration("ns")
    assert t["cnp.reserved"] == pa.binary(16)


# -- round trip against -T fields ------------------------------------------------------------


def _text(v, typ) -> str:
    """A value read back, written as ``roce decode -T fields`` writes it."""
    if v is None:
        return ""
    if v is True or v is False:
        return "1" if v else "0"
    if pa.types.is_fixed_size_binary(typ):
        return str(int.from_bytes(v, "big"))
    if isinstance(v, bytes):
        return v.hex()
    if pa.types.is_timestamp(typ) or pa.types.is_duration(typ):
        return f"{v // NS}.{v % NS:09d}"
    return str(v)


def _fields_text(path: Path, names: list[str], *extra: str) -> list[list[str]]:
    # -E raw=y: integers in decimal, as the columns hold them (not tshark's hex display)
    argv = ["decode", "-T", "fields", "-E", "raw=y", *extra]
    for n in names:
        argv += ["-e", n]
    rc, out, err = roce_cli(*argv, str(path))
    assert rc == 0, err
    return [line.split("\t") for line in out.splitlines()]


def _table_text(table: pa.Table) -> list[list[str]]:
    cols = []
    for f in table.schema:
        col = table.column(f.name)
        if pa.types.is_timestamp(f.type) or pa.types.is_duration(f.type):
            col = col.cast(pa.int64())
        cols.append([_text(v, f.type) for v in col.to_pylist()])
    return [list(row) for row in zip(*cols)]


def _write(path: Path, out: Path, *extra: str, fmt: str = "parquet") -> tuple[int, str]:
    rc, _, err = roce_cli("decode", "-T", fmt, "-w", str(out), *extra, str(path))
    return rc, err


def test_round_trip_pyarrow_every_row_every_field(capture: Path, tmp_path: Path):
    out = tmp_path / "all.parquet"
    assert _write(capture, out) == (0, "")
    table = pq.read_table(out)
    names = columnar.default_names()
    assert table.column_names == names and table.num_rows == PACKETS
    assert _table_text(table) == _fields_text(capture, names)
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups == -(-PACKETS // columnar.ROW_GROUP)


def test_round_trip_duckdb(capture: Path, tmp_path: Path):
    names = ["frame.number", "frame.time_epoch", "frame.time_delta", "ip.src", "ip.dst",
             "udp.srcport", "bth.opcode", "bth.destqp", "bth.psn", "bth.a", "reth.va",
             "reth.r_key", "reth.dmalen", "aeth.syndrome", "aeth.msn", "icrc.valid",
             "payload.len"]
    out = tmp_path / "some.parquet"
    args = [a for n in names for a in ("-e", n)]
    assert _write(capture, out, *args) == (0, "")
    select = ", ".join(f'epoch_ns("{n}")' if n == "frame.time_epoch" else f'"{n}"'
                       for n in names)
    rows = duckdb.sql(f"SELECT {select} FROM read_parquet('{out}') "
                      'ORDER BY "frame.number"').fetchall()
    types = [pa.int64() if n.startswith("frame.time") else pa.uint64() for n in names]
    got = [[_text(v, pa.timestamp("ns") if n.startswith("frame.time") else t)
            for v, t, n in zip(row, types, names)] for row in rows]
    assert got == _fields_text(capture, names)
    # real questions in SQL: which QPs saw NAKs, per syndrome kind
    naks = duckdb.sql(f"""SELECT "bth.destqp", count(*) FROM read_parquet('{out}')
                          WHERE "aeth.syndrome" >> 5 = 3 GROUP BY ALL ORDER BY 1""").fetchall()
    want = _fields_text(capture, ["bth.destqp"], "-Y", "nak")
    assert sum(n for _, n in naks) == len(want) > 0


def test_bulk_and_record_builders_agree(odd_capture: Path, tmp_path: Path):
    bulk, rec = tmp_path / "bulk.parquet", tmp_path / "rec.parquet"
    assert _write(odd_capture, bulk)[0] == 0
    # a filter that keeps every row sends every frame through the record decoder
    assert _write(odd_capture, rec, "-Y", "frame.number")[0] == 0
    a, b = pq.read_table(bulk), pq.read_table(rec)
    assert a.num_rows == b.num_rows == 36
    assert a.equals(b) and _table_text(a) == _table_text(b)
    assert _table_text(a) == _fields_text(odd_capture, columnar.default_names())
    kinds = a.column("malformed").to_pylist(), a.column("truncated").to_pylist()
    assert any(kinds[0]) and any(kinds[1])
    assert a.column("macc.cbfc.pause_time.c3").to_pylist()[10] == 0xFFFF
    assert a.column("macc.pause_time").to_pylist()[11] == 99
    # --only-roce hides what the decoder hides
    only = tmp_path / "only.parquet"
    assert _write(odd_capture, only, "--only-roce")[0] == 0
    want = _fields_text(odd_capture, ["frame.number"], "--only-roce")
    assert [[str(n)] for n in pq.read_table(only).column("frame.number").to_pylist()] == want


def test_select_and_filter(capture: Path, tmp_path: Path):
    out = tmp_path / "f.parquet"
    assert _write(capture, out, "-e", "bth.psn", "-e", "infiniband.bth.destqp", "-Y",
                  "rc.rdma.read.request or nak", "-c", "7")[0] == 0
    t = pq.read_table(out)
    assert t.column_names == ["bth.psn", "bth.destqp"]
    assert _table_text(t) == _fields_text(capture, ["bth.psn", "bth.destqp"], "-Y",
                                          "rc.rdma.read.request or nak", "-c", "7")
    assert t.num_rows == 7


def test_arrow_ipc_stream(capture: Path, tmp_path: Path):
    out = tmp_path / "x.arrows"
    assert _write(capture, out, "-e", "bth.psn", "-e", "ip.src", fmt="arrow")[0] == 0
    t = pa.ipc.open_stream(pa.OSFile(str(out))).read_all()
    assert _table_text(t) == _fields_text(capture, ["bth.psn", "ip.src"])


@pytest.mark.parametrize("argv, message", [
    (["decode", "-T", "parquet", "{f}"], "needs -w"),
    (["decode", "-T", "parquet", "-w", "o", "-e", "bth.pns", "{f}"], "-e bth.pns: unknown"),
    (["decode", "-T", "parquet", "-w", "o", "-e", "ip.addr", "{f}"], "a pair of fields"),
    (["decode", "-T", "parquet", "-w", "o", "-V", "{f}"], "do not combine"),
    (["decode", "-T", "parquet", "-w", "o", "-Y", "bth.psn ==", "{f}"], "bth.psn =="),
    (["stats", "-T", "parquet", "{f}"], "needs -w DIRECTORY"),
])
def test_usage_errors(capture: Path, tmp_path: Path, argv: list[str], message: str):
    rc, _, err = roce_cli(*[str(capture) if a == "{f}" else str(tmp_path / a) if a == "o"
                            else a for a in argv])
    assert rc == 1 and message in err and "Traceback" not in err


def test_without_pyarrow_names_the_extra(capture: Path, tmp_path: Path):
    code = ("import sys; sys.modules['pyarrow'] = None; from roce.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    for argv in (["decode", "-T", "parquet", "-w", str(tmp_path / "o.parquet")],
                 ["stats", "-T", "parquet", "-w", str(tmp_path / "d")]):
        p = subprocess.run([sys.executable, "-c", code, *argv, str(capture)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 1, p.stderr
        assert 'pip install "roce[parquet]"' in p.stderr and "Traceback" not in p.stderr
    # the base commands do not need it
    p = subprocess.run([sys.executable, "-c", code, "stats", str(capture)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


# The child runs under a small interpreter: ru_maxrss of its one child counts that child's
# pages only (a fork of this test process would count the pages they shared).  RLIMIT_AS
# turns memory that grows with the input into a failure, not a machine out of memory.
_TRAMPOLINE = ("import resource, subprocess, sys\n"
               "limit = int(sys.argv[1])\n"
               "if limit:\n"
               "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
               "p = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL)\n"
               "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
AS_LIMIT = 2 << 30


def peak_rss_mb(cmd: list[str], limit: int = AS_LIMIT) -> float:
    """Peak RSS (MB) of ``cmd``, run with ``limit`` bytes of address space; it must succeed."""
    out = subprocess.run([sys.executable, "-c", _TRAMPOLINE, str(limit), *cmd],
                         capture_output=True, text=True, timeout=600)
    code, rss = out.stdout.split()
    assert code == "0", (cmd, out.stderr[-2000:])
    return int(rss) / 1024


def import_baseline_mb() -> float:
    """What importing pyarrow and roce costs: the floor every decode run stands on."""
    return peak_rss_mb([sys.executable, "-c", "import pyarrow, roce"])


def assert_flat(small: float, big: float, base: float) -> None:
    """Memory flat in the input: the bigger run's working set (peak above the import
    baseline) is the smaller run's, within 15 % and 5 MB of measurement noise, so a bigger
    pyarrow moves both and the baseline alike, and only growth with the input fails."""
    assert big - base <= 1.15 * (small - base) + 5, (small, big, base)


def test_memory_stays_flat(tmp_path: Path):
    """Peak RSS writing every column of a 100 MB capture, against the same command on
    40 MB of it (both past the first row group): streaming means more than twice the input
    costs no more memory (bench/bench_parquet.py measures the 200 MB one)."""
    from bench_decode import make_big_capture

    small, big = tmp_path / "s.pcap", tmp_path / "b.pcap"
    make_big_capture(small, 40_000_000)
    make_big_capture(big, 100_000_000)
    cmd = [sys.executable, "-m", "roce", "decode", "-T", "parquet", "-w"]
    rss_small = peak_rss_mb([*cmd, str(tmp_path / "s.parquet"), str(small)])
    rss_big = peak_rss_mb([*cmd, str(tmp_path / "b.parquet"), str(big)])
    assert_flat(rss_small, rss_big, import_baseline_mb())
    assert pq.ParquetFile(tmp_path / "b.parquet").metadata.num_row_groups > 1


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_memory_flat_over_frames_that_are_not_roce(tmp_path: Path, fmt: str):
    """Real captures are mostly not RoCE, and each such frame goes through the record
    decoder: 200,000 one-byte frames take the memory of 70,000 (both past the second row
    group, where the allocator's high-water mark settles: with every family's columns, 542
    with UET's, the second group still adds ~15 MB, the third ~3; under a 2 GB address space,
    where one-row slices, 160 KB a frame, once ran out at 30,000), and every frame is a
    row."""
    paths = {}
    for n in (70_000, 200_000):
        paths[n] = tmp_path / f"{n}.pcap"
        with PcapWriter(paths[n]) as w:
            for i in range(n):
                w.write(bytes([i & 0xFF]), ts_ns=i * 1000)
    cmd = [sys.executable, "-m", "roce", "decode", "-T", fmt, "-w"]
    rss = {n: peak_rss_mb([*cmd, str(tmp_path / f"{n}.{fmt}"), str(p)])
           for n, p in paths.items()}
    assert_flat(rss[70_000], rss[200_000], import_baseline_mb())
    if fmt == "parquet":
        t = pq.read_table(tmp_path / "200000.parquet", columns=["frame.number", "frame.len"])
    else:
        with pa.ipc.open_stream(tmp_path / "200000.arrow") as r:
            t = r.read_all().select(["frame.number", "frame.len"])
    assert t["frame.number"].to_pylist() == list(range(1, 200_001))
    assert set(t["frame.len"].to_pylist()) == {1}


def test_stats_tables_answer_sql(capture: Path, tmp_path: Path):
    d = tmp_path / "tables"
    rc, _, err = roce_cli("stats", "-T", "parquet", "-w", str(d), str(capture))
    assert rc == 0, err
    rc, out, _ = roce_cli("stats", "-T", "json", str(capture))
    report = json.loads(out)
    flows = d / "flows.parquet"
    expert = d / "expert.parquet"
    got = duckdb.sql(f"""SELECT src, dst, qp, packets, "psn.gaps", naks
                         FROM read_parquet('{flows}') ORDER BY id""").fetchall()
    want = [(f["src"], f["dst"], f["qp"], f["packets"], (f["psn"] or {}).get("gaps"),
             f["naks"]) for f in report["flows"]]
    assert got == want
    # which QPs saw NAKs
    qps = duckdb.sql(f"""SELECT DISTINCT qp FROM read_parquet('{flows}')
                         WHERE cardinality(naks) > 0 ORDER BY qp""").fetchall()
    assert [q for (q,) in qps] == sorted({f["qp"] for f in report["flows"] if f["naks"]})
    assert qps
    counts = dict(duckdb.sql(f"SELECT kind, count(*) FROM read_parquet('{expert}') "
                             "GROUP BY kind").fetchall())
    stored = {}
    for e in report["expert"]["events"]:
        stored[e["kind"]] = stored.get(e["kind"], 0) + 1
    assert counts == stored
    frames = duckdb.sql(f"SELECT frame, text FROM read_parquet('{expert}', "
                        "file_row_number = true) ORDER BY file_row_number").fetchall()
    assert frames == [(e["frame"], e["text"]) for e in report["expert"]["events"]]


def test_schema_doc_lists_every_column():
    from fleet_helpers import REPO

    doc = (REPO / "docs" / "columnar-schema.md").read_text()
    packet = doc.split("## Flows")[0]
    listed = [line.split("`")[1] for line in packet.splitlines() if line.startswith("| `")]
    assert listed == list(columnar.all_columns())
    flows = doc.split("## Flows")[1].split("## Expert")[0]
    for name in tables.flow_schema().names:
        head = name.split(".")[0] + ("." if "." in name else "")
        assert f"`{name}`" in flows or f"`{head}*`" in flows or f"`{name}`," in flows, name
    for name in tables.event_schema().names:
        assert f"`{name}`" in doc.split("## Expert")[1].split("## Congestion")[0], name
    # the other stats tables: each section lists its table's columns
    for title, table in (("## Congestion control: `DIR/congestion.parquet`", "congestion"),
                         ("## PFC and PAUSE: `DIR/pfc.parquet`", "pfc"),
                         ("## CM connections: `DIR/cm.parquet`", "cm"),
                         ("## Completion and round-trip times: `DIR/latency.parquet`",
                          "latency")):
        section = doc.split(title)[1].split("\n## ")[0]
        cells = {c.strip("` ") for line in section.splitlines() if line.startswith("| `")
                 for c in line.split("|")[1].split(",")}
        assert cells == set(tables.STATS_TABLES[table][0]().names), table
    assert set(tables.STATS_TABLES) == {"flows", "expert", "congestion", "pfc", "cm",
                                        "latency", "uet_pdcs"}


def test_guide_sql_runs(capture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The DuckDB queries docs/guide/columnar.md shows, over what the commands it shows
    write."""
    from fleet_helpers import REPO

    guide = (REPO / "docs" / "guide" / "columnar.md").read_text()
    sql = guide.split("```sql\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    cnp = roce.craft("cnp", dqpn=0x22).to_bytes()
    with PcapWriter(tmp_path / "cnps.pcap") as w:
        for i in range(50):
            w.write(cnp, ts_ns=i * 1000 + (i % 3) * 100)
    assert roce_cli("decode", "-T", "parquet", "-w", "out/", str(capture), "cnps.pcap")[0] == 0
    assert roce_cli("stats", "-T", "parquet", "-w", "tables/", str(capture))[0] == 0
    results = [duckdb.sql(q).fetchall() for q in sql.split(";") if q.strip()]
    naks, p99 = results
    assert naks and all(n for *_, n in naks)
    (host, value), = p99
    assert host == "10.0.0.2" and 0.9 < value <= 1.2  # gaps of 0.9, 1.1 and 1.0 us


def _plain_rows(path: Path) -> list[dict]:
    """A Parquet table's rows, times and durations as integer nanoseconds."""
    t = pq.read_table(path)
    cols = [c.cast(pa.int64()) if pa.types.is_duration(c.type) or pa.types.is_timestamp(c.type)
            else c for c in t.columns]
    return pa.Table.from_arrays(cols, names=t.column_names).to_pylist()


def test_stats_tables_carry_congestion_pfc_and_cm(tmp_path: Path) -> None:
    """-T parquet writes the report's congestion-control, PFC and CM sections as tables too,
    for several captures and for --merge, each row equal to the JSON report's."""
    import cc_helpers
    from cm_helpers import cm_frames

    cc_cap = cc_helpers.write_capture(tmp_path / "cc.pcap")
    cm_cap = tmp_path / "cm.pcap"
    with PcapWriter(str(cm_cap), linktype=247) as w:
        for i, f in enumerate(cm_frames()):
            w.write(f, ts_ns=1_700_000_000_000_000_000 + i * 1000)
    reports = {}
    for cap in (cc_cap, str(cm_cap)):
        rc, out, err = roce_cli("stats", "-T", "json", "--cnp-interval", "20us", cap)
        assert rc == 0, err
        reports[Path(cap).name] = json.loads(out)
    for merged in (False, True):
        d = tmp_path / f"tables{int(merged)}"
        rc, _, err = roce_cli("stats", "-T", "parquet", "--cnp-interval", "20us", "-w", str(d),
                              *(["--merge"] if merged else []), cc_cap, str(cm_cap))
        assert rc == 0, err
        assert sorted(p.name for p in d.iterdir()) == sorted(
            f"{t}.parquet" for t in tables.STATS_TABLES)
        got = {t: _plain_rows(d / f"{t}.parquet") for t in tables.STATS_TABLES}
        cc = got["congestion"]
        pfc = got["pfc"]
        cm = got["cm"]
        if merged:  # one session: one report, its own numbering
            rc, out, err = roce_cli("stats", "-T", "json", "--cnp-interval", "20us", "--merge",
                                    cc_cap, str(cm_cap))
            doc = json.loads(out)
            want_cc, want_pfc, want_cm = (doc["congestion"]["flows"], doc["pfc"]["classes"],
                                          doc["cm_connections"])
        else:
            want_cc = reports["cc.pcap"]["congestion"]["flows"]
            want_pfc = reports["cc.pcap"]["pfc"]["classes"]
            want_cm = reports["cm.pcap"]["cm_connections"]
            assert {r["capture"] for r in cc} == {cc_cap}
            assert {r["capture"] for r in cm} == {str(cm_cap)}
        assert [(r["flow"], r["qp"], r["cnps"], r["ecn_ce"], r["data_packets"],
                 r["ce_fraction"], r["cnp_rate_per_s"]) for r in cc] == [
            (w["flow"], w["qp"], w["cnps"], w["ecn_ce"], w["data_packets"], w["ce_fraction"],
             w["cnp_rate_per_s"]) for w in want_cc]
        assert [r["cnp_min_gap"] for r in cc] == [w["cnp_min_gap_ns"] for w in want_cc]
        assert sum(r["cnps"] for r in cc) == len(cc_helpers.CNPS)
        assert sum(r["ecn_ce"] for r in cc) == sum(ce for _, _, ce in cc_helpers.DATA)
        assert [(r["from"], r["priority"], r["pauses"], r["xons"], r["paused"])
                for r in pfc] == [(w["from"], str(w["priority"]), w["pauses"], w["xons"],
                                   round(w["paused_ns"])) for w in want_pfc]
        assert pfc and sum(r["pauses"] for r in pfc) == 1 and sum(r["xons"] for r in pfc) == 1
        assert [(r["active_qpn"], r["passive_qpn"], r["state"], r["cm_frames"],
                 r["first_psn_to_passive"], r["problems"]) for r in cm] == [
            (w["active_qpn"], w["passive_qpn"], w["state"], w["cm_frames"],
             w["first_psn_to_passive"], w["problems"]) for w in want_cm]
        assert len(cm) == 1 and cm[0]["state"] == "RTU"
        # the cnp_interval warning reached the expert table as well
        assert any(r["kind"] == "cnp_interval" for r in got["expert"])
