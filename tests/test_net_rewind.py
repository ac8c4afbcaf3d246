"""A go-back-N rewind in the switched network: the request frames a NIC holds ahead of its
scheduler are taken back, so the resent PSN is the next one on the wire (as on a NIC that
builds each packet when it sends it)."""

from __future__ import annotations

from roce import fast
from roce.emu.net.runner import NetRun, NetScenario


def _psns(frames: list[bytes]) -> list[int]:
    return [fast.bth_unpack(f, fast.walk(f).bth_off)[6] for f in frames]


def test_rewind_takes_back_the_frames_the_nic_holds():
    run = NetRun(NetScenario(topology="incast:1", op="write", size=256 << 10, count=1,
                             depth=1))
    nic = run.net.hosts["s1"]
    core = run.flows[0].qa.core
    seen: dict[str, object] = {}

    def slow(now, _):
        core.tx.pacer.rate_bps = 1_000_000_000  # the NIC now holds what the QP builds ahead

    def rewind(now, _):
        req = core.requester
        seen["held"] = _psns(core.tx)
        seen["high"], seen["sent"] = req.high, core.counters.packets_sent
        req.retry(now, req.una)  # as a sequence NAK for the oldest PSN does
        seen["after"] = (list(core.tx), req.high, core.counters.packets_sent, list(nic._busy))
        req.pump(now)
        seen["next"], seen["una"] = _psns(core.tx)[0], req.una

    run.net.at(2_000, slow)
    run.net.at(20_000, rewind)
    s = run.run()
    held = seen["held"]
    assert len(held) == 8 and held[-1] == seen["high"]  # the list was full up to the top
    tx, high, sent, busy = seen["after"]
    assert tx == [] and busy == []  # taken back; the QP left the scheduler's ring
    assert high == held[0] - 1 and sent == seen["sent"] - len(held)  # never on the wire
    assert seen["next"] == seen["una"] == 0  # the resent PSN is the next frame
    assert s.data_verified and s.completed == {"IBV_WC_SUCCESS": 1}
    # resent: only the PSNs that were on the wire before the rewind
    assert s.retransmitted == held[0]


def test_a_device_wide_transmit_list_is_left_alone():
    from emu_helpers import pair

    p = pair()
    core = p.qa.core
    assert core.tx_limit is None
    core.tx.append(b"x")
    assert core.discard_unsent_requests() == [] and core.tx == [b"x"]
