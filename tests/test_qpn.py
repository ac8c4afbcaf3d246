"""QPN arithmetic (roce.qpn): queue pair numbers are 24 bits, and a count of QPs from a
first QPN that would pass 0xFFFFFF is refused -- never wrapped onto QPN 0 and 1, the
management QPs -- the same way in ``roce target`` (its QPs and the peer's), in the emulated
device numbering its QPs, and in the helper itself."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import qpn
from roce.cli import main
from roce.emu.core.constants import QPType
from roce.emu.core.device import Device
from roce.emu.core.qp import QPCap
from roce.emu.real.target import Target, TargetConfig

LAST = 0xFFFFFF


def test_the_width_is_the_bths() -> None:
    from roce.headers import LAYOUTS

    assert qpn.QPN_MAX == LAYOUTS["bth"].field("destqp").mask == LAST
    assert qpn.QPN_COUNT == 1 << 24


@given(st.integers(-5, LAST + 5), st.integers(-2, 1 << 25))
def test_qpn_range_is_the_qpns_or_a_value_error(first: int, count: int) -> None:
    fits = 0 <= first <= LAST and count >= 0 and first + count - 1 <= LAST
    if fits:
        r = qpn.qpn_range(first, count)
        assert (r.start, len(r)) == (first, count)
        assert not count or 0 <= r[0] <= r[-1] <= LAST
    else:
        with pytest.raises(ValueError, match="24-bit" if 0 <= first <= LAST and count >= 0
                           else "QPN|count"):
            qpn.qpn_range(first, count)


def test_the_message_names_the_range() -> None:
    with pytest.raises(ValueError) as info:
        qpn.qpn_range(LAST, 2)
    assert str(info.value) == ("2 QPNs from 0xffffff end at 0x1000000, past the 24-bit QPNs "
                               "(0xffffff is the last)")


def test_the_device_refuses_a_qp_past_the_last_qpn() -> None:
    dev = Device("d", "02:00:00:00:00:01", "10.0.0.1")
    dev.next_qpn = LAST
    cap = QPCap(max_send_wr=1, max_recv_wr=1)
    assert dev.create_qp(None, QPType.IBV_QPT_RC, None, None, cap).qpn == LAST
    with pytest.raises(ValueError, match="24-bit"):
        dev.create_qp(None, QPType.IBV_QPT_RC, None, None, cap)
    assert list(dev.qps) == [LAST]  # nothing half made


def _target(**kw: int) -> Target:
    port = 40000 + os.getpid() % 20000
    return Target(TargetConfig(ip="127.0.0.1", transport="udp", udp_port=port, **kw),
                  quiet=True)


def test_the_target_takes_the_last_qpns_and_the_peers_last_qpns() -> None:
    t = _target(qpn=LAST - 1, qps=2, peer_qpn=LAST - 1)
    try:
        assert list(t.qps) == [LAST - 1, LAST]
        assert [qp.core.attr.dest_qp_num for qp in t.qps.values()] == [LAST - 1, LAST]
        assert "-> peer QP 0xffffff" in t.banner()
    finally:
        t.close()


@pytest.mark.parametrize("kw", [{"qpn": LAST, "qps": 2}, {"peer_qpn": LAST, "qps": 2}])
def test_the_target_refuses_qps_past_the_last_qpn(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="past the 24-bit QPNs"):
        _target(**kw)


@pytest.mark.parametrize(("argv", "option"), [
    (["--qpn", "0xffffff", "--qps", "2"], "--qpn 0xffffff --qps 2"),
    (["--qpn", "0xffff00", "--qps", "0x101", "--recv-depth", "0"],
     "--qpn 0xffff00 --qps 257"),
    (["--peer-qpn", "0xffffff", "--qps", "2"], "--peer-qpn 0xffffff --qps 2"),
])
def test_roce_target_refuses_them_as_usage(capsys: pytest.CaptureFixture[str],
                                           argv: list[str], option: str) -> None:
    # usage (exit 1) before the interface (which does not exist) is looked at
    assert main(["target", "-i", "nosuchif0", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"roce target: {option}: "), err
    assert "past the 24-bit QPNs" in err[0]
