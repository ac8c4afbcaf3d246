"""InfiniBand flow-control packets (roce.families.ib.flowcontrol): their 6-byte layout and LPCRC,
read back by roce and by tshark (ERF type 25 records) with the same field values."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tshark_oracle import TSHARK, fields_command

from roce.cli import main
from roce.errors import DecodeError
from roce.families import erf
from roce.families.ib import flowcontrol as link
from roce.families.ib.crc import vcrc
from roce.pcapio import PcapWriter

NAMES = ["infiniband_link.op", "infiniband_link.fctbs", "infiniband_link.vl",
         "infiniband_link.fccl", "infiniband_link.lpcrc"]
PACKETS = [(0, 0, 0, 0), (1, 4095, 14, 4095), (0, 4100, 3, 77), (0, 1234, 7, 2345),
           (1, 0, 1, 1)]


@given(st.integers(0, 1), st.integers(0, 10**6), st.integers(0, 14), st.integers(0, 10**6))
def test_build_then_decode(op: int, fctbs: int, vl: int, fccl: int) -> None:
    p = link.build(vl, fctbs, fccl, op)
    assert len(p) == link.SIZE == 6
    f = link.decode(p)
    assert (f["infiniband_link.op"], f["infiniband_link.fctbs"], f["infiniband_link.vl"],
            f["infiniband_link.fccl"]) == (op, fctbs % 4096, vl, fccl % 4096)
    # the bit layout IBA 7.9.4 draws: Op 4 | FCTBS 12 | VL 4 | FCCL 12 | LPCRC 16
    word = int.from_bytes(p[:4], "big")
    assert word == op << 28 | (fctbs % 4096) << 16 | vl << 12 | fccl % 4096
    assert f["infiniband_link.lpcrc"] == vcrc(p[:4]) and link.valid(p)
    assert erf.decode_link(p, 0) == f  # the ERF family reads the same layout


def test_lpcrc_catches_a_flipped_bit() -> None:
    p = bytearray(link.build(2, 100, 200))
    for bit in range(48):
        q = bytearray(p)
        q[bit // 8] ^= 0x80 >> bit % 8
        assert not link.valid(bytes(q)), bit


def test_truncated_is_a_typed_error() -> None:
    with pytest.raises(DecodeError, match="needs 6 bytes, 5 left"):
        link.decode(link.build(0, 1, 2)[:5])


def test_vl15_has_no_flow_control() -> None:
    with pytest.raises(ValueError, match="data VL 0-14, not 15"):
        link.build(15, 0, 0)


def _capture(tmp_path: Path, room: int = 0) -> Path:
    """The packets in ERF type 25 records; ``room`` zero bytes after each (in the record's
    wlen too) for tshark, which reads a link packet as an LRH first and, with FCTBS's low
    bits like LNH 2 or 3, runs on for a BTH or GRH (roce.families.ib.flowcontrol)."""
    path = tmp_path / f"link{room}.pcap"
    with PcapWriter(path, linktype=erf.LINKTYPE_ERF) as w:
        for i, (op, fctbs, vl, fccl) in enumerate(PACKETS):
            p = link.build(vl, fctbs, fccl, op)
            rec = erf.record(p + bytes(room), rtype=erf.ERF_TYPE_INFINIBAND_LINK,
                             ts=erf.fixed_ts(i * 1000))
            w.write(rec, ts_ns=i * 1000)
    return path


def _expected() -> list[list[str]]:
    return [[str(op), str(fctbs % 4096), str(vl), str(fccl % 4096),
             str(vcrc(link.build(vl, fctbs, fccl, op)[:4]))]
            for op, fctbs, vl, fccl in PACKETS]


def test_roce_decode_reads_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["decode", str(_capture(tmp_path)), "-T", "fields"]
    for n in NAMES:
        argv += ["-e", n]
    assert main(argv) == 0
    assert [r.split("\t") for r in capsys.readouterr().out.splitlines()] == _expected()


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_reads_the_same_fields(tmp_path: Path) -> None:
    out = subprocess.run(fields_command(_capture(tmp_path, room=58), NAMES), capture_output=True,
                         text=True, check=True, timeout=120).stdout
    rows = [r.split("\t") for r in out.splitlines()]
    # tshark prints the 4-bit op and the 12-bit counters in decimal, the LPCRC in hex
    theirs = [[str(int(v, 0)) for v in r] for r in rows]
    assert theirs == _expected()
