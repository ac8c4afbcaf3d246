"""UET layouts pinned to Wireshark's ``epan/dissectors/packet-uet.c``: for every field, the
byte offset the dissector reads it at, how many bytes, and its mask (``hf_register_info``),
written here from that source, not from our layouts.  Each case sets exactly that field's bits
in an otherwise zero packet and checks the decoder reads them back, and nothing else; then the
reference provider's reading where it differs, the value tables, and the two places where we
read the specification's layout rather than a slip in Wireshark's source."""

from __future__ import annotations

import struct

import pytest

from roce.families.uet import codes as tables
from roce.families.uet import dissect as uet_decode
from roce.families.uet import layouts

PAD = 160  # zero bytes after the selector: every header fits, the rest is payload


def prologue(typ: int, nh: int = 0, flags: int = 0) -> bytes:
    return struct.pack("!H", (typ << 11) | (nh << 7) | flags)


# contexts: name -> (UET bytes up to where the headers start, offset of the header's first
# byte, entropy).  The selector bytes choose the header; everything else is zero.
def _ctx(pre: bytes, at: int, entropy: bool = False) -> tuple[bytes, int, bool]:
    return pre, at, entropy


CONTEXTS = {
    "rud": _ctx(prologue(2), 0),
    "rud_syn": _ctx(prologue(2, 0, 0x04), 0),
    "rud_cc": _ctx(prologue(13), 0),
    "rudi": _ctx(prologue(4), 0),
    "uud": _ctx(prologue(6), 0),
    "ack": _ctx(prologue(7), 0),
    "ack_cc": _ctx(prologue(8), 0),
    "ack_cc_credit": _ctx(prologue(8) + bytes(10) + b"\x10", 0),
    "ack_ccx": _ctx(prologue(9), 0),
    "nack": _ctx(prologue(10), 0),
    "ctrl": _ctx(prologue(11), 0),
    "tss": _ctx(bytes([0x08]), 0),  # type 1 in the top 5 bits
    "tss_sp": _ctx(bytes([0x0C]), 0),  # and SP
    "entropy": _ctx(b"", 0, True),
    "std": _ctx(prologue(2, 3) + bytes(10), 12),
    "std_som": _ctx(prologue(2, 3) + bytes(11) + b"\x01", 12),
    "std_defer": _ctx(prologue(2, 3) + bytes(10) + b"\x08", 12),
    "std_rtr": _ctx(prologue(2, 3) + bytes(10) + b"\x0c", 12),
    "std_atomic": _ctx(prologue(2, 3) + bytes(10) + b"\x03", 12 + 44),
    "std_cswap": _ctx(prologue(2, 3) + bytes(10) + b"\x03" + bytes(43) + b"\x0d", 12 + 44),
    "std_rendv": _ctx(prologue(2, 3) + bytes(10) + b"\x06", 12 + 44),
    "small": _ctx(prologue(2, 1) + bytes(10), 12),
    "medium": _ctx(prologue(2, 2) + bytes(10), 12),
    "medium_hd": _ctx(prologue(2, 2) + bytes(11) + b"\x04", 12),
    "rsp": _ctx(prologue(7, 4) + bytes(10), 12),
    "rsp_data": _ctx(prologue(7, 5) + bytes(10), 12),
    "rsp_data_small": _ctx(prologue(7, 6) + bytes(10), 12),
}

# (field, context, byte offset from the header's start, bytes read, mask; 0 = every bit):
# packet-uet.c's hf_register_info entries and the offsets its dissect_* functions read at.
WIRESHARK: tuple[tuple[str, str, int, int, int], ...] = (
    # dissect_pds: the prologue, FT_UINT16 at offset 0
    ("uet.pds.type", "rud", 0, 2, 0xF800),
    ("uet.pds.nh", "rud", 0, 2, 0x0780),
    ("uet.pds.ctl_type", "ctrl", 0, 2, 0x0780),
    ("uet.pds.flags", "rud", 0, 2, 0x007F),
    # dissect_pds_flags: 8-bit masks over the prologue
    ("uet.pds.flags.retx", "rud", 0, 2, 0x10), ("uet.pds.flags.ar", "rud", 0, 2, 0x08),
    ("uet.pds.flags.syn", "rud", 0, 2, 0x04), ("uet.pds.flags.rsvd_rud_rod", "rud", 0, 2, 0x63),
    ("uet.pds.flags.rsvd_rudi", "rudi", 0, 2, 0x004F),
    ("uet.pds.flags.rsvd_uud", "uud", 0, 2, 0x003F),
    ("uet.pds.flags.m", "ack", 0, 2, 0x20), ("uet.pds.flags.retx", "ack", 0, 2, 0x10),
    ("uet.pds.flags.p", "ack", 0, 2, 0x08), ("uet.pds.flags.req", "ack", 0, 2, 0x06),
    ("uet.pds.flags.rsvd_ack", "ack", 0, 2, 0x41),
    ("uet.pds.flags.m", "nack", 0, 2, 0x20), ("uet.pds.flags.nt", "nack", 0, 2, 0x08),
    ("uet.pds.flags.rsvd_nack", "nack", 0, 2, 0x47),
    ("uet.pds.flags.ar", "ctrl", 0, 2, 0x08), ("uet.pds.flags.syn", "ctrl", 0, 2, 0x04),
    ("uet.pds.flags.rsvd_ctl", "ctrl", 0, 2, 0x63),
    # dissect_pds_rud_rod_req
    ("uet.pds.psn", "rud", 4, 4, 0), ("uet.pds.spdcid", "rud", 8, 2, 0),
    ("uet.pds.dpdcid", "rud", 10, 2, 0),
    ("uet.pds.pdc_mode", "rud_syn", 10, 1, 0), ("uet.pds.pdc_mode_use_rsv", "rud_syn", 10, 1, 0x80),
    ("uet.pds.pdc_mode_rsv", "rud_syn", 10, 1, 0x70),
    ("uet.pds.psn_offset", "rud_syn", 10, 2, 0x0FFF),
    ("uet.pds.cc_state.ccc_id", "rud_cc", 12, 1, 0),
    ("uet.pds.cc_state.credit_target", "rud_cc", 13, 3, 0),
    # dissect_pds_rudi_req_rsp
    ("uet.pds.rudi.rsvd", "rudi", 2, 2, 0), ("uet.pds.rudi.pkt_id", "rudi", 4, 4, 0),
    # dissect_pds_ack and dissect_pds_ack_ext_hdr
    ("uet.pds.cack_psn", "ack", 4, 4, 0), ("uet.pds.spdcid", "ack", 8, 2, 0),
    ("uet.pds.dpdcid", "ack", 10, 2, 0),
    ("uet.pds.ack.cc_type", "ack_cc", 12, 1, 0xF0), ("uet.pds.ack.mpr", "ack_cc", 13, 1, 0),
    ("uet.pds.ack.sack_bitmap", "ack_cc", 16, 8, 0),
    ("uet.pds.ack.cc_state.service_time", "ack_cc", 24, 2, 0),
    ("uet.pds.ack.cc_state.rcvd_bytes", "ack_cc", 27, 3, 0),
    ("uet.pds.ack.cc_state.ooo_count", "ack_cc", 30, 2, 0),
    ("uet.pds.ack.cc_state.credit", "ack_cc_credit", 24, 3, 0),
    ("uet.pds.ack.cc_state.reserved", "ack_cc_credit", 27, 3, 0),
    ("uet.pds.ack.cc_state.ooo_count", "ack_cc_credit", 30, 2, 0),
    ("uet.pds.ack.ccx_state", "ack_ccx", 24, 16, 0),
    # dissect_pds_nack
    ("uet.pds.nack.code", "nack", 2, 1, 0), ("uet.pds.nack.vendor_code", "nack", 3, 1, 0),
    ("uet.pds.nack.psn", "nack", 4, 4, 0), ("uet.pds.spdcid", "nack", 8, 2, 0),
    ("uet.pds.dpdcid", "nack", 10, 2, 0),
    ("uet.pds.nack.max_recv_psn_plus_1", "nack", 12, 4, 0),
    # dissect_pds_ctl
    ("uet.pds.ctrl_probe_opaque", "ctrl", 2, 2, 0), ("uet.pds.psn", "ctrl", 4, 4, 0),
    ("uet.pds.spdcid", "ctrl", 8, 2, 0), ("uet.pds.dpdcid", "ctrl", 10, 2, 0),
    ("uet.pds.ctrl_payload", "ctrl", 12, 4, 0),
    # dissect_tss
    ("uet.tss.sp", "tss", 0, 4, 0x04000000), ("uet.tss.reserved", "tss", 0, 4, 0x02000000),
    ("uet.tss.an", "tss", 0, 4, 0x01000000), ("uet.tss.sdi", "tss", 0, 4, 0x00FFFFFF),
    ("uet.tss.tsc", "tss", 4, 8, 0), ("uet.tss.ssi", "tss_sp", 4, 4, 0),
    ("uet.tss.tsc", "tss_sp", 8, 8, 0),
    # dissect_uet_common with the entropy header
    ("uet.pds.entropy", "entropy", 0, 2, 0), ("uet.pds.entropy.rsvd", "entropy", 2, 2, 0),
    # dissect_ses_std_req
    ("uet.ses.std.rsv", "std", 0, 1, 0xC0), ("uet.ses.std.opcode", "std", 0, 1, 0x3F),
    ("uet.ses.std.flags", "std", 1, 1, 0), ("uet.ses.std.ver", "std", 1, 1, 0xC0),
    ("uet.ses.std.dc", "std", 1, 1, 0x20), ("uet.ses.std.ie", "std", 1, 1, 0x10),
    ("uet.ses.std.rel", "std", 1, 1, 0x08), ("uet.ses.std.hd", "std", 1, 1, 0x04),
    ("uet.ses.std.eom", "std", 1, 1, 0x02), ("uet.ses.std.som", "std", 1, 1, 0x01),
    ("uet.ses.std.message_id", "std", 2, 2, 0), ("uet.ses.std.index_generation", "std", 4, 1, 0),
    ("uet.ses.std.job_id", "std", 5, 3, 0), ("uet.ses.std.reserved2", "std", 8, 2, 0xF000),
    ("uet.ses.std.pidonfep", "std", 8, 2, 0x0FFF),
    ("uet.ses.std.reserved3", "std", 10, 2, 0xF000),
    ("uet.ses.std.resource_index", "std", 10, 2, 0x0FFF),
    ("uet.ses.std.buffer_offset", "std", 12, 8, 0),
    ("uet.ses.std.restart_token", "std_defer", 12, 8, 0),
    ("uet.ses.std.initiator", "std", 20, 4, 0),
    ("uet.ses.std.mem_key_match_bits", "std", 24, 8, 0),
    ("uet.ses.std.restart_token", "std_rtr", 24, 8, 0),
    ("uet.ses.std.header_data", "std_som", 32, 8, 0),
    ("uet.ses.std.reserved4", "std", 32, 4, 0xFFFFC000),
    ("uet.ses.std.payload_length", "std", 32, 4, 0x3FFF),
    ("uet.ses.std.message_offset", "std", 36, 4, 0),
    ("uet.ses.std.request_length", "std", 40, 4, 0),
    # dissect_ses_atomic_op_ext_hdr, dissect_ses_comp_swap_atomic_ext_hdr
    ("uet.ses.atomic_op_ext_hdr.atomic_opcode", "std_atomic", 0, 1, 0),
    ("uet.ses.atomic_op_ext_hdr.atomic_data_type", "std_atomic", 1, 1, 0),
    ("uet.ses.atomic_op_ext_hdr.sem_ctl", "std_atomic", 2, 1, 0),
    ("uet.ses.atomic_op_ext_hdr.rsvd", "std_atomic", 3, 1, 0),
    ("uet.ses.comp_swap_ext_hdr.atomic_data_type", "std_cswap", 1, 1, 0),
    ("uet.ses.comp_swap_ext_hdr.sem_ctl", "std_cswap", 2, 1, 0),
    ("uet.ses.comp_swap_ext_hdr.rsvd", "std_cswap", 3, 1, 0),
    ("uet.ses.comp_swap_ext_hdr.comp_value", "std_cswap", 4, 16, 0),
    ("uet.ses.comp_swap_ext_hdr.swap_value", "std_cswap", 20, 16, 0),
    # dissect_ses_rendv_ext_hdr
    ("uet.ses.rendv_ext_hdr.eager_length", "std_rendv", 0, 4, 0),
    ("uet.ses.rendv_ext_hdr.reserved", "std_rendv", 4, 2, 0xC000),
    ("uet.ses.rendv_ext_hdr.read_pid_on_fep", "std_rendv", 4, 2, 0x3FFF),
    ("uet.ses.rendv_ext_hdr.reserved2", "std_rendv", 6, 2, 0xF000),
    ("uet.ses.rendv_ext_hdr.read_resource_index", "std_rendv", 6, 2, 0x0FFF),
    ("uet.ses.rendv_ext_hdr.read_offset", "std_rendv", 8, 8, 0),
    ("uet.ses.rendv_ext_hdr.read_match_bits", "std_rendv", 16, 8, 0),
    # dissect_ses_small_req
    ("uet.ses.small_req.rsv", "small", 0, 1, 0xC0), ("uet.ses.std.opcode", "small", 0, 1, 0x3F),
    ("uet.ses.small_req.flags", "small", 1, 1, 0),
    ("uet.ses.small_req.flags.ver", "small", 1, 1, 0xC0),
    ("uet.ses.small_req.flags.dc", "small", 1, 1, 0x20),
    ("uet.ses.small_req.flags.ie", "small", 1, 1, 0x10),
    ("uet.ses.small_req.flags.rel", "small", 1, 1, 0x08),
    ("uet.ses.small_req.flags.rsvd", "small", 1, 1, 0x04),
    ("uet.ses.small_req.eom", "small", 1, 1, 0x02), ("uet.ses.small_req.som", "small", 1, 1, 0x01),
    ("uet.ses.small_req.flags.rsv2", "small", 2, 2, 0xC000),
    ("uet.ses.small_req.req_length", "small", 2, 2, 0x3FFF),
    ("uet.ses.small_req.index_generation", "small", 4, 1, 0),
    ("uet.ses.small_req.job_id", "small", 5, 3, 0),
    ("uet.ses.small_req.rsv3", "small", 8, 2, 0xF000),
    ("uet.ses.small_req.pidonfep", "small", 8, 2, 0x0FFF),
    ("uet.ses.small_req.rsv4", "small", 10, 2, 0xF000),
    ("uet.ses.small_req.resource_index", "small", 10, 2, 0x0FFF),
    ("uet.ses.small_req.buffer_offset", "small", 12, 8, 0),
    # dissect_ses_medium_req: the first 4 bytes (the rest: test_medium_request_layout)
    ("uet.ses.med_req.rsv", "medium", 0, 1, 0xC0),
    ("uet.ses.med_req.flags", "medium", 1, 1, 0),
    ("uet.ses.med_req.flags.ver", "medium", 1, 1, 0xC0),
    ("uet.ses.med_req.flags.hd", "medium", 1, 1, 0x04),
    ("uet.ses.med_req.eom", "medium", 1, 1, 0x02), ("uet.ses.med_req.som", "medium", 1, 1, 0x01),
    ("uet.ses.med_req.flags.rsv2", "medium", 2, 2, 0xC000),
    ("uet.ses.med_req.req_length", "medium", 2, 2, 0x3FFF),
    # dissect_ses_resp, _resp_data, _resp_data_small
    ("uet.ses.rsp.list", "rsp", 0, 1, 0xC0), ("uet.ses.rsp.opcode", "rsp", 0, 1, 0x3F),
    ("uet.ses.rsp.ver", "rsp", 1, 1, 0xC0), ("uet.ses.rsp.return_code", "rsp", 1, 1, 0x3F),
    ("uet.ses.rsp.message_id", "rsp", 2, 2, 0),
    ("uet.ses.rsp.resource_index_gen", "rsp", 4, 1, 0), ("uet.ses.rsp.job_id", "rsp", 5, 3, 0),
    ("uet.ses.rsp.mod_length", "rsp", 8, 4, 0),
    ("uet.ses.rsp.message_id", "rsp_data", 2, 2, 0), ("uet.ses.rsp.reserved", "rsp_data", 4, 1, 0),
    ("uet.ses.rsp.job_id", "rsp_data", 5, 3, 0),
    ("uet.ses.rsp.read_req_message_id", "rsp_data", 8, 2, 0),
    ("uet.ses.rsp.reserved2", "rsp_data", 10, 2, 0xC000),
    ("uet.ses.rsp.payload_length", "rsp_data", 10, 2, 0x3FFF),
    ("uet.ses.rsp.mod_length", "rsp_data", 12, 4, 0),
    ("uet.ses.rsp.message_offset", "rsp_data", 16, 4, 0),
    ("uet.ses.rsp.reserved3", "rsp_data_small", 2, 2, 0xC000),
    ("uet.ses.rsp.payload_length", "rsp_data_small", 2, 2, 0x3FFF),
)


def _pattern(size: int, mask: int) -> int:
    return mask if mask else (1 << (8 * size)) - 1


def _expected(name: str, size: int, mask: int) -> object:
    pattern = _pattern(size, mask)
    value = pattern >> ((pattern & -pattern).bit_length() - 1)
    flag = bin(pattern).count("1") == 1 and name not in (
        "uet.pds.flags.rsvd_ack", "uet.tss.reserved", "uet.ses.small_req.flags.rsvd")
    return True if flag else value


def _place(context: str, offset: int, size: int, mask: int,
           reading: layouts.Reading = layouts.SPEC) -> uet_decode.Decoded:
    pre, at, entropy = CONTEXTS[context]
    data = bytearray(pre + bytes(PAD))
    at += offset
    old = int.from_bytes(data[at:at + size], "big")
    data[at:at + size] = (old | _pattern(size, mask)).to_bytes(size, "big")
    return uet_decode.decode(bytes(data), entropy=entropy, reading=reading)


@pytest.mark.parametrize("name,context,offset,size,mask", WIRESHARK,
                         ids=[f"{c}:{n}" for n, c, *_ in WIRESHARK])
def test_field_at_wiresharks_offset_and_mask(name: str, context: str, offset: int, size: int,
                                             mask: int) -> None:
    d = _place(context, offset, size, mask)
    assert d.error is None, d.error
    assert d.fields[name] == _expected(name, size, mask)
    # the value came from those bits: without them the context reads otherwise
    assert _place(context, 0, 0, 0).fields.get(name) != d.fields[name]


def test_ctx_type_and_tss_type_read_where_wireshark_reads_them() -> None:
    tss = uet_decode.decode(bytes([0x08]) + bytes(PAD))
    assert tss.fields["uet.tss.type"] == 1  # 0xF8000000 of the first 32 bits
    assert "uet.tss" in tss.fields and tss.fields["uet.pds.type"] == 0
    cswap = _place("std_cswap", 0, 0, 0)
    assert cswap.fields["uet.ses.comp_swap_ext_hdr.atomic_opcode"] == 0x0D


def test_signed_offsets_and_the_psns_wireshark_derives() -> None:
    """clear PSN = PSN + clear_psn_offset, ACK PSN = CACK + ack_psn_offset, SACK PSN = CACK +
    sack_psn_offset (s16 each; Wireshark's tvb_get_ntohis), start PSN = PSN - psn_offset."""
    rud = prologue(2) + struct.pack("!hIHH", -3, 100, 1, 2)
    f = uet_decode.decode(rud).fields
    assert (f["uet.pds.clear_psn_offset"], f["uet.pds.clear_psn"]) == (-3, 97)
    wrap = prologue(2) + struct.pack("!hIHH", -3, 1, 1, 2)
    assert uet_decode.decode(wrap).fields["uet.pds.clear_psn"] == 0xFFFFFFFE
    syn = prologue(2, 0, 0x04) + struct.pack("!hIHH", -1, 1000, 1, 0x0005)
    f = uet_decode.decode(syn).fields
    assert f["uet.pds.start_psn"] == 995 and "uet.pds.dpdcid" not in f
    ack = prologue(8) + struct.pack("!hIHH", -2, 500, 1, 2) + struct.pack("!BBhQQ", 0, 0, 7, 1, 0)
    f = uet_decode.decode(ack).fields
    assert (f["uet.pds.ack_psn"], f["uet.pds.ack.sack_psn"]) == (498, 507)


def test_nscc_restore_cwnd_and_penalty_read_from_the_third_byte() -> None:
    """The NSCC state is service time u16, RC 1 bit + penalty 7 bits, received bytes u24,
    out-of-order count u16.  Wireshark's source adds RC (0x80) and the penalty (0x7f) at the
    state's first byte, over the service time, and reads byte 2 nowhere: we read them from
    byte 2 (the reference provider's layout, docs/protocol.md)."""
    d = _place("ack_cc", 26, 1, 0xFF)
    f = d.fields
    assert f["uet.pds.ack.cc_state.rc"] is True
    assert f["uet.pds.ack.cc_state.rcv_cwnd_pend"] == 0x7F
    assert f["uet.pds.ack.cc_state.service_time"] == 0


def test_medium_request_layout() -> None:
    """Wireshark's dissect_ses_medium_req steps 3 bytes over the 2-byte request length, so
    each later field reads one byte late and the header runs to 33 bytes; its own
    UET_SES_MEDIUM_REQ_MIN_HDR_LEN is 32, and the reference provider's struct (12-byte common
    part, 8, 4, 8) is 32.  We read the 32-byte layout: each field one byte before the offset
    Wireshark's source reads it at."""
    wireshark_offsets = {"uet.ses.med_req.resource_index_generation": (5, 1, 0),
                         "uet.ses.med_req.job_id": (6, 3, 0),
                         "uet.ses.med_req.pidonfep": (9, 2, 0x0FFF),
                         "uet.ses.med_req.resource_index": (11, 2, 0x0FFF),
                         "uet.ses.med_req.buffer_offset": (13, 8, 0),
                         "uet.ses.med_req.initiator": (21, 4, 0),
                         "uet.ses.med_req.mem_key_match_bits": (25, 8, 0)}
    for name, (off, size, mask) in wireshark_offsets.items():
        d = _place("medium", off - 1, size, mask)
        assert d.fields[name] == _expected(name, size, mask), name
    d = _place("medium_hd", 12, 8, 0)
    assert d.fields["uet.ses.med_req.header_data"] == (1 << 64) - 1
    assert "uet.ses.med_req.buffer_offset" not in d.fields
    assert layouts.MEDIUM.size == 32


def test_header_sizes_are_wiresharks_constants() -> None:
    """UET_PDS_RUD_ROD_MIN_HDR_LEN 12, _CC_ 16, UET_PDS_ACK_EXT_HDR_SIZE 20, SES sizes 44 /
    20 / 32 / 12, extensions 4 / 36 / 24, UET_TSS_MIN_HDR_LEN 12 (with the prologue where
    Wireshark counts it)."""
    s = layouts.SPEC.headers
    assert 2 + s["rud_rod"].size == 12 and 2 + s["rud_rod"].size + s["cc"].size == 16
    assert s["ack.ext"].size + s["ack.nscc"].size == 20
    assert s["std"].size + s["std.som"].size == 44 == s["std"].size + s["std.cont"].size
    assert (s["small"].size, s["medium"].size, s["rsp"].size) == (20, 32, 12)
    assert (s["atomic"].size, s["cswap"].size, s["rendv"].size) == (4, 36, 24)
    assert s["tss"].size + s["tss.tsc"].size == 12
    assert (s["rsp_data"].size, s["rsp_data_small"].size) == (20, 4)
    assert 2 + s["ctrl"].size == 16 and 2 + s["nack"].size == 16


# -- the reference provider's reading ------------------------------------------------------------

REF_PROV: tuple[tuple[str, str, int, int, int], ...] = (
    # uet_pkt_hdr.h: UET_PDS_REQ_PDC_INFO_MASK 0xf000, _USE_RSV_PDC 0x01 of it (0x1000)
    ("uet.pds.pdc_mode_use_rsv", "rud_syn", 10, 2, 0x1000),
    ("uet.pds.pdc_mode_rsv", "rud_syn", 10, 2, 0xE000),
    # UET_PDS_ACK_FLAGS_*: EPSN 0x40, REQ_CLS 0x04, REQ_CLR 0x02, RSV 0x01
    ("uet.pds.flags.epsn", "ack", 0, 2, 0x40), ("uet.pds.flags.req_cls", "ack", 0, 2, 0x04),
    ("uet.pds.flags.req_clr", "ack", 0, 2, 0x02), ("uet.pds.flags.rsvd_ack", "ack", 0, 2, 0x01),
    # UET_PDS_CTRL_FLAGS_ISROD 0x20; UET_PDS_RUDI_FLAGS_M 0x20, _RETX 0x10
    ("uet.pds.flags.isrod", "ctrl", 0, 2, 0x20), ("uet.pds.flags.rsvd_ctl", "ctrl", 0, 2, 0x43),
    ("uet.pds.flags.m", "rudi", 0, 2, 0x20), ("uet.pds.flags.retx", "rudi", 0, 2, 0x10),
    # uet_sec: epoch_tsc, UET_SEC_EPOCH_MASK 0xffff000000000000
    ("uet.tss.epoch", "tss", 4, 2, 0), ("uet.tss.tsc", "tss", 6, 6, 0),
    # uet_ses_rndv_ext: RI gen 0xff000000, PIDonFEP 0x00fff000, RI 0x00000fff
    ("uet.ses.rendv_ext_hdr.read_ri_gen", "std_rendv", 4, 4, 0xFF000000),
    ("uet.ses.rendv_ext_hdr.read_pid_on_fep", "std_rendv", 4, 4, 0x00FFF000),
    ("uet.ses.rendv_ext_hdr.read_resource_index", "std_rendv", 4, 4, 0x00000FFF),
    # uet_ses_rsp_d: byte 4 is the RI generation; uet_ses_rsp_ds: 8 bytes, then orig_req_psn
    ("uet.ses.rsp.resource_index_gen", "rsp_data", 4, 1, 0),
    ("uet.ses.rsp.job_id", "rsp_data_small", 5, 3, 0),
    ("uet.ses.rsp.orig_req_psn", "rsp_data_small", 8, 4, 0),
    # uet_pds_ack_ccx: ACK_CC's 8-byte state, then 8 bytes of CCX state
    ("uet.pds.ack.cc_state.service_time", "ack_ccx", 24, 2, 0),
    ("uet.pds.ack.ccx_state", "ack_ccx", 32, 8, 0),
)


@pytest.mark.parametrize("name,context,offset,size,mask", REF_PROV,
                         ids=[f"{c}:{n}" for n, c, *_ in REF_PROV])
def test_reference_provider_field(name: str, context: str, offset: int, size: int,
                                  mask: int) -> None:
    d = _place(context, offset, size, mask, layouts.REF_PROV)
    assert d.error is None, d.error
    assert d.fields[name] == _expected(name, size, mask)


def test_reference_provider_extras() -> None:
    """Control packets with SYN carry PDC mode and PSN offset; ACK with EPSN a 4-byte expected
    PSN; ACK with P a probe opaque in place of the PSN offset; SYNC opcodes a sync extension
    (group, count) before the atomic one; control type 9."""
    ctrl = prologue(11, 9, 0x04) + struct.pack("!HIHHI", 0, 50, 1, 0x0003, 7)
    f = uet_decode.decode(ctrl, reading=layouts.REF_PROV).fields
    assert (f["uet.pds.psn_offset"], f["uet.pds.start_psn"], f["uet.pds.ctrl_payload"]) == \
        (3, 47, 7) and "uet.pds.dpdcid" not in f
    assert "uet.expert.unknown" not in f
    spec = uet_decode.decode(ctrl).fields
    assert spec["uet.pds.dpdcid"] == 3 and "unknown control type 9" in spec["uet.expert.unknown"]
    epsn = prologue(7, 0, 0x40) + struct.pack("!hIHHI", 0, 5, 1, 2, 0xABCD)
    f = uet_decode.decode(epsn, reading=layouts.REF_PROV).fields
    assert f["uet.pds.ack.epsn"] == 0xABCD and f["payload.len"] == 0
    probe = prologue(7, 0, 0x08) + struct.pack("!HIHH", 0x1234, 5, 1, 2)
    f = uet_decode.decode(probe, reading=layouts.REF_PROV).fields
    assert f["uet.pds.ack.probe_opaque"] == 0x1234 and "uet.pds.ack_psn" not in f
    sync = prologue(2, 3) + bytes(10) + bytes([0x11]) + bytes(43) + struct.pack(
        "!HH", 3, 4) + bytes([0x02, 0x07, 0, 0])
    f = uet_decode.decode(sync, reading=layouts.REF_PROV).fields
    assert (f["uet.ses.sync_ext_hdr.group"], f["uet.ses.sync_ext_hdr.count"]) == (3, 4)
    assert f["uet.ses.atomic_op_ext_hdr.atomic_opcode"] == 2 and f["payload.len"] == 0


def test_differences_name_what_the_readings_hold() -> None:
    """Every difference row is real: the two readings' layouts or tables differ there."""
    spec, ref = layouts.SPEC, layouts.REF_PROV
    differ = {k for k in spec.headers.keys() | ref.headers.keys()
              if spec.headers.get(k) is None or ref.headers.get(k) is None
              or spec.headers[k].layout != ref.headers[k].layout}
    assert differ == {"tss.tsc", "rud_rod.syn", "ctrl.syn", "ack.ccx", "ack.epsn", "nack.ccx",
                      "rendv", "sync", "rsp_data", "rsp_data_small"}
    assert spec.ctrl_types != ref.ctrl_types and spec.ses_opcodes != ref.ses_opcodes
    assert {k for k in spec.flags if spec.flags[k] != ref.flags[k]} == {4, 5, 7, 8, 9, 11}
    assert len(layouts.DIFFERENCES) == 17


# -- value tables --------------------------------------------------------------------------------


def test_tables_match_wiresharks_value_strings() -> None:
    """Numbers from packet-uet.c's #defines (uet.pds.type, .nh, .ctl_type, .nack.code,
    uet.ses.std.opcode, .rsp.opcode, .rsp.return_code, atomic opcodes and data types)."""
    assert sorted(tables.PDS_TYPES) == list(range(15))
    assert (tables.RUD_REQ, tables.ROD_REQ, tables.RUDI_REQ, tables.RUDI_RESP, tables.UUD_REQ,
            tables.ACK, tables.ACK_CC, tables.ACK_CCX, tables.NACK, tables.CTRL,
            tables.NACK_CCX, tables.RUD_CC_REQ, tables.ROD_CC_REQ) == tuple(range(2, 15))
    assert sorted(tables.NEXT_HEADERS) == list(range(7))
    assert sorted(tables.CTRL_TYPES) == list(range(9))
    assert sorted(tables.NACK_CODES) == [*range(1, 0x0C), *range(0x0D, 0x1B), 0xFD, 0xFE, 0xFF]
    assert tables.NACK_CODES[0x0B][0] == "PSN_OOR_WINDOW" and tables.NACK_CODES[0x17][0] == \
        "NEW_START_PSN"
    assert sorted(tables.SES_OPCODES) == list(range(16))
    assert [tables.SES_OPCODES[c][0] for c in (1, 2, 5, 9, 0x0C, 0x0F)] == [
        "WRITE", "READ", "SEND", "TAGGED_SEND", "DEFERRABLE_RTR", "MSG_ERROR"]
    assert sorted(tables.RETURN_CODES) == list(range(0x25))
    assert tables.RETURN_CODES[0x1C][0] == "BAD_MKEY" and tables.RETURN_CODES[0x24][0] == \
        "DROPPED"
    assert sorted(tables.RSP_OPCODES) == [0, 1, 2, 3]
    assert sorted(tables.AMO_OPCODES) == list(range(0x15))
    assert tables.CSWAP_OPCODES == frozenset(range(0x0D, 0x13))
    assert sorted(tables.AMO_TYPES) == list(range(0x12))
    assert tables.ATOMIC_OPCODES == {0x03, 0x04, 0x0E}
    assert tables.RENDEZVOUS_OPCODES == {0x06, 0x0A}


def test_protocol_doc_lists_every_difference_and_check() -> None:
    """docs/protocol.md prints DIFFERENCES row for row, and names every expert check."""
    from pathlib import Path

    from roce.families.uet.checks import CHECKS

    doc = (Path(__file__).parent.parent / "docs" / "protocol.md").read_text()
    table = doc.split("<!-- uet-differences -->")[1].split("<!-- /uet-differences -->")[0]
    rows = [line for line in table.strip().splitlines()[2:]]
    assert rows == [f"| {d.what} | {d.spec} | {d.ref_prov} |" for d in layouts.DIFFERENCES]
    for c in CHECKS:
        assert f"`{c.field}` ({c.severity})" in doc, c.field
