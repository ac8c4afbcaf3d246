"""UET's one-line view in C: the tables that ``roce._fastpath.uet_lines``
(``roce/families/uet/_lines.pxi``) decodes and writes by, generated here from the family's own
definitions, and ``UetLines``, which hands it the frames of a batch.

Nothing the C reads is written twice: field positions and widths come from the layouts of
both readings (``layouts``), which layouts follow which from ``pds_chain``, ``ses_chain``,
``ack_cc_key`` and ``renamed``, PDS flags from each reading's flag table, what is derived
after which layout from ``dissect._DERIVE``, names from ``codes`` (through ``codes.short``),
tags from ``present`` and ``checks``, reserved and coded fields from ``checks``.  The C code
itself (the reading loop, the derived fields, the checks, the Info text) is the hand twin of
``dissect``, ``checks`` and ``present``: tests/test_uet_lines.py holds its lines to theirs on
random frames of both readings, malformed ones included.

What the C does not take it leaves to Python (None back): frames no UET row claims, a header
cut short, a TSS (security) header, a field wider than 64 bits that a line would show.
"""

from __future__ import annotations

from typing import Any

from roce.families.uet import HANDLERS, READING_NAMES, dissect, present
from roce.families.uet import codes as t
from roce.families.uet.checks import CHECKS, CODED, RESERVED, check
from roce.families.uet.dissect import _DERIVE, _FLAG_BYTE
from roce.families.uet.layouts import (
    ACK_CC_STATE,
    AMO,
    P_MASK,
    READINGS,
    SES_HEADERS,
    STD_TAIL,
    ack_cc_key,
    carries_ses,
    pds_chain,
    renamed,
    ses_chain,
)
from roce.families.uet.uetfields import names as field_names

# chain entries that are no layout: chosen by a value in the packet where they stand
CHAIN_END, CHAIN_ACK_CC, CHAIN_STD_TAIL, CHAIN_AMO = 255, 254, 253, 252
MAX_CHAIN = 6  # longest chain after the prologue or the first SES header, plus its end
# what is derived after a layout: by the function dissect runs (codes the C switches on)
DERIVES = {"_request": 1, "_request_syn": 2, "_syn": 3, "_ack": 4, "_ack_ext": 5}


def _names(table: t.Names, size: int = 256) -> list[bytes]:
    return [t.short(table, v).encode() for v in range(size)]


def _bitmap(values: Any, size: int = 256) -> bytes:
    return bytes(1 if v in values else 0 for v in range(size))


def tables() -> dict[str, Any]:
    """Everything the C formatter reads, from the family's definitions."""
    slots = {name: i for i, name in enumerate(field_names())}
    layouts: list[Any] = []
    ids: dict[int, int] = {}

    def layout_id(h: Any) -> int:
        if id(h) not in ids:
            ids[id(h)] = len(layouts)
            derive = _DERIVE.get(h.key)
            pdc = h.layout.field("pdc_mode_rsv").byte_offset if any(
                f.name == "pdc_mode_rsv" for f in h.layout.fields) else -1
            layouts.append({
                "key": h.key, "size": h.size,
                "fields": [(slots[k], f.bit_offset, f.bits, f.kind == "bool") for k, f in
                           zip(h.keys, h.layout.fields)],
                "derive": DERIVES[derive.__name__] if derive is not None else 0,
                "pdc_byte": pdc,
                "flag_byte": slots[_FLAG_BYTE[h.key]] if h.key in _FLAG_BYTE else -1})
        return ids[id(h)]

    readings = []
    for name in READING_NAMES:
        r = READINGS[name]
        h = r.headers

        def key_id(k: str, h: Any = h) -> int:
            return {ACK_CC_STATE: CHAIN_ACK_CC, STD_TAIL: CHAIN_STD_TAIL,
                    AMO: CHAIN_AMO}.get(k) or layout_id(h[k])

        made: dict[tuple[str, ...], bytes] = {}  # few distinct chains, many (type, flags)

        def chain(keys: tuple[str, ...], made: dict[tuple[str, ...], bytes] = made) -> bytes:
            hit = made.get(keys)
            if hit is None:
                ids_ = [key_id(k) for k in keys]
                if len(ids_) >= MAX_CHAIN:
                    raise ValueError(f"a UET chain longer than {MAX_CHAIN - 1}: {keys}")
                hit = made[keys] = bytes(ids_ + [CHAIN_END] * (MAX_CHAIN - len(ids_)))
            return hit

        pds = b"".join(chain(pds_chain(typ, flags, r)) for typ in range(32)
                       for flags in range(128))
        ses_first = bytes(layout_id(h[SES_HEADERS[nh]]) if nh in SES_HEADERS else CHAIN_END
                          for nh in range(16))
        ses = b"".join(chain(ses_chain(nh, op, r)[1:]) for nh in range(16) for op in range(64))
        renames = {}  # (first SES layout, opcode, HD) -> [(from slot, to slot)]
        for first in SES_HEADERS.values():
            for op in range(64):
                for hd in (0, 1):
                    pairs = renamed(first, r, 0, op, bool(hd))
                    if pairs:
                        renames[layout_id(h[first]), op, hd] = [(slots[a], slots[b])
                                                                for a, b in pairs.items()]
        probe = renamed("ack", r, P_MASK)
        flags = [[(slots[n], m, (m & -m).bit_length() - 1) for n, m in r.flags.get(typ, ())]
                 for typ in range(32)]
        coded = [(slots[k], _bitmap(get(r))) for k, get, _what in CODED if get(r) is not None]
        readings.append({
            "pds_chain": pds, "ses_first": ses_first, "ses_chain": ses, "renames": renames,
            "entropy": layout_id(h["entropy"]), "prologue": layout_id(h["prologue"]),
            "std_som": layout_id(h["std.som"]), "std_cont": layout_id(h["std.cont"]),
            "atomic": layout_id(h["atomic"]), "cswap": layout_id(h["cswap"]),
            "ack_ext": layout_id(h["ack.ext"]),
            "ack_cc": bytes(layout_id(h[ack_cc_key(c)]) for c in range(16)),
            "flags": flags, "coded": coded, "mpr_unit": r.mpr_unit,
            "probe": (slots[next(iter(probe))], slots[next(iter(probe.values()))])
            if probe else (-1, -1), "p_mask": P_MASK if probe else 0,
            "ctrl_names": _names(r.ctrl_types), "ses_names": _names(r.ses_opcodes)})
    pds_names = [(t.short(t.PDS_TYPES, v) if v not in (0, t.TSS_TYPE) else
                  f"Unknown({v})").encode() for v in range(32)]
    return {
        "slots": slots, "names": list(slots), "layouts": layouts, "readings": readings,
        "reserved": [slots[k] for k in RESERVED if k in slots],
        "pds_tags": [(slots[k], tag.encode()) for k, tag in present._PDS_TAGS],
        "ses_tags": [(slots[f"uet.ses.{prefix}som"], [(slots[k], tag.encode())
                                                     for k, tag in flags])
                     for prefix, flags in present._SES_TAGS.items()],
        "checks": [(c.name, c.tag.encode()) for c in CHECKS],
        "invalid_rsp_tag": present.INVALID_RSP_TAG.encode(),
        "protocol": present.PROTOCOL.encode(),
        "pds_names": pds_names, "ack_requests": _names(t.ACK_REQUESTS),
        "nack_codes": _names(t.NACK_CODES), "rsp_opcodes": _names(t.RSP_OPCODES),
        "return_codes": _names(t.RETURN_CODES),
        "requests": _bitmap(t.REQUESTS, 32), "rudi": _bitmap(t.RUDI, 32),
        "acks": _bitmap(t.ACKS, 32), "nacks": _bitmap(t.NACKS, 32), "ctrl": t.CTRL,
        "pds_known": _bitmap(set(t.PDS_TYPES) - {0, t.TSS_TYPE}, 32),
        "carries_ses": _bitmap([v for v in range(32) if carries_ses(v)], 32),
        "nh_known": _bitmap(t.NEXT_HEADERS, 16), "nh_none": t.NH_NONE,
        "tss_type": t.TSS_TYPE, "data_opcodes": _bitmap(t.DATA_OPCODES, 64),
        "cswap_opcodes": _bitmap(t.CSWAP_OPCODES),
        "rsp_invalid": bytes(1 if nh in t.RSP_OPCODES_OF and op not in t.RSP_OPCODES_OF[nh]
                             else 0 for nh in range(16) for op in range(64)),
    }


def configure(ext: Any) -> None:
    ext.uet_lines_configure(tables())


def _compiled() -> Any:
    from roce import fast

    ext = getattr(fast, "_ext", None)
    if ext is None or not hasattr(ext, "uet_lines"):
        return None
    configure(ext)
    return ext


_EXT: list[Any] = []  # the configured extension (or None), on first use


def compiled() -> Any:
    """The extension with its tables, or None when it is not built."""
    if not _EXT:
        _EXT.append(_compiled())
    return _EXT[0]


def decoder(reading: Any, entropy: bool) -> Any:
    """``dissect.decode`` for one reading and carriage, its field reads in C
    (``roce._fastpath.uet_decode``) when the extension is built: the same fields in the same
    order, layouts, layers; Python decodes what C leaves (cut packets, TSS, an invalid
    response opcode) and writes the sentences of the checks that fire."""
    ext = compiled()
    index = READING_NAMES.index(reading.name)
    python = dissect.decode
    if ext is None:
        def decode_python(data: bytes, caplen: int | None = None,
                          origlen: int | None = None) -> dissect.Decoded:
            return python(data, caplen, origlen, entropy=entropy, reading=reading)

        return decode_python
    fast, Decoded, walk = ext.uet_decode, dissect.Decoded, dissect.WALK  # noqa: N806

    def decode(data: bytes, caplen: int | None = None,
               origlen: int | None = None) -> dissect.Decoded:
        got = fast(data, index, entropy)
        if got is None:
            return python(data, caplen, origlen, entropy=entropy, reading=reading)
        f, headers, layers, fired = got
        if fired:
            check(f, reading, headers)
        return Decoded(walk, layers, f, None, "uet", reading, headers, data)

    return decode


def row_maps(reg: Any) -> tuple[bytes, bytes]:
    """Which UDP destination ports and IP protocols lead to which UET handler in ``reg``
    (what ``roce.families.dispatch.resolve`` follows): a byte per port (65536) and per
    protocol (256), 0 for none, else 1 + 2 * reading + entropy."""
    code = {name: 1 + 2 * READING_NAMES.index(reading) + entropy
            for (reading, entropy), name in HANDLERS.items()}
    ports, protos = bytearray(65536), bytearray(256)
    for table, out in (("udp.port", ports), ("ip.proto", protos)):
        for value, handler in reg.tables.get(table, {}).items():
            if 0 <= value < len(out) and handler.name in code and handler.decode is not None:
                out[value] = code[handler.name]
    return bytes(ports), bytes(protos)


class UetLines:
    """The compiled UET lines of one ``roce decode`` run: the rows of its registry, its arrow."""

    def __init__(self, reg: Any, arrow: str, udp_port: int) -> None:
        self.ext = compiled()
        self.ports, self.protos = row_maps(reg)
        self.arrow = arrow.encode()
        self.udp_port = udp_port

    @property
    def enabled(self) -> bool:
        return self.ext is not None and (any(self.ports) or any(self.protos))

    def rests(self, batch: Any) -> list[str | None] | None:
        """Per frame of ``batch``: its line after the time column (``Summarizer.line``'s
        source, destination, protocol, length and Info), or None where Python makes it."""
        if self.ext is None:
            return None
        return self.ext.uet_lines(batch.datas, list(batch.origlen), batch.linktype,
                                  self.udp_port, self.ports, self.protos, self.arrow)


__all__ = ["MAX_CHAIN", "UetLines", "compiled", "configure", "decoder", "row_maps", "tables"]
