"""The flow rules' one definition (roce.analysis.flowrules) and what follows from it: folded
retransmission bursts, goodput against throughput (also against the emulator's own figure),
the compiled engine raising exactly the event kinds the table has, and the flow modules'
imports (no reaching into another module's private names)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_stats import (
    ENGINES,
    QA,
    ack,
    flow,
    lines,
    read_req,
    read_resp,
    write_capture,
    write_only,
)

from roce.analysis import flowrules as R
from roce.analysis.cflows import AVAILABLE, engine_config
from roce.analysis.flows import analyse
from roce.headers import AETH_ACK, AETH_NAK, AETH_RNR_NAK, syndrome
from roce.pcapio import open_capture

ROOT = Path(__file__).resolve().parent.parent
ANALYSIS = ROOT / "roce" / "analysis"


@pytest.fixture(params=ENGINES)
def run(request: pytest.FixtureRequest, tmp_path: Path):
    def go(frames: list[bytes], **kw: object):
        path = write_capture(tmp_path / "t.pcap", frames)
        with open_capture(path) as rd:
            return analyse(rd, engine=request.param, **kw)

    return go


# -- retransmission bursts ---------------------------------------------------------------------


def test_consecutive_retransmissions_fold_into_one_line_per_burst(run) -> None:
    # 0..9 sent; go back to 3 and resend 3..9 (a burst), 10, 11 new; then 10, 11 again
    # (a second burst), and a repeat of 5 alone (a third line, not contiguous).
    psns = [*range(10), *range(3, 10), 10, 11, 10, 11, 5]
    r = run([write_only(p) for p in psns])
    assert lines(r) == [
        "#11-#17 QP 0x000011 retransmission of PSN 0x000003..0x000009, 7 packets",
        "#20-#21 QP 0x000011 retransmission of PSN 0x00000a..0x00000b, 2 packets",
        "#22 QP 0x000011 retransmission of PSN 0x000005",
    ]
    assert [(e.count, e.last) for e in r.events] == [(7, 17), (2, 21), (1, 0)]
    # Exact counts stay: in the expert counts, the totals and the tracker.
    assert r.event_counts == {"retransmission": 10}
    assert r.event_lines == {"retransmission": 3}
    assert r.totals["retransmissions"] == 10 == flow(r).req.counts()["duplicates"]
    d = r.to_dict()["expert"]
    assert d["counts"] == {"retransmission": 10} and d["lines"] == {"retransmission": 3}
    assert d["by_severity"]["warning"] == 10
    assert d["events"][0]["count"] == 7 and d["events"][0]["last_frame"] == 17
    assert d["events"][2]["count"] == 1 and d["events"][2]["last_frame"] == 22


def test_a_burst_ends_at_any_other_packet_of_its_tracker(run) -> None:
    # 3, 4 resent, then a new PSN 6 (a gap: 5 missing), then 4 again: two bursts around it.
    r = run([write_only(p) for p in (0, 1, 2, 3, 4, 3, 4, 6, 4)])
    assert lines(r) == [
        "#6-#7 QP 0x000011 retransmission of PSN 0x000003..0x000004, 2 packets",
        "#8 QP 0x000011 PSN gap: expected 0x000005, got 0x000006 (1 missing)",
        "#9 QP 0x000011 retransmission of PSN 0x000004",
    ]


def test_packets_of_other_flows_do_not_end_a_burst(run) -> None:
    # The ACKs between the resent packets go the other way: one burst.
    frames = [write_only(p) for p in range(4)]
    frames += [write_only(1), ack(1), write_only(2), ack(2), write_only(3)]
    r = run(frames)
    assert lines(r) == ["#5-#9 QP 0x000011 retransmission of PSN 0x000001..0x000003, "
                        "3 packets"]


def test_response_retransmissions_fold_and_say_response(run) -> None:
    resp = read_resp(10, 3000)  # PSNs 10, 11, 12
    r = run([read_req(10, 3000), *resp, *resp])
    assert lines(r) == ["#5-#7 QP 0x000012 retransmission of response PSN "
                        "0x00000a..0x00000c, 3 packets"]
    assert flow(r, QA).rsp.counts()["duplicates"] == 3


def test_the_line_cap_counts_lines_not_packets(run) -> None:
    psns = [*range(6), *range(0, 6), *range(2, 6)]  # two bursts of 6 and 4
    r = run([write_only(p) for p in psns], max_events=1)
    assert lines(r) == ["#7-#12 QP 0x000011 retransmission of PSN 0x000000..0x000005, "
                        "6 packets"]
    assert r.event_counts == {"retransmission": 10} and r.event_lines == {"retransmission": 2}


# -- goodput and throughput ------------------------------------------------------------------


def test_goodput_counts_each_psn_once_throughput_every_byte(run) -> None:
    # Ten 100-byte WRITEs, 4..9 resent once: 1000 unique bytes, 1600 carried.
    r = run([write_only(p) for p in [*range(10), *range(4, 10)]])
    f = flow(r)
    assert (f.payload, f.unique_payload, f.req_payload) == (1600, 1000, 1600)
    span = 15 * 1000  # frames 1..16, 1 us apart
    assert f.goodput == pytest.approx(1000 * 1e9 / span)
    assert f.throughput == pytest.approx(1600 * 1e9 / span)
    t = r.totals
    assert (t["payload_bytes"], t["unique_payload_bytes"]) == (1600, 1000)
    assert t["goodput_Bps"] == pytest.approx(1000 * 1e9 / span)
    assert t["throughput_Bps"] == pytest.approx(1600 * 1e9 / span)
    d = r.to_dict()["flows"][0]
    assert d["unique_payload_bytes"] == 1000 and d["goodput_Bps"] == f.goodput
    assert d["throughput_Bps"] == f.throughput


def test_goodput_counts_read_response_data_once(run) -> None:
    resp = read_resp(10, 3000)
    r = run([read_req(10, 3000), *resp, resp[1], resp[2]])  # Middle and Last resent
    back = flow(r, QA)
    assert (back.payload, back.unique_payload) == (3000 + 1024 + 952, 3000)
    assert back.goodput is not None and back.throughput > back.goodput


def test_stats_text_shows_goodput_and_throughput(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from roce.cli import main as cli_main

    path = write_capture(tmp_path / "g.pcap", [write_only(p) for p in [*range(10), 8, 9]])
    assert cli_main(["stats", str(path)]) == 0
    out = capsys.readouterr().out
    # 1000 unique bytes, 1200 carried, over 11 us.
    assert re.search(r"goodput\s+90\.91 MB/s \(727\.27 Mbit/s\)", out)
    assert re.search(r"throughput\s+109\.09 MB/s \(872\.73 Mbit/s\)", out)
    assert re.search(r"unique payload bytes\s+1,000\n", out)
    assert "#11-#12 QP 0x000011 retransmission of PSN 0x000008..0x000009, 2 packets" in out


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roce", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=True)


def test_stats_goodput_matches_the_emulators(tmp_path: Path) -> None:
    """The emulator's verified goodput and `roce stats`' goodput of the capture it wrote agree
    within 1%, although about half the data packets on the wire are retransmissions."""
    emu = json.loads(_cli("emulate", "--op", "write", "--size", "1M", "--count", "20",
                          "--loss", "0.01", "--seed", "7", "-w", "run.pcap", "-T", "json",
                          "--no-progress", cwd=tmp_path).stdout)
    assert emu["data_verified"] and emu["retransmitted"] > 1000
    doc = json.loads(_cli("stats", "-T", "json", "run.pcap", cwd=tmp_path).stdout)
    t = doc["totals"]
    assert t["unique_payload_bytes"] == emu["bytes"] == 20 * (1 << 20)
    goodput_gbps = t["goodput_Bps"] * 8 / 1e9
    assert goodput_gbps == pytest.approx(emu["goodput_gbps"], rel=0.01)
    assert t["throughput_Bps"] > 1.5 * t["goodput_Bps"]  # retransmissions carried too
    # One line per burst, exact counts beside them; the reference agrees line for line.
    ex = doc["expert"]
    assert ex["counts"]["retransmission"] == t["retransmissions"] > 1000
    assert ex["lines"]["retransmission"] < ex["counts"]["retransmission"] / 10
    with open_capture(tmp_path / "run.pcap") as rd:
        ref = analyse(rd, engine="reference").to_dict()
    assert ref["totals"] == t and ref["expert"] == ex


# -- one definition ----------------------------------------------------------------------------


def test_syndrome_and_nak_rules_come_from_the_headers_helpers() -> None:
    assert R.SYNDROMES[syndrome(AETH_ACK, 31)] == (R.SYN_ACK, 31)
    assert R.SYNDROMES[syndrome(AETH_RNR_NAK, 14)] == (R.SYN_RNR, 14)
    assert R.SYNDROMES[syndrome(AETH_NAK, 2)] == (R.SYN_NAK, 2)
    assert R.SYNDROMES[syndrome(2, 5)] == (R.SYN_RESERVED, 5)
    assert R.nak_event(0) == "nak_sequence" and R.nak_event(3) == "nak_fatal"
    assert R.SYNDROMES[0x80 | syndrome(AETH_ACK, 1)] == (R.SYN_ACK, 1)  # bit 7 reserved


def _raised(source: str) -> set[str]:
    """Event kinds a source raises by name: ``_event(.., "kind"`` and ``_stored("kind"``."""
    return set(re.findall(r'_(?:event|stored)\([^()"]*"(\w+)"', source))


def test_both_engines_raise_exactly_the_kinds_the_table_has() -> None:
    table = {e.name for e in R.EVENTS if e.engine}
    naks = {R.nak_event(c) for c in range(R.SYNDROME_VALUES)}  # raised by the NAK rule
    ref = _raised((ANALYSIS / "flowref.py").read_text()) | naks
    compiled = _raised((ANALYSIS / "_flowengine.pxi").read_text()) | naks
    assert ref == table and compiled == table


def test_the_compiled_engine_is_handed_every_row() -> None:
    cfg = engine_config()
    assert [e[0] for e in cfg["events"]] == [e.name for e in R.EVENTS]
    assert cfg["counters"] == [c.name for c in R.COUNTERS]
    for name, _, _, _, counter in cfg["events"]:
        want = R.EVENT_BY_NAME[name].counter
        assert (cfg["counters"][counter] if counter >= 0 else None) == want


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
def test_the_compiled_engine_refuses_a_table_it_was_not_built_for() -> None:
    from roce import fast

    cfg = engine_config()
    bad = dict(cfg, events=cfg["events"] * 3)  # more kinds than the engine has room for
    with pytest.raises(ValueError, match="more event kinds"):
        fast._ext.configure_flows(bad)
    bad = dict(cfg, syndrome_rules=(1, 0, 2, 3))
    with pytest.raises(ValueError, match="numbering"):
        fast._ext.configure_flows(bad)
    fast._ext.configure_flows(cfg)  # leave it as it was
    assert analyse([write_only(0), write_only(0)]).event_counts == {"retransmission": 1}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module of roce.analysis imported, names taken from it) for each import."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("roce.analysis."):
                out.append((node.module.rpartition(".")[2], [a.name for a in node.names]))
            elif node.module == "roce.analysis":
                out += [(a.name, []) for a in node.names]
    return out


FLOW_MODULES = ("flows", "flowrules", "flowmodel", "flowref", "flowpair", "flowinput",
                "cflows")


def test_flow_modules_reach_no_private_name() -> None:
    """(Cycles are tests/test_imports.py's: it walks every module.)"""
    graph = {}
    for name in FLOW_MODULES:
        deps = _imports(ANALYSIS / f"{name}.py")
        graph[name] = {m for m, _ in deps if m in FLOW_MODULES}
        private = [(m, n) for m, names in deps for n in names if n.startswith("_")]
        assert private == [], (name, private)
        src = (ANALYSIS / f"{name}.py").read_text()
        assert not re.search(r"\b(?:fl|flows|flowref|flowmodel|R)\._[a-z]", src), name
    assert "flows" not in graph["cflows"]  # the compiled engine does not lean on the facade


def test_totals_of_several_captures_keep_goodput_and_throughput_apart() -> None:
    from roce.cli._fleet import sum_totals

    one = analyse([write_only(p) for p in [*range(10), *range(4, 10)]]).totals
    two = dict(one, first_ns=one["last_ns"], last_ns=one["last_ns"] + 10_000)
    both = sum_totals([one, two])
    assert (both["unique_payload_bytes"], both["payload_bytes"]) == (2000, 3200)
    span = both["last_ns"] - both["first_ns"]
    assert both["goodput_Bps"] == pytest.approx(2000 * 1e9 / span)
    assert both["throughput_Bps"] == pytest.approx(3200 * 1e9 / span)
