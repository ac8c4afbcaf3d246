"""The flow rules' one definition (roce.analysis.flowrules) and what follows from it: folded
retransmission bursts, goodput against throughput (also against the emulator's own figure),
the flow engine written once (flowref.py, interpreted and compiled: it raises exactly the
event kinds the table has, its compiled form is the build of that file or stands aside, its C
declarations match it, it runs without Cython), and the flow modules' imports (no reaching
into another module's private names)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_stats import (
    ENGINES,
    QA,
    ack,
    flow,
    lines,
    read_req,
    read_resp,
    write_capture,
    write_only,
)

from roce import _compiled
from roce.analysis import cflows, flowref
from roce.analysis import flowrules as R
from roce.analysis.cflows import AVAILABLE
from roce.analysis.flows import analyse, make_analyzer
from roce.headers import AETH_ACK, AETH_NAK, AETH_RNR_NAK, syndrome
from roce.pcapio import Frame, open_capture

ROOT = Path(__file__).resolve().parent.parent
ANALYSIS = ROOT / "roce" / "analysis"


@pytest.fixture(params=ENGINES)
def run(request: pytest.FixtureRequest, tmp_path: Path):
    def go(frames: list[bytes], **kw: object):
        path = write_capture(tmp_path / "t.pcap", frames)
        with open_capture(path) as rd:
            return analyse(rd, engine=request.param, **kw)

    return go


# -- retransmission bursts ---------------------------------------------------------------------


def test_consecutive_retransmissions_fold_into_one_line_per_burst(run) -> None:
    # 0..9 sent; go back to 3 and resend 3..9 (a burst), 10, 11 new; then 10, 11 again
    # (a second burst), and a repeat of 5 alone (a third line, not contiguous).
    psns = [*range(10), *range(3, 10), 10, 11, 10, 11, 5]
    r = run([write_only(p) for p in psns])
    assert lines(r) == [
        "#11-#17 QP 0x000011 retransmission of PSN 0x000003..0x000009, 7 packets",
        "#20-#21 QP 0x000011 retransmission of PSN 0x00000a..0x00000b, 2 packets",
        "#22 QP 0x000011 retransmission of PSN 0x000005",
    ]
    assert [(e.count, e.last) for e in r.events] == [(7, 17), (2, 21), (1, 0)]
    # Exact counts stay: in the expert counts, the totals and the tracker.
    assert r.event_counts == {"retransmission": 10}
    assert r.event_lines == {"retransmission": 3}
    assert r.totals["retransmissions"] == 10 == flow(r).req.counts()["duplicates"]
    d = r.to_dict()["expert"]
    assert d["counts"] == {"retransmission": 10} and d["lines"] == {"retransmission": 3}
    assert d["by_severity"]["warning"] == 10
    assert d["events"][0]["count"] == 7 and d["events"][0]["last_frame"] == 17
    assert d["events"][2]["count"] == 1 and d["events"][2]["last_frame"] == 22


def test_a_burst_ends_at_any_other_packet_of_its_tracker(run) -> None:
    # 3, 4 resent, then a new PSN 6 (a gap: 5 missing), then 4 again: two bursts around it.
    r = run([write_only(p) for p in (0, 1, 2, 3, 4, 3, 4, 6, 4)])
    assert lines(r) == [
        "#6-#7 QP 0x000011 retransmission of PSN 0x000003..0x000004, 2 packets",
        "#8 QP 0x000011 PSN gap: expected 0x000005, got 0x000006 (1 missing)",
        "#9 QP 0x000011 retransmission of PSN 0x000004",
    ]


def test_packets_of_other_flows_do_not_end_a_burst(run) -> None:
    # The ACKs between the resent packets go the other way: one burst.
    frames = [write_only(p) for p in range(4)]
    frames += [write_only(1), ack(1), write_only(2), ack(2), write_only(3)]
    r = run(frames)
    assert lines(r) == ["#5-#9 QP 0x000011 retransmission of PSN 0x000001..0x000003, "
                        "3 packets"]


def test_response_retransmissions_fold_and_say_response(run) -> None:
    resp = read_resp(10, 3000)  # PSNs 10, 11, 12
    r = run([read_req(10, 3000), *resp, *resp])
    assert lines(r) == ["#5-#7 QP 0x000012 retransmission of response PSN "
                        "0x00000a..0x00000c, 3 packets"]
    assert flow(r, QA).rsp.counts()["duplicates"] == 3


def test_the_line_cap_counts_lines_not_packets(run) -> None:
    psns = [*range(6), *range(0, 6), *range(2, 6)]  # two bursts of 6 and 4
    r = run([write_only(p) for p in psns], max_events=1)
    assert lines(r) == ["#7-#12 QP 0x000011 retransmission of PSN 0x000000..0x000005, "
                        "6 packets"]
    assert r.event_counts == {"retransmission": 10} and r.event_lines == {"retransmission": 2}


# -- goodput and throughput ------------------------------------------------------------------


def test_goodput_counts_each_psn_once_throughput_every_byte(run) -> None:
    # Ten 100-byte WRITEs, 4..9 resent once: 1000 unique bytes, 1600 carried.
    r = run([write_only(p) for p in [*range(10), *range(4, 10)]])
    f = flow(r)
    assert (f.payload, f.unique_payload, f.req_payload) == (1600, 1000, 1600)
    span = 15 * 1000  # frames 1..16, 1 us apart
    assert f.goodput == pytest.approx(1000 * 1e9 / span)
    assert f.throughput == pytest.approx(1600 * 1e9 / span)
    t = r.totals
    assert (t["payload_bytes"], t["unique_payload_bytes"]) == (1600, 1000)
    assert t["goodput_Bps"] == pytest.approx(1000 * 1e9 / span)
    assert t["throughput_Bps"] == pytest.approx(1600 * 1e9 / span)
    d = r.to_dict()["flows"][0]
    assert d["unique_payload_bytes"] == 1000 and d["goodput_Bps"] == f.goodput
    assert d["throughput_Bps"] == f.throughput


def test_goodput_counts_read_response_data_once(run) -> None:
    resp = read_resp(10, 3000)
    r = run([read_req(10, 3000), *resp, resp[1], resp[2]])  # Middle and Last resent
    back = flow(r, QA)
    assert (back.payload, back.unique_payload) == (3000 + 1024 + 952, 3000)
    assert back.goodput is not None and back.throughput > back.goodput


def test_stats_text_shows_goodput_and_throughput(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from roce.cli import main as cli_main

    path = write_capture(tmp_path / "g.pcap", [write_only(p) for p in [*range(10), 8, 9]])
    assert cli_main(["stats", str(path)]) == 0
    out = capsys.readouterr().out
    # 1000 unique bytes, 1200 carried, over 11 us.
    assert re.search(r"goodput\s+90\.91 MB/s \(727\.27 Mbit/s\)", out)
    assert re.search(r"throughput\s+109\.09 MB/s \(872\.73 Mbit/s\)", out)
    assert re.search(r"unique payload bytes\s+1,000\n", out)
    assert "#11-#12 QP 0x000011 retransmission of PSN 0x000008..0x000009, 2 packets" in out


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roce", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=True)


def test_stats_goodput_matches_the_emulators(tmp_path: Path) -> None:
    """The emulator's verified goodput and `roce stats`' goodput of the capture it wrote agree
    within 1%, although about half the data packets on the wire are retransmissions."""
    emu = json.loads(_cli("emulate", "--op", "write", "--size", "1M", "--count", "20",
                          "--loss", "0.01", "--seed", "7", "-w", "run.pcap", "-T", "json",
                          "--no-progress", cwd=tmp_path).stdout)
    assert emu["data_verified"] and emu["retransmitted"] > 1000
    doc = json.loads(_cli("stats", "-T", "json", "run.pcap", cwd=tmp_path).stdout)
    t = doc["totals"]
    assert t["unique_payload_bytes"] == emu["bytes"] == 20 * (1 << 20)
    goodput_gbps = t["goodput_Bps"] * 8 / 1e9
    assert goodput_gbps == pytest.approx(emu["goodput_gbps"], rel=0.01)
    assert t["throughput_Bps"] > 1.5 * t["goodput_Bps"]  # retransmissions carried too
    # One line per burst, exact counts beside them; the reference agrees line for line.
    ex = doc["expert"]
    assert ex["counts"]["retransmission"] == t["retransmissions"] > 1000
    assert ex["lines"]["retransmission"] < ex["counts"]["retransmission"] / 10
    with open_capture(tmp_path / "run.pcap") as rd:
        ref = analyse(rd, engine="reference").to_dict()
    assert ref["totals"] == t and ref["expert"] == ex


# -- one definition ----------------------------------------------------------------------------


def test_syndrome_and_nak_rules_come_from_the_headers_helpers() -> None:
    assert R.SYNDROMES[syndrome(AETH_ACK, 31)] == (R.SYN_ACK, 31)
    assert R.SYNDROMES[syndrome(AETH_RNR_NAK, 14)] == (R.SYN_RNR, 14)
    assert R.SYNDROMES[syndrome(AETH_NAK, 2)] == (R.SYN_NAK, 2)
    assert R.SYNDROMES[syndrome(2, 5)] == (R.SYN_RESERVED, 5)
    assert R.nak_event(0) == "nak_sequence" and R.nak_event(3) == "nak_fatal"
    assert R.SYNDROMES[0x80 | syndrome(AETH_ACK, 1)] == (R.SYN_ACK, 1)  # bit 7 reserved


def _raised(source: str) -> set[str]:
    """Event kinds a source raises by name: ``_event(.., "kind"`` and ``_stored("kind"``."""
    return set(re.findall(r'_(?:event|stored)\([^()"]*"(\w+)"', source))


def test_the_engine_raises_exactly_the_kinds_the_table_has() -> None:
    """flowref.py is the flow engine in both forms (the compiled one is built from it,
    below): it raises every kind of the table, and no other.  No second copy of the rules
    is left to raise them (the hand-written C engine the fast path once included)."""
    table = {e.name for e in R.EVENTS if e.engine}
    naks = {R.nak_event(c) for c in range(R.SYNDROME_VALUES)}  # raised by the NAK rule
    assert _raised((ANALYSIS / "flowref.py").read_text()) | naks == table
    assert not list((ROOT / "roce").rglob("_flowengine*.pxi"))
    assert "_flowengine" not in (ROOT / "roce" / "_fastpath.pyx").read_text()


@pytest.mark.skipif(not AVAILABLE, reason="compiled flow engine not built")
def test_the_compiled_engine_is_the_build_of_flowref() -> None:
    """The compiled engine runs only when built from the flowref.py and _flowengine.pxd now
    in the tree (the build records their hashes), and it is that module compiled."""
    from roce.analysis import _flowengine

    assert cflows.STALE == [] == _compiled.stale_twin(cflows.MODULE)
    assert _flowengine.__doc__ == flowref.__doc__  # Cython keeps the module's docstring
    a = make_analyzer(engine="compiled")
    assert type(a).__module__ == "roce.analysis._flowengine" and type(a).__name__ == "Analyzer"
    assert type(make_analyzer(engine="reference")) is flowref.Analyzer
    assert type(make_analyzer()) is type(a)  # "auto"


def _python(code: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_an_edited_engine_runs_interpreted_with_a_warning() -> None:
    """A flowref.py (or _flowengine.pxd) that differs from what the build compiled is never
    run from the stale build: "auto" takes the interpreted form, with one warning, and
    "compiled" refuses."""
    code = """if True:
        import warnings
        from roce import _compiled
        real = _compiled._built
        def edited():
            built = dict(real())
            built["roce.analysis._flowengine"] = {"roce/analysis/flowref.py": "0" * 64}
            return built
        _compiled._built = edited
        _compiled.built_twin = lambda name: True  # as if built, whether or not it is here
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from roce.analysis import cflows, flowref
            from roce.analysis.flows import make_analyzer
        print([str(w.message) for w in caught if "flow analysis" in str(w.message)])
        print(cflows.AVAILABLE, cflows.STALE, type(make_analyzer()) is flowref.Analyzer)
        try:
            make_analyzer(engine="compiled")
        except Exception as exc:
            print(type(exc).__name__, exc)
    """
    out = _python(code)
    assert out.returncode == 0, out.stderr
    warned, state, refused = out.stdout.splitlines()
    assert "roce/analysis/flowref.py, roce/analysis/_flowengine.pxd edited after the build" \
        in warned
    assert state == "False ['roce/analysis/flowref.py', 'roce/analysis/_flowengine.pxd'] True"
    assert refused.startswith("UsageError the compiled flow engine is not available "
                              "(edited after the build)")


@pytest.mark.parametrize("missing", ["cython", "roce._fastpath"])
def test_the_engine_runs_without_cython_or_the_fast_path(tmp_path: Path, missing: str) -> None:
    """Cython is needed to build, not to run: with no ``cython`` module to import, flowref.py
    runs on its own small stand-in.  Without the fast path (not built) there is no compiled
    engine either, and flowref.py runs on the fast path's Python twins (the walk, the ICRC,
    ``roce.psn.PSNTracker``).  Either way the report is the one this process makes."""
    frames = [write_only(p) for p in (0, 1, 2, 5, 3, 3, 4, 6)] + [ack(6)]
    path = write_capture(tmp_path / "t.pcap", frames)
    code = f"""if True:
        import json, sys, warnings
        warnings.simplefilter("ignore")
        sys.modules[{missing!r}] = None  # its import raises ImportError
        from roce.analysis import cflows
        from roce.analysis.flows import analyse
        from roce.pcapio import open_capture
        from roce.analysis import flowref
        print(cflows.AVAILABLE, flowref.cython.compiled, type(flowref.cython).__name__)
        for engine in ("reference", "auto"):
            with open_capture({str(path)!r}) as rd:
                print(json.dumps(analyse(rd, engine=engine).to_dict()))
    """
    out = _python(code)
    assert out.returncode == 0, out.stderr
    state, *reports = out.stdout.splitlines()
    shim = "SimpleNamespace" if missing == "cython" else "module"
    assert state == f"{AVAILABLE and missing == 'cython'} False {shim}"
    with open_capture(path) as rd:
        want = json.loads(json.dumps(analyse(rd).to_dict()))
    assert [json.loads(r) for r in reports] == [want, want] and want["totals"]["gaps"] == 1


def test_a_table_outgrowing_the_engines_arrays_stops_both_forms() -> None:
    """The compiled form holds flowrules' tables in C arrays sized in flowref.py: a table
    that outgrows them stops the import of either form, with the same error, instead of
    running on a cut table."""
    code = """if True:
        import importlib, sys
        from roce.analysis import flowrules as R
        R.EVENTS = R.EVENTS * 3  # more event kinds than the engine has room for
        for name in sys.argv[1:]:
            try:
                importlib.import_module(name)
            except ValueError as exc:
                print(name, exc)
    """
    names = ["roce.analysis.flowref"] + (["roce.analysis._flowengine"] if AVAILABLE else [])
    out = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{n} flow engine: a flowrules table outgrew its arrays "
                                       "(flowref.py and _flowengine.pxd size them)"
                                       for n in names]


def _pxd() -> str:
    return (ANALYSIS / "_flowengine.pxd").read_text()


def test_the_declarations_match_the_source() -> None:
    """_flowengine.pxd declares what flowref.py holds: each class's attributes are its
    ``__slots__`` (the interpreted form refuses an attribute the compiled one has no room
    for), every C array is as long as the table the source builds for it, and every table
    and number of the source is declared (an undeclared one would run as a Python object in
    the compiled form: correct, but slow)."""
    pxd = _pxd()
    classes = dict(re.findall(r"\ncdef class (\w+):\n((?:    .*\n|\n)+)", pxd))
    assert set(classes) == {"_Path", "_Held", "_Msgs", "_Ring", "_Hist", "_Timing", "_Flow",
                            "Analyzer"}
    assert len(_arrays(pxd)) > 40
    for name, body in classes.items():
        attrs = [a for decl in re.findall(r"^    cdef (?:readonly |public )?[^(\n]+$", body,
                                            re.M)
                 for a in _names(decl)]
        assert sorted(attrs) == sorted(getattr(flowref, name).__slots__), name
    ref = flowref.Analyzer()
    ref.feed([write_only(0)])
    flow = ref.flows[0]
    for owner, name, size in _arrays(pxd):
        obj = {"Analyzer": ref, "_Flow": flow}.get(owner, flowref)
        assert len(getattr(obj, name)) == size, (owner, name)
    tables = {n for n in vars(flowref) if re.fullmatch(r"_[A-Z][A-Z0-9_]*", n)}
    declared = {n for decl in re.findall(r"^cdef [^(\n]+$", pxd, re.M) for n in _names(decl)}
    assert tables <= declared, tables - declared


def _names(decl: str) -> list[str]:
    """The names a ``cdef`` declaration line declares (``cdef int64_t a[3], b`` -> a, b)."""
    decl = re.sub(r"\[[\d:]+\]", "", decl.split("#")[0])
    first, *rest = decl.split(",")
    return [first.split()[-1], *(r.strip() for r in rest)]


def _arrays(pxd: str) -> list[tuple[str, str, int]]:
    """(class or "", name, length) of every C array the declarations hold."""
    out, owner = [], ""
    for line in pxd.splitlines():
        m = re.match(r"(?:@cython.final\s*)?cdef class (\w+):", line)
        if m:
            owner = m.group(1)
        elif not line.startswith(" ") and line.strip():
            owner = ""
        if re.match(r"\s*cdef [^(]+\[\d+\]", line):
            out += [(owner, n, int(k)) for n, k in re.findall(r"(\w+)\[(\d+)\]", line)]
    return out


def test_times_and_byte_counts_past_64_bits_stop_both_engines() -> None:
    """Times and byte counts are 64-bit integers in C: past that, both forms stop with
    ``OverflowError`` rather than the compiled one wrapping."""
    frame = write_only(0)
    for engine in ([e.values[0] for e in ENGINES]):
        if engine == "compiled" and not AVAILABLE:
            continue
        with pytest.raises(OverflowError):
            analyse([Frame(frame, 1 << 64, len(frame), len(frame), 1, 0)], engine=engine)
        big = [Frame(frame, t, len(frame), 1 << 62, 1, 0) for t in range(3)]
        with pytest.raises(OverflowError, match="passed 2\\^63 - 1"):
            analyse(big, engine=engine)
        ok = analyse(big[:1], engine=engine)
        assert ok.totals["bytes"] == 1 << 62


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module of roce.analysis imported, names taken from it) for each import."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("roce.analysis."):
                out.append((node.module.rpartition(".")[2], [a.name for a in node.names]))
            elif node.module == "roce.analysis":
                out += [(a.name, []) for a in node.names]
    return out


FLOW_MODULES = ("flows", "flowrules", "flowmodel", "flowref", "flowpair", "flowinput",
                "cflows")


def test_flow_modules_reach_no_private_name() -> None:
    """(Cycles are tests/test_imports.py's: it walks every module.)"""
    graph = {}
    for name in FLOW_MODULES:
        deps = _imports(ANALYSIS / f"{name}.py")
        graph[name] = {m for m, _ in deps if m in FLOW_MODULES}
        private = [(m, n) for m, names in deps for n in names if n.startswith("_")]
        assert private == [], (name, private)
        src = (ANALYSIS / f"{name}.py").read_text()
        assert not re.search(r"\b(?:fl|flows|flowref|flowmodel|R)\._[a-z]", src), name
    assert "flows" not in graph["cflows"]  # the compiled engine does not lean on the facade


def test_totals_of_several_captures_keep_goodput_and_throughput_apart() -> None:
    from roce.cli._fleet import sum_totals

    one = analyse([write_only(p) for p in [*range(10), *range(4, 10)]]).totals
    two = dict(one, first_ns=one["last_ns"], last_ns=one["last_ns"] + 10_000)
    both = sum_totals([one, two])
    assert (both["unique_payload_bytes"], both["payload_bytes"]) == (2000, 3200)
    span = both["last_ns"] - both["first_ns"]
    assert both["goodput_Bps"] == pytest.approx(2000 * 1e9 / span)
    assert both["throughput_Bps"] == pytest.approx(3200 * 1e9 / span)
