"""The loop's callback objects (``roce.emu.net.callbacks``): the loop fires a ``Callback``
through ``fire`` (a subclass in Python through its override) in the order of the queue, among
plain callables; a frame's arrival is scheduled with the endpoint itself when it is one, with
its ``receive`` otherwise; a wire delivers to a stand-in put in its ``dst``."""

from __future__ import annotations

from typing import Any

import pytest

from roce.emu.net.callbacks import Callback, deliverer
from roce.emu.net.runner import NetRun, NetScenario
from roce.emu.net.sim import Network


class Note(Callback):
    __slots__ = ("seen", "name")

    def __init__(self, seen: list, name: str) -> None:
        self.seen, self.name = seen, name

    def fire(self, now: int, arg: Any) -> None:
        self.seen.append((now, self.name, arg))


def test_the_loop_fires_callbacks_in_queue_order_among_plain_callables() -> None:
    net = Network()
    seen: list = []
    a, b = Note(seen, "a"), Note(seen, "b")
    net.at(20, a, 1)
    net.at(10, lambda now, arg: seen.append((now, "plain", arg)), 2)
    net.at(10, b, 3)
    net.at(20, b, 4)
    net.run(100)
    assert seen == [(10, "plain", 2), (10, "b", 3), (20, "a", 1), (20, "b", 4)]
    a(30, 5)  # a callback object is callable as any callback is
    assert seen[-1] == (30, "a", 5)


def test_a_callback_without_fire_is_refused() -> None:
    net = Network()
    net.at(1, Callback(), None)
    with pytest.raises(NotImplementedError):
        net.run(10)


def test_an_arrival_goes_to_the_endpoint_or_to_its_receive() -> None:
    class Plain:
        def receive(self, now: int, frame: bytes) -> None:
            pass

    note, plain = Note([], "n"), Plain()
    assert deliverer(note) is note
    assert deliverer(plain) == plain.receive


def test_a_wire_delivers_to_a_stand_in_in_its_dst() -> None:
    """What a test hooks and a failed link severs: the wire's ``dst``, read per frame."""
    r = NetRun(NetScenario(topology="incast:2", size=64 << 10, count=1))
    got: list[int] = []

    class Tee:
        def __init__(self, port: Any) -> None:
            self.port = port

        def receive(self, now: int, frame: bytes) -> None:
            got.append(len(frame))
            self.port.receive(now, frame)

    sw = r.net.switches["sw"]
    for w in r.net.wires:
        if w.dst is sw.ports[0]:
            w.dst = Tee(w.dst)
    s = r.run()
    assert s.data_verified
    assert len(got) == sw.ports[0].rx_frames  # every frame the port took came through
    assert sum(n > 1000 for n in got) == -(-(64 << 10) // r.sc.mtu)  # the sender's WRITEs
