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
