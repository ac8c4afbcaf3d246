"""The stages called per frame are base classes (a switch's ``stages.Marker``,
``stages.Forwarder`` and ``buffer.BufferPolicy``, a NIC's ``stages.Pacer``): a model written in
Python subclasses one and the switch, compiled or not, calls its overrides; anything else is
refused by name."""

from __future__ import annotations

import random

import pytest

from roce.emu.net.buffer import BufferConfig, BufferPolicy, SharedBuffer
from roce.emu.net.runner import NetRun, NetScenario
from roce.emu.net.sim import Network
from roce.emu.net.stages import EcmpForwarder, Forwarder, Marker, SprayForwarder
from roce.emu.net.switch import Switch


def _incast() -> NetRun:
    return NetRun(NetScenario(topology="incast:4", size=256 << 10, count=1))


class EveryFrame(Marker):
    """Marks every frame it is asked about."""

    def __init__(self) -> None:
        self.asked = 0

    def mark(self, queue_bytes: int) -> bool:
        self.asked += 1
        return True


class Counting(BufferPolicy):
    """A buffer model in Python: ``SharedBuffer``'s rules, each call counted."""

    def __init__(self, inner: SharedBuffer) -> None:
        self.inner = inner
        self.calls = {"admit": 0, "release": 0}

    def __getattr__(self, name: str):  # the counters a run reports
        return getattr(self.inner, name)

    def account(self, headroom: int = 0):
        return self.inner.account(headroom)

    def check(self, where: str) -> None:
        self.inner.check(where)

    def admit(self, acct, n: int, lossless: bool) -> int:
        self.calls["admit"] += 1
        return self.inner.admit(acct, n, lossless)

    def release(self, acct, pool: int, n: int) -> None:
        self.calls["release"] += 1
        self.inner.release(acct, pool, n)

    def should_pause(self, acct) -> bool:
        return self.inner.should_pause(acct)

    def should_resume(self, acct) -> bool:
        return self.inner.should_resume(acct)

    def queue_limit(self) -> int:
        return self.inner.queue_limit()

    def pfc_trigger(self, fan_in: int) -> int:
        return self.inner.pfc_trigger(fan_in)


def test_a_marker_written_in_python_marks_what_the_switch_dequeues():
    r = _incast()
    sw = r.net.switches["sw"]
    markers = [EveryFrame() for _ in sw.ports]
    for port, m in zip(sw.ports, markers):
        port.marker = m
    s = r.run()
    assert s.data_verified
    dequeued = sum(p.tx_frames for p in sw.ports)
    # every RoCE frame is ECN-capable: each one dequeued was asked about, and marked
    assert 0 < sum(m.asked for m in markers) <= dequeued
    assert sum(p.stats.ecn_marked for p in sw.ports) == sum(m.asked for m in markers)


def test_a_buffer_written_in_python_runs_the_same_network_the_same_way():
    plain = _incast().run()
    r = _incast()
    sw = r.net.switches["sw"]
    counting = sw.buffer = Counting(sw.buffer)
    s = r.run()
    assert s.data_verified and s.fct_ns == plain.fct_ns and s.hops == plain.hops
    assert counting.calls["admit"] == counting.calls["release"] > 0


def test_forwarders_subclass_the_base():
    assert isinstance(EcmpForwarder(1), Forwarder)
    assert isinstance(SprayForwarder(random.Random(1)), Forwarder)


@pytest.mark.parametrize("stage", ["forwarder", "buffer"])
def test_a_stage_that_is_not_the_base_is_refused_by_name(stage):
    kw = {"buffer": BufferConfig(), "forwarder": EcmpForwarder(1)}
    kw[stage] = object()
    with pytest.raises(TypeError, match=f"switch s1's {stage}: a object is not a roce"):
        Switch(Network(), "s1", 0, **kw)


def test_a_marker_that_is_not_the_base_is_refused_by_name():
    r = _incast()
    sw = r.net.switches["sw"]
    with pytest.raises(TypeError, match=r"sw:0's marker: a object is not a roce\.emu\.net"
                                        r"\.stages\.Marker"):
        sw.finish(lambda switch, port, gbps: object())


def test_a_pacer_that_is_not_the_base_is_refused_by_name():
    """A NIC's pacers are ``stages.Pacer`` subclasses (the NIC calls them per frame): a QP's
    transmit list refuses anything else, naming the NIC and the QP."""
    from roce.emu.net.nic import _TxList

    r = _incast()
    nic = r.net.hosts["s1"]
    core = r.flows[0].qa.core
    nic.pacers[core.qpn] = object()
    with pytest.raises(TypeError, match=rf"s1: the pacer of QP 0x{core.qpn:06x}, a object, "
                                        r"is not a roce\.emu\.net\.stages\.Pacer"):
        _TxList(nic, core, [])
