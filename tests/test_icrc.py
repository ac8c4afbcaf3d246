"""ICRC: the reference (roce.icrc), the compiled twin, zlib, Scapy and single-bit flips."""

from __future__ import annotations

import inspect
import random
import zlib
from array import array

import pytest
import scapy.contrib.roce as scapy_roce  # scapy is a dependency of roce
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.l2 import Ether

import roce
from roce import OPCODES, ROCE_OPCODES, fast, locate
from roce import icrc as ref
from roce.fast import _ext
from roce.headers import LAYOUTS, SIZE_OF

KERNELS = ("vpclmulqdq-avx512", "pclmulqdq-sse4", "slice-by-8")
CODES = sorted(ROCE_OPCODES)  # what a RoCE frame may carry


@st.composite
def frames(draw, variants=("ipv4", "ipv6", "vlan", "rocev1", "ipv4-options")):
    """A valid crafted frame with random header values, payload and IP variant."""
    op = OPCODES[draw(st.sampled_from(CODES))]
    variant = draw(st.sampled_from(variants))
    kw = {"ipv6": {"ipv6": True}, "rocev1": {"roce_version": 1},
          "vlan": {"vlan": draw(st.integers(0, 4095))}}.get(variant, {})
    values = {}
    for h in ("bth",) + op.headers:
        for f in LAYOUTS[h].fields:
            if h == "bth" and f.name in ("opcode", "padcnt", "tver"):
                continue
            values[f"{h}.{f.name}"] = draw(st.booleans() if f.kind == "bool"
                                           else st.integers(0, f.mask))
    l3 = {"ipv6": "ipv6", "rocev1": "grh"}.get(variant, "ip")
    if l3 == "ip":
        values.update({"ip.ttl": draw(st.integers(0, 255)), "ip.id": draw(st.integers(0, 65535)),
                       "ip.dsfield.dscp": draw(st.integers(0, 63)),
                       "ip.dsfield.ecn": draw(st.integers(0, 3))})
    elif l3 == "ipv6":
        values.update({"ipv6.tclass": draw(st.integers(0, 255)),
                       "ipv6.flow": draw(st.integers(0, (1 << 20) - 1)),
                       "ipv6.hlim": draw(st.integers(0, 255))})
    else:
        values.update({"grh.tclass": draw(st.integers(0, 255)),
                       "grh.flowlabel": draw(st.integers(0, (1 << 20) - 1)),
                       "grh.hoplmt": draw(st.integers(0, 255))})
    if l3 != "grh":
        values["udp.srcport"] = draw(st.integers(1, 65535))
    if op.payload_len is not None:
        payload = draw(st.binary(min_size=op.payload_len, max_size=op.payload_len))
    elif op.payload:
        payload = draw(st.binary(max_size=300))
    else:
        payload = b""
    p = roce.craft(op.code, payload, **kw, **values)
    if variant == "ipv4-options":
        p.headers["ip"]["options"] = draw(st.binary(min_size=4, max_size=40).map(
            lambda b: b[:len(b) - len(b) % 4]))
    return p.to_bytes()


def offsets(frame: bytes) -> tuple[int, int, int, int, int]:
    w = locate.walk(frame)
    assert w.status == locate.OK
    return w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off


def design_icrc(frame: bytes) -> int:
    """An independent ICRC from the rule in docs/protocol.md (ICRC), with hard-coded masks."""
    w = locate.walk(frame)
    l3 = bytearray(frame[w.l3_off:w.l3_off + w.l3_len])
    if w.l3_kind == locate.L3_IPV4:
        l3[1] = l3[8] = l3[10] = l3[11] = 0xFF  # TOS, TTL, header checksum
    else:  # IPv6 / GRH: traffic class, flow label, hop limit
        l3[0] |= 0x0F
        l3[1] = l3[2] = l3[3] = l3[7] = 0xFF
    udp = bytearray(frame[w.l3_off + w.l3_len:w.bth_off])
    if udp:
        udp[6] = udp[7] = 0xFF  # UDP checksum
    bth = bytearray(frame[w.bth_off:w.bth_off + 12])
    bth[4] = 0xFF  # FECN, BECN, resv6
    covered = b"\xff" * 8 + l3 + udp + bth + frame[w.bth_off + 12:w.icrc_off]
    return int.from_bytes(zlib.crc32(covered).to_bytes(4, "little"), "big")


# -- reference, compiled twin and the documented formula agree ---------------------------------


@given(frames())
def test_icrc_at_fast_equals_reference_equals_stored(frame):
    args = offsets(frame)
    stored = int.from_bytes(frame[args[4]:args[4] + 4], "big")
    assert _ext.icrc_at(frame, *args) == ref.icrc_at(frame, *args) == stored
    assert design_icrc(frame) == stored
    assert roce.icrc_of_frame(frame) == stored
    assert fast.icrc_check(frame) == (0, stored, stored)


@given(frames(), st.data())
def test_icrc_at_agree_on_arbitrary_bytes(frame, data):
    """Same offsets, random contents: the masks and the CRC must agree byte for byte."""
    args = offsets(frame)
    junk = data.draw(st.binary(min_size=len(frame), max_size=len(frame)))
    assert _ext.icrc_at(junk, *args) == ref.icrc_at(junk, *args)


def test_rxe_seed_formulation():
    """rxe: CRC register seeded with 0xdebb20e3 (after eight 0xFF), result inverted."""
    assert zlib.crc32(b"\xff" * 8) ^ 0xFFFFFFFF == 0xDEBB20E3
    frame = roce.craft("RC_SEND_ONLY", b"rxe", dqpn=0x11, psn=5).to_bytes()
    l3_off, kind, l3_len, bth_off, icrc_off = offsets(frame)
    masked = (ref._masked(frame[l3_off:l3_off + l3_len], "ip")
              + ref._masked(frame[l3_off + l3_len:bth_off], "udp")
              + ref._masked(frame[bth_off:bth_off + 12], "bth") + frame[bth_off + 12:icrc_off])
    rxe = zlib.crc32(masked, 0xDEBB20E3 ^ 0xFFFFFFFF)
    assert rxe.to_bytes(4, "little") == frame[icrc_off:icrc_off + 4]
    assert ref.to_trailer(int.from_bytes(frame[-4:], "big")) == frame[-4:]


def test_masks_cover_exactly_the_variant_fields():
    assert ref.MASKS["ip"] == bytes([0, 0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0, 0xFF, 0xFF]) + bytes(8)
    assert ref.MASKS["ipv6"] == bytes([0x0F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF]) + bytes(32)
    assert ref.MASKS["grh"] == ref.MASKS["ipv6"]
    assert ref.MASKS["udp"] == bytes(6) + b"\xff\xff"
    assert ref.MASKS["bth"] == bytes(4) + b"\xff" + bytes(7)


# -- CRC-32 kernels --------------------------------------------------------------------------


@pytest.fixture(params=KERNELS)
def kernel(request):
    _ext.crc32_force(request.param)
    try:
        if _ext.crc32_impl() != request.param:
            pytest.skip(f"this CPU cannot run the {request.param} kernel")
        yield request.param
    finally:
        _ext.crc32_force(None)


def test_crc32_kernel_lengths_and_alignments(kernel):
    rng = random.Random(kernel)
    for n in list(range(0, 1100)) + [2047, 2048, 2049, 4095, 4096, 4097, 9000, 65536 + 13]:
        off = n % 4
        buf = rng.randbytes(n + off)
        data = memoryview(buf)[off:]
        seed = rng.getrandbits(32)
        assert _ext.crc32(data, seed) == zlib.crc32(data, seed), (kernel, n, off)
        assert _ext.crc32(data) == zlib.crc32(data), (kernel, n)
    big = rng.randbytes(3 * 1024 * 1024 + 5)
    assert _ext.crc32(big) == zlib.crc32(big)
    assert _ext.crc32_impl() == kernel


@given(st.binary(max_size=5000), st.integers(0, 0xFFFFFFFF))
def test_crc32_all_kernels_hypothesis(data, seed):
    try:
        for name in KERNELS:
            _ext.crc32_force(name)
            assert _ext.crc32(data, seed) == zlib.crc32(data, seed), _ext.crc32_impl()
            a, b = data[:len(data) // 3], data[len(data) // 3:]
            assert _ext.crc32(b, _ext.crc32(a, seed)) == zlib.crc32(data, seed)
    finally:
        _ext.crc32_force(None)


def test_crc32_empty_and_special_inputs(kernel):
    assert _ext.crc32(b"") == 0 == zlib.crc32(b"")
    assert _ext.crc32(b"", 0xDEADBEEF) == 0xDEADBEEF == zlib.crc32(b"", 0xDEADBEEF)
    assert _ext.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert _ext.crc32(bytearray(b"\xff" * 100)) == zlib.crc32(b"\xff" * 100)
    assert _ext.crc32(bytes(256), 0xFFFFFFFF) == zlib.crc32(bytes(256), 0xFFFFFFFF)
    assert _ext.crc32(memoryview(b"abc" * 50)[1:]) == zlib.crc32((b"abc" * 50)[1:])


def test_crc32_impl_choice():
    _ext.crc32_force(None)
    auto = _ext.crc32_impl()
    assert auto in KERNELS
    try:
        _ext.crc32_force("no-such-kernel")  # ignored
        assert _ext.crc32_impl() == auto
        _ext.crc32_force("slice-by-8")
        assert _ext.crc32_impl() == "slice-by-8"
    finally:
        _ext.crc32_force(None)
    assert _ext.crc32_impl() == auto
    assert fast.crc32 is _ext.crc32


# -- batch ------------------------------------------------------------------------------------


def _mixed_frames() -> list[bytes]:
    rng = random.Random(7)
    out = []
    for i, code in enumerate(CODES):
        op = OPCODES[code]
        n = op.payload_len if op.payload_len is not None else (i * 7 % 50 if op.payload else 0)
        kw = [{}, {"ipv6": True}, {"vlan": 9}, {"roce_version": 1}][i % 4]
        f = roce.craft(code, rng.randbytes(n), dqpn=i, psn=i * 1000, **kw).to_bytes()
        out.append(f)
        out.append(f[:-1] + bytes([f[-1] ^ 1]))  # bad ICRC
        out.append(f[:len(f) // 2])  # truncated
        out.append(f + bytes(6))  # Ethernet trailer
    eth = bytes.fromhex("020000000002020000000001")
    out += [b"", b"\x00" * 10, eth + b"\x08\x06" + bytes(28),  # ARP
            eth + b"\x08\x00" + bytes.fromhex("45000020000040004006") + bytes(30),  # TCP
            rng.randbytes(80), rng.randbytes(13)]
    return out


def _reference_check(f: bytes, linktype: int = 1, port: int = 4791) -> tuple[int, int, int]:
    w = locate.walk(f, linktype, port)
    if w.status != locate.OK:
        return (w.status, 0, 0)
    calc = ref.icrc_at(f, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
    return (0, calc, int.from_bytes(f[w.icrc_off:w.l4_end], "big"))


def test_icrc_batch_equals_per_frame_reference():
    frames_ = _mixed_frames()
    out = array("I", bytes(4 * len(frames_)))
    status = array("B", b"\xee" * len(frames_))
    good = fast.icrc_batch(frames_, 1, 4791, out, status)
    expected = [_reference_check(f) for f in frames_]
    assert list(status) == [e[0] for e in expected]
    assert list(out) == [e[1] for e in expected]
    assert good == sum(1 for s, c, st_ in expected if s == 0 and c == st_)
    assert good == len(CODES) * 2  # the good frame and the one with a trailer
    assert {s for s in status} >= {0, locate.NR_ETHERTYPE, locate.NR_PROTO,
                                   locate.BAD_TRUNCATED}
    assert fast.icrc_batch(frames_) == good  # without output arrays
    for f, e in zip(frames_, expected):
        assert fast.icrc_check(f) == e


def test_icrc_batch_argument_errors():
    frames_ = _mixed_frames()[:4]
    with pytest.raises(ValueError, match="shorter"):
        fast.icrc_batch(frames_, 1, 4791, array("I", [0]))
    with pytest.raises(ValueError, match="shorter"):
        fast.icrc_batch(frames_, 1, 4791, None, array("B", [0]))
    with pytest.raises(TypeError):
        fast.icrc_batch(frames_ + [bytearray(10)])


# -- Scapy as an oracle -------------------------------------------------------------------------

SCAPY_CODES = sorted(c for c in scapy_roce._bth_opcodes if c in OPCODES)


def test_scapy_knows_the_opcodes_we_compare():
    # RC/UC/RD rows up to 0x14, UD 0x64/0x65 and CNP
    assert set(SCAPY_CODES) == ({c for c in OPCODES if c <= 0x14} | set(range(0x20, 0x2C))
                                | set(range(0x40, 0x55)) | {0x64, 0x65, 0x81})
    # compute_icrc(self, p) ignores p and rebuilds the pseudo header from the underlayers
    assert list(inspect.signature(scapy_roce.BTH.compute_icrc).parameters) == ["self", "p"]
    src = inspect.getsource(scapy_roce.BTH.compute_icrc)
    assert "self.underlayer" in src and "isinstance(ip, IPv6)" in src


@pytest.mark.parametrize("variant", ["ipv4", "ipv6", "vlan"])
@pytest.mark.parametrize("code", SCAPY_CODES, ids=lambda c: f"0x{c:02x}")
def test_scapy_compute_icrc_matches(code, variant):
    rng = random.Random(code * 3 + len(variant))
    op = OPCODES[code]
    n = rng.randint(0, 67) if op.payload else 0
    kw = {"ipv6": {"ipv6": True, "hlim": 3, "ipv6.tclass": 0xB3, "ipv6.flow": 0x12345},
          "vlan": {"vlan": 42, "ttl": 7, "ecn": "ce", "dscp": 26},
          "ipv4": {"ttl": 200, "ip.id": 0x1234}}[variant]
    frame = roce.craft(code, rng.randbytes(n), dqpn=rng.getrandbits(24), psn=rng.getrandbits(24),
                       pkey=rng.getrandbits(16), fecn=True, becn=bool(code & 1), se=True,
                       a=True, **kw).to_bytes()
    pkt = Ether(frame)
    scapy_icrc = bytes(pkt[scapy_roce.BTH].compute_icrc(None))
    assert scapy_icrc == frame[-4:]
    assert pkt[scapy_roce.BTH].opcode == code


# -- single-bit flips -------------------------------------------------------------------------

# What a flip of a field does, per header.  "masked": variant field, the ICRC stays valid.
# "breaks": the walk rejects the frame (IP version/IHL/length/fragment/protocol, UDP destination
# port and length, BTH TVer, GRH payload length growth and next header): these covered bits
# are checked to fail the walk rather than the ICRC.  "maybe": the frame may still walk (BTH
# opcode and PadCnt, GRH payload length, L2 types); if it does, the ICRC decides.
FIELD_CLASS = {
    "ip": {"dsfield.dscp": "masked", "dsfield.ecn": "masked", "ttl": "masked",
           "checksum": "masked", "version": "breaks", "ihl": "breaks", "len": "breaks",
           "flags.mf": "breaks", "frag_offset": "breaks", "proto": "breaks"},
    "ipv6": {"tclass": "masked", "flow": "masked", "hlim": "masked", "version": "breaks",
             "plen": "breaks", "nxt": "breaks"},
    "grh": {"tclass": "masked", "flowlabel": "masked", "hoplmt": "masked", "paylen": "maybe",
            "nxthdr": "breaks"},
    "udp": {"checksum": "masked", "dstport": "breaks", "length": "breaks"},
    "bth": {"fecn": "masked", "becn": "masked", "reserved": "masked", "tver": "breaks",
            "opcode": "maybe", "padcnt": "maybe"},
    "eth": {"type": "l2maybe"},
    "vlan": {"etype": "l2maybe"},
}


def bit_classes(frame: bytes, linktype_l2: tuple[str, ...]) -> list[str]:
    """Class of every bit of ``frame``: masked/covered/breaks/maybe/l2/l2maybe."""
    w = locate.walk(frame)
    classes = ["covered"] * (8 * len(frame))  # ETHs, payload, pad, ICRC

    def mark(header: str, base: int, default: str) -> None:
        for f in LAYOUTS[header].fields:
            cls = FIELD_CLASS.get(header, {}).get(f.name, default)
            for b in range(f.bits):
                classes[8 * base + f.bit_offset + b] = cls

    pos = 0
    for h in linktype_l2:
        mark(h, pos, "l2")
        pos += SIZE_OF[h]
    l3 = {locate.L3_IPV4: "ip", locate.L3_IPV6: "ipv6", locate.L3_GRH: "grh"}[w.l3_kind]
    mark(l3, w.l3_off, "covered")  # IP options stay "covered"
    if w.udp_off >= 0:
        mark("udp", w.udp_off, "covered")
    mark("bth", w.bth_off, "covered")
    return classes


FLIP_FRAMES = {
    "ipv4-write-imm": (lambda: roce.craft(0x0B, b"payload!!", dqpn=0x123456, psn=0x1ABCDE,
                                          va=0x1122334455667788, rkey=0xAABBCCDD, dmalen=9,
                                          imm=0x01020304).to_bytes() + bytes(4), ("eth",)),
    "ipv4-options-ack": (lambda: _with_options(roce.craft(0x11, dqpn=5, psn=6, msn=7,
                                                          syndrome=0x1F)), ("eth",)),
    "vlan-ud-send": (lambda: roce.craft(0x65, b"ud", vlan=77, qkey=0x80010000, sqpn=0x42,
                                        imm=9).to_bytes(), ("eth", "vlan")),
    "ipv6-cmpswap": (lambda: roce.craft(0x13, ipv6=True, va=0x1000, rkey=0x33, swap=1,
                                        compare=2, dqpn=0x77, psn=0xFFFFFF).to_bytes(),
                     ("eth",)),
    "ipv6-xrc-send": (lambda: roce.craft(0xA4, b"abcde", ipv6=True, xrcsrq=0x55,
                                         dqpn=3).to_bytes(), ("eth",)),
    "rocev1-send": (lambda: roce.craft(0x04, b"v1 payload", roce_version=1, dqpn=0x99,
                                       psn=12).to_bytes(), ("eth",)),
    "rocev1-read": (lambda: roce.craft(0x0C, roce_version=1, va=1, rkey=2, dmalen=3,
                                       dqpn=4).to_bytes(), ("eth",)),
}


def _with_options(p: roce.Packet) -> bytes:
    p.headers["ip"]["options"] = bytes([1, 1, 1, 0])  # NOP NOP NOP EOL
    return p.to_bytes()


@pytest.mark.parametrize("name", sorted(FLIP_FRAMES))
def test_single_bit_flips(name):
    build, l2 = FLIP_FRAMES[name]
    frame = build()
    w = locate.walk(frame)
    assert w.status == 0 and fast.icrc_check(frame)[1] == fast.icrc_check(frame)[2]
    classes = bit_classes(frame, l2)
    # the trailer (if any) is not covered either
    for bit in range(8 * w.l4_end, 8 * len(frame)):
        classes[bit] = "l2"
    seen = set()
    for bit, cls in enumerate(classes):
        flipped = bytearray(frame)
        flipped[bit // 8] ^= 0x80 >> (bit % 8)
        flipped = bytes(flipped)
        status, calc, stored = fast.icrc_check(flipped)
        assert (status, calc, stored) == _reference_check(flipped), bit
        where = f"bit {bit} (byte {bit // 8}) class {cls}"
        if cls in ("masked", "l2"):
            assert status == 0 and calc == stored, where
        elif cls == "covered":
            assert status == 0 and calc != stored, where
        elif cls == "breaks":
            assert status != 0, where
        elif cls == "maybe":
            assert status != 0 or calc != stored, where
        else:  # l2maybe: an L2 type may become another VLAN type; L2 is not covered
            assert status != 0 or calc == stored, where
        seen.add(cls)
    assert {"masked", "covered", "breaks", "l2"} <= seen


def test_rocev1_icrc_covers_grh_without_variant_fields():
    base = roce.craft(0x04, b"hello", roce_version=1, dqpn=1, psn=2)
    frame = base.to_bytes()
    for field, value in (("grh.tclass", 0xFF), ("grh.flowlabel", 0xABCDE), ("grh.hoplmt", 1)):
        other = roce.craft(0x04, b"hello", roce_version=1, dqpn=1, psn=2, **{field: value})
        assert other.to_bytes()[-4:] == frame[-4:], field  # masked: same ICRC
    for field, value in (("grh.sgid", "fe80::99"), ("grh.dgid", "fe80::3"), ("grh.ipver", 7)):
        other = roce.craft(0x04, b"hello", roce_version=1, dqpn=1, psn=2, **{field: value})
        assert other.to_bytes()[-4:] != frame[-4:], field  # covered
        assert roce.parse(other.to_bytes()).icrc_valid
    assert design_icrc(frame) == int.from_bytes(frame[-4:], "big")
