"""roce.units' address option types: MAC addresses of exactly six octets, read as other
tools read them, and IPv4 addresses."""

from __future__ import annotations

import argparse
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import options
from roce.options import parse_ipv4_text as parse_ipv4
from roce.options import parse_mac


@pytest.mark.parametrize(("text", "mac"), [
    ("02:00:00:00:00:01", "02:00:00:00:00:01"),
    ("1:2:3:4:5:6", "01:02:03:04:05:06"),
    ("AA-bb-CC-dd-EE-ff", "aa:bb:cc:dd:ee:ff"),
    (" ff:ff:ff:ff:ff:ff ", "ff:ff:ff:ff:ff:ff"),
])
def test_mac_accepted(text, mac):
    assert parse_mac(text) == mac


@pytest.mark.parametrize("text", ["ff:ff:ff:ff:ff", "1:2:3:4:5:6:7", "123:2:3:4:5:6",
                                  "02:00:00:00:00:zz", "020000000001", "", "::::::"])
def test_mac_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="bad MAC address"):
        parse_mac(text)


def _by_the_patterns(text: str) -> bytes | None:
    """What the patterns alone read (the usual spelling has a shortcut before them)."""
    t = text.strip()
    if re.fullmatch(options._MAC_GROUPS, t):
        return bytes(int(g, 16) for g in re.split("[:.-]", t))
    if re.fullmatch(options._MAC_DOTTED, t):
        return bytes.fromhex(t.replace(".", ""))
    return None


_MAC_CHARS = st.sampled_from("0123456789abcdefABCDEFgz:-. \t")


@given(st.one_of(st.text(_MAC_CHARS, max_size=20),
                 st.lists(st.text(_MAC_CHARS, min_size=1, max_size=2), min_size=6,
                          max_size=6).map(":".join)))
def test_mac_shortcut_reads_as_the_patterns_do(text: str) -> None:
    want = _by_the_patterns(text)
    options.mac_bytes.cache_clear()
    if want is None:
        with pytest.raises(ValueError, match="bad MAC address"):
            options.mac_bytes(text)
    else:
        assert options.mac_bytes(text) == want


def test_ipv4():
    assert parse_ipv4(" 10.0.0.2") == "10.0.0.2"
    for text in ("10.0.0", "256.0.0.1", "fe80::1", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="bad IPv4 address"):
            parse_ipv4(text)
