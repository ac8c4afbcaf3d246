"""ERF records (Endace Extensible Record Format), as pcap link type 197 carries them.

A record is a 16-byte header::

    timestamp (8, little-endian) | type (1) | flags (1) | rlen (2) | lctr (2) | wlen (2)

(``rlen``, ``lctr``, ``wlen`` big-endian), then extension headers when bit 7 of the type
byte is set (8 bytes each; the top bit of each one's first byte says another follows),
then the payload.  ``rlen`` is the record length including header and padding to 8
bytes; ``wlen`` the length on the wire.  The payload is the smaller of ``wlen`` and what
``rlen`` (and the capture) hold.  Ethernet records (type 2) have 2 bytes of offset/pad
before the frame.

Record types decoded: 21 INFINIBAND (a native InfiniBand packet, handed on as link type
247), 25 INFINIBAND_LINK (an InfiniBand link packet), 2 ETH (Ethernet, link type 1).
Field names are Wireshark's ``erf.*``.

The packet's lengths are the record's, as Wireshark counts them (``lengths``): ``wlen`` on the
wire, and captured ``wlen`` or what the capture holds past the record's headers when that is
less; its time is the record header's (``roce.pcapio.erf_ts_ns`` reads it).
"""

from __future__ import annotations

from typing import Any

from roce.errors import DecodeError
from roce.families.handler import Unwrapped
from roce.families.ib import flowcontrol as link
from roce.locate import LINKTYPE_ERF, LINKTYPE_ETHERNET, LINKTYPE_INFINIBAND  # noqa: F401 - erf.LINKTYPE_ERF

ERF_HEADER = 16
EXT_HEADER = 8
ERF_TYPE_ETH, ERF_TYPE_INFINIBAND, ERF_TYPE_INFINIBAND_LINK = 2, 21, 25
ERF_EXT_PRESENT = 0x80
ETH_PAD = 2
TYPE_AT, RLEN_AT, WLEN_AT = 8, 10, 14  # header bytes: type; rlen, wlen (2, big-endian)
INNER_LINKTYPE = {ERF_TYPE_INFINIBAND: LINKTYPE_INFINIBAND, ERF_TYPE_ETH: LINKTYPE_ETHERNET}


def unwrap(data: bytes, off: int = 0) -> Unwrapped:
    """Split one ERF record (``data[off:]``) into header fields and payload."""
    n = len(data) - off
    if n < ERF_HEADER:
        raise DecodeError(f"ERF header truncated at byte {off}: needs {ERF_HEADER} bytes, "
                          f"{n} left", "erf", off)
    tbyte, flags = data[off + TYPE_AT], data[off + TYPE_AT + 1]
    rlen = int.from_bytes(data[off + RLEN_AT:off + RLEN_AT + 2], "big")
    lctr = int.from_bytes(data[off + 12:off + 14], "big")
    wlen = wire_length(data, off)
    rtype = tbyte & 0x7F
    fields = {"erf": True, "erf.ts": int.from_bytes(data[off:off + 8], "little"),
              "erf.types": tbyte, "erf.types.type": rtype,
              "erf.types.ext_header": tbyte >> 7, "erf.flags": flags, "erf.rlen": rlen,
              "erf.lctr": lctr, "erf.wlen": wlen}
    if rlen < ERF_HEADER:
        raise DecodeError(f"ERF record length {rlen} at byte {off + 10} is below the "
                          f"{ERF_HEADER}-byte header", "erf", off + 10)
    pos = off + ERF_HEADER
    ext = []
    more = tbyte & ERF_EXT_PRESENT
    while more:
        if pos + EXT_HEADER > off + min(rlen, n):
            raise DecodeError(f"ERF extension header truncated at byte {pos}", "erf", pos)
        ext.append(data[pos] & 0x7F)
        more = data[pos] & 0x80
        pos += EXT_HEADER
    fields["erf.ehdr.types"] = ",".join(f"0x{t:02x}" for t in ext)  # one per extension
    if rtype == ERF_TYPE_ETH:
        pos += ETH_PAD
    end = min(off + rlen, len(data), pos + wlen)
    if end < pos:
        raise DecodeError(f"ERF record length {rlen} at byte {off + 10} leaves no room for "
                          "the payload", "erf", off + 10)
    linktype = INNER_LINKTYPE.get(rtype)
    payload = data[:end]
    sizes = lengths(data[off:], pos - off)
    if linktype is None:
        return Unwrapped(payload, pos, None, "erf", fields, ("erf.type", rtype), sizes)
    return Unwrapped(payload, pos, linktype, "erf", fields, lengths=sizes)


def wire_length(data: bytes, off: int = 0) -> int:
    """The record's ``wlen``: the length of the packet on the wire (0 if cut before it)."""
    return int.from_bytes(data[off + WLEN_AT:off + WLEN_AT + 2], "big")


def lengths(record: bytes, payload_at: int) -> tuple[int, int]:
    """(captured, on the wire) lengths of the packet in ``record`` (as captured) whose payload
    starts at ``payload_at``, as Wireshark counts them: ``wlen`` on the wire (the record's
    header, padding and extension headers are no part of the packet); captured, ``wlen``, or
    what the capture holds past the headers when that is less (a snap length, a short
    ``rlen``)."""
    wlen = wire_length(record)
    return max(min(wlen, len(record) - payload_at), 0), wlen


def skip(data: bytes, off: int = 0) -> tuple[int, int | None, tuple[str, int] | None] | None:
    """``unwrap`` without the field dict, for the one-line path: (payload offset, inner link
    type or None, next row or None); None when the record is cut or wrong.  The payload runs
    to the end of the record (padding included; the inner walk finds its own end)."""
    n = len(data)
    if n - off < ERF_HEADER or int.from_bytes(data[off + RLEN_AT:off + RLEN_AT + 2],
                                              "big") < ERF_HEADER:
        return None
    tbyte = data[off + TYPE_AT]
    pos = off + ERF_HEADER
    more = tbyte & ERF_EXT_PRESENT
    while more:
        if pos + EXT_HEADER > n:
            return None
        more = data[pos] & 0x80
        pos += EXT_HEADER
    rtype = tbyte & 0x7F
    if rtype == ERF_TYPE_ETH:
        pos += ETH_PAD
    linktype = INNER_LINKTYPE.get(rtype)
    return pos, linktype, None if linktype is not None else ("erf.type", rtype)


def skip_batch_reference(datas: list[bytes]) -> tuple[list[bytes], int | None] | None:
    """Every record's payload (``skip``: to the record's end) and the one link type they all
    hold; None when a record is cut or wrong, holds no frame, or the link types differ.
    Pure-Python twin of ``roce._fastpath.erf_skip`` (``skip_batch``)."""
    out: list[bytes] = []
    linktype = None
    for data in datas:
        step = skip(data, 0)
        if step is None or step[1] is None or (linktype is not None and step[1] != linktype):
            return None
        linktype = step[1]
        out.append(data[step[0]:])
    return out, linktype


def _compiled_skip_batch() -> Any:
    from roce import fast

    ext = fast._ext
    if ext is None:
        return skip_batch_reference
    ext.erf_configure({"header": ERF_HEADER, "ext": EXT_HEADER, "ext_present": ERF_EXT_PRESENT,
                       "type_at": TYPE_AT, "rlen_at": RLEN_AT, "eth": ERF_TYPE_ETH,
                       "eth_pad": ETH_PAD, "inner": INNER_LINKTYPE})
    return ext.erf_skip


skip_batch: Any = _compiled_skip_batch()  # the one-line path and `roce stats` unwrap with it


def fixed_ts(ns: int) -> int:
    """An ERF timestamp (seconds above a 32-bit binary fraction) for ``ns`` nanoseconds since
    the epoch, to the nearest fraction: read back (``roce.pcapio.erf_ts_ns``) it is ``ns``."""
    sec, frac = divmod(ns, 1_000_000_000)
    return sec << 32 | (frac << 32) // 1_000_000_000 + ((frac << 32) % 1_000_000_000 >= 500_000_000)


def record(payload: bytes, rtype: int = ERF_TYPE_INFINIBAND, ts: int = 0,
           extensions: tuple[int, ...] = (), flags: int = 0, lctr: int = 0,
           wlen: int | None = None) -> bytes:
    """One ERF record around ``payload`` (padded to 8 bytes, as DAG cards write them);
    ``ts`` is the header's timestamp (``fixed_ts`` makes one from nanoseconds);
    ``extensions`` are extension-header type numbers (8 bytes each, zero body)."""
    body = b"".join(bytes((t | (0x80 if i + 1 < len(extensions) else 0),)) + bytes(7)
                    for i, t in enumerate(extensions))
    if rtype == ERF_TYPE_ETH:
        body += bytes(ETH_PAD)
    body += payload
    rlen = ERF_HEADER + len(body)
    rlen += -rlen % 8
    tbyte = rtype | (ERF_EXT_PRESENT if extensions else 0)
    head = (ts.to_bytes(8, "little") + bytes((tbyte, flags)) + rlen.to_bytes(2, "big")
            + lctr.to_bytes(2, "big") + (len(payload) if wlen is None else wlen)
            .to_bytes(2, "big"))
    return (head + body).ljust(rlen, b"\0")


# Link packets (ERF type 25): the flow-control packet's layout is roce.families.ib.flowcontrol's.
decode_link = link.decode


FIELDS = ("erf", "erf.ts", "erf.types", "erf.types.type", "erf.types.ext_header", "erf.flags",
          "erf.rlen", "erf.lctr", "erf.wlen", "erf.ehdr.types", *link.FIELDS)
