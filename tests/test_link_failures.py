"""`--link-down A-B@T[,up@T2]` and `--detect-delay`: frames on a failed link are lost, routes
change only after the detection delay, RC recovers over the other paths, data verifies."""

from __future__ import annotations

from argparse import ArgumentTypeError

import pytest

from roce.cli import main
from roce.emu.net.failures import LinkDown, parse_spec
from roce.emu.net.runner import NetRun
from roce.emu.net.workrun import WorkloadRun
from roce.emu.scenario import Scenario
from roce.errors import UsageError

T_FAIL = 30_000
DETECT = 40_000


def _wire(run: NetRun, a: str, b: str):
    [w] = [w for w in run.net.wires if w.name.startswith(a + ":") and
           w.name.split("->")[1].startswith(b + ":")]
    return w


NET = """
[hosts.l1h1]
[hosts.l2h1]
[switches.leaf1]
[switches.leaf2]
[switches.spine1]
[switches.spine2]
[[links]]
a = "l1h1"
b = "leaf1"
[[links]]
a = "l2h1"
b = "leaf2"
[[links]]
a = "leaf1"
b = "spine1"
[[links]]
a = "leaf1"
b = "spine2"
[[links]]
a = "leaf2"
b = "spine1"
[[links]]
a = "leaf2"
b = "spine2"
[[traffic]]
src = "l1h1"
dst = "l2h1"
"""


@pytest.fixture
def net(tmp_path) -> str:
    p = tmp_path / "net.toml"
    p.write_text(NET)
    return str(p)


def _scenario(net: str, **kw) -> Scenario:
    # one flow l1h1 -> l2h1 over two spines; a short ACK timeout so recovery is quick
    return Scenario(topology_file=net, size=256 << 10, count=20, timeout=6, **kw)


def _used_spine(net: str) -> str:
    run = NetRun(_scenario(net))
    run.run()
    used = [s for s in ("spine1", "spine2") if _wire(run, "leaf1", s).hops]
    assert len(used) == 1  # ECMP: the flow's data takes one spine
    return used[0]


def test_flow_moves_to_the_other_spine_after_detection(net: str):
    used = _used_spine(net)
    other = "spine2" if used == "spine1" else "spine1"
    run = NetRun(_scenario(net, link_down=[LinkDown(f"leaf1-{used}", T_FAIL)],
                           detect_delay_ns=DETECT))
    seen: dict[str, int] = {}

    def look(now: int, what: str) -> None:
        seen[what] = _wire(run, "leaf1", other).hops
    run.net.at(T_FAIL + DETECT - 1, look, "before")  # the routes do not know yet
    s = run.run()
    assert s.data_verified and s.finished
    assert seen["before"] == 0  # nothing took the other path before detection
    assert _wire(run, "leaf1", other).hops > 0  # ... and then the flow did
    lost = _wire(run, "leaf1", used).stats.lost
    assert lost > 0 and s.retransmitted > 0
    lf = s.fabric["link_failures"]
    assert lf == {"failures": 1, "reroutes": 1, "lost_in_flight": lf["lost_in_flight"],
                  "down_at_end": [f"leaf1-{used}"]}
    # nothing on the dead link arrived after it failed: its frames from then on are lost
    assert _wire(run, used, "leaf2").hops <= _wire(run, "leaf1", used).hops - lost


def test_repair_brings_the_link_back(net: str):
    used = _used_spine(net)
    run = NetRun(_scenario(net, link_down=[LinkDown(f"{used}-leaf1", T_FAIL, 200_000)],
                           detect_delay_ns=DETECT))
    s = run.run()
    assert s.data_verified
    lf = s.fabric["link_failures"]
    assert lf["reroutes"] == 2 and lf["down_at_end"] == []


def test_p2p_link_failure_and_repair():
    """Two hosts cabled back to back: nothing to reroute, the link is dark for a while,
    the QP's timeout resends what was lost once it is back."""
    s = NetRun(Scenario(size=64 << 10, count=20, timeout=6,
                        link_down=[LinkDown("A-B", 10_000, 500_000)])).run()
    assert s.data_verified and s.timeouts >= 1
    assert s.fabric["link_failures"]["lost_in_flight"] >= 1
    assert s.virtual_ns > 500_000


def test_workload_on_a_fat_tree_survives_a_core_link_failure():
    sc = Scenario(topology="fattree:4", cdf="alistorage", load=0.5, duration_ns=100_000,
                  timeout=6, link_down=[LinkDown("a1.1-c1.1", 20_000)],
                  detect_delay_ns=10_000)
    s = WorkloadRun(sc).run()
    assert s.data_verified and s.workload["unfinished"] == 0
    assert s.fabric["link_lost"] > 0


@pytest.mark.parametrize("text,ok", [
    ("a-b@1ms", LinkDown("a-b", 1_000_000)),
    ("e1.1-a1.1@200us,up@1ms", LinkDown("e1.1-a1.1", 200_000, 1_000_000)),
    ("x-y-z@0", LinkDown("x-y-z", 0)),
])
def test_parse(text: str, ok: LinkDown):
    assert parse_spec(text) == ok


@pytest.mark.parametrize("text", ["a-b", "ab@1ms", "a-b@", "a-b@-1", "a-b@1ms,down@2ms",
                                  "a-b@2ms,up@1ms", "a-b@1ms,up@1ms", "-@1", "a-b@1e30s",
                                  "a-b@1ms,up"])
def test_parse_refuses(text: str):
    with pytest.raises(ArgumentTypeError):
        parse_spec(text)


def test_names_checked_against_the_topology(net: str):
    with pytest.raises(UsageError, match="no link leaf1-leaf2 in the topology"):
        NetRun(_scenario(net, link_down=[LinkDown("leaf1-leaf2", 1)]))
    with pytest.raises(UsageError, match="--detect-delay: only with --link-down"):
        NetRun(_scenario(net, detect_delay_ns=5))


@pytest.mark.parametrize("args,message", [
    (["--link-down", "A-C@1us"], "no link A-C"),
    (["--link-down", "A-B@2us,up@1us"], "--link-down"),
    (["--detect-delay", "1us"], "--detect-delay"),
])
def test_cli_refusals(args: list[str], message: str, capsys: pytest.CaptureFixture[str]):
    try:
        code = main(["emulate", "--no-progress", "--count", "1", "--size", "4K", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 1 and message in err, err
