"""A switch hop's frame rewrite: the compiled ``roce._fastpath.routed`` against its pure-Python
twin ``roce.emu.net.hop.routed_reference``, on any frame, MACs, TTL, DS byte and CE
request (the checksum and ICRC checks of the result are in tests/test_net_lossy_ecn.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import fast
from roce.emu.core.frames import FrameBuilder, Path, select
from roce.emu.net import hop as frames
from roce.opcodes import Operation, Position, Transport

needs_ext = pytest.mark.skipif(not fast.COMPILED, reason="compiled fast path not built")


@needs_ext
def test_switch_uses_the_compiled_twin() -> None:
    assert frames.routed is fast._ext.routed


@needs_ext
@given(tclass=st.integers(0, 255), ttl=st.integers(0, 255), ce=st.booleans(),
       payload=st.binary(max_size=300), src=st.binary(min_size=6, max_size=6),
       dst=st.binary(min_size=6, max_size=6), csum=st.integers(0, 0xFFFF),
       raw=st.binary(min_size=frames.CSUM[1] + 1, max_size=80), built=st.booleans())
def test_routed_twins_agree(tclass: int, ttl: int, ce: bool, payload: bytes, src: bytes,
                            dst: bytes, csum: int, raw: bytes, built: bool) -> None:
    if built:  # a frame our hosts build, then a damaged checksum too
        f = FrameBuilder(Path("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1",
                              "10.0.0.2", tclass=tclass), 0x11, ttl=ttl).build(
            select(Transport.RC, Operation.SEND, Position.ONLY), 0x12, 7, payload=payload)
        f = f[:frames.CSUM[0]] + csum.to_bytes(2, "big") + f[frames.CSUM[1]:]
    else:  # any bytes at all: the rewrite is arithmetic on fixed offsets
        f = raw
    got = fast._ext.routed(f, src, dst, ce)
    assert got == frames.routed_reference(f, src, dst, ce)
    assert len(got) == len(f) and got[:12] == dst + src


@needs_ext
def test_routed_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="shorter than its IPv4 header"):
        fast._ext.routed(bytes(frames.CSUM[1] - 1), bytes(6), bytes(6), False)
    with pytest.raises(ValueError, match="MACs of 6 \\+ 4 bytes"):
        fast._ext.routed(bytes(64), bytes(4), bytes(6), False)
