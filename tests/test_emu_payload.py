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
    words = expand(0, 24)
    assert [int.from_bytes(words[i:i + 8], "little") for i in (0, 8, 16)] == \
        list(SPLITMIX64_FROM_0)


@pytest.mark.skipif(fast._ext is None, reason="the fast path is not built")
def test_the_compiled_expansion_is_the_one_used() -> None:
    assert payload.expand is fast._ext.pattern_expand


@given(st.integers(0, (1 << 64) - 1), st.integers(0, payload.CHUNK))
def test_compiled_and_reference_expansions_agree(seed: int, n: int) -> None:
    want = payload.expand_reference(seed, n)
    assert len(want) == n
    if fast._ext is not None:
        assert fast._ext.pattern_expand(seed, n) == want
    assert payload.expand_reference(seed, payload.CHUNK)[:n] == want  # a prefix of longer


def test_negative_lengths_are_refused() -> None:
    if fast._ext is not None:
        with pytest.raises(ValueError, match="not negative"):
            fast._ext.pattern_expand(1, -1)


@given(st.binary(max_size=64))
def test_the_seed_is_shake128_whichever_implementation(data: bytes) -> None:
    assert payload._shake(data).digest(8) == hashlib.shake_128(data).digest(8)


@given(st.integers(0, 3 * payload.CHUNK), st.integers(0, 2 * payload.CHUNK))
def test_a_stream_is_the_same_however_it_is_cut(start: int, n: int) -> None:
    label = "seed/1/qp/2/local/0"
    chunks = list(payload.seeded_chunks(label, 5 * payload.CHUNK + 17))
    assert [len(c) for c in chunks] == [payload.CHUNK] * 5 + [17]
    whole = b"".join(chunks)
    assert chunks[1] == payload.piece(label, 1)
    assert chunks[5] == payload.piece(label, 5, 17)
    assert payload.seeded_range(label, start, n) == whole[start:start + n][:n] or \
        start + n > len(whole)
    seed = int.from_bytes(hashlib.shake_128(f"{label}/2".encode()).digest(8), "little")
    assert chunks[2] == payload.expand_reference(seed, payload.CHUNK)


def test_pieces_differ_by_name() -> None:
    """Neighbouring pieces, slots, sides and QPs do not repeat each other (a misplaced frame
    would read as correct)."""
    labels = [payload.slot_label(7, q, side, j) for q in (0, 1) for side in ("local", "remote")
              for j in (0, 1)]
    pieces = {payload.piece(label, k) for label in labels for k in range(4)}
    assert len(pieces) == len(labels) * 4
    words = {payload.piece(labels[0], 0)[i:i + 8] for i in range(0, payload.CHUNK, 8)}
    assert len(words) == payload.CHUNK // 8
