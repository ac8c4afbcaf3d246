"""``roce stats`` on ERF-wrapped captures beyond the one-file report: ``--timeline`` (the
second pass) and several captures (one report each, ``--merge``) unwrap ERF records as the
one-file report does, for RoCE in ERF Ethernet records and native InfiniBand in ERF
INFINIBAND records."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from cc_helpers import frames as cc_frames

from roce.cli import main
from roce.families import craft, erf
from roce.locate import OK, walk
from roce.pcapio import PcapWriter

T0 = 1_700_000_000_000_000_000
IB_ARGS = SimpleNamespace(vl=0, sl=0, dlid=1, slid=2)


def _write(path: Path, items: list[tuple[bytes, int]], linktype: int) -> str:
    with PcapWriter(str(path), linktype=linktype) as w:
        for data, ts in items:
            w.write(data, ts_ns=T0 + ts)
    return str(path)


def _record(data: bytes, ts: int, rtype: int = erf.ERF_TYPE_INFINIBAND) -> bytes:
    """An ERF record whose header holds the frame's time (the time the reader takes)."""
    return erf.record(data, rtype=rtype, ts=erf.fixed_ts(T0 + ts))


def _captures(tmp_path: Path) -> dict[str, str]:
    """The congestion-control capture (tests/cc_helpers.py) as Ethernet, in ERF Ethernet
    records, as native InfiniBand (its RoCE frames) and in ERF INFINIBAND records."""
    eth = cc_frames()
    ib = [(craft.to_ib(d, IB_ARGS), ts) for d, ts in eth if walk(d).status == OK]
    return {
        "eth": _write(tmp_path / "eth.pcap", eth, 1),
        "erf_eth": _write(tmp_path / "erf_eth.pcap",
                          [(_record(d, ts, erf.ERF_TYPE_ETH), ts) for d, ts in eth], 197),
        "ib": _write(tmp_path / "ib.pcap", ib, 247),
        "erf_ib": _write(tmp_path / "erf_ib.pcap", [(_record(d, ts), ts) for d, ts in ib], 197),
    }


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    capsys.readouterr()
    assert main(["stats", *argv, "-T", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("plain,wrapped", [("eth", "erf_eth"), ("ib", "erf_ib")])
def test_timeline_unwraps_erf(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              plain: str, wrapped: str) -> None:
    caps = _captures(tmp_path)
    want = _json(capsys, caps[plain], "--timeline", "20us")["congestion"]["timeline"]
    assert want["qps"] and any(r["qps"] for r in want["rows"])  # a timeline worth comparing
    got = _json(capsys, caps[wrapped], "--timeline", "20us")["congestion"]["timeline"]
    assert got == want


def _flows(report: dict) -> list:
    return sorted(json.dumps(f, sort_keys=True) for f in report["flows"])


@pytest.mark.parametrize("plain,wrapped", [("eth", "erf_eth"), ("ib", "erf_ib")])
def test_several_captures_unwrap_erf(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     plain: str, wrapped: str) -> None:
    caps = _captures(tmp_path)
    alone = _json(capsys, caps[wrapped])
    assert alone["flows"]  # the one-file report reads ERF (the reference here)
    doc = _json(capsys, caps[plain], caps[wrapped], "-j", "1")
    files = {Path(f["capture"]["file"]).name: f for f in doc["files"]}
    assert _flows(files[f"{wrapped}.pcap"]) == _flows(alone) == _flows(files[f"{plain}.pcap"])
    key = "ib_packets" if plain == "ib" else "roce_packets"  # the packets of the link
    assert doc["total"]["totals"][key] == 2 * alone["totals"][key]
    merged = _json(capsys, "--merge", caps[plain], caps[wrapped])
    twice = _json(capsys, "--merge", caps[plain], caps[plain])
    assert merged["totals"][key] == twice["totals"][key] > 0
    assert _flows(merged) == _flows(twice)
