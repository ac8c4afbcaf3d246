"""The wire CLIs without a network: ``roce craft`` for every opcode and option, error exits,
replay's rewrite logic on bytes, scheduling, and the raw-socket helpers that need no wire."""

from __future__ import annotations

import itertools
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

import roce
from roce import OPCODES, ROCE_OPCODES, fast, iface
from roce.cli import main
from roce.cli.craft import build_packets
from roce.cli.replay import Rewrite, prepare, rewrite_frame, schedule, to_ethernet
from roce.cli.sniff import python_filter
from roce.locate import LINKTYPE_LINUX_SLL, LINKTYPE_RAW, OK
from roce.pcapio import PcapWriter, open_capture

# -- helpers ------------------------------------------------------------------------------------

_serial = itertools.count()


def opcode_args(code: int) -> tuple[list[str], dict[str, object], bytes]:
    """CLI options giving every field of opcode ``code`` a distinct value; the flat fields
    (``Packet.fields()`` names) they must produce; the payload."""
    op = OPCODES[code]
    argv = [op.slug, "--dqpn", hex(0x100 + code), "--psn", str(1000 + code),
            "--pkey", hex(0x8000 + code)]
    want: dict[str, object] = {"bth.opcode": code, "bth.destqp": 0x100 + code,
                               "bth.psn": 1000 + code, "bth.p_key": 0x8000 + code}
    payload = b""
    if op.payload:
        n = op.payload_len if op.payload_len is not None else code % 7 + 1
        payload = bytes((code + 3 * k) & 0xFF for k in range(n))
        argv += ["--payload-hex", payload.hex()]
    h = op.headers
    if "reth" in h:
        argv += ["--va", hex(0x1000_0000 + code), "--rkey", hex(0x2200 + code),
                 "--dmalen", str(4096 + code)]
        want.update({"reth.va": 0x1000_0000 + code, "reth.r_key": 0x2200 + code,
                     "reth.dmalen": 4096 + code})
    if "atomiceth" in h:
        argv += ["--va", hex(0x7000_0008 + code * 8), "--rkey", hex(0x3300 + code),
                 "--swap", hex(0xFEDC_0000 + code), "--compare", hex(0x0123_0000 + code)]
        want.update({"atomiceth.va": 0x7000_0008 + code * 8, "atomiceth.r_key": 0x3300 + code,
                     "atomiceth.swapdt": 0xFEDC_0000 + code,
                     "atomiceth.cmpdt": 0x0123_0000 + code})
    if "aeth" in h:
        argv += ["--syndrome", hex(0x60 | code % 5), "--msn", str(50 + code)]
        want.update({"aeth.syndrome": 0x60 | code % 5, "aeth.msn": 50 + code})
    if "atomicacketh" in h:
        argv += ["--orig", hex(0x8877_6655_4433_2211 + code)]
        want["atomicacketh.origremdt"] = 0x8877_6655_4433_2211 + code
    if "immdt" in h:
        argv += ["--imm", hex(0xC0DE_0000 + code)]
        want["immdt"] = 0xC0DE_0000 + code
    if "ieth" in h:
        argv += ["--inv-rkey", hex(0x1EE7_0000 + code)]
        want["ieth"] = 0x1EE7_0000 + code
    if "deth" in h:
        argv += ["--qkey", hex(0x1111_0000 + code), "--sqpn", hex(0x500 + code)]
        want.update({"deth.q_key": 0x1111_0000 + code, "deth.srcqp": 0x500 + code})
    if "rdeth" in h:
        argv += ["--eecnxt", hex(0x600 + code)]
        want["rdeth.eecnxt"] = 0x600 + code
    if "xrceth" in h:
        argv += ["--xrcsrq", hex(0x700 + code)]
        want["xrceth.xrcsrq"] = 0x700 + code
    if "feth" in h:
        argv += ["--field", "feth.sel=1", "--field", "feth.plt=3"]
        want.update({"feth.sel": 1, "feth.plt": 3})
    return argv, want, payload


def craft_frames(tmp_path: Path, *argv: str) -> list[bytes]:
    """Run ``roce craft ARGV -w FILE -q`` in-process; the frames it wrote."""
    path = tmp_path / f"craft{next(_serial)}.pcap"
    assert main(["craft", *argv, "-q", "-w", str(path)]) == 0
    with open_capture(path) as reader:
        return [f.data for f in reader]


def craft_one(tmp_path: Path, *argv: str) -> roce.Packet:
    frames = craft_frames(tmp_path, *argv)
    assert len(frames) == 1
    return roce.parse(frames[0])


def roce_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roce", *args], capture_output=True,
                          input=stdin, timeout=60)


def one_line_error(res: subprocess.CompletedProcess, code: int, *words: str) -> str:
    err = res.stderr.decode()
    assert res.returncode == code, (res.returncode, err)
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


# -- craft: every opcode ------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(ROCE_OPCODES), ids=lambda c: OPCODES[c].slug)
def test_craft_every_opcode(tmp_path, capsys, code):
    argv, want, payload = opcode_args(code)
    p = craft_one(tmp_path, *argv)
    fields = p.fields()
    for key, value in want.items():
        assert fields[key] == value, (key, fields[key], value)
    assert p.payload == payload
    assert fields["icrc.valid"] is True
    assert p.opcode is OPCODES[code]
    # the printed line is the decoder's line for the same frame
    capsys.readouterr()
    assert main(["craft", *argv]) == 0
    line = capsys.readouterr().out.strip()
    assert OPCODES[code].short_name.split()[0] in line and len(line.splitlines()) == 1
    assert (f"QP=0x{0x100 + code:06x}" in line)


def test_craft_line_is_decode_line(tmp_path, capsys):
    path = tmp_path / "x.pcap"
    argv = ["rc-write-first", "--count", "3", "--payload-size", "33", "--va", "0x10",
            "--ackreq", "--ecn", "ce", "-w", str(path)]
    assert main(["craft", *argv]) == 0
    crafted = capsys.readouterr().out
    assert main(["decode", str(path)]) == 0
    assert capsys.readouterr().out == crafted
    assert "[AckReq] [ECN CE]" in crafted


def test_every_opcode_slug_and_number_resolve(tmp_path):
    for code, op in ROCE_OPCODES.items():
        by_number = craft_frames(tmp_path, hex(code))
        by_ident = craft_frames(tmp_path, op.ident)
        assert roce.parse(by_number[0]).opcode is op
        assert by_number[0] == by_ident[0]
    p = craft_one(tmp_path, "rc-write-only")  # the "rdma"-less spelling
    assert p.opcode.ident == "RC_RDMA_WRITE_ONLY"


# -- craft: options -----------------------------------------------------------------------------


def test_craft_example_from_the_docs(tmp_path):
    p = craft_one(tmp_path, "rc-write-only", "--dqpn", "0x11", "--psn", "100", "--va", "0x1000",
                  "--rkey", "0x22", "--payload-size", "1024", "--src", "10.0.0.1", "--dst",
                  "10.0.0.2")
    f = p.fields()
    assert (f["bth.destqp"], f["bth.psn"], f["reth.va"], f["reth.r_key"]) == (0x11, 100, 0x1000,
                                                                               0x22)
    assert f["reth.dmalen"] == 1024 and p.payload == bytes(1024)  # DMA length defaults
    assert (f["ip.src"], f["ip.dst"]) == ("10.0.0.1", "10.0.0.2")
    assert p.icrc_valid


def test_ipv6(tmp_path):
    p = craft_one(tmp_path, "rc-send-only", "--ipv6", "--src", "fd00::a", "--dst", "fd00::b",
                  "--ttl", "9", "--ecn", "ect1", "--dscp", "26")
    f = p.fields()
    assert "ipv6" in f and "ip" not in f
    assert (f["ipv6.src"], f["ipv6.dst"], f["ipv6.hlim"]) == ("fd00::a", "fd00::b", 9)
    assert f["ipv6.tclass"] == (26 << 2) | 1
    assert p.icrc_valid


def test_vlan(tmp_path):
    p = craft_one(tmp_path, "rc-send-first", "--vlan", "100", "--vlan-priority", "5",
                  "--payload-size", "8")
    f = p.fields()
    assert (f["vlan.id"], f["vlan.priority"]) == (100, 5)
    assert p.icrc_valid


@pytest.mark.parametrize(("text", "bits"), [("ce", 3), ("ect0", 2), ("ect1", 1),
                                            ("not-ect", 0), ("2", 2)])
def test_ecn(tmp_path, text, bits):
    p = craft_one(tmp_path, "rc-send-only", "--ecn", text)
    assert p.fields()["ip.dsfield.ecn"] == bits
    assert p.icrc_valid  # ECN is masked out of the ICRC


def test_bad_icrc(tmp_path):
    good = craft_one(tmp_path, "rc-write-only", "--payload-size", "5")
    bad = craft_one(tmp_path, "rc-write-only", "--payload-size", "5", "--bad-icrc")
    assert good.icrc_valid and not bad.icrc_valid
    assert bad.fields()["icrc.valid"] is False
    assert bad.stored_icrc == good.stored_icrc ^ 0xFFFFFFFF
    assert bad.to_bytes()[:-4] == good.to_bytes()[:-4]


def test_payload_options(tmp_path):
    assert craft_one(tmp_path, "rc-send-only", "--payload-hex", "de ad:be ef").payload == \
        bytes.fromhex("deadbeef")
    src = tmp_path / "payload.bin"
    src.write_bytes(b"hello world")
    p = craft_one(tmp_path, "rc-send-only", "--payload-file", str(src))
    assert p.payload == b"hello world" and p.fields()["bth.padcnt"] == 1
    assert craft_one(tmp_path, "rc-send-only", "--payload-size", "7").payload == bytes(7)
    p = craft_one(tmp_path, "rc-send-only", "--payload-hex", "0102", "--payload-size", "5")
    assert p.payload == bytes.fromhex("0102010201")
    p = craft_one(tmp_path, "rc-atomic-write", "--payload-hex", "0011223344556677")
    assert p.payload == bytes.fromhex("0011223344556677") and p.icrc_valid
    assert craft_one(tmp_path, "rc-atomic-write").payload == bytes(8)


def test_count_steps_psn_with_wrap(tmp_path):
    frames = craft_frames(tmp_path, "rc-send-middle", "--psn", "0xfffffe", "--count", "4",
                          "--payload-size", "4")
    pkts = [roce.parse(f) for f in frames]
    assert [p.fields()["bth.psn"] for p in pkts] == [0xFFFFFE, 0xFFFFFF, 0, 1]
    assert all(p.icrc_valid for p in pkts)
    assert len({p.stored_icrc for p in pkts}) == 4
    frames = craft_frames(tmp_path, "rc-read-request", "--psn", "10", "--count", "3",
                          "--psn-step", "4", "--bad-icrc")
    pkts = [roce.parse(f) for f in frames]
    assert [p.fields()["bth.psn"] for p in pkts] == [10, 14, 18]
    assert not any(p.icrc_valid for p in pkts)


def test_write_pcap_timestamps_and_pcapng(tmp_path):
    path = tmp_path / "out.pcapng"
    assert main(["craft", "rc-send-only", "--count", "3", "--interval", "0.001", "-q", "-w",
                 str(path)]) == 0
    with open_capture(path) as reader:
        assert reader.format == "pcapng"
        stamps = [f.ts_ns for f in reader]
    assert [b - a for a, b in zip(stamps, stamps[1:])] == [1_000_000, 1_000_000]


def test_write_to_stdout():
    res = roce_cli("craft", "rc-acknowledge", "--syndrome", "0x1f", "--count", "2", "-w", "-")
    assert res.returncode == 0
    frames = [f.data for f in open_capture(__import__("io").BytesIO(res.stdout))]
    assert len(frames) == 2 and all(roce.parse(f).icrc_valid for f in frames)
    assert res.stderr.decode().count("RC Acknowledge") == 2  # the lines went to stderr


def test_generic_field_and_named_flags(tmp_path):
    p = craft_one(tmp_path, "rc-acknowledge", "--field", "aeth.syndrome=0x60", "--field",
                  "msn=5", "--field", "ip.id=7", "--field", "eth.dst=02:00:00:00:00:09",
                  "--smac", "02:00:00:00:00:0a", "--sport", "0xc123", "--ttl", "3", "--se",
                  "--ackreq", "--becn", "--field", "bth.m=true")
    f = p.fields()
    assert (f["aeth.syndrome"], f["aeth.msn"], f["ip.id"]) == (0x60, 5, 7)
    assert (f["eth.dst"], f["eth.src"]) == ("02:00:00:00:00:09", "02:00:00:00:00:0a")
    assert (f["udp.srcport"], f["ip.ttl"]) == (0xC123, 3)
    assert f["bth.se"] and f["bth.a"] and f["bth.becn"] and f["bth.m"]
    assert p.icrc_valid


def test_roce_v1(tmp_path):
    p = craft_one(tmp_path, "rc-send-only", "--roce-version", "1", "--src", "fe80::9",
                  "--ttl", "5", "--payload-size", "3")
    f = p.fields()
    assert f["roce.version"] == 1 and f["grh.sgid"] == "fe80::9" and f["grh.hoplmt"] == 5
    assert p.icrc_valid


# -- errors: one line, the right exit status ----------------------------------------------------


def test_unknown_opcode():
    err = one_line_error(roce_cli("craft", "rc-ack"), 1, "unknown opcode", "rc-acknowledge")
    assert err.startswith("roce craft:")
    one_line_error(roce_cli("craft", "0x99"), 1, "unknown opcode")


@pytest.mark.parametrize(("argv", "words"), [
    (["rc-send-only", "--field", "foo=1"], ["--field foo", "no field 'foo'"]),
    (["rc-send-only", "--va", "1"], ["--va", "RC Send Only"]),
    (["rc-send-only", "--dqpn", "0x1000000"], ["destqp", "24 bits"]),
    (["rc-send-only", "--src", "1.2.3"], ["--src", "bad IP address '1.2.3'"]),
    (["rc-read-request", "--payload-size", "4"], ["no payload"]),
    (["rc-atomic-write", "--payload-size", "4"], ["8 bytes"]),
    (["rc-send-only", "--roce-version", "1", "--sport", "5"], ["RoCEv1"]),
    (["rc-send-only", "--ipv6", "--roce-version", "1"], ["--ipv6"]),
    (["rc-send-only", "--payload-hex", "xyz"], ["not hex"]),
    (["rc-send-only", "--field", "novalue"], ["NAME=VALUE"]),
    (["rc-send-only", "--count", "0"], ["positive"]),
])
def test_bad_usage_exits_1(argv, words):
    res = roce_cli("craft", *argv)
    assert res.returncode == 1, res.stderr
    err = res.stderr.decode()
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "error" in line or "roce craft:" in line]
    for w in words:
        assert w in err, err


def test_unreadable_and_unwritable_files_exit_2(tmp_path):
    one_line_error(roce_cli("craft", "rc-send-only", "--payload-file",
                            str(tmp_path / "missing")), 2, "cannot read")
    one_line_error(roce_cli("craft", "rc-send-only", "-w", str(tmp_path / "no" / "x.pcap")), 2,
                   "cannot write")


def test_send_needs_an_interface():
    one_line_error(roce_cli("send", "rc-send-only"), 1, "-i IFACE is required")
    one_line_error(roce_cli("send", "-r", "x.pcap"), 1, "-i IFACE is required")


def test_send_usage_before_environment(tmp_path):
    # a bad opcode is reported as usage even with an interface that does not exist
    one_line_error(roce_cli("send", "nope", "-i", "nosuchif0"), 1, "unknown opcode")
    one_line_error(roce_cli("send", "rc-send-only", "-i", "nosuchif0"), 2, "no such interface")
    path = tmp_path / "f.pcap"
    assert main(["craft", "rc-send-only", "-q", "-w", str(path)]) == 0
    one_line_error(roce_cli("send", "-r", str(path), "--dqpn", "1", "-i", "lo"), 1, "--dqpn")
    one_line_error(roce_cli("send", "rc-send-only", "-r", str(path), "-i", "lo"), 1, "not both")
    one_line_error(roce_cli("send", "-r", str(tmp_path / "missing.pcap"), "-i", "lo"), 2,
                   "no such file")


def test_replay_errors(tmp_path):
    path = tmp_path / "f.pcap"
    assert main(["craft", "rc-send-only", "-q", "-w", str(path)]) == 0
    one_line_error(roce_cli("replay", str(path)), 1, "-i IFACE")
    one_line_error(roce_cli("replay", str(tmp_path / "missing.pcap"), "-i", "lo"), 2,
                   "no such file")
    one_line_error(roce_cli("replay", str(path), "-i", "nosuchif0"), 2, "no such interface")
    one_line_error(roce_cli("replay", str(path), "-i", "lo", "--pps", "10", "--max-gap", "1"),
                   1, "--max-gap")
    res = roce_cli("replay", str(path), "-i", "lo", "--pps", "10", "--topspeed")
    assert res.returncode == 1 and b"not allowed with" in res.stderr


def test_sniff_errors():
    one_line_error(roce_cli("sniff"), 1, "-i IFACE is required")
    one_line_error(roce_cli("sniff", "-i", "lo", "-f", "udp port"), 1, "capture filter")
    one_line_error(roce_cli("sniff", "-i", "lo", "-e", "bth.psn"), 1, "-e needs")
    res = roce_cli("sniff", "-i", "lo", "-Y", "bth.nope == 1")
    assert res.returncode == 1 and b"unknown field" in res.stderr
    assert b"Traceback" not in res.stderr
    one_line_error(roce_cli("sniff", "-i", "nosuchif0"), 2, "no such interface")


# -- replay: rewrites on bytes ------------------------------------------------------------------

MAC_S, MAC_D = "02:00:00:00:00:aa", "02:00:00:00:00:bb"


def _sample_frames() -> list[bytes]:
    """RoCE frames over every encapsulation, one with a bad ICRC, and frames that are not
    (or not whole) RoCE."""
    frames = [roce.craft(code, dqpn=0x10 + i, psn=0xFFFFF0 + i).to_bytes()
              for i, code in enumerate((0x04, 0x0A, 0x0C, 0x11, 0x13, 0x64, 0x81, 0xA4))]
    frames.append(roce.craft(0x04, b"abcde", ipv6=True, psn=7, dqpn=3).to_bytes())
    frames.append(roce.craft(0x0A, b"x" * 9, vlan=12, vlan_priority=2, va=5).to_bytes())
    frames.append(roce.craft(0x11, roce_version=1, psn=0xFFFFFF).to_bytes())
    bad = roce.craft(0x04, b"bad", psn=9)
    bad.icrc = bad.expected_icrc ^ 0x1234
    frames.append(bad.to_bytes())
    return frames


def _other_frames() -> list[bytes]:
    arp = bytes.fromhex("ffffffffffff020000000001" "0806") + bytes(28)
    base = roce.craft(0x04, b"zz").to_bytes()
    w = fast.walk(base)
    udp = bytearray(base)
    udp[w.udp_off + 2:w.udp_off + 4] = (9999).to_bytes(2, "big")  # another UDP port
    truncated = base[:w.bth_off + 6]  # claims RoCE, cut inside the BTH
    return [arp, bytes(udp), truncated]


def _reference(frame: bytes, rw: Rewrite, src: str | None, dst: str | None) -> bytes:
    """The same rewrite through the packet codec: parse, edit the headers, rebuild."""
    p = roce.parse(frame)
    good = p.icrc_valid
    error = p.stored_icrc ^ p.expected_icrc
    h = p.headers
    if rw.dmac is not None:
        h["eth"]["dst"] = MAC_D
    if rw.smac is not None:
        h["eth"]["src"] = MAC_S
    l3 = p.l3
    if src is not None:
        h[l3]["sgid" if l3 == "grh" else "src"] = src
    if dst is not None:
        h[l3]["dgid" if l3 == "grh" else "dst"] = dst
    if l3 == "ip":
        h["ip"]["checksum"] = None
    if rw.sport is not None and "udp" in h:
        h["udp"]["srcport"] = rw.sport
    if rw.dqpn is not None:
        h["bth"]["destqp"] = rw.dqpn
    if h["bth"]["opcode"] != 0x81:
        h["bth"]["psn"] = (h["bth"]["psn"] + rw.psn_offset) & 0xFFFFFF
    p.icrc = None
    if not good:
        p.icrc = p.expected_icrc ^ error
    return p.to_bytes()


def test_rewrites_match_the_packet_codec():
    rw = Rewrite(smac=bytes.fromhex(MAC_S.replace(":", "")),
                 dmac=bytes.fromhex(MAC_D.replace(":", "")),
                 src4=bytes([10, 9, 9, 1]), dst4=bytes([10, 9, 9, 2]),
                 src6=bytes.fromhex("fd00" + "00" * 13 + "11"),
                 dst6=bytes.fromhex("fd00" + "00" * 13 + "22"),
                 sport=0xD00D, dqpn=0xABCDE, psn_offset=0x20)
    for frame in _sample_frames():
        new = rewrite_frame(frame, rw)
        p = roce.parse(frame)
        v6 = p.l3 != "ip"
        want = _reference(frame, rw, "fd00::11" if v6 else "10.9.9.1",
                          "fd00::22" if v6 else "10.9.9.2")
        assert new == want, p
        q = roce.parse(new)
        assert q.icrc_valid == p.icrc_valid
        assert q.stored_icrc ^ q.expected_icrc == p.stored_icrc ^ p.expected_icrc
        f = q.fields()
        assert f["bth.destqp"] == 0xABCDE
        if f["bth.opcode"] != 0x81:
            assert f["bth.psn"] == (p.fields()["bth.psn"] + 0x20) & 0xFFFFFF
        if "ip" in f:
            w = fast.walk(new)
            assert fast.ip_checksum(new[w.l3_off:w.l3_off + w.l3_len]) == 0


def test_psn_offset_wraps_and_spares_cnp():
    rw = Rewrite(psn_offset=3)
    f = roce.craft(0x04, psn=0xFFFFFE).to_bytes()
    assert roce.parse(rewrite_frame(f, rw)).fields()["bth.psn"] == 1
    cnp = roce.craft(0x81, dqpn=5).to_bytes()
    assert rewrite_frame(cnp, rw) == cnp
    back = Rewrite(psn_offset=(-5) % (1 << 24))
    assert roce.parse(rewrite_frame(f, back)).fields()["bth.psn"] == 0xFFFFF9


def test_untouched_frames_are_identical():
    rw = Rewrite(dqpn=1, psn_offset=1, src4=bytes(4))
    for frame in _other_frames():
        assert rewrite_frame(frame, rw) is frame
    for frame in _sample_frames():
        assert rewrite_frame(frame, Rewrite()) is frame
    # only the family given is rewritten: an IPv6 frame keeps its addresses
    v6 = roce.craft(0x04, ipv6=True).to_bytes()
    assert rewrite_frame(v6, Rewrite(src4=bytes(4))) == v6


def test_mac_rewrite_keeps_the_icrc():
    f = roce.craft(0x0A, b"abc").to_bytes()
    new = rewrite_frame(f, Rewrite(dmac=b"\x02" * 6))
    assert new[:6] == b"\x02" * 6 and new[6:] == f[6:]


def test_udp_checksum_recomputed_when_present():
    p = roce.craft(0x04, b"data", psn=1)
    p.headers["udp"]["checksum"] = 0  # to fill in below
    frame = bytearray(p.to_bytes())
    w = fast.walk(bytes(frame))

    def udp_sum(buf: bytes) -> int:
        ip = buf[w.l3_off:w.l3_off + w.l3_len]
        seg = bytearray(buf[w.udp_off:w.l4_end])
        seg[6:8] = b"\0\0"
        pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, len(seg))
        return fast.ip_checksum(bytes(pseudo + seg)) or 0xFFFF

    frame[w.udp_off + 6:w.udp_off + 8] = udp_sum(bytes(frame)).to_bytes(2, "big")
    frame = bytes(frame)  # the ICRC masks the UDP checksum: still valid
    assert roce.parse(frame).icrc_valid
    new = rewrite_frame(frame, Rewrite(src4=bytes([1, 2, 3, 4]), sport=7))
    assert int.from_bytes(new[w.udp_off + 6:w.udp_off + 8], "big") == udp_sum(new)
    assert roce.parse(new).icrc_valid


def test_to_ethernet():
    eth = roce.craft(0x04, b"q").to_bytes()
    ip_part = eth[14:]
    sll = struct.pack("!HHH8sH", 0, 1, 6, bytes(8), 0x0800) + ip_part
    got = to_ethernet(sll, LINKTYPE_LINUX_SLL, dmac=b"\x02" * 6)
    assert got[:6] == b"\x02" * 6 and got[12:] == eth[12:]
    assert roce.parse(got).icrc_valid
    assert to_ethernet(ip_part, LINKTYPE_RAW)[12:] == eth[12:]
    assert to_ethernet(b"\x10" * 30, LINKTYPE_RAW) is None
    assert to_ethernet(b"x", 999) is None


def test_prepare_only_roce_and_counts():
    roce_frames, others = _sample_frames(), _other_frames()
    records = [(f, 1000 * i, 1) for i, f in enumerate(roce_frames + others)]
    rw = Rewrite(dqpn=9)
    prep = prepare(records, rw)
    assert prep.read == len(records) and len(prep.frames) == len(records)
    assert prep.rewritten == len(roce_frames)
    assert prep.frames[len(roce_frames):] == others
    only = prepare(records, rw, only_roce=True)
    # the ARP frame and the other UDP port go; the cut RoCE frame stays (malformed RoCE)
    assert only.dropped_not_roce == 2
    assert only.frames[-1] == others[-1]
    assert only.stamps == [r[1] for r in records[:len(roce_frames)]] + [records[-1][1]]


def test_prepare_leaves_out_frames_too_short_to_send(tmp_path):
    good = _sample_frames()[:2]
    records = [(good[0], 1, 1), (b"abc", 2, 1), (b"", 3, 1), (bytes(13), 4, 1),
               (good[1], 5, 1), (bytes(14), 6, 1)]
    prep = prepare(records, Rewrite())
    assert (prep.frames, prep.stamps) == ([good[0], good[1], bytes(14)], [1, 5, 6])
    assert (prep.read, prep.dropped_short) == (6, 3)
    # replay -w writes what it would send, and says once what it left out
    src, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    with PcapWriter(src) as w:
        for data, ts, _ in records:
            w.write(data, ts)
    res = roce_cli("replay", str(src), "-w", str(out))
    assert res.returncode == 0, res.stderr
    assert res.stderr.decode().count("shorter than an Ethernet header (14 bytes)") == 1
    assert "3 frames" in res.stderr.decode()
    with open_capture(out) as reader:
        assert [f.data for f in reader] == prep.frames


def test_schedule():
    stamps = [0, 1000, 1000, 500, 5000]  # a repeat and a step back
    offsets, period = schedule(stamps)
    assert offsets == [0, 1000, 1000, 1000, 5500]
    assert period == 5500 + 5500 // 4
    assert schedule(stamps, speed=2)[0] == [0, 500, 500, 500, 2750]
    assert schedule(stamps, max_gap=2e-6)[0] == [0, 1000, 1000, 1000, 3000]
    assert schedule(stamps, pps=1000) == ([0, 1_000_000, 2_000_000, 3_000_000, 4_000_000],
                                          5_000_000)
    assert schedule([]) == ([], 0)
    assert schedule([7]) == ([0], 0)


def test_schedules_that_do_not_fit_are_refused():
    """A schedule's offsets are 64-bit nanoseconds (the pacer's deadlines): one that runs
    past them is a ValueError naming how long it would take, never an OverflowError."""
    from roce.options import MAX_NS

    with pytest.raises(ValueError, match="would take"):
        schedule([0, 2, 4], speed=1e-308)
    with pytest.raises(ValueError, match="would take"):
        schedule([0, 1 << 63], speed=1.0)
    assert schedule([0, 1 << 63], max_gap=1.0)[0] == [0, 1_000_000_000]
    with pytest.raises(ValueError, match="would take"):
        schedule(list(range(1000)), pps=1e-9)
    assert schedule([0, 1], pps=1 / (MAX_NS // 1_000_000_000))[0][1] <= MAX_NS


@pytest.mark.parametrize(("argv", "option"), [
    (["send", "rc-send-only", "--pps", "1e-308", "-i", "nosuchif0"], "--pps"),
    (["send", "rc-send-only", "--pps", "1e-11", "-i", "nosuchif0"], "--pps"),
    (["replay", "{}", "--speed", "1e-308", "-i", "nosuchif0"], "--speed"),
    (["replay", "{}", "--pps", "1e-308", "-i", "nosuchif0"], "--pps"),
    (["replay", "{}", "--pps", "2e-10", "-i", "nosuchif0"], "--pps"),
    (["fuzz", "wire", "-i", "nosuchif0", "--target", "10.0.0.2", "--qpn", "1", "--pps",
      "1e-308"], "--pps"),
])
def test_rates_are_checked_against_what_their_consumers_hold(tmp_path, argv, option):
    """``--pps`` and ``--speed`` are refused (exit 1, naming the option, before the
    interface is looked at) when the pacing they ask for does not fit 64-bit nanoseconds:
    a frame period, or a replay schedule of this capture."""
    path = tmp_path / "gaps.pcap"
    with PcapWriter(path) as w:  # three frames a second apart
        for i in range(3):
            w.write(roce.craft("RC_SEND_ONLY", psn=i).to_bytes(), 1_700_000_000_000_000_000
                    + i * 1_000_000_000)
    argv = [a.replace("{}", str(path)) for a in argv]
    one_line_error(roce_cli(*argv), 1, option)


def test_replay_write_only_rewrites_a_capture(tmp_path):
    src, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    frames = _sample_frames() + _other_frames()
    with PcapWriter(src) as w:
        for i, f in enumerate(frames):
            w.write(f, 1_700_000_000_000_000_000 + i * 1000)
    res = roce_cli("replay", str(src), "--rewrite-dqpn", "0x77", "--psn-offset", "-1",
                   "--rewrite-dst", "10.1.1.1", "--rewrite-dst", "fd00::1", "-w", str(out))
    assert res.returncode == 0, res.stderr
    with open_capture(out) as reader:
        got = list(reader)
    assert [f.ts_ns for f in got] == [1_700_000_000_000_000_000 + i * 1000
                                      for i in range(len(frames))]
    rw = Rewrite(dqpn=0x77, psn_offset=0xFFFFFF, dst4=bytes([10, 1, 1, 1]),
                 dst6=bytes.fromhex("fd00" + "00" * 13 + "01"))
    assert [f.data for f in got] == [rewrite_frame(f, rw) for f in frames]
    assert got[-1].data == frames[-1]


# -- raw-socket helpers that need no wire -------------------------------------------------------


def test_interface_checks():
    with pytest.raises(iface.InterfaceError, match="no such interface"):
        iface.check_interface("nosuchif0")
    with pytest.raises(iface.InterfaceError, match="too long"):
        iface.check_interface("x" * 20)
    iface.check_interface("lo")
    assert iface.interface_mtu("lo") > 0


def test_compile_filter():
    prog = iface.compile_filter("udp port 4791 or ether proto 0x8915")
    if prog is None:
        pytest.skip("neither libpcap nor tcpdump is installed")
    assert len(prog) > 5 and all(len(insn) == 4 for insn in prog)
    with pytest.raises(iface.FilterError, match="capture filter"):
        iface.compile_filter("udp port")
    # the tcpdump path compiles the same program as libpcap
    tcpdump = iface._compile_tcpdump("udp port 4791 or ether proto 0x8915", 262144)
    if tcpdump is not None:
        assert tcpdump == prog


def test_frame_batch_layout():
    frames = [b"a" * 60, b"bb" * 40, b"c" * 61]
    batch = iface.FrameBatch(frames)
    assert batch.count == 3 and batch.nbytes == 201
    import ctypes

    for i, f in enumerate(frames):
        v = batch._iov[i]
        assert ctypes.string_at(v.iov_base, v.iov_len) == f
        assert batch._msgs[i].msg_hdr.msg_iovlen == 1
    assert batch.address(2) - batch.address(0) == 2 * ctypes.sizeof(iface._MMsgHdr)


def test_timing_stats():
    t = iface.TimingStats()
    for e in (-4, 2, 0):
        t.add(e)
    t.add(10, 2)
    assert (t.count, t.worst) == (5, 10) and t.mean == pytest.approx(26 / 5)


def test_python_capture_filter():
    accept = python_filter(4791)
    assert all(accept(f) for f in _sample_frames())
    arp, other_port, truncated = _other_frames()
    assert not accept(arp) and not accept(other_port) and accept(truncated)
    w = fast.walk(other_port)
    reply = bytearray(other_port)  # from the RoCE port to another one: "udp port" matches
    reply[w.udp_off:w.udp_off + 2] = (4791).to_bytes(2, "big")
    assert accept(bytes(reply))
    assert fast.walk(_sample_frames()[0]).status == OK


@settings(max_examples=examples(60))
@given(st.sampled_from(["rc-send-only", "rc-rdma-write-middle", "ud-send-only",
                        "rc-acknowledge", "rc-rdma-read-request", "uc-send-only-immediate"]),
       st.sampled_from([[], ["--ipv6"], ["--vlan", "9"], ["--roce-version", "1"]]),
       st.sampled_from([[], ["--bad-icrc"], ["--field", "icrc=0x1234"],
                        ["--field", "udp.dstport=9"]]),
       st.integers(0, 0xFFFFFF), st.integers(0, 0xFFFFFF), st.integers(1, 6))
def test_patched_frames_equal_crafted_packets(opcode, encap, icrc, psn, step, count):
    """``roce craft`` writes frames patched from the first (PSN and ICRC only): the same
    bytes as crafting each packet whole."""
    if encap == ["--roce-version", "1"] and icrc[-1:] == ["udp.dstport=9"]:
        return  # RoCEv1 has no UDP header
    from roce.cli import build_parser
    from roce.cli.craft import iter_frames

    payload = ["--payload-size", "5"] if "send" in opcode or "write" in opcode else []
    args = build_parser("craft").parse_args(
        ["craft", opcode, *encap, *icrc, *payload, "--psn", str(psn), "--psn-step", str(step)])
    assert list(iter_frames(args, count)) == [p.to_bytes() for p in build_packets(args, count)]


@pytest.mark.parametrize(("ip", "mac"), [
    ("255.255.255.255", "ff:ff:ff:ff:ff:ff"),
    ("224.0.0.251", "01:00:5e:00:00:fb"), ("239.255.128.1", "01:00:5e:7f:80:01"),
    ("ff02::1:ff00:1234", "33:33:ff:00:12:34"),
    # a RoCEv1 GID / link-local address made from a MAC (EUI-64, U/L bit flipped)
    ("fe80::ac11:22ff:fe33:4455", "ae:11:22:33:44:55"),
    ("fe80::1:2ff:fe03:405", "02:01:02:03:04:05"),
])
def test_macs_an_address_maps_to_without_asking(ip, mac):
    # no interface is looked at (the name does not exist): the mapping is fixed
    assert iface.resolve_mac("nosuchif0", ip) == mac


def test_addresses_that_need_a_neighbour():
    for ip in ("10.0.0.2", "fe80::1", "fd00::2"):
        with pytest.raises(iface.InterfaceError, match="no such interface"):
            iface.resolve_mac("nosuchif0", ip)
