"""MAC Control frames (802.3x PAUSE, 802.1Qbb PFC): codec, decode, filters, stats, craft, and
tshark as the oracle."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import macc
from roce.errors import DecodeError, RoceError

SRC = bytes.fromhex("02aabbccdd01")

prio_times = st.dictionaries(st.integers(0, 7), st.integers(0, macc.MAX_QUANTA))


# -- codec -------------------------------------------------------------------------------------


@given(prio_times, st.binary(min_size=6, max_size=6))
def test_pfc_round_trip(times, src):
    frame = macc.build_pfc(src, times)
    assert len(frame) == macc.MIN_FRAME
    m = macc.parse_macc(frame)
    assert m is not None and m.is_pfc and not m.is_pause
    assert (m.opcode, m.src, m.dst) == (macc.OPCODE_PFC, src, macc.PFC_DST_MAC)
    assert m.enable_vector == sum(1 << p for p in times)
    assert m.times == tuple(times.get(p, 0) for p in range(8))
    assert m.class_times() == dict(sorted(times.items()))


@given(st.integers(0, macc.MAX_QUANTA), st.binary(min_size=6, max_size=6))
def test_pause_round_trip(quanta, src):
    frame = macc.build_pause(src, quanta)
    assert len(frame) == macc.MIN_FRAME
    m = macc.parse_macc(frame)
    assert m == macc.MacControl(macc.OPCODE_PAUSE, 0, (quanta,) + (0,) * 7, src,
                                macc.PFC_DST_MAC)
    assert m.class_times() == dict.fromkeys(range(8), quanta)


def test_pfc_wire_bytes():
    """The bytes 802.1Qbb specifies, written out by hand: DA, SA, 0x8808, opcode 0x0101,
    vector 0x0008 (class 3), c3 = 0xFFFF, zero padding to 60 bytes."""
    frame = macc.build_pfc(SRC, {3: 0xFFFF})
    want = (bytes.fromhex("0180c2000001") + SRC + bytes.fromhex("8808 0101 0008")
            + bytes(6) + b"\xff\xff" + bytes(8))
    assert frame == want + bytes(60 - len(want))
    assert macc.build_pause(SRC, 0x1234)[12:18] == bytes.fromhex("8808 0001 1234")


def test_parse_not_macc_and_vlan():
    assert macc.parse_macc(bytes(60)) is None
    assert macc.parse_macc(b"\x00" * 10) is None
    frame = macc.build_pfc(SRC, {5: 7})
    tagged = frame[:12] + bytes.fromhex("8100 a005") + frame[12:]
    m = macc.parse_macc(tagged)
    assert m is not None and m.class_times() == {5: 7}


@pytest.mark.parametrize("cut,header,offset", [(15, "macc", 14), (20, "macc.cbfc", 16)])
def test_parse_cut_short(cut, header, offset):
    with pytest.raises(DecodeError) as exc:
        macc.parse_macc(macc.build_pfc(SRC, {0: 1})[:cut])
    assert (exc.value.header, exc.value.offset) == (header, offset)


def test_unknown_opcode_is_macc():
    frame = bytearray(macc.build_pause(SRC, 9))
    frame[14:16] = b"\x00\x02"  # MPCP GATE: MAC Control, not a pause
    m = macc.parse_macc(bytes(frame))
    assert m is not None and m.opcode == 2 and m.class_times() == {}


@pytest.mark.parametrize("call", [
    lambda: macc.build_pfc(SRC, {8: 1}),
    lambda: macc.build_pfc(SRC, {0: 0x10000}),
    lambda: macc.build_pfc(SRC, {0: -1}),
    lambda: macc.build_pause(SRC[:5], 1),
    lambda: macc.quanta_to_ns(1, 0),
])
def test_bad_arguments(call):
    with pytest.raises(RoceError):
        call()


def test_quanta_to_ns():
    # 512 bit times per quantum: 5.12 ns at 100 Gb/s, 0xFFFF quanta = 335.5392 us
    assert macc.quanta_to_ns(1, 100e9) == 5.12
    assert macc.quanta_to_ns(0xFFFF, 100e9) == 335539.2
    assert macc.quanta_to_ns(0xFFFF, 10e9) == 3355392.0
    assert macc.quanta_to_ns(0, 25e9) == 0.0
