"""Many captures at once: files, directories and globs; ``-j`` workers; ``stats --merge``
over a capture cut into ten pieces; each file its own report plus a total; bad members
reported and skipped (exit 2); one progress bar for the set, on a terminal."""

from __future__ import annotations

import heapq
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fleet_helpers import make_capture, roce_cli, split_capture, write_frames
from hypothesis import given
from hypothesis import strategies as st
from test_progress import run_on_terminal

from roce import macc
from roce.cli import _fleet as fleetcmd
from roce.decoder import multifile
from roce.pcapio import Batch, open_capture

EMU, PFC_EVERY = 3993, 500
PACKETS = EMU + EMU // PFC_EVERY  # 4000 frames
CUTS = [1, 397, 398, 1200, 1999, 2500, 2501, 3333, 3999]  # 10 pieces, some of one frame


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Emulator traffic with a PFC frame after every 500th packet (PAUSE accounting crosses
    the file boundaries too)."""
    d = tmp_path_factory.mktemp("multi")
    assert make_capture(d / "emu.pcap", EMU) == EMU
    frames = []
    for i, f in enumerate(open_capture(d / "emu.pcap"), 1):
        frames.append(f)
        if not i % PFC_EVERY:
            pfc = macc.build_pfc(bytes.fromhex("020000000009"), {3: 0xFFFF, 5: i})
            frames.append(f._replace(data=pfc, caplen=len(pfc), origlen=len(pfc)))
    assert len(frames) == PACKETS
    return write_frames(d / "whole.pcap", frames)


@pytest.fixture(scope="module")
def pieces(capture: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return split_capture(capture, tmp_path_factory.mktemp("pieces"), CUTS)


def stats_json(*argv: str) -> tuple[int, dict, str]:
    rc, out, err = roce_cli("stats", "-T", "json", *argv)
    return rc, json.loads(out) if out else {}, err


REPORT_KEYS = ("totals", "connections", "flows", "expert", "pfc")


def _untitled(text: str) -> str:
    return re.sub(r"Totals: .*\n=+\n", "", text)


def test_merge_of_ten_pieces_is_the_whole(capture: Path, pieces: list[Path]):
    assert len(pieces) == 10
    rc, whole, _ = stats_json(str(capture))
    assert rc == 0
    # given as a directory, as a glob, and as names out of order: time order decides
    for argv in ([str(pieces[0].parent)], [str(pieces[0].parent / "part*.pcap")],
                 [str(p) for p in reversed(pieces)]):
        rc, merged, err = stats_json("--merge", *argv)
        assert rc == 0, err
        for key in REPORT_KEYS:
            assert merged[key] == whole[key], key
    assert whole["totals"]["gaps"] or whole["totals"]["retransmissions"]  # a real test
    assert whole["pfc"] and whole["totals"]["not_roce"] == EMU // PFC_EVERY
    # and the text report is the same one, bar its title
    rc, text_whole, _ = roce_cli("stats", str(capture))
    rc, text_merged, _ = roce_cli("stats", "--merge", str(pieces[0].parent))
    assert _untitled(text_merged) == _untitled(text_whole)
    assert "Totals: 10 captures merged" in text_merged


def test_without_merge_each_file_and_a_total(pieces: list[Path]):
    rc, doc, err = stats_json("-j", "1", *map(str, pieces))
    assert rc == 0, err
    assert [f["capture"]["file"] for f in doc["files"]] == [str(p) for p in pieces]
    for piece, rep in zip(pieces, doc["files"]):
        rc, alone, _ = stats_json(str(piece))
        for key in REPORT_KEYS:
            assert rep[key] == alone[key]
    tot = doc["total"]["totals"]
    assert tot["frames"] == PACKETS == sum(f["totals"]["frames"] for f in doc["files"])
    assert tot["flows"] == sum(f["totals"]["flows"] for f in doc["files"])
    assert tot["first_ns"] == doc["files"][0]["totals"]["first_ns"]
    assert tot["last_ns"] == doc["files"][-1]["totals"]["last_ns"]
    rc, text, _ = roce_cli("stats", "-j", "1", *map(str, pieces))
    assert text.count("Totals: ") == 11 and "Totals: 10 of 10 captures" in text


def test_workers_and_one_process_agree(pieces: list[Path]):
    one = stats_json("-j", "1", str(pieces[0].parent))
    two = stats_json("-j", "2", str(pieces[0].parent))
    assert one == two and one[0] == 0


def test_bad_members_are_reported_and_skipped(capture: Path, pieces: list[Path],
                                              tmp_path: Path):
    d = tmp_path / "set"
    d.mkdir()
    good = []
    for p in pieces[:3]:
        (d / p.name).write_bytes(p.read_bytes())
        good.append(d / p.name)
    (d / "empty.pcap").write_bytes(b"")
    (d / "junk.pcap").write_bytes(b"this is not a capture at all")
    (d / "cut.pcap").write_bytes(capture.read_bytes()[:30_000])  # ends mid-record
    missing = str(tmp_path / "nope.pcap")
    for jobs in ("1", "2"):
        rc, doc, err = stats_json("-j", jobs, str(d), missing)
        assert rc == 2
        assert "empty.pcap" in err and "junk.pcap" in err and "nope.pcap" in err
        assert "cut.pcap: capture truncated" in err  # reported; its whole frames count
        names = [f["capture"]["file"] for f in doc["files"]]
        assert names == [str(d / "cut.pcap"), *map(str, good)]
        assert {f["file"] for f in doc["failed"]} == {str(d / "empty.pcap"),
                                                      str(d / "junk.pcap"), missing}
        for g, rep in zip(good, doc["files"][1:]):
            assert rep["totals"] == stats_json(str(g))[1]["totals"]
    rc, merged, err = stats_json("--merge", str(d))
    assert rc == 2 and merged["totals"]["frames"] > sum(
        stats_json(str(g))[1]["totals"]["frames"] for g in good)


def test_decode_many_into_a_directory(pieces: list[Path], tmp_path: Path):
    out = tmp_path / "out"
    rc, _, err = roce_cli("decode", "-T", "parquet", "-j", "2", "-w", str(out),
                          "-e", "frame.number", "-e", "bth.psn", str(pieces[0].parent))
    assert rc == 0, err
    files = sorted(out.iterdir())
    assert [f.name for f in files] == [p.with_suffix(".parquet").name for p in pieces]
    for piece, f in zip(pieces, files):
        one = tmp_path / "one.parquet"
        assert roce_cli("decode", "-T", "parquet", "-w", str(one), "-e", "frame.number",
                        "-e", "bth.psn", str(piece))[0] == 0
        assert pq.read_table(f).equals(pq.read_table(one))
    # the text formats take several captures too, one after the other
    rc, text, _ = roce_cli("decode", "-T", "fields", "-e", "bth.psn", *map(str, pieces[:2]))
    rc1, a, _ = roce_cli("decode", "-T", "fields", "-e", "bth.psn", str(pieces[0]))
    rc2, b, _ = roce_cli("decode", "-T", "fields", "-e", "bth.psn", str(pieces[1]))
    assert rc == rc1 == rc2 == 0 and text == a + b


def test_expand(tmp_path: Path):
    for n in ("b.pcap", "a.pcap", ".hidden.pcap", "c.pcapng"):
        (tmp_path / n).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    got = multifile.expand([str(tmp_path), str(tmp_path / "*.pcap"), "x.pcap"])
    assert got == [str(tmp_path / n) for n in ("a.pcap", "b.pcap", "c.pcapng", "a.pcap",
                                               "b.pcap")] + ["x.pcap"]
    assert multifile.expand([str(tmp_path / "zz*.pcap")]) == [str(tmp_path / "zz*.pcap")]


def test_sum_totals_of_nothing_is_zero():
    t = fleetcmd.sum_totals([])
    assert t["frames"] == 0 and t["duration"] == 0 and t["first_ns"] is None


def test_one_bar_for_the_set_on_a_terminal(pieces: list[Path]):
    status, term, out = run_on_terminal(["stats", "-j", "2", str(pieces[0].parent)],
                                        after="0")
    assert status == 0 and out
    assert "analysing" in term and "/10 files" in term
    assert "kB" in term or "MB" in term  # bytes of the whole set
    assert term.count("/10 files") >= 1 and b"files" not in out


@given(st.lists(st.lists(st.lists(st.integers(0, 12), max_size=6), max_size=4), max_size=4))
def test_merged_batches_merge_like_heapq(sources):
    """Frames (tagged with their capture and place) come out in heapq.merge's order, whatever
    the overlap, equal times and empty batches."""
    batches, frames = [], []
    for i, src in enumerate(sources):
        mine, flat, k = [], [], 0
        for tss in src:
            datas = [f"{i}:{k + j}".encode() for j in range(len(tss))]
            k += len(tss)
            mine.append(Batch(datas, tss, [1] * len(tss), [1] * len(tss), 1))
            flat += list(zip(tss, datas))
        batches.append(mine)
        frames.append(flat)
    want = [d for _, d in heapq.merge(*frames, key=lambda f: f[0])]
    got = [d for b in multifile.merged_batches(batches) for d in b.datas]
    assert got == want
