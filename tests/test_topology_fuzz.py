"""A hypothesis fuzzer of topology files: every TOML document it writes gives either a run
(exit 0, or 4 when faults cost messages) or one line naming the file and the key (exit 2),
or an option (exit 1) -- never exit 3, never more than a bounded amount of memory or time.

Documents start from a network that runs (hosts on switches, links, traffic) and are then
bent: values of the wrong type, out of range, not finite; unknown keys; names that do not
exist or clash; a section of the wrong shape.  The run is in this process under an
address-space limit of 1 GB above what it already uses (the memory budget sees that limit,
as it would in a container), so unbounded memory surfaces as a failure here rather than a
machine in trouble.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import resource
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from roce.cli import main

EXAMPLES = 150
HEADROOM = 1 << 30  # address space each run may add
TIME_LIMIT = 60.0  # seconds per document (a run takes well under one)

# -- a small TOML writer (the standard library only reads TOML) ----------------------------

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _string(s: str) -> str:
    # JSON's escapes are TOML's; DEL must be escaped in TOML and is not in JSON
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(k: str) -> str:
    return k if _BARE.fullmatch(k) else _string(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def to_toml(doc: dict[str, Any]) -> str:
    """Top-level values inline, tables of tables as ``[a.b]``, arrays of tables as ``[[a]]``."""
    lines = []
    for k, v in doc.items():
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            for name, body in v.items():
                lines.append(f"[{_key(k)}.{_key(name)}]")
                lines += [f"{_key(a)} = {_value(b)}" for a, b in body.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for body in v:
                lines.append(f"[[{_key(k)}]]")
                lines += [f"{_key(a)} = {_value(b)}" for a, b in body.items()]
        else:
            lines.insert(0, f"{_key(k)} = {_value(v)}")
    return "\n".join(lines) + "\n"


# -- documents ----------------------------------------------------------------------------

JUNK = st.one_of(
    st.text(max_size=12), st.integers(-(1 << 70), 1 << 70), st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.text(max_size=4),
                                                              st.integers(), max_size=2),
    st.sampled_from(["", "0", "-1", "1e400", "nan", "inf", "10.0.0.300", "fe80::1",
                     "999999999999T", "1,2", "off", "on", "x" * 200, "1e-300",
                     "9223372036854775807"]))
# values a file may hold (the edges included: 1 b/s and 1 Pb/s, a delay of 2^63 ns)
PROB = st.sampled_from([0.0, 0.001, 0.05, 1.0, "0.01", 0])
SIZE = st.sampled_from(["2M", "4M", "12M", 1 << 22, "1G"])
RATE = st.sampled_from(["100G", "25G", 40, 1.5, "1e6", "1e-9"])
TIME = st.sampled_from(["1us", 0, 500, "2ms", "9223372036s"])
ECN = st.sampled_from(["off", "on", "100K,400K,0.2", "0,0,0", "1K,2K,1"])
FILTER = st.sampled_from(["bth.opcode == 0x11", "bth.psn == 2", "frame", "x ==", "eth",
                          "bth.opcode == 0x11 and aeth.msn == 1"])
FAULT_VALUES = {
    "loss": PROB, "burst_p": PROB, "burst_r": PROB, "burst_loss": PROB, "reorder": PROB,
    "dup": PROB, "corrupt": PROB, "reorder_jitter_ns": TIME,
    "drop_nth": st.lists(st.integers(1, 40), max_size=4),
    "drop_acks_between": st.lists(st.integers(0, 10**6), min_size=2, max_size=2).map(sorted),
    "drop_filter": FILTER,
}
FAULT_KEYS = st.lists(st.sampled_from(sorted(FAULT_VALUES)), max_size=3, unique=True)


@st.composite
def faults(draw: st.DrawFn) -> dict[str, Any]:
    return {k: draw(FAULT_VALUES[k]) for k in draw(FAULT_KEYS)}


@st.composite
def valid(draw: st.DrawFn) -> dict[str, Any]:
    """A network that runs: hosts on switches, the switches in a chain, flows between
    hosts; optional keys set from the values a file may hold."""
    hosts = [f"h{i}" for i in range(1, draw(st.integers(2, 5)) + 1)]
    switches = [f"s{i}" for i in range(1, draw(st.integers(1, 3)) + 1)]
    doc: dict[str, Any] = {"hosts": {}, "switches": {}, "links": [], "traffic": []}
    for i, h in enumerate(hosts):
        doc["hosts"][h] = {"ip": f"10.1.{i}.{draw(st.integers(1, 9))}"} if draw(
            st.integers(0, 3)) == 0 else {}
    for s in switches:
        body: dict[str, Any] = {}
        for key, values in (("buffer", SIZE), ("ecn", ECN), ("pfc", st.booleans())):
            if draw(st.integers(0, 3)) == 0:
                body[key] = draw(values)
        doc["switches"][s] = body
    for h in hosts:
        doc["links"].append({"a": h, "b": draw(st.sampled_from(switches))})
    for x, y in zip(switches, switches[1:]):
        doc["links"].append({"a": x, "b": y})
    for link in doc["links"]:
        if draw(st.integers(0, 5)) == 0:
            link["rate"] = draw(RATE)
        if draw(st.integers(0, 5)) == 0:
            link["delay"] = draw(TIME)
        if draw(st.integers(0, 4)) == 0:
            link["faults"] = draw(faults())
        if draw(st.integers(0, 8)) == 0:
            link["reverse_faults"] = draw(faults())
    for _ in range(draw(st.integers(0, 3))):
        a, b = draw(st.lists(st.sampled_from(hosts), min_size=2, max_size=2, unique=True))
        doc["traffic"].append({"src": a, "dst": b})
    return doc


def _places(doc: Any, path: tuple = ()) -> list[tuple]:
    """The path of every value in a document, tables and arrays included."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(
        doc, list) else ()
    for k, v in items:
        out.append((*path, k))
        out += _places(v, (*path, k))
    return out


def _at(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


NAMES = st.sampled_from(["nobody", "a b", "", "h1", "s1", "x" * 80, "é", "h1.x"])


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid document, bent 0, 1 or 2 times: a value replaced by junk, a key dropped or
    added, a link or a flow between odd names, an address given twice."""
    doc = draw(valid())
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
        how = draw(st.sampled_from(["value", "value", "drop", "extra", "link", "flow",
                                    "address", "top"]))
        places = _places(doc)
        if how == "value" and places:
            *where, last = draw(st.sampled_from(places))
            _at(doc, tuple(where))[last] = draw(JUNK)
        elif how == "drop" and places:
            *where, last = draw(st.sampled_from(places))
            parent = _at(doc, tuple(where))
            if isinstance(parent, dict):
                del parent[last]
        elif how == "extra":
            tables = [p for p in [(), *places] if isinstance(_at(doc, p), dict)]
            _at(doc, draw(st.sampled_from(tables)))[draw(st.text(max_size=5))] = draw(JUNK)
        elif how == "link" and isinstance(doc.get("links"), list):
            doc["links"].append({"a": draw(NAMES), "b": draw(NAMES)})
        elif how == "flow" and isinstance(doc.get("traffic"), list):
            doc["traffic"].append({"src": draw(NAMES), "dst": draw(NAMES)})
        elif how == "address" and isinstance(doc.get("hosts"), dict) and len(doc["hosts"]) > 1:
            for body in list(doc["hosts"].values())[:2]:
                if isinstance(body, dict):
                    body["ip"] = "10.0.0.1"
        elif how == "top":
            doc[draw(st.text(min_size=1, max_size=5))] = draw(JUNK)
    return {k: v for k, v in doc.items() if v != []}


# -- the property ---------------------------------------------------------------------------


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, err.getvalue()


@contextlib.contextmanager
def address_space(headroom: int):
    """At most ``headroom`` more bytes of address space while inside."""
    with open("/proc/self/status") as f:
        vm = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@settings(max_examples=examples(EXAMPLES), suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(doc=documents())
def test_every_topology_file_runs_or_names_file_and_key(tmp_path_factory, doc) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "net.toml"
    text = to_toml(doc)
    path.write_text(text)
    start = time.monotonic()
    with address_space(HEADROOM):
        code, err = run(["emulate", "--topology-file", str(path), "--size", "4K", "--count",
                         "2", "--no-progress", "-T", "json"])
    took = time.monotonic() - start
    assert took < TIME_LIMIT, (took, text)
    lines = err.strip().splitlines()
    assert code in (0, 1, 2, 4), (code, err, text)
    assert "internal error" not in err and "Traceback" not in err, (err, text)
    if code in (1, 2):
        assert len(lines) == 1, (err, text)
    if code == 2:  # the file's content: its name, then the key
        assert lines[0].startswith(f"roce emulate: {path}: "), (err, text)
        rest = lines[0][len(f"roce emulate: {path}: "):]
        assert re.match(r"(line \d+|not TOML|hosts|switches|links|traffic|[^:]+: unknown)",
                        rest), (err, text)
    if code == 1:  # an option, or a check of the network as a whole, named
        assert re.search(r"--[a-z]|switch |host |net\.toml", lines[0]), (err, text)
