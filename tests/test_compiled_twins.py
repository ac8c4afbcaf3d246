"""The compiled emulator modules (roce/_compiled.py) against their interpreted form: the same
scenarios, run in this process (compiled) and in a child with ROCE_PURE=1 (the .py files),
give identical summaries, field by field.  Scenarios are drawn by hypothesis across the
switched network's topologies, operations, PFC, congestion control, recovery modes and load
balancing, the two-host fabric's faults, and UET endpoints (PDC modes, entropy, trimming)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from roce import _compiled, fast
from roce.testing.twins import differences, run_spec

BUILT = fast.COMPILED and not _compiled.pure_requested()
needs_build = pytest.mark.skipif(not BUILT, reason="compiled modules not built, or ROCE_PURE")


def _pure(specs: list[dict]) -> list[dict]:
    env = {**os.environ, _compiled.PURE_ENV: "1"}
    r = subprocess.run([sys.executable, "-m", "roce.testing.twins"], input=json.dumps(specs),
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


NET = st.fixed_dictionaries({
    "net": st.just(True),
    "topology": st.sampled_from(["incast:2", "incast:3", "incast:5", "dumbbell:2",
                                 "leafspine:2,2,2"]),
    "op": st.sampled_from(["write", "read", "send"]),
    "size": st.integers(1, 96 << 10),
    "count": st.integers(1, 3),
    "depth": st.integers(1, 2),
    "mtu": st.sampled_from([1024, 4096]),
    "pfc": st.booleans(),
    "cc": st.sampled_from(["none", "dcqcn", "timely", "dctcp", "swift", "hpcc"]),
    "recovery": st.sampled_from(["gbn", "sr"]),
    "lb": st.sampled_from(["ecmp", "spray"]),
    "buffer": st.sampled_from([12 << 20, 256 << 10]),
    "seed": st.integers(0, 2**16),
})
UET = st.fixed_dictionaries({
    "uet": st.fixed_dictionaries({"mode": st.sampled_from(["rud", "rod"]),
                                  "entropy": st.sampled_from(["pdc", "packet"]),
                                  "trim": st.booleans()}),
    "topology": st.sampled_from(["incast:2", "incast:3", "leafspine:2,2,2"]),
    "op": st.sampled_from(["write", "read", "send"]),
    "size": st.integers(1, 64 << 10),
    "count": st.integers(1, 3),
    "mtu": st.sampled_from([1024, 4096]),
    "pfc": st.just(False),
    "buffer": st.sampled_from([12 << 20, 128 << 10]),
    "seed": st.integers(0, 2**16),
})
P2P = st.fixed_dictionaries({
    "net": st.just(False),
    "op": st.sampled_from(["write", "read", "send", "atomic"]),
    "size": st.integers(8, 64 << 10),
    "count": st.integers(1, 6),
    "depth": st.integers(1, 4),
    "mtu": st.sampled_from([256, 1024, 4096]),
    "loss": st.sampled_from([0.0, 0.02, 0.1]),
    "reorder": st.sampled_from([0.0, 0.05]),
    "dup": st.sampled_from([0.0, 0.02]),
    "corrupt": st.sampled_from([0.0, 0.02]),
    "recovery": st.sampled_from(["gbn", "sr"]),
    "loss_rule": st.sampled_from(["rack", "dupthresh"]),
    "seed": st.integers(0, 2**16),
})


@needs_build
def test_emulator_modules_are_compiled() -> None:
    for name in _compiled.MODULES:
        importlib.import_module(name)
    loaded = _compiled.compiled_now()
    assert set(loaded) == set(_compiled.MODULES)
    assert all(loaded.values()), [m for m, c in loaded.items() if not c]


def test_pure_form_loads_the_py_files() -> None:
    code = ("import importlib, json; from roce import _compiled\n"
            "for m in _compiled.MODULES: importlib.import_module(m)\n"
            "print(json.dumps(_compiled.compiled_now()))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, _compiled.PURE_ENV: "1"}, timeout=120, check=True)
    loaded = json.loads(r.stdout)
    assert set(loaded) == set(_compiled.MODULES) and not any(loaded.values())


@needs_build
@settings(max_examples=10, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(st.one_of(NET, P2P, UET), min_size=3, max_size=5))
@example(specs=[  # the paths the drawn cases may miss: each one busy
    {"net": True, "topology": "incast:8", "size": 256 << 10, "count": 1, "pfc": False,
     "cc": "dcqcn"},
    {"net": True, "topology": "incast:8", "size": 256 << 10, "count": 1, "pfc": True,
     "cc": "dcqcn", "buffer": 1 << 20},
    {"net": True, "topology": "leafspine:2,2,2", "size": 128 << 10, "count": 2, "lb": "spray",
     "recovery": "sr", "pfc": False, "mtu": 1024, "cc": "dcqcn"},
    {"net": True, "topology": "dumbbell:2", "op": "read", "size": 128 << 10, "count": 2,
     "cc": "timely"},
    {"net": True, "topology": "incast:8", "size": 256 << 10, "count": 1, "pfc": False,
     "cc": "dctcp", "buffer": 256 << 10},
    {"net": True, "topology": "leafspine:2,2,2", "size": 128 << 10, "count": 2, "pfc": False,
     "recovery": "sr", "cc": "swift", "buffer": 256 << 10},
    {"net": True, "topology": "dumbbell:2", "size": 128 << 10, "count": 2, "cc": "hpcc"},
    {"net": False, "op": "write", "size": 64 << 10, "count": 8, "loss": 0.05, "reorder": 0.05,
     "recovery": "sr"},
    {"net": True, "topology": "p2p", "op": "write", "size": 256 << 10, "count": 3,
     "delay_ns": 20_000, "cc": "timely", "loss": 0.01},
    {"net": False, "op": "read", "size": 32 << 10, "count": 4, "loss": 0.05, "dup": 0.02,
     "corrupt": 0.02},
    # workload runs (roce.emu.net.workrun) and a link that fails and comes back mid-run
    {"topology": "fattree:4", "collective": "allreduce", "size": 512 << 10, "chunk": 64 << 10,
     "cc": "dcqcn", "link_down": [["a1.1-c1.1", 20_000, 60_000]], "detect_delay_ns": 5_000,
     "timeout": 6},
    {"topology": "leafspine:2,2,2", "cdf": "alistorage", "duration_ns": 30_000, "load": 0.8,
     "recovery": "sr", "oversubscription": 2.0},
    # UET endpoints: sprayed with reordering, ROD going back after drops, trimmed incast
    {"uet": {"entropy": "packet"}, "topology": "leafspine:2,2,2", "size": 128 << 10,
     "count": 2, "pfc": False, "mtu": 1024},
    {"uet": {"mode": "rod"}, "topology": "incast:4", "size": 128 << 10, "count": 2,
     "pfc": False, "buffer": 128 << 10},
    {"uet": {"trim": True}, "topology": "incast:4", "op": "read", "size": 128 << 10,
     "count": 2, "pfc": False, "buffer": 128 << 10},
])
def test_compiled_and_pure_emulator_agree(specs: list[dict]) -> None:
    pure = _pure(specs)
    for spec, p in zip(specs, pure):
        c = run_spec(spec)
        diffs = list(differences(p, c))
        assert not diffs, (spec, diffs[:10])


@needs_build
def test_an_edited_module_sends_every_module_to_its_py_with_a_warning(monkeypatch) -> None:
    """A module edited after the build is never run from the stale build, and neither is any
    other: compiled modules hold each other's types, so the forms cannot be mixed."""
    import roce.emu.core
    import roce.emu.net

    link, where = "roce.emu.net.link", roce.emu.net.__path__
    chooser = _compiled._Chooser(pure=False)
    spec = chooser.find_spec(link, where)
    assert spec is not None and not spec.origin.endswith(".py")  # as built: compiled
    assert chooser.stale == []
    built = _compiled._built()
    monkeypatch.setattr(_compiled, "_built", lambda: {**built, link: "0" * 64})
    chooser = _compiled._Chooser(pure=False)  # as if link.py changed since the build
    with pytest.warns(RuntimeWarning, match=f"{link} edited after the build"):
        spec = chooser.find_spec("roce.emu.core.qp", roce.emu.core.__path__)
    assert spec.origin.endswith("qp.py") and chooser.stale == [link]
    assert chooser.find_spec(link, where).origin.endswith("link.py")
    assert _compiled._Chooser(pure=True).find_spec(link, where).origin.endswith("link.py")
    # not a compiled module: its .py, as the normal import finds it
    assert chooser.find_spec("roce.emu.net.runner", where).origin.endswith("runner.py")
