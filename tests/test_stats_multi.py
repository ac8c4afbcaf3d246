"""``roce stats`` over several captures carries the sections one capture gets: congestion
control (CNPs per QP, rate, smallest gap, ``--cnp-interval`` warnings, CE fraction) and the
CM pairing of native InfiniBand, per file (in this process and in workers) and for
``--merge``, in text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cc_helpers import write_capture
from cm_helpers import cm_frames
from fleet_helpers import roce_cli

from roce.families.ib import native as ib
from roce.pcapio import PcapWriter, open_capture

SECTIONS = ("congestion", "expert")


def stats_json(*argv: str) -> dict:
    rc, out, err = roce_cli("stats", "-T", "json", *argv)
    assert rc == 0, err
    return json.loads(out)


def write_cm_capture(path: Path) -> str:
    with PcapWriter(path, linktype=ib.LINKTYPE_INFINIBAND) as w:
        for n, f in enumerate(cm_frames()):
            w.write(f, ts_ns=n * 1000)
    return str(path)


def split(src: str, directory: Path, cut: int) -> list[str]:
    """``src`` in two files, cut before frame ``cut`` (link type and times kept)."""
    frames = list(open_capture(src))
    directory.mkdir()
    out = []
    for i, part in enumerate((frames[:cut], frames[cut:])):
        path = directory / f"part{i}.pcap"
        with PcapWriter(path, linktype=part[0].linktype) as w:
            for f in part:
                w.write(f.data, ts_ns=f.ts_ns)
        out.append(str(path))
    return out


@pytest.fixture()
def caps(tmp_path: Path) -> tuple[str, str]:
    return write_capture(tmp_path / "cc.pcap"), write_cm_capture(tmp_path / "cm.pcap")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_each_file_gets_the_sections_of_a_capture_alone(caps, jobs):
    cc, cm = caps
    argv = ("--cnp-interval", "20us")
    many = stats_json("-j", jobs, *argv, cc, cm)
    alone_cc, alone_cm = stats_json(*argv, cc), stats_json(*argv, cm)
    got_cc, got_cm = many["files"]
    for key in SECTIONS:
        assert got_cc[key] == alone_cc[key], key
        assert got_cm[key] == alone_cm[key], key
    # a real section: the CNPs to the sender's QP 0x11, 10 us apart at the closest
    assert {r["qp"]: r["cnp_min_gap_ns"] for r in got_cc["congestion"]["flows"]} == {
        0x11: 10_000, 0x22: None}
    assert got_cc["expert"]["counts"]["cnp_interval"] == 1
    assert got_cm["cm_connections"] == alone_cm["cm_connections"]
    assert got_cm["cm_connections"][0]["passive_qpn"] == 0x22
    assert "cm_connections" not in got_cc  # RoCE: no CM pairing, as alone
    assert many["total"]["expert_counts"]["cnp_interval"] == 1
    # text: each file's report is the report of that capture alone, word for word
    _, text, _ = roce_cli("stats", "-j", jobs, *argv, cc, cm)
    _, text_cc, _ = roce_cli("stats", *argv, cc)
    _, text_cm, _ = roce_cli("stats", *argv, cm)
    assert text_cc in text and text_cm in text
    assert "Congestion control: CNPs and ECN CE per QP" in text_cc and "cnp interval" in text_cc
    assert "CM connection 1" in text_cm and "first PSN 501" in text_cm


def test_merge_has_the_sections_of_the_whole(caps, tmp_path):
    cc, cm = caps
    # cut between the CNPs at 25 us and 35 us: their 10 us gap spans two files
    cc_parts = split(cc, tmp_path / "ccp", 5)
    cm_parts = split(cm, tmp_path / "cmp", 2)
    for whole, parts in ((cc, cc_parts), (cm, cm_parts)):
        alone = stats_json("--cnp-interval", "20us", whole)
        merged = stats_json("--merge", "--cnp-interval", "20us", *parts)
        for key in (*SECTIONS, "flows"):
            assert merged[key] == alone[key], key
        assert merged.get("cm_connections") == alone.get("cm_connections")
    # merged: one series per QP across files; per file: each file's own CNPs only
    per_file = stats_json("--cnp-interval", "20us", *cc_parts)["files"]
    gaps = [[r["cnp_min_gap_ns"] for r in f["congestion"]["flows"] if r["cnps"]]
            for f in per_file]
    assert gaps == [[None], [40_000]]  # 25 us alone; 35 us and 75 us
    assert all("cnp_interval" not in f["expert"]["counts"] for f in per_file)
    _, text, _ = roce_cli("stats", "--merge", *cm_parts)
    assert "CM connection 1" in text and "RTU" in text


@pytest.mark.parametrize("counts", [(20, 10), (40, 30)])
def test_totals_of_several_captures_time_every_message_together(tmp_path: Path, counts) -> None:
    """The totals of several captures carry the completion and ACK round-trip times of all
    their messages together (histograms merged), not one capture's nor a mix of each one's
    percentiles: two captures whose messages each complete in one time give the nearest-rank
    percentiles of the two times with their counts (exact up to ``LATENCY_EXACT`` values,
    within half a bucket beyond)."""
    from roce.analysis.flowrules import LATENCY_EXACT, LATENCY_SUB_BITS

    paths = []
    for name, size, count in (("a", "16K", counts[0]), ("b", "64K", counts[1])):
        path = tmp_path / f"{name}.pcap"
        rc, _, err = roce_cli("emulate", "--size", size, "--count", str(count), "-w", str(path))
        assert rc == 0, err
        paths.append(str(path))
    one = [stats_json(p)["latency"]["completion_ns"] for p in paths]
    assert all(s["min"] == s["max"] for s in one)  # each capture: a single completion time
    (fast, n_fast), (slow, n_slow) = sorted((s["min"], n) for s, n in zip(one, counts))
    both = stats_json(*paths)["total"]["latency"]["completion_ns"]
    n = n_fast + n_slow
    want = {q: fast if -(-n * q // 100) <= n_fast else slow for q in (50, 99)}
    assert (both["min"], both["max"]) == (fast, slow)
    if n <= LATENCY_EXACT:
        assert (both["p50"], both["p99"]) == (want[50], want[99])
    else:
        for q in (50, 99):
            assert abs(both[f"p{q}"] - want[q]) <= want[q] / (1 << (LATENCY_SUB_BITS + 1))
    rc, out, _ = roce_cli("stats", *paths)
    assert rc == 0
    total = out[out.index("Totals: 2 of 2 captures"):]
    assert "completion p50 / p99" in total and "ACK RTT p50 / p99" in total
