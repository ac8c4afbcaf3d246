"""ECMP keeps a flow on one path and spreads flows by UDP source port; spraying sends one
flow over every spine, so it arrives reordered and go-back-N retransmits."""

from __future__ import annotations

from collections import defaultdict

from net_helpers import pcap, run, src_ip

from roce.emu.net import hop as frames

SPINES = 4


def _paths(tmp_path, **kw):
    """Which uplink of leaf1 each (source IP, UDP source port) used, from taps."""
    taps = {f"leaf1:{i}": str(tmp_path / f"up{i}.pcap") for i in range(SPINES)}
    r, s = run(taps=taps, **kw)
    used = defaultdict(set)
    leaf1 = r.net.switches["leaf1"]
    for i in range(SPINES):
        for _, f in pcap(taps[f"leaf1:{i}"]):
            if frames.is_ipv4(f) and f[6:12] == leaf1.ports[i].mac and len(f) > 1000:
                used[(src_ip(f), frames.udp_sport(f))].add(i)
    return r, s, used


def test_ecmp_spreads_flows_and_keeps_each_on_one_path(tmp_path):
    r, s, used = _paths(tmp_path, topology=f"leafspine:2,{SPINES},4", traffic="permutation",
                        qps=4, size=64 << 10, count=2, lb="ecmp")
    assert s.data_verified
    assert len(used) == 16  # 4 hosts x 4 QPs leave leaf1 toward leaf2
    assert all(len(ports) == 1 for ports in used.values())  # one flow, one path
    spread = {next(iter(p)) for p in used.values()}
    assert len(spread) == SPINES  # different source ports took every spine
    by_host = defaultdict(set)
    for ip, sport in used:
        by_host[ip].add(sport)
    assert [len(v) for v in by_host.values()] == [4] * 4  # each QP its own source port
    assert sum(f["out_of_sequence"] for f in s.flows) == 0


def test_spraying_uses_every_spine_reorders_and_go_back_n_retransmits(tmp_path):
    r, s, used = _paths(tmp_path, topology=f"leafspine:2,{SPINES},4", traffic="permutation",
                        size=256 << 10, count=1, lb="spray", buffer=4 << 20)
    assert s.data_verified
    assert all(ports == set(range(SPINES)) for ports in used.values())
    reordered = sum(f["out_of_sequence"] for f in s.flows)
    assert reordered > 0 and s.retransmitted > 0
    assert s.naks.get("PSN sequence error", 0) > 0
    # the same workload with ECMP: in order, nothing resent
    _, e, _ = _paths(tmp_path, topology=f"leafspine:2,{SPINES},4", traffic="permutation",
                     size=256 << 10, count=1, lb="ecmp", buffer=4 << 20)
    assert sum(f["out_of_sequence"] for f in e.flows) == 0 and e.retransmitted == 0
