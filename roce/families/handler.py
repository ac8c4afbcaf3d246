"""What a registry row points at: a ``Handler`` (a family or a tunnel), what a tunnel's
``unwrap`` returns (``Unwrapped``), and how a tunnel's header is stepped over without decoding
it (``SkipRule``).  Kept apart from ``roce.families.registry`` so that the family modules the
registry loads can name these without importing it back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from roce.headers import Layout

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

# A column of columnar output: (field name, kind, bits, presence).  kind is "bool", "int"
# (unsigned, bits wide), "sint" (signed), "string" or "binary"; presence marks the flag that
# says a header is there.
ColumnSpec = tuple[str, str, int, bool]


@dataclass(frozen=True)
class SkipRule:
    """A tunnel header's shape, declared once: how far to step over it and what follows,
    without decoding its fields.  The compiled peel (``families/_peel.pxi``) is configured
    with these rules from the registry, and ``__call__`` is its pure-Python twin; a tunnel
    whose ``Handler.skip`` is a ``SkipRule`` is peeled in C with no C of its own.

    At the header (offset ``off``): ``size`` bytes are always there; each ``checks`` entry
    (byte, mask, value) must hold or the frame is not this tunnel's (left alone); each
    ``extras`` entry (byte, mask, bytes) adds optional bytes when the masked bits are set.
    What follows is either the link type ``inner``, or (``next_at`` >= 0) chosen by the
    16-bit field at that byte: the first ``direct`` entry (value, byte, mask, link type)
    whose value matches and whose masked bits are clear gives an inner frame of that link
    type, any other value is the next header, dispatched through the registry's ``table``.
    """

    size: int
    checks: tuple[tuple[int, int, int], ...] = ()
    extras: tuple[tuple[int, int, int], ...] = ()
    inner: int = -1
    next_at: int = -1
    direct: tuple[tuple[int, int, int, int], ...] = ()
    table: str = ""

    def __call__(self, data: bytes, off: int) -> tuple[int, int | None,
                                                       tuple[str, int] | None] | None:
        """(inner offset, inner link type or None, next dispatch row or None), or None when
        the header is cut or is not this tunnel's."""
        if len(data) < off + self.size:
            return None
        for at, mask, value in self.checks:
            if data[off + at] & mask != value:
                return None
        pos = off + self.size
        for at, mask, extra in self.extras:
            if data[off + at] & mask:
                pos += extra
        if self.next_at < 0:
            return pos, self.inner, None
        proto = (data[off + self.next_at] << 8) | data[off + self.next_at + 1]
        for value, at, mask, linktype in self.direct:
            if proto == value and not data[off + at] & mask:
                return pos, linktype, None
        return pos, None, (self.table, proto)


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
    # presentation: the layer name its ``unwrap`` gives (``Unwrapped.layer``), that layer's
    # title in ``-V`` (Wireshark's protocol name), the layouts of its flat fields by prefix
    # (titles and column types derive from them), and the column types of fields no layout
    # holds (or a callable making them on use)
    layer: str = ""
    title: str = ""
    layouts: tuple[tuple[str, Layout], ...] = ()
    column_types: tuple[ColumnSpec, ...] | Callable[[], tuple[ColumnSpec, ...]] = ()
    # craft, tunnels: ``encap(frame, n, ident)`` the tunnel's bytes around one inner frame
    # (``n`` counts frames; ``ident`` the span ID / VNI of ``--span-id``, at most
    # ``ident_bits`` wide, 0 when it carries none); ``carry(value, payload, n)`` wraps a
    # payload whose next-header value is ``value`` (GRE carries ERSPAN so)
    encap: Callable[[bytes, int, int], bytes] | None = None
    ident_bits: int = 0
    carry: Callable[[int, bytes, int], bytes] | None = None
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


def layout_columns(prefix: str, layout: Layout, presence: bool = True) -> list[ColumnSpec]:
    """The columns of one layout's fields under ``prefix`` (and ``prefix`` itself, a flag
    that the header is there, when ``presence``)."""
    out: list[ColumnSpec] = [(prefix, "bool", 1, True)] if presence else []
    for f in layout.fields:
        kind = "bool" if f.kind == "bool" else "string" if f.kind == "addr" else "int"
        out.append((f"{prefix}.{f.name}", kind, f.bits, False))
    return out


def handler_columns(h: Handler) -> list[ColumnSpec]:
    """Every column a handler's fields make: its layer's presence flag, its layouts' fields,
    its own extra columns."""
    out: list[ColumnSpec] = [(h.layer, "bool", 1, True)] if h.layer else []
    for prefix, layout in h.layouts:
        out += layout_columns(prefix, layout, presence=False)
    out += list(h.column_types() if callable(h.column_types) else h.column_types)
    return out


__all__ = ["ColumnSpec", "Handler", "SkipRule", "Unwrapped", "handler_columns",
           "layout_columns"]
