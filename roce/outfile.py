"""Every file roce writes is complete or absent: captures, Parquet and Arrow tables, CSV, JSON,
figures, traces, the fuzz corpus.  One class opens them all (``Output``, or ``open_output`` as
a ``with`` block), so every writer follows the same rules:

* A regular file is written under a temporary name beside it (``.NAME.roce-PID-XXXX.tmp``,
  hidden, same directory, so the final rename stays on one file system) and renamed over
  NAME when complete (``commit``).  On any exception, an interrupt included, the temporary
  file is removed (``discard``) and NAME is left as it was; an interrupt is told which output
  was removed (a note on the exception, which ``roce.cli`` prints).
* ``-`` is standard output, and a path that is not a regular file (a pipe, ``/dev/null``,
  ``/dev/full``, a terminal) is written in place: such files cannot be renamed.  Streams are
  written one whole write at a time: a stop signal arriving mid-write takes effect once
  the write is out (``roce.interrupts.held``), so a stream cut by a signal ends where a
  writer's record ends (a pcap record, a JSON line).  A reader that takes nothing for
  ``GRACE`` seconds after the signal is given up on.
* ``live=True`` writes a regular file in place too, for captures that record what is
  happening as it happens (``roce sniff -w``, ``roce target -w``): flushed record by record,
  readable while written, and kept, on whole records, when the command is stopped.
* Failing to create, write or rename an output is an input/output error
  (``roce.errors.InputError``, exit 2) naming the output: no space left, a read-only file
  system, no permission, a directory in the way, a missing directory.

A worker process removes the temporary files it holds when it is stopped
(``remove_temporaries``, which ``roce.interrupts.worker`` runs on SIGTERM).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import select
import stat
import sys
import termios
import time
from collections.abc import Iterator

from roce import interrupts
from roce.errors import InputError

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import IO, Any

GRACE = 2.0  # seconds a stream's reader may take nothing after a stop signal
_POLL = 0.1  # seconds between looks at a full pipe

_TEMPORARIES: set[str] = set()  # temporary files this process has open


def reason(exc: OSError) -> str:
    """An ``OSError``'s reason in the words the rest of roce uses (lower case, no errno)."""
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


def output_error(name: str, exc: OSError) -> InputError:
    """The error for an output that cannot be created or written."""
    return InputError(f"cannot write {name}: {reason(exc)}")


def _room(fd: int) -> int:
    """Bytes a write to the pipe ``fd`` can take without blocking (at least PIPE_BUF, which
    a pipe with any room takes whole)."""
    try:
        size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        unread = bytearray(4)
        fcntl.ioctl(fd, termios.FIONREAD, unread)
        return max(size - int.from_bytes(unread, sys.byteorder), select.PIPE_BUF)
    except (OSError, AttributeError):
        return select.PIPE_BUF


def write_stream(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` whole to a stream (pipe, terminal, socket, device); a stop signal that
    arrives meanwhile is raised once it is out.  A pipe is written only as far as it has
    room, so the wait for its reader can be given up ``GRACE`` seconds after a signal."""
    view = memoryview(data).cast("B")
    fifo = stat.S_ISFIFO(os.fstat(fd).st_mode)
    if fifo:
        room = select.poll()
        room.register(fd, select.POLLOUT)
    with interrupts.held():
        stalled = None
        while view:
            if fifo:
                if not room.poll(_POLL * 1000):
                    if interrupts.pending() is not None:
                        stalled = stalled if stalled is not None else time.monotonic()
                        if time.monotonic() - stalled >= GRACE:
                            return  # the reader stopped reading: the stop goes ahead
                    continue
                n = os.write(fd, view[:_room(fd)])
            else:
                n = os.write(fd, view)
            view = view[n:]
            stalled = None


class _Sink(io.RawIOBase):
    """The bytes of one output: every write whole, ``OSError`` worded as an ``InputError``
    naming the output (a closed pipe stays a ``BrokenPipeError``: the reader left)."""

    def __init__(self, name: str, fd: int | None = None, file: IO[bytes] | None = None,
                 own: bool = True) -> None:
        super().__init__()
        self.output_name = name
        self._fd = fd
        self._file = file
        self._own = own
        self._stream = False
        if fd is not None:
            self._stream = not stat.S_ISREG(os.fstat(fd).st_mode)
            if not self._stream and file is None:
                self._file = os.fdopen(fd, "wb", closefd=own)
        self.position = 0

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._fd is not None and os.isatty(self._fd)

    def fileno(self) -> int:
        if self._fd is None:
            raise io.UnsupportedOperation("fileno")
        return self._fd

    def tell(self) -> int:
        return self.position

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        try:
            if self._stream:
                write_stream(self._fd, data)  # type: ignore[arg-type]
            else:
                self._file.write(data)  # type: ignore[union-attr]
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise output_error(self.output_name, exc) from None
        self.position += n
        return n

    def flush(self) -> None:
        if self._file is not None and not self.closed:
            try:
                self._file.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise output_error(self.output_name, exc) from None

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
        finally:
            super().close()
            if self._own:
                if self._file is not None:
                    with contextlib.suppress(OSError):
                        self._file.close()
                elif self._fd is not None:
                    os.close(self._fd)


class Output:
    """One output being written: ``file`` (binary, or text for a ``"w"`` mode) takes the
    data; ``commit()`` when it is complete, ``discard(exc)`` when it is not.

    ``dash``: ``-`` means standard output (else a file named ``-``).  ``live``: a regular
    file written in place and kept however the command ends (a capture of what happened);
    ``discard`` then closes it."""

    def __init__(self, path: str | os.PathLike[str], mode: str = "wb", *, dash: bool = True,
                 live: bool = False, newline: str | None = None) -> None:
        if mode not in ("wb", "w"):
            raise ValueError(f"output mode {mode!r}: 'wb' or 'w'")
        self.path = os.fspath(path)
        self.temp: str | None = None
        self.done = False
        if dash and self.path == "-":
            self.name = "standard output"
            sys.stdout.flush()
            sink = _Sink(self.name, file=sys.stdout.buffer, own=False)
        else:
            self.name = self.path
            sink = self._open(live)
        self.sink = sink
        self.file: IO[Any] = sink if mode == "wb" else io.TextIOWrapper(
            sink, encoding="utf-8", newline=newline)  # type: ignore[assignment]

    def _open(self, live: bool) -> _Sink:
        dest = os.path.realpath(self.path)  # a symbolic link's target is replaced, not it
        try:
            st: os.stat_result | None = os.stat(dest)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise output_error(self.name, exc) from None
        flags = os.O_WRONLY | os.O_CLOEXEC
        try:
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if live or (st is not None and not stat.S_ISREG(st.st_mode)):
                fd = os.open(dest, flags | os.O_CREAT | os.O_TRUNC, 0o666)
                return _Sink(self.name, fd)
            with interrupts.held():  # created and registered together, or neither
                fd, self.temp = self._temporary(dest, flags)
                _TEMPORARIES.add(self.temp)
        except OSError as exc:
            raise output_error(self.name, exc) from None
        self.dest = dest
        self.existed = st is not None
        if st is not None:  # replacing a file: keep its permissions (and owner, if allowed)
            with contextlib.suppress(OSError):
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
                os.fchown(fd, st.st_uid, st.st_gid)
        return _Sink(self.name, fd)

    @staticmethod
    def _temporary(dest: str, flags: int) -> tuple[int, str]:
        head, tail = os.path.split(dest)
        while True:
            temp = os.path.join(head, f".{tail}.roce-{os.getpid()}-{os.urandom(3).hex()}.tmp")
            try:
                return os.open(temp, flags | os.O_CREAT | os.O_EXCL, 0o666), temp
            except FileExistsError:
                continue

    def commit(self) -> None:
        """The output is complete: flush and close it, and give it its name."""
        if self.done:
            return
        self.done = True
        try:
            self.file.close()
        except BaseException:
            self._remove()
            raise
        if self.temp is not None:
            with interrupts.held():
                try:
                    os.replace(self.temp, self.dest)
                except OSError as exc:
                    self._remove()
                    raise output_error(self.name, exc) from None
                _TEMPORARIES.discard(self.temp)

    def discard(self, exc: BaseException | None = None) -> None:
        """The output is not complete: remove its temporary file (a stream or a live
        capture is closed as it stands).  An interrupt ``exc`` is told what was removed."""
        if self.done:
            return
        self.done = True
        with contextlib.suppress(OSError, ValueError, InputError):
            self.file.close()
        if self._remove() and isinstance(exc, KeyboardInterrupt):
            exc.add_note(f"{self.name} left as it was" if self.existed
                         else f"{self.name} removed")

    def _remove(self) -> bool:
        if self.temp is None:
            return False
        with interrupts.held():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temp)
            _TEMPORARIES.discard(self.temp)
        return True

    @property
    def in_place(self) -> bool:
        """Written where the reader sees it as it goes (a stream, a device, a live file)."""
        return self.temp is None


@contextlib.contextmanager
def open_output(path: str | os.PathLike[str], mode: str = "wb", *, dash: bool = True,
                live: bool = False, newline: str | None = None) -> Iterator[IO[Any]]:
    """``Output`` as a ``with`` block: committed when the block ends, discarded if it
    raises."""
    out = Output(path, mode, dash=dash, live=live, newline=newline)
    try:
        yield out.file
    except BaseException as exc:
        out.discard(exc)
        raise
    out.commit()


def make_directory(path: str) -> None:
    """``os.makedirs`` for an output directory; failing is an ``InputError`` naming it."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise InputError(f"cannot write {path}: not a directory") from None
    except OSError as exc:
        raise output_error(path, exc) from None


def remove_temporaries() -> None:
    """Remove every temporary file this process holds (a worker stopped at once)."""
    for temp in list(_TEMPORARIES):
        with contextlib.suppress(OSError):
            os.unlink(temp)
    _TEMPORARIES.clear()


@contextlib.contextmanager
def whole_stdout() -> Iterator[None]:
    """Standard output, when it is a pipe, a terminal or a device, written one whole write at
    a time (``write_stream``) for the block: what a command writes as one piece (a JSON
    line, a batch of lines) is never cut by a stop signal.  Its errors become
    ``InputError`` ("cannot write standard output: no space left on device")."""
    try:
        fd = sys.stdout.fileno()
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):
        regular = True  # not a file descriptor of ours (a test's capture): left alone
    if regular:
        yield
        return
    old = sys.stdout
    old.flush()
    sink = _Sink("standard output", fd, own=False)
    # buffered as the interpreter buffered it (a terminal by line, PYTHONUNBUFFERED not)
    new = io.TextIOWrapper(sink, encoding=old.encoding, errors=old.errors,
                           line_buffering=old.line_buffering,
                           write_through=getattr(old, "write_through", False))
    sys.stdout = new
    try:
        yield
        new.flush()
    finally:
        if sys.stdout is new:
            sys.stdout = old
        with contextlib.suppress(Exception):
            new.flush()


__all__ = ["GRACE", "Output", "make_directory", "open_output", "output_error", "reason",
           "remove_temporaries", "whole_stdout", "write_stream"]
