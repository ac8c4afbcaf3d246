"""RCCC (roce/emu/cc/rccc.py): the receiver's grants share its credit pool, the sender spends
only what it was granted, the ACK_CC carries the credit CC state, and on the emulated fabric
an 8:1 incast's queue stays within the bound the credit gives."""

from __future__ import annotations

import json

from roce.cli import main
from roce.emu.cc import ALGORITHMS, configure
from roce.emu.cc.rccc import CREDIT_MOD, Grants, Rccc
from roce.emu.scenario import Scenario
from roce.emu.uet import uetframes
from roce.emu.uet.run import UetOptions, UetRun
from roce.families.uet import codes as t

LINE = 100e9
BDP = LINE / 8 * 8e-6  # the default profile's 8 us: 100 000 bytes


def test_registered_for_uet():
    assert ALGORITHMS["rccc"] is Rccc and Rccc.protocol == "uet"


def test_sender_starts_with_its_initial_credit_and_adds_the_cumulative_grants():
    cc = configure("rccc").create(LINE)
    assert isinstance(cc, Rccc)
    assert cc.balance() == int(0.25 * BDP)
    cc.on_sent(0, 20_000)
    assert cc.balance() == int(0.25 * BDP) - 20_000
    cc.on_credit(1, 8_000)  # the receiver's cumulative grant
    cc.on_credit(2, 8_000)  # the same total again: nothing new
    cc.on_credit(3, 5_000)  # an older ACK overtaken: nothing new
    assert cc.balance() == int(0.25 * BDP) - 20_000 + 8_000
    b = cc.balance()
    cc.on_credit(4, CREDIT_MOD - 100)  # more than half the field ahead: an older ACK
    assert cc.balance() == b
    cc.on_credit(5, 8_000 + (1 << 22))
    cc.on_credit(6, 8_000 + (1 << 23) - 1)
    cc.on_credit(7, 8_000 + (1 << 23) + (1 << 22))
    cc.on_credit(8, 50)  # the 24-bit field wrapped: 50 + 2^24 - (8 000 + 3 x 2^22) more
    assert cc.balance() == b + (1 << 24) + 50 - 8_000


def test_receiver_shares_its_pool_equally_among_active_pdcs():
    g = Grants(configure("rccc").params, LINE)
    assert g.pool == int(BDP) and g.initial == int(0.25 * BDP)
    for k in (1, 2, 3, 4):
        g.arrived(k, 0, g.initial)  # each spent its start credit
    grants = {k: g.grant(k, 10) for k in (1, 2, 3, 4)}
    assert grants == {k: g.pool // 4 for k in (1, 2, 3, 4)}
    assert sum(g.outstanding(k) for k in (1, 2, 3, 4)) <= g.pool
    assert g.grant(1, 20) == g.pool // 4  # nothing arrived since: no more
    # three go silent for longer than rccc_idle_rtts base RTTs: PDC 1 may take the pool
    g.arrived(1, 100_000, g.pool // 4)
    assert g.grant(1, 100_000) == g.pool // 4 + g.pool


def incast(cc: str, n: int = 8):
    sc = Scenario(op="write", size=256 * 1024, count=2, topology=f"incast:{n}", pfc=False,
                  cc=configure(cc, None, [], 100.0))
    run = UetRun(sc, UetOptions())
    frames: list[bytes] = []

    class Keep:
        def write(self, frame: bytes, ts_ns: int = 0) -> None:
            frames.append(bytes(frame))

    run.net.recorders.append(Keep())
    s = run.run()
    port = next(p for sw in run.net.switches.values() for p in sw.ports
                if p.wire.dst.name == "r")
    return s, port, frames


def test_incast_queue_stays_within_the_credit_bound():
    """Credit in flight is at most the start credits plus the pool, and each PDC may have
    one more packet out when nothing of it is in flight: bound = N x (initial + one frame)
    + pool.  Without RCCC the same incast's queue goes far past it (and drops)."""
    n = 8
    s, port, frames = incast("rccc", n)
    assert s.data_verified and s.retransmitted == 0 and s.fabric["drops"] == 0
    frame = 4096 + 200  # a full packet with its headers, generously
    bound = n * (0.25 * BDP + frame) + BDP
    assert port.max_queue_bytes <= bound, (port.max_queue_bytes, bound)
    assert s.goodput_gbps > 85
    acks = [r.fields for r in map(uetframes.decode, frames)
            if r is not None and r.fields["uet.pds.type"] == t.ACK_CC]
    assert acks and all(f["uet.pds.ack.cc_type"] == t.CC_CREDIT for f in acks)
    assert max(f["uet.pds.ack.cc_state.credit"] for f in acks) > 0
    s0, port0, _ = incast("none", n)
    assert port0.max_queue_bytes > 2 * bound and s0.retransmitted > 0


def test_cli_runs_uet_with_rccc(capsys, tmp_path):
    pcap = tmp_path / "r.pcap"
    code = main(["emulate", "--no-progress", "--protocol", "uet", "--topology", "incast:2",
                 "--pfc", "off", "--size", "64K", "--count", "2", "--cc", "rccc", "-w",
                 str(pcap), "-T", "json"])
    s = json.loads(capsys.readouterr().out)
    assert code == 0 and s["data_verified"] and s["uet"]["cc"] == "rccc"
    assert main(["decode", str(pcap), "-Y", "uet.pds.ack.cc_state.credit > 0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all("CREDIT credit=" in ln for ln in lines)
    assert main(["decode", str(pcap), "-Y", "uet.expert"]) == 0
    assert capsys.readouterr().out == ""
