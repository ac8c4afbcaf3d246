"""Regions that hold a seeded pattern, not bytes (``roce.emu.core.patterned``): exact memory
against a ``bytearray`` model, the same runs as with real buffers, no buffer held, and every
kind of wrong write (a corrupted, misplaced, duplicated or missing byte) found."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roce.emu.core import payload
from roce.emu.core.memory import take, take_at
from roce.emu.core.patterned import Patterned
from roce.emu.net.runner import NetRun, NetScenario, memory_of
from roce.testing.twins import summary_fields

SLOT = 3 * payload.CHUNK + 100  # slots that do not end on a piece
SLOTS = 2


def _model(side: str) -> bytearray:
    buf = bytearray(SLOT * SLOTS)
    payload.fill(buf, 7, 3, side, SLOT, SLOTS)
    return buf


writes = st.lists(st.tuples(st.integers(0, SLOT * SLOTS - 1), st.integers(1, 3 * 4096),
                            st.sampled_from(["target", "junk", "base"]), st.booleans()),
                  max_size=12)


@settings(max_examples=40, deadline=None)
@given(writes, st.integers(0, SLOT * SLOTS - 1), st.integers(0, SLOT * SLOTS))
def test_a_patterned_region_is_exact_memory(ws: list, start: int, n: int) -> None:
    """Writes of the target's pattern, of other bytes and of the region's own pattern, in
    any order and overlap, each written as a view's slice or as a received frame's payload
    (``write_from``, in place): every range reads as a bytearray given the same writes does,
    and ``whole`` claims a slot's pattern only when the slot holds it."""
    p = Patterned(7, 3, "remote", SLOT, SLOTS, "local")
    model, target = _model("remote"), _model("local")
    for off, length, what, framed in ws:
        length = min(length, len(model) - off)
        data = {"target": bytes(target[off:off + length]),
                "base": bytes(_model("remote")[off:off + length]),
                "junk": bytes((off + i) * 37 % 256 for i in range(length))}[what]
        if framed:
            p.write_from(off, b"head" + data + b"tail", 4, length)
        else:
            p.view(off, length)[:] = data
        model[off:off + length] = data
    n = min(n, len(model) - start)
    assert p.read(start, n) == bytes(model[start:start + n])
    buf, at = p.read_at(start, n)  # a piece of the pattern, or the bytes themselves
    assert buf[at:at + n] == bytes(model[start:start + n])
    cut = start // 2  # a region's views (``memory.take_at``): the same bytes as ``take``
    views = [p.view(0, cut), p.view(cut, len(model) - cut)]
    buf, at, m = take_at(views, start, n)
    assert buf[at:at + m] == take(views, start, n) == bytes(model[start:start + m])
    assert p.view(0, len(model))[start:start + n] == bytes(model[start:start + n])
    for j in range(SLOTS):
        side = p.whole(j)
        if side is not None:
            assert bytes(model[j * SLOT:(j + 1) * SLOT]) == \
                bytes({"local": target, "remote": _model("remote")}[side][j * SLOT:
                                                                           (j + 1) * SLOT])


def test_expected_reads_a_patterned_region_as_bytes() -> None:
    """``Expected`` gives a patterned region the verdict it gives the same bytes."""
    exp = payload.Expected(7, 3, SLOT, SLOTS)
    p = Patterned(7, 3, "remote", SLOT, SLOTS, "local")
    assert exp.mismatched("remote", p) == []
    exp.apply("write", 0)
    assert exp.mismatched("remote", p) == [0]  # not written yet
    p.write(0, _model("local")[:SLOT])
    assert exp.mismatched("remote", p) == []
    p.write(SLOT + 5, b"\0")  # slot 1 was to keep its own pattern
    assert exp.mismatched("remote", p) == [1]


def test_views_refuse_what_memory_would() -> None:
    p = Patterned(7, 3, "local", SLOT, SLOTS)
    v = p.view(10, 100)
    with pytest.raises(ValueError):
        v[0:10] = b"x"
    with pytest.raises(TypeError):
        v[0:10:2]  # noqa: B018
    assert len(v) == 100 and v[90:200] == p.read(100, 10)


CASES = [
    dict(topology="leafspine:2,2,4", op="write", size=96 << 10, count=3, depth=2, mtu=4096,
         rate_gbps=100.0, lb="spray", recovery="sr"),
    dict(topology="incast:4", op="send", size=50_000, count=5, depth=2, mtu=1024),
    dict(topology="leafspine:2,2,4", op="write", size=64 << 10, count=2, depth=2, mtu=1024,
         rate_gbps=100.0, lb="spray", recovery="sr", pfc=False, loss=0.01),
    dict(topology="incast:2", op="write", size=5, count=6, depth=2, mtu=1024),
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: f"{kw['topology']} {kw['op']}")
def test_patterned_runs_equal_real_memory(kw: dict) -> None:
    """WRITE and SEND runs hold patterns by default: every figure of the run equals the
    run with real buffers, the data verified, and no region holds a buffer."""
    sc = NetScenario(**kw)
    lazy, real = NetRun(sc), NetRun(sc, real_memory=True)
    assert lazy.patterned and not real.patterned
    a, b = summary_fields(lazy.run()), summary_fields(real.run())
    assert a == b and a["data_verified"] is True
    assert all(len(f.local.buf) == len(f.remote.buf) == 0 for f in lazy.flows)
    assert all(len(f.remote.buf) == sc.slot * sc.slots for f in real.flows)
    assert sum(f.remote.content.writes for f in lazy.flows) > 0


@pytest.mark.parametrize("kw", [
    dict(topology="p2p", op="send", qp_type="ud", size=1000, count=5, mtu=1024),
    dict(topology="p2p", op="write", qp_type="uc", size=10_000, count=5, mtu=1024, loss=0.05),
], ids=["ud", "uc lossy"])
def test_patterned_verdicts_equal_real_memory(kw: dict) -> None:
    """UD (a GRH scattered before the data) and lossy UC (messages partly placed: the data
    does not verify): the same summary, verdict included, as with buffers."""
    sc = NetScenario(**kw)
    a, b = summary_fields(NetRun(sc).run()), summary_fields(NetRun(sc, real_memory=True).run())
    assert a == b
    assert a["data_verified"] is (kw["qp_type"] == "ud")


UET_CASES = [
    (dict(topology="leafspine:2,2,4", op="write", size=96 << 10, count=3, mtu=4096,
          pfc=False, loss=0.01), dict(entropy="packet", trim=True)),
    (dict(topology="incast:4", op="send", size=50_000, count=4, mtu=1024, pfc=False),
     dict(rendezvous=16 << 10)),
    (dict(topology="p2p", op="write", size=20_000, count=4, mtu=1024, loss=0.05),
     dict(mode="uud")),
]


@pytest.mark.parametrize("kw, opts", UET_CASES, ids=["sprayed trimmed", "rendezvous", "uud"])
def test_uet_patterned_runs_equal_real_memory(kw: dict, opts: dict) -> None:
    """UET's WRITE and SEND hold patterns too: the same summary, verdict included (UUD
    loses messages), as with buffers."""
    from roce.emu.scenario import Scenario
    from roce.emu.uet.run import UetOptions, UetRun
    sc = Scenario(**kw)
    lazy, real = UetRun(sc, UetOptions(**opts)), UetRun(sc, UetOptions(**opts),
                                                          real_memory=True)
    assert lazy.patterned and not real.patterned
    a, b = summary_fields(lazy.run()), summary_fields(real.run())
    assert a == b and a["data_verified"] is (opts.get("mode") != "uud")
    assert all(len(f.local.buf) == len(f.remote.buf) == 0 for f in lazy.flows)
    assert sum(f.remote.content.writes for f in lazy.flows) > 0


def test_read_and_atomic_runs_hold_bytes() -> None:
    for op in ("read", "atomic", "mixed"):
        assert not NetRun(NetScenario(topology="incast:2", op=op, size=4096,
                                      count=2)).patterned


class _Wrong(Patterned):
    """A destination that misplaces data the way ``how`` says, once, on the message's last
    write (or its first: ``missing``)."""

    __slots__ = ("how", "done", "first")

    def write_from(self, off: int, frame: bytes, at: int, n: int) -> None:
        self.write(off, frame[at:at + n])  # a received payload: placed through ``write``

    def write(self, off: int, data: object) -> None:
        data = bytes(data)  # type: ignore[call-overload]
        if self.done is None:
            self.done, self.first = False, (off, data)
        last = off + len(data) == self.slot
        if self.done or not last and self.how != "missing":
            return super().write(off, data)
        self.done = True
        if self.how == "corrupt":
            super().write(off, data[:7] + bytes([data[7] ^ 0x10]) + data[8:])
        elif self.how == "misplace":  # one byte late
            super().write(off + 1, data[:-1])
            super().write(off, data[:1])
        elif self.how == "duplicate":  # the first packet's data again, over the last
            super().write(off, data)
            first = self.first[1][:len(data)]
            super().write(off, first + data[len(first):])
        elif self.how == "missing":  # the first write is lost
            pass


@pytest.mark.parametrize("how", ["corrupt", "misplace", "duplicate", "missing"])
def test_a_wrong_byte_is_found(how: str) -> None:
    sc = NetScenario(topology="incast:2", op="write", size=20_000, count=1, mtu=4096)
    run = NetRun(sc)
    f = run.flows[0]
    wrong = _Wrong(sc.seed, f.index, "remote", sc.slot, sc.slots, "local")
    wrong.how, wrong.done = how, None
    f.remote._mr.content = wrong
    s = run.run()
    assert not s.data_verified
    assert "memory does not hold what the operations wrote" in s.unverified
    assert "remote slot 0" in s.unverified
    assert f.expected.mismatched("remote", memory_of(f.remote)) == [0]
