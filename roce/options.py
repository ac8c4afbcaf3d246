"""Option values: the one validation layer every ``roce`` command's options go through.

Each public ``parse_*`` function, and each parser a factory here returns, is an argparse
``type=`` callable: it turns the option's text into a checked value or raises
``argparse.ArgumentTypeError``, so the parser prints one line naming the option and the
command exits 1 (``roce.cli``) before any work starts.  Nothing a user types reaches the
work unchecked: integers have bounds (field widths come from ``roce.headers``), floats are
finite, rates are positive, times fit in 64-bit nanoseconds, MACs have six octets.

The readers below the parsers (``read_int``, ``mac_bytes``) raise ``ValueError`` and serve
code that is not an option: the header encoders (``roce.headers``) and the display filter
(``roce.decoder.filter``) read MACs and numbers the same way the options do.

This module imports nothing of roce (start-up matters: ``roce decode`` over a pipe runs in
a loop; and the codec, ``roce.headers``, reads MACs with it): header field widths are handed
to ``field_int`` and ``field_assignment`` by their caller (``roce.packet.field_width``).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from functools import lru_cache

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
# ipaddress is imported by the functions that read addresses: about a millisecond of every
# start of roce, which most commands never spend
if TYPE_CHECKING:
    import ipaddress
    from typing import Any

    Parser = Callable[[str], Any]

NS = 1_000_000_000
# Nanosecond counts are kept in signed 64-bit integers (pcap writers, the emulator's clock).
MAX_NS = (1 << 63) - 1
MAX_SECONDS = MAX_NS // NS


def _bad(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


# -- numbers --------------------------------------------------------------------------------


# Patterns are kept as text and matched through re's own cache: compiled at first use, not
# at every start of every command (eight patterns were 4M instructions of each start)
_INT_RE = r"[+-]?(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|[0-9][0-9_]*)"


def read_int(text: str) -> int:
    """An integer in decimal (leading zeros are still decimal) or with a 0x/0o/0b prefix;
    ``_`` may group digits.  ValueError otherwise."""
    t = text.strip()
    if not re.fullmatch(_INT_RE, t) or "__" in t or t.endswith("_"):
        raise ValueError(f"{text!r} is not an integer")
    sign = -1 if t[0] == "-" else 1
    body = t.lstrip("+-").replace("_", "")
    base = {"0x": 16, "0o": 8, "0b": 2}.get(body[:2].lower(), 10)
    return sign * int(body[2:] if base != 10 else body, base)


def bounded_int(lo: int | None = 0, hi: int | None = None, what: str = "") -> Parser:
    """A parser for integers in ``lo..hi`` (None: unbounded on that side)."""
    def parse(text: str) -> int:
        try:
            value = read_int(text)
        except ValueError:
            raise _bad(f"{text!r} is not {what or 'an integer'} (decimal or 0x...)") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = (f"{lo}..{hi}" if lo is not None and hi is not None else
                    f">= {lo}" if lo is not None else f"<= {hi}")
            raise _bad(f"{text.strip()} is out of range ({span})"
                       + (f" for {what}" if what else ""))
        return value

    parse.__name__ = what.replace(" ", "_") or "integer"  # argparse names the type so
    parse.bounds = (lo, hi)  # type: ignore[attr-defined]  # for tests and help
    return parse


def unsigned(bits: int, what: str = "") -> Parser:
    """Integers that fit in ``bits`` bits."""
    return bounded_int(0, (1 << bits) - 1, what or f"a {bits}-bit value")


# Counts a user asks for (frames, messages, QPs): positive and held in a C long.
MAX_COUNT = (1 << 63) - 1

parse_int = bounded_int(0, None, "a non-negative integer")
parse_positive = bounded_int(1, MAX_COUNT, "a positive integer")
parse_seed = bounded_int(0, (1 << 64) - 1, "a seed")
# Worker processes (-j): more than this is a typo, not a machine; 0 means one per core.
MAX_JOBS = 256
parse_jobs = bounded_int(0, MAX_JOBS, "a number of jobs")
# IBA 9.7.6.1.3: QP attribute widths (ibv_modify_qp: timeout 5 bits, retry_cnt and
# rnr_retry 3 bits); PSNs and QPNs are the BTH's 24-bit fields (IBA 9.2).
parse_psn = unsigned(24, "a PSN (24 bits)")
parse_qpn = unsigned(24, "a QPN (24 bits)")
parse_timeout = bounded_int(0, 31, "a timeout exponent")
parse_retry = bounded_int(0, 7, "a retry count")
parse_port = bounded_int(1, 0xFFFF, "a port")
parse_listen_port = bounded_int(0, 0xFFFF, "a port (0: any free one)")
parse_key = unsigned(32, "a 32-bit key")
parse_address = unsigned(64, "a 64-bit address")
parse_count = bounded_int(0, MAX_COUNT, "a message count")

# The path MTUs a queue pair can have (IBA 9.7.6.1.3, ibv_mtu: 256 << (IBV_MTU_* - 1)).
PATH_MTUS = (256, 512, 1024, 2048, 4096)


def choice_int(choices: tuple[int, ...], what: str) -> Parser:
    """A parser for one of a fixed set of integers (``choices``)."""
    listed = ", ".join(map(str, choices))

    def parse(text: str) -> int:
        try:
            value = read_int(text)
        except ValueError:
            raise _bad(f"{text!r} is not {what} ({listed})") from None
        if value not in choices:
            raise _bad(f"{value} is not one of {listed}")
        return value

    parse.__name__ = what.replace(" ", "_")
    parse.choices = choices  # type: ignore[attr-defined]  # for tests and help
    return parse


parse_mtu = choice_int(PATH_MTUS, "a path MTU")


def _float(text: str, what: str) -> float:
    try:
        value = float(text.strip().replace("_", ""))
    except ValueError:
        raise _bad(f"bad {what} {text!r}") from None
    if not math.isfinite(value):
        raise _bad(f"bad {what} {text!r} (not a finite number)")
    return value


def parse_rate(text: str) -> float:
    """A positive, finite rate: ``100``, ``100G``, ``100Gbps`` (the unit is the option's:
    Gb/s, frames per second, a speed factor)."""
    t = text.strip().lower().removesuffix("bps").removesuffix("b/s").removesuffix("g")
    value = _float(t, "rate")
    if value <= 0:
        raise _bad(f"rate {text!r} must be > 0")
    return value


def rate_within(lo: float, hi: float, unit: str) -> Parser:
    """A parser for rates (``parse_rate``) from ``lo`` to ``hi`` ``unit``: the span every
    consumer of the value can represent, which its caller knows."""
    def parse(text: str) -> float:
        value = parse_rate(text)
        if not lo <= value <= hi:
            raise _bad(f"rate {text.strip()!r} is out of range ({lo:.3g}..{hi:.3g} {unit})")
        return value

    parse.__name__ = "rate"
    parse.span = (lo, hi)  # type: ignore[attr-defined]  # for tests and help
    return parse


# A simulated link's rate, Gb/s: 1 b/s (a link counts whole bits per second) to 1 Pb/s (the
# rate times the longest delay, 2^63 ns, stays a finite number of bits: PFC headroom)
MIN_LINK_GBPS, MAX_LINK_GBPS = 1e-9, 1e6
parse_link_rate = rate_within(MIN_LINK_GBPS, MAX_LINK_GBPS, "Gb/s")


# The lowest rate whose period (1/N seconds) is still a 64-bit count of nanoseconds, the
# unit of every pacer's deadlines (roce send, replay, fuzz wire).
MIN_PPS = 1 / MAX_SECONDS


def parse_pps(text: str) -> float:
    """A rate of frames per second: positive, finite, and slow enough only that one
    frame's period (1/N s) fits the pacers' 64-bit nanoseconds (N >= ``MIN_PPS``)."""
    value = parse_rate(text)
    if value < MIN_PPS:
        raise _bad(f"rate {text!r} is too low: one frame every {1 / value:.3g} s is past "
                   f"the {MAX_SECONDS} s a pacer's clock holds (at least {MIN_PPS:.3g})")
    return value


def parse_seconds(text: str) -> float:
    """A duration in seconds, >= 0, whose nanoseconds fit in 64 bits."""
    value = _float(text, "number of seconds")
    if value < 0:
        raise _bad(f"{text!r} must not be negative")
    if value > MAX_SECONDS:
        raise _bad(f"{text!r} seconds is too long (at most {MAX_SECONDS})")
    return value


# The shortest positive duration: the clocks that take one count nanoseconds, and a shorter
# one is 0 there (a time limit of 1e-308 s would be no limit at all, or no time at all).
MIN_POSITIVE_SECONDS = 1e-9


def parse_positive_seconds(text: str) -> float:
    """A duration in seconds, at least one nanosecond, whose nanoseconds fit in 64 bits (so
    ``select``, ``socket.settimeout`` and monotonic-clock arithmetic all take it)."""
    value = parse_seconds(text)
    if value <= 0:
        raise _bad(f"{text!r} must be > 0")
    if value < MIN_POSITIVE_SECONDS:
        raise _bad(f"{text!r} seconds is shorter than a nanosecond (at least "
                   f"{MIN_POSITIVE_SECONDS:g})")
    return value


def parse_probability(text: str) -> float:
    value = _float(text, "probability")
    if not 0 <= value <= 1:
        raise _bad(f"probability {text!r} is not in [0, 1]")
    return value


def parse_load(text: str) -> float:
    """An offered load: a fraction of the line rate above 0 and at most 1."""
    v = _float(text, "load")
    if not 0 < v <= 1:
        raise _bad(f"{text}: a load is a fraction of the line rate, above 0 and at most 1")
    return v


MAX_OVERSUBSCRIPTION = 1e6  # a link rate over it stays above the least --rate (1e-9 Gb/s)


def parse_oversubscription(text: str) -> float:
    """An oversubscription ratio: at least 1 (none), at most ``MAX_OVERSUBSCRIPTION``."""
    v = _float(text, "ratio")
    if not 1 <= v <= MAX_OVERSUBSCRIPTION:
        raise _bad(f"{text}: a ratio from 1 (none) to {MAX_OVERSUBSCRIPTION:g}")
    return v


_SIZE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TIME = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": NS}
MAX_SIZE = (1 << 63) - 1


def parse_size(text: str) -> int:
    """``4096``, ``64K``, ``1M``, ``0x1000`` (binary units) -> bytes, in 0..2^63-1.  What a
    command can actually hold is its own check (``size_at_most``)."""
    t = text.strip().lower()
    unit = ""
    if not t.startswith("0x"):
        t = t.removesuffix("ib").removesuffix("b")
        unit = t[-1] if t and t[-1] in "kmgt" else ""
    body = t[:-1] if unit else t
    try:
        value: float = read_int(body)
    except ValueError:
        try:
            value = float(body)
        except ValueError:
            raise _bad(f"bad size {text!r} (e.g. 4096, 64K, 1M)") from None
    if not math.isfinite(value) or value < 0:
        raise _bad(f"bad size {text!r}")
    size = value * _SIZE[unit]
    if size > MAX_SIZE:
        raise _bad(f"size {text!r} is too large")
    return int(size)


def size_at_most(hi: int, what: str = "size") -> Parser:
    def parse(text: str) -> int:
        value = parse_size(text)
        if value > hi:
            raise _bad(f"{what} {text} is larger than {hi} bytes")
        return value

    parse.__name__ = what.replace(" ", "_")
    parse.bounds = (0, hi)  # type: ignore[attr-defined]
    return parse


def parse_time(text: str) -> int:
    """``1000`` (ns), ``1us``, ``2ms``, ``1s`` -> nanoseconds, in 0..2^63-1."""
    t = text.strip().lower()
    mult = 1
    for unit in ("ns", "us", "ms", "s"):
        if t.endswith(unit):
            t, mult = t[:-len(unit)], _TIME[unit]
            break
    try:
        value = float(t)
    except ValueError:
        raise _bad(f"bad time {text!r} (e.g. 1000, 1us, 2ms)") from None
    if not math.isfinite(value) or value < 0 or value * mult > MAX_NS:
        raise _bad(f"time {text!r} is out of range (0 .. {MAX_SECONDS} s)")
    return int(value * mult)


def parse_positive_time(text: str) -> int:
    value = parse_time(text)
    if value <= 0:
        raise _bad(f"time {text!r} must be > 0")
    return value


# -- addresses ------------------------------------------------------------------------------

_MAC_GROUPS = (r"[0-9a-fA-F]{1,2}(?P<sep>[:.-])(?:[0-9a-fA-F]{1,2}(?P=sep)){4}"
               r"[0-9a-fA-F]{1,2}")
_HEX = frozenset("0123456789abcdefABCDEF")
_MAC_DOTTED = r"[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}\.[0-9a-fA-F]{4}"


@lru_cache(maxsize=4096)
def mac_bytes(text: str) -> bytes:
    """The six octets of a MAC written ``01:02:03:04:05:06``, ``1:2:3:4:5:6`` (each group is
    one octet, as ``ip link`` reads it), ``01-02-...``, ``01.02...``, ``0102.0304.0506`` or
    not ``010203040506``, which reads as a number.
    ValueError for anything else, such as five or seven octets."""
    t = text.strip()
    if len(t) == 17 and t[2::3] == ":::::" and _HEX.issuperset(t[0::3] + t[1::3]):
        return bytes.fromhex(t.replace(":", ""))  # the usual spelling, without the patterns
    if re.fullmatch(_MAC_GROUPS, t):
        return bytes(int(g, 16) for g in re.split("[:.-]", t))
    if re.fullmatch(_MAC_DOTTED, t):
        return bytes.fromhex(t.replace(".", ""))
    raise ValueError(f"bad MAC address {text!r} (six octets, e.g. 02:00:00:00:00:01)")


def parse_mac(text: str) -> str:
    """A MAC address, normalised to ``xx:xx:xx:xx:xx:xx``."""
    try:
        return mac_bytes(text).hex(":")
    except ValueError as exc:
        raise _bad(str(exc)) from None


def parse_mac_bytes(text: str) -> bytes:
    try:
        return mac_bytes(text)
    except ValueError as exc:
        raise _bad(str(exc)) from None


# An IPv6 zone (fe80::1%eth0) names an interface, by name or index; ipaddress takes any text
# after the "%", escape sequences included.
_ZONE = r"[A-Za-z0-9_.:-]{1,15}"


def parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    import ipaddress
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        raise _bad(f"bad IP address {text!r} (IPv4 or IPv6)") from None
    zone = getattr(ip, "scope_id", None)
    if zone is not None and not re.fullmatch(_ZONE, zone):
        raise _bad(f"bad IP address {text!r} (the zone after % is an interface name or "
                   "number)")
    return ip


def parse_ip_text(text: str) -> str:
    """An IPv4 or IPv6 address, as text in its normal form."""
    return str(parse_ip(text))


def parse_unicast_ip_text(text: str) -> str:
    """An address one host answers at: not unspecified (0.0.0.0, ::), multicast or the
    limited broadcast 255.255.255.255; as text in its normal form."""
    import ipaddress
    ip = parse_ip(text)
    if getattr(ip, "scope_id", None) is not None:
        raise _bad(f"{text!r}: a peer's address has no zone here (drop the %...)")
    if ip.is_unspecified or ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise _bad(f"{str(ip)!r} is not a unicast address")
    return str(ip)


def parse_gid(text: str) -> str:
    """A GID: 128 bits written as an IPv6 address (RoCEv2 maps IPv4 into ::ffff:0:0/96)."""
    import ipaddress
    try:
        gid = ipaddress.IPv6Address(text.strip())
    except ValueError:
        gid = None
    if gid is None or gid.scope_id is not None:
        raise _bad(f"bad GID {text!r} (128 bits written as an IPv6 address)")
    return str(gid)


def parse_ipv4_text(text: str) -> str:
    import ipaddress
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        raise _bad(f"bad IPv4 address {text!r}") from None


# -- header fields --------------------------------------------------------------------------


# A header field's qualified name and width in bits for a craft key (``psn`` ->
# ``("bth.psn", 24)``), None if there is no such integer field: ``roce.packet.field_width``.
# It is handed in rather than imported: this module sits below the codec.
WidthOf = Callable[[str], "tuple[str, int] | None"]


def field_int(name: str, width_of: WidthOf, what: str = "") -> Parser:
    """Integers that fit the header field ``name`` (a craft key)."""
    width = width_of(name)
    if width is None:
        return parse_int
    parse = unsigned(width[1], what or f"{width[0]} ({width[1]} bits)")
    parse.field = name  # type: ignore[attr-defined]
    return parse


def field_assignment(width_of: WidthOf) -> Parser:
    """``NAME=VALUE`` for ``roce craft --field``: VALUE is an integer that fits the field,
    ``true``/``false``, or an address (checked again by the encoder)."""
    def parse_field(text: str) -> tuple[str, Any]:
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise _bad(f"{text!r}: expected NAME=VALUE, e.g. aeth.msn=5")
        low = value.lower()
        if low in ("true", "yes", "on"):
            return name, True
        if low in ("false", "no", "off"):
            return name, False
        try:
            number = read_int(value)
        except ValueError:
            if _is_address(value):
                return name, value
            raise _bad(f"{name}={value}: not a number, true/false or an address") from None
        width = width_of(name)
        if number < 0 or (width is not None and number >> width[1]):
            where = f"{width[0]} ({width[1]} bits: 0..{(1 << width[1]) - 1})" if width else \
                "the field (>= 0)"
            raise _bad(f"{name}={value} does not fit {where}")
        return name, number

    return parse_field


def _is_address(text: str) -> bool:
    import ipaddress
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    try:
        mac_bytes(text)
        return True
    except ValueError:
        return False


_ECN_NAMES = {"ce": 3, "ect0": 2, "ect(0)": 2, "ect1": 1, "ect(1)": 1, "not-ect": 0,
              "notect": 0, "non-ect": 0}


def parse_ecn(text: str) -> int:
    key = text.strip().lower()
    if key in _ECN_NAMES:
        return _ECN_NAMES[key]
    try:
        value = read_int(key)
    except ValueError:
        value = -1
    if not 0 <= value <= 3:
        raise _bad(f"{text!r}: use ce, ect0, ect1, not-ect or 0..3")
    return value


__all__ = ["MAX_COUNT", "MAX_JOBS", "MAX_LINK_GBPS", "MAX_NS", "MAX_SECONDS", "MIN_LINK_GBPS",
           "MIN_POSITIVE_SECONDS", "MIN_PPS", "PATH_MTUS", "WidthOf", "bounded_int", "choice_int",
           "field_assignment", "field_int", "mac_bytes", "parse_address", "parse_count",
           "parse_ecn", "parse_gid", "parse_int", "parse_ip", "parse_ip_text", "parse_ipv4_text",
           "parse_jobs", "parse_key", "parse_link_rate", "parse_listen_port", "parse_mac",
           "parse_mac_bytes", "parse_mtu", "parse_port", "parse_positive",
           "parse_positive_seconds", "parse_positive_time", "parse_pps", "parse_probability",
           "parse_psn", "parse_qpn", "parse_rate", "parse_retry", "parse_seconds", "parse_seed",
           "parse_size", "parse_time", "parse_timeout", "parse_unicast_ip_text", "rate_within",
           "read_int", "size_at_most", "unsigned"]
