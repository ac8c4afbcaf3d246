"""The seeded payload generator (roce/emu/core/payload.py): splitmix64's published outputs,
the compiled expansion held to the Python one, and a stream that is the same however it is
cut."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import fast
from roce.emu.core import payload

# splitmix64 seeded with 0: its first outputs, as the generator's authors' reference code
# prints them (Vigna, splitmix64.c; the same words every port of it is checked against)
SPLITMIX64_FROM_0 = (0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F)


@pytest.mark.parametrize("expand", [payload.expand_reference, payload.expand])
def test_expansion_is_splitmix64(expand) -> None:
    words = expand(0, 0, 24)
    assert [int.from_bytes(words[i:i + 8], "little") for i in (0, 8, 16)] == \
        list(SPLITMIX64_FROM_0)


@pytest.mark.skipif(fast._ext is None, reason="the fast path is not built")
def test_the_compiled_expansion_is_the_one_used() -> None:
    assert payload.expand is fast._ext.pattern_expand


@given(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 30) - 1),
       st.integers(0, payload.CHUNK))
def test_compiled_and_reference_expansions_agree(seed: int, first: int, n: int) -> None:
    want = payload.expand_reference(seed, first, n)
    assert len(want) == n
    if fast._ext is not None:
        assert fast._ext.pattern_expand(seed, first, n) == want
    assert payload.expand_reference(seed, first, payload.CHUNK)[:n] == want  # a prefix


def test_negative_lengths_are_refused() -> None:
    for expand in {payload.expand_reference, payload.expand}:
        with pytest.raises(ValueError, match="not negative"):
            expand(1, 0, -1)
    with pytest.raises(ValueError, match="at most 4096"):  # the reference's lanes end there
        payload.expand_reference(1, 0, payload.CHUNK + 1)


@given(st.binary(max_size=64))
def test_the_seed_is_shake128_whichever_implementation(data: bytes) -> None:
    assert payload._shake(data).digest(8) == hashlib.shake_128(data).digest(8)


def _splitmix64_word(seed: int, i: int) -> int:
    """Word i (from 0) of splitmix64 seeded with ``seed``, one at a time as its reference
    code steps it."""
    x = (seed + (i + 1) * 0x9E3779B97F4A7C15) % (1 << 64)
    x = (x ^ x >> 30) * 0xBF58476D1CE4E5B9 % (1 << 64)
    x = (x ^ x >> 27) * 0x94D049BB133111EB % (1 << 64)
    return x ^ x >> 31


@given(st.integers(0, 3 * payload.CHUNK), st.integers(0, 2 * payload.CHUNK),
       st.integers(0, 5 * payload.CHUNK // 8 - 1))
def test_a_stream_is_the_same_however_it_is_cut(start: int, n: int, word: int) -> None:
    """One splitmix64 stream from the label's SHAKE-128 seed, cut into pieces, ranges or
    chunks alike."""
    label = "seed/1/qp/2/local/0"
    chunks = list(payload.seeded_chunks(label, 5 * payload.CHUNK + 17))
    assert [len(c) for c in chunks] == [payload.CHUNK] * 5 + [17]
    whole = b"".join(chunks)
    assert chunks[1] == payload.piece(label, 1)
    assert chunks[5] == payload.piece(label, 5, 17)
    assert payload.seeded_range(label, start, n) == whole[start:start + n][:n] or \
        start + n > len(whole)
    seed = int.from_bytes(hashlib.shake_128(label.encode()).digest(8), "little")
    assert payload.label_seed(label) == seed
    assert int.from_bytes(whole[8 * word:8 * word + 8], "little") == \
        _splitmix64_word(seed, word)


def test_pieces_differ_by_name() -> None:
    """Neighbouring pieces, slots, sides and QPs do not repeat each other (a misplaced frame
    would read as correct)."""
    labels = [payload.slot_label(7, q, side, j) for q in (0, 1) for side in ("local", "remote")
              for j in (0, 1)]
    pieces = {payload.piece(label, k) for label in labels for k in range(4)}
    assert len(pieces) == len(labels) * 4
    words = {payload.piece(labels[0], 0)[i:i + 8] for i in range(0, payload.CHUNK, 8)}
    assert len(words) == payload.CHUNK // 8
