"""Decoding Ultra Ethernet Transport: every PDS type and SES header built from drawn field values
and read back field by field (both readings, UDP and IP protocol 253), through the family and
through ``roce decode`` (one line, ``-V``, ``-T json/fields``, ``-Y``, parquet), captures that
mix RoCE and UET, decode-as, cut and random packets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import roce
from roce.cli import main
from roce.decoder.decode import decode_frames
from roce.families import registry
from roce.families.uet import build, dissect, layouts, present
from roce.families.uet import codes as t
from roce.families.uet.checks import CHECKS
from roce.families.uet.layouts import SIGNED
from roce.pcapio import Frame, PcapWriter
from roce.testing.strategies import UetCase, uet_cases

SES_OPCODES = sorted(t.SES_OPCODES)
REF_OPCODES = sorted(t.REF_PROV_SES_OPCODES)


def _norm(key: str, v: Any) -> Any:
    if key in SIGNED and isinstance(v, int):
        return dissect.signed16(v & 0xFFFF)
    return v


def _assert_round_trip(case: UetCase, fields: dict[str, Any]) -> None:
    for key, value in case.values.items():
        assert key in fields, (key, case.values)
        assert fields[key] == _norm(key, value), (key, fields[key], value)


def _decode_case(case: UetCase) -> dissect.Decoded:
    data = build.uet_bytes(case.values, case.reading, case.payload, entropy=case.native)
    return dissect.decode(data, entropy=case.native, reading=case.reading)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(["spec", "ref-prov"]).flatmap(lambda r: uet_cases(reading=r)))
def test_drawn_packets_read_back_field_by_field(case: UetCase) -> None:
    d = _decode_case(case)
    assert d.kind == "uet", d.error
    _assert_round_trip(case, d.fields)
    assert "uet.expert" not in d.fields, {c.field: d.fields.get(c.field) for c in CHECKS}
    if "uet.tss" in case.values:
        assert d.fields["uet.encrypted"] == len(case.payload)
        assert "uet.ses" not in d.fields
    else:
        assert d.fields["payload.len"] == len(case.payload)


@settings(max_examples=200)
@given(case=st.sampled_from(["spec", "ref-prov"]).flatmap(
    lambda r: uet_cases(reading=r, clean=False)))
def test_any_field_values_read_back(case: UetCase) -> None:
    """Every field over its whole width (reserved bits, unknown codes): still read back; the
    notes say what is odd, the decode does not fail."""
    d = _decode_case(case)
    assert d.kind == "uet", d.error
    _assert_round_trip(case, d.fields)


@pytest.mark.parametrize("typ", [x for x in t.PDS_TYPES if x not in (0, 1)])
@pytest.mark.parametrize("reading", ["spec", "ref-prov"])
def test_every_pds_type(typ: int, reading: str) -> None:
    @settings(max_examples=25)
    @given(case=uet_cases(pds_type=typ, reading=reading))
    def run(case: UetCase) -> None:
        d = _decode_case(case)
        assert d.kind == "uet" and d.fields["uet.pds.type"] == typ
        _assert_round_trip(case, d.fields)

    run()


@pytest.mark.parametrize("nh", [t.NH_SMALL, t.NH_MEDIUM, t.NH_STD])
@pytest.mark.parametrize("opcode", REF_OPCODES)
def test_every_ses_opcode_in_every_request_header(nh: int, opcode: int) -> None:
    readings = ["spec", "ref-prov"] if opcode in t.SES_OPCODES else ["ref-prov"]

    @settings(max_examples=10)
    @given(case=st.sampled_from(readings).flatmap(lambda r: uet_cases(
        pds_type=t.RUD_REQ, next_header=nh, opcode=opcode, reading=r, encrypted=False)))
    def run(case: UetCase) -> None:
        d = _decode_case(case)
        assert d.kind == "uet" and d.fields["uet.ses.std.opcode"] == opcode
        _assert_round_trip(case, d.fields)
        assert "uet.expert" not in d.fields

    run()


@pytest.mark.parametrize("nh", [t.NH_RSP, t.NH_RSP_DATA, t.NH_RSP_DATA_SMALL])
def test_every_response_header(nh: int) -> None:
    @settings(max_examples=20)
    @given(case=st.sampled_from(["spec", "ref-prov"]).flatmap(lambda r: uet_cases(
        pds_type=t.ACK, next_header=nh, reading=r, encrypted=False)))
    def run(case: UetCase) -> None:
        d = _decode_case(case)
        assert d.kind == "uet" and d.fields["uet.pds.nh"] == nh
        _assert_round_trip(case, d.fields)

    run()


def test_atomic_extensions_follow_the_atomic_opcode() -> None:
    """ATOMIC, FETCHING_ATOMIC and TSEND_FETCH_ATOMIC carry an atomic extension: 36 bytes with
    compare and swap values when the atomic opcode is a compare-and-swap one, else 4;
    rendezvous sends a 24-byte rendezvous extension."""
    for op in t.ATOMIC_OPCODES:
        for amo in (0x02, 0x0D):
            ext = "comp_swap_ext_hdr" if amo == 0x0D else "atomic_op_ext_hdr"
            v = {"uet.ses.std.opcode": op, f"uet.ses.{ext}.atomic_opcode": amo,
                 "uet.ses.std.som": True}
            data = build.uet_bytes(v)
            assert len(data) == 12 + 44 + (36 if amo == 0x0D else 4)
            f = dissect.decode(data).fields
            assert f[f"uet.ses.{ext}.atomic_opcode"] == amo and f["payload.len"] == 0
    data = build.uet_bytes({"uet.ses.std.opcode": 0x0A, "uet.ses.rendv_ext_hdr.eager_length": 9})
    assert len(data) == 12 + 44 + 24
    assert dissect.decode(data).fields["uet.ses.rendv_ext_hdr.eager_length"] == 9


def test_wiresharks_name_for_every_field_we_set() -> None:
    """Every field the family sets is one it declares (-e, -Y and parquet know it)."""
    from roce.families.uet import uetfields

    known = set(uetfields.names())

    @settings(max_examples=200)
    @given(case=st.sampled_from(["spec", "ref-prov"]).flatmap(
        lambda r: uet_cases(reading=r, clean=False)))
    def run(case: UetCase) -> None:
        f = _decode_case(case).fields
        assert set(f) - {"payload.len"} <= known

    run()


# -- cut and random packets ----------------------------------------------------------------------


@settings(max_examples=150)
@given(case=uet_cases(encrypted=False), cut=st.integers(0, 200))
def test_cut_packets_name_the_header_and_keep_what_came_before(case: UetCase, cut: int) -> None:
    data = build.uet_bytes(case.values, case.reading, b"", entropy=case.native)
    if cut >= len(data):
        return
    d = dissect.decode(data[:cut], cut, len(data), entropy=case.native, reading=case.reading)
    assert d.kind == "truncated" and "truncated at UET byte" in d.fields["truncated"]
    m = dissect.decode(data[:cut], entropy=case.native, reading=case.reading)
    assert m.kind == "malformed" and m.error is not None
    assert any(k.endswith("invalid_header") for k in m.fields)
    assert "[Malformed: " in present.info(m) and present.tree(m, b"")  # a line and a tree


@settings(max_examples=300)
@given(body=st.binary(max_size=120), native=st.booleans())
def test_random_bytes_on_uet_never_crash(body: bytes, native: bool) -> None:
    """Whatever follows UDP 4793 or IP protocol 253: a record, a line and a tree, typed errors
    only."""
    from roce.decoder import records
    from roce.families.base import summary

    frame = build.frame(body, native=native)
    rec = next(decode_frames([Frame(frame, 0, len(frame), len(frame), 1, 0)]))
    assert rec.family is not None and rec.family.name in ("uet", "uet.entropy")
    assert rec.kind in ("uet", "malformed")
    src, dst, proto, info, _ = records.columns(rec)
    assert proto == "UET" and src == "10.0.0.1"
    assert records.render(rec)
    assert summary  # the summary module is what the line path uses


def test_ethernet_padding_is_not_payload() -> None:
    """A 12-byte ACK in a 60-byte frame: the UDP length ends the datagram, not the frame."""
    ack = build.uet_bytes({"uet.pds.type": t.ACK, "uet.pds.cack_psn": 5})
    frame = build.frame(ack)
    assert len(frame) == 60
    rec = next(decode_frames([Frame(frame, 0, 60, 60, 1, 0)]))
    assert rec.fields["payload.len"] == 0 and rec.fields["udp.length"] == 20
    assert rec.fields["frame.len"] == 60 and rec.fields["ip.addr"] == ("10.0.0.1", "10.0.0.2")


# -- roce decode ---------------------------------------------------------------------------------


def _write(path: Path, frames: list[bytes]) -> Path:
    with PcapWriter(path) as w:
        for i, f in enumerate(frames):
            w.write(f, ts_ns=1_700_000_000_000_000_000 + i * 1000)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _mixed(tmp_path: Path) -> Path:
    write = build.uet_bytes({"uet.pds.psn": 1005, "uet.pds.spdcid": 0x12, "uet.pds.dpdcid": 0x34,
                             "uet.pds.clear_psn": 1000, "uet.ses.std.opcode": t.WRITE,
                             "uet.ses.std.message_id": 7, "uet.ses.std.buffer_offset": 4096,
                             "uet.ses.std.request_length": 4096, "uet.ses.std.som": True},
                            payload=bytes(4096))
    ack = build.uet_bytes({"uet.pds.type": t.ACK, "uet.pds.cack_psn": 1005,
                           "uet.pds.ack_psn": 1005, "uet.pds.spdcid": 0x34,
                           "uet.pds.dpdcid": 0x12})
    nack = build.entropy_header(7) + build.uet_bytes(
        {"uet.pds.type": t.NACK, "uet.pds.nack.code": 1, "uet.pds.nack.psn": 1006,
         "uet.pds.spdcid": 0x34, "uet.pds.dpdcid": 0x12})
    return _write(tmp_path / "mixed.pcap", [
        roce.craft("RC_SEND_ONLY", b"abcd", dqpn=0x11, psn=5).to_bytes(),
        build.frame(write), build.frame(ack, src="10.0.0.2", dst="10.0.0.1"),
        roce.craft("RC_ACKNOWLEDGE", dqpn=0x22, psn=5).to_bytes(),
        build.frame(nack, native=True, src="10.0.0.2", dst="10.0.0.1")])


def test_mixed_capture_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _run(capsys, "decode", str(_mixed(tmp_path))).splitlines()
    assert len(lines) == 5
    assert "RRoCE" in lines[0] and "RC Send Only QP=0x000011 PSN=5" in lines[0]
    assert lines[1].endswith("UET 4194 RUD_REQ PDC 0x0012->0x0034 PSN=1005 SES WRITE msg=7 "
                             "off=4096 len=4096 [SOM]")
    assert "10.0.0.2 -> 10.0.0.1" in lines[2] and "ACK PDC 0x0034->0x0012 CACK=1005 ACK=1005" \
        in lines[2]
    assert "RRoCE" in lines[3] and "RC Acknowledge" in lines[3]
    assert "UET 60 NACK PDC 0x0034->0x0012 PSN=1006 TRIMMED" in lines[4]


def test_mixed_capture_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _mixed(tmp_path)
    out = _run(capsys, "decode", "-T", "fields", "-e", "frame.number", "-e", "bth.psn", "-e",
               "uet.pds.type", "-e", "uet.pds.psn", "-e", "uet.pds.clear_psn_offset", "-e",
               "ip.src", "-E", "raw=y", str(p))
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows == [["1", "5", "", "", "", "10.0.0.1"], ["2", "", "2", "1005", "-5", "10.0.0.1"],
                    ["3", "", "7", "", "", "10.0.0.2"], ["4", "5", "", "", "", "10.0.0.1"],
                    ["5", "", "10", "", "", "10.0.0.2"]]
    js = json.loads(_run(capsys, "decode", "-T", "json", "-Y", "uet.pds.nack.code == 1",
                         str(p)))
    assert [(r["frame.number"], r["uet.pds.entropy"], r["ip.proto"]) for r in js] == \
        [(5, 7, 253)]
    assert "Ultra Ethernet Transport" in _run(capsys, "decode", "-V", "-Y", "uet", str(p))
    assert "Base Transport Header" in _run(capsys, "decode", "-V", "-c", "1", str(p))
    only_uet = _run(capsys, "decode", "-Y", "uet.pds.type in {2 7}", str(p)).splitlines()
    assert [line.split()[0] for line in only_uet] == ["2", "3"]
    assert _run(capsys, "decode", "-Y", "udp.port == 4793 and ip.src == 10.0.0.2", str(p)) \
        .count("\n") == 1


def test_mixed_capture_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "m.parquet"
    assert main(["decode", "-T", "parquet", "-w", str(out), str(_mixed(tmp_path))]) == 0
    table = pq.read_table(out)
    rows = table.select(["bth.psn", "uet.pds.type", "uet.pds.clear_psn_offset",
                         "uet.pds.entropy"]).to_pylist()
    assert [r["uet.pds.type"] for r in rows] == [None, 2, 7, None, 10]
    assert [r["bth.psn"] for r in rows] == [5, None, None, 5, None]
    assert rows[1]["uet.pds.clear_psn_offset"] == -5 and rows[4]["uet.pds.entropy"] == 7
    assert str(table.schema.field("uet.pds.clear_psn_offset").type) == "int16"


def test_decode_as_and_the_reference_provider_reading(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The provider's port 49150 is UET by -d; --uet-layout ref-prov reads its layouts (the SYN
    PDC mode bit at 0x1000, not 0x8000)."""
    syn = build.uet_bytes({"uet.pds.flags.syn": True, "uet.pds.psn": 100,
                           "uet.pds.psn_offset": 4, "uet.pds.clear_psn_offset": -1,
                           "uet.pds.pdc_mode_use_rsv": True}, layouts.REF_PROV)
    p = _write(tmp_path / "ref.pcap", [build.frame(syn, dport=build.REF_PROV_PORT)])
    reg = registry()
    before = reg.lookup("udp.port", build.REF_PROV_PORT)
    try:
        assert "UET" not in _run(capsys, "decode", str(p))
        spec = _run(capsys, "decode", "-d", "udp.port==49150,uet", "-T", "fields", "-e",
                    "uet.pds.pdc_mode_use_rsv", "-e", "uet.pds.pdc_mode_rsv", str(p))
        assert spec.split() == ["0", "1"]  # the spec reads bit 0x10 of the mode byte as rsv
        ref = _run(capsys, "decode", "-d", "udp.port==49150,uet", "--uet-layout", "ref-prov",
                   "-T", "fields", "-e", "uet.pds.pdc_mode_use_rsv", "-e",
                   "uet.pds.start_psn", str(p))
        assert ref.split() == ["1", "96"]
        line = _run(capsys, "decode", "-d", "udp.port==49150,uet-ref-prov", str(p))
        assert "RUD_REQ PDC 0x0000 PSN=100 start=96 SES NO_OP" in line and "[SYN]" in line
        assert "[Reserved" not in line
    finally:  # the rows this test's -d and --uet-layout changed in the process-wide registry
        if before is None:
            reg.tables["udp.port"].pop(build.REF_PROV_PORT, None)
        reg.map("udp.port", build.UET_PORT, "uet")
        reg.map("ip.proto", build.IPPROTO_UET, "uet.entropy")


def test_uet_layout_refuses_unknown_readings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["decode", "--uet-layout", "draft", "x.pcap"])
    assert exc.value.code == 1 and "--uet-layout" in capsys.readouterr().err
    with pytest.raises(roce.UsageError, match="one of spec, ref-prov"):
        from roce.families import uet

        uet.use_reading(registry(), "draft")


def test_encrypted_payload_is_counted_not_parsed(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = build.uet_bytes({"uet.tss": True, "uet.tss.sdi": 5, "uet.tss.ssi": 9,
                            "uet.tss.tsc": 0x1234, "uet.pds.psn": 3,
                            "uet.pds.clear_psn_offset": -1}, payload=bytes(range(40)))
    p = _write(tmp_path / "tss.pcap", [build.frame(data)])
    line = _run(capsys, "decode", str(p))
    assert "TSS SDI=5 SSI=9 RUD_REQ" in line and "[Encrypted 40 bytes]" in line
    tree = _run(capsys, "decode", "-V", str(p))
    assert "Encrypted payload: 40 bytes (not parsed)" in tree and "SES:" not in tree
    f = dissect.decode(data).fields
    assert (f["uet.tss.sp"], f["uet.tss.ssi"], f["uet.tss.tsc"], f["uet.encrypted"]) == \
        (True, 9, 0x1234, 40)


def test_tree_shows_every_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = build.uet_bytes({"uet.pds.type": t.ACK_CC, "uet.pds.cack_psn": 10,
                            "uet.pds.ack_psn": 12, "uet.pds.ack.sack_psn": 11,
                            "uet.pds.ack.sack_bitmap": 0b11, "uet.pds.ack.cc_type": 1,
                            "uet.pds.ack.cc_state.credit": 77, "uet.pds.nh": t.NH_RSP,
                            "uet.ses.rsp.return_code": 0x22, "uet.ses.rsp.message_id": 3})
    tree = _run(capsys, "decode", "-V", str(_write(tmp_path / "t.pcap", [build.frame(data)])))
    for text in ("User Datagram Protocol, Src Port: 49152, Dst Port: 4793",
                 "PDS: ACK with CC extension", "ACK PSN: 12 (ACK PSN offset +2)",
                 "SACK PSN: 11 (SACK PSN Offset +1)", "CC Type: CREDIT: Credit (1)",
                 "Credit: 77", "SES: Response, RESPONSE",
                 "Return Code: TOO_LONG: message longer than its buffer (34)"):
        assert text in tree, text


@settings(max_examples=400)
@given(case=st.sampled_from(["spec", "ref-prov"]).flatmap(
    lambda r: uet_cases(reading=r, clean=False)), cut=st.integers(0, 120))
def test_plans_read_as_the_step_by_step_decoder(case: UetCase, cut: int) -> None:
    """The generated plan of a packet's layouts gives what decode_steps gives, field for field,
    also for the second packet of a plan and for cut packets (which go the step way)."""
    data = build.uet_bytes(case.values, case.reading, case.payload, entropy=case.native)
    for raw in (data, data[:cut]):
        for _ in range(2):  # the first makes the plan, the second runs it
            fast = dissect.decode(raw, entropy=case.native, reading=case.reading)
            slow = dissect.decode_steps(raw, entropy=case.native, reading=case.reading)
            assert fast.fields == slow.fields and fast.headers == slow.headers
            assert (fast.kind, str(fast.error), fast.layers) == (slow.kind, str(slow.error),
                                                                 slow.layers)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(uet_cases(clean=False), st.integers(0, 24)), min_size=1, max_size=6))
def test_one_line_without_records_reads_as_the_record_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        cases: list[tuple[UetCase, int]]) -> None:
    """The plain one-liner takes a family over IP or UDP straight to its columns; ``-Y frame``
    goes through the records: the lines are the same, cut frames and RoCE among them."""
    frames = [c.frame[:len(c.frame) - cut] for c, cut in cases]
    frames.insert(len(frames) // 2, roce.craft("RC_SEND_ONLY", b"abcd").to_bytes())
    p = _write(tmp_path / "lines.pcap", frames)
    assert _run(capsys, "decode", str(p)) == _run(capsys, "decode", "-Y", "frame", str(p))


def test_uet_in_erf_records_has_the_records_lengths(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """An ERF record around Ethernet, IP, UDP and UET: the frame is the record's packet, its
    lengths the record's (wlen past what it holds: cut by that much), in every output, and
    UET decodes as from a plain capture."""
    from roce.families import erf

    v = build.with_defaults({"uet.pds.psn": 5, "uet.pds.spdcid": 1, "uet.pds.dpdcid": 2},
                            payload=100)
    eth = build.frame(build.uet_bytes(v, payload=bytes(100)))
    path = tmp_path / "erf.pcap"
    with PcapWriter(path, linktype=197) as w:
        for wlen in (len(eth), len(eth) + 4):
            w.write(erf.record(payload=eth, rtype=erf.ERF_TYPE_ETH, wlen=wlen,
                               ts=erf.fixed_ts(10**18)), ts_ns=0)
    plain = _write(tmp_path / "plain.pcap", [eth])
    lines = _run(capsys, "decode", str(path)).splitlines()
    info = _run(capsys, "decode", str(plain)).strip().split("UET ", 1)[1]
    assert [ln.split("UET ", 1)[1] for ln in lines] == [info.replace(
        f"{len(eth)} ", f"{n} ", 1) for n in (len(eth), len(eth) + 4)]
    tree = _run(capsys, "decode", "-V", "-c", "1", str(path))
    assert tree.startswith(f"Frame 1: {len(eth)} bytes on wire")
    docs = json.loads(_run(capsys, "decode", "-T", "json", str(path)))
    (one,) = json.loads(_run(capsys, "decode", "-T", "json", str(plain)))
    for doc, n in zip(docs, (len(eth), len(eth) + 4)):
        assert (doc["frame.len"], doc["frame.cap_len"]) == (n, len(eth))
        assert {k: x for k, x in doc.items() if k.startswith(("uet", "payload"))} == \
            {k: x for k, x in one.items() if k.startswith(("uet", "payload"))}
