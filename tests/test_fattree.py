"""`--topology fattree:K` and `--oversubscription R`: the three-tier k-ary fat tree, its
equal-cost paths, its limits and cost, oversubscribed leaves, and collectives on it."""

from __future__ import annotations

import ipaddress
import json

import pytest

from roce.cli import main
from roce.emu.net import schema
from roce.emu.net import topology as topo
from roce.emu.net.runner import options
from roce.emu.scenario import Scenario
from roce.errors import UsageError


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_shape(k: int):
    t = topo.parse(f"fattree:{k}")
    half = k // 2
    assert len(t.hosts) == k ** 3 // 4
    cores = [s for s in t.switches if s.startswith("c")]
    aggs = [s for s in t.switches if s.startswith("a")]
    edges = [s for s in t.switches if s.startswith("e")]
    assert (len(cores), len(aggs), len(edges)) == (half * half, k * half, k * half)
    degree: dict[str, int] = {}
    for ln in t.links:
        for end in (ln.a, ln.b):
            degree[end] = degree.get(end, 0) + 1
    # every switch has k ports: an edge k/2 hosts and k/2 aggregation switches, ...
    assert all(degree[s] == k for s in t.switches)
    assert schema.shape_of(t) == schema.named_shape("fattree", [k])
    # hosts pod by pod, edge by edge
    assert list(t.hosts)[:half + 1] == [f"h1.1.{h}" for h in range(1, half + 1)] + [
        "h1.2.1" if k > 2 else "h2.1.1"]


def test_every_equal_cost_path_is_a_next_hop():
    """Across pods a host has (k/2)^2 shortest paths: its edge picks among k/2 aggregation
    switches and each of those among k/2 cores; all are in the ECMP sets."""
    k = 4
    net = topo.build(topo.parse(f"fattree:{k}"), options(Scenario(topology=f"fattree:{k}")))
    far = int(ipaddress.IPv4Address(net.hosts["h4.2.2"].ctx.ip))
    near = int(ipaddress.IPv4Address(net.hosts["h1.1.2"].ctx.ip))
    assert len(net.switches["e1.1"].routes[far]) == k // 2
    assert len(net.switches["a1.1"].routes[far]) == k // 2
    assert len(net.switches["c1.1"].routes[far]) == 1  # down: one way
    assert len(net.switches["e1.1"].routes[near]) == 1  # a host on the edge itself
    assert len(net.switches["e1.2"].routes[near]) == k // 2  # same pod, via any agg
    path = topo.path(net_topology := topo.parse("fattree:4"), "h1.1.1", "h4.2.2")
    assert len(path) == 6 and path[0].a == "h1.1.1" and net_topology


@pytest.mark.parametrize("spec,message", [
    ("fattree:3", "even K of at least 2"), ("fattree:0", "expected p2p"),
    ("fattree:1", "even K"), ("fattree:4,4", "expected p2p"),
    ("fattree:100", "at most 64000 hosts"), ("fattree:62", "would need")])
def test_limits(spec: str, message: str, monkeypatch: pytest.MonkeyPatch):
    from roce.emu import budget

    monkeypatch.setattr(budget, "available", lambda: 1 << 30)
    with pytest.raises(UsageError, match=message) as e:
        schema.check_named(spec)
    if "would need" in message:  # the bound it names fits, and is even
        k = int(str(e.value).rsplit("K at most ", 1)[1].rstrip(")"))
        assert k % 2 == 0 and schema.cost(schema.named_shape("fattree", [k])) <= 1 << 30
        assert schema.cost(schema.named_shape("fattree", [k + 2])) > 1 << 30


def test_cost_covers_a_build():
    """The cost model is above what building fattree:8 takes."""
    import tracemalloc

    tracemalloc.start()
    t = topo.parse("fattree:8")
    topo.build(t, options(Scenario(topology="fattree:8")))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < schema.cost(schema.named_shape("fattree", [8]))


def test_oversubscription_slows_the_uplinks_only():
    t = topo.parse("fattree:4")
    topo.oversubscribe(t, 4, 100.0)
    for ln in t.links:
        up = ln.a.startswith("e") and ln.b.startswith("a")
        assert ln.rate_gbps == (25.0 if up else None), (ln.a, ln.b)
    t = topo.parse("leafspine:2,2,2")
    topo.oversubscribe(t, 2, 40.0)
    assert sorted({ln.rate_gbps for ln in t.links}, key=str) == [20.0, None]
    with pytest.raises(UsageError, match="--oversubscription 2: the topology has no link"):
        topo.oversubscribe(topo.parse("incast:3"), 2, 100.0)
    with pytest.raises(UsageError, match="below the least link rate"):
        topo.oversubscribe(topo.parse("fattree:4"), 1e6, 1e-8)
    unchanged = topo.parse("fattree:4")
    topo.oversubscribe(unchanged, 1, 100.0)
    assert {ln.rate_gbps for ln in unchanged.links} == {None}


def _busbw(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    try:
        code = main(["emulate", "-T", "json", "--no-progress", "--topology", "fattree:4",
                     "--collective", "allreduce", "--size", "16M", *extra])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    assert code == 0, out.err
    s = json.loads(out.out)
    assert s["data_verified"]
    return s["workload"]


def test_ring_allreduce_on_a_fat_tree(capsys: pytest.CaptureFixture[str]):
    """16 ranks on a non-blocking fattree:4 reach busbw within 10% of the line rate; with
    the edges' uplinks 2:1 oversubscribed, busbw falls as the ratio predicts: each edge's
    one ring transfer that leaves it takes one uplink (ECMP) at half the rate, so busbw
    halves (within 10%)."""
    full = _busbw(capsys)
    assert full["ranks"] == 16
    assert full["busbw_GBps"] >= 0.9 * full["line_rate_GBps"]
    half = _busbw(capsys, "--oversubscription", "2")
    assert half["busbw_GBps"] == pytest.approx(full["busbw_GBps"] / 2, rel=0.1)


def test_oversubscription_refusals(capsys: pytest.CaptureFixture[str]):
    for args, message in ((["--oversubscription", "0.5"], "--oversubscription"),
                          (["--oversubscription", "2", "--topology", "incast:2", "--count",
                            "1", "--size", "4K"], "no link from a switch")):
        try:
            code = main(["emulate", "--no-progress", *args])
        except SystemExit as exc:
            code = int(exc.code or 0)
        err = capsys.readouterr().err
        assert code == 1 and message in err, err
