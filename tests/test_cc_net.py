"""Congestion control on the switched network: DCQCN's fairness on a dumbbell, incast with
and without PFC, CNP counts and spacing in captures, TIMELY on real RTTs (issue 14's checks;
docs/congestion-control.md)."""

from __future__ import annotations

import json

from net_helpers import is_macc, pcap

from roce.analysis.timeline import collect
from roce.cli import main
from roce.emu.cc import configure
from roce.emu.cc.experiments import US, backlogged
from roce.emu.net.runner import NetRun, NetScenario, fabric_stats, run_network
from roce.pcapio import PcapWriter


def test_dumbbell_two_flows_share_the_bottleneck_fairly():
    # flow 2 joins 2 ms after flow 1 took the whole 100G bottleneck
    run, s = backlogged("dumbbell:2", "dcqcn", 12_000 * US, starts_ns=[0, 2_000 * US],
                        interval_ns=500 * US)
    half = len(s.series[0]) // 2
    means = [sum(x[half:]) / len(x[half:]) for x in s.series]
    assert all(abs(m - 50) <= 0.15 * 50 for m in means), means
    jain = sum(means) ** 2 / (2 * sum(m * m for m in means))
    assert jain >= 0.95
    stats = fabric_stats(run.net)
    assert stats["cnps_sent"] > 0 and stats["drops"] == 0
    # and DCQCN cut the first flow when the second arrived
    assert run.net.hosts["a1"].cc.algos[run.flows[0].qa.qp_num].cuts > 0


def _incast(cc: str, pfc: bool, **kw):
    sc = NetScenario(topology="incast:16", op="write", size=1 << 20, count=1, depth=1,
                     pfc=pfc, cc=configure(cc), **kw)
    return run_network(sc)


def test_incast_with_pfc_dcqcn_cuts_pauses_and_queue():
    off, on = _incast("none", True), _incast("dcqcn", True)
    assert off.data_verified and on.data_verified
    assert off.fabric["pfc_frames"] > 0
    assert on.fabric["pfc_frames"] <= 0.2 * off.fabric["pfc_frames"]
    assert on.fabric["max_queue_bytes"] < off.fabric["max_queue_bytes"]
    assert on.fabric["drops"] == 0 and off.fabric["drops"] == 0
    assert on.fabric["cnps_sent"] == on.fabric["cnps_received"] > 0


def test_lossy_fabric_dcqcn_cuts_drops_and_retransmissions():
    # at the default ECN thresholds: they sit below the ~1.4 MB one queue may hold without
    # PFC (the rate-scaled Kmax of 1.6 MB at 100 Gb/s would not, see the next test)
    def go(cc):
        sc = NetScenario(topology="incast:8", op="write", size=1 << 20, count=4, depth=1,
                         pfc=False, cc=configure(cc))
        return run_network(sc)

    none, dcqcn = go("none"), go("dcqcn")
    assert none.data_verified and dcqcn.data_verified
    assert none.fabric["drops"] > 0
    assert dcqcn.fabric["drops"] < none.fabric["drops"]
    assert dcqcn.retransmitted < none.retransmitted


def test_default_ecn_thresholds_sit_below_the_drop_point():
    from roce.emu.net.stages import KMAX_PER_25G, KMIN_PER_25G

    def markers(**kw):
        sw = NetRun(NetScenario(topology="incast:16", rate_gbps=100.0, **kw)).net \
            .switches["sw"]
        return sw.buffer.queue_limit(), [(p.marker.kmin, p.marker.kmax) for p in sw.ports]

    # without PFC: 12 MiB, alpha 1/8, one queue alone is dropped near 1.4 MB, below the
    # rate-scaled Kmax of 1.6 MB; both defaults shrink so that Kmax is half that
    limit, ks = markers(pfc=False)
    assert 1_000_000 < limit < 4 * KMAX_PER_25G
    for kmin, kmax in ks:
        assert kmax == round(limit / 2) or kmax == round(limit / 2) - 1
        assert abs(4 * kmin - kmax) <= 4 and kmin < 4 * KMIN_PER_25G
    # with PFC the lossless class is paused, not dropped: the published defaults stay
    assert set(markers(pfc=True)[1]) == {(4 * KMIN_PER_25G, 4 * KMAX_PER_25G)}
    # a deep buffer keeps them too, and thresholds given explicitly are kept as given
    assert set(markers(pfc=False, buffer=64 << 20)[1]) == {(400_000, 1_600_000)}
    assert set(markers(pfc=False, ecn="100K,2M,0.2")[1]) == {(100 << 10, 2 << 20)}


def test_cnp_counts_and_spacing_in_the_capture(tmp_path, capsys):
    path = tmp_path / "incast.pcap"
    w = PcapWriter(str(path))
    tap_path = tmp_path / "tap.pcap"
    tap = PcapWriter(str(tap_path))
    sc = NetScenario(topology="incast:4", op="write", size=1 << 20, count=2, depth=1,
                     cc=configure("dcqcn"))
    run = NetRun(sc, w, {"sw:4": tap})  # port 4 faces the receiver r
    s = run.run()
    w.close()
    tap.close()
    sent = s.fabric["cnps_sent"]
    assert sent > 0
    # roce stats counts what the notification points say they sent
    capsys.readouterr()
    assert main(["stats", str(path), "-T", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["cnps"] == sent
    # the switch port facing r receives r's CNPs: per QP never closer than
    # np_min_time_between_cnps, less one frame a CNP may wait behind on r's wire
    interval = sc.cc.np_interval_ns
    frame_ns = (4096 + 100) * 8 * 1_000_000_000 // int(100e9)
    tl = collect((f, t) for t, f in pcap(tap_path))
    gaps = [q.cnp_min_gap() for q in tl.series() if len(q.cnps) > 1]
    assert gaps and min(gaps) >= interval - frame_ns
    assert sum(len(q.cnps) for q in tl.series()) == sent
    np_stats = [h["cc"] for h in s.fabric["hosts"].values() if "cc" in h]
    assert sum(c["cnps_suppressed"] for c in np_stats) > 0  # the spacing was exercised


def test_timely_rates_follow_the_rtt():
    run, s = backlogged("incast:4", "timely", 3_000 * US, size=64 << 10, interval_ns=250 * US)
    nics = [run.net.hosts[f"s{i}"] for i in range(1, 5)]
    algos = [nic.cc.algos[f.qa.qp_num] for nic, f in zip(nics, run.flows)]
    assert sum(nic.cc.rtt_samples for nic in nics) > 100
    # four line-rate senders into one 100G port: the queue's RTT (> T_high) cut every rate
    assert all(a.rate < 25e9 for a in algos)
    # with the queue gone the RTT is below T_low: additive increase, the rates climb again
    assert all(a.prev_rtt < a.t_low and a.rule == "t_low" for a in algos)
    total = [sum(x[i] for x in s.series) for i in range(len(s.series[0]))]
    assert total[0] > 60 and total[1] < 40 and total[-1] > total[2]


def test_emulate_cli_cc_options(tmp_path, capsys):
    out = tmp_path / "run.pcap"
    rc = main(["emulate", "--topology", "incast:2", "--cc", "dcqcn", "--cc-profile", "paper",
               "--cc-param", "rp_ai_rate=40", "--ecn-codepoint", "ect1", "--size", "256K",
               "--count", "2", "-T", "json", "--no-progress", "-w", str(out)])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.split("\npcap")[0])
    # data leaves ECT(1) (a switch may have set CE); CNPs are not ECN-capable
    from roce.emu.net import hop as frames
    from roce.headers import ECN_CE, ECN_ECT1, ECN_NOT_ECT, SIZE_OF
    from roce.opcodes import CNP_OPCODE

    bth = SIZE_OF["eth"] + SIZE_OF["ip"] + SIZE_OF["udp"]  # the opcode is BTH's first byte
    seen = {}
    for _, f in pcap(out):
        if frames.is_ipv4(f) and len(f) > bth:
            seen.setdefault(f[bth] == CNP_OPCODE, set()).add(frames.ecn(f))
    assert seen[False] <= {ECN_ECT1, ECN_CE} and ECN_ECT1 in seen[False]
    assert seen.get(True, {ECN_NOT_ECT}) == {ECN_NOT_ECT}
    cc = summary["scenario"]["cc"]
    assert cc["algorithm"] == "dcqcn" and cc["profile"] == "paper"
    assert cc["params"]["rp_ai_rate"] == 40 and cc["ecn"] == 1
    assert main(["emulate", "--topology", "incast:2", "--cc", "dcqcn", "--cc-param",
                 "rp_min_dec_fac=200"]) == 1
    assert "rp_min_dec_fac" in capsys.readouterr().err


def test_verbs_per_qp_setting_overrides_the_device():
    sc = NetScenario(topology="incast:2", op="write", size=256 << 10, count=2, depth=1)
    run = NetRun(sc)
    f1, f2 = run.flows
    f1.qa.set_congestion_control("timely")  # one QP of s1's; the devices have none
    f2.qa.ctx.set_congestion_control("dcqcn", profile="paper")  # every QP of s2
    s = run.run()
    assert s.data_verified
    d1, d2 = run.net.hosts["s1"].cc, run.net.hosts["s2"].cc
    assert d1.algos[f1.qa.qp_num].name == "timely" and d1.rtt_samples > 0
    assert d2.algos[f2.qa.qp_num].name == "dcqcn"
    assert d2.algos[f2.qa.qp_num].params["np_min_time_between_cnps"] == 50
    assert run.net.hosts["r"].cc is None  # the receiver has no configuration: no NP


def test_a_small_buffer_derives_ecn_below_pfc_so_dcqcn_cuts_pauses():
    """A 2 MB buffer pauses a 16:1 incast long before the rate-scaled ECN thresholds (400 KB,
    1.6 MB) are reached, so DCQCN used to see marks only while PFC paused the senders anyway,
    all run long.  Derived from the buffer, Kmax sits at the queue where two senders trigger
    PFC: DCQCN slows the senders first, and pauses are left only in the first burst."""
    kw = {"buffer": 2 << 20}
    sw = NetRun(NetScenario(topology="incast:16", rate_gbps=100.0, **kw)).net.switches["sw"]
    trigger = sw.buffer.pfc_trigger(2)
    assert 200_000 < trigger < 400_000
    assert {(p.marker.kmin, p.marker.kmax) for p in sw.ports} == {
        (round(trigger / 4), trigger)}

    def run(cc: str):
        pauses: list[int] = []

        class Pauses:  # the PFC frames the hosts receive, by time
            def write(self, frame: bytes, ts_ns: int) -> None:
                if is_macc(frame):
                    pauses.append(ts_ns)

        sc = NetScenario(topology="incast:16", op="write", size=1 << 20, count=8, depth=1,
                         cc=configure(cc), **kw)
        return run_network(sc, Pauses()), pauses

    (none, p_none), (dcqcn, p_dcqcn) = run("none"), run("dcqcn")
    assert none.data_verified and dcqcn.data_verified
    assert len(p_none) == none.fabric["pfc_frames"] > 1000
    assert dcqcn.fabric["pfc_frames"] <= 0.5 * none.fabric["pfc_frames"]
    assert dcqcn.fabric["ecn_marked"] > 0 and dcqcn.warnings == [] == none.warnings
    # without DCQCN the pauses go on all run; with it, none in the second half
    assert sum(t > none.virtual_ns / 2 for t in p_none) > 0.4 * len(p_none)
    assert not any(t > dcqcn.virtual_ns / 2 for t in p_dcqcn)


def test_given_ecn_thresholds_that_cannot_mark_before_pfc_warn(capsys):
    argv = ["emulate", "--no-progress", "--topology", "incast:4", "--size", "64K", "--count",
            "1", "--buffer", "2M"]
    assert main([*argv, "--ecn", "400K,1600K,0.2"]) == 0
    out = capsys.readouterr().out
    assert ("WARNING       --ecn: switch sw marks from 409600 bytes, but two senders into one "
            "of its ports trigger PFC at") in out
    assert main([*argv, "--ecn", "400K,1600K,0.2", "-T", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["warnings"]) == 1
    assert main([*argv, "--ecn", "20K,100K,0.2", "-T", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []
    assert main([*argv, "--ecn", "400K,1600K,0.2", "--pfc", "off", "-T", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []  # no PFC to come first
