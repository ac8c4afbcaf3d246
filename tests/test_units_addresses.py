"""roce.units' address option types: MAC addresses of exactly six octets, read as other
tools read them, and IPv4 addresses."""

from __future__ import annotations

import argparse

import pytest

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


def test_ipv4():
    assert parse_ipv4(" 10.0.0.2") == "10.0.0.2"
    for text in ("10.0.0", "256.0.0.1", "fe80::1", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="bad IPv4 address"):
            parse_ipv4(text)
