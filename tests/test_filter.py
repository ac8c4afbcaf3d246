"""Tests for the Wireshark-style display filter in roce.decoder.filter."""

from __future__ import annotations

import enum
import ipaddress
import operator
import pickle
from collections.abc import Callable, Iterator, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from roce.decoder.filter import FilterError, compile_filter

PKT: dict[str, object] = {
    "eth.src": "02:00:00:00:00:01",
    "eth.dst": "AA:BB:CC:DD:EE:FF",
    "ip.src": "10.0.0.1",
    "ip.dst": "10.0.0.9",
    "ip.dsfield.ecn": 3,
    "udp.dstport": 4791,
    "bth.opcode": 10,
    "bth.destqp": 0x11,
    "bth.psn": 100,
    "bth.a": True,
    "bth.se": False,
    "reth.va": 4096,
    "reth.r_key": 0x22,
    "reth.dmalen": 1024,
    "aeth.syndrome": 0,
    "icrc": 0x12345678,
    "icrc.valid": True,
    "frame.number": 5,
    "frame.len": 1100,
    "roce": True,
    "malformed": "reason text",
    "payload": b"\x01\x02\x03hello",
    "delta": -5,
}

OPCODE_NAMES = {"RC Send Only": 4, "RC RDMA Write Only": 10, "RC Acknowledge": 17, "RC_ACK": 17}


def resolve(field: str, text: str) -> object:
    if field != "bth.opcode":
        return None
    return OPCODE_NAMES[text]


def match(expr: str, pkt: Mapping[str, object] = PKT, **kwargs: object) -> bool:
    return compile_filter(expr, **kwargs)(pkt)  # type: ignore[arg-type]


def error_of(expr: str, **kwargs: object) -> FilterError:
    with pytest.raises(FilterError) as info:
        compile_filter(expr, **kwargs)  # type: ignore[arg-type]
    return info.value


# ------------------------------------------------------------------ comparison operators


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("bth.psn == 100", True),
        ("bth.psn == 101", False),
        ("bth.psn != 100", False),
        ("bth.psn != 101", True),
        ("bth.psn < 101", True),
        ("bth.psn < 100", False),
        ("bth.psn <= 100", True),
        ("bth.psn <= 99", False),
        ("bth.psn > 99", True),
        ("bth.psn > 100", False),
        ("bth.psn >= 100", True),
        ("bth.psn >= 101", False),
        ("bth.psn eq 100", True),
        ("bth.psn ne 100", False),
        ("bth.psn lt 101", True),
        ("bth.psn le 99", False),
        ("bth.psn gt 99", True),
        ("bth.psn ge 101", False),
        ("bth.psn EQ 100", True),
        ("bth.psn any_eq 100", True),
        ("bth.psn all_ne 100", False),
        ("bth.psn all_eq 100", True),
        ("bth.psn any_ne 100", False),
        ("bth.psn === 100", True),
        ("bth.psn !== 100", False),
        ("bth.psn ~= 7", True),
        ("bth.psn==100", True),
        ("bth.psn>=100&&bth.psn<=100", True),
    ],
)
def test_comparison_operators(expr: str, expected: bool) -> None:
    assert match(expr) is expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("bth.destqp == 0x11", True),
        ("bth.destqp == 0X11", True),
        ("bth.destqp == 17", True),
        ("bth.destqp == 0b10001", True),
        ("bth.destqp == 017", True),  # decimal, not octal
        ("icrc == 0x12345678", True),
        ("icrc == 0xDEADBEEF", False),
        ("delta == -5", True),
        ("delta > -6", True),
        ("delta < -0x4", True),
        ("delta >= 0", False),
        ("frame.len == 1100.0", True),
        ("frame.len > 1099.5", True),
    ],
)
def test_numbers(expr: str, expected: bool) -> None:
    assert match(expr) is expected


def test_float_field_values() -> None:
    assert match("t > 1", {"t": 1.5})
    assert match("t == 1.5", {"t": 1.5})
    assert not match("t < 1", {"t": 1.5})


def test_int_enum_values_compare_as_ints() -> None:
    class Op(enum.IntEnum):
        ACK = 17

    assert match("bth.opcode == 17", {"bth.opcode": Op.ACK})
    assert match("bth.opcode in {16 17}", {"bth.opcode": Op.ACK})
    assert match("bth.opcode > 0x10", {"bth.opcode": Op.ACK})


# ------------------------------------------------------------------------------ booleans


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("bth.a == 1", True),
        ("bth.a == true", True),
        ("bth.a == TRUE", True),
        ("bth.a == 0", False),
        ("bth.a == false", False),
        ("bth.a != false", True),
        ("bth.se == 0", True),
        ("bth.se == false", True),
        ("bth.se != 0", False),
        ("bth.a == 2", False),
        ("bth.a > 0", True),
        ("bth.a in {1}", True),
        ("bth.se in {true}", False),
        ("frame.number == true", False),  # an int is not a bool
        ("bth.a", True),  # presence, not truth ...
        ("bth.se", True),  # ... so a False flag is still present
    ],
)
def test_bools(expr: str, expected: bool) -> None:
    assert match(expr) is expected


# -------------------------------------------------------------- logic and precedence


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # "and" binds tighter than "or"
        ("roce or nothing and nothing", True),
        ("nothing and nothing or roce", True),
        ("(roce or nothing) and nothing", False),
        ("roce || nothing && nothing", True),
        ("(roce || nothing) && nothing", False),
        # "not" binds tighter than "and"
        ("not nothing and roce", True),
        ("not roce and nothing", False),
        ("not (roce and nothing)", True),
        ("!roce", False),
        ("!nothing", True),
        ("! ! roce", True),
        ("not not not roce", False),
        ("!(bth.psn == 100)", False),
        ("!(bth.psn == 100 or nothing)", False),
        ("((((roce))))", True),
        ("bth.psn == 100 and bth.opcode == 10 and reth.va == 4096", True),
        ("bth.psn == 1 or bth.psn == 2 or bth.psn == 100", True),
        ("bth.psn == 1 or bth.psn == 2 or bth.psn == 3", False),
        ("roce and roce and roce and nothing", False),
        ("ROCE AND NOT nothing", False),  # keywords are case-insensitive, fields are not
        ("roce AND NOT nothing", True),
    ],
)
def test_logic(expr: str, expected: bool) -> None:
    assert match(expr) is expected


# ---------------------------------------------------------------------------- presence


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("reth", True),
        ("reth.va", True),
        ("reth.vaa", False),
        ("ret", False),  # a prefix only counts at a dot boundary
        ("aeth", True),
        ("rdeth", False),
        ("bth", True),
        ("ip.dsfield", True),
        ("malformed", True),
        ("_private", False),
        ("frame-x", False),
    ],
)
def test_presence(expr: str, expected: bool) -> None:
    assert match(expr) is expected


def test_none_value_counts_as_absent() -> None:
    pkt = {"reth.va": None}
    assert not match("reth.va", pkt)
    assert not match("reth", pkt)
    assert not match("reth.va == 0", pkt)
    assert not match("reth.va != 0", pkt)


# --------------------------------------------------------------- missing / list values


@pytest.mark.parametrize(
    "expr",
    [
        "deth.qkey == 5",
        "deth.qkey != 5",
        "deth.qkey < 5",
        "deth.qkey >= 5",
        "deth.qkey === 5",
        "deth.qkey ~= 5",
        'deth.qkey contains "a"',
        "deth.qkey in {5}",
        "deth.qkey not in {5}",
        "deth.qkey == 10.0.0.1",
        "deth.qkey == 10.0.0.0/8",
    ],
)
def test_missing_field_makes_comparisons_false(expr: str) -> None:
    assert match(expr) is False
    assert match(f"not {expr}") is True


def test_type_mismatch_is_false_for_every_operator() -> None:
    for op in ("==", "!=", "<", ">", "~="):
        assert not match(f"bth.psn {op} 10.0.0.1")
        assert not match(f"ip.src {op} 5")
        assert not match(f"bth.psn {op} aa:bb:cc:dd:ee:ff")


LIST_PKT: dict[str, object] = {
    "ip.addr": ["10.0.0.1", "10.0.0.2"],
    "n": [1, 2, 3],
    "tags": ("alpha", "beta"),
    "empty": [],
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("ip.addr == 10.0.0.2", True),
        ("ip.addr == 10.0.0.3", False),
        ("ip.addr != 10.0.0.1", False),  # all_ne, as in Wireshark
        ("ip.addr != 10.0.0.3", True),
        ("ip.addr ~= 10.0.0.1", True),  # any_ne
        ("ip.addr === 10.0.0.1", False),  # all_eq
        ("ip.addr === 10.0.0.0/24", True),
        ("ip.addr > 10.0.0.1", True),
        ("n > 2", True),
        ("n > 3", False),
        ("n < 2", True),
        ("n in {3 4}", True),
        ("n in {4 5}", False),
        ("n not in {4 5}", True),
        ("n not in {3}", False),
        ("n in {2..2}", True),
        ('tags contains "et"', True),
        ('tags == "alpha"', True),
        ("empty", True),
        ("empty == 1", False),
        ("empty != 1", False),
        ("empty not in {1}", False),
    ],
)
def test_list_valued_fields(expr: str, expected: bool) -> None:
    assert match(expr, LIST_PKT) is expected


# ------------------------------------------------------------------------------- strings


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('malformed == "reason text"', True),
        ('malformed == "reason"', False),
        ('malformed != "reason"', True),
        ('malformed contains "son te"', True),
        ('malformed contains "xyz"', False),
        ("malformed contains reason", True),  # unquoted names are strings too
        ('malformed > "aaa"', True),
        ('malformed < "aaa"', False),
        ('q == "a\\"b"', True),
        ('q contains "\\""', True),
        ('nl == "x\\ny\\t\\\\"', True),
        ('nl == "\\x78\\012y\\u0009\\\\"', True),
        ('bth.psn == "100"', False),  # int field vs string without resolve
        ('bth.psn contains "1"', False),
        ('payload contains "hello"', True),
        ("payload contains 02:03", True),
        ("payload contains 02:04", False),
    ],
)
def test_strings(expr: str, expected: bool) -> None:
    pkt = dict(PKT, q='a"b', nl="x\ny\t\\")
    assert match(expr, pkt) is expected


# ---------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("ip.src == 10.0.0.1", True),
        ('ip.src == "10.0.0.1"', True),
        ("ip.src == 10.0.0.2", False),
        ("ip.src != 10.0.0.2", True),
        ("ip.dst > 10.0.0.5", True),
        ("ip.dst < 10.0.0.10", True),  # as addresses, not text ("10.0.0.9" > "10.0.0.10")
        ("ip.src >= 10.0.0.1", True),
        ("ip.src == 10.0.0.0/24", True),
        ("ip.src == 10.0.1.0/24", False),
        ("ip.src != 10.0.1.0/24", True),
        ("ip.src != 10.0.0.0/24", False),
        ("ip.src eq 10.0.0.7/8", True),  # host bits are ignored
        ("ip.src in {10.0.0.0/30 192.168.0.1}", True),
        ("ip.src in {10.0.0.0..10.0.0.5}", True),
        ("ip.dst in {10.0.0.0..10.0.0.5}", False),
        ("ip.src == fe80::1", False),
        ("ip.src != fe80::1", False),  # v4 vs v6 is a mismatch, not "different"
    ],
)
def test_ipv4(expr: str, expected: bool) -> None:
    assert match(expr) is expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("ipv6.src == fe80::1", True),
        ("ipv6.src == FE80:0:0:0:0:0:0:1", True),
        ("ipv6.src == fe80::2", False),
        ("ipv6.src < fe80::2", True),
        ("ipv6.src == fe80::/10", True),
        ("ipv6.src == 2001:db8::/32", False),
        ("ipv6.src != 2001:db8::/32", True),
        ('ipv6.src == "fe80::0:1"', True),
        ("ipv6.dst == ::1", True),
        ("ipv6.src == 10.0.0.1", False),
    ],
)
def test_ipv6(expr: str, expected: bool) -> None:
    pkt = {"ipv6.src": "fe80:0::1", "ipv6.dst": "::1"}
    assert match(expr, pkt) is expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("eth.src == 02:00:00:00:00:01", True),
        ("eth.src == 02-00-00-00-00-01", True),
        ('eth.src == "02:00:00:00:00:01"', True),
        ("eth.dst == aa:bb:cc:dd:ee:ff", True),  # value is upper case
        ("eth.dst == AA:bb:CC:dd:EE:ff", True),
        ("eth.dst != aa:bb:cc:dd:ee:ff", False),
        ("eth.dst == aa:bb:cc:dd:ee:fe", False),
        ("eth.dst > aa:bb:cc:dd:ee:fe", True),
        ("eth.src in {02:00:00:00:00:01 02:00:00:00:00:02}", True),
        ("eth.src == 10.0.0.1", False),
    ],
)
def test_mac(expr: str, expected: bool) -> None:
    assert match(expr) is expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("raw == 01:02:03", True),
        ("raw == 1:2:3", True),
        ("raw == 01-02-03", True),
        ("raw == 01:02", False),
        ("raw > 01:02", True),
        ("raw contains 02:03", True),
        ("mac == aa:bb:cc:dd:ee:ff", True),
        ("mac == AA:BB:CC:DD:EE:FF", True),
        ("v4 == 10.0.0.1", True),
        ("v4 == 10.0.0.2", False),
        ("v6 == fe80::1", True),
        ("gid == 1:2:3:4:5:6:7:8", True),  # read as bytes for a bytes field ...
        ("gid_str == 1:2:3:4:5:6:7:8", True),  # ... and as IPv6 for a str field
        ('raw == "\\x01\\x02\\x03"', True),
        ("mv == 01:02:03", True),
        ("ba == 01:02:03", True),
    ],
)
def test_bytes(expr: str, expected: bool) -> None:
    pkt = {
        "raw": b"\x01\x02\x03",
        "mv": memoryview(b"\x01\x02\x03"),
        "ba": bytearray(b"\x01\x02\x03"),
        "mac": bytes.fromhex("aabbccddeeff"),
        "v4": ipaddress.IPv4Address("10.0.0.1").packed,
        "v6": ipaddress.IPv6Address("fe80::1").packed,
        "gid": bytes([1, 2, 3, 4, 5, 6, 7, 8]),
        "gid_str": "1:2:3:4:5:6:7:0008",
    }
    assert match(expr, pkt) is expected


def test_address_objects_as_values() -> None:
    pkt = {"ip.src": ipaddress.IPv4Address("10.0.0.1")}
    assert match("ip.src == 10.0.0.1", pkt)
    assert match("ip.src == 10.0.0.0/24", pkt)
    assert match("ip.src < 10.0.0.2", pkt)
    assert not match("ip.src == fe80::1", pkt)


# ---------------------------------------------------------------------------- sets


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("bth.opcode in {1 2 10}", True),
        ("bth.opcode in {1, 2, 10}", True),
        ("bth.opcode in {1,2,0xa}", True),
        ("bth.opcode in {1 2 3}", False),
        ("bth.opcode in {0..9}", False),
        ("bth.opcode in {0..10}", True),
        ("bth.opcode in {10..20}", True),
        ("bth.opcode in {0x8..0xc 100}", True),
        ("bth.opcode in {1 5..7 20..30}", False),
        ("bth.opcode not in {1 2 3}", True),
        ("bth.opcode not in {1 2 10}", False),
        ("bth.opcode not in {5..15}", False),
        ("not bth.opcode in {1 2 10}", False),
        ('malformed in {"x" "reason text"}', True),
        ('malformed in {"a".."s"}', True),
        ('malformed in {"s".."z"}', False),
        ("bth.a in {0 1}", True),
        ("frame.len in {1100.0}", True),
    ],
)
def test_sets(expr: str, expected: bool) -> None:
    assert match(expr) is expected


# ---------------------------------------------------------------------------- resolve


def test_resolve_is_called_at_compile_time_only() -> None:
    calls: list[tuple[str, str]] = []

    def recording(field: str, text: str) -> object:
        calls.append((field, text))
        return resolve(field, text)

    f = compile_filter('bth.opcode == "RC RDMA Write Only"', resolve=recording)
    assert calls == [("bth.opcode", "RC RDMA Write Only")]
    assert f(PKT)
    assert not f(dict(PKT, **{"bth.opcode": 17}))
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('bth.opcode == "RC RDMA Write Only"', True),
        ('bth.opcode != "RC RDMA Write Only"', False),
        ("bth.opcode == RC_ACK", False),  # bare names are resolved too
        ('bth.opcode < "RC Acknowledge"', True),
        ('bth.opcode in {"RC Send Only" "RC RDMA Write Only"}', True),
        ('bth.opcode in {"RC Send Only".."RC Acknowledge"}', True),
        ('bth.opcode in {"RC Acknowledge" 11..16}', False),
        ("bth.opcode == 10", True),  # numbers are not passed to resolve
        ('malformed == "reason text"', True),  # resolve() returned None: plain string
        ('malformed contains "text"', True),
    ],
)
def test_resolve(expr: str, expected: bool) -> None:
    assert match(expr, resolve=resolve) is expected


def test_without_resolve_int_never_equals_string() -> None:
    assert not match('bth.opcode == "RC RDMA Write Only"')
    assert not match('bth.opcode != "RC RDMA Write Only"')


@pytest.mark.parametrize(
    ("expr", "position"),
    [
        ('bth.opcode == "RC Bogus"', 14),
        ("bth.opcode == bogus", 14),
        ('bth.opcode in {4 "nope"}', 17),
        ('bth.opcode in {4.."nope"}', 18),
    ],
)
def test_resolve_failure_is_a_filter_error(expr: str, position: int) -> None:
    err = error_of(expr, resolve=resolve)
    assert err.position == position
    assert "bth.opcode" in err.message


def test_resolve_value_error_and_bad_return() -> None:
    def strict(field: str, text: str) -> object:
        raise ValueError("no such opcode")

    err = error_of('bth.opcode == "x"', resolve=strict)
    assert err.position == 14
    assert "no such opcode" in str(err)
    err = error_of('bth.opcode == "x"', resolve=lambda f, t: "seventeen")
    assert err.position == 14
    assert "not an integer" in err.message


def test_resolve_not_called_for_contains() -> None:
    def explode(field: str, text: str) -> object:
        raise AssertionError("must not be called")

    assert match('malformed contains "reason"', resolve=explode)


# ---------------------------------------------------------------------------- macros

MACROS = {
    "rc.ack": "bth.opcode == 17",
    "nak": "rc.ack and aeth.syndrome >= 0x60",
    "write": "bth.opcode == 10 or bth.opcode == 11",
    "big": "frame.len > 1000",
    "loop": "loop",
    "ping": "roce and pong",
    "pong": "not ping",
    "broken": "bth.psn == ",
    "unknown_inside": "reth.vaa == 1",
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("write", True),
        ("rc.ack", False),
        ("not rc.ack", True),
        ("write and big", True),
        # the macro is parenthesised: "write and nothing" must not become
        # "bth.opcode == 10 or bth.opcode == 11 and nothing"
        ("write and nothing", False),
        ("nothing or write", True),
        ("!write", False),
        ("(write)", True),
    ],
)
def test_macros(expr: str, expected: bool) -> None:
    assert match(expr, macros=MACROS) is expected


def test_nested_macros() -> None:
    f = compile_filter("nak", macros=MACROS)
    assert f({"bth.opcode": 17, "aeth.syndrome": 0x61})
    assert not f({"bth.opcode": 17, "aeth.syndrome": 0})
    assert not f({"bth.opcode": 10, "aeth.syndrome": 0x61})


@pytest.mark.parametrize(
    ("expr", "position", "fragment"),
    [
        ("loop", 0, "recursive macro: loop -> loop"),
        ("roce and ping", 9, "recursive macro: ping -> pong -> ping"),
        ("bth.psn == 1 or broken", 16, "in macro 'broken': expected a value"),
    ],
)
def test_macro_errors(expr: str, position: int, fragment: str) -> None:
    err = error_of(expr, macros=MACROS)
    assert err.position == position
    assert fragment in err.message
    assert err.expr == expr


def test_macro_cannot_be_compared() -> None:
    err = error_of("x and write == 1", macros=MACROS)
    assert err.position == 6


def test_macro_body_is_checked_against_known_fields() -> None:
    err = error_of("unknown_inside", macros=MACROS, known_fields={"reth.va"})
    assert err.position == 0
    assert "unknown field 'reth.vaa'" in err.message


def test_macro_wins_over_field_name_for_bare_tests() -> None:
    assert match("big", {"big": 1, "frame.len": 5}, macros=MACROS) is False


# ------------------------------------------------------------------------ known_fields

KNOWN = frozenset({"bth.opcode", "bth.psn", "reth.va", "aeth.syndrome.opcode", "frame.number"})


@pytest.mark.parametrize(
    ("expr", "on_pkt", "on_other"),
    [
        ("bth.psn == 100", True, False),
        ("reth", True, False),  # a protocol: a dotted prefix of a known field
        ("bth", True, False),
        ("aeth.syndrome", True, True),  # known as a prefix of aeth.syndrome.opcode
        ("aeth.syndrome.opcode > 1", False, True),
        ("write", True, False),  # a macro, its body checked against the known fields
    ],
)
def test_known_fields_accepts(expr: str, on_pkt: bool, on_other: bool) -> None:
    other = {"aeth.syndrome.opcode": 3}
    f = compile_filter(expr, known_fields=KNOWN, macros=MACROS)
    assert (f(PKT), f(other)) == (on_pkt, on_other)
    # knowing the fields rejects names; it never changes what an accepted filter matches
    g = compile_filter(expr, macros=MACROS)
    assert [g(p) for p in (PKT, other, {})] == [f(p) for p in (PKT, other, {})]


@pytest.mark.parametrize(
    ("expr", "position", "name"),
    [
        ("reth.vaa == 4096", 0, "reth.vaa"),
        ("bth.psn == 1 and reth.vaa", 17, "reth.vaa"),
        ("deth", 0, "deth"),
        ("bth.psn > 1 or not (frame.numbr in {1 2})", 20, "frame.numbr"),
    ],
)
def test_known_fields_rejects(expr: str, position: int, name: str) -> None:
    err = error_of(expr, known_fields=KNOWN, macros=MACROS)
    assert err.position == position
    assert err.message == f"unknown field '{name}'"


def test_known_fields_plain_container() -> None:
    class OnlyContains:
        def __contains__(self, item: object) -> bool:
            return item == "bth.psn"

    compile_filter("bth.psn == 1", known_fields=OnlyContains())
    assert error_of("bth.opcode == 1", known_fields=OnlyContains()).position == 0


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("expr", "position"),
    [
        ("", 0),
        ("   ", 0),
        ("(", 1),
        ("()", 1),
        ("(bth.psn == 1", 0),
        ("((a)", 0),
        ("a == 1 and (b", 11),
        ("bth.psn == 1)", 12),
        ("bth.psn ==", 10),
        ("bth.psn == and x", 11),
        ("bth.psn == 5x", 11),
        ("bth.psn == 0x", 11),
        ("bth.psn == 1_000", 11),
        ('bth.psn == "abc', 11),
        ('a == "x\\q"', 7),
        ('a == "\\x4"', 6),
        ("bth.psn == 5 6", 13),
        ("a b", 2),
        ("(a b)", 3),
        ("a and", 5),
        ("and a", 0),
        ("a or or b", 5),
        ("a == ==", 5),
        ("5 == a", 0),
        ("a.b. == 1", 0),
        ("a # b", 2),
        ("a = 5", 2),
        ("a ~ b", 2),
        ("a & b", 2),
        ("a in {1 2", 5),
        ("a in {}", 6),
        ("a in 1", 5),
        ("a in {1,,2}", 8),
        ("a in {1,}", 8),
        ("a in {,1}", 6),
        ("a in {1..}", 9),
        ("a in {(}", 6),
        ("a in {10.0.0.0/8..10.0.0.9}", 6),
        ('a in {1.."x"}', 6),
        ("a == 1..2", 6),
        ("a == 10.0.0.256", 5),
        ("a == 10.0.0.0/33", 5),
        ("ip.src > 10.0.0.0/24", 9),
        ("a contains", 10),
        ("a == abc:xyz", 5),
        ("a == 1 and b == 2 c", 18),
        ("a == " + "9" * 5000, 5),
    ],
)
def test_error_positions(expr: str, position: int) -> None:
    err = error_of(expr)
    assert err.position == position, str(err)
    assert err.expr == expr


def test_error_message_format() -> None:
    err = error_of("bth.psn == and x")
    assert isinstance(err, ValueError)
    assert err.position == 11
    assert str(err) == (
        'bad filter: expected a value after "==", got "and" at position 11\n'
        "  bth.psn == and x\n"
        "             ^"
    )


def test_error_caret_on_multiline_expression() -> None:
    err = error_of("roce and\n\tbth.psn == ")
    assert err.position == len("roce and\n\tbth.psn == ")
    assert str(err).splitlines()[1:] == ["  \tbth.psn == ", "  \t           ^"]


def test_filter_error_pickles() -> None:
    err = error_of("a ==")
    again = pickle.loads(pickle.dumps(err))
    assert (again.message, again.expr, again.position) == (err.message, err.expr, err.position)
    assert str(again) == str(err)


def test_non_string_expression() -> None:
    with pytest.raises(FilterError):
        compile_filter(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "expr",
    ["(" * 1000 + "a" + ")" * 1000, "not " * 1000 + "a", "!" * 5000 + "a", "(" * 5000],
)
def test_deep_nesting_is_a_filter_error(expr: str) -> None:
    with pytest.raises(FilterError):
        compile_filter(expr)


def test_long_flat_chains_are_fine() -> None:
    f = compile_filter(" or ".join(f"bth.psn == {i}" for i in range(5000)))
    assert f({"bth.psn": 4999})
    assert not f({"bth.psn": 5000})
    g = compile_filter(" and ".join(["roce"] * 5000))
    assert g(PKT)


# ---------------------------------------------------------------- evaluation robustness


class ExplodingMapping(Mapping[str, object]):
    def __getitem__(self, key: str) -> object:
        raise RuntimeError("boom")

    def get(self, key: str, default: object = None) -> object:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 0


class BadEq:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("boom")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    "expr",
    ["x == 1", "x != 1", "x", 'x contains "a"', "x in {1 2..3}", "not x == 1", "x == 10.0.0.1"],
)
def test_evaluation_never_raises(expr: str) -> None:
    f = compile_filter(expr)
    odd_values: list[object] = [
        object(),
        BadEq(),
        {"a": 1},
        [[1]],
        [None, 1],
        float("nan"),
        memoryview(b"ab"),
        "x" * 10000,
        10**100,
    ]
    for value in odd_values:
        assert f({"x": value}) in (True, False)
    assert f(ExplodingMapping()) is False
    assert f({1: 2, None: 3}) in (True, False)  # type: ignore[dict-item]


# ---------------------------------------------------------------------- property tests

FIELDS = ["bth.psn", "bth.opcode", "reth.va", "ip.src", "eth.src", "payload", "bth.a", "x"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.ip_addresses().map(str)
    | st.sampled_from(["02:00:00:00:00:01", "fe80::1", "10.0.0.1"])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
packets = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=10), values, max_size=8)

PIECES = [
    *FIELDS,
    "reth",
    "(",
    ")",
    "{",
    "}",
    ",",
    "..",
    "==",
    "!=",
    "<",
    ">=",
    "===",
    "~=",
    "eq",
    "contains",
    "in",
    "not",
    "and",
    "or",
    "!",
    "&&",
    "||",
    "1",
    "0x10",
    "-3",
    "true",
    '"RC Acknowledge"',
    '"a\\"b"',
    "10.0.0.1",
    "10.0.0.0/24",
    "fe80::1",
    "aa:bb:cc:dd:ee:ff",
    "01:02",
    "name",
    "rc.ack",
    "loop",
]
piece_exprs = st.lists(st.sampled_from(PIECES), min_size=1, max_size=12).map(" ".join)


def _compile_or_none(expr: str, **kwargs: object) -> Callable[[Mapping[str, object]], bool] | None:
    try:
        return compile_filter(expr, **kwargs)  # type: ignore[arg-type]
    except FilterError as err:
        assert 0 <= err.position <= len(expr)
        assert err.expr == expr
        assert str(err).startswith("bad filter: ")
        return None


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=60) | piece_exprs, st.lists(packets, max_size=3), st.booleans())
def test_random_text_only_raises_filter_error(
    expr: str, pkts: list[dict[str, object]], with_options: bool
) -> None:
    kwargs: dict[str, object] = {}
    if with_options:
        kwargs = {"resolve": resolve, "macros": {"rc.ack": "bth.opcode == 17", "loop": "loop"}}
    f = _compile_or_none(expr, **kwargs)
    if f is not None:
        for pkt in pkts:
            assert f(pkt) in (True, False)


@settings(max_examples=examples(200))
@given(piece_exprs, packets)
def test_not_is_the_complement(expr: str, pkt: dict[str, object]) -> None:
    f = _compile_or_none(expr)
    if f is not None:
        g = compile_filter(f"not ({expr})")
        assert g(pkt) is (not f(pkt))


# Reference model for int fields: random well-formed expressions are generated together
# with an independent evaluator that encodes Wireshark's precedence (not > and > or).

INT_FIELDS = ["f.a", "f.b", "f.c"]
SYMBOL_OPS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
Ref = Callable[[Mapping[str, int]], bool]


@st.composite
def atoms(draw: st.DrawFn) -> tuple[str, Ref]:
    name = draw(st.sampled_from(INT_FIELDS))
    kind = draw(st.sampled_from(["cmp", "presence", "set"]))
    if kind == "presence":
        return name, lambda pkt: name in pkt
    if kind == "set":
        members = draw(st.lists(st.integers(-3, 3), min_size=1, max_size=3))
        lo = draw(st.integers(-3, 3))
        hi = draw(st.integers(-3, 3))
        text = "{" + " ".join(map(str, members)) + f" {lo}..{hi}" + "}"
        return (
            f"{name} in {text}",
            lambda pkt: name in pkt and (pkt[name] in members or lo <= pkt[name] <= hi),
        )
    op = draw(st.sampled_from(sorted(SYMBOL_OPS)))
    const = draw(st.integers(-3, 3))
    spelled = draw(st.sampled_from([str(const), hex(const)]))
    fn = SYMBOL_OPS[op]
    return f"{name} {op} {spelled}", lambda pkt: name in pkt and fn(pkt[name], const)


def terms(depth: int) -> st.SearchStrategy[tuple[str, Ref]]:
    inner = atoms()
    if depth < 2:
        inner = inner | expressions(depth + 1).map(lambda e: (f"({e[0]})", e[1]))
    return st.tuples(st.sampled_from(["", "not ", "!"]), inner).map(_prefix_not)


def _prefix_not(item: tuple[str, tuple[str, Ref]]) -> tuple[str, Ref]:
    prefix, (text, ref) = item
    if not prefix:
        return text, ref
    return prefix + text, lambda pkt: not ref(pkt)


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> tuple[str, Ref]:
    parts = draw(st.lists(terms(depth), min_size=1, max_size=4))
    joins = [draw(st.sampled_from(["and", "&&", "or", "||"])) for _ in parts[1:]]
    text = parts[0][0] + "".join(f" {j} {p[0]}" for j, p in zip(joins, parts[1:], strict=True))
    groups: list[list[Ref]] = [[parts[0][1]]]
    for join, (_, ref) in zip(joins, parts[1:], strict=True):
        if join in ("or", "||"):
            groups.append([ref])
        else:
            groups[-1].append(ref)

    def ref(pkt: Mapping[str, int]) -> bool:
        return any(all(r(pkt) for r in group) for group in groups)

    return text, ref


@settings(max_examples=examples(400))
@given(
    expressions(),
    st.dictionaries(st.sampled_from(INT_FIELDS), st.integers(-4, 4)),
)
def test_matches_reference_model(expr: tuple[str, Ref], pkt: dict[str, int]) -> None:
    text, ref = expr
    assert compile_filter(text)(pkt) is ref(pkt), text


@given(st.ip_addresses(v=4), st.ip_addresses(v=4), st.sampled_from(sorted(SYMBOL_OPS)))
def test_ipv4_ordering_matches_ipaddress(
    a: ipaddress.IPv4Address, b: ipaddress.IPv4Address, op: str
) -> None:
    assert match(f"ip.src {op} {b}", {"ip.src": str(a)}) is SYMBOL_OPS[op](a, b)  # type: ignore[arg-type]


@given(st.ip_addresses(v=4), st.ip_addresses(v=4), st.integers(0, 32))
def test_cidr_membership_matches_ipaddress(
    a: ipaddress.IPv4Address, base: ipaddress.IPv4Address, prefix: int
) -> None:
    net = ipaddress.IPv4Network(f"{base}/{prefix}", strict=False)
    assert match(f"ip.src == {base}/{prefix}", {"ip.src": str(a)}) is (a in net)
    assert match(f"ip.src != {base}/{prefix}", {"ip.src": str(a)}) is (a not in net)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_quoted_string_round_trip(s: str) -> None:
    escaped = s.replace("\\", "\\\\").replace('"', '\\"')
    f = compile_filter(f'name == "{escaped}"')
    assert f({"name": s})
    assert not f({"name": s + "x"})


# -- names: another tool's name for a field --------------------------------------------------

_NAMES = {"ws.va": ("reth.va", "atomiceth.va"), "ws.psn": ("bth.psn",)}


def _names(name: str) -> tuple[str, ...]:
    return _NAMES.get(name, (name,))


@pytest.mark.parametrize("expr,reth,atomic", [
    ("ws.va == 5", True, False), ("ws.va == 7", False, True), ("ws.va", True, True),
    ("ws.va != 5", False, True), ("ws.va in {5 7}", True, True),
    ("ws.va not in {5}", False, True), ("ws.va > 6", False, True),
    ("ws.psn == 1 and ws.va", True, True), ("not ws.va == 5", False, True),
])
def test_names_read_the_keys_they_stand_for(expr: str, reth: bool, atomic: bool) -> None:
    """A name standing for two keys (a field one header or another carries) holds if its
    test holds for the key the packet has."""
    flt = compile_filter(expr, names=_names, known_fields={"reth.va", "atomiceth.va",
                                                           "bth.psn"})
    assert flt({"bth.psn": 1, "reth.va": 5}) is reth
    assert flt({"bth.psn": 1, "atomiceth.va": 7}) is atomic


def test_names_are_checked_as_their_keys() -> None:
    from roce.decoder.filter import FieldType

    types = {"reth.va": FieldType("uint", 64), "atomiceth.va": FieldType("uint", 64)}
    with pytest.raises(FilterError, match="'ws.va'"):
        compile_filter("ws.va == 10.0.0.1", names=_names, field_types=types)
    with pytest.raises(FilterError, match="unknown field 'ws.nope'"):
        compile_filter("ws.nope", names=_names, known_fields={"reth.va"})
