"""UET's fast path against the family's Python: the one-line view in C
(``roce._fastpath.uet_lines``, tables from ``roce.families.uet.uetlines``) against ``dissect``,
``checks`` and ``present`` through ``records.carried_columns``, the same line for every frame
the C writes, on drawn frames of both readings, clean and with any field values, cut, with
bytes flipped, and random bytes on the UET port, every clean frame without a TSS header
written in C; the field reads in C (``uet_decode``) against ``dissect.decode``, the same
fields in the same order; the ``-V`` tree plans against ``tree_steps``; and ``roce decode``'s
one-liner the same with the C lines and without them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import roce
from roce import fast
from roce.cli import main
from roce.decoder import records
from roce.families import registry, uet
from roce.families.base.summary import Summarizer, TimeColumn
from roce.families.uet import build, dissect, present, uetlines
from roce.pcapio import Frame, PcapWriter
from roce.testing.strategies import UetCase, uet_cases

pytestmark = pytest.mark.skipif(uetlines.compiled() is None,
                                reason="the fast path extension is not built")

ARROW = "->"


@pytest.fixture(scope="module")
def readings() -> Iterator[dict[str, uetlines.UetLines]]:
    """The C formatter as each reading's registry rows make it (ref-prov: port 49150 by -d,
    then --uet-layout ref-prov), with the process-wide registry set so while it is used."""
    reg = registry()
    before = reg.lookup("udp.port", build.REF_PROV_PORT)
    made = {"spec": uetlines.UetLines(reg, ARROW, 4791)}
    try:
        reg.decode_as(f"udp.port=={build.REF_PROV_PORT},uet")
        uet.use_reading(reg, "ref-prov")
        made["ref-prov"] = uetlines.UetLines(reg, ARROW, 4791)
    finally:
        _restore(reg, before)
    yield made


def _restore(reg: Any, before: Any) -> None:
    uet.use_reading(reg, "spec")
    if before is None:
        reg.tables["udp.port"].pop(build.REF_PROV_PORT, None)
    else:
        reg.tables["udp.port"][build.REF_PROV_PORT] = before


class _Batch:
    linktype = 1

    def __init__(self, frames: list[tuple[bytes, int]]) -> None:
        self.datas = [f for f, _ in frames]
        self.origlen = [n for _, n in frames]


def _python_line(frame: bytes, origlen: int) -> str | None:
    """The line the Python path writes (after the time column), None if no family takes it."""
    fr = Frame(frame, 0, len(frame), origlen, 1, 0)
    w = fast.walk(frame, 1, 4791)
    cols, _res = records.carried_columns(fr, w, 4791, False)
    if cols is None or cols is records.HIDDEN:
        return None
    line = Summarizer(TimeColumn("r"), arrow=ARROW).line(1, "T", origlen, cols)
    return line.removeprefix("    1 T ")


def _compare(readings: dict[str, uetlines.UetLines], reading: str,
             frames: list[tuple[bytes, int]]) -> list[str | None]:
    """The C lines of ``frames`` (reading ``reading``'s rows), each equal to Python's."""
    made = readings[reading]
    got = made.rests(_Batch(frames))
    assert got is not None and len(got) == len(frames)
    reg = registry()
    before = reg.lookup("udp.port", build.REF_PROV_PORT)
    try:
        if reading == "ref-prov":
            reg.decode_as(f"udp.port=={build.REF_PROV_PORT},uet")
            uet.use_reading(reg, "ref-prov")
        for (frame, origlen), line in zip(frames, got):
            if line is not None:
                assert line == _python_line(frame, origlen), frame.hex()
    finally:
        _restore(reg, before)
    return got


_READING = st.sampled_from(["spec", "ref-prov"])


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(reading=_READING, data=st.data())
def test_clean_frames_are_all_written_in_c_as_python_writes_them(
        readings: dict[str, uetlines.UetLines], reading: str, data: st.DataObject) -> None:
    case: UetCase = data.draw(uet_cases(reading=reading, encrypted=False))
    got = _compare(readings, reading, [(case.frame, len(case.frame))])
    assert got[0] is not None  # no header cut short, no TSS: nothing left to Python


@settings(max_examples=examples(250), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(reading=_READING, data=st.data())
def test_any_field_values_cut_and_flipped_frames_read_as_python_reads_them(
        readings: dict[str, uetlines.UetLines], reading: str, data: st.DataObject) -> None:
    case: UetCase = data.draw(uet_cases(reading=reading, clean=False))
    frame = case.frame
    cut = data.draw(st.integers(0, 80))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(0, 255)),
                               max_size=3))
    flipped = bytearray(frame)
    for at, value in flips:
        if at >= 14:  # past Ethernet: IP, UDP (lengths, ports) and UET
            flipped[at] = value
    frames = [(frame, len(frame)), (frame[:max(len(frame) - cut, 0)], len(frame)),
              (bytes(flipped), len(frame))]
    got = _compare(readings, reading, frames)
    if not case.values.get("uet.tss"):
        assert got[0] is not None


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(reading=_READING, body=st.binary(max_size=96), native=st.booleans(),
       ipv6=st.booleans())
def test_random_bytes_on_uet_read_as_python_reads_them(
        readings: dict[str, uetlines.UetLines], reading: str, body: bytes, native: bool,
        ipv6: bool) -> None:
    port = build.REF_PROV_PORT if reading == "ref-prov" else build.UET_PORT
    frame = build.frame(body, native=native, ipv6=ipv6, dport=port)
    _compare(readings, reading, [(frame, len(frame)), (frame, len(frame) + 100)])


def _same_decoding(case: UetCase, raw: bytes) -> dissect.Decoded:
    """The family's decoder (C field reads) gives what dissect.decode gives: the same fields
    in the same order (JSON shows them so), layouts, layers, kind and error."""
    fast = uetlines.decoder(case.reading, case.native)(raw)
    slow = dissect.decode(raw, entropy=case.native, reading=case.reading)
    assert list(fast.fields.items()) == list(slow.fields.items())
    assert [type(v) for v in fast.fields.values()] == [type(v) for v in slow.fields.values()]
    assert (fast.headers, fast.layers, fast.kind, str(fast.error), fast.data) == \
        (slow.headers, slow.layers, slow.kind, str(slow.error), slow.data)
    return fast


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(reading=_READING, data=st.data())
def test_field_reads_in_c_are_dissects(reading: str, data: st.DataObject) -> None:
    case: UetCase = data.draw(uet_cases(reading=reading, clean=data.draw(st.booleans())))
    raw = build.uet_bytes(case.values, case.reading, case.payload, entropy=case.native)
    cut = data.draw(st.integers(0, len(raw)))
    for _ in range(2):  # the second runs dissect's plan of the first
        _same_decoding(case, raw)
        _same_decoding(case, raw[:cut])
        _same_decoding(case, raw[:-cut] + bytes(data.draw(st.binary(max_size=4))))
    assert uetlines.compiled().uet_decode(raw, uet.READING_NAMES.index(reading),
                                          case.native) is not None or \
        case.values.get("uet.tss") or "uet.ses.rsp.invalid_opcode" in \
        dissect.decode(raw, entropy=case.native, reading=case.reading).fields


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(reading=_READING, data=st.data())
def test_tree_plans_write_the_step_by_step_tree(reading: str, data: st.DataObject) -> None:
    """``-V``'s UET lines by the generated plans are ``tree_steps``' lines, for the first
    packet of a plan and the next, for cut packets and broken ones."""
    case: UetCase = data.draw(uet_cases(reading=reading, clean=data.draw(st.booleans())))
    raw = build.uet_bytes(case.values, case.reading, case.payload, entropy=case.native)
    cut = data.draw(st.integers(0, len(raw)))
    for packet in (raw, raw[:cut], raw[:cut] + bytes(data.draw(st.binary(max_size=8)))):
        d = uetlines.decoder(case.reading, case.native)(packet)
        for _ in range(2):
            assert present.tree(d, b"") == present.tree_steps(d, b"")


def test_frames_no_uet_row_claims_are_left_to_python(
        readings: dict[str, uetlines.UetLines]) -> None:
    data = build.uet_bytes({"uet.pds.psn": 7})
    frames = [roce.craft("RC_SEND_ONLY", b"abcd").to_bytes(), build.frame(data, dport=4000),
              build.frame(data), b"", b"\x00" * 20]
    got = readings["spec"].rests(_Batch([(f, len(f)) for f in frames]))
    assert got is not None
    assert [g is not None for g in got] == [False, False, True, False, False]
    assert got[2] == _python_line(frames[2], len(frames[2]))


def test_tables_come_from_the_family() -> None:
    """The chains the C follows are the family's rule; a reading's names its tables."""
    from roce.families.uet import codes as t
    from roce.families.uet.layouts import READINGS, pds_chain

    tab = uetlines.tables()
    for i, name in enumerate(uet.READING_NAMES):
        r, rd = READINGS[name], tab["readings"][i]
        by_id = {j: lay["key"] for j, lay in enumerate(tab["layouts"])}
        special = {uetlines.CHAIN_ACK_CC: "ack.cc"}
        for typ, flags in ((t.RUD_REQ, 0), (t.RUD_REQ, 4), (t.ACK_CC, 0), (t.CTRL, 4)):
            at = (typ * 128 + flags) * uetlines.MAX_CHAIN
            chain = [b for b in rd["pds_chain"][at:at + uetlines.MAX_CHAIN]
                     if b != uetlines.CHAIN_END]
            assert tuple(special.get(b) or by_id[b] for b in chain) == \
                pds_chain(typ, flags, r)
        assert rd["ses_names"][0x10] == (b"SYNC_WRITE" if name == "ref-prov" else
                                         b"Unknown(16)")


def _write(path: Path, frames: list[bytes]) -> Path:
    with PcapWriter(path) as w:
        for i, f in enumerate(frames):
            w.write(f, ts_ns=1_700_000_000_000_000_000 + i * 1000)
    return path


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(uet_cases(clean=False), st.integers(0, 24)), min_size=1,
                max_size=8))
def test_decode_one_line_is_the_same_with_and_without_the_c_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        cases: list[tuple[UetCase, int]]) -> None:
    """``roce decode``'s one-liner, batch by batch through the C lines, prints what it prints
    with them turned off (numbers, times, RoCE frames between, cut frames)."""
    frames = [c.frame[:len(c.frame) - cut] for c, cut in cases]
    frames.insert(len(frames) // 2, roce.craft("RC_SEND_ONLY", b"abcd").to_bytes())
    p = _write(tmp_path / "lines.pcap", frames)
    assert main(["decode", str(p)]) == 0
    with_c = capsys.readouterr().out
    with monkeypatch.context() as m:
        m.setattr(uetlines.UetLines, "enabled", property(lambda self: False))
        assert main(["decode", str(p)]) == 0
        without = capsys.readouterr().out
    assert with_c == without and with_c.count("\n") == len(frames)
