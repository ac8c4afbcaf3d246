"""UET delivery and its analysis: ``roce stats`` on a trimmed run counts each message's bytes
once (a trimmed copy carries none), and agrees exactly with the emulator's own counters on a
lossy, sprayed, trimmed run."""

from __future__ import annotations

import json

from roce.cli import main
from roce.emu.scenario import Scenario
from roce.emu.uet.run import UetOptions, run_uet
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
