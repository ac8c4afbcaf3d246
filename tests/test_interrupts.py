"""Stopped and failing commands, end to end: SIGINT, SIGTERM and SIGHUP stop every command
alike (exit 130, one line on stderr naming the command and what was interrupted); an output
is complete and valid or absent (a Parquet file with its footer, a pcap ending on a whole
record, a sweep table of whole rows); worker processes stop with their parent; a full disk,
a read-only file system, a missing permission are input/output errors (exit 2), never bugs.

The commands run as the ``roce`` script does (``python -m roce``) and are stopped as a
service manager, a batch scheduler or ``timeout`` would stop them.  Root ignores file
permissions, so a read-only place is a read-only tmpfs mounted in a private mount namespace
(``unshare -m``) and a denied one is a mode 0555 directory written by root without
CAP_DAC_OVERRIDE (``setpriv``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import roce
from roce.pcapio import PcapWriter, open_capture

FRAMES = 300_000  # enough that decoding one capture takes a few seconds
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _default_signals() -> None:
    # as a service manager starts a program: every stop signal at its default action
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def start(*argv: str, stdout: int | None = subprocess.DEVNULL,
          preexec: Callable[[], None] = _default_signals,
          env: dict[str, str] | None = None) -> subprocess.Popen:
    # unbuffered: what head() reads is all that was read (communicate() reads the rest)
    return subprocess.Popen([sys.executable, "-m", "roce", *argv], stdout=stdout,
                            stderr=subprocess.PIPE, bufsize=0, preexec_fn=preexec,
                            env={**ENV, **(env or {})})


def head(proc: subprocess.Popen, size: int) -> bytes:
    """At least ``size`` bytes of the process's standard output."""
    got = bytearray()
    while len(got) < size:
        chunk = proc.stdout.read(size - len(got))
        assert chunk, proc.stderr.read()
        got += chunk
    return bytes(got)


def run(*argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roce", *argv], capture_output=True,
                          text=True, timeout=120, env=ENV, **kw)  # type: ignore[call-overload]


def wait_for(what: Callable[[], object], proc: subprocess.Popen, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not what():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} first: {proc.stderr.read()!r}")
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def stop(proc: subprocess.Popen, sig: int, timeout: float = 15) -> tuple[int, str]:
    """Send ``sig``; the exit status and stderr, once it is gone (within ``timeout``)."""
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"still running {timeout} s after {signal.Signals(sig).name}") \
            from None
    return proc.returncode, err.decode()


def temporaries(directory: Path) -> list[Path]:
    return [p for p in directory.rglob(".*.tmp")]


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A capture of ``FRAMES`` small RoCE frames."""
    path = tmp_path_factory.mktemp("big") / "big.pcap"
    frames = [roce.craft("RC_SEND_ONLY", bytes(16), dqpn=0x11, psn=i).to_bytes()
              for i in range(64)]
    with PcapWriter(path) as w:
        for i in range(FRAMES):
            w.write(frames[i % 64], 1_700_000_000_000_000_000 + i * 1000)
    return path


@pytest.fixture(scope="module")
def captures(big: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of four such captures (hard links)."""
    d = tmp_path_factory.mktemp("set")
    for i in range(4):
        os.link(big, d / f"c{i}.pcap")
    return d


def children_of(proc: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(proc.pid).children(recursive=True)


def assert_gone(procs: list[psutil.Process], within: float = 5) -> None:
    _, alive = psutil.wait_procs(procs, timeout=within)
    assert not alive, f"left behind: {[p.pid for p in alive]}"


# -- one output, stopped ------------------------------------------------------------------------


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_decode_parquet_stopped_leaves_no_file(big: Path, tmp_path: Path, sig: int) -> None:
    out = tmp_path / "out.parquet"
    proc = start("decode", "-T", "parquet", "-w", str(out), str(big))
    wait_for(lambda: any(p.stat().st_size > 4 for p in temporaries(tmp_path)), proc)
    code, err = stop(proc, sig)
    name = signal.Signals(sig).name
    assert code == 130
    assert re.fullmatch(rf"roce decode: interrupted \({name}\) after [\d,]+ frames; "
                        rf"{re.escape(str(out))} removed", one_line(err)), err
    assert not out.exists() and temporaries(tmp_path) == []


def test_an_earlier_output_is_left_as_it_was(big: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    out.write_bytes(b"earlier")
    proc = start("decode", "-T", "arrow", "-w", str(out), str(big))
    wait_for(lambda: any(p.stat().st_size > 4 for p in temporaries(tmp_path)), proc)
    code, err = stop(proc, signal.SIGTERM)
    assert code == 130 and one_line(err).endswith(f"; {out} left as it was"), err
    assert out.read_bytes() == b"earlier" and temporaries(tmp_path) == []


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_decode_to_a_pipe_stopped_ends_valid(big: Path, fmt: str) -> None:
    proc = start("decode", "-T", fmt, "-w", "-", str(big), stdout=subprocess.PIPE)
    first = head(proc, 200_000)  # the first row groups are out
    proc.send_signal(signal.SIGTERM)
    data, err = proc.communicate(timeout=30)
    data = first + data
    assert proc.returncode == 130
    m = re.fullmatch(r"roce decode: interrupted \(SIGTERM\) after [\d,]+ frames; "
                     r"standard output ends after ([\d,]+) rows", one_line(err.decode()))
    assert m, err
    rows = int(m.group(1).replace(",", ""))
    table = (pq.read_table(io.BytesIO(data)) if fmt == "parquet"
             else pa.ipc.open_stream(data).read_all())
    assert 0 < table.num_rows == rows < FRAMES


def test_craft_stopped_leaves_no_file(tmp_path: Path) -> None:
    out = tmp_path / "c.pcap"
    proc = start("craft", "rc-send-only", "--count", "50000000", "-q", "-w", str(out))
    wait_for(lambda: any(p.stat().st_size > 1 << 20 for p in temporaries(tmp_path)), proc)
    code, err = stop(proc, signal.SIGTERM)
    assert code == 130
    assert re.fullmatch(rf"roce craft: interrupted \(SIGTERM\) after [\d,]+ frames; "
                        rf"{re.escape(str(out))} removed", one_line(err)), err
    assert not out.exists() and temporaries(tmp_path) == []


def test_a_pcap_on_a_pipe_ends_on_a_whole_record() -> None:
    proc = start("craft", "rc-send-only", "--count", "50000000", "-q", "-w", "-",
                 stdout=subprocess.PIPE)
    first = head(proc, 3_000_000)
    proc.send_signal(signal.SIGHUP)
    data, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    m = re.fullmatch(r"roce craft: interrupted \(SIGHUP\) after ([\d,]+) frames",
                     one_line(err.decode()))
    assert m, err
    with open_capture(io.BytesIO(first + data)) as reader:
        psns = [roce.parse(f.data).fields()["bth.psn"] for f in reader]
        assert reader.problems == []  # no record cut short
    assert psns == list(range(len(psns)))
    assert len(psns) == int(m.group(1).replace(",", ""))


def test_jsonl_on_a_pipe_ends_on_a_whole_line(big: Path) -> None:
    proc = start("decode", "-T", "jsonl", str(big), stdout=subprocess.PIPE)
    first = head(proc, 1_000_000)
    proc.send_signal(signal.SIGTERM)
    data, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert one_line(err.decode()) == "roce decode: interrupted (SIGTERM)"
    lines = (first + data).decode().splitlines()
    assert 100 < len(lines) < FRAMES
    numbers = [json.loads(line)["frame.number"] for line in lines]
    assert numbers == list(range(1, len(lines) + 1))


def test_a_reader_that_stopped_reading_does_not_hold_the_stop_back() -> None:
    proc = start("craft", "rc-send-only", "--count", "50000000", "-q", "-w", "-",
                 stdout=subprocess.PIPE)  # nobody reads: the pipe fills
    time.sleep(2)
    t0 = time.monotonic()
    code, err = stop(proc, signal.SIGTERM)
    proc.stdout.close()
    assert code == 130 and time.monotonic() - t0 < 10
    assert one_line(err).startswith("roce craft: interrupted (SIGTERM) after ")


def test_emulate_stopped_leaves_no_pcap(tmp_path: Path) -> None:
    out = tmp_path / "run.pcap"
    proc = start("emulate", "--size", "64K", "--count", "1000000", "--no-progress", "-w",
                 str(out), stdout=subprocess.PIPE)
    wait_for(lambda: any(p.stat().st_size > 1 << 20 for p in temporaries(tmp_path)), proc)
    code, err = stop(proc, signal.SIGTERM)
    assert code == 130 and one_line(err) == f"roce emulate: interrupted (SIGTERM); {out} removed"
    assert not out.exists() and temporaries(tmp_path) == []


def test_nohup_keeps_sighup_ignored(big: Path, tmp_path: Path) -> None:
    def nohup() -> None:
        _default_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    out = tmp_path / "out.parquet"
    proc = start("decode", "-T", "parquet", "-w", str(out), str(big), preexec=nohup)
    wait_for(lambda: temporaries(tmp_path), proc)
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert proc.poll() is None  # still running
    code, err = stop(proc, signal.SIGTERM)
    assert code == 130 and "interrupted (SIGTERM)" in err


# -- worker processes ----------------------------------------------------------------------------


def test_decode_workers_stop_with_their_parent(captures: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = start("decode", "-T", "parquet", "-j", "2", "-w", f"{out}/", str(captures))
    wait_for(lambda: out.is_dir() and len(temporaries(out)) == 2, proc)
    workers = children_of(proc)
    assert len(workers) >= 2
    t0 = time.monotonic()
    code, err = stop(proc, signal.SIGTERM)
    assert code == 130 and time.monotonic() - t0 < 8
    assert re.fullmatch(r"roce decode: interrupted \(SIGTERM\) after [0-3] of 4 files; "
                        r"2 worker processes stopped", one_line(err)), err
    assert_gone(workers)
    assert temporaries(out) == []
    for p in out.iterdir():  # those finished are whole
        assert pq.read_table(p).num_rows == FRAMES


def test_sweep_workers_stop_and_rows_are_whole(tmp_path: Path) -> None:
    out = tmp_path / "sweep.csv"
    # 200 MiB per run (~0.8 s each, ~5 s for the twelve on two workers): the stop a second in
    # finds runs under way, with room for a faster emulator
    argv = ["sweep", "--grid", "loss=0,0.01,0.02,0.03", "seed=1,2,3", "--size", "1M",
            "--count", "200", "-o", str(out), "-j", "2"]
    proc = start(*argv, env={"ROCE_SWEEP_SAVE_EVERY": "0"})
    wait_for(lambda: len(children_of(proc)) >= 2, proc)
    workers = children_of(proc)
    time.sleep(1)
    code, err = stop(proc, signal.SIGTERM)
    assert code == 130
    plan, last = err.strip().splitlines()  # the plan of the runs, then the stop
    assert plan.startswith("roce sweep: 12 runs, 0 already in")
    m = re.fullmatch(r"roce sweep: interrupted \(SIGTERM\) after (\d+) of 12 runs; "
                     r"2 worker processes stopped; "
                     rf"(?:\1 new rows saved in {re.escape(str(out))}|{re.escape(str(out))} "
                     "unchanged)", last)
    assert m, err
    assert_gone(workers)
    assert temporaries(tmp_path) == []
    saved = int(m.group(1))
    if saved:
        with open(out, newline="") as f:
            rows = list(csv.reader(f))
        assert len(rows) == saved + 1 and len({len(r) for r in rows}) == 1  # whole rows
    else:
        assert not out.exists()
    again = run(*argv)
    assert again.returncode == 0 and f"{saved} already in" in again.stderr, again.stderr


def test_dask_tasks_cancelled_and_outputs_whole(captures: Path, tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    out = tmp_path / "out"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=None, scheduler_port=0) as cluster:
        proc = start("decode", "-T", "parquet", "--scheduler", cluster.scheduler_address,
                     "-w", f"{out}/", str(captures))
        wait_for(lambda: out.is_dir() and temporaries(out), proc)
        code, err = stop(proc, signal.SIGTERM)
        assert code == 130
        assert re.fullmatch(r"roce decode: interrupted \(SIGTERM\) after 0 of 4 files",
                            one_line(err)), err
        with Client(cluster.scheduler_address) as client:
            end = time.monotonic() + 60  # the task running goes to its end; none starts
            while any(client.processing().values()) or temporaries(out):
                assert time.monotonic() < end
                time.sleep(0.1)
    written = list(out.iterdir())
    assert len(written) <= 1  # one thread: at most the task that was running
    for p in written:
        assert pq.read_table(p).num_rows == FRAMES


# -- outputs that cannot be written --------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["decode", "-T", "parquet", "-w", "/dev/full", "{cap}"],
    ["decode", "-T", "arrow", "-w", "/dev/full", "{cap}"],
    ["craft", "rc-send-only", "--count", "100000", "-q", "-w", "/dev/full"],
    ["emulate", "--count", "2", "--size", "64K", "-w", "/dev/full"],
    ["replay", "{cap}", "-w", "/dev/full"],
], ids=lambda a: " ".join(a[:3]))
def test_a_full_disk_is_an_input_output_error(argv: list[str]) -> None:
    cap = ROOT / "pcaps" / "example.pcap"
    r = run(*[a.format(cap=cap) for a in argv])
    assert r.returncode == 2, r.stderr
    assert one_line(r.stderr).endswith("cannot write /dev/full: no space left on device")


def test_standard_output_on_a_full_disk() -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "roce", "decode",
                            str(ROOT / "pcaps" / "example.pcap")], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60, env=ENV)
    assert r.returncode == 2
    assert one_line(r.stderr) == \
        "roce decode: cannot write standard output: no space left on device"


@pytest.mark.parametrize("name", ["out.parquet", ""], ids=["FILE", "DIR"])
def test_a_read_only_file_system(tmp_path: Path, name: str) -> None:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to mount a read-only tmpfs")
    ro = tmp_path / "ro"
    ro.mkdir()
    cap = ROOT / "pcaps" / "example.pcap"
    script = (f"mount -t tmpfs -o ro tmpfs {ro} && "
              f"exec {sys.executable} -m roce decode -T parquet -w {ro / name} {cap}")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                       timeout=60, env=ENV)
    assert r.returncode == 2, r.stderr
    written = ro / (name or "example.parquet")  # -w DIR: DIR/<capture>.parquet
    assert one_line(r.stderr) == (f"roce decode: {cap}: cannot write {written}: "
                                  "read-only file system")


@pytest.mark.parametrize("name", ["out.parquet", ""], ids=["FILE", "DIR"])
def test_a_directory_without_write_permission(tmp_path: Path, name: str) -> None:
    # Root passes every permission check through CAP_DAC_OVERRIDE; the child keeps uid 0
    # (so it still reads its own installation, wherever pip put it) but loses that
    # capability, and the mode 0555 directory refuses it as it refuses any other user.
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to drop CAP_DAC_OVERRIDE")
    locked = tmp_path / "locked"
    locked.mkdir()
    cap = ROOT / "pcaps" / "example.pcap"
    argv = [sys.executable, "-m", "roce", "decode", "-T", "parquet", "-w",
            str(locked / name), str(cap)]
    locked.chmod(0o555)
    try:
        r = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search",
                            *argv], capture_output=True, text=True, timeout=60, env=ENV)
    finally:
        locked.chmod(0o755)
    assert r.returncode == 2, r.stderr
    written = locked / (name or "example.parquet")
    assert one_line(r.stderr) == (f"roce decode: {cap}: cannot write {written}: "
                                  "permission denied")
    assert list(locked.iterdir()) == []


def test_a_path_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    cap = ROOT / "pcaps" / "example.pcap"
    r = run("decode", "-T", "parquet", "-w", str(tmp_path / "file" / "out.parquet"), str(cap))
    assert r.returncode == 2
    assert one_line(r.stderr).endswith(f"cannot write {tmp_path}/file: not a directory")


def test_stats_tables_need_a_directory(tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.write_bytes(b"kept")
    r = run("stats", "-T", "parquet", "-w", str(existing), str(ROOT / "pcaps" / "example.pcap"))
    assert r.returncode == 1
    assert one_line(r.stderr).startswith(f"roce stats: -w {existing}: not a directory")
    assert existing.read_bytes() == b"kept"


# -- two outputs on one stream ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_emulate_refuses_the_pcap_and_the_summary_on_stdout(fmt: str) -> None:
    r = run("emulate", "-T", fmt, "-w", "-", "--count", "1", "--size", "4K")
    assert r.returncode == 1 and r.stdout == ""
    assert one_line(r.stderr) == (f"roce emulate: -w - and -T {fmt} would both write to "
                                  "standard output (the pcap and the summary): give -w a "
                                  "file name")


def test_replay_to_stdout_keeps_its_words_on_stderr() -> None:
    r = subprocess.run([sys.executable, "-m", "roce", "replay",
                        str(ROOT / "pcaps" / "example.pcap"), "-w", "-"],
                       capture_output=True, timeout=60, env=ENV)
    assert r.returncode == 0
    with open_capture(io.BytesIO(r.stdout)) as reader:
        assert sum(1 for _ in reader) == 21 and reader.problems == []
    assert r.stderr.decode() == "wrote 21 frames to - (0 rewritten)\n"
