"""Shared by the columnar, many-file and Dask tests: emulator captures (made by the
benchmark's own helper, not a copy of it), captures cut into pieces, and the CLI run in
this process."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from roce.cli import main
from roce.pcapio import Frame, PcapWriter, open_capture

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench_decode import make_capture  # noqa: E402  (the benchmark's capture maker)

__all__ = ["make_capture", "roce_cli", "split_capture", "write_frames"]


def write_frames(path: Path, frames: list[Frame]) -> Path:
    with PcapWriter(path) as w:
        for f in frames:
            w.write(f.data, ts_ns=f.ts_ns, origlen=f.origlen)
    return path


def split_capture(src: Path, directory: Path, cuts: list[int]) -> list[Path]:
    """``src`` cut before each frame index in ``cuts`` (our writer, as ``editcap -c``
    would): len(cuts) + 1 files, in order."""
    frames = list(open_capture(src))
    edges = [0, *cuts, len(frames)]
    directory.mkdir(parents=True, exist_ok=True)
    return [write_frames(directory / f"part{i:02d}.pcap", frames[a:b])
            for i, (a, b) in enumerate(zip(edges, edges[1:]))]


def roce_cli(*argv: str) -> tuple[int, str, str]:
    """``roce ARGV`` in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, out.getvalue(), err.getvalue()
