"""``roce craft uet-...``: every PDS type and SES opcode crafted, written and decoded back; every
field option set and read back; each ``--bad-...`` frame raises its expert note and no other;
what does not apply is refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from roce.cli import _craft_uet as craft_uet
from roce.cli import main
from roce.families import registry
from roce.families.uet import build, uetfields
from roce.families.uet import codes as t
from roce.families.uet.checks import CHECKS
from roce.families.uet.layouts import READINGS


@pytest.fixture(autouse=True)
def _registry_rows() -> Any:
    """craft points registry rows at what it built (ports, readings): put them back."""
    reg = registry()
    saved = {table: dict(rows) for table, rows in reg.tables.items()}
    yield
    for table, rows in saved.items():
        reg.tables[table].clear()
        reg.tables[table].update(rows)


def _fields(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str,
            layout: str = "spec") -> dict[str, Any]:
    """Craft one frame with ``argv``, decode it with ``roce decode -T json``: its fields."""
    p = tmp_path / "c.pcap"
    assert main(["craft", *argv, "-q", "-w", str(p)]) == 0, capsys.readouterr().err
    extra = ["--uet-layout", layout] if layout != "spec" else []
    port = next((argv[i + 1] for i, a in enumerate(argv) if a == "--uet-port"), None)
    if port:
        extra += ["-d", f"udp.port=={port},uet"]
    assert main(["decode", *extra, "-T", "json", str(p)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("reading", ["spec", "ref-prov"])
def test_every_kind_crafts_clean_and_decodes(tmp_path: Path, reading: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    for name, (typ, opcode) in build.kinds(READINGS[reading]).items():
        f = _fields(tmp_path, capsys, name, "--payload-size", "16", "--uet-layout", reading,
                    layout=reading)
        assert f["uet.pds.type"] == typ, name
        if opcode is not None:
            assert f["uet.ses.std.opcode"] == opcode, name
        assert "uet.expert" not in f, (name, {k: v for k, v in f.items() if "expert" in k})
        assert f.get("malformed") is None and f["frame.len"] >= 60


# option -> the command lines to try, in turn, for a packet that has its field
_CANDIDATES: tuple[tuple[str, ...], ...] = (
    ("uet-write",), ("uet-write", "--syn"), ("uet-rud-cc-req",), ("uet-rudi-req",),
    ("uet-ack",), ("uet-ack-cc",), ("uet-ack-cc", "--cc-type", "credit"), ("uet-ack-ccx",),
    ("uet-nack",), ("uet-nack-ccx",), ("uet-ctrl",), ("uet-write", "--tss"),
    ("uet-atomic",), ("uet-atomic", "--amo-opcode", "cswap"), ("uet-rendezvous-send",),
    ("uet-deferrable-send",), ("uet-write", "--som"), ("uet-write", "--eom"),
    ("uet-write", "--ses", "medium", "--hd"), ("uet-write", "--ses", "small"),
    ("uet-ack", "--ses", "response"), ("uet-ack", "--ses", "response-data"),
    ("uet-ctrl", "--syn", "--uet-layout", "ref-prov"),
    ("uet-ack", "--uet-layout", "ref-prov"), ("uet-ack", "--probe", "--uet-layout", "ref-prov"),
    ("uet-write", "--tss", "--uet-layout", "ref-prov"),
    ("uet-rendezvous-send", "--uet-layout", "ref-prov"),
    ("uet-sync-atomic", "--uet-layout", "ref-prov"),
    ("uet-ack", "--ses", "small-response-data", "--uet-layout", "ref-prov"),
    ("uet-rudi-req", "--uet-layout", "ref-prov"), ("uet-nack-ccx", "--uet-layout", "ref-prov"),
)


def _value(row: craft_uet.Row) -> tuple[list[str], Any]:
    flag, names, _help, kind = row
    if kind == "flag":
        return [flag], True
    if kind == "signed":
        return [flag, "-3"], -3
    if isinstance(kind, dict):
        value = max(kind)
        return [flag, kind[value][0].lower().replace("_", "-")], value
    if kind == "ctrl":
        return [flag, "credit-req"], 8
    if kind == "opcode":
        return [flag, "tagged-send"], 9
    value = min(5, (1 << uetfields.table()[names[0]][1]) - 1)
    return [flag, str(value)], value


# what an option's value needs beside it to fit (a start PSN at or before the PSN)
_WITH = {"--start-psn": ["--pds-psn", "9"], "--clear-psn": ["--pds-psn", "9"]}


@pytest.mark.parametrize("row", craft_uet.OPTIONS, ids=[r[0] for r in craft_uet.OPTIONS])
def test_every_option_sets_its_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     row: craft_uet.Row) -> None:
    args, value = _value(row)
    args += _WITH.get(row[0], [])
    names = row[1]
    for base in _CANDIDATES:
        layout = base[base.index("--uet-layout") + 1] if "--uet-layout" in base else "spec"
        p = tmp_path / "o.pcap"
        if main(["craft", *base, *args, "-q", "-w", str(p)]) != 0:
            err = capsys.readouterr().err
            assert "no such field" in err or "has no" in err, err
            continue
        f = _fields(tmp_path, capsys, *base, *args, layout=layout)
        got = [f[n] for n in names if n in f]
        assert got and all(g == value for g in got), (base, names, got, value)
        return
    pytest.fail(f"no packet kind takes {row[0]}")


@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_each_bad_option_raises_its_note_and_no_other(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      check: Any) -> None:
    kinds = {"sack": ["uet-ack-cc", "uet-ack-ccx"], "window": ["uet-write", "uet-rod-cc-req"],
             "ses_length": ["uet-write", "uet-send --ses small", "uet-send --ses medium",
                            "uet-write --eom", "uet-ack --ses response-data"],
             "reserved": [n for n in build.kinds() if n.startswith("uet-")][:13],
             "unknown": ["uet-write", "uet-ack", "uet-nack", "uet-ctrl",
                         "uet-rudi-resp", "uet-write --ses small"]}[check.name]
    for kind in kinds:
        f = _fields(tmp_path, capsys, *kind.split(), "--payload-size", "8", check.option)
        notes = {c.field for c in CHECKS if c.field in f}
        assert notes == {check.field}, (kind, notes, f.get(check.field))
        assert f["uet.expert"] is True


def test_bad_options_refuse_packets_without_the_thing(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, text in ((["uet-ack", "--bad-sack"], "needs an ACK with a SACK bitmap"),
                       (["uet-ack", "--bad-window"], "needs a RUD or ROD request"),
                       (["uet-read", "--bad-ses-length"], "needs an SES length")):
        assert main(["craft", *argv]) == 1
        assert text in capsys.readouterr().err


@pytest.mark.parametrize("argv,text", [
    (["uet-write", "--dqpn", "5"], "UET packets take no --dqpn"),
    (["uet-write", "--bad-icrc"], "UET packets take no --bad-icrc"),
    (["uet-write", "--link", "ib"], "--link ib is native InfiniBand"),
    (["uet-wirte"], "did you mean uet-write?"),
    (["uet-ack", "--message-id", "1"], "--message-id: this ACK packet has no such field"),
    (["uet-ack", "--epsn", "1"], "--epsn: this ACK packet has no such field"),
    (["uet-write", "--field", "bth.psn=1"], "--field bth.psn: UET packets take the uet.*"),
    (["uet-write", "--field", "uet.pds.flags.m=1"], "--field uet.pds.flags.m: this RUD_REQ"),
    (["uet-write", "--src", "fd00::1"], "an IPv4 address is needed"),
    (["uet-sync-write"], "unknown UET packet"),
    (["uet-write", "--syn", "--start-psn", "5"], "--start-psn: uet.pds.psn_offset = "),
])
def test_refusals_name_the_option(capsys: pytest.CaptureFixture[str], argv: list[str],
                                  text: str) -> None:
    assert main(["craft", *argv]) == 1
    assert text in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--pds-psn", "0x100000000"], ["--clear-psn-offset", "40000"],
                                  ["--nack-code", "bogus"], ["--job-id", "0x1000000"],
                                  ["--psn-offset", "4096"]])
def test_values_are_checked_against_their_fields(capsys: pytest.CaptureFixture[str],
                                                 argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["craft", "uet-write", *argv])
    assert exc.value.code == 1 and argv[0] in capsys.readouterr().err


def test_count_steps_the_psn_and_carriage_options(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "n.pcap"
    assert main(["craft", "uet-write", "--pds-psn", "0xfffffffe", "--clear-psn", "0xfffffff0",
                 "--count", "3", "--psn-step", "2", "-q", "-w", str(p)]) == 0
    assert main(["decode", "-T", "fields", "-e", "uet.pds.psn", "-e", "uet.pds.clear_psn",
                 "-E", "raw=y", str(p)]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    # the PSN wraps at 2^32; the clear PSN keeps its offset (-14) from it
    assert rows == [["4294967294", "4294967280"], ["0", "4294967282"], ["2", "4294967284"]]
    f = _fields(tmp_path, capsys, "uet-nack", "--uet-native", "--entropy", "0x1234", "--ipv6",
                "--src", "fd00::9", "--vlan", "7", "--ecn", "ce", "--dscp", "46")
    assert (f["ipv6.nxt"], f["uet.pds.entropy"], f["ipv6.src"], f["vlan.id"]) == \
        (253, 0x1234, "fd00::9", 7)
    assert f["ipv6.tclass"] == (46 << 2) | 3
    f = _fields(tmp_path, capsys, "uet-ack", "--uet-port", "49150", "--entropy", "77")
    assert (f["udp.dstport"], f["udp.srcport"], f["uet.pds.type"]) == (49150, 77, t.ACK)


def test_lines_and_trees_print_as_decode_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["craft", "uet-write", "--pds-psn", "1005", "--spdcid", "0x12", "--dpdcid",
                 "0x34", "--message-id", "7", "--buffer-offset", "4096", "--payload-size",
                 "4096", "--som"]) == 0
    line = capsys.readouterr().out
    assert line.rstrip().endswith("UET 4194 RUD_REQ PDC 0x0012->0x0034 PSN=1005 SES WRITE msg=7 "
                                  "off=4096 len=4096 [SOM]")
    assert main(["craft", "uet-ack-cc", "--bad-sack", "-V"]) == 0
    tree = capsys.readouterr().out
    assert "[Expert Info (Warning): SACK bitmap contradicts the cumulative ACK:" in tree
