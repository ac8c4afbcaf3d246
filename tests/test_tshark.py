"""tshark as an oracle: our crafted frames, decoded by Wireshark 4.0, field by field."""

from __future__ import annotations

import subprocess

import pytest
from tshark_oracle import FIELDS, TSHARK, TSHARK_CODES, fields_command, our_key, tshark_value

import roce
from roce import OPCODES, Transport
from roce.headers import LAYOUTS
from roce.pcapio import PcapWriter

pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")

SYNDROMES = [0x1F, 0x05, 0x2C, 0x60, 0x61, 0x62, 0x63, 0x00]
IETH_FIELD = LAYOUTS["ieth"].fields[0].name  # IETH's one field, whatever it is called


def _frames() -> list[tuple[roce.Packet, str]]:
    out = []
    i = 0
    for variant in ("ipv4", "ipv6", "vlan"):
        kw = {"ipv4": {}, "ipv6": {"ipv6": True}, "vlan": {"vlan": 0x123, "vlan_priority": 5}}
        for code in TSHARK_CODES:
            op = OPCODES[code]
            i += 1
            n = (i * 7) % 23 + 1 if op.payload else 0  # odd and even sizes: every PadCnt
            payload = bytes((i + k * 13) & 0xFF for k in range(n))
            values = {"psn": (0x10000 + i * 0x3579B) & 0xFFFFFF, "dqpn": 0x100 + i * 0x10101,
                      "pkey": 0x8000 | (i * 37 & 0x7FFF), "se": bool(i & 1), "m": bool(i & 2),
                      "a": bool(i & 4)}
            if "reth" in op.headers:
                values.update({"reth.va": 0x1122334455660000 + i, "reth.r_key": 0xA0000000 + i,
                               "reth.dmalen": 0x1000 * i + n})
            if "aeth" in op.headers:
                values.update({"syndrome": SYNDROMES[i % len(SYNDROMES)], "msn": 0x20000 + i})
            if "atomiceth" in op.headers:
                values.update({"atomiceth.va": 0x7FFF000000000008 + 8 * i,
                               "atomiceth.r_key": 0x5000 + i,
                               "swap": 0xFEDCBA9876543210 - i, "compare": 0x0123456789 + i})
            if "atomicacketh" in op.headers:
                values["orig"] = 0x8877665544332211 + i
            if "immdt" in op.headers:
                values["imm"] = 0xC0DE0000 + i
            if "ieth" in op.headers:
                values[f"ieth.{IETH_FIELD}"] = 0x1EE70000 + i
            out.append((roce.craft(code, payload, **kw[variant], **values), variant))
    return out


def _ours(p: roce.Packet) -> dict:
    """Our flat field view."""
    return p.fields()


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    frames = _frames()
    path = tmp_path_factory.mktemp("tshark") / "roce.pcap"
    with PcapWriter(path, linktype=1) as w:
        for i, (p, _) in enumerate(frames):
            w.write(p.to_bytes(), ts_ns=1_700_000_000_000_000_000 + i * 1000)
    cmd = fields_command(path, ["frame.number", *FIELDS, "_ws.col.Info"])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = [line.split("\t") for line in res.stdout.splitlines()]
    return frames, rows


def test_one_row_per_frame(decoded):
    frames, rows = decoded
    assert len(rows) == len(frames) == 3 * len(TSHARK_CODES)
    assert [int(r[0]) for r in rows] == list(range(1, len(frames) + 1))
    assert all(len(r) == len(FIELDS) + 2 for r in rows)


def test_fields_match(decoded):
    frames, rows = decoded
    names = list(FIELDS)
    for (p, variant), row in zip(frames, rows):
        q = roce.parse(p.to_bytes())
        ours = _ours(q)
        op = q.opcode
        for i, ws_name in enumerate(names):
            want = ours.get(our_key(ws_name, op.headers))
            if isinstance(want, bool):
                want = int(want)
            got = tshark_value(ws_name, row[i + 1])
            assert got == want, (hex(op.code), variant, ws_name, row[i + 1], want)


def test_values_are_not_trivial(decoded):
    """Guard the oracle: the frames carry distinct, non-default values tshark had to find."""
    frames, rows = decoded
    col = {name: i + 1 for i, name in enumerate(FIELDS)}
    for name in ("infiniband.bth.psn", "infiniband.bth.destqp", "infiniband.invariant.crc",
                 "infiniband.bth.p_key"):
        values = [r[col[name]] for r in rows]
        assert len(set(values)) == len(values), name
    for name in ("infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.a"):
        assert {r[col[name]] for r in rows} == {"0", "1"}, name
    assert {r[col["infiniband.bth.padcnt"]] for r in rows} == {"0", "1", "2", "3"}
    for name in ("infiniband.reth.va", "infiniband.aeth.syndrome", "infiniband.immdt",
                 "infiniband.ieth", "infiniband.atomiceth.swapdt",
                 "infiniband.atomicacketh.origremdt"):
        assert sum(1 for r in rows if r[col[name]]) >= 3, name


def test_info_column_starts_with_our_name(decoded):
    frames, rows = decoded
    for (p, variant), row in zip(frames, rows):
        info, op = row[-1], p.opcode
        assert info.startswith(op.short_name), (hex(op.code), variant, info)
        if op.transport is Transport.RC:
            qp = f"QP=0x{p.headers['bth']['destqp']:06x}"
            assert info.startswith(f"{op.short_name} {qp}"), (hex(op.code), info)


# -- roce decode -T fields prints what tshark prints -------------------------------------------

# Fields named alike in both tools, outside the InfiniBand ones (tshark_oracle.FIELDS).
SAME_NAMES = ["eth.type", "ip.id", "ip.checksum", "ip.ttl", "udp.srcport", "udp.checksum",
              "ipv6.flow", "ipv6.plen", "vlan.id", "vlan.etype"]


def test_fields_text_equals_tshark(decoded, tmp_path, capsys):
    """``-T fields`` follows tshark's display per field, text for text: hex fields in hex
    with their width (``bth.destqp`` ``0x000101``), decimal ones in decimal; ``-E raw=y``
    gives every integer in decimal."""
    from roce.cli import main

    frames, _rows = decoded
    path = tmp_path / "roce.pcap"
    with PcapWriter(path, linktype=1) as w:
        for i, (p, _) in enumerate(frames):
            w.write(p.to_bytes(), ts_ns=1_700_000_000_000_000_000 + i * 1000)
    names = [*FIELDS, *SAME_NAMES]
    res = subprocess.run(fields_command(path, names), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    # tshark shows a one-field header (ImmDt, IETH) and its field under one name: twice
    theirs = [[",".join(dict.fromkeys(v.split(","))) for v in line.split("\t")]
              for line in res.stdout.splitlines()]
    argv = ["decode", str(path), "-T", "fields"]
    for n in names:
        argv += ["-e", n]
    assert main(argv) == 0
    ours = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(ours) == len(theirs) == len(frames)
    for row, want in zip(ours, theirs):
        assert row == want
    hexed = {n for n, v in zip(names, theirs[0]) if v.startswith("0x")}
    assert {"infiniband.bth.destqp", "infiniband.invariant.crc", "eth.type"} <= hexed
    assert main([*argv, "-E", "raw=y"]) == 0
    raw = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    for row, want in zip(raw, theirs):
        for name, mine, text in zip(names, row, want):
            if text.startswith("0x"):
                assert mine == str(int(text, 16)), name
            else:
                assert mine == text or name in ("infiniband.immdt", "infiniband.ieth"), name
