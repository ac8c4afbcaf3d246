"""Outputs complete or absent (``roce.outfile``) and stop signals as exceptions
(``roce.interrupts``): the building blocks, one rule at a time.  The commands that use them
are driven, signals and all, in ``tests/test_interrupts.py``."""

from __future__ import annotations

import io
import os
import signal
import stat
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roce import interrupts, outfile
from roce.cli import interrupted_line
from roce.decoder.columnar import TableSink
from roce.errors import InputError, Interrupted
from roce.pcapio import PcapNgWriter, PcapWriter, open_capture


def leftovers(directory: Path) -> list[str]:
    """Temporary files an output left behind."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_written_under_a_temporary_name_and_renamed(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    with outfile.open_output(path) as f:
        f.write(b"abc")
        assert not path.exists()  # nothing under the name until it is complete
        assert len(leftovers(tmp_path)) == 1 and leftovers(tmp_path)[0].startswith(".out.bin.")
    assert path.read_bytes() == b"abc" and leftovers(tmp_path) == []


def test_a_failed_output_is_removed_and_an_earlier_one_kept(tmp_path: Path) -> None:
    new, old = tmp_path / "new.bin", tmp_path / "old.bin"
    old.write_bytes(b"earlier")
    for path in (new, old):
        with pytest.raises(ValueError), outfile.open_output(path) as f:
            f.write(b"half")
            raise ValueError("a bug half way")
    assert not new.exists() and old.read_bytes() == b"earlier"
    assert leftovers(tmp_path) == []


def test_an_interrupt_is_told_what_was_removed(tmp_path: Path) -> None:
    new, old = tmp_path / "new.bin", tmp_path / "old.bin"
    old.write_bytes(b"earlier")
    notes = []
    for path in (new, old):
        with pytest.raises(KeyboardInterrupt) as info, outfile.open_output(path) as f:
            f.write(b"half")
            raise Interrupted(signal.SIGTERM)
        notes += info.value.__notes__
    assert notes == [f"{new} removed", f"{old} left as it was"]
    assert interrupted_line(info.value) == f"interrupted (SIGTERM); {old} left as it was"


def test_interrupted_line_puts_progress_first() -> None:
    exc = Interrupted(signal.SIGHUP)
    exc.add_note("2 worker processes stopped")
    exc.add_note("after 1 of 4 files")
    assert interrupted_line(exc) == \
        "interrupted (SIGHUP) after 1 of 4 files; 2 worker processes stopped"
    assert interrupted_line(KeyboardInterrupt()) == "interrupted (SIGINT)"


def test_replacing_keeps_permissions_and_follows_links(tmp_path: Path) -> None:
    real = tmp_path / "real.bin"
    real.write_bytes(b"x")
    real.chmod(0o640)
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    with outfile.open_output(link) as f:
        f.write(b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_new_files_get_the_umask_not_the_temporary_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with outfile.open_output(tmp_path / "f.bin") as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.bin").stat().st_mode) == 0o644


@pytest.mark.parametrize("where, words", [
    ("/dev/full", "cannot write /dev/full: no space left on device"),
    ("{tmp}", "cannot write {tmp}: is a directory"),
    ("{tmp}/file/x.bin", "cannot write {tmp}/file/x.bin: not a directory"),
    ("{tmp}/missing/x.bin", "cannot write {tmp}/missing/x.bin: no such file or directory"),
])
def test_unwritable_outputs_are_input_errors(tmp_path: Path, where: str, words: str) -> None:
    (tmp_path / "file").write_bytes(b"")
    path = where.format(tmp=tmp_path)
    with pytest.raises(InputError) as info, outfile.open_output(path) as f:
        f.write(b"x" * 100_000)
        f.flush()
    assert str(info.value) == words.format(tmp=tmp_path)
    assert leftovers(tmp_path) == []


def test_devices_are_written_in_place(tmp_path: Path) -> None:
    with outfile.open_output("/dev/null") as f:
        f.write(b"gone")
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_live_output_is_readable_as_it_grows_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "live.pcap"
    with pytest.raises(Interrupted):
        with PcapWriter(path, live=True) as w:
            w.write(b"\x01" * 60, 1)
            w.flush()
            assert [f.data for f in open_capture(path)] == [b"\x01" * 60]
            w.write(b"\x02" * 60, 2)
            raise Interrupted(signal.SIGTERM)
    assert [f.data for f in open_capture(path)] == [b"\x01" * 60, b"\x02" * 60]


@pytest.mark.parametrize("cls", [PcapWriter, PcapNgWriter])
def test_capture_writers_are_complete_or_absent(tmp_path: Path, cls: type) -> None:
    good, bad = tmp_path / "good.pcap", tmp_path / "bad.pcap"
    with cls(good) as w:
        w.write(b"\x01" * 60, 1)
    assert [f.data for f in open_capture(good)] == [b"\x01" * 60]
    with pytest.raises(ValueError), cls(bad) as w:
        w.write(b"\x01" * 60, 1)
        w.write(b"\x01" * 60, -1)  # out of range: the capture stops here
    assert not bad.exists() and leftovers(tmp_path) == []
    with pytest.raises(InputError, match="cannot write /dev/full: no space left"):
        with cls("/dev/full") as w:
            w.write(b"\x01" * 60, 1)


def test_table_sink_file_removed_stream_ended(tmp_path: Path) -> None:
    schema = pa.schema([("a", pa.int64())])
    table = pa.table({"a": list(range(10))}, schema=schema)
    path = tmp_path / "t.parquet"
    sink = TableSink(str(path), "parquet", schema)
    sink.write(table)
    stop = Interrupted(signal.SIGTERM)
    sink.abort(stop)
    assert not path.exists() and leftovers(tmp_path) == []
    assert stop.__notes__ == [f"{path} removed"]
    # a stream cannot be taken back: the rows so far get their footer
    buf = io.BytesIO()
    buf.close = lambda: None  # type: ignore[method-assign]
    sink = TableSink(buf, "parquet", schema)
    sink.write(table)
    sink.abort(Interrupted(signal.SIGTERM))
    assert pq.read_table(io.BytesIO(buf.getvalue())).num_rows == 10


def test_signals_raise_and_wait_for_held_sections() -> None:
    with interrupts.raising():
        assert interrupts.active()
        with pytest.raises(Interrupted) as info:
            signal.raise_signal(signal.SIGTERM)
            time.sleep(1)
        assert info.value.signal == "SIGTERM"
        done = []
        with pytest.raises(Interrupted) as info:
            with interrupts.held():
                signal.raise_signal(signal.SIGHUP)
                done.append("rest of the section")
                with interrupts.held():
                    done.append("inner section")
                done.append("after the inner section")
        assert done == ["rest of the section", "inner section", "after the inner section"]
        assert info.value.signal == "SIGHUP" and interrupts.pending() is None
    assert not interrupts.active()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_ignored_signal_stays_ignored() -> None:
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
    try:
        with interrupts.raising():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            signal.raise_signal(signal.SIGHUP)  # nothing happens
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_held_sections_of_other_threads_defer_nothing() -> None:
    entered, release = threading.Event(), threading.Event()

    def section() -> None:
        with interrupts.held():
            entered.set()
            release.wait(5)

    t = threading.Thread(target=section)
    with interrupts.raising():
        t.start()
        entered.wait(5)
        try:
            with pytest.raises(Interrupted):
                signal.raise_signal(signal.SIGTERM)
                time.sleep(1)
        finally:
            release.set()
            t.join()


def test_a_stalled_reader_is_given_up_after_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outfile, "GRACE", 0.3)
    r, w = os.pipe()
    try:
        timer = threading.Timer(0.3, signal.raise_signal, (signal.SIGTERM,))
        with interrupts.raising():
            timer.start()
            t0 = time.monotonic()
            with pytest.raises(Interrupted):
                outfile.write_stream(w, bytes(4 << 20))  # far more than the pipe holds
            assert time.monotonic() - t0 < 5
    finally:
        timer.cancel()
        os.close(r)
        os.close(w)


def test_a_stream_write_is_whole_when_a_signal_arrives() -> None:
    r, w = os.pipe()
    data = bytes(range(256)) * 4096  # 1 MiB: many times the pipe's room
    got = bytearray()

    def read() -> None:
        time.sleep(0.3)
        while chunk := os.read(r, 65536):
            got.extend(chunk)

    reader = threading.Thread(target=read)
    timer = threading.Timer(0.1, signal.raise_signal, (signal.SIGTERM,))
    try:
        with interrupts.raising():
            reader.start()
            timer.start()
            with pytest.raises(Interrupted):
                outfile.write_stream(w, data)
    finally:
        os.close(w)
        reader.join(10)
        os.close(r)
    assert bytes(got) == data


def test_remove_temporaries(tmp_path: Path) -> None:
    out = outfile.Output(tmp_path / "a.bin")
    out.file.write(b"x")
    assert leftovers(tmp_path)
    outfile.remove_temporaries()
    assert leftovers(tmp_path) == []
    out.discard()


def test_a_forked_child_gets_the_handlers_back() -> None:
    """A pool's worker forked while a command runs dies of the SIGTERM that ends it, as it
    did before the command set its handlers (roce's own workers set theirs up again)."""
    with interrupts.raising():
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when every stop signal is back to its default
            ok = all(signal.getsignal(s) is not interrupts._on_signal
                     for s in interrupts.STOP_SIGNALS) and not interrupts.active()
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
