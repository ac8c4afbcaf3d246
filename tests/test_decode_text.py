"""``roce decode``'s generated writers of ``-T json`` and ``-V`` (``roce.decoder.decode.
decode_text``: a good frame's JSON object or tree written as text by code generated per
header chain) against the references, ``json.dumps`` of ``output.json_object`` and
``tree.render`` of the record ``decode_frames`` makes: the same text for every frame,
good, broken, cut or not RoCE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from roce import craft
from roce.cli import main
from roce.decoder import output, records
from roce.decoder.decode import Record, decode_frames, decode_text
from roce.families.base import tree
from roce.headers import AETH_NAK, NAK_PSN_SEQUENCE_ERROR, syndrome
from roce.locate import LINKTYPE_ETHERNET
from roce.pcapio import Frame, PcapWriter
from roce.testing.strategies import mutations, packets


def json_text(rec: Record) -> str:
    return json.dumps(output.json_object(rec), ensure_ascii=False, allow_nan=False)


def tree_text(rec: Record) -> str:
    return records.render(rec) if rec.family is not None or rec.outer else tree.render(rec)


REFERENCE = {"json": json_text, "tree": tree_text}


def reference(frames: list[Frame], out: str = "json") -> list[str]:
    return [REFERENCE[out](rec) for rec in decode_frames(frames)]


def generated(frames: list[Frame], out: str = "json") -> list[str]:
    return [item if type(item) is str else REFERENCE[out](item)
            for item in decode_text(frames, out)]


SLL = b"\x00\x00\x00\x01\x00\x06" + bytes(range(8)) + b"\x08\x00"


def with_ip_options(frame: bytes, options: bytes) -> bytes:
    """An Ethernet frame's IPv4 header with ``options`` after it; lengths fixed (so the
    ICRC turns bad)."""
    ip = bytearray(frame[14:34])
    ip[0] = 0x45 + len(options) // 4
    ip[2:4] = (int.from_bytes(ip[2:4], "big") + len(options)).to_bytes(2, "big")
    return frame[:14] + bytes(ip) + options + frame[34:]


@st.composite
def captures(draw: st.DrawFn) -> list[Frame]:
    """A few frames: any opcode, RoCEv1 or v2, IPv4 (with options sometimes) or IPv6,
    VLAN tags, Ethernet, raw IP or Linux cooked framing, any field values; some mutated
    (broken, cut, not RoCE); times that go backwards as well as forwards."""
    out = []
    ts = draw(st.integers(0, 1 << 62))
    for _ in range(draw(st.integers(1, 4))):
        data = draw(packets(roce_version=None, max_payload=64)).to_bytes()
        linktype = LINKTYPE_ETHERNET
        if data[12:14] == b"\x08\x00":  # IPv4, no VLAN tag
            if draw(st.booleans()):
                words = draw(st.integers(1, 3))
                data = with_ip_options(data, draw(st.binary(min_size=4 * words,
                                                            max_size=4 * words)))
            linktype = draw(st.sampled_from((LINKTYPE_ETHERNET, 101, 113)))
            if linktype != LINKTYPE_ETHERNET:
                data = (SLL if linktype == 113 else b"") + data[14:]
        if draw(st.integers(0, 3)) == 0:
            data = draw(mutations(data, linktype=linktype))
        ts += draw(st.integers(-10**6, 10**9))
        caplen = max(len(data) - draw(st.sampled_from((0, 0, 0, 1, 9))), 0)
        out.append(Frame(data[:caplen], ts, caplen, len(data), linktype, 0))
    return out


@settings(max_examples=examples(60), deadline=None)
@given(captures())
def test_generated_json_equals_json_dumps(frames: list[Frame]) -> None:
    assert generated(frames) == reference(frames)


@settings(max_examples=examples(60), deadline=None)
@given(captures())
def test_generated_tree_equals_the_records_tree(frames: list[Frame]) -> None:
    assert generated(frames, "tree") == reference(frames, "tree")


def test_selective_nak_and_every_syndrome_type() -> None:
    """aeth.selective (added only when true) and the syndrome value's name per type."""
    frames = []
    for i, (kind, value, msn, psn) in enumerate([
            (AETH_NAK, NAK_PSN_SEQUENCE_ERROR, 3, 1),  # selective: MSN ahead of the ePSN
            (AETH_NAK, NAK_PSN_SEQUENCE_ERROR, 1, 1), (0, 31, 5, 9), (1, 12, 5, 9),
            (2, 3, 5, 9)]):
        p = craft("RC_ACKNOWLEDGE", b"", **{"aeth.syndrome": syndrome(kind, value),
                                            "aeth.msn": msn, "bth.psn": psn})
        data = p.to_bytes()
        frames.append(Frame(data, 1000 * i, len(data), len(data), LINKTYPE_ETHERNET, 0))
    assert generated(frames, "tree") == reference(frames, "tree")
    assert "arrived out of order" in generated(frames, "tree")[0]
    texts = generated(frames)
    assert texts == reference(frames)
    assert '"aeth.selective": true' in texts[0]
    assert "aeth.selective" not in texts[1]
    assert [json.loads(t).get(k) for t, k in zip(texts[2:], (
        "aeth.syndrome.credit_count", "aeth.syndrome.timer",
        "aeth.syndrome.reserved_value"))] == [31, 12, 3]


def test_blocks_kept_by_bytes_tell_roce_v1_from_v2() -> None:
    """The same BTH under a GRH (RoCEv1) and under UDP (RoCEv2), and the same Ethernet
    header before both: each tree as the record's, whichever came first."""
    frames = []
    for i, version in enumerate((2, 1, 2, 1)):
        data = craft("RC_SEND_ONLY", b"x" * 5, roce_version=version, psn=7).to_bytes()
        frames.append(Frame(data, i, len(data), len(data), LINKTYPE_ETHERNET, 0))
    texts = generated(frames, "tree")
    assert texts == reference(frames, "tree")
    assert ["InfiniBand (RoCEv2)" in t for t in texts] == [True, False, True, False]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "tree"])
def test_command_output_equals_the_record_path(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, fmt: str) -> None:
    """``-T json`` and ``-V`` without a filter (generated text) and with one that keeps every
    frame (the record path) print the same bytes; ``-c`` stops both at the same frame."""
    path = tmp_path / "c.pcap"
    with PcapWriter(path) as w:
        for i, op in enumerate(["RC_SEND_ONLY", "RC_RDMA_WRITE_FIRST", "RC_ACKNOWLEDGE",
                                "RC_RDMA_READ_REQUEST", "UD_SEND_ONLY"]):
            w.write(craft(op, bytes(8 * i), **({"bth.psn": i})).to_bytes(), ts_ns=i * 1001)
        w.write(b"\x00" * 20, ts_ns=9999)  # not RoCE
    mode = ["-V"] if fmt == "tree" else ["-T", fmt]
    for extra in ([], ["-c", "3"]):
        capsys.readouterr()
        assert main(["decode", *mode, str(path), *extra]) == 0
        fast = capsys.readouterr().out
        assert main(["decode", *mode, str(path), "-Y", "frame.number > 0", *extra]) == 0
        assert capsys.readouterr().out == fast
        count = (fast.count("\nFrame ") + 1 if fmt == "tree" else
                 len(json.loads(fast)) if fmt == "json" else len(fast.splitlines()))
        assert count == (3 if extra else 6)


def test_member_rules_refuse_what_they_cannot_write() -> None:
    with pytest.raises(ValueError, match="no text output"):
        decode_text([], "csv")
    with pytest.raises(ValueError, match="kind 'set'"):
        output.json_member("x", "v", "set")
    with pytest.raises(ValueError, match="f-string"):
        output.json_member("a{b", "v", "int")
