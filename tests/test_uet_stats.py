"""roce stats on Ultra Ethernet Transport captures: one PDC with a lost packet, a trim NACK, a
SACK gap, retransmissions (one spurious), ECN-marked ACKs, NSCC state, a resource NACK and a
close request, each reported exactly; RoCE and UET in one capture analysed apart."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import roce
from roce import fast
from roce.analysis.uetflows import Holes, UetAnalysis
from roce.cli import main
from roce.decoder.decode import decode_frames
from roce.families import dispatch
from roce.families.uet import build
from roce.families.uet import codes as t
from roce.pcapio import Frame, PcapNgWriter, PcapWriter
from roce.testing.strategies import uet_cases

T0 = 1_700_000_000_000_000_000
A, B = "10.0.0.1", "10.0.0.2"
IPDC, TPDC = 0x12, 0x34  # the initiator's and the target's PDC IDs


def _req(psn: int, size: int, mid: int, som: bool, eom: bool, *, syn: bool = False,
         retx: bool = False) -> bytes:
    v: dict[str, Any] = {"uet.pds.psn": psn, "uet.pds.spdcid": IPDC,
                         "uet.ses.std.message_id": mid, "uet.ses.std.som": som,
                         "uet.ses.std.eom": eom, "uet.pds.flags.retx": retx}
    if syn:
        v.update({"uet.pds.flags.syn": True, "uet.pds.psn_offset": psn - 1000})
    else:
        v["uet.pds.dpdcid"] = TPDC
    v = build.with_defaults(v, payload=size)
    return build.frame(build.uet_bytes(v, payload=bytes(size)), src=A, dst=B)


def _ack(cack: int, *, kind: int = t.ACK_CC, sack_base: int | None = None, bitmap: int = 0,
         marked: bool = False, service: int = 0, rcvd: int = 0, ooo: int = 0) -> bytes:
    v: dict[str, Any] = {"uet.pds.type": kind, "uet.pds.cack_psn": cack,
                         "uet.pds.spdcid": TPDC, "uet.pds.dpdcid": IPDC,
                         "uet.pds.flags.m": marked}
    if kind == t.ACK_CC:
        v.update({"uet.pds.ack.sack_psn": cack + 1 if sack_base is None else sack_base,
                  "uet.pds.ack.sack_bitmap": bitmap,
                  "uet.pds.ack.cc_state.service_time": service,
                  "uet.pds.ack.cc_state.rcvd_bytes": rcvd,
                  "uet.pds.ack.cc_state.ooo_count": ooo})
    return build.frame(build.uet_bytes(build.with_defaults(v)), src=B, dst=A)


def _nack(code: int, psn: int) -> bytes:
    v = build.with_defaults({"uet.pds.type": t.NACK, "uet.pds.nack.code": code,
                             "uet.pds.nack.psn": psn, "uet.pds.spdcid": TPDC,
                             "uet.pds.dpdcid": IPDC})
    return build.frame(build.uet_bytes(v), src=B, dst=A)


def _ctrl(kind: int) -> bytes:
    v = build.with_defaults({"uet.pds.type": t.CTRL, "uet.pds.ctl_type": kind,
                             "uet.pds.spdcid": IPDC, "uet.pds.dpdcid": TPDC})
    return build.frame(build.uet_bytes(v), src=A, dst=B)


def pdc_frames() -> list[bytes]:
    """Message 7 is PSNs 1000-1004 (1 KiB each), 1002 lost on the way; message 8 is PSN 1005
    (512 B), trimmed; message 9 is PSN 1007 (256 B), after PSN 1006, which never shows."""
    return [
        _req(1000, 1024, 7, True, False, syn=True),
        _req(1001, 1024, 7, False, False),
        _ack(1001, service=10, rcvd=2048),
        _req(1003, 1024, 7, False, False),  # 1002 lost
        _req(1004, 1024, 7, False, True),
        # 1005 trimmed: not captured whole; the target says so
        _ack(1001, sack_base=1002, bitmap=0b110, marked=True, service=30, rcvd=4096, ooo=2),
        _nack(0x01, 1005),  # TRIMMED
        _req(1002, 1024, 7, False, False, retx=True),
        _req(1005, 512, 8, True, True, retx=True),
        _req(1003, 1024, 7, False, False, retx=True),  # spurious: SACKed before
        _ack(1005, kind=t.ACK),
        _req(1007, 256, 9, True, True),  # 1006 missing
        _nack(0x07, 1007),  # NO_PKT_BUFFER
        _ctrl(5),  # CLOSE_REQ
    ]


def _write(path: Path, frames: list[bytes], writer: Any = PcapWriter,
           times: list[int] | None = None) -> Path:
    with writer(path) as w:
        for i, f in enumerate(frames):
            w.write(f, ts_ns=T0 + (times[i] if times else i * 1000))
    return path


def _stats_json(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    assert main(["stats", "-T", "json", str(path)]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_pdc_reported_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _stats_json(capsys, _write(tmp_path / "pdc.pcap", pdc_frames()))
    uet = doc["uet"]
    assert (uet["packets"], uet["encrypted"], uet["malformed"], uet["unreliable"]) == \
        (14, 0, 0, 0)
    (p,) = uet["pdcs"]
    assert (p["initiator"], p["target"], p["spdcid"], p["dpdcid"], p["first_frame"]) == \
        (A, B, IPDC, TPDC, 1)
    assert (p["syn"], p["start_psn"], p["pdc_mode"], p["highest_psn"]) == (1, 1000, 0, 1007)
    assert p["requests"] == 8
    assert p["request_bytes"] == 4 * 1024 + 1024 + 512 + 1024 + 256
    # the lost packet came back as a retransmission; 1006 never came; 1005 was never skipped
    assert (p["missing"], p["missing_psns"], p["recovered_psns"], p["reordered_psns"]) == \
        (1, [[1006, 1006]], [1002], [])
    assert (p["retransmissions"], p["spurious_retransmissions"]) == (3, 1)
    assert (p["acks"], p["first_cack_psn"], p["cack_psn"], p["cack_advances"]) == \
        (3, 1001, 1005, 1)
    assert (p["ecn_marked_acks"], p["probe_acks"]) == (1, 0)
    assert (p["sack_holes"], p["sack_missing_psns"], p["sack_covered"]) == (1, [1002], 2)
    assert p["nscc"] == {"acks": 2, "service_time_max": 30, "rcvd_bytes_last": 4096,
                         "ooo_count_max": 2}
    assert p["trims"] == {"TRIMMED": 1}
    assert p["nacks"] == {"NO_PKT_BUFFER": 1}
    assert (p["controls"], p["close_requests"], p["clear_requests"]) == \
        ({"CLOSE_REQ": 1}, 1, 0)
    assert (p["close_handshakes"], p["close_unanswered"], p["clear_handshakes"],
            p["clear_unanswered"]) == (0, 1, 0, 0)  # the close request waits at the end
    assert p["messages"] == {"completed": 3, "bytes": 5 * 1024 + 512 + 256, "min": 256,
                             "max": 5 * 1024, "open": 0}
    span = 13 * 1000
    assert p["duration_ns"] == span
    assert p["goodput_bps"] == pytest.approx((5 * 1024 + 512 + 256) * 8e9 / span)
    assert p["throughput_bps"] == pytest.approx(p["request_bytes"] * 8e9 / span)


def test_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "pdc.pcap", pdc_frames())
    assert main(["stats", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Ultra Ethernet Transport: 14 packets, 1 PDC (" in out
    assert f"PDC {A} 0x0012 -> {B} 0x0034" in out
    assert "requests 8 (6,912 B), SYN 1, start PSN 1000, highest PSN 1007" in out
    assert ("retransmissions 3 (spurious 1); missing 1 (PSNs 1006); recovered 1002; "
            "reordered none") in out
    assert "ACKs 3, cumulative ACK PSN 1001 -> 1005 (moved by 1), ECN-marked 1, probes 0\n" \
        in out
    assert "SACK holes 1 (PSNs 1002); PSNs SACKed past the cumulative ACK 2\n" in out
    assert "handshakes: close 0 (unanswered 1), clear 0 (unanswered 0)\n" in out
    assert "messages 3 (5,888 B, 256-5,120 B), open 0\n" in out
    span = 13 * 1000
    assert f"goodput {5888 * 8 / span:.3f} Gb/s, throughput {6912 * 8 / span:.3f} Gb/s" in out
    assert max(map(len, out.splitlines())) <= 100
    assert "trims TRIMMED=1; NACKs NO_PKT_BUFFER=1; control CLOSE_REQ=1; close 1" in out


def test_a_pcapng_capture_reads_as_the_pcap(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """pcapng goes batch by batch (no record scanner): the same report."""
    frames = pdc_frames()
    a = _stats_json(capsys, _write(tmp_path / "a.pcap", frames))["uet"]
    b = _stats_json(capsys, _write(tmp_path / "b.pcapng", frames, PcapNgWriter))["uet"]
    assert a == b


@pytest.mark.parametrize("writer", [PcapWriter, PcapNgWriter])
def test_roce_and_uet_in_one_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     writer: Any) -> None:
    """Each analysed as alone: the RoCE flows as in a RoCE-only capture, the UET PDCs as in a
    UET-only one (frames at the same times; only frame numbers and the flows' start, counted
    from the capture's first frame, differ); pcap records read in place and pcapng batches
    alike."""
    uet = pdc_frames()
    rc = [roce.craft("RC_RDMA_WRITE_ONLY", bytes(64), psn=200 + i, dqpn=0x11).to_bytes()
          for i in range(10)]
    rc[6] = roce.craft("RC_RDMA_WRITE_ONLY", bytes(64), psn=207, dqpn=0x11).to_bytes()
    t_uet = [i * 1000 for i in range(len(uet))]
    t_rc = [i * 1000 + 500 for i in range(len(rc))]
    mixed = sorted([(tt, f) for tt, f in zip(t_uet, uet)] + list(zip(t_rc, rc)))
    both = _stats_json(capsys, _write(tmp_path / "mixed.pcap", [f for _, f in mixed], writer,
                                      times=[tt for tt, _ in mixed]))
    alone_uet = _stats_json(capsys, _write(tmp_path / "uet.pcap", uet, writer, times=t_uet))
    alone_rc = _stats_json(capsys, _write(tmp_path / "rc.pcap", rc, writer, times=t_rc))
    assert "uet" not in alone_rc
    for doc in (both, alone_rc):  # seconds from the capture's first frame: a UET frame's
        for fl in doc["flows"]:
            fl.pop("start")
    assert both["flows"] == alone_rc["flows"] and both["flows"]
    assert both["totals"]["gaps"] == alone_rc["totals"]["gaps"] == 1
    numbers = {i + 1: n + 1 for n, i in enumerate(
        i for i, (tt, f) in enumerate(mixed) if f in uet)}
    p_both, p_alone = both["uet"]["pdcs"][0], alone_uet["uet"]["pdcs"][0]
    assert p_both.pop("first_frame") == numbers[1] and p_alone.pop("first_frame") == 1
    assert p_both == p_alone


def test_no_uet_no_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = [roce.craft("RC_SEND_ONLY", b"x", psn=i).to_bytes() for i in range(3)]
    path = _write(tmp_path / "rc.pcap", rc)
    assert "uet" not in _stats_json(capsys, path)
    assert main(["stats", str(path)]) == 0
    assert "Ultra Ethernet" not in capsys.readouterr().out


def test_a_psn_jump_is_one_range() -> None:
    """Memory follows the packets, not the PSN distance: a jump of 2^31 - 1 PSNs is one
    range, and filling PSNs inside it splits it."""
    a = UetAnalysis(4791)
    for psn in (5, 5 + 0x7FFFFFFF, 7):
        a.packet(1, 0, A, B, build.with_defaults({"uet.pds.psn": psn, "uet.pds.spdcid": 1,
                                                  "uet.pds.flags.syn": False,
                                                  "uet.pds.flags.retx": False,
                                                  "uet.pds.dpdcid": 2,
                                                  "uet.ses.std.message_id": 0}))
    (p,) = a.pdcs.values()
    assert p.holes.count() == 0x7FFFFFFE - 1
    assert p.holes.ranges(p.base) == [[6, 6], [8, (4 + 0x7FFFFFFF) & 0xFFFFFFFF]]
    assert p.reordered == [7]


def test_holes() -> None:
    h = Holes()
    h.add(10, 20)
    assert [h.fill(u) for u in (9, 10, 20, 15, 15, 21)] == [False, True, True, True, False,
                                                            False]
    assert h.ranges(0) == [[11, 14], [16, 19]] and h.count() == 8


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.tuples(uet_cases(clean=False), st.integers(0, 24)).map(
        lambda c: c[0].frame[:len(c[0].frame) - c[1]]),
    st.tuples(st.binary(max_size=120), st.booleans()).map(
        lambda b: build.frame(b[0], native=b[1]))), min_size=1, max_size=12))
def test_any_uet_frames_are_analysed_without_a_crash(frames: list[bytes]) -> None:
    """Random UET packets (any field values, cut anywhere) and random bytes on UDP 4793 or IP
    protocol 253: none raises, the frames counted are those ``roce decode`` shows as UET (a
    frame cut inside its UDP header is not), and the report is JSON and text."""
    a = UetAnalysis(4791)
    taken = [a.frame(i + 1, i * 1000, f, 1, len(f)) for i, f in enumerate(frames)]
    shown = [rec.family is not None and rec.family.name.startswith("uet")
             for rec in decode_frames([Frame(f, 0, len(f), len(f), 1, 0) for f in frames])]
    assert taken == shown
    d = a.to_dict()
    assert d["packets"] == sum(taken)
    json.dumps(d)
    assert not any(taken) or a.lines()[0].startswith(
        f"Ultra Ethernet Transport: {sum(taken)} packets")


def test_several_captures_and_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several captures: each file's UET section is what the file alone gives; --merge of the
    PDC cut in two files (frames interleaved in time) gives the PDC of the one capture."""
    frames = pdc_frames()
    one = _stats_json(capsys, _write(tmp_path / "one.pcap", frames))["uet"]
    times = [i * 1000 for i in range(len(frames))]
    a = _write(tmp_path / "a.pcap", frames[0::2], times=times[0::2])
    b = _write(tmp_path / "b.pcap", frames[1::2], times=times[1::2])
    alone = [_stats_json(capsys, p)["uet"] for p in (a, b)]
    assert main(["stats", "-T", "json", "-j", "1", str(a), str(b)]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert [f["uet"] for f in files] == alone
    assert main(["stats", "-T", "json", "--merge", str(a), str(b)]) == 0
    assert json.loads(capsys.readouterr().out)["uet"] == one
    assert main(["stats", "--merge", str(a), str(b)]) == 0
    assert "Ultra Ethernet Transport: 14 packets, 1 PDC (" in capsys.readouterr().out
    assert main(["stats", "-j", "1", str(a), str(b)]) == 0
    assert capsys.readouterr().out.count("Ultra Ethernet Transport: 7 packets") == 2


def test_parquet_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-T parquet writes DIR/uet_pdcs.parquet: the JSON report's PDCs, row for row; the schema
    doc lists its columns."""
    pq = pytest.importorskip("pyarrow.parquet")
    from roce.analysis import tables

    path = _write(tmp_path / "pdc.pcap", pdc_frames())
    (p,) = _stats_json(capsys, path)["uet"]["pdcs"]
    assert main(["stats", "-T", "parquet", "-w", str(tmp_path / "out"), str(path)]) == 0
    (row,) = pq.read_table(tmp_path / "out" / "uet_pdcs.parquet").to_pylist()
    assert row.pop("capture") == str(path)
    assert row.pop("duration") == datetime.timedelta(microseconds=p.pop("duration_ns") / 1000)
    for k in ("trims", "nacks", "controls"):
        assert dict(row.pop(k)) == p.pop(k)
    assert row == p
    doc = (Path(__file__).parents[1] / "docs" / "columnar-schema.md").read_text()
    section = doc.split("## UET PDCs: `DIR/uet_pdcs.parquet`")[1].split("\n## ")[0]
    cells = {c.strip("` ") for line in section.splitlines() if line.startswith("| `")
             for c in line.split("|")[1].split(",")}
    assert cells == set(tables.STATS_TABLES["uet_pdcs"][0]().names)


@pytest.mark.parametrize("native,ipv6", [(True, False), (False, True), (True, True)])
def test_over_ip_protocol_253_and_ipv6(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       native: bool, ipv6: bool) -> None:
    """The same PDC straight over IP protocol 253 (the entropy header first) or over IPv6:
    the same report, addresses apart."""
    src, dst = ("fd00::1", "fd00::2") if ipv6 else (A, B)

    def again(frame: bytes) -> bytes:
        """The frame's UET bytes in the other carriage (entropy header: entropy 0)."""
        res = dispatch.resolve(frame, 1, fast.walk(frame, 1, 4791), 4791)
        to_target = res.carrier_fields["ip.src"] == A
        return build.frame(bytes(4) + res.data if native else res.data, native=native,
                           ipv6=ipv6, src=src if to_target else dst,
                           dst=dst if to_target else src)

    base = _stats_json(capsys, _write(tmp_path / "a.pcap", pdc_frames()))["uet"]
    other = _stats_json(capsys, _write(tmp_path / "b.pcap",
                                       [again(f) for f in pdc_frames()]))["uet"]
    (p,) = other["pdcs"]
    assert (p.pop("initiator"), p.pop("target")) == (src, dst)
    (q,) = base["pdcs"]
    q.pop("initiator"), q.pop("target")
    assert p == q


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(("spec", "ref-prov")).flatmap(
    lambda r: uet_cases(reading=r, clean=False)), min_size=1, max_size=12))
def test_either_reading_is_analysed(cases: list[Any]) -> None:
    """Packets decoded in either reading (the reference provider's has other ACK request
    bits, an EPSN flag, ISROD) feed the analysis without a KeyError."""
    from roce.families.uet import dissect

    a = UetAnalysis(4791)
    for i, c in enumerate(cases):
        d = dissect.decode(build.uet_bytes(c.values, c.reading, payload=c.payload,
                                           entropy=c.native), entropy=c.native,
                           reading=c.reading)
        if d.error is None and not d.fields.get("uet.tss"):
            a.packet(i + 1, i, A, B, d.fields)
    json.dumps(a.to_dict())


def test_close_and_clear_requests_in_both_readings() -> None:
    from roce.families.uet import dissect
    from roce.families.uet.layouts import READINGS

    for reading, close, clear in (("spec", {"uet.pds.flags.req": 2}, {"uet.pds.flags.req": 1}),
                                  ("ref-prov", {"uet.pds.flags.req_cls": True},
                                   {"uet.pds.flags.req_clr": True})):
        r = READINGS[reading]
        a = UetAnalysis(4791)
        for flags in (close, clear, close):
            v = build.with_defaults({"uet.pds.type": t.ACK, "uet.pds.cack_psn": 9,
                                     "uet.pds.spdcid": TPDC, "uet.pds.dpdcid": IPDC, **flags},
                                    r)
            a.packet(1, 0, B, A, dissect.decode(build.uet_bytes(v, r), reading=r).fields)
        (p,) = a.pdcs.values()
        assert (p.close_requests, p.clear_requests) == (2, 1), reading


def test_the_reference_providers_port_and_reading(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """UDP 49150 (the reference provider's) is UET by -d, and --uet-layout ref-prov reads its
    ACK's separate close-request bit; -d of a RoCE row is refused (RoCE's is --udp-port)."""
    from roce.families import registry
    from roce.families.uet import IPPROTO_UET, REF_PROV_PORT, UET_PORT
    from roce.families.uet.layouts import READINGS

    r = READINGS["ref-prov"]
    req = build.with_defaults({"uet.pds.psn": 7, "uet.pds.spdcid": IPDC, "uet.pds.dpdcid": TPDC},
                              r, payload=8)
    ack = build.with_defaults({"uet.pds.type": t.ACK, "uet.pds.cack_psn": 7,
                               "uet.pds.flags.req_cls": True, "uet.pds.spdcid": TPDC,
                               "uet.pds.dpdcid": IPDC}, r)
    path = _write(tmp_path / "rp.pcap", [
        build.frame(build.uet_bytes(req, r, payload=bytes(8)), src=A, dst=B,
                    dport=REF_PROV_PORT),
        build.frame(build.uet_bytes(ack, r), src=B, dst=A, dport=REF_PROV_PORT)])
    reg = registry()
    try:
        assert "uet" not in _stats_json(capsys, path)
        assert main(["stats", "-T", "json", "-d", f"udp.port=={REF_PROV_PORT},uet",
                     "--uet-layout", "ref-prov", str(path)]) == 0
        (p,) = json.loads(capsys.readouterr().out)["uet"]["pdcs"]
        assert (p["requests"], p["acks"], p["cack_psn"], p["close_requests"]) == (1, 1, 7, 1)
        assert main(["stats", "-d", "udp.port==4792,roce", str(path)]) == 1
        assert "--udp-port" in capsys.readouterr().err
    finally:  # the rows -d and --uet-layout changed in the process-wide registry
        reg.tables["udp.port"].pop(REF_PROV_PORT, None)
        reg.tables["udp.port"].pop(4792, None)
        reg.map("udp.port", UET_PORT, "uet")
        reg.map("ip.proto", IPPROTO_UET, "uet.entropy")


def test_close_and_clear_handshakes_paired(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A close asked by an ACK (REQ=CLOSE) and answered by CLOSE, a clear asked twice
    (CLEAR_REQ, an ACK with REQ=CLEAR) and answered once by CLEAR, then a clear asked and
    left waiting: two handshakes, one request unanswered."""
    frames = [_req(1000, 64, 1, True, True, syn=True), _ack(1000, kind=t.ACK),
              _ctrl(3), build.frame(build.uet_bytes(build.with_defaults(
                  {"uet.pds.type": t.ACK, "uet.pds.cack_psn": 1000, "uet.pds.spdcid": TPDC,
                   "uet.pds.dpdcid": IPDC, "uet.pds.flags.req": 1})), src=B, dst=A),
              _ctrl(2),  # CLEAR answers both requests
              build.frame(build.uet_bytes(build.with_defaults(
                  {"uet.pds.type": t.ACK, "uet.pds.cack_psn": 1000, "uet.pds.spdcid": TPDC,
                   "uet.pds.dpdcid": IPDC, "uet.pds.flags.req": 2})), src=B, dst=A),
              _ctrl(4),  # CLOSE
              _ctrl(3)]  # a clear asked, never done
    (p,) = _stats_json(capsys, _write(tmp_path / "hs.pcap", frames))["uet"]["pdcs"]
    assert (p["close_requests"], p["clear_requests"]) == (2, 4)
    assert (p["close_handshakes"], p["close_unanswered"]) == (1, 0)
    assert (p["clear_handshakes"], p["clear_unanswered"]) == (1, 1)
    assert p["controls"] == {"CLEAR": 1, "CLEAR_REQ": 2, "CLOSE": 1}


def test_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--timeline on a UET capture: per 3 us from the first frame, the PDC's request bytes
    and Gb/s, retransmissions, ECN-marked ACKs, trims and NACKs, in JSON and text."""
    path = _write(tmp_path / "pdc.pcap", pdc_frames())  # a frame each microsecond
    assert main(["stats", "-T", "json", "--timeline", "3us", str(path)]) == 0
    tl = json.loads(capsys.readouterr().out)["uet"]["timeline"]
    label = f"{A} 0x0012 -> {B}"
    assert (tl["interval_ns"], tl["pdcs"]) == (3000, [label])
    got = [(r["start_ns"], r["pdcs"][label]["bytes"], r["pdcs"][label]["retransmissions"],
            r["pdcs"][label]["ecn_marked_acks"], r["pdcs"][label]["trims"],
            r["pdcs"][label]["nacks"]) for r in tl["rows"]]
    assert got == [(0, 2048, 0, 0, 0, 0), (3000, 2048, 0, 1, 0, 0), (6000, 1536, 2, 0, 1, 0),
                   (9000, 1280, 1, 0, 0, 0), (12000, 0, 0, 0, 0, 1)]
    assert tl["rows"][1]["pdcs"][label]["gbps"] == round(2048 * 8 / 3000, 6)
    assert main(["stats", "--timeline", "3us", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"  Timeline: 3 us intervals\n    PDC1 = {label}\n" in out
    assert re.search(r"\n +6\.0 +PDC1 +4\.10 +2 +0 +1 +0\n", out)
