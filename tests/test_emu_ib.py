"""Native InfiniBand on the simulated network (roce.emu.ib): the credit rules, the SL-to-VL
and VL arbitration tables, LIDs and min-hop forwarding tables, and runs of the unchanged RC
QPs over HCAs and switches: no packet ever beyond the buffer its receiver granted, the
flow-control packets on the wire matching the blocks the link carried, every CRC right in
the pcap (roce decode, roce stats, tshark)."""

from __future__ import annotations

import json
import subprocess
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tshark_oracle import TSHARK, fields_command

from roce.cli import main
from roce.emu.ib import framing
from roce.emu.ib.credits import HALF, MOD, Credits, blocks
from roce.emu.ib.ibrun import IbRun
from roce.emu.ib.vltables import SlToVl, VlArbiter
from roce.emu.net import topology as topo
from roce.emu.net.runner import NetRun
from roce.emu.scenario import Scenario
from roce.families import erf
from roce.families.ib import crc as ibcrc
from roce.families.ib import flowcontrol as link
from roce.families.ib import native as ib
from roce.locate import L3_LRH
from roce.pcapio import PcapWriter, open_capture


class Frames:
    """A writer that keeps what it is handed: (ts_ns, bytes)."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []

    def write(self, data: bytes, ts_ns: int | None = None) -> None:
        self.frames.append((ts_ns or 0, data))


# -- the credit rules (roce.emu.ib.credits) ---------------------------------------------


def test_no_credit_before_the_peers_first_packet() -> None:
    cr = Credits(2, 100, 1000)
    assert not cr.may_send(0, 1)
    peer = Credits(2, 100, 1000)
    first = peer.take()
    assert link.decode(first)["infiniband_link.op"] == link.OP_INIT  # initialization
    assert cr.on_packet(first)
    assert cr.may_send(0, 100 * 64) and not cr.may_send(0, 100 * 64 + 1)
    assert not cr.may_send(1, 1)  # VL 1's packet has not come yet


def test_a_sender_never_exceeds_the_granted_credit_across_wraps() -> None:
    """Sender and receiver, one VL, packets of varied sizes for many times 4096 blocks: the
    sender sends only with credit, the receiver never overflows, and every flow-control
    packet's FCTBS equals the blocks sent before it, mod 4096."""
    tx, rx = Credits(1, 50, 1000), Credits(1, 50, 1000)
    tx.on_packet(rx.take())
    rx.on_packet(tx.take())
    held: deque[int] = deque()
    sizes = [64, 65, 1000, 4096 + 30, 200, 3000]
    sent = 0
    for i in range(20_000):
        n = sizes[i % len(sizes)]
        if tx.may_send(0, n):
            tx.sent(0, n)
            sent += blocks(n)
            assert rx.received(0, n)
            held.append(n)
        else:
            assert held, "stalled with nothing in the receiver's buffer"
            for _ in range(len(held) // 2 + 1):
                rx.released(0, held.popleft())
            tx.on_packet(rx.take())
            fc = tx.take()
            if fc is not None:
                assert link.decode(fc)["infiniband_link.fctbs"] == sent % MOD
                rx.on_packet(fc)
    assert sent > 3 * MOD and rx.overflows == 0 and max(rx.max_used) <= 50


def test_receiver_grants_at_most_half_the_counter() -> None:
    cr = Credits(1, 5000, 1000)
    assert cr.fccl(0) == HALF
    cr.received(0, 64 * 10)
    assert cr.fccl(0) == 10 + HALF


def test_overflow_is_counted_and_refused() -> None:
    cr = Credits(1, 3, 1000)
    assert cr.received(0, 64 * 3)
    assert not cr.received(0, 1) and cr.overflows == 1


def test_bad_lpcrc_is_ignored() -> None:
    cr = Credits(1, 3, 1000)
    p = bytearray(link.build(0, 5, 9))
    p[5] ^= 1
    assert not cr.on_packet(bytes(p)) and cr.bad_lpcrc == 1 and cr.limit == [0]


def test_refresh_timer_owes_every_vl_that_carried_data() -> None:
    cr = Credits(3, 10, 500)
    while cr.take() is not None:
        pass
    assert cr.deadline() == 500
    cr.sent(0, 100)
    cr.received(2, 100)
    cr.on_timer(500)
    assert cr.owed == {0, 2} and cr.deadline() == 1000
    while cr.take() is not None:
        pass
    cr.on_timer(1000)
    assert cr.owed == set()  # nothing moved since


def test_a_buffer_beyond_64_bits_keeps_the_rules() -> None:
    """A port's buffer is a round trip of its link: the longest delay at the highest rate the
    options take is more blocks than a C integer holds.  The rules run on it as on any other
    (the compiled credits keep what the buffer's size reaches in Python integers)."""
    huge = 1 << 80
    cr = Credits(1, huge, 1000, huge - 65)
    assert link.decode(cr.take())["infiniband_link.fccl"] == HALF  # the most 12 bits grant
    assert cr.received(0, 4096) and cr.used == [64]
    cr.released(0, 4096)
    assert cr.owed == {0} and cr.fccl(0) == (64 + HALF) % MOD
    cr.on_packet(link.build(0, 0, 100))
    assert cr.may_send(0, 100 * 64) and not cr.may_send(0, 100 * 64 + 1)


def test_releases_batch_while_the_peer_holds_enough_credit() -> None:
    """Rule 5: with ``low`` 60 of a 100-block buffer, a release owes nothing while the peer
    holds 60 blocks or more beyond what arrived; the arrival that brings it below owes the
    batched update; the refresh sends a batched one; the default owes on every release."""
    cr = Credits(1, 100, 500, low_blocks=60)
    assert link.decode(cr.take())["infiniband_link.fccl"] == 100  # initialization
    assert cr.received(0, 640)  # 10 blocks: the peer holds 90
    cr.released(0, 640)
    assert cr.owed == set() and cr.batched == {0}
    assert cr.received(0, 64 * 25)  # 65 left
    assert cr.owed == set()
    cr.released(0, 64 * 25)
    assert cr.received(0, 64 * 10)  # 55 left: below low, the batched update is owed
    assert cr.owed == {0} and cr.batched == set()
    f = link.decode(cr.take())
    assert f["infiniband_link.fccl"] == 45 + 90  # ABR 45, 90 blocks free
    cr.released(0, 640)  # the peer holds 90 again: batched, until the refresh
    assert cr.owed == set() and cr.batched == {0}
    cr.on_timer(500)
    assert cr.owed == {0} and cr.batched == set()
    every = Credits(1, 100, 500)
    every.take()
    every.received(0, 64)
    every.released(0, 64)
    assert every.owed == {0}


@given(st.integers(0, 15), st.integers(0, 15), st.integers(0, 0xFFFF), st.integers(0, 0x7FF),
       st.integers(0, 0xFFFF))
def test_the_hcas_lrh_is_the_layouts(vl: int, sl: int, dlid: int, pktlen: int,
                                     slid: int) -> None:
    assert framing.lrh(vl, sl, dlid, pktlen, slid) == ib.encode_lrh(
        {"vl": vl, "lver": 0, "sl": sl, "reserved2": 0, "lnh": 2, "dlid": dlid,
         "reserved5": 0, "pktlen": pktlen, "slid": slid})


# -- SL to VL, VL arbitration (roce.emu.ib.vltables) ---------------------------------------


def test_sl_to_vl() -> None:
    t = SlToVl.spread(4)
    assert [t[s] for s in range(16)] == [s % 4 for s in range(16)]
    with pytest.raises(ValueError):
        SlToVl([15] * 16)  # VL15 carries no data
    with pytest.raises(ValueError):
        SlToVl([0] * 15)


def test_arbitration_weights_and_priority() -> None:
    # low table: VL0 weight 2 (128 bytes), VL1 weight 1 (64 bytes); 64-byte packets
    arb = VlArbiter((), [(0, 2), (1, 1)])
    picks = []
    for _ in range(9):
        vl = arb.pick(lambda v: True)
        arb.charge(64)
        picks.append(vl)
    assert picks == [0, 0, 1] * 3
    assert arb.pick(lambda v: v == 1) == 1  # a VL with nothing ready is skipped
    # high priority first, until LimitOfHighPriority (1 x 4096 bytes) while low waits
    arb = VlArbiter([(2, 255)], [(0, 64)], limit_high=1)
    seq = []
    for _ in range(4):
        vl = arb.pick(lambda v: True)
        arb.charge(2048)
        seq.append(vl)
    assert seq == [2, 2, 0, 2]
    assert arb.pick(lambda v: v == 2) == 2  # nothing low waits: high goes on


# -- runs -----------------------------------------------------------------------------


def _run(topology: str = "incast:4", count: int = 3, size: int = 32768,
         **kw: object) -> IbRun:
    return IbRun(Scenario(topology=topology, protocol="ib", count=count, size=size, **kw))


@pytest.mark.parametrize("spec", ["incast:6", "leafspine:2,2,2", "p2p"])
def test_credits_hold_no_drop_data_verified(spec: str) -> None:
    run = _run(spec, traffic="permutation" if spec.startswith("leaf") else None)
    s = run.run()
    assert s.finished and s.data_verified, s.unverified
    f = s.fabric
    assert f["drops"] == 0 and f["credit_overflows"] == 0 and f["unrouted"] == 0
    assert s.retransmitted == 0 and s.timeouts == 0
    for sw in run.net.switches.values():
        for p in sw.ports:
            assert max(p.credits.max_used) <= p.credits.capacity
    if spec.startswith("incast"):
        # six senders into one port: the credits, not a drop, held them back
        assert f["credit_stalls"] > 0
        assert f["max_queue_bytes"] > 0


def test_the_counts_kept_per_packet_match_what_they_count() -> None:
    """What the ports keep as counts instead of scanning (an HCA's ``waiting``: its slots
    holding a packet; ``Credits.activity``: the blocks both ways on every VL) match a scan at
    every step of a congested run."""
    run = _run("incast:4", count=4, qps=3)
    net = run.net
    ports = [h for h in net.hosts.values()] + [p for sw in net.switches.values()
                                              for p in sw.ports]
    seen = 0

    def check(now: int, _: object) -> None:
        nonlocal seen
        for port in ports:
            cr = port.credits
            assert cr.activity() == sum(cr.blocks_sent) + sum(cr.blocks_received)
        for h in net.hosts.values():
            assert h.waiting == sum(s is not None for s in h.slots)
            seen += h.waiting
        if net.events:
            net.at(now + 200, check)

    net.at(0, check)
    s = run.run()
    assert s.finished and s.data_verified
    assert seen > 0  # packets did wait for credit


def _blocks_by_vl(records: list[tuple[int, bytes]], received: bool) -> list[tuple[int, bytes]]:
    """(ts, packet) of the ERF records one way (flags bit 0: received)."""
    out = []
    for ts, rec in records:
        u = erf.unwrap(rec)
        if bool(u.fields["erf.flags"] & 1) == received:
            out.append((ts, rec[u.offset:u.offset + u.fields["erf.wlen"]]))
    return out


def test_flow_control_packets_match_the_credits_the_link_used() -> None:
    """At the receiving host's port (incast: its link is the congested one): each
    flow-control packet from the switch carries as FCTBS the blocks of every data packet
    that arrived before it on its VL; each data packet the host sent went within the FCCL
    the switch last granted; each FCCL the host granted is within its buffer."""
    run = _run("incast:3")
    hca = run.net.hosts["r"]
    tap = Frames()
    hca.erf_tap = tap
    s = run.run()
    assert s.data_verified
    cap = hca.credits.capacity
    got = [0] * hca.credits.vls
    fc_in = data_in = 0
    for _, p in _blocks_by_vl(tap.frames, received=True):
        if len(p) == link.SIZE:
            f = link.decode(p)
            assert f["infiniband_link.fctbs"] == got[f["infiniband_link.vl"]] % MOD
            fc_in += 1
        else:
            got[p[0] >> 4] += blocks(len(p))
            data_in += 1
    limit = [None] * hca.credits.vls
    sent = [0] * hca.credits.vls
    received_so_far = [0] * hca.credits.vls
    events = sorted([(ts, 0, p) for ts, p in _blocks_by_vl(tap.frames, True)]
                    + [(ts, 1, p) for ts, p in _blocks_by_vl(tap.frames, False)],
                    key=lambda e: (e[0], e[1]))
    fc_out = 0
    for _, out, p in events:
        if len(p) == link.SIZE:
            f = link.decode(p)
            vl = f["infiniband_link.vl"]
            if out:
                # what the host granted: at most its buffer beyond what it received
                assert (f["infiniband_link.fccl"] - received_so_far[vl]) % MOD <= cap
                fc_out += 1
            else:
                limit[vl] = f["infiniband_link.fccl"]
        elif out:
            vl = p[0] >> 4
            sent[vl] += blocks(len(p))
            assert limit[vl] is not None, "data sent before any credit"
            assert (limit[vl] - sent[vl]) % MOD <= HALF, "data sent beyond the credit"
        else:
            received_so_far[p[0] >> 4] += blocks(len(p))
    assert fc_in > 3 and fc_out > 3 and data_in == s.fabric["hosts"]["r"]["rx_frames"]


def _pcap(tmp_path: Path, spec: str = "incast:2", **kw: object) -> tuple[Path, object]:
    path = tmp_path / "ib.pcap"
    run = _run(spec, count=kw.pop("count", 2), size=kw.pop("size", 9000), **kw)
    with PcapWriter(path, linktype=ib.LINKTYPE_INFINIBAND) as w:
        run.record(w)
        s = run.run()
    return path, s


def test_pcap_is_native_infiniband_with_every_crc_right(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    path, s = _pcap(tmp_path)
    with open_capture(str(path)) as cap:
        frames = [r.data for r in cap]
    assert len(frames) == sum(h["rx_frames"] for h in s.fabric["hosts"].values())
    for f in frames:
        d = ib.decode(f)
        assert d.error is None and d.fields["icrc.valid"] and d.fields["vcrc.valid"]
        assert d.fields["lrh.lnh"] == 2 and d.fields["lrh.vl"] == 3 and d.fields["lrh.sl"] == 3
    # roce stats reads the run's pcap as the emulator counted it
    assert main(["stats", str(path), "-T", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    tot = rep["totals"]
    assert tot["ib_packets"] == tot["frames"] == len(frames)
    assert tot["bad_icrc"] == tot["bad_vcrc"] == tot["malformed"] == 0
    assert tot["connections"] == len(s.flows) and tot["messages"] == s.posted
    assert tot["payload_bytes"] == s.bytes and tot["retransmissions"] == s.retransmitted
    assert tot["acks"] == sum(h["rx_frames"] for n, h in s.fabric["hosts"].items()
                              if n != "r")


def test_stats_counts_the_congestion_marks_the_emulator_counted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, s = _pcap(tmp_path, "incast:4", count=6, size=65536, ib_cc=True)
    hosts = s.fabric["hosts"].values()
    assert main(["stats", str(path), "-T", "json"]) == 0
    tot = json.loads(capsys.readouterr().out)["totals"]
    assert tot["bad_icrc"] == tot["bad_vcrc"] == 0
    assert tot["ecn_ce"] == sum(h["fecn_received"] for h in hosts) > 0  # FECN as CE
    assert tot["cnps"] == sum(h["becns_received"] for h in hosts) > 0  # IB CNPs, 0x80


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_reads_the_same_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    path, _ = _pcap(tmp_path)
    # tshark 4.0 reads native InfiniBand from ERF records (type 21), not link type 247
    with open_capture(str(path)) as cap:
        frames = [(r.data, r.ts_ns) for r in cap]
    path = tmp_path / "ib.erf.pcap"
    with PcapWriter(path, linktype=erf.LINKTYPE_ERF) as w:
        for data, ts in frames:
            w.write(erf.record(data, ts=erf.fixed_ts(ts)), ts_ns=ts)
    names = ["infiniband.lrh.vl", "infiniband.lrh.sl", "infiniband.lrh.dlid",
             "infiniband.lrh.slid", "infiniband.lrh.pktlen", "infiniband.bth.opcode",
             "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.invariant.crc",
             "infiniband.variant.crc"]
    theirs = subprocess.run(fields_command(path, names), capture_output=True, text=True,
                            check=True, timeout=120).stdout.splitlines()
    argv = ["decode", str(path), "-T", "fields"]
    for n in names:
        argv += ["-e", n]
    assert main(argv) == 0
    ours = capsys.readouterr().out.splitlines()
    norm = [[str(int(v, 0)) for v in r.split("\t")] for r in theirs]
    assert [[str(int(v, 0)) for v in r.split("\t")] for r in ours] == norm
    assert len(norm) > 10


def test_emulate_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pcap, tap = tmp_path / "x.pcap", tmp_path / "r.erf"
    assert main(["emulate", "--protocol", "ib", "--topology", "incast:2", "--count", "2",
                 "--size", "10000", "--ib-routing", "dmodk", "-w", str(pcap), "--tap",
                 f"r:0={tap}"]) == 0
    out = capsys.readouterr().out
    assert "protocol=ib routing=dmodk" in out and "credit overflows 0" in out
    assert "data verified yes" in out
    assert main(["decode", str(tap), "-T", "fields", "-e", "infiniband_link.fctbs"]) == 0
    assert any(x.strip() for x in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("argv, what", [
    (["--pfc", "off"], "--pfc with --protocol ib"),
    (["--ecn", "off"], "--ecn with --protocol ib"),
    (["--cc", "dcqcn"], "--cc with --protocol ib"),
    (["--lb", "spray"], "--lb with --protocol ib"),
    (["--qp-type", "ud"], "--qp-type ud"),
    (["--trace", "t.csv"], "--trace with --protocol ib"),
    (["--buffer", "1M"], "--buffer with --protocol ib"),
])
def test_emulate_refuses_what_ib_has_nothing_for(argv: list[str], what: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "--protocol", "ib", "--topology", "incast:2", *argv]) == 1
    assert what in capsys.readouterr().err


@pytest.mark.parametrize("argv, what", [
    (["--pfc", "on"], "--pfc with --protocol ib"),
    (["--pfc=on"], "--pfc with --protocol ib"),
    (["--lb", "ecmp"], "--lb with --protocol ib"),
    (["--buffer", "12M"], "--buffer with --protocol ib"),
    (["--ecn", "100K,400K,0.2"], "--ecn with --protocol ib"),
    (["--collective", "allreduce", "--size", "64K", "--pfc", "on"],
     "--pfc with --protocol ib"),
])
def test_emulate_refuses_an_ethernet_option_typed_with_its_default(
        argv: list[str], what: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Typed, an option InfiniBand has nothing for is refused whatever its value: the
    default's value says nothing of it, and accepting it would say it acted."""
    assert main(["emulate", "--protocol", "ib", "--topology", "incast:2", *argv]) == 1
    assert what in capsys.readouterr().err


def test_ethernet_options_typed_with_their_defaults_still_run_roce(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "--topology", "incast:2", "--size", "8K", "--count", "1",
                 "--pfc", "on", "--lb", "ecmp"]) == 0
    assert "data verified yes" in capsys.readouterr().out


def test_a_topology_files_switch_settings_are_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "net.toml"
    f.write_text('[hosts.a]\n[hosts.b]\n[switches.sw]\npfc = true\n'
                 '[[links]]\na = "a"\nb = "sw"\n[[links]]\na = "b"\nb = "sw"\n'
                 '[[traffic]]\nsrc = "a"\ndst = "b"\n')
    assert main(["emulate", "--protocol", "ib", "--topology-file", str(f)]) == 1
    assert "switches.sw.pfc: an InfiniBand switch" in capsys.readouterr().err


def test_the_ethernet_run_refuses_ib() -> None:
    from roce.errors import UsageError

    with pytest.raises(UsageError, match="IbRun"):
        NetRun(Scenario(topology="incast:2", protocol="ib"))


def test_ib_routing_needs_ib(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "--ib-routing", "dmodk"]) == 1
    assert "--ib-routing: only with --protocol ib" in capsys.readouterr().err


def _two_switches(traffic: list[tuple[str, str]]) -> topo.Topology:
    """a1 and a3 on switch L; a2, r and x on switch R; L-R at 200 Gb/s, every other link
    at 100 Gb/s.  a1 and a2 into r congest R's port to r (the root); a3 to x shares only
    the L-R link, which has room for it at full rate."""
    t = topo.Topology()
    for s in ("L", "R"):
        t.switches[s] = topo.SwitchSpec(s)
    for h, s in (("a1", "L"), ("a3", "L"), ("a2", "R"), ("r", "R"), ("x", "R")):
        t.host(h)
        t.link(h, s)
    t.links.append(topo.LinkSpec("L", "R", rate_gbps=200.0))
    t.traffic = traffic
    return t


def _a3(proto: str, crowd: bool, **kw: object) -> tuple[float, object]:
    """a3's mean message time alone or beside the incast into r, and the summary."""
    traffic = [("a1", "r"), ("a2", "r"), ("a3", "x")] if crowd else [("a3", "x")]
    sc = Scenario(topology="incast:2", protocol=proto, count=30, size=65536, **kw)
    s = (IbRun if proto == "ib" else NetRun)(sc, topology=_two_switches(traffic)).run()
    assert s.data_verified and s.fabric["drops"] == 0
    return next(f["fct_ns"]["mean"] for f in s.flows if f["src"] == "a3"), s


def test_congestion_spreads_as_with_pfc_and_ib_cc_reduces_it() -> None:
    """a3 has room on every link of its path, yet beside the incast into r its messages
    take longer: R's buffer from L fills with a1's packets for r and holds a3's behind them,
    by credits on InfiniBand as by PFC pauses on Ethernet (a shared buffer small enough to
    pause).  InfiniBand's congestion control marks at the root, R's port to r, throttles a1
    and a2, and a3 gets most of its time back."""
    alone_ib, _ = _a3("ib", False)
    crowd_ib, s = _a3("ib", True)
    assert s.fabric["fecn_marked"] == 0
    assert crowd_ib > 1.4 * alone_ib
    alone_roce, _ = _a3("roce", False, ecn="off", buffer=300_000)
    crowd_roce, s = _a3("roce", True, ecn="off", buffer=300_000)
    assert s.fabric["pfc_frames"] > 0 and crowd_roce > 1.4 * alone_roce
    crowd_cc, s = _a3("ib", True, ib_cc=True)
    assert crowd_cc < 0.85 * crowd_ib
    marks = {p: r["fecn_marked"] for p, r in s.fabric["ports"].items()}
    to_r = next(p for p, r in s.fabric["ports"].items() if r["peer"] == "r")
    assert marks[to_r] > sum(marks.values()) / 2  # the root marks; the victims hardly
    # every mark answered, every answer heard, but for those in flight when the run ended
    f = s.fabric
    assert 0.9 * f["fecn_marked"] < f["becns_received"] <= f["cnps_sent"] <= f["fecn_marked"]


# -- InfiniBand congestion control (roce.emu.ib.ibcc) ------------------------------------


def test_ccti_steps_up_on_becn_and_decays_by_timer() -> None:
    from roce.emu.ib.ibcc import TIMER_UNIT_NS, CcAgent, IbCcConfig

    cfg = IbCcConfig(ccti_increase=2, ccti_limit=5, ccti_timer=3)
    a = CcAgent(cfg, 100_000_000_000, 4096)
    assert a.rate_bps(7) == 100_000_000_000
    t = 0
    for _ in range(4):
        t = a.on_becn(0, 7)
    assert a.ccti[7] == 5 and t == 3 * TIMER_UNIT_NS  # capped at CCTI_Limit
    # entry 5: shift 2, multiplier 5: a gap of 5/4 of a largest packet after each
    want = 100e9 / (1 + 5 / 4)  # (integer ns: the shift rounds down, as hfi1 does)
    assert abs(a.rate_bps(7) - want) < 0.01 * want
    seen = []
    while t is not None:
        t = a.on_timer(t, 7)
        seen.append(a.ccti[7])
    assert seen == [4, 3, 2, 1, 0] and a.rate_bps(7) == 100_000_000_000
    assert a.on_timer(10**9, 7) is None  # no timer left: nothing happens


def test_ib_cc_config_is_checked() -> None:
    from roce.emu.ib.ibcc import IbCcConfig

    with pytest.raises(ValueError):
        IbCcConfig(ccti_limit=200)
    with pytest.raises(ValueError):
        IbCcConfig(table=((4, 1),))


def test_ib_cc_needs_ib(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "--ib-cc", "on"]) == 1
    assert "--ib-cc: only with --protocol ib" in capsys.readouterr().err


def test_the_tap_read_back_by_roce_decode_matches_the_credits_and_counters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The ERF tap of the switch's port to the incast's receiver, written by ``roce
    emulate`` and read back by ``roce decode``: every flow-control packet's FCTBS is the
    blocks its sender had sent on the VL before it, every data packet the switch sent went
    within the FCCL the receiver had granted, every FCCL the switch granted within its
    buffer, and the record counts are the emulator's counters of that port."""
    tap = tmp_path / "sw3.erf"
    assert main(["emulate", "--protocol", "ib", "--topology", "incast:3", "--count", "4",
                 "--size", "30000", "--tap", f"sw:3={tap}", "-T", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["data_verified"]
    port = s["fabric"]["ports"]["sw:3"]
    assert port["peer"] == "r"
    assert main(["decode", str(tap), "-T", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    sent = {0: [0] * 4, 1: [0] * 4}  # by direction (ERF flags bit 0: received), per VL
    limit: list[int | None] = [None] * 4
    counts = {(kind, d): 0 for kind in ("fc", "data") for d in (0, 1)}
    for r in recs:
        way = r["erf.flags"] & 1
        if r["erf.types.type"] == erf.ERF_TYPE_INFINIBAND_LINK:
            vl = r["infiniband_link.vl"]
            assert r["infiniband_link.fctbs"] == sent[way][vl] % MOD
            if way:  # the receiver's grant: the switch's limit from now on
                limit[vl] = r["infiniband_link.fccl"]
            else:  # the switch's grant: within its buffer beyond what it received
                assert (r["infiniband_link.fccl"] - sent[1][vl]) % MOD <= port["buffer_blocks"]
            counts[("fc", way)] += 1
        else:
            assert r["erf.types.type"] == erf.ERF_TYPE_INFINIBAND
            assert r["icrc.valid"] and r["vcrc.valid"]
            vl = r["lrh.vl"]
            sent[way][vl] += blocks(r["lrh.pktlen"] * 4 + 2)
            if not way:
                assert limit[vl] is not None and (limit[vl] - sent[0][vl]) % MOD <= HALF
            counts[("data", way)] += 1
    assert counts == {("fc", 0): port["fc_sent"], ("fc", 1): port["fc_received"],
                      ("data", 0): port["tx_frames"], ("data", 1): port["rx_frames"]}
    assert port["tx_frames"] > 40 and port["fc_received"] > 3


def test_every_corrupted_packet_into_an_hca_is_caught_and_counted() -> None:
    """Corruption on every link: each data packet an HCA receives whose VCRC or ICRC is wrong
    (by the table-driven references of roce.families.ib.crc) is dropped and counted in
    ``bad_crc``, one on a VL the port does not run in ``overflows``, and each flow-control
    packet whose LPCRC is wrong in ``bad_lpcrc``: the fast checks miss none and invent none."""
    run = _run("incast:3", count=6, corrupt=0.02, seed=5)
    taps = {}
    for name, hca in run.net.hosts.items():
        hca.erf_tap = taps[name] = Frames()
    run.run()
    caught = 0
    for name, hca in run.net.hosts.items():
        bad = wrong_vl = bad_fc = 0
        for _, p in _blocks_by_vl(taps[name].frames, received=True):
            if len(p) == link.SIZE:
                bad_fc += ibcrc.vcrc(p[:4]) != int.from_bytes(p[4:6], "big")
                continue
            if p[0] >> 4 >= hca.credits.vls:
                wrong_vl += 1
                continue
            end = len(p) - 2
            icrc_off = end - 4
            ok = (ibcrc.vcrc(p[:end]) == int.from_bytes(p[end:], "big")
                  and ibcrc.icrc(p, L3_LRH, ib.LRH_SIZE, icrc_off)
                  == int.from_bytes(p[icrc_off:end], "big"))
            bad += not ok
        assert (hca.bad_crc, hca.overflows, hca.credits.bad_lpcrc) == (bad, wrong_vl, bad_fc)
        caught += bad
    assert caught > 0  # the run did corrupt packets that reached an HCA


@given(st.binary(min_size=12, max_size=300), st.integers(min_value=0))
def test_a_flipped_bit_anywhere_is_refused_by_the_hca(transport: bytes, bit: int) -> None:
    fr = framing.Framer(3, "10.0.0.1", {}, {5: "10.0.0.2"}, "02:00:00:00:00:01",
                        "02:00:00:00:00:02", 0)
    packet = fr.packet(transport, 0, 0, 3)
    peer = bytearray(packet)
    peer[6:8] = (5).to_bytes(2, "big")  # from LID 5, whose address the framer knows
    peer = framing.frame_reference(bytes(peer[:8]), transport)
    assert fr.to_roce(peer) is not None
    bit %= len(peer) * 8
    flipped = bytearray(peer)
    flipped[bit // 8] ^= 0x80 >> (bit % 8)
    assert fr.to_roce(bytes(flipped)) is None


def test_the_frames_an_hca_hands_its_device_carry_their_icrc_when_recorded() -> None:
    """The RoCE frame an HCA makes of each packet for its device has its ICRC computed only
    when something records the frames the NIC receives (the device does not check it: the
    HCA checked the packet's); recorded, every one is right, and the run is the same."""
    from roce import fast

    plain = _run("incast:2", count=2)
    s0 = plain.run()
    run = _run("incast:2", count=2)
    seen = Frames()
    run.net.recorders.append(seen)
    s1 = run.run()
    assert s0.data_verified and s1.data_verified and s0.virtual_ns == s1.virtual_ns
    data = [f for _, f in seen.frames if len(f) > 100]
    assert len(data) >= 2 * 2 * 32768 // 4096
    for f in data:
        w = fast.walk(f)
        assert fast.icrc_at(f, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off) == \
            int.from_bytes(f[w.icrc_off:w.icrc_off + 4], "big")
    fr = framing.Framer(3, "10.0.0.1", {}, {5: "10.0.0.2"}, "02:00:00:00:00:01",
                        "02:00:00:00:00:02", 0)
    peer = framing.frame_reference(framing.lrh(0, 0, 3, 0, 5), bytes(range(40)))
    full, bare = fr.to_roce(peer), fr.to_roce(peer, False)
    assert bare[:-4] == full[:-4] and bare[-4:] == bytes(4) != full[-4:]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_tail_loss_is_recovered_by_the_qp_timeout(seed):
    """A lost last packet leaves only the QP's ACK timeout to resend it.  The HCA's credit
    refresh timer once shared the NIC's timer field: a refresh superseded the pending QP
    timeout, and the run ended at its time limit with the data not verified and no
    timeout counted (these seeds)."""
    sc = Scenario(op="write", size=64 << 10, count=4, topology="incast:4", protocol="ib",
                  loss=0.01, seed=seed)
    s = IbRun(sc, topology=topo.parse("incast:4")).run(None)
    assert s.data_verified and s.timeouts >= 1
