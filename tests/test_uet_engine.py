"""The UET PDC engine written once (roce/analysis/uetref.py): its byte reader agrees with the
family's dissector on drawn traffic in both readings (cut frames, both carriages, IPv4 and
IPv6), its compiled form (roce.analysis._uetengine) with its interpreted one, clean packets
never reach the dissector, and the compiled form's declarations match the source."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_uet_stats import pdc_frames

from roce import _compiled
from roce.analysis import uetflows, uetref
from roce.analysis.uetflows import AVAILABLE, make_engine
from roce.errors import UsageError
from roce.families import registry
from roce.families.uet import IPPROTO_UET, REF_PROV_PORT, build
from roce.families.uet import codes as t
from roce.testing.strategies import uet_cases

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("reference", "compiled") if AVAILABLE else ("reference",)
ADDRS = {False: ("10.0.0.1", "10.0.0.2"), True: ("fd00::1", "fd00::2")}
_PSNS = st.one_of(st.integers(0, 12), st.integers(0xFFFFFFF4, 0xFFFFFFFF))  # and the wrap


@st.composite
def traffic(draw: st.DrawFn, reading: str) -> list[tuple[bytes, int]]:
    """(frame, length on the wire): UET packets of either reading between two hosts with two
    PDC IDs and PSNs close together (so that PDCs, messages and SACKs meet), any field
    values else, some cut short."""
    out = []
    # ACKs and requests more often than any type at random: they carry most of the rules
    types = st.one_of(st.none(), st.sampled_from(sorted(t.ACKS)), st.sampled_from(sorted(
        t.REQUESTS)))
    for c in draw(st.lists(types.flatmap(lambda typ: uet_cases(
            pds_type=typ, reading=reading, clean=False, max_payload=48)),
            min_size=1, max_size=14)):
        v = dict(c.values)
        for k in ("uet.pds.spdcid", "uet.pds.dpdcid"):
            if k in v:
                v[k] = draw(st.sampled_from((1, 2)))
        for k in ("uet.pds.psn", "uet.pds.cack_psn", "uet.pds.nack.psn"):
            if k in v:
                v[k] = draw(_PSNS)
        if "uet.ses.std.message_id" in v:
            v["uet.ses.std.message_id"] = draw(st.integers(0, 2))
        ipv6, forward = draw(st.booleans()), draw(st.booleans())
        src, dst = ADDRS[ipv6] if forward else ADDRS[ipv6][::-1]
        frame = build.frame(build.uet_bytes(v, c.reading, c.payload, entropy=c.native),
                            native=c.native, ipv6=ipv6, src=src, dst=dst,
                            dport=REF_PROV_PORT if reading == "ref-prov" else build.UET_PORT)
        cut = draw(st.integers(0, 40)) if draw(st.integers(0, 4)) == 0 else 0
        out.append((frame[:max(len(frame) - cut, 14)], len(frame)))
    return out


def _report(frames: list[tuple[bytes, int]], engine: str, fast: bool) -> tuple[Any, Any]:
    e = make_engine(4791, engine=engine, fast=fast)
    taken = [e.frame(i + 1, i * 1000, f, 1, n) for i, (f, n) in enumerate(frames)]
    return taken, e.to_dict()


@pytest.fixture
def ref_prov_rows() -> Any:
    """UDP 49150 and IP protocol 253 read as the reference provider's (then back)."""
    reg = registry()
    reg.map("udp.port", REF_PROV_PORT, "uet-ref-prov")
    reg.map("ip.proto", IPPROTO_UET, "uet-ref-prov.entropy")
    yield
    reg.tables["udp.port"].pop(REF_PROV_PORT, None)
    reg.map("ip.proto", IPPROTO_UET, "uet.entropy")


def _agree(frames: list[tuple[bytes, int]]) -> None:
    want = _report(frames, "reference", False)  # every packet through the dissector
    for engine in ENGINES:
        assert _report(frames, engine, True) == want, engine
        assert _report(frames, engine, False) == want, engine


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic("spec"))
def test_the_byte_reader_agrees_with_the_dissector(frames: list[tuple[bytes, int]]) -> None:
    """Every PDC counter, PSN list, NACK and control name, message and rate is what the
    dissector's fields give, in both forms of the engine."""
    _agree(frames)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(traffic("ref-prov"))
def test_the_byte_reader_agrees_in_the_reference_providers_reading(
        ref_prov_rows: Any, frames: list[tuple[bytes, int]]) -> None:
    _agree(frames)


@pytest.mark.parametrize("engine", ENGINES)
def test_clean_packets_are_read_from_their_bytes(monkeypatch: pytest.MonkeyPatch,
                                                  engine: str) -> None:
    """The PDC of test_uet_stats (a lost packet, a trim, a SACK gap, retransmissions) is read
    without the dissector: the same report as through it."""
    frames = [(f, len(f)) for f in pdc_frames()]
    want = _report(frames, "reference", False)
    module = uetref if engine == "reference" else sys.modules["roce.analysis._uetengine"]

    def no(*args: Any) -> None:
        raise AssertionError("the dissector was asked")

    monkeypatch.setattr(module.dispatch, "resolve", no)
    assert _report(frames, engine, True) == want
    with pytest.raises(AssertionError, match="dissector was asked"):
        _report(frames, engine, False)


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(UsageError, match="unknown UET analysis engine"):
        make_engine(4791, engine="fastest")


def _declared(pxd: str) -> dict[str, set[str]]:
    """Attributes of each ``cdef class`` of a .pxd (not its methods)."""
    out: dict[str, set[str]] = {}
    name = None
    for line in pxd.splitlines():
        m = re.match(r"cdef class (\w+):", line)
        if m:
            name = m.group(1)
            out[name] = set()
        elif name and line.startswith("    cdef ") and "(" not in line:
            decl = re.sub(r"^    cdef (public |readonly )?", "", line)
            words = decl.split(None, 1) if not decl.startswith("const ") else ["", decl]
            names = words[1] if len(words) > 1 else ""
            out[name] |= {n.strip() for n in names.split(",")}
        elif line and not line.startswith(" "):
            name = None if not line.startswith("@") else name
    return out


def test_the_pxd_declares_the_slots() -> None:
    """Every extension type holds exactly its class's __slots__, so the interpreted form
    refuses an attribute the compiled one has no room for."""
    declared = _declared((ROOT / "roce" / "analysis" / "_uetengine.pxd").read_text())
    assert set(declared) == {"_Pds", "_Ses", "_Msg", "Pdc", "Engine"}
    for cls, attrs in declared.items():
        assert attrs == set(getattr(uetref, cls).__slots__), cls


@pytest.mark.skipif(not AVAILABLE, reason="compiled UET engine not built")
def test_the_compiled_engine_is_the_build_of_uetref() -> None:
    from roce.analysis import _uetengine

    assert uetflows.STALE == [] == _compiled.stale_twin(uetflows.MODULE)
    assert _uetengine.__doc__ == uetref.__doc__  # Cython keeps the module's docstring
    e = make_engine(4791, engine="compiled")
    assert type(e).__module__ == "roce.analysis._uetengine" and type(e).__name__ == "Engine"
    assert type(make_engine(4791, engine="reference")) is uetref.Engine
    assert type(make_engine(4791)) is type(e)  # "auto"


def test_an_edited_engine_runs_interpreted_with_a_warning() -> None:
    """A uetref.py that differs from what the build compiled is never run from the stale
    build: "auto" takes the interpreted form, with one warning, and "compiled" refuses."""
    code = """if True:
        import warnings
        from roce import _compiled
        real = _compiled._built
        def edited():
            built = dict(real())
            built["roce.analysis._uetengine"] = {"roce/analysis/uetref.py": "0" * 64}
            return built
        _compiled._built = edited
        _compiled.built_twin = lambda name: True
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from roce.analysis import uetflows, uetref
        print([str(w.message) for w in caught if "UET analysis" in str(w.message)])
        print(uetflows.AVAILABLE, type(uetflows.make_engine(4791)) is uetref.Engine)
        try:
            uetflows.make_engine(4791, engine="compiled")
        except Exception as exc:
            print(type(exc).__name__, exc)
    """
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    warned, state, refused = out.stdout.splitlines()
    assert "roce/analysis/uetref.py, roce/analysis/_uetengine.pxd edited after the build" \
        in warned
    assert state == "False True"
    assert refused.startswith("UsageError the compiled UET engine is not available "
                              "(edited after the build)")


@pytest.mark.parametrize("reading", ["spec", "ref-prov"])
def test_every_ack_type_and_cc_type(ref_prov_rows: Any, reading: str) -> None:
    """Each ACK type with each CC type (NSCC, credit, one no layout reads), SACK bits past
    the cumulative ACK, marked or not: the byte reader's report is the dissector's, NSCC
    state read only where an NSCC state is."""
    from roce.families.uet.layouts import READINGS

    r = READINGS[reading]
    frames = []
    for i, (typ, cc) in enumerate((a, c) for a in sorted(t.ACKS) for c in (0, 1, 5)):
        v = build.with_defaults({"uet.pds.type": typ, "uet.pds.cack_psn": 100 + i,
                                 "uet.pds.spdcid": 2, "uet.pds.dpdcid": 1,
                                 "uet.pds.flags.m": bool(i & 1), "uet.pds.ack.cc_type": cc,
                                 "uet.pds.ack.sack_psn_offset": 1,
                                 "uet.pds.ack.sack_bitmap": 0b1011}, r)
        f = build.frame(build.uet_bytes(v, r), src="10.0.0.2", dst="10.0.0.1",
                        dport=REF_PROV_PORT if reading == "ref-prov" else build.UET_PORT)
        frames.append((f, len(f)))
    want = _report(frames, "reference", False)
    assert want[1]["pdcs"][0]["nscc"]["acks"] >= 1 and want[1]["pdcs"][0]["sack_holes"] >= 1
    for engine in ENGINES:
        assert _report(frames, engine, True) == want, engine


def test_a_layout_without_a_field_the_rules_read_is_refused() -> None:
    """Where the fields are comes from the family's layouts: a reading whose request layout
    lost the PSN stops the engine at the first such packet instead of being read wrongly."""
    import dataclasses

    from roce.families.uet.layouts import SPEC

    broken = dataclasses.replace(SPEC, headers={**SPEC.headers, "rud_rod": SPEC.headers["uud"]})
    with pytest.raises(ValueError, match="lack a field the analysis reads"):
        uetref._Pds(broken, t.RUD_REQ, 0)
    assert uetref._Pds(SPEC, t.RUD_REQ, 0).size == 12  # prologue 2 + RUD/ROD 10


def test_roce_stats_on_roce_alone_never_loads_the_uet_engine(tmp_path: Path) -> None:
    """The engine (either form) and the UET layouts it reads are imported at the first frame
    that is not RoCE: a RoCE capture's `roce stats` starts without them."""
    code = f"""if True:
        import contextlib, io, sys
        import roce
        from roce.cli import main
        from roce.pcapio import PcapWriter
        with PcapWriter({str(tmp_path / "rc.pcap")!r}) as w:
            for i in range(3):
                w.write(roce.craft("RC_SEND_ONLY", b"x", psn=i).to_bytes(), ts_ns=i)
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["stats", {str(tmp_path / "rc.pcap")!r}]) == 0
        print(sorted(m for m in ("roce.analysis.uetref", "roce.analysis._uetengine",
                                 "roce.families.uet.layouts") if m in sys.modules))
    """
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
