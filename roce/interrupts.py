"""Stop signals: SIGINT (Ctrl-C), SIGTERM (services, batch schedulers, ``timeout``) and SIGHUP
(a closed terminal) all stop a command the same way, as an ``Interrupted`` exception.

* ``raising()``: inside it, each stop signal raises ``roce.errors.Interrupted`` (a
  ``KeyboardInterrupt``) in the main thread, so every ``except KeyboardInterrupt`` and
  ``finally`` that cleans up after Ctrl-C runs for all three.  A signal ignored on entry
  stays ignored (``nohup`` ignores SIGHUP; a shell without job control starts background
  jobs with SIGINT ignored).  ``roce.cli.main`` runs every command inside it.
* ``held()``: a section a stop signal must not cut (a record written to a stream, a
  temporary file renamed over its destination or removed).  A signal arriving inside takes
  effect when the outermost section ends.
* ``worker()``: what a worker process of ``roce.decoder.multifile`` does on a signal: it
  ignores SIGINT and SIGHUP (a terminal sends them to the whole process group; the parent
  decides) and on SIGTERM, which the parent sends to stop it, removes its temporary files
  and exits at once.

Signals reach Python code in the main thread only, so ``held()`` defers only what it can:
sections entered by other threads are not counted (an interrupt is never raised in them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

from roce.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_held = 0                   # depth of held() sections in the main thread
_pending: int | None = None  # the first stop signal that arrived inside them
_installed = 0              # depth of raising() blocks (nested main() calls)
_before: dict[int, object] = {}  # the handlers the outermost raising() replaced


def _on_signal(signum: int, frame: object) -> None:
    global _pending
    if _held:
        if _pending is None:
            _pending = signum
        return
    raise Interrupted(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Stop signals raise ``Interrupted`` inside the block; the handlers found on entry are
    restored on exit.  Outside the main thread (where Python cannot set handlers) a no-op."""
    global _installed
    if not _main_thread():
        yield
        return
    old: dict[int, object] = {}
    for sig in STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN:
            continue
        old[sig] = current
        signal.signal(sig, _on_signal)
    if not _installed:
        _before.update(old)
    _installed += 1
    try:
        yield
    finally:
        _installed -= 1
        if not _installed:
            _before.clear()
        for sig, handler in old.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def _after_fork_in_child() -> None:
    """A forked child (a worker pool's process) does not inherit the command's handlers:
    it gets back those found before ``raising()``, so a pool that ends its workers with
    SIGTERM ends them (``worker()`` sets up roce's own workers)."""
    global _held, _pending, _installed
    _held, _pending = 0, None
    if not _installed:
        return
    _installed = 0
    for sig, handler in _before.items():
        try:
            signal.signal(sig, handler)  # type: ignore[arg-type]
        except ValueError:  # pragma: no cover - forked from a thread Python left unknown
            break
    _before.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def active() -> bool:
    """Whether stop signals are being turned into ``Interrupted`` (inside ``raising()``)."""
    return _installed > 0


def pending() -> int | None:
    """The stop signal waiting for the current ``held()`` section to end, if any."""
    return _pending


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A section no stop signal cuts: one that arrives inside is raised when the outermost
    section ends (after its work is done: the caller's state is consistent by then)."""
    global _held, _pending
    if not _main_thread():
        yield
        return
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending is not None:
            signum, _pending = _pending, None
            raise Interrupted(signum)


def worker(cleanup: Callable[[], None]) -> None:
    """Set up a worker process (its initializer calls this): SIGINT and SIGHUP ignored,
    SIGTERM runs ``cleanup`` (removing temporary files) and exits at once with 128 +
    SIGTERM, as the default action would, without unwinding the task."""
    _after_fork_in_child()  # as a fresh child, in case fork did not go through it

    def on_term(signum: int, frame: object) -> None:
        try:
            cleanup()
        finally:
            os._exit(128 + signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)


__all__ = ["STOP_SIGNALS", "active", "held", "pending", "raising", "worker"]
