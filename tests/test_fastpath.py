"""The compiled fast path (roce._fastpath) against its pure-Python twins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from array import array
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roce
from roce import OPCODES, ROCE_OPCODES, fast, locate
from roce import packet as packet_mod
from roce.fast import _ext
from roce.headers import ENCODERS, LAYOUTS

REPO = Path(__file__).resolve().parents[1]
CODES = sorted(ROCE_OPCODES)  # what a RoCE frame may carry
LINKTYPES = (1, 101, 113, 276)
UNSUPPORTED_LINKTYPE = 105  # IEEE 802.11


# -- frame strategies ---------------------------------------------------------------------------


@st.composite
def valid_frames(draw):
    """A crafted Ethernet frame: any opcode, IPv4/IPv6/VLAN/QinQ-less/RoCEv1, random fields."""
    op = OPCODES[draw(st.sampled_from(CODES))]
    kw = draw(st.sampled_from([{}, {"ipv6": True}, {"roce_version": 1}, {"vlan": 5}]))
    values = {}
    for h in ("bth",) + op.headers:
        for f in LAYOUTS[h].fields:
            if h == "bth" and f.name in ("opcode", "padcnt", "tver"):
                continue
            values[f"{h}.{f.name}"] = draw(st.booleans() if f.kind == "bool"
                                           else st.integers(0, f.mask))
    if op.code == 0x81:
        values["cnp.reserved"] = 0  # zero on the wire (docs/protocol.md)
    if not kw.get("roce_version"):
        values["ecn"] = draw(st.integers(0, 3))
    if op.payload_len is not None:
        payload = bytes(op.payload_len)
    elif op.payload:
        payload = draw(st.binary(max_size=100))
    else:
        payload = b""
    p = roce.craft(op.code, payload, **kw, **values)
    if not kw and draw(st.booleans()):
        p.headers["ip"]["options"] = b"\x01\x01\x01\x00" * draw(st.integers(1, 10))
    return p.to_bytes() + draw(st.sampled_from([b"", bytes(6)]))


def to_linktype(eth_frame: bytes, linktype: int) -> bytes:
    """Re-wrap an Ethernet frame for another link type (SLL, SLL2, raw IP)."""
    etype = int.from_bytes(eth_frame[12:14], "big") if len(eth_frame) >= 14 else 0
    rest = eth_frame[14:]
    if linktype == 101:
        if etype == 0x8100:
            return rest[4:]
        return rest
    if linktype == 113:
        return ENCODERS["sll"]({"pkttype": 0, "hatype": 1, "halen": 6, "src": 1,
                                "etype": etype}) + rest
    if linktype == 276:
        return ENCODERS["sll2"]({"etype": etype, "reserved": 0, "ifindex": 2, "hatype": 1,
                                 "pkttype": 0, "halen": 6, "src": 1}) + rest
    return eth_frame


def set_field(frame: bytes, base: int, header: str, field: str, value: int) -> bytes:
    """Write one header field (by its layout) into a copy of ``frame``."""
    f = LAYOUTS[header].field(field)
    size = LAYOUTS[header].size
    raw = int.from_bytes(frame[base:base + size], "big")
    raw = (raw & ~(f.mask << f.shift)) | ((value & f.mask) << f.shift)
    return frame[:base] + raw.to_bytes(size, "big") + frame[base + size:]


STRUCTURAL = {  # fields the walk reads, by the header they live in
    "eth": ("type",), "ip": ("version", "ihl", "len", "flags.mf", "frag_offset", "proto"),
    "ipv6": ("version", "plen", "nxt"), "grh": ("paylen", "nxthdr"),
    "udp": ("dstport", "length"), "bth": ("opcode", "padcnt", "tver"),
}


@st.composite
def structural_mutation(draw, frame: bytes, w: locate.Walk) -> bytes:
    """Change one field the walk depends on (located by ``w``): to a nearby or any value."""
    where = {"eth": 0, "bth": w.bth_off, "udp": w.udp_off,
             {4: "ip", 6: "ipv6", 1: "grh"}[w.l3_kind]: w.l3_off}
    header = draw(st.sampled_from(sorted(h for h, off in where.items() if off >= 0)))
    field = draw(st.sampled_from(STRUCTURAL[header]))
    f = LAYOUTS[header].field(field)
    old = (int.from_bytes(frame[where[header]:where[header] + LAYOUTS[header].size], "big")
           >> f.shift) & f.mask
    value = draw(st.integers(0, f.mask) | st.integers(-4, 4).map(lambda d: (old + d) & f.mask))
    return set_field(frame, where[header], header, field, value)


@st.composite
def any_frames(draw):
    """(frame, linktype, udp_port): valid, truncated, mutated, random, other link types/ports."""
    kind = draw(st.sampled_from(["valid", "truncated", "flipped", "mutated", "random",
                                 "random-ip", "port"] + ["structural"] * 4))
    base = draw(valid_frames())
    if kind == "structural":
        w = locate.walk(base)
        frame = draw(structural_mutation(base, w))
        if draw(st.booleans()):
            frame = draw(structural_mutation(frame, w))
    elif kind == "truncated":
        frame = base[:draw(st.integers(0, len(base) - 1))]
    elif kind == "flipped":
        frame = bytearray(base)
        for bit in draw(st.lists(st.integers(0, 8 * len(base) - 1), min_size=1, max_size=4)):
            frame[bit // 8] ^= 0x80 >> (bit % 8)
        frame = bytes(frame)
    elif kind == "mutated":
        frame = bytearray(base)
        for pos, value in draw(st.lists(st.tuples(st.integers(0, len(base) - 1),
                                                  st.integers(0, 255)), min_size=1,
                                        max_size=6)):
            frame[pos] = value
        frame = bytes(frame)
    elif kind == "random":
        frame = draw(st.binary(max_size=200))
    elif kind == "random-ip":
        version = draw(st.sampled_from([b"\x08\x00\x45", b"\x86\xdd\x60", b"\x89\x15\x60"]))
        frame = base[:12] + version + draw(st.binary(max_size=150))
    else:
        frame = base
    linktype = draw(st.sampled_from(LINKTYPES + (UNSUPPORTED_LINKTYPE,)))
    frame = to_linktype(frame, linktype) if linktype != UNSUPPORTED_LINKTYPE else frame
    port = 4791
    if kind == "port":
        port = draw(st.sampled_from([4792, 1, 65535]))
    elif draw(st.integers(0, 9)) == 0:
        port = draw(st.integers(0, 65535))
    return frame, linktype, port


# -- walk ---------------------------------------------------------------------------------------


@given(any_frames())
def test_walk_fast_equals_reference(case):
    frame, linktype, port = case
    fast_w = _ext.walk(frame, linktype, port)
    ref_w = locate.walk(frame, linktype, port)
    assert type(fast_w) is locate.Walk
    assert fast_w == ref_w


@given(valid_frames())
def test_walk_valid_frames_ok_in_every_linktype(eth_frame):
    rocev1 = eth_frame[12:14] == b"\x89\x15"
    for linktype in LINKTYPES:
        frame = to_linktype(eth_frame, linktype)
        w = _ext.walk(frame, linktype, 4791)
        if rocev1 and linktype == 101:  # raw IP cannot carry a GRH: it reads as IPv6 proto 27
            assert (w.status, w.err_a) == (locate.NR_PROTO, 0x1B)
        else:
            assert w.status == locate.OK, (linktype, w)
        assert w == locate.walk(frame, linktype, 4791)
    w = _ext.walk(eth_frame, UNSUPPORTED_LINKTYPE, 4791)
    assert w.status == locate.NR_LINKTYPE and w.err_a == UNSUPPORTED_LINKTYPE
    assert w == locate.walk(eth_frame, UNSUPPORTED_LINKTYPE, 4791)


@given(valid_frames(), st.data())
def test_walk_every_truncation(eth_frame, data):
    linktype = data.draw(st.sampled_from(LINKTYPES))
    frame = to_linktype(eth_frame, linktype)
    for cut in range(len(frame)):
        assert _ext.walk(frame[:cut], linktype, 4791) == locate.walk(frame[:cut], linktype, 4791)


def test_walk_every_single_byte_change():
    """Exhaustive: every byte of a few frames set to a handful of values."""
    frames = [roce.craft(0x0B, b"abcde", va=1, rkey=2, dmalen=5, imm=3).to_bytes(),
              roce.craft(0x12, ipv6=True, syndrome=0x1F, msn=4, orig=5).to_bytes() + bytes(2),
              roce.craft(0x43, b"rd", vlan=1, roce_version=2).to_bytes(),
              roce.craft(0x1D, bytes(8), roce_version=1).to_bytes(),
              roce.craft(0xB7, b"x", xrcsrq=7).to_bytes()]
    for frame in frames:
        for pos in range(len(frame)):
            for value in {0, 0xFF, frame[pos] ^ 1, (frame[pos] + 1) & 0xFF,
                          (frame[pos] - 1) & 0xFF, frame[pos] ^ 0x80}:
                f = frame[:pos] + bytes([value]) + frame[pos + 1:]
                assert _ext.walk(f, 1, 4791) == locate.walk(f, 1, 4791), (frame.hex(), pos)


def test_walk_fixed_cases():
    frame = roce.craft(0x0A, b"abc", dqpn=9).to_bytes()
    for f, lt in [(b"", 1), (b"", 101), (b"", 113), (b"", 276), (frame, 9999),
                  (b"\x00" * 13, 1), (b"\x40", 101), (b"\x90" + frame[15:], 101),
                  (frame[:12] + b"\x81\x00" * 3 + frame[12:], 1),
                  (roce.craft(0x11, pad=b"", **{"bth.padcnt": 3}).to_bytes(), 1)]:
        assert _ext.walk(f, lt, 4791) == locate.walk(f, lt, 4791), (f.hex(), lt)


# -- scan ---------------------------------------------------------------------------------------


def _junk_columns(n: int) -> dict[str, array]:
    cols = fast.scan_columns(n)
    for col in cols.values():
        for i in range(n):
            col[i] = {"b": 0x5A, "B": 0xA5, "H": 0xBEEF, "i": -7, "I": 0xDEADBEEF,
                      "Q": 0x0123456789ABCDEF}[col.typecode]
    return cols


@given(st.lists(any_frames(), max_size=25), st.booleans(),
       st.sampled_from(LINKTYPES + (UNSUPPORTED_LINKTYPE,)), st.sampled_from([4791, 4792]))
def test_scan_fast_equals_reference(cases, check_icrc, linktype, port):
    frames = [f for f, _, _ in cases]
    got = _junk_columns(len(frames))
    want = _junk_columns(len(frames))
    assert fast.scan(frames, linktype, port, check_icrc, got) is got
    assert fast.scan_reference(frames, linktype, port, check_icrc, want) == len(frames)
    for name in fast.SCAN_COLUMNS:
        assert list(got[name]) == list(want[name]), name


@given(st.lists(valid_frames(), min_size=1, max_size=20), st.booleans())
def test_scan_columns_mean_what_they_say(frames, check_icrc):
    cols = fast.scan(frames, check_icrc=check_icrc)
    for i, frame in enumerate(frames):
        q = roce.parse(frame)
        h = q.headers
        bth = h["bth"]
        assert cols["status"][i] == 0
        assert cols["opcode"][i] == bth["opcode"]
        assert cols["destqp"][i] == bth["destqp"] and cols["psn"][i] == bth["psn"]
        assert cols["p_key"][i] == bth["p_key"]
        flags = (0x80 * bth["se"] | 0x40 * bth["m"] | 0x10 * bth["fecn"] | 0x08 * bth["becn"]
                 | 0x04 * bth["a"])
        assert cols["flags"][i] == flags
        if "ip" in h:
            assert cols["ecn"][i] == h["ip"]["dsfield.ecn"] and cols["l3_kind"][i] == 4
        elif "ipv6" in h:
            assert cols["ecn"][i] == h["ipv6"]["tclass"] & 3 and cols["l3_kind"][i] == 6
        else:
            assert cols["ecn"][i] == 0 and cols["l3_kind"][i] == 1
        assert cols["l3_off"][i] == q.walk.l3_off and cols["bth_off"][i] == q.walk.bth_off
        assert cols["payload_len"][i] == len(q.payload)
        assert cols["icrc_ok"][i] == int(check_icrc)
        names = fast.KEY_FIELDS.get(bth["opcode"], ())
        for j in range(3):
            expected = 0
            if j < len(names):
                header, _, field = names[j].partition(".")
                expected = h[header][field]
            assert cols[f"key{j}"][i] == expected, (hex(bth["opcode"]), j)


def test_key_fields_meaning():
    K = fast.KEY_FIELDS
    for code, op in OPCODES.items():
        if not op.headers:
            assert code not in K
            continue
        first = op.headers[0]
        assert all(name.startswith(first + ".") for name in K[code])
        if first == "reth":
            assert K[code] == ("reth.va", "reth.r_key", "reth.dmalen")
        elif first == "aeth":
            assert K[code] == ("aeth.syndrome", "aeth.msn")
        elif first == "deth":
            assert K[code] == ("deth.q_key", "deth.srcqp")
        elif first == "atomiceth":
            assert K[code] == ("atomiceth.va", "atomiceth.r_key", "atomiceth.swapdt")
    assert K[0x0A] == K[0x0C] == K[0x2A] == ("reth.va", "reth.r_key", "reth.dmalen")
    assert K[0x11] == K[0x0D] == K[0xB1] == ("aeth.syndrome", "aeth.msn")
    assert K[0x64] == K[0x65] == ("deth.q_key", "deth.srcqp")
    assert K[0x40] == ("rdeth.eecnxt",) and K[0xA0] == ("xrceth.xrcsrq",)
    assert K[0x1C] == ("feth.sel", "feth.plt")
    assert K[0x81] == ()  # CNP: reserved bytes only


def test_key_columns_examples():
    frames = [
        roce.craft(0x0A, b"abc", va=0x1122334455667788, rkey=0xCAFE, dmalen=3).to_bytes(),
        roce.craft(0x11, syndrome=0x61, msn=0xABCDEF, ipv6=True).to_bytes(),
        roce.craft(0x64, b"", qkey=0x80010000, sqpn=0x123456, vlan=3).to_bytes(),
        roce.craft(0x13, va=0xFFFFFFFFFFFFFFF8, rkey=1, swap=0xFFFFFFFFFFFFFFFF,
                   compare=5).to_bytes(),
        roce.craft(0x04, b"x").to_bytes(),
    ]
    cols = fast.scan(frames)
    assert [(cols["key0"][i], cols["key1"][i], cols["key2"][i]) for i in range(5)] == [
        (0x1122334455667788, 0xCAFE, 3), (0x61, 0xABCDEF, 0), (0x80010000, 0x123456, 0),
        (0xFFFFFFFFFFFFFFF8, 1, 0xFFFFFFFFFFFFFFFF), (0, 0, 0)]


def test_scan_rejects_non_bytes():
    with pytest.raises(TypeError):
        fast.scan([b"", bytearray(b"x")])


# -- IP checksum ----------------------------------------------------------------------------------


@given(st.binary(max_size=3000))
def test_ip_checksum_fast_equals_reference(data):
    assert _ext.ip_checksum(data) == fast.ip_checksum_reference(data)
    assert _ext.ip_checksum(data + b"\x01") == fast.ip_checksum_reference(data + b"\x01")


@given(st.integers(0, 0xFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF),
       st.integers(0, 0xFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF),
       st.integers(0, 10))
def test_filled_ip_checksum_sums_to_zero(tos, length, ident, ttl, src, dst, nopts):
    header = bytearray(ENCODERS["ip"]({
        "version": 4, "ihl": 5 + nopts, "dsfield.dscp": tos >> 2, "dsfield.ecn": tos & 3,
        "len": length, "id": ident, "flags.df": 1, "ttl": ttl, "proto": 17, "checksum": 0,
        "src": src, "dst": dst}) + b"\x01\x02\x03\x04" * nopts)
    c = _ext.ip_checksum(bytes(header))
    assert c == fast.ip_checksum_reference(bytes(header))
    header[10:12] = c.to_bytes(2, "big")
    assert _ext.ip_checksum(bytes(header)) == 0
    assert fast.ip_checksum_reference(bytes(header)) == 0


def test_ip_checksum_known_values():
    # RFC 1071 example words 0001 f203 f4f5 f6f7 -> sum ddf2, checksum 220d
    assert _ext.ip_checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    assert fast.ip_checksum_reference(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    assert _ext.ip_checksum(b"") == 0xFFFF == fast.ip_checksum_reference(b"")
    assert _ext.ip_checksum(b"\x12") == fast.ip_checksum_reference(b"\x12") == 0xEDFF
    frame = roce.craft(0x04, b"abc").to_bytes()
    assert _ext.ip_checksum(frame[14:34]) == 0


def test_ip_checksum_long_input():
    data = b"\xff" * 140_000
    assert _ext.ip_checksum(data) == fast.ip_checksum_reference(data) == 0


# -- other twins in fast.py: assemble, decode_headers ---------------------------------------------


@given(valid_frames(), st.booleans(), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 64))
def test_assemble_fast_equals_reference(frame, fix_len, fix_sum, fix_udp, give_icrc, cut):
    """The transport part whole, or as headers and a body (``cut`` bytes after BTH, where the
    emulator's frame builder puts its payload): the same frame either way."""
    w = locate.walk(frame)
    l2 = frame[:w.l3_off]
    l3 = frame[w.l3_off:w.l3_off + w.l3_len]
    udp = frame[w.udp_off:w.bth_off] if w.udp_off >= 0 else b""
    transport = frame[w.bth_off:w.icrc_off]
    icrc = 0x01020304 if give_icrc else None
    args = (l2, l3, w.l3_kind, udp, transport, icrc, frame[w.l4_end:], fix_len, fix_sum,
            fix_udp)
    out = _ext.assemble(*args)
    assert out == fast.assemble_reference(*args)
    split = min(12 + cut, len(transport))
    parts = args[:4] + (transport[:split],) + args[5:] + (transport[split:],)
    assert _ext.assemble(*parts) == fast.assemble_reference(*parts) == out
    # the body handed as a range of a larger buffer (a pattern piece): the same frame
    body = transport[split:]
    ranged = parts[:-1] + (b"ab" + body + b"cde", 2, len(body))
    assert _ext.assemble(*ranged) == fast.assemble_reference(*ranged) == out
    if not give_icrc:
        assert out == frame  # the crafted frame already had right lengths, checksum, ICRC


@given(st.binary(max_size=64), st.binary(max_size=64), st.integers(-2, 70), st.integers(-2, 70),
       st.integers(-2, 70), st.booleans())
def test_same_bytes_fast_equals_reference(a, b, a_at, b_at, n, copy):
    """A received payload against a pattern piece, compared in place: both twins agree on
    every range, equal ranges included (``copy``), and refuse the same ranges."""
    if copy and 0 <= a_at <= len(a) and 0 <= n:
        b = b[:max(b_at, 0)] + a[a_at:a_at + n] + b[max(b_at, 0):]
    outs = []
    for twin in (_ext.same_bytes, fast.same_bytes_reference):
        try:
            outs.append(twin(a, a_at, b, b_at, n))
        except ValueError as e:
            outs.append(str(e))
    assert outs[0] == outs[1]
    inside = 0 <= n and 0 <= a_at <= len(a) - n and 0 <= b_at <= len(b) - n
    assert outs[0] == (a[a_at:a_at + n] == b[b_at:b_at + n] if inside
                       else "same_bytes: a range outside its bytes")


def test_assemble_refuses_a_transport_part_without_bth():
    """Both twins: fewer than BTH's 12 bytes before the body is an error, whatever follows."""
    frame = roce.craft(0x04, b"abcd").to_bytes()
    w = locate.walk(frame)
    args = (frame[:w.l3_off], frame[w.l3_off:w.l3_off + w.l3_len], w.l3_kind,
            frame[w.udp_off:w.bth_off], frame[w.bth_off:w.bth_off + 11], None, b"", True,
            True, True, frame[w.bth_off + 11:w.icrc_off])
    for twin in (_ext.assemble, fast.assemble_reference):
        with pytest.raises(ValueError, match="shorter than BTH"):
            twin(*args)


@pytest.mark.parametrize("at, n", [(-1, 2), (0, 5), (3, 2), (5, 0), (6, -1)])
def test_assemble_refuses_a_payload_range_outside_its_bytes(at, n):
    """Both twins: a body range that does not lie inside the body's bytes is an error (a
    negative length runs to the end: from 6 of 4 bytes, outside too)."""
    frame = roce.craft(0x04, b"abcd").to_bytes()
    w = locate.walk(frame)
    args = (frame[:w.l3_off], frame[w.l3_off:w.l3_off + w.l3_len], w.l3_kind,
            frame[w.udp_off:w.bth_off], frame[w.bth_off:w.bth_off + 12], None, b"", True,
            True, True, b"wxyz", at, n)
    for twin in (_ext.assemble, fast.assemble_reference):
        with pytest.raises(ValueError, match="payload's range lies outside"):
            twin(*args)


@given(any_frames())
def test_decode_headers_fast_equals_reference(case):
    frame, linktype, port = case
    w = locate.walk(frame, linktype, port)
    if w.bth_off < 0 or w.bth_off + 12 > len(frame) or w.opcode not in OPCODES:
        return
    got = _ext.decode_headers(frame, w, linktype)
    want = packet_mod.decode_headers_reference(frame, w, linktype)
    # CNP's 128-bit reserved field: compared in test_decode_headers_wide_field
    got.pop("cnp", None)
    want.pop("cnp", None)
    assert got == want


@pytest.mark.parametrize("code", sorted(ROCE_OPCODES), ids=lambda c: f"0x{c:02x}")
def test_decode_headers_every_opcode_all_ones(code):
    op = OPCODES[code]
    values = {f"{h}.{f.name}": (True if f.kind == "bool" else f.mask)
              for h in op.headers if h != "cnp" for f in LAYOUTS[h].fields}
    for kw in ({}, {"ipv6": True}, {"roce_version": 1}, {"vlan": 4095, "vlan_priority": 7}):
        frame = roce.craft(code, bytes(op.payload_len or 0), psn=0xFFFFFF, dqpn=0xFFFFFF,
                           pkey=0xFFFF, se=True, m=True, a=True, fecn=True, becn=True, **kw,
                           **values).to_bytes()
        w = locate.walk(frame)
        got = _ext.decode_headers(frame, w, 1)
        assert got == packet_mod.decode_headers_reference(frame, w, 1)
        for key, value in values.items():
            h, _, k = key.partition(".")
            assert got[h][k] == value, key


@pytest.mark.parametrize("reserved", [1, (1 << 128) - 1, 1 << 100])
def test_decode_headers_wide_field(reserved):
    frame = roce.craft(0x81, dqpn=5, **{"cnp.reserved": reserved}).to_bytes()
    w = locate.walk(frame)
    assert packet_mod.decode_headers_reference(frame, w, 1)["cnp"]["reserved"] == reserved
    assert _ext.decode_headers(frame, w, 1)["cnp"]["reserved"] == reserved


# -- wiring -------------------------------------------------------------------------------------


def test_compiled_path_is_wired_in():
    assert roce.COMPILED is True and fast.COMPILED is True
    assert fast.walk is _ext.walk
    assert fast.icrc_check is _ext.icrc and fast.icrc_batch is _ext.icrc_batch
    assert fast.PSNTracker is _ext.PSNTracker
    assert fast.ip_checksum is _ext.ip_checksum
    assert (fast.psn_add, fast.psn_diff, fast.psn_cmp, fast.classify) == (
        _ext.psn_add, _ext.psn_diff, _ext.psn_cmp, _ext.classify)


# -- without the extension ------------------------------------------------------------------------

_PROBE = textwrap.dedent("""
    import json, sys, warnings
    {block}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import roce
        from roce import fast
    from array import array
    out = {{"warnings": [str(w.message) for w in caught
                         if issubclass(w.category, RuntimeWarning)],
            "compiled": roce.COMPILED, "ext_is_none": fast._ext is None}}
    frames = []
    for i, code in enumerate(sorted(roce.ROCE_OPCODES)):
        op = roce.OPCODES[code]
        n = op.payload_len if op.payload_len is not None else (i % 9 if op.payload else 0)
        kw = [{{}}, {{"ipv6": True}}, {{"roce_version": 1}}, {{"vlan": 7}}][i % 4]
        frames.append(roce.craft(code, bytes(range(n)), dqpn=i, psn=i * 99, **kw).to_bytes())
    out["frames"] = [f.hex() for f in frames]
    out["parsed"] = [roce.parse(f).to_bytes().hex() for f in frames]
    out["valid"] = [roce.parse(f).icrc_valid for f in frames]
    out["icrc"] = [roce.icrc_of_frame(f) for f in frames]
    mixed = frames + [f[:-1] for f in frames] + [b"", b"junk"]
    status = array("B", bytes(len(mixed)))
    out["good"] = fast.icrc_batch(mixed, 1, 4791, None, status)
    out["status"] = list(status)
    cols = fast.scan(mixed, check_icrc=True)
    out["scan"] = {{k: list(v) for k, v in cols.items()}}
    t = fast.PSNTracker()
    for x in (5, 6, 9, 7, 7, 10):
        t.feed(x)
    out["psn"] = t.counts()
    print(json.dumps(out))
""")

_BLOCKERS = {
    "sys-modules-none": "sys.modules['roce._fastpath'] = None",
    "meta-path-finder": textwrap.dedent("""
        class _Block:
            def find_spec(self, name, path=None, target=None):
                if name == "roce._fastpath":
                    raise ImportError("blocked for the test")
                return None
        sys.meta_path.insert(0, _Block())
    """),
}


def _run_probe(block: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="")
    res = subprocess.run([sys.executable, "-c", _PROBE.format(block=block)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def compiled_probe() -> dict:
    return _run_probe("pass")


@pytest.mark.parametrize("how", sorted(_BLOCKERS))
def test_without_the_extension(how, compiled_probe):
    got = _run_probe(_BLOCKERS[how])
    assert got["compiled"] is False and got["ext_is_none"] is True
    assert len(got["warnings"]) == 1
    assert "fast path" in got["warnings"][0]
    assert compiled_probe["compiled"] is True and compiled_probe["warnings"] == []
    for key in ("frames", "parsed", "valid", "icrc", "good", "status", "scan", "psn"):
        assert got[key] == compiled_probe[key], key
    assert all(got["valid"]) and got["parsed"] == got["frames"]
