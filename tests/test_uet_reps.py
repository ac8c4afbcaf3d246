"""REPS (``--entropy reps``, roce/emu/uet/reps.py): entropies whose ACKs came back unmarked
are used again, marked or trimmed ones dropped, fresh ones drawn otherwise; on a leaf-spine
whose one spine has a slow link to the destination's leaf, REPS sends fewer packets that way
than oblivious spraying does, and finishes sooner."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from roce.cli import main
from roce.emu.net import topology as topo
from roce.emu.scenario import Scenario
from roce.emu.uet import ENTROPY_MODES
from roce.emu.uet.reps import Reps
from roce.emu.uet.run import UetOptions, UetRun


def fresh_source():
    counter = itertools.count(0xC000)
    return lambda: next(counter)


def test_unmarked_entropies_are_recycled_in_order_marked_ones_dropped():
    r = Reps(fresh_source())
    pdc = SimpleNamespace(id=1)
    first = [r.pick(pdc, psn) for psn in range(4)]
    assert first == [0xC000, 0xC001, 0xC002, 0xC003] and r.fresh == 4
    r.acked(pdc, [0, 2], marked=False)
    r.acked(pdc, [1], marked=True)
    assert [r.pick(pdc, psn) for psn in (4, 5, 6)] == [0xC000, 0xC002, 0xC004]
    assert (r.recycled, r.fresh, r.dropped) == (2, 5, 1)
    r.acked(pdc, [99], marked=False)  # not in flight: nothing to recycle
    assert r.pick(pdc, 7) == 0xC005


def test_the_recycle_queue_is_bounded():
    r = Reps(fresh_source(), capacity=2)
    pdc = SimpleNamespace(id=1)
    for psn in range(3):
        r.pick(pdc, psn)
    r.acked(pdc, [0, 1, 2], marked=False)
    assert len(r.queues[1]) == 2 and r.dropped == 1


def slow_spine_run(entropy: str):
    """leafspine:2,2,1, one flow l1h1 -> l2h1; spine2's link to leaf2 at 25 Gb/s of 100."""
    t = topo.leafspine(2, 2, 1)
    t.traffic = [("l1h1", "l2h1")]
    for link in t.links:
        if {link.a, link.b} == {"spine2", "leaf2"}:
            link.rate_gbps = 25.0
    sc = Scenario(op="write", size=1 << 20, count=2, topology="leafspine:2,2,1", pfc=False)
    run = UetRun(sc, UetOptions(entropy=entropy), topology=t)
    s = run.run()
    via = {sw.name: sum(p.tx_frames for p in sw.ports if p.wire.dst.name.startswith("leaf2"))
           for sw in run.net.switches.values() if sw.name.startswith("spine")}
    return s, via["spine2"] / (via["spine1"] + via["spine2"])


def test_reps_steers_away_from_a_slow_path():
    s_obl, share_obl = slow_spine_run("packet")
    s_reps, share_reps = slow_spine_run("reps")
    assert s_obl.data_verified and s_reps.data_verified
    assert share_obl == pytest.approx(0.5, abs=0.05)  # oblivious: an even split
    assert share_reps < 0.75 * share_obl, (share_reps, share_obl)
    assert s_reps.virtual_ns < s_obl.virtual_ns
    assert s_reps.uet["reps"]["recycled"] > s_reps.uet["reps"]["fresh"]


def test_entropy_reps_is_a_choice_of_the_command(capsys):
    assert "reps" in ENTROPY_MODES
    code = main(["emulate", "--no-progress", "--protocol", "uet", "--topology",
                 "leafspine:2,2,1", "--size", "64K", "--count", "2", "--entropy", "reps"])
    out = capsys.readouterr().out
    assert code == 0 and "entropy=reps" in out and "data verified yes" in out
