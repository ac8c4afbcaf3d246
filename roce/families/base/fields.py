"""The flat fields of the headers a walk located: what ``Packet.fields()``, the decoder's records,
its filters and every output name a header field (``bth.psn``, ``reth.va``, ``ip.src``).

``known_headers`` decodes whatever a walk located, also in frames that are cut short or
broken; ``header_fields`` flattens decoded headers into Wireshark's names (minus the
``infiniband.`` prefix).  Native InfiniBand (``roce.families.ib``) uses both for its BTH and
extended headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roce.headers import DECODERS, LAYOUTS, SIZE_OF, selective_aeth, syndrome_type, syndrome_value
from roce.locate import (
    BAD_L3_LENGTH,
    BAD_TRUNCATED,
    BAD_UDP_LENGTH,
    L3_GRH,
    L3_IPV4,
    L3_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    Walk,
)
from roce.opcodes import OPCODES

Headers = dict[str, dict[str, Any]]

L2_NAMES = {LINKTYPE_ETHERNET: "eth", LINKTYPE_LINUX_SLL: "sll", LINKTYPE_LINUX_SLL2: "sll2"}
L3_NAMES = {L3_IPV4: "ip", L3_IPV6: "ipv6", L3_GRH: "grh"}
VLAN_NAMES = ("vlan", "vlan2")  # the names roce.packet gives stacked tags
_IP_SIZE = SIZE_OF["ip"]


def known_headers(data: bytes, w: Walk, linktype: int) -> Headers:
    """Decode every header the walk located and the frame holds in full.

    For a good RoCE frame this is what ``Packet`` decodes; for malformed, cut or non-RoCE
    frames it is as far as the bytes go, so those still show addresses and ports.
    Extended headers are decoded only up to where the walk found them whole: bytes past
    a bad length field are not headers.
    """
    h: Headers = {}
    n = len(data)
    l2 = L2_NAMES.get(linktype)
    if l2 is not None:
        size = SIZE_OF[l2]
        if n < size:
            return h
        h[l2] = DECODERS[l2](data, 0)
        off = size
        for i in range(min(w.vlans, len(VLAN_NAMES))):
            h[VLAN_NAMES[i]] = DECODERS["vlan"](data, off)
            off += SIZE_OF["vlan"]
    l3 = L3_NAMES.get(w.l3_kind)
    if l3 is None or w.l3_off < 0 or n - w.l3_off < SIZE_OF[l3]:
        return h
    h[l3] = DECODERS[l3](data, w.l3_off)
    if l3 == "ip" and w.l3_len > _IP_SIZE and w.l3_off + w.l3_len <= n:
        h["ip"]["options"] = data[w.l3_off + _IP_SIZE:w.l3_off + w.l3_len]
    if w.udp_off >= 0:
        if n - w.udp_off < SIZE_OF["udp"]:
            return h
        h["udp"] = DECODERS["udp"](data, w.udp_off)
    b = w.bth_off
    if b < 0 or n - b < SIZE_OF["bth"]:
        return h
    bth = h["bth"] = DECODERS["bth"](data, b)
    op = OPCODES.get(bth["opcode"])
    if op is None:
        return h
    # Where the extended headers may reach: the walk's payload start when it got that
    # far, else the header it stopped in (a truncated one is left out).
    if w.payload_off >= 0:
        limit = w.payload_off
    elif w.status == BAD_TRUNCATED:
        limit = w.err_offset
    else:
        return h
    pos = b + SIZE_OF["bth"]
    for name in op.headers:
        size = SIZE_OF[name]
        if pos + size > limit:
            break
        h[name] = DECODERS[name](data, pos)
        pos += size
    return h


# One-field headers whose field is named like the header are flat under the header's own
# name, as Wireshark does ("immdt", "ieth"): header -> field.
SINGLE_FIELD = {name: lay.fields[0].name for name, lay in LAYOUTS.items()
                if len(lay.fields) == 1 and lay.fields[0].name == name}
_SYNDROME_VALUE = ("credit_count", "timer", "reserved_value", "error_code")
# Flat names, computed once: "reth.va" etc. in layout (and decoder) order.
FLAT_KEYS: dict[str, tuple[str, ...]] = {
    name: tuple(f"{name}.{f.name}" for f in lay.fields) for name, lay in LAYOUTS.items()}
FLAT_KEYS["vlan2"] = tuple(f"vlan2.{f.name}" for f in LAYOUTS["vlan"].fields)


def header_fields(h: Mapping[str, Mapping[str, Any]], out: dict[str, Any]) -> None:
    """Add the flat fields of decoded headers to ``out``, named as ``Packet.fields()``
    names them (the header name itself marks presence)."""
    for name, values in h.items():
        single = SINGLE_FIELD.get(name)
        if single is not None:
            out[name] = values[single]
            continue
        out[name] = True
        out.update(zip(FLAT_KEYS[name], values.values()))
        if name == "ip" and "options" in values:
            out["ip.options"] = values["options"]
    aeth = h.get("aeth")
    if aeth is not None:
        syn = aeth["syndrome"]
        kind = syndrome_type(syn)
        out["aeth.syndrome.reserved"] = syn >> 7
        out["aeth.syndrome.opcode"] = kind
        out["aeth.syndrome." + _SYNDROME_VALUE[kind]] = syndrome_value(syn)
        if "bth" in h and selective_aeth(syn, h["bth"]["psn"], aeth["msn"]):
            out["aeth.selective"] = True  # only when true, as Wireshark's analysis flags


# Wireshark's either-direction fields: header -> (first field, second field, pair name)
PAIRS = {"ip": ("src", "dst", "ip.addr"), "ipv6": ("src", "dst", "ipv6.addr"),
         "udp": ("srcport", "dstport", "udp.port"), "eth": ("src", "dst", "eth.addr")}


def pair_fields(h: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Add ``ip.addr``, ``udp.port``... of decoded headers whose flat fields ``out`` holds."""
    for name, (a, b, both) in PAIRS.items():
        if name in h:
            out[both] = (out[f"{name}.{a}"], out[f"{name}.{b}"])


def hex_spec(bits: int) -> str:
    """The ``str.format`` spec of a value Wireshark displays in hex (BASE_HEX), for a field
    of ``bits`` bits: as many digits as the whole bytes of its field type hold (FT_UINT8
    for up to 8 bits: ``0x03``; FT_UINT24: ``0x000011``), as ``tshark -T fields`` writes it.
    The families declare their hex fields with it (``Handler.display``)."""
    return "0x{:0%dx}" % (2 * ((bits + 7) // 8))  # noqa: UP031 - the braces are the spec's


def is_roce_like(w: Walk) -> bool:
    """A malformed frame that got far enough to be RoCE (RoCEv1 EtherType, or the RoCEv2
    UDP port matched): ``--only-roce`` keeps these."""
    return w.bth_off >= 0 or w.l3_kind == L3_GRH or w.status == BAD_UDP_LENGTH


def is_capture_cut(w: Walk, caplen: int, origlen: int) -> bool:
    """The walk failed only because the capture's snaplen cut the frame."""
    if caplen >= origlen:
        return False
    return w.status == BAD_TRUNCATED or (w.status == BAD_L3_LENGTH and w.err_a > w.err_b)


__all__ = ["FLAT_KEYS", "PAIRS", "Headers", "L2_NAMES", "L3_NAMES", "SINGLE_FIELD",
           "VLAN_NAMES", "header_fields", "hex_spec", "is_capture_cut", "is_roce_like",
           "known_headers", "pair_fields"]
