"""Address fields: text in Python (``"02:00:00:00:00:01"``, ``"10.0.0.1"``, ``"fe80::1"``),
integers on the wire.  The converters every address field of a header layout uses, by kind
(``CONVERTERS``): the Construct adapters of ``roce.headerdefs`` wrap them, and the layouts
``roce.headers`` reads from its record name them by kind."""

from __future__ import annotations

# the C module ``socket`` wraps: ``socket`` itself loads selectors and builds its enums, a
# few milliseconds of every start of roce, for these two functions
from _socket import AF_INET, AF_INET6, inet_ntop, inet_pton
from collections.abc import Callable

from roce.options import mac_bytes


def mac_dec(obj: int, ctx: object = None) -> str:
    return obj.to_bytes(6, "big").hex(":")


def _memo(parse: Callable[[str], int]) -> Callable:
    """Addresses repeat from packet to packet: remember the last few thousand parses."""
    cache: dict[str, int] = {}

    def enc(obj: str | bytes | int, ctx: object = None) -> int:
        if type(obj) is int:
            return obj
        try:
            return cache[obj]  # type: ignore[index]
        except (KeyError, TypeError):
            pass
        value = int.from_bytes(obj, "big") if isinstance(obj, bytes) else parse(obj)
        if len(cache) > 4096:
            cache.clear()
        if isinstance(obj, str):
            cache[obj] = value
        return value

    return enc


@_memo
def mac_enc(obj: str) -> int:
    # six octets, each group one octet: "1:2:3:4:5:6" is 01:02:03:04:05:06 (roce.options)
    return int.from_bytes(mac_bytes(obj), "big")


def ip4_dec(obj: int, ctx: object = None) -> str:
    return inet_ntop(AF_INET, obj.to_bytes(4, "big"))


@_memo
def ip4_enc(obj: str) -> int:
    return int.from_bytes(inet_pton(AF_INET, obj), "big")


def ip6_dec(obj: int, ctx: object = None) -> str:
    return inet_ntop(AF_INET6, obj.to_bytes(16, "big"))


@_memo
def ip6_enc(obj: str) -> int:
    return int.from_bytes(inet_pton(AF_INET6, obj), "big")


# kind -> (decode: wire integer to text, encode: text, bytes or integer to wire integer)
CONVERTERS: dict[str, tuple[Callable, Callable]] = {
    "mac": (mac_dec, mac_enc),
    "ipv4": (ip4_dec, ip4_enc),
    "ipv6": (ip6_dec, ip6_enc),
}
