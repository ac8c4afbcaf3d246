"""``roce craft --link ib`` and ``--encap erspan2|erspan3|gre|vxlan``: the frames ``roce craft``
built, re-framed as native InfiniBand (LRH [GRH] BTH ... ICRC VCRC, pcap link type 247) or
wrapped in a mirror/overlay tunnel (outer Ethernet + IPv4 + GRE/ERSPAN or UDP/VXLAN).

The transport (BTH through pad) is taken from the RoCE frame as built, so every opcode
``roce craft`` knows crafts here too, from the same table.
"""

from __future__ import annotations

import argparse
import struct
from collections.abc import Iterable

from roce.errors import UsageError
from roce.families import tunnels
from roce.families.ib import native as ib
from roce.fast import ip_checksum_reference
from roce.headers import DECODERS, ENCODERS, SIZE_OF
from roce.locate import L3_GRH, walk
from roce.opcodes import IB_CNP_OPCODE, OPCODES, Transport
from roce.options import unsigned

ENCAPS = ("erspan2", "erspan3", "gre", "vxlan")
OUTER_MACS = bytes.fromhex("02000000000a02000000000b")
OUTER_SRC, OUTER_DST = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("native InfiniBand and tunnels")
    g.add_argument("--link", choices=("eth", "ib"), default="eth",
                   help="ib: native InfiniBand (LRH, GRH with --roce-version 1; pcap link "
                        "type 247)")
    lrh = ib.LRH_LAYOUT.field  # values bounded by their LRH field widths (roce.options)
    g.add_argument("--dlid", type=unsigned(lrh("dlid").bits, "a LID"), default=1, metavar="LID")
    g.add_argument("--slid", type=unsigned(lrh("slid").bits, "a LID"), default=2, metavar="LID")
    g.add_argument("--vl", type=unsigned(lrh("vl").bits, "a VL"), default=0, metavar="N")
    g.add_argument("--sl", type=unsigned(lrh("sl").bits, "an SL"), default=0, metavar="N")
    g.add_argument("--encap", choices=ENCAPS,
                   help="wrap each frame in ERSPAN type II/III, GRE (0x6558) or VXLAN")
    g.add_argument("--span-id", type=unsigned(max(
        tunnels.ERSPAN2_LAYOUT.field("spanid").bits, tunnels.VXLAN_LAYOUT.field("vni").bits),
        "a span ID / VNI"), default=1, metavar="N",
                   help="ERSPAN session ID / VXLAN VNI")


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


def to_ib(frame: bytes, args: argparse.Namespace) -> bytes:
    w = walk(frame)
    transport = ib_transport(frame, w.bth_off, w.icrc_off)
    if w.l3_kind == L3_GRH:
        return ib.build(transport, lnh=ib.LNH_GLOBAL, grh=frame[w.l3_off:w.l3_off + 40],
                        vl=args.vl, sl=args.sl, dlid=args.dlid, slid=args.slid)
    return ib.build(transport, vl=args.vl, sl=args.sl, dlid=args.dlid, slid=args.slid)


def encap(frame: bytes, kind: str, n: int, span: int) -> bytes:
    if kind == "erspan2":
        return _ipv4(47, tunnels.gre(tunnels.GRE_ERSPAN2, tunnels.erspan2(frame, span, n),
                                     seq=n))
    if kind == "erspan3":
        return _ipv4(47, tunnels.gre(tunnels.GRE_ERSPAN3,
                                     tunnels.erspan3(frame, span, timestamp=n), seq=n))
    if kind == "gre":
        return _ipv4(47, tunnels.gre(tunnels.GRE_ETHERNET, frame))
    body = tunnels.vxlan(frame, span)
    return _ipv4(17, struct.pack("!HHHH", 49152 + n % 16384, tunnels.VXLAN_PORT,
                                 8 + len(body), 0) + body)


def apply(args: argparse.Namespace, datas: Iterable[bytes]) -> tuple[Iterable[bytes], int]:
    """The frames to write and their pcap link type; one at a time, as ``datas`` comes
    (``roce craft --count`` streams: memory does not grow with the count)."""
    if getattr(args, "link", "eth") == "ib":
        return (to_ib(d, args) for d in datas), ib.LINKTYPE_INFINIBAND
    kind = getattr(args, "encap", None)
    if kind:
        if kind.startswith("erspan"):  # --span-id was bounded by the wider VNI when parsed
            bits = tunnels.ERSPAN2_LAYOUT.field("spanid").bits
            if args.span_id >> bits:
                raise UsageError(f"--span-id {args.span_id} does not fit ERSPAN's {bits}-bit "
                                 "session ID")
        return (encap(d, kind, i, args.span_id) for i, d in enumerate(datas)), 1
    return datas, 1
