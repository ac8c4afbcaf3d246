"""Hostile peers against real ``roce emulate --listen`` and ``--connect`` processes on loopback.

A raw TCP socket plays the connector to a real listener, and a fake listener serves a real
connector; each sends messages that break the out-of-band protocol (``roce.emu.real.messages``):
the issue's cases one by one, then a hypothesis fuzzer of messages mutated field by field from
the schema (a bounded, derandomized example count: tests/profiles.py).  Every process runs
under an address-space limit and a timeout.  A broken message must end the process with exit
2 and one line on stderr naming the message and the field, told to the peer as an ``error``
message too; a valid one runs (exit 0, or 4 when the data cannot check out because nothing
answered on the wire); never exit 3, a traceback, or a run past its time.

The cases use only the protocol's wire form, so they run against any version of the code.
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from roce.emu.real import oob

ROOT = Path(__file__).resolve().parent.parent
MEMORY_LIMIT = 1 << 30  # address space of each child: a run that grows past it fails
WAIT = 30.0  # seconds any child may take, at most
LOGS = ("listening on port", "serving ", "connected to ", "no result from the listener")
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ROCE_DEBUG", None)
    return subprocess.Popen([sys.executable, "-m", "roce", "emulate", *args], cwd=ROOT,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0, preexec_fn=_limit_memory)


def _read_line(fd: int | socket.socket, buf: bytearray, deadline: float) -> bytes | None:
    """The next line from a pipe or socket (None at EOF or the deadline)."""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        try:
            chunk = fd.recv(65536) if isinstance(fd, socket.socket) else os.read(fd, 65536)
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    i = buf.index(b"\n")
    out = bytes(buf[:i])
    del buf[:i + 1]
    return out


@dataclass
class Run:
    """What a child did: exit status, stderr, the messages it sent us, seconds taken."""

    rc: int
    stderr: bytes
    told: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    stdout: bytes = b""

    @property
    def errors(self) -> list[str]:
        """stderr's lines but the progress logs."""
        lines = self.stderr.decode("utf-8", "replace").splitlines()
        return [x for x in lines if not any(x.startswith(f"roce emulate: {p}") for p in LOGS)]

    def refused(self, mtype: str, path: str) -> None:
        """Exit 2, one line naming the message and the field, the same told to the peer."""
        assert self.rc == 2, self
        assert b"Traceback" not in self.stderr and b"internal error" not in self.stderr, self
        assert not CONTROL.search(self.stderr.replace(b"\n", b"")), self
        assert len(self.errors) == 1, self
        where = f'field "{path}": ' if path else ""
        assert f"roce emulate: peer {mtype}: {where}" in self.errors[0], self
        if self.told:
            assert self.told[-1]["type"] == "error", self
            assert f"peer {mtype}: {where}" in self.told[-1]["message"], self

    def ran(self) -> None:
        """A valid exchange: the run happened (exit 0, or 4 when nothing answered)."""
        assert self.rc in (0, 4), self
        assert b"Traceback" not in self.stderr, self


def _decode(raw: bytes | None) -> Any:
    return None if raw is None else json.loads(raw)


# -- a real listener, a raw connector ------------------------------------------------------------


def listener_run(first: bytes, then: Callable[[Any], bytes | None] | None = None,
                 args: tuple[str, ...] = ()) -> Run:
    """Start ``roce emulate --listen`` (UDP on 127.0.0.1, 3 s limits), send ``first`` from a
    raw socket; when it answers ``params``, send ``then(params)``; wait for it to exit."""
    t0 = time.monotonic()
    proc = _spawn(["--listen", "--transport", "udp", "--ip", "127.0.0.1", "--bind",
                   "127.0.0.1", "--port", "0", "--udp-port", str(_free_udp_port()),
                   "--oob-timeout", "3", "--time-limit", "3", *args])
    deadline = t0 + WAIT
    err = bytearray()
    told: list[Any] = []
    try:
        head = _read_line(proc.stderr.fileno(), err, deadline)
        m = re.search(rb"listening on port (\d+)", head or b"")
        assert m, (head, bytes(err), proc.poll())
        with socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=5) as s:
            try:
                s.sendall(first)
            except OSError:
                pass
            buf = bytearray()
            reply = _decode(_read_line(s, buf, deadline))
            if reply is not None:
                told.append(reply)
            if reply is not None and reply.get("type") == "params" and then is not None:
                nxt = then(reply)
                if nxt is not None:
                    try:
                        s.sendall(nxt)
                    except OSError:
                        pass
                    reply = _decode(_read_line(s, buf, deadline))
                    if reply is not None:
                        told.append(reply)
        proc.wait(max(0.1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            pytest.fail(f"the listener ran past {WAIT} s: {bytes(err)!r}")
    err += proc.stderr.read()
    return Run(proc.returncode, bytes(err), told, time.monotonic() - t0)


def qp(ip: str = "127.0.0.2", **over: Any) -> dict[str, Any]:
    return {"qpn": 17, "psn": 0, "ip": ip, "gid": oob.gid_of(ip), "mac": "02:00:7f:00:00:02",
            "rkey": 0, "va": 0, "size": 64, "mtu": 1024, "qp_type": "rc", "qkey": 0, **over}


def hello(**scenario: Any) -> dict[str, Any]:
    sc = {"op": "write", "size": 64, "count": 2, "mtu": 1024, "qps": 1, "depth": 4, "seed": 0,
          "psn": 0, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7, "qp_type": "rc",
          "recovery": "gbn", "loss_rule": "rack", "time_limit_s": 3.0, **scenario}
    return {"type": "hello", "protocol": oob.PROTOCOL, "scenario": sc, "qps": [qp()],
            "max_mtu": 1024}


def line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def done(posted: int = 2, ok: int = 2) -> bytes:
    return line({"type": "done", "posted": posted, "completed": {"IBV_WC_SUCCESS": ok},
                 "finished": True})


def _set(msg: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(msg))
    target = out
    steps = re.findall(r"[^.\[\]]+", path)
    for s in steps[:-1]:
        target = target[int(s)] if s.isdigit() else target[s]
    last = steps[-1]
    target[int(last) if last.isdigit() else last] = value
    return out


LISTENER_CASES = [  # (id, line sent, message type, field named)
    ("qps-list-of-int", line(_set(hello(), "qps", [5])), "hello", "qps[0]"),
    ("deep-nesting", b'{"type":"hello","q":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
     "message", ""),
    ("mtu-0", line(_set(hello(), "scenario.mtu", 0)), "hello", "scenario.mtu"),
    ("max-mtu-text", line(_set(hello(), "max_mtu", "x")), "hello", "max_mtu"),
    ("time-limit-infinity",
     line(hello()).replace(b'"time_limit_s":3.0', b'"time_limit_s":Infinity'), "message", ""),
    ("time-limit-1e-308", line(_set(hello(), "scenario.time_limit_s", 1e-308)), "hello",
     "scenario.time_limit_s"),
    ("ip-not-an-ip", line(_set(hello(), "qps.0.ip", "not.an.ip")), "hello", "qps[0].ip"),
    ("ip-escape", line(_set(hello(), "qps.0.ip", "fe80::1%\x1b[31m")), "hello", "qps[0].ip"),
    ("psn-text", line(_set(hello(), "qps.0.psn", "x")), "hello", "qps[0].psn"),
    ("psn-25-bits", line(_set(hello(), "scenario.psn", 1 << 24)), "hello", "scenario.psn"),
    ("count-float-1e10", line(hello()).replace(b'"count":2', b'"count":1e10'), "hello",
     "scenario.count"),
    ("count-bool", line(_set(hello(), "scenario.count", True)), "hello", "scenario.count"),
    ("qps-missing", line({k: v for k, v in hello().items() if k != "qps"}), "hello", "qps"),
    ("op-unknown", line(_set(hello(), "scenario.op", "rm -rf")), "hello", "scenario.op"),
    ("unknown-type", line({"type": "\x1b[2Jhello"}), "message", "type"),
    ("not-json", b"GET / HTTP/1.0\r\n", "message", ""),
    ("not-utf8", b"\xff\xfe\xfd\n", "message", ""),
    ("nan", line(hello()).replace(b'"seed":0', b'"seed":NaN'), "message", ""),
    ("huge-integer", line(hello()).replace(b'"seed":0', b'"seed":' + b"9" * 5000), "message",
     ""),
    ("duplicate-key", line(hello()).replace(b'"seed":0', b'"seed":0,"seed":1'), "message", ""),
    ("line-too-long", b'{"type":"error","message":"' + b"x" * (1 << 21) + b'"}\n', "message",
     ""),
    ("qps-count-differs", line(_set(hello(qps=2), "qps", [qp()])), "hello", "qps"),
    ("qp-type-differs", line(_set(hello(), "qps.0.qp_type", "uc")), "hello",
     "qps[0].qp_type"),
    ("ud-write", line(_set(hello(qp_type="ud"), "qps.0.qp_type", "ud")), "hello",
     "scenario.qp_type"),
    ("qps-too-many-for-memory", line(hello(qps=1 << 20, size=1 << 20)), "hello",
     "scenario.qps"),
    ("depth-too-deep-for-memory", line(hello(op="send", count=10**9, depth=1 << 40)), "hello",
     "scenario.depth"),
    ("count-1e12-write", line(hello(count=10**12)), "hello", "scenario.count"),
    ("ipv6-peer-of-ipv4-side", line(_set(hello(), "qps.0.ip", "::1")), "hello", "qps[0].ip"),
    ("protocol-2", line(_set(hello(), "protocol", "roce-emulate/2")), "hello", "protocol"),
    ("params-first", line({"type": "params", "mtu": 1024, "qps": [qp()]}), None, None),
]


@pytest.mark.parametrize(("sent", "mtype", "path"), [c[1:] for c in LISTENER_CASES],
                         ids=[c[0] for c in LISTENER_CASES])
def test_a_hostile_hello_is_refused_by_name(sent: bytes, mtype: str | None,
                                            path: str | None) -> None:
    run = listener_run(sent)
    if mtype is None:  # a message of the wrong type: refused, exit 2
        assert run.rc == 2 and "expected a 'hello' message" in run.errors[0], run
        return
    run.refused(mtype, path)
    assert run.seconds < 15, run


@pytest.mark.parametrize(("then", "path"), [
    (line({"type": "done", "posted": "2", "completed": {}, "finished": True}), "posted"),
    (line({"type": "done", "posted": 2, "completed": {"IBV_WC_NOPE": 2}, "finished": True}),
     "completed"),
    (line({"type": "done", "posted": 2, "completed": {}, "finished": "yes"}), "finished"),
    (line({"type": "done", "posted": 2, "completed": {"IBV_WC_SUCCESS": -2},
           "finished": True}), "completed.IBV_WC_SUCCESS"),
])
def test_a_hostile_done_is_refused_by_name(then: bytes, path: str) -> None:
    run = listener_run(line(hello()), lambda params: then)
    run.refused("done", path)


def test_a_valid_exchange_runs() -> None:
    """The raw connector's valid hello and done: params come back (as the schema says),
    then a result; nothing was written on the wire, so the data does not check out."""
    from roce.emu.real import messages as schema

    run = listener_run(line(hello()), lambda params: done())
    run.ran()
    assert run.rc == 4 and [m["type"] for m in run.told] == ["params", "result"], run
    for m in run.told:
        schema.check(m)
    assert run.told[1]["verified"] is False
    # nothing to do is verified
    run = listener_run(line(hello(count=0)), lambda params: done(0, 0))
    assert run.rc == 0 and run.told[1]["verified"] is True, run


def test_count_1e10_sends_stays_in_memory() -> None:
    """10^10 SENDs are within an 800 Gb/s link's reach in the listener's limit, so the run
    starts -- in a 1 GB address space: the listener follows the SENDs as a range, posts
    receives as the depth says, and (the connector claiming all done) skips replaying a plan
    its memory never saw executed."""
    run = listener_run(line(hello(op="send", count=10**10, time_limit_s=60)),
                       lambda params: done(10**10, 10**10), args=("--time-limit", "60"))
    run.ran()
    assert run.rc == 4 and run.told[-1]["type"] == "result", run
    assert "0 of 10000000000 message(s) executed here" in run.told[-1]["summary"]["unverified"]
    assert run.seconds < 15, run


def test_oob_timeout_at_its_largest_waits_without_overflow() -> None:
    """--oob-timeout 9223372036: the listener's accept waits four times as long, capped at
    what select takes; a hostile hello then is refused as usual (exit 2, not 3)."""
    run = listener_run(line(_set(hello(), "scenario.mtu", 0)),
                       args=("--oob-timeout", "9223372036"))
    run.refused("hello", "scenario.mtu")


def test_time_limit_below_a_nanosecond_is_refused() -> None:
    proc = _spawn(["--connect", "127.0.0.1", "--transport", "udp", "--time-limit", "1e-308"])
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 1 and err.count(b"\n") == 1, err
    assert b"--time-limit" in err and b"shorter than a nanosecond" in err


# -- a real connector, a fake listener -----------------------------------------------------------


def connector_run(params_for: Callable[[Any], bytes],
                  result_for: Callable[[Any], bytes] | None = None,
                  args: tuple[str, ...] = ()) -> Run:
    """Start ``roce emulate --connect`` (UDP from 127.0.0.2, 0.3 s run) against a fake
    listener: answer its hello with ``params_for(hello)``; when it sends ``done``, answer
    ``result_for(done)``; wait for it to exit."""
    t0 = time.monotonic()
    deadline = t0 + WAIT
    told: list[Any] = []
    with socket.create_server(("127.0.0.1", 0)) as srv:
        proc = _spawn(["--connect", "127.0.0.1", "--port", str(srv.getsockname()[1]),
                       "--transport", "udp", "--ip", "127.0.0.2", "--udp-port",
                       str(_free_udp_port()), "--oob-timeout", "5", "--time-limit", "0.3",
                       "--size", "64", "--count", "2", "--mtu", "1024", *args])
        try:
            srv.settimeout(WAIT)
            conn, _ = srv.accept()
            with conn:
                buf = bytearray()
                first = _decode(_read_line(conn, buf, deadline))
                assert first is not None and first["type"] == "hello", (first, proc.poll())
                told.append(first)
                try:
                    conn.sendall(params_for(first))
                except OSError:
                    pass
                reply = _decode(_read_line(conn, buf, deadline))
                if reply is not None:
                    told.append(reply)
                    if reply["type"] == "done" and result_for is not None:
                        try:
                            conn.sendall(result_for(reply))
                        except OSError:
                            pass
                        reply = _decode(_read_line(conn, buf, deadline))
                        if reply is not None:
                            told.append(reply)
            proc.wait(max(0.1, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                pytest.fail(f"the connector ran past {WAIT} s")
    return Run(proc.returncode, proc.stderr.read(), told, time.monotonic() - t0,
               proc.stdout.read())


def params(first: Any, **over: Any) -> dict[str, Any]:
    """Valid params for a connector's hello: its QP count and type, at its MTU, memory
    that holds the plan."""
    sc = first["scenario"]
    return {"type": "params", "mtu": min(sc["mtu"], first["max_mtu"]),
            "qps": [qp("127.0.0.1", qp_type=sc["qp_type"], size=1 << 16, va=0x10000,
                       rkey=0x1234, mtu=sc["mtu"]) for _ in range(sc["qps"])], **over}


def summary(**over: Any) -> dict[str, Any]:
    base = {name: 0 for name in ("messages", "bytes", "rnr_naks_sent", "duplicates",
                                 "frames_received", "packets", "retransmitted", "icrc_drops",
                                 "spurious_retransmissions", "ooo_accepted", "selective_naks",
                                 "wall_ns")}
    return {**base, "completed": {}, "naks_sent": {}, "finished": True, "unverified": "",
            **over}


def result(verified: Any = True, **over: Any) -> bytes:
    return line({"type": "result", "verified": verified, "summary": summary(**over)})


CONNECTOR_CASES = [  # (id, params, result, message type, field)
    ("params-alone", lambda h: line({"type": "params"}), None, "params", "mtu"),
    ("mtu-text", lambda h: line(params(h, mtu="abc")), None, "params", "mtu"),
    ("mtu-above-offer", lambda h: line(params(h, mtu=4096)), None, "params", "mtu"),
    ("va-2-70", lambda h: line(_set(params(h), "qps.0.va", 1 << 70)), None, "params",
     "qps[0].va"),
    ("va-wraps", lambda h: line(_set(params(h), "qps.0.va", (1 << 64) - 16)), None, "params",
     "qps[0].va"),
    ("size-too-small", lambda h: line(_set(params(h), "qps.0.size", 10)), None, "params",
     "qps[0].size"),
    ("qps-empty", lambda h: line(params(h, qps=[])), None, "params", "qps"),
    ("rkey-negative", lambda h: line(_set(params(h), "qps.0.rkey", -1)), None, "params",
     "qps[0].rkey"),
    ("mac-escape", lambda h: line(_set(params(h), "qps.0.mac", "\x1b]0;owned\x07")), None,
     "params", "qps[0].mac"),
    ("ip-broadcast", lambda h: line(_set(params(h), "qps.0.ip", "255.255.255.255")), None,
     "params", "qps[0].ip"),
    ("summary-list", lambda h: line(params(h)),
     lambda d: line({"type": "result", "verified": True, "summary": []}), "result", "summary"),
    ("verified-no", lambda h: line(params(h)), lambda d: result("no"), "result", "verified"),
    ("verified-1", lambda h: line(params(h)), lambda d: result(1), "result", "verified"),
    ("summary-count-text", lambda h: line(params(h)), lambda d: result(messages="2"),
     "result", "summary.messages"),
    ("summary-extra", lambda h: line(params(h)),
     lambda d: line({"type": "result", "verified": True, "summary": {**summary(), "x": 1}}),
     "result", "summary"),
]


@pytest.mark.parametrize(("params_for", "result_for", "mtype", "path"),
                         [c[1:] for c in CONNECTOR_CASES], ids=[c[0] for c in CONNECTOR_CASES])
def test_hostile_params_or_result_are_refused_by_name(params_for: Callable, result_for: Any,
                                                      mtype: str, path: str) -> None:
    run = connector_run(params_for, result_for)
    run.refused(mtype, path)


def test_a_peers_error_is_printed_escaped() -> None:
    evil = "no \x1b[2J\x1b]0;owned\x07 way\r\x9b31m\u202e"
    run = connector_run(lambda h: line({"type": "error", "message": evil}))
    assert run.rc == 2 and len(run.errors) == 1, run
    assert not CONTROL.search(run.stderr.replace(b"\n", b"")), run
    assert "reported: no \\x1b[2J\\x1b]0;owned\\x07 way\\x0d\\x9b31m\\u202e" in run.errors[0]


def test_the_listeners_verdict_is_its_claim() -> None:
    """A listener's "verified": true does not make the connector's own data verified: here
    nothing completed, the listener's yes is shown as its report, and the run exits 4."""
    run = connector_run(lambda h: line(params(h)), lambda d: result(True))
    assert run.rc == 4, run
    assert run.told[1]["type"] == "done"
    assert b"data verified NO (here: NO; listener reports: yes)" in run.stdout, run


# -- the fuzzers ---------------------------------------------------------------------------------


FUZZ = settings(max_examples=examples(25), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _hello_strategy() -> st.SearchStrategy[dict[str, Any]]:
    """Valid hellos that fit a 1 GB child and a 3 s run (cross-field rules kept)."""
    rc_ops = st.sampled_from(["write", "read", "send", "atomic", "mixed"])
    return st.one_of(
        st.fixed_dictionaries({"qp_type": st.just("rc"), "op": rc_ops,
                               "size": st.integers(0, 4096)}),
        st.fixed_dictionaries({"qp_type": st.just("uc"), "op": st.sampled_from(["write",
                                                                                "send"]),
                               "size": st.integers(0, 4096)}),
        st.fixed_dictionaries({"qp_type": st.just("ud"), "op": st.just("send"),
                               "size": st.integers(0, 256)}),
    ).flatmap(lambda base: st.fixed_dictionaries({
        **{k: st.just(v) for k, v in base.items()},
        "count": st.integers(0, 8), "qps": st.integers(1, 2), "depth": st.integers(1, 16),
        "seed": st.integers(0, (1 << 64) - 1), "psn": st.integers(0, (1 << 24) - 1),
        "mtu": st.sampled_from([256, 512, 1024, 2048, 4096]) if base["qp_type"] != "ud"
        else st.just(4096),
        "recovery": st.sampled_from(["gbn", "sr"]), "time_limit_s": st.floats(0.5, 3),
    })).map(lambda sc: _set(_set(hello(**sc), "qps", [qp(qp_type=sc["qp_type"])] * sc["qps"]),
                            "max_mtu", 4096))


@given(st.data())
@FUZZ
def test_fuzz_a_real_listener(data: st.DataObject) -> None:
    from oob_helpers import RAW_BAD, field_mutation

    msg = data.draw(_hello_strategy(), label="hello")
    how = data.draw(st.sampled_from(["hello", "hello", "done", "raw", "valid"]), label="how")
    if how == "raw":
        raw = data.draw(st.sampled_from(RAW_BAD), label="raw")
        run = listener_run(raw)
        assert run.rc == 2 and len(run.errors) == 1, run
        assert "roce emulate: peer message: " in run.errors[0], run
        assert b"Traceback" not in run.stderr
    elif how == "hello":
        broken, path = data.draw(field_mutation(msg, "hello"), label="mutation")
        run = listener_run(line(broken))
        run.refused("hello", path)
    else:
        n = msg["scenario"]["count"] * msg["scenario"]["qps"]
        good = {"type": "done", "posted": n, "completed": {"IBV_WC_SUCCESS": n},
                "finished": True}
        if how == "done":
            bad, path = data.draw(field_mutation(good, "done"), label="mutation")
            run = listener_run(line(msg), lambda params: line(bad))
            run.refused("done", path)
        else:
            run = listener_run(line(msg), lambda params: line(good))
            run.ran()
            assert [m["type"] for m in run.told] == ["params", "result"], run
    assert run.seconds < WAIT


CONNECTOR_SHAPES = [  # the connector's own options; the fake listener follows its hello
    ("--op", "write"), ("--op", "read"), ("--op", "atomic"), ("--op", "mixed"),
    ("--op", "send"), ("--qp-type", "ud", "--op", "send"),
]


@given(st.data())
@FUZZ
def test_fuzz_a_real_connector(data: st.DataObject) -> None:
    from oob_helpers import field_mutation

    shape = data.draw(st.sampled_from(CONNECTOR_SHAPES), label="connector")
    how = data.draw(st.sampled_from(["params", "params", "result", "result", "valid"]),
                    label="how")
    picked: dict[str, Any] = {}

    def params_for(first: Any) -> bytes:
        good = params(first)
        if how != "params":
            return line(good)
        bad, picked["path"] = data.draw(field_mutation(good, "params"), label="mutation")
        return line(bad)

    def result_for(done_msg: Any) -> bytes:
        good = json.loads(result(True))
        if how != "result":
            return line(good)
        bad, picked["path"] = data.draw(field_mutation(good, "result"), label="mutation")
        return line(bad)

    run = connector_run(params_for, result_for, args=tuple(shape))
    if how == "valid":
        run.ran()
        if "ud" not in shape:  # nothing answered on the wire (UD sends complete unanswered)
            assert run.rc == 4, run
    else:
        run.refused(how, picked["path"])
    assert run.seconds < WAIT
