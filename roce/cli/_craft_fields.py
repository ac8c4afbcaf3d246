"""``roce craft --field`` (and the named field options): each one checked before anything is
built, against the frame the options describe.

A field option names a field of a header the frame has (``roce.packet.resolve_field``: a
``header.field``, a unique field name, an alias), the frame as ``--link ib`` or ``--encap``
makes it keeps that field as asked (``roce.families.craft.refusal``), and the value is one
the field holds (``roce.packet.field_value``).  Otherwise UsageError (exit 1) naming the
option and the field, with what sets it instead when something does (``payload.len``,
``lrh.*``, a tunnel's outer headers).
"""

from __future__ import annotations

import argparse
from typing import Any

import roce
from roce.errors import UsageError
from roce.headers import LAYOUTS
from roce.opcodes import Opcode
from roce.packet import field_value, resolve_field

# Decoder field names that are no header field craft sets, and what sets them instead.
_ELSEWHERE: dict[str, str] = {
    "payload.len": "--payload-size sets the payload", "roce.version": "--roce-version",
    "icrc.valid": "--bad-icrc makes the ICRC wrong", "frame.len": "the frame's length "
    "follows from its headers and payload", "aeth.selective": "aeth.syndrome and aeth.msn "
    "say it", "vcrc": "--link ib computes the VCRC", "vcrc.valid": "--link ib computes the VCRC",
}
_ELSEWHERE_PREFIX: tuple[tuple[str, str], ...] = (
    ("aeth.syndrome.", "a part of aeth.syndrome: set aeth.syndrome (--syndrome)"),
    ("lrh", "the LRH comes from --link ib: --dlid, --slid, --vl, --sl"),
    ("outer.", "a tunnel's outer headers come from --encap"),
    ("erspan", "ERSPAN headers come from --encap erspan2|erspan3 (--span-id)"),
    ("gre", "GRE comes from --encap"), ("vxlan", "VXLAN comes from --encap vxlan (--span-id)"),
    ("frame.", "frame metadata, not a header field"), ("roce", "--roce-version"),
)


# Headers a frame has only with an option, and the option.
_HEADER_OPTION = {"vlan": "add an 802.1Q tag with --vlan ID", "ipv6": "RoCEv2 over IPv6 is "
                  "--ipv6", "grh": "RoCEv1 (a GRH) is --roce-version 1", "ip": "IPv4 is "
                  "RoCEv2's default (neither --ipv6 nor --roce-version 1)",
                  "udp": "RoCEv1 has no UDP header"}


def _hint(key: str, headers: dict[str, dict[str, Any]]) -> str:
    """What to do instead of ``--field key``, when something else sets it."""
    if key in _ELSEWHERE:
        return _ELSEWHERE[key]
    header = key.partition(".")[0]
    if header in _HEADER_OPTION and header not in headers and "." in key:
        return _HEADER_OPTION[header]
    if header in LAYOUTS and header not in headers and "." in key:
        return f"this opcode has no {header} header (roce opcodes lists the headers of each)"
    if key in headers or key in LAYOUTS:
        fields = [f.name for f in LAYOUTS[key].fields] if key in LAYOUTS else []
        return (f"{key} is a header; its fields are " + ", ".join(
            f"{key}.{f}" for f in fields)) if fields else f"{key} is a header"
    if key.endswith((".addr", ".port")):
        return "either end: set the source or the destination field"
    for prefix, hint in _ELSEWHERE_PREFIX:
        if key.startswith(prefix):
            return hint
    return ""


def checked_fields(args: argparse.Namespace, op: Opcode, payload: bytes | None,
                    kw: dict[str, Any], fields: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """The field options as ``roce.craft`` keywords (``header.field``, or ``icrc``), each
    checked: a field this frame has (``--link`` and ``--encap`` included) and a value the
    field can hold.  UsageError naming the option otherwise."""
    from roce.families import craft as craft_families

    headers = roce.craft(op, payload, **kw).headers
    size = len(payload) if payload is not None else (op.payload_len or 0)
    what = "RoCEv1" if kw.get("roce_version") == 1 else op.short_name
    out: dict[str, Any] = {}
    for key, (flag, value) in fields.items():
        if key == "icrc":
            header, field = "icrc", "icrc"
        else:
            try:
                header, field = resolve_field(headers, key)
            except TypeError:
                name = f"field {key!r}" if flag.startswith("--field") else "such field"
                owner = what if key in ("sport", "ip.ttl") else op.short_name
                hint = _hint(key, headers)
                raise UsageError(f"{flag}: {owner} has no {name} (its headers: "
                                 f"{', '.join(headers)}{'; ' + hint if hint else ''})"
                                 ) from None
        try:
            value = field_value(header, field, value)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{flag}: {exc}") from None
        why = craft_families.refusal(args, op, header, field, value, size)
        if why is not None:
            raise UsageError(f"{flag}: {why}")
        out[header if header == field else f"{header}.{field}"] = value
    return out


__all__ = ["checked_fields"]
