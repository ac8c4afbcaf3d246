"""ERF records (pcap link type 197): a frame's lengths and time are the record's packet's, as
tshark counts them: ``frame.len`` is the record's ``wlen`` (not the pcap record's length, which
holds the ERF header and padding), ``frame.cap_len`` what the capture holds of the packet, and
the time is the ERF header's nanoseconds (the pcap record's may be microseconds).  Every
output agrees: the one-line Length, ``-V``, ``-T fields``, JSON and the columnar rows."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from tshark_oracle import TSHARK, fields_command

import roce
from roce.cli import main
from roce.families import erf
from roce.families.ib import native as ib
from roce.locate import walk
from roce.pcapio import PcapWriter

T0 = 1_700_000_000_000_069_015  # an ERF time with nanoseconds (tshark: ...0.000069015)


def _ib_packet() -> bytes:
    from roce.families import craft

    raw = roce.craft("RC_SEND_ONLY", b"abcdefg", dqpn=0x123, psn=77).to_bytes()
    w = walk(raw)
    return ib.build(craft.ib_transport(raw, w.bth_off, w.icrc_off))


def _records() -> list[tuple[bytes, int]]:
    """(record, ERF time in ns): plain, with extension headers, wlen above and below what
    the record holds, Ethernet with its pad, and an FCS counted in wlen only."""
    p = _ib_packet()
    eth = roce.craft("RC_SEND_ONLY", b"xy", dqpn=0x11, psn=5).to_bytes()
    shapes = [dict(payload=p), dict(payload=p, extensions=(1, 2)),
              dict(payload=p, wlen=len(p) + 66), dict(payload=p, wlen=20),
              dict(payload=eth, rtype=erf.ERF_TYPE_ETH),
              dict(payload=eth, rtype=erf.ERF_TYPE_ETH, wlen=len(eth) + 4)]
    out = []
    for i, kw in enumerate(shapes):
        ns = T0 + i * 1_234_567 + (i * 7919) % 1000  # sub-microsecond parts
        out.append((erf.record(ts=erf.fixed_ts(ns), **kw), ns))
    return out


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    """The records in a microsecond pcap whose record times are not the ERF times."""
    path = tmp_path / "erf.pcap"
    with PcapWriter(path, linktype=197, nanosecond=False) as w:
        for i, (rec, _ns) in enumerate(_records()):
            w.write(rec, ts_ns=i * 1000)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_lengths_and_times_are_the_records(capture: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    records = _records()
    wlens = [erf.wire_length(rec) for rec, _ in records]
    out = _run(capsys, "decode", str(capture), "-T", "fields", "-e", "frame.len", "-e",
               "frame.cap_len", "-e", "frame.time_epoch")
    rows = [line.split("\t") for line in out.splitlines()]
    assert [int(r[0]) for r in rows] == wlens
    held = [len(rec) - 16 - (16 if i == 1 else 2 if i >= 4 else 0)
            for i, (rec, _) in enumerate(records)]  # past the header, extensions, pad
    assert [int(r[1]) for r in rows] == [min(w, h) for w, h in zip(wlens, held)]
    assert [r[2] for r in rows] == [f"{ns // 10**9}.{ns % 10**9:09d}" for _, ns in records]
    # the one-line view: the same length, and times to the nanosecond
    lines = _run(capsys, "decode", str(capture)).splitlines()
    assert [int(re.search(r" (?:InfiniBand|RRoCE) (\d+) ", ln)[1]) for ln in lines] == wlens
    first = records[0][1]
    assert [ln.split()[1] for ln in lines] == [
        f"{(ns - first) // 10**9}.{(ns - first) % 10**9:09d}" for _, ns in records]
    # -V says the same
    tree = _run(capsys, "decode", "-V", str(capture))
    assert [int(n) for n in re.findall(r"^Frame \d+: (\d+) bytes on wire", tree, re.M)] == wlens
    # JSON and the columnar rows too
    doc = [json.loads(x) for x in _run(capsys, "decode", "-T", "jsonl", str(capture))
           .splitlines()]
    assert [d["frame.len"] for d in doc] == wlens
    assert [d["frame.time_ns"] for d in doc] == [ns for _, ns in records]


def test_columnar_rows_have_the_records_lengths(capture: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "erf.parquet"
    assert main(["decode", "-T", "parquet", "-w", str(out), str(capture)]) == 0
    t = pq.read_table(out, columns=["frame.len", "frame.time_epoch"])
    assert t["frame.len"].to_pylist() == [erf.wire_length(rec) for rec, _ in _records()]
    times = t["frame.time_epoch"].cast("int64").to_pylist()
    assert times == [ns for _, ns in _records()]


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_counts_the_same(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = ["frame.len", "frame.cap_len", "frame.time_epoch", "frame.time_relative",
             "frame.time_delta"]
    theirs = subprocess.run(fields_command(capture, names), capture_output=True, text=True,
                            check=True, timeout=120).stdout.splitlines()
    argv = ["decode", str(capture), "-T", "fields"]
    for n in names:
        argv += ["-e", n]
    assert _run(capsys, *argv).splitlines() == theirs
    assert len(theirs) == len(_records())
