"""MAC Control frames (802.3x PAUSE, 802.1Qbb PFC) in ``roce decode``: their flat fields, the
one-line Info text, the ``-V`` block and the filter macros.

The decoder treats these frames as "not RoCE" (the walk stops at EtherType 0x8808); this
module adds what they say.  Field names, display names and bit positions all come from
``roce.macc``'s layouts; the tree follows ``tshark -V`` (Wireshark ``packet-maccontrol.c``):
the class-enable vector with one bit line per class, then "CBFC Class Pause Times".

One-line Info: ``PFC PAUSE prio 3 quanta 65535``; several classes are listed in priority
order, an enabled class with time 0 as ``XON prio N`` (``PFC PAUSE prio 3 quanta 65535,
XON prio 5``); 802.3x PAUSE as ``PAUSE quanta N`` (``PAUSE XON`` for 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roce import macc
from roce.errors import DecodeError
from roce.families.base.fields import hex_spec

PROTOCOL = macc.PROTOCOL
FIELD_NAMES = macc.FIELD_NAMES
_LAY = macc.LAYOUTS
OPCODE = macc.OPCODE_KEY
PAUSE_TIME = macc.PAUSE_TIME_KEY
ENBV = macc.ENBV_KEY
CLASS_TIMES = macc.CLASS_TIME_KEYS
CLASS_BITS = dict(enumerate(macc.CLASS_BIT_KEYS))
PAUSE_TIMES_TITLE = "CBFC Class Pause Times"  # Wireshark's subtree title
# The fields Wireshark shows in hex (packet-maccontrol.c: BASE_HEX), as it writes them: the
# -V block below and -T fields (roce.families.base.tree.fields_display).
DISPLAY = {key: hex_spec(_LAY[header].fields[0].bits)
           for key, header in ((OPCODE, "macc"), (ENBV, "macc.cbfc"))}


def macros() -> dict[str, str]:
    """``-Y`` macros: ``pfc`` (802.1Qbb frames) and ``pause`` (802.3x PAUSE frames)."""
    return {"pfc": f"{OPCODE} == 0x{macc.OPCODE_PFC:04x}",
            "pause": f"{OPCODE} == 0x{macc.OPCODE_PAUSE:04x}"}


def fields(data: bytes, off: int) -> tuple[dict[str, Any], DecodeError | None]:
    """The flat ``macc.*`` fields of the MAC Control header at ``off`` and, for a frame cut
    short, the DecodeError (the fields are then those decoded before the cut)."""
    return macc.decode_partial(data, off)


def _classes(f: Mapping[str, Any]) -> list[str]:
    out = []
    vector = f[ENBV]
    for prio, key in enumerate(CLASS_TIMES):
        if vector >> prio & 1:
            q = f[key]
            out.append(f"PAUSE prio {prio} quanta {q}" if q else f"XON prio {prio}")
    return out


def info(f: Mapping[str, Any], error: DecodeError | None = None) -> tuple[str, str]:
    """(protocol, Info) columns from the flat fields."""
    opcode = f.get(OPCODE)
    if opcode == macc.OPCODE_PFC:
        proto = "PFC"
        if error is None:
            parts = _classes(f)
            text = "PFC " + (", ".join(parts) if parts else "no class enabled")
            if f[ENBV] >> 8:
                text += f" [reserved vector bits 0x{f[ENBV] >> 8:02x}]"
    elif opcode == macc.OPCODE_PAUSE:
        proto = "PAUSE"
        if error is None:
            q = f[PAUSE_TIME]
            text = f"PAUSE quanta {q}" if q else "PAUSE XON"
    elif opcode is None:
        proto, text = "MAC-Ctrl", "MAC Control"
    else:
        proto, text = "MAC-Ctrl", f"MAC Control opcode 0x{opcode:04x}"
    if error is not None:
        text = f"{macc.OPCODE_NAMES.get(opcode, 'MAC Control')} [Malformed: {error}]"
    return proto, text


def columns(data: bytes, off: int) -> tuple[str, str]:
    """(protocol, Info) for the MAC Control frame whose opcode is at ``off``."""
    f, error = fields(data, off)
    return info(f, error)


def _bit_line(bit: int, value: bool, width: int = 16) -> str:
    """Wireshark's bit picture: ``.... .... ..1. .... = `` for bit 5 of 16."""
    chars = ["." for _ in range(width)]
    chars[width - 1 - bit] = "1" if value else "0"
    return " ".join("".join(chars[i:i + 4]) for i in range(0, width, 4))


_TITLES = {macc.flat_name(h, fld.name): fld.title for h in ("macc", "macc.pause", "macc.cbfc")
           for fld in _LAY[h].fields}
_BIT_TITLES = {fld.name: fld.title for fld in _LAY["macc.cbfc.enbv"].fields}


def tree(f: Mapping[str, Any]) -> str:
    """The ``-V`` block (lines ending in newlines) from the flat fields."""
    lines = [macc.TITLE]
    opcode = f.get(OPCODE)
    if opcode is not None:
        name = macc.OPCODE_NAMES.get(opcode, "Unknown")
        lines.append(f"    {_TITLES[OPCODE]}: {name} ({DISPLAY[OPCODE].format(opcode)})")
    if PAUSE_TIME in f:
        lines.append(f"    {_TITLES[PAUSE_TIME]}: {f[PAUSE_TIME]}")
    if ENBV in f:
        vector = f[ENBV]
        on = "".join(f", {_BIT_TITLES[f'c{p}']}" for p in sorted(CLASS_BITS)
                     if vector >> p & 1)
        lines.append(f"    {_TITLES[ENBV]}: {DISPLAY[ENBV].format(vector)}{on}")
        for p in sorted(CLASS_BITS):
            bit = bool(f[CLASS_BITS[p]])
            lines.append(f"        {_bit_line(p, bit)} = {_BIT_TITLES[f'c{p}']}: {bit}")
        if vector >> 8:
            lines.append(f"        [{_BIT_TITLES['reserved']}: 0x{vector >> 8:02x}]")
        lines.append(f"    {PAUSE_TIMES_TITLE}")
        lines += [f"        {_TITLES[k]}: {f[k]}" for k in CLASS_TIMES]
    return "\n".join(lines) + "\n"


__all__ = ["CLASS_BITS", "CLASS_TIMES", "DISPLAY", "ENBV", "FIELD_NAMES", "OPCODE", "PAUSE_TIME",
           "columns", "fields", "info", "macros", "tree"]
