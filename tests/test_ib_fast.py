"""Native InfiniBand's per-packet work in C (the fast path's ``ib_frame``, ``ib_frame_ok``,
``ib_link_packet``, ``ib_link_word``) against the Python they stand for, and the VL
arbiter's ``idle`` against a ``pick`` that finds nothing ready."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import fast
from roce.emu.core import frames
from roce.emu.ib import framing
from roce.emu.ib.ibrun import IbRun
from roce.emu.ib.vltables import VlArbiter
from roce.emu.net.runner import NetRun
from roce.emu.scenario import Scenario
from roce.families.ib import crc as ibcrc
from roce.families.ib import flowcontrol as link
from roce.opcodes import OPCODES

_ext = fast._ext
needs_ext = pytest.mark.skipif(_ext is None, reason="compiled fast path not built")


def _reference_frame(lrh: bytes, transport: bytes) -> bytes:
    """LRH, transport, ICRC (roce.families.ib.crc.icrc, LNH 2), VCRC by the table."""
    body = lrh + transport
    out = body + ibcrc.trailer(ibcrc.icrc(body + bytes(4), 0, len(lrh), len(body)))
    return out + ibcrc.vcrc(out).to_bytes(2, "big")


@needs_ext
@given(st.binary(min_size=8, max_size=8), st.binary(min_size=12, max_size=600))
def test_ib_frame_is_the_reference(lrh: bytes, transport: bytes) -> None:
    want = _reference_frame(lrh, transport)
    assert framing.frame_reference(lrh, transport) == want
    assert _ext.ib_frame(lrh, transport) == want
    assert _ext.ib_frame(bytearray(lrh), memoryview(transport)) == want


@needs_ext
@given(st.binary(min_size=8, max_size=8), st.binary(min_size=12, max_size=600),
       st.lists(st.integers(min_value=0), max_size=3))
def test_ib_frame_ok_is_the_reference(lrh: bytes, transport: bytes, flips: list[int]) -> None:
    p = bytearray(_reference_frame(lrh, transport))
    for bit in flips:
        p[bit // 8 % len(p)] ^= 1 << (bit % 8)
    packet = bytes(p)
    assert _ext.ib_frame_ok(packet) == framing.frame_ok_reference(packet)
    if not flips:
        assert _ext.ib_frame_ok(packet)


@needs_ext
def test_ib_frame_refuses_what_is_not_an_lrh_and_a_transport() -> None:
    with pytest.raises(ValueError, match="ib_frame"):
        _ext.ib_frame(bytes(7), bytes(12))
    with pytest.raises(ValueError, match="ib_frame"):
        _ext.ib_frame(bytes(8), bytes(11))
    with pytest.raises(ValueError, match="ib_frame_ok"):
        short = bytes(8 + 11 + 4)
        _ext.ib_frame_ok(short + ibcrc.vcrc(short).to_bytes(2, "big"))


@given(st.integers(0, 0xFFFFFFFF))
def test_link_packet_is_the_word_and_its_lpcrc(word: int) -> None:
    head = word.to_bytes(4, "big")
    want = head + ibcrc.vcrc(head).to_bytes(2, "big")
    assert link.packet(word) == want
    assert link.packet_fast(word) == want
    assert link.checked_word(want) == link.checked_word_fast(want) == word


@given(st.binary(max_size=8))
def test_checked_word_fast_is_the_reference(data: bytes) -> None:
    assert link.checked_word_fast(data) == link.checked_word(data)


@given(st.binary(min_size=6, max_size=6), st.integers(0, 47))
def test_checked_word_refuses_a_flipped_bit(data: bytes, bit: int) -> None:
    good = link.packet(int.from_bytes(data[:4], "big"))
    bad = bytearray(good)
    bad[bit // 8] ^= 1 << (bit % 8)
    assert link.checked_word_fast(bytes(bad)) == link.checked_word(bytes(bad)) == -1


_entries = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 255)), max_size=5)


@given(_entries, _entries, st.sampled_from([0, 1, 255]),
       st.lists(st.tuples(st.sets(st.integers(0, 3)), st.integers(1, 9000)), max_size=12))
def test_idle_is_a_pick_that_finds_nothing(high: list, low: list, limit: int,
                                           history: list) -> None:
    """From any state a run of picks and charges leaves, ``idle`` leaves the arbiter as a
    ``pick`` whose ``ready`` says no to every VL does."""
    if not any(w for _, w in high + low):
        return
    def arbiter() -> VlArbiter:
        arb = VlArbiter(high, low, limit)
        for ready, n in history:
            if arb.pick(ready.__contains__) is not None:
                arb.charge(n)
        return arb

    a, b = arbiter(), arbiter()  # the same state twice
    assert a.pick(lambda vl: False) is None
    b.idle()

    def state(x: VlArbiter) -> tuple:
        return (x.high.at, x.high.left, x.low.at, x.low.left, x.high_sent,
                None if x._last is None else x._last is x.high)

    assert state(a) == state(b)


def test_the_device_checks_the_icrc_unless_the_port_built_it_after_checking() -> None:
    """An Ethernet NIC's device drops a frame whose ICRC is wrong; an HCA checks the
    InfiniBand packet's CRCs in ``Framer.to_roce`` and makes the RoCE ICRC itself, so its
    device does not compute that ICRC again (a corrupted packet is still caught there:
    tests/test_emu_ib.py)."""
    b = frames.FrameBuilder(frames.Path(smac="02:00:00:00:00:01", dmac="02:00:00:00:00:02",
                                        sip="10.0.0.1", dip="10.0.0.2"), 0)
    frame = b.build(OPCODES[0x0A], 0x11, 7, {"reth": {"va": 0, "r_key": 1, "dma_len": 4}},
                    b"abcd")
    bad = frame[:-1] + bytes([frame[-1] ^ 1])  # the ICRC's last byte
    assert frames.receive(frame)[0] == 0 and frames.receive(bad) == (-1, None)
    status, pkt = frames.receive(bad, icrc_checked=True)
    assert status == 0 and pkt is not None and pkt.psn == 7
    hca = IbRun(Scenario(topology="incast:2", protocol="ib", count=1)).net.hosts["r"]
    assert hca.icrc_checked and not NetRun(Scenario(topology="incast:2", count=1)
                                           ).net.hosts["r"].icrc_checked
