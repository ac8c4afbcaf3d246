"""``roce decode``: one-line summaries, trees, machine outputs, filters, errors.

Captures are generated per test with ``roce.craft`` and ``PcapWriter``; the command runs
in-process through ``roce.cli.main`` (capsys), plus a few real ``roce decode``
subprocesses for what only a process shows (pipes, exit status, stdin, colour).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import roce
from roce.cli import main
from roce.decoder import decode
from roce.families.base import summary, tree
from roce.opcodes import OPCODES, ROCE_OPCODES
from roce.pcapio import PcapNgWriter, PcapWriter, open_capture

T0 = 1_700_000_000_000_000_000  # 2023-11-14 22:13:20 UTC, in ns
NS = 1_000_000_000
ROCE_BIN = shutil.which("roce")


def write(path: Path, frames: list[bytes | tuple[bytes, int]], snaplen: int = 262144,
          step: int = 1000) -> Path:
    """Write frames (bytes, or (bytes, ts_ns)) to a pcap, ``step`` ns apart by default."""
    with PcapWriter(path, snaplen=snaplen) as w:
        for i, f in enumerate(frames):
            data, ts = (f, T0 + i * step) if isinstance(f, bytes) else f
            w.write(data, ts)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["decode", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def lines_of(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    return out.splitlines()


def info(line: str) -> str:
    """The Info column of a one-line summary (after the length column)."""
    return line.split(" RRoCE ", 1)[1].split(" ", 1)[1] if " RRoCE " in line else line


# -- captures used by several tests -----------------------------------------------------------


def basic_frames() -> list[bytes]:
    return [
        roce.craft("RC_RDMA_WRITE_ONLY", b"hello", dqpn=0x11, psn=100, va=0x1000, rkey=0x22,
                   dmalen=5).to_bytes(),
        roce.craft("RC_ACKNOWLEDGE", dqpn=0x12, psn=100, syndrome=0x1F, msn=5).to_bytes(),
        roce.craft("RC_SEND_ONLY", b"abcd", dqpn=0x11, psn=101, ackreq=True).to_bytes(),
        roce.craft("RC_ACKNOWLEDGE", dqpn=0x12, psn=101, syndrome=0x60, msn=5).to_bytes(),
        roce.craft("RC_ACKNOWLEDGE", dqpn=0x12, psn=102, syndrome=0x2C, msn=5).to_bytes(),
        roce.craft("CNP", dqpn=0x13).to_bytes(),
        roce.craft("RC_RDMA_READ_REQUEST", dqpn=0x11, psn=103, va=0xABC000, rkey=0x77,
                   dmalen=4096).to_bytes(),
        roce.craft("UD_SEND_ONLY", b"ud!!", dqpn=0x14, psn=7, qkey=0x11111111,
                   sqpn=0x99).to_bytes(),
        roce.craft("RC_COMPARE_SWAP", dqpn=0x11, psn=104, **{"atomiceth.va": 0x2000},
                   rkey=0x5, swap=9, compare=3).to_bytes(),
        roce.craft("RC_FETCH_ADD", dqpn=0x11, psn=105, **{"atomiceth.va": 0x2008},
                   rkey=0x5, add=1).to_bytes(),
        roce.craft("RC_ATOMIC_ACKNOWLEDGE", dqpn=0x12, psn=104, syndrome=0x1F, msn=6,
                   orig=0x42).to_bytes(),
        roce.craft("RC_SEND_ONLY_WITH_IMMEDIATE", b"imm.", dqpn=0x11, psn=106,
                   imm=0xDEADBEEF).to_bytes(),
        roce.craft("RC_SEND_ONLY_WITH_INVALIDATE", b"inv.", dqpn=0x11, psn=107,
                   inv_rkey=0xCAFE).to_bytes(),
        roce.craft("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", b"wimm", dqpn=0x11, psn=108,
                   va=0x3000, rkey=0x6, dmalen=4, imm=0x1234).to_bytes(),
    ]


@pytest.fixture
def basic(tmp_path: Path) -> Path:
    return write(tmp_path / "basic.pcap", basic_frames())


def reth_cut() -> bytes:
    """A SEND Only frame whose opcode byte says RDMA WRITE Only: the RETH is cut short."""
    f = bytearray(roce.craft("RC_SEND_ONLY", b"abcd", dqpn=5, psn=7).to_bytes())
    f[42] = 0x0A  # 14 Ethernet + 20 IPv4 + 8 UDP: the BTH opcode byte
    return bytes(f)


def other_frames() -> list[bytes]:
    """Frames that are not RoCE: UDP to port 53, ARP, TCP."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import ARP, Ether
    from scapy.packet import Raw

    return [
        bytes(Ether() / IP(src="1.1.1.1", dst="2.2.2.2") / UDP(sport=1234, dport=53)
              / Raw(b"q" * 8)),
        bytes(Ether(src="02:00:00:00:00:09", dst="ff:ff:ff:ff:ff:ff")
              / ARP(psrc="10.0.0.1", pdst="10.0.0.2")),
        bytes(Ether() / IP(src="1.1.1.1", dst="2.2.2.2") / TCP(sport=40000, dport=80)),
    ]


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    frames = [
        reth_cut(),
        roce.craft("RC_SEND_ONLY", b"x" * 10, dqpn=5, psn=10, ecn="ce", ackreq=True).to_bytes(),
        roce.craft("RC_SEND_ONLY", b"x" * 10, dqpn=5, psn=11, icrc=0x12345678).to_bytes(),
        roce.craft("RC_SEND_ONLY", b"x" * 10, dqpn=5, psn=12, roce_version=1).to_bytes(),
        roce.craft("UD_SEND_ONLY", b"x" * 10, dqpn=5, psn=13, ipv6=True, vlan=100,
                   qkey=0x1234, sqpn=0x77).to_bytes(),
        *other_frames(),
        roce.craft("RC_SEND_ONLY", b"x" * 10, dqpn=5, psn=14, ipv6=True, ecn="ce").to_bytes(),
        roce.craft("RC_RDMA_READ_RESPONSE_ONLY", b"r" * 8, dqpn=5, psn=15,
                   syndrome=0x62, msn=1).to_bytes(),
    ]
    return write(tmp_path / "mixed.pcap", frames)


# -- one-line output ----------------------------------------------------------------------------


def test_one_line_exact(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    lines = lines_of(capsys, basic)
    assert lines[0] == ("    1 0.000000000     10.0.0.1 -> 10.0.0.2     RRoCE 82 "
                        "RC RDMA Write Only QP=0x000011 PSN=100 VA=0x1000 RKey=0x00000022 Len=5")
    assert lines[1] == ("    2 0.000001000     10.0.0.1 -> 10.0.0.2     RRoCE 62 "
                        "RC Acknowledge QP=0x000012 PSN=100 ACK MSN=5 credits=unlimited")
    assert lines[2] == ("    3 0.000002000     10.0.0.1 -> 10.0.0.2     RRoCE 62 "
                        "RC Send Only QP=0x000011 PSN=101 [AckReq]")
    assert len(lines) == len(basic_frames())


def test_one_line_info_per_opcode(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    infos = [info(line) for line in lines_of(capsys, basic)]
    assert infos[3] == "RC Acknowledge QP=0x000012 PSN=101 NAK PSN-sequence-error MSN=5"
    assert infos[4] == "RC Acknowledge QP=0x000012 PSN=102 RNR NAK 0.64ms MSN=5"
    assert infos[5] == "CNP QP=0x000013"
    assert infos[6] == ("RC RDMA Read Request QP=0x000011 PSN=103 VA=0xabc000 RKey=0x00000077 "
                        "Len=4096")
    assert infos[7] == "UD Send Only QP=0x000014 PSN=7 QKey=0x11111111 SrcQP=0x000099"
    assert infos[8] == ("RC Compare Swap QP=0x000011 PSN=104 VA=0x2000 RKey=0x00000005 "
                        "Swap=0x9 Cmp=0x3")
    assert infos[9] == "RC Fetch Add QP=0x000011 PSN=105 VA=0x2008 RKey=0x00000005 Add=0x1"
    assert infos[10] == ("RC Atomic Acknowledge QP=0x000012 PSN=104 ACK MSN=6 "
                         "credits=unlimited Orig=0x42")
    assert infos[11] == "RC Send Only Immediate QP=0x000011 PSN=106 ImmDt=0xdeadbeef"
    assert infos[12] == "RC Send Only Invalidate QP=0x000011 PSN=107 InvRKey=0x0000cafe"
    assert infos[13] == ("RC RDMA Write Only Immediate QP=0x000011 PSN=108 VA=0x3000 "
                         "RKey=0x00000006 Len=4 ImmDt=0x00001234")


def test_flags_addresses_and_protocols(capsys: pytest.CaptureFixture[str], mixed: Path) -> None:
    lines = lines_of(capsys, mixed)
    assert lines[0].endswith(
        "RRoCE 62 RC RDMA Write Only QP=0x000005 PSN=7 "
        "[Malformed: RETH truncated at byte 54: needs 16 bytes, 4 left]")
    assert "10.0.0.1 -> 10.0.0.2" in lines[0]  # what the walk found is still shown
    assert lines[1].endswith("RC Send Only QP=0x000005 PSN=10 [AckReq] [ECN CE]")
    assert lines[2].endswith("RC Send Only QP=0x000005 PSN=11 [BAD ICRC]")
    assert "fe80::1 -> fe80::2" in lines[3] and " RoCE 82 RC Send Only" in lines[3]
    assert "fd00::1 -> fd00::2" in lines[4] and " RRoCE 102 UD Send Only" in lines[4]
    assert lines[5].endswith("1.1.1.1 -> 2.2.2.2      UDP 50 1234 -> 53 Len=8")
    assert " ARP 42 Who has 10.0.0.2? Tell 10.0.0.1" in lines[6]
    assert "02:00:00:00:00:09 -> ff:ff:ff:ff:ff:ff" in lines[6]
    assert lines[7].endswith(" TCP 54 40000 -> 80")
    assert lines[8].endswith("PSN=14 [ECN CE]")  # IPv6 traffic class ECN bits
    assert lines[9].endswith("RC RDMA Read Response Only QP=0x000005 PSN=15 "
                             "NAK remote-access-error MSN=1")


def test_fast_path_equals_record_path(capsys: pytest.CaptureFixture[str], mixed: Path,
                                      basic: Path) -> None:
    """The batch formatter and the per-record formatter print the same lines."""
    for path in (mixed, basic):
        for extra in ([], ["--color", "always"], ["--only-roce"], ["-t", "dd"]):
            fast = lines_of(capsys, path, *extra)
            slow = lines_of(capsys, path, "-Y", "frame.number > 0", *extra)
            assert fast == slow, extra


def test_every_opcode_fast_equals_generic(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    frames = []
    for code, op in ROCE_OPCODES.items():
        payload = None if op.payload_len is not None or not op.payload else b"data"
        for kw in ({}, {"ipv6": True}, {"vlan": 3}, {"roce_version": 1}):
            frames.append(roce.craft(code, payload, dqpn=code, psn=code * 3, **kw).to_bytes())
    path = write(tmp_path / "all.pcap", frames)
    fast = lines_of(capsys, path)
    slow = lines_of(capsys, path, "-Y", "roce")
    assert fast == slow
    assert len(fast) == len(frames)
    assert not [line for line in fast if "Malformed" in line]


# -- time formats -------------------------------------------------------------------------------


def time_column(line: str) -> str:
    """The time text: between the number and the source address."""
    return line.split("     10.0.0.1 -> ")[0].split(None, 1)[1]


@pytest.fixture
def timed(tmp_path: Path) -> Path:
    frames = [(roce.craft("RC_SEND_ONLY", b"abcd", psn=i).to_bytes(), ts) for i, ts in
              enumerate((T0 + 500, T0 + 1_500_000_500, T0 + 1_500_002_500, T0 + 3 * NS))]
    return write(tmp_path / "timed.pcap", frames)


@pytest.mark.parametrize("mode, expected", [
    ("r", ["0.000000000", "1.500000000", "1.500002000", "2.999999500"]),
    ("d", ["0.000000000", "1.500000000", "0.000002000", "1.499997500"]),
    ("dd", ["0.000000000", "1.500000000", "0.000002000", "1.499997500"]),
    ("e", ["1700000000.000000500", "1700000001.500000500", "1700000001.500002500",
           "1700000003.000000000"]),
    ("ud", ["2023-11-14 22:13:20.000000500", "2023-11-14 22:13:21.500000500",
            "2023-11-14 22:13:21.500002500", "2023-11-14 22:13:23.000000000"]),
    ("u", ["22:13:20.000000500", "22:13:21.500000500", "22:13:21.500002500",
           "22:13:23.000000000"]),
])
def test_time_modes(capsys: pytest.CaptureFixture[str], timed: Path, mode: str,
                    expected: list[str]) -> None:
    assert [time_column(x) for x in lines_of(capsys, timed, "-t", mode)] == expected
    # the record path (-Y) agrees
    slow = lines_of(capsys, timed, "-t", mode, "-Y", "roce")
    assert [time_column(x) for x in slow] == expected


def test_time_absolute_local(capsys: pytest.CaptureFixture[str], timed: Path) -> None:
    sec = T0 // NS
    clock = time.strftime("%H:%M:%S", time.localtime(sec))
    day = time.strftime("%Y-%m-%d", time.localtime(sec))
    lines = lines_of(capsys, timed, "-t", "a")
    assert time_column(lines[0]) == f"{clock}.000000500"
    lines = lines_of(capsys, timed, "-t", "ad")
    assert time_column(lines[0]) == f"{day} {clock}.000000500"


def test_time_delta_displayed_skips_hidden(capsys: pytest.CaptureFixture[str],
                                           timed: Path) -> None:
    lines = lines_of(capsys, timed, "-t", "dd", "-Y", "bth.psn != 1")
    assert [time_column(x) for x in lines] == ["0.000000000", "1.500002000", "1.499997500"]
    lines = lines_of(capsys, timed, "-t", "d", "-Y", "bth.psn != 1")
    assert [time_column(x) for x in lines] == ["0.000000000", "0.000002000", "1.499997500"]


def test_microsecond_capture_has_six_digits(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    path = tmp_path / "us.pcap"
    with PcapWriter(path, nanosecond=False) as w:
        w.write(roce.craft("RC_SEND_ONLY", b"abcd").to_bytes(), T0)
        w.write(roce.craft("RC_SEND_ONLY", b"abcd").to_bytes(), T0 + 2_500_000)
    assert [time_column(x) for x in lines_of(capsys, path)] == ["0.000000", "0.002500"]


# -- the -V tree --------------------------------------------------------------------------------


def test_tree(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    rc, out, _ = run(capsys, "-V", "-c", "2", basic)
    assert rc == 0
    assert out.startswith("Frame 1: 82 bytes on wire (656 bits), 82 bytes captured (656 bits)\n")
    for text in ("Arrival Time: 2023-11-14 22:13:20.000000000 UTC",
                 "Internet Protocol Version 4, Src: 10.0.0.1, Dst: 10.0.0.2",
                 "User Datagram Protocol, Src Port: ", "Dst Port: 4791",
                 "InfiniBand (RoCEv2)", "    Base Transport Header",
                 "        Opcode: RC RDMA Write Only (10)",
                 "        Destination Queue Pair: 0x000011",
                 "        Packet Sequence Number: 100",
                 "    RDMA Extended Transport Header",
                 "        Virtual Address: 0x0000000000001000",
                 "        Remote Key: 0x00000022", "        DMA Length: 5",
                 "    Payload: 5 bytes", "        Data: 68 65 6c 6c 6f", "    Pad: 3 bytes",
                 "        Syndrome: 0x1f, ACK credits=unlimited",
                 "            OpCode: ACK (0)",
                 "            Credit Count: 31 (unlimited credits)",
                 "        Message Sequence Number: 5"):
        assert text in out, text
    expected = roce.parse(basic_frames()[0]).stored_icrc
    assert f"    Invariant CRC: 0x{expected:08x} [correct]" in out
    assert out.count("\nFrame ") == 1 and out.endswith("\n\n")


def test_tree_bad_icrc_and_breakdowns(capsys: pytest.CaptureFixture[str], mixed: Path,
                                      basic: Path) -> None:
    rc, out, _ = run(capsys, "-V", "-Y", "bad_icrc", mixed)
    assert rc == 0
    good = roce.craft("RC_SEND_ONLY", b"x" * 10, dqpn=5, psn=11).expected_icrc
    assert f"Invariant CRC: 0x12345678 [incorrect, should be 0x{good:08x}]" in out
    rc, out, _ = run(capsys, "-V", "-Y", "nak or rnr", basic)
    assert "Error Code: PSN sequence error (0)" in out
    assert "Timer: 12 (0.64 ms)" in out
    rc, out, _ = run(capsys, "-V", "-Y", "malformed", mixed)
    assert "[Malformed Packet: RETH truncated at byte 54: needs 16 bytes, 4 left]" in out
    rc, out, _ = run(capsys, "-V", "-Y", "udp.port == 53", mixed)
    assert "[Not RoCE: UDP destination port 53 is not the RoCEv2 port]" in out
    rc, out, _ = run(capsys, "-V", "-Y", "roce.v1", mixed)
    assert "InfiniBand (RoCEv1)" in out and "Source GID: fe80::1" in out


def test_tree_with_summary_and_hexdump(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    rc, out, _ = run(capsys, "-V", "-P", "-x", "-c", "1", basic)
    lines = out.splitlines()
    assert lines[0].startswith("    1 0.000000000     10.0.0.1 -> 10.0.0.2")
    assert lines[1].startswith("Frame 1:")
    assert "0000  02 00 00 00 00 02 02 00  00 00 00 01 08 00 45 00   ..............E." in lines


# -- machine outputs ----------------------------------------------------------------------------


def test_json_values_equal_packet_fields(capsys: pytest.CaptureFixture[str], basic: Path,
                                         mixed: Path) -> None:
    rc, out, _ = run(capsys, "-T", "json", basic)
    objs = json.loads(out)
    assert len(objs) == len(basic_frames())
    for obj, frame in zip(objs, basic_frames()):
        pkt = roce.parse(frame)
        for key, value in pkt.fields().items():
            want = value.hex() if isinstance(value, bytes) else value
            assert obj[key] == want, key
    assert objs[0]["frame.number"] == 1 and objs[0]["frame.time_ns"] == T0
    assert objs[1]["frame.time_epoch"] == pytest.approx((T0 + 1000) / NS)
    # malformed packets stay valid JSON
    rc, out, _ = run(capsys, "-T", "json", mixed)
    objs = json.loads(out)
    assert objs[0]["_malformed"] == "RETH truncated at byte 54: needs 16 bytes, 4 left"
    assert objs[0]["ip.src"] == "10.0.0.1" and objs[0]["bth.opcode"] == 0x0A
    assert objs[5]["udp.dstport"] == 53 and "bth" not in objs[5]


def test_json_empty_and_jsonl(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    rc, out, _ = run(capsys, "-T", "json", "-Y", "bth.psn == 99999", basic)
    assert json.loads(out) == []
    rc, out, _ = run(capsys, "-T", "jsonl", basic)
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["bth.psn"] for r in rows][:3] == [100, 100, 101]
    assert rows[0]["reth.va"] == 0x1000 and rows[0]["icrc.valid"] is True


def test_fields_output(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    rc, out, _ = run(capsys, "-T", "fields", "-e", "frame.number", "-e", "bth.psn", "-e",
                     "reth.va", "-e", "aeth.syndrome", "-e", "bth.a", "-e", "icrc", "-E",
                     "header=y", "-c", "3", basic)
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == ["frame.number", "bth.psn", "reth.va", "aeth.syndrome", "bth.a", "icrc"]
    icrc = roce.parse(basic_frames()[0]).stored_icrc
    # tshark's display: reth.va and the ICRC in hex with their width, the PSN in decimal
    assert rows[1] == ["1", "100", "0x0000000000001000", "", "0", f"0x{icrc:08x}"]
    assert rows[2][:5] == ["2", "100", "", "31", "0"]
    assert rows[3][4] == "1"
    rc, out, _ = run(capsys, "-T", "fields", "-e", "reth.va", "-e", "icrc", "-E", "raw=y",
                     "-c", "1", basic)
    assert out == f"4096\t{icrc}\n"  # -E raw=y: integers in decimal
    rc, out, _ = run(capsys, "-T", "fields", "-e", "bth.psn", "-e", "ip.addr", "-e",
                     "_ws.col.Info", "-E", "separator=,", "-E", "quote=d", "-c", "1", basic)
    assert out == ('"100","10.0.0.1,10.0.0.2","RC RDMA Write Only QP=0x000011 PSN=100 '
                   'VA=0x1000 RKey=0x00000022 Len=5"\n')


def test_csv_output(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    import csv

    rc, out, _ = run(capsys, "-T", "csv", "-c", "2", basic)
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["No.", "Time", "Source", "Destination", "Protocol", "Length", "Info"]
    assert rows[1][:6] == ["1", "0.000000000", "10.0.0.1", "10.0.0.2", "RRoCE", "82"]
    assert rows[2][6] == "RC Acknowledge QP=0x000012 PSN=100 ACK MSN=5 credits=unlimited"
    rc, out, _ = run(capsys, "-T", "csv", "-e", "bth.opcode", "-e", "frame.time_relative",
                     "-e", "deth.q_key", basic)
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["bth.opcode", "frame.time_relative", "deth.q_key"]
    assert rows[1] == ["10", "0.000000000", ""]
    assert rows[8] == ["100", "0.000007000", str(0x11111111)]


# -- display filters ----------------------------------------------------------------------------


@pytest.mark.parametrize("expr, numbers", [
    ("bth.psn == 100", [1, 2]),
    ("bth.psn >= 104 && bth.psn < 106", [9, 10, 11]),
    ("bth.destqp == 0x12", [2, 4, 5, 11]),
    ("bth.opcode == rc-send-only", [3]),
    ("bth.opcode == RC_RDMA_WRITE_ONLY or bth.opcode == \"RC Acknowledge\"", [1, 2, 4, 5]),
    ("bth.opcode == rc.fetch.add", [10]),
    ("rc.send.only", [3]),
    ("rc.ack", [2, 4, 5]),
    ("ack", [2, 11]),
    ("nak", [4]),
    ("rnr", [5]),
    ("cnp", [6]),
    ("read", [7]),
    ("write", [1, 14]),
    ("send", [3, 8, 12, 13]),
    ("atomic", [9, 10, 11]),
    ("reth", [1, 7, 14]),
    ("reth.va > 0x1000", [7, 14]),
    ("not aeth and bth.a == 1", [3]),
    ("aeth.syndrome.opcode == nak", [4]),
    ("aeth.syndrome.error_code == psn-sequence-error", [4]),
    ("deth.q_key == 0x11111111", [8]),
    ("frame.number in {2 4..5}", [2, 4, 5]),
    ("frame.len > 80", [1, 9, 10, 14]),
    ("immdt == 0xdeadbeef", [12]),
    ("ieth == 0xcafe", [13]),
    ("ip.addr == 10.0.0.2 and frame.number == 1", [1]),
    ("roce.v2 && icrc.valid == true && frame.number < 3", [1, 2]),
])
def test_filters(capsys: pytest.CaptureFixture[str], basic: Path, expr: str,
                 numbers: list[int]) -> None:
    lines = lines_of(capsys, "-Y", expr, basic)
    assert [int(line.split()[0]) for line in lines] == numbers


def test_filter_macros_on_problems(capsys: pytest.CaptureFixture[str], mixed: Path) -> None:
    def numbers(expr: str) -> list[int]:
        return [int(x.split()[0]) for x in lines_of(capsys, "-Y", expr, mixed)]

    assert numbers("bad_icrc") == [3]
    assert numbers("ecn_ce") == [2, 9]
    assert numbers("malformed") == [1]
    assert numbers('malformed contains "RETH"') == [1]
    assert numbers("roce.v1") == [4]
    assert numbers("vlan.id == 100") == [5]
    assert numbers("not roce") == [6, 7, 8]
    assert numbers("udp.dstport == 53") == [6]


@pytest.mark.parametrize("expr, message, caret", [
    ("bth.psn == ", 'expected a value after "=="', 11),
    ("bth.pns == 3", "unknown field 'bth.pns'", 0),
    ("bth.opcode == rc-sned-only", "did you mean rc-send-only?", 14),
    ("(bth.psn == 1", "never closed", 0),
])
def test_bad_filter(capsys: pytest.CaptureFixture[str], basic: Path, expr: str, message: str,
                    caret: int) -> None:
    rc, out, err = run(capsys, "-Y", expr, basic)
    assert rc == 1 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith("bad filter: ") and message in lines[0]
    assert lines[1] == "  " + expr
    assert lines[2] == "  " + " " * caret + "^"
    assert "Traceback" not in err


# -- selection: -c, --only-roce, --udp-port -----------------------------------------------------


def test_count(capsys: pytest.CaptureFixture[str], basic: Path, mixed: Path) -> None:
    assert len(lines_of(capsys, "-c", "3", basic)) == 3
    assert [int(x.split()[0]) for x in lines_of(capsys, "-c", "2", "-Y", "nak or rnr",
                                                 basic)] == [4, 5]
    # -c counts displayed packets: hidden frames do not use it up
    lines = lines_of(capsys, "-c", "6", "--only-roce", mixed)
    assert [int(x.split()[0]) for x in lines] == [1, 2, 3, 4, 5, 9]
    rc, out, _ = run(capsys, "-c", "1", "-T", "jsonl", basic)
    assert len(out.splitlines()) == 1


def test_count_across_batches(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    frame = roce.craft("RC_SEND_ONLY", b"abcd").to_bytes()
    path = write(tmp_path / "many.pcap", [frame] * (decode.BATCH * 2 + 10))
    lines = lines_of(capsys, path)
    assert len(lines) == decode.BATCH * 2 + 10
    assert lines[-1].split()[0] == str(decode.BATCH * 2 + 10)
    assert len(lines_of(capsys, "-c", str(decode.BATCH + 5), path)) == decode.BATCH + 5


def test_only_roce(capsys: pytest.CaptureFixture[str], mixed: Path) -> None:
    all_lines = lines_of(capsys, mixed)
    roce_lines = lines_of(capsys, "--only-roce", mixed)
    assert len(all_lines) == 10 and len(roce_lines) == 7
    assert [x for x in all_lines if x not in roce_lines] == all_lines[5:8]
    # the malformed RoCE frame stays: it is RoCE, just broken
    assert "Malformed" in roce_lines[0]


def test_udp_port(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    frame = roce.craft("RC_SEND_ONLY", b"abcd", dqpn=3, psn=9, dport=5000).to_bytes()
    path = write(tmp_path / "port.pcap", [frame])
    sport = roce.parse(frame, udp_port=5000)["udp"]["srcport"]
    assert lines_of(capsys, path)[0].endswith(f" UDP 62 {sport} -> 5000 Len=20")
    assert lines_of(capsys, "--udp-port", "5000", path)[0].endswith(
        "RRoCE 62 RC Send Only QP=0x000003 PSN=9")
    assert lines_of(capsys, "--udp-port", "5000", "-Y", "bth.psn == 9", path)
    assert lines_of(capsys, "--only-roce", path) == []


# -- malformed and truncated frames -------------------------------------------------------------


def test_malformed_then_good(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = [roce.craft("RC_SEND_ONLY", b"abcd", psn=p).to_bytes() for p in (20, 21)]
    path = write(tmp_path / "bad.pcap", [good[0], reth_cut(), good[1]])
    lines = lines_of(capsys, path)
    assert "[Malformed: RETH truncated at byte 54: needs 16 bytes, 4 left]" in lines[1]
    assert lines[2].endswith("RC Send Only QP=0x000000 PSN=21")
    rc, out, err = run(capsys, "-V", path)
    assert rc == 0 and err == ""
    assert [x.split(":")[0] for x in out.splitlines() if x.startswith("Frame ")] == [
        "Frame 1", "Frame 2", "Frame 3"]


def test_truncated_by_snaplen(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    big = roce.craft("RC_RDMA_WRITE_ONLY", b"y" * 100, dqpn=5, psn=1, va=0x1000, rkey=0x99,
                     dmalen=100).to_bytes()
    small = roce.craft("RC_SEND_ONLY", b"abcd", dqpn=5, psn=2).to_bytes()
    path = write(tmp_path / "snap.pcap", [big, small], snaplen=80)
    lines = lines_of(capsys, path)
    assert lines[0].endswith("RRoCE 174 RC RDMA Write Only QP=0x000005 PSN=1 VA=0x1000 "
                             "RKey=0x00000099 Len=100 [Truncated]")
    assert lines[1].endswith("RC Send Only QP=0x000005 PSN=2")
    rc, out, _ = run(capsys, "-T", "jsonl", path)
    first = json.loads(out.splitlines()[0])
    assert first["frame.len"] == 174 and first["frame.cap_len"] == 80
    assert first["reth.va"] == 0x1000 and "icrc" not in first and "truncated" in first
    rc, out, _ = run(capsys, "-V", "-c", "1", path)
    assert "Invariant CRC: [not captured]" in out
    # cut inside the headers
    path = write(tmp_path / "snap2.pcap", [big], snaplen=60)
    assert lines_of(capsys, path)[0].endswith(
        "[Truncated: RETH truncated at byte 54: needs 16 bytes, 6 left]")


def test_records_api(mixed: Path) -> None:
    with open_capture(mixed) as reader:
        records = list(decode.decode_frames(reader))
    kinds = [r.kind for r in records]
    assert kinds == ["malformed", "roce", "roce", "roce", "roce", "other", "other", "other",
                     "roce", "roce"]
    assert records[0].packet is None and "RETH truncated" in str(records[0].error)
    assert records[1].packet is not None and records[1].packet.bth["psn"] == 10
    assert records[5].error is not None and records[5].fields["udp.dstport"] == 53
    assert [r.number for r in records] == list(range(1, 11))
    with open_capture(mixed) as reader:
        only = list(decode.decode_frames(reader, only_roce=True))
    assert [r.number for r in only] == [1, 2, 3, 4, 5, 9, 10]


def _with_ip_options(frame: bytes) -> bytes:
    """Insert 4 bytes of IPv4 options (NOPs); lengths fixed, so the ICRC turns bad."""
    ip = bytearray(frame[14:34])
    ip[0] = 0x46
    ip[2:4] = (int.from_bytes(ip[2:4], "big") + 4).to_bytes(2, "big")
    return frame[:14] + bytes(ip) + b"\x01\x01\x01\x01" + frame[34:]


def test_header_fields_match_packet_fields() -> None:
    """The decoder's flat fields are Packet.fields() and its headers Packet.headers, for
    every opcode, encapsulation and link type."""
    cases: list[tuple[bytes, int]] = []
    sll = (b"\x00\x00\x00\x01\x00\x06" + bytes(range(8)) + b"\x08\x00")
    for code, op in ROCE_OPCODES.items():
        payload = None if op.payload_len is not None or not op.payload else b"12345"
        for kw in ({}, {"ipv6": True}, {"vlan": 3}, {"roce_version": 1}):
            cases.append((roce.craft(code, payload, dqpn=code, psn=code, **kw).to_bytes(), 1))
        frame = roce.craft(code, payload, dqpn=code, psn=code, ecn="ce").to_bytes()
        cases += [(frame[14:], 101), (sll + frame[14:], 113), (_with_ip_options(frame), 1)]
    records = decode.decode_frames((f, T0, len(f), len(f), lt, 0) for f, lt in cases)
    for (frame, linktype), rec in zip(cases, records):
        assert rec.kind == "roce"
        pkt = roce.parse(frame, linktype)
        want = pkt.fields()
        assert {k: rec.fields[k] for k in want} == want
        assert rec.headers == pkt.headers
        text = tree.render(rec)  # every header chain renders
        assert f"Packet Sequence Number: {pkt.bth['psn']}" in text
        assert ("Options: (4 bytes) 01010101" in text) == ("options" in pkt.headers.get("ip", {}))


# -- input errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    (b"", "empty file, not a pcap or pcapng file"),
    (b"\x00\x01\x02\x03" * 10, "not a pcap or pcapng file (magic 0x00010203)"),
    (bytes(range(7, 250)), "not a pcap or pcapng file (magic 0x0708090a)"),
])
def test_unreadable_input(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                          content: bytes | None, message: str) -> None:
    path = tmp_path / "x.pcap"
    if content is not None:
        path.write_bytes(content)
    rc, out, err = run(capsys, path)
    assert rc == 2 and out == ""
    assert err == f"roce decode: {path}: {message}\n"


def test_truncated_capture_warns(capsys: pytest.CaptureFixture[str], basic: Path,
                                 tmp_path: Path) -> None:
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(basic.read_bytes()[:210])  # 24 + 98 + 78: 10 bytes into record 3
    rc, out, err = run(capsys, cut)
    assert rc == 0 and len(out.splitlines()) == 2
    assert err.startswith(f"roce decode: warning: {cut}: capture truncated mid-record")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    ([], "no capture given"),
    (["-e", "bth.psn", "{f}"], "-e needs -T fields"),
    (["-T", "fields", "{f}"], "-T fields needs at least one -e"),
    (["-T", "fields", "-e", "bth.pns", "{f}"], "-e bth.pns: unknown field"),
    (["-T", "fields", "-e", "bth.psn", "-E", "color=y", "{f}"], "-E color: unknown option"),
    (["-T", "json", "-V", "{f}"], "do not combine"),
    (["{f}", "-r", "other.pcap"], "give the capture once"),
])
def test_usage_errors(capsys: pytest.CaptureFixture[str], basic: Path, argv: list[str],
                      message: str) -> None:
    rc, out, err = run(capsys, *[str(basic) if a == "{f}" else a for a in argv])
    assert rc == 1 and message in err and "Traceback" not in err


def test_bad_option_value_exits_1(capsys: pytest.CaptureFixture[str], basic: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["decode", "-c", "zero", str(basic)])
    assert exc.value.code == 1


def test_read_file_option_and_stdin(capsys: pytest.CaptureFixture[str], basic: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    by_name = lines_of(capsys, basic)
    assert lines_of(capsys, "-r", basic) == by_name
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(basic.read_bytes())))
    assert lines_of(capsys, "-") == by_name


def test_pcapng_mixed_link_types(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    frame = roce.craft("RC_SEND_ONLY", b"abcd", psn=5).to_bytes()
    path = tmp_path / "ng.pcapng"
    with PcapNgWriter(path) as w:
        eth = w.add_interface(1)
        raw = w.add_interface(101)  # LINKTYPE_RAW: frames start at the IP header
        w.write(frame, T0, interface=eth)
        w.write(frame[14:], T0 + 1000, interface=raw)
        w.write(reth_cut()[14:], T0 + 2000, interface=raw)
        w.write(frame, T0 + 3000, interface=eth)
    lines = lines_of(capsys, path)
    assert [x.split()[0] for x in lines] == ["1", "2", "3", "4"]
    assert all(lines[i].endswith("RC Send Only QP=0x000000 PSN=5") for i in (0, 1, 3))
    assert " RRoCE 48 " in lines[1]
    assert "[Malformed: RETH truncated at byte 40" in lines[2]
    for extra in ([], ["-t", "d"], ["-c", "3"]):
        assert lines_of(capsys, path, *extra) == lines_of(capsys, path, "-Y", "frame",
                                                          *extra)


def test_list_fields_and_macros(capsys: pytest.CaptureFixture[str]) -> None:
    names = lines_of(capsys, "-G", "fields")
    assert "bth.psn" in names and "reth.va" in names and "ieth" in names
    macros = dict(x.split("\t") for x in lines_of(capsys, "-G", "macros"))
    assert macros["rc.rdma.write.only"] == "bth.opcode == 0x0a"
    assert macros["rc.ack"] == "bth.opcode == 0x11"


# -- real processes -----------------------------------------------------------------------------

needs_script = pytest.mark.skipif(ROCE_BIN is None, reason="roce console script not installed")


def roce_cmd(*argv: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(kw.pop("env", {}))  # type: ignore[arg-type]
    return subprocess.run([ROCE_BIN, "decode", *argv], capture_output=True, env=env,
                          timeout=120, **kw)  # type: ignore[call-overload]


@needs_script
def test_subprocess_pipe_no_colour(mixed: Path) -> None:
    res = roce_cmd(str(mixed))
    assert res.returncode == 0 and res.stderr == b""
    assert b"\x1b[" not in res.stdout and len(res.stdout.splitlines()) == 10
    forced = roce_cmd("--color", "always", str(mixed))
    lines = forced.stdout.decode().splitlines()
    assert lines[0].startswith(summary.RED_BOLD) and lines[0].endswith(summary.RESET)
    assert lines[1].startswith(summary.MAGENTA)  # ECN CE
    assert lines[2].startswith(summary.RED_BOLD)  # bad ICRC
    assert lines[9].startswith(summary.RED)  # NAK
    assert b"\x1b[" not in roce_cmd("--color", "always", "--no-color", str(mixed)).stdout


@needs_script
def test_subprocess_colour_on_a_terminal(mixed: Path) -> None:
    pty = pytest.importorskip("pty")
    import select

    def run_on_pty(env: dict[str, str]) -> bytes:
        master, slave = pty.openpty()
        full = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | env
        proc = subprocess.Popen([ROCE_BIN, "decode", str(mixed)], stdout=slave,
                                stderr=subprocess.DEVNULL, env=full)
        os.close(slave)
        chunks = []
        while True:
            ready, _, _ = select.select([master], [], [], 30)
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(30)
        os.close(master)
        return b"".join(chunks)

    assert b"\x1b[31m" in run_on_pty({})
    assert b"\x1b[" not in run_on_pty({"NO_COLOR": "1"})


@needs_script
def test_subprocess_errors_and_stdin(basic: Path, tmp_path: Path) -> None:
    res = roce_cmd(str(tmp_path / "missing.pcap"))
    assert res.returncode == 2
    assert res.stderr.decode() == f"roce decode: {tmp_path / 'missing.pcap'}: no such file\n"
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(os.urandom(64).replace(b"\xd4\xc3", b"xx"))
    res = roce_cmd(str(junk))
    assert res.returncode == 2 and b"Traceback" not in res.stderr
    assert len(res.stderr.splitlines()) == 1
    res = roce_cmd("-", input=basic.read_bytes())
    assert res.returncode == 0 and len(res.stdout.splitlines()) == len(basic_frames())
    res = roce_cmd("-Y", "bth.psn ==", str(basic))
    assert res.returncode == 1 and res.stderr.decode().splitlines()[-1].endswith("^")


@needs_script
def test_subprocess_broken_pipe_is_quiet(tmp_path: Path) -> None:
    frame = roce.craft("RC_SEND_ONLY", b"abcd").to_bytes()
    path = write(tmp_path / "long.pcap", [frame] * 50000)
    for extra in ([], ["-V"], ["-T", "json"]):
        proc = subprocess.Popen([ROCE_BIN, "decode", *extra, str(path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # what `| head -1` does
        err = proc.stderr.read()
        assert proc.wait(60) == 0, err
        assert err == b"", err


# -- tshark as the oracle -----------------------------------------------------------------------

ORACLE_FIELDS = ["bth.opcode", "bth.psn", "bth.destqp", "reth.va", "reth.r_key", "reth.dmalen",
                 "aeth.syndrome", "aeth.msn"]


def oracle_capture(path: Path) -> list[int]:
    codes = [*range(0x00, 0x15), 0x16, 0x17, *range(0x20, 0x2C)]
    k = 0
    opcodes = []
    with PcapWriter(path) as w:
        for enc in ({}, {"ipv6": True}, {"vlan": 7}):
            for code in codes:
                op = OPCODES[code]
                kw: dict[str, object] = {"dqpn": 0x100 + k, "psn": 1000 + k}
                if "reth" in op.headers:
                    kw.update(va=0x10000 + k * 8, rkey=0x500 + k, dmalen=4096 + k)
                if "atomiceth" in op.headers:
                    kw.update({"atomiceth.va": 0x20000 + k * 8, "atomiceth.r_key": 0x700 + k})
                if "aeth" in op.headers:
                    kw.update(syndrome=(0x1F, 0x60, 0x2C, 0x05)[k % 4], msn=k)
                payload = bytes(range(16)) if op.payload and op.payload_len is None else None
                w.write(roce.craft(code, payload, **enc, **kw).to_bytes(), T0 + k * 1000)
                opcodes.append(code)
                k += 1
    return opcodes


def tshark_fields(path: Path, names: list[str]) -> list[list[str]]:
    args = ["tshark", "-r", str(path), "-T", "fields"]
    for n in names:
        args += ["-e", f"infiniband.{n}"]
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    # compared as text: roce prints each field in tshark's display (hex with its width)
    return [line.split("\t") for line in res.stdout.splitlines()]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_tshark_oracle(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "oracle.pcap"
    opcodes = oracle_capture(path)
    theirs = tshark_fields(path, ORACLE_FIELDS)
    assert len(theirs) == len(opcodes) == 105

    def ours(names: list[str]) -> list[list[str]]:
        argv = ["-T", "fields"]
        for n in names:
            argv += ["-e", n]
        return [line.split("\t") for line in lines_of(capsys, *argv, path)]

    # Wireshark's names mean what Wireshark means: equal line by line
    assert ours([f"infiniband.{n}" for n in ORACLE_FIELDS]) == theirs
    # roce's names: equal too, except that Wireshark files the AtomicETH address and key
    # under reth.va / reth.r_key, where roce keeps them in atomiceth.*
    mine = ours([*ORACLE_FIELDS, "atomiceth.va", "atomiceth.r_key"])
    for code, row, want in zip(opcodes, mine, theirs):
        if OPCODES[code].headers == ("atomiceth",):
            assert row[3:5] == ["", ""]
            row = row[:3] + row[8:10] + row[5:8]
        assert row[:8] == want, hex(code)
