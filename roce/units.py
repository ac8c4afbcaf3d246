"""Unit parsers for command-line options: sizes, times, rates, probabilities.

They are argparse ``type=`` callables: a bad value raises ``argparse.ArgumentTypeError`` and
the parser names the option.  This module imports nothing of roce, so any command (and any
module that defines options) can use it without pulling in another command's module.
"""

from __future__ import annotations

import argparse
import ipaddress

_SIZE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_TIME = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_size(text: str) -> int:
    """``4096``, ``64K``, ``1M`` (binary units) -> bytes."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1] if t and t[-1] in "kmg" else ""
    try:
        value = float(t[:-1] if unit else t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 4096, 64K, 1M)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(value * _SIZE[unit])


def parse_time(text: str) -> int:
    """``1000`` (ns), ``1us``, ``2ms`` -> nanoseconds."""
    t = text.strip().lower()
    for unit in ("ns", "us", "ms", "s"):
        if t.endswith(unit):
            t, mult = t[:-len(unit)], _TIME[unit]
            break
    else:
        mult = 1
    try:
        return int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad time {text!r} (e.g. 1000, 1us, 2ms)") from None


def parse_rate(text: str) -> float:
    """``100``, ``100G``, ``100Gbps`` -> Gb/s."""
    t = text.strip().lower().removesuffix("bps").removesuffix("b/s").removesuffix("g")
    try:
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate {text!r} (Gb/s, e.g. 100)") from None


def parse_probability(text: str) -> float:
    try:
        p = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad probability {text!r}") from None
    if not 0 <= p <= 1:
        raise argparse.ArgumentTypeError(f"probability {text!r} is not in [0, 1]")
    return p


def parse_non_negative(text: str) -> int:
    """``0``, ``4`` -> a whole number >= 0 (``-j``: 0 means every core)."""
    try:
        n = int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return n


def parse_mac(text: str) -> str:
    """``02:00:00:00:00:01``, ``2-0-0-0-0-1`` -> ``02:00:00:00:00:01``: six octets of one or
    two hex digits each (``1:2:3:4:5:6`` is ``01:02:03:04:05:06``, as other tools read it)."""
    octets = text.strip().replace("-", ":").split(":")
    try:
        if len(octets) != 6 or not all(1 <= len(o) <= 2 for o in octets):
            raise ValueError
        return ":".join(f"{int(o, 16):02x}" for o in octets)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad MAC address {text!r} (six octets, e.g. 02:00:00:00:00:01)") from None


def parse_ipv4(text: str) -> str:
    """A dotted-quad IPv4 address, normalised."""
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad IPv4 address {text!r}") from None
