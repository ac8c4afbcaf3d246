"""roce.families: registry, native InfiniBand (CRCs against references written from IBA's
rules, tshark field oracles), ERF records, tunnels (tshark oracles), decode-as and a toy
family registered from outside the package."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tshark_oracle import TSHARK, TSHARK_CODES, fields_command, our_key, tshark_value

import roce
from roce import locate
from roce.cli import main
from roce.errors import DecodeError
from roce.families import craft, erf, registry, tunnels
from roce.families.ib import crc as ibcrc
from roce.families.ib import mad as ibmad
from roce.families.ib import native as ib
from roce.families.registry import Handler
from roce.locate import walk
from roce.opcodes import IB_OPCODES, OPCODES
from roce.pcapio import PcapWriter, open_capture

needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
GRH = bytes([0x60, 0x12, 0x34, 0x56, 0, 0, 0x1B, 64]) + bytes(range(32))


def transport(code: int, payload: bytes = b"", **kw: object) -> bytes:
    """BTH through pad of a RoCE frame crafted by roce.craft (the same opcode table); a CNP
    as native InfiniBand's (``roce craft --link ib``'s rule)."""
    raw = roce.craft(code, payload or None, **kw).to_bytes()
    w = walk(raw)
    return craft.ib_transport(raw, w.bth_off, w.icrc_off)


# -- references written from the rules (IBA 7.8.1, 7.8.2), bit by bit -------------------------


def crc32_bitwise(data: bytes) -> int:
    c = 0xFFFFFFFF
    for byte in data:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def crc16_0x100b_reflected(data: bytes) -> int:
    """CRC-16, polynomial x^16+x^12+x^3+x+1 (0x100B), init 0xFFFF, inverted, LSB first:
    shifted one input bit at a time, the polynomial applied in normal (unreflected) form
    to a register that is bit-reversed at the end."""
    reg = 0xFFFF
    for byte in data:
        for i in range(8):  # LSB of each byte first on the wire
            bit = (byte >> i) & 1
            top = (reg >> 15) & 1
            reg = (reg << 1) & 0xFFFF
            if top ^ bit:
                reg ^= 0x100B
    reg ^= 0xFFFF
    return int(f"{reg:016b}"[::-1], 2)  # transmitted MSB of the register first = reflected


def icrc_reference(pkt: bytes, lnh: int) -> int:
    b = bytearray(pkt[:-6])  # up to the ICRC
    if lnh == 3:
        b[0:8] = b"\xff" * 8
        b[8] |= 0x0F          # GRH TClass high nibble (byte 8 low nibble)
        b[9] = 0xFF           # TClass low nibble, FlowLabel high nibble
        b[10] = b[11] = 0xFF  # rest of FlowLabel
        b[15] = 0xFF          # HopLmt
        bth = 48
    else:
        b[0] |= 0xF0          # VL
        bth = 8
    b[bth + 4] = 0xFF         # BTH resv8a: FECN, BECN, reserved
    crc = crc32_bitwise(bytes(b))
    return int.from_bytes(crc.to_bytes(4, "little"), "big")


@given(code=st.sampled_from(sorted(IB_OPCODES)), lnh=st.sampled_from([2, 3]),
       vl=st.integers(0, 15), payload=st.binary(max_size=40))
def test_crcs_match_references(code: int, lnh: int, vl: int, payload: bytes) -> None:
    op = OPCODES[code]
    if not op.payload:
        payload = b""
    elif op.payload_len is not None:
        payload = bytes(op.payload_len)
    pkt = ib.build(transport(code, payload), lnh=lnh, grh=GRH, vl=vl)
    assert int.from_bytes(pkt[-6:-2], "big") == icrc_reference(pkt, lnh)
    value = crc16_0x100b_reflected(pkt[:-2])
    assert int.from_bytes(pkt[-2:], "little") == value
    d = ib.decode(pkt)
    assert d.kind == "roce" and d.fields["icrc.valid"] and d.fields["vcrc.valid"]
    # the ICRC ignores what a switch may change; the VCRC does not
    hop = bytearray(pkt)
    hop[0] ^= 0x30  # VL
    if lnh == 3:
        hop[15] ^= 0xFF  # HopLmt
    d2 = ib.decode(bytes(hop))
    assert d2.fields["icrc.valid"] and not d2.fields["vcrc.valid"]


def test_vcrc_agrees_with_crc16_reference_on_known_input() -> None:
    assert ibcrc.vcrc(b"123456789") == int.from_bytes(
        crc16_0x100b_reflected(b"123456789").to_bytes(2, "little"), "big")


def test_bad_crcs_are_reported() -> None:
    pkt = ib.build(transport(0x04, b"abcd"), bad_icrc=True, bad_vcrc=True)
    d = ib.decode(pkt)
    assert d.fields["icrc.valid"] is False and d.fields["vcrc.valid"] is False
    src, dst, proto, info = ib.columns(d)
    assert "[BAD ICRC]" in info and "[BAD VCRC]" in info
    lines = ib.crc_lines(d, pkt)
    assert "incorrect, should be" in lines[0] and "incorrect, should be" in lines[1]


def test_malformed_ib_packets_raise_nothing_and_say_why() -> None:
    good = ib.build(transport(0x04, b"abcd"))
    for cut in range(len(good)):
        d = ib.decode(good[:cut])
        assert d.kind in ("malformed", "truncated", "other")
        assert d.error is not None
    bad_len = bytearray(good)
    bad_len[5] = 2  # PktLen below LRH + ICRC
    assert "packet length" in str(ib.decode(bytes(bad_len)).error)


# -- ERF -----------------------------------------------------------------------------------------


def test_erf_padding_rlen_wlen_and_extensions() -> None:
    pkt = ib.build(transport(0x04, b"abcdefgh"))
    rec = erf.record(pkt, extensions=(0x05, 0x0A))
    assert len(rec) % 8 == 0 and len(rec) >= 16 + 16 + len(pkt)
    u = erf.unwrap(rec)
    assert u.linktype == 247 and u.data[u.offset:] == pkt  # padding dropped by wlen
    assert u.fields["erf.ehdr.types"] == "0x05,0x0a"
    assert u.fields["erf.rlen"] == len(rec) and u.fields["erf.wlen"] == len(pkt)
    # wlen larger than what rlen holds: the record's bytes win
    short = erf.record(pkt, wlen=len(pkt) + 100)
    u = erf.unwrap(short)
    assert u.data[u.offset:u.offset + len(pkt)] == pkt
    assert len(u.data) - u.offset <= len(short) - 16
    # Ethernet records: 2 bytes of pad before the frame
    eth = roce.craft("RC_SEND_ONLY", b"xy").to_bytes()
    u = erf.unwrap(erf.record(eth, rtype=erf.ERF_TYPE_ETH))
    assert u.linktype == 1 and u.data[u.offset:] == eth


def test_erf_truncated_records() -> None:
    pkt = ib.build(transport(0x04, b"abcdefgh"))
    rec = erf.record(pkt, extensions=(1,))
    with pytest.raises(DecodeError, match="ERF header truncated"):
        erf.unwrap(rec[:10])
    with pytest.raises(DecodeError, match="extension header truncated"):
        erf.unwrap(rec[:20])
    u = erf.unwrap(rec[:40])  # cut in the payload: what is there is handed on
    assert len(u.data) == 40
    assert ib.decode(u.data[u.offset:]).kind in ("malformed", "truncated")
    bad = bytearray(rec)
    bad[10:12] = (8).to_bytes(2, "big")
    with pytest.raises(DecodeError, match="below the 16-byte header"):
        erf.unwrap(bytes(bad))


@st.composite
def _erf_batches(draw: st.DrawFn) -> list[bytes]:
    """ERF records of IB, Ethernet and other types, extension headers, padding, some cut,
    some with a byte changed (rlen, type, extension chain)."""
    out = []
    for _ in range(draw(st.integers(0, 6))):
        rtype = draw(st.sampled_from([erf.ERF_TYPE_INFINIBAND, erf.ERF_TYPE_ETH,
                                      erf.ERF_TYPE_INFINIBAND_LINK]))
        rec = bytearray(erf.record(draw(st.binary(max_size=40)), rtype=rtype,
                                   extensions=tuple(draw(st.lists(st.integers(0, 127),
                                                                  max_size=3)))))
        if draw(st.booleans()):
            rec[draw(st.integers(0, len(rec) - 1))] = draw(st.integers(0, 255))
        out.append(bytes(rec[:draw(st.integers(0, len(rec)))]) if draw(st.booleans())
                   else bytes(rec))
    return out


@given(batch=_erf_batches())
def test_erf_skip_batch_twins_agree(batch: list[bytes]) -> None:
    """The compiled ERF unwrap of a batch (roce._fastpath.erf_skip) is skip's twin."""
    if erf.skip_batch is erf.skip_batch_reference:
        pytest.skip("compiled fast path not built")
    assert erf.skip_batch(batch) == erf.skip_batch_reference(batch)


def test_erf_skip_batch_says_none_for_cut_or_mixed_records() -> None:
    pkt = ib.build(transport(0x04, b"abcdefgh"))
    rec = erf.record(pkt, extensions=(1, 2))
    eth = erf.record(roce.craft("RC_SEND_ONLY", b"xy").to_bytes(), rtype=erf.ERF_TYPE_ETH)
    for fn in (erf.skip_batch, erf.skip_batch_reference):
        inner, lt = fn([rec, rec])
        assert lt == 247 and inner[0][:len(pkt)] == pkt  # padding kept: the walk ends it
        assert fn([rec, eth]) is None  # two link types
        assert fn([rec[:20]]) is None  # extension header cut
        assert fn([rec[:10]]) is None  # ERF header cut
        assert fn([erf.record(b"12345678", rtype=erf.ERF_TYPE_INFINIBAND_LINK)]) is None


# -- decoding through the CLI --------------------------------------------------------------------


def _ib_frames() -> list[bytes]:
    out = []
    for i, code in enumerate(TSHARK_CODES):
        op = OPCODES[code]
        payload = bytes(range(i % 7 + 1)) if op.payload and op.payload_len is None else b""
        t = transport(code, payload, dqpn=0x100 + i, psn=1000 + i)
        out.append(ib.build(t, dlid=3 + i, slid=0x20 + i, sl=i % 16, vl=i % 8))
        out.append(ib.build(t, lnh=3, grh=GRH, dlid=5, slid=6))
    return out


def _write(path: Path, frames: list[bytes], linktype: int) -> Path:
    with PcapWriter(path, linktype=linktype) as w:
        for n, f in enumerate(frames):
            w.write(f, ts_ns=n * 1000)
    return path


IB_ORACLE = {
    "infiniband.lrh.vl": "lrh.vl", "infiniband.lrh.lver": "lrh.lver",
    "infiniband.lrh.sl": "lrh.sl", "infiniband.lrh.lnh": "lrh.lnh",
    "infiniband.lrh.dlid": "lrh.dlid", "infiniband.lrh.pktlen": "lrh.pktlen",
    "infiniband.lrh.slid": "lrh.slid", "infiniband.grh.paylen": "grh.paylen",
    "infiniband.grh.nxthdr": "grh.nxthdr", "infiniband.grh.hoplmt": "grh.hoplmt",
    "infiniband.grh.flowlabel": "grh.flowlabel", "infiniband.variant.crc": "vcrc",
}


@needs_tshark
def test_native_ib_every_opcode_matches_tshark(tmp_path: Path) -> None:
    """tshark 4.0 does not read pcap link type 247; it reads the same packets as ERF
    INFINIBAND records (link type 197).  Ours must agree on both files."""
    frames = _ib_frames()
    p247 = _write(tmp_path / "ib.pcap", frames, 247)
    p197 = _write(tmp_path / "ib_erf.pcap", [erf.record(f) for f in frames], 197)
    from roce.decoder.decode import decode_frames

    ours = [r.fields for r in decode_frames(open_capture(p247))]
    via_erf = [r.fields for r in decode_frames(open_capture(p197))]
    assert all(r.get("icrc.valid") and r.get("vcrc.valid") for r in ours)
    ws_names = [*IB_ORACLE, "infiniband.bth.opcode", "infiniband.bth.psn",
                "infiniband.bth.destqp", "infiniband.invariant.crc"]
    out = subprocess.run(fields_command(p197, ws_names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(out) == len(frames)
    for row, f, g in zip(out, ours, via_erf):
        for name, text in zip(ws_names, row.split("\t")):
            key = IB_ORACLE.get(name) or our_key(name, ())
            assert tshark_value(name, text) == f.get(key), (name, f)
            assert g.get(key) == f.get(key)


@needs_tshark
def test_crafted_ib_cnp_matches_tshark(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``roce craft --link ib cnp`` writes native InfiniBand's CNP: tshark 4.0 (fed the
    packets as ERF records, link type 197) names opcode 0x80 "CNP" with our field values,
    and the fields have our values; RoCE's 0x81 inside an LRH is "Unknown" to it and
    malformed to us (IBA table 38 reserves it)."""
    p247 = tmp_path / "cnp.pcap"
    assert main(["craft", "-q", "--link", "ib", "--slid", "7", "--dlid", "9", "cnp",
                 "--dqpn", "0x1234", "--pkey", "0x8001", "-w", str(p247)]) == 0
    with open_capture(p247) as r:
        (cnp,) = [fr.data for fr in r]
    w = walk(cnp, locate.WALK_INFINIBAND)
    assert w.status == locate.OK and w.opcode == 0x80 and w.icrc_off == w.bth_off + 12
    roce_cnp = ib.build(bytes([0x81]) + cnp[w.bth_off + 1:w.icrc_off])
    assert walk(roce_cnp, locate.WALK_INFINIBAND).status == locate.BAD_OPCODE
    from roce.decoder.decode import decode_frames

    p197 = _write(tmp_path / "cnp_erf.pcap", [erf.record(cnp), erf.record(roce_cnp)], 197)
    ours = [r.fields for r in decode_frames(open_capture(p197))]
    assert ours[0]["bth.becn"] and ours[0]["icrc.valid"] and ours[0]["vcrc.valid"]
    ws_names = [*IB_ORACLE, "infiniband.bth.opcode", "infiniband.bth.psn",
                "infiniband.bth.destqp", "infiniband.bth.p_key"]
    out = subprocess.run(fields_command(p197, ws_names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    for name, text in zip(ws_names, out[0].split("\t")):
        key = IB_ORACLE.get(name) or our_key(name, ())
        if key != "vcrc":  # tshark 4.0 reads what follows a CNP's BTH as vendor data
            assert tshark_value(name, text) == ours[0].get(key), (name, text)
    assert ours[0]["bth.destqp"] == 0x1234 and ours[0]["lrh.slid"] == 7
    tree = subprocess.run([TSHARK, "-n", "-r", str(p197), "-V"], capture_output=True,
                          text=True, check=True).stdout
    # the opcode's name (its Info column says "Unknown OpCode" for both)
    assert [ln.strip() for ln in tree.splitlines() if ln.strip().startswith("Opcode:")] == [
        "Opcode: CNP (128)", "Opcode: Unknown (129)"]
    assert "Malformed: unknown BTH opcode 0x81" in _cli(capsys, "decode", str(p197))


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_decode_lines_and_tree_for_native_ib(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path / "ib.pcap", _ib_frames()[:4], 247)
    out = _cli(capsys, "decode", str(p))
    assert "LID: 32 -> LID: 3" in out and "InfiniBand" in out and "PSN=1000" in out
    tree = _cli(capsys, "decode", "-V", "-c", "2", str(p))
    assert "Local Route Header" in tree and "Variant CRC: 0x" in tree and "[correct]" in tree
    sel = _cli(capsys, "decode", "-Y", "lrh.lnh == 3", "-T", "fields", "-e", "grh.hoplmt",
               str(p))
    assert sel.split() == ["64", "64"]


def test_mad_and_cm_names(tmp_path: Path) -> None:
    smp = ibmad.build_mad(ibmad.MGMT_SUBN_LID, 0x01, 0x0020)
    sa = ibmad.build_mad(ibmad.MGMT_SUBN_ADM, 0x81, 0x0035)
    req = ibmad.build_cm(0x0010, {"localcommid": 7, "localqpn": 0x1234, "startpsn": 4242,
                                  "pppmtu": 3, "pkey": 0xFFFF})
    names = []
    for qp, mad in ((0, smp), (1, sa), (1, req)):
        t = transport("UD_SEND_ONLY", mad, dqpn=qp, sqpn=qp, qkey=0x80010000)
        d = ib.decode(ib.build(t, vl=15 if qp == 0 else 0))
        names.append(ib.columns(d)[3])
        if "cm.req" in d.fields:
            assert d.fields["cm.req.localqpn"] == 0x1234
            assert d.fields["cm.req.startpsn"] == 4242
    assert names[0].startswith("SubnGet(SMInfo)")
    assert names[1].startswith("SubnAdmGetResp(PathRecord)")
    assert names[2].startswith("ComMgtSend(ConnectRequest) LocalQPN=0x001234 StartPSN=4242 "
                               "MTU=1024")


@needs_tshark
def test_cm_req_matches_tshark(tmp_path: Path) -> None:
    req = ibmad.build_cm(0x0010, {"localcommid": 7, "localqpn": 0x1234, "startpsn": 4242,
                                  "pppmtu": 3, "pkey": 0xFFFF})
    t = transport("UD_SEND_ONLY", req, dqpn=1, sqpn=1, qkey=0x80010000)
    p = _write(tmp_path / "cm.pcap", [erf.record(ib.build(t))], 197)
    names = ["infiniband.mad.mgmtclass", "infiniband.mad.attributeid",
             "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn",
             "infiniband.cm.req.pppmtu"]
    row = subprocess.run(fields_command(p, names), capture_output=True, text=True,
                         check=True).stdout.strip().split("\t")
    d = ib.decode(ib.build(t))
    ours = [d.fields["mad.mgmtclass"], d.fields["mad.attributeid"],
            d.fields["cm.req.localqpn"], d.fields["cm.req.startpsn"], d.fields["cm.req.pppmtu"]]
    assert [int(x, 0) for x in row] == ours


def test_ipoib() -> None:
    ip = bytes([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]) + bytes(8)
    t = transport("UD_SEND_ONLY", struct.pack("!HH", 0x0800, 0) + ip, dqpn=0x48, sqpn=0x49)
    d = ib.decode(ib.build(t))
    assert d.fields["ipoib.type"] == 0x0800 and d.fields["ip.src"] == "10.0.0.1"
    assert ib.columns(d)[2] == "IPoIB"


# -- tunnels ---------------------------------------------------------------------------------


def _outer(proto: int, payload: bytes) -> bytes:
    from roce.fast import ip_checksum_reference

    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto,
                               0, bytes([192, 168, 0, 1]), bytes([192, 168, 0, 2])))
    ip[10:12] = ip_checksum_reference(bytes(ip)).to_bytes(2, "big")
    return eth + bytes(ip) + payload


def _tunnel_frames() -> list[bytes]:
    inner = roce.craft("RC_RDMA_WRITE_ONLY", bytes(16), dqpn=0x22, psn=7, src="10.0.0.1",
                       dst="10.0.0.2").to_bytes()
    vx = tunnels.vxlan(inner, 1234)
    return [
        _outer(47, tunnels.gre(tunnels.GRE_ERSPAN2, tunnels.erspan2(inner, spanid=5, index=9),
                               seq=3)),
        _outer(47, tunnels.gre(tunnels.GRE_ERSPAN3,
                               tunnels.erspan3(inner, spanid=6, timestamp=77, platform=3))),
        _outer(47, tunnels.gre(tunnels.GRE_ERSPAN3, tunnels.erspan3(inner, spanid=8,
                                                                     timestamp=99))),
        _outer(47, tunnels.gre(tunnels.GRE_ETHERNET, inner, key=42)),
        _outer(17, struct.pack("!HHHH", 5000, 4789, 8 + len(vx), 0) + vx),
    ]


TUNNEL_ORACLE = ["erspan.spanid", "erspan.index", "erspan.timestamp", "erspan.platid",
                 "gre.proto", "gre.key", "vxlan.vni", "infiniband.bth.psn",
                 "infiniband.bth.destqp", "infiniband.invariant.crc"]


@needs_tshark
def test_tunnels_match_tshark(tmp_path: Path) -> None:
    from roce.decoder.decode import decode_frames

    p = _write(tmp_path / "tun.pcap", _tunnel_frames(), 1)
    ours = [r.fields for r in decode_frames(open_capture(p))]
    out = subprocess.run(fields_command(p, TUNNEL_ORACLE), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(out) == len(ours) == 5
    for row, f in zip(out, ours):
        assert f["icrc.valid"] and f["outer.ip.src"] == "192.168.0.1" and f["ip.src"] == "10.0.0.1"
        for name, text in zip(TUNNEL_ORACLE, row.split("\t")):
            key = our_key(name, ()) if name.startswith("infiniband.") else name
            got = f.get(key)
            want = tshark_value(name, text) if text else None
            assert want == got, (name, text, f)


def test_tunnels_one_line_filters_and_tree(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    p = _write(tmp_path / "tun.pcap", _tunnel_frames(), 1)
    out = _cli(capsys, "decode", "--only-roce", str(p)).splitlines()
    assert len(out) == 5 and all("10.0.0.1 -> 10.0.0.2" in line and "PSN=7" in line
                                 for line in out)
    sel = _cli(capsys, "decode", "-Y", "erspan.spanid == 6 and outer.ip.dst == 192.168.0.2",
               str(p)).splitlines()
    assert len(sel) == 1 and sel[0].split()[0] == "2"
    tree = _cli(capsys, "decode", "-V", "-c", "1", str(p))
    assert "Generic Routing Encapsulation" in tree and "SpanID: 5" in tree
    assert tree.index("Generic Routing") < tree.index("Base Transport Header")
    assert "Outer Internet Protocol Version 4" in tree and "Source Address: 192.168.0.1" in tree
    assert tree.index("Outer Ethernet II") < tree.index("Generic Routing")


def test_truncated_tunnel_is_malformed_not_a_crash(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    f = _tunnel_frames()[1]
    p = _write(tmp_path / "cut.pcap", [f[:14 + 20 + 4 + 6]], 1)
    out = _cli(capsys, "decode", str(p))
    assert "Malformed" in out and "ERSPAN header truncated" in out


# -- registry ----------------------------------------------------------------------------------


def test_decode_as_roce_on_another_port(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    raw = bytearray(roce.craft("RC_SEND_ONLY", b"hi", psn=11).to_bytes())
    raw[36:38] = (4792).to_bytes(2, "big")  # UDP destination port
    p = _write(tmp_path / "p.pcap", [bytes(raw)], 1)
    assert "RC Send Only" not in _cli(capsys, "decode", str(p))
    try:
        out = _cli(capsys, "decode", "-d", "udp.port==4792,roce", str(p))
    finally:
        registry().tables["udp.port"].pop(4792, None)
    assert "RC Send Only" in out and "PSN=11" in out
    assert main(["decode", "-d", "udp.port==4792,nosuch", str(p)]) == 1


def test_toy_family_registered_from_outside(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A family of one header (magic 16, counter 32) on UDP 5555, written here, not in
    the package."""
    from roce.families.ib.native import Decoded
    from roce.locate import L3_NONE, OK, Walk

    def decode(data: bytes, caplen: int | None = None, origlen: int | None = None) -> Decoded:
        magic, counter = struct.unpack_from("!HI", data)
        w = Walk(OK, 0, L3_NONE, -1, 0, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0)
        return Decoded(w, ("toy",), {"toy": True, "toy.magic": magic, "toy.counter": counter},
                       None, "roce")

    def columns(d: Decoded) -> tuple[str, str, str, str]:
        return "a", "b", "TOY", f"Toy counter={d.fields['toy.counter']}"

    reg = registry()
    reg.add(Handler("toy", decode=decode, columns=columns, fields=("toy", "toy.magic",
                                                                    "toy.counter")),
            ("udp.port", 5555))
    try:
        body = struct.pack("!HI", 0xCAFE, 41)
        frame = _outer(17, struct.pack("!HHHH", 1000, 5555, 8 + len(body), 0) + body)
        p = _write(tmp_path / "toy.pcap", [frame], 1)
        assert "TOY 48 Toy counter=41" in _cli(capsys, "decode", str(p))
        assert _cli(capsys, "decode", "-T", "fields", "-e", "toy.magic", str(p)).strip() == \
            str(0xCAFE)
    finally:
        reg.remove("toy")
    assert "Toy" not in _cli(capsys, "decode", str(p))


@needs_tshark
@pytest.mark.parametrize("encap", ["erspan2", "erspan3", "gre", "vxlan"])
def test_craft_encap_decodes_in_tshark_and_ours(tmp_path: Path, encap: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "e.pcap"
    assert main(["craft", "rc-send-only", "--dqpn", "0x33", "--psn", "77", "--encap", encap,
                 "--span-id", "9", "-q", "-w", str(p)]) == 0
    row = subprocess.run(fields_command(p, ["infiniband.bth.psn", "infiniband.bth.destqp"]),
                         capture_output=True, text=True, check=True).stdout.split()
    assert row == ["77", "0x00000033"] or [int(x, 0) for x in row] == [77, 0x33]
    assert "PSN=77" in _cli(capsys, "decode", str(p))


def test_craft_link_ib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "ib.pcap"
    assert main(["craft", "rc-rdma-write-only", "--payload-size", "8", "--psn", "9",
                 "--link", "ib", "--dlid", "7", "-q", "-w", str(p)]) == 0
    fr = next(iter(open_capture(p)))
    assert fr.linktype == 247
    d = ib.decode(fr.data)
    assert d.fields["lrh.dlid"] == 7 and d.fields["bth.psn"] == 9
    assert d.fields["icrc.valid"] and d.fields["vcrc.valid"]


@given(seed_frame=st.integers(0, 10), flips=st.lists(
    st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 400), linktype=st.sampled_from([1, 197, 247]))
def test_mutated_families_decode_with_typed_errors_only(seed_frame: int, flips: list,
                                                        cut: int, linktype: int) -> None:
    """Fuzz the new families and tunnels: mutated and cut frames become records whose
    errors are DecodeError / NotRoCE, never an exception out of the decoder."""
    from roce.decoder.decode import decode_frames
    from roce.errors import NotRoCE
    from roce.pcapio import Frame

    if linktype == 1:
        frames = _tunnel_frames()
    else:
        frames = _ib_frames()[:6]
        if linktype == 197:
            frames = [erf.record(f, extensions=(3,)) for f in frames]
    data = bytearray(frames[seed_frame % len(frames)])
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    data = bytes(data[:cut] if cut < len(data) else data)
    fr = Frame(data, 0, len(data), len(data), linktype, 0)
    for rec in decode_frames([fr]):
        assert rec.error is None or isinstance(rec.error, (DecodeError, NotRoCE))
        assert isinstance(rec.fields, dict)


# -- the compiled IB scan and the one-line path ---------------------------------------------


def ib_frames_with_flips(picks: list[tuple[int, int, int]]) -> list[bytes]:
    """Frames of ``_mixed_ib_frames`` picked by (which, byte position, new value)."""
    return frames_with_flips(_mixed_ib_frames(), picks)


def frames_with_flips(base: list[bytes], picks: list[tuple[int, int, int]]) -> list[bytes]:
    """Frames of ``base`` picked by (which, byte position, new value)."""
    frames = []
    for which, pos, value in picks:
        f = bytearray(base[which % len(base)])
        if pos < len(f):
            f[pos] = value
        frames.append(bytes(f))
    return frames


def _mixed_ib_frames() -> list[bytes]:
    frames = _ib_frames()
    t = transport("RC_SEND_ONLY", b"abc")
    frames.append(ib.build(t, bad_icrc=True))
    frames.append(ib.build(t, bad_vcrc=True))
    frames.append(ib.build(t)[:20])  # cut
    frames.append(bytes(ib.build(t)[:1]) + bytes([0x00]) + ib.build(t)[2:])  # LNH 0: raw
    frames.append(ib.build(transport("UD_SEND_ONLY", ibmad.build_mad(1, 1, 0x20), dqpn=0,
                                     sqpn=0, qkey=0), vl=15))
    for flags in (("fecn",), ("becn",), ("fecn", "becn")):  # the ICRC masks both, VCRC not
        frames.append(ib.build(bth_flags(transport("RC_SEND_ONLY", b"abc", ackreq=True),
                                         *flags)))
    frames.append(ib.build(transport("cnp", dqpn=0x77)))  # native IB's CNP (0x80), BECN set
    return frames


def bth_flags(t: bytes, *names: str) -> bytes:
    """Transport bytes ``t`` (BTH first) with the BTH flags ``names`` set."""
    buf = bytearray(t)
    for name in names:
        off, _, shift, mask = locate.SPECS[("bth", name)]
        buf[off] |= mask << shift
    return bytes(buf)


@given(picks=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 400),
                                st.integers(0, 255)), min_size=1, max_size=12))
def test_ib_scan_twins_agree(picks: list) -> None:
    if ib._EXT is None:
        pytest.skip("compiled fast path not built")
    frames = ib_frames_with_flips(picks)
    a, b = ib.scan_columns(len(frames)), ib.scan_columns(len(frames))
    ib._EXT.ib_scan(frames, a)
    ib.scan_reference(frames, b)
    for name in ib.SCAN_COLUMNS:
        assert a[name][:len(frames)] == b[name][:len(frames)], name
    for f in frames:
        assert ib._EXT.ib_vcrc(f) == ibcrc.vcrc(f)


@pytest.mark.parametrize("linktype", [247, 197])
def test_ib_fast_lines_equal_record_lines(tmp_path: Path, linktype: int,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    frames = _mixed_ib_frames()
    if linktype == 197:
        frames = [erf.record(f) for f in frames]
    p = _write(tmp_path / "m.pcap", frames, linktype)
    fast_out = _cli(capsys, "decode", str(p))
    slow_out = _cli(capsys, "decode", "-Y", "frame.number > 0", str(p))
    assert fast_out == slow_out
    assert "[BAD ICRC]" in fast_out and "[BAD VCRC]" in fast_out
    assert "SubnGet(SMInfo)" in fast_out and "Malformed" in fast_out


def test_tunnel_fast_lines_equal_record_lines(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    plain = roce.craft("RC_SEND_ONLY", b"plain", psn=3).to_bytes()
    tun = _tunnel_frames()
    cut = tun[0][:50]
    frames = [*tun, plain, cut, *tun, plain]
    p = _write(tmp_path / "t.pcap", frames, 1)
    fast_out = _cli(capsys, "decode", str(p))
    assert fast_out == _cli(capsys, "decode", "-Y", "frame.number > 0", str(p))
    assert fast_out.count("PSN=7") == 10 and fast_out.count("PSN=3") == 2
    only = _cli(capsys, "decode", "--only-roce", str(p))
    assert only.count("PSN=7") == 10


@pytest.mark.parametrize("kind", ["erspan2", "erspan3", "gre", "vxlan"])
def test_stats_analyses_inner_flows_of_a_mirror_session(tmp_path: Path, kind: str,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    import json

    from roce.families import craft

    frames = []
    for n in range(30):
        qp = 0x100 + n % 3
        psn = n // 3 if not (qp == 0x101 and n // 3 == 4) else 99  # one gap on QP 0x101
        inner = roce.craft("RC_RDMA_WRITE_ONLY", bytes(32), dqpn=qp, psn=psn).to_bytes()
        frames.append(craft.encap(inner, kind, n, 7))
    p = _write(tmp_path / "mirror.pcap", frames, 1)
    doc = json.loads(_cli(capsys, "stats", "-T", "json", str(p)))
    assert doc["totals"]["roce_packets"] == 30 and doc["totals"]["not_roce"] == 0
    flows = {f["qp"]: f for f in doc["flows"]}
    assert sorted(flows) == [0x100, 0x101, 0x102]
    assert all(f["packets"] == 10 and f["src"] == "10.0.0.1" for f in flows.values())
    assert doc["totals"]["gaps"] >= 1


def test_family_from_an_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``roce.families`` entry-point group: a plugin's callable gets the registry."""
    import importlib.metadata as md
    import sys

    from roce.families.builtin import _load_plugins
    from roce.families.registry import Registry

    (tmp_path / "toy_plugin.py").write_text(
        "from roce.families.registry import Handler\n"
        "def register(reg):\n"
        "    reg.add(Handler('toyplug', fields=('toyplug',)), ('udp.port', 6000))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = md.EntryPoint("toy", "toy_plugin:register", "roce.families")
    monkeypatch.setattr(md, "entry_points",
                        lambda group=None: [ep] if group == "roce.families" else [])
    reg = Registry()
    _load_plugins(reg)
    assert reg.lookup("udp.port", 6000).name == "toyplug"
    sys.modules.pop("toy_plugin", None)


@given(picks=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 120),
                                st.integers(0, 255)), min_size=1, max_size=12),
       port_vxlan=st.sampled_from([4789, 4790]))
def test_peel_twins_agree(picks: list, port_vxlan: int) -> None:
    """roce._fastpath.peel against peel.peel_reference on mutated tunnel frames, with the
    registry's rows as they are and with VXLAN decoded on another port."""
    from roce import fast
    from roce.families import peel as lines
    from roce.pcapio import Batch

    if not hasattr(fast._ext, "peel"):
        pytest.skip("compiled fast path not built")
    from roce.families import intmd

    plain = roce.craft("RC_SEND_ONLY", b"x").to_bytes()
    # INT-MD is cut out of the frame's middle, not skipped over: its handler only unwraps
    stamped = intmd.insert(plain, 14, 34, stack=intmd.hop_record(3, 0, 500, 9, 1, 10**11))
    frames = frames_with_flips([*_tunnel_frames(), plain, stamped], picks)
    reg = registry()
    if port_vxlan != 4789:
        reg.map("udp.port", port_vxlan, "vxlan")
    try:
        batch = Batch(frames, [0] * len(frames), [len(f) for f in frames],
                      [len(f) for f in frames], 1)
        got = lines.peel(batch, 4791).datas
        want = lines.peel_reference(batch, 4791).datas
        assert lines._compiled_peel() is not None
        assert got == want
    finally:
        reg.tables["udp.port"].pop(4790, None)


def test_stats_pairs_cm_exchanges_with_connections(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from cm_helpers import cm_frames

    frames = cm_frames()
    p = _write(tmp_path / "cm.pcap", frames, 247)
    out = _cli(capsys, "stats", str(p))
    assert "CM connection 1: LID 0x0002 QP 0x000011 <-> LID 0x0001 QP 0x000022" in out
    assert "LID 0x0002 -> LID 0x0001 QP 0x000022" in out  # the flow: the LIDs spelt alike
    assert "RTU" in out and "100 (REQ) / 500 (REP); first seen: 100 / 501" in out
    # the connections come before the expert findings, and their problems are among them
    expert = out.index("Expert info: 0 errors, 1 warning, 0 notes")
    assert out.index("CM connection 1: LID") < expert
    assert out.index("warning  CM connection 1: first PSN 501 to QP 0x000011 is not the REP's "
                     "starting PSN 500") > expert
    assert "no findings" not in out
    doc = json.loads(_cli(capsys, "stats", "-T", "json", str(p)))
    (conn,) = doc["cm_connections"]
    assert conn["active_qpn"] == 0x11 and conn["passive_qpn"] == 0x22
    assert conn["first_psn_to_passive"] == 100 and conn["path_mtu"] == 5
    assert len(conn["problems"]) == 1 and conn["cm_frames"] == [1, 2, 3]
    # the same packets as ERF records
    p2 = _write(tmp_path / "cm_erf.pcap", [erf.record(f) for f in frames], 197)
    assert "CM connection 1" in _cli(capsys, "stats", str(p2))


def test_columnar_output_carries_family_fields(tmp_path: Path) -> None:
    """-T parquet: the families' fields are columns (roce.decoder.fieldtypes) with values."""
    import pyarrow.parquet as pq

    frames = [*_tunnel_frames()]
    p = _write(tmp_path / "t.pcap", frames, 1)
    out = tmp_path / "t.parquet"
    assert main(["decode", "-T", "parquet", "-w", str(out), str(p)]) == 0
    t = pq.read_table(out)
    assert t.column("erspan.spanid").to_pylist() == [5, 6, 8, None, None]
    assert t.column("vxlan.vni").to_pylist()[-1] == 1234
    assert t.column("outer.ip.src").to_pylist() == ["192.168.0.1"] * 5
    p2 = _write(tmp_path / "ib.pcap", _ib_frames()[:4], 247)
    assert main(["decode", "-T", "parquet", "-w", str(out), str(p2)]) == 0
    t = pq.read_table(out)
    assert t.column("lrh.dlid").to_pylist() == [3, 5, 4, 5]
    assert t.column("vcrc.valid").to_pylist() == [True] * 4
