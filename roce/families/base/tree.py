"""The ``-V`` packet tree: every header and every field, as ``tshark -V`` lays them out.

A frame block, then one block per header in wire order titled with
``roce.headers.TITLES``, fields as ``Display Name: value`` with Wireshark's display names
where Wireshark has them (``Destination Queue Pair: 0x000011``, ``Packet Sequence Number:
100``).  The InfiniBand headers sit under one ``InfiniBand`` node as in Wireshark.  The
AETH syndrome is broken down into type and value; the payload shows its length and first
bytes; the ICRC is checked (``[correct]`` / ``[incorrect, should be 0x...]``), which
Wireshark does not do.

Display names come from the layouts (each field's Construct docstring in ``roce.headers``);
``FIELD_FORMAT`` says how a value is written where plain decimal (or True/False) is not it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from roce import fast, macc
from roce.families.base import macctrl
from roce.families.base.fields import FLAT_KEYS, SINGLE_FIELD, hex_spec
from roce.headers import (
    LAYOUTS,
    SYNDROME_TYPES,
    TITLES,
    credit_count,
    describe_syndrome,
    nak_name,
    rnr_timer_us,
    syndrome_type,
    syndrome_value,
)
from roce.icrc import to_trailer
from roce.locate import Walk
from roce.opcodes import OPCODES
from roce.pcapio import Frame

NS = 1_000_000_000
PAYLOAD_PREVIEW = 16  # payload bytes shown in the tree
IB_HEADERS = frozenset(("bth", "rdeth", "deth", "reth", "atomiceth", "aeth", "atomicacketh",
                        "immdt", "ieth", "xrceth", "feth", "cnp"))

_ETHERTYPES = {0x0800: "IPv4", 0x86DD: "IPv6", 0x8100: "802.1Q Virtual LAN",
               0x88A8: "802.1ad", 0x8915: "RoCE", 0x0806: "ARP", macc.ETHERTYPE_MACC: macc.TITLE,
               0x88CC: "LLDP"}
_PROTOCOLS = {1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 47: "GRE", 58: "ICMPv6",
              132: "SCTP", 0x1B: "IBA transport"}
_ECN = {0: "Not-ECT", 1: "ECT(1)", 2: "ECT(0)", 3: "CE"}
_LINKTYPES = {1: "Ethernet", 101: "Raw IP", 113: "Linux cooked-mode capture v1",
              276: "Linux cooked-mode capture v2"}


class RecordLike(Protocol):
    number: int
    ts_ns: int
    rel_ns: int
    delta_ns: int
    frame: Frame
    walk: Walk
    layers: tuple[str, ...]
    fields: dict[str, Any]
    kind: str

    @property
    def message(self) -> str | None: ...


# -- value formats ----------------------------------------------------------------------------
# A format is a template in which "@" stands for the field's value.  The templates of a
# header are pasted into one generated f-string (``_compile``), so rendering a header is
# a single f-string instead of a call per field: the tree costs a third as much.

# Hex formats by the digits they show: -T fields prints these fields in hex too
# (``fields_display``), as tshark does for a BASE_HEX field.
_HEX_WIDTH: dict[str, int] = {}

DEC = "{@}"
BOOL = "{'True' if @ else 'False'}"
SET = "{'Set' if @ else 'Not set'}"
ETYPE = "{_etype(@)}"
PROTO = "{_proto(@)}"
ECN = "{_ecn(@)}"
TCLASS = "{_tclass(@)}"
OPCODE = "{_opcode(@)}"
IHL = "{@ * 4} bytes ({@})"
SYNDROME = "SYNDROME"  # a sub-tree, not a value: see _syndrome
MSN = "MSN"  # a value that a selective NAK annotates: see _msn


def HEX(digits: int) -> str:  # noqa: N802 - reads like the other format constants
    template = "0x{@:0%dx}" % digits  # noqa: UP031 - the braces belong to the template
    _HEX_WIDTH[template] = digits
    return template


def HEXDEC(digits: int) -> str:  # noqa: N802
    template = "0x{@:0%dx} ({@})" % digits  # noqa: UP031
    _HEX_WIDTH[template] = digits
    return template


_HEX_WIDTH.update({ETYPE: 4, TCLASS: 2})  # "IPv4 (0x0800)", "0x00 (DSCP ...)"



def _etype(v: int) -> str:
    return f"{_ETHERTYPES.get(v, 'Unknown')} (0x{v:04x})"


def _proto(v: int) -> str:
    return f"{_PROTOCOLS.get(v, 'Unknown')} ({v})"


def _ecn(v: int) -> str:
    return f"{_ECN[v & 3]} ({v})"


def _tclass(v: int) -> str:
    return f"0x{v:02x} (DSCP: {v >> 2}, ECN: {_ECN[v & 3]})"


def _opcode(v: int) -> str:
    op = OPCODES.get(v)
    return f"{op.short_name if op else 'Unknown'} ({v})"


# (header, field) -> value format, where it is not plain decimal.  Display names come from
# the layouts (roce.headers: each field's docstring).
FIELD_FORMAT: dict[tuple[str, str], str] = {
    ("eth", "type"): ETYPE,
    ("vlan", "etype"): ETYPE,
    ("sll", "src"): HEX(16),
    ("sll", "etype"): ETYPE,
    ("sll2", "etype"): ETYPE,
    ("sll2", "src"): HEX(16),
    ("ip", "ihl"): IHL,
    ("ip", "dsfield.ecn"): ECN,
    ("ip", "id"): HEXDEC(4),
    ("ip", "flags.rb"): SET,
    ("ip", "flags.df"): SET,
    ("ip", "flags.mf"): SET,
    ("ip", "proto"): PROTO,
    ("ip", "checksum"): HEX(4),
    ("ipv6", "tclass"): TCLASS,
    ("ipv6", "flow"): HEX(5),
    ("ipv6", "nxt"): PROTO,
    ("udp", "checksum"): HEX(4),
    ("grh", "nxthdr"): PROTO,
    ("bth", "opcode"): OPCODE,
    ("bth", "se"): BOOL,
    ("bth", "m"): BOOL,
    ("bth", "fecn"): BOOL,
    ("bth", "becn"): BOOL,
    ("bth", "destqp"): HEX(6),
    ("bth", "a"): BOOL,
    # Wireshark's field types: Q_Key FT_UINT64, source QP FT_UINT32 (E2E context: decimal)
    ("deth", "q_key"): HEX(16),
    ("deth", "srcqp"): HEX(8),
    ("reth", "va"): HEX(16),
    ("reth", "r_key"): HEX(8),
    ("atomiceth", "va"): HEX(16),
    ("atomiceth", "r_key"): HEX(8),
    ("aeth", "syndrome"): SYNDROME,
    ("aeth", "msn"): MSN,
    ("immdt", "immdt"): HEX(8),
    ("ieth", "ieth"): HEX(8),
    ("xrceth", "xrcsrq"): HEX(6),
    ("cnp", "reserved"): HEX(32),
}
for _h, _f in FIELD_FORMAT:  # a renamed field fails here, at import, rather than silently
    LAYOUTS[_h].field(_f)

# Where tshark's -T fields writes a value otherwise than the tree's hex width suggests
# (Wireshark 4.0, checked by tests/test_tshark.py): ImmDt and IETH are byte strings
# there (digits without "0x"); ipv6.tclass is a 32-bit field (8 digits).
_FIELDS_BYTES = frozenset({("immdt", "immdt"), ("ieth", "ieth")})
_FIELDS_DIGITS = {("ipv6", "tclass"): 8}


def fields_display() -> dict[str, str]:
    """Flat field key -> ``str.format`` spec of its value in ``-T fields``, for the fields
    tshark prints in hex (``bth.destqp`` -> ``0x{:06x}``): the tree's hex formats above,
    with as many digits as whole bytes need (Wireshark pads hex to an even count), the
    ICRC, and MAC Control's (``macctrl.DISPLAY``, which its tree uses too).  The families'
    own are their handlers' ``display``.  Fields not listed print in decimal."""
    out = {"icrc": hex_spec(8 * len(to_trailer(0))), **macctrl.DISPLAY}
    for header, keys in FLAT_KEYS.items():
        base = "vlan" if header == "vlan2" else header
        for fld, key in zip(LAYOUTS[base].fields, keys):
            key = header if header in SINGLE_FIELD else key
            digits = _HEX_WIDTH.get(FIELD_FORMAT.get((base, fld.name), DEC))
            if digits is None:
                continue
            digits = _FIELDS_DIGITS.get((base, fld.name), digits + digits % 2)
            prefix = "" if (base, fld.name) in _FIELDS_BYTES else "0x"
            out[key] = prefix + "{:0%dx}" % digits  # noqa: UP031
    return out



def _syndrome(syn: int, pad: str) -> str:
    """The AETH syndrome as a small sub-tree: type and the value it qualifies."""
    kind, value = syndrome_type(syn), syndrome_value(syn)
    if kind == 0:
        credits = credit_count(value)
        detail = f"Credit Count: {value} ({'unlimited' if credits is None else credits} credits)"
    elif kind == 1:
        detail = f"Timer: {value} ({rnr_timer_us(value) / 1000:g} ms)"
    elif kind == 3:
        detail = f"Error Code: {nak_name(value)} ({value})"
    else:
        detail = f"Reserved: {value}"
    return (f"{pad}Syndrome: 0x{syn:02x}, {describe_syndrome(syn)}\n"
            f"{pad}    Reserved: {syn >> 7}\n"
            f"{pad}    OpCode: {SYNDROME_TYPES[kind]} ({kind})\n"
            f"{pad}    {detail}\n")


def _msn(msn: int, selective: Any, psn: int, line: str) -> str:
    """The AETH MSN line; a selective NAK's MSN is the PSN that arrived out of order
    (``aeth.selective``; docs/protocol.md, "Selective repeat (IRN) encoding")."""
    if selective:
        return (f"{line}{msn} [selective NAK: PSN {msn} arrived out of order, "
                f"ePSN {psn}]\n")
    return f"{line}{msn}\n"


# Title lines: the header's title and, like Wireshark, the facts that identify it.
_TITLE_FACTS = {
    "eth": ", Src: {f['eth.src']}, Dst: {f['eth.dst']}",
    "ip": ", Src: {f['ip.src']}, Dst: {f['ip.dst']}",
    "ipv6": ", Src: {f['ipv6.src']}, Dst: {f['ipv6.dst']}",
    "udp": ", Src Port: {f['udp.srcport']}, Dst Port: {f['udp.dstport']}",
    "vlan": ", PRI: {f['vlan.priority']}, DEI: {f['vlan.dei']}, ID: {f['vlan.id']}",
    "vlan2": ", PRI: {f['vlan2.priority']}, DEI: {f['vlan2.dei']}, ID: {f['vlan2.id']}",
    "grh": ", SGID: {f['grh.sgid']}, DGID: {f['grh.dgid']}",
}


def _options(opts: bytes | None) -> str:
    return f"    Options: ({len(opts)} bytes) {opts.hex()}\n" if opts else ""


def _flat(key: str) -> str:
    return f"f[{key!r}]"


def _flat_optional(key: str) -> str:
    return f"f.get({key!r})"


def _literal(text: str) -> str:
    """``text`` as the literal part of a generated f-string delimited by double quotes."""
    return (text.replace("\\", "\\\\").replace('"', '\\"').replace("{", "{{")
            .replace("}", "}}").replace("\n", "\\n"))


def block_sources(layers: tuple[str, ...], env: dict[str, Any], ib_title: str | None = None,
                  value: Callable[[str], str] = _flat,
                  optional: Callable[[str], str] = _flat_optional,
                  last_apart: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """The header part of the tree for one header chain as the insides of f-strings
    (double-quoted), one per header: (header, source); the last field's line of a header
    of ``last_apart`` is a block of its own, named ``header.last``.  ``value(key)`` is the
    expression of a flat field's value (``bth.psn``; by default ``f['bth.psn']``, the record's flat
    fields), ``optional(key)`` that of a field that may be absent (None then).  The helpers
    and constants it calls are put in ``env``.  A header's block reads its own fields only.
    The decoder generates its own tree writer from the same source, with the values it
    decodes as expressions (``roce.decoder.decode``)."""
    env.update({"_etype": _etype, "_proto": _proto, "_ecn": _ecn, "_tclass": _tclass,
                "_opcode": _opcode, "_syndrome": _syndrome, "_msn": _msn,
                "_options": _options, "_macc": macctrl.tree})
    blocks: list[tuple[str, str]] = []

    def const(text: str) -> str:
        """A constant passed to a helper, by name: no text needs quoting in the source."""
        name = f"K{len(env)}"
        env[name] = text
        return name

    in_ib = False
    for header in layers:
        if header == macctrl.PROTOCOL:  # PAUSE / PFC: a block of its own (macctrl.tree)
            blocks.append((header, "{_macc(f)}"))
            continue
        parts: list[str] = []
        ib = header in IB_HEADERS
        if ib and not in_ib:
            parts.append(_literal(f"InfiniBand ({'RoCEv1' if 'grh' in layers else 'RoCEv2'})\n"
                                  if ib_title is None else ib_title))
            in_ib = True
        pad = "        " if ib else "    "
        base = "vlan" if header == "vlan2" else header
        facts = _TITLE_FACTS.get(header, "")
        for key in re.findall(r"f\['([^']+)'\]", facts):
            facts = facts.replace(f"f['{key}']", value(key))
        parts.append(_literal(("    " if ib else "") + TITLES.get(base, header)) + facts + "\\n")
        single = header in SINGLE_FIELD
        last = LAYOUTS[base].fields[-1]
        for fld, key in zip(LAYOUTS[base].fields, FLAT_KEYS[header]):
            if fld is last and header in last_apart:
                blocks.append((header, "".join(parts)))
                parts, header = [], f"{header}.last"
            label = fld.title
            template = FIELD_FORMAT.get((base, fld.name)) or (BOOL if fld.kind == "bool" else DEC)
            v = value(header if single else key)
            if template == SYNDROME:
                parts.append(f"{{_syndrome({v}, {const(pad)})}}")
                continue
            if template == MSN:
                parts.append(f"{{_msn({v}, {optional('aeth.selective')}, {value('bth.psn')}, "
                             f"{const(pad + label + ': ')})}}")
                continue
            parts.append(_literal(f"{pad}{label}: ") + template.replace("@", v) + "\\n")
        if header == "ip":
            parts.append(f"{{_options({optional('ip.options')})}}")
        blocks.append((header, "".join(parts)))
    return blocks


def body_source(layers: tuple[str, ...], env: dict[str, Any],
                ib_title: str | None = None) -> str:
    """``block_sources`` over the record's flat fields, as the inside of one f-string."""
    return "".join(src for _, src in block_sources(layers, env, ib_title))


def _compile(layers: tuple[str, ...],
             ib_title: str | None = None) -> Callable[[Mapping[str, Any]], str]:
    """The header part of the tree for one header chain, as a single generated f-string
    over the record's flat fields (``bth.psn``...): ``render(fields) -> lines``."""
    env: dict[str, Any] = {}
    src = f'def render(f):\n    return f"{body_source(layers, env, ib_title)}"\n'
    exec(compile(src, f"<roce.families.base.tree {':'.join(layers)}>", "exec"), env)
    return env["render"]  # type: ignore[no-any-return]


_RENDER: dict[tuple[str, ...], Callable[[Mapping[str, Any]], str]] = {}


def transport_text(layers: tuple[str, ...], fields: Mapping[str, Any]) -> str:
    """The BTH and extended-header blocks alone, nested as under an ``InfiniBand`` node
    that the caller printed (native InfiniBand: ``roce.families.ib.native``)."""
    key = ("native", *layers)
    body = _RENDER.get(key)
    if body is None:
        body = _RENDER[key] = _compile(layers, ib_title="")
    return body(fields)


def headers_text(layers: tuple[str, ...], fields: Mapping[str, Any]) -> str:
    """The blocks of headers outside the IBA transport (Ethernet, VLAN, IP, UDP) alone: what
    carries a family over IP or UDP (``roce.decoder.records``)."""
    body = _RENDER.get(layers)
    if body is None:
        body = _RENDER[layers] = _compile(layers)
    return body(fields)


def _seconds(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // NS}.{ns % NS:09d}"


_CLOCK: dict[int, str] = {}  # whole second -> "YYYY-mm-dd HH:MM:SS": frames share seconds
# (captured length, length on the wire, link type, layers) -> the frame block's text around
# the arrival time and the frame number: a capture's frames share a few lengths
_FRAME_TEXT: dict[tuple[int, int, int, tuple[str, ...]], tuple[str, str]] = {}


def frame_text(number: int, ts_ns: int, rel_ns: int, delta_ns: int, cap: int, wire: int,
               lt: int, layers: tuple[str, ...]) -> str:
    """The frame block (without its last newline)."""
    sec, frac = divmod(ts_ns, NS)
    when = _CLOCK.get(sec)
    if when is None:
        if len(_CLOCK) > 4096:
            _CLOCK.clear()
        when = _CLOCK[sec] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec))
    fixed = _FRAME_TEXT.get((cap, wire, lt, layers))
    if fixed is None:
        if len(_FRAME_TEXT) > 4096:
            _FRAME_TEXT.clear()
        fixed = _FRAME_TEXT[cap, wire, lt, layers] = (
            f": {wire} bytes on wire ({wire * 8} bits), "
            f"{cap} bytes captured ({cap * 8} bits)\n"
            f"    Encapsulation type: {_LINKTYPES.get(lt, 'Unknown')} ({lt})\n"
            f"    Arrival Time: ",
            f"\n    Frame Length: {wire} bytes ({wire * 8} bits)\n"
            f"    Capture Length: {cap} bytes ({cap * 8} bits)\n"
            f"    [Protocols in frame: {':'.join(layers) or 'data'}]")
    return (
        f"Frame {number}{fixed[0]}{when}.{frac:09d} UTC\n"
        f"    Epoch Time: {sec}.{frac:09d} seconds\n"
        f"    [Time delta from previous captured frame: "
        f"{_seconds(delta_ns) if delta_ns < 0 else f'{delta_ns // NS}.{delta_ns % NS:09d}'}"
        " seconds]\n"
        f"    [Time since reference or first frame: "
        f"{_seconds(rel_ns) if rel_ns < 0 else f'{rel_ns // NS}.{rel_ns % NS:09d}'} seconds]\n"
        f"    Frame Number: {number}{fixed[1]}")


def _frame_lines(rec: RecordLike) -> str:
    fr = rec.frame  # by index: any Frame-shaped tuple will do
    return frame_text(rec.number, rec.ts_ns, rec.rel_ns, rec.delta_ns, fr[2], fr[3], fr[4],
                      rec.layers)


def render(rec: RecordLike) -> str:
    """The tree of one record, ending with a blank line."""
    layers = rec.layers
    body = _RENDER.get(layers)
    if body is None:
        if len(_RENDER) > 1024:
            _RENDER.clear()
        body = _RENDER[layers] = _compile(layers)
    tail = "\n".join(_tail(rec, any(h in IB_HEADERS for h in layers)))
    return f"{_frame_lines(rec)}\n{body(rec.fields)}{tail}\n\n"


def _preview(data: bytes) -> str:
    more = "..." if len(data) > PAYLOAD_PREVIEW else ""
    return data[:PAYLOAD_PREVIEW].hex(" ") + more


def roce_tail(data: bytes, w: Walk, stored: int, valid: bool, in_ib: bool) -> str:
    """Payload, pad, ICRC and trailer of a whole RoCE packet."""
    pad = "    " if in_ib else ""
    at = w.payload_off
    size = w.pad_off - at
    # as _preview of the payload, from the preview's bytes only (not a copy of the payload)
    if size > PAYLOAD_PREVIEW:
        out = (f"{pad}Payload: {size} bytes\n{pad}    Data: "
               f"{data[at:at + PAYLOAD_PREVIEW].hex(' ')}...")
    elif size > 0:
        out = f"{pad}Payload: {size} bytes\n{pad}    Data: {data[at:at + size].hex(' ')}"
    else:
        out = f"{pad}Payload: {size} bytes"
    if w.icrc_off > w.pad_off:
        out += f"\n{pad}Pad: {w.icrc_off - w.pad_off} bytes"
    if valid:
        out += f"\n{pad}Invariant CRC: 0x{stored:08x} [correct]"
    else:
        want = fast.icrc_of(data, w)
        out += f"\n{pad}Invariant CRC: 0x{stored:08x} [incorrect, should be 0x{want:08x}]"
    if w.l4_end < len(data):
        out += f"\nEthernet trailer: {len(data) - w.l4_end} bytes"
    return out


def _tail(rec: RecordLike, in_ib: bool) -> list[str]:
    """Payload, pad, ICRC and trailer for RoCE; the reason for anything else."""
    w, data, f = rec.walk, rec.frame[0], rec.fields
    pad = "    " if in_ib else ""
    out: list[str] = []
    if rec.kind == "roce":
        return [roce_tail(data, w, f["icrc"], f["icrc.valid"], in_ib)]
    if rec.kind == "truncated":
        if w.payload_off >= 0:
            payload = data[w.payload_off:]
            out.append(f"{pad}Payload: {len(payload)} bytes captured")
            if payload:
                out.append(f"{pad}    Data: {_preview(payload)}")
            out.append(f"{pad}Invariant CRC: [not captured]")
        out.append(f"[Packet cut short by the capture: {rec.message}]")
        return out
    if rec.kind == "malformed":
        out.append(f"[Malformed Packet: {rec.message}]")
        return out
    # not RoCE
    if "udp" in f and w.udp_off >= 0:
        out.append(f"Data ({max(len(data) - w.udp_off - 8, 0)} bytes)")
    out.append(f"[Not RoCE: {rec.message}]")
    return out


def hexdump(data: bytes) -> str:
    """``tshark -x`` style: offset, 16 bytes in hex, ASCII."""
    rows = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hexes = chunk.hex(" ")
        if len(chunk) > 8:  # a gap between the two groups of eight, as tshark prints
            hexes = hexes[:23] + " " + hexes[23:]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        rows.append(f"{off:04x}  {hexes:<49}  {text}")
    return "\n".join(rows) + "\n"


__all__ = ["FIELD_FORMAT", "fields_display", "hexdump", "render"]
