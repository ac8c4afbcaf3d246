"""Scapy layers for UET (``roce.wire.uetlayers``): generated from the same layouts, they dissect
what the family builds into the same values the family decodes, and what Scapy builds decodes
as the family reads it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("scapy")

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

from roce.families.uet import build, dissect  # noqa: E402
from roce.families.uet.layouts import READINGS  # noqa: E402
from roce.testing.strategies import UetCase, uet_cases  # noqa: E402
from roce.wire import uetlayers  # noqa: E402
from roce.wire.uetlayers import LAYERS, UET_PROLOGUE  # noqa: E402


def _raw_fields(case: UetCase) -> dict:
    """The family's decode of ``case``'s UET bytes, values as the layouts hold them (before
    decode signs offsets and renames fields)."""
    data = build.uet_bytes(case.values, case.reading, case.payload, entropy=case.native)
    d = dissect.decode(data, entropy=case.native, reading=case.reading)
    out, pos = {}, 0
    for key in d.headers:
        h = case.reading.headers[key]
        out.update(zip(h.keys, h.decode(data, pos).values()))
        pos += h.size
    return out


@settings(max_examples=200)
@given(case=st.sampled_from(["spec", "ref-prov"]).flatmap(
    lambda r: uet_cases(reading=r, clean=False)))
def test_scapy_dissects_what_the_family_builds(case: UetCase) -> None:
    data = build.uet_bytes(case.values, case.reading, case.payload, entropy=case.native)
    uetlayers.use_reading(case.reading.name)
    try:
        got = uetlayers.flat_fields(Ether(build.frame(data, native=case.native)))
    finally:
        uetlayers.use_reading("spec")
    assert got == _raw_fields(case)


@settings(max_examples=100)
@given(case=uet_cases(reading="spec", native=False))
def test_scapy_builds_what_the_family_reads(case: UetCase) -> None:
    """Stack the layer classes of the packet's layouts with the drawn raw values: the bytes
    are the family's, byte for byte."""
    raw = _raw_fields(case)
    data = build.uet_bytes(case.values, case.reading, case.payload)
    d = dissect.decode(data, reading=case.reading)
    stack = UDP(sport=0xC000)
    for key in d.headers:
        h = case.reading.headers[key]
        cls = LAYERS["spec", key]
        stack = stack / cls(**{uetlayers.field_name(f.name): raw[k]
                                for k, f in zip(h.keys, h.layout.fields)})
    if case.payload:
        stack = stack / case.payload
    built = bytes(stack)
    assert built[8:] == data
    assert UDP(built).dport == 4793 and UDP(built).chksum == 0


def test_bindings_and_classes() -> None:
    """UDP 4793 and IP protocol 253 dissect into UET layers; the provider's differing layouts
    have classes of their own."""
    data = build.uet_bytes({"uet.pds.type": 8, "uet.pds.cack_psn": 9,
                            "uet.pds.ack.cc_type": 1, "uet.pds.ack.cc_state.credit": 3})
    pkt = Ether(build.frame(data))
    assert pkt[UET_PROLOGUE].type == 8 and pkt[LAYERS["spec", "ack"]].cack_psn == 9
    assert pkt[LAYERS["spec", "ack.credit"]].ack_cc_state_credit == 3
    native = Ether(build.frame(build.entropy_header(5) + data, native=True))
    assert native[LAYERS["spec", "entropy"]].entropy == 5
    assert IP(bytes(IP() / LAYERS["spec", "entropy"]())).proto == 253
    assert LAYERS["ref-prov", "rendv"].__name__ == "UET_RENDV_REF_PROV"
    assert LAYERS["ref-prov", "std"] is LAYERS["spec", "std"]
    assert {k for r, k in LAYERS if r == "spec"} == set(READINGS["spec"].headers)
    tss = build.uet_bytes({"uet.tss": True, "uet.tss.sdi": 7}, payload=b"secret")
    t = Ether(build.frame(tss))
    assert t[LAYERS["spec", "tss"]].sdi == 7 and bytes(t[LAYERS["spec", "rud_rod"]].payload) \
        .endswith(b"secret")
