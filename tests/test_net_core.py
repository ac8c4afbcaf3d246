"""The switched network's core: exact serialization, routes, the p2p default, determinism,
topology files, CLI errors."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from net_helpers import pcap, run

from roce.cli import main
from roce.emu.core.constants import MAX_UNACKED_PSNS
from roce.emu.net import topology
from roce.emu.net.runner import NetRun, NetScenario, run_scenario
from roce.emu.scenario import Scenario
from roce.errors import UsageError

RATE = 100  # Gb/s
DELAY = 1000  # ns


def ser_ends(start: int, sizes: list[int], rate_gbps: float = RATE) -> list[int]:
    """When each frame of a back-to-back burst finishes serializing (exact ceil)."""
    out, bits = [], 0
    for n in sizes:
        bits += 8 * n
        out.append(start + math.ceil(bits / rate_gbps))
    return out


def test_two_line_rate_senders_grow_the_egress_queue_at_exactly_line_rate():
    r = NetRun(NetScenario(topology="incast:2", size=1 << 20, count=1, pfc=False, ecn="off",
                           buffer=64 << 20))
    sw = r.net.switches["sw"]
    out = sw.ports[2]  # toward the receiver
    log = []  # (time, sender index, frame length, queue bytes right after)

    class Hook:  # what the senders' wires deliver to: the port, then a note
        def __init__(self, port):
            self.port = port

        def receive(self, now, frame):
            self.port.receive(now, frame)
            log.append((now, self.port.index, len(frame), out.qbytes[3]))

    for w in r.net.wires:
        if w.dst in sw.ports[:2]:
            w.dst = Hook(w.dst)
    s = r.run()
    assert s.data_verified and s.fabric["drops"] == 0
    data = [e for e in log if e[2] > 1000]  # the WRITE packets (ACKs flow the other way)
    assert len(data) == 2 * 256
    # the first window (MAX_UNACKED_PSNS packets) leaves each sender back to back:
    # frame k arrives at ceil(8 * bytes so far / rate) + delay
    window = MAX_UNACKED_PSNS
    data = data[:2 * window]
    for i in (0, 1):
        mine = [e for e in data if e[1] == i]
        assert len(mine) == window
        assert [e[0] for e in mine] == [t + DELAY for t in ser_ends(0, [e[2] for e in mine])]
    # the egress port starts its frames back to back from the first arrival, in arrival order
    t0 = data[0][0]
    starts = [t0] + ser_ends(t0, [e[2] for e in data])[:-1]
    arrived = 0
    for t, _, n, q in data:
        arrived += n
        sent = sum(e[2] for e, st in zip(data, starts) if st <= t)
        assert q == arrived - sent  # exact byte accounting on the virtual clock
    # so over the burst the queue grows at the line rate: 2 x rate in, 1 x rate out
    (ta, _, _, qa), (tb, _, _, qb) = data[3], data[-1]
    assert abs((qb - qa) * 8 - RATE * (tb - ta)) <= 8 * 4170


def test_routes_are_shortest_paths_with_equal_cost_sets():
    t = topology.leafspine(3, 2, 2)
    net = topology.build(t, topology.NetOptions())
    leaf1, spine1 = net.switches["leaf1"], net.switches["spine1"]
    far = int.from_bytes(bytes([10, 0, 0, 6]), "big")  # l3h2, on leaf3
    near = int.from_bytes(bytes([10, 0, 0, 2]), "big")  # l1h2, on leaf1
    assert [p.wire.dst.name for p in leaf1.routes[far]] == ["spine1:0", "spine2:0"]
    assert [p.wire.dst.name for p in leaf1.routes[near]] == ["l1h2"]
    assert [p.wire.dst.name for p in spine1.routes[far]] == ["leaf3:0"]  # leaf3 port 0 faces spine1
    # hosts resolve every peer to their leaf's port
    nic = net.hosts["l1h1"]
    assert {nic.device.peer_mac(ip) for h, ip in t.hosts.items() if h != "l1h1"} == {
        leaf1.ports[2].mac.hex(":")}


def test_permutation_is_a_seeded_derangement_across_leaves():
    import random

    t = topology.leafspine(4, 2, 4)
    pairs = topology.permutation(t, random.Random(5))
    assert sorted(a for a, _ in pairs) == sorted(t.hosts) == sorted(b for _, b in pairs)
    assert all(t.leaf_of[a] != t.leaf_of[b] for a, b in pairs)
    assert pairs == topology.permutation(t, random.Random(5))
    assert pairs != topology.permutation(t, random.Random(6))


def _is_derangement_across_leaves(t, pairs) -> bool:
    return (sorted(a for a, _ in pairs) == sorted(t.hosts) == sorted(b for _, b in pairs)
            and all(t.leaf_of[a] != t.leaf_of[b] for a, b in pairs))


def test_permutation_of_many_hosts_per_leaf():
    """32 hosts per leaf: a random permutation keeps ~32 pairs within a leaf, so drawing
    until none does never ends; the permutation is repaired instead (8,192 hosts need it)."""
    import random

    for shape in ((8, 2, 32), (256, 32, 32), (2, 1, 16)):
        t = topology.leafspine(*shape)
        pairs = topology.permutation(t, random.Random(3))
        assert _is_derangement_across_leaves(t, pairs), shape
        assert pairs == topology.permutation(t, random.Random(3))
        assert pairs != topology.permutation(t, random.Random(4))


def test_permutation_refuses_a_leaf_with_most_hosts():
    """No derangement exists when one switch holds more than half the hosts: refused at
    once, saying why."""
    import random

    t = topology.Topology()
    t.switches["a"] = topology.SwitchSpec("a")
    t.switches["b"] = topology.SwitchSpec("b")
    t.link("a", "b")
    for name, sw in (("x1", "a"), ("x2", "a"), ("x3", "a"), ("y1", "b")):
        t.host(name)
        t.link(name, sw)
    with pytest.raises(UsageError, match="a holds 3 of the 4 hosts"):
        topology.permutation(t, random.Random(1))


def test_p2p_default_is_the_two_host_fabric(capsys):
    assert main(["emulate", "--size", "64K", "--count", "3", "-T", "json",
                 "--no-progress"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = run_scenario(Scenario(size=64 << 10, count=3)).as_dict()
    for d in (got, want):
        for k in ("cpu_s", "packets_per_cpu_s"):
            d.pop(k)
    assert got == want
    assert "fabric" not in got


def _strip_cpu(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("cpu_s", "packets_per_cpu_s",
                                                     "hops_per_cpu_s")}


def test_same_seed_same_pcaps_traces_and_json(tmp_path, capsys):
    outs = []
    for i in range(2):
        d = tmp_path / str(i)
        d.mkdir()
        argv = ["emulate", "--topology", "leafspine:2,2,2", "--size", "128K", "--count", "2",
                "--lb", "spray", "--buffer", "1M", "--loss", "0.002", "--seed", "7",
                "-w", str(d / "all.pcap"), "--tap", f"leaf1:0={d / 'tap.pcap'}",
                "--trace", str(d / "t.jsonl"), "--trace-interval", "5us", "-T", "json",
                "--no-progress"]
        assert main(argv) == 0
        outs.append((_strip_cpu(json.loads(capsys.readouterr().out)),
                     (d / "all.pcap").read_bytes(), (d / "tap.pcap").read_bytes(),
                     (d / "t.jsonl").read_text()))
    assert outs[0] == outs[1]
    assert sum(v["lost"] for v in outs[0][0]["link"].values()) > 0  # the faults acted
    assert len(pcap(tmp_path / "0" / "all.pcap")) > 0


def test_a_different_seed_changes_the_run(capsys):
    res = []
    for seed in (1, 2):
        assert main(["emulate", "--topology", "leafspine:2,2,2", "--size", "64K", "--count",
                     "1", "--lb", "spray", "--seed", str(seed), "-T", "json",
                     "--no-progress"]) == 0
        res.append(_strip_cpu(json.loads(capsys.readouterr().out)))
    assert res[0]["link"] != res[1]["link"]


def test_topology_file(tmp_path):
    f = tmp_path / "net.toml"
    f.write_text('''
[hosts.h1]
[hosts.h2]
[hosts.h3]
ip = "10.9.0.3"
[switches.s1]
buffer = "4M"
ecn = "off"
[switches.s2]
pfc = false
[[links]]
a = "h1"
b = "s1"
rate = "25G"
delay = "2us"
[[links]]
a = "h2"
b = "s1"
[[links]]
a = "s1"
b = "s2"
rate = "40"
faults = { loss = 0.01 }
reverse_faults = {}
[[links]]
a = "h3"
b = "s2"
[[traffic]]
src = "h1"
dst = "h3"
[[traffic]]
src = "h2"
dst = "h3"
''')
    r, s = run(topology_file=str(f), size=256 << 10, count=2, seed=3)
    assert s.data_verified
    assert [(x["src"], x["dst"]) for x in s.flows] == [("h1", "h3"), ("h2", "h3")]
    net = r.net
    w = {x.name: x for x in net.wires}
    assert w["h1->s1:0"].rate_bps == 25_000_000_000 and w["h1->s1:0"].delay_ns == 2000
    assert w["s1:2->s2:0"].rate_bps == 40_000_000_000
    assert w["s1:2->s2:0"].faults.config.loss == 0.01
    assert w["s2:0->s1:2"].faults.config.loss == 0.0
    assert s.link["s1:2->s2:0"]["lost"] > 0 and s.retransmitted > 0
    assert net.switches["s1"].buffer.size == 4 << 20
    assert not net.switches["s2"].pfc_enabled and net.switches["s1"].pfc_enabled
    assert net.hosts["h3"].ctx.ip == "10.9.0.3"


@pytest.mark.parametrize("argv, code, message", [
    (["--topology", "ring:3"], 1, "--topology: ring:3: expected p2p, incast:N"),
    (["--topology", "incast:2", "--ecn", "1,2"], 1, "--ecn: '1,2'"),
    (["--topology", "incast:2", "--ecn", "400K,100K,0.2"], 1, "KMIN <= KMAX"),
    (["--topology", "incast:2", "--tap", "sw:9"], 1, "--tap sw:9"),
    (["--topology", "incast:2", "--buffer", "64K"], 1, "too small"),
    (["--topology", "incast:2", "--pfc-storm", "nobody"], 1, "--pfc-storm nobody"),
    (["--topology-file", "/nonexistent/net.toml"], 2, "/nonexistent/net.toml"),
])
def test_usage_errors(argv, code, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        got = main(["emulate", "--no-progress", "--count", "1", "--size", "4K", *argv])
    except SystemExit as exc:  # refused by the option's own type, before any work
        got = exc.code
    assert got == code
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written before the check failed


def test_dumbbell_pairs_share_one_bottleneck():
    r, s = run(topology="dumbbell:3", size=1 << 20, count=1, pfc=False, buffer=64 << 20)
    assert s.data_verified
    assert [(f["src"], f["dst"]) for f in s.flows] == [("a1", "b1"), ("a2", "b2"), ("a3", "b3")]
    bottleneck = s.fabric["ports"]["L:3"]
    assert bottleneck["peer"] == "R:3" and bottleneck["max_queue_bytes"] > 1 << 20
    # three line-rate senders through one line-rate link: it takes 3x one transfer
    one = (1 << 20) * 8 / RATE
    assert 3 * one < s.virtual_ns < 3 * one * 1.1
    assert s.goodput_gbps <= RATE


def test_all_to_all_traffic():
    r, s = run(topology="leafspine:2,1,2", traffic="all-to-all", size=64 << 10, count=1)
    assert s.data_verified and len(s.flows) == 12
    assert {(f["src"], f["dst"]) for f in s.flows} == {
        (a, b) for a in r.net.hosts for b in r.net.hosts if a != b}


@settings(max_examples=25, deadline=None)
@given(topo=st.sampled_from(["incast:3", "dumbbell:2", "leafspine:2,2,2"]),
       lb=st.sampled_from(["ecmp", "spray"]), pfc=st.booleans(),
       op=st.sampled_from(["write", "send", "read", "mixed"]),
       loss=st.sampled_from([0.0, 0.01]), dup=st.sampled_from([0.0, 0.01]),
       reorder=st.sampled_from([0.0, 0.01]), buffer=st.sampled_from([1 << 20, 4 << 20]),
       seed=st.integers(0, 1000))
def test_every_network_delivers_every_message_exactly_once(topo, lb, pfc, op, loss, dup,
                                                           reorder, buffer, seed):
    _, s = run(topology=topo, lb=lb, pfc=pfc, op=op, loss=loss, dup=dup, reorder=reorder,
               buffer=buffer, seed=seed, size=64 << 10, count=4, timeout=8)
    assert s.finished and s.data_verified
    assert s.completed == {"IBV_WC_SUCCESS": 4 * len(s.flows)}
    if op == "send":
        assert [f["recv_completions"] for f in s.flows] == [4] * len(s.flows)
    if pfc and not (loss or dup or reorder):
        assert s.fabric["ports"] and all(
            p["lossless_drops"] == 0 for p in s.fabric["ports"].values())


def test_switched_runs_count_what_reached_the_responders(tmp_path, capsys):
    """``delivered`` counts the messages the responders executed, out of ``count`` for every
    flow (not ``count`` x ``qps``)."""
    argv = ["emulate", "--no-progress", "--topology", "incast:16", "--size", "64K",
            "--count", "1"]
    assert main(argv) == 0
    assert "delivered     16 of 16 messages reached the responder" in capsys.readouterr().out
    assert main([*argv, "-T", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["delivered"] == 16
    f = tmp_path / "net.toml"
    f.write_text('[hosts.h1]\n[hosts.h2]\n[hosts.h3]\n[hosts.h4]\n[switches.sw]\n'
                 + "".join(f'[[links]]\na = "h{i}"\nb = "sw"\n' for i in range(1, 5))
                 + "".join(f'[[traffic]]\nsrc = "h{a}"\ndst = "h{b}"\n'
                           for a, b in ((1, 2), (2, 3), (3, 4), (4, 1))))
    assert main(["emulate", "--no-progress", "--topology-file", str(f), "--size", "16K",
                 "--count", "3", "--qps", "2"]) == 0
    assert "delivered     24 of 24 messages reached the responder" in capsys.readouterr().out


def test_an_unknown_storm_host_lists_the_hosts(capsys):
    assert main(["emulate", "--no-progress", "--topology", "incast:3", "--count", "1",
                 "--pfc-storm", "nobody"]) == 1
    err = capsys.readouterr().err
    assert "--pfc-storm nobody: no such host (the hosts: s1, s2, s3, r)" in err


def test_a_switched_run_that_fails_says_which_messages_and_where(tmp_path, capsys):
    """One flow's link loses everything: its messages fail, the others verify, and the
    summary names the flow and what became of its messages."""
    f = tmp_path / "net.toml"
    f.write_text('[hosts.h1]\n[hosts.h2]\n[hosts.h3]\n[switches.sw]\n'
                 '[[links]]\na = "h1"\nb = "sw"\n[[links]]\na = "h2"\nb = "sw"\n'
                 '[[links]]\na = "h3"\nb = "sw"\nfaults = { loss = 1.0 }\n'
                 '[[traffic]]\nsrc = "h1"\ndst = "h2"\n[[traffic]]\nsrc = "h3"\ndst = "h2"\n')
    code = main(["emulate", "--no-progress", "--topology-file", str(f), "--size", "4K",
                 "--count", "2", "--timeout", "4", "--retry-cnt", "1"])
    out, err = capsys.readouterr()
    assert code == 4
    why = ("2 of 4 message(s) did not complete successfully (h3->h2 QP 0x11: "
           "IBV_WC_RETRY_EXC_ERR=1, IBV_WC_WR_FLUSH_ERR=1)")
    assert f"data verified NO: {why}" in out
    assert err.strip() == f"roce emulate: data not verified: {why}"
