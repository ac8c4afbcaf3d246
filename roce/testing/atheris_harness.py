"""Coverage-guided fuzzing (atheris / libFuzzer) of the compiled fast path against its
pure-Python references.

One input drives one of five entry points, chosen by its first byte:

- ``walk``: ``_fastpath.walk(frame, linktype, port)`` == ``roce.locate.walk``;
- ``scan``: the input cut into frames, ``_fastpath.scan`` == ``roce.fast.scan_reference``
  column by column (ICRC check on);
- ``icrc``: for a frame that walks, ``_fastpath.icrc_at`` and ``_fastpath.icrc`` ==
  ``roce.icrc.icrc_at``;
- ``decode_headers``: ``_fastpath.decode_headers`` == ``roce.packet.decode_headers_reference``;
- ``pcap_split``: the input as pcap records, ``_fastpath.pcap_split`` ==
  ``roce.pcapio.pcap_split_reference`` (results and columns).

A disagreement raises ``AssertionError``; libFuzzer then saves the input as ``crash-*``.

``roce fuzz coverage`` runs it (``run``), for a bounded time or number of inputs (atheris
comes with ``pip install "roce[fuzz]"`` on CPython < 3.12, x86-64)::

    roce fuzz coverage --count 100000
    roce fuzz coverage --time 60 -- CORPUS_DIR -max_len=4096

Without a corpus directory a temporary one is seeded with valid frames of every opcode
(``roce.testing.fuzz.seed_pool``).  Coverage comes from the pure-Python references, which
atheris instruments and which follow the same branches as the C code; to see coverage
inside the extension itself, rebuild it with ``CC=clang CFLAGS=-fsanitize=fuzzer-no-link``.
``check(data)`` is the per-input function, usable without atheris (the tests call it).
"""

from __future__ import annotations

import os
import random
import struct
import tempfile
from array import array

from roce import fast, icrc, locate
from roce.errors import UsageError
from roce.headers import SIZE_OF
from roce.locate import (
    OK,
    ROCE_PORT,
    WALK_LINKTYPES,
)
from roce.opcodes import OPCODES
from roce.packet import decode_headers_reference
from roce.pcapio import MAX_RECORD, pcap_split_reference
from roce.testing._extras import FUZZ_EXTRA_HINT

LINKTYPE_IEEE802_11 = 105  # one link type the walk does not read: it must refuse it the same
LINKTYPES = (*WALK_LINKTYPES, LINKTYPE_IEEE802_11)
TARGETS = ("walk", "scan", "icrc", "decode_headers", "pcap_split")


def _split(data: bytes, n: int) -> list[bytes]:
    """Cut ``data`` into at most ``n`` frames at lengths taken from its own bytes."""
    out, pos = [], 0
    while pos < len(data) and len(out) < n:
        size = data[pos] * 2 + 1
        out.append(data[pos + 1:pos + 1 + size])
        pos += 1 + size
    return out


def check(data: bytes) -> str:
    """Run one input through one fast-path entry point and its twin; raise AssertionError on
    any difference.  Returns the entry point's name."""
    ext = fast._ext
    if ext is None:
        raise RuntimeError("the compiled fast path is not built")
    if len(data) < 3:
        data = data + bytes(3 - len(data))
    target = TARGETS[data[0] % len(TARGETS)]
    linktype = LINKTYPES[data[1] % len(LINKTYPES)]
    port = ROCE_PORT if data[2] < 240 else data[2] * 17
    body = data[3:]
    if target == "walk":
        got, want = ext.walk(body, linktype, port), locate.walk(body, linktype, port)
        assert got == want, f"walk: fast {got} reference {want}"
    elif target == "scan":
        frames = _split(body, 8)
        got, want = fast.scan_columns(len(frames)), fast.scan_columns(len(frames))
        ext.scan(frames, linktype, port, True, got)
        fast.scan_reference(frames, linktype, port, True, want)
        for name in fast.SCAN_COLUMNS:
            assert list(got[name]) == list(want[name]), f"scan column {name}"
    elif target == "icrc":
        w = locate.walk(body, linktype, port)
        if w.status == OK:
            want = icrc.icrc_at(body, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
            got = ext.icrc_at(body, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
            assert got == want, f"icrc_at: fast {got:#x} reference {want:#x}"
            stored = int.from_bytes(body[w.icrc_off:w.l4_end], "big")
            assert ext.icrc(body, linktype, port) == (OK, want, stored), "icrc()"
    elif target == "decode_headers":
        w = locate.walk(body, linktype, port)
        if w.bth_off >= 0 and w.bth_off + SIZE_OF["bth"] <= len(body) and w.opcode in OPCODES:
            got = ext.decode_headers(body, w, linktype)
            want = decode_headers_reference(body, w, linktype)
            assert got == want, f"decode_headers: fast {got} reference {want}"
    else:
        big = bool(data[1] & 1)
        frac = 1000 if data[1] & 2 else 1
        limit = 1 + data[2] % 16
        results = []
        for split in (ext.pcap_split, pcap_split_reference):
            out: list[bytes] = []
            cols = [array("q", bytes(8 * limit)) for _ in range(3)]
            res = split(body, 0, big, frac, limit, out, *cols, MAX_RECORD)
            results.append((res, out, [list(c[:res[0]]) for c in cols]))
        assert results[0] == results[1], "pcap_split"
    return target


def _seed_corpus() -> str:
    """A directory of inputs built from valid frames, one per entry point."""
    from roce.testing.fuzz import seed_pool

    d = tempfile.mkdtemp(prefix="roce-atheris-")
    pool = seed_pool(random.Random(0), per_opcode=1)
    for i, frame in enumerate(pool):
        for t in range(len(TARGETS)):
            if TARGETS[t] == "pcap_split":
                body = struct.pack("<IIII", 1, 2, len(frame), len(frame)) + frame
            elif TARGETS[t] == "scan":
                body = bytes([min((len(frame) - 1) // 2, 255)]) + frame
            else:
                body = frame
            with open(os.path.join(d, f"{i:04d}-{t}"), "wb") as f:
                f.write(bytes([t, 0, 0]) + body)
    return d


def run(libfuzzer_args: list[str]) -> None:
    """Fuzz with libFuzzer's command line ``libfuzzer_args`` (options such as
    ``-atheris_runs=N``, and corpus directories; a seeded one is added when none is given).
    libFuzzer ends the process itself: status 0 when the run ends with every input agreeing,
    non-zero once it saved a disagreement as ``crash-*``.  Without atheris: ``UsageError``
    naming the extra that brings it."""
    try:
        import atheris
    except ImportError:
        raise UsageError(f"coverage-guided fuzzing needs atheris, which is not installed: "
                         f"{FUZZ_EXTRA_HINT} (CPython < 3.12, x86-64)") from None
    args = list(libfuzzer_args)
    if not any(not a.startswith("-") for a in args):
        args.append(_seed_corpus())
    # roce is imported already (this module is part of it): instrument the reference
    # functions one by one; their branches mirror the C code's
    for fn in (locate.walk, locate._ipv4, locate._ipv6, locate._udp, locate._grh,
               locate._transport, fast.scan_reference, icrc.icrc_at,
               decode_headers_reference, pcap_split_reference, check):
        atheris.instrument_func(fn)
    # libFuzzer reads its own command line: the first word is the program's name
    atheris.Setup(["roce fuzz coverage", *args], lambda data: check(bytes(data)))
    atheris.Fuzz()
