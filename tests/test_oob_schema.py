"""The out-of-band protocol's schema (``roce.emu.real.messages``): every field of every message
typed and bounded, lines limited in length and depth, no NaN, peer text escaped; the option
types it shares with the command line; the runner's cross-field, memory and time checks; the
guide's table of the protocol, generated from it."""

from __future__ import annotations

import argparse
import json
import re
import select
import socket
import threading
import time
import tracemalloc
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oob_helpers import (
    RAW_BAD,
    all_fields,
    bad_values,
    field_mutation,
    line,
    message,
    replaced,
    sample,
    valid,
)
from profiles import examples

from roce import options
from roce.cli import build_parser
from roce.emu import budget
from roce.emu.core.constants import ALL_ACCESS
from roce.emu.core.qp import QPAttr, QPCap
from roce.emu.core.verbs import CQ, MR, PD, QP, Context, QPInitAttr
from roce.emu.core.work import RecvWR
from roce.emu.real import messages as schema
from roce.emu.real import oob, remote
from roce.emu.real.loop import EventLoop
from roce.emu.scenario import (
    MAX_MESSAGE,
    OPS,
    QP_TYPES,
    Scenario,
    Summary,
    Workload,
    kind,
    message_bytes,
)
from roce.errors import OOBError, PeerMessageError, UsageError

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "real-links.md"
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\ud800-\udfff]")


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a TCP connection on loopback (a Channel sets TCP options)."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    return a, b


def refused(msg: Any) -> PeerMessageError:
    with pytest.raises(PeerMessageError) as info:
        schema.check(msg)
    return info.value


# -- every field ---------------------------------------------------------------------------------


def test_every_message_has_a_valid_sample_that_round_trips() -> None:
    for mtype in schema.TYPES:
        msg = message(mtype)
        assert schema.decode(line(msg)[:-1]) == msg
        assert schema.build(mtype, **{k: v for k, v in msg.items() if k != "type"}) == msg


FIELDS = all_fields()


@pytest.mark.parametrize(("mtype", "path", "kind_"), FIELDS,
                         ids=[f"{m}.{p}" for m, p, _ in FIELDS])
def test_every_field_refuses_what_breaks_its_rule(mtype: str, path: str, kind_: Any) -> None:
    """Each bad value is refused with the message type and the field's path in the
    sentence, and nothing but printable ASCII in it."""
    base = message(mtype)
    bad = bad_values(kind_)
    assert bad
    for value, suffix in bad:
        err = refused(replaced(base, path, value))
        assert (err.message_type, err.field) == (mtype, path + suffix), (value, str(err))
        assert str(err).startswith(f'peer {mtype}: field "{path + suffix}": '), str(err)
        assert str(err).isascii() and str(err).isprintable(), str(err)


def test_integer_bounds_are_the_option_types() -> None:
    """The ends of each integer field's range are taken, one past them refused: the bounds
    are the option parsers' own."""
    checked = 0
    for mtype, path, kind_ in FIELDS:
        if not isinstance(kind_, schema.Int) or getattr(kind_.parser, "choices", None):
            continue
        lo, hi = kind_.parser.bounds
        base = message(mtype)
        for ok in (lo, hi):
            assert schema.check(replaced(base, path, ok)) is not None
        for bad in (lo - 1, hi + 1):
            assert refused(replaced(base, path, bad)).field == path
        checked += 1
    assert checked > 30


def test_the_issues_values() -> None:
    hello = message("hello")
    cases = [
        (replaced(hello, "qps", [5]), "qps[0]", "5 is not an object"),
        (replaced(hello, "scenario.mtu", 0), "scenario.mtu",
         "0 is not one of 256, 512, 1024, 2048, 4096"),
        (replaced(hello, "max_mtu", "x"), "max_mtu", '"x" is not an integer'),
        (replaced(hello, "qps[0].ip", "not.an.ip"), "qps[0].ip", "bad IP address"),
        (replaced(hello, "qps[0].psn", "x"), "qps[0].psn", '"x" is not an integer'),
        (replaced(hello, "scenario.count", 1e10), "scenario.count",
         "10000000000.0 is not an integer"),
        (replaced(hello, "scenario.count", True), "scenario.count", "true is not an integer"),
        (replaced(message("result"), "verified", "no"), "verified",
         '"no" is not true or false'),
        (replaced(message("result"), "summary", []), "summary", "[] is not an object"),
        (replaced(message("params"), "mtu", "abc"), "mtu", '"abc" is not an integer'),
        (replaced(message("params"), "qps[0].va", 1 << 70), "qps[0].va", "out of range"),
        ({"type": "params"}, "mtu", "missing"),
    ]
    for msg, path, why in cases:
        err = refused(msg)
        assert err.field == path and why in err.why, str(err)
    err = refused({**hello, "extra": 1})
    assert err.field == "" and str(err) == 'peer hello: unknown field "extra"'


def test_time_limit_infinity_and_nan_never_reach_a_field() -> None:
    text = line(message("hello")).decode().replace('"time_limit_s":1.5', '"time_limit_s":%s')
    for const in ("Infinity", "-Infinity", "NaN", "1e999"):
        with pytest.raises(PeerMessageError, match="peer message: not JSON") as info:
            schema.decode((text % const).encode().rstrip(b"\n"))
        assert info.value.message_type == "message"


@pytest.mark.parametrize("raw", RAW_BAD, ids=range(len(RAW_BAD)))
def test_lines_that_are_not_messages(raw: bytes) -> None:
    t0 = time.perf_counter()
    with pytest.raises(PeerMessageError) as info:
        schema.decode(raw.rstrip(b"\n"))
    assert time.perf_counter() - t0 < 1
    assert str(info.value).isascii() and str(info.value).isprintable()


@given(st.data())
@settings(max_examples=examples(200))
def test_fuzzed_fields_are_refused_by_name(data: st.DataObject) -> None:
    mtype = data.draw(st.sampled_from(schema.TYPES))
    msg = data.draw(valid(schema.MESSAGES[mtype][0]))
    msg = {"type": mtype, **msg}
    assert schema.decode(line(msg)[:-1])["type"] == mtype  # valid ones pass whole
    broken, path = data.draw(field_mutation(msg, mtype))
    err = refused(json.loads(line(broken)))
    assert (err.message_type, err.field) == (mtype, path), str(err)


# -- depth, length, numbers ------------------------------------------------------------------


def test_depth_is_the_schemas_and_counted_before_parsing() -> None:
    # hello: qps[{...}]; result: summary{completed{}}; and one level for a scalar sent as []
    assert schema.MAX_DEPTH == 4
    assert schema.nesting('{"a":"[[[[{{{{","b":[{"c":"\\"[["}]}') == 3
    deep = b'{"type":"error","message":"x","z":' + b"[" * 400_000 + b"]" * 400_000 + b"}"
    t0 = time.perf_counter()
    with pytest.raises(PeerMessageError, match="nested 400001 levels deep, more than the "
                       "protocol's 4"):
        schema.decode(deep)
    assert time.perf_counter() - t0 < 2
    # an unterminated string of escaped quotes costs one pass, not one per quote
    t0 = time.perf_counter()
    with pytest.raises(PeerMessageError, match="not JSON"):
        schema.decode(b'"' + b'\\"' * 400_000)
    assert time.perf_counter() - t0 < 2


def test_numbers_duplicates_and_encoding() -> None:
    done = line(message("done")).rstrip(b"\n")
    for raw, why in [
        (done.replace(b'"posted":0', b'"posted":' + b"1" * 41), "an integer of 41 digits"),
        (done.replace(b'"posted":0', b'"posted":1.0'), '"posted": 1.0 is not an integer'),
        (done.replace(b'"posted":0', b'"posted":0,"posted":1'), 'key "posted" twice'),
        (b'{"type":"error","message":"\xc3"}', "not UTF-8"),
    ]:
        with pytest.raises(PeerMessageError, match=re.escape(why)):
            schema.decode(raw)


def test_a_line_is_read_up_to_the_limit_and_no_further() -> None:
    a, b = tcp_pair()
    ch = oob.Channel(a, "peer")
    try:
        sent = threading.Thread(target=lambda: b.sendall(b"x" * (schema.MAX_LINE + 5000)))
        sent.start()
        with pytest.raises(PeerMessageError, match=f"longer than {schema.MAX_LINE} bytes"):
            ch.recv(5)
        assert len(ch._buf) <= schema.MAX_LINE + 1
        sent.join(5)
    finally:
        a.close()
        b.close()
    a, b = tcp_pair()
    ch = oob.Channel(a, "peer")
    try:  # a line of exactly MAX_LINE bytes is read (and refused for what it says)
        b.sendall(b" " * schema.MAX_LINE + b"\n")
        with pytest.raises(PeerMessageError, match="not JSON"):
            ch.recv(5)
    finally:
        a.close()
        b.close()


# -- what a peer says reaches the terminal escaped -----------------------------------------------


HOSTILE_TEXT = ("red \x1b[31m CR\r LF\n DEL\x7f CSI\x9b[2J RLO\u202e surrogate\ud800 bell\x07 "
                "nbsp\xa0")


def test_printable_escapes_every_control() -> None:
    out = schema.printable(HOSTILE_TEXT)
    assert not CONTROL.search(out) and out.isprintable()
    for esc in ("\\x1b", "\\x0d", "\\x0a", "\\x7f", "\\x9b", "\\u202e", "\\ud800", "\\x07",
                "\\xa0"):
        assert esc in out
    assert schema.printable("x" * 5000).endswith("...")


def test_a_peers_error_message_is_printed_escaped() -> None:
    a, b = tcp_pair()
    ch = oob.Channel(a, "peer")
    try:
        b.sendall(json.dumps({"type": "error", "message": HOSTILE_TEXT}).encode() + b"\n")
        with pytest.raises(OOBError) as info:
            ch.recv(5)
        text = str(info.value)
        assert text.startswith("peer peer reported: red \\x1b[31m CR\\x0d")
        assert text.isprintable() and not CONTROL.search(text)
    finally:
        a.close()
        b.close()


def test_refused_values_are_shown_escaped() -> None:
    err = refused(replaced(message("hello"), "scenario.op", HOSTILE_TEXT))
    assert str(err).isascii() and str(err).isprintable()
    err = refused(replaced(message("hello"), "qps[0].mac", "\x1b[2J"))
    assert "\\x1b" in str(err) and str(err).isprintable()
    err = refused({**message("hello"), HOSTILE_TEXT: 1})
    assert str(err).isascii() and str(err).isprintable()


# -- one definition of each field: the options, the dataclasses, the guide ---------------------


def test_scenario_fields_have_the_cli_options_types() -> None:
    """A scenario field is checked by the very parser (or choices) of the option that sets
    it: what ``roce emulate`` refuses on the command line, a listener refuses in a hello."""
    parser = build_parser("emulate")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = {a.option_strings[-1]: a for a in sub.choices["emulate"]._actions
               if a.option_strings}
    for f in schema.SCENARIO.fields:
        action = actions[f.doc.strip("`")]
        k = f.kind
        if isinstance(k, schema.Choice):
            assert tuple(action.choices) == k.values, f.name
        elif f.name == "size":  # parse_size, then Workload.check's 2^31 (IBA) bound
            assert action.type is options.parse_size
            assert k.parser.bounds == (0, MAX_MESSAGE)
        elif f.name == "mtu":
            assert tuple(action.choices) == k.parser.choices == options.PATH_MTUS
        else:
            assert action.type is k.parser, f.name


def test_schema_objects_are_the_dataclasses() -> None:
    # the hello's scenario: the workload both ends replay, and the run's time limit
    assert schema.SCENARIO.names == (*(f.name for f in fields(Workload)), "time_limit_s")
    assert tuple(remote.scenario_fields(Scenario(time_limit_ns=1))) == schema.SCENARIO.names
    assert schema.QP.names == tuple(f.name for f in fields(oob.QPInfo))
    summary = {f.name for f in fields(Summary)}
    assert set(schema.CLAIM.names) <= summary
    assert set(remote.RESPONDER_COUNTS) <= set(schema.CLAIM.names)


def test_the_guide_shows_the_schema() -> None:
    text = GUIDE.read_text()
    m = re.search(r"<!-- oob-schema -->\n(.*?)\n<!-- /oob-schema -->", text, re.S)
    assert m, "docs/guide/real-links.md lacks the <!-- oob-schema --> block"
    assert m.group(1).strip() == schema.table(), (
        "the guide's protocol table is stale; replace the block with:\n" + schema.table())


def test_build_refuses_our_own_mistakes() -> None:
    with pytest.raises(ValueError, match='our done: field "posted": missing'):
        schema.build("done", completed={}, finished=True)
    with pytest.raises(ValueError, match='our params: field "mtu": 100 is not one of'):
        schema.build("params", mtu=100, qps=[sample(schema.QP)])


# -- the runner's checks beyond single fields ----------------------------------------------------


def _hello(**scenario: Any) -> dict[str, Any]:
    msg = message("hello")
    sc = {**remote.scenario_fields(Scenario(size=64, count=4)), **scenario}
    # at most 4 QPs described: the checks of a larger scenario come first
    qps = [sample(schema.QP) | {"qp_type": sc["qp_type"]} for _ in range(min(sc["qps"], 4))]
    return schema.check({**msg, "scenario": sc, "qps": qps})


def test_hello_cross_checks_name_their_field() -> None:
    for msg, path, why in [
        (_hello(qps=2) | {"qps": [sample(schema.QP)]}, "qps", "1 QPs described for "
         "scenario.qps 2"),
        (_hello(qp_type="uc") | {"qps": [sample(schema.QP)]}, "qps[0].qp_type",
         "rc is not the scenario's uc"),
        (_hello(qp_type="ud", op="write"), "scenario.qp_type", "UD QPs cannot do write"),
        (_hello(qp_type="ud", op="send", size=4096, mtu=1024), "scenario.size",
         "a UD message is one packet"),
        (_hello(qps=1 << 40), "scenario.qps", "--qps 1099511627776"),
        (_hello(size=1 << 31, qps=4096), "scenario.qps", "would need"),
        (_hello(count=10**12), "scenario.count", "cannot complete within the time limit of "
         "120 s"),
        (_hello(count=10**9, size=1 << 20), "scenario.count", "cannot cross within"),
        (_hello(op="send", count=10**9, depth=1 << 40), "scenario.depth", "receives posted"),
    ]:
        with pytest.raises(PeerMessageError) as info:
            remote._check_hello(msg, None)
        assert (info.value.message_type, info.value.field) == ("hello", path), str(info.value)
        assert why in info.value.why, str(info.value)


def test_the_listeners_time_limit_caps_the_connectors() -> None:
    msg = _hello(time_limit_s=1e6)
    assert remote._check_hello(msg, None).time_limit_ns == 120 * 10**9
    assert remote._check_hello(msg, Scenario(time_limit_ns=7 * 10**9)).time_limit_ns == \
        7 * 10**9
    assert remote._check_hello(_hello(time_limit_s=3), None).time_limit_ns == 3 * 10**9
    # a count that fits 1000 s but not the listener's 10 s
    with pytest.raises(PeerMessageError, match="within the time limit of 10 s"):
        remote._check_hello(_hello(count=10**11, time_limit_s=1000),
                            Scenario(time_limit_ns=10 * 10**9))


def _params(sc: Scenario, **qp: Any) -> dict[str, Any]:
    info = sample(schema.QP) | {"qp_type": sc.qp_type, "size": sc.slot * sc.slots,
                                "va": 0x10000, "mtu": 1024} | qp
    return schema.check({"type": "params", "mtu": 1024, "qps": [info] * sc.qps})


def test_params_cross_checks_name_their_field() -> None:
    sc = Scenario(op="mixed", size=64, count=8, qps=2)
    assert len(remote._check_params(_params(sc), sc, 1024, "10.0.0.2")) == 2
    for msg, offered, ip, path, why in [
        (_params(sc) | {"mtu": 4096}, 1024, "10.0.0.2", "mtu", "larger than the 1024"),
        (_params(sc) | {"qps": _params(sc)["qps"][:1]}, 1024, "10.0.0.2", "qps",
         "1 QPs offered for this side's 2"),
        (_params(sc, qp_type="uc"), 1024, "10.0.0.2", "qps[0].qp_type", "not the scenario's"),
        (_params(sc, ip="fe80::2"), 1024, "10.0.0.2", "qps[0].ip", "address family"),
        (_params(sc, size=100), 1024, "10.0.0.2", "qps[0].size", "fewer than the 256"),
        (_params(sc, va=(1 << 64) - 8), 1024, "10.0.0.2", "qps[0].va", "64-bit"),
        (_params(sc, va=0x10004), 1024, "10.0.0.2", "qps[0].va", "8-byte aligned"),
    ]:
        with pytest.raises(PeerMessageError) as info:
            remote._check_params(msg, sc, offered, ip)
        assert (info.value.message_type, info.value.field) == ("params", path), str(info.value)
        assert why in info.value.why, str(info.value)
    # a SEND-only plan addresses no remote memory
    sends_only = Scenario(op="send", size=64, count=8)
    remote._check_params(_params(sends_only, size=0, va=(1 << 64) - 1), sends_only, 1024,
                         "10.0.0.2")


@pytest.mark.parametrize("op", OPS)
def test_sends_and_plan_bytes_follow_the_plan(op: str) -> None:
    for count in range(10):
        sc = Scenario(op=op, count=count, size=100, qps=3)
        assert list(remote.sends(sc)) == [i for i in range(count) if kind(op, i) == "send"]
        assert remote.plan_bytes(sc) == 3 * sum(message_bytes(kind(op, i), 100)
                                                for i in range(count))
    assert len(remote.sends(Scenario(op=op, count=10**18))) <= 10**18


def test_a_posted_receive_costs_less_than_the_budget_says() -> None:
    ctx = Context("t", "10.0.0.1")
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = QP(pd, QPInitAttr(qp_type=QP_TYPES["rc"], send_cq=cq, recv_cq=cq,
                           cap=QPCap(max_send_wr=1, max_recv_wr=5000)))
    qp.to_init(QPAttr(qp_access_flags=ALL_ACCESS))
    mr = MR(pd, 64, ALL_ACCESS)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(4000):
        qp.post_recv(RecvWR(wr_id=i, sg_list=[mr.sge(0, 64)]))
    per = (tracemalloc.get_traced_memory()[0] - before) / 4000
    tracemalloc.stop()
    assert 0 < per < budget.RECV_WR_BYTES, per


def test_duration_is_bounded_by_the_fastest_link() -> None:
    budget.duration(10**9, 1, 10**9, 120)
    with pytest.raises(UsageError, match=r"--count 1000000000000: .* at most 142857142857 "
                       r"frames"):
        budget.duration(10**12, 1, 10**12, 120)
    with pytest.raises(UsageError, match="--count at most 23 with --qps 2"):
        budget.duration(10**4, 2, 2 * 10**4 * (1 << 31), 1)


# -- the values of --oob-timeout and --time-limit, against every consumer -----------------------


def test_wait_options_fit_every_consumer() -> None:
    """The largest --oob-timeout / --time-limit reaches select, socket timeouts, the event
    loop and the listener's accept (which waits four times as long) without overflowing;
    a positive value below a nanosecond is refused (a clock in ns reads it as 0)."""
    most = options.parse_positive_seconds(str(options.MAX_SECONDS))
    with pytest.raises(argparse.ArgumentTypeError):
        options.parse_positive_seconds(str(options.MAX_SECONDS + 1))
    with pytest.raises(argparse.ArgumentTypeError, match="shorter than a nanosecond"):
        options.parse_positive_seconds("1e-308")
    assert options.parse_positive_seconds("1e-9") == 1e-9
    a, b = tcp_pair()
    try:
        b.sendall(b"x")
        assert select.select([a], [], [], most)[0]
        assert a.recv(1) == b"x"
        a.settimeout(most)
        loop = EventLoop()
        assert loop.run(stop=lambda: True, timeout=most)
        assert time.monotonic_ns() + int(most * 1e9) > 0
        ch = oob.Channel(a, "peer")
        b.sendall(b'{"type":"error","message":"m"}\n')
        with pytest.raises(OOBError, match="reported: m"):
            ch.recv(most)
    finally:
        a.close()
        b.close()
    with oob.Listener("127.0.0.1", 0) as lst:
        c = socket.create_connection(("127.0.0.1", lst.port))
        lst.accept(most * 4).close()
        c.close()


def test_a_hello_longer_than_a_line_is_the_connectors_usage_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Too many QPs to describe in one line: the connector says so, naming --qps and how
    many fit, rather than sending what the listener would refuse."""
    monkeypatch.setattr(schema, "MAX_LINE", 2000)
    with oob.Listener("127.0.0.1", 0) as lst, socket.socket(socket.AF_INET,
                                                           socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        ep = remote.Endpoint(transport="udp", ip="127.0.0.1", oob_port=lst.port,
                             oob_timeout=5, udp_port=probe.getsockname()[1])
        probe.close()
        sc = Scenario(size=64, count=1, qps=20, time_limit_ns=10**9)
        with pytest.raises(UsageError, match=r"--qps 20: the hello describing them would take "
                           r"\d+ bytes, more than the out-of-band protocol's 2000 \(--qps at "
                           r"most 10\)"):
            remote.run_connector("127.0.0.1", sc, ep)
