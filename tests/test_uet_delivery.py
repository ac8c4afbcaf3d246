"""UET delivery and its analysis: ``roce stats`` on a trimmed run counts each message's bytes
once (a trimmed copy carries none), and agrees exactly with the emulator's own counters on a
lossy, sprayed, trimmed run."""

from __future__ import annotations

import json

from roce.cli import main
from roce.emu.scenario import Scenario
from roce.emu.uet.run import UetOptions, UetRun, run_uet
from roce.pcapio import PcapWriter

INCAST = Scenario(op="write", size=128 * 1024, count=2, topology="incast:3", pfc=False,
                  buffer=160 * 1024)


def stats(capsys, path) -> dict:
    assert main(["stats", str(path), "-T", "json"]) == 0
    return json.loads(capsys.readouterr().out)["uet"]


def recorded(tmp_path, sc: Scenario, opts: UetOptions):
    pcap = tmp_path / "run.pcap"
    with PcapWriter(str(pcap)) as w:
        s = run_uet(sc, opts, record=w)
    assert s.data_verified, s.unverified
    return s, pcap


def test_stats_counts_no_payload_for_a_trimmed_copy(capsys, tmp_path):
    s, pcap = recorded(tmp_path, INCAST, UetOptions(trim=True))
    assert s.uet["pds"]["trimmed"] > 0
    pdcs = stats(capsys, pcap)["pdcs"]
    assert len(pdcs) == 3
    for d in pdcs:
        m = d["messages"]
        assert m["completed"] == 2 and m["open"] == 0
        assert m["bytes"] == 2 * 128 * 1024
        assert m["min"] == m["max"] == 128 * 1024


def test_uud_run_reports_exactly_what_was_lost():
    """UUD over a lossy link that also duplicates: nothing is resent; the summary's lost
    packets are exactly the frames the link lost (a duplicate is no arrival), and the data
    check names a message the loss left incomplete."""
    sc = Scenario(op="write", size=32 * 1024, count=8, loss=0.05, dup=0.05, seed=3)
    s = run_uet(sc, UetOptions(mode="uud"))
    link = [v for k, v in s.link.items() if k.startswith("A")]
    lost_frames = sum(v["lost"] for v in link)
    assert lost_frames > 0 and sum(v["duplicated"] for v in link) > 0
    u = s.uet
    assert u["uud_lost"]["packets"] == lost_frames
    assert u["pds"]["retransmitted"] == 0 and u["pds"]["acks_sent"] == 0
    assert u["uud_lost"]["messages"] == 8 - s.delivered > 0
    assert not s.data_verified
    assert s.unverified.startswith(f"{8 - s.delivered} of 8 message(s) lost")


def test_rudi_run_tolerates_duplicates_and_loss(capsys, tmp_path):
    pcap = tmp_path / "rudi.pcap"
    code = main(["emulate", "--no-progress", "--protocol", "uet", "--pdc-mode", "rudi",
                 "--size", "32K", "--count", "6", "--loss", "0.03", "--dup", "0.1",
                 "-w", str(pcap), "-T", "json"])
    s = json.loads(capsys.readouterr().out)
    assert code == 0 and s["data_verified"] and s["completed"] == {"OK": 6}
    assert s["uet"]["ses"]["repeated"] > 0 and s["retransmitted"] > 0
    assert s["uet"]["pds"]["syn_sent"] == 0 and s["uet"]["pdcs_closed"] == 1
    assert main(["decode", str(pcap), "-Y", "uet.expert"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["decode", str(pcap), "-Y", "uet.pds.type == 5"]) == 0  # RUDI_RESP
    assert capsys.readouterr().out.count("RUDI_RESP") > 0


def test_connectionless_modes_refuse_other_operations(capsys):
    for mode, op in (("rudi", "send"), ("uud", "read"), ("uud", "send")):
        code = main(["emulate", "--no-progress", "--protocol", "uet", "--pdc-mode", mode,
                     "--op", op])
        err = capsys.readouterr().err
        assert code == 1 and f"--pdc-mode {mode} carries" in err


def test_target_initiated_handshakes_pair_up_in_stats(capsys, tmp_path):
    """--pdc-close target: each target asks for a clear command and then a close; roce stats
    pairs every request with the initiator's command, none left unanswered."""
    sc = Scenario(op="read", size=16 * 1024, count=3, topology="leafspine:2,2,2", loss=0.01)
    s, pcap = recorded(tmp_path, sc, UetOptions(close="target", entropy="packet"))
    assert s.uet["pdcs_closed"] == 4 and s.uet["pds"]["pdcs_closed"] == 8
    assert s.uet["controls_sent"] == {"CLEAR_REQ": 4, "CLEAR": 4, "CLOSE_REQ": 4, "CLOSE": 4}
    # (the targets' READ response data are PSN spaces of their own: rows with no control)
    rows = [d for d in stats(capsys, pcap)["pdcs"] if d["controls"]]
    assert len(rows) == 4
    for d in rows:
        assert d["close_handshakes"] == d["clear_handshakes"] == 1, d
        assert d["close_unanswered"] == d["clear_unanswered"] == 0
        assert set(d["controls"]) == {"CLEAR_REQ", "CLEAR", "CLOSE_REQ", "CLOSE"}
    assert main(["decode", str(pcap), "-Y", "uet.expert"]) == 0
    assert capsys.readouterr().out == ""


def test_pdc_close_target_is_refused_without_a_pdc(capsys):
    code = main(["emulate", "--no-progress", "--protocol", "uet", "--pdc-mode", "uud",
                 "--pdc-close", "target"])
    assert code == 1 and "no PDC on the wire" in capsys.readouterr().err
    code = main(["emulate", "--no-progress", "--pdc-close", "target"])
    assert code == 1 and "--pdc-close: only with --protocol uet" in capsys.readouterr().err


def test_stats_agrees_exactly_on_a_sprayed_trimmed_run(capsys, tmp_path):
    """All-to-all on a leaf-spine in a lossy class (no PFC) with small buffers: what the
    switches would drop they trim; every packet takes its own path (--entropy packet).  The
    pcap holds every frame a host received, which is every frame sent (nothing is dropped):
    roce stats must count exactly what the emulator did, PDC by PDC: PSNs, requests,
    retransmissions, trims, NACKs, ACKs and bytes.  Each trimmed packet was resent once, on
    its NACK, with no timeout."""
    sc = Scenario(op="write", size=64 * 1024, count=2, topology="leafspine:2,2,2",
                  traffic="all-to-all", pfc=False, buffer=80 * 1024)
    pcap = tmp_path / "sprayed.pcap"
    with PcapWriter(str(pcap)) as w:
        r = UetRun(sc, UetOptions(entropy="packet", trim=True))
        r.net.recorders.append(w)
        s = r.run()
    assert s.data_verified, s.unverified
    p, u = s.uet["pds"], s.uet
    trims = s.fabric["trimmed"]
    assert trims > 0 and s.fabric["drops"] == 0 and p["out_of_order"] > 0
    assert p["trimmed"] == trims and u["nacks_sent"] == {"TRIMMED": trims}
    assert p["retx_nack"] == p["retransmitted"] == trims and s.timeouts == 0
    rows = {(d["initiator"], d["spdcid"]): d for d in stats(capsys, pcap)["pdcs"]}
    assert len(rows) == len(r.flows) == 12
    for f in r.flows:
        d = rows[f.src.ip, f.pdc.id]
        target = f.dst.pds.by_peer[f.src.ip, f.pdc.id]
        assert d["target"] == f.dst.ip and d["dpdcid"] == target.id
        # PSNs: the start the SYNs declared, the highest request's (the close command took
        # the PSN after it), none missing
        assert d["start_psn"] == f.pdc.start_psn
        assert d["highest_psn"] == (f.pdc.next_psn - 2) & 0xFFFFFFFF
        assert d["missing"] == 0 and d["spurious_retransmissions"] == 0
        n = (f.pdc.next_psn - 1 - f.pdc.start_psn) & 0xFFFFFFFF  # requests of this PDC
        retx = sum(d["trims"].values())
        assert d["requests"] == n + retx and d["retransmissions"] == retx
        assert d["nacks"] == {}
        # bytes: each message whole once; every copy's payload as it arrived (a trimmed copy
        # none, its resend all: the messages' bytes once)
        m = d["messages"]
        assert m["completed"] == 2 and m["bytes"] == 2 * sc.size
        assert m["min"] == m["max"] == sc.size
        assert d["request_bytes"] == 2 * sc.size
        assert d["controls"] == {"CLOSE": 1}
    total = list(rows.values())
    assert sum(d["requests"] for d in total) == p["requests_sent"] + p["retransmitted"]
    assert sum(d["syn"] for d in total) == p["syn_sent"]
    assert sum(d["acks"] for d in total) == p["acks_sent"]
    assert sum(d["ecn_marked_acks"] for d in total) == p["ecn_acks"]
    assert sum(sum(d["trims"].values()) for d in total) == trims


def test_refused_messages_are_counted_per_return_code(capsys):
    """Targets whose regions were invalidated refuse every WRITE with BAD_MKEY: the initiators
    complete each with that code, and the summary and JSON count them per code."""
    sc = Scenario(op="write", size=16 * 1024, count=3, topology="incast:2")
    r = UetRun(sc, UetOptions())
    r.flows[0].remote.valid = False
    s = r.run()
    assert s.completed == {"OK": 3, "BAD_MKEY": 3}
    assert s.uet["ses_refused"] == {"BAD_MKEY": 3} and s.uet["ses_errors"] == {}
    assert s.uet["pds"]["ses_responses_sent"] == 3 and s.uet["pdcs_closed"] == 2
    assert not s.data_verified and "(BAD_MKEY=3)" in s.unverified
    assert "errors: BAD_MKEY=3" in s.text()


def test_atomic_and_mixed_runs_verify_as_roce_does(capsys):
    """--op atomic: fetch-and-add 1 on each target region's first 8 bytes, the values found
    checked as RoCE atomics are; --op mixed cycles write, read, send and atomic.  Lossy and
    sprayed."""
    for op in ("atomic", "mixed"):
        sc = Scenario(op=op, size=4096, count=8, topology="leafspine:2,2,2", loss=0.03,
                      seed=4)
        r = UetRun(sc, UetOptions(entropy="packet"))
        start = [int.from_bytes(f.remote.buf[:8], "little") for f in r.flows]
        s = r.run()
        assert s.data_verified, s.unverified
        assert s.completed == {"OK": 32} and s.retransmitted > 0
        atomics = 8 if op == "atomic" else 2
        if op == "atomic":  # (mixed also writes slot 0)
            for f, v in zip(r.flows, start):
                assert int.from_bytes(f.remote.buf[:8], "little") == v + atomics
        assert sum(h.ses.counters.atomics_executed for h in r.net.hosts.values()) == \
            4 * atomics


def test_rendezvous_sends_on_a_lossy_sprayed_run(capsys):
    code = main(["emulate", "--no-progress", "--protocol", "uet", "--op", "send", "--size",
                 "20K", "--count", "6", "--rendezvous", "6K", "--loss", "0.03", "--entropy",
                 "packet", "--topology", "leafspine:2,2,2", "-T", "json"])
    s = json.loads(capsys.readouterr().out)
    assert code == 0 and s["data_verified"] and s["completed"] == {"OK": 24}
    assert s["uet"]["ses"]["pulls"] == 24 and s["retransmitted"] > 0
    assert main(["emulate", "--no-progress", "--rendezvous", "4K"]) == 1
    assert "--rendezvous: only with --protocol uet" in capsys.readouterr().err
