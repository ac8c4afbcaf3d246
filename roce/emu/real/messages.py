"""The out-of-band protocol of ``roce emulate --listen/--connect``: every message and field.

``MESSAGES`` is the protocol, written once: each message type, its fields in order, and each
field's type and bounds.  The bounds are the option types of ``roce.options`` (a PSN is
``parse_psn``, a path MTU ``parse_mtu``, a time limit ``parse_positive_seconds``), so a value
the command line refuses the protocol refuses too.  ``decode`` turns one line from a peer
into a checked message; ``build`` makes an outgoing message through the same table, so no
field is written twice and nothing is sent that a peer would refuse; ``table`` renders the
protocol for the guide (docs/guide/real-links.md, which a test holds to it).

A peer's line is untrusted input.  It is at most ``MAX_LINE`` bytes (``roce.emu.real.oob``
stops reading there), UTF-8, nested no deeper than the deepest message and one level more
(counted before the JSON parser recurses), with no NaN or Infinity, no key twice, no number
longer than ``MAX_DIGITS`` characters; a boolean is ``true``/``false``, an integer is neither
a float (``1e10``) nor a boolean; every field the message declares is there and no other.
What breaks a rule is refused whole with a ``PeerMessageError`` naming the message and the
field (``peer hello: field "scenario.mtu": 0 is not one of 256, 512, 1024, 2048, 4096``);
values in that sentence are JSON with everything outside printable ASCII escaped, and free
text a peer sends (an ``error`` message) is shown through ``printable``, so no escape sequence
of the peer's reaches a terminal.

What no single field can say -- a QP list as long as the scenario's ``qps``, a path MTU no
larger than offered, a request that fits this host's memory and the run's time limit -- the
runner checks before it allocates anything (``roce.emu.real.remote``), raising the same error.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from roce import options
from roce.emu.budget import MAX_QPNS
from roce.emu.core.constants import WCStatus
from roce.emu.core.recovery import LOSS_RULES, MODES
from roce.emu.scenario import MAX_MESSAGE, OPS, QP_TYPES
from roce.errors import PeerMessageError
from roce.headers import nak_name

# 3: the protocol has a schema: every field typed and required, no others; the result's
# summary is the listener's claim, a fixed set of counters (a version-2 peer sent its whole
# summary, which this side would refuse field by field: refused by version instead); 4: the
# seeded data are splitmix64 streams (roce.emu.core.payload), where a version-3 peer made
# SHAKE-128 output: its data would not check out here, so it is refused by version
PROTOCOL = "roce-emulate/4"
MAX_LINE = 1 << 20  # bytes of one message; the hello of a few thousand QPs fits
MAX_TEXT = 1000  # characters of free text (an error message, why data did not check out)
MAX_DIGITS = 40  # digits of a JSON number: more than any field's bound spells
SHOWN = 60  # characters of a refused value quoted in an error


# -- showing what a peer sent -------------------------------------------------------------------


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` safe for a terminal: every character that is not printable (C0 and C1
    controls, ESC, CR, DEL, surrogates, format and separator characters but the space) as a
    ``\\xNN`` / ``\\uNNNN`` escape, cut to ``limit`` characters."""
    out = []
    for ch in text[:limit]:
        if ch.isprintable():
            out.append(ch)
        else:
            n = ord(ch)
            out.append(f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else
                       f"\\U{n:08x}")
    return "".join(out) + ("..." if len(text) > limit else "")


def show(value: Any) -> str:
    """A value a peer sent, as JSON in printable ASCII, cut short."""
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (TypeError, ValueError):  # not from JSON: only our own callers get here
        text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


# -- the kinds of field ---------------------------------------------------------------------


class Refused(Exception):
    """A value that breaks its field's rule: ``path`` names the field, ``why`` says how."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(why)
        self.path = path
        self.why = why


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_int(v: Any) -> bool:
    return type(v) is int  # not bool, not a float however integral


class Kind:
    """What one field holds.  ``check`` returns the value as the run uses it (normalised:
    an address in its normal form) or raises ``Refused``; ``depth`` is how many levels of
    objects and lists it nests; ``describe`` says it for the guide."""

    depth = 0

    def check(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def _option(parser: Callable[[str], Any], text: str, path: str) -> Any:
    try:
        return parser(text)
    except argparse.ArgumentTypeError as e:
        raise Refused(path, str(e)) from None


def _span(parser: Callable[[str], Any]) -> str:
    choices = getattr(parser, "choices", None)
    if choices is not None:
        return "one of " + ", ".join(map(str, choices))
    lo, hi = parser.bounds  # type: ignore[attr-defined]
    return f"{lo}..{hi}" if hi is not None and hi < 1 << 16 else f"{lo}..{_power(hi)}"


def _power(n: int | None) -> str:
    """``2^63-1`` rather than 19 digits, for the guide."""
    if n is None:
        return "any"
    for k in range(1, 129):
        if n == (1 << k) - 1:
            return f"2^{k}-1"
        if n == 1 << k:
            return f"2^{k}"
    return str(n)


@dataclass(frozen=True)
class Int(Kind):
    """A JSON integer, checked by an integer option type of ``roce.options``."""

    parser: Callable[[str], int]

    def check(self, value: Any, path: str) -> int:
        if not _is_int(value):
            raise Refused(path, f"{show(value)} is not an integer")
        return _option(self.parser, str(value), path)

    def describe(self) -> str:
        return f"integer, {_span(self.parser)}"


@dataclass(frozen=True)
class Seconds(Kind):
    """A JSON number of seconds, checked by a duration option type of ``roce.options``."""

    parser: Callable[[str], float]

    def check(self, value: Any, path: str) -> float:
        if not (_is_int(value) or type(value) is float):
            raise Refused(path, f"{show(value)} is not a number")
        return _option(self.parser, repr(value), path)

    def describe(self) -> str:
        return (f"number of seconds, {options.MIN_POSITIVE_SECONDS:g}.."
                f"{options.MAX_SECONDS}")


@dataclass(frozen=True)
class Choice(Kind):
    """One of a fixed set of strings."""

    values: tuple[str, ...]
    what: str = ""

    def check(self, value: Any, path: str) -> str:
        if type(value) is not str or value not in self.values:
            raise Refused(path, f"{show(value)} is not "
                          + (self.what or "one of " + ", ".join(self.values)))
        return value

    def describe(self) -> str:
        return self.what or "one of " + ", ".join(f"`{v}`" for v in self.values)


@dataclass(frozen=True)
class Const(Kind):
    """Exactly this string (the protocol's version)."""

    value: str

    def check(self, value: Any, path: str) -> str:
        if value != self.value:
            raise Refused(path, f"the peer speaks {show(value)}, this side {show(self.value)}")
        return self.value

    def describe(self) -> str:
        return f"`{self.value}`"


@dataclass(frozen=True)
class Text(Kind):
    """A string, checked by an option type of ``roce.options`` (an address) or free text
    (``parser`` None) that is only ever shown through ``printable``."""

    parser: Callable[[str], str] | None = None
    longest: int = MAX_TEXT
    what: str = "text"

    def check(self, value: Any, path: str) -> str:
        if type(value) is not str:
            raise Refused(path, f"{show(value)} is not a string")
        if len(value) > self.longest:
            raise Refused(path, f"{show(value)} is longer than {self.longest} characters")
        return value if self.parser is None else _option(self.parser, value, path)

    def describe(self) -> str:
        return f"{self.what}, at most {self.longest} characters"


@dataclass(frozen=True)
class Bool(Kind):
    """``true`` or ``false``: nothing else is a verdict."""

    def check(self, value: Any, path: str) -> bool:
        if type(value) is not bool:
            raise Refused(path, f"{show(value)} is not true or false")
        return value

    def describe(self) -> str:
        return "`true` or `false`"


@dataclass(frozen=True)
class Field:
    """One field of an out-of-band message: its name, kind and meaning."""

    name: str
    kind: Kind
    doc: str


@dataclass(frozen=True)
class Obj(Kind):
    """A JSON object with exactly these fields, in this order (``name``: an object the
    guide shows once, as its own table)."""

    fields: tuple[Field, ...]
    name: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def depth(self) -> int:  # type: ignore[override]
        return 1 + max((f.kind.depth for f in self.fields), default=0)

    def check(self, value: Any, path: str, allowed: Iterable[str] = ()) -> dict[str, Any]:
        if type(value) is not dict:
            raise Refused(path, f"{show(value)} is not an object")
        out = {}
        for f in self.fields:  # in order: a version mismatch is told first
            where = _join(path, f.name)
            if f.name not in value:
                raise Refused(where, "missing")
            out[f.name] = f.kind.check(value[f.name], where)
        known = set(self.names) | set(allowed)
        for key in value:
            if key not in known:
                raise Refused(path, f"unknown field {show(key)}")
        return out

    def describe(self) -> str:
        return f"object: {self.name}" if self.name else "object"


@dataclass(frozen=True)
class List(Kind):
    """A JSON array of ``lo``..``hi`` items of one kind."""

    item: Kind
    lo: int
    hi: int

    @property
    def depth(self) -> int:  # type: ignore[override]
        return 1 + self.item.depth

    def check(self, value: Any, path: str) -> list[Any]:
        if type(value) is not list:
            raise Refused(path, f"{show(value)} is not a list")
        if not self.lo <= len(value) <= self.hi:
            raise Refused(path, f"{len(value)} entries, not {self.lo}..{self.hi}")
        return [self.item.check(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def describe(self) -> str:
        return f"list of {self.lo}..{_power(self.hi)}: {self.item.describe()}"


@dataclass(frozen=True)
class Map(Kind):
    """A JSON object from names of one set (``keys``) to values of one kind: counters by
    kind."""

    keys: Choice
    value: Kind

    @property
    def depth(self) -> int:  # type: ignore[override]
        return 1 + self.value.depth

    def check(self, value: Any, path: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise Refused(path, f"{show(value)} is not an object")
        out = {}
        for k, v in value.items():
            key = self.keys.check(k, path)
            out[key] = self.value.check(v, _join(path, key))
        return out

    def describe(self) -> str:
        return f"object: {self.keys.describe()} -> {self.value.describe()}"


# -- the protocol ----------------------------------------------------------------------------

COUNT = Int(options.parse_count)
TIME_NS = Int(options.bounded_int(0, options.MAX_NS, "nanoseconds"))
WC_STATUS = Choice(tuple(s.name for s in WCStatus), "a work completion status (IBV_WC_*)")
NAK_NAMES = Choice(tuple(dict.fromkeys(nak_name(code) for code in range(32))),
                   "a NAK code's name")
MAX_QPS = MAX_QPNS  # QPs one side can number (24-bit QPNs from 0x11)

# what each side says of one of its queue pairs and the memory behind it (roce.emu.real.oob's
# QPInfo: a test holds the two to the same fields)
QP = Obj((
    Field("qpn", Int(options.parse_qpn), "the QP's number"),
    Field("psn", Int(options.parse_psn), "its first PSN"),
    Field("ip", Text(options.parse_unicast_ip_text, 45, "a unicast IPv4 or IPv6 address"),
          "its device's address"),
    Field("gid", Text(options.parse_gid, 45, "a GID (IPv6 form)"), "its GID"),
    Field("mac", Text(options.parse_mac, 17, "a MAC address"), "its device's MAC"),
    Field("rkey", Int(options.parse_key), "the rkey of its memory region"),
    Field("va", Int(options.parse_address), "the region's first address"),
    Field("size", Int(options.unsigned(64, "a region's length")), "the region's length; "
          "va + size fits in 64 bits and covers the plan's slots"),
    Field("mtu", Int(options.parse_mtu), "the path MTU it was offered"),
    Field("qp_type", Choice(tuple(QP_TYPES)), "the QP's type, the scenario's"),
    Field("qkey", Int(options.parse_key), "UD: the Q_Key its receives take"),
), "QP")

# what both ends run: the workload's fields (``roce.emu.scenario.Workload``) and the run's time
# limit (``remote.scenario_fields`` makes it; a test holds the three together); each field has
# the type and bounds of the option that sets it
SCENARIO = Obj((
    Field("op", Choice(OPS), "`--op`"),
    Field("size", Int(options.size_at_most(MAX_MESSAGE, "a message size")), "`--size`"),
    Field("count", COUNT, "`--count`"),
    Field("mtu", Int(options.parse_mtu), "`--mtu`"),
    Field("qps", Int(options.parse_positive), "`--qps`"),
    Field("depth", Int(options.parse_positive), "`--depth`"),
    Field("seed", Int(options.parse_seed), "`--seed`"),
    Field("psn", Int(options.parse_psn), "`--psn`"),
    Field("timeout", Int(options.parse_timeout), "`--timeout`"),
    Field("retry_cnt", Int(options.parse_retry), "`--retry-cnt`"),
    Field("rnr_retry", Int(options.parse_retry), "`--rnr-retry`"),
    Field("qp_type", Choice(tuple(QP_TYPES)), "`--qp-type`"),
    Field("recovery", Choice(MODES), "`--recovery`"),
    Field("loss_rule", Choice(LOSS_RULES), "`--loss-rule`"),
    Field("time_limit_s", Seconds(options.parse_positive_seconds), "`--time-limit`"),
))

# what the listener says of its side of the run: its claim, shown as such (the connector
# verifies its own memory; it cannot see the listener's)
CLAIM = Obj((
    Field("messages", COUNT, "messages it executed (RC, UC) or received (UD)"),
    Field("bytes", Int(options.unsigned(64, "a byte count")), "their bytes"),
    Field("completed", Map(WC_STATUS, COUNT), "its receive completions by status"),
    Field("naks_sent", Map(NAK_NAMES, COUNT), "NAKs it sent, by code"),
    Field("rnr_naks_sent", COUNT, "RNR NAKs it sent"),
    Field("duplicates", COUNT, "duplicate requests it received"),
    Field("frames_received", COUNT, "frames its transport received"),
    Field("packets", COUNT, "packets it sent"),
    Field("retransmitted", COUNT, "packets it sent again"),
    Field("icrc_drops", COUNT, "frames it dropped for a bad ICRC"),
    Field("spurious_retransmissions", COUNT, "requests it had already (selective repeat)"),
    Field("ooo_accepted", COUNT, "requests it took out of order"),
    Field("selective_naks", COUNT, "selective NAKs it sent"),
    Field("wall_ns", TIME_NS, "its wall time"),
    Field("finished", Bool(), "every message arrived before its time limit"),
    Field("unverified", Text(), "why its data did not check out (\"\" if it did)"),
), "claim")

MESSAGES: dict[str, tuple[Obj, str]] = {
    "hello": (Obj((
        Field("protocol", Const(PROTOCOL), "the protocol's version"),
        Field("scenario", SCENARIO, "the run both ends replay"),
        Field("qps", List(QP, 1, MAX_QPS), "the connector's QPs, `scenario.qps` of them"),
        Field("max_mtu", Int(options.parse_mtu), "the largest path MTU its link carries"),
    )), "connector -> listener, first"),
    "params": (Obj((
        Field("mtu", Int(options.parse_mtu), "the path MTU: at most the hello's `mtu` and "
              "`max_mtu`"),
        Field("qps", List(QP, 1, MAX_QPS), "the listener's QPs, one per connector QP"),
    )), "listener -> connector, its QPs up"),
    "done": (Obj((
        Field("posted", COUNT, "work requests the connector posted"),
        Field("completed", Map(WC_STATUS, COUNT), "its completions by status"),
        Field("finished", Bool(), "all completed before its time limit"),
    )), "connector -> listener, every work request completed (or the time ran out)"),
    "result": (Obj((
        Field("verified", Bool(), "the listener's memory and receives checked out"),
        Field("summary", CLAIM, "the listener's counters"),
    )), "listener -> connector, last"),
    "error": (Obj((
        Field("message", Text(), "why the sender gives up; shown escaped"),
    )), "either way, instead of any other: the sender gives up"),
}
TYPES = tuple(MESSAGES)
# the deepest message, and one level more: a scalar sent as a list or an object is still
# refused by the name of its field
MAX_DEPTH = max(obj.depth for obj, _ in MESSAGES.values()) + 1


# -- decoding a line, building a message ---------------------------------------------------------


def _refuse(mtype: str, path: str, why: str) -> PeerMessageError:
    return PeerMessageError(mtype, path, why)


# a string, or what is left of an unterminated one: possessive, so each character is
# looked at once (a line of 10^6 escaped quotes must not cost 10^12 steps)
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting(text: str) -> int:
    """How deep ``text`` nests arrays and objects, strings skipped: counted without the
    recursion the JSON parser would need (a line of 10^5 brackets would blow its stack)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _number(text: str) -> float:
    if len(text) > MAX_DIGITS:
        raise ValueError(f"a number of {len(text)} characters")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is not a finite number")
    return value


def _integer(text: str) -> int:
    if len(text) > MAX_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {show(k)} twice")
        out[k] = v
    return out


def parse(line: bytes) -> Any:
    """One line as JSON, within the limits above; ``PeerMessageError`` otherwise."""
    if len(line) > MAX_LINE:
        raise _refuse("message", "", f"longer than {MAX_LINE} bytes")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _refuse("message", "", f"not UTF-8 (byte {e.start})") from None
    depth = nesting(text)
    if depth > MAX_DEPTH:
        raise _refuse("message", "", f"nested {depth} levels deep, more than the protocol's "
                      f"{MAX_DEPTH}")
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_number,
                          parse_int=_integer, object_pairs_hook=_pairs)
    except ValueError as e:  # json.JSONDecodeError too; its text is ASCII we wrote
        raise _refuse("message", "", f"not JSON: {printable(str(e), 200)}: "
                      f"{show(text)}") from None


def check(obj: Any) -> dict[str, Any]:
    """A parsed message, checked against its type's schema: the message with every value as
    the run uses it, or ``PeerMessageError``."""
    if type(obj) is not dict:
        raise _refuse("message", "", f"{show(obj)} is not an object")
    mtype = obj.get("type")
    if type(mtype) is not str or mtype not in MESSAGES:
        raise _refuse("message", "type", f"{show(mtype)} is not one of {', '.join(TYPES)}")
    try:
        fields = MESSAGES[mtype][0].check(obj, "", allowed=("type",))
    except Refused as e:
        raise _refuse(mtype, e.path, e.why) from None
    return {"type": mtype, **fields}


def decode(line: bytes) -> dict[str, Any]:
    """A peer's line (without its newline) as a checked message."""
    return check(parse(line))


def build(mtype: str, **values: Any) -> dict[str, Any]:
    """An outgoing message of type ``mtype`` from its fields' values (the protocol's
    version filled in), checked as a peer will check it: a field missing, unknown or out of
    bounds here is a bug on this side (``ValueError``)."""
    obj = MESSAGES[mtype][0]
    for f in obj.fields:
        if isinstance(f.kind, Const):
            values.setdefault(f.name, f.kind.value)
    try:
        fields = obj.check(values, "")
    except Refused as e:
        raise ValueError(f"our {mtype}: {_where(e.path)}{e.why}") from None
    return {"type": mtype, **fields}


def _where(path: str) -> str:
    return f'field "{path}": ' if path else ""


def pick(obj: Obj, values: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``obj`` out of a larger dict (a summary's ``as_dict``)."""
    return {name: values[name] for name in obj.names}


# -- the guide's table --------------------------------------------------------------------------


def _rows(obj: Obj, prefix: str, named: list[Obj]) -> list[str]:
    rows = []
    for f in obj.fields:
        kind = f.kind
        inner = kind.item if isinstance(kind, List) else kind
        rows.append(f"| `{prefix}{f.name}` | {kind.describe()} | {f.doc} |")
        if isinstance(inner, Obj):
            if inner.name:
                if inner not in named:
                    named.append(inner)
            else:
                rows += _rows(inner, f"{prefix}{f.name}.", named)
    return rows


def table() -> str:
    """The protocol as markdown: one table per message, then the named objects."""
    named: list[Obj] = []
    parts = []
    for mtype, (obj, doc) in MESSAGES.items():
        parts.append(f"`{mtype}` ({doc}):\n\n| field | type and bounds | meaning |\n"
                     "|---|---|---|\n" + "\n".join(_rows(obj, "", named)))
    for obj in named:
        parts.append(f"{obj.name}:\n\n| field | type and bounds | meaning |\n|---|---|---|\n"
                     + "\n".join(_rows(obj, "", named)))
    return "\n\n".join(parts)


__all__ = ["CLAIM", "MAX_DEPTH", "MAX_LINE", "MAX_TEXT", "MESSAGES", "PROTOCOL", "QP", "SCENARIO",
           "TYPES", "Refused", "build", "check", "decode", "nesting", "parse", "pick",
           "printable", "show", "table"]
