"""``roce craft uet-...``: Ultra Ethernet Transport packets from the command line.

::

    roce craft uet-write --pds-psn 1005 --spdcid 0x12 --dpdcid 0x34 --message-id 7 \\
        --buffer-offset 4096 --payload-size 4096 -w uet.pcap
    roce craft uet-ack-cc --cack-psn 1005 --sack-psn 1007 --sack-bitmap 0b101 --ecn-marked
    roce craft uet-nack --nack-code trimmed --nack-psn 1006 --uet-native
    roce craft uet-ack-cc --bad-sack                  a frame that raises its expert note

OPCODE is ``uet-<PDS type>`` (``uet-rud-req``, ``uet-ack-ccx``, ``uet-ctrl``...) or
``uet-<SES opcode>`` (``uet-write``, ``uet-fetching-atomic``...: a RUD request carrying a
standard SES header of that opcode); ``roce.families.uet.build.kinds`` lists them.  Every field
has an option (this module's ``OPTIONS``); ``--field uet.NAME=VALUE`` sets any other by its
``roce decode`` name.  What is not given makes a well-formed packet
(``build.with_defaults``); ``--bad-<check>`` bends it so that one expert check of
``roce decode`` fires (``roce.families.uet.checks``).  Addressing (``--src``, ``--dst``,
``--ipv6``, ``--vlan``, MACs, ``--ecn``, ``--dscp``, ``--ttl``), the payload options,
``--count`` (``--psn-step`` steps the PDS PSN), ``-w``, ``-V`` and ``-q`` work as for RoCE;
RoCE's transport options are refused.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import Any

from roce.errors import UsageError
from roce.families.uet import READING_NAMES, REF_PROV_PORT, UET_PORT
from roce.families.uet import codes as t
from roce.options import bounded_int, parse_port, unsigned

PREFIX = "uet-"

# (flag, the flat names it sets (any the packet has), help, value kind): kind "int" is an
# unsigned value of the first name's width, "signed" a 16-bit signed offset, "flag" a switch,
# a code table a name from it or a number.
Row = tuple[str, tuple[str, ...], str, Any]
OPTIONS: tuple[Row, ...] = (
    # PDS
    ("--pds-psn", ("uet.pds.psn",), "PDS PSN (requests, control; 32 bits)", "int"),
    ("--spdcid", ("uet.pds.spdcid",), "source PDC ID", "int"),
    ("--dpdcid", ("uet.pds.dpdcid",), "destination PDC ID", "int"),
    ("--clear-psn", ("uet.pds.clear_psn",), "clear PSN (default: the PSN less one)", "psn"),
    ("--clear-psn-offset", ("uet.pds.clear_psn_offset",), "clear PSN offset", "signed"),
    ("--syn", ("uet.pds.flags.syn",), "SYN: a new PDC (mode and PSN offset replace DPDCID)",
     "flag"),
    ("--ar", ("uet.pds.flags.ar",), "ACK request", "flag"),
    ("--retx", ("uet.pds.flags.retx",), "retransmission", "flag"),
    ("--ecn-marked", ("uet.pds.flags.m",), "M: the acknowledged packet was ECN-marked",
     "flag"),
    ("--probe", ("uet.pds.flags.p",), "P: an ACK to a probe", "flag"),
    ("--nt", ("uet.pds.flags.nt",), "NACK type (NT): a RUDI NACK", "flag"),
    ("--isrod", ("uet.pds.flags.isrod",), "ISROD: control packet of an ROD PDC (ref-prov)",
     "flag"),
    ("--start-psn", ("uet.pds.start_psn",), "SYN: the PDC's start PSN", "psn"),
    ("--psn-offset", ("uet.pds.psn_offset",), "SYN: PSN less start PSN (12 bits)", "int"),
    ("--use-reserved-pdc", ("uet.pds.pdc_mode_use_rsv",), "SYN: use a reserved PDC", "flag"),
    ("--ccc-id", ("uet.pds.cc_state.ccc_id",), "CC request: CCC ID", "int"),
    ("--credit-target", ("uet.pds.cc_state.credit_target",), "CC request: credit target",
     "int"),
    ("--rudi-id", ("uet.pds.rudi.pkt_id",), "RUDI packet ID", "int"),
    ("--cack-psn", ("uet.pds.cack_psn",), "ACK: cumulative ACK PSN", "int"),
    ("--ack-psn", ("uet.pds.ack_psn",), "ACK: the PSN acknowledged (default: the CACK PSN)",
     "psn"),
    ("--ack-psn-offset", ("uet.pds.ack_psn_offset",), "ACK: PSN offset from the CACK PSN",
     "signed"),
    ("--ack-req", ("uet.pds.flags.req",), "ACK: request (clear, close, or 0..3)",
     t.ACK_REQUESTS),
    ("--req-clear", ("uet.pds.flags.req_clr",), "ACK: request clear (ref-prov)", "flag"),
    ("--req-close", ("uet.pds.flags.req_cls",), "ACK: request close (ref-prov)", "flag"),
    ("--epsn", ("uet.pds.ack.epsn",), "ACK: expected PSN (sets EPSN; ref-prov)", "int"),
    ("--probe-opaque-ack", ("uet.pds.ack.probe_opaque",), "ACK to a probe: opaque (ref-prov)",
     "int"),
    ("--cc-type", ("uet.pds.ack.cc_type",), "ACK_CC/CCX: CC type (nscc, credit, 0..15)",
     t.CC_TYPES),
    ("--mpr", ("uet.pds.ack.mpr",), "ACK_CC/CCX: maximum PSN range", "int"),
    ("--sack-psn", ("uet.pds.ack.sack_psn",), "SACK bitmap base PSN (default CACK + 1)",
     "psn"),
    ("--sack-psn-offset", ("uet.pds.ack.sack_psn_offset",), "SACK base offset from CACK",
     "signed"),
    ("--sack-bitmap", ("uet.pds.ack.sack_bitmap",), "SACK bitmap (bit i: PSN base + i)",
     "int"),
    ("--service-time", ("uet.pds.ack.cc_state.service_time",), "NSCC service time", "int"),
    ("--restore-cwnd", ("uet.pds.ack.cc_state.rc",), "NSCC restore cwnd", "flag"),
    ("--cwnd-penalty", ("uet.pds.ack.cc_state.rcv_cwnd_pend",), "NSCC cwnd penalty", "int"),
    ("--rcvd-bytes", ("uet.pds.ack.cc_state.rcvd_bytes",), "NSCC received bytes", "int"),
    ("--ooo-count", ("uet.pds.ack.cc_state.ooo_count",), "CC state out-of-order count",
     "int"),
    ("--credit", ("uet.pds.ack.cc_state.credit",), "credit CC state: credit", "int"),
    ("--ccx-state", ("uet.pds.ack.ccx_state",), "ACK_CCX: CCX state", "int"),
    ("--nack-code", ("uet.pds.nack.code",), "NACK code (trimmed, no-pdc-avail, ... or a "
     "number)", t.NACK_CODES),
    ("--vendor-code", ("uet.pds.nack.vendor_code",), "NACK vendor code", "int"),
    ("--nack-psn", ("uet.pds.nack.psn",), "NACK PSN", "int"),
    ("--nack-payload", ("uet.pds.nack.max_recv_psn_plus_1",), "NACK payload (max received "
     "PSN + 1)", "int"),
    ("--nack-ccx-state", ("uet.pds.nack.ccx_state",), "NACK_CCX: CCX state", "int"),
    ("--ctl-type", ("uet.pds.ctl_type",), "control type (probe, close, clear, ... or a number)",
     "ctrl"),
    ("--probe-opaque", ("uet.pds.ctrl_probe_opaque",), "control: probe opaque", "int"),
    ("--ctrl-payload", ("uet.pds.ctrl_payload",), "control: payload", "int"),
    # TSS
    ("--tss", ("uet.tss",), "a security (TSS) header: what follows the PDS is encrypted",
     "flag"),
    ("--sdi", ("uet.tss.sdi",), "TSS: secure domain index", "int"),
    ("--ssi", ("uet.tss.ssi",), "TSS: secure source index (sets SP)", "int"),
    ("--an", ("uet.tss.an",), "TSS: association number (AN) 1", "flag"),
    ("--tsc", ("uet.tss.tsc",), "TSS: counter", "int"),
    ("--epoch", ("uet.tss.epoch",), "TSS: epoch (ref-prov)", "int"),
    # SES requests
    ("--ses-opcode", ("uet.ses.std.opcode",), "SES opcode (write, send, ... or a number)",
     "opcode"),
    ("--som", ("uet.ses.std.som", "uet.ses.small_req.som", "uet.ses.med_req.som"),
     "start of message", "flag"),
    ("--eom", ("uet.ses.std.eom", "uet.ses.small_req.eom", "uet.ses.med_req.eom"),
     "end of message", "flag"),
    ("--hd", ("uet.ses.std.hd", "uet.ses.med_req.flags.hd"), "header data present", "flag"),
    ("--rel", ("uet.ses.std.rel", "uet.ses.small_req.flags.rel", "uet.ses.med_req.flags.rel"),
     "relative addressing", "flag"),
    ("--ie", ("uet.ses.std.ie", "uet.ses.small_req.flags.ie", "uet.ses.med_req.flags.ie"),
     "initiator error", "flag"),
    ("--dc", ("uet.ses.std.dc", "uet.ses.small_req.flags.dc", "uet.ses.med_req.flags.dc"),
     "delivery complete", "flag"),
    ("--ses-version", ("uet.ses.std.ver", "uet.ses.small_req.flags.ver",
                       "uet.ses.med_req.flags.ver", "uet.ses.rsp.ver"), "SES version", "int"),
    ("--message-id", ("uet.ses.std.message_id", "uet.ses.rsp.message_id"), "message ID",
     "int"),
    ("--index-gen", ("uet.ses.std.index_generation", "uet.ses.small_req.index_generation",
                     "uet.ses.med_req.resource_index_generation",
                     "uet.ses.rsp.resource_index_gen"), "resource index generation", "int"),
    ("--job-id", ("uet.ses.std.job_id", "uet.ses.small_req.job_id", "uet.ses.med_req.job_id",
                  "uet.ses.rsp.job_id"), "job ID", "int"),
    ("--pid-on-fep", ("uet.ses.std.pidonfep", "uet.ses.small_req.pidonfep",
                      "uet.ses.med_req.pidonfep"), "PID on FEP", "int"),
    ("--resource-index", ("uet.ses.std.resource_index", "uet.ses.small_req.resource_index",
                          "uet.ses.med_req.resource_index"), "resource index", "int"),
    ("--buffer-offset", ("uet.ses.std.buffer_offset", "uet.ses.small_req.buffer_offset",
                         "uet.ses.med_req.buffer_offset"), "buffer offset", "int"),
    ("--initiator", ("uet.ses.std.initiator", "uet.ses.med_req.initiator"), "initiator", "int"),
    ("--mem-key", ("uet.ses.std.mem_key_match_bits", "uet.ses.med_req.mem_key_match_bits"),
     "memory key / match bits", "int"),
    ("--header-data", ("uet.ses.std.header_data", "uet.ses.med_req.header_data"),
     "header data (first packet; medium: with --hd)", "int"),
    ("--payload-length", ("uet.ses.std.payload_length", "uet.ses.rsp.payload_length"),
     "payload length (default: the payload's)", "int"),
    ("--message-offset", ("uet.ses.std.message_offset", "uet.ses.rsp.message_offset"),
     "message offset (not the first packet)", "int"),
    ("--request-length", ("uet.ses.std.request_length", "uet.ses.small_req.req_length",
                          "uet.ses.med_req.req_length"), "request length (default: the "
     "payload's)", "int"),
    ("--restart-token", ("uet.ses.std.restart_token",), "deferrable send / RTR restart token",
     "int"),
    ("--amo-opcode", ("uet.ses.atomic_op_ext_hdr.atomic_opcode",
                      "uet.ses.comp_swap_ext_hdr.atomic_opcode"),
     "atomic opcode (sum, cswap, ... or a number)", t.AMO_OPCODES),
    ("--amo-type", ("uet.ses.atomic_op_ext_hdr.atomic_data_type",
                    "uet.ses.comp_swap_ext_hdr.atomic_data_type"),
     "atomic data type (uint64, double, ... or a number)", t.AMO_TYPES),
    ("--amo-control", ("uet.ses.atomic_op_ext_hdr.sem_ctl", "uet.ses.comp_swap_ext_hdr.sem_ctl"),
     "atomic semantic control (none, cacheable, cpu-coherent, or a number)", t.AMO_CONTROLS),
    ("--compare-value", ("uet.ses.comp_swap_ext_hdr.comp_value",), "compare value (128 bits)",
     "int"),
    ("--swap-value", ("uet.ses.comp_swap_ext_hdr.swap_value",), "swap value (128 bits)", "int"),
    ("--eager-length", ("uet.ses.rendv_ext_hdr.eager_length",), "rendezvous eager length",
     "int"),
    ("--read-pid-on-fep", ("uet.ses.rendv_ext_hdr.read_pid_on_fep",), "rendezvous read PID on "
     "FEP", "int"),
    ("--read-resource-index", ("uet.ses.rendv_ext_hdr.read_resource_index",),
     "rendezvous read resource index", "int"),
    ("--read-offset", ("uet.ses.rendv_ext_hdr.read_offset",), "rendezvous read offset", "int"),
    ("--read-match-bits", ("uet.ses.rendv_ext_hdr.read_match_bits",),
     "rendezvous read match bits", "int"),
    ("--read-ri-gen", ("uet.ses.rendv_ext_hdr.read_ri_gen",), "rendezvous read RI generation "
     "(ref-prov)", "int"),
    ("--sync-group", ("uet.ses.sync_ext_hdr.group",), "sync group (ref-prov)", "int"),
    ("--sync-count", ("uet.ses.sync_ext_hdr.count",), "sync count (ref-prov)", "int"),
    # SES responses
    ("--rsp-opcode", ("uet.ses.rsp.opcode",), "response opcode (response, default-response, "
     "... or a number)", t.RSP_OPCODES),
    ("--return-code", ("uet.ses.rsp.return_code",), "return code (ok, no-match, too-long, ... "
     "or a number)", t.RETURN_CODES),
    ("--rsp-list", ("uet.ses.rsp.list",), "response list", "int"),
    ("--mod-length", ("uet.ses.rsp.mod_length",), "response modified length", "int"),
    ("--read-req-message-id", ("uet.ses.rsp.read_req_message_id",), "response with data: "
     "message ID of the read", "int"),
    ("--orig-req-psn", ("uet.ses.rsp.orig_req_psn",), "small response with data: PSN of the "
     "request (ref-prov)", "int"),
)
SES_KINDS = {"none": t.NH_NONE, "small": t.NH_SMALL, "medium": t.NH_MEDIUM,
             "standard": t.NH_STD, "response": t.NH_RSP, "response-data": t.NH_RSP_DATA,
             "small-response-data": t.NH_RSP_DATA_SMALL}
# RoCE's frame options that mean nothing to UET (roce.cli.craft names them)
ACCEPTED = frozenset(("--payload-hex", "--payload-file", "--payload-size", "--src", "--dst",
                      "--smac", "--dmac", "--vlan", "--ecn", "--ttl", "--ipv6", "--dscp",
                      "--psn-step", "--field"))


def _dest(flag: str) -> str:
    return "uet_" + flag.lstrip("-").replace("-", "_")


def _named(table: t.Names, bits: int, what: str) -> Callable[[str], int]:
    number = unsigned(bits, what)

    def parse(text: str) -> int:
        value = t.lookup_name(table, text)
        if value is not None:
            return value
        try:
            return number(text)
        except argparse.ArgumentTypeError:
            names = ", ".join(n.lower().replace("_", "-") for n, _d in table.values())
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {what}: a number or one of {names}") from None

    parse.__name__ = what.replace(" ", "_")
    parse.bounds = number.bounds  # type: ignore[attr-defined]  # the numbers it takes
    return parse


def _type(row: Row) -> Callable[[str], Any] | None:
    from roce.families.uet import uetfields
    from roce.families.uet.layouts import READINGS

    flag, names, _help, kind = row
    if kind == "flag":
        return None
    what = f"{flag} ({names[0]})"
    if kind == "signed":
        return bounded_int(-0x8000, 0x7FFF, "a signed 16-bit offset")
    if kind == "psn":
        return unsigned(32, "a PSN (32 bits)")
    bits = max(uetfields.table()[n][1] for n in names if n in uetfields.table())
    if kind == "int":
        return unsigned(bits, f"a {bits}-bit value")
    if kind == "ctrl":
        return _named(READINGS["ref-prov"].ctrl_types, bits, "a control type")
    if kind == "opcode":
        return _named(READINGS["ref-prov"].ses_opcodes, bits, "an SES opcode")
    return _named(kind, bits, what.split(" ", 1)[0].lstrip("-").replace("-", " "))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from roce.families.uet.checks import CHECKS

    g = parser.add_argument_group("Ultra Ethernet Transport (OPCODE uet-...)")
    g.add_argument("--uet-layout", choices=READING_NAMES, default="spec",
                   help="the layouts to build: spec (UE 1.0.1 as Wireshark 5.0 reads it) or "
                        "ref-prov (the reference provider's)")
    g.add_argument("--uet-native", action="store_true",
                   help="IP protocol 253 with the entropy header, not UDP")
    g.add_argument("--uet-port", type=parse_port, metavar="N",
                   help=f"UDP destination port (default {UET_PORT}; the reference provider "
                        f"uses {REF_PROV_PORT})")
    g.add_argument("--entropy", type=unsigned(16, "an entropy value"), metavar="N",
                   help="the entropy: UDP source port, or the entropy header's (default "
                        "0xc000)")
    g.add_argument("--ses", choices=list(SES_KINDS), metavar="KIND",
                   help="the SES header: " + ", ".join(SES_KINDS) + " (default: standard "
                        "after requests, response after a RUDI response, none otherwise)")
    for row in OPTIONS:
        flag, names, help_text, kind = row
        if kind == "flag":
            g.add_argument(flag, dest=_dest(flag), action="store_true", default=None,
                           help=help_text)
        else:
            g.add_argument(flag, dest=_dest(flag), type=_type(row), metavar="N",
                           help=help_text)
    for c in CHECKS:
        g.add_argument(c.option, dest=_dest(c.option), action="store_true",
                       help=f"make the frame raise the expert note: {c.title.lower()}")


def wanted(args: argparse.Namespace) -> bool:
    """Does the command line ask for a UET packet?"""
    return str(args.opcode).strip().lower().startswith(PREFIX)


def _given(args: argparse.Namespace) -> dict[str, tuple[str, Any]]:
    """flat name -> (option, value) of every UET option given (all its names)."""
    out: dict[str, tuple[str, Any]] = {}
    for flag, names, _help, _kind in OPTIONS:
        value = getattr(args, _dest(flag), None)
        if value is None:
            continue
        for name in names:
            out[name] = (flag, value)
    return out


def build(args: argparse.Namespace, refused: list[str],
          read_payload: Callable[[argparse.Namespace, Any], bytes | None]) -> Iterator[bytes]:
    """The ``--count`` frames the options describe, one at a time (options checked now);
    ``read_payload`` is ``roce craft``'s (the payload options, checked as for RoCE)."""
    from roce.families import registry, uet
    from roce.families.uet import build as ub
    from roce.families.uet import uetfields
    from roce.families.uet.checks import CHECKS
    from roce.families.uet.layouts import READINGS

    name = str(args.opcode).strip().lower().replace("_", "-")
    reading = READINGS[args.uet_layout]
    kinds = ub.kinds(reading)
    if name not in kinds:
        import difflib

        near = difflib.get_close_matches(name, list(kinds), n=1)
        hint = f"did you mean {near[0]}?" if near else "UET names: " + ", ".join(kinds)
        raise UsageError(f"unknown UET packet {args.opcode!r} ({hint})")
    bad = [flag for flag in refused if flag not in ACCEPTED]
    if bad:
        raise UsageError(f"{name}: UET packets take no {', '.join(bad)} (RoCE options)")
    if getattr(args, "link", "eth") == "ib":
        raise UsageError(f"{name}: --link ib is native InfiniBand; UET runs over Ethernet")
    typ, opcode = kinds[name]
    given = _given(args)
    values: dict[str, Any] = {"uet.pds.type": typ}
    if opcode is not None:
        values["uet.ses.std.opcode"] = opcode
    if args.ses is not None:
        values["uet.pds.nh"] = SES_KINDS[args.ses]
    for field, value in args.fields:
        if field not in uetfields.table():
            raise UsageError(f"--field {field}: UET packets take the uet.* fields (roce decode "
                             "-G fields lists them)")
        values[field] = value
        given[field] = (f"--field {field}", value)
    values.update({key: value for key, (flag, value) in given.items()
                   if not flag.startswith("--field")})
    if "uet.tss.ssi" in values:
        values["uet.tss"] = values["uet.tss.sp"] = True
    if "uet.pds.ack.epsn" in values:
        values["uet.pds.flags.epsn"] = True
    payload = read_payload(args, _ANY_PAYLOAD) or b""
    values = ub.with_defaults(values, reading, len(payload))
    for c in CHECKS:
        if getattr(args, _dest(c.option), False):
            try:
                c.spoil(values, reading, len(payload))
            except ValueError as exc:
                raise UsageError(f"{c.option}: {name} {exc}") from None
    native = args.uet_native
    port = args.uet_port or UET_PORT
    entropy = ub.ENTROPY_BASE if args.entropy is None else args.entropy
    if native:
        values.setdefault("uet.pds.entropy", entropy)
    for flag, addr in (("--src", args.src), ("--dst", args.dst)):
        if addr is not None and (":" in addr) != args.ipv6:
            raise UsageError(f"{flag} {addr}: an {'IPv6' if args.ipv6 else 'IPv4'} address is "
                             f"needed{'' if args.ipv6 else ' (or --ipv6)'}")
    frame_kw: dict[str, Any] = {"native": native, "ipv6": args.ipv6, "src": args.src,
                                "dst": args.dst, "sport": entropy, "dport": port,
                                "vlan": args.vlan, "vlan_priority": args.vlan_priority,
                                "dscp": args.dscp, "ecn": args.ecn or 0}
    for key in ("smac", "dmac", "ttl"):
        if getattr(args, key) is not None:
            frame_kw[key] = getattr(args, key)
    first = _frame(values, reading, payload, native, frame_kw, given)
    # the frames are decoded to be printed: the registry must read them as they were built
    reg = registry()
    if not native and port != UET_PORT:
        reg.decode_as(f"udp.port=={port},uet")
    if reading.name != "spec":
        uet.use_reading(reg, reading.name)
    return _frames(first, values, reading, payload, native, frame_kw, args)


class _AnyPayload:
    """What ``roce.cli.craft.read_payload`` asks of an opcode: a UET packet carries any
    payload (its SES lengths follow it)."""

    payload = True
    payload_len = None
    short_name = "UET"


_ANY_PAYLOAD = _AnyPayload()


def _frame(values: dict[str, Any], reading: Any, payload: bytes, native: bool,
           frame_kw: dict[str, Any], given: dict[str, tuple[str, Any]]) -> bytes:
    from roce.families.uet import build as ub
    from roce.families.uet import dissect

    try:
        data = ub.uet_bytes(values, reading, payload, entropy=native)
        frame = ub.frame(data, **frame_kw)
    except (TypeError, ValueError) as exc:
        raise UsageError(_which(str(exc), given)) from None
    decoded = dissect.decode(data, entropy=native, reading=reading).fields
    kind = t.short(t.PDS_TYPES, values["uet.pds.type"])
    for flag in {f for f, _v in given.values()}:
        names = {k for k, (f, _v) in given.items() if f == flag}
        if not names & decoded.keys():
            raise UsageError(f"{flag}: this {kind} packet has no such field "
                             f"({', '.join(sorted(names))})")
    return frame


# the offsets the builder makes of a derived PSN an option gave (build._derived)
_FROM_DERIVED = {"uet.pds.clear_psn_offset": "uet.pds.clear_psn",
                 "uet.pds.psn_offset": "uet.pds.start_psn",
                 "uet.pds.ack_psn_offset": "uet.pds.ack_psn",
                 "uet.pds.ack.sack_psn_offset": "uet.pds.ack.sack_psn"}


def _which(message: str, given: dict[str, tuple[str, Any]]) -> str:
    """The builder's message with the option that gave the value first."""
    key = message.split(" ", 1)[0]
    for name in (key, _FROM_DERIVED.get(key, "")):
        if name in given:
            return f"{given[name][0]}: {message}"
    return message


def _frames(first: bytes, values: dict[str, Any], reading: Any, payload: bytes, native: bool,
            frame_kw: dict[str, Any], args: argparse.Namespace) -> Iterator[bytes]:
    from roce.families.uet import build as ub

    yield first
    if args.count == 1:
        return
    v = dict(values)
    for derived, base, offset in (("uet.pds.clear_psn", "uet.pds.psn", "uet.pds.clear_psn_offset"),
                                  ("uet.pds.start_psn", "uet.pds.psn", "uet.pds.psn_offset")):
        if derived in v:  # keep the offsets of the first frame as the PSN steps
            diff = (v.pop(derived) - v.get(base, 0)) & 0xFFFFFFFF
            v[offset] = (diff - (1 << 32) if diff & 0x80000000 else diff) if offset == \
                "uet.pds.clear_psn_offset" else (-diff) & 0xFFFFFFFF
    psn = v.get("uet.pds.psn", 0)
    for i in range(1, args.count):
        if "uet.pds.psn" in v or values["uet.pds.type"] in t.REQUESTS:
            v["uet.pds.psn"] = (psn + i * args.psn_step) & 0xFFFFFFFF
        yield ub.frame(ub.uet_bytes(v, reading, payload, entropy=native), **frame_kw)


__all__ = ["OPTIONS", "PREFIX", "SES_KINDS", "add_arguments", "build", "wanted"]
