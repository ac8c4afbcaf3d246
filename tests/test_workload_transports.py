"""One workload driver over three transports (roce.emu.net.transport): RoCE's RC queue pairs,
native InfiniBand's on HCAs, UET's PDCs.  The same seed gives the same transfers on each, the
reports are the same, the data is checked, and what a transport cannot honour is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from roce.cli import main
from roce.cli.emulate import transport as transport_of
from roce.emu.net.transport import QpTransport, Transport
from roce.emu.net.workrun import WorkloadRun
from roce.emu.scenario import Scenario
from roce.emu.uet.run import UetOptions
from roce.emu.uet.uettransport import UetTransport
from roce.emu.workload.traffic import Transfer
from roce.errors import UsageError
from roce.pcapio import open_capture

FLOWS = dict(topology="leafspine:2,2,2", cdf="fbhadoop", load=0.5, duration_ns=100_000, seed=1)
RING = dict(topology="leafspine:2,2,2", collective="allreduce", size=1 << 18, iterations=2)


def _recorded(sc: Scenario, tr: Transport) -> tuple[Any, list[tuple[Transfer, str]]]:
    """Run ``sc`` on ``tr``, every transfer the driver posted recorded with its op."""
    posted: list[tuple[Transfer, str]] = []
    post = tr.post

    def spy(t: Transfer, op: str) -> None:
        posted.append((t, op))
        post(t, op)

    tr.post = spy  # type: ignore[method-assign]
    s = WorkloadRun(sc, transport=tr).run()
    return s, posted


CONFIGS = {
    "roce": lambda kw: (Scenario(**kw), transport_of(Scenario(**kw))),
    "roce-spray": lambda kw: (Scenario(**kw, lb="spray", pfc=False, recovery="sr"),
                              QpTransport()),
    "uet": lambda kw: (Scenario(**kw, protocol="uet", pfc=False),
                       UetTransport(UetOptions(entropy="packet", trim=True))),
    "ib": lambda kw: (Scenario(**kw, protocol="ib"),
                      transport_of(Scenario(**kw, protocol="ib"))),
}


@pytest.mark.parametrize("kw", [FLOWS, RING], ids=["fbhadoop", "allreduce"])
def test_same_transfers_on_every_transport(kw: dict[str, Any]):
    """Same seed: the same flows (sizes, arrival times, pairs) or the same dependency graph
    on RoCE (ECMP or spraying), UET and InfiniBand; every run verified and reported alike."""
    runs = {name: _recorded(*make(kw)) for name, make in CONFIGS.items()}
    first = None
    for name, (s, posted) in runs.items():
        assert s.data_verified, (name, s.unverified)
        assert s.finished and posted, name
        mine = sorted((t.id, t.src, t.dst, t.size, t.at_ns, t.step, op) for t, op in posted)
        first = first or mine
        assert mine == first, name
        w = s.workload
        if w["kind"] == "flows":
            assert w["finished"] == w["flows"] == len(posted)
            assert w["slowdown"]["all"]["p50"] >= 1.0
        else:
            assert w["completed_iterations"] == 2 and 0 < w["busbw_GBps"] <= 12.5
        assert s.bytes == sum(t.size for t, _ in posted)
    # the transports did differ: UET has its PDS counters, InfiniBand its credits
    assert runs["uet"][0].uet["pds"]["requests_sent"] > 0
    assert runs["ib"][0].fabric["fc_packets"] > 0
    assert "uet" not in runs["roce"][0].as_dict()


def test_uet_recovers_trimmed_and_lost_packets_with_the_data_verified():
    """An all-to-all on a shallow, lossy incast switch: UET trims what it would drop,
    retransmits on the trimmed NACK and on loss, and every SEND lands whole."""
    sc = Scenario(topology="incast:4", collective="alltoall", size=1 << 20, buffer=96 << 10,
                  pfc=False, protocol="uet", loss=0.002)
    s = WorkloadRun(sc, transport=UetTransport(UetOptions(trim=True))).run()
    assert s.data_verified, s.unverified
    assert s.retransmitted > 0
    assert s.uet["pds"]["retx_timeout"] + s.uet["pds"]["retx_nack"] + \
        s.uet["pds"]["retx_sack"] == s.retransmitted


def test_uet_workload_runs_its_congestion_management():
    """--cc nscc on a UET workload run: every host's PDS admits requests through NSCC (its
    counters are in the fabric's host rows) and the summary names it."""
    from roce.emu.cc.algorithms import configure

    sc = Scenario(**RING, protocol="uet", pfc=False, cc=configure("nscc"))
    s = WorkloadRun(sc, transport=UetTransport(UetOptions(trim=True))).run()
    assert s.data_verified, s.unverified
    assert s.uet["cc"] == "nscc"
    assert all("cc" in h for h in s.fabric["hosts"].values())


class _Careless(QpTransport):
    """Reports every transfer done without moving a byte."""

    def post(self, t: Transfer, op: str) -> None:
        self.ready.append(None)
        self._pending = [*getattr(self, "_pending", []), t]

    def reap(self) -> None:
        self.ready.clear()
        for t in getattr(self, "_pending", []):
            self.done(t, True, t.size, "IBV_WC_SUCCESS")  # type: ignore[misc]
        self._pending = []


def test_the_driver_checks_what_a_transport_delivered():
    """A transport that says a transfer arrived when its bytes did not is caught by the
    driver's check, whatever the transport."""
    s = WorkloadRun(Scenario(**RING), transport=_Careless()).run()
    assert not s.data_verified
    assert "not what was sent" in s.unverified


@pytest.mark.parametrize("kw,tr,what", [
    (dict(FLOWS, protocol="uet", recovery="sr"), UetTransport(), "--recovery"),
    (dict(FLOWS, protocol="roce"), UetTransport(), "--protocol roce"),
    (dict(FLOWS, protocol="uet", pfc=False, op="read"), UetTransport(), "--op read"),
])
def test_refusals_name_the_option(kw: dict[str, Any], tr: Transport, what: str):
    with pytest.raises(UsageError, match=what):
        WorkloadRun(Scenario(**kw), transport=tr)


def _emulate(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(["emulate", "--no-progress", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_runs_workloads_on_uet_and_ib(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]):
    """`roce emulate --protocol uet|ib --workload/--collective` run (no longer refused); an
    InfiniBand run's pcap is link type 247, a UET run's Ethernet."""
    for proto, linktype, extra in (("ib", 247, []), ("uet", 1, ["--pfc", "off", "--trim"])):
        pcap = tmp_path / f"{proto}.pcap"
        code, out, err = _emulate(["--protocol", proto, "--topology", "incast:2",
                                   "--collective", "allgather", "--size", "64K", "-T",
                                   "json", "-w", str(pcap), *extra], capsys)
        assert code == 0, err
        d = json.loads(out)
        assert d["data_verified"] and d["workload"]["completed_iterations"] == 1
        with open_capture(str(pcap)) as r:
            assert r.linktype == linktype
            assert sum(1 for _ in r) > 0
    code, out, err = _emulate(["--protocol", "uet", "--topology", "incast:2", "--pfc", "off",
                               "--workload", "websearch", "--duration", "20us"], capsys)
    assert code == 0, err
    assert "protocol=uet pdc=rud" in out and "slowdown" in out
    code, out, err = _emulate(["--protocol", "ib", "--collective", "allreduce",
                               "--pdc-mode", "rod"], capsys)
    assert code == 1 and "--pdc-mode: only with --protocol uet" in err
