"""Messages of the out-of-band protocol for tests, derived from its schema
(``roce.emu.real.messages``): a valid sample of every message, every field's path, values that
break each field's rule, and hypothesis strategies of both."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from roce import options
from roce.emu.real import messages as schema
from roce.emu.real.messages import (
    Bool,
    Choice,
    Const,
    Int,
    Kind,
    List,
    Map,
    Obj,
    Seconds,
    Text,
)

# a valid string for each option type a Text field is checked by
TEXT_SAMPLES = {
    options.parse_unicast_ip_text: ["10.0.0.1", "127.0.0.1", "fe80::1", "192.168.7.9"],
    options.parse_gid: ["::ffff:a00:1", "fe80::1", "::1"],
    options.parse_mac: ["02:00:00:00:00:01", "0e:1f:2a:3b:4c:5d"],
    None: ["", "why", "a sentence: with \u00e9 and ' quotes"],
}
TEXT_BAD = {
    options.parse_unicast_ip_text: ["not.an.ip", "0.0.0.0", "224.0.0.1", "255.255.255.255",
                                    "::", "fe80::1%\x1b[31m", "10.0.0.1/24", "1.2.3",
                                    "fe80::1%eth0", ""],
    options.parse_gid: ["10.0.0.1", "x", "fe80::1%eth0", ""],
    options.parse_mac: ["gg:00:00:00:00:00", "02:00:00:00:00", "", "\x1b[2J"],
    None: [],
}
WRONG_TYPES: list[Any] = [None, True, False, "1", 1.5, [], {}, [1], {"a": 1}]


def sample(kind: Kind) -> Any:
    """A value ``kind`` takes."""
    if isinstance(kind, Int):
        choices = getattr(kind.parser, "choices", None)
        return choices[-1] if choices else kind.parser.bounds[0]  # type: ignore[attr-defined]
    if isinstance(kind, Seconds):
        return 1.5
    if isinstance(kind, (Choice,)):
        return kind.values[0]
    if isinstance(kind, Const):
        return kind.value
    if isinstance(kind, Text):
        return TEXT_SAMPLES[kind.parser][0]
    if isinstance(kind, Bool):
        return True
    if isinstance(kind, Obj):
        return {f.name: sample(f.kind) for f in kind.fields}
    if isinstance(kind, List):
        return [sample(kind.item) for _ in range(kind.lo)]
    if isinstance(kind, Map):
        return {kind.keys.values[0]: sample(kind.value)}
    raise AssertionError(kind)


def message(mtype: str) -> dict[str, Any]:
    """A valid message of type ``mtype``, as a peer sends it."""
    return {"type": mtype, **sample(schema.MESSAGES[mtype][0])}


def fields(kind: Kind, path: str = "") -> Iterator[tuple[str, Kind]]:
    """(path, kind) of every field under ``kind`` as ``sample`` fills it (a list's first
    item, a map's first key)."""
    if isinstance(kind, Obj):
        for f in kind.fields:
            p = f"{path}.{f.name}" if path else f.name
            yield p, f.kind
            yield from fields(f.kind, p)
    elif isinstance(kind, List):
        yield from fields(kind.item, f"{path}[0]")
    elif isinstance(kind, Map):
        key = kind.keys.values[0]
        yield from fields(kind.value, f"{path}.{key}")


def all_fields() -> list[tuple[str, str, Kind]]:
    """(message type, path, kind) of every field of every message."""
    return [(m, p, k) for m, (obj, _) in schema.MESSAGES.items() for p, k in fields(obj)]


def _steps(path: str) -> list[str | int]:
    out: list[str | int] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        if name:
            out.append(name)
        if rest:
            out.append(int(rest.rstrip("]")))
    return out


def get(msg: Any, path: str) -> Any:
    for step in _steps(path):
        msg = msg[step]
    return msg


def replaced(msg: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``msg`` with the field at ``path`` set to ``value``."""
    out = copy.deepcopy(msg)
    *head, last = _steps(path)
    get_parent = out
    for step in head:
        get_parent = get_parent[step]
    get_parent[last] = value
    return out


def deleted(msg: dict[str, Any], path: str) -> dict[str, Any]:
    out = copy.deepcopy(msg)
    *head, last = _steps(path)
    parent = out
    for step in head:
        parent = parent[step]
    del parent[last]
    return out


def bad_values(kind: Kind) -> list[tuple[Any, str]]:
    """Values that break ``kind``'s rule, each with the path suffix its error names ("" for
    the field itself, ``[0]`` or ``.KEY`` below it)."""
    out: list[tuple[Any, str]] = []
    if isinstance(kind, Int):
        out += [(v, "") for v in WRONG_TYPES if type(v) is not int]
        choices = getattr(kind.parser, "choices", None)
        if choices:
            out += [(v, "") for v in (0, -1, choices[0] + 1, choices[-1] * 2, 1 << 70)]
        else:
            lo, hi = kind.parser.bounds  # type: ignore[attr-defined]
            out += [(float(lo), ""), (lo - 1, ""), (-(1 << 70), "")]
            if hi is not None:
                out += [(hi + 1, ""), (hi + (1 << 70), "")]
    elif isinstance(kind, Seconds):
        out += [(v, "") for v in (None, True, "1", [], {}, 0, -1, 0.0, 1e-308, 1e300,
                                  options.MAX_SECONDS + 1)]
    elif isinstance(kind, Choice):
        out += [(v, "") for v in (None, 1, True, [], {}, "", "zz", kind.values[0].upper() + "!")]
    elif isinstance(kind, Const):
        out += [(v, "") for v in ("roce-emulate/2", None, 3, "")]
    elif isinstance(kind, Text):
        out += [(v, "") for v in (None, 1, True, [], {})]
        out += [("x" * (kind.longest + 1), "")]
        out += [(v, "") for v in TEXT_BAD[kind.parser]]
    elif isinstance(kind, Bool):
        out += [(v, "") for v in (None, 0, 1, "no", "yes", "true", [], {}, 1.0)]
    elif isinstance(kind, Obj):
        out += [(v, "") for v in (None, [], "x", 1, True)]
    elif isinstance(kind, List):
        out += [(v, "") for v in (None, {}, "x", 1, [])]
        if isinstance(kind.item, Obj):
            out += [([5], "[0]"), (["x"], "[0]")]
    elif isinstance(kind, Map):
        out += [(v, "") for v in (None, [], "x", 1, {"zz": 1}, {"": 1})]
        key = kind.keys.values[0]
        out += [({key: v}, f".{key}") for v, _ in bad_values(kind.value)[:4]]
    return out


# -- hypothesis --------------------------------------------------------------------------------


def valid(kind: Kind) -> st.SearchStrategy[Any]:
    """Any value ``kind`` takes (field by field: cross-field rules are the runner's)."""
    if isinstance(kind, Int):
        choices = getattr(kind.parser, "choices", None)
        if choices:
            return st.sampled_from(choices)
        lo, hi = kind.parser.bounds  # type: ignore[attr-defined]
        return st.integers(lo, hi)
    if isinstance(kind, Seconds):
        return st.floats(options.MIN_POSITIVE_SECONDS, float(options.MAX_SECONDS))
    if isinstance(kind, Choice):
        return st.sampled_from(kind.values)
    if isinstance(kind, Const):
        return st.just(kind.value)
    if isinstance(kind, Text):
        if kind.parser is None:
            return st.text(max_size=kind.longest)
        return st.sampled_from(TEXT_SAMPLES[kind.parser])
    if isinstance(kind, Bool):
        return st.booleans()
    if isinstance(kind, Obj):
        return st.fixed_dictionaries({f.name: valid(f.kind) for f in kind.fields})
    if isinstance(kind, List):
        return st.lists(valid(kind.item), min_size=kind.lo, max_size=min(kind.hi, 3))
    if isinstance(kind, Map):
        return st.dictionaries(st.sampled_from(kind.keys.values), valid(kind.value),
                               max_size=3)
    raise AssertionError(kind)


@st.composite
def field_mutation(draw: st.DrawFn, msg: dict[str, Any],
                   mtype: str) -> tuple[dict[str, Any], str]:
    """``msg`` with one field broken: (the message, the path its error names)."""
    obj = schema.MESSAGES[mtype][0]
    paths = [(p, k) for p, k in fields(obj) if _present(msg, p)]
    kinds = dict(paths)
    how = draw(st.sampled_from(["value", "value", "value", "missing", "unknown"]))
    if how == "missing":
        # a map's entries are optional: only an object's fields can be missing
        required = [p for p, _ in paths if not isinstance(kinds.get(_parent(p)), Map)]
        path = draw(st.sampled_from(required))
        return deleted(msg, path), path
    path, kind = draw(st.sampled_from(paths))
    if how == "unknown":
        parents = [""] + [p for p, k in paths if isinstance(k, Obj)]
        parent = draw(st.sampled_from(parents))
        target = get(msg, parent) if parent else msg
        out = copy.deepcopy(msg)
        (get(out, parent) if parent else out)["zz_unknown"] = 1
        assert isinstance(target, dict)
        return out, parent
    value, suffix = draw(st.sampled_from(bad_values(kind)))
    return replaced(msg, path, value), path + suffix


def _parent(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else ""


def _present(msg: Any, path: str) -> bool:
    try:
        get(msg, path)
    except (KeyError, IndexError, TypeError):
        return False
    return True


def line(msg: Any) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


# whole lines that break the protocol before any field is looked at
RAW_BAD: list[bytes] = [
    b"[" * 100_000 + b"]" * 100_000 + b"\n",
    b'{"type":"hello","a":' + b"[" * 5000 + b"]" * 5000 + b"}\n",
    b"not json\n",
    b"\xff\xfe{}\n",
    b"[]\n",
    b"5\n",
    b'"hello"\n',
    b"null\n",
    b'{"type":"nope"}\n',
    b'{"type":5}\n',
    b"{}\n",
    b'{"type":"hello","type":"hello"}\n',
    b'{"type":"done","posted":NaN,"completed":{},"finished":true}\n',
    b'{"type":"done","posted":1e999,"completed":{},"finished":true}\n',
    b'{"type":"done","posted":-Infinity,"completed":{},"finished":true}\n',
    b'{"type":"done","posted":' + b"9" * 5000 + b',"completed":{},"finished":true}\n',
    b"{\n",
    b'{"type":"error","message":"\\ud800"\n',
    b"\n",
]
