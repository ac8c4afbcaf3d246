"""Packet: craft -> bytes -> parse round trips, byte-exact re-encoding, and bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roce
from roce import OPCODES, ROCE_OPCODES, DecodeError, NotRoCE
from roce.fast import ip_checksum_reference
from roce.headers import ENCODERS, LAYOUTS, SIZE_OF
from roce.locate import HEADER_IDS
from roce.packet import udp_source_port as packet_udp_source_port

CODES = sorted(ROCE_OPCODES)  # what a RoCE frame may carry
VARIANTS = ("ipv4", "ipv6", "vlan", "rocev1")
SINGLE = ("immdt", "ieth")  # fields() flattens these one-field headers to their own name
BTH_FIELDS = ("psn", "destqp", "p_key", "se", "m", "a", "fecn", "becn")


def variant_kwargs(variant: str, vlan_id: int = 100, prio: int = 0) -> dict:
    return {"ipv4": {}, "ipv6": {"ipv6": True}, "rocev1": {"roce_version": 1},
            "vlan": {"vlan": vlan_id, "vlan_priority": prio}}[variant]


def value_strategy(f) -> st.SearchStrategy:
    if f.kind == "bool":
        return st.booleans()
    return st.integers(0, f.mask) | st.sampled_from([0, f.mask])


@st.composite
def payloads(draw, op):
    if op.payload_len is not None:
        n = op.payload_len
    elif op.payload:
        n = draw(st.integers(0, 4096) | st.integers(0, 9))
    else:
        return b""
    seed = draw(st.binary(min_size=1, max_size=8))
    return (seed * (n // len(seed) + 1))[:n]


@st.composite
def crafted(draw, codes=CODES, variants=VARIANTS):
    """(opcode row, variant, field values as {"header.field": v}, payload, craft kwargs)."""
    op = OPCODES[draw(st.sampled_from(codes))]
    variant = draw(st.sampled_from(variants))
    values = {f"bth.{name}": draw(value_strategy(LAYOUTS["bth"].field(name)))
              for name in BTH_FIELDS}
    for h in op.headers:
        for f in LAYOUTS[h].fields:
            values[f"{h}.{f.name}"] = draw(value_strategy(f))
    if op.code == 0x81:  # CNP reserved bytes are zero (docs/protocol.md, CNP)
        values["cnp.reserved"] = 0
    payload = draw(payloads(op))
    kw = variant_kwargs(variant, draw(st.integers(0, 4095)), draw(st.integers(0, 7)))
    return op, variant, values, payload, kw


def make(op, payload, kw, values) -> roce.Packet:
    return roce.craft(op.code, payload, **kw, **values)


def simple_frame(code: int, variant: str = "ipv4", payload: bytes | None = None,
                 **fields) -> bytes:
    op = OPCODES[code]
    if payload is None:
        payload = bytes(range(op.payload_len)) if op.payload_len else (b"hello" if op.payload
                                                                         else b"")
    return roce.craft(code, payload, **variant_kwargs(variant), dqpn=0x1234, psn=77,
                      **fields).to_bytes()


def expected_fields_key(header: str, field: str) -> str:
    return header if header in SINGLE else f"{header}.{field}"


# -- round trips ------------------------------------------------------------------------------


@given(crafted())
def test_craft_parse_round_trip(case):
    op, variant, values, payload, kw = case
    frame = make(op, payload, kw, values).to_bytes()
    q = roce.parse(frame)
    assert q.to_bytes() == frame
    assert q.opcode is op
    assert q.roce_version == (1 if variant == "rocev1" else 2)
    assert q.l3 == {"ipv4": "ip", "vlan": "ip", "ipv6": "ipv6", "rocev1": "grh"}[variant]
    assert q.payload == payload
    padcnt = -len(payload) & 3
    assert q.pad == bytes(padcnt)
    assert q.icrc_valid is True
    assert q.icrc == int.from_bytes(frame[-4:], "big") == q.expected_icrc == q.stored_icrc
    hdrs = q.headers
    for key, value in values.items():
        h, _, k = key.partition(".")
        assert hdrs[h][k] == value, key
    assert hdrs["bth"]["padcnt"] == padcnt and hdrs["bth"]["tver"] == 0
    assert hdrs["bth"]["opcode"] == op.code
    if variant == "vlan":
        assert hdrs["vlan"]["id"] == kw["vlan"] and hdrs["vlan"]["priority"] == kw["vlan_priority"]
    # computed lengths and checksum
    l4 = 12 + sum(SIZE_OF[h] for h in op.headers) + len(payload) + padcnt + 4
    if variant == "rocev1":
        assert hdrs["grh"]["paylen"] == l4 and "udp" not in hdrs
    else:
        assert hdrs["udp"]["length"] == l4 + 8 and hdrs["udp"]["dstport"] == 4791
        if variant == "ipv6":
            assert hdrs["ipv6"]["plen"] == l4 + 8
        else:
            assert hdrs["ip"]["len"] == l4 + 28
            ip_off = 18 if variant == "vlan" else 14
            assert ip_checksum_reference(frame[ip_off:ip_off + 20]) == 0
    assert len(frame) == {"ipv4": 42, "vlan": 46, "ipv6": 62, "rocev1": 54}[variant] + l4

    # a re-parse of the rebuilt frame (after touching headers) is still byte-identical
    assert q.to_bytes() == frame

    fields = q.fields()
    for key, value in values.items():
        h, _, k = key.partition(".")
        assert fields[expected_fields_key(h, k)] == value, key
    assert fields["bth.padcnt"] == padcnt
    assert fields["payload.len"] == len(payload)
    assert fields["icrc"] == q.icrc and fields["icrc.valid"] is True
    assert fields["frame.len"] == len(frame)
    assert fields["roce.version"] == q.roce_version
    for h in op.headers:
        assert fields[h] == values[f"{h}.{h}"] if h in SINGLE else fields[h] is True


@given(crafted(variants=("ipv4", "ipv6", "vlan")))
def test_crafted_frames_validate_against_reference_walk(case):
    op, _, values, payload, kw = case
    frame = make(op, payload, kw, values).to_bytes()
    w = roce.locate.walk(frame)
    assert w.status == 0
    assert w.pad_off - w.payload_off == len(payload)
    assert frame[w.payload_off:w.pad_off] == payload
    assert roce.icrc_of_frame(frame) == int.from_bytes(frame[w.icrc_off:w.l4_end], "big")


@given(crafted(), st.data())
def test_odd_pad_bad_icrc_and_trailer_survive_rebuild(case, data):
    op, _, values, payload, kw = case
    frame = make(op, payload, kw, values).to_bytes()
    w = roce.locate.walk(frame)
    body = bytearray(frame)
    npad = w.icrc_off - w.pad_off
    pad = data.draw(st.binary(min_size=npad, max_size=npad))
    body[w.pad_off:w.icrc_off] = pad
    bad_icrc = data.draw(st.booleans())
    if bad_icrc:
        body[w.icrc_off] ^= 0x5A
    trailer = data.draw(st.binary(max_size=24))
    odd = bytes(body) + trailer
    if not bad_icrc:  # a correct ICRC over the odd pad
        good = roce.icrc_of_frame(odd).to_bytes(4, "big")
        odd = odd[:w.icrc_off] + good + odd[w.l4_end:]
    q = roce.parse(odd)
    assert q.to_bytes() == odd
    assert q.pad == pad and q.trailer == trailer
    assert q.icrc_valid is (not bad_icrc)
    assert q.copy().to_bytes() == odd
    assert q.headers["bth"]["opcode"] == op.code  # hands out the dicts: rebuilt from now on
    assert q.to_bytes() == odd
    assert q.icrc_valid is (not bad_icrc)


@given(crafted(), st.integers(0, (1 << 24) - 1))
def test_editing_a_parsed_packet_shows_in_to_bytes(case, new_psn):
    op, _, values, payload, kw = case
    frame = make(op, payload, kw, values).to_bytes()
    q = roce.parse(frame)
    bth_off = q.walk.bth_off
    q.headers["bth"]["psn"] = new_psn
    edited = q.to_bytes()
    assert len(edited) == len(frame)
    assert edited[bth_off + 9:bth_off + 12] == new_psn.to_bytes(3, "big")
    assert edited[:bth_off + 9] == frame[:bth_off + 9]
    assert edited[bth_off + 12:] == frame[bth_off + 12:]  # the stored ICRC is kept ...
    assert q.icrc_valid is (new_psn == values["bth.psn"])
    q.icrc = None  # ... until it is cleared: then it is recomputed
    fixed = q.to_bytes()
    assert roce.parse(fixed).icrc_valid
    assert fixed == make(op, payload, kw, {**values, "bth.psn": new_psn}).to_bytes()


def test_edit_payload_and_attributes():
    frame = simple_frame(0x04, payload=b"abcdef")
    q = roce.parse(frame)
    q.payload = b"xyz"
    q.pad = None
    q.icrc = None
    q.headers["bth"]["padcnt"] = None
    q.headers["ip"]["len"] = q.headers["ip"]["checksum"] = q.headers["udp"]["length"] = None
    again = roce.parse(q.to_bytes())
    assert again.payload == b"xyz" and again.pad == b"\0" and again.icrc_valid
    assert again.fields()["bth.padcnt"] == 1
    assert again.to_bytes() == roce.craft(0x04, b"xyz", dqpn=0x1234, psn=77).to_bytes()


@pytest.mark.parametrize("variant", VARIANTS)
def test_explicit_icrc_is_stored(variant):
    p = roce.craft("RC_SEND_ONLY", b"data", icrc=0x1234, **variant_kwargs(variant))
    assert p.icrc == 0x1234
    frame = p.to_bytes()
    assert frame[-4:] == b"\x00\x00\x12\x34"
    assert p.icrc_valid is False
    assert p.stored_icrc == 0x1234 and p.expected_icrc != 0x1234
    q = roce.parse(frame)
    assert q.icrc == 0x1234 and q.icrc_valid is False
    assert q.fields()["icrc"] == 0x1234 and q.fields()["icrc.valid"] is False
    assert roce.craft("RC_SEND_ONLY", b"data", **variant_kwargs(variant)).icrc_valid is True


@given(crafted(codes=[c for c in CODES if OPCODES[c].payload and OPCODES[c].payload_len is None]),
       st.data())
def test_partial_frame_cut_inside_payload(case, data):
    op, _, values, payload, kw = case
    payload = payload or b"abc"
    frame = make(op, payload, kw, values).to_bytes()
    w = roce.locate.walk(frame)
    cut = data.draw(st.integers(w.payload_off, w.icrc_off - 1 + 4))  # up to the ICRC's end - 1
    short = frame[:cut]
    with pytest.raises(DecodeError) as exc:
        roce.parse(short)
    assert exc.value.header in ("ip", "ipv6", "grh")
    assert "captured" in str(exc.value)
    q = roce.parse(short, partial=True)
    assert q.icrc is None
    assert q.payload == frame[w.payload_off:cut]
    for key, value in values.items():
        h, _, k = key.partition(".")
        assert q.headers[h][k] == value
    if "ieth" not in op.headers:
        fields = q.fields()
        assert "icrc" not in fields and "icrc.valid" not in fields
        assert fields["bth.psn"] == values["bth.psn"]
        assert fields["frame.len"] == cut


def test_partial_does_not_hide_other_errors():
    frame = simple_frame(0x04)
    with pytest.raises(DecodeError):
        roce.parse(frame[:20], partial=True)  # cut inside IPv4: not a partial packet
    with pytest.raises(DecodeError):
        roce.parse(simple_frame(0x04, **{"bth.tver": 2}), partial=True)


def test_design_defaults():
    """docs/protocol.md: IPv4 DF set, UDP checksum 0, UDP port 4791; a CNP is BECN=1, PSN 0,
    P_Key 0xFFFF, 16 zero bytes and the ICRC."""
    f = roce.parse(simple_frame(0x04)).fields()
    assert (f["ip.flags.df"], f["ip.proto"], f["udp.checksum"], f["udp.dstport"]) == (1, 17, 0,
                                                                                       4791)
    assert f["bth.tver"] == 0 and f["bth.p_key"] == 0xFFFF
    cnp = roce.craft(0x81, dqpn=0x4321).to_bytes()
    assert len(cnp) == 14 + 20 + 8 + 12 + 16 + 4
    c = roce.parse(cnp).fields()
    assert (c["bth.opcode"], c["bth.becn"], c["bth.fecn"], c["bth.psn"], c["bth.p_key"],
            c["bth.destqp"], c["cnp.reserved"]) == (0x81, True, False, 0, 0xFFFF, 0x4321, 0)
    assert cnp[54:70] == bytes(16) and c["icrc.valid"]


@pytest.mark.parametrize("syn,key,value", [
    (0x1F, "aeth.syndrome.credit_count", 31), (0x05, "aeth.syndrome.credit_count", 5),
    (0x2C, "aeth.syndrome.timer", 12), (0x62, "aeth.syndrome.error_code", 2),
    (0x41, "aeth.syndrome.reserved_value", 1)])
def test_aeth_syndrome_subfields(syn, key, value):
    q = roce.parse(roce.craft(0x11, syndrome=syn, msn=0x123456).to_bytes())
    f = q.fields()
    assert f["aeth.syndrome"] == syn and f["aeth.msn"] == 0x123456
    assert f["aeth.syndrome.opcode"] == syn >> 5 and f["aeth.syndrome.reserved"] == 0
    assert f[key] == value


def test_udp_source_port_is_rxe_hash_and_packet_helpers():
    assert packet_udp_source_port(0) == 0xC000
    assert packet_udp_source_port(1) == 0xD872  # 0xC000 | (0x61C88647 >> 18)
    q = roce.parse(roce.craft(0x04, b"abc", dqpn=1, psn=9).to_bytes())
    assert q.fields()["udp.srcport"] == 0xD872
    assert repr(q) == "<roce.Packet RC Send Only QP=0x000001 PSN=9 payload=3B>"
    assert q == q.copy() and q != roce.parse(roce.craft(0x04, b"abd", dqpn=1).to_bytes())
    assert bytes(q) == q.to_bytes() and q["bth"]["psn"] == 9 and "udp" in q
    assert "reth" not in q and q.bth["destqp"] == 1


# -- truncation at every offset ---------------------------------------------------------------


@pytest.mark.parametrize("variant", ["ipv4", "ipv6", "rocev1"])
@pytest.mark.parametrize("code", CODES, ids=lambda c: f"0x{c:02x}")
def test_truncation_at_every_offset_is_a_decode_error(code, variant):
    frame = simple_frame(code, variant)
    roce.parse(frame)  # the whole frame is fine
    for cut in range(len(frame)):
        try:
            roce.parse(frame[:cut])
        except DecodeError as exc:
            assert not isinstance(exc, NotRoCE)
            assert exc.header in HEADER_IDS, (cut, exc.header)
            assert 0 <= exc.offset <= cut, (cut, exc.offset, str(exc))
            assert str(exc)
        except Exception as exc:  # noqa: BLE001 - any other exception is the failure
            pytest.fail(f"cut at {cut}: {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"cut at {cut} of {len(frame)} parsed")


def test_truncation_headers_named():
    frame = simple_frame(0x0A)  # eth 14, ip 20, udp 8, bth 12, reth 16
    cases = {5: "eth", 20: "ip", 36: "udp", 45: "bth", 60: "reth"}
    for cut, header in cases.items():
        with pytest.raises(DecodeError) as exc:
            roce.parse(frame[:cut])
        assert exc.value.header == header, cut
        assert "truncated" in str(exc.value)
    with pytest.raises(DecodeError) as exc:
        roce.parse(frame[:-1])  # inside the ICRC: the IP length claims more than captured
    assert exc.value.header == "ip" and exc.value.offset == 14


# -- malformed frames, reported by name -------------------------------------------------------


def _patch(frame: bytes, offset: int, value: int) -> bytes:
    return frame[:offset] + bytes([value]) + frame[offset + 1:]


@pytest.mark.parametrize("variant", ["ipv4", "ipv6", "rocev1"])
def test_wrong_tver(variant):
    frame = simple_frame(0x04, variant, **{"bth.tver": 3})
    bth = roce.locate.walk(simple_frame(0x04, variant)).bth_off
    with pytest.raises(DecodeError) as exc:
        roce.parse(frame)
    assert exc.value.header == "bth" and exc.value.offset == bth + 1
    assert "TVer" in str(exc.value) and "is 3" in str(exc.value) and "must be 0" in str(exc.value)


@pytest.mark.parametrize("code,payload,padcnt", [(0x11, b"", 1), (0x04, b"a", 3),
                                                  (0x04, b"", 2), (0x0C, b"", 3)])
def test_padcnt_larger_than_what_follows(code, payload, padcnt):
    frame = roce.craft(code, payload, pad=b"", **{"bth.padcnt": padcnt}).to_bytes()
    with pytest.raises(DecodeError) as exc:
        roce.parse(frame)
    assert exc.value.header == "bth" and exc.value.offset == 42 + 1
    text = str(exc.value)
    assert f"PadCnt {padcnt}" in text and f"exceeds the {len(payload)} bytes" in text


@pytest.mark.parametrize("bad", [0x15, 0x18, 0x1B, 0x1E, 0x2C, 0x30, 0x56, 0x60, 0x66, 0x80,
                                 0xB5, 0xB8, 0xC0, 0xFF])
def test_unknown_opcode(bad):
    for variant in ("ipv4", "rocev1"):
        good = simple_frame(0x04, variant)
        bth = roce.locate.walk(good).bth_off
        with pytest.raises(DecodeError) as exc:
            roce.parse(_patch(good, bth, bad))
        assert exc.value.header == "bth" and exc.value.offset == bth
        assert f"unknown BTH opcode 0x{bad:02x}" in str(exc.value)


@pytest.mark.parametrize("code", [c for c in CODES if not OPCODES[c].payload])
def test_payload_on_an_opcode_without_one(code):
    frame = roce.craft(code, b"abcd").to_bytes()
    with pytest.raises(DecodeError) as exc:
        roce.parse(frame)
    op = OPCODES[code]
    assert exc.value.header == "payload"
    assert exc.value.offset == 42 + 12 + sum(SIZE_OF[h] for h in op.headers)
    assert f"{op.short_name} carries 4 payload bytes" in str(exc.value)
    assert "has none" in str(exc.value)


@pytest.mark.parametrize("n", [0, 1, 7, 9, 16])
def test_atomic_write_payload_must_be_8(n):
    frame = roce.craft(0x1D, bytes(n)).to_bytes()
    with pytest.raises(DecodeError) as exc:
        roce.parse(frame)
    assert exc.value.header == "payload"
    assert f"is {n} bytes, must be 8" in str(exc.value)


def test_other_malformed_headers():
    good = simple_frame(0x04)
    cases = [
        (_patch(good, 14, 0x55), "ip", "version 5"),  # IPv4 version
        (_patch(good, 14, 0x44), "ip", "header length 16"),  # IHL 4
        (_patch(good, 17, good[17] + 1), "udp", "UDP length"),  # IP total length + 1
        (_patch(good, 39, good[39] + 1), "udp", "UDP length"),  # UDP length + 1
        (_patch(good, 17, 20), "ip", "less than the 28 bytes"),  # IP total length 20
    ]
    v1 = simple_frame(0x04, "rocev1")
    cases.append((_patch(v1, 14 + 6, 0x11), "grh", "not BTH"))
    v6 = simple_frame(0x04, "ipv6")
    cases.append((_patch(v6, 14, 0x45), "ipv6", "version 4"))
    for frame, header, text in cases:
        with pytest.raises(DecodeError) as exc:
            roce.parse(frame)
        assert exc.value.header == header, text
        assert text in str(exc.value)


def _ipv4_udp(dport: int, proto: int = 17, frag: int = 0) -> bytes:
    ip = ENCODERS["ip"]({"version": 4, "ihl": 5, "len": 20 + 8 + 4, "flags.df": 1,
                         "frag_offset": frag, "ttl": 64, "proto": proto, "src": "10.0.0.1",
                         "dst": "10.0.0.2"})
    udp = ENCODERS["udp"]({"srcport": 1000, "dstport": dport, "length": 12})
    eth = ENCODERS["eth"]({"dst": "02:00:00:00:00:02", "src": "02:00:00:00:00:01",
                           "type": 0x0800})
    return eth + ip + udp + b"abcd"


@pytest.mark.parametrize("frame,text", [
    (ENCODERS["eth"]({"dst": "ff:ff:ff:ff:ff:ff", "src": "02:00:00:00:00:01", "type": 0x0806})
     + bytes(28), "EtherType 0x0806"),
    (_ipv4_udp(80, proto=6), "protocol 6"),
    (_ipv4_udp(53), "port 53"),
    (_ipv4_udp(4791, frag=8), "fragment"),
], ids=["arp", "tcp", "udp-53", "fragment"])
def test_not_roce(frame, text):
    with pytest.raises(NotRoCE) as exc:
        roce.parse(frame)
    assert not isinstance(exc.value, DecodeError)
    assert text in str(exc.value)
    with pytest.raises(NotRoCE):
        roce.icrc_of_frame(frame)


def test_not_roce_ipv6_and_linktype():
    v6 = simple_frame(0x04, "ipv6")
    with pytest.raises(NotRoCE, match="protocol 6"):
        roce.parse(_patch(v6, 14 + 6, 6))
    with pytest.raises(NotRoCE, match="link type 7"):
        roce.parse(simple_frame(0x04), linktype=7)


def test_other_udp_port():
    frame = simple_frame(0x04)
    udp_dport = 14 + 20 + 2
    moved = frame[:udp_dport] + (5000).to_bytes(2, "big") + frame[udp_dport + 2:]
    with pytest.raises(NotRoCE, match="port 5000"):
        roce.parse(moved)
    q = roce.parse(moved, udp_port=5000)
    assert q.fields()["udp.dstport"] == 5000
    assert q.to_bytes() == moved
    # the UDP ports are covered by the ICRC
    assert q.icrc_valid is False


# -- link types -------------------------------------------------------------------------------


def _sll(etype: int) -> bytes:
    return ENCODERS["sll"]({"pkttype": 0, "hatype": 1, "halen": 6, "src": 0x0200000000010000,
                            "etype": etype})


def _sll2(etype: int) -> bytes:
    return ENCODERS["sll2"]({"etype": etype, "reserved": 0, "ifindex": 3, "hatype": 1,
                             "pkttype": 4, "halen": 6, "src": 0x0200000000010000})


@pytest.mark.parametrize("variant", ["ipv4", "ipv6", "rocev1"])
@pytest.mark.parametrize("linktype", [101, 113, 276])
def test_linktypes(linktype, variant):
    eth_frame = simple_frame(0x0B, variant, va=0x1122, rkey=0x33, dmalen=5, imm=0x44)
    etype = int.from_bytes(eth_frame[12:14], "big")
    l3 = eth_frame[14:]
    if linktype == 101:
        if variant == "rocev1":
            # a GRH starts with IP version 6; its next header 0x1b is no UDP
            with pytest.raises(NotRoCE, match="protocol 27"):
                roce.parse(l3, linktype=101)
            return
        frame, l2 = l3, None
    elif linktype == 113:
        frame, l2 = _sll(etype) + l3, "sll"
    else:
        frame, l2 = _sll2(etype) + l3, "sll2"
    q = roce.parse(frame, linktype=linktype)
    ref = roce.parse(eth_frame).fields()
    fields = q.fields()
    assert q.to_bytes() == frame
    assert q.icrc_valid and q.icrc == roce.parse(eth_frame).icrc
    for key, value in ref.items():
        if key.startswith("eth") or key == "frame.len":
            continue
        assert fields[key] == value, key
    assert "eth" not in fields
    if l2:
        assert fields[f"{l2}.etype"] == etype
    assert fields["frame.len"] == len(frame)
    assert q.headers["bth"]["opcode"] == 0x0B  # rebuild from the values: same bytes
    assert q.to_bytes() == frame
    with pytest.raises(DecodeError):
        roce.parse(frame[:len(frame) - len(l3) + 10], linktype=linktype)


def _pattern(f, ones: bool):
    if f.kind == "bool":
        return True
    return f.mask if ones else int("a5" * ((f.bits + 7) // 8), 16) & f.mask



@pytest.mark.parametrize("ones", [False, True], ids=["a5-pattern", "all-ones"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("code", list(CODES), ids=lambda c: f"0x{c:02x}")
def test_round_trip_every_opcode_extreme_values(code, variant, ones):
    """Deterministic: every field of BTH and of every extended header at a wide pattern."""
    op = OPCODES[code]
    values = {f"bth.{n}": _pattern(LAYOUTS["bth"].field(n), ones) for n in BTH_FIELDS}
    for h in op.headers:
        for f in LAYOUTS[h].fields:
            values[f"{h}.{f.name}"] = _pattern(f, ones)
    payload = bytes(op.payload_len) if op.payload_len else (b"\xa5" * 5 if op.payload else b"")
    frame = make(op, payload, variant_kwargs(variant, 4095 if ones else 0xA5), values).to_bytes()
    q = roce.parse(frame)
    hdrs = q.headers  # decoded values; the frame is rebuilt from them below
    for key, value in values.items():
        h, _, k = key.partition(".")
        assert hdrs[h][k] == value, key
    assert q.to_bytes() == frame
    assert q.icrc_valid


# -- known bugs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0x16, 0x17, 0xB6, 0xB7])
def test_ieth_fields_and_craft(code):
    p = roce.craft(code, b"xy", dqpn=0x42, ieth=0x12345678)
    frame = p.to_bytes()
    w = roce.locate.walk(frame)
    assert frame[w.payload_off - 4:w.payload_off] == bytes.fromhex("12345678")
    assert roce.parse(frame).fields()["ieth"] == 0x12345678


def test_qinq_frame_rebuilds_after_edit():
    one = simple_frame(0x04, "vlan")
    inner = ENCODERS["vlan"]({"priority": 1, "dei": 0, "id": 7, "etype": 0x0800})
    frame = one[:16] + b"\x81\x00" + inner + one[18:]  # outer tag says: another tag follows
    q = roce.parse(frame)
    assert q.walk.vlans == 2 and q.to_bytes() == frame
    bth = q.walk.bth_off
    q.headers["bth"]["psn"] = 78
    assert q.to_bytes()[bth + 9:bth + 12] == (78).to_bytes(3, "big")


def test_explicit_zero_udp_source_port_is_kept():
    for variant in ("ipv4", "ipv6"):
        frame = roce.craft(0x04, b"x", sport=0, **variant_kwargs(variant)).to_bytes()
        assert roce.parse(frame).fields()["udp.srcport"] == 0


def test_explicit_zero_ihl_is_kept():
    frame = roce.craft(0x04, b"x", **{"ip.ihl": 0}).to_bytes()
    assert frame[14] == 0x40


@pytest.mark.parametrize(("key", "value", "error"), [
    ("eth.src", True, TypeError), ("ip.src", "fe80::1", TypeError), ("ip.ttl", True, TypeError),
    ("ip.ttl", "10.0.0.1", TypeError), ("ip.ttl", 256, ValueError), ("bth.psn", -1, ValueError),
    ("grh.sgid", "10.0.0.1", TypeError), ("eth.dst", b"\x01" * 5, ValueError),
    ("icrc", 1 << 32, ValueError), ("icrc", True, TypeError), ("pad", 3, TypeError),
])
def test_craft_checks_each_value_against_its_field(key, value, error):
    """``craft`` refuses at once, naming the field, a value its field cannot hold: the wrong
    kind (a flag or an address for a number, an address of another family) or out of
    range."""
    kw = {"roce_version": 1} if key.startswith("grh") else {}
    with pytest.raises(error, match=key.split(".")[0]):
        roce.craft("RC_SEND_ONLY", **kw, **{key: value})
    ok = roce.craft("RC_SEND_ONLY", **{"eth.src": 0x020000000009, "bth.se": 1,
                                       "ip.flags.df": False})
    assert roce.parse(ok.to_bytes()).fields()["eth.src"] == "02:00:00:00:00:09"


def test_an_edited_value_the_encoder_cannot_read_is_a_value_error():
    # values no valid packet had before (the encoders remember recent values: one equal to
    # a good one, such as True for 1, would be answered from there)
    for header, field, value in (("eth", "src", object()), ("ip", "src", "fe80::1"),
                                 ("ip", "ttl", "10.0.0.1"), ("ip", "ttl", 256),
                                 ("bth", "psn", -1)):
        p = roce.craft("RC_SEND_ONLY")
        p.headers[header][field] = value
        with pytest.raises(ValueError, match=f"{header}.{field}"):
            p.to_bytes()
