"""PFC: a 16:1 incast loses nothing, puts valid 802.1Qbb frames on the wires, and the paused
senders hold exactly while paused; pauses spread congestion to a victim flow; a PFC storm
stalls its upstream ports."""

from __future__ import annotations

import subprocess

import pytest
from net_helpers import is_macc, pcap, run
from tshark_oracle import TSHARK

from roce import macc
from roce.emu.net.hop import IP_HDR, L2
from roce.emu.net.pfc import pause_ns
from roce.emu.net.stages import PRIO_ROCE

N = 16
RATE_BPS = 100_000_000_000
DELAY = 1000
MACC_FIELDS = ["macc.opcode", "macc.cbfc.enbv"] + [
    f"macc.cbfc.pause_time.c{p}" for p in range(8)]


@pytest.fixture(scope="module")
def incast(tmp_path_factory):
    d = tmp_path_factory.mktemp("incast")
    taps = {f"sw:{i}": str(d / f"sw{i}.pcap") for i in range(N + 1)}
    r, s = run(taps=taps, record=str(d / "all.pcap"), topology=f"incast:{N}",
               size=1 << 20, count=1, buffer=3 << 19)  # 1.5 MiB against a 16 MiB burst
    return d, r, s


def test_incast_loses_nothing_in_the_lossless_class(incast):
    _, r, s = incast
    assert s.data_verified and s.completed == {"IBV_WC_SUCCESS": N}
    assert s.fabric["drops"] == 0 and s.retransmitted == 0 and s.timeouts == 0
    assert all(p["lossless_drops"] == 0 for p in s.fabric["ports"].values())
    buf = r.net.switches["sw"].buffer
    assert buf.max_used <= buf.size and buf.lossless_drops == 0
    # the buffer really was far too small for the burst: the switch paused every sender
    assert s.fabric["max_queue_bytes"] < 2 << 20 < N << 20
    for i in range(1, N + 1):
        assert s.fabric["hosts"][f"s{i}"]["pfc_pause_received"] > 0
        assert s.fabric["hosts"][f"s{i}"]["paused_ns"] > 0
    assert s.fabric["pfc_frames"] == sum(
        p["pfc_pause_sent"] + p["pfc_xon_sent"] for p in s.fabric["ports"].values())


def test_every_pfc_frame_is_valid_8021qbb(incast):
    d, r, s = incast
    delivered = [f for _, f in pcap(d / "all.pcap") if is_macc(f)]
    assert len(delivered) == s.fabric["pfc_frames"] > 0  # -w sees each once, at its host
    macs = {p.mac for p in r.net.switches["sw"].ports}
    for f in delivered:
        mc = macc.parse_macc(f)
        assert len(f) == macc.MIN_FRAME and mc.dst == macc.PFC_DST_MAC and mc.src in macs
        assert mc.opcode == macc.OPCODE_PFC and mc.enable_vector == 1 << PRIO_ROCE
        assert mc.times[PRIO_ROCE] in (0, macc.MAX_QUANTA)
        assert [t for p, t in enumerate(mc.times) if p != PRIO_ROCE] == [0] * 7


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_tshark_decodes_our_pfc_frames_with_the_same_values(incast):
    d, _, _ = incast
    ours = []
    for _, f in pcap(d / "all.pcap"):
        if is_macc(f):
            fields = macc.decode_fields(f, macc.macc_offset(f))
            ours.append([int(fields[k]) for k in MACC_FIELDS])
    out = subprocess.run([TSHARK, "-n", "-r", str(d / "all.pcap"), "-Y", "macc", "-T",
                          "fields", "-E", "separator=/t", *sum((["-e", k] for k in
                                                                MACC_FIELDS), [])],
                         capture_output=True, text=True, check=True).stdout
    theirs = [[int(v, 0) for v in line.split("\t")] for line in out.splitlines()]
    assert theirs == ours and len(ours) > 0


def test_no_paused_frame_leaves_a_paused_port(incast):
    d, r, _ = incast
    sw = r.net.switches["sw"]
    checked = 0
    for i in range(N):
        port_mac = sw.ports[i].mac
        rec = pcap(d / f"sw{i}.pcap")
        # the host's pause windows, from the PFC frames the switch port started sending
        windows, until = [], None
        for ts, f in rec:
            if not is_macc(f):
                continue
            assert f[6:12] == port_mac
            arrive = ts + -(-len(f) * 8 * 10**9 // RATE_BPS) + DELAY
            q = macc.parse_macc(f).times[PRIO_ROCE]
            if until is not None and until > arrive:
                windows[-1] = (windows[-1][0], arrive)  # refreshed or resumed early
            if q:
                windows.append((arrive, arrive + pause_ns(q, RATE_BPS)))
                until = windows[-1][1]
            else:
                until = None
        assert windows
        # the host's data frames, from their arrival at the switch: when they started
        starts = [ts - DELAY - len(f) * 8 * 10**9 // RATE_BPS for ts, f in rec
                  if f[6:12] != port_mac and len(f) > L2 + IP_HDR + 100]
        for a, b in windows:
            inside = [t for t in starts if a + 1 < t < b - 1]
            assert inside == [], f"s{i + 1} sent while paused in [{a}, {b})"
            checked += 1
        # and the windows did hold traffic back: frames resumed after them
        assert any(t >= windows[0][1] - 1 for t in starts)
    assert checked >= N


def _victim_net(tmp_path, pfc: bool):
    f = tmp_path / f"victim-{pfc}.toml"
    f.write_text("""
[hosts.a1]
[hosts.a2]
[hosts.a3]
[hosts.a4]
[hosts.b1]
[hosts.b2]
[switches.L]
[switches.R]
[[links]]
a = "a1"
b = "L"
[[links]]
a = "a2"
b = "L"
[[links]]
a = "a3"
b = "L"
[[links]]
a = "a4"
b = "L"
[[links]]
a = "L"
b = "R"
rate = "400G"
[[links]]
a = "b1"
b = "R"
[[links]]
a = "b2"
b = "R"
[[traffic]]
src = "a1"
dst = "b1"
[[traffic]]
src = "a2"
dst = "b1"
[[traffic]]
src = "a3"
dst = "b1"
[[traffic]]
src = "a4"
dst = "b2"
""")
    return run(topology_file=str(f), size=2 << 20, count=1, buffer=1 << 20, pfc=pfc,
               ecn="off", timeout=10)


def test_pfc_spreads_congestion_to_a_victim_flow(tmp_path):
    on = _victim_net(tmp_path, True)
    off = _victim_net(tmp_path, False)
    for _, s in (on, off):
        assert s.data_verified
    victim_on = on[1].flows[3]["fct_ns"]["mean"]
    victim_off = off[1].flows[3]["fct_ns"]["mean"]
    alone = (2 << 20) * 8 / 100  # ns at line rate
    # PFC off: the incast drops at R, the victim's path is free (near line rate)
    assert off[1].fabric["drops"] > 0 and victim_off < 1.3 * alone
    # PFC on: nothing dropped, but R paused the shared L->R port and the victim waited
    assert on[1].fabric["drops"] == 0
    l_up = on[1].fabric["ports"]["L:4"]
    assert l_up["peer"] == "R:0" and l_up["pfc_pause_received"] > 0 and l_up["paused_ns"] > 0
    assert victim_on > 2 * victim_off


def test_a_pfc_storm_stalls_its_upstream_ports():
    limit = 2_000_000
    r, s = run(topology="incast:2", size=1 << 20, count=1, storm=["r"], time_limit_ns=limit,
               buffer=1 << 20)
    assert not s.finished and s.bytes == 0 and s.completed == {}
    ports = s.fabric["ports"]
    to_r = ports["sw:2"]
    assert to_r["peer"] == "r" and to_r["pfc_pause_received"] > 0
    assert to_r["paused_ns"] >= 0.99 * (s.virtual_ns - 2 * DELAY)
    # the stalled queue fills the buffer; the switch pauses both senders in turn
    for i, host in ((0, "s1"), (1, "s2")):
        assert ports[f"sw:{i}"]["pfc_pause_sent"] > 0
        assert s.fabric["hosts"][host]["paused_ns"] > 0.9 * s.virtual_ns
    assert s.fabric["hosts"]["r"]["pfc_sent"] >= limit // pause_ns(macc.MAX_QUANTA, RATE_BPS)
