"""One summary model and one text form for every run: two hosts cabled back to back, a
switched network, and either end of a real link; and one place for every default."""

from __future__ import annotations

import argparse
import dataclasses
import json

from roce.cli import emulate as emu_cli
from roce.cli import main
from roce.emu import defaults
from roce.emu.net.runner import run_scenario
from roce.emu.real.remote import Endpoint
from roce.emu.scenario import NETWORK_FIELDS, REAL_FIELDS, Scenario, Summary


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    emu_cli.add_arguments(p)
    return p


def test_a_run_reports_only_the_parts_it_has():
    p2p = run_scenario(Scenario(size=4096, count=2)).as_dict()
    assert not set(p2p) & set(NETWORK_FIELDS + REAL_FIELDS)
    net = run_scenario(Scenario(size=4096, count=2, topology="incast:2")).as_dict()
    assert set(NETWORK_FIELDS) <= set(net) and not set(net) & set(REAL_FIELDS)
    real = Summary(scenario={}, role="listener").as_dict()
    assert set(REAL_FIELDS) <= set(real) and not set(real) & set(NETWORK_FIELDS)


def test_the_real_link_layout():
    """A real link's summary, either end, as the one formatter lays it out: the connector's
    verdict shows its own memory's and the listener's claim, which it cannot check."""
    sc = {"op": "write", "size": 4096, "count": 2, "qps": 1, "mtu": 1024, "depth": 16,
          "qp_type": "rc", "seed": 3, "recovery": "sr", "loss_rule": "rack"}
    fields = dict(scenario=sc, posted=2, completed={"IBV_WC_SUCCESS": 2}, bytes=8192,
                  packets=10, retransmitted=1, naks={"PSN sequence error": 1}, timeouts=1,
                  role="connector", transport="raw", interface="veth0",
                  local={"ip": "10.0.0.1", "mac": "02:00:0a:00:00:01", "qpns": [17]},
                  peer={"ip": "10.0.0.2", "mac": "02:00:0a:00:00:02", "qpns": [18]},
                  wall_ns=2_000_000, goodput_gbps=0.03, goodput_mbps=4.1, frames_received=9,
                  naks_sent={"remote access error": 1}, local_verified=True,
                  peer_verified=None, latency_us={"min": 1.0, "median": 2.0, "p99": 3.0,
                                                   "max": 4.0}, finished=False, messages=2)
    common = [
        "scenario      write size=4096 count=2 qps=1 mtu=1024 depth=16 qp=rc seed=3",
        "endpoints     10.0.0.1 (02:00:0a:00:00:01) QP 0x11 <-> 10.0.0.2 "
        "(02:00:0a:00:00:02) QP 0x12",
    ]
    middle = [
        "bytes         8192",
        "wall time     2.000 ms",
        "goodput       0.030 Gb/s (4.1 MB/s)",
        "packets       sent 10 (1 retransmitted), received 9 (0 duplicates)",
        "recovery      sr (rack): 0 selective, 1 go-back, 0 spurious; 0 out-of-order "
        "accepted, 0 selective NAKs",
        "NAKs          received PSN sequence error=1; sent remote access error=1; RNR NAKs "
        "received 0, sent 0; timeouts 1",
        "ICRC drops    0",
        "latency       post to completion: min 1.0 us, median 2.0 us, p99 3.0 us",
    ]
    end = ["CPU           0.000 s",
           "WARNING       the time limit ran out before every message completed"]
    connector = Summary(**fields)
    assert connector.text().splitlines() == [
        "role          connector over raw Ethernet on veth0", *common,
        "messages      posted 2, completed OK 2, errors: none", *middle,
        "data verified NO (here: yes; listener reports: no answer)", *end]
    for peer, shown in ((True, "yes"), (False, "NO")):
        s = Summary(**{**fields, "peer_verified": peer, "data_verified": peer})
        verdict = "yes" if peer else "NO"
        assert f"data verified {verdict} (here: yes; listener reports: {shown})" in s.text()
    listener = Summary(**{**fields, "role": "listener", "transport": "udp",
                          "latency_us": {}, "finished": True, "data_verified": True})
    assert listener.text().splitlines() == [
        "role          listener over UDP", *common,
        "messages      executed 2 of 2, receives completed OK 2, errors: none",
        *middle[:-1], "data verified yes", end[0]]
    assert set(REAL_FIELDS) <= set(connector.as_dict())


def test_the_options_defaults_are_the_scenario_defaults():
    args = _parser().parse_args([])
    sc = emu_cli.scenario(args)
    base = Scenario()
    for f in dataclasses.fields(Scenario):
        if f.name not in ("time_limit_ns", "cc"):
            assert getattr(sc, f.name) == getattr(base, f.name), f.name
    assert sc.cc == base.cc
    assert sc.timeout == defaults.ACK_TIMEOUT_SIMULATED
    real = emu_cli.scenario(args, real=True)
    assert real.timeout == defaults.ACK_TIMEOUT_REAL
    assert real.time_limit_ns == int(defaults.REAL_TIME_LIMIT_S * 1e9)
    assert emu_cli.scenario(_parser().parse_args(["--timeout", "9"]), real=True).timeout == 9
    # a real link's endpoint: the out-of-band port and wait, the UDP port
    ep = emu_cli.endpoint(_parser().parse_args(["--transport", "udp"]))
    assert ep == Endpoint(transport="udp")
    assert (ep.oob_port, ep.oob_timeout) == (defaults.OOB_PORT, defaults.OOB_TIMEOUT_S)


def test_the_text_counts_what_every_flow_was_to_deliver(capsys):
    assert main(["emulate", "--no-progress", "--topology", "dumbbell:3", "--size", "8K",
                 "--count", "2", "--qps", "2", "-T", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["delivered"] == 12 and len(s["flows"]) == 6
    assert "delivered     12 of 12 messages" in Summary(**{
        k: v for k, v in s.items() if k in {f.name for f in dataclasses.fields(Summary)}}
    ).text()
