"""Wireshark-style display filters over a dissected packet's flat field dict.

The dissector turns every packet into a flat mapping such as
``{"ip.src": "10.0.0.1", "bth.opcode": 10, "reth.va": 4096, ...}``; the CLI's
``-Y EXPR`` option selects packets with an expression written in (a subset of)
Wireshark's display-filter language, e.g. ``bth.opcode == 0x11 and aeth.syndrome >= 0x60``.

:func:`compile_filter` parses the expression once into a tree of small closures, so a
capture is filtered at a few hundred nanoseconds per packet rather than re-reading the
text for each one.  Every problem with the expression is reported as a
:class:`FilterError` carrying the 0-based character offset of the offending token; a
compiled filter never raises, whatever the packet holds.

Grammar (lowest precedence first)::

    expr    := and_expr (("or" | "||") and_expr)*
    and_expr:= not_expr (("and" | "&&") not_expr)*
    not_expr:= ("not" | "!") not_expr | "(" expr ")" | test
    test    := FIELD                          presence of a field or protocol
             | MACRO                          a named sub-expression
             | FIELD OP value                 == != === ~= < <= > >=
                                              eq ne all_eq any_ne lt le gt ge any_eq all_ne
             | FIELD "contains" value
             | FIELD ["not"] "in" "{" elem ([","] elem)* "}"      elem := value [".." value]
    value   := 123 | -5 | 0x1f | 0b101 | 1.5 | true | false | "string" | bare_name
             | 10.0.0.1 | 10.0.0.0/24 | fe80::1 | fe80::/64 | aa:bb:cc:dd:ee:ff | 01:02:03
"""

from __future__ import annotations

import ipaddress
import operator
import re
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Final, NoReturn, TypeAlias

from roce.errors import FilterError
from roce.options import mac_bytes, read_int

__all__ = ["FieldType", "FilterError", "compile_filter"]

Predicate: TypeAlias = Callable[[Mapping[str, object]], bool]
_Handler: TypeAlias = Callable[[object], bool]
_Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

# Deep nesting would otherwise surface as RecursionError (in the parser or in the closure
# tree); no real filter comes anywhere near this.
_MAX_DEPTH: Final = 100


# ----------------------------------------------------------------------- field types


@dataclass(frozen=True, slots=True)
class FieldType:
    """What a field holds, so that a comparison that cannot mean anything is refused when
    the filter is compiled, as Wireshark refuses it (``ip.src == 5``, ``bth.psn contains
    1``), instead of silently matching nothing.

    ``kind`` is ``"uint"`` (``bits`` wide), ``"bool"``, ``"ipv4"``, ``"ipv6"`` or ``"mac"``.
    """

    kind: str
    bits: int = 0


_KIND_NAMES: Final = {"uint": "an unsigned integer", "bool": "a boolean",
                      "ipv4": "an IPv4 address", "ipv6": "an IPv6 address",
                      "mac": "an Ethernet address"}


# --------------------------------------------------------------------------- errors


# ------------------------------------------------------------------------- tokenizer

_WORD = "word"
_STRING = "string"
_OP = "comparison"
_AND = "and"
_OR = "or"
_NOT = "not"
_IN = "in"
_CONTAINS = "contains"
_LPAREN = "("
_RPAREN = ")"
_LBRACE = "{"
_RBRACE = "}"
_COMMA = ","
_RANGE = ".."
_EOF = "end"
_ERROR = "error"


@dataclass(frozen=True, slots=True)
class _Token:
    """One token of a display filter, with where it starts."""

    kind: str
    text: str
    pos: int
    value: object = None  # canonical operator, decoded string, or the pending FilterError


# Longest spellings first so that "===" is not read as "==" followed by "=".
_SYMBOLS: Final[tuple[tuple[str, str, str | None], ...]] = (
    ("===", _OP, "==="),
    ("!==", _OP, "!="),
    ("==", _OP, "=="),
    ("!=", _OP, "!="),
    ("~=", _OP, "~="),
    ("<=", _OP, "<="),
    (">=", _OP, ">="),
    ("&&", _AND, None),
    ("||", _OR, None),
    ("..", _RANGE, None),
    ("<", _OP, "<"),
    (">", _OP, ">"),
    ("!", _NOT, None),
    ("(", _LPAREN, None),
    (")", _RPAREN, None),
    ("{", _LBRACE, None),
    ("}", _RBRACE, None),
    (",", _COMMA, None),
)

_KEYWORDS: Final[dict[str, tuple[str, str | None]]] = {
    "and": (_AND, None),
    "or": (_OR, None),
    "not": (_NOT, None),
    "in": (_IN, None),
    "contains": (_CONTAINS, None),
    "eq": (_OP, "=="),
    "any_eq": (_OP, "=="),
    "ne": (_OP, "!="),
    "all_ne": (_OP, "!="),
    "all_eq": (_OP, "==="),
    "any_ne": (_OP, "~="),
    "lt": (_OP, "<"),
    "le": (_OP, "<="),
    "gt": (_OP, ">"),
    "ge": (_OP, ">="),
}

# One run of these is a field name or an unquoted value (number, address, MAC, bytes,
# name); which one is decided by the parser from its position.
_WORD_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:/"
)

_HINTS: Final = {"=": ' (use "==")', "&": ' (use "&&" or "and")', "|": ' (use "||" or "or")'}

_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "'": "'",
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_OCT_DIGITS: Final = frozenset("01234567")


def _scan_string(text: str, start: int) -> tuple[str, int]:
    """Decode the string literal whose opening quote is at ``start``; return it and its end."""
    out: list[str] = []
    i = start + 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = text[i + 1 : i + 2]
        if not esc:
            break
        if esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
        elif esc in ("x", "u"):
            width = 2 if esc == "x" else 4
            digits = text[i + 2 : i + 2 + width]
            if len(digits) != width or not all(c in _HEX_DIGITS for c in digits):
                raise FilterError(f"bad \\{esc} escape in string", text, i)
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif esc in _OCT_DIGITS:
            j = i + 1
            while j < n and j < i + 4 and text[j] in _OCT_DIGITS:
                j += 1
            code = int(text[i + 1 : j], 8)
            if code > 0xFF:
                raise FilterError("octal escape out of range in string", text, i)
            out.append(chr(code))
            i = j
        else:
            raise FilterError(f"unknown escape \\{esc} in string", text, i)
    raise FilterError("unterminated string", text, start)


def _tokenize(text: str) -> list[_Token]:
    """Split ``text`` into tokens.

    A lexical error does not raise here: it becomes a final ``_ERROR`` token, so that the
    parser reports whichever problem comes first in reading order.
    """
    tokens: list[_Token] = []
    i = 0
    n = len(text)
    try:
        while i < n:
            ch = text[i]
            if ch.isspace():
                i += 1
                continue
            if ch == '"':
                value, end = _scan_string(text, i)
                tokens.append(_Token(_STRING, text[i:end], i, value))
                i = end
                continue
            for sym, kind, op in _SYMBOLS:
                if text.startswith(sym, i):
                    tokens.append(_Token(kind, sym, i, op))
                    i += len(sym)
                    break
            else:
                if ch not in _WORD_CHARS:
                    raise FilterError(f"unexpected character {ch!r}{_HINTS.get(ch, '')}", text, i)
                start = i
                # ".." always ends a word: it is the range operator inside sets and never
                # part of a field name, number or address.
                while i < n and text[i] in _WORD_CHARS and not text.startswith("..", i):
                    i += 1
                word = text[start:i]
                kind, op = _KEYWORDS.get(word.lower(), (_WORD, None))
                tokens.append(_Token(kind, word, start, op))
    except FilterError as exc:
        tokens.append(_Token(_ERROR, "", exc.position, exc))
        return tokens
    tokens.append(_Token(_EOF, "", n))
    return tokens


# -------------------------------------------------------------------------- literals


@dataclass(frozen=True, slots=True)
class _Literal:
    """A parsed value with every interpretation it admits.

    Unquoted text such as ``01:02:03:04:05:06`` could be a MAC, a byte string or part of
    an IPv6 address; rather than guess at compile time, each reading is kept and the
    one matching the field value's type is used when the filter runs.
    """

    text: str  # decoded string contents, or the source spelling of an unquoted value
    pos: int
    quoted: bool = False
    num: int | float | None = None
    boolean: bool | None = None
    addr: _Address | None = None
    net: _Network | None = None
    mac: bytes | None = None
    raw: bytes | None = None  # reading for bytes-valued fields
    string: str | None = None  # reading for str-valued fields
    name_like: bool = False  # may be a symbolic name for the resolve() hook


_INT_RE: Final = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)")
_FLOAT_RE: Final = re.compile(r"-?[0-9]+\.[0-9]+")
_IPV4_RE: Final = re.compile(r"[0-9]+(?:\.[0-9]+){3}")
_IPV4_NET_RE: Final = re.compile(r"[0-9]+(?:\.[0-9]+){3}/[0-9]+")
_BYTES_RE: Final = re.compile(r"[0-9A-Fa-f]{1,2}([:-])[0-9A-Fa-f]{1,2}(?:\1[0-9A-Fa-f]{1,2})*")
_IDENT_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def _is_identifier(text: str) -> bool:
    return _IDENT_RE.fullmatch(text) is not None and not text.endswith(".")


def _split_bytes(text: str, sep: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(sep))


def _parse_ip(text: str) -> _Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def _ip_key(text: str) -> tuple[int, int] | None:
    # Packets repeat the same few addresses, so caching (version, integer) keys makes an
    # address comparison on a str-valued field cost little more than string equality;
    # ipaddress objects themselves compare in pure Python and are several times slower.
    addr = _parse_ip(text)
    return None if addr is None else (addr.version, int(addr))


def _addr_key(addr: _Address) -> tuple[int, int]:
    return addr.version, int(addr)


def _parse_mac(text: str) -> bytes | None:
    try:
        return mac_bytes(text)  # cached: packets repeat the same few addresses
    except (ValueError, TypeError, AttributeError):
        return None


def _word_literal(text: str, pos: int, expr: str) -> _Literal:
    """Interpret an unquoted value token."""
    low = text.lower()
    if low in ("true", "false"):
        return _Literal(text, pos, boolean=low == "true", string=text)
    if _INT_RE.fullmatch(text):
        try:
            return _Literal(text, pos, num=read_int(text))
        except ValueError:  # more decimal digits than int() accepts
            raise FilterError(f"bad number {_show(text)}", expr, pos) from None
    if _IPV4_RE.fullmatch(text):
        try:
            addr = ipaddress.IPv4Address(text)
        except ValueError:
            raise FilterError(f"invalid IPv4 address {_show(text)}", expr, pos) from None
        return _Literal(text, pos, addr=addr, raw=addr.packed, string=text)
    if _IPV4_NET_RE.fullmatch(text):
        try:
            net4 = ipaddress.IPv4Network(text, strict=False)
        except ValueError:
            raise FilterError(f"invalid IPv4 network {_show(text)}", expr, pos) from None
        return _Literal(text, pos, net=net4, string=text)
    if _FLOAT_RE.fullmatch(text):
        return _Literal(text, pos, num=float(text))

    raw: bytes | None = None
    mac: bytes | None = None
    addr6: _Address | None = None
    net6: _Network | None = None
    match = _BYTES_RE.fullmatch(text)
    if match is not None:
        raw = _split_bytes(text, match.group(1))
    mac = _parse_mac(text)
    if ":" in text:
        try:
            if "/" in text:
                net6 = ipaddress.ip_network(text, strict=False)
            else:
                addr6 = ipaddress.ip_address(text)
        except ValueError:
            pass
    if raw is None and addr6 is not None:
        raw = addr6.packed
    if raw is not None or mac is not None or addr6 is not None or net6 is not None:
        return _Literal(text, pos, addr=addr6, net=net6, mac=mac, raw=raw, string=text)

    if _is_identifier(text):
        # Unquoted names (e.g. an opcode name) are accepted like Wireshark does.
        return _Literal(text, pos, string=text, name_like=True)
    if text[:1].isdigit() or (text[:1] == "-" and text[1:2].isdigit()):
        raise FilterError(f"bad number {_show(text)}", expr, pos)
    raise FilterError(f"invalid value {_show(text)}", expr, pos)


def _quoted_literal(value: str, pos: int) -> _Literal:
    # A quoted address or MAC still compares as one, so "10.0.0.1" and 10.0.0.1 agree.
    addr = _parse_ip(value)
    mac = _parse_mac(value)
    raw = mac if mac is not None else value.encode("utf-8", "surrogatepass")
    return _Literal(
        value, pos, quoted=True, addr=addr, mac=mac, raw=raw, string=value, name_like=True
    )


def _show(text: str, limit: int = 40) -> str:
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f'"{text}"'


# ------------------------------------------------------------------ value comparison

_CMP: Final[dict[str, Callable[[object, object], bool]]] = {
    "==": operator.eq,
    "===": operator.eq,
    "!=": operator.ne,
    "~=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
# Operators that must hold for every occurrence of a repeated field (Wireshark's "!="
# means all_ne, so "ip.addr != 10.0.0.1" excludes packets where either address matches).
_ALL_OPS: Final = frozenset({"===", "!="})
_EQUALITY_OPS: Final = frozenset({"==", "===", "!=", "~="})

_BYTES_TYPES: Final = (bytes, bytearray, memoryview)
_ADDRESS_TYPES: Final = (ipaddress.IPv4Address, ipaddress.IPv6Address)
# Order matters: bool before int because bool is an int subclass.
_BASE_TYPES: Final = (bool, int, float, str, bytes, bytearray, memoryview, *_ADDRESS_TYPES)


def _bool_key(lit: _Literal) -> int | None:
    if lit.boolean is not None:
        return int(lit.boolean)
    if lit.num.__class__ is int and lit.num in (0, 1):
        return int(lit.num)
    return None


def _net_test(net: _Network, op: str) -> Callable[[tuple[int, int]], bool]:
    """Membership of an address key in ``net`` for "==" (or non-membership for "!=")."""
    version = net.version
    first = int(net.network_address)
    last = int(net.broadcast_address)
    if op in ("==", "==="):
        return lambda key: key[0] == version and first <= key[1] <= last
    return lambda key: key[0] == version and not first <= key[1] <= last


def _str_handler(lit: _Literal, op: str) -> _Handler | None:
    cmp = _CMP[op]
    text = lit.string
    net = lit.net
    addr = lit.addr
    mac = lit.mac

    if net is not None:
        in_net = _net_test(net, op)

        def str_in_net(v: object) -> bool:
            key = _ip_key(v)  # type: ignore[arg-type]
            if key is None:
                return text is not None and cmp(v, text)
            return in_net(key)

        return str_in_net
    if addr is not None:
        version, number = _addr_key(addr)

        def str_vs_addr(v: object) -> bool:
            key = _ip_key(v)  # type: ignore[arg-type]
            if key is None:
                return text is not None and cmp(v, text)
            # Comparing IPv4 with IPv6 is a type mismatch, not an ordering.
            return key[0] == version and cmp(key[1], number)

        return str_vs_addr
    if mac is not None:

        def str_vs_mac(v: object) -> bool:
            m = _parse_mac(v)  # type: ignore[arg-type]
            if m is None:
                return text is not None and cmp(v, text)
            return cmp(m, mac)

        return str_vs_mac
    if text is not None:
        return lambda v: cmp(v, text)
    return None


def _handlers(lit: _Literal, op: str) -> dict[type, _Handler]:
    """Per value type, a test of one scalar field value against ``lit`` with ``op``.

    Types without an entry are a mismatch and make the comparison false.
    """
    cmp = _CMP[op]
    out: dict[type, _Handler] = {}
    num = lit.num
    if num is not None:

        def on_num(v: object) -> bool:
            return cmp(v, num)

        out[int] = out[float] = on_num
    bkey = _bool_key(lit)
    if bkey is not None:

        def on_bool(v: object) -> bool:
            return cmp(v, bkey)

        out[bool] = on_bool
    on_str = _str_handler(lit, op)
    if on_str is not None:
        out[str] = on_str
    if lit.net is not None:
        in_net = _net_test(lit.net, op)

        def addr_in_net(v: object) -> bool:
            return in_net(_addr_key(v))  # type: ignore[arg-type]

        out[ipaddress.IPv4Address] = out[ipaddress.IPv6Address] = addr_in_net
    elif lit.addr is not None:
        version, number = _addr_key(lit.addr)

        def addr_vs_addr(v: object) -> bool:
            key = _addr_key(v)  # type: ignore[arg-type]
            return key[0] == version and cmp(key[1], number)

        out[ipaddress.IPv4Address] = out[ipaddress.IPv6Address] = addr_vs_addr
    raw = lit.raw
    if raw is not None:

        def on_bytes(v: object) -> bool:
            # memoryview supports neither ordering nor comparison with every type.
            return cmp(bytes(v), raw)  # type: ignore[call-overload]

        out[bytes] = out[bytearray] = out[memoryview] = on_bytes
    return out


def _contains_handlers(lit: _Literal) -> dict[type, _Handler]:
    needle = lit.text
    if lit.quoted or lit.raw is None:
        bneedle = lit.text.encode("utf-8", "surrogatepass")
    else:
        bneedle = lit.raw

    def str_contains(v: object) -> bool:
        return needle in v  # type: ignore[operator]

    def bytes_contains(v: object) -> bool:
        return bneedle in bytes(v)  # type: ignore[call-overload]

    return {
        str: str_contains,
        bytes: bytes_contains,
        bytearray: bytes_contains,
        memoryview: bytes_contains,
    }


def _any_handler(handlers: list[_Handler]) -> _Handler:
    if len(handlers) == 1:
        return handlers[0]
    chain = tuple(handlers)

    def any_of(v: object) -> bool:
        for h in chain:
            if h(v):
                return True
        return False

    return any_of


def _range_handler(ge: _Handler, le: _Handler) -> _Handler:
    return lambda v: ge(v) and le(v)


def _negated_handler(h: _Handler) -> _Handler:
    return lambda v: not h(v)


def _set_handlers(
    elements: list[_Literal | tuple[_Literal, _Literal]],
) -> tuple[dict[type, _Handler], frozenset[int | float] | None]:
    """Handlers for set membership, plus the plain-number fast set when it is exact.

    The fast set is returned only when no range or other element can match a number,
    so that ``v in numbers`` alone decides for int values.
    """
    per_type: dict[type, list[_Handler]] = {}
    numbers: set[int | float] = set()
    for element in elements:
        if isinstance(element, tuple):
            lo, hi = element
            ge = _handlers(lo, ">=")
            le = _handlers(hi, "<=")
            for t in ge.keys() & le.keys():
                per_type.setdefault(t, []).append(_range_handler(ge[t], le[t]))
            continue
        for t, h in _handlers(element, "==").items():
            if t in (int, float) and element.num is not None:
                numbers.add(element.num)
            else:
                per_type.setdefault(t, []).append(h)
    out = {t: _any_handler(hs) for t, hs in per_type.items()}
    fast: frozenset[int | float] | None = None
    if numbers:
        fast = frozenset(numbers)
        for t in (int, float):
            extra = out.get(t)
            if extra is None:
                out[t] = fast.__contains__
            else:
                out[t] = _number_or(fast, extra)
        if int in per_type:
            fast = None
    return out, fast


def _number_or(numbers: frozenset[int | float], extra: _Handler) -> _Handler:
    return lambda v: v in numbers or extra(v)


# --------------------------------------------------------------------- closure tree


def _subclass_handler(handlers: dict[type, _Handler], v: object) -> _Handler | None:
    # Dissectors may hand out IntEnum or str subclasses; treat them as their base type.
    for base in _BASE_TYPES:
        if isinstance(v, base):
            return handlers.get(base)
    return None


def _value_test(handlers: dict[type, _Handler], every: bool) -> _Handler:
    """Test a raw field value, which may be missing (None) or a list of occurrences."""
    get = handlers.get

    def scalar(v: object) -> bool:
        h = get(v.__class__)
        if h is None:
            h = _subclass_handler(handlers, v)
            if h is None:
                return False
        return h(v)

    if every:

        def test_all(v: object) -> bool:
            if v is None:
                return False
            if isinstance(v, (list, tuple)):
                if not v:
                    return False
                for item in v:
                    if not scalar(item):
                        return False
                return True
            return scalar(v)

        return test_all

    def test_any(v: object) -> bool:
        if v is None:
            return False
        if isinstance(v, (list, tuple)):
            for item in v:
                if scalar(item):
                    return True
            return False
        return scalar(v)

    return test_any


def _leaf(name: str, test: _Handler) -> Predicate:
    return lambda pkt: test(pkt.get(name))


def _leaf_int_cmp(
    name: str, cmp: Callable[[object, object], bool], num: int, slow: _Handler
) -> Predicate:
    # Most RoCE fields are plain ints; skip the type dispatch for them.
    def leaf(pkt: Mapping[str, object]) -> bool:
        v = pkt.get(name)
        if v.__class__ is int:
            return cmp(v, num)
        return slow(v)

    return leaf


def _leaf_int_eq(name: str, num: int, slow: _Handler) -> Predicate:
    def leaf(pkt: Mapping[str, object]) -> bool:
        v = pkt.get(name)
        if v.__class__ is int:
            return v == num
        return slow(v)

    return leaf


def _leaf_int_in(
    name: str, numbers: frozenset[int | float], negate: bool, slow: _Handler
) -> Predicate:
    if negate:

        def leaf_not_in(pkt: Mapping[str, object]) -> bool:
            v = pkt.get(name)
            if v.__class__ is int:
                return v not in numbers
            return slow(v)

        return leaf_not_in

    def leaf_in(pkt: Mapping[str, object]) -> bool:
        v = pkt.get(name)
        if v.__class__ is int:
            return v in numbers
        return slow(v)

    return leaf_in


_ABSENT: Final = object()


def _presence(name: str) -> Predicate:
    prefix = name + "."
    needle = "\n" + prefix

    def exact_scan(pkt: Mapping[str, object]) -> bool:
        for key, value in pkt.items():
            if value is not None and isinstance(key, str) and key.startswith(prefix):
                return True
        return False

    def present(pkt: Mapping[str, object]) -> bool:
        if pkt.get(name) is not None:
            return True
        # A protocol name is present when any of its fields is (e.g. "reth" for "reth.va").
        # Searching the joined key names runs in C and is several times faster than
        # calling startswith on every key in a Python loop.
        try:
            joined = "\n" + "\n".join(pkt)
        except TypeError:  # a key that is not a str
            return exact_scan(pkt)
        pos = joined.find(needle)
        while pos >= 0:
            end = joined.find("\n", pos + 1)
            value = pkt.get(joined[pos + 1 : end] if end >= 0 else joined[pos + 1 :], _ABSENT)
            if value is _ABSENT:  # a key containing a newline fooled the search
                return exact_scan(pkt)
            if value is not None:  # None stands for "absent"
                return True
            pos = joined.find(needle, pos + 1)
        return False

    return present


def _all_of(preds: list[Predicate]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda pkt: a(pkt) and b(pkt)
    chain = tuple(preds)

    def all_of(pkt: Mapping[str, object]) -> bool:
        for p in chain:
            if not p(pkt):
                return False
        return True

    return all_of


def _any_of(preds: list[Predicate]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda pkt: a(pkt) or b(pkt)
    chain = tuple(preds)

    def any_of(pkt: Mapping[str, object]) -> bool:
        for p in chain:
            if p(pkt):
                return True
        return False

    return any_of


def _negate(pred: Predicate) -> Predicate:
    return lambda pkt: not pred(pkt)


# ---------------------------------------------------------------------------- parser


@dataclass(slots=True)
class _Context:
    """State shared by the parser of the main expression and of every macro it expands."""

    resolve: Callable[[str, str], object] | None
    macros: Mapping[str, str]
    known_fields: Container[str] | None
    field_types: Mapping[str, FieldType] | None = None
    names: Callable[[str], tuple[str, ...]] | None = None
    expanding: list[str] = field(default_factory=list)
    macro_cache: dict[str, Predicate] = field(default_factory=dict)
    _prefixes: frozenset[str] | None = None

    def is_macro(self, name: str) -> bool:
        try:
            return name in self.macros
        except Exception:  # an odd Mapping must not turn into a non-FilterError
            return False

    def keys(self, name: str) -> tuple[str, ...]:
        """The packet keys a field name reads (``names``; the name itself without it)."""
        if self.names is None:
            return (name,)
        try:
            keys = tuple(self.names(name))
        except Exception:  # an odd hook must not turn into a non-FilterError
            return (name,)
        return keys if keys and all(isinstance(k, str) for k in keys) else (name,)

    def is_known(self, name: str) -> bool:
        known = self.known_fields
        if known is None:
            return True
        try:
            if name in known:
                return True
        except Exception:
            return False
        return name in self.prefixes()

    def prefixes(self) -> frozenset[str]:
        # Protocol names ("reth") are the dotted prefixes of the known fields; a bare
        # Container cannot be iterated, in which case only exact names are known.
        if self._prefixes is None:
            found: set[str] = set()
            try:
                for name in self.known_fields:  # type: ignore[union-attr]
                    if isinstance(name, str):
                        dot = name.find(".")
                        while dot > 0:
                            found.add(name[:dot])
                            dot = name.find(".", dot + 1)
            except TypeError:
                pass
            self._prefixes = frozenset(found)
        return self._prefixes


class _Parser:
    """Recursive-descent parser that emits the closure tree directly."""

    def __init__(self, text: str, ctx: _Context, depth: int) -> None:
        self.text = text
        self.ctx = ctx
        self.depth = depth
        self.tokens = _tokenize(text)
        self.index = 0

    # -- token access

    def peek(self, ahead: int = 0) -> _Token:
        tok = self.tokens[min(self.index + ahead, len(self.tokens) - 1)]
        if tok.kind == _ERROR:
            raise tok.value  # type: ignore[misc]
        return tok

    def advance(self) -> _Token:
        tok = self.peek()
        if tok.kind != _EOF:
            self.index += 1
        return tok

    def fail(self, message: str, pos: int) -> NoReturn:
        raise FilterError(message, self.text, pos)

    @staticmethod
    def describe(tok: _Token) -> str:
        return "end of filter" if tok.kind == _EOF else _show(tok.text)

    def enter(self, depth: int, tok: _Token) -> int:
        depth += 1
        if depth > _MAX_DEPTH:
            self.fail("expression nested too deeply", tok.pos)
        return depth

    # -- grammar

    def parse(self) -> Predicate:
        first = self.peek()
        if first.kind == _EOF:
            self.fail("empty filter expression", 0)
        pred = self.parse_or(self.depth)
        tok = self.peek()
        if tok.kind == _RPAREN:
            self.fail('unbalanced parentheses: unexpected ")"', tok.pos)
        if tok.kind != _EOF:
            self.fail(f"unexpected {self.describe(tok)} after a complete expression", tok.pos)
        return pred

    def parse_or(self, depth: int) -> Predicate:
        preds = [self.parse_and(depth)]
        while self.peek().kind == _OR:
            self.advance()
            preds.append(self.parse_and(depth))
        return _any_of(preds)

    def parse_and(self, depth: int) -> Predicate:
        preds = [self.parse_not(depth)]
        while self.peek().kind == _AND:
            self.advance()
            preds.append(self.parse_not(depth))
        return _all_of(preds)

    def parse_not(self, depth: int) -> Predicate:
        tok = self.peek()
        if tok.kind == _NOT:
            self.advance()
            return _negate(self.parse_not(self.enter(depth, tok)))
        if tok.kind == _LPAREN:
            self.advance()
            inner = self.parse_or(self.enter(depth, tok))
            close = self.peek()
            if close.kind == _RPAREN:
                self.advance()
                return inner
            if close.kind == _EOF:
                self.fail('unbalanced parentheses: "(" is never closed', tok.pos)
            self.fail(f'expected ")", "and" or "or", got {self.describe(close)}', close.pos)
        return self.parse_test(depth)

    def parse_test(self, depth: int) -> Predicate:
        tok = self.advance()
        if tok.kind != _WORD or not _is_identifier(tok.text):
            self.fail(f"expected a field name, got {self.describe(tok)}", tok.pos)
        name = tok.text
        keys = self.ctx.keys(name)
        nxt = self.peek()
        negated_in = nxt.kind == _NOT and self.peek(1).kind == _IN
        if nxt.kind not in (_OP, _CONTAINS, _IN) and not negated_in:
            if self.ctx.is_macro(name):
                return self.expand_macro(tok, depth)
            self.check_field(tok, keys)
            return _any_of([_presence(k) for k in keys])

        if self.ctx.is_macro(name) and not (
            self.ctx.known_fields is not None and self.ctx.is_known(keys[0])
        ):
            self.fail(f"macro '{name}' cannot be compared, only used as a test", tok.pos)
        self.check_field(tok, keys)
        op_tok = self.advance()
        # A name that stands for several keys (one per header that may carry the field, never
        # two in one packet) tests each: any of them.
        if op_tok.kind == _CONTAINS:
            self.check_contains(tok, keys[0])
            lit = self.parse_value(op_tok)
            test = _value_test(_contains_handlers(lit), every=False)
            return _any_of([_leaf(k, test) for k in keys])
        if negated_in:
            op_tok = self.advance()
        start = self.index
        preds = []
        for key in keys:  # the value's tokens, read again for each key
            self.index = start
            preds.append(self.comparison(name, key, op_tok) if op_tok.kind == _OP else
                         self.membership(name, key, op_tok, negate=negated_in))
        return _any_of(preds)

    def comparison(self, name: str, key: str, op_tok: _Token) -> Predicate:
        op = str(op_tok.value)
        lit = self.resolve(key, self.parse_value(op_tok), name)
        self.check_value(key, lit, name)
        name = key
        if lit.net is not None and op not in _EQUALITY_OPS:
            self.fail(
                f'a network can only be compared with "==" or "!=", not "{op_tok.text}"', lit.pos
            )
        slow = _value_test(_handlers(lit, op), every=op in _ALL_OPS)
        if lit.num.__class__ is int:
            if op in ("==", "==="):
                return _leaf_int_eq(name, lit.num, slow)  # type: ignore[arg-type]
            return _leaf_int_cmp(name, _CMP[op], lit.num, slow)  # type: ignore[arg-type]
        return _leaf(name, slow)

    def membership(self, name: str, key: str, in_tok: _Token, *, negate: bool) -> Predicate:
        brace = self.peek()
        if brace.kind != _LBRACE:
            self.fail(f'expected "{{" after "{in_tok.text}", got {self.describe(brace)}', brace.pos)
        self.advance()
        elements: list[_Literal | tuple[_Literal, _Literal]] = []
        while True:
            tok = self.peek()
            if tok.kind == _RBRACE:
                if not elements:
                    self.fail("empty set", tok.pos)
                self.advance()
                break
            if tok.kind == _EOF:
                self.fail('unbalanced braces: "{" is never closed', brace.pos)
            after = brace
            if elements and tok.kind == _COMMA:
                after = self.advance()
            elif tok.kind not in (_WORD, _STRING):
                self.fail(f"expected a value in set, got {self.describe(tok)}", tok.pos)
            lo = self.resolve(key, self.parse_value(after), name)
            self.check_value(key, lo, name)
            if self.peek().kind != _RANGE:
                elements.append(lo)
                continue
            rng = self.advance()
            hi = self.resolve(key, self.parse_value(rng), name)
            self.check_value(key, hi, name)
            for bound in (lo, hi):
                if bound.net is not None:
                    self.fail("a network cannot be a range bound", bound.pos)
            if not (_handlers(lo, ">=").keys() & _handlers(hi, "<=").keys()):
                self.fail("range bounds have incompatible types", lo.pos)
            elements.append((lo, hi))

        handlers, fast = _set_handlers(elements)
        if negate:
            handlers = {t: _negated_handler(h) for t, h in handlers.items()}
        slow = _value_test(handlers, every=negate)
        if fast is not None:
            return _leaf_int_in(key, fast, negate, slow)
        return _leaf(key, slow)

    def parse_value(self, after: _Token) -> _Literal:
        tok = self.peek()
        if tok.kind == _STRING:
            self.advance()
            return _quoted_literal(str(tok.value), tok.pos)
        if tok.kind == _WORD:
            self.advance()
            return _word_literal(tok.text, tok.pos, self.text)
        where = "at end of filter" if tok.kind == _EOF else f"got {self.describe(tok)}"
        self.fail(f'expected a value after "{after.text}", {where}', tok.pos)

    # -- names

    def check_field(self, tok: _Token, keys: tuple[str, ...]) -> None:
        if not all(self.ctx.is_known(k) for k in keys):
            self.fail(f"unknown field '{tok.text}'", tok.pos)

    def field_type(self, name: str) -> FieldType | None:
        types = self.ctx.field_types
        if types is None:
            return None
        try:
            found = types.get(name)
        except Exception:  # an odd Mapping must not turn into a non-FilterError
            return None
        return found if isinstance(found, FieldType) else None

    def check_contains(self, tok: _Token, key: str) -> None:
        """Only byte-like fields (text, bytes, MACs) can contain something."""
        ftype = self.field_type(key)
        if ftype is not None and ftype.kind != "mac":
            self.fail(f"'{tok.text}' is {_KIND_NAMES.get(ftype.kind, ftype.kind)} and cannot "
                      'be used with "contains"', tok.pos)

    def check_value(self, key: str, lit: _Literal, name: str) -> None:
        """Refuse a value that the field's type cannot hold (Wireshark refuses it too); the
        type is that of the packet key ``key``, the message names the field as written."""
        ftype = self.field_type(key)
        if ftype is None:
            return
        kind, shown = ftype.kind, _show(lit.text)
        what = f"'{name}' ({_KIND_NAMES.get(kind, kind)})"
        if kind == "uint":
            if lit.num.__class__ is int:
                top = (1 << ftype.bits) - 1
                if ftype.bits and lit.num > top:  # type: ignore[operator]
                    self.fail(f"{shown} is too big for {what}, maximum {top}", lit.pos)
                return
            if lit.quoted:
                self.fail(f"{what} cannot be compared with the string {shown}", lit.pos)
            self.fail(f"{shown} is not a valid number for {what}", lit.pos)
        elif kind == "bool":
            if lit.quoted or _bool_key(lit) is None:
                self.fail(f"{shown} is not a valid value for {what}: use true, false, 1 or 0",
                          lit.pos)
        elif kind in ("ipv4", "ipv6"):
            version = 4 if kind == "ipv4" else 6
            found = lit.addr if lit.addr is not None else lit.net
            if found is None or found.version != version:
                self.fail(f"{shown} is not a valid address for {what}", lit.pos)
        elif kind == "mac" and lit.mac is None and (lit.raw is None or len(lit.raw) != 6):
            self.fail(f"{shown} is not six octets, as {what} needs", lit.pos)

    def resolve(self, key: str, lit: _Literal, name: str) -> _Literal:
        """Turn a symbolic value into a number now, so typos fail at compile time (the hook
        is asked about the packet key ``key``; messages name the field as written)."""
        resolve = self.ctx.resolve
        if resolve is None or not lit.name_like:
            return lit
        try:
            value = resolve(key, lit.text)
        except Exception as exc:  # the hook's failure is the user's error, not ours
            detail = f" ({exc})" if isinstance(exc, ValueError) and str(exc) else ""
            self.fail(f"unknown value {_show(lit.text)} for field '{name}'{detail}", lit.pos)
        if value is None:
            return lit
        if not isinstance(value, int):
            self.fail(
                f"resolving {_show(lit.text)} for field '{name}' gave {type(value).__name__},"
                " not an integer",
                lit.pos,
            )
        return replace(lit, num=int(value))

    def expand_macro(self, tok: _Token, depth: int) -> Predicate:
        ctx = self.ctx
        name = tok.text
        cached = ctx.macro_cache.get(name)
        if cached is not None:
            return cached
        if name in ctx.expanding:
            chain = " -> ".join([*ctx.expanding[ctx.expanding.index(name) :], name])
            self.fail(f"recursive macro: {chain}", tok.pos)
        body = ctx.macros[name]
        if not isinstance(body, str):
            self.fail(f"macro '{name}' is not a filter string", tok.pos)
        ctx.expanding.append(name)
        try:
            pred = _Parser(body, ctx, self.enter(depth, tok)).parse()
        except FilterError as exc:
            # Report against the user's text: the macro body is not what they typed.
            self.fail(f"in macro '{name}': {exc.message}", tok.pos)
        finally:
            ctx.expanding.pop()
        ctx.macro_cache[name] = pred
        return pred


# ------------------------------------------------------------------------ public API


def compile_filter(
    expr: str,
    *,
    resolve: Callable[[str, str], object] | None = None,
    macros: Mapping[str, str] | None = None,
    known_fields: Container[str] | None = None,
    field_types: Mapping[str, FieldType] | None = None,
    names: Callable[[str], tuple[str, ...]] | None = None,
) -> Predicate:
    """Compile a display filter into a predicate over a packet's field mapping.

    Semantics, following Wireshark:

    * A bare field name tests presence: the key exists with a non-None value, or some key
      starts with ``name + "."`` (so ``reth`` matches when ``reth.va`` exists).  A bool
      field is *not* tested for truth; write ``bth.a == 1`` or ``bth.a == true``.
    * Any comparison against a missing field is false, so ``bth.psn != 5`` is false when
      there is no ``bth.psn``, while ``not bth.psn == 5`` is true.
    * A list or tuple value holds repeated occurrences.  ``==``, ``~=``, ordering,
      ``contains`` and ``in`` hold if any occurrence matches; ``!=`` (``all_ne``),
      ``===`` (``all_eq``) and ``not in`` must hold for every occurrence.
    * A type mismatch (e.g. an int field against a MAC) is false for every operator.
      ``true``/``false``/``1``/``0`` equal bool values.  Addresses compare as addresses
      (also for ``<`` and friends), ``10.0.0.0/24`` means membership, MACs compare
      case-insensitively, ``01:02:03`` is a byte string for bytes-valued fields.
    * ``resolve(field, text)`` turns a symbolic value (quoted string or bare name) into an
      int at compile time; it may return None when the field has no symbolic values (the
      text then compares as a string), and raising ValueError/KeyError is reported as a
      FilterError at the value.  Without ``resolve``, int fields never equal a string.
    * ``macros`` maps a name to a filter string substituted, parenthesised, wherever the
      name stands alone as a test; macros may use macros, recursion is an error.
    * ``known_fields``, when given, rejects names that are neither a known field, the
      protocol prefix of one, nor (for a bare test) a macro.
    * ``field_types``, when given, rejects what Wireshark rejects for a typed field: a value
      the type cannot hold (``ip.src == 5``, ``bth.psn == 10.0.0.1``, ``bth.psn == "x"``,
      a number wider than the field, ``icrc.valid == 7``) and ``contains`` on a number,
      boolean or IP address.  Fields without an entry are compared as described above.
    * ``names(name)``, when given, says which packet keys a field name as written reads
      (another tool's name for a field: ``infiniband.bth.psn`` reads ``bth.psn``); several
      keys (a field that one header or another carries, never both) are tested each, and
      the test holds if it holds for one.  Checks and types are the keys'.

    Raises :class:`FilterError` for every problem with ``expr``; the returned predicate
    never raises and answers False for anything it cannot make sense of.
    """
    if not isinstance(expr, str):
        raise FilterError(f"filter must be a string, not {type(expr).__name__}", "", 0)
    ctx = _Context(resolve, macros if macros is not None else {}, known_fields, field_types,
                   names)
    try:
        root = _Parser(expr, ctx, 0).parse()
    except FilterError:
        raise
    except RecursionError:
        raise FilterError("expression nested too deeply", expr, 0) from None
    except Exception as exc:  # pragma: no cover - a bug must still reach the CLI as a FilterError
        raise FilterError(f"internal error: {exc!r}", expr, 0) from exc

    def matches(pkt: Mapping[str, object]) -> bool:
        try:
            return bool(root(pkt))
        except Exception:  # odd mappings or values: "does not match", never a crash
            return False

    return matches
