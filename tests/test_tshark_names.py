"""tshark as the oracle of field names and their text, over every family: ``-T fields``
prints each field that Wireshark 4.0 knows as tshark prints it (hex where its display base is
hex, with its field type's digits), and ``-Y`` takes the same names ``-e`` takes.

The frames: native InfiniBand (LRH, LRH + GRH, UD with its DETH, an SMP, an SA MAD, each CM
message, IPoIB) as ERF records, which tshark 4.0 reads (it does not read pcap link type 247),
and MAC Control (PAUSE, PFC) on Ethernet."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
from tshark_oracle import TSHARK, fields_command

import roce
from roce import macc
from roce.cli import main
from roce.families import craft, erf
from roce.families.ib import mad as ibmad
from roce.families.ib import native as ib
from roce.locate import walk
from roce.pcapio import PcapWriter

pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")

GRH = bytes([0x60, 0x12, 0x34, 0x56, 0, 0, 0x1B, 64]) + bytes(range(32))
CM_VALUES = {"localcommid": 0x77, "remotecommid": 0x99, "localqpn": 0x11, "startpsn": 100,
             "pppmtu": 5, "serviceid": 0x106, "localcaguid": 0xABCDEF, "localqkey": 0x1234,
             "responderres": 3, "initdepth": 4, "remoteresptout": 20, "e2eflowctrl": 1,
             "localresptout": 19, "retrcount": 7, "pkey": 0xFFFF, "rnrretrcount": 7,
             "maxcmretr": 15, "prim_locallid": 2, "prim_remotelid": 1, "respres": 3,
             "tgtackdelay": 15, "reason": 28, "msgrejected": 1, "msgmraed": 1,
             "servicetimeout": 10, "remoteqpneecn": 0x22}
# The names the issue found printed in decimal where tshark prints hex: each is compared.
HEX_NAMED = ("infiniband.variant.crc", "infiniband.mad.attributeid",
             "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn", "macc.opcode",
             "macc.cbfc.enbv")


def _transport(code: str, payload: bytes = b"", **kw: object) -> bytes:
    raw = roce.craft(code, payload or None, **kw).to_bytes()
    w = walk(raw)
    return craft.ib_transport(raw, w.bth_off, w.icrc_off)


def _ib_frames() -> list[bytes]:
    out = [ib.build(_transport("RC_SEND_ONLY", b"abcdefg", dqpn=0x123, psn=77), vl=3, sl=5,
                    dlid=0x1234, slid=0x22),
           ib.build(_transport("RC_RDMA_WRITE_ONLY", b"abcd", dqpn=0x123, psn=78), lnh=3,
                    grh=GRH),
           ib.build(_transport("UD_SEND_ONLY", b"abcd", dqpn=0x48, sqpn=0x49, qkey=0x1234))]
    for cls, method, attr, qp in ((ibmad.MGMT_SUBN_LID, 0x01, 0x20, 0),
                                  (ibmad.MGMT_SUBN_ADM, 0x81, 0x35, 1)):
        mad = ibmad.build_mad(cls, method, attr, tid=0x1122334455)
        out.append(ib.build(_transport("UD_SEND_ONLY", mad, dqpn=qp, sqpn=qp,
                                       qkey=0x80010000), vl=15 if qp == 0 else 0))
    for attr in ibmad.CM_MESSAGES:
        _key, layout, _dec, _enc = ibmad.CM_CODECS[attr]
        values = {f.name: CM_VALUES.get(f.name, 0) for f in layout.fields}
        out.append(ib.build(_transport("UD_SEND_ONLY", ibmad.build_cm(attr, values), dqpn=1,
                                       sqpn=1, qkey=0x80010000)))
    ip = bytes([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]) + bytes(8)
    out.append(ib.build(_transport("UD_SEND_ONLY", struct.pack("!HH", 0x0800, 0) + ip,
                                   dqpn=0x48, sqpn=0x49)))
    return out


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("names")
    ibp, maccp = d / "ib_erf.pcap", d / "macc.pcap"
    with PcapWriter(ibp, linktype=197) as w:
        for n, f in enumerate(_ib_frames()):
            w.write(erf.record(f, ts=n << 20), ts_ns=n * 1000)
    src = bytes.fromhex("020000000001")
    with PcapWriter(maccp) as w:
        w.write(macc.build_pfc(src, {3: 0xFFFF, 5: 0}), ts_ns=0)
        w.write(macc.build_pause(src, 0x1234), ts_ns=1000)
    return {"infiniband.": ibp, "macc.": maccp}


@pytest.fixture(scope="module")
def wireshark_fields() -> dict[str, str]:
    """Every field tshark 4.0 knows: name -> type (``tshark -G fields``)."""
    out = subprocess.run([TSHARK, "-G", "fields"], capture_output=True, text=True,
                         check=True).stdout
    return {row[2]: row[3] for row in (line.split("\t") for line in out.splitlines())
            if row[0] == "F" and len(row) > 3}


def _ours(capsys: pytest.CaptureFixture[str], path: Path, names: list[str]) -> list[list[str]]:
    argv = ["decode", str(path), "-T", "fields"]
    for n in names:
        argv += ["-e", n]
    assert main(argv) == 0
    return [line.split("\t") for line in capsys.readouterr().out.splitlines()]


def _theirs(path: Path, names: list[str]) -> list[list[str]]:
    res = subprocess.run(fields_command(path, names), capture_output=True, text=True,
                         timeout=120, check=True)
    # a one-field header and its field share a name in tshark: the value is shown twice
    return [[",".join(dict.fromkeys(v.split(","))) for v in line.split("\t")]
            for line in res.stdout.splitlines()]


def test_every_family_field_prints_as_tshark_prints_it(
        captures: dict[str, Path], wireshark_fields: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every integer or boolean field tshark knows under ``infiniband.`` and ``macc.`` that
    ``-e`` takes prints tshark's text, frame by frame."""
    from roce.decoder.decode import known_fields
    from roce.decoder.names import resolver

    known, keys = known_fields(), resolver()
    compared: set[str] = set()
    for prefix, path in captures.items():
        names = sorted(n for n, t in wireshark_fields.items() if n.startswith(prefix)
                       and t.startswith(("FT_UINT", "FT_INT", "FT_BOOLEAN"))
                       and all(k in known for k in keys(n)))
        ours, theirs = _ours(capsys, path, names), _theirs(path, names)
        assert len(ours) == len(theirs) > 0
        for i, name in enumerate(names):
            got, want = [r[i] for r in ours], [r[i] for r in theirs]
            assert got == want, name
            if any(want):
                compared.add(name)
    assert set(HEX_NAMED) <= compared
    assert len(compared) > 80  # LRH, GRH, BTH, DETH, MAD, every CM message, MAC Control


@pytest.mark.parametrize("expr", [
    "infiniband.bth.psn == 77", "infiniband.variant.crc", "infiniband.lrh.dlid == 0x1234",
    "infiniband.cm.req.localqpn == 0x11", "infiniband.mad.attributeid == 0x0010",
    "infiniband.cm.req", "infiniband.deth.srcqp == 0x49", "infiniband.reth.va == 0",
    "infiniband.cm.drsp.localcommid", "infiniband.cm.rej.msgrej == 1",
    "infiniband.invariant.crc and not infiniband.grh", "infiniband.mad.method in {0x81, 3}",
])
def test_display_filter_takes_wireshark_names(expr: str, captures: dict[str, Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``-Y`` takes the names ``-e`` takes and selects the frames tshark selects."""
    path = captures["infiniband."]
    cmd = fields_command(path, ["frame.number"])
    want = subprocess.run([*cmd, "-Y", expr], capture_output=True, text=True, timeout=120,
                          check=True).stdout.split()
    assert main(["decode", str(path), "-Y", expr, "-T", "fields", "-e", "frame.number"]) == 0
    assert capsys.readouterr().out.split() == want
    assert want


def test_display_filter_names_an_unknown_wireshark_field(
        captures: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", str(captures["infiniband."]), "-Y", "infiniband.bth.nosuch"]) == 1
    assert "unknown field 'infiniband.bth.nosuch'" in capsys.readouterr().err
