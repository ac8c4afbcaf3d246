"""The event loop of the real-network drivers: one selector, the devices' timers, wall time.

Several transports can share one ``EventLoop`` (two devices in one process on loopback);
other readers (the out-of-band socket) can join it so a loop waiting on the wire also wakes
for them.  ``clock`` is the devices' clock: the loop hands it to the contexts it drives, so
the requester's retransmission timers and the loop's waits are on one time line.
"""

from __future__ import annotations

import selectors
import time
from collections.abc import Callable
from typing import Any, Protocol


class Driver(Protocol):
    """What the loop needs of a transport (``roce.emu.real.driver.Transport``)."""

    device: Any

    def fileno(self) -> int: ...

    def on_readable(self, now: int) -> int: ...

    def on_timer(self, now: int) -> None: ...

    def flush(self) -> int: ...

    def close(self) -> None: ...


class EventLoop:
    """A selector over transports (and any extra readers), with the devices' timers."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self.transports: list[Driver] = []
        self.closed = False

    def add(self, t: Driver) -> None:
        self.transports.append(t)
        # a tuple marks a transport; a bare callable is an extra reader
        self.selector.register(t.fileno(), selectors.EVENT_READ, (t,))

    def remove(self, t: Driver) -> None:
        if t in self.transports:
            self.transports.remove(t)
            try:
                self.selector.unregister(t.fileno())
            except (KeyError, ValueError, OSError):
                pass

    def add_reader(self, fileobj: Any, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` when ``fileobj`` is readable (e.g. the out-of-band socket)."""
        self.selector.register(fileobj, selectors.EVENT_READ, callback)

    def remove_reader(self, fileobj: Any) -> None:
        try:
            self.selector.unregister(fileobj)
        except (KeyError, ValueError, OSError):
            pass

    def next_deadline(self) -> int | None:
        best = None
        for t in self.transports:
            d = t.device.deadline()
            if d is not None and (best is None or d < best):
                best = d
        return best

    def poll(self, timeout: float | None = 0.0) -> int:
        """Wait up to ``timeout`` seconds (None: until something happens) for frames or a
        timer, handle them, send what the devices queued.  Returns frames received."""
        now = self.clock()
        d = self.next_deadline()
        wait = timeout
        if d is not None:
            until_timer = max(0.0, (d - now) / 1e9)
            wait = until_timer if wait is None else min(wait, until_timer)
        n = 0
        for key, _ in self.selector.select(wait):
            obj = key.data
            if isinstance(obj, tuple):
                n += obj[0].on_readable(self.clock())
            else:
                obj()
        now = self.clock()
        for t in self.transports:
            t.on_timer(now)
            t.flush()
        return n

    def run(self, until: int | None = None, stop: Callable[[], bool] | None = None,
            timeout: float | None = None) -> bool:
        """Poll until ``stop()`` holds (True), or until the clock passes ``until`` (ns on
        this loop's clock) or ``timeout`` seconds went by (False; True if no ``stop``)."""
        end = until
        if timeout is not None:
            t_end = self.clock() + int(timeout * 1e9)
            end = t_end if end is None else min(end, t_end)
        while True:
            if stop is not None and stop():
                return True
            now = self.clock()
            if end is not None and now >= end:
                return stop is None
            self.poll(0.05 if end is None else min(0.05, (end - now) / 1e9))

    def close(self) -> None:
        for t in list(self.transports):
            t.close()
        self.selector.close()
        self.closed = True
