"""``roce emulate --protocol uet``: UET endpoints (roce.emu.uet) on the simulated network,
two hosts back to back or behind switches, with loss, reordering and spraying by entropy;
the data checked end to end, and the pcap read back by ``roce decode`` (no expert note) and
``roce stats`` (its PDC analysis agreeing with the emulator's counters)."""

from __future__ import annotations

import json

import pytest
from net_helpers import pcap as read_pcap

from roce.cli import main
from roce.emu.net.runner import run_scenario
from roce.emu.scenario import Scenario
from roce.emu.uet.run import UetOptions, UetRun, run_uet
from roce.pcapio import PcapWriter


def emulate(capsys, *argv: str) -> tuple[int, dict | str, str]:
    code = main(["emulate", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if "-T" in argv and code in (0, 4) else out), err


def decode_lines(capsys, path: str, *argv: str) -> list[str]:
    assert main(["decode", str(path), *argv]) == 0
    return capsys.readouterr().out.splitlines()


def stats(capsys, path: str) -> dict:
    assert main(["stats", str(path), "-T", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("op", ["write", "read", "send"])
def test_p2p_run_verifies_data_and_decodes(capsys, tmp_path, op):
    pcap = tmp_path / "u.pcap"
    code, s, _ = emulate(capsys, "--protocol", "uet", "--op", op, "--size", "64K",
                         "--count", "4", "--loss", "0.02", "-w", str(pcap), "-T", "json")
    assert code == 0 and s["data_verified"] and s["completed"] == {"OK": 4}
    assert s["uet"]["pdcs_closed"] == 1 and s["uet"]["pds"]["pdcs_failed"] == 0
    assert s["retransmitted"] > 0  # the loss was recovered
    lines = decode_lines(capsys, pcap)
    assert lines and all(" UET " in ln for ln in lines)
    assert decode_lines(capsys, pcap, "-Y", "uet.expert") == []


@pytest.mark.parametrize("extra", [
    ["--topology", "incast:2", "--size", "64K", "--count", "4"],
    ["--topology", "leafspine:2,2,2", "--collective", "allreduce", "--size", "256K"]],
    ids=["incast", "collective"])
def test_corrupted_frames_are_discarded_by_the_port_and_resent(capsys, extra):
    """UET packets carry no end-to-end CRC: a frame corrupted on a link is discarded by the
    receiving port's FCS check, never delivered with a flipped bit; the PDS resends what
    it carried."""
    argv = ["--protocol", "uet", "--pfc", "off", "--corrupt", "0.02", "--seed", "5", *extra]
    code, s, _ = emulate(capsys, *argv, "-T", "json")
    assert code == 0 and s["data_verified"]
    assert s["fabric"]["link_corrupted"] > 0 and s["retransmitted"] > 0
    code, out, _ = emulate(capsys, *argv)
    assert code == 0
    fcs = [ln for ln in out.splitlines() if ln.startswith("FCS drops")]
    assert fcs == [f"FCS drops     {s['fabric']['link_corrupted']} frames corrupted on links, "
                   "discarded by the receiving port"]


def test_lossy_sprayed_run_loses_no_pdc(capsys):
    """A run where a lost retransmission met a full window: every PDC completes (before,
    the timeouts resent only what had arrived and one PDC failed after 128 ms)."""
    code, s, _ = emulate(capsys, "--protocol", "uet", "--topology", "leafspine:2,2,4",
                         "--pfc", "off", "--trim", "--entropy", "packet", "--loss", "0.01",
                         "--size", "256K", "--count", "4", "--seed", "2", "-T", "json")
    assert code == 0 and s["data_verified"] and s["uet"]["pds"]["pdcs_failed"] == 0
    assert s["virtual_ns"] < 5_000_000


def test_timeouts_do_not_follow_each_other_while_resends_wait(capsys):
    """An 8:1 incast into a 1 MiB buffer without trimming drops thousands of packets; PSNs
    queued to be resent wait for the wire, and the timeout runs from the oldest sending
    not queued: no PDC's timeout doubles at one instant with nothing resent (before: 596
    timeouts and 31 ms, the backoff run up to 16 ms)."""
    code, s, _ = emulate(capsys, "--protocol", "uet", "--topology", "incast:8", "--pfc",
                         "off", "--buffer", "1M", "--size", "256K", "--count", "4",
                         "--seed", "1", "-T", "json")
    assert code == 0 and s["data_verified"] and s["fabric"]["drops"] > 1000
    assert s["timeouts"] < 200 and s["virtual_ns"] < 10_000_000


def test_text_summary_names_the_protocol(capsys):
    code, out, _ = emulate(capsys, "--protocol", "uet", "--size", "16K", "--count", "2")
    assert code == 0
    assert "protocol=uet pdc=rud" in out and "data verified yes" in out
    assert "PDCs          1 opened, 1 closed, 0 failed" in out


def test_stats_agrees_with_the_emulator(capsys, tmp_path):
    """A sprayed leaf-spine run without loss: every frame sent is in the pcap (it records
    what hosts receive), so the analysis must count exactly what the PDS sent."""
    pcap = tmp_path / "s.pcap"
    sc = Scenario(op="write", size=96 * 1024, count=3, topology="leafspine:2,2,2")
    with PcapWriter(str(pcap)) as w:
        s = run_uet(sc, UetOptions(entropy="packet"), record=w)
    assert s.data_verified
    p = s.uet["pds"]
    st = stats(capsys, pcap)["uet"]
    pdcs = st["pdcs"]
    assert len(pdcs) == 4  # permutation of four hosts: four PDCs
    assert sum(d["requests"] for d in pdcs) == p["requests_sent"] + p["retransmitted"]
    assert sum(d["retransmissions"] for d in pdcs) == p["retransmitted"]
    assert sum(d["acks"] for d in pdcs) == p["acks_sent"]
    assert sum(d["syn"] for d in pdcs) == p["syn_sent"]
    assert sum(d["request_bytes"] for d in pdcs) >= s.bytes
    for d in pdcs:
        assert d["missing"] == 0
    assert decode_lines(capsys, pcap, "-Y", "uet.expert") == []


def test_packet_entropy_sprays_one_pdc_over_both_spines(tmp_path):
    seen = {}
    for entropy in ("pdc", "packet"):
        pcap = tmp_path / f"{entropy}.pcap"
        sc = Scenario(op="write", size=256 * 1024, count=2, topology="leafspine:2,2,1")
        r = UetRun(sc, UetOptions(entropy=entropy))
        with PcapWriter(str(pcap)) as w:
            r.net.recorders.append(w)
            s = r.run()
        assert s.data_verified
        spines = {name: sum(sw.ports[i].tx_frames for i in range(len(sw.ports)))
                  for name, sw in r.net.switches.items() if name.startswith("spine")}
        ports = {int.from_bytes(fr[34:36], "big") for _ts, fr in read_pcap(str(pcap))}
        seen[entropy] = (spines, len(ports))
    (_, n_one), (both, n_both) = seen["pdc"], seen["packet"]
    # one entropy per PDC: each direction of each PDC on one path (two PDCs, two entropies
    # each way at most); one per packet: hundreds of source ports, both spines busy
    assert n_one <= 4 and n_both > 100
    assert all(v > 50 for v in both.values())


def test_rod_in_order_under_spraying(capsys):
    code, s, _ = emulate(capsys, "--protocol", "uet", "--pdc-mode", "rod", "--entropy",
                         "packet", "--topology", "leafspine:2,2,2", "--traffic",
                         "all-to-all", "--size", "128K", "--count", "2", "-T", "json")
    assert code == 0 and s["data_verified"]
    # spraying reorders; ROD refuses what is not next and the sender goes back
    assert s["uet"]["nacks_sent"].get("ROD_OOO", 0) > 0
    assert s["uet"]["pds"]["out_of_order"] == 0


def test_incast_sends_land_in_their_own_receive_queues(capsys):
    code, s, _ = emulate(capsys, "--protocol", "uet", "--op", "send", "--topology",
                         "incast:3", "--size", "32K", "--count", "3", "-T", "json")
    assert code == 0 and s["data_verified"] and s["completed"] == {"OK": 9}


@pytest.mark.parametrize("argv, where", [
    (["--protocol", "uet", "--pdc-mode", "rudi", "--op", "atomic"], "--op atomic"),
    (["--protocol", "uet", "--pdc-mode", "uud", "--op", "mixed"], "--op mixed"),
    (["--protocol", "uet", "--cc", "dcqcn"], "--cc"),
    (["--protocol", "uet", "--recovery", "sr"], "--recovery"),
    (["--pdc-mode", "rod"], "--pdc-mode"),
    (["--entropy", "packet"], "--entropy"),
    (["--protocol", "uet", "--listen"], "--protocol"),
])
def test_refusals_name_the_option(capsys, argv, where):
    code, _, err = emulate(capsys, *argv)
    assert code == 1 and where in err


def test_roce_summary_has_no_uet_part():
    s = run_scenario(Scenario(size=4096, count=1))
    assert "uet" not in s.as_dict() and s.data_verified


def test_trimming_switch_replaces_drops_with_nacks(capsys, tmp_path):
    """An incast into a small lossy buffer: without trimming the switch drops and the PDS
    waits for timeouts; with it every packet the buffer refuses goes on as its headers
    (DSCP 40, the strict class), the receiver answers NACK TRIMMED and the sender resends
    it at once: no timeout.  The pcap and ``roce stats`` count the same trims."""
    base = ["--protocol", "uet", "--topology", "incast:3", "--pfc", "off", "--buffer",
            "160K", "--size", "128K", "--count", "2", "-T", "json"]
    code, off, _ = emulate(capsys, *base)
    assert code == 0 and off["data_verified"]
    assert off["fabric"]["drops"] > 0 and off["fabric"]["trimmed"] == 0
    assert off["timeouts"] > 0
    pcap = tmp_path / "trim.pcap"
    code, on, _ = emulate(capsys, *base, "--trim", "-w", str(pcap))
    assert code == 0 and on["data_verified"]
    trims = on["fabric"]["trimmed"]
    assert trims > 0 and on["fabric"]["drops"] == 0
    u = on["uet"]
    assert u["nacks_sent"] == u["nacks_received"] == {"TRIMMED": trims}
    assert u["pds"]["trimmed"] == trims and u["pds"]["retx_nack"] == trims
    assert on["timeouts"] == 0 and on["retransmitted"] == trims
    assert on["virtual_ns"] < off["virtual_ns"]
    # the trimmed frames, and only they, carry DSCP 40; the only expert notes are theirs
    # (an SES length the cut payload no longer matches)
    trimmed = decode_lines(capsys, pcap, "-Y", "ip.dsfield.dscp == 40")
    assert len(trimmed) == trims
    noted = decode_lines(capsys, pcap, "-Y", "uet.expert")
    assert noted and set(noted) <= set(trimmed)
    st = stats(capsys, pcap)["uet"]["pdcs"]
    assert sum(sum(d["trims"].values()) for d in st) == trims


def test_trim_is_refused_without_a_switch_or_for_roce(capsys):
    code, _, err = emulate(capsys, "--protocol", "uet", "--trim")
    assert code == 1 and "--trim" in err
    code, _, err = emulate(capsys, "--trim", "--topology", "incast:2")
    assert code == 1 and "--trim" in err


def test_trimmer_cuts_to_headers_with_lengths_and_checksum():
    from roce.emu.net import hop
    from roce.emu.net.stages import TRIM_BYTES, TRIM_DSCP, Trimmer
    from roce.emu.uet import uetframes
    from roce.fast import ip_checksum_reference

    f = {"uet.pds.type": 2, "uet.pds.psn": 7, "uet.pds.spdcid": 1, "uet.pds.dpdcid": 2,
         "uet.pds.clear_psn_offset": -1, "uet.pds.nh": 3, "uet.ses.std.opcode": 1,
         "uet.ses.std.payload_length": 1000, "uet.ses.std.message_offset": 4096,
         "uet.ses.std.request_length": 8192}
    full = uetframes.encode(f, bytes(1000), src="10.0.0.1", dst="10.0.0.2",
                          smac=bytes(6), dmac=bytes(6), entropy=0xC123)
    cut = Trimmer().cut(full)
    assert cut is not None and len(cut) == TRIM_BYTES
    assert hop.dscp(cut) == TRIM_DSCP and hop.ecn(cut) == hop.ecn(full)
    ip = cut[hop.L2:hop.L2 + hop.IP_HDR]
    assert int.from_bytes(ip[2:4], "big") == TRIM_BYTES - hop.L2
    assert ip_checksum_reference(ip) in (0, 0xFFFF)  # the header sums to all ones
    r = uetframes.decode(cut)
    assert r is not None and r.payload == b"" and r.fields["uet.pds.psn"] == 7
    assert r.fields["uet.ses.std.message_offset"] == 4096
    assert Trimmer().cut(full[:TRIM_BYTES]) is None  # nothing to cut


def test_sweep_over_the_protocol(capsys, tmp_path):
    import csv

    out = tmp_path / "p.csv"
    assert main(["sweep", "--grid", "protocol=roce,uet", "--size", "16K", "--count", "2",
                 "-o", str(out), "-j", "1"]) == 0
    capsys.readouterr()
    with open(out, newline="") as f:
        rows = {r["protocol"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"roce", "uet"}
    assert all(r["data_verified"] == "True" for r in rows.values())
    assert rows["uet"]["uet.pdcs_closed"] == "1" and rows["roce"]["uet.pdcs_closed"] == ""


def test_a_host_draws_its_entropies_as_randrange_does():
    """A host draws entropies from getrandbits without ``randrange``'s Python call: the same
    numbers, so a run's paths (and virtual times) are those of the same seed before."""
    import random

    from roce.emu.uet.host import ENTROPIES, ENTROPY_LOW

    host = next(iter(UetRun(Scenario(op="write", size=4096, count=1)).net.hosts.values()))
    for seed in range(20):
        host.rng = random.Random(seed)
        ref = random.Random(seed)
        assert [host._draw() for _ in range(200)] == \
            [ENTROPY_LOW + ref.randrange(ENTROPIES) for _ in range(200)]
