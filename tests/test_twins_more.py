"""Fast path == reference for the twins added with the emulator and the batch reader:
bth_pack / bth_unpack, rx and pcap_split."""

import struct
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import fast
from roce.pcapio import MAX_RECORD, pcap_split_reference
from roce.testing import strategies as rs

pytestmark = pytest.mark.skipif(fast._ext is None, reason="compiled fast path not built")


@given(st.integers(0, 255), st.booleans(), st.integers(0, 3), st.integers(0, 0xFFFF),
       st.integers(0, 0xFFFFFF), st.booleans(), st.integers(0, 0xFFFFFF))
def test_bth_pack_unpack_twins(opcode, se, padcnt, pkey, destqp, ackreq, psn):
    args = (opcode, se, padcnt, pkey, destqp, ackreq, psn)
    raw = fast._ext.bth_pack(*args)
    assert raw == fast.bth_pack_reference(*args)
    frame = b"\xaa" * 5 + raw + b"\xbb"
    assert fast._ext.bth_unpack(frame, 5) == fast.bth_unpack_reference(frame, 5) == args


@given(rs.frames(), st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)),
                             max_size=3), st.integers(0, 80), st.booleans(),
       st.sampled_from([4791, 4793]))
def test_rx_twins(frame, flips, cut, check, port):
    """What the emulator reads of a received frame, on whole, damaged and cut frames: the
    same status (a bad ICRC: -1, checked or not as asked) and fields in C and in Python."""
    damaged = bytearray(frame)
    for at, bit in flips:
        if at < len(damaged):
            damaged[at] ^= bit
    for f in (frame, bytes(damaged), frame[:max(len(frame) - cut, 0)]):
        got = fast._ext.rx(f, check, 1, port)
        assert got == fast.rx_reference(f, check, 1, port)
        assert len(got) == len(fast.RX_FIELDS)
    whole = fast._ext.rx(frame)
    assert whole[0] == 0 and whole[1:7] == fast.bth_unpack_reference(frame, whole[10])[:2] + \
        fast.bth_unpack_reference(frame, whole[10])[3:]


def test_rx_refuses_what_is_not_bytes():
    for bad in (None, bytearray(64), "frame"):
        with pytest.raises(TypeError):
            fast._ext.rx(bad)


def _pcap_records(records, big):
    e = ">" if big else "<"
    return b"".join(struct.pack(e + "IIII", sec, frac, len(d), len(d) + extra) + d
                    for sec, frac, d, extra in records)


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 999_999),
                          st.binary(max_size=80), st.integers(0, 100)), max_size=12),
       st.booleans(), st.integers(0, 40), st.integers(1, 16), st.sampled_from([1, 1000]),
       st.one_of(st.just(-1), st.integers(0, 1200)), st.booleans())
def test_pcap_split_twins(records, big, cut, max_records, frac_mul, end, view):
    buf = _pcap_records(records, big)
    buf = buf[:max(len(buf) - cut, 0)]  # often leaves a partial record at the end
    results = []
    for split in (fast._ext.pcap_split, pcap_split_reference):
        out: list[bytes] = []
        cols = [array("q", bytes(8 * max_records)) for _ in range(3)]
        # A read-only buffer that is not bytes stands for a memory-mapped file.
        src = memoryview(buf) if view else buf
        res = split(src, 0, big, frac_mul, max_records, out, *cols, MAX_RECORD, end)
        results.append((res, out, [list(c[:res[0]]) for c in cols]))
    assert results[0] == results[1]
    (count, pos, status), out, (ts, cap, orig) = results[0]
    assert pos <= (len(buf) if end < 0 else min(end, len(buf)))
    if end >= 0:  # the records that fit before end
        records = records[:count]
    assert status == 0 and out == [r[2] for r in records[:count]]
    assert ts == [r[0] * 10**9 + r[1] * frac_mul for r in records[:count]]
    assert orig == [len(r[2]) + r[3] for r in records[:count]]
    assert pos == sum(16 + len(r[2]) for r in records[:count])


def test_pcap_split_refuses_a_negative_position():
    buf = struct.pack("<IIII", 0, 0, 4, 4) + b"abcd"
    for split in (fast._ext.pcap_split, pcap_split_reference):
        cols = [array("q", bytes(8)) for _ in range(3)]
        with pytest.raises(ValueError, match="negative position"):
            split(buf, -8, False, 1000, 1, [], *cols, MAX_RECORD)


def test_pcap_split_stops_at_absurd_length():
    buf = struct.pack("<IIII", 0, 0, MAX_RECORD + 1, 10) + b"x" * 32
    for split in (fast._ext.pcap_split, pcap_split_reference):
        out: list[bytes] = []
        cols = [array("q", bytes(8 * 4)) for _ in range(3)]
        assert split(buf, 0, False, 1000, 4, out, *cols, MAX_RECORD) == (0, 0, 1)
        assert out == []


def test_icrc_batch_after_fork_does_not_hang():
    """GNU OpenMP's pool does not survive fork(): a child must not enter a parallel region."""
    import subprocess
    import sys

    code = """
import multiprocessing as mp
import roce
from roce import fast
frames = [roce.craft(1, b"x" * 100, psn=i).to_bytes() for i in range(2000)]
assert fast.icrc_batch(frames) == 2000  # the parent's batch starts the thread pool
def work(_):
    return fast.icrc_batch(frames)
with mp.get_context("fork").Pool(2) as pool:
    print(pool.map(work, range(4)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[2000, 2000, 2000, 2000]"
