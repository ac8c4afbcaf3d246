"""The emulator's event queue: ``EventQueue``, the one way anything is scheduled on the loop.

An event is a callback and its argument at a virtual time (integer nanoseconds); it runs as
``callback(time, argument)``.  Events at the same time run in the order they were scheduled
(a sequence number breaks the tie), so a run is a pure function of its inputs.

Two forms, one order: this module's ``EventQueue`` is the reference, a ``heapq`` of
``(time, sequence, callback, argument)`` tuples, which the interpreted emulator runs; the
compiled one runs its C twin (``roce._fastpath.EventQueue``, roce/emu/net/_events.pxi): a heap
of (int64 time, int64 sequence) keys in a C array, no tuple per pending event and no Python
comparison.  ``queue_for`` picks the form; tests/test_events.py holds the two to one order.
Times are what a signed 64-bit integer holds (292 years of nanoseconds): both forms refuse
others with ``OverflowError``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

TIME_MAX = (1 << 63) - 1  # the C queue's int64 keys
TIME_MIN = -(1 << 63)


class EventQueue:
    """Pending events in time order, ties in scheduling order (the reference form)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Callable[[int, Any], None], Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, t: int, fn: Callable[[int, Any], None], arg: Any = None) -> None:
        """Schedule ``fn(t, arg)`` at virtual time ``t`` (ns), after everything scheduled
        before it for the same time."""
        if not TIME_MIN <= t <= TIME_MAX:
            raise OverflowError(f"event time {t} ns: the loop's clock holds at most "
                                f"{TIME_MAX} ns")
        heapq.heappush(self._heap, (t, next(self._seq), fn, arg))

    def first(self) -> int | None:
        """The time of the earliest event, None when none is left."""
        return self._heap[0][0] if self._heap else None

    def pop_until(self, limit: int) -> tuple[int, Callable[[int, Any], None], Any] | None:
        """The earliest event as ``(time, callback, argument)``, taken off the queue; None when
        none is left or the earliest lies past ``limit``."""
        heap = self._heap
        if not heap or heap[0][0] > limit:
            return None
        t, _, fn, arg = heapq.heappop(heap)
        return t, fn, arg

    def pop(self) -> tuple[int, Callable[[int, Any], None], Any]:
        """The earliest event as ``(time, callback, argument)``, taken off the queue."""
        if not self._heap:
            raise IndexError("pop from an empty event queue")
        t, _, fn, arg = heapq.heappop(self._heap)
        return t, fn, arg

    def remove(self, fn: Callable[[int, Any], None]) -> int:
        """Take every event whose callback equals ``fn`` off the queue; how many."""
        heap = self._heap
        keep = [ev for ev in heap if not ev[2] == fn]
        removed = len(heap) - len(keep)
        if removed:
            heap[:] = keep
            heapq.heapify(heap)
        return removed


def queue_for(compiled: bool) -> Any:
    """A new event queue: the C form for the compiled emulator (its loop and wires hold the
    C type), the reference form for the interpreted one."""
    if compiled:  # built together: the compiled emulator never runs without the fast path
        from roce import fast
        return fast._ext.EventQueue()
    return EventQueue()
