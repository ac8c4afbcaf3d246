"""``roce craft``: build RoCE frames from the command line.

::

    roce craft rc-write-only --dqpn 0x11 --psn 100 --va 0x1000 --rkey 0x22 \\
        --payload-size 1024 --src 10.0.0.1 --dst 10.0.0.2 -w out.pcap
    roce craft rc-acknowledge --syndrome 0x60 --msn 5 --count 3
    roce craft ud-send-only --qkey 0x11111111 --sqpn 7 --ipv6 --vlan 100 -w - | tshark -r -
    roce craft pfc --prio 3 --quanta 65535           (802.1Qbb PFC; also pause: craft_macc)

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
prefixes; ``true``/``false`` set flags; addresses are written as usual.

Exit status: 0 done, 1 bad usage (unknown opcode or field, value out of range), 2 a file
that cannot be read (``--payload-file``) or written (``-w``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, TextIO

import roce
from roce.opcodes import OPCODES, Opcode, lookup
from roce.pcapio import Frame, PcapNgWriter, PcapWriter

from ..errors import InputError, UsageError
from . import craft_macc

NS = 1_000_000_000
PSN_MASK = 0xFFFFFF


# -- argument types -------------------------------------------------------------------------


def parse_int(text: str) -> int:
    """A non-negative integer in decimal or with a 0x/0o/0b prefix (argparse type)."""
    try:
        value = int(text.replace("_", ""), 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def parse_positive(text: str) -> int:
    value = parse_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def parse_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


_ECN_NAMES = {"ce": 3, "ect0": 2, "ect(0)": 2, "ect1": 1, "ect(1)": 1, "not-ect": 0,
              "notect": 0, "non-ect": 0}


def parse_ecn(text: str) -> int:
    key = text.strip().lower()
    if key in _ECN_NAMES:
        return _ECN_NAMES[key]
    try:
        value = int(key, 0)
    except ValueError:
        value = -1
    if not 0 <= value <= 3:
        raise argparse.ArgumentTypeError(f"{text!r}: use ce, ect0, ect1, not-ect or 0..3")
    return value


def parse_value(text: str) -> Any:
    """A ``--field`` value: integer, boolean, or the text itself (addresses)."""
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    try:
        return int(low.replace("_", ""), 0)
    except ValueError:
        return text


def parse_field(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or not value.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE, e.g. aeth.msn=5")
    return name, parse_value(value)


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
    g.add_argument("--payload-size", type=parse_int, metavar="N",
                   help="payload length: zeros, or the hex/file payload repeated to N bytes")
    g = parser.add_argument_group("addressing and encapsulation")
    g.add_argument("--src", metavar="ADDR", help="source IP (IPv6 / GID with --ipv6, "
                                                  "--roce-version 1)")
    g.add_argument("--dst", metavar="ADDR", help="destination IP")
    g.add_argument("--smac", metavar="MAC", help="source MAC")
    g.add_argument("--dmac", metavar="MAC", help="destination MAC")
    g.add_argument("--ipv6", action="store_true", help="RoCEv2 over IPv6")
    g.add_argument("--roce-version", type=int, choices=(1, 2), default=2,
                   help="2 (UDP/IP, default) or 1 (EtherType 0x8915 + GRH)")
    g.add_argument("--vlan", type=parse_int, metavar="ID", help="add an 802.1Q tag")
    g.add_argument("--vlan-priority", type=parse_int, default=0, metavar="PCP",
                   help="802.1Q priority (with --vlan)")
    g.add_argument("--ecn", type=parse_ecn, metavar="ECN", help="ce, ect0, ect1, not-ect or 0..3")
    g.add_argument("--dscp", type=parse_int, default=0, metavar="N", help="DSCP (0..63)")
    g.add_argument("--ttl", type=parse_int, metavar="N",
                   help="IPv4 TTL / IPv6 hop limit / GRH hop limit")
    g = parser.add_argument_group("transport fields")
    for flag, _key, help_text in INT_FIELDS:
        g.add_argument(flag, dest=_dest(flag), type=parse_int, metavar="N", help=help_text)
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
    g.add_argument("--psn-step", type=parse_int, default=1, metavar="N",
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
    from roce.families import craft as craft_families

    craft_families.add_arguments(parser)


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
        try:
            with open(args.payload_file, "rb") as f:
                content = f.read()
        except OSError as exc:
            raise InputError(f"cannot read {args.payload_file}: "
                             f"{exc.strerror or exc}") from None
    size = args.payload_size
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
    if len(content) > 0xFFFF:
        raise UsageError(f"payload of {len(content)} bytes does not fit in one frame")
    return content


def craft_options(args: argparse.Namespace, op: Opcode) -> tuple[dict[str, Any],
                                                                  dict[str, tuple[str, Any]]]:
    """(keyword arguments for roce.craft, field key -> (option that set it, value))."""
    if args.ipv6 and args.roce_version == 1:
        raise UsageError("--ipv6 and --roce-version 1 do not combine (RoCEv1 has a GRH)")
    kw: dict[str, Any] = {"ipv6": args.ipv6, "roce_version": args.roce_version,
                          "dscp": args.dscp}
    if args.dscp > 63:
        raise UsageError(f"--dscp {args.dscp} out of range (0..63)")
    if args.vlan is not None:
        if args.vlan > 4095:
            raise UsageError(f"--vlan {args.vlan} out of range (0..4095)")
        if args.vlan_priority > 7:
            raise UsageError(f"--vlan-priority {args.vlan_priority} out of range (0..7)")
        kw["vlan"], kw["vlan_priority"] = args.vlan, args.vlan_priority
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


_DMALEN_KEYS = frozenset({"dmalen", "reth.dmalen", "reth_dmalen", "dma_len", "length"})


def build_packets(args: argparse.Namespace, count: int = 1) -> list[roce.Packet]:
    """The packets the frame options describe (``count`` of them, PSN stepping)."""
    op = resolve_opcode(args.opcode)
    payload = read_payload(args, op)
    kw, fields = craft_options(args, op)
    values = {key: value for key, (_flag, value) in fields.items()}
    if "reth" in op.headers and op.payload and not _DMALEN_KEYS & values.keys():
        # a WRITE's DMA length is its message length: the payload, unless told otherwise
        values["dmalen"] = len(payload) if payload is not None else (op.payload_len or 0)
    try:
        first = roce.craft(op, payload, **kw, **values)
        first.to_bytes()  # encoders check ranges and addresses here
    except TypeError:
        raise UsageError(_which_field(op, payload, kw, fields)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    explicit_icrc = "icrc" in values
    step = args.psn_step
    base = first.headers["bth"]["psn"] or 0
    packets = []
    for i in range(count):
        p = first if i == 0 else first.copy()
        if i:
            p.headers["bth"]["psn"] = (base + i * step) & PSN_MASK
        if args.bad_icrc:
            p.icrc = None
            p.icrc = p.expected_icrc ^ 0xFFFFFFFF
        elif not explicit_icrc:
            p.icrc = None
        packets.append(p)
    return packets


def _which_field(op: Opcode, payload: bytes | None, kw: dict[str, Any],
                 fields: dict[str, tuple[str, Any]]) -> str:
    """The message for the first option naming a field this opcode does not have."""
    for key, (flag, value) in fields.items():
        try:
            p = roce.craft(op, payload, **kw, **{key: value})
        except TypeError:
            headers = ", ".join(roce.craft(op, payload, **kw).headers)
            what = "RoCEv1" if kw.get("roce_version") == 1 and key in (
                "sport", "ip.ttl") else op.short_name
            name = f"field {key!r}" if flag.startswith("--field") else "such field"
            return f"{flag}: {what} has no {name} (its headers: {headers})"
        except ValueError:
            continue
        del p
    return "a field option does not apply to this opcode"  # pragma: no cover


def frame_times(count: int, interval: float, start_ns: int | None = None) -> list[int]:
    start = time.time_ns() if start_ns is None else start_ns
    step = round(interval * NS)
    return [start + i * step for i in range(count)]


# -- output ---------------------------------------------------------------------------------


def describe(frames: Iterable[tuple[bytes, int]], verbose: bool = False,
             udp_port: int = 4791, linktype: int = 1) -> Iterator[str]:
    """Lines (or trees) in ``roce decode``'s form for (frame, timestamp) pairs."""
    from roce.dissect import summary, tree
    from roce.dissect.decode import decode_frames

    summ = summary.Summarizer(summary.TimeColumn("r", 9), udp_port)
    from roce.families import records

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


def open_writer(path: str, pcapng: bool = False,
                linktype: int = 1) -> PcapWriter | PcapNgWriter:
    """A capture writer for ``path`` (``-``: standard output); InputError if it cannot be
    created."""
    ng = pcapng or path.lower().endswith((".pcapng", ".ntar"))
    try:
        if path == "-":
            dst: str | BinaryIO = sys.stdout.buffer
        else:
            dst = path
        return PcapNgWriter(dst, linktype) if ng else PcapWriter(dst, linktype)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_frames(path: str, frames: Iterable[tuple[bytes, int]], pcapng: bool = False,
                 linktype: int = 1) -> int:
    writer = open_writer(path, pcapng, linktype)
    try:
        with writer:
            for data, ts in frames:
                writer.write(data, ts)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return writer.count


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
    try:
        if craft_macc.wanted(args):  # pfc / pause: MAC Control frames
            datas = craft_macc.build(args, frame_options_given(args))
        else:
            datas = [p.to_bytes() for p in build_packets(args, args.count)]
        from roce.families import craft as craft_families  # --link ib, --encap

        datas, linktype = craft_families.apply(args, datas)
        frames = list(zip(datas, frame_times(len(datas), args.interval)))
        if args.write is not None:
            write_frames(args.write, frames, args.pcapng, linktype)
        if not args.quiet:
            out = sys.stderr if args.write == "-" else sys.stdout
            print_lines(describe(frames, args.verbose, linktype=linktype), out)
    except (UsageError, InputError) as exc:
        return fail("craft", exc)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


__all__ = ["InputError", "UsageError", "add_arguments", "add_frame_arguments",
           "build_packets", "describe", "open_writer", "parse_int", "resolve_opcode", "run",
           "write_frames"]
