"""Two hosts cabled back to back are one topology of the simulated network (``--topology p2p``,
the default): every option of the network works there, or is refused by name.  Congestion
control, taps, the trace and PFC each produce what they say; the verbs ``Fabric`` runs on the
same event loop and gives the same frames as ``roce emulate``."""

from __future__ import annotations

import csv
import json

import pytest
from net_helpers import is_macc, pcap, src_ip

from roce.cli import main
from roce.emu import CQ, MR, PD, QP, Fabric, QPInitAttr, QPType, SendWR, WROpcode, connect
from roce.emu.core.constants import ALL_ACCESS
from roce.emu.net.direct import DirectNic
from roce.emu.net.nic import Nic
from roce.emu.net.runner import NetRun, run_scenario
from roce.emu.net.sim import Network
from roce.emu.scenario import Scenario

A, B = "10.0.0.1", "10.0.0.2"


def emulate(capsys, *argv: str) -> tuple[int, dict | str, str]:
    code = main(["emulate", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if "-T" in argv and code in (0, 4) else out), err


def test_cc_dcqcn_on_p2p_paces_through_the_nics(capsys):
    """DCQCN runs in both hosts' NICs; with no switch to mark ECN it never sees a CNP and
    keeps its QP at line rate.  TIMELY, fed by RTTs alone, acts on the same link."""
    code, s, _ = emulate(capsys, "--cc", "dcqcn", "--size", "256K", "--count", "4", "-T",
                         "json")
    assert code == 0 and s["data_verified"]
    hosts = s["fabric"]["hosts"]
    assert hosts["A"]["cc"]["algorithm"] == "dcqcn" and hosts["B"]["cc"]["algorithm"] == "dcqcn"
    assert s["fabric"]["cnps_sent"] == s["fabric"]["cnps_received"] == 0
    assert s["fabric"]["ecn_marked"] == 0 and s["fabric"]["ports"] == {}
    assert s["flows"][0]["src"] == "A" and s["flows"][0]["dst"] == "B"
    assert s["hops"] == hosts["A"]["tx_frames"] + hosts["B"]["tx_frames"] > 0
    r = NetRun(Scenario(size=256 << 10, count=4, cc=_cc("dcqcn")))
    assert all(isinstance(n, Nic) for n in r.net.hosts.values())
    s2 = r.run()
    algo = r.net.hosts["A"].cc.algos[r.flows[0].qa.qp_num]
    assert algo.cuts == 0 and s2.data_verified


def test_cc_timely_on_p2p_reacts_to_rtt(capsys):
    code, s, _ = emulate(capsys, "--cc", "timely", "--size", "1M", "--count", "8", "--delay",
                         "20us", "-T", "json")
    assert code == 0 and s["data_verified"]
    cc = s["fabric"]["hosts"]["A"]["cc"]
    assert cc["algorithm"] == "timely" and cc["rtt_samples"] > 0


def test_tap_on_p2p_records_both_directions_of_a_host_port(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, s, _ = emulate(capsys, "--size", "64K", "--count", "3", "--tap", "A:0",
                         "--tap", "B:0=b.pcap", "-T", "json")
    assert code == 0
    a, b = pcap(tmp_path / "tap-A-0.pcap"), pcap(tmp_path / "b.pcap")
    sent_a = [f for _, f in a if src_ip(f) == A]
    sent_b = [f for _, f in b if src_ip(f) == B]
    assert len(sent_a) == s["packets"] - len(sent_b) > 0  # every request A sent
    assert sorted(f for _, f in a) == sorted(f for _, f in b)  # one cable, seen at both ends
    times = [t for t, _ in a]
    assert times == sorted(times) and times[-1] <= s["virtual_ns"]
    # a tap records; it changes nothing
    code, plain, _ = emulate(capsys, "--size", "64K", "--count", "3", "-T", "json")
    assert {k: v for k, v in plain.items() if "cpu" not in k} == \
        {k: v for k, v in s.items() if "cpu" not in k}


def test_trace_on_p2p_samples_the_qp(tmp_path, capsys):
    path = tmp_path / "t.csv"
    code, s, _ = emulate(capsys, "--size", "1M", "--count", "4", "--trace", str(path),
                         "--trace-interval", "20us", "-T", "json")
    assert code == 0
    rows = list(csv.DictReader(path.open()))
    qp = [r for r in rows if r["kind"] == "qp"]
    assert qp and {r["node"] for r in qp} == {"A->B"}
    rates = [float(r["rate_gbps"]) for r in qp]
    assert max(rates) > 90  # a line-rate 100G sender, sampled every 20 us
    assert int(qp[-1]["acked_psns"]) > 0
    assert int(rows[-1]["time_ns"]) <= s["virtual_ns"] < int(rows[-1]["time_ns"]) + 20_000


def test_pfc_on_p2p_follows_the_option(capsys):
    """B storms PFC at A: with PFC on, A obeys and its data stops (what left before the first
    pause arrived is never acknowledged: B's ACKs are paused too, and A's QP gives up after
    its retries); with PFC off, A ignores the storm and the run completes."""
    code, on, _ = emulate(capsys, "--pfc-storm", "B", "--size", "64K", "--count", "2",
                          "-T", "json")
    assert code == 4 and on["completed"] == {"IBV_WC_RETRY_EXC_ERR": 1,
                                             "IBV_WC_WR_FLUSH_ERR": 1}
    a = on["fabric"]["hosts"]["A"]
    assert a["pfc_pause_received"] > 0 and a["paused_ns"] > 0.99 * on["virtual_ns"]
    assert on["fabric"]["hosts"]["B"]["pfc_sent"] > 0 and on["bytes"] == 0
    code, off, _ = emulate(capsys, "--pfc-storm", "B", "--pfc", "off", "--size", "64K",
                           "--count", "2", "-T", "json")
    assert code == 0 and off["data_verified"]
    a = off["fabric"]["hosts"]["A"]
    assert a["pfc_pause_received"] == 0 and a["paused_ns"] == 0
    assert off["fabric"]["hosts"]["B"]["pfc_sent"] > 0


def test_a_pfc_storm_on_p2p_is_in_the_capture(tmp_path, capsys):
    path = tmp_path / "p.pcap"
    code, _, _ = emulate(capsys, "--pfc-storm", "B", "--pfc", "off", "--size", "4K",
                         "--count", "1", "-w", str(path))
    assert code == 0
    assert any(is_macc(f) for _, f in pcap(path))


@pytest.mark.parametrize("argv, message", [
    (["--buffer", "1M"], "--buffer 1048576: the topology has no switch"),
    (["--ecn", "off"], "--ecn off: the topology has no switch"),
    (["--lb", "spray"], "--lb spray: the topology has no switch"),
    (["--pfc", "off"], "--pfc off: two hosts cabled back to back"),
    (["--ecn-codepoint", "ect1"], "--ecn-codepoint: two hosts cabled back to back"),
    (["--qp-type", "uc", "--op", "send", "--cc", "dcqcn"], "--qp-type uc: --cc and"),
    (["--topology", "incast:2", "--qp-type", "ud", "--op", "send", "--size", "1K"],
     "--qp-type ud: a switched network runs RC"),
    (["--tap", "C:0"], "--tap C:0: no such port"),
])
def test_what_cannot_apply_is_refused_by_name(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["emulate", "--no-progress", "--count", "1", "--size", "4K", *argv]) == 1
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_p2p_hosts_are_direct_unless_a_scheduler_is_needed():
    r = NetRun(Scenario(count=1))
    assert isinstance(r.net, Network) and not r.net.switches
    assert all(isinstance(n, DirectNic) for n in r.net.hosts.values())
    assert [w.name for w in r.net.wires] == [f"{A}->{B}", f"{B}->{A}"]
    storm = NetRun(Scenario(count=1, storm=["B"]))
    assert all(isinstance(n, Nic) for n in storm.net.hosts.values())


def test_uc_and_ud_run_both_ways_on_p2p(capsys):
    code, s, _ = emulate(capsys, "--qp-type", "ud", "--op", "send", "--size", "1K", "--count",
                         "5", "--traffic", "all-to-all", "-T", "json")
    assert code == 0 and s["delivered"] == 10 and s["data_verified"]


def test_the_verbs_fabric_is_the_p2p_topology():
    """The same WRITEs through the verbs ``Fabric`` and through ``run_scenario`` on p2p:
    the same frames at the same virtual times."""
    size, count = 64 << 10, 3

    class Rec:
        def __init__(self) -> None:
            self.frames: list[tuple[int, bytes]] = []

        def write(self, frame: bytes, ts_ns: int | None = None) -> None:
            self.frames.append((ts_ns, bytes(frame)))

    via_runner = Rec()
    s = run_scenario(Scenario(size=size, count=count, depth=count), via_runner)
    fab = Fabric(seed=0)
    assert isinstance(fab.net, Network)
    via_fabric = Rec()
    fab.record(via_fabric)
    a, b = fab.add_host("A", A), fab.add_host("B", B)
    fab.connect(a, b)
    pda, pdb = PD(a), PD(b)
    cqa, cqb = CQ(a, 1 << 16), CQ(b, 1 << 16)
    qa = QP(pda, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqa, recv_cq=cqa))
    qb = QP(pdb, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqb, recv_cq=cqb))
    connect(qa, qb, path_mtu=4096, timeout=12)
    local, remote = MR(pda, size * count, ALL_ACCESS), MR(pdb, size * count, ALL_ACCESS)
    from roce.emu.core.payload import fill

    fill(local.buf, 0, 0, "local", size, count)
    fill(remote.buf, 0, 0, "remote", size, count)
    for i in range(count):
        qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                            sg_list=[local.sge(i * size, size)],
                            remote_addr=remote.addr + i * size, rkey=remote.rkey))
    fab.run_until(lambda: len(cqa) == count)
    assert via_fabric.frames == via_runner.frames and len(via_runner.frames) > 0
    assert fab.now == s.virtual_ns


def _cc(name: str):
    from roce.emu.cc import configure

    return configure(name)
