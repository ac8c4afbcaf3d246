"""24-bit PSN arithmetic and PSNTracker: the reference (roce.psn) and its compiled twin."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import psn as P
from roce.fast import _ext

MASK = (1 << 24) - 1
HALF = 1 << 23

psns = st.integers(0, MASK)
edge_psns = st.sampled_from([0, 1, 2, HALF - 1, HALF, HALF + 1, MASK - 1, MASK]) | psns


# -- reference arithmetic ------------------------------------------------------------------


def test_psn_add_wraps():
    assert P.psn_add(MASK, 1) == 0
    assert P.psn_add(MASK, 2) == 1
    assert P.psn_add(0, -1) == MASK
    assert P.psn_add(5, -7) == MASK - 1
    assert P.psn_add(10, 1 << 24) == 10
    assert P.psn_add(10, -(1 << 24)) == 10
    assert P.psn_add(0x123456, 0x10) == 0x123466


def test_psn_diff_examples():
    assert P.psn_diff(0, MASK) == 1
    assert P.psn_diff(MASK, 0) == -1
    assert P.psn_diff(5, 5) == 0
    assert P.psn_diff(HALF - 1, 0) == HALF - 1
    assert P.psn_diff(HALF, 0) == -HALF  # exactly 2^23 away: behind
    assert P.psn_diff(0, HALF) == -HALF
    assert P.psn_diff(HALF + 1, 0) == -(HALF - 1)
    assert P.psn_diff(3, MASK - 2) == 6


@given(edge_psns, edge_psns)
def test_psn_diff_range_and_consistency(a, b):
    d = P.psn_diff(a, b)
    assert -HALF <= d < HALF
    assert P.psn_add(b, d) == a
    assert P.psn_cmp(a, b) == (d > 0) - (d < 0)
    if d != -HALF:
        assert P.psn_diff(b, a) == -d


def test_classify_examples():
    E, D, A = P.PSN_EXPECTED, P.PSN_DUPLICATE, P.PSN_AHEAD
    assert P.CLASS_NAMES[E] == "expected" and P.CLASS_NAMES[D] == "duplicate"
    assert P.CLASS_NAMES[A] == "ahead"
    assert P.classify(100, 100) == E
    assert P.classify(99, 100) == D
    assert P.classify(101, 100) == A
    # around 0
    assert P.classify(MASK, 0) == D
    assert P.classify(1, 0) == A
    assert P.classify(0, 0) == E
    # around 2^24 - 1
    assert P.classify(0, MASK) == A
    assert P.classify(MASK - 1, MASK) == D
    assert P.classify(MASK, MASK) == E
    # the edges of the window
    assert P.classify(HALF - 1, 0) == A
    assert P.classify(HALF, 0) == D  # exactly 2^23 away: rxe says behind
    assert P.classify(0, HALF) == D
    assert P.classify(HALF + 1, 0) == D
    assert P.classify(P.psn_add(0x10, HALF - 1), 0x10) == A
    assert P.classify(P.psn_add(0x10, HALF), 0x10) == D
    assert P.classify(P.psn_add(0x10, -HALF), 0x10) == D


@given(edge_psns, st.integers(-HALF, HALF))
def test_classify_by_distance(epsn, delta):
    psn = P.psn_add(epsn, delta)
    expected = (P.PSN_EXPECTED if delta == 0 else
                P.PSN_AHEAD if 0 < delta < HALF else P.PSN_DUPLICATE)
    assert P.classify(psn, epsn) == expected


# -- fast == reference ---------------------------------------------------------------------


@given(psns, st.integers(-(1 << 40), 1 << 40))
def test_fast_psn_add(psn, n):
    assert _ext.psn_add(psn, n) == P.psn_add(psn, n)


@given(edge_psns, edge_psns)
def test_fast_psn_diff_cmp_classify(a, b):
    assert _ext.psn_diff(a, b) == P.psn_diff(a, b)
    assert _ext.psn_cmp(a, b) == P.psn_cmp(a, b)
    assert _ext.classify(a, b) == P.classify(a, b)


@pytest.mark.parametrize("a,b", [(0, HALF), (HALF, 0), (MASK, 0), (0, MASK), (HALF - 1, 0),
                                 (0, HALF - 1), (HALF + 1, 0), (12, 12)])
def test_fast_edges(a, b):
    assert (_ext.psn_diff(a, b), _ext.psn_cmp(a, b), _ext.classify(a, b)) == (
        P.psn_diff(a, b), P.psn_cmp(a, b), P.classify(a, b))


# -- PSNTracker on crafted sequences -------------------------------------------------------

TRACKERS = [pytest.param(P.PSNTracker, id="reference"),
            pytest.param(_ext.PSNTracker, id="compiled")]


def feed_all(t, seq):
    return [t.feed(x) for x in seq]


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_in_order_across_wrap(Tracker):
    t = Tracker()
    seq = [MASK - 2, MASK - 1, MASK, 0, 1, 2]
    assert feed_all(t, seq) == [P.EV_FIRST] + [P.EV_IN_ORDER] * 5
    c = t.counts()
    assert c == {"in_order": 6, "gaps": 0, "missing": 0, "late": 0, "duplicates": 0,
                 "wraps": 1, "still_missing": 0, "next": 3}
    assert t.holes == []


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_gap_then_late_fill(Tracker):
    t = Tracker()
    assert feed_all(t, [10, 11, 14]) == [P.EV_FIRST, P.EV_IN_ORDER, P.EV_GAP]
    c = t.counts()
    assert (c["gaps"], c["missing"], c["still_missing"], c["next"]) == (1, 2, 2, 15)
    assert t.holes == [[12, 2]]
    assert t.feed(13) == P.EV_LATE  # fills the end of the hole
    assert t.holes == [[12, 1]]
    assert t.feed(12) == P.EV_LATE
    assert t.holes == []
    assert t.feed(12) == P.EV_DUPLICATE  # already seen now
    c = t.counts()
    assert c == {"in_order": 2, "gaps": 1, "missing": 2, "late": 2, "duplicates": 1,
                 "wraps": 0, "still_missing": 0, "next": 15}


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_late_in_the_middle_splits_hole(Tracker):
    t = Tracker()
    feed_all(t, [100, 105])
    assert t.holes == [[101, 4]]
    assert t.feed(103) == P.EV_LATE
    assert t.holes == [[101, 2], [104, 1]]
    assert t.feed(101) == P.EV_LATE
    assert t.holes == [[102, 1], [104, 1]]
    assert t.counts()["still_missing"] == 2
    assert t.counts()["missing"] == 4


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_duplicate(Tracker):
    t = Tracker()
    assert feed_all(t, [7, 8, 8, 7, 9]) == [P.EV_FIRST, P.EV_IN_ORDER, P.EV_DUPLICATE,
                                             P.EV_DUPLICATE, P.EV_IN_ORDER]
    c = t.counts()
    assert (c["in_order"], c["duplicates"], c["gaps"], c["late"]) == (3, 2, 0, 0)


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_go_back_n_burst(Tracker):
    t = Tracker()
    # 0..5 sent, 3 lost, 4 and 5 arrive (gap), then the requester goes back to 3 and resends
    seq = [0, 1, 2, 4, 5, 3, 4, 5, 6]
    assert feed_all(t, seq) == [P.EV_FIRST, P.EV_IN_ORDER, P.EV_IN_ORDER, P.EV_GAP,
                                P.EV_IN_ORDER, P.EV_LATE, P.EV_DUPLICATE, P.EV_DUPLICATE,
                                P.EV_IN_ORDER]
    assert t.counts() == {"in_order": 5, "gaps": 1, "missing": 1, "late": 1,
                          "duplicates": 2, "wraps": 0, "still_missing": 0, "next": 7}


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_gap_across_wrap_holes_and_count(Tracker):
    t = Tracker()
    assert t.feed(MASK - 1) == P.EV_FIRST
    assert t.feed(1) == P.EV_GAP  # skips MASK and 0
    assert t.holes == [[MASK, 2]]
    assert t.feed(0) == P.EV_LATE
    assert t.holes == [[MASK, 1]]
    assert t.feed(2, 4) == P.EV_IN_ORDER  # a READ request consuming 4 PSNs
    c = t.counts()
    assert (c["next"], c["missing"], c["still_missing"], c["gaps"]) == (6, 2, 1, 1)
    assert t.feed(MASK) == P.EV_LATE
    assert t.counts()["still_missing"] == 0


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_gap_across_wrap_counts_the_wrap(Tracker):
    t = Tracker()
    t.feed(MASK - 1)
    t.feed(1)  # the sequence crossed 2^24 -> 0 (MASK and 0 were lost)
    assert t.counts()["wraps"] == 1


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_count_below_one_counts_as_one(Tracker):
    t = Tracker()
    t.feed(5, 0)
    t.feed(6, -3)
    assert t.counts()["next"] == 7 and t.counts()["in_order"] == 2


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_hole_memory_is_bounded(Tracker):
    t = Tracker()
    for x in range(0, 2 * (P.MAX_HOLES + 11), 2):  # MAX_HOLES + 10 gaps
        t.feed(x)
    assert len(t.holes) == P.MAX_HOLES
    assert t.holes[0] == [21, 1]  # the ten oldest holes were forgotten
    assert t.feed(1) == P.EV_DUPLICATE  # a forgotten hole
    assert t.feed(21) == P.EV_LATE


# -- hypothesis: reference and compiled trackers agree --------------------------------------

steps = st.one_of(
    st.integers(-3, 3),  # small moves incl. repeats and going back
    st.just(1), st.just(1), st.just(1),  # mostly in order
    st.integers(2, 40),  # gaps
    st.integers(-40, -4),  # retransmissions from further back
    st.sampled_from([HALF - 1, HALF, HALF + 1, -HALF, 1 << 22]),  # jumps
)


@st.composite
def psn_sequences(draw):
    start = draw(edge_psns | st.integers(MASK - 50, MASK))
    moves = draw(st.lists(st.tuples(steps, st.sampled_from([1, 1, 1, 2, 5, 0])),
                          min_size=1, max_size=80))
    out, x = [], start
    for delta, count in moves:
        x = P.psn_add(x, delta)
        out.append((x, count))
    return out


@given(psn_sequences())
def test_trackers_agree_step_by_step(seq):
    ref, fast = P.PSNTracker(), _ext.PSNTracker()
    for psn, count in seq:
        assert fast.feed(psn, count) == ref.feed(psn, count)
        assert fast.counts() == ref.counts()
        assert fast.holes == ref.holes
        assert fast.still_missing == ref.still_missing
        for floor in (-1, P.psn_add(psn, -3), psn):  # the engines' reassembly hold asks this
            assert fast.missing_below(psn, floor) == ref.missing_below(psn, floor)
            if all(abs(P.psn_diff(h, psn)) < 1 << 20 for h, _ in ref.holes):
                # holes near the PSN (a window's worth) are in PSN order: the nearest one
                # below decides for all of them
                assert ref.missing_below(psn, floor) == any(
                    P.psn_diff(h, psn) < 0
                    and (floor < 0 or P.psn_diff(P.psn_add(h, n - 1), floor) >= 0)
                    for h, n in ref.holes)
    c = ref.counts()
    assert c["in_order"] + c["gaps"] + c["late"] + c["duplicates"] == len(seq)
    assert c["still_missing"] <= c["missing"]


@given(psn_sequences())
def test_feed_many_equals_repeated_feed(seq):
    one, many, many_counts = _ext.PSNTracker(), _ext.PSNTracker(), _ext.PSNTracker()
    ref = P.PSNTracker()
    for psn, _ in seq:
        one.feed(psn)
    many.feed_many(array("I", [p for p, _ in seq]))
    assert many.counts() == one.counts() and many.holes == one.holes
    for psn, count in seq:
        ref.feed(psn, count)
    many_counts.feed_many(array("I", [p for p, _ in seq]), array("I", [c for _, c in seq]))
    assert many_counts.counts() == ref.counts() and many_counts.holes == ref.holes


# -- a late first arrival (flowrules, "request PSNs") ------------------------------------------


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_late_first_arrival_moves_the_start_back(Tracker):
    t = Tracker()
    assert t.early == P.EARLY_WINDOW
    assert feed_all(t, [5, 3, 6, 4]) == [P.EV_FIRST, P.EV_LATE, P.EV_IN_ORDER, P.EV_LATE]
    assert t.first == 3 and t.holes == []
    c = t.counts()
    assert (c["late"], c["duplicates"], c["gaps"], c["missing"]) == (2, 0, 0, 1)
    # a READ's PSNs may not overlap the old start; they may stop short of it (a hole)
    t = Tracker()
    t.feed(10)
    assert t.feed(8, 3) == P.EV_DUPLICATE and t.first == 10
    assert t.feed(6, 2) == P.EV_LATE and t.first == 6 and t.holes == [[8, 2]]


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_late_first_arrival_window_closing_and_wrap(Tracker):
    t = Tracker()
    t.feed(3)
    assert t.feed(P.psn_add(3, -P.EARLY_WINDOW - 1)) == P.EV_DUPLICATE  # beyond the window
    assert t.feed(P.psn_add(3, -P.EARLY_WINDOW)) == P.EV_LATE  # across 0: in PSN order
    assert t.first == P.psn_add(3, -P.EARLY_WINDOW)
    t = Tracker()
    t.feed(3)
    t.early = 0  # the analyser saw an acknowledgement covering the start
    assert t.feed(2) == P.EV_DUPLICATE and t.start_at(1) is False
    # the sequence went more than half the PSN space on: the old rule holds
    t = Tracker()
    t.feed(100, HALF - 1)  # two huge READs, in order, bring the sequence to 98
    t.feed(P.psn_add(100, HALF - 1), HALF - 1)
    assert t.next == 98 and t.holes == []
    assert t.feed(80) == P.EV_DUPLICATE and t.start_at(80) is False


@pytest.mark.parametrize("Tracker", TRACKERS)
def test_start_at_makes_the_psns_before_the_old_start_missing(Tracker):
    t = Tracker()
    assert t.start_at(0) is False  # nothing seen yet
    feed_all(t, [4, 6])
    assert t.start_at(2) is True and t.first == 2
    assert t.holes == [[2, 2], [5, 1]] and t.counts()["missing"] == 3
    assert t.missing_below(4) and t.feed(3) == P.EV_LATE and t.feed(1) == P.EV_LATE
    assert t.start_at(4) is False  # not below the start


ops = st.lists(st.tuples(steps, st.sampled_from([1, 1, 1, 2, 5, 0, "start", "close"])),
               min_size=1, max_size=80)


@given(st.integers(0, MASK), ops)
def test_trackers_agree_with_late_first_arrivals(start, moves):
    """Sequences that go below their start, interleaved with start_at (a sequence NAK's
    ePSN) and the window closing (an acknowledgement covering the start)."""
    ref, fast = P.PSNTracker(), _ext.PSNTracker()
    x = start
    for delta, what in moves:
        x = P.psn_add(x, delta)
        if what == "start":
            assert fast.start_at(x) == ref.start_at(x)
        elif what == "close":
            ref.early = fast.early = 0
        else:
            assert fast.feed(x, what) == ref.feed(x, what)
        assert fast.counts() == ref.counts() and fast.holes == ref.holes
        assert (fast.first, fast.early) == (ref.first, ref.early)
        assert fast.missing_below(x) == ref.missing_below(x)
