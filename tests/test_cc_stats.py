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
    assert "smallest CNP gap" in text and "10.000 us" in text
    assert "QP1 = 10.0.0.1 -> 10.0.0.2 QP 0x000022" in text
    lines = text[text.index("Timeline:"):].splitlines()
    assert any(ln.split()[:4] == ["60.0", f"{rows[60]['qps'][label]['gbps']:.2f}", "1", "1"]
               for ln in lines)


def test_usage_errors(tmp_path, capsys):
    cap = write_capture(tmp_path / "c.pcap")
    for bad in (["--cnp-interval", "soon"], ["--timeline", "0"]):
        with pytest.raises(SystemExit) as exc:  # refused by the option's type (roce.options)
            main(["stats", cap, *bad])
        assert exc.value.code == 1 and bad[0] in capsys.readouterr().err
    assert main(["stats", "-", "--timeline", "10us"]) == 1
    assert "stdin" in capsys.readouterr().err
