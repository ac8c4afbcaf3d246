"""Tests for roce.pcapio: pcap/pcapng reading and writing, robustness, tshark interop."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import struct
import subprocess
import sys
import threading
import tracemalloc
import zlib
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from roce.pcapio import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
    MAX_TS_NS,
    CaptureError,
    Frame,
    PcapNgWriter,
    PcapWriter,
    Problem,
    open_capture,
    write_capture,
)

REPO = Path(__file__).resolve().parents[1]
NS = 1_000_000_000
T0 = 1_700_000_000 * NS


# -- hand-built capture bytes ---------------------------------------------------------------

def pcap_header(e: str = "<", nano: bool = False, linktype: int = 1,
                snaplen: int = 65535) -> bytes:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    return struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(data: bytes, sec: int, frac: int, origlen: int | None = None,
                e: str = "<") -> bytes:
    origlen = len(data) if origlen is None else origlen
    return struct.pack(e + "IIII", sec, frac, len(data), origlen) + data


def block(btype: int, body: bytes, e: str = "<") -> bytes:
    body += b"\0" * (-len(body) % 4)
    blen = 12 + len(body)
    return struct.pack(e + "II", btype, blen) + body + struct.pack(e + "I", blen)


def opt(code: int, value: bytes, e: str = "<") -> bytes:
    return struct.pack(e + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def shb(e: str = "<", options: bytes = b"") -> bytes:
    return block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1) + options, e)


def idb(linktype: int, snaplen: int = 0, options: bytes = b"", e: str = "<") -> bytes:
    if options:
        options += opt(0, b"", e)
    return block(1, struct.pack(e + "HHI", linktype, 0, snaplen) + options, e)


def epb(iface: int, ts: int, data: bytes, origlen: int | None = None, e: str = "<") -> bytes:
    origlen = len(data) if origlen is None else origlen
    return block(6, struct.pack(e + "IIIII", iface, ts >> 32, ts & 0xFFFFFFFF, len(data),
                                origlen) + data, e)


def spb(data: bytes, origlen: int | None = None, e: str = "<") -> bytes:
    origlen = len(data) if origlen is None else origlen
    return block(3, struct.pack(e + "I", origlen) + data, e)


def pb(iface: int, ts: int, data: bytes, e: str = "<") -> bytes:
    return block(2, struct.pack(e + "HHIIII", iface, 7, ts >> 32, ts & 0xFFFFFFFF, len(data),
                                len(data)) + data, e)


def read_all(src) -> tuple[list[Frame], list[Problem]]:
    with open_capture(src) as reader:
        frames = list(reader)
    return frames, reader.problems


def read_bytes(data: bytes) -> tuple[list[Frame], list[Problem]]:
    return read_all(io.BytesIO(data))


class TrickleReader(io.RawIOBase):
    """Non-seekable stream returning at most ``step`` bytes per read; counts bytes served."""

    def __init__(self, data: bytes, step: int = 7):
        self._data = memoryview(data)
        self._pos = 0
        self._step = step

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def seek(self, *args):
        raise io.UnsupportedOperation("not seekable")

    def readinto(self, b) -> int:
        n = min(len(b), self._step, len(self._data) - self._pos)
        b[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


# -- pcap ----------------------------------------------------------------------------------

@pytest.mark.parametrize("nanosecond", [True, False])
def test_pcap_writer_round_trip(tmp_path: Path, nanosecond: bool) -> None:
    path = tmp_path / "x.pcap"
    packets = [(b"\x01" * 60, T0 + 123_456_789), (b"", T0 + 5), (bytes(range(256)) * 4, 42)]
    with PcapWriter(path, linktype=LINKTYPE_RAW, snaplen=1000, nanosecond=nanosecond) as w:
        for data, ts in packets:
            w.write(data, ts)
        w.write(b"abc", ts_ns=None, origlen=1500)
    with open_capture(path) as r:
        assert (r.format, r.nanosecond, r.linktype, r.snaplen) == ("pcap", nanosecond, 101, 1000)
        assert r.compressed is False and r.version == (2, 4)
        frames = list(r)
    assert r.problems == []
    div = 1 if nanosecond else 1000
    assert [f.ts_ns for f in frames] == [T0 + 123_456_789 // div * div, T0 + 5 // div * div,
                                         0 if not nanosecond else 42, 0]
    assert frames[0] == Frame(b"\x01" * 60, frames[0].ts_ns, 60, 60, LINKTYPE_RAW, 0)
    assert frames[1].data == b"" and frames[1].caplen == 0
    # longer than snaplen: truncated on write, origlen keeps the wire length
    assert (frames[2].data, frames[2].caplen, frames[2].origlen) == (
        (bytes(range(256)) * 4)[:1000], 1000, 1024)
    assert frames[2].truncated is True and frames[0].truncated is False
    assert (frames[3].data, frames[3].origlen, frames[3].truncated) == (b"abc", 1500, True)


@pytest.mark.parametrize("e", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_both_byte_orders_and_resolutions(e: str, nano: bool) -> None:
    raw = pcap_header(e, nano, LINKTYPE_LINUX_SLL, 9000)
    raw += pcap_record(b"hello", 1_700_000_000, 999_999 if not nano else 999_999_999, e=e)
    raw += pcap_record(b"\xff" * 3, 0, 1, origlen=70, e=e)
    with open_capture(io.BytesIO(raw)) as r:
        assert (r.linktype, r.snaplen, r.nanosecond) == (LINKTYPE_LINUX_SLL, 9000, nano)
        frames = list(r)
    first_ts = T0 + (999_999_999 if nano else 999_999_000)
    assert frames == [
        Frame(b"hello", first_ts, 5, 5, LINKTYPE_LINUX_SLL, 0),
        Frame(b"\xff\xff\xff", 1 if nano else 1000, 3, 70, LINKTYPE_LINUX_SLL, 0),
    ]
    assert r.problems == []


def test_pcap_timestamps_are_exact_integers() -> None:
    # 2**32-1 seconds with 999999999 ns cannot be represented in a float exactly
    raw = pcap_header("<", True) + pcap_record(b"x", 0xFFFFFFFF, 999_999_999)
    (frame,), _ = read_bytes(raw)
    assert frame.ts_ns == 4_294_967_295_999_999_999
    assert isinstance(frame.ts_ns, int)


def test_modified_pcap_variant() -> None:
    raw = struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 1)
    raw += struct.pack("<IIII", 10, 20, 2, 2) + b"\0" * 8 + b"ok"
    frames, problems = read_bytes(raw)
    assert frames == [Frame(b"ok", 10 * NS + 20_000, 2, 2, 1, 0)] and problems == []


# -- pcapng --------------------------------------------------------------------------------

def test_pcapng_writer_interfaces(tmp_path: Path) -> None:
    path = tmp_path / "x.pcapng"
    with PcapNgWriter(path) as w:
        assert w.add_interface(LINKTYPE_ETHERNET, name="eth0") == 0
        assert w.add_interface(LINKTYPE_RAW, snaplen=100) == 1
        assert w.add_interface(LINKTYPE_LINUX_SLL2) == 2
        w.write(b"a" * 61, T0 + 1, interface=0)
        w.write(b"b" * 150, T0 + 2, interface=1)
        w.write(b"c" * 7, T0 + 3, origlen=9, interface=2)
        w.write(b"d", 2**64 - 1, interface=0)
        with pytest.raises(ValueError, match="interface 3"):
            w.write(b"e", 0, interface=3)
    with open_capture(path) as r:
        assert (r.format, r.linktype, r.snaplen, r.nanosecond) == ("pcapng", 1, 262144, True)
        frames = list(r)
    assert frames == [
        Frame(b"a" * 61, T0 + 1, 61, 61, LINKTYPE_ETHERNET, 0),
        Frame(b"b" * 100, T0 + 2, 100, 150, LINKTYPE_RAW, 1),
        Frame(b"c" * 7, T0 + 3, 7, 9, LINKTYPE_LINUX_SLL2, 2),
        Frame(b"d", MAX_TS_NS, 1, 1, LINKTYPE_ETHERNET, 0),  # past 2^63-1 ns: clamped
    ]
    assert [p.message for p in r.problems if "clamped" in p.message] == [r.problems[0].message]
    assert len(r.problems) == 1


def test_pcapng_writer_default_interface() -> None:
    out = io.BytesIO()
    w = PcapNgWriter(out, linktype=LINKTYPE_RAW, snaplen=4)
    w.write(b"123456", 77)
    w.close()
    w.close()  # idempotent
    frames, problems = read_bytes(out.getvalue())
    assert frames == [Frame(b"1234", 77, 4, 6, LINKTYPE_RAW, 0)] and problems == []


def handmade_pcapng() -> tuple[bytes, list[Frame]]:
    b = ">"
    raw = shb(b, opt(1, b"big-endian section", b) + opt(0, b"", b))
    raw += block(4, b"\x00\x01\x00\x04\x0a\x00\x00\x01host\x00\x00\x00\x00\x00\x00", b)  # NRB
    raw += idb(LINKTYPE_ETHERNET, 0, e=b)                                   # default usec
    raw += idb(LINKTYPE_RAW, 65535, opt(2, b"eth1", b) + opt(9, b"\x94", b), e=b)  # 2^-20 s
    raw += idb(LINKTYPE_LINUX_SLL2, 0, opt(9, b"\x03", b)
               + opt(14, struct.pack(">q", 100), b), e=b)                 # ms, +100 s
    raw += idb(LINKTYPE_LINUX_SLL, 0, opt(9, b"\x0c", b), e=b)              # picoseconds
    raw += epb(0, 1_700_000_000_123_456, b"usec", e=b)
    raw += block(0x00000BAD, b"custom block payload", b)
    raw += block(0x40000BAD, b"another custom", b)
    raw += epb(1, (5 << 20) + (1 << 19), b"pow2", e=b)
    raw += epb(2, 1500, b"msec", origlen=10, e=b)
    raw += epb(3, 1_234_567_890_123, b"psec", e=b)
    raw += spb(b"simple!", e=b)
    raw += block(5, struct.pack(">III", 0, 0, 0), b)                        # ISB
    raw += pb(1, 1 << 20, b"old packet block", e=b)
    raw += block(0x0A, b"\0" * 8, b)                                       # DSB
    le = "<"
    raw += shb(le)
    raw += idb(LINKTYPE_LINUX_SLL, 8, opt(9, b"\x09"), e=le)
    raw += epb(0, 42, b"ns", origlen=60, e=le)
    raw += spb(b"0123456789abcdef" + b"xyz", e=le)
    expected = [
        Frame(b"usec", 1_700_000_000_123_456_000, 4, 4, LINKTYPE_ETHERNET, 0),
        Frame(b"pow2", 5_500_000_000, 4, 4, LINKTYPE_RAW, 1),
        Frame(b"msec", 101_500_000_000, 4, 10, LINKTYPE_LINUX_SLL2, 2),
        Frame(b"psec", 1_234_567_890, 4, 4, LINKTYPE_LINUX_SLL, 3),
        Frame(b"simple!", 0, 7, 7, LINKTYPE_ETHERNET, 0),
        Frame(b"old packet block", NS, 16, 16, LINKTYPE_RAW, 1),
        Frame(b"ns", 42, 2, 60, LINKTYPE_LINUX_SLL, 0),
        Frame(b"01234567", 0, 8, 19, LINKTYPE_LINUX_SLL, 0),     # SPB limited by snaplen 8
    ]
    return raw, expected


def test_pcapng_sections_interfaces_and_block_types() -> None:
    raw, expected = handmade_pcapng()
    with open_capture(io.BytesIO(raw)) as r:
        assert (r.format, r.version, r.linktype, r.snaplen) == ("pcapng", (1, 0), 1, 0)
        assert r.nanosecond is False
        frames = list(r)
    assert frames == expected
    assert r.problems == []


def test_pcapng_spb_caplen_limited_by_block_room() -> None:
    raw = shb() + idb(LINKTYPE_ETHERNET) + spb(b"abcd", origlen=1000)
    frames, problems = read_bytes(raw)
    assert frames == [Frame(b"abcd", 0, 4, 1000, 1, 0)] and problems == []


def test_pcapng_bad_blocks_are_skipped_with_problems() -> None:
    raw = shb() + idb(1) + epb(5, 0, b"nope") + epb(0, 1, b"yes")
    bad = bytearray(epb(0, 2, b"12345678"))
    struct.pack_into("<I", bad, 20, 99)             # caplen beyond the block
    raw += bytes(bad) + spb(b"x")
    frames, problems = read_bytes(raw)
    assert frames == [Frame(b"yes", 1000, 3, 3, 1, 0), Frame(b"x", 0, 1, 1, 1, 0)]
    off1 = len(shb() + idb(1))
    off2 = off1 + len(epb(5, 0, b"nope") + epb(0, 1, b"yes"))
    assert problems == [
        Problem(off1, f"packet refers to undefined interface 5 at byte {off1}; block skipped"),
        Problem(off2, f"packet length 99 exceeds its block at byte {off2}; block skipped"),
    ]


def test_pcapng_without_interfaces() -> None:
    with open_capture(io.BytesIO(shb())) as r:
        assert r.linktype is None and r.snaplen is None
        assert list(r) == [] and r.problems == []


def test_pcapng_linktype_known_before_iteration_without_losing_frames() -> None:
    raw = shb() + idb(LINKTYPE_RAW) + epb(0, 1, b"a") + epb(0, 2, b"b")
    with open_capture(io.BytesIO(raw)) as r:
        assert r.linktype == LINKTYPE_RAW
        assert [f.data for f in r] == [b"a", b"b"]


# -- invalid lengths ------------------------------------------------------------------------

def test_pcap_absurd_caplen_stops_without_allocating() -> None:
    good = pcap_record(b"ok", 1, 2)
    raw = pcap_header() + good + struct.pack("<IIII", 3, 4, 0x7FFFFFFF, 0x7FFFFFFF) + b"x" * 100
    frames, problems = read_bytes(raw)
    assert frames == [Frame(b"ok", NS + 2000, 2, 2, 1, 0)]
    off = 24 + len(good)
    assert problems == [Problem(off, f"absurd record length 2147483647 at byte {off}; "
                                     "stopped reading")]


@pytest.mark.parametrize("blen", [8, 13, 0, 2**31, 0xFFFFFFFC])
def test_pcapng_invalid_block_length(blen: int) -> None:
    head = shb() + idb(1) + epb(0, 1, b"a")
    raw = head + struct.pack("<II", 6, blen) + b"\0" * 64
    frames, problems = read_bytes(raw)
    assert frames == [Frame(b"a", 1000, 1, 1, 1, 0)]
    assert problems == [Problem(len(head), f"invalid pcapng block length {blen} (type 0x6) "
                                           f"at byte {len(head)}; stopped reading")]


def test_pcapng_trailing_length_mismatch() -> None:
    bad = bytearray(epb(0, 1, b"abcd"))
    bad[-4:] = struct.pack("<I", 8)
    head = shb() + idb(1)
    frames, problems = read_bytes(head + bytes(bad) + epb(0, 2, b"later"))
    assert frames == []
    assert problems == [Problem(len(head), f"pcapng block at byte {len(head)} has mismatched "
                                           "trailing length; stopped reading")]


def test_pcapng_bad_byte_order_magic() -> None:
    with pytest.raises(CaptureError, match=r"bad byte-order magic 0x00000000"):
        open_capture(io.BytesIO(b"\x0a\x0d\x0d\x0a" + b"\x1c\0\0\0" + b"\0" * 20))
    later = bytearray(shb())
    later[8:12] = b"\1\2\3\4"
    frames, problems = read_bytes(shb() + idb(1) + epb(0, 0, b"z") + bytes(later))
    assert [f.data for f in frames] == [b"z"]
    assert len(problems) == 1 and "bad pcapng byte-order magic 0x01020304" in problems[0].message


# -- truncation at every offset -------------------------------------------------------------

def three_record_pcap() -> tuple[bytes, list[int], list[Frame]]:
    datas = [b"A" * 10, b"", b"C" * 25]
    raw = pcap_header(nano=True)
    bounds = [len(raw)]
    for i, d in enumerate(datas):
        raw += pcap_record(d, 100 + i, i)
        bounds.append(len(raw))
    frames = [Frame(d, (100 + i) * NS + i, len(d), len(d), 1, 0) for i, d in enumerate(datas)]
    return raw, bounds, frames


def three_record_pcapng() -> tuple[bytes, list[int], list[Frame]]:
    blocks = [shb(), idb(LINKTYPE_RAW, options=opt(9, b"\x09")), epb(0, 5, b"A" * 10),
              epb(0, 6, b""), block(0xBAD, b"junk"), epb(0, 7, b"C" * 25)]
    raw = b""
    bounds = []
    for blk in blocks:
        raw += blk
        bounds.append(len(raw))
    frames = [Frame(b"A" * 10, 5, 10, 10, 101, 0), Frame(b"", 6, 0, 0, 101, 0),
              Frame(b"C" * 25, 7, 25, 25, 101, 0)]
    return raw, bounds, frames


def check_truncations(raw: bytes, bounds: list[int], frames: list[Frame], frame_ends: list[int],
                      hdr_size: int, min_record: int, record_len) -> None:
    """Cut ``raw`` at every offset: CaptureError inside the file header, else the complete
    frames and exactly one truncation Problem unless the cut falls on a record boundary."""
    for cut in range(len(raw) + 1):
        data = raw[:cut]
        if cut < bounds[0]:
            with pytest.raises(CaptureError, match=r"^<stream>: "):
                open_capture(io.BytesIO(data))
            continue
        got, problems = read_bytes(data)
        assert got == frames[:sum(1 for end in frame_ends if end <= cut)], cut
        if cut in bounds:
            assert problems == [], cut
        else:
            start = max(b for b in bounds if b <= cut)
            left = cut - start
            need = record_len(raw, start) if left >= hdr_size else min_record
            assert problems == [Problem(start, f"capture truncated mid-record at byte {start}: "
                                               f"record needs {need} bytes, {left} left")], cut


def test_truncated_pcap_at_every_offset() -> None:
    raw, bounds, frames = three_record_pcap()
    check_truncations(raw, bounds, frames, bounds[1:], 16, 16,
                      lambda r, s: 16 + struct.unpack_from("<I", r, s + 8)[0])


def test_truncated_pcapng_at_every_offset() -> None:
    raw, bounds, frames = three_record_pcapng()
    epb_ends = [bounds[2], bounds[3], bounds[5]]
    check_truncations(raw, bounds, frames, epb_ends, 8, 12,
                      lambda r, s: struct.unpack_from("<I", r, s + 4)[0])


def test_truncated_gzip_at_every_offset() -> None:
    raw, _, frames = three_record_pcapng()
    gz = gzip.compress(raw, mtime=0)
    for cut in range(len(gz) + 1):
        try:
            got, problems = read_bytes(gz[:cut])
        except CaptureError as exc:
            assert str(exc).startswith("<stream>: "), str(exc)
            continue
        assert got == frames[:len(got)], cut
        if cut == len(gz):
            assert (got, problems) == (frames, [])
        else:
            assert any("gzip stream truncated" in p.message for p in problems), cut


@pytest.mark.parametrize("where", ["crc", "isize", "crc-first-member"])
def test_gzip_check_errors_keep_the_packets(where: str) -> None:
    """A wrong CRC-32 or length in a gzip trailer keeps every packet read, with a warning,
    as a truncated stream does (the data may be damaged; the trailer is what says so)."""
    raw, _, frames = three_record_pcapng()
    if where == "crc-first-member":  # two members, the first one's trailer is wrong
        first, second = gzip.compress(raw[:100], mtime=0), gzip.compress(raw[100:], mtime=0)
        gz = first[:-8] + bytes([first[-8] ^ 1]) + first[-7:] + second
    else:
        gz = bytearray(gzip.compress(raw, mtime=0))
        gz[-8 if where == "crc" else -4] ^= 1
        gz = bytes(gz)
    for reader in (io.BytesIO(gz), TrickleReader(gz, 3)):
        got, problems = read_all(reader)
        assert got == frames
        what = "CRC-32" if where != "isize" else "length"
        at = 100 if where == "crc-first-member" else len(raw)
        assert [p.message for p in problems] == [
            f"gzip {what} check failed: the data may be damaged (after {at} uncompressed "
            "bytes)"]


def test_gzip_header_fields_and_a_header_cut_short() -> None:
    """The optional gzip header fields (name, comment, extra, header CRC) are skipped; a
    header cut short is a truncated stream."""
    raw, _, frames = three_record_pcapng()
    body = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflated = body.compress(raw) + body.flush()
    trailer = struct.pack("<II", zlib.crc32(raw), len(raw))
    head = bytearray(b"\x1f\x8b\x08\x1e" + bytes(6))  # FEXTRA, FNAME, FCOMMENT, FHCRC
    head += struct.pack("<H", 3) + b"xyz" + b"name.pcapng\0" + b"a comment\0"
    head += struct.pack("<H", zlib.crc32(bytes(head)) & 0xFFFF)
    gz = bytes(head) + deflated + trailer
    assert gzip.decompress(gz) == raw  # the standard library agrees it is well formed
    for reader in (io.BytesIO(gz), TrickleReader(gz, 1)):
        assert read_all(reader) == (frames, [])
    for cut in range(4, len(head)):
        with pytest.raises(CaptureError, match="gzip stream truncated"):
            open_capture(io.BytesIO(gz[:cut]))


# -- gzip, pipes, stdin ---------------------------------------------------------------------

def test_gzip_file_and_multi_member(tmp_path: Path) -> None:
    raw, expected = handmade_pcapng()
    path = tmp_path / "x.pcapng.gz"
    path.write_bytes(gzip.compress(raw[:100]) + gzip.compress(raw[100:]))
    with open_capture(path) as r:
        assert r.compressed is True and r.format == "pcapng"
        assert list(r) == expected and r.problems == []


def test_gzip_trailing_garbage_reported() -> None:
    raw, _, frames = three_record_pcap()
    got, problems = read_bytes(gzip.compress(raw) + b"garbage")
    assert got == frames
    assert [p.message for p in problems] == [
        f"data after the end of the gzip stream ignored (after {len(raw)} uncompressed bytes)"]


def test_gzip_of_non_capture() -> None:
    with pytest.raises(CaptureError, match=r"not a pcap or pcapng gzip-compressed file "
                                           r"\(magic 0x68656c6c\)"):
        open_capture(io.BytesIO(gzip.compress(b"hello world")))
    with pytest.raises(CaptureError, match="corrupt gzip data"):
        open_capture(io.BytesIO(b"\x1f\x8b" + b"\xff" * 40))


@pytest.mark.parametrize("compress", [False, True])
def test_pipe_is_read_without_seeking(compress: bool) -> None:
    raw, expected = handmade_pcapng()
    payload = gzip.compress(raw) if compress else raw
    rfd, wfd = os.pipe()

    def feed() -> None:
        with os.fdopen(wfd, "wb") as w:
            for i in range(0, len(payload), 5):
                w.write(payload[i:i + 5])
                w.flush()

    t = threading.Thread(target=feed)
    t.start()
    with os.fdopen(rfd, "rb") as rf:
        frames, problems = read_all(rf)
    t.join()
    assert frames == expected and problems == []


def test_short_reads_unbuffered_stream() -> None:
    raw, _, frames = three_record_pcap()
    assert read_all(TrickleReader(raw, step=3)) == (frames, [])


@pytest.mark.parametrize("compress", [False, True])
def test_stdin_dash(tmp_path: Path, compress: bool) -> None:
    raw, expected = handmade_pcapng()
    src = tmp_path / "in.bin"
    src.write_bytes(gzip.compress(raw) if compress else raw)
    code = ("from roce.pcapio import open_capture\n"
            "r = open_capture('-')\n"
            "fs = list(r)\n"
            "print(r.name, r.format, r.compressed, len(fs), sum(f.ts_ns for f in fs))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with src.open("rb") as stdin:
        out = subprocess.run([sys.executable, "-c", code], stdin=stdin, capture_output=True,
                             text=True, env=env, check=True, timeout=60).stdout
    assert out.split() == ["<stdin>", "pcapng", str(compress), str(len(expected)),
                           str(sum(f.ts_ns for f in expected))]


def test_writer_to_stdout_dash() -> None:
    code = ("from roce.pcapio import write_capture\n"
            "n = write_capture('-', [(b'abc', 5), b'de'], fmt='pcapng', linktype=101)\n"
            "assert n == 2\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env,
                         check=True, timeout=60).stdout
    frames, problems = read_bytes(out)
    assert frames == [Frame(b"abc", 5, 3, 3, 101, 0), Frame(b"de", 0, 2, 2, 101, 0)]
    assert problems == []


# -- streaming -------------------------------------------------------------------------------

class EndlessPcap(io.RawIOBase):
    """An endless pcap stream; counts bytes served."""

    def __init__(self) -> None:
        self.served = 0
        self._pending = pcap_header(nano=True)
        self._i = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while len(self._pending) < len(b):
            self._pending += pcap_record(b"p" * 100, 1, self._i)
            self._i += 1
        n = len(b)
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self.served += n
        return n


def test_reader_is_incremental() -> None:
    stream = EndlessPcap()
    with open_capture(stream) as r:
        it = iter(r)
        first = [next(it) for _ in range(1000)]
    assert [f.ts_ns for f in first] == [NS + i for i in range(1000)]
    assert stream.served <= 3 << 20


def test_memory_stays_flat(tmp_path: Path) -> None:
    path = tmp_path / "big.pcap"
    count = write_capture(path, ((b"q" * 200, i) for i in range(150_000)))
    assert count == 150_000 and path.stat().st_size > 30_000_000
    tracemalloc.start()
    try:
        total = 0
        with open_capture(path) as r:
            for f in r:
                total += f.caplen
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == 200 * 150_000
    assert peak < 8 << 20


# -- errors ----------------------------------------------------------------------------------

def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    with pytest.raises(CaptureError) as info:
        open_capture(path)
    assert str(info.value) == f"{path}: no such file"


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="is a directory"):
        open_capture(str(tmp_path))


def _as_nobody(fn) -> str:
    """Run ``fn`` in a child process that is not root (root reads any file), and return what
    it returned: the permission check is the kernel's, not a simulation of it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, run, report, leave without cleanup handlers
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            os.write(w, fn().encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def test_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(pcap_header())
    path.chmod(0)

    def attempt() -> str:
        try:
            open_capture(path)
        except CaptureError as e:
            return str(e)
        return "opened"

    assert _as_nobody(attempt) == f"{path}: permission denied"


def test_permission_error_is_capture_error(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from roce import pcapio

    def deny(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(pcapio, "open", deny, raising=False)
    path = tmp_path / "x.pcap"
    with pytest.raises(CaptureError) as info:
        open_capture(path)
    assert str(info.value) == f"{path}: permission denied"


def test_empty_and_short_files(tmp_path: Path) -> None:
    path = tmp_path / "empty.pcap"
    path.write_bytes(b"")
    with pytest.raises(CaptureError) as info:
        open_capture(path)
    assert str(info.value) == f"{path}: empty file, not a pcap or pcapng file"
    path.write_bytes(b"\xd4\xc3")
    with pytest.raises(CaptureError, match=r"not a pcap or pcapng file \(only 2 bytes long\)"):
        open_capture(path)
    path.write_bytes(pcap_header()[:20])
    with pytest.raises(CaptureError, match=r"truncated pcap file header \(20 of 24 bytes\)"):
        open_capture(path)


def test_bad_magic_message(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"GET / HTTP/1.1\r\n")
    with pytest.raises(CaptureError) as info:
        open_capture(path)
    assert str(info.value) == f"{path}: not a pcap or pcapng file (magic 0x47455420)"
    assert isinstance(info.value, ValueError)


@given(st.binary(max_size=300))
def test_random_bytes_raise_capture_error(data: bytes) -> None:
    assume(data[:4] not in {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1",
                            b"\xa1\xb2\x3c\x4d", b"\x34\xcd\xb2\xa1", b"\xa1\xb2\xcd\x34",
                            b"\x0a\x0d\x0d\x0a"})
    assume(data[:2] != b"\x1f\x8b")
    with pytest.raises(CaptureError, match=r"^<stream>: "):
        open_capture(io.BytesIO(data))


@given(st.binary(min_size=1, max_size=200))
def test_random_bytes_after_gzip_magic(data: bytes) -> None:
    try:
        frames, _ = read_bytes(b"\x1f\x8b" + data)
    except CaptureError as exc:
        assert str(exc).startswith("<stream>: ")
    else:  # pragma: no cover - a random valid deflate stream of a capture is not expected
        assert isinstance(frames, list)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                max_size=8), st.sampled_from(["pcap", "pcapng"]))
def test_corrupted_captures_never_crash(edits: list[tuple[int, int]], fmt: str) -> None:
    if fmt == "pcap":
        raw = bytearray(three_record_pcap()[0])
    else:
        raw = bytearray(handmade_pcapng()[0])
    for pos, value in edits:
        raw[pos % len(raw)] = value
    try:
        frames, problems = read_bytes(bytes(raw))
    except CaptureError:
        return
    assert all(isinstance(f, Frame) and len(f.data) == f.caplen for f in frames)
    assert all(isinstance(p, Problem) for p in problems)


# -- hypothesis round trips -----------------------------------------------------------------

packet_lists = st.lists(
    st.tuples(st.binary(max_size=120), st.integers(0, 2**32 * NS - 1), st.integers(0, 40)),
    max_size=12)


@given(packet_lists, st.sampled_from(["pcap-ns", "pcap-us", "pcapng"]),
       st.sampled_from([LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL2]))
def test_round_trip_random(packets: list[tuple[bytes, int, int]], fmt: str,
                           linktype: int) -> None:
    out = io.BytesIO()
    writer = (PcapNgWriter(out, linktype) if fmt == "pcapng"
              else PcapWriter(out, linktype, nanosecond=fmt == "pcap-ns"))
    with writer:
        for data, ts, extra in packets:
            writer.write(data, ts, len(data) + extra)
    frames, problems = read_bytes(out.getvalue())
    div = 1000 if fmt == "pcap-us" else 1
    assert frames == [Frame(d, ts // div * div, len(d), len(d) + x, linktype, 0)
                      for d, ts, x in packets]
    assert problems == []


@given(st.lists(st.tuples(st.binary(max_size=60), st.integers(0, 2**32 - 1),
                          st.integers(0, NS - 1)), max_size=8), st.booleans())
def test_big_endian_pcap_matches_little_endian(records: list[tuple[bytes, int, int]],
                                               nano: bool) -> None:
    results = []
    for e in "<>":
        raw = pcap_header(e, nano)
        for data, sec, ns in records:
            raw += pcap_record(data, sec, ns if nano else ns // 1000, e=e)
        results.append(read_bytes(raw))
    assert results[0] == results[1]
    assert [f.ts_ns for f in results[0][0]] == [
        s * NS + (ns if nano else ns // 1000 * 1000) for _, s, ns in records]


@given(st.lists(st.tuples(st.binary(max_size=40), st.integers(0, 2**64 - 1),
                          st.integers(0, 3)), max_size=10))
def test_pcapng_big_endian_hand_built(packets: list[tuple[bytes, int, int]]) -> None:
    raw = shb(">") + b"".join(idb(lt, e=">", options=opt(9, b"\x09", ">"))
                              for lt in (1, 101, 113, 276))
    raw += b"".join(epb(i, ts, d, e=">") for d, ts, i in packets)
    frames, problems = read_bytes(raw)
    lts = (1, 101, 113, 276)
    assert frames == [Frame(d, min(ts, MAX_TS_NS), len(d), len(d), lts[i], i)
                      for d, ts, i in packets]
    # a timestamp past 2^63-1 ns is clamped and reported, once
    assert len(problems) == any(ts > MAX_TS_NS for _d, ts, _i in packets)


# -- write_capture ---------------------------------------------------------------------------

def test_write_capture_item_kinds(tmp_path: Path) -> None:
    frame_a = Frame(b"frame", T0, 5, 64, LINKTYPE_RAW, 3)
    frame_b = Frame(b"other", T0 + 1, 5, 5, LINKTYPE_ETHERNET, 0)
    path = tmp_path / "w.pcapng"
    n = write_capture(path, [b"raw", (b"tuple", 99), frame_a, frame_b, frame_a],
                      fmt="pcapng", linktype=LINKTYPE_ETHERNET)
    assert n == 5
    frames, problems = read_all(path)
    assert frames == [
        Frame(b"raw", 0, 3, 3, LINKTYPE_ETHERNET, 0),
        Frame(b"tuple", 99, 5, 5, LINKTYPE_ETHERNET, 0),
        Frame(b"frame", T0, 5, 64, LINKTYPE_RAW, 1),
        Frame(b"other", T0 + 1, 5, 5, LINKTYPE_ETHERNET, 0),
        Frame(b"frame", T0, 5, 64, LINKTYPE_RAW, 1),
    ]
    assert problems == []
    # a pcap copy of what was read keeps timestamps and lengths
    pcap = tmp_path / "w.pcap"
    eth = [f for f in frames if f.linktype == LINKTYPE_ETHERNET]
    assert write_capture(pcap, eth) == 3
    assert read_all(pcap) == (eth, [])


def test_write_capture_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown capture format 'pcapx'"):
        write_capture(tmp_path / "a", [], fmt="pcapx")
    with pytest.raises(ValueError, match="frame linktype 101 differs"):
        write_capture(io.BytesIO(), [Frame(b"", 0, 0, 0, 101, 0)], linktype=1)
    w = PcapWriter(io.BytesIO())
    with pytest.raises(ValueError, match="out of range"):
        w.write(b"x", -1)
    with pytest.raises(ValueError, match="out of range"):
        w.write(b"x", 2**32 * NS)
    with pytest.raises(ValueError, match="origlen 1 is smaller"):
        w.write(b"xy", 0, origlen=1)
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write(b"x", 0)


# -- interoperability with tshark --------------------------------------------------------------

def tshark_fields(path: Path) -> list[tuple[int, int, int]]:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed (shutil.which('tshark') is None)")
    out = subprocess.run(
        [tshark, "-r", str(path), "-T", "fields", "-e", "frame.len", "-e", "frame.cap_len",
         "-e", "frame.time_epoch"],
        capture_output=True, text=True, check=True, timeout=120).stdout
    rows = []
    for line in out.splitlines():
        length, caplen, epoch = line.split("\t")
        rows.append((int(length), int(caplen), int(Decimal(epoch) * NS)))
    return rows


@pytest.mark.parametrize("fmt", ["pcap-ns", "pcap-us", "pcapng"])
def test_tshark_reads_written_files(tmp_path: Path, fmt: str) -> None:
    packets = [(bytes([i]) * (60 + i), T0 + i * 1_001_001 + 7, 60 + i * 2) for i in range(20)]
    path = tmp_path / f"t.{fmt}"
    if fmt == "pcapng":
        writer: PcapWriter | PcapNgWriter = PcapNgWriter(path)
        second = writer.add_interface(LINKTYPE_ETHERNET)
        third = writer.add_interface(LINKTYPE_RAW)
        assert (second, third) == (0, 1)
    else:
        writer = PcapWriter(path, nanosecond=fmt == "pcap-ns")
    with writer:
        for i, (data, ts, origlen) in enumerate(packets):
            if isinstance(writer, PcapNgWriter):
                writer.write(data, ts, origlen, interface=i % 2)
            else:
                writer.write(data, ts, origlen)
    div = 1000 if fmt == "pcap-us" else 1
    expected = [(origlen, len(data), ts // div * div) for data, ts, origlen in packets]
    assert tshark_fields(path) == expected
    frames, problems = read_all(path)
    assert [(f.origlen, f.caplen, f.ts_ns) for f in frames] == expected and problems == []
