"""``roce decode``'s one-line text: the compiled formatter (``roce._fastpath.roce_lines``,
driven by ``Summarizer.fast_lines``) against its Python twin (``Summarizer.python_lines``):
the same lines for every frame of drawn batches, good, broken, cut or not RoCE, in every
time mode, across batches (the time column's state carries over)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples
from test_decode_text import captures

from roce import craft, fast
from roce.families.base import summary
from roce.pcapio import Batch, Frame


def slow(i: int, time_text: str) -> str:
    return f"slow {i} {time_text}"  # the frames the walk did not pass: not this test's


def batches(frames: list[Frame], cut: int) -> list[Batch]:
    """The frames as two batches (split at ``cut``) of their link type."""
    parts = [frames[:cut], frames[cut:]]
    return [Batch([f.data for f in p], [f.ts_ns for f in p], [f.caplen for f in p],
                  [f.origlen for f in p], p[0].linktype) for p in parts if p]


def both(frames: list[Frame], mode: str, digits: int, first: int,
         cut: int) -> tuple[list[str], list[str]]:
    compiled = summary.Summarizer(summary.TimeColumn(mode, digits))
    python = summary.Summarizer(summary.TimeColumn(mode, digits))
    got: list[str] = []
    want: list[str] = []
    for batch in batches(frames, cut):
        n = len(batch.datas)
        got += compiled.fast_lines(batch, first, False, 10**9, slow)
        cols = python._scan(batch.datas, batch.linktype)
        want += python.python_lines(batch, cols, first, range(n),
                                    python.times.batch(batch.ts_ns, range(n)), slow)
        first += n
    return got, want


def test_the_compiled_formatter_is_built() -> None:
    """The twin test below compares two forms only when the extension is there."""
    assert fast._ext is not None and summary._LINES is not None


@st.composite
def same_link(draw: st.DrawFn) -> list[Frame]:
    """``captures`` made one link type (a batch holds one)."""
    frames = draw(captures())
    lt = frames[0].linktype
    return [f for f in frames if f.linktype == lt] * draw(st.integers(1, 3))


@settings(max_examples=examples(80), deadline=None)
@given(same_link(), st.sampled_from(summary.TIME_MODES), st.sampled_from((6, 9)),
       st.sampled_from((1, 9998, 123456)), st.integers(0, 12))
def test_compiled_lines_equal_python_lines(frames: list[Frame], mode: str, digits: int,
                                           first: int, cut: int) -> None:
    got, want = both(frames, mode, digits, first, cut)
    assert got == want


@pytest.mark.parametrize("mode", ["r", "d"])
def test_a_batch_across_seconds(mode: str) -> None:
    """Stamps across a second boundary: no one-second plan, texts from the time column."""
    frames = [Frame(d, ts, len(d), len(d), 1, 0) for d, ts in (
        (craft("RC_SEND_ONLY", b"ab", psn=1).to_bytes(), 999_999_000),
        (craft("RC_RDMA_WRITE_ONLY", b"abcd", psn=2).to_bytes(), 1_000_000_500),
        (craft("RC_ACKNOWLEDGE", b"", psn=2).to_bytes(), 3_000_000_000))]
    got, want = both(frames, mode, 9, 1, 3)
    assert got == want
    assert [line.split()[1] for line in got] == (
        ["0.000000000", "0.000001500", "2.000001000"] if mode == "r" else
        ["0.000000000", "0.000001500", "1.999999500"])


def _with_rests(frames: list[Frame], mode: str, digits: int, first: int,
                rest_of: dict[int, str | None]) -> tuple[list[str], list[str]]:
    """One batch's lines with ``rests`` (another family's text after the time column, by
    frame: what ``rest_lines`` writes in C) and through ``slow`` alone (its Python twin)."""
    batch = batches(frames, len(frames))[0]
    n = len(batch.datas)
    made = [rest_of.get(i) for i in range(n)]

    def slow_rest(i: int, time_text: str) -> str:
        return f"{first + i:5d} {time_text} {made[i]}" if made[i] is not None else \
            slow(i, time_text)

    compiled = summary.Summarizer(summary.TimeColumn(mode, digits))
    python = summary.Summarizer(summary.TimeColumn(mode, digits))
    got = compiled.fast_lines(batch, first, False, 10**9, slow_rest, lambda: made)
    cols = python._scan(batch.datas, batch.linktype)
    want = python.python_lines(batch, cols, first, range(n),
                               python.times.batch(batch.ts_ns, range(n)), slow_rest)
    return got, want


@settings(max_examples=examples(80), deadline=None)
@given(same_link(), st.sampled_from(summary.TIME_MODES), st.sampled_from((6, 9)),
       st.sampled_from((1, 9998, 123456)), st.data())
def test_rest_lines_equal_the_per_frame_path(frames: list[Frame], mode: str, digits: int,
                                             first: int, data: st.DataObject) -> None:
    """The frames RoCE's formatter leaves whose text another family made (UET's, in C)
    are written by ``rest_lines`` as the per-frame path writes them; the others still go
    through ``slow``."""
    rest_of = {i: data.draw(st.one_of(st.none(), st.text(max_size=80)))
               for i in range(len(frames))}
    got, want = _with_rests(frames, mode, digits, first, rest_of)
    assert got == want


def test_a_uet_capture_is_lined_in_c(tmp_path: object) -> None:
    """Every frame of a UET capture gets its line from ``uet_lines`` and ``rest_lines``: no
    per-frame Python call (``slow``)."""
    from roce.emu.uet import uetframes
    from roce.families import registry
    from roce.families.uet import uetlines

    frames = [uetframes.encode({"uet.pds.type": 7, "uet.pds.cack_psn": k}, b"",
                               src="10.0.0.1", dst="10.0.0.2", smac=bytes(6),
                               dmac=bytes(6), entropy=0xC000) for k in range(20)]
    batch = Batch(frames, [1000 * k for k in range(20)], [len(f) for f in frames],
                  [len(f) for f in frames], 1)
    summ = summary.Summarizer(summary.TimeColumn("r", 9))
    rests = uetlines.UetLines(registry(), summ.arrow, 4791).rests(batch)
    assert rests is not None and all(r is not None for r in rests)
    calls: list[int] = []

    def counted(i: int, time_text: str) -> str:
        calls.append(i)
        return slow(i, time_text)

    lines = summ.fast_lines(batch, 1, False, 10**9, counted, lambda: rests)
    assert calls == []
    assert all(" UET " in line and "ACK" in line for line in lines), lines[:2]
