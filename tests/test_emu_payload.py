"""The seeded payload generator (roce/emu/core/payload.py): the same bytes whichever SHAKE-128
implementation makes them, before and after the switch to OpenSSL's."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from roce.emu.core import payload


@given(st.binary(max_size=64), st.integers(0, 3 * payload.CHUNK))
def test_builtin_and_openssl_agree(data: bytes, n: int) -> None:
    assert payload._builtin_shake(data).digest(n) == hashlib.shake_128(data).digest(n)


def test_stream_is_the_same_across_the_switch() -> None:
    label = "seed/1/qp/2/local/0"
    expect = [hashlib.shake_128(f"{label}/{k}".encode()).digest(payload.CHUNK)
              for k in range(payload.BUILTIN_PIECES * 2)]
    got = list(payload.seeded_chunks(label, payload.CHUNK * payload.BUILTIN_PIECES * 2))
    assert got == expect
    assert payload._made > payload.BUILTIN_PIECES and payload._shake is hashlib.shake_128
    whole = b"".join(expect)
    assert payload.seeded_range(label, 100, payload.CHUNK) == whole[100:100 + payload.CHUNK]
