"""Scapy layers (roce.wire.layers): generated from the layouts, byte-identical to roce.craft,
dissecting roce's frames, ICRC through the fast path, pcap round trips, and living next to
scapy.contrib.roce."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import textwrap
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # contrib's own import noise is not under test here
    import scapy.contrib.roce as contrib

from scapy.compat import raw
from scapy.layers.inet import IP, UDP, IPOption_NOP, IPOption_RR, in4_chksum
from scapy.layers.inet6 import IPv6, in6_chksum
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Padding, Raw, fuzz
from scapy.utils import rdpcap, wrpcap
from scapy.volatile import RandNum

import roce
from roce import OPCODES, ROCE_OPCODES, fast, icrc
from roce.headers import (
    DECODERS,
    ENCODERS,
    LAYOUTS,
    SIZE_OF,
    SYNDROME_TYPES,
    TITLES,
    describe_syndrome,
)
from roce.locate import LINKTYPE_RAW, OK
from roce.wire import layers as L
from roce.wire.contrib import FieldNameError, FieldValueError, LayoutMismatch
from roce.wire.layers import AETH, BTH, GRH, LAYERS, RETH, CNPPadding, from_scapy, to_scapy

# Importing roce.wire.layers takes UDP 4791 and Ethertype 0x8915 from scapy.contrib.roce.
# Other test modules of this session dissect with contrib's layers, so the bindings are ours
# only while this module's tests run.
L.unbind()


@pytest.fixture(autouse=True, scope="module")
def _our_bindings():
    L.bind()
    yield
    L.unbind()


CODES = sorted(ROCE_OPCODES)  # what a RoCE frame may carry
L3S = ("ip", "ipv6", "grh")
DST, SRC = "02:00:00:00:00:02", "02:00:00:00:00:01"
# BTH fields the packet's structure rests on: set from the opcode and payload, not drawn.
STRUCTURAL = ("opcode", "padcnt", "tver")
TRAILER = ("pad", "icrc")


def value_strategy(f) -> st.SearchStrategy:
    if f.kind == "bool":
        return st.booleans()
    return st.integers(0, f.mask) | st.sampled_from([0, f.mask])


@st.composite
def cases(draw, codes=CODES, l3s=L3S):
    """One packet's worth of values: every field of BTH and of the opcode's headers drawn
    within its width, plus addressing."""
    op = OPCODES[draw(st.sampled_from(codes))]
    values: dict[str, dict] = {"bth": {}}
    for f in LAYOUTS["bth"].fields:
        if f.name not in STRUCTURAL:
            values["bth"][f.name] = draw(value_strategy(f))
    for h in op.headers:
        values[h] = {f.name: draw(value_strategy(f)) for f in LAYOUTS[h].fields}
    if op.payload_len is not None:
        payload = draw(st.binary(min_size=op.payload_len, max_size=op.payload_len))
    elif op.payload:
        payload = draw(st.binary(max_size=67))
    else:
        payload = b""
    return {
        "op": op, "values": values, "payload": payload, "l3": draw(st.sampled_from(l3s)),
        "vlan": draw(st.none() | st.tuples(st.integers(0, 4095), st.integers(0, 7))),
        "ttl": draw(st.integers(1, 255)), "ipid": draw(st.integers(0, 0xFFFF)),
        "sport": draw(st.integers(0, 0xFFFF)),
        "src4": draw(st.ip_addresses(v=4)).exploded, "dst4": draw(st.ip_addresses(v=4)).exploded,
        "src6": draw(st.ip_addresses(v=6)).compressed,
        "dst6": draw(st.ip_addresses(v=6)).compressed,
    }


def scapy_packet(c: dict):
    """The case built with the Scapy layers, every computed field left to them."""
    pkt = Ether(dst=DST, src=SRC)
    if c["vlan"] is not None:
        pkt = pkt / Dot1Q(vlan=c["vlan"][0], prio=c["vlan"][1])
    if c["l3"] == "ip":
        pkt = pkt / IP(src=c["src4"], dst=c["dst4"], ttl=c["ttl"], id=c["ipid"], flags="DF")
        pkt = pkt / UDP(sport=c["sport"])
    elif c["l3"] == "ipv6":
        pkt = pkt / IPv6(src=c["src6"], dst=c["dst6"], hlim=c["ttl"]) / UDP(sport=c["sport"])
    else:
        pkt = pkt / GRH(sgid=c["src6"], dgid=c["dst6"], hoplmt=c["ttl"])
    op = c["op"]
    pkt = pkt / BTH(opcode=op.code, **c["values"]["bth"])
    for h in op.headers:
        pkt = pkt / LAYERS[h](**c["values"][h])
    if c["payload"]:
        pkt = pkt / Raw(c["payload"])
    return pkt


def crafted(c: dict) -> roce.Packet:
    """The same case through roce.craft."""
    kw: dict = {"eth.dst": DST, "eth.src": SRC}
    if c["l3"] == "ip":
        kw.update({"ip.ttl": c["ttl"], "ip.id": c["ipid"], "udp.srcport": c["sport"],
                   "src": c["src4"], "dst": c["dst4"]})
    elif c["l3"] == "ipv6":
        kw.update({"ipv6": True, "ipv6.hlim": c["ttl"], "udp.srcport": c["sport"],
                   "src": c["src6"], "dst": c["dst6"]})
    else:
        kw.update({"roce_version": 1, "grh.hoplmt": c["ttl"], "src": c["src6"],
                   "dst": c["dst6"]})
    if c["vlan"] is not None:
        kw.update({"vlan": c["vlan"][0], "vlan_priority": c["vlan"][1]})
    for h, fields in c["values"].items():
        kw.update({f"{h}.{k}": v for k, v in fields.items()})
    return roce.craft(c["op"].code, c["payload"], **kw)


def same_ip(a: str, b: str) -> bool:
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


def l3_checks(c: dict, pkt) -> None:
    if c["vlan"] is not None:
        assert (pkt[Dot1Q].vlan, pkt[Dot1Q].prio) == c["vlan"]
    if c["l3"] == "ip":
        ip = pkt[IP]
        assert (ip.src, ip.dst, ip.ttl, ip.id, ip.flags.DF) == (
            c["src4"], c["dst4"], c["ttl"], c["ipid"], True)
        assert (pkt[UDP].sport, pkt[UDP].dport, pkt[UDP].chksum) == (c["sport"], 4791, 0)
    elif c["l3"] == "ipv6":
        assert same_ip(pkt[IPv6].src, c["src6"]) and same_ip(pkt[IPv6].dst, c["dst6"])
        assert pkt[IPv6].hlim == c["ttl"]
        assert (pkt[UDP].sport, pkt[UDP].dport, pkt[UDP].chksum) == (c["sport"], 4791, 0)
    else:
        grh = pkt[GRH]
        assert same_ip(grh.sgid, c["src6"]) and same_ip(grh.dgid, c["dst6"])
        assert (grh.hoplmt, grh.nxthdr) == (c["ttl"], 0x1B)
        assert UDP not in pkt


# -- build with Scapy -> bytes -> roce ----------------------------------------------------------


@given(cases())
def test_scapy_build_matches_craft_and_parses(c):
    check_build(c)


def check_build(c: dict) -> None:
    frame = raw(scapy_packet(c))
    assert frame == crafted(c).to_bytes()
    p = roce.parse(frame)
    assert p.icrc_valid
    assert p.opcode is c["op"]
    for h, fields in c["values"].items():
        for k, v in fields.items():
            assert p.headers[h][k] == v, f"{h}.{k}"
    assert p.headers["bth"]["padcnt"] == -len(c["payload"]) & 3
    assert p.pad == bytes(-len(c["payload"]) & 3)
    assert p.payload == c["payload"]
    st_, computed, stored = fast.icrc_check(frame)
    assert (st_, computed) == (OK, stored)


# -- roce bytes -> Ether(...) ---------------------------------------------------------------------


@given(cases(), st.data())
def test_dissect_crafted_frames(c, data):
    check_dissect(c, data)


@pytest.mark.parametrize("code", CODES, ids=lambda c: f"0x{c:02x}")
@settings(max_examples=examples(4))
@given(data=st.data())
def test_every_opcode_both_ways(code, data):
    """The random tests above sample opcodes; here each one gets its own examples."""
    check_build(data.draw(cases(codes=[code])))
    check_dissect(data.draw(cases(codes=[code])), data)


def check_dissect(c: dict, data) -> None:
    frame = crafted(c).to_bytes()
    pkt = Ether(frame)
    l3_checks(c, pkt)
    op = c["op"]
    bth = pkt[BTH]
    assert (bth.opcode, bth.padcnt, bth.tver) == (op.code, -len(c["payload"]) & 3, 0)
    for h, fields in c["values"].items():
        layer = pkt[LAYERS[h]]
        for k, v in fields.items():
            assert layer.getfieldval(k) == v, f"{h}.{k}"
    # the headers follow each other in the opcode's order, then the payload
    layer = bth.payload
    for h in op.headers:
        assert type(layer) is LAYERS[h]
        layer = layer.payload
    if c["payload"]:
        assert type(layer) is Raw and layer.load == c["payload"]
        assert type(layer.payload).__name__ == "NoPayload"
    else:
        assert type(layer).__name__ == "NoPayload"
    assert bth.pad == bytes(-len(c["payload"]) & 3)
    assert bth.icrc == int.from_bytes(frame[-4:], "big") == crafted(c).stored_icrc
    assert bth.icrc_valid
    assert bth.icrc_expected == bth.icrc
    assert raw(pkt) == frame
    assert from_scapy(pkt).to_bytes() == frame

    # any covered bit flipped: the ICRC no longer matches
    w = fast.walk(frame)
    spans = [range(w.bth_off + 5, w.icrc_off)]  # DestQP on (byte 4 is variant)
    if c["l3"] == "ip":
        spans.append(range(w.l3_off + 12, w.l3_off + 20))  # addresses
    else:
        spans.append(range(w.l3_off + 8, w.l3_off + 40))
    at = data.draw(st.sampled_from([i for span in spans for i in span]))
    bit = data.draw(st.integers(0, 7))
    flipped = bytearray(frame)
    flipped[at] ^= 1 << bit
    bad = Ether(bytes(flipped))
    assert bad[BTH].icrc == bth.icrc
    assert not bad[BTH].icrc_valid
    assert bad[BTH].icrc_expected == roce.icrc_of_frame(bytes(flipped)) != bth.icrc


@pytest.mark.parametrize("code", CODES, ids=lambda c: f"0x{c:02x}")
def test_every_opcode_dissects_into_its_headers(code):
    op = OPCODES[code]
    payload = bytes(range(op.payload_len if op.payload_len is not None else 5 if op.payload
                          else 0))
    frame = roce.craft(code, payload, dqpn=0x123456, psn=0xABCDEF).to_bytes()
    pkt = Ether(frame)
    assert pkt.layers()[3:] == (
        [BTH] + [LAYERS[h] for h in op.headers] + ([Raw] if payload else []))
    assert pkt[BTH].icrc_valid
    assert pkt.summary().endswith(
        f"/ {op.short_name} QP=0x123456 PSN={0xABCDEF}" +
        "".join(f" / {LAYERS[h].__name__}" for h in op.headers) + (" / Raw" if payload else ""))
    shown = pkt.show(dump=True)
    assert "Base Transport Header" in shown and op.ident in shown
    for h in op.headers:
        assert TITLES[h] in shown


# -- the layers are the layouts -------------------------------------------------------------------


@pytest.mark.parametrize("header", sorted(LAYERS))
def test_fields_are_the_layout(header):
    cls = LAYERS[header]
    names = [f.name for f in cls.fields_desc if f.name not in TRAILER]
    assert names == [f.name for f in LAYOUTS[header].fields]
    assert getattr(L, cls.__name__) is cls and cls.__name__ in L.__all__
    assert cls().name == TITLES[header]


@pytest.mark.parametrize("header", sorted(LAYERS))
@given(data=st.data())
def test_field_widths_match_the_codec(header, data):
    lay = LAYOUTS[header]
    values = {}
    for f in lay.fields:
        if f.kind == "addr":
            values[f.name] = data.draw(st.ip_addresses(v=6)).compressed
        elif header == "bth" and f.name == "opcode":
            values[f.name] = data.draw(st.sampled_from(CODES))
        else:
            values[f.name] = data.draw(value_strategy(f))
    built = raw(LAYERS[header](**values))
    expected = ENCODERS[header](values)
    assert built[:lay.size] == expected
    back = LAYERS[header](expected + bytes(8))  # 8 more: BTH reads its trailer off the end
    for f in lay.fields:
        got = back.getfieldval(f.name)
        assert same_ip(got, values[f.name]) if f.kind == "addr" else got == values[f.name]


def test_defaults_are_crafts():
    frame = raw(Ether(dst=DST, src=SRC) / IP(src="10.0.0.1", dst="10.0.0.2", id=0, flags="DF")
                / UDP(sport=0xC000) / BTH(opcode="RC_SEND_ONLY") / Raw(b"abc"))
    assert frame == roce.craft("RC_SEND_ONLY", b"abc", sport=0xC000).to_bytes()
    v1 = raw(Ether(dst=DST, src=SRC) / GRH() / BTH(opcode="RC_SEND_ONLY") / Raw(b"abc"))
    assert v1 == roce.craft("RC_SEND_ONLY", b"abc", roce_version=1).to_bytes()
    assert BTH().p_key == 0xFFFF and BTH().padcnt is None and BTH().icrc is None


# -- building: lengths, pad, ICRC in every shape --------------------------------------------------


def test_the_plain_stack_builds_a_valid_frame():
    pkt = (Ether(dst=DST, src=SRC) / IP(dst="10.0.0.2") / UDP()
           / BTH(opcode="RC_RDMA_WRITE_ONLY", destqp=0x11, psn=100)
           / RETH(va=0x1000, r_key=0x22, dmalen=5) / Raw(b"hello"))
    frame = raw(pkt)
    p = roce.parse(frame)
    assert p.icrc_valid and p.payload == b"hello" and p.pad == b"\0\0\0"
    assert (p.headers["bth"]["padcnt"], p.headers["reth"]["va"]) == (3, 0x1000)
    assert p.headers["ip"]["len"] == 20 + 8 + 12 + 16 + 5 + 3 + 4 == len(frame) - 14
    assert p.headers["udp"]["length"] == len(frame) - 14 - 20
    assert p.headers["udp"]["checksum"] == 0
    assert pkt.summary() == "Ether / IP / UDP / RC RDMA Write Only QP=0x000011 PSN=100 / RETH / Raw"
    empty = raw(Ether(dst=DST, src=SRC) / IP(dst="10.0.0.2") / UDP() / BTH() / RETH() / Raw())
    assert fast.icrc_check(empty)[1] == fast.icrc_check(empty)[2]


@pytest.mark.parametrize("shape", ["ip", "ipv6", "dot1q-ip", "qinq-ipv6", "rocev1",
                                   "dot1q-rocev1", "ether-type-0x8915"])
def test_icrc_in_every_encapsulation(shape):
    tail = BTH(opcode="RC_SEND_ONLY_WITH_IMMEDIATE", destqp=9, psn=3) / L.ImmDt(immdt=7) / Raw(
        b"abcdefg")
    head = {"ip": Ether() / IP(dst="10.0.0.2") / UDP(),
            "ipv6": Ether() / IPv6(dst="fd00::2") / UDP(),
            "dot1q-ip": Ether() / Dot1Q(vlan=7) / IP(dst="10.0.0.2") / UDP(),
            "qinq-ipv6": Ether() / Dot1Q(vlan=7) / Dot1Q(vlan=8) / IPv6(dst="fd00::2") / UDP(),
            "rocev1": Ether() / GRH(),
            "dot1q-rocev1": Ether() / Dot1Q(vlan=7) / GRH(),
            "ether-type-0x8915": Ether(type=0x8915) / GRH()}[shape]
    head[Ether].dst = DST
    frame = raw(head / tail)
    p = roce.parse(frame)
    assert p.icrc_valid and p.payload == b"abcdefg" and p.headers["immdt"]["immdt"] == 7
    assert Ether(frame)[BTH].icrc_valid and raw(Ether(frame)) == frame


def test_icrc_when_built_from_an_inner_layer():
    pkt = (Ether(dst=DST) / IP(dst="10.0.0.2") / UDP() / BTH(opcode="RC_SEND_ONLY")
           / Raw(b"xyz"))
    frame = raw(pkt)
    status, computed, stored = fast.icrc_check(frame)
    assert status == OK and computed == stored
    # bytes of an inner layer carry the ICRC of the whole packet
    assert raw(pkt[IP]) == frame[14:]
    assert raw(pkt[UDP]) == frame[34:]
    assert raw(pkt[BTH]) == frame[42:]
    # raw IP (no Ethernet) and a bare GRH (no Ethernet) compute it too
    bare = raw(IP(dst="10.0.0.2") / UDP() / BTH(opcode="RC_SEND_ONLY") / Raw(b"xyz"))
    assert roce.parse(bare, LINKTYPE_RAW).icrc_valid
    grh = raw(GRH() / BTH(opcode="RC_SEND_ONLY") / Raw(b"xyz"))
    assert grh == raw(Ether(dst=DST) / GRH() / BTH(opcode="RC_SEND_ONLY") / Raw(b"xyz"))[14:]
    # no L3 header: nothing defines an ICRC
    assert raw(BTH(opcode="RC_SEND_ONLY") / Raw(b"xyz"))[-4:] == bytes(4)
    assert not (BTH(opcode="RC_SEND_ONLY") / Raw(b"xyz")).icrc_valid


def test_icrc_of_malformed_and_odd_packets_covers_their_bytes():
    # An ACK with payload, TVer 1, IP options: the fast walk refuses or skips these, the
    # layers still compute the ICRC over the bytes they send.
    for pkt in [
        Ether(dst=DST) / IP(dst="10.0.0.2") / UDP() / BTH(opcode="RC_ACKNOWLEDGE") / AETH()
        / Raw(b"extra"),
        Ether(dst=DST) / IP(dst="10.0.0.2") / UDP() / BTH(tver=1) / Raw(b"abcd"),
        Ether(dst=DST) / IP(dst="10.0.0.2", options=[IPOption_NOP(), IPOption_RR()]) / UDP()
        / BTH(opcode="RC_SEND_ONLY") / Raw(b"a"),
        Ether(dst=DST) / IP(dst="10.0.0.2") / UDP() / BTH(opcode=0x1F) / Raw(b"abc"),
    ]:
        frame = raw(pkt)
        l3_len = Ether(frame)[IP].ihl * 4
        bth_off = 14 + l3_len + 8
        expected = icrc.icrc_at(frame, 14, icrc.L3_IPV4, l3_len, bth_off, len(frame) - 4)
        assert int.from_bytes(frame[-4:], "big") == expected
        assert Ether(frame)[BTH].icrc_valid


def test_fuzzed_headers_are_covered_as_sent():
    for _ in range(20):
        pkt = (Ether(dst=DST) / IP(dst="10.0.0.2", id=RandNum(0, 0xFFFF)) / UDP()
               / fuzz(BTH(opcode="RC_SEND_ONLY", tver=0)) / Raw(b"abcd"))
        frame = raw(pkt)
        status, computed, stored = fast.icrc_check(frame)
        assert status == OK and computed == stored


def test_explicit_icrc_pad_and_padcnt_are_kept_and_del_recomputes():
    frame = raw(Ether(dst=DST) / IP(dst="10.0.0.2") / UDP()
                / BTH(opcode="RC_SEND_ONLY", icrc=0x12345678, padcnt=2, pad=b"\xaa\xbb")
                / Raw(b"ab"))
    assert frame[-6:] == b"\xaa\xbb\x12\x34\x56\x78"
    p = roce.parse(frame)
    assert (p.pad, p.icrc, p.icrc_valid) == (b"\xaa\xbb", 0x12345678, False)
    pkt = Ether(frame)
    assert (pkt[BTH].pad, pkt[BTH].icrc, pkt[BTH].icrc_valid) == (b"\xaa\xbb", 0x12345678,
                                                                  False)
    assert raw(pkt) == frame
    del pkt[BTH].icrc
    fixed = raw(pkt)
    assert fixed[:-4] == frame[:-4] and Ether(fixed)[BTH].icrc_valid
    # an edit after dissection: the old ICRC stays until deleted, as IP's chksum does
    good = Ether(roce.craft("RC_SEND_ONLY", b"abc", psn=1).to_bytes())
    good[BTH].psn = 2
    assert not good[BTH].icrc_valid
    del good[BTH].icrc
    assert good[BTH].icrc_valid and roce.parse(raw(good)).headers["bth"]["psn"] == 2


def test_ethernet_padding_after_the_icrc():
    frame = roce.craft("RC_ACKNOWLEDGE", dqpn=5).to_bytes()
    padded = frame + b"\x00\x01\x02\x03\x04\x05"
    pkt = Ether(padded)
    assert pkt[Padding].load == padded[len(frame):]
    assert pkt[BTH].icrc == int.from_bytes(frame[-4:], "big") and pkt[BTH].icrc_valid
    assert raw(pkt) == padded
    v1 = roce.craft("RC_ACKNOWLEDGE", roce_version=1).to_bytes()
    pkt = Ether(v1 + bytes(6))
    assert pkt[BTH].icrc_valid and pkt[GRH].paylen == len(v1) - 14 - 40 and Padding in pkt


@pytest.mark.parametrize("l3", [IP, IPv6])
def test_udp_checksum_when_asked_covers_the_icrc(l3):
    dst = "10.0.0.2" if l3 is IP else "fd00::2"
    frame = raw(Ether(dst=DST) / l3(dst=dst) / UDP(chksum=None) / BTH(opcode="RC_SEND_ONLY")
                / Raw(b"abcde"))
    pkt = Ether(frame)
    assert pkt[UDP].chksum != 0 and pkt[BTH].icrc_valid
    verify = in4_chksum if l3 is IP else in6_chksum
    assert verify(17, pkt[l3], raw(pkt[UDP])) == 0  # sums to zero with the checksum in


def test_cnp_and_flush_take_their_opcode_from_the_header_below():
    assert (BTH() / CNPPadding()).opcode == 0x81
    assert (BTH() / L.FETH()).opcode == OPCODES[0x1C].code
    assert (BTH() / RETH()).opcode == 0  # RETH follows many opcodes: nothing is guessed
    frame = raw(Ether(dst=DST) / IP(dst="10.0.0.2") / UDP() / BTH(becn=1, destqp=5)
                / CNPPadding())
    p = roce.parse(frame)
    assert p.opcode.code == 0x81 and p.headers["bth"]["becn"] and p.icrc_valid


# -- opcode names, AETH syndrome, summary ----------------------------------------------------------


@pytest.mark.parametrize("code", CODES, ids=lambda c: f"0x{c:02x}")
def test_opcode_by_any_name(code):
    op = OPCODES[code]
    for spelling in (op.ident, op.slug, op.short_name, op.iba_name, f"{code:#x}", op):
        assert BTH(opcode=spelling).opcode == code
    assert BTH(opcode=code).sprintf("%BTH.opcode%") == op.ident
    with pytest.raises(KeyError):
        BTH(opcode="RC_NOT_AN_OPCODE")


@pytest.mark.parametrize("syn", [0x00, 0x1F, 0x20 | 5, 0x60, 0x60 | 2, 0x40])
def test_aeth_syndrome_is_shown_split(syn):
    pkt = Ether(roce.craft("RC_ACKNOWLEDGE", syndrome=syn, msn=9).to_bytes())
    aeth = pkt[AETH]
    shown = aeth.show(dump=True)
    assert describe_syndrome(syn) in shown
    assert aeth.syndrome_type == SYNDROME_TYPES[syn >> 5]
    assert f"type {aeth.syndrome_type}, value {syn & 0x1F}" in shown
    assert (aeth.syndrome, aeth.syndrome_value, aeth.syndrome_text, aeth.msn) == (
        syn, syn & 0x1F, describe_syndrome(syn), 9)


def test_summary_is_wireshark_style():
    frame = roce.craft("RC_RDMA_WRITE_ONLY", bytes(10), dqpn=0x11, psn=100, va=0x1000,
                       rkey=0x22).to_bytes()
    assert Ether(frame).summary() == (
        "Ether / IP / UDP / RC RDMA Write Only QP=0x000011 PSN=100 / RETH / Raw")
    assert BTH(opcode=0x1F, destqp=1, psn=2).mysummary() == "Unknown opcode 0x1f QP=0x000001 PSN=2"


# -- pcap, conversions -----------------------------------------------------------------------------


def test_pcap_round_trip(tmp_path):
    frames = [roce.craft(code, b"\x01" * (OPCODES[code].payload_len or 3)
                         if OPCODES[code].payload else b"", dqpn=code, psn=code * 3,
                         ipv6=code % 2 == 1, vlan=code if code % 3 == 0 else None).to_bytes()
              for code in CODES]
    path = tmp_path / "roce.pcap"
    wrpcap(str(path), [Ether(f) for f in frames])
    back = rdpcap(str(path))
    assert [raw(p) for p in back] == frames
    for p, code in zip(back, CODES):
        assert type(p[UDP].payload) is BTH
        assert (p[BTH].opcode, p[BTH].destqp, p[BTH].psn) == (code, code, code * 3)
        assert p[BTH].icrc_valid
    built = [scapy_packet({"op": OPCODES[0x0A], "values": {"bth": {"psn": i}, "reth": {}},
                           "payload": b"x" * i, "l3": "ip", "vlan": None, "ttl": 64,
                           "ipid": i, "sport": 1000, "src4": "10.0.0.1", "dst4": "10.0.0.2"})
             for i in range(4)]
    wrpcap(str(path), built)
    again = [raw(p) for p in rdpcap(str(path))]
    assert again == [raw(p) for p in built]
    assert all(roce.parse(f).icrc_valid for f in again)


def test_to_and_from_scapy():
    p = roce.craft("RC_SEND_ONLY", b"abc", dqpn=3, vlan=5)
    s = to_scapy(p)
    assert type(s) is Ether and s[BTH].destqp == 3 and raw(s) == p.to_bytes()
    assert raw(to_scapy(p.to_bytes())) == p.to_bytes()
    back = from_scapy(s[BTH])  # any layer: the whole packet is converted
    assert back.to_bytes() == p.to_bytes() and back.fields()["vlan.id"] == 5
    bare = IP(dst="10.0.0.2") / UDP() / BTH(opcode="RC_SEND_ONLY", destqp=4) / Raw(b"z")
    q = from_scapy(bare)
    assert q.linktype == LINKTYPE_RAW and q.headers["bth"]["destqp"] == 4 and q.icrc_valid
    assert raw(to_scapy(q)) == raw(bare)
    with pytest.raises(ValueError):
        from_scapy(GRH() / BTH())


# -- next to scapy.contrib.roce --------------------------------------------------------------------


def test_import_after_contrib_rebinds_without_warnings():
    code = textwrap.dedent("""
        import logging, warnings
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)
        logging.getLogger("scapy").addHandler(Keep())
        import scapy.contrib.roce as contrib
        from scapy.layers.inet import UDP
        from scapy.layers.l2 import Ether
        before = len(records)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import roce.wire.layers as ours
        assert not caught, [str(w.message) for w in caught]
        assert len(records) == before, [r.getMessage() for r in records[before:]]
        assert [c for _, c in UDP.payload_guess if c.__name__ == "BTH"] == [ours.BTH]
        assert [c for _, c in Ether.payload_guess if c.__name__ == "GRH"] == [ours.GRH]
        import roce
        pkt = Ether(roce.craft("RC_ACKNOWLEDGE", dqpn=1).to_bytes())
        assert type(pkt[UDP].payload) is ours.BTH
        assert type(pkt[UDP].payload.payload) is ours.AETH
        v1 = Ether(roce.craft("RC_SEND_ONLY", b"x", roce_version=1).to_bytes())
        assert type(v1.payload) is ours.GRH and type(v1.payload.payload) is ours.BTH
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n" and out.stderr == ""


def test_udp_4791_dissects_into_our_bth_in_this_process():
    frame = roce.craft("RC_SEND_ONLY", b"x").to_bytes()
    v1 = roce.craft("RC_SEND_ONLY", b"x", roce_version=1).to_bytes()
    theirs = L.CONTRIB
    assert type(Ether(frame)[UDP].payload) is BTH
    assert type(Ether(v1).payload) is GRH
    assert (contrib.BTH, contrib.GRH, contrib.AETH, contrib.CNPPadding) == (
        BTH, GRH, AETH, CNPPadding)
    try:
        L.unbind()  # contrib gets its entry points and its names back...
        assert type(Ether(frame)[UDP].payload) is contrib.BTH is theirs["BTH"]
        assert type(Ether(v1).payload) is contrib.GRH is theirs["GRH"]
        assert contrib.AETH is theirs["AETH"] and contrib.CNPPadding is theirs["CNPPadding"]
        assert (UDP() / contrib.BTH()).dport == 4791
    finally:
        L.bind()  # ...and loses them again
    assert type(Ether(frame)[UDP].payload) is BTH and type(Ether(v1).payload) is GRH
    assert [c for _, c in UDP.payload_guess if c in (BTH, theirs["BTH"])] == [BTH]
    assert (UDP() / BTH()).chksum == 0
    # contrib's own class, held from before, still builds as contrib does
    assert (UDP() / theirs["BTH"]()).dport == 4791 and (UDP() / theirs["BTH"]()).chksum is None


CONTRIB_CODES = sorted(set(L.CONTRIB["BTH"].fields_desc[0].i2s) & set(OPCODES))


@given(cases(codes=CONTRIB_CODES, l3s=("ip", "ipv6")))
def test_icrc_equals_contribs(c):
    """scapy.contrib.roce computes the same ICRC (and frame) for the opcodes it knows; its
    BTH fields are ours in the same order under other names, its extended headers Raw."""
    c = {**c, "vlan": None}
    frame = raw(scapy_packet(c))
    w = fast.walk(frame)
    theirs = {}
    for mine, field in zip(LAYOUTS["bth"].fields, L.CONTRIB["BTH"].fields_desc):
        assert int(field.sz * 8) == mine.bits, (mine.name, field.name)
        theirs[field.name] = int(DECODERS["bth"](frame, w.bth_off)[mine.name])
    l3 = (IP(src=c["src4"], dst=c["dst4"], ttl=c["ttl"], id=c["ipid"], flags="DF")
          if c["l3"] == "ip" else IPv6(src=c["src6"], dst=c["dst6"], hlim=c["ttl"]))
    pkt = (Ether(dst=DST, src=SRC) / l3 / UDP(sport=c["sport"], dport=4791, chksum=0)
           / L.CONTRIB["BTH"](**theirs) / Raw(frame[w.bth_off + SIZE_OF["bth"]:w.icrc_off]))
    assert raw(pkt) == frame


# -- contrib's names on our layers (roce.wire.contrib); tests/test_scapy_compat.py runs
# -- contrib's documented behaviours in both layer sets ------------------------------------------


def test_contrib_aliases_are_derived_from_both_layouts():
    from roce.wire import contrib as bridge

    for name, theirs in L.CONTRIB.items():
        ours = getattr(L, name)
        assert issubclass(ours, theirs) and ours.contrib_class is theirs
        positional = [f for f in theirs.fields_desc if f.name != "icrc"]
        mine = {f.name for f in LAYOUTS[ours._roce_header].fields}
        # every contrib field is ours under its own name, or an alias
        assert {f.name for f in positional} <= mine | set(ours.contrib_aliases)
        assert not set(ours.contrib_aliases) & mine
    assert {k: a.field for k, a in BTH.contrib_aliases.items()} == {
        "solicited": "se", "migreq": "m", "padcount": "padcnt", "version": "tver",
        "pkey": "p_key", "resv6": "reserved", "dqpn": "destqp", "ackreq": "a",
        "resv7": "reserved7"}
    assert {k: a.field for k, a in GRH.contrib_aliases.items()} == {"nexthdr": "nxthdr"}
    parts = CNPPadding.contrib_aliases
    assert (parts["reserved1"].shift, parts["reserved2"].shift) == (64, 0)
    assert not (parts["reserved1"].whole or parts["reserved2"].whole)

    # a layout the two no longer agree on is refused at import, naming the field
    class Straddles(contrib.AETH):
        fields_desc = [contrib.BitField("syndrome_msn", 0, 16), contrib.BitField("rest", 0, 16)]

    with pytest.raises(LayoutMismatch, match="syndrome_msn straddles"):
        bridge.aliases(Straddles, LAYOUTS["aeth"])

    class Short(contrib.AETH):
        fields_desc = [contrib.XByteField("syndrome", 0)]

    with pytest.raises(LayoutMismatch, match="8 bits, aeth 32"):
        bridge.aliases(Short, LAYOUTS["aeth"])


def test_contrib_names_and_ours_are_one_field():
    b = BTH(dqpn=5, pkey=0x1234, solicited=1, padcount=1)
    assert (b.destqp, b.p_key, b.se, b.padcnt) == (5, 0x1234, 1, 1)
    b.destqp = 6
    assert b.dqpn == 6 and b.getfieldval("dqpn") == 6
    del b.dqpn
    assert b.destqp == 0 == b.dqpn
    assert b.get_field("dqpn") is b.get_field("destqp")
    with pytest.raises(FieldNameError, match="dqpn and destqp"):
        BTH(dqpn=1, destqp=2)
    pad = CNPPadding(reserved2=7)
    assert pad.reserved == 7 and pad.reserved1 == 0
    pad.reserved1 = 1
    assert pad.reserved == (1 << 64) | 7
    del pad.reserved1
    assert pad.reserved == 7
    with pytest.raises(FieldValueError, match="reserved1 = 0x10000000000000000"):
        pad.reserved1 = 1 << 64
    # an upper layer reaches them as it reaches any field
    pkt = Ether(roce.craft("RC_SEND_ONLY", b"ab", dqpn=9).to_bytes())
    assert pkt.dqpn == 9 and pkt.getlayer(BTH, dqpn=9) is pkt[BTH]
    pkt.dqpn = 10
    assert pkt[BTH].destqp == 10


def test_contrib_names_keep_contribs_meaning_ours_keep_ours():
    head = Ether(dst=DST) / IP(dst="10.0.0.2") / UDP(sport=1)
    # padcnt: the layer appends the pad; padcount (contrib): the payload holds it
    ours = raw(head / BTH(opcode="RC_SEND_ONLY", padcnt=2) / Raw(b"ab"))
    theirs = raw(head / BTH(opcode="RC_SEND_ONLY", padcount=2) / Raw(b"ab\0\0"))
    assert ours[-8:] == theirs[-8:] == b"ab\0\0" + ours[-4:]
    assert roce.parse(ours).payload == roce.parse(theirs).payload == b"ab"
    # contrib's names: Scapy's UDP checksum, as with contrib; ours: RoCE's 0
    assert Ether(ours)[UDP].chksum == 0
    built = head / BTH(opcode="RC_SEND_ONLY", padcount=2) / Raw(b"ab\0\0")
    assert Ether(raw(built))[UDP].chksum != 0
    assert in4_chksum(17, Ether(theirs)[IP], raw(Ether(theirs)[UDP])) == 0
    assert raw(built.copy()) == raw(built) == theirs  # copies keep it
    # contrib's cnp() and ours make the same CNP, up to that checksum
    mine = Ether(raw(head / L.cnp(0xD2)))
    assert (mine[BTH].opcode, mine[BTH].becn, mine[BTH].destqp) == (0x81, 1, 0xD2)
    assert mine[UDP].chksum == 0 and mine[BTH].icrc_valid
    zero = Ether(dst=DST) / IP(dst="10.0.0.2") / UDP(sport=1, chksum=0)
    assert raw(zero / contrib.cnp(0xD2)) == raw(zero / L.cnp(0xD2)) == raw(head / L.cnp(0xD2))


def test_gids_are_taken_as_integers():
    g = GRH(sgid=0xFE80 << 112 | 1, dgid=int(ipaddress.ip_address("::ffff:10.0.0.2")))
    assert g.sgid == "fe80::1" and same_ip(g.dgid, "::ffff:10.0.0.2")


def test_contribs_own_classes_and_ours_find_each_other():
    theirs = L.CONTRIB
    frame = roce.craft("RC_ACKNOWLEDGE", dqpn=3, syndrome=0x1F, msn=4).to_bytes()
    pkt = Ether(frame)  # ours
    assert pkt[theirs["BTH"]] is pkt[BTH] and theirs["AETH"] in pkt
    assert isinstance(pkt[BTH], theirs["BTH"]) and pkt[theirs["AETH"]].msn == 4
    # contrib's class, held from before: its own code builds (finding its layer by the name
    # its module now gives ours), and ours finds its instance
    built = Ether(dst=DST) / IP(dst="10.0.0.2") / UDP(sport=1) / theirs["BTH"](
        opcode=0x11, dqpn=3) / theirs["AETH"](syndrome=0x1F, msn=4)
    assert pkt[BTH].compute_icrc() == frame[-4:]
    assert raw(built)[-4:] == roce.icrc_of_frame(raw(built)).to_bytes(4, "big")
    assert built[BTH] is built[theirs["BTH"]] and isinstance(built[BTH], BTH)
    try:
        L.unbind()  # apart again: contrib's classes are no longer ours
        assert not isinstance(built[theirs["BTH"]], BTH) and BTH not in built
        assert theirs["BTH"].__dict__.get("match_subclass") is None
    finally:
        L.bind()


@pytest.mark.parametrize("shape", [{"roce_version": 1}, {}, {"ipv6": True},
                                   {"vlan": 5, "roce_version": 1}])
def test_icrc_of_a_cut_or_damaged_frame_is_an_answer_not_an_error(shape):
    """A frame cut anywhere has an ICRC that is not valid: ``icrc_valid`` says False (and
    ``icrc_expected`` is None or a number), it does not raise; nor does a frame with any one
    byte damaged (its lengths included)."""
    frame = roce.craft("RC_RDMA_WRITE_ONLY", b"abcdefgh", dqpn=3, **shape).to_bytes()
    assert Ether(frame)[BTH].icrc_valid
    cut = [frame[:n] for n in range(14, len(frame))]
    damaged = [frame[:at] + bytes([frame[at] ^ 0xFF]) + frame[at + 1:]
               for at in range(14, len(frame))]
    for data in cut + damaged:
        pkt = Ether(data)
        if BTH not in pkt:
            continue
        bth = pkt[BTH]
        assert bth.icrc_valid is (False if data in cut else bth.icrc_valid), data.hex()
        assert isinstance(bth.icrc_valid, bool)
        assert bth.icrc_expected is None or 0 <= bth.icrc_expected < 1 << 32
        assert len(bth.compute_icrc()) == 4
