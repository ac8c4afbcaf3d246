"""Header layouts (roce.headers): Construct definitions, the compiled codec, AETH helpers."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import headers as H
from roce.headers import DECODERS, ENCODERS, HEADERS, LAYOUTS, SIZE_OF

NAMES = sorted(HEADERS)

SPEC_SIZES = {"bth": 12, "reth": 16, "aeth": 4, "atomiceth": 28, "atomicacketh": 8,
                "deth": 8, "rdeth": 4, "immdt": 4, "ieth": 4, "xrceth": 4, "feth": 4,
                "cnp": 16, "grh": 40, "eth": 14, "vlan": 4, "ip": 20, "ipv6": 40, "udp": 8,
                "sll": 16, "sll2": 20}


def field_values(name: str) -> st.SearchStrategy[dict]:
    """A dict with every field of header ``name``, each drawn within its width."""
    parts = {}
    for f in LAYOUTS[name].fields:
        if f.kind == "bool":
            parts[f.name] = st.booleans()
        elif f.kind == "addr":
            ints = st.integers(0, f.mask) | st.sampled_from([0, f.mask, 1, f.mask - 1])
            parts[f.name] = ints.map(f.decode)
        else:
            parts[f.name] = st.integers(0, f.mask) | st.sampled_from([0, f.mask])
    return st.fixed_dictionaries(parts)


def public(container) -> dict:
    return {k: v for k, v in dict(container).items() if not k.startswith("_")}


def test_every_header_has_a_layout_codec_and_size():
    assert set(HEADERS) == set(LAYOUTS) == set(DECODERS) == set(ENCODERS) == set(SIZE_OF)
    assert set(SPEC_SIZES) == set(HEADERS)


@pytest.mark.parametrize("name", NAMES)
def test_sizes(name):
    assert SIZE_OF[name] == SPEC_SIZES[name]
    assert HEADERS[name].sizeof() == SPEC_SIZES[name]
    assert LAYOUTS[name].size == SPEC_SIZES[name]
    assert sum(f.bits for f in LAYOUTS[name].fields) == 8 * SPEC_SIZES[name]


@pytest.mark.parametrize("name", NAMES)
def test_layout_matches_construct_field_order(name):
    con_names = [sub.name for sub in HEADERS[name].subcon.subcons]
    lay = LAYOUTS[name]
    assert [f.name for f in lay.fields] == con_names
    pos = 0
    for f in lay.fields:
        assert f.bit_offset == pos
        assert f.shift == 8 * lay.size - pos - f.bits
        assert f.mask == (1 << f.bits) - 1
        assert lay.field(f.name) is f
        pos += f.bits
    with pytest.raises(KeyError, match="no field"):
        lay.field("nonexistent")


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_construct_round_trip_and_codec_agree(name, data):
    values = data.draw(field_values(name))
    con = HEADERS[name]
    raw = con.build(values)
    assert len(raw) == SIZE_OF[name]
    assert public(con.parse(raw)) == values
    # compiled codec == Construct, both ways
    assert ENCODERS[name](values) == raw
    assert DECODERS[name](raw) == values
    assert DECODERS[name](raw, 0) == values
    prefix = data.draw(st.binary(max_size=7))
    assert DECODERS[name](prefix + raw + b"\xaa", len(prefix)) == values
    assert H.encode(name, values) == raw and H.decode(name, raw) == values


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_codec_agrees_with_construct_on_any_bytes(name, data):
    raw = data.draw(st.binary(min_size=SIZE_OF[name], max_size=SIZE_OF[name]))
    parsed = public(HEADERS[name].parse(raw))
    assert DECODERS[name](raw) == parsed
    assert ENCODERS[name](parsed) == raw
    assert HEADERS[name].build(parsed) == raw


def test_known_bth_bytes():
    raw = bytes.fromhex("0b e5 8001 c0 abcdef 80 123456".replace(" ", ""))
    d = DECODERS["bth"](raw)
    assert d == {"opcode": 0x0B, "se": True, "m": True, "padcnt": 2, "tver": 5,
                 "p_key": 0x8001, "fecn": True, "becn": True, "reserved": 0,
                 "destqp": 0xABCDEF, "a": True, "reserved7": 0, "psn": 0x123456}
    assert ENCODERS["bth"](d) == raw


def test_known_address_forms():
    eth = DECODERS["eth"](bytes.fromhex("02000000000a" "0c0d0e0f1011" "0800"))
    assert eth == {"dst": "02:00:00:00:00:0a", "src": "0c:0d:0e:0f:10:11", "type": 0x0800}
    ip6 = {"version": 6, "tclass": 0, "flow": 0, "plen": 0, "nxt": 17, "hlim": 64,
           "src": "fd00::1", "dst": "::"}
    raw = ENCODERS["ipv6"](ip6)
    assert raw[8:24] == bytes.fromhex("fd000000000000000000000000000001")
    assert DECODERS["ipv6"](raw) == ip6
    # addresses may be given as integers or raw bytes too
    as_int = dict(ip6, src=int.from_bytes(raw[8:24], "big"))
    as_bytes = dict(ip6, src=raw[8:24])
    assert ENCODERS["ipv6"](as_int) == raw == ENCODERS["ipv6"](as_bytes)


def test_encoder_missing_fields_are_zero():
    assert ENCODERS["bth"]({}) == bytes(12)
    assert ENCODERS["bth"]({"psn": 5, "opcode": None}) == bytes(11) + b"\x05"
    assert ENCODERS["reth"]({"dmalen": 1}) == bytes(15) + b"\x01"


def test_encoder_sees_edits_to_the_same_dict():
    d = DECODERS["bth"](bytes(12))
    first = ENCODERS["bth"](d)
    d["psn"] = 0x010203
    assert ENCODERS["bth"](d)[9:] == b"\x01\x02\x03"
    d["psn"] = 0
    assert ENCODERS["bth"](d) == first
    d["se"] = 1  # an int for a flag
    assert ENCODERS["bth"](d)[1] == 0x80
    d["se"] = True
    assert ENCODERS["bth"](d)[1] == 0x80


def _out_of_range_cases():
    for name in NAMES:
        for f in LAYOUTS[name].fields:
            if f.kind != "addr":
                yield pytest.param(name, f.name, f.mask + 1, id=f"{name}.{f.name}+1")
                yield pytest.param(name, f.name, -1, id=f"{name}.{f.name}-neg")


@pytest.mark.parametrize("name,field,value", list(_out_of_range_cases()))
def test_encoder_rejects_out_of_range_naming_the_field(name, field, value):
    values = DECODERS[name](bytes(SIZE_OF[name]))
    values[field] = value
    with pytest.raises(ValueError) as exc:
        ENCODERS[name](values)
    assert f"{name}.{field}" in str(exc.value)
    bits = LAYOUTS[name].field(field).bits
    if value > 0:
        assert f"{bits} bits" in str(exc.value)



@pytest.mark.parametrize("name,field,bad", [
    ("ip", "src", "10.0.0.300"),
    ("ip", "dst", "not an address"),
    ("ipv6", "src", "fd00:::1"),
    ("grh", "dgid", "1.2.3.4"),
    ("eth", "dst", "zz:00:00:00:00:00"),
    ("eth", "src", "01:02:03:04:05:06:07"),  # parses, but 56 bits: the range check names it
])
def test_encoder_rejects_bad_addresses_naming_the_field(name, field, bad):
    values = DECODERS[name](bytes(SIZE_OF[name]))
    values[field] = bad
    with pytest.raises(ValueError) as exc:
        ENCODERS[name](values)
    assert f"{name}.{field}" in str(exc.value)


# -- AETH helpers ----------------------------------------------------------------------------

SPEC_CREDITS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
                  768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768]
SPEC_RNR_MS = ["655.36", "0.01", "0.02", "0.03", "0.04", "0.06", "0.08", "0.12", "0.16",
                 "0.24", "0.32", "0.48", "0.64", "0.96", "1.28", "1.92", "2.56", "3.84",
                 "5.12", "7.68", "10.24", "15.36", "20.48", "30.72", "40.96", "61.44", "81.92",
                 "122.88", "163.84", "245.76", "327.68", "491.52"]


def test_credit_count_table():
    assert len(SPEC_CREDITS) == 31
    assert [H.credit_count(c) for c in range(31)] == SPEC_CREDITS
    assert H.credit_count(31) is None
    assert H.credit_count(H.CREDITS_UNLIMITED) is None


@pytest.mark.parametrize("code", range(32))
def test_rnr_timer_all_codes(code):
    ms = Decimal(SPEC_RNR_MS[code])
    assert H.rnr_timer_ns(code) == int(ms * 1_000_000)
    assert H.rnr_timer_us(code) == pytest.approx(float(ms * 1000), rel=1e-12)
    text = H.describe_syndrome(H.syndrome(H.AETH_RNR_NAK, code))
    assert text == f"RNR NAK {SPEC_RNR_MS[code]}ms"


def test_rnr_timer_order():
    times = [H.rnr_timer_ns(c) for c in range(1, 32)]
    assert times == sorted(times) and H.rnr_timer_ns(0) > times[-1]


@pytest.mark.parametrize("kind", range(4))
def test_syndrome_packing(kind):
    for value in range(32):
        syn = H.syndrome(kind, value)
        assert syn == (kind << 5) | value
        assert H.syndrome_type(syn) == kind and H.syndrome_value(syn) == value
        assert H.syndrome_type(syn | 0x80) == kind  # bit 7 is reserved


def test_syndrome_examples_and_errors():
    assert H.syndrome(H.AETH_ACK, 31) == 0x1F
    assert H.syndrome(H.AETH_RNR_NAK, 12) == 0x2C
    assert H.syndrome(H.AETH_RESERVED, 0) == 0x40
    assert H.syndrome(H.AETH_NAK, H.NAK_REMOTE_ACCESS_ERROR) == 0x62
    for kind, value in ((4, 0), (-1, 0), (0, 32), (0, -1)):
        with pytest.raises(ValueError, match="out of range"):
            H.syndrome(kind, value)


@pytest.mark.parametrize("syn,text", [
    (0x1F, "ACK credits=unlimited"),
    (0x00, "ACK credits=0"),
    (0x05, "ACK credits=5"),  # the 5-bit credit code, as Wireshark shows it
    (0x20, "RNR NAK 655.36ms"),
    (0x21, "RNR NAK 0.01ms"),
    (0x2C, "RNR NAK 0.64ms"),
    (0x3F, "RNR NAK 491.52ms"),
    (0x60, "NAK PSN-sequence-error"),
    (0x61, "NAK invalid-request"),
    (0x62, "NAK remote-access-error"),
    (0x63, "NAK remote-operational-error"),
    (0x64, "NAK invalid-RD-request"),
    (0x65, "NAK reserved-NAK-code-5"),
    (0x40, "Reserved syndrome 0x40"),
    (0x5F, "Reserved syndrome 0x5f"),
])
def test_describe_syndrome(syn, text):
    assert H.describe_syndrome(syn) == text


def test_nak_names():
    assert H.nak_name(0) == "PSN sequence error"
    assert H.nak_name(4) == "invalid RD request"
    assert H.nak_name(9) == "reserved NAK code 9"
    assert H.SYNDROME_TYPES == {0: "ACK", 1: "RNR NAK", 2: "Reserved", 3: "NAK"}
