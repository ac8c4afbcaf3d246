"""The subnet manager's routings (roce.emu.ib.routing and its route_* modules): on every
built-in topology, with and without LMC, every forwarding table is complete and loop-free;
minhop and dmodk (and updn and ftree on fat trees) route on shortest paths; updn never turns
from down to up; ftree and dmodk spread destinations evenly over uplinks; ftree refuses
shapes that are not fat trees; LMC gives a port's LIDs distinct paths."""

from __future__ import annotations

import pytest

from roce.emu.ib import routing
from roce.emu.ib.lft import Unroutable, bfs
from roce.emu.net import topology as topo

TOPOLOGIES = ["p2p", "incast:4", "dumbbell:3", "leafspine:3,2,2", "leafspine:2,4,2",
              "fattree:4"]
FAT = ("leafspine", "fattree")  # the shapes ftree routes


def _routes(spec: str, algo: str, lmc: int = 0) -> tuple[topo.Topology, dict, dict]:
    t = topo.parse(spec)
    lids = routing.assign_lids(list(t.hosts), lmc)
    lft = routing.forwarding_tables(list(t.hosts), t.switches, t.links, lids, algo, lmc)
    return t, lft, lids


def _walk(t: topo.Topology, lft: dict, start: str, dlid: int, dst: str) -> list[str]:
    """The switches a packet for ``dlid`` crosses from switch ``start`` to host ``dst``."""
    ports = routing.ports_of(t.links, t.switches)
    path, node = [start], start
    while True:
        assert dlid in lft[node], f"{node} has no entry for LID {dlid}"
        node = ports[node][lft[node][dlid]]
        if node == dst:
            return path
        assert node in t.switches, f"LID {dlid} delivered to {node}, not {dst}"
        assert node not in path, f"loop at {node} for LID {dlid}: {path}"
        path.append(node)


def _cases() -> list[tuple[str, str]]:
    return [(spec, algo) for spec in TOPOLOGIES for algo in routing.ROUTINGS
            if algo != "ftree" or spec.split(":")[0] in FAT + ("p2p", "incast")]


@pytest.mark.parametrize("lmc", [0, 2])
@pytest.mark.parametrize("spec, algo", _cases())
def test_every_table_is_complete_and_loop_free(spec: str, algo: str, lmc: int) -> None:
    t, lft, lids = _routes(spec, algo, lmc)
    for dst in t.hosts:
        if dst not in t.leaf_of or t.leaf_of[dst] not in t.switches:
            continue
        for j in range(1 << lmc):
            for s in t.switches:  # from every switch, not only those on some path
                _walk(t, lft, s, lids[dst] + j, dst)
    if not t.switches:
        assert lft == {}
    if algo in ("minhop", "dmodk") or spec.startswith(FAT):
        for a in t.hosts:  # and from every host on a shortest path
            for b in t.hosts:
                if a != b and t.leaf_of.get(a) in t.switches:
                    for j in range(1 << lmc):
                        hops = len(_walk(t, lft, t.leaf_of[a], lids[b] + j, b)) + 1
                        assert hops == len(topo.path(t, a, b)), (a, b, j)


def test_ftree_refuses_what_is_not_a_fat_tree() -> None:
    with pytest.raises(Unroutable, match="ftree: switches L and R are joined at ranks 0 and 0"):
        _routes("dumbbell:2", "ftree")
    t = topo.parse("leafspine:2,2,1")
    t.switches["x"] = topo.SwitchSpec("x")  # a switch hanging off a spine: rank 2, no uplink
    t.link("x", "spine1")
    t.switches["y"] = topo.SwitchSpec("y")
    t.link("y", "spine2")
    t.link("x", "y")  # x and y: both rank 2, joined
    with pytest.raises(Unroutable, match="ftree: switches x and y"):
        routing.forwarding_tables(list(t.hosts), t.switches, t.links,
                                  routing.assign_lids(list(t.hosts)), "ftree")


@pytest.mark.parametrize("spec", TOPOLOGIES)
def test_updn_never_turns_down_then_up(spec: str) -> None:
    """The rule of route_updn: ranks from the hosts' switches, roots the farthest, up toward
    a lower (up-rank, name)."""
    t, lft, lids = _routes(spec, "updn", 1)
    ports = routing.ports_of(t.links, t.switches)
    leaves = sorted({t.leaf_of[h] for h in t.hosts if t.leaf_of.get(h) in t.switches})
    if not leaves:
        return
    rank = bfs(ports, leaves)
    roots = sorted(s for s in rank if rank[s] == max(rank.values()))
    up_rank = bfs(ports, roots)
    turns = 0
    for a in t.hosts:
        for b in t.hosts:
            if a == b or t.leaf_of.get(a) not in t.switches:
                continue
            for j in range(2):
                path = _walk(t, lft, t.leaf_of[a], lids[b] + j, b)
                ups = [(up_rank[y], y) < (up_rank[x], x) for x, y in zip(path, path[1:])]
                assert ups == sorted(ups, reverse=True), (a, b, path)  # up*, then down*
                turns += True in ups and False in ups
    if spec.startswith(FAT):
        assert turns > 0  # routes that go up and come down were checked


@pytest.mark.parametrize("spec", ["fattree:4", "fattree:6", "leafspine:2,4,4",
                                  "leafspine:3,3,3"])
@pytest.mark.parametrize("algo", ["ftree", "dmodk"])
def test_fat_tree_routings_balance_uplinks(spec: str, algo: str) -> None:
    """At every switch, the destinations not below it are spread over its uplinks, each
    carrying the same number, give or take one."""
    t, lft, lids = _routes(spec, algo)
    ports = routing.ports_of(t.links, t.switches)
    rank = bfs(ports, sorted(set(t.leaf_of[h] for h in t.hosts)))
    checked = 0
    for s in t.switches:
        ups = [i for i, p in enumerate(ports[s]) if rank.get(p) == rank[s] + 1]
        if len(ups) < 2:
            continue
        below = set()
        for h in t.hosts:
            path = _walk(t, lft, s, lids[h], h)
            if all(rank[y] < rank[x] for x, y in zip(path, path[1:])):
                below.add(h)
        remote = [lids[h] for h in t.hosts if h not in below]
        use = [sum(lft[s][d] == u for d in remote) for u in ups]
        assert max(use) - min(use) <= 1, (s, use)
        checked += 1
    assert checked >= len([s for s in t.switches if rank[s] == 0])


@pytest.mark.parametrize("algo", list(routing.ROUTINGS))
@pytest.mark.parametrize("spec, src, dst", [("fattree:4", "h1.1.1", "h3.2.2"),
                                            ("leafspine:2,4,2", "l1h1", "l2h2")])
def test_lmc_two_bits_gives_four_distinct_paths(algo: str, spec: str, src: str,
                                                dst: str) -> None:
    t, lft, lids = _routes(spec, algo, 2)
    assert lids[dst] % 4 == 0
    paths = {tuple(_walk(t, lft, t.leaf_of[src], lids[dst] + j, dst)) for j in range(4)}
    assert len(paths) == 4, paths


def test_lids_with_lmc_are_aligned_and_bounded() -> None:
    assert routing.assign_lids(["a", "b", "c"], 2) == {"a": 4, "b": 8, "c": 12}
    with pytest.raises(ValueError, match="LMC 8"):
        routing.assign_lids(["a"], 8)
    with pytest.raises(ValueError, match="unicast LIDs"):
        routing.assign_lids([str(i) for i in range(400)], 7)


def test_routing_names_are_checked() -> None:
    with pytest.raises(ValueError, match="routing 'x'"):
        _routes("incast:2", "x")


# -- runs: adaptive routing and LMC on the subnet ----------------------------------------


def _leafspine_run(ar: bool) -> tuple[object, object]:
    from roce.emu.ib.ibrun import IbRun
    from roce.emu.scenario import Scenario

    t = topo.parse("leafspine:2,2,3")
    # minhop puts l2h1 and l2h3 on spine1, l2h2 on spine2: two flows share leaf1's uplink
    # to spine1 while the one to spine2 carries one
    t.traffic = [("l1h1", "l2h1"), ("l1h2", "l2h2"), ("l1h3", "l2h3")]
    sc = Scenario(topology="leafspine:2,2,3", protocol="ib", count=8, size=65536,
                  ib_ar=ar, recovery="sr")
    run = IbRun(sc, topology=t)
    s = run.run()
    assert s.data_verified and s.fabric["drops"] == 0, s.unverified
    return run, s


def test_adaptive_routing_moves_traffic_off_a_congested_path() -> None:
    loads = {}
    for ar in (False, True):
        run, s = _leafspine_run(ar)
        leaf = run.net.switches["leaf1"]
        loads[ar] = {p.wire.dst.name.split(":")[0]: p.tx_frames for p in leaf.ports
                     if p.wire.dst.name.startswith("spine")}
        slowest = max(f["fct_ns"]["mean"] for f in s.flows)
        if not ar:
            assert "ar_moved" not in s.fabric
            assert loads[ar]["spine1"] == 2 * loads[ar]["spine2"]  # the static tables
            static = slowest
        else:
            assert s.fabric["ar_moved"] > 0
            # the spine2 path took packets off the congested one, and the slowest flow
            # finishes sooner
            assert loads[ar]["spine2"] > 1.3 * loads[False]["spine2"]
            assert loads[ar]["spine1"] < 0.85 * loads[False]["spine1"]
            assert slowest < 0.9 * static


class Lids:
    """A writer that keeps the DLIDs of what it is handed."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def write(self, data: bytes, ts_ns: int | None = None) -> None:
        self.seen.add(int.from_bytes(data[2:4], "big"))


def test_lmc_spreads_a_pairs_qps_over_its_paths() -> None:
    """LMC 2, four QPs between two hosts of different leaves: each QP's packets take the
    path of its DLID, the four DLIDs four spines; every packet carries a LID of its port."""
    from roce.emu.ib.ibrun import IbRun
    from roce.emu.scenario import Scenario

    t = topo.parse("leafspine:2,4,1")
    t.traffic = [("l1h1", "l2h1")]
    for lmc, used in ((0, 1), (2, 4)):
        sc = Scenario(topology="leafspine:2,4,1", protocol="ib", count=4, size=20000,
                      qps=4, ib_lmc=lmc)
        run = IbRun(sc, topology=t)
        lids = Lids()
        run.record(lids)
        s = run.run()
        assert s.data_verified, s.unverified
        spines = [p.tx_frames for p in run.net.switches["leaf1"].ports
                  if p.wire.dst.name.startswith("spine")]
        assert sum(n > 0 for n in spines) == used, spines
        assert len(lids.seen) == 2 * used  # the data's DLIDs at l2h1, the ACKs' at l1h1


@pytest.mark.parametrize("argv, what", [
    (["--ib-routing", "ftree", "--topology", "dumbbell:2"],
     "--ib-routing ftree on dumbbell:2: ftree: switches L and R are joined"),
    (["--ib-lmc", "8"], "argument --ib-lmc: 8 is out of range (0..7) for an LMC"),
    (["--ib-ar", "on"], "--ib-ar on: a QP's packets take different paths"),
])
def test_emulate_refuses_by_name(argv: list[str], what: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    from roce.cli import main

    try:
        code = main(["emulate", "--protocol", "ib", "--topology", "incast:2", *argv])
    except SystemExit as e:  # the parser's own refusal
        code = e.code
    assert code == 1
    assert what in capsys.readouterr().err


@pytest.mark.parametrize("opt", [["--ib-lmc", "1"], ["--ib-ar", "on"]])
def test_ib_options_need_ib(opt: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from roce.cli import main

    assert main(["emulate", *opt]) == 1
    assert f"{opt[0]}: only with --protocol ib" in capsys.readouterr().err


def test_emulate_cli_names_the_routing(capsys: pytest.CaptureFixture[str]) -> None:
    from roce.cli import main

    assert main(["emulate", "--protocol", "ib", "--topology", "fattree:4", "--traffic",
                 "permutation", "--count", "2", "--size", "9000", "--ib-routing", "ftree",
                 "--ib-lmc", "1", "--ib-ar", "on", "--recovery", "sr"]) == 0
    out = capsys.readouterr().out
    assert "protocol=ib routing=ftree lmc=1 ar=on" in out and "data verified yes" in out
    assert "adaptively rerouted" in out
