"""``roce craft``: build RoCE frames from the command line.

::

    roce craft rc-write-only --dqpn 0x11 --psn 100 --va 0x1000 --rkey 0x22 \\
        --payload-size 1024 --src 10.0.0.1 --dst 10.0.0.2 -w out.pcap
    roce craft rc-acknowledge --syndrome 0x60 --msn 5 --count 3
    roce craft ud-send-only --qkey 0x11111111 --sqpn 7 --ipv6 --vlan 100 -w - | tshark -r -
    roce craft pfc --prio 3 --quanta 65535           (802.1Qbb PFC; also pause: craft_macc)
    roce craft uet-write --pds-psn 5 --payload-size 64   (Ultra Ethernet: craft_uet)

Every opcode of ``roce.opcodes.OPCODES`` can be crafted (``roce opcodes`` lists the names;
numbers such as ``0x0a`` work too).  Each frame built is printed in ``roce decode``'s
one-line form (``-V``: the full tree; ``-q``: nothing); ``-w FILE`` also writes a pcap
(pcapng when the name ends in ``.pcapng`` or with ``--pcapng``), ``-w -`` writes it to
standard output and the lines to standard error.

``--count N`` builds N frames whose PSN steps by ``--psn-step`` (default 1) modulo 2^24.
A READ request really consumes ceil(DMA length / MTU) PSNs; the step stays 1 unless asked,
so that a sequence of requests is easy to read: pass ``--psn-step`` to model the gap.

Fields: the named options cover the common ones; ``--field NAME=VALUE`` (repeatable) sets
any field ``roce.craft`` knows: ``header.field`` (``aeth.syndrome``, ``ip.id``), a field
name unique in the packet (``msn``) or an alias (``dqpn``, ``rkey``).  Numbers take 0x/0o/0b
prefixes; ``true``/``false`` set one-bit fields; addresses are written as usual.  Every
field option is checked before anything is built (``roce.cli._craft_fields``): the frame
must have the field (with ``--link ib`` the Ethernet-side headers are gone) and the value
must be one the field holds; otherwise exit 1, naming the field.

Exit status: 0 done, 1 bad usage (unknown opcode or field, value out of range), 2 a file
that cannot be read (``--payload-file``) or written (``-w``).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import ipaddress
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

import roce
from roce import fast
from roce.cli import _craft_framing as craft_framing
from roce.cli import _craft_macc as craft_macc
from roce.cli import _craft_uet as craft_uet
from roce.cli._craft_fields import checked_fields
from roce.errors import InputError, UsageError
from roce.headers import LAYOUTS
from roce.icrc import to_trailer
from roce.locate import OK
from roce.opcodes import OPCODES, Opcode, lookup
from roce.options import (
    bounded_int,
    field_assignment,
    field_int,
    parse_ecn,
    parse_ip_text,
    parse_mac,
    parse_positive,
    parse_psn,
    parse_seconds,
)
from roce.packet import field_width
from roce.pcapio import MAX_TS_NS, Frame, PcapNgWriter, PcapWriter

NS = 1_000_000_000
PSN_MASK = LAYOUTS["bth"].field("psn").mask
_PSN_BYTE = LAYOUTS["bth"].field("psn").byte_offset  # 24 bits, byte-aligned
# The largest payload one frame carries: what the 16-bit IPv4 total length (and UDP length,
# IPv6 payload length) can count.  Payload options are checked against it before anything
# is read or allocated.
MAX_PAYLOAD = LAYOUTS["ip"].field("len").mask
# --field NAME=VALUE, VALUE checked against the field's width
parse_field = field_assignment(field_width)


# -- options --------------------------------------------------------------------------------

# Named options that set one craft() field: (flag, craft key, help).
INT_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("--dqpn", "dqpn", "BTH destination QP"),
    ("--psn", "psn", "BTH PSN (of the first frame)"),
    ("--pkey", "pkey", "BTH P_Key (default 0xffff)"),
    ("--va", "va", "virtual address (RETH or AtomicETH)"),
    ("--rkey", "rkey", "R_Key (RETH or AtomicETH)"),
    ("--dmalen", "dmalen", "RETH DMA length (WRITE default: the payload length)"),
    ("--swap", "swap", "AtomicETH swap (compare&swap) data"),
    ("--add", "add", "AtomicETH add data (fetch&add; same field as --swap)"),
    ("--compare", "compare", "AtomicETH compare data"),
    ("--syndrome", "aeth.syndrome", "AETH syndrome (0x1f ACK, 0x20+t RNR NAK, 0x60+c NAK)"),
    ("--msn", "aeth.msn", "AETH MSN"),
    ("--orig", "orig", "AtomicAckETH original remote data"),
    ("--imm", "imm", "immediate data (ImmDt)"),
    ("--inv-rkey", "ieth", "R_Key to invalidate (IETH)"),
    ("--qkey", "qkey", "DETH Q_Key"),
    ("--sqpn", "sqpn", "DETH source QP"),
    ("--eecnxt", "rdeth.eecnxt", "RDETH EE context"),
    ("--xrcsrq", "xrceth.xrcsrq", "XRCETH XRC SRQ number"),
    ("--sport", "sport", "UDP source port (default: rxe's hash of the QPN)"),
)
FLAG_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("--se", "se", "set BTH SE (solicited event)"),
    ("--ackreq", "ackreq", "set BTH AckReq"),
    ("--migreq", "migreq", "set BTH MigReq"),
    ("--fecn", "bth.fecn", "set BTH FECN"),
    ("--becn", "bth.becn", "set BTH BECN"),
)


def _dest(flag: str) -> str:
    return "f_" + flag.lstrip("-").replace("-", "_")


def add_frame_arguments(parser: argparse.ArgumentParser, opcode_optional: bool = False) -> None:
    """The options that describe frames (shared by ``roce craft`` and ``roce send``)."""
    parser.add_argument("opcode", nargs="?" if opcode_optional else None, metavar="OPCODE",
                        help="opcode name or number: rc-rdma-write-only, rc-write-only, "
                             "RC_SEND_ONLY, 0x0a ... (roce opcodes lists them)")
    g = parser.add_argument_group("payload")
    g.add_argument("--payload-hex", metavar="HEX", help="payload bytes in hex")
    g.add_argument("--payload-file", metavar="FILE", help="payload read from a file")
    g.add_argument("--payload-size", type=bounded_int(0, MAX_PAYLOAD, "a payload length"),
                   metavar="N",
                   help="payload length: zeros, or the hex/file payload repeated to N bytes")
    g = parser.add_argument_group("addressing and encapsulation")
    g.add_argument("--src", type=parse_ip_text, metavar="ADDR",
                   help="source IP (IPv6 / GID with --ipv6, --roce-version 1)")
    g.add_argument("--dst", type=parse_ip_text, metavar="ADDR", help="destination IP")
    g.add_argument("--smac", type=parse_mac, metavar="MAC", help="source MAC")
    g.add_argument("--dmac", type=parse_mac, metavar="MAC", help="destination MAC")
    g.add_argument("--ipv6", action="store_true", help="RoCEv2 over IPv6")
    g.add_argument("--roce-version", type=int, choices=(1, 2), default=2,
                   help="2 (UDP/IP, default) or 1 (EtherType 0x8915 + GRH)")
    g.add_argument("--vlan", type=field_int("vlan.id", field_width, "a VLAN ID"), metavar="ID",
                   help="add an 802.1Q tag")
    g.add_argument("--vlan-priority", type=field_int("vlan.priority", field_width, "a PCP"),
                   default=0,
                   metavar="PCP", help="802.1Q priority (with --vlan)")
    g.add_argument("--ecn", type=parse_ecn, metavar="ECN", help="ce, ect0, ect1, not-ect or 0..3")
    g.add_argument("--dscp", type=field_int("ip.dsfield.dscp", field_width, "a DSCP"), default=0,
                   metavar="N", help="DSCP (0..63)")
    g.add_argument("--ttl", type=field_int("ip.ttl", field_width, "a TTL"), metavar="N",
                   help="IPv4 TTL / IPv6 hop limit / GRH hop limit")
    g = parser.add_argument_group("transport fields")
    for flag, key, help_text in INT_FIELDS:
        g.add_argument(flag, dest=_dest(flag), type=field_int(key, field_width),
                       metavar="N", help=help_text)
    for flag, _key, help_text in FLAG_FIELDS:
        g.add_argument(flag, dest=_dest(flag), action="store_true", default=None,
                       help=help_text)
    g.add_argument("--field", dest="fields", action="append", type=parse_field, default=[],
                   metavar="NAME=VALUE",
                   help="any field roce.craft knows (repeatable): aeth.syndrome=0x60, msn=5, "
                        "ip.id=7, reth.va=0x1000, eth.dst=02:00:00:00:00:09")
    g.add_argument("--bad-icrc", action="store_true",
                   help="store the ICRC with every bit flipped (negative tests)")
    g = parser.add_argument_group("sequence")
    g.add_argument("--psn-step", type=parse_psn, default=1, metavar="N",
                   help="PSN increment from frame to frame with --count (default 1)")


def frame_options_given(args: argparse.Namespace) -> list[str]:
    """The frame-describing options given on the command line (``send -r`` refuses them)."""
    given = [f"--{name.replace('_', '-')}" for name in (
        "payload_hex", "payload_file", "payload_size", "src", "dst", "smac", "dmac", "vlan",
        "ecn", "ttl") if getattr(args, name) is not None]
    given += [flag for flag, _key, _help in INT_FIELDS + FLAG_FIELDS
              if getattr(args, _dest(flag)) is not None]
    for flag, value, default in (("--ipv6", args.ipv6, False), ("--bad-icrc", args.bad_icrc,
                                 False), ("--roce-version", args.roce_version, 2),
                                 ("--dscp", args.dscp, 0), ("--psn-step", args.psn_step, 1),
                                 ("--field", bool(args.fields), False)):
        if value != default:
            given.append(flag)
    return given


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("exit status: 0 built, 1 bad usage (opcode, field, value), 2 a file "
                     "that cannot be read or written.")
    add_frame_arguments(parser)
    parser.add_argument("--count", type=parse_positive, default=1, metavar="N",
                        help="number of frames (PSN steps by --psn-step, modulo 2^24)")
    parser.add_argument("--interval", type=parse_seconds, default=1e-6, metavar="SEC",
                        help="timestamp spacing written with -w (default 1 us): "
                             "roce replay sends at this pace")
    parser.add_argument("-w", "--write", metavar="FILE",
                        help="write the frames to a pcap (- for standard output)")
    parser.add_argument("--pcapng", action="store_true", help="write pcapng instead of pcap")
    parser.add_argument("-V", "--verbose", action="store_true",
                        help="print the full header tree of each frame")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    craft_macc.add_arguments(parser)
    craft_uet.add_arguments(parser)
    craft_framing.add_arguments(parser)


# -- building -------------------------------------------------------------------------------


def resolve_opcode(text: str) -> Opcode:
    try:
        return lookup(text)
    except KeyError:
        slugs = [op.slug for op in OPCODES.values()]
        key = text.strip().lower().replace("_", "-").replace(" ", "-")
        near = difflib.get_close_matches(key, slugs, n=1, cutoff=0.6)
        if not near:  # "rc-write-only" style: try with "rdma-" taken out of the candidates
            short = {s.replace("rdma-", ""): s for s in slugs}
            near = [short[m] for m in difflib.get_close_matches(key, list(short), n=1)]
        hint = f"did you mean {near[0]}?" if near else "roce opcodes lists them"
        raise UsageError(f"unknown opcode {text!r} ({hint})") from None


def read_payload(args: argparse.Namespace, op: Opcode) -> bytes | None:
    """The payload the options ask for, or None for the opcode's default."""
    if args.payload_hex is not None and args.payload_file is not None:
        raise UsageError("give --payload-hex or --payload-file, not both")
    content: bytes | None = None
    if args.payload_hex is not None:
        text = "".join(args.payload_hex.split()).removeprefix("0x").replace(":", "")
        try:
            content = bytes.fromhex(text)
        except ValueError:
            raise UsageError(f"--payload-hex: {args.payload_hex!r} is not hex") from None
    elif args.payload_file is not None:
        content = _read_bounded(args.payload_file, MAX_PAYLOAD)
    if content is not None and len(content) > MAX_PAYLOAD:
        flag = "--payload-hex" if args.payload_hex is not None else "--payload-file"
        raise UsageError(f"{flag}: the payload does not fit in one frame "
                         f"(at most {MAX_PAYLOAD} bytes)")
    size = args.payload_size  # bounded by MAX_PAYLOAD when parsed
    if size is not None:
        if content is None:
            content = bytes(size)
        elif content:
            content = (content * (size // len(content) + 1))[:size]
        elif size:
            raise UsageError("--payload-size: cannot repeat an empty payload")
    if content is None:
        return None
    if not op.payload and content:
        raise UsageError(f"{op.short_name} carries no payload ({len(content)} bytes given)")
    if op.payload_len is not None and len(content) != op.payload_len:
        raise UsageError(f"{op.short_name} payload must be {op.payload_len} bytes, "
                         f"{len(content)} given")
    return content


def _read_bounded(path: str, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path`` (one more than fits tells it does not): a
    device such as /dev/zero or a pipe never runs memory up."""
    try:
        with open(path, "rb", buffering=0) as f:
            parts, left = [], limit + 1
            while left:
                chunk = f.read(min(left, 1 << 16))
                if not chunk:
                    break
                parts.append(chunk)
                left -= len(chunk)
    except OSError as exc:
        raise InputError(f"--payload-file: cannot read {path}: {exc.strerror or exc}") from None
    return b"".join(parts)


def craft_options(args: argparse.Namespace, op: Opcode) -> tuple[dict[str, Any],
                                                                  dict[str, tuple[str, Any]]]:
    """(keyword arguments for roce.craft, field key -> (option that set it, value))."""
    if args.ipv6 and args.roce_version == 1:
        raise UsageError("--ipv6 and --roce-version 1 do not combine (RoCEv1 has a GRH)")
    kw: dict[str, Any] = {"ipv6": args.ipv6, "roce_version": args.roce_version,
                          "dscp": args.dscp}
    if args.vlan is not None:  # ranges: checked when parsed (roce.options)
        kw["vlan"], kw["vlan_priority"] = args.vlan, args.vlan_priority
    v6 = args.ipv6 or args.roce_version == 1
    for flag, addr in (("--src", args.src), ("--dst", args.dst)):
        if addr is not None and (":" in addr) != v6:
            raise UsageError(f"{flag} {addr}: an {'IPv6' if v6 else 'IPv4'} address is needed"
                             f"{' (--ipv6 / --roce-version 1)' if v6 else ' (or --ipv6)'}")
    for name in ("src", "dst", "ecn"):
        value = getattr(args, name)
        if value is not None:
            kw[name] = value
    fields: dict[str, tuple[str, Any]] = {}
    for flag, key, _help in INT_FIELDS + FLAG_FIELDS:
        value = getattr(args, _dest(flag))
        if value is not None:
            fields[key] = (flag, value)
    for name, value in (("smac", args.smac), ("dmac", args.dmac)):
        if value is not None:
            fields[name] = (f"--{name}", value)
    if args.ttl is not None:
        key = "grh.hoplmt" if args.roce_version == 1 else "ipv6.hlim" if args.ipv6 else "ip.ttl"
        fields[key] = ("--ttl", args.ttl)
    for name, value in args.fields:
        fields[name] = (f"--field {name}", value)
    return kw, fields


def given_fields(args: argparse.Namespace) -> set[str]:
    """The header fields (``header.field``) the options set explicitly: ``--smac`` and
    ``--field eth.src=`` both give ``eth.src``.  The options are checked as for crafting."""
    op = resolve_opcode(args.opcode)
    payload = read_payload(args, op)
    kw, fields = craft_options(args, op)
    return set(checked_fields(args, op, payload, kw, fields))


def destination(packet: roce.Packet) -> str:
    """The IP address (or RoCEv1 GID) a packet is sent to, as text."""
    l3 = packet.l3
    value = packet.headers[l3]["dgid" if l3 == "grh" else "dst"]
    if isinstance(value, str):
        return str(ipaddress.ip_address(value))
    cls = ipaddress.IPv4Address if l3 == "ip" else ipaddress.IPv6Address
    return str(cls(value))  # a number or the address's bytes (--field ip.dst=0x0a000002)


def build_packets(args: argparse.Namespace, count: int = 1) -> list[roce.Packet]:
    """The packets the frame options describe (``count`` of them, PSN stepping)."""
    return list(iter_packets(args, count))


def iter_packets(args: argparse.Namespace, count: int = 1) -> Iterator[roce.Packet]:
    """``build_packets`` one at a time, so that memory does not grow with ``count``.  The
    options are checked now (the first packet is built here), not on the first ``next``."""
    first, explicit_icrc = _first_packet(args)
    return _sequence(first, count, args.psn_step, args.bad_icrc, explicit_icrc)


def iter_frames(args: argparse.Namespace, count: int = 1) -> Iterator[bytes]:
    """The frames of ``iter_packets``, made faster: from one frame to the next only the PSN
    and the ICRC change, so each frame after the first is the first with those patched.
    Options are checked now, as by ``iter_packets``."""
    first, explicit_icrc = _first_packet(args)
    return _patched(_sequence(first, count, args.psn_step, args.bad_icrc, explicit_icrc),
                    count, args.psn_step, args.bad_icrc, explicit_icrc)


def _patched(packets: Iterator[roce.Packet], count: int, step: int, bad_icrc: bool,
             explicit_icrc: bool) -> Iterator[bytes]:
    p = next(packets, None)
    if p is None:
        return
    psn = p.headers["bth"]["psn"] or 0
    data = p.to_bytes()
    yield data
    w = fast.walk(data)
    if w.status != OK or w.l4_end != len(data):  # not plain RoCE (a --field made it so)
        yield from (p.to_bytes() for p in packets)
        return
    at = w.bth_off + _PSN_BYTE
    head, mid, stored = data[:at], data[at + 3:w.icrc_off], data[w.icrc_off:]
    flip = 0xFFFFFFFF if bad_icrc else 0
    for i in range(1, count):
        frame = head + ((psn + i * step) & PSN_MASK).to_bytes(3, "big") + mid
        if explicit_icrc:
            yield frame + stored
        else:
            yield frame + to_trailer(fast.icrc_of(frame + stored, w) ^ flip)


def _first_packet(args: argparse.Namespace) -> tuple[roce.Packet, bool]:
    """The first packet the options describe (options checked here), and whether its ICRC
    was given (``--field icrc=``)."""
    from roce.families import craft as craft_families

    op = resolve_opcode(args.opcode)
    payload = read_payload(args, op)
    kw, fields = craft_options(args, op)
    craft_families.check_options(args)
    values = checked_fields(args, op, payload, kw, fields)
    if "reth" in op.headers and op.payload and "reth.dmalen" not in values:
        # a WRITE's DMA length is its message length: the payload, unless told otherwise
        values["reth.dmalen"] = len(payload) if payload is not None else (op.payload_len or 0)
    try:
        first = roce.craft(op, payload, **kw, **values)
        first.to_bytes()  # every value was checked: this is the builder's last word
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{op.short_name}: {exc}") from None
    return first, "icrc" in values


def _sequence(first: roce.Packet, count: int, step: int, bad_icrc: bool,
              explicit_icrc: bool) -> Iterator[roce.Packet]:
    base = first.headers["bth"]["psn"] or 0
    for i in range(count):
        p = first if i == 0 else first.copy()
        if i:
            p.headers["bth"]["psn"] = (base + i * step) & PSN_MASK
        if bad_icrc:
            p.icrc = None
            p.icrc = p.expected_icrc ^ 0xFFFFFFFF
        elif not explicit_icrc:
            p.icrc = None
        yield p


def frame_times(count: int, interval: float, start_ns: int | None = None,
                limit_ns: int = MAX_TS_NS, option: str = "--interval") -> Iterator[int]:
    """``count`` timestamps ``interval`` seconds apart from ``start_ns`` (default: now);
    UsageError naming ``option`` (what set the interval) if the last would pass
    ``limit_ns`` (what the capture format holds)."""
    start = time.time_ns() if start_ns is None else start_ns
    step = round(interval * NS)
    if start + (count - 1) * step > limit_ns:
        raise UsageError(f"{option}: {count} frames {interval:g} s apart end past the "
                         f"last timestamp the capture can hold ({limit_ns // NS} s since 1970)")
    return (start + i * step for i in range(count))


# -- output ---------------------------------------------------------------------------------


def describe(frames: Iterable[tuple[bytes, int]], verbose: bool = False,
             udp_port: int = 4791, linktype: int = 1) -> Iterator[str]:
    """Lines (or trees) in ``roce decode``'s form for (frame, timestamp) pairs."""
    from roce.decoder.decode import decode_frames
    from roce.families.base import summary, tree

    summ = summary.Summarizer(summary.TimeColumn("r", 9), udp_port)
    from roce.decoder import records

    stream = (Frame(data, ts, len(data), len(data), linktype, 0) for data, ts in frames)
    for rec in decode_frames(stream, udp_port):
        fr = rec.frame
        if verbose:
            text = records.render(rec) if rec.family or rec.outer else tree.render(rec)
            yield text.rstrip("\n")
            continue
        if rec.family is not None:
            text = summ.times.record_text(rec.ts_ns, rec.rel_ns, rec.delta_ns)
            yield summ.line(rec.number, text, fr.origlen, records.columns(rec))
            continue
        cols = summ.columns(fr.data, rec.walk, rec.fields, fr.linktype, fr.caplen, fr.origlen,
                            rec.message)
        text = summ.times.record_text(rec.ts_ns, rec.rel_ns, rec.delta_ns)
        yield summ.line(rec.number, text, fr.origlen, cols)


def open_writer(path: str, pcapng: bool = False, linktype: int = 1,
                live: bool = False) -> PcapWriter | PcapNgWriter:
    """A capture writer for ``path`` (``-``: standard output); ``InputError`` if it cannot
    be created.  ``live``: written in place as it goes (a capture of what happens)."""
    ng = pcapng or path.lower().endswith((".pcapng", ".ntar"))
    return (PcapNgWriter(path, linktype, live=live) if ng
            else PcapWriter(path, linktype, live=live))


def write_frames(path: str, frames: Iterable[tuple[bytes, int]], pcapng: bool = False,
                 linktype: int = 1) -> int:
    writer = open_writer(path, pcapng, linktype)
    with writer:
        for _ in written(writer, path, frames):
            pass
    return writer.count


def written(writer: PcapWriter | PcapNgWriter, path: str,
            frames: Iterable[tuple[bytes, int]]) -> Iterator[tuple[bytes, int]]:
    """``frames``, each written to ``writer`` as it passes.  A timestamp the format cannot
    hold (classic pcap ends in 2106) is clamped, with one warning."""
    limit = writer.MAX_TS_NS
    warned = False
    for data, ts in frames:  # an unwritable path is the writer's InputError (roce.outfile)
        if not 0 <= ts <= limit:
            if not warned:
                warned = True
                print(f"roce: warning: {path}: timestamps outside 0..{limit // NS} s since "
                      "1970 do not fit this format; clamped (pcapng holds more)",
                      file=sys.stderr)
            ts = min(max(ts, 0), limit)
        writer.write(data, ts)
        yield data, ts


def _counted(frames: Iterable[Any], done: list[int]) -> Iterator[Any]:
    for item in frames:
        done[0] += 1
        yield item


def print_lines(lines: Iterable[str], out: TextIO) -> None:
    for line in lines:
        out.write(line + "\n")
    out.flush()


def fail(command: str, exc: Exception) -> int:
    """Print the one-line message of a CLI error; return its exit status."""
    print(f"roce {command}: {exc}", file=sys.stderr)
    return 1 if isinstance(exc, UsageError) else 2


# -- running --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    # One frame at a time from crafting to the writer and the printer: memory stays flat
    # whatever --count is.
    try:
        if craft_macc.wanted(args):  # pfc / pause: MAC Control frames
            if args.link == "ib":
                raise UsageError("--link ib: MAC Control frames are Ethernet's")
            packets: Iterable[bytes] = craft_macc.build(args, frame_options_given(args))
        elif craft_uet.wanted(args):  # uet-...: Ultra Ethernet Transport packets
            packets = craft_uet.build(args, frame_options_given(args), read_payload)
        else:
            packets = iter_frames(args, args.count)
        from roce.families import craft as craft_families  # --link ib, --encap

        packets, linktype = craft_families.apply(args, packets)
        writer = (open_writer(args.write, args.pcapng, linktype) if args.write is not None
                  else None)
        # the file is complete or absent: an interrupt or an error removes it (pcapio)
        with writer if writer is not None else contextlib.nullcontext():
            stamps = frame_times(args.count, args.interval,
                                 limit_ns=writer.MAX_TS_NS if writer else MAX_TS_NS)
            frames: Iterator[tuple[bytes, int]] = zip(packets, stamps)
            if writer is not None:
                frames = written(writer, args.write, frames)
            done = [0]
            frames = _counted(frames, done)
            try:
                if args.quiet:
                    for _ in frames:
                        pass
                else:
                    out = sys.stderr if args.write == "-" else sys.stdout
                    print_lines(describe(frames, args.verbose, linktype=linktype), out)
            except KeyboardInterrupt as exc:
                exc.add_note(f"after {writer.count if writer else done[0]:,} frames")
                raise
    except (UsageError, InputError) as exc:
        return fail("craft", exc)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


__all__ = ["InputError", "UsageError", "add_arguments", "add_frame_arguments",
           "build_packets", "describe", "destination", "given_fields", "iter_frames",
           "iter_packets", "open_writer", "resolve_opcode", "run", "write_frames", "written"]
