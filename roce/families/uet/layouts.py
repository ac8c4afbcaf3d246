"""The headers of Ultra Ethernet Transport, each written once in Construct, and the two readings
of them: the specification as Wireshark 5.0 reads it (``SPEC``, the default) and the reference
provider's (``REF_PROV``, ``--uet-layout ref-prov``).

Sources (docs/protocol.md, "Ultra Ethernet Transport", cites each fact):

* Wireshark's ``epan/dissectors/packet-uet.c`` (written against UE specification 1.0.1; field
  names, offsets and masks) and the Wireshark 5.0 display filter reference for ``uet``;
* ``ultraethernet/uet-ref-prov``, ``uet_pkt_hdr.h`` (the reference provider's structs).

A header's flat field names are ``prefix + "." + field``, so the layouts below name fields
with Wireshark's filter names: the PDS's ``psn`` under ``uet.pds`` is ``uet.pds.psn``.  A
field Wireshark does not have gets a name of ours under the same prefix
(``uet.pds.clear_psn_offset``).  Where the readings differ, each reading names its own layout
below; everything else is shared, written once.  ``DIFFERENCES`` lists the differences, one
row each, with both sources (docs/protocol.md prints it; a test holds the two to each other).

Offsets are relative to the header's start; the PDS prologue (2 bytes: type, next header or
control type, flags) is its own layout and the type-specific body follows it.  Signed fields
(PSN offsets) are held unsigned on the wire and read signed by ``roce.families.uet.dissect``
(``SIGNED``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from construct import BitsInteger, BitStruct, Construct, Flag

from roce.codecache import compiled
from roce.families.uet import codes as t
from roce.headers import Layout, define

U = BitsInteger


def _u(name: str, bits: int, title: str) -> Construct:
    return name / U(bits) * title


def _flag(name: str, title: str) -> Construct:
    return name / Flag * title


@dataclass(frozen=True)
class Header:
    """One layout of a reading: its flat-name ``prefix``, the ``define``d layout and codec, its
    flat keys in wire order, and ``put(data, pos, fields)``: the layout at ``pos`` read
    straight into a flat field dict (``_compile_put``), what the decoder runs per packet."""

    key: str
    prefix: str
    layout: Layout
    decode: Callable[[bytes, int], dict]
    encode: Callable[[dict], bytes]
    keys: tuple[str, ...]
    put: Callable[[bytes, int, dict], None]

    @property
    def size(self) -> int:
        return self.layout.size

    def titles(self) -> dict[str, str]:
        return {k: f.title for k, f in zip(self.keys, self.layout.fields)}


_WORDS = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _compile_put(layout: Layout, keys: tuple[str, ...]) -> Callable[[bytes, int, dict], None]:
    """Straight-line Python reading ``layout`` into flat keys (as ``roce.headers`` compiles its
    codecs): fields that share bytes make one word, read by one ``struct`` call for the whole
    layout (words of other sizes as bytes), each field a shift and mask of its word."""
    groups: list[list] = []  # [first byte, end byte, [(key, field)]]
    for key, f in zip(keys, layout.fields):
        first, end = f.bit_offset // 8, (f.bit_offset + f.bits + 7) // 8
        if groups and first < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end)
            groups[-1][2].append((key, f))
        else:
            groups.append([first, end, [(key, f)]])
    fmt, items, raws = [], [], []
    for i, (first, end, fields) in enumerate(groups):
        size = end - first
        code = _WORDS.get(size)
        fmt.append(code or f"{size}s")
        word = f"w{i}"
        if code is None:
            raws.append(f"    {word} = from_bytes({word}, 'big')")
        for key, f in fields:
            shift = end * 8 - f.bit_offset - f.bits
            expr = f"({word} >> {shift}) & {f.mask:#x}" if shift else f"{word} & {f.mask:#x}"
            if f.bits == size * 8:
                expr = word
            items.append(f"{key!r}: {'_B[' + expr + ']' if f.kind == 'bool' else expr}")
    names = ", ".join(f"w{i}" for i in range(len(groups)))
    src = "\n".join(["def put(data, pos, f):", f"    {names}, = unpack(data, pos)", *raws,
                     "    f.update({" + ", ".join(items) + "})"]) + "\n"
    env = {"unpack": struct.Struct("!" + "".join(fmt)).unpack_from,
           "from_bytes": int.from_bytes, "_B": (False, True)}
    exec(compiled(src, f"<uet {layout.name} put>", __name__), env)
    return env["put"]  # type: ignore[no-any-return]


def _header(key: str, prefix: str, *subcons: Construct) -> Header:
    # compiled at first use: the one-line view (C) and the plans read through ``put``
    layout, dec, enc = define(f"uet.{key}", BitStruct(*subcons), lazy=True)
    keys = tuple(f"{prefix}.{f.name}" for f in layout.fields)
    return Header(key, prefix, layout, dec, enc, keys, _compile_put(layout, keys))


P, S, T = "uet.pds", "uet.ses", "uet.tss"

# -- layouts both readings share ------------------------------------------------------------------

# The entropy header before the PDS when UET runs straight over IP (protocol 253).
ENTROPY = _header("entropy", P, _u("entropy", 16, "Entropy"),
                  _u("entropy.rsvd", 16, "Reserved (entropy)"))
PROLOGUE = _header("prologue", P, _u("type", 5, "Type"), _u("nh", 4, "Next Hdr"),
                   _u("flags", 7, "Flags"))
TSS_WORD = _header("tss", T, _u("type", 5, "Type"), _flag("sp", "SP"),
                   _u("reserved", 1, "Reserved"), _u("an", 1, "AN"), _u("sdi", 24, "SDI"))
TSS_SSI = _header("tss.ssi", T, _u("ssi", 32, "SSI"))
_CLEAR = _u("clear_psn_offset", 16, "Clear PSN offset")
RUD_ROD = _header("rud_rod", P, _CLEAR, _u("psn", 32, "PSN"), _u("spdcid", 16, "Source PDC ID"),
                  _u("dpdcid", 16, "Destination PDC ID"))
# the PSN space (a PDC's PSNs, RUDI's packet IDs): the width of the header's PSN field
PSN_MASK = RUD_ROD.layout.field("psn").mask
CC_STATE = _header("cc", P, _u("cc_state.ccc_id", 8, "CCC ID"),
                   _u("cc_state.credit_target", 24, "Credit Target"))
RUDI = _header("rudi", P, _u("rudi.rsvd", 16, "Reserved"), _u("rudi.pkt_id", 32, "RUDI ID"))
UUD = _header("uud", P, _u("uud.rsvd", 16, "Reserved"))
ACK = _header("ack", P, _u("ack_psn_offset", 16, "ACK PSN offset"),
              _u("cack_psn", 32, "Cumulative ACK PSN"), _u("spdcid", 16, "Source PDC ID"),
              _u("dpdcid", 16, "Destination PDC ID"))
ACK_EXT = _header("ack.ext", P, _u("ack.cc_type", 4, "CC Type"),
                  _u("ack.cc_flags", 4, "CC Flags"), _u("ack.mpr", 8, "Maximum PSN range (MPR)"),
                  _u("ack.sack_psn_offset", 16, "SACK PSN Offset"),
                  _u("ack.sack_bitmap", 64, "SACK Bitmap"))
ACK_NSCC = _header("ack.nscc", P, _u("ack.cc_state.service_time", 16, "Service Time"),
                   _flag("ack.cc_state.rc", "Restore Cwnd"),
                   _u("ack.cc_state.rcv_cwnd_pend", 7, "Cwnd Penalty"),
                   _u("ack.cc_state.rcvd_bytes", 24, "Received Byte Count"),
                   _u("ack.cc_state.ooo_count", 16, "Out Of Order Count"))
ACK_CREDIT = _header("ack.credit", P, _u("ack.cc_state.credit", 24, "Credit"),
                     _u("ack.cc_state.reserved", 24, "Reserved"),
                     _u("ack.cc_state.ooo_count", 16, "Out Of Order Count"))
# the CC state of a CC type no layout reads: 8 bytes as one number
ACK_CC_RAW = _header("ack.cc_raw", P, _u("ack.cc_state", 64, "CC State"))
NACK = _header("nack", P, _u("nack.code", 8, "NACK Code"),
               _u("nack.vendor_code", 8, "Vendor Code"), _u("nack.psn", 32, "NACK PSN"),
               _u("spdcid", 16, "Source PDC ID"), _u("dpdcid", 16, "Destination PDC ID"),
               _u("nack.max_recv_psn_plus_1", 32, "Payload (Max Recvd PSN + 1)"))
CTRL = _header("ctrl", P, _u("ctrl_probe_opaque", 16, "Probe Opaque"), _u("psn", 32, "PSN"),
               _u("spdcid", 16, "Source PDC ID"), _u("dpdcid", 16, "Destination PDC ID"),
               _u("ctrl_payload", 32, "Payload"))

_SES_FLAGS_STD = (_u("std.ver", 2, "Version"), _flag("std.dc", "Delivery Complete (DC)"),
                  _flag("std.ie", "Initiator Error (IE)"), _flag("std.rel", "Relative"),
                  _flag("std.hd", "Header Data"), _flag("std.eom", "End of Msg (EOM)"),
                  _flag("std.som", "Start of Msg (SOM)"))
STD = _header("std", S, _u("std.rsv", 2, "Reserved (R)"), _u("std.opcode", 6, "Opcode"),
              *_SES_FLAGS_STD, _u("std.message_id", 16, "Message ID"),
              _u("std.index_generation", 8, "Index Generation"), _u("std.job_id", 24, "Job ID"),
              _u("std.reserved2", 4, "Reserved"), _u("std.pidonfep", 12, "PIDonFEP"),
              _u("std.reserved3", 4, "Reserved"),
              _u("std.resource_index", 12, "Resource Index (RI)"),
              _u("std.buffer_offset", 64, "Buffer Offset"),
              _u("std.initiator", 32, "Initiator"),
              _u("std.mem_key_match_bits", 64, "Memory Key/Match Bits"))
# the last 12 bytes of a standard request: header data on the first packet of a message
# (SOM), the packet's payload length and message offset on the others
STD_SOM = _header("std.som", S, _u("std.header_data", 64, "Header Data"),
                  _u("std.request_length", 32, "Request Length"))
STD_CONT = _header("std.cont", S, _u("std.reserved4", 18, "Reserved"),
                   _u("std.payload_length", 14, "Payload Length"),
                   _u("std.message_offset", 32, "Message Offset"),
                   _u("std.request_length", 32, "Request Length"))
SMALL = _header("small", S, _u("small_req.rsv", 2, "Reserved"), _u("std.opcode", 6, "Opcode"),
                _u("small_req.flags.ver", 2, "Version"),
                _flag("small_req.flags.dc", "Delivery Complete (DC)"),
                _flag("small_req.flags.ie", "Initiator Error (IE)"),
                _flag("small_req.flags.rel", "Relative"),
                _u("small_req.flags.rsvd", 1, "Reserved"),
                _flag("small_req.eom", "End of Msg (EOM)"),
                _flag("small_req.som", "Start of Msg (SOM)"),
                _u("small_req.flags.rsv2", 2, "Reserved"),
                _u("small_req.req_length", 14, "Request Length"),
                _u("small_req.index_generation", 8, "Index Generation"),
                _u("small_req.job_id", 24, "Job ID"), _u("small_req.rsv3", 4, "Reserved"),
                _u("small_req.pidonfep", 12, "PIDonFEP"), _u("small_req.rsv4", 4, "Reserved"),
                _u("small_req.resource_index", 12, "Resource Index"),
                _u("small_req.buffer_offset", 64, "Buffer Offset"))
# Wireshark's source steps 3 bytes over the 2-byte request length here; its own size constant
# (32) and the reference provider say 2: this is the 32-byte layout (docs/protocol.md).
MEDIUM = _header("medium", S, _u("med_req.rsv", 2, "Reserved"), _u("std.opcode", 6, "Opcode"),
                 _u("med_req.flags.ver", 2, "Version"),
                 _flag("med_req.flags.dc", "Delivery Complete (DC)"),
                 _flag("med_req.flags.ie", "Initiator Error (IE)"),
                 _flag("med_req.flags.rel", "Relative"), _flag("med_req.flags.hd", "HD"),
                 _flag("med_req.eom", "End of Msg (EOM)"),
                 _flag("med_req.som", "Start of Msg (SOM)"),
                 _u("med_req.flags.rsv2", 2, "Reserved"),
                 _u("med_req.req_length", 14, "Request Length"),
                 _u("med_req.resource_index_generation", 8, "Resource Index Generation"),
                 _u("med_req.job_id", 24, "Job ID"), _u("med_req.rsv3", 4, "Reserved"),
                 _u("med_req.pidonfep", 12, "PIDonFEP"), _u("med_req.rsv4", 4, "Reserved"),
                 _u("med_req.resource_index", 12, "Resource Index"),
                 _u("med_req.buffer_offset", 64, "Buffer Offset"),
                 _u("med_req.initiator", 32, "Initiator"),
                 _u("med_req.mem_key_match_bits", 64, "Match Bits/Memory Key"))
ATOMIC = _header("atomic", S, _u("atomic_op_ext_hdr.atomic_opcode", 8, "Atomic Opcode"),
                 _u("atomic_op_ext_hdr.atomic_data_type", 8, "Atomic Data type"),
                 _u("atomic_op_ext_hdr.sem_ctl", 8, "Semantic Control"),
                 _u("atomic_op_ext_hdr.rsvd", 8, "Rsvd"))
CSWAP = _header("cswap", S, _u("comp_swap_ext_hdr.atomic_opcode", 8, "Atomic Opcode"),
                _u("comp_swap_ext_hdr.atomic_data_type", 8, "Atomic Data type"),
                _u("comp_swap_ext_hdr.sem_ctl", 8, "Semantic Control"),
                _u("comp_swap_ext_hdr.rsvd", 8, "Rsvd"),
                _u("comp_swap_ext_hdr.comp_value", 128, "Compare Value"),
                _u("comp_swap_ext_hdr.swap_value", 128, "Swap Value"))
_RSP_HEAD = (_u("rsp.list", 2, "List"), _u("rsp.opcode", 6, "Opcode"),
             _u("rsp.ver", 2, "Version"), _u("rsp.return_code", 6, "Return Code"))
RSP = _header("rsp", S, *_RSP_HEAD, _u("rsp.message_id", 16, "Response Message ID"),
              _u("rsp.resource_index_gen", 8, "Resource Index generation"),
              _u("rsp.job_id", 24, "Job ID"), _u("rsp.mod_length", 32, "Modified Length"))


def _rsp_data(gen: Construct) -> Header:
    return _header("rsp_data", S, *_RSP_HEAD, _u("rsp.message_id", 16, "Response Message ID"),
                   gen, _u("rsp.job_id", 24, "Job ID"),
                   _u("rsp.read_req_message_id", 16, "Message ID"),
                   _u("rsp.reserved2", 2, "Reserved"),
                   _u("rsp.payload_length", 14, "Payload Length"),
                   _u("rsp.mod_length", 32, "Modified Length"),
                   _u("rsp.message_offset", 32, "Message Offset"))


_RSP_SMALL_HEAD = (*_RSP_HEAD, _u("rsp.reserved3", 2, "Rsv"),
                   _u("rsp.payload_length", 14, "Payload Length"))

# -- the two readings' own layouts ----------------------------------------------------------------

SPEC_TSC = _header("tss.tsc", T, _u("tsc", 64, "TSC"))
REF_TSC = _header("tss.tsc", T, _u("epoch", 16, "Epoch"), _u("tsc", 48, "TSC"))

# SYN: the PDC mode and PSN offset stand where the destination PDC ID is.  Wireshark reads
# "use reserved PDC" as the top bit of the mode nibble (0x8000 of the 16 bits); the reference
# provider as its bottom bit (0x1000), the reserved bits above it.
SPEC_SYN = _header("rud_rod.syn", P, _CLEAR, _u("psn", 32, "PSN"),
                   _u("spdcid", 16, "Source PDC ID"),
                   _flag("pdc_mode_use_rsv", "Use Reserved PDC"),
                   _u("pdc_mode_rsv", 3, "Reserved"), _u("psn_offset", 12, "PSN offset"))
REF_SYN = _header("rud_rod.syn", P, _CLEAR, _u("psn", 32, "PSN"),
                  _u("spdcid", 16, "Source PDC ID"), _u("pdc_mode_rsv", 3, "Reserved"),
                  _flag("pdc_mode_use_rsv", "Use Reserved PDC"),
                  _u("psn_offset", 12, "PSN offset"))
# the reference provider's control packet with SYN: PDC mode and PSN offset as in requests
REF_CTRL_SYN = _header("ctrl.syn", P, _u("ctrl_probe_opaque", 16, "Probe Opaque"),
                       _u("psn", 32, "PSN"), _u("spdcid", 16, "Source PDC ID"),
                       _u("pdc_mode_rsv", 3, "Reserved"),
                       _flag("pdc_mode_use_rsv", "Use Reserved PDC"),
                       _u("psn_offset", 12, "PSN offset"), _u("ctrl_payload", 32, "Payload"))
# ACK_CCX: Wireshark reads 16 opaque bytes after the SACK bitmap; the reference provider the
# ACK_CC state (8 bytes, by CC type) then 8 bytes of CCX state.  Same 28-byte total.
SPEC_ACK_CCX = _header("ack.ccx", P, _u("ack.ccx_state", 128, "CCX State"))
REF_ACK_CCX = _header("ack.ccx", P, _u("ack.ccx_state", 64, "CCX State"))
# the reference provider's closing ACK (flag EPSN) carries the expected PSN
REF_ACK_EPSN = _header("ack.epsn", P, _u("ack.epsn", 32, "Expected PSN"))
# NACK_CCX: 16 bytes Wireshark skips unread; the reference provider's type and two states
SPEC_NACK_CCX = _header("nack.ccx", P, _u("nack.ccx_state", 128, "NACK CCX State"))
REF_NACK_CCX = _header("nack.ccx", P, _u("nack.nccx_type", 4, "NCCX Type"),
                       _u("nack.ccx_state1", 60, "NACK CCX State 1"),
                       _u("nack.ccx_state2", 64, "NACK CCX State 2"))
# rendezvous: Wireshark reads a 14-bit PIDonFEP and a 12-bit resource index in two 16-bit
# words; the reference provider packs RI generation 8 | PIDonFEP 12 | RI 12 in one 32-bit word
SPEC_RENDV = _header("rendv", S, _u("rendv_ext_hdr.eager_length", 32, "Eager Length"),
                     _u("rendv_ext_hdr.reserved", 2, "Reserved"),
                     _u("rendv_ext_hdr.read_pid_on_fep", 14, "Read PIDonFEP"),
                     _u("rendv_ext_hdr.reserved2", 4, "Reserved"),
                     _u("rendv_ext_hdr.read_resource_index", 12, "Read Resource Index"),
                     _u("rendv_ext_hdr.read_offset", 64, "Read Offset"),
                     _u("rendv_ext_hdr.read_match_bits", 64, "Read Match Bits"))
REF_RENDV = _header("rendv", S, _u("rendv_ext_hdr.eager_length", 32, "Eager Length"),
                    _u("rendv_ext_hdr.read_ri_gen", 8, "Read RI Generation"),
                    _u("rendv_ext_hdr.read_pid_on_fep", 12, "Read PIDonFEP"),
                    _u("rendv_ext_hdr.read_resource_index", 12, "Read Resource Index"),
                    _u("rendv_ext_hdr.read_offset", 64, "Read Offset"),
                    _u("rendv_ext_hdr.read_match_bits", 64, "Read Match Bits / Memory Key"))
# the reference provider's sync extension (SYNC_WRITE, SYNC_ATOMIC), before any atomic one
REF_SYNC = _header("sync", S, _u("sync_ext_hdr.group", 16, "Sync Group"),
                   _u("sync_ext_hdr.count", 16, "Sync Count"))
# response with data: byte 4 is reserved to Wireshark, the RI generation to the provider
SPEC_RSP_DATA = _rsp_data(_u("rsp.reserved", 8, "Reserved"))
REF_RSP_DATA = _rsp_data(_u("rsp.resource_index_gen", 8, "Resource Index generation"))
# small response with data: 4 bytes to Wireshark; 12 to the provider (RI generation, job ID
# and the PSN of the request it answers)
SPEC_RSP_SMALL = _header("rsp_data_small", S, *_RSP_SMALL_HEAD)
REF_RSP_SMALL = _header("rsp_data_small", S, *_RSP_SMALL_HEAD,
                        _u("rsp.resource_index_gen", 8, "Resource Index generation"),
                        _u("rsp.job_id", 24, "Job ID"),
                        _u("rsp.orig_req_psn", 32, "Original Request PSN"))

# -- per-type PDS flags ----------------------------------------------------------------------
# (flat name, mask) over the 7 flag bits; a one-bit mask is a flag, wider ones are numbers
# (shifted down by the mask's low zero bits, as Wireshark shows them).

Flags = tuple[tuple[str, int], ...]
_REQ_FLAGS: Flags = (("uet.pds.flags.retx", 0x10), ("uet.pds.flags.ar", 0x08),
                     ("uet.pds.flags.syn", 0x04), ("uet.pds.flags.rsvd_rud_rod", 0x63))
_NACK_FLAGS: Flags = (("uet.pds.flags.m", 0x20), ("uet.pds.flags.retx", 0x10),
                      ("uet.pds.flags.nt", 0x08), ("uet.pds.flags.rsvd_nack", 0x47))
_UUD_FLAGS: Flags = (("uet.pds.flags.rsvd_uud", 0x3F),)
SPEC_FLAGS: dict[int, Flags] = {
    **dict.fromkeys(t.REQUESTS, _REQ_FLAGS),
    **dict.fromkeys(t.RUDI, (("uet.pds.flags.rsvd_rudi", 0x4F),)),
    t.UUD_REQ: _UUD_FLAGS,
    **dict.fromkeys(t.ACKS, (("uet.pds.flags.m", 0x20), ("uet.pds.flags.retx", 0x10),
                             ("uet.pds.flags.p", 0x08), ("uet.pds.flags.req", 0x06),
                             ("uet.pds.flags.rsvd_ack", 0x41))),
    **dict.fromkeys(t.NACKS, _NACK_FLAGS),
    t.CTRL: (("uet.pds.flags.retx", 0x10), ("uet.pds.flags.ar", 0x08),
             ("uet.pds.flags.syn", 0x04), ("uet.pds.flags.rsvd_ctl", 0x63)),
}
REF_FLAGS: dict[int, Flags] = {
    **SPEC_FLAGS,
    **dict.fromkeys(t.RUDI, (("uet.pds.flags.m", 0x20), ("uet.pds.flags.retx", 0x10),
                             ("uet.pds.flags.rsvd_rudi", 0x4F))),
    **dict.fromkeys(t.ACKS, (("uet.pds.flags.epsn", 0x40), ("uet.pds.flags.m", 0x20),
                             ("uet.pds.flags.retx", 0x10), ("uet.pds.flags.p", 0x08),
                             ("uet.pds.flags.req_cls", 0x04), ("uet.pds.flags.req_clr", 0x02),
                             ("uet.pds.flags.rsvd_ack", 0x01))),
    t.CTRL: (("uet.pds.flags.isrod", 0x20), ("uet.pds.flags.retx", 0x10),
             ("uet.pds.flags.ar", 0x08), ("uet.pds.flags.syn", 0x04),
             ("uet.pds.flags.rsvd_ctl", 0x43)),
}
FLAG_TITLES: dict[str, str] = {
    "uet.pds.flags.m": "ECN Marked (M)", "uet.pds.flags.retx": "Retransmitted (RETX)",
    "uet.pds.flags.ar": "ACK Request (AR)", "uet.pds.flags.p": "Probe Packet (P)",
    "uet.pds.flags.nt": "NACK Type (NT)", "uet.pds.flags.syn": "New PDC (SYN)",
    "uet.pds.flags.req": "Request (REQ)", "uet.pds.flags.epsn": "Expected PSN (EPSN)",
    "uet.pds.flags.req_cls": "Request Close (REQ_CLS)",
    "uet.pds.flags.req_clr": "Request Clear (REQ_CLR)",
    "uet.pds.flags.isrod": "ROD PDC (ISROD)",
    **{f"uet.pds.flags.rsvd_{k}": "Reserved" for k in ("rud_rod", "uud", "ctl", "ack", "rudi",
                                                          "nack")},
}
SYN_MASK = 0x04  # requests and (both readings' tables above) control packets
P_MASK, EPSN_MASK = 0x08, 0x40

# Fields held unsigned in the layouts that Wireshark (or the provider) reads signed.
SIGNED = frozenset(("uet.pds.clear_psn_offset", "uet.pds.ack_psn_offset",
                    "uet.pds.ack.sack_psn_offset"))


@dataclass(frozen=True)
class Reading:
    """One reading of UET: its layouts by key, PDS flags by type and the value tables that
    differ; ``name`` is what ``--uet-layout`` takes."""

    name: str
    title: str
    headers: dict[str, Header]
    flags: dict[int, Flags]
    ctrl_types: t.Names
    ses_opcodes: t.Names
    ctrl_syn: bool  # a control packet with SYN carries PDC mode and PSN offset
    rsp_lists: t.Names = field(default_factory=dict)
    mpr_unit: int = 0  # PSNs per unit of the ACK's MPR field (0: not given by the source)


_SHARED = {h.key: h for h in (ENTROPY, PROLOGUE, TSS_WORD, TSS_SSI, RUD_ROD, CC_STATE, RUDI, UUD,
                              ACK, ACK_EXT, ACK_NSCC, ACK_CREDIT, ACK_CC_RAW, NACK, CTRL, STD,
                              STD_SOM,
                              STD_CONT, SMALL, MEDIUM, ATOMIC, CSWAP, RSP)}
SPEC = Reading("spec", "UE specification 1.0.1 as Wireshark 5.0 reads it",
               {**_SHARED, **{h.key: h for h in (SPEC_TSC, SPEC_SYN, SPEC_ACK_CCX, SPEC_NACK_CCX,
                                                 SPEC_RENDV, SPEC_RSP_DATA, SPEC_RSP_SMALL)}},
               SPEC_FLAGS, t.CTRL_TYPES, t.SES_OPCODES, ctrl_syn=False)
REF_PROV = Reading("ref-prov", "ultraethernet/uet-ref-prov uet_pkt_hdr.h",
                   {**_SHARED, **{h.key: h for h in (REF_TSC, REF_SYN, REF_CTRL_SYN, REF_ACK_CCX,
                                                     REF_ACK_EPSN, REF_NACK_CCX, REF_RENDV,
                                                     REF_SYNC, REF_RSP_DATA, REF_RSP_SMALL)}},
                   REF_FLAGS, t.REF_PROV_CTRL_TYPES, t.REF_PROV_SES_OPCODES, ctrl_syn=True,
                   rsp_lists=t.REF_PROV_RSP_LISTS, mpr_unit=128)
READINGS: dict[str, Reading] = {r.name: r for r in (SPEC, REF_PROV)}


# -- which layouts follow which ---------------------------------------------------------------
# One rule for decoding and building alike.  Three entries are chosen by a value inside the
# packet itself, at the place they stand: "ack.cc" is the ACK's CC state (NSCC, credit, or 8
# raw bytes: ``ack_cc_key`` of ``uet.pds.ack.cc_type``), "std.tail" the last 12 bytes of a
# standard request ("std.som" or "std.cont", by its SOM flag), "amo" an atomic extension
# ("cswap" when the atomic opcode, its first byte, is a compare-and-swap one, else "atomic").

ACK_CC_STATE, STD_TAIL, AMO = "ack.cc", "std.tail", "amo"


def pds_chain(typ: int, flags: int, reading: Reading) -> tuple[str, ...]:
    """The layouts of a PDS header after its prologue, by type and flags."""
    h = reading.headers
    if typ in t.REQUESTS:
        body = ("rud_rod.syn" if flags & SYN_MASK else "rud_rod",)
        return body + ("cc",) if typ in t.CC_REQUESTS else body
    if typ in t.RUDI:
        return ("rudi",)
    if typ == t.UUD_REQ:
        return ("uud",)
    if typ in t.ACKS:
        if typ == t.ACK:
            return ("ack", "ack.epsn") if "ack.epsn" in h and flags & EPSN_MASK else ("ack",)
        cc = (ACK_CC_STATE,) if typ == t.ACK_CC or reading.name == "ref-prov" else ()
        return ("ack", "ack.ext", *cc, *(("ack.ccx",) if typ == t.ACK_CCX else ()))
    if typ in t.NACKS:
        return ("nack", "nack.ccx") if typ == t.NACK_CCX else ("nack",)
    if typ == t.CTRL:
        return ("ctrl.syn" if reading.ctrl_syn and flags & SYN_MASK else "ctrl",)
    return ()  # reserved and unknown types: the prologue only


SES_HEADERS = {t.NH_STD: "std", t.NH_SMALL: "small", t.NH_MEDIUM: "medium", t.NH_RSP: "rsp",
               t.NH_RSP_DATA: "rsp_data", t.NH_RSP_DATA_SMALL: "rsp_data_small"}


def carries_ses(typ: int) -> bool:
    """Whether a PDS type's next header field names an SES header (every type but control)."""
    return typ in t.PDS_TYPES and typ not in (0, t.TSS_TYPE, t.CTRL)


def ses_chain(nh: int, opcode: int, reading: Reading) -> tuple[str, ...]:
    """The layouts of an SES header by next header and (requests) opcode: the header, then
    its extensions (Wireshark's dissect_ses_*_req switches; the provider's sync one)."""
    first = SES_HEADERS.get(nh)
    if first is None:
        return ()
    if nh == t.NH_STD:
        sync = ("sync",) if opcode in (t.SYNC_WRITE, t.SYNC_ATOMIC) and "sync" in \
            reading.headers else ()
        if opcode in t.ATOMIC_OPCODES or (sync and opcode == t.SYNC_ATOMIC):
            return ("std", STD_TAIL, *sync, AMO)
        if opcode in t.RENDEZVOUS_OPCODES:
            return ("std", STD_TAIL, *sync, "rendv")
        return ("std", STD_TAIL, *sync)
    if nh in (t.NH_SMALL, t.NH_MEDIUM) and opcode in t.ATOMIC_OPCODES:
        return (first, AMO)
    return (first,)


def renamed(key: str, reading: Reading, flags: int = 0, opcode: int = 0,
            hd: bool = False) -> dict[str, str]:
    """Layout fields that take another name in some packets (flat key -> the name): a
    deferrable send's restart token where the buffer offset stands, a ready-to-restart's where
    the memory key does, a medium request's header data (HD) for its buffer offset, the
    provider's probe opaque for the ACK PSN offset of an ACK to a probe (flag P)."""
    if key == "std":
        if opcode in t.RESTART_AT_OFFSET:
            return {"uet.ses.std.buffer_offset": "uet.ses.std.restart_token"}
        if opcode in t.RESTART_AT_KEY:
            return {"uet.ses.std.mem_key_match_bits": "uet.ses.std.restart_token"}
    elif key == "medium" and hd:
        return {"uet.ses.med_req.buffer_offset": "uet.ses.med_req.header_data"}
    elif key == "ack" and reading.name == "ref-prov" and flags & P_MASK:
        return {"uet.pds.ack_psn_offset": "uet.pds.ack.probe_opaque"}
    return {}


def ack_cc_key(cc_type: int) -> str:
    """The layout of an ACK's CC state by its CC type (8 raw bytes for an unknown type)."""
    return {t.CC_NSCC: "ack.nscc", t.CC_CREDIT: "ack.credit"}.get(cc_type, "ack.cc_raw")


@dataclass(frozen=True)
class Difference:
    """One place where the readings differ: what, Wireshark's reading, the provider's."""

    what: str
    spec: str
    ref_prov: str


# Each row names the layouts or tables above; tests/test_uet_layouts.py checks every row
# against them, and docs/protocol.md prints the table.
DIFFERENCES: tuple[Difference, ...] = (
    Difference("UDP port", "4793 (IANA; udp.port row)",
               "49150 (UET_UDP_PORT); its packets go over IP protocol 253"),
    Difference("SYN PDC mode: use reserved PDC", "bit 0x80 of the mode byte (0x8000 of the "
               "16 bits), reserved 0x70", "bit 0x10 of the byte (PDC_INFO_USE_RSV_PDC 0x01 "
               "of the nibble, 0x1000), reserved 0xE0"),
    Difference("control packet with SYN", "destination PDC ID, always",
               "PDC mode and PSN offset in its place, as in requests"),
    Difference("control types", "0-8", "0-9: 9 NEGOTIATION"),
    Difference("control flags", "RETX 0x10, AR 0x08, SYN 0x04, reserved 0x63",
               "ISROD 0x20 (ROD PDC), RETX, AR, SYN, reserved 0x43"),
    Difference("RUDI flags", "reserved 0x4F (0x30 unnamed)", "M 0x20, RETX 0x10, reserved 0x4F"),
    Difference("ACK flags", "M 0x20, RETX 0x10, P 0x08, REQ 0x06 (2 bits: 1 clear PSN, "
               "2 close PDC, 3 reserved), reserved 0x41",
               "EPSN 0x40, M, RETX, P, REQ_CLS 0x04 and REQ_CLR 0x02 as separate bits, "
               "reserved 0x01"),
    Difference("ACK with EPSN", "no EPSN flag (0x40 reserved)",
               "4-byte expected PSN after the 12-byte ACK"),
    Difference("ACK_CCX extension", "12 bytes, then 16 opaque bytes (CCX state)",
               "12 bytes, the ACK_CC state (8 bytes, by CC type), then 8 bytes of CCX state"),
    Difference("ACK MPR unit", "not stated", "128 PSNs (UET_PDS_MPR_GRANULARITY, uet_pds.c)"),
    Difference("NACK_CCX extension", "16 bytes, not decoded",
               "NCCX type (4 bits), state 1 (60 bits), state 2 (64 bits)"),
    Difference("TSS counter", "TSC, 64 bits", "epoch (16 bits) and TSC (48 bits)"),
    Difference("SES opcodes", "0x00-0x0F", "0x10 SYNC_WRITE and 0x11 SYNC_ATOMIC with a sync "
               "extension (group u16, count u16) before any atomic one"),
    Difference("rendezvous extension", "eager length u32; reserved 2 + read PIDonFEP 14 in "
               "16 bits; reserved 4 + read RI 12 in 16 bits; read offset u64; read match bits "
               "u64", "eager length u32; RI generation 8 + read PIDonFEP 12 + read RI 12 in 32 "
               "bits; read offset u64; read memory key u64"),
    Difference("response with data, byte 4", "reserved", "resource index generation"),
    Difference("small response with data", "4 bytes: list, opcode, version, return code, "
               "payload length", "12 bytes: the same, RI generation, job ID and the PSN of "
               "the original request (u32)"),
    Difference("response list values", "not named", "0 EXPECTED, 1 OVERFLOW"),
)


__all__ = ["AMO", "ACK_CC_STATE", "DIFFERENCES", "PSN_MASK", "READINGS", "REF_PROV",
           "SES_HEADERS", "SIGNED", "SPEC", "STD_TAIL", "Difference", "Header", "Reading",
           "ack_cc_key", "carries_ses", "pds_chain", "renamed", "ses_chain"]
