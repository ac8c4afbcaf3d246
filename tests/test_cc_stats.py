"""``roce stats``: CNPs per QP, their rate and smallest gap (with the ``cnp_interval`` expert
warning), the share of data marked CE, and ``--timeline``; on a hand-made capture whose
numbers are known (tests/cc_helpers.py)."""

from __future__ import annotations

import json

import pytest
from cc_helpers import write_capture

from roce.cli import main

US = 1_000


def stats(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main(["stats", *argv, "-T", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def by_qp(doc) -> dict[int, dict]:
    return {r["qp"]: r for r in doc["congestion"]["flows"]}


def test_cnps_rate_gap_and_ce_fraction(tmp_path, capsys):
    cap = write_capture(tmp_path / "c.pcap")
    doc = stats(capsys, cap)
    rows = by_qp(doc)
    back, data = rows[0x11], rows[0x22]  # CNPs go to the sender's QP 0x11
    assert back["cnps"] == 3 and back["cnp_min_gap_ns"] == 10 * US
    # the flow to QP 0x11 runs from the first ACK (15 us) to the last (80 us)
    assert back["cnp_rate_per_s"] == pytest.approx(3 / 65e-6)
    assert back["ce_fraction"] is None  # it carries ACKs and CNPs, no data
    assert data["cnps"] == 0 and data["ecn_ce"] == 2 and data["data_packets"] == 7
    assert data["ce_fraction"] == pytest.approx(2 / 7)
    assert doc["congestion"]["gap_exact"] is True
    assert "cnp_interval" not in doc["expert"]["counts"]  # no --cnp-interval given


def test_cnp_interval_expert_warning(tmp_path, capsys):
    cap = write_capture(tmp_path / "c.pcap")
    doc = stats(capsys, cap, "--cnp-interval", "20us")
    assert doc["expert"]["counts"]["cnp_interval"] == 1
    (ev,) = [e for e in doc["expert"]["events"] if e["kind"] == "cnp_interval"]
    assert ev["severity"] == "warning" and ev["qp"] == 0x11
    assert ev["frame"] == 7 and ev["ts_ns"] % 1_000_000 == 35 * US  # the second CNP of the pair
    assert "10.000 us apart, below --cnp-interval 20.000 us" in ev["text"]
    assert "cnp_interval" not in stats(capsys, cap, "--cnp-interval", "10us")["expert"]["counts"]


def test_timeline_json_and_text(tmp_path, capsys):
    cap = write_capture(tmp_path / "c.pcap")
    doc = stats(capsys, cap, "--timeline", "20us")
    tl = doc["congestion"]["timeline"]
    assert tl["interval_ns"] == 20 * US and tl["qps"] == ["10.0.0.1 -> 10.0.0.2 QP 0x000022"]
    rows = {r["start_ns"] // US: r for r in tl["rows"]}
    label = tl["qps"][0]
    assert [rows[k]["qps"][label]["cnps"] for k in (0, 20, 40, 60)] == [0, 2, 0, 1]
    assert [rows[k]["qps"][label]["retransmissions"] for k in (0, 20, 40, 60)] == [0, 0, 0, 1]
    assert rows[40]["pauses"] == 1
    capsys.readouterr()
    assert main(["stats", cap, "--timeline", "20us"]) == 0
    text = capsys.readouterr().out
    assert "Congestion control: CNPs and ECN CE per QP" in text
    assert "smallest gap" in text and "10.000 us" in text
    assert "QP1 = 10.0.0.1 -> 10.0.0.2 QP 0x000022" in text
    lines = text[text.index("Timeline:"):].splitlines()
    assert any(ln.split()[:5] == ["60.0", "QP1", f"{rows[60]['qps'][label]['gbps']:.2f}",
                                  "1", "1"] for ln in lines)


@pytest.mark.parametrize("n,ipv6", [(4, False), (16, True), (64, False)])
def test_tables_have_a_row_per_qp_and_fit_100_columns(tmp_path, capsys, n, ipv6):
    """The congestion table has a row per flow, the timeline a row per interval and QP:
    neither grows wider with the QPs, and with long IPv6 names the rows are keyed (F1 ...)
    with the names spelt out above.  Every line before the expert list fits 100 columns."""
    from cc_helpers import congested

    from roce.pcapio import PcapWriter

    cap = tmp_path / "c.pcap"
    with PcapWriter(cap) as w:
        for data, ts in congested(n, ipv6):
            w.write(data, ts_ns=ts)
    flows = stats(capsys, str(cap))["congestion"]["flows"]
    assert len(flows) == 2 * n  # the data flows (CE) and the CNPs' flows
    assert main(["stats", str(cap), "--timeline", "200us"]) == 0
    text = capsys.readouterr().out
    tables = text[:text.index("Expert info")]
    assert max(len(line) for line in tables.splitlines()) <= 100
    cc = tables[tables.index("Congestion control"):tables.index("Timeline:")]
    rows = [ln for ln in cc.splitlines() if ln.strip().startswith(("F", "10."))
            and ln.split()[-1].endswith((")", "-"))]
    assert len(rows) == len(flows)
    if ipv6:  # keyed: F1 = <name>
        assert "  F1 = 2001:db8:1234:5678:9abc:def0:a:1 -> " in cc
    timeline = tables[tables.index("Timeline:"):].splitlines()
    assert sum(1 for ln in timeline if ln.split()[1:2] == ["QP1"]) == 6  # 1.2 ms / 200 us


def test_usage_errors(tmp_path, capsys):
    cap = write_capture(tmp_path / "c.pcap")
    for bad in (["--cnp-interval", "soon"], ["--timeline", "0"]):
        with pytest.raises(SystemExit) as exc:  # refused by the option's type (roce.options)
            main(["stats", cap, *bad])
        assert exc.value.code == 1 and bad[0] in capsys.readouterr().err
    assert main(["stats", "-", "--timeline", "10us"]) == 1
    assert "stdin" in capsys.readouterr().err
