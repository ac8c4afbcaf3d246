"""The emulator's event queue: the C form (``roce._fastpath.EventQueue``) against its reference
(``roce.emu.net.events.EventQueue``, a heapq of tuples) on any sequence of scheduling, popping
and removing; the order both give is time, then scheduling order; the compiled loop runs the C
form; both refuse a time the C keys cannot hold."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import _compiled, fast
from roce.emu.net import events as ev
from roce.emu.net.sim import Network

needs_ext = pytest.mark.skipif(not fast.COMPILED, reason="compiled fast path not built")

CALLBACKS = [f"cb{i}" for i in range(4)]  # equal by value, as bound methods are
OPS = st.lists(st.one_of(
    st.tuples(st.just("at"), st.integers(-3, 12), st.sampled_from(CALLBACKS), st.integers()),
    st.tuples(st.just("pop_until"), st.integers(-4, 14)),
    st.tuples(st.just("pop")),
    st.tuples(st.just("remove"), st.sampled_from(CALLBACKS)),
), max_size=120)


def replay(q: Any, ops: list[tuple]) -> list[Any]:
    """What a queue answers to ``ops``, and after each its length and earliest time."""
    out: list[Any] = []
    for op in ops:
        if op[0] == "at":
            out.append(q.at(*op[1:]))
        elif op[0] == "pop_until":
            out.append(q.pop_until(op[1]))
        elif op[0] == "pop":
            out.append(q.pop() if len(q) else "empty")
        else:
            out.append(q.remove(op[1]))
        out.append((len(q), bool(q), q.first()))
    while len(q):
        out.append(q.pop())
    return out


@needs_ext
@given(ops=OPS)
def test_c_queue_agrees_with_the_reference(ops: list[tuple]) -> None:
    assert replay(fast._ext.EventQueue(), ops) == replay(ev.EventQueue(), ops)


@pytest.mark.parametrize("make", [ev.EventQueue, pytest.param(
    lambda: fast._ext.EventQueue(), marks=needs_ext)], ids=["reference", "c"])
def test_order_is_time_then_scheduling(make: Any) -> None:
    q = make()
    for i, t in enumerate([5, 3, 5, 3, 9, 3, 0]):
        q.at(t, "f", i)
    assert [q.pop()[2] for _ in range(7)] == [6, 1, 3, 5, 0, 2, 4]
    assert q.first() is None and q.pop_until(100) is None
    with pytest.raises(IndexError):
        q.pop()
    q.at(7, "g")
    assert q.pop_until(6) is None and q.pop_until(7) == (7, "g", None)


@pytest.mark.parametrize("make", [ev.EventQueue, pytest.param(
    lambda: fast._ext.EventQueue(), marks=needs_ext)], ids=["reference", "c"])
def test_time_past_the_clock_is_refused(make: Any) -> None:
    q = make()
    q.at(ev.TIME_MAX, "last")
    with pytest.raises(OverflowError):
        q.at(ev.TIME_MAX + 1, "f")
    assert q.pop() == (ev.TIME_MAX, "last", None)


@pytest.mark.parametrize("make", [ev.EventQueue, pytest.param(
    lambda: fast._ext.EventQueue(), marks=needs_ext)], ids=["reference", "c"])
def test_pending_callbacks_do_not_leak_cycles(make: Any) -> None:
    """A network's events hold bound methods of objects that hold the queue: the collector
    must see through the queue to free them."""

    class Owner:
        def __init__(self) -> None:
            self.q = make()
            self.q.at(1, self.fire, self)

        def fire(self, now: int, arg: Any) -> None:
            pass

    ref = weakref.ref(Owner())
    gc.collect()
    assert ref() is None


def test_loop_runs_the_form_of_its_module() -> None:
    compiled = _compiled.compiled_now().get("roce.emu.net.sim", False)
    q = Network().events
    if compiled:
        assert type(q) is fast._ext.EventQueue
    else:
        assert type(q) is ev.EventQueue


def test_network_runs_in_time_order() -> None:
    net = Network()
    seen: list[tuple[int, str]] = []
    net.at(20, lambda now, a: seen.append((now, a)), "b")
    net.at(10, lambda now, a: (seen.append((now, a)), net.at(now, seen_late, "c")), "a")

    def seen_late(now: int, a: str) -> None:
        seen.append((now, a))

    net.run(15)
    assert seen == [(10, "a"), (10, "c")] and net.now == 15
    net.run(1 << 70)  # a limit past the clock's range runs everything left
    assert seen[-1] == (20, "b")
