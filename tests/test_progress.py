"""The progress bar of ``roce decode`` and ``roce stats``: on a terminal's stderr only, after
``ROCE_PROGRESS_AFTER`` seconds, with the frame count; never in piped output."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import roce
from roce.pcapio import PcapWriter

FRAMES = 3000


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("progress") / "p.pcap"
    with PcapWriter(path) as w:
        for i in range(FRAMES):
            w.write(roce.craft("RC_SEND_ONLY", bytes(64), psn=i).to_bytes(), ts_ns=i * 1000)
    return path


def run_on_terminal(args: list[str], after: str | None) -> tuple[int, str, bytes]:
    """Run ``roce ARGS`` with stderr on a pseudo-terminal and stdout piped: (status, what the
    terminal got, stdout)."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120")
    env.pop("ROCE_PROGRESS_AFTER", None)
    if after is not None:
        env["ROCE_PROGRESS_AFTER"] = after
    # stdout goes to a file: a pipe nobody reads while the terminal is drained would fill.
    sink = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "roce", *args], stdout=sink, stderr=slave,
                            env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait()
    os.close(master)
    sink.seek(0)
    out = sink.read()
    sink.close()
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace"), out


@pytest.mark.parametrize("command, label", [("stats", "analysing"), ("decode", "decoding")])
def test_bar_on_a_terminal(capture: Path, command: str, label: str) -> None:
    status, term, out = run_on_terminal([command, str(capture)], after="0")
    assert status == 0
    assert label in term and f"{FRAMES:,} frames" in term
    assert "MB" in term or "kB" in term  # the file's size is known: bytes done are shown
    assert label.encode() not in out and out  # the output itself is untouched


@pytest.mark.parametrize("command", ["stats", "decode"])
def test_no_bar_for_a_short_run(capture: Path, command: str) -> None:
    status, term, out = run_on_terminal([command, str(capture)], after=None)
    assert status == 0 and out
    assert "frames" not in term


@pytest.mark.parametrize("command", ["stats", "decode"])
def test_no_bar_when_stderr_is_piped(capture: Path, command: str) -> None:
    env = dict(os.environ, ROCE_PROGRESS_AFTER="0")
    r = subprocess.run([sys.executable, "-m", "roce", command, str(capture)],
                       capture_output=True, env=env)
    assert r.returncode == 0 and r.stdout
    assert r.stderr == b""
