"""How a decoded UET packet reads: the one-line Info of ``roce decode`` (``columns``) and the
``-V`` tree (``tree``), both from the flat fields and the layouts ``dissect`` used.

One line, in the manner of RoCE's::

    RUD_REQ PDC 0x0012->0x0034 PSN=1005 SES WRITE msg=7 off=4096 len=4096 [SOM]
    ACK_CC PDC 0x0034->0x0012 CACK=1005 ACK=1007 SACK=1006:0x0000000000000003 NSCC ... [M]
    NACK PDC 0x0034->0x0012 PSN=1006 TRIMMED payload=1007

PDS flags and SES flags that are set follow as tags, then one tag per expert note
(``roce.families.uet.checks``), then ``[Malformed: ...]`` or ``[Truncated]``.
"""

from __future__ import annotations

from typing import Any

from roce.codecache import compiled
from roce.families.uet import codes as t
from roce.families.uet import uetfields as names
from roce.families.uet.checks import CHECKS
from roce.families.uet.dissect import INVALID_HEADER, Decoded
from roce.families.uet.layouts import FLAG_TITLES

PROTOCOL = "UET"
INVALID_RSP_TAG = "Invalid response opcode"  # Wireshark's uet.ses.rsp.invalid_opcode, as a tag
Fields = dict[str, Any]

# PDS flags shown as tags, in this order; SES flags of each request header
_PDS_TAGS = (("uet.pds.flags.syn", "SYN"), ("uet.pds.flags.ar", "AR"),
             ("uet.pds.flags.retx", "RETX"), ("uet.pds.flags.m", "M"),
             ("uet.pds.flags.p", "P"), ("uet.pds.flags.nt", "NT"),
             ("uet.pds.flags.epsn", "EPSN"), ("uet.pds.flags.isrod", "ISROD"),
             ("uet.pds.flags.req_cls", "REQ_CLS"), ("uet.pds.flags.req_clr", "REQ_CLR"))
_SES_TAGS = {prefix: tuple((f"uet.ses.{prefix}{flag}", flag.rsplit(".", 1)[-1].upper())
                           for flag in flags)
             for prefix, flags in (
                 ("std.", ("som", "eom", "hd", "rel", "ie", "dc")),
                 ("small_req.", ("som", "eom", "flags.rel", "flags.ie", "flags.dc")),
                 ("med_req.", ("som", "eom", "flags.hd", "flags.rel", "flags.ie",
                               "flags.dc")))}


def _pdc(f: Fields) -> str:
    if "uet.pds.dpdcid" in f:
        return f"PDC 0x{f['uet.pds.spdcid']:04x}->0x{f['uet.pds.dpdcid']:04x}"
    return f"PDC 0x{f['uet.pds.spdcid']:04x}"


def _pds_text(f: Fields, d: Decoded) -> list[str]:
    typ = f["uet.pds.type"]
    parts = [t.short(t.PDS_TYPES, typ) if typ not in (0, t.TSS_TYPE) else
             f"Unknown({typ})"]
    if typ in t.REQUESTS and "uet.pds.psn" in f:
        parts += [_pdc(f), f"PSN={f['uet.pds.psn']}"]
        if "uet.pds.start_psn" in f:
            parts.append(f"start={f['uet.pds.start_psn']}")
        if "uet.pds.cc_state.ccc_id" in f:
            parts.append(f"CCC={f['uet.pds.cc_state.ccc_id']} "
                         f"credit=0x{f['uet.pds.cc_state.credit_target']:06x}")
    elif typ in t.RUDI and "uet.pds.rudi.pkt_id" in f:
        parts.append(f"ID={f['uet.pds.rudi.pkt_id']}")
    elif typ in t.ACKS and "uet.pds.cack_psn" in f:
        parts += [_pdc(f), f"CACK={f['uet.pds.cack_psn']}"]
        if "uet.pds.ack_psn" in f:
            parts.append(f"ACK={f['uet.pds.ack_psn']}")
        else:
            parts.append(f"probe=0x{f['uet.pds.ack.probe_opaque']:04x}")
        req = f.get("uet.pds.flags.req")
        if req:
            parts.append(f"REQ={t.short(t.ACK_REQUESTS, req)}")
        if "uet.pds.ack.epsn" in f:
            parts.append(f"EPSN={f['uet.pds.ack.epsn']}")
        if "uet.pds.ack.sack_psn" in f:
            parts.append(f"SACK={f['uet.pds.ack.sack_psn']}:0x{f['uet.pds.ack.sack_bitmap']:016x}"
                         f" MPR={f['uet.pds.ack.mpr']}")
            if "uet.pds.ack.cc_state.service_time" in f:
                parts.append(f"NSCC svc={f['uet.pds.ack.cc_state.service_time']} "
                             f"rcvd={f['uet.pds.ack.cc_state.rcvd_bytes']} "
                             f"ooo={f['uet.pds.ack.cc_state.ooo_count']}")
            elif "uet.pds.ack.cc_state.credit" in f:
                parts.append(f"CREDIT credit={f['uet.pds.ack.cc_state.credit']} "
                             f"ooo={f['uet.pds.ack.cc_state.ooo_count']}")
    elif typ in t.NACKS and "uet.pds.nack.code" in f:
        parts += [_pdc(f), f"PSN={f['uet.pds.nack.psn']}",
                  t.short(t.NACK_CODES, f["uet.pds.nack.code"]),
                  f"payload={f['uet.pds.nack.max_recv_psn_plus_1']}"]
        if f["uet.pds.nack.vendor_code"]:
            parts.append(f"vendor={f['uet.pds.nack.vendor_code']}")
    elif typ == t.CTRL and "uet.pds.psn" in f:
        parts += [t.short(d.reading.ctrl_types, f["uet.pds.ctl_type"]), _pdc(f),
                  f"PSN={f['uet.pds.psn']}"]
        if "uet.pds.start_psn" in f:
            parts.append(f"start={f['uet.pds.start_psn']}")
        if f["uet.pds.ctrl_payload"]:
            parts.append(f"payload=0x{f['uet.pds.ctrl_payload']:08x}")
    return parts


def _ses_text(f: Fields, d: Decoded) -> list[str]:
    if "uet.ses.std.opcode" in f:
        op = t.short(d.reading.ses_opcodes, f["uet.ses.std.opcode"])
        if "uet.ses.std.message_id" in f:
            off = f.get("uet.ses.std.buffer_offset", f.get("uet.ses.std.restart_token"))
            text = f"SES {op} msg={f['uet.ses.std.message_id']} off={off}"
            if "uet.ses.std.request_length" in f:  # not when the header is cut there
                text += f" len={f['uet.ses.std.request_length']}"
            if "uet.ses.std.message_offset" in f:
                text += f" moff={f['uet.ses.std.message_offset']}"
            return [text]
        for p in ("small_req", "med_req"):
            if f"uet.ses.{p}.req_length" in f:
                off = f.get(f"uet.ses.{p}.buffer_offset")
                where = f" off={off}" if off is not None else ""
                return [f"SES {op}{where} len={f[f'uet.ses.{p}.req_length']}"]
    if "uet.ses.rsp.opcode" in f:
        text = (f"SES {t.short(t.RSP_OPCODES, f['uet.ses.rsp.opcode'])} "
                f"{t.short(t.RETURN_CODES, f['uet.ses.rsp.return_code'])}")
        if "uet.ses.rsp.message_id" in f:
            text += f" msg={f['uet.ses.rsp.message_id']}"
        if "uet.ses.rsp.read_req_message_id" in f:
            text += (f" rmsg={f['uet.ses.rsp.read_req_message_id']} "
                     f"off={f['uet.ses.rsp.message_offset']}")
        if "uet.ses.rsp.payload_length" in f:
            text += f" len={f['uet.ses.rsp.payload_length']}"
        elif "uet.ses.rsp.mod_length" in f:
            text += f" len={f['uet.ses.rsp.mod_length']}"
        return [text]
    return []


def info(d: Decoded) -> str:
    f = d.fields
    parts: list[str] = []
    if "uet.tss.sdi" in f:
        parts.append(f"TSS SDI={f['uet.tss.sdi']}"
                     + (f" SSI={f['uet.tss.ssi']}" if "uet.tss.ssi" in f else ""))
    if "uet.pds.type" in f:
        parts += _pds_text(f, d)
        parts += _ses_text(f, d)
    tags = [tag for key, tag in _PDS_TAGS if f.get(key)]
    for prefix, flags in _SES_TAGS.items():
        if f"uet.ses.{prefix}som" in f:
            tags += [tag for key, tag in flags if f.get(key)]
    if "uet.encrypted" in f:
        tags.append(f"Encrypted {f['uet.encrypted']} bytes")
    if "uet.ses.rsp.invalid_opcode" in f:
        tags.append(INVALID_RSP_TAG)
    tags += [c.tag for c in CHECKS if c.field in f]
    text = " ".join(parts + [f"[{tag}]" for tag in tags])
    if d.kind == "truncated":
        text = f"{text} [Truncated: {d.error}]".strip()
    elif d.kind == "malformed":
        text = f"{text} [Malformed: {d.error}]".strip()
    return text


def columns(d: Decoded) -> tuple[str, str, str, str]:
    """(source, destination, protocol, Info): the addresses are the carrier's (the decoder
    fills them from the IP header before UET)."""
    return "", "", PROTOCOL, info(d)


# -- the -V tree ----------------------------------------------------------------------------------

# Fields Wireshark shows in hex (BASE_HEX), with the digits shown.
_HEX = {
    "uet.pds.flags": 2, "uet.pds.entropy.rsvd": 4, "uet.pds.cc_state.credit_target": 6,
    "uet.pds.ctrl_probe_opaque": 4, "uet.pds.ctrl_payload": 8, "uet.pds.ack.sack_bitmap": 16,
    "uet.pds.ack.probe_opaque": 4, "uet.pds.ack.cc_state": 16, "uet.pds.ack.ccx_state": 32,
    "uet.pds.nack.ccx_state": 32, "uet.pds.ack.cc_state.reserved": 6, "uet.pds.rudi.rsvd": 4,
    "uet.pds.uud.rsvd": 4, "uet.tss.tsc": 16, "uet.tss.reserved": 1,
    "uet.ses.std.flags": 2, "uet.ses.small_req.flags": 2, "uet.ses.med_req.flags": 2,
    "uet.ses.std.restart_token": 16, "uet.ses.std.initiator": 8,
    "uet.ses.std.mem_key_match_bits": 16, "uet.ses.std.header_data": 16,
    "uet.ses.med_req.initiator": 8, "uet.ses.med_req.mem_key_match_bits": 16,
    "uet.ses.std.buffer_offset": 16, "uet.ses.small_req.buffer_offset": 16,
    "uet.ses.med_req.buffer_offset": 16, "uet.ses.med_req.header_data": 16,
    "uet.ses.rendv_ext_hdr.read_offset": 16, "uet.ses.rendv_ext_hdr.read_match_bits": 16,
    "uet.ses.comp_swap_ext_hdr.comp_value": 32, "uet.ses.comp_swap_ext_hdr.swap_value": 32,
}
_NAMED: dict[str, Any] = {
    "uet.pds.nh": t.NEXT_HEADERS, "uet.pds.nack.code": t.NACK_CODES,
    "uet.ses.rsp.opcode": t.RSP_OPCODES, "uet.ses.rsp.return_code": t.RETURN_CODES,
    "uet.pds.ack.cc_type": t.CC_TYPES, "uet.pds.flags.req": t.ACK_REQUESTS,
    **{f"uet.ses.{e}.atomic_opcode": t.AMO_OPCODES for e in ("atomic_op_ext_hdr",
                                                             "comp_swap_ext_hdr")},
    **{f"uet.ses.{e}.atomic_data_type": t.AMO_TYPES for e in ("atomic_op_ext_hdr",
                                                              "comp_swap_ext_hdr")},
    **{f"uet.ses.{e}.sem_ctl": t.AMO_CONTROLS for e in ("atomic_op_ext_hdr",
                                                        "comp_swap_ext_hdr")},
}
# a layout field that decode stores under another name in some packets
_RENAMED = {"uet.pds.nh": ("uet.pds.ctl_type",),
            "uet.pds.ack_psn_offset": ("uet.pds.ack.probe_opaque",),
            "uet.ses.std.buffer_offset": ("uet.ses.std.restart_token",),
            "uet.ses.std.mem_key_match_bits": ("uet.ses.std.restart_token",),
            "uet.ses.med_req.buffer_offset": ("uet.ses.med_req.header_data",)}
# a value and the one it derives, on one line
_WITH_OFFSET = {"uet.pds.clear_psn_offset": "uet.pds.clear_psn",
                "uet.pds.ack_psn_offset": "uet.pds.ack_psn",
                "uet.pds.ack.sack_psn_offset": "uet.pds.ack.sack_psn",
                "uet.pds.psn_offset": "uet.pds.start_psn"}
_BLOCKS = {"entropy": None, "tss": "TSS", "prologue": "PDS", "std": "SES", "small": "SES",
           "medium": "SES", "rsp": "SES", "rsp_data": "SES", "rsp_data_small": "SES",
           "atomic": "Atomic Operation Extension Header",
           "cswap": "Compare and Swap Operation Atomic Header",
           "rendv": "Rendezvous Extension Header", "sync": "Sync Extension Header",
           "ack.ext": "ACK Extension Header"}


def _value(key: str, v: Any, d: Decoded) -> str:
    if isinstance(v, bool):
        return "Yes" if v else "No"
    if key == "uet.pds.type":
        return t.described(t.PDS_TYPES, v)
    if key == "uet.pds.ctl_type":
        return t.described(d.reading.ctrl_types, v)
    if key == "uet.ses.std.opcode":
        return t.described(d.reading.ses_opcodes, v)
    if key == "uet.ses.rsp.list" and d.reading.rsp_lists:
        return t.described(d.reading.rsp_lists, v)
    table = _NAMED.get(key)
    if table is not None:
        return t.described(table, v)
    digits = _HEX.get(key)
    if digits is not None or key.rsplit(".", 1)[-1].startswith(("rsv", "reserved")):
        return f"0x{v:0{digits or 2}x}"
    return str(v)


def _present(key: str, f: Fields) -> str:
    """``key``, or the name its field has in ``f``'s reading; "" when neither is there."""
    if key in f:
        return key
    return next((k for k in _RENAMED.get(key, ()) if k in f), "")


def _line(key: str, f: Fields, d: Decoded, pad: str) -> list[str]:
    key = _present(key, f)
    if not key:
        return []
    v = f[key]
    derived = _WITH_OFFSET.get(key)
    if derived is not None and derived in f:
        sign = f"{v:+d}" if isinstance(v, int) and key != "uet.pds.psn_offset" else str(v)
        return [f"{pad}{names.title(derived)}: {f[derived]} ({names.title(key)} {sign})"]
    return [f"{pad}{names.title(key)}: {_value(key, v, d)}"]


def tree(d: Decoded, data: bytes) -> list[str]:
    """The ``-V`` lines of the UET part (``data``, the frame, is not needed: the decoded
    packet holds its own bytes): by the plan of its reading, kind, PDS type and field names
    (``_tree_plan``), ``tree_steps``' lines."""
    f = d.fields
    key = (d.reading.name, d.kind, f.get("uet.pds.type"), d.headers, *f)
    plan = _TREE_PLANS.get(key)
    if plan is None:
        plan = _tree_plan(key, d)
    return plan(f, d)  # type: ignore[no-any-return]


def tree_steps(d: Decoded, data: bytes) -> list[str]:
    """``tree`` line by line from the layouts: the reference the plans are made from."""
    f, h = d.fields, d.reading.headers
    out = [f"Ultra Ethernet Transport ({d.reading.title})"]
    pad = "        "
    for key in d.headers:
        header = h[key]
        title = _BLOCKS.get(key, "")
        if key == "entropy":
            pad = "    "
        elif title == "PDS":
            out.append(_pds_title(f, d))
            pad = "        "
        elif title == "SES":
            out.append(_ses_title(f, d))
            pad = "        "
        elif title:
            out.append(f"    {title}" if key == "tss" else f"        {title}")
            pad = "        " if key == "tss" else "            "
        for k in header.keys:
            out += _line(k, f, d, pad)
            if k == "uet.pds.flags":
                sub = pad + "    "
                for name, _mask in d.reading.flags.get(f["uet.pds.type"], ()):
                    if name in f:
                        out.append(f"{sub}{FLAG_TITLES[name]}: {_value(name, f[name], d)}")
    _tail(d, out)
    return out


def _pds_title(f: Fields, d: Decoded) -> str:
    return f"    PDS: {t.PDS_TYPES.get(f['uet.pds.type'], ('', 'Unknown'))[1]}"


def _ses_title(f: Fields, d: Decoded) -> str:
    nh = f.get("uet.pds.nh", 0)
    kind = t.NEXT_HEADERS.get(nh, ("", "SES unknown"))[1].removeprefix("SES ")
    op = f.get("uet.ses.std.opcode")
    what = t.short(d.reading.ses_opcodes, op) if op is not None else \
        t.short(t.RSP_OPCODES, f.get("uet.ses.rsp.opcode", -1))
    return f"    SES: {kind[0].upper()}{kind[1:]}, {what}"


def _tail(d: Decoded, out: list[str]) -> None:
    """The payload and the expert notes, after the headers."""
    f = d.fields
    if "uet.encrypted" in f:
        out.append(f"    Encrypted payload: {f['uet.encrypted']} bytes (not parsed)")
    else:
        out += _payload(f, d)
    for expert in _EXPERTS:
        if expert in f:
            out.append(f"    [Expert Info (Error/Malformed): {f[expert]}]")
    for c in CHECKS:
        if c.field in f:
            out.append(f"    [Expert Info ({c.severity}): {c.title}: {f[c.field]}]")


def _payload(f: Fields, d: Decoded) -> list[str]:
    if d.kind != "uet" or not f.get("payload.len"):
        return []
    payload = d.data[len(d.data) - f["payload.len"]:]
    more = "..." if len(payload) > 16 else ""
    return [f"    Payload: {len(payload)} bytes", f"        Data: {payload[:16].hex(' ')}{more}"]


_EXPERTS = ("uet.ses.rsp.invalid_opcode", *INVALID_HEADER.values())


# -- tree plans: one generated function per (reading, kind, PDS type, field names) -----------
# tree_steps' decisions depend on which fields a packet has, their types (fixed per name), the
# reading and the PDS type; only the values vary from packet to packet.  A plan is tree_steps
# run once on the names, written out as one list display of f-strings (as roce.families.base
# renders RoCE's headers): titles and formats chosen once, not per field per packet.

_TREE_PLANS: dict[tuple[Any, ...], Any] = {}


def _text(s: str) -> str:
    """``s`` as literal text inside a generated f"..." (braces doubled)."""
    if '"' in s or "\\" in s or "\n" in s:
        raise ValueError(f"a UET tree text the plans cannot hold: {s!r}")
    return s.replace("{", "{{").replace("}", "}}")


def _value_code(key: str, v: Any, d: Decoded) -> str:
    """``_value(key, f[key], d)`` as part of a generated f-string: the same choice, made
    once."""
    ref = f"f[{key!r}]"
    if isinstance(v, bool):
        return f"{{'Yes' if {ref} else 'No'}}"
    table = None
    if key == "uet.pds.type":
        table = "_PDS_TYPES"
    elif key == "uet.pds.ctl_type":
        table = "d.reading.ctrl_types"
    elif key == "uet.ses.std.opcode":
        table = "d.reading.ses_opcodes"
    elif key == "uet.ses.rsp.list" and d.reading.rsp_lists:
        table = "d.reading.rsp_lists"
    elif key in _NAMED:
        table = f"_NAMED[{key!r}]"
    if table is not None:  # the texts of the table's values made once: _described's
        return f"{{_texts({table}).get({ref}) or _described({table}, {ref})}}"
    digits = _HEX.get(key)
    if digits is not None or key.rsplit(".", 1)[-1].startswith(("rsv", "reserved")):
        return f"0x{{{ref}:0{digits or 2}x}}"
    return f"{{{ref}}}"


_DESCRIBED: dict[int, dict[int, str]] = {}


def _texts(table: t.Names) -> dict[int, str]:
    """``codes.described`` of every value a table names, by the table."""
    texts = _DESCRIBED.get(id(table))
    if texts is None:
        texts = _DESCRIBED[id(table)] = {v: t.described(table, v) for v in table}
    return texts


def _line_code(key: str, f: Fields, d: Decoded, pad: str) -> list[str]:
    """Python source (an f-string) for the lines ``_line(key, f, d, pad)`` makes."""
    key = _present(key, f)
    if not key:
        return []
    v = f[key]
    derived = _WITH_OFFSET.get(key)
    if derived is not None and derived in f:
        sign = f"{{f[{key!r}]:+d}}" if isinstance(v, int) and key != "uet.pds.psn_offset" \
            else f"{{f[{key!r}]}}"
        return [f'f"{_text(pad + names.title(derived))}: {{f[{derived!r}]}} '
                f'({_text(names.title(key))} {sign})"']
    return [f'f"{_text(pad + names.title(key))}: {_value_code(key, v, d)}"']


def _tree_plan(key: tuple[Any, ...], d: Decoded) -> Any:
    f, h = d.fields, d.reading.headers
    items = [repr(f"Ultra Ethernet Transport ({d.reading.title})")]
    pad = "        "
    for name in d.headers:
        header = h[name]
        title = _BLOCKS.get(name, "")
        if name == "entropy":
            pad = "    "
        elif title == "PDS":
            items.append("_pds_title(f, d)")
            pad = "        "
        elif title == "SES":
            items.append("_ses_title(f, d)")
            pad = "        "
        elif title:
            items.append(repr(f"    {title}" if name == "tss" else f"        {title}"))
            pad = "        " if name == "tss" else "            "
        for k in header.keys:
            items += _line_code(k, f, d, pad)
            if k == "uet.pds.flags":
                sub = pad + "    "
                for flag, _mask in d.reading.flags.get(f["uet.pds.type"], ()):
                    if flag in f:
                        items.append(f'f"{_text(sub + FLAG_TITLES[flag])}: '
                                     f'{_value_code(flag, f[flag], d)}"')
    # _tail: what follows the headers; which notes there are is in the key, their text not
    if "uet.encrypted" in f:
        items.append("'    Encrypted payload: ' + str(f['uet.encrypted']) + ' bytes (not parsed)'")
    else:
        items.append("*_payload(f, d)")
    items += [f"'    [Expert Info (Error/Malformed): ' + str(f[{e!r}]) + ']'" for e in _EXPERTS
              if e in f]
    items += [f"{f'    [Expert Info ({c.severity}): {c.title}: '!r} + str(f[{c.field!r}]) + ']'"
              for c in CHECKS if c.field in f]
    src = "def run(f, d):\n    return [" + ",\n            ".join(items) + "]\n"
    env = {"_PDS_TYPES": t.PDS_TYPES, "_NAMED": _NAMED, "_described": t.described,
           "_texts": _texts,
           "_pds_title": _pds_title, "_ses_title": _ses_title, "_payload": _payload}
    exec(compiled(src, f"<uet tree {key[:3]}>", __name__), env)
    if len(_TREE_PLANS) > 4096:
        _TREE_PLANS.clear()
    plan = _TREE_PLANS[key] = env["run"]
    return plan


__all__ = ["PROTOCOL", "columns", "info", "tree", "tree_steps"]
