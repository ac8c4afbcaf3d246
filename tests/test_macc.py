"""MAC Control frames (802.3x PAUSE, 802.1Qbb PFC): codec, decode, filters, stats, craft, and
tshark as the oracle."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tshark_oracle import TSHARK, fields_command, tshark_value

import roce
from roce import macc
from roce.analysis import cflows, flows, pauses, tap
from roce.cli import main
from roce.decoder import decode
from roce.errors import DecodeError, RoceError
from roce.pcapio import PcapNgWriter, PcapWriter, open_capture

SRC = bytes.fromhex("02aabbccdd01")

prio_times = st.dictionaries(st.integers(0, 7), st.integers(0, macc.MAX_QUANTA))


# -- codec -------------------------------------------------------------------------------------


@given(prio_times, st.binary(min_size=6, max_size=6))
def test_pfc_round_trip(times, src):
    frame = macc.build_pfc(src, times)
    assert len(frame) == macc.MIN_FRAME
    m = macc.parse_macc(frame)
    assert m is not None and m.is_pfc and not m.is_pause
    assert (m.opcode, m.src, m.dst) == (macc.OPCODE_PFC, src, macc.PFC_DST_MAC)
    assert m.enable_vector == sum(1 << p for p in times)
    assert m.times == tuple(times.get(p, 0) for p in range(8))
    assert m.class_times() == dict(sorted(times.items()))


@given(st.integers(0, macc.MAX_QUANTA), st.binary(min_size=6, max_size=6))
def test_pause_round_trip(quanta, src):
    frame = macc.build_pause(src, quanta)
    assert len(frame) == macc.MIN_FRAME
    m = macc.parse_macc(frame)
    assert m == macc.MacControl(macc.OPCODE_PAUSE, 0, (quanta,) + (0,) * 7, src,
                                macc.PFC_DST_MAC)
    assert m.class_times() == dict.fromkeys(range(8), quanta)


def test_pfc_wire_bytes():
    """The bytes 802.1Qbb specifies, written out by hand: DA, SA, 0x8808, opcode 0x0101,
    vector 0x0008 (class 3), c3 = 0xFFFF, zero padding to 60 bytes."""
    frame = macc.build_pfc(SRC, {3: 0xFFFF})
    want = (bytes.fromhex("0180c2000001") + SRC + bytes.fromhex("8808 0101 0008")
            + bytes(6) + b"\xff\xff" + bytes(8))
    assert frame == want + bytes(60 - len(want))
    assert macc.build_pause(SRC, 0x1234)[12:18] == bytes.fromhex("8808 0001 1234")


def test_parse_not_macc_and_vlan():
    assert macc.parse_macc(bytes(60)) is None
    assert macc.parse_macc(b"\x00" * 10) is None
    frame = macc.build_pfc(SRC, {5: 7})
    tagged = frame[:12] + bytes.fromhex("8100 a005") + frame[12:]
    m = macc.parse_macc(tagged)
    assert m is not None and m.class_times() == {5: 7}


@pytest.mark.parametrize("cut,header,offset", [(15, "macc", 14), (20, "macc.cbfc", 16)])
def test_parse_cut_short(cut, header, offset):
    with pytest.raises(DecodeError) as exc:
        macc.parse_macc(macc.build_pfc(SRC, {0: 1})[:cut])
    assert (exc.value.header, exc.value.offset) == (header, offset)


def test_unknown_opcode_is_macc():
    frame = bytearray(macc.build_pause(SRC, 9))
    frame[14:16] = b"\x00\x02"  # MPCP GATE: MAC Control, not a pause
    m = macc.parse_macc(bytes(frame))
    assert m is not None and m.opcode == 2 and m.class_times() == {}


@pytest.mark.parametrize("call", [
    lambda: macc.build_pfc(SRC, {8: 1}),
    lambda: macc.build_pfc(SRC, {0: 0x10000}),
    lambda: macc.build_pfc(SRC, {0: -1}),
    lambda: macc.build_pause(SRC[:5], 1),
    lambda: macc.quanta_to_ns(1, 0),
])
def test_bad_arguments(call):
    with pytest.raises(RoceError):
        call()


def test_quanta_to_ns():
    # 512 bit times per quantum: 5.12 ns at 100 Gb/s, 0xFFFF quanta = 335.5392 us
    assert macc.quanta_to_ns(1, 100e9) == 5.12
    assert macc.quanta_to_ns(0xFFFF, 100e9) == 335539.2
    assert macc.quanta_to_ns(0xFFFF, 10e9) == 3355392.0
    assert macc.quanta_to_ns(0, 25e9) == 0.0


# -- roce decode -------------------------------------------------------------------------------

SRC2 = bytes.fromhex("02aabbccdd02")
T0 = 1_700_000_000_000_000_000


def write_pcap(path: Path, frames: list[tuple[bytes, int]], ng: bool = False) -> Path:
    with (PcapNgWriter if ng else PcapWriter)(path) as w:
        for data, ts in frames:
            w.write(data, ts)
    return path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)
    except SystemExit as exc:  # an option value the parser refused (roce.options)
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """A RoCE SEND, then MAC Control frames of every kind, one cut short."""
    frames = [
        roce.craft("RC_SEND_ONLY", b"abcd", dqpn=0x11, psn=7).to_bytes(),
        macc.build_pfc(SRC, {3: 0xFFFF}),
        macc.build_pfc(SRC, {3: 100, 5: 0}),
        macc.build_pfc(SRC, {}),
        macc.build_pause(SRC2, 1000),
        macc.build_pause(SRC2, 0),
        macc.build_pfc(SRC, {1: 2})[:20],
    ]
    return write_pcap(tmp_path / "m.pcap", [(f, T0 + i * 1000) for i, f in enumerate(frames)])


INFOS = ["PFC 60 PFC PAUSE prio 3 quanta 65535",
         "PFC 60 PFC PAUSE prio 3 quanta 100, XON prio 5",
         "PFC 60 PFC no class enabled",
         "PAUSE 60 PAUSE quanta 1000",
         "PAUSE 60 PAUSE XON"]


def test_decode_one_line(mixed, capsys):
    code, out, _ = run_cli(["decode", str(mixed)], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 7
    assert "RRoCE" in lines[0]
    for line, info in zip(lines[1:6], INFOS):
        assert line.endswith(info), line
    assert "02:aa:bb:cc:dd:01 -> 01:80:c2:00:00:01" in lines[1]
    assert lines[6].endswith("PFC 20 Class Based Flow Control [CBFC] Pause [Malformed: "
                             "Class Based Flow Control [CBFC] Pause body cut short at byte 16: "
                             "4 of 18 bytes]"), lines[6]
    # the record path (-Y) prints the same lines as the batch path
    code, out2, _ = run_cli(["decode", "-Y", "frame.number > 0", str(mixed)], capsys)
    assert out2 == out


def test_decode_tree(mixed, capsys):
    code, out, _ = run_cli(["decode", "-V", "-c", "3", str(mixed)], capsys)
    blocks = out.split("\n\n")
    pfc = blocks[1]
    assert "[Protocols in frame: eth:macc]" in pfc
    assert ("MAC Control\n"
            "    Opcode: Class Based Flow Control [CBFC] Pause (0x0101)\n"
            "    CBFC Class Enable Vector: 0x0008, C3\n"
            "        .... .... .... ...0 = C0: False\n") in pfc
    assert "        .... .... .... 1... = C3: True\n" in pfc
    assert "        .... .... 0... .... = C7: False\n    CBFC Class Pause Times\n" in pfc
    assert "        C3: 65535\n" in pfc and "        C2: 0\n" in pfc
    assert "CBFC Class Enable Vector: 0x0028, C3, C5" in blocks[2]
    code, out, _ = run_cli(["decode", "-V", "-Y", "pause", "-c", "1", str(mixed)], capsys)
    assert "MAC Control\n    Opcode: Pause (0x0001)\n    pause_time: 1000\n" in out


ALL_MACC = ["macc.opcode", "macc.pause_time", "macc.cbfc.enbv",
            *(f"macc.cbfc.enbv.c{p}" for p in range(8)),
            *(f"macc.cbfc.pause_time.c{p}" for p in range(8))]


def test_field_names_are_wiresharks():
    assert set(macc.FIELD_NAMES) == set(ALL_MACC)
    assert set(ALL_MACC) <= decode.known_fields()


def test_decode_fields(mixed, capsys):
    args = ["decode", "-T", "fields", "-e", "frame.number", "-e", "macc.opcode", "-e",
            "macc.cbfc.enbv", "-e", "macc.cbfc.enbv.c3", "-e", "macc.cbfc.enbv.c5", "-e",
            "macc.cbfc.pause_time.c3", "-e", "macc.pause_time", "-Y", "macc", str(mixed)]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    # opcode and vector in hex, as tshark prints them (tests/test_tshark_names.py)
    assert out.splitlines() == ["2\t0x0101\t0x0008\t1\t0\t65535\t",
                                "3\t0x0101\t0x0028\t1\t1\t100\t",
                                "4\t0x0101\t0x0000\t0\t0\t0\t", "5\t0x0001\t\t\t\t\t1000",
                                "6\t0x0001\t\t\t\t\t0", "7\t0x0101\t\t\t\t\t"]
    code, out, _ = run_cli([*args, "-E", "raw=y"], capsys)
    assert out.splitlines()[:2] == ["2\t257\t8\t1\t0\t65535\t", "3\t257\t40\t1\t1\t100\t"]


@pytest.mark.parametrize("expr,numbers", [
    ("pfc", [2, 3, 4, 7]),
    ("pause", [5, 6]),
    ("macc", [2, 3, 4, 5, 6, 7]),
    ("macc.cbfc.enbv.c3", [2, 3, 4]),  # presence, as in Wireshark
    ("macc.cbfc.enbv.c3 == 1", [2, 3]),
    ("macc.cbfc.enbv.c5 == true and macc.cbfc.pause_time.c5 == 0", [3]),
    ("macc.cbfc.pause_time.c3 > 100", [2]),
    ("macc.opcode == 0x0101 and malformed", [7]),
    ("macc.pause_time == 0", [6]),
    ("not macc", [1]),
])
def test_decode_filters(mixed, capsys, expr, numbers):
    code, out, err = run_cli(["decode", "-Y", expr, "-T", "fields", "-e", "frame.number",
                              str(mixed)], capsys)
    assert code == 0, err
    assert [int(x) for x in out.split()] == numbers


def test_decode_lists_and_json(mixed, capsys):
    _, out, _ = run_cli(["decode", "-G", "fields"], capsys)
    assert set(ALL_MACC) <= set(out.split())
    _, out, _ = run_cli(["decode", "-G", "macros"], capsys)
    assert "pfc\tmacc.opcode == 0x0101" in out.splitlines()
    _, out, _ = run_cli(["decode", "-T", "json", "-Y", "pfc", "-c", "1", str(mixed)], capsys)
    doc = json.loads(out)
    rec = doc[0] if isinstance(doc, list) else doc
    text = json.dumps(rec)
    assert '"macc.cbfc.pause_time.c3": 65535' in text and '"macc.cbfc.enbv.c3": true' in text


# -- roce stats --------------------------------------------------------------------------------


def pause_capture(path: Path, ng: bool = False) -> Path:
    """Class 3 from SRC: paused at 0 for 1000 quanta, refreshed at 2000 ns (until 7120 ns at
    100 Gb/s), paused again at 10000 ns for 500 quanta and resumed by an XON at 11000 ns;
    class 5 from SRC2 for 0xFFFF quanta; an 802.3x PAUSE from SRC2; RoCE frames between."""
    send = [roce.craft("RC_SEND_ONLY", b"abcd", dqpn=0x11, psn=n).to_bytes() for n in (7, 8)]
    frames = [(send[0], 0), (macc.build_pfc(SRC, {3: 1000}), 0),
              (macc.build_pfc(SRC, {3: 1000}), 2000), (send[1], 3000),
              (macc.build_pfc(SRC, {3: 500}), 10_000), (macc.build_pfc(SRC, {3: 0}), 11_000),
              (macc.build_pfc(SRC2, {5: 0xFFFF}), 20_000), (macc.build_pause(SRC2, 10), 30_000)]
    return write_pcap(path, [(f, T0 + t) for f, t in frames], ng)


def rows_by_class(doc: dict) -> dict:
    return {(r["from"], r["priority"]): r for r in doc["pfc"]["classes"]}


A1, A2 = SRC.hex(":"), SRC2.hex(":")


def test_stats_pauses_json(tmp_path, capsys):
    cap = pause_capture(tmp_path / "p.pcap")
    code, out, _ = run_cli(["stats", "-T", "json", str(cap)], capsys)
    assert code == 0
    doc = json.loads(out)
    pfc = doc["pfc"]
    assert (pfc["frames"], pfc["malformed"], pfc["link_rate_bps"]) == (6, 0, 100e9)
    rows = rows_by_class(doc)
    assert set(rows) == {(A1, 3), (A2, 5), (A2, "all")}
    r = rows[(A1, 3)]
    # stretch 1: 0 .. 2000 + 1000 * 5.12 = 7120 ns; stretch 2: 10000 .. 11000 (XON)
    assert (r["pauses"], r["xons"], r["stretches"]) == (3, 1, 2)
    assert (r["paused_ns"], r["longest_ns"]) == (7120 + 1000, 7120)
    assert rows[(A2, 5)]["paused_ns"] == 335539.2  # 0xFFFF * 512 bits at 100 Gb/s
    assert rows[(A2, "all")]["paused_ns"] == 51.2
    assert doc["totals"]["roce_packets"] == 2 and doc["totals"]["not_roce"] == 6
    assert "pause_storm" not in doc["expert"]["counts"]


def test_stats_link_rate(tmp_path, capsys):
    cap = pause_capture(tmp_path / "p.pcap")
    code, out, _ = run_cli(["stats", "-T", "json", "--link-rate", "25G", str(cap)], capsys)
    rows = rows_by_class(json.loads(out))
    # 20.48 ns a quantum: 2000 + 20480 = 22480 (past the third frame at 10000 ns, so one
    # stretch 0 .. 11000 (XON))
    assert rows[(A1, 3)]["stretches"] == 1 and rows[(A1, 3)]["paused_ns"] == 11000
    assert rows[(A2, 5)]["paused_ns"] == 65535 * 20.48


def test_stats_pause_storm(tmp_path, capsys):
    cap = pause_capture(tmp_path / "p.pcap")
    code, out, _ = run_cli(["stats", "--pause-storm", "7us", str(cap)], capsys)
    assert code == 0
    assert ("warning  #2 PFC pause storm: priority 3 from 02:aa:bb:cc:dd:01 paused 7.120 us "
            "without a break (2 frames; threshold 7.000 us)") in out
    assert ("warning  #7 PFC pause storm: priority 5 from 02:aa:bb:cc:dd:02 paused "
            "335.539 us") in out
    assert "from 02:aa:bb:cc:dd:01 prio 3" in out and "8.120 us" in out
    # the threshold is exclusive: a stretch of exactly 7120 ns is no storm
    _, out, _ = run_cli(["stats", "-T", "json", "--pause-storm", "7120ns", str(cap)], capsys)
    doc = json.loads(out)
    assert doc["expert"]["counts"] == {"pause_storm": 1}
    (event,) = doc["expert"]["events"]
    assert (event["frame"], event["kind"], event["severity"]) == (7, "pause_storm", "warning")
    assert event["ts_ns"] == T0 + 20_000


@pytest.mark.parametrize("bad", [["--link-rate", "fast"], ["--link-rate", "0"],
                                 ["--pause-storm", "soon"], ["--pause-storm", "0"]])
def test_stats_bad_options(tmp_path, capsys, bad):
    cap = pause_capture(tmp_path / "p.pcap")
    code, _, err = run_cli(["stats", *bad, str(cap)], capsys)
    assert code == 1 and "roce stats:" in err


@pytest.mark.parametrize("engine", ["compiled", "reference"])
@pytest.mark.parametrize("ng", [False, True])
def test_tap_with_each_engine_and_format(tmp_path, engine, ng):
    """Both engines, the in-place pcap scan and the batch path (pcapng) see the same."""
    if engine == "compiled" and not cflows.AVAILABLE:
        pytest.skip("the compiled engine is not built")
    cap = pause_capture(tmp_path / ("p.pcapng" if ng else "p.pcap"), ng)
    acc = pauses.PauseAccount(100e9, 1_000_000)
    with open_capture(cap) as reader:
        an = flows.make_analyzer(engine=engine, batch=3)
        an.feed_capture(tap.Tap(reader, an, acc))
    rep = acc.finish()
    assert an.finish().totals["roce_packets"] == 2
    rows = {(r["from"], r["priority"]): r for r in rep.rows}
    assert rows[(A1, 3)]["paused_ns"] == 8120 and rows[(A1, 3)]["pauses"] == 3
    assert rep.frames == 6


def test_tap_leaves_roce_only_blocks_alone(tmp_path, monkeypatch):
    """The hot path: blocks without frames that are not RoCE are never split."""
    frames = [(roce.craft("RC_SEND_ONLY", bytes(64), dqpn=1, psn=i).to_bytes(), T0 + i)
              for i in range(50)]
    cap = write_pcap(tmp_path / "r.pcap", frames)
    acc = pauses.PauseAccount(100e9, 1_000_000)
    calls = []
    monkeypatch.setattr(acc, "scan_records", lambda *a: calls.append(a))
    monkeypatch.setattr(acc, "scan_batch", lambda *a: calls.append(a))
    with open_capture(cap) as reader:
        an = flows.make_analyzer()
        an.feed_capture(tap.Tap(reader, an, acc))
    assert an.finish().totals["roce_packets"] == 50 and calls == []


def test_stats_malformed_macc_counted(tmp_path, capsys):
    cap = write_pcap(tmp_path / "x.pcap", [(macc.build_pfc(SRC, {1: 2})[:20], T0)])
    _, out, _ = run_cli(["stats", "-T", "json", str(cap)], capsys)
    pfc = json.loads(out)["pfc"]
    assert (pfc["frames"], pfc["malformed"], pfc["classes"]) == (1, 1, [])


# -- roce craft --------------------------------------------------------------------------------


def test_craft_pfc_and_pause(tmp_path, capsys):
    out_pcap = tmp_path / "c.pcap"
    code, out, _ = run_cli(["craft", "pfc", "--prio", "3", "--prio", "5=0", "--quanta", "77",
                            "--smac", "02:00:00:00:00:09", "--count", "2", "-w",
                            str(out_pcap)], capsys)
    assert code == 0 and out.count("PFC PAUSE prio 3 quanta 77, XON prio 5") == 2
    frames = list(open_capture(out_pcap))
    assert [f.data for f in frames] == [macc.build_pfc(bytes.fromhex("020000000009"),
                                                       {3: 77, 5: 0})] * 2
    code, out, _ = run_cli(["craft", "pause", "--quanta", "1000"], capsys)
    assert code == 0 and out.rstrip().endswith("PAUSE 60 PAUSE quanta 1000")
    code, out, _ = run_cli(["craft", "PFC", "--prio", "0"], capsys)
    assert out.rstrip().endswith(f"PFC PAUSE prio 0 quanta {macc.MAX_QUANTA}")


@pytest.mark.parametrize("args,message", [
    (["pause", "--prio", "3"], "--prio is for pfc"),
    (["pfc"], "give at least one --prio"),
    (["pfc", "--prio", "1", "--dqpn", "5"], "MAC Control frames take no --dqpn"),
    (["pfc", "--prio", "1", "--smac", "zz"], "bad MAC address"),
])
def test_craft_refuses(capsys, args, message):
    code, _, err = run_cli(["craft", *args], capsys)
    assert code == 1 and message in err


# -- tshark as the oracle ----------------------------------------------------------------------


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_agrees(tmp_path, capsys):
    """Frames we build, decoded by Wireshark's macc dissector and by ours: the same macc.*
    text, field by field (opcode and enable vector in hex, as tshark prints them)."""
    built = [macc.build_pfc(SRC, {p: (p * 9973 + 1) & 0xFFFF for p in range(8) if mask >> p & 1})
             for mask in (0x01, 0x08, 0x28, 0xFF, 0x80, 0x00, 0x55)]
    built += [macc.build_pfc(SRC2, {3: 0}), macc.build_pause(SRC, 0xFFFF),
              macc.build_pause(SRC2, 0), macc.build_pause(SRC, 512)]
    cap = write_pcap(tmp_path / "t.pcap", [(f, T0 + i) for i, f in enumerate(built)])
    cmd = fields_command(cap, ALL_MACC)
    theirs = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    code, ours, _ = run_cli(["decode", "-T", "fields", *(x for n in ALL_MACC
                                                          for x in ("-e", n)), str(cap)], capsys)
    assert code == 0
    their_rows = [line.split("\t") for line in theirs.splitlines()]
    our_rows = [line.split("\t") for line in ours.splitlines()]
    assert len(their_rows) == len(our_rows) == len(built)
    for t_row, o_row in zip(their_rows, our_rows):
        for name, t, o in zip(ALL_MACC, t_row, o_row):
            assert o == t, (name, t, o)
    # and every PFC row says what the frame was built with
    assert [tshark_value("macc.cbfc.pause_time.c3", r[ALL_MACC.index("macc.cbfc.pause_time.c3")])
            for r in their_rows[:4]] == [0, 3 * 9973 + 1, 3 * 9973 + 1, 3 * 9973 + 1]


def test_tap_among_other_frames(tmp_path):
    """Frames that are not RoCE but not MAC Control either (ARP), a runt that starts with the
    MAC Control address: the PFC frames around them are all found, numbered right."""
    arp = bytes.fromhex("ffffffffffff") + SRC + b"\x08\x06" + bytes(28)
    runt = macc.PFC_DST_MAC + b"\x00\x01"
    frames = [arp, runt, macc.build_pfc(SRC, {2: 10}), arp, macc.build_pfc(SRC, {2: 0}),
              roce.craft("RC_SEND_ONLY", b"", dqpn=1, psn=1).to_bytes(), arp,
              macc.build_pause(SRC2, 3)]
    cap = write_pcap(tmp_path / "o.pcap", [(f, T0 + 10 * i) for i, f in enumerate(frames)])
    acc = pauses.PauseAccount(100e9, 1)  # every stretch is a storm: events name frames
    with open_capture(cap) as reader:
        an = flows.make_analyzer()
        an.feed_capture(tap.Tap(reader, an, acc))
    rep = acc.finish()
    assert rep.frames == 3
    rows = {(r["from"], r["priority"]): r for r in rep.rows}
    assert rows[(A1, 2)]["paused_ns"] == 20 and rows[(A1, 2)]["xons"] == 1  # XON at +20 ns
    assert rows[(A2, "all")]["paused_ns"] == 3 * 5.12
    assert [e.frame for e in rep.events] == [3, 8]


@given(prio_times, st.booleans())
def test_decoder_fields_match_codec(times, tagged):
    """The decoder's flat fields say what build_pfc was given, also behind a VLAN tag."""
    frame = macc.build_pfc(SRC, times)
    if tagged:
        frame = frame[:12] + bytes.fromhex("8100 6007") + frame[12:]
    (rec,) = decode.decode_frames([(frame, T0, len(frame), len(frame), 1)])
    f = rec.fields
    assert rec.kind == "other" and rec.layers[-1] == "macc" and "malformed" not in f
    assert f["macc.opcode"] == macc.OPCODE_PFC
    assert f["macc.cbfc.enbv"] == sum(1 << p for p in times)
    for p in range(8):
        assert f[f"macc.cbfc.enbv.c{p}"] is (p in times)
        assert f[f"macc.cbfc.pause_time.c{p}"] == times.get(p, 0)
    assert "macc.pause_time" not in f


def test_stats_from_stdin_and_gzip(tmp_path):
    """The streamed (stdin) and decompressed reads find the same pauses as the mapped one."""
    import gzip
    import sys

    cap = pause_capture(tmp_path / "p.pcap")
    gz = tmp_path / "p.pcap.gz"
    gz.write_bytes(gzip.compress(cap.read_bytes()))
    for args, stdin in ((["-"], cap.read_bytes()), ([str(gz)], None)):
        done = subprocess.run([sys.executable, "-m", "roce", "stats", "-T", "json", *args],
                              input=stdin, capture_output=True, timeout=60, check=True)
        rows = rows_by_class(json.loads(done.stdout))
        assert rows[(A1, 3)]["paused_ns"] == 8120 and rows[(A2, 5)]["pauses"] == 1
