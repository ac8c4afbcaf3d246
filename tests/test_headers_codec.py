"""The fast path's header codec (``roce/_headercodec.pxi``) against the codec roce.headers
generates: for every layout of integer and boolean fields, the same dict from any bytes at any
offset, the same bytes (or the same error) from any field values."""

from __future__ import annotations

import enum

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import fast, headers

pytestmark = pytest.mark.skipif(not fast.COMPILED, reason="the fast path is not built")

FAST = {name: codec for name in sorted(headers.LAYOUTS)
        if (codec := headers._fast_codec(headers.LAYOUTS[name])) is not None}


class Small(enum.IntEnum):
    ONE = 1


def _outcome(fn, *args):  # noqa: ANN001, ANN202 - a value or the error, to compare
    try:
        return "ok", fn(*args)
    except Exception as e:  # noqa: BLE001 - any error, compared by type and text
        return type(e).__name__, str(e)


def test_the_fast_codec_covers_the_per_packet_headers() -> None:
    """BTH and its extended headers are integer fields: the emulator builds and reads them
    in C; a header with addresses (Ethernet, IP) keeps the generated codec."""
    for name in ("bth", "reth", "aeth", "atomiceth", "immdt", "ieth", "deth", "udp"):
        assert name in FAST
        assert headers.DECODERS[name].__self__ is not None  # the codec's bound method
    for name in ("eth", "ip", "ipv6"):
        assert name not in FAST


@given(st.sampled_from(sorted(FAST)), st.binary(max_size=80), st.integers(-3, 90))
def test_decode_agrees(name: str, buf: bytes, offset: int) -> None:
    layout = headers.LAYOUTS[name]
    slow = headers._compile_decoder(layout)
    assert _outcome(FAST[name].decode, buf, offset) == _outcome(slow, buf, offset)
    if 0 <= offset and offset + layout.size <= len(buf):  # the fast case, not a fallback
        got = FAST[name].decode(buf, offset)
        assert list(got) == [f.name for f in layout.fields]


def _values(layout: headers.Layout) -> st.SearchStrategy[dict]:
    def value(f: headers.Field) -> st.SearchStrategy[object]:
        return st.one_of(st.integers(0, f.mask), st.integers(0, f.mask),
                         st.integers(-2, f.mask + 2), st.booleans(), st.just(Small.ONE),
                         st.floats(0, 4), st.none(), st.text(max_size=2))
    return st.fixed_dictionaries({}, optional={f.name: value(f) for f in layout.fields})


@st.composite
def _cases(draw: st.DrawFn) -> tuple[str, dict]:
    name = draw(st.sampled_from(sorted(FAST)))
    layout = headers.LAYOUTS[name]
    if draw(st.booleans()):  # every field an int in range: the fast case
        return name, {f.name: draw(st.integers(0, f.mask)) for f in layout.fields}
    return name, draw(_values(layout))


@given(_cases())
def test_encode_agrees(case: tuple[str, dict]) -> None:
    name, values = case
    slow = headers._compile_encoder(headers.LAYOUTS[name])
    assert _outcome(FAST[name].encode, values) == _outcome(slow, values)


def test_round_trip_at_the_edges() -> None:
    """All ones and all zeros, at an offset, through both directions."""
    for name, codec in FAST.items():
        size = headers.LAYOUTS[name].size
        for fill in (0x00, 0xFF):
            raw = b"\x5a" * 3 + bytes([fill]) * size
            d = codec.decode(raw, 3)
            assert d == headers._compile_decoder(headers.LAYOUTS[name])(raw, 3)
            assert codec.encode(d) == bytes([fill]) * size
