"""The compiled native InfiniBand line formatter (roce._fastpath.ib_lines) against its
pure-Python twin (roce.families.ib.lines.format_reference), and the one-line output of
``roce decode`` with either of them against the per-record path; the start-up look for
plugins (registry.may_have_plugins) those runs take."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_families import _cli, _mixed_ib_frames, ib_frames_with_flips

from roce.families import erf
from roce.families.ib import flags as ibflags
from roce.families.ib import lines as iblines
from roce.families.ib import native as ib
from roce.opcodes import OPCODES
from roce.pcapio import PcapWriter

needs_ext = pytest.mark.skipif(iblines._EXT is None, reason="compiled fast path not built")


TIMES = st.one_of(st.just("0.000001000"), st.text(st.characters(codec="utf-8",
                                                                 exclude_categories=["Cs"]),
                                                  max_size=210))


@needs_ext
@given(picks=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 400), st.integers(0, 255)),
                      min_size=1, max_size=16),
       first=st.integers(1, 10**12), times=st.lists(TIMES, min_size=16, max_size=16),
       arrow=st.sampled_from([b"->", "\u2192".encode(), b"", b"=" * 65]),
       short=st.integers(0, 3))
def test_ib_lines_twins_agree(picks: list, first: int, times: list[str], arrow: bytes,
                              short: int) -> None:
    frames = ib_frames_with_flips(picks)
    cols = ib.scan_columns(len(frames))
    ib.scan_batch(frames, cols)
    n = max(0, len(frames) - short)  # -c stops inside a batch: only n lines are made
    origlens = [len(f) + k for k, f in enumerate(frames)]
    args = (frames, cols, n, first, times[:len(frames)], origlens, arrow)
    assert iblines._EXT.ib_lines(*args) == iblines.format_reference(*args)


@needs_ext
@given(picks=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 400), st.integers(0, 255)),
                      min_size=1, max_size=16),
       base=st.integers(0, 2**62), offsets=st.lists(st.integers(-10, 2 * 10**9), min_size=16,
                                                     max_size=16),
       sec=st.integers(0, 10**6), digits=st.sampled_from([9, 6]))
def test_ib_lines_time_plan_twins_agree(picks: list, base: int, offsets: list[int], sec: int,
                                        digits: int) -> None:
    """The time column written from a TimeColumn.relative_plan: stamps inside the plan's
    second, and (never made by the plan, but guarded) outside it."""
    frames = ib_frames_with_flips(picks)
    cols = ib.scan_columns(len(frames))
    ib.scan_batch(frames, cols)
    stamps = array("q", [base + o for o in offsets[:len(frames)]])
    times = (f"{sec}.".encode(), base, digits, stamps)
    args = (frames, cols, len(frames), 1, None, [len(f) for f in frames], b"->", times)
    assert iblines._EXT.ib_lines(*args) == iblines.format_reference(*args)


def test_time_plan_is_the_relative_column() -> None:
    """relative_plan's texts are batch()'s, and it leaves the column where batch() does."""
    from roce.families.base.summary import TimeColumn

    stamps = array("q", [5 * 10**9 + 7, 5 * 10**9 + 900_000_123, 5 * 10**9 + 999_999_999])
    for digits in (9, 6):
        a, b = TimeColumn("r", digits), TimeColumn("r", digits)
        a.first = b.first = 10**9 + 3  # the capture started earlier
        plan = a.relative_plan(stamps, 2)
        assert plan is not None
        want = b.batch(stamps, range(2))
        assert [iblines._planned_time((plan[0].encode(), plan[1], plan[2], stamps), i)
                for i in range(2)] == want
        assert (a.prev, a.prev_shown) == (b.prev, b.prev_shown)
    across = array("q", [10**9, 2 * 10**9 + 1])  # two seconds: no plan
    assert TimeColumn("r", 9).relative_plan(across, 2) is None
    assert TimeColumn("d", 9).relative_plan(stamps, 3) is None


@needs_ext
def test_ib_lines_cover_the_common_opcodes() -> None:
    """The compiled formatter makes the lines of whole, non-UD packets with at most one
    extended header itself (the point of it); the rest are left to Python."""
    frames = _mixed_ib_frames()
    cols = ib.scan_columns(len(frames))
    ib.scan_batch(frames, cols)
    texts = ["0.000000000"] * len(frames)
    lines, missing = iblines._EXT.ib_lines(frames, cols, len(frames), 1, texts,
                                           [len(f) for f in frames], b"->")
    made = [i for i, line in enumerate(lines) if line is not None]
    assert set(missing) == set(range(len(frames))) - set(made)
    for i in made:
        assert not cols["status"][i] and cols["opcode"][i] not in iblines._UD_OPCODES
    ops_made = {cols["opcode"][i] for i in made}
    assert {op.code for op in OPCODES.values() if op.ident in (
        "RC_SEND_ONLY", "RC_RDMA_WRITE_FIRST", "RC_ACKNOWLEDGE",
        "RC_RDMA_READ_REQUEST")} <= ops_made
    assert any(cols["status"][i] for i in missing)  # the cut and raw frames


@pytest.mark.parametrize("linktype,nano", [(247, True), (197, True), (247, False)])
@pytest.mark.parametrize("gap", [1234, 300_000_000])
def test_decode_lines_same_with_either_twin(tmp_path: Path, linktype: int, nano: bool, gap: int,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch within one second (the time plan) and across seconds (time texts), in
    nanosecond and microsecond files: the same lines as the per-record path."""
    frames = _mixed_ib_frames() * 3
    if linktype == 197:
        frames = [erf.record(f) for f in frames]
    p = tmp_path / "m.pcap"
    with PcapWriter(p, linktype=linktype, nanosecond=nano) as w:
        for k, f in enumerate(frames):
            w.write(f, ts_ns=10**18 + k * gap)
    records = _cli(capsys, "decode", "-Y", "frame.number > 0", str(p))
    assert _cli(capsys, "decode", str(p)) == records
    monkeypatch.setattr(iblines, "format_batch", iblines.format_reference)
    assert _cli(capsys, "decode", str(p)) == records
    assert _cli(capsys, "decode", "-t", "d", str(p)) == _cli(
        capsys, "decode", "-t", "d", "-Y", "frame.number > 0", str(p))
    assert _cli(capsys, "decode", "-c", "5", str(p)) == "".join(
        records.splitlines(keepends=True)[:5])


def test_fecn_becn_and_ib_cnp_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """BTH FECN / BECN show as [FECN] / [BECN], where RoCE's line shows IP's [ECN CE], in
    the compiled lines, their twin and the per-record path alike; the IB CNP's line is
    RoCE's CNP line (no PSN), with the BECN it carries."""
    frames = _mixed_ib_frames()
    p = tmp_path / "f.pcap"
    with PcapWriter(p, linktype=247) as w:
        for k, f in enumerate(frames):
            w.write(f, ts_ns=k)
    fast = _cli(capsys, "decode", str(p)).splitlines()
    assert _cli(capsys, "decode", "-Y", "frame.number > 0", str(p)).splitlines() == fast
    monkeypatch.setattr(iblines, "format_batch", iblines.format_reference)
    assert _cli(capsys, "decode", str(p)).splitlines() == fast
    tails = [ln.split("PSN=0", 1)[1] for ln in fast[-4:-1]]
    assert tails == [" [AckReq] [FECN]", " [AckReq] [BECN]", " [AckReq] [FECN] [BECN]"]
    assert fast[-1].endswith("InfiniBand 26 CNP QP=0x000077 [BECN]")
    assert not any("FECN" in ln or "BECN" in ln for ln in fast[:-4])
    assert ibflags.IB_FLAG_TEXT[ibflags.flag_index(True, True, True, False, False)] == (
        " [AckReq] [FECN] [BECN] [BAD ICRC] [BAD VCRC]")


def test_plugin_look_agrees_with_importlib_metadata(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """registry.may_have_plugins (which spares a run the import of importlib.metadata) says
    yes whenever importlib.metadata finds a roce.families entry point."""
    import importlib.metadata as md

    from roce.families.builtin import may_have_plugins

    def found() -> bool:
        return bool(list(md.entry_points(group="roce.families")))

    assert may_have_plugins() or not found()
    dist = tmp_path / "toyplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[roce.families]\ntoy = toy_plugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert found() and may_have_plugins()
    (dist / "entry_points.txt").write_text("[console_scripts]\ntoy = toy_plugin:main\n")
    assert may_have_plugins() or not found()
    (tmp_path / "pkgs.zip").write_bytes(b"PK\x05\x06" + bytes(18))  # unsure: a zip
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs.zip"))
    assert may_have_plugins()


def test_selective_naks_on_native_ib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """AETHs that may be a selective NAK are left to Python (summary.aeth_text): the fast
    lines name the ePSN and the out-of-order PSN as the record path does."""
    from types import SimpleNamespace

    from test_stats import ack, write_only
    from test_stats_spurious import sack

    from roce.families import craft
    from roce.headers import AETH_NAK, NAK_PSN_SEQUENCE_ERROR

    eth = [write_only(0), ack(0, msn=1), sack(1, 3),
           ack(1, AETH_NAK, NAK_PSN_SEQUENCE_ERROR, msn=1), ack(1, AETH_NAK, 2, msn=3)]
    args = SimpleNamespace(vl=0, sl=0, dlid=1, slid=2)
    p = tmp_path / "sr.pcap"
    with PcapWriter(p, linktype=247) as w:
        for k, f in enumerate(eth):
            w.write(craft.to_ib(f, args), ts_ns=k * 1000)
    fast = _cli(capsys, "decode", str(p))
    assert fast == _cli(capsys, "decode", "-Y", "frame.number > 0", str(p))
    assert "NAK PSN-sequence-error, selective: ePSN=1, PSN=3 out of order" in fast
    assert fast.count("selective") == 1
