"""What a registry row points at: a ``Handler`` (a family or a tunnel) and what a tunnel's
``unwrap`` returns (``Unwrapped``).  Kept apart from ``roce.families.registry`` so that the
family modules the registry loads can name these without importing it back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Handler:
    """One family or tunnel.  ``decode(data, caplen, origlen)`` returns an object with
    ``walk``, ``layers``, ``fields``, ``error`` and ``kind`` (``roce.families.ib.native.Decoded``);
    ``unwrap(data, offset)`` returns ``Unwrapped``; ``columns(decoded)`` returns
    (source, destination, protocol, Info); ``tree(decoded, data)`` the ``-V`` lines;
    ``fields`` every flat field name it may set; ``display`` how the fields Wireshark shows
    in hex are written (``-T fields`` and the family's ``-V`` tree); ``wireshark`` the
    Wireshark names that are not ``infiniband.`` + a flat name."""

    name: str
    decode: Callable[..., Any] | None = None
    unwrap: Callable[[bytes, int], Any] | None = None
    columns: Callable[[Any], tuple[str, str, str, str]] | None = None
    tree: Callable[[Any, bytes], list[str]] | None = None
    fields: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()  # a callable: made on use
    # optional: a class made with the run's Summarizer whose ``lines(batch, first_number,
    # limit, slow)`` formats a batch of this link type (``roce.families.ib.lines``)
    lines: Callable[..., Any] | None = None
    # optional, tunnels: ``skip(data, offset) -> (inner offset, link type | None, next row |
    # None)`` or None; ``unwrap`` without the field dict, for the one-line path
    skip: Callable[[bytes, int], Any] | None = None
    # optional, link-type tunnels: ``skip_batch(datas) -> (inner frames, link type) | None``,
    # ``skip`` over a whole batch in one call (ERF's is compiled)
    skip_batch: Callable[[list[bytes]], Any] | None = None
    # optional: flat name -> ``str.format`` spec of the fields Wireshark displays in hex
    # (``"vcrc"`` -> ``"0x{:04x}"``: its BASE_HEX, as many digits as its field type); a
    # callable: made on use
    display: Mapping[str, str] | Callable[[], Mapping[str, str]] = field(default_factory=dict)
    # optional, link-type tunnels whose records say how long their packet is (ERF):
    # ``lengths(record, payload offset) -> (captured, on the wire)``, the inner frame's
    # ``frame.cap_len`` and ``frame.len``
    lengths: Callable[[bytes, int], tuple[int, int]] | None = None
    # optional: a Wireshark name that is not ``infiniband.`` + a flat name -> the flat names
    # it stands for (``-e`` and ``-Y`` take it); a callable: made on use
    wireshark: (Mapping[str, tuple[str, ...]]
                | Callable[[], Mapping[str, tuple[str, ...]]]) = field(default_factory=dict)

    @property
    def is_tunnel(self) -> bool:
        return self.unwrap is not None


@dataclass
class Unwrapped:
    """What a tunnel found at ``offset`` of ``data``: an inner frame of ``linktype``, or
    (``linktype`` None) a header that the ``next`` row (table, value) names; plus the
    tunnel layer's name and flat fields."""

    data: bytes
    offset: int
    linktype: int | None
    layer: str
    fields: dict[str, Any]
    next: tuple[str, int] | None = None
    # the inner frame's (captured, on the wire) lengths when the record says them (ERF)
    lengths: tuple[int, int] | None = None


__all__ = ["Handler", "Unwrapped"]
