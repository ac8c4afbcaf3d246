"""Streaming pcap / pcapng capture reader and writer (standard library only).

This module owns all capture-file I/O in ``roce``:

* :func:`open_capture` / :class:`CaptureReader` read classic pcap (both byte orders,
  microsecond and nanosecond magic, plus the old "modified" pcap variant) and
  pcapng (multiple sections with their own byte order, multiple interfaces with
  their own link types and timestamp resolutions, EPB, SPB and the obsolete
  Packet Block; every other block type is skipped).  gzip-compressed input is
  detected by its magic number and decompressed on the fly.  ``"-"`` reads
  ``sys.stdin.buffer``.  The reader never seeks, reads in 1 MiB chunks and keeps
  memory flat whatever the file size.
* Damage is reported, not raised: a file that cannot be a capture at all raises
  :class:`CaptureError` (one human-readable line naming the file); damage
  found later (truncated or absurd records) stops iteration normally and is
  recorded in :attr:`CaptureReader.problems`.  Problem offsets are byte offsets
  in the (decompressed) capture stream.
* :class:`PcapWriter`, :class:`PcapNgWriter` and :func:`write_capture` write
  files that tcpdump / Wireshark read.  Timestamps are integer nanoseconds
  since the epoch throughout; they are never converted through ``float``.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import stat
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from roce import interrupts
from roce.errors import CaptureError, InputError
from roce.locate import (
    LINKTYPE_ERF,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
)
from roce.outfile import Output

if TYPE_CHECKING:  # typing.Self is 3.11+; only needed for annotations
    from typing import Self

__all__ = [
    "LINKTYPE_ETHERNET",
    "LINKTYPE_LINUX_SLL",
    "LINKTYPE_LINUX_SLL2",
    "LINKTYPE_RAW",
    "CaptureError",
    "CaptureReader",
    "Frame",
    "PcapNgWriter",
    "PcapWriter",
    "Problem",
    "erf_ts_ns",
    "open_capture",
    "write_capture",
]

# the pcap link types (tcpdump.org LINKTYPE_*) are the walk's (roce.locate), re-exported here

CHUNK = 1 << 20                 # read size
MAX_RECORD = 256 << 20          # largest caplen / block length accepted
MAX_PROBLEMS = 1000             # problems recorded per reader
MAX_TS_NS = (1 << 63) - 1       # timestamps are signed 64-bit nanoseconds (to year 2262)
SCAN_STEP = 8 << 20             # bytes handed to a record consumer per call (scan_records)
_NS = 1_000_000_000

# pcap magic (as it appears on disk) -> (struct byte order, nanosecond, record header size)
_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", False, 16),
    b"\xa1\xb2\xc3\xd4": (">", False, 16),
    b"\x4d\x3c\xb2\xa1": ("<", True, 16),
    b"\xa1\xb2\x3c\x4d": (">", True, 16),
    b"\x34\xcd\xb2\xa1": ("<", False, 24),   # "modified" (Kuznetzov) pcap
    b"\xa1\xb2\xcd\x34": (">", False, 24),
}
_GZIP_MAGIC = b"\x1f\x8b"

# pcapng block types
_SHB = 0x0A0D0D0A
_IDB = 1
_PB = 2
_SPB = 3
_EPB = 6
_BOM_LE = b"\x4d\x3c\x2b\x1a"
_BOM_BE = b"\x1a\x2b\x3c\x4d"
# pcapng option codes
_OPT_END = 0
_OPT_COMMENT = 1
_IF_NAME = 2
_IF_TSRESOL = 9
_IF_TSOFFSET = 14
_SHB_USERAPPL = 4

PathOrFile = str | os.PathLike | BinaryIO


class Frame(NamedTuple):
    """One captured packet."""

    data: bytes      # captured bytes
    ts_ns: int       # absolute timestamp, integer nanoseconds since the epoch
    caplen: int
    origlen: int
    linktype: int
    interface: int   # pcapng interface index within its section (0 for pcap)

    @property
    def truncated(self) -> bool:
        """True when fewer bytes were captured than were on the wire."""
        return self.caplen < self.origlen


class Batch(NamedTuple):
    """Consecutive frames of one link type as columns (``CaptureReader.batches``)."""

    datas: list[bytes]
    ts_ns: Sequence[int]
    caplen: Sequence[int]
    origlen: Sequence[int]
    linktype: int


def pcap_split_reference(buf: Any, pos: int, big_endian: bool, frac_mul: int,
                         max_records: int, out: list[bytes], ts_ns: Any, caplen: Any,
                         origlen: Any, max_record: int, end: int = -1) -> tuple[int, int, int]:
    """Cut complete 16-byte-header pcap records from ``buf[pos:end]`` (``end`` -1: the whole
    buffer; see the compiled twin ``roce._fastpath.pcap_split``): (count, new pos, status 1
    if a record is absurd)."""
    if pos < 0:
        raise ValueError("pcap_split: negative position")
    unpack = struct.Struct(">IIII" if big_endian else "<IIII").unpack_from
    n, count = len(buf) if end < 0 else min(end, len(buf)), 0
    while count < max_records and n - pos >= 16:
        sec, frac, cap, orig = unpack(buf, pos)
        if cap > max_record:
            return count, pos, 1
        if n - pos - 16 < cap:
            break
        out.append(bytes(buf[pos + 16:pos + 16 + cap]))
        ts_ns[count] = sec * _NS + frac * frac_mul
        caplen[count], origlen[count] = cap, orig
        count += 1
        pos += 16 + cap
    return count, pos, 0


def erf_ts_ns(data: bytes, fallback: int) -> int:
    """The time of an ERF record (link type 197), which its own header holds: 64-bit
    little-endian fixed point, whole seconds above a 32-bit binary fraction, to the nearest
    nanosecond (as Wireshark's reader rounds it); ``fallback`` (the capture's record time)
    when the record is too short to hold one.  Frames of link type 197 carry this time, as
    tshark shows it: the capture's own may be microseconds only."""
    if len(data) < 8:
        return fallback
    ts = int.from_bytes(data[:8], "little")
    return (ts >> 32) * _NS + (((ts & 0xFFFFFFFF) * _NS + (1 << 31)) >> 32)


class Problem(NamedTuple):
    """A non-fatal problem found while reading (``offset`` is a stream byte offset)."""

    offset: int
    message: str


class _Interface(NamedTuple):
    linktype: int
    snaplen: int
    mul: int      # ns = ts * mul + offset when mul != 0
    div: int      # otherwise ns = ts // div + offset when div != 0
    shift: int    # otherwise ns = (ts * 10**9 >> shift) + offset
    offset: int   # if_tsoffset in ns


_new_frame = tuple.__new__


def _display_name(src: object) -> str:
    if isinstance(src, (str, os.PathLike)):
        return os.fsdecode(src)
    name = getattr(src, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(name, int):
        return f"<fd {name}>"
    return "<stream>"


class _BadGzip(Exception):
    """A gzip header that is not one (the message says why)."""


# RFC 1952: the member header's flags, and the method every gzip writer uses (deflate).
_FTEXT, _FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 1, 2, 4, 8, 16
_FRESERVED = 0xE0
_DEFLATE = 8
_GZIP_HEADER = 10  # magic, method, flags, mtime, extra flags, OS
_GZIP_TRAILER = 8  # CRC-32 and length (mod 2^32) of the member's uncompressed data


class _GzipSource:
    """Incremental gzip decompression (RFC 1952, multi-member) on top of a raw reader, no
    seeking.

    Each member's header is read here and its deflate body inflated raw, the CRC-32 and the
    length of the data counted as it is handed out and compared with the trailer after the
    member's last byte went: a wrong trailer is a problem reported after the data, as a
    truncated stream is.  (zlib's own gzip mode raises at the trailer and drops the output
    of that call: for a capture that fits one read, every packet.)
    """

    def __init__(self, read: Callable[[int], bytes], first: bytes,
                 report: Callable[[int, str], None]):
        self._read = read
        self._buf = first   # compressed bytes not consumed yet, from ``_off``
        self._off = 0
        self._report = report
        self._state = "header"  # header -> body (its trailer read as it ends) -> header ...
        self._d: Any = None
        self._crc = 0
        self._size = 0
        self._done = False
        self.total = 0      # decompressed bytes handed out so far
        self._raw = len(first)  # compressed bytes read so far

    @property
    def consumed(self) -> int:
        """Compressed bytes decompressed so far: how far through the file the stream is
        (however much a few bytes of it expand to)."""
        return self._raw - (len(self._buf) - self._off)

    def read(self, n: int) -> bytes:
        out = self._read_some(n)
        self.total += len(out)
        return out

    def _fail(self, message: str) -> bytes:
        self._report(self.total, message)
        self._done = True
        return b""

    # -- compressed input: an offset into one buffer, so that many small members do not
    # copy the buffer once each

    def _have(self, n: int) -> bool:
        """At least ``n`` unconsumed bytes buffered (reading more if needed); False at EOF."""
        while len(self._buf) - self._off < n:
            chunk = self._read(CHUNK)
            if not chunk:
                return False
            self._raw += len(chunk)
            self._buf = self._buf[self._off:] + chunk
            self._off = 0
        return True

    def _take(self, n: int) -> bytes | None:
        if not self._have(n):
            return None
        out = self._buf[self._off:self._off + n]
        self._off += n
        return out

    def _skip_text(self) -> bool:
        """Skip a zero-terminated header field (name, comment) of any length in bounded
        memory; False at EOF."""
        while True:
            end = self._buf.find(b"\0", self._off)
            if end >= 0:
                self._off = end + 1
                return True
            self._buf, self._off = b"", 0
            if not self._have(1):
                return False

    def _header(self) -> bool | None:
        """Read a member header: True when read, False at a clean end (no more input), None
        when cut short; _BadGzip when the bytes are not a gzip header."""
        if not self._have(1):
            return False
        if not self._have(_GZIP_HEADER):
            rest = self._buf[self._off:]
            if not _GZIP_MAGIC.startswith(rest[:2]):
                raise _BadGzip("data after the end of the gzip stream ignored")
            return None
        head = self._take(_GZIP_HEADER)
        assert head is not None
        if head[:2] != _GZIP_MAGIC:
            raise _BadGzip("data after the end of the gzip stream ignored")
        if head[2] != _DEFLATE:
            raise _BadGzip(f"corrupt gzip data (unknown compression method {head[2]})")
        flags = head[3]
        if flags & _FRESERVED:
            raise _BadGzip(f"corrupt gzip data (reserved header flags 0x{flags:02x})")
        if flags & _FEXTRA:
            size = self._take(2)
            if size is None or self._take(int.from_bytes(size, "little")) is None:
                return None
        for flag in (_FNAME, _FCOMMENT):
            if flags & flag and not self._skip_text():
                return None
        if flags & _FHCRC and self._take(2) is None:
            return None
        return True

    def _trailer(self, pending: int) -> bool:
        """Check the member's trailer, read as soon as its body ended (so that the stream's
        position counts it); ``pending`` bytes of the body are about to be handed out: a
        problem is reported after them.  False when the trailer is cut short."""
        tail = self._take(_GZIP_TRAILER)
        if tail is None:
            return False
        crc, size = int.from_bytes(tail[:4], "little"), int.from_bytes(tail[4:], "little")
        if crc != self._crc:
            self._report(self.total + pending,
                         "gzip CRC-32 check failed: the data may be damaged")
        elif size != self._size & 0xFFFFFFFF:
            self._report(self.total + pending,
                         "gzip length check failed: the data may be damaged")
        return True

    def _read_some(self, n: int) -> bytes:
        n = max(n, CHUNK)
        while not self._done:
            if self._state == "cut":  # the body's data went out; its trailer is missing
                return self._fail("gzip stream truncated")
            if self._state == "header":
                try:
                    got = self._header()
                except _BadGzip as exc:
                    return self._fail(str(exc))
                if got is None:
                    return self._fail("gzip stream truncated")
                if not got:
                    self._done = True
                    return b""
                self._d, self._crc, self._size = zlib.decompressobj(-15), 0, 0
                self._state = "body"
            d = self._d
            if not self._have(1):
                out = d.decompress(b"", n)  # output zlib held back for want of room
                if not out:
                    return self._fail("gzip stream truncated")
            else:
                try:
                    out = d.decompress(memoryview(self._buf)[self._off:], n)
                except zlib.error as exc:
                    return self._fail(f"corrupt gzip data ({exc})")
                self._buf, self._off = (d.unused_data if d.eof else d.unconsumed_tail), 0
            if out:
                self._crc = zlib.crc32(out, self._crc)
                self._size += len(out)
            if d.eof:
                self._state = "header" if self._trailer(len(out)) else "cut"
            if out:
                return out
        return b""


class CaptureReader:
    """Iterable of :class:`Frame` read from a pcap or pcapng stream; a context manager.

    Attributes: ``name``, ``format`` ("pcap" or "pcapng"), ``compressed``,
    ``nanosecond`` (pcap: nanosecond magic; pcapng: first interface resolution is
    1 ns or finer), ``linktype`` and ``snaplen`` (pcap: global header; pcapng: first
    interface, ``None`` if there is none), ``version`` and ``problems``.
    """

    format: str
    compressed: bool
    version: tuple[int, int]

    def __init__(self, src: PathOrFile):
        self.name = _display_name(src)
        self.problems: list[Problem] = []
        # every link type declared so far (pcap header, pcapng interfaces), in order
        self.linktypes: list[int] = []
        self._ts_clamped = False
        self._own = False
        self._file: BinaryIO
        if isinstance(src, str) and src == "-":
            self.name = "<stdin>"
            self._file = sys.stdin.buffer
        elif isinstance(src, (str, os.PathLike)):
            self._file = self._open(src)
            self._own = True
        else:
            self._file = src
        try:
            # Where the capture starts in the file, when it is one (scan_records maps it).
            self._origin: int | None = self._file.tell() if self._file.seekable() else None
        except (OSError, ValueError, AttributeError):
            self._origin = None
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _open(self, path: str | os.PathLike) -> BinaryIO:
        try:
            return open(path, "rb")
        except FileNotFoundError:
            raise CaptureError(f"{self.name}: no such file") from None
        except PermissionError:
            raise CaptureError(f"{self.name}: permission denied") from None
        except IsADirectoryError:
            raise CaptureError(f"{self.name}: is a directory, not a capture file") from None
        except OSError as exc:
            raise CaptureError(f"{self.name}: cannot open ({exc.strerror or exc})") from None

    def _raw_reader(self) -> Callable[[int], bytes]:
        f = self._file
        read = getattr(f, "read1", None) or f.read
        name = self.name

        def guarded(n: int) -> bytes:
            try:
                data = read(n)
            except IsADirectoryError:
                raise CaptureError(f"{name}: is a directory, not a capture file") from None
            except OSError as exc:
                raise CaptureError(f"{name}: read error ({exc.strerror or exc})") from None
            if data is None:
                return b""
            return data

        return guarded

    def _setup(self) -> None:
        raw = self._raw_reader()
        first = self._read_at_least(raw, b"", 4)
        self.compressed = first.startswith(_GZIP_MAGIC)
        self._gzip: _GzipSource | None = None
        if self.compressed:
            self._gzip = _GzipSource(raw, first, self._gzip_problem)
            self._read: Callable[[int], bytes] = self._gzip.read
            head = self._read_at_least(self._read, b"", 4)
            if len(head) < 4 and self.problems:
                raise CaptureError(f"{self.name}: {self.problems[0].message}")
        else:
            self._read = raw
            head = first
        self._buf = head
        self._pos = 0
        self._base = 0          # stream offset of self._buf[0]
        self._pending: list[Frame] | None = None
        self._started = False
        what = "gzip-compressed file" if self.compressed else "file"
        if not head:
            raise CaptureError(f"{self.name}: empty {what}, not a pcap or pcapng file")
        if len(head) < 4:
            raise CaptureError(
                f"{self.name}: not a pcap or pcapng file (only {len(head)} bytes long)")
        magic = head[:4]
        if magic in _PCAP_MAGIC:
            self._setup_pcap(magic)
        elif magic == b"\x0a\x0d\x0d\x0a":
            self._setup_pcapng()
        else:
            raise CaptureError(
                f"{self.name}: not a pcap or pcapng {what} (magic 0x{magic.hex()})")

    @staticmethod
    def _read_at_least(read: Callable[[int], bytes], have: bytes, need: int) -> bytes:
        parts = [have]
        size = len(have)
        while size < need:
            chunk = read(CHUNK)
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)

    def _setup_pcap(self, magic: bytes) -> None:
        self.format = "pcap"
        self._e, self._nanosecond, self._rec_len = _PCAP_MAGIC[magic]
        buf = self._buf = self._read_at_least(self._read, self._buf, 24)
        if len(buf) < 24:
            raise CaptureError(
                f"{self.name}: truncated pcap file header ({len(buf)} of 24 bytes)")
        major, minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(
            self._e + "HHiIII", buf, 4)
        self.version = (major, minor)
        self._snaplen: int | None = snaplen
        self._linktype: int | None = network & 0xFFFF
        self.linktypes.append(self._linktype)
        self._pos = 24
        self._gen: Iterator[Frame] = self._iter_pcap()

    def _setup_pcapng(self) -> None:
        self.format = "pcapng"
        self._nanosecond = False
        self._linktype = None
        self._snaplen = None
        buf = self._buf = self._read_at_least(self._read, self._buf, 12)
        if len(buf) < 12:
            raise CaptureError(
                f"{self.name}: truncated pcapng section header ({len(buf)} bytes)")
        bom = buf[8:12]
        if bom == _BOM_LE:
            e = "<"
        elif bom == _BOM_BE:
            e = ">"
        else:
            raise CaptureError(
                f"{self.name}: not a pcapng file (bad byte-order magic 0x{bom.hex()})")
        (blen,) = struct.unpack_from(e + "I", buf, 4)
        if blen < 28 or blen % 4 or blen > MAX_RECORD:
            raise CaptureError(
                f"{self.name}: corrupt pcapng section header (block length {blen})")
        buf = self._buf = self._read_at_least(self._read, buf, blen)
        if len(buf) < blen:
            raise CaptureError(
                f"{self.name}: truncated pcapng section header ({len(buf)} of {blen} bytes)")
        self.version = struct.unpack_from(e + "HH", buf, 12)
        self._gen = self._iter_pcapng()

    # -- public surface --------------------------------------------------------------------

    def _prefetch(self) -> None:
        """pcapng: read up to the first packet so the first interface is known."""
        if self._linktype is None and not self._started and self._pending is None:
            self._pending = list(itertools.islice(self._gen, 1))

    @property
    def linktype(self) -> int | None:
        self._prefetch()
        return self._linktype

    @property
    def snaplen(self) -> int | None:
        self._prefetch()
        return self._snaplen

    @property
    def nanosecond(self) -> bool:
        """Whether times are finer than microseconds: the capture's resolution, and always for
        ERF records, whose headers hold nanoseconds (``erf_ts_ns``)."""
        self._prefetch()
        return self._nanosecond or self._linktype == LINKTYPE_ERF

    @property
    def compressed_done(self) -> int | None:
        """For a gzip-compressed capture, the compressed bytes decompressed so far: what a
        progress bar measures against the file's size (the stream's own offsets run past it,
        and the file's read position jumps a megabyte at a time, which may hold a gigabyte of
        records).  None for a capture that is not compressed."""
        return None if self._gzip is None else self._gzip.consumed

    def __iter__(self) -> Iterator[Frame]:
        self._started = True
        pending, self._pending = self._pending, None
        if pending:
            return itertools.chain(pending, self._gen)
        return self._gen

    def batches(self, n: int = 1024) -> Iterator[Batch]:
        """The frames as ``Batch`` columns of at most ``n`` frames of one link type: the fast
        way to read a whole capture (classic pcap is cut in C, no object per frame)."""
        if self.format == "pcap" and self._rec_len == 16 and not self._started:
            yield from self._batches_pcap(n)
            return
        it = iter(self)
        while chunk := list(itertools.islice(it, n)):
            start = 0
            while start < len(chunk):
                lt = chunk[start].linktype
                end = start + 1
                while end < len(chunk) and chunk[end].linktype == lt:
                    end += 1
                part = chunk[start:end]
                yield Batch([f.data for f in part], [f.ts_ns for f in part],
                            [f.caplen for f in part], [f.origlen for f in part], lt)
                start = end

    def _batches_pcap(self, n: int) -> Iterator[Batch]:
        from roce import fast

        split = fast._ext.pcap_split if fast._ext is not None else pcap_split_reference
        held: list[Batch] = []

        def cut(buf: Any, pos: int, end: int, big: bool, frac_mul: int,
                linktype: int) -> tuple[int, int]:
            ts, cap, orig = (array("q", bytes(8 * n)) for _ in range(3))
            out: list[bytes] = []
            count, pos, status = split(buf, pos, big, frac_mul, n, out, ts, cap, orig,
                                       MAX_RECORD, end)
            if count:
                times: Sequence[int] = ts[:count]
                if linktype == LINKTYPE_ERF:
                    times = [erf_ts_ns(d, t) for d, t in zip(out, times)]
                held.append(Batch(out, times, cap[:count], orig[:count], linktype))
            return pos, status

        for _ in self.scan_records(cut):
            yield from held
            held.clear()
        yield from held  # the records before a problem

    def can_scan_records(self) -> bool:
        """Can :meth:`scan_records` take the rest of this capture (classic pcap, not read)?"""
        return self.format == "pcap" and self._rec_len == 16 and not self._started

    def scan_records(self, consume: Callable[..., tuple[int, int]],
                     step: int = SCAN_STEP) -> Iterator[int]:
        """Hand the records of a classic pcap to a consumer that reads them in place:
        ``consume(buf, pos, end, big_endian, frac_mul, linktype) -> (pos, status)`` takes
        the whole records in ``buf[pos:end]`` and says where it stopped (status 1: before a
        record longer than ``MAX_RECORD``).  A plain file is mapped into memory, its pages
        released behind the consumer so memory stays flat; other streams are read in
        chunks.  Yields the stream offset reached after each call.  A truncated last record
        or an absurd length is recorded in ``problems``, as iteration does."""
        if not self.can_scan_records():
            raise ValueError("scan_records: only for a classic pcap not yet read")
        self._started = True
        args = (self._e == ">", 1 if self._nanosecond else 1000, self._linktype)
        mm = self._map()
        if mm is None:
            yield from self._scan_stream(consume, args)
            return
        try:
            yield from self._scan_mapped(mm, consume, args, step)
        finally:
            mm.close()

    def _map(self) -> mmap.mmap | None:
        if self.compressed or self._origin is None:
            return None
        try:
            fd = self._file.fileno()
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size <= self._origin + self._base + self._pos:
                return None
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, AttributeError):
            return None

    def _scan_mapped(self, mm: mmap.mmap, consume: Callable[..., tuple[int, int]],
                     args: tuple[bool, int, int | None], step: int) -> Iterator[int]:
        origin = self._origin or 0
        pos = origin + self._base + self._pos  # a file offset from here on
        self._base = -origin  # so that problems give stream offsets
        n = len(mm)
        released = 0
        can_release = hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED")
        while pos < n:
            new, status = consume(mm, pos, min(pos + step, n), *args)
            if new == pos and not status:  # the next record is longer than a step, or cut
                need = 16 if n - pos < 16 else 16 + struct.unpack_from(self._e + "I", mm,
                                                                         pos + 8)[0]
                if need > MAX_RECORD + 16:
                    status = 1
                elif pos + need > n:
                    self._truncated(pos, need, n - pos)
                    return
                else:
                    new, status = consume(mm, pos, pos + need, *args)
            if status:
                offset = new - origin
                self._problem(offset, f"absurd record length at byte {offset}; stopped reading")
                return
            pos = new
            cut = pos - pos % mmap.PAGESIZE
            if can_release and cut > released:
                mm.madvise(mmap.MADV_DONTNEED, released, cut - released)
                released = cut
            yield pos - origin

    def _scan_stream(self, consume: Callable[..., tuple[int, int]],
                     args: tuple[bool, int, int | None]) -> Iterator[int]:
        buf, pos = self._buf, self._pos
        while True:
            start = pos
            pos, status = consume(buf, pos, len(buf), *args)
            if status:
                offset = self._base + pos
                self._problem(offset, f"absurd record length at byte {offset}; stopped reading")
                return
            yield self._base + pos
            left = len(buf) - pos
            need = 16 if left < 16 else 16 + struct.unpack_from(self._e + "I", buf, pos + 8)[0]
            if left >= need and pos > start:
                # A consumer that takes a batch at a time stopped before the end of the
                # buffer: hand it the rest in place.  Copying the rest out each time would
                # cost the buffer's size per batch: small records (a batch of zero-length
                # ones is 32 KB of a 1 MB buffer) would be read 32 times over.
                continue
            buf = self._refill(buf, pos, need)
            pos = 0
            if len(buf) < need:
                if buf:
                    self._truncated(0, need, len(buf))
                return

    def close(self) -> None:
        if self._own:
            self._own = False
            self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        fmt = getattr(self, "format", "?")
        return f"<CaptureReader {self.name!r} {fmt}>"

    # -- internals -------------------------------------------------------------------------

    def _problem(self, offset: int, message: str) -> None:
        n = len(self.problems)
        if n < MAX_PROBLEMS:
            self.problems.append(Problem(offset, message))
        elif n == MAX_PROBLEMS:
            self.problems.append(Problem(offset, "too many problems; no more are recorded"))

    def _gzip_problem(self, offset: int, message: str) -> None:
        self._problem(offset, f"{message} (after {offset} uncompressed bytes)")

    def _refill(self, buf: bytes, pos: int, need: int) -> bytes:
        """Return a buffer starting at old ``pos`` with >= ``need`` bytes (fewer at EOF)."""
        have = len(buf) - pos
        parts = [buf[pos:]] if have else []
        self._base += pos
        read = self._read
        while have < need:
            chunk = read(CHUNK)
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)

    def _truncated(self, pos: int, need: int, left: int) -> None:
        offset = self._base + pos
        self._problem(
            offset,
            f"capture truncated mid-record at byte {offset}: "
            f"record needs {need} bytes, {left} left")

    def _iter_pcap(self) -> Iterator[Frame]:
        hlen = self._rec_len
        unpack = struct.Struct(self._e + "IIII").unpack_from
        frac_mul = 1 if self._nanosecond else 1000
        linktype = self._linktype
        erf = linktype == LINKTYPE_ERF
        buf, pos = self._buf, self._pos
        n = len(buf)
        new, frame_cls = _new_frame, Frame
        while True:
            if n - pos < hlen:
                buf = self._refill(buf, pos, hlen)
                pos, n = 0, len(buf)
                if n < hlen:
                    if n:
                        self._truncated(0, hlen, n)
                    return
            sec, frac, caplen, origlen = unpack(buf, pos)
            start = pos + hlen
            end = start + caplen
            if end > n:
                if caplen > MAX_RECORD:
                    self._problem(
                        self._base + pos,
                        f"absurd record length {caplen} at byte {self._base + pos}; "
                        "stopped reading")
                    return
                buf = self._refill(buf, pos, hlen + caplen)
                pos, n = 0, len(buf)
                start, end = hlen, hlen + caplen
                if end > n:
                    self._truncated(0, hlen + caplen, n)
                    return
            data = buf[start:end]
            ts_ns = sec * _NS + frac * frac_mul
            yield new(frame_cls, (data, erf_ts_ns(data, ts_ns) if erf else ts_ns,
                                  caplen, origlen, linktype, 0))
            pos = end

    def _parse_idb(self, buf: bytes, pos: int, end: int, e: str) -> _Interface | None:
        linktype, _reserved, snaplen = struct.unpack_from(e + "HHI", buf, pos + 8)
        mul, div, shift, offset = 1000, 0, 0, 0
        for code, value in _iter_options(buf, pos + 16, end - 4, e):
            if code == _IF_TSRESOL and len(value) >= 1:
                v = value[0]
                exp = v & 0x7F
                if v & 0x80:
                    if exp <= 9:
                        mul, div, shift = _NS >> exp, 0, 0
                    else:
                        mul, div, shift = 0, 0, exp
                elif exp <= 9:
                    mul, div, shift = 10 ** (9 - exp), 0, 0
                else:
                    mul, div, shift = 0, 10 ** (exp - 9), 0
            elif code == _IF_TSOFFSET and len(value) >= 8:
                offset = struct.unpack_from(e + "q", value)[0] * _NS
        return _Interface(linktype, snaplen, mul, div, shift, offset)

    def _iter_pcapng(self) -> Iterator[Frame]:
        buf, pos = self._buf, self._pos
        n = len(buf)
        new, frame_cls = _new_frame, Frame
        e = "<"
        u_hdr = struct.Struct(e + "II").unpack_from
        u_len = struct.Struct(e + "I").unpack_from
        u_epb = struct.Struct(e + "IIIII").unpack_from
        ifaces: list[_Interface] = []
        first_iface = True
        while True:
            if n - pos < 12:
                buf = self._refill(buf, pos, 12)
                pos, n = 0, len(buf)
                if n < 12:
                    if n:
                        need = u_hdr(buf, 0)[1] if n >= 8 else 12
                        self._truncated(0, need if 12 <= need <= MAX_RECORD else 12, n)
                    return
            btype, blen = u_hdr(buf, pos)
            if btype == _SHB:
                bom = buf[pos + 8:pos + 12]
                if bom == _BOM_LE:
                    e = "<"
                elif bom == _BOM_BE:
                    e = ">"
                else:
                    self._problem(self._base + pos,
                                  f"bad pcapng byte-order magic 0x{bom.hex()} at byte "
                                  f"{self._base + pos}; stopped reading")
                    return
                u_hdr = struct.Struct(e + "II").unpack_from
                u_len = struct.Struct(e + "I").unpack_from
                u_epb = struct.Struct(e + "IIIII").unpack_from
                blen = u_hdr(buf, pos)[1]
            end = pos + blen
            if end > n or blen < 12 or blen & 3:
                if blen < 12 or blen & 3 or blen > MAX_RECORD:
                    self._problem(self._base + pos,
                                  f"invalid pcapng block length {blen} (type 0x{btype:x}) "
                                  f"at byte {self._base + pos}; stopped reading")
                    return
                buf = self._refill(buf, pos, blen)
                pos, n = 0, len(buf)
                end = blen
                if end > n:
                    self._truncated(0, blen, n)
                    return
            if u_len(buf, end - 4)[0] != blen:
                self._problem(self._base + pos,
                              f"pcapng block at byte {self._base + pos} has mismatched "
                              "trailing length; stopped reading")
                return
            if btype == _EPB:
                if blen < 32:
                    self._bad_block(pos, "enhanced packet block too short")
                    pos = end
                    continue
                iid, tsh, tsl, caplen, origlen = u_epb(buf, pos + 8)
                if caplen > blen - 32:
                    self._bad_block(pos, f"packet length {caplen} exceeds its block")
                    pos = end
                    continue
                try:
                    iface = ifaces[iid]
                except IndexError:
                    self._bad_block(pos, f"packet refers to undefined interface {iid}")
                    pos = end
                    continue
                ts = tsh << 32 | tsl
                if iface.mul:
                    ts_ns = ts * iface.mul + iface.offset
                else:
                    ts_ns = _slow_ns(ts, iface) + iface.offset
                if not 0 <= ts_ns <= MAX_TS_NS:
                    ts_ns = self._clamp_ts(ts_ns, pos)
                start = pos + 28
                data = buf[start:start + caplen]
                if iface.linktype == LINKTYPE_ERF:
                    ts_ns = erf_ts_ns(data, ts_ns)
                yield new(frame_cls, (data, ts_ns, caplen, origlen, iface.linktype, iid))
            elif btype == _SPB:
                if blen < 16 or not ifaces:
                    why = "too short" if ifaces else "before any interface description"
                    self._bad_block(pos, f"simple packet block {why}")
                    pos = end
                    continue
                (origlen,) = u_len(buf, pos + 8)
                iface = ifaces[0]
                caplen = min(origlen, blen - 16)
                if iface.snaplen:
                    caplen = min(caplen, iface.snaplen)
                yield new(frame_cls, (buf[pos + 12:pos + 12 + caplen], 0, caplen, origlen,
                                      iface.linktype, 0))
            elif btype == _IDB:
                if blen < 20:
                    self._bad_block(pos, "interface description block too short")
                    ifaces.append(_Interface(0, 0, 1000, 0, 0, 0))   # keep numbering
                else:
                    iface = self._parse_idb(buf, pos, end, e)
                    ifaces.append(iface)
                    if iface.linktype not in self.linktypes:
                        self.linktypes.append(iface.linktype)
                    if first_iface:
                        first_iface = False
                        self._linktype = iface.linktype
                        self._snaplen = iface.snaplen
                        self._nanosecond = iface.mul in (0, 1)
            elif btype == _SHB:
                if blen < 28:
                    self._bad_block(pos, "section header block too short")
                else:
                    major, minor = struct.unpack_from(e + "HH", buf, pos + 12)
                    if major != 1:
                        self._problem(self._base + pos,
                                      f"unsupported pcapng version {major}.{minor} at byte "
                                      f"{self._base + pos}; stopped reading")
                        return
                ifaces = []
            elif btype == _PB:
                if blen < 32:
                    self._bad_block(pos, "packet block too short")
                    pos = end
                    continue
                iid, _drops, tsh, tsl, caplen, origlen = struct.unpack_from(
                    e + "HHIIII", buf, pos + 8)
                if caplen > blen - 32 or iid >= len(ifaces):
                    self._bad_block(pos, "corrupt packet block")
                    pos = end
                    continue
                iface = ifaces[iid]
                ts = tsh << 32 | tsl
                if iface.mul:
                    ts_ns = ts * iface.mul + iface.offset
                else:
                    ts_ns = _slow_ns(ts, iface) + iface.offset
                if not 0 <= ts_ns <= MAX_TS_NS:
                    ts_ns = self._clamp_ts(ts_ns, pos)
                yield new(frame_cls, (buf[pos + 28:pos + 28 + caplen], ts_ns, caplen, origlen,
                                      iface.linktype, iid))
            pos = end

    def _clamp_ts(self, ts_ns: int, pos: int) -> int:
        """A timestamp outside 0..2^63-1 ns (an if_tsresol of seconds or milliseconds lets a
        64-bit count reach far past it) is the record's problem, not the reader's: it is
        clamped into range, and reported once per capture."""
        if not self._ts_clamped:
            self._ts_clamped = True
            offset = self._base + pos
            self._problem(offset, f"timestamp out of range at byte {offset} "
                                  f"({ts_ns // _NS} s since 1970); clamped to "
                                  f"{'0' if ts_ns < 0 else '2^63-1 ns'} (reported once)")
        return 0 if ts_ns < 0 else MAX_TS_NS

    def _bad_block(self, pos: int, message: str) -> None:
        offset = self._base + pos
        self._problem(offset, f"{message} at byte {offset}; block skipped")


def _slow_ns(ts: int, iface: _Interface) -> int:
    if iface.div:
        return ts // iface.div
    return (ts * _NS) >> iface.shift


def _iter_options(buf: bytes, pos: int, stop: int, e: str) -> Iterator[tuple[int, bytes]]:
    """Yield (code, value) for pcapng options in buf[pos:stop]; stops quietly on damage."""
    u = struct.Struct(e + "HH").unpack_from
    while pos + 4 <= stop:
        code, length = u(buf, pos)
        if code == _OPT_END:
            return
        start = pos + 4
        if start + length > stop:
            return
        yield code, buf[start:start + length]
        pos = start + ((length + 3) & ~3)


def open_capture(src: str | os.PathLike | BinaryIO) -> CaptureReader:
    """Open a pcap / pcapng capture (optionally gzip-compressed) for streaming reading.

    ``src`` is a path, ``"-"`` for standard input, or a binary file object (which
    need not be seekable and is not closed by the reader).  Raises
    :class:`CaptureError` if the input is missing, unreadable or not a capture.
    """
    return CaptureReader(src)


# -- writers -------------------------------------------------------------------------------

class _Writer:
    """What the two writers share: records gathered in a buffer and written ``CHUNK`` bytes
    at a time, always whole (a capture cut by a stop signal ends on a record).  A path is
    written through ``roce.outfile.Output``: under a temporary name renamed by ``close()``,
    removed by ``discard()`` (and by a ``with`` block that raises); ``live=True`` writes it
    in place, readable as it grows (a capture of what is happening).  ``"-"`` is standard
    output; a file object is written as it is and not closed."""

    def __init__(self, dst: PathOrFile, live: bool = False):
        self._output: Output | None = None
        if isinstance(dst, (str, os.PathLike)):
            self._output = Output(dst, "wb", live=live)
            self._file: BinaryIO = self._output.file
        else:
            self._file = dst
        self._out = bytearray()
        self._closed = False
        self.count = 0

    def _flush_buffer(self) -> None:
        if not self._out:
            return
        with interrupts.held():  # the records buffered go out whole, or stay buffered
            view = memoryview(bytes(self._out))
            self._out.clear()
            while view:
                written = self._file.write(view)
                if written is None or written >= len(view):
                    break
                view = view[written:]

    def flush(self) -> None:
        """Write buffered records to the destination and flush it."""
        self._flush_buffer()
        self._file.flush()

    def close(self) -> None:
        """The capture is complete: flush, and close (and name) the destination if this
        writer opened it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._output is None:
            self.flush()
            return
        try:
            self._flush_buffer()
        except BaseException as exc:
            self._output.discard(exc)
            raise
        self._output.commit()

    def discard(self, exc: BaseException | None = None) -> None:
        """The capture is not complete: a file of its own is removed; a stream or a live
        file gets the records buffered (whole ones) and is closed.  ``exc``: what stopped
        it (an interrupt is told which output was removed)."""
        if self._closed:
            return
        self._closed = True
        output = self._output
        if output is None:
            return
        if output.in_place:
            with contextlib.suppress(OSError, InputError):
                self._flush_buffer()
        output.discard(exc)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        else:
            self.discard(exc)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("write to a closed capture writer")


def _check_lengths(data: bytes, origlen: int | None, snaplen: int) -> tuple[int, int]:
    size = len(data)
    caplen = min(size, snaplen) if snaplen else size
    if origlen is None:
        origlen = size
    elif origlen < caplen:
        raise ValueError(f"origlen {origlen} is smaller than captured length {caplen}")
    if origlen > 0xFFFFFFFF:
        raise ValueError(f"origlen {origlen} does not fit in 32 bits")
    return caplen, origlen


class PcapWriter(_Writer):
    """Write a classic pcap file (little-endian; nanosecond magic unless ``nanosecond=False``).

    Packets longer than ``snaplen`` are truncated to it (``origlen`` keeps the full length).
    With ``nanosecond=False`` timestamps are truncated to microseconds.
    """

    MAX_TS_NS = (0xFFFFFFFF + 1) * _NS - 1  # 32-bit seconds: until 2106-02-07

    def __init__(self, dst: PathOrFile, linktype: int = LINKTYPE_ETHERNET,
                 snaplen: int = 262144, nanosecond: bool = True, live: bool = False):
        if not 0 <= linktype <= 0xFFFF:
            raise ValueError(f"linktype {linktype} out of range")
        if not 0 < snaplen <= 0xFFFFFFFF:
            raise ValueError(f"snaplen {snaplen} out of range")
        super().__init__(dst, live)
        self.linktype = linktype
        self.snaplen = snaplen
        self.nanosecond = nanosecond
        self._div = 1 if nanosecond else 1000
        self._hdr = struct.Struct("<IIII").pack
        magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
        self._out += struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)

    def write(self, data: bytes, ts_ns: int | None = None, origlen: int | None = None) -> None:
        """Append one packet; ``ts_ns`` (ns since epoch) defaults to 0."""
        self._check_open()
        if ts_ns is None:
            ts_ns = 0
        sec, frac = divmod(ts_ns, _NS)
        if not 0 <= ts_ns <= self.MAX_TS_NS:
            raise ValueError(f"timestamp {ts_ns} ns out of range for pcap")
        caplen, origlen = _check_lengths(data, origlen, self.snaplen)
        out = self._out
        out += self._hdr(sec, frac // self._div, caplen, origlen)
        out += data if caplen == len(data) else data[:caplen]
        self.count += 1
        if len(out) >= CHUNK:
            self._flush_buffer()


def _pad4(n: int) -> int:
    return (4 - n % 4) % 4


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * _pad4(len(value))


class PcapNgWriter(_Writer):
    """Write a little-endian pcapng file: SHB, one IDB per interface (1 ns resolution), EPBs.

    If :meth:`write` is called before any :meth:`add_interface`, interface 0 is created
    from the constructor's ``linktype`` and ``snaplen``.
    """

    MAX_TS_NS = 0xFFFFFFFFFFFFFFFF  # 64-bit count of 1 ns ticks

    def __init__(self, dst: PathOrFile, linktype: int = LINKTYPE_ETHERNET,
                 snaplen: int = 262144, live: bool = False):
        super().__init__(dst, live)
        self.linktype = linktype
        self.snaplen = snaplen
        self._snaplens: list[int] = []
        self._epb = struct.Struct("<IIIIIII").pack
        opts = _option(_SHB_USERAPPL, b"roce.pcapio") + _option(_OPT_END, b"")
        blen = 28 + len(opts)
        self._out += struct.pack("<IIIHHq", _SHB, blen, 0x1A2B3C4D, 1, 0, -1)
        self._out += opts + struct.pack("<I", blen)

    @property
    def interfaces(self) -> int:
        """Number of interfaces defined so far."""
        return len(self._snaplens)

    def add_interface(self, linktype: int, snaplen: int = 262144,
                      name: str | None = None) -> int:
        """Write an Interface Description Block; return the new interface index."""
        self._check_open()
        if not 0 <= linktype <= 0xFFFF:
            raise ValueError(f"linktype {linktype} out of range")
        if not 0 <= snaplen <= 0xFFFFFFFF:
            raise ValueError(f"snaplen {snaplen} out of range")
        opts = b""
        if name is not None:
            opts += _option(_IF_NAME, name.encode())
        opts += _option(_IF_TSRESOL, b"\x09") + _option(_OPT_END, b"")
        blen = 20 + len(opts)
        self._out += struct.pack("<IIHHI", _IDB, blen, linktype, 0, snaplen)
        self._out += opts + struct.pack("<I", blen)
        self._snaplens.append(snaplen)
        return len(self._snaplens) - 1

    def write(self, data: bytes, ts_ns: int | None = None, origlen: int | None = None,
              interface: int = 0) -> None:
        """Append one packet on ``interface``; ``ts_ns`` (ns since epoch) defaults to 0."""
        self._check_open()
        if not self._snaplens:
            self.add_interface(self.linktype, self.snaplen)
        if not 0 <= interface < len(self._snaplens):
            raise ValueError(f"interface {interface} has not been added")
        if ts_ns is None:
            ts_ns = 0
        if not 0 <= ts_ns <= self.MAX_TS_NS:
            raise ValueError(f"timestamp {ts_ns} ns out of range for pcapng")
        caplen, origlen = _check_lengths(data, origlen, self._snaplens[interface])
        pad = _pad4(caplen)
        blen = 32 + caplen + pad
        out = self._out
        out += self._epb(_EPB, blen, interface, ts_ns >> 32, ts_ns & 0xFFFFFFFF,
                         caplen, origlen)
        out += data if caplen == len(data) else data[:caplen]
        out += b"\0" * pad
        out += blen.to_bytes(4, "little")
        self.count += 1
        if len(out) >= CHUNK:
            self._flush_buffer()


def write_capture(dst: PathOrFile, frames: Iterable[bytes | Frame | tuple[bytes, int]],
                  fmt: str = "pcap", linktype: int = LINKTYPE_ETHERNET) -> int:
    """Write ``frames`` to ``dst`` as "pcap" (nanosecond) or "pcapng"; return the count.

    Items are raw bytes (timestamp 0), ``(data, ts_ns)`` tuples, or :class:`Frame`
    objects (timestamp and origlen kept).  In pcapng each distinct
    ``(interface, linktype)`` of the Frames becomes its own interface; in pcap every
    Frame must have ``linktype`` (ValueError otherwise).
    """
    if fmt == "pcap":
        writer: PcapWriter | PcapNgWriter = PcapWriter(dst, linktype)
    elif fmt == "pcapng":
        writer = PcapNgWriter(dst, linktype)
    else:
        raise ValueError(f"unknown capture format {fmt!r} (expected 'pcap' or 'pcapng')")
    ng = writer if isinstance(writer, PcapNgWriter) else None
    iface_of: dict[tuple[int, int], int] = {}
    with writer:
        for item in frames:
            origlen = None
            key = (0, linktype)
            if isinstance(item, Frame):
                data, ts_ns, origlen = item.data, item.ts_ns, item.origlen
                key = (item.interface, item.linktype)
                if not ng and item.linktype != linktype:
                    raise ValueError(f"frame linktype {item.linktype} differs from the "
                                     f"capture linktype {linktype}")
            elif isinstance(item, tuple):
                data, ts_ns = item
            else:
                data, ts_ns = item, 0
            if ng is not None:
                iface = iface_of.get(key)
                if iface is None:
                    iface = iface_of[key] = ng.add_interface(key[1], ng.snaplen)
                ng.write(data, ts_ns, origlen, iface)
            else:
                writer.write(data, ts_ns, origlen)
        return writer.count
