"""``roce craft --link ib`` and ``--encap NAME``: the frames ``roce craft`` built, re-framed as
native InfiniBand (LRH [GRH] BTH ... ICRC VCRC, pcap link type 247) or wrapped in a
registered mirror/overlay tunnel (outer Ethernet + IPv4, then the tunnel's headers as its
registry rows say: over an IP protocol, a UDP port, or inside another tunnel such as GRE).
The options that ask for them are the craft command's (``roce.cli._craft_framing``).

``--encap`` offers every registered tunnel with an ``encap`` (``Handler.encap``): ERSPAN
II/III, GRE and VXLAN built in, a plugin's too, with no edit here.

The transport (BTH through pad) is taken from the RoCE frame as built, so every opcode
``roce craft`` knows crafts here too, from the same table.  What the re-framing drops or
computes itself (native InfiniBand keeps no Ethernet, VLAN, IP or UDP header and sets the
GRH's payload length and the ICRC) cannot be asked for: ``check_options`` and ``refusal``
say why, before anything is built.
"""

from __future__ import annotations

import argparse
import struct
from collections.abc import Iterable
from typing import Any

from roce.errors import UsageError
from roce.families import registry
from roce.families.ib import native as ib
from roce.fast import ip_checksum_reference
from roce.headers import DECODERS, ENCODERS, SIZE_OF
from roce.icrc import to_trailer
from roce.locate import ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1
from roce.opcodes import IB_CNP_OPCODE, OPCODES, Opcode, Transport


def encaps() -> dict[str, Any]:
    """Tunnel name -> its handler, for every registered tunnel that can wrap a frame."""
    return {name: h for name, h in registry().handlers.items() if h.encap is not None}


OUTER_MACS = bytes.fromhex("02000000000a02000000000b")
OUTER_SRC, OUTER_DST = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
IPPROTO_UDP = 17


def _ipv4(proto: int, payload: bytes) -> bytes:
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64,
                               proto, 0, OUTER_SRC, OUTER_DST))
    ip[10:12] = ip_checksum_reference(bytes(ip)).to_bytes(2, "big")
    return OUTER_MACS + b"\x08\x00" + bytes(ip) + payload


def ib_transport(frame: bytes, bth_off: int, icrc_off: int) -> bytes:
    """BTH through pad for native InfiniBand: the frame's, but a CNP (RoCE's 0x81, or the IB
    one the RoCE walk refuses) becomes native InfiniBand's: opcode 0x80, the BTH and the
    extended headers of its row (docs/protocol.md "Native InfiniBand")."""
    bth = DECODERS["bth"](frame, bth_off)
    op = OPCODES.get(bth["opcode"])
    if op is None or op.transport is not Transport.CNP:
        return frame[bth_off:icrc_off]
    ib_cnp = OPCODES[IB_CNP_OPCODE]
    bth["opcode"] = ib_cnp.code
    return ENCODERS["bth"](bth) + bytes(sum(SIZE_OF[h] for h in ib_cnp.headers))


# The headers of a RoCE frame that native InfiniBand does not keep: the LRH takes their
# place (and the GRH, with --roce-version 1, the IP header's).
IB_DROPPED = frozenset(("eth", "vlan", "ip", "ipv6", "udp"))
_ETH, _UDP, _GRH = SIZE_OF["eth"], SIZE_OF["udp"], SIZE_OF["grh"]
_BTH_AT = {ETHERTYPE_ROCEV1: _ETH + _GRH, ETHERTYPE_IPV4: _ETH + SIZE_OF["ip"] + _UDP,
           ETHERTYPE_IPV6: _ETH + SIZE_OF["ipv6"] + _UDP}


def check_options(args: argparse.Namespace) -> None:
    """UsageError for frame options the framing asked for (``--link``, ``--encap``) would
    drop without a word."""
    if getattr(args, "link", "eth") != "ib":
        return
    if getattr(args, "encap", None):
        raise UsageError("--encap wraps Ethernet frames: not with --link ib")
    if getattr(args, "vlan", None) is not None:
        raise UsageError("--vlan: a native InfiniBand frame (--link ib) has no VLAN tag")
    if getattr(args, "ipv6", False):
        raise UsageError("--ipv6: a native InfiniBand frame (--link ib) has no IP header "
                         "(its GRH comes with --roce-version 1)")
    if getattr(args, "roce_version", 2) == 2:
        for flag, given in (("--src", args.src is not None), ("--dst", args.dst is not None),
                            ("--ecn", args.ecn is not None), ("--dscp", bool(args.dscp))):
            if given:
                raise UsageError(f"{flag}: a native InfiniBand frame without a GRH has no "
                                 "addresses or traffic class (add --roce-version 1)")


def refusal(args: argparse.Namespace, op: Opcode, header: str, field: str, value: object,
            payload_len: int) -> str | None:
    """Why the frame ``--link`` / ``--encap`` makes of an ``op`` frame would not carry
    ``header.field`` = ``value`` as asked (None: it would).  A tunnel wraps the whole frame
    and keeps every field; native InfiniBand drops the Ethernet-side headers, computes some
    fields, and makes a CNP its own (BTH alone)."""
    if getattr(args, "link", "eth") != "ib":
        return None
    if header in IB_DROPPED:
        return f"a native InfiniBand frame (--link ib) has no {header} header"
    if op.transport is Transport.CNP and header not in (
            "bth", "grh", *OPCODES[IB_CNP_OPCODE].headers):
        return f"native InfiniBand's CNP (--link ib) is BTH alone: it has no {header} header"
    if header == "icrc":
        return "--link ib computes the ICRC and the VCRC (--bad-icrc flips the ICRC)"
    if (header, field) == ("grh", "paylen"):
        return "--link ib sets the GRH payload length from the packet"
    if (header, field) == ("bth", "opcode") and isinstance(value, int):
        op = OPCODES.get(value)
        if op is not None and op.transport is Transport.CNP and value != IB_CNP_OPCODE:
            return (f"0x{value:02x} is RoCE's CNP; native InfiniBand's is "
                    f"0x{IB_CNP_OPCODE:02x} (the opcode cnp becomes it with --link ib)")
    if (header, field) == ("bth", "padcnt") and isinstance(value, int) and (
            payload_len + value) % 4:
        return (f"a native InfiniBand packet is whole 4-byte words: a {payload_len}-byte "
                f"payload takes {-payload_len & 3} bytes of pad, not {value}")
    return None


def to_ib(frame: bytes, args: argparse.Namespace) -> bytes:
    """The native InfiniBand packet for a frame ``roce craft`` built.  Its layout is known
    (Ethernet, no tag, then IPv4 + UDP, IPv6 + UDP or a GRH: ``check_options`` refused the
    rest), so BTH is found by the EtherType, not by the walk: a field set to a value the
    walk refuses (``bth.tver``, ``grh.nxthdr``) is carried as asked."""
    etype = int.from_bytes(frame[_ETH - 2:_ETH], "big")
    bth_off = _BTH_AT[etype]
    transport = ib_transport(frame, bth_off, len(frame) - len(to_trailer(0)))
    bad = bool(getattr(args, "bad_icrc", False))
    if etype == ETHERTYPE_ROCEV1:
        return ib.build(transport, lnh=ib.LNH_GLOBAL, grh=frame[_ETH:_ETH + _GRH],
                        vl=args.vl, sl=args.sl, dlid=args.dlid, slid=args.slid, bad_icrc=bad)
    return ib.build(transport, vl=args.vl, sl=args.sl, dlid=args.dlid, slid=args.slid,
                    bad_icrc=bad)


def _carried(payload: bytes, handler: Any, n: int, depth: int = 0) -> bytes:
    """``payload`` (``handler``'s bytes) inside what its registry row says carries it, up to
    an outer IPv4 header."""
    reg = registry()
    row = next(((table, value) for table, rows in reg.tables.items()
                for value, h in sorted(rows.items()) if h is handler), None)
    if row is None or depth > 4:
        raise UsageError(f"--encap {handler.name}: no registry row says what carries it")
    table, value = row
    if table == "ip.proto":
        return _ipv4(value, payload)
    if table == "udp.port":
        return _ipv4(IPPROTO_UDP, struct.pack("!HHHH", 49152 + n % 16384, value,
                                              8 + len(payload), 0) + payload)
    carrier = next((h for h in reg.handlers.values() if h.carry is not None
                    and getattr(h.skip, "table", None) == table), None)
    if carrier is None:
        raise UsageError(f"--encap {handler.name}: no registered tunnel carries {table}")
    return _carried(carrier.carry(value, payload, n), carrier, n, depth + 1)


def encap(frame: bytes, kind: str, n: int, span: int) -> bytes:
    """Frame number ``n`` wrapped in the tunnel ``kind`` (session ID / VNI ``span``)."""
    handler = encaps()[kind]
    return _carried(handler.encap(frame, n, span), handler, n)


def apply(args: argparse.Namespace, datas: Iterable[bytes]) -> tuple[Iterable[bytes], int]:
    """The frames to write and their pcap link type; one at a time, as ``datas`` comes
    (``roce craft --count`` streams: memory does not grow with the count)."""
    if getattr(args, "link", "eth") == "ib":
        return (to_ib(d, args) for d in datas), ib.LINKTYPE_INFINIBAND
    kind = getattr(args, "encap", None)
    if kind:
        bits = encaps()[kind].ident_bits  # --span-id was bounded by the widest when parsed
        if bits and args.span_id >> bits:  # 0: the tunnel carries no session ID
            raise UsageError(f"--span-id {args.span_id} does not fit {kind}'s {bits}-bit "
                             "session ID / VNI")
        return (encap(d, kind, i, args.span_id) for i, d in enumerate(datas)), 1
    return datas, 1
