"""A gzip-compressed capture of zero-length records (16 bytes a record, a gigabyte of them in a
megabyte of gzip) is read whole, every record counted, and its progress is measured in the
compressed bytes, which move smoothly however much a few of them expand to.  What a record
costs against an ordinary one is measured in bench/bench_zero_records.py."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import pytest

from roce.pcapio import open_capture

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_zero_records import ordinary as _ordinary  # noqa: E402  (the benchmark's captures)
from bench_zero_records import zero_records as _zero_records  # noqa: E402

RECORDS = 400_000


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("zero")
    zero, ordinary = d / "zero.pcap.gz", d / "ordinary.pcap.gz"
    _zero_records(zero, RECORDS)
    _ordinary(ordinary, RECORDS)
    return {"zero": zero, "ordinary": ordinary}


def test_zero_length_records_are_all_counted(captures: dict[str, Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from roce.cli import main

    assert main(["stats", "-T", "json", str(captures["zero"])]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert totals["frames"] == totals["malformed"] == RECORDS


def test_progress_follows_the_compressed_bytes(captures: dict[str, Path]) -> None:
    """What the progress bar measures (``compressed_done``) grows with the records read, a
    little at a time, and reaches the file's size: half the records, about half the file."""
    size = os.path.getsize(captures["zero"])
    seen = []
    with open_capture(captures["zero"]) as reader:
        assert reader.compressed_done is not None
        n = 0
        for batch in reader.batches(2048):
            n += len(batch.datas)
            seen.append((n, reader.compressed_done))
    assert n == RECORDS
    assert [d for _, d in seen] == sorted(d for _, d in seen)
    assert seen[-1][1] == size
    half = next(d for k, d in seen if k >= RECORDS // 2)
    assert 0.2 * size < half < 0.8 * size, (half, size)
    with open_capture(captures["ordinary"]) as plain:
        assert plain.compressed_done is not None  # gzip too
    # a capture that is not compressed has no compressed position
    raw = captures["zero"].parent / "raw.pcap"
    with open(raw, "wb") as f:
        f.write(gzip.decompress(captures["zero"].read_bytes())[:24 + 16 * 10])
    with open_capture(raw) as r:
        assert r.compressed_done is None and len(list(r)) == 10
