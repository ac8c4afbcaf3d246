"""`roce stats` on native InfiniBand (link type 247, ERF 197): the walk's LRH / LRH+GRH kinds
in both twins, flows keyed by LIDs (and GIDs), ICRC and VCRC checked, and the same flow
counters as the RoCE capture the IB one was converted from (roce.families.craft.to_ib): IP
ECN CE becomes the BTH FECN, and congestion figures, snapped frames' payload included, come
out as the RoCE capture's."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples
from test_stats import traffic

import roce
from roce import fast, locate
from roce.analysis.ccstats import CcReport
from roce.analysis.cflows import AVAILABLE
from roce.analysis.flowrules import C_ACK, C_CNP, OPINFO
from roce.analysis.flows import analyse
from roce.cli import main
from roce.families import craft, erf
from roce.families.ib import native as ib
from roce.headers import ECN_CE
from roce.icrc import icrc_at
from roce.pcapio import Frame, PcapWriter, open_capture

IB = locate.LINKTYPE_INFINIBAND
WALK = locate.WALK_INFINIBAND
compiled = pytest.mark.skipif(not AVAILABLE, reason="fast path not built")


def _gid(lid: int) -> bytes:
    return bytes.fromhex("fe80000000000000") + lid.to_bytes(8, "big")


def _set_bth_flag(frame: bytes, bth_off: int, name: str) -> bytes:
    """``frame`` with BTH flag ``name`` (fecn, becn) set: the ICRC masks both (IBA 7.8.1)."""
    off, n, shift, mask = locate.SPECS[("bth", name)]
    assert n == 1
    buf = bytearray(frame)
    buf[bth_off + off] |= mask << shift
    return bytes(buf)


def to_ib(frame: bytes, lids: dict[bytes, int], grh: bool = False,
          becn: bool = False) -> bytes:
    """A RoCEv2 frame as native InfiniBand: the same BTH, headers and payload; the LIDs
    numbered per IP address in order of appearance (and GIDs from them with ``grh``).  An IP
    ECN CE mark becomes the BTH FECN (the IB switch's mark); ``becn`` sets BECN."""
    w = locate.walk(frame)
    spec = locate.SPECS
    off, n, shift, mask = spec[("ip", "dsfield.ecn")]
    if (int.from_bytes(frame[w.l3_off + off:w.l3_off + off + n], "big") >> shift) & mask \
            == ECN_CE:
        frame = _set_bth_flag(frame, w.bth_off, "fecn")
    if becn:
        frame = _set_bth_flag(frame, w.bth_off, "becn")
    src, dst = (frame[w.l3_off + o:w.l3_off + o + 4] for o in (12, 16))
    slid, dlid = (lids.setdefault(a, len(lids) + 1) for a in (src, dst))
    if not grh:
        return craft.to_ib(frame, argparse.Namespace(vl=0, sl=0, slid=slid, dlid=dlid))
    head = bytearray(8)
    nxt = spec[("grh", "nxthdr")]
    head[nxt[0]] = locate.GRH_NEXT_BTH
    head[0] = 0x60
    g = bytes(head) + _gid(slid) + _gid(dlid)
    return ib.build(craft.ib_transport(frame, w.bth_off, w.icrc_off), lnh=ib.LNH_GLOBAL,
                    grh=g, slid=slid, dlid=dlid)


def _write(path: Path, frames: list[tuple[bytes, int]], linktype: int) -> Path:
    with PcapWriter(path, linktype) as w:
        for data, ts in frames:
            w.write(data, ts)
    return path


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An emulator run with loss (WRITE 256K x4, 1% loss, seed 7)."""
    p = tmp_path_factory.mktemp("ib") / "x.pcap"
    assert main(["emulate", "--op", "write", "--size", "256K", "--count", "4", "--loss",
                 "0.01", "--seed", "7", "-w", str(p)]) == 0
    return p


def _converted(src: Path, dst: Path, grh: bool = False, linktype: int = IB) -> Path:
    lids: dict[bytes, int] = {}
    with open_capture(src) as r:
        frames = [(to_ib(fr.data, lids, grh), fr.ts_ns) for fr in r]
    if linktype == locate.LINKTYPE_INFINIBAND:
        return _write(dst, frames, IB)
    return _write(dst, [(erf.record(d, ts=t), t) for d, t in frames], linktype)


def _stats(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["stats", "-T", "json", str(path)]) == 0
    return json.loads(capsys.readouterr().out)


COUNTED = ("packets", "payload_bytes", "unique_payload_bytes", "acks",
           "selective_retransmissions", "go_back_retransmissions", "incomplete_messages")


@pytest.mark.parametrize("variant", ["lrh", "grh", "erf"])
def test_ib_capture_counts_as_the_roce_one(lossy: Path, tmp_path: Path, variant: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    roce_doc = _stats(lossy, capsys)
    dst = _converted(lossy, tmp_path / f"{variant}.pcap", grh=variant == "grh",
                     linktype=197 if variant == "erf" else IB)
    ib_doc = _stats(dst, capsys)
    rf, jf = roce_doc["flows"], ib_doc["flows"]
    assert len(rf) == len(jf) == 2 and ib_doc["totals"]["connections"] == 1
    assert roce_doc["totals"]["retransmissions"] > 0 and roce_doc["totals"]["gaps"] > 0
    assert roce_doc["totals"]["naks"] > 0
    for a, b in zip(rf, jf):
        for key in COUNTED:
            assert a[key] == b[key], key
        assert a["psn"] == b["psn"] and a["response_psn"] == b["response_psn"]
        assert a["messages"] == b["messages"] and a["naks"] == b["naks"]
        assert b["l3"] == ("LRH+GRH" if variant == "grh" else "LRH")
        assert b["bad_icrc"] == b["bad_vcrc"] == 0
    for key in ("gaps", "missing", "retransmissions", "naks", "messages", "acks"):
        assert roce_doc["totals"][key] == ib_doc["totals"][key], key
    # bytes: the frames' own lengths (LRH .. VCRC), not the Ethernet ones
    with open_capture(_converted(lossy, tmp_path / "own.pcap", grh=variant == "grh")) as r:
        assert ib_doc["totals"]["bytes"] == sum(len(fr.data) for fr in r)
    src = "LID 0x0001 GID fe80::1" if variant == "grh" else "LID 0x0001"
    assert (jf[0]["src"], jf[0]["qp"]) == (src, rf[0]["qp"])
    capsys.readouterr()
    assert main(["stats", str(dst)]) == 0
    out, err = capsys.readouterr()
    # the GIDs make the directions too wide for their columns: A and B name them above
    assert ("LID 0x0001 -> LID 0x0002" in out if variant != "grh" else
            "A = LID 0x0001 GID fe80::1 QP" in out)
    assert "not supported" not in err


@pytest.mark.parametrize("grh", [False, True])
def test_bad_icrc_and_bad_vcrc_are_flagged(tmp_path: Path, grh: bool,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    lids: dict[bytes, int] = {}
    frames = [to_ib(f, lids, grh) for f in traffic(3, n=40, faults=0.0)]
    bad = bytearray(frames[5])
    w = locate.walk(bytes(bad), WALK)
    bad[w.icrc_off] ^= 1  # ICRC wrong, VCRC over it recomputed: only the ICRC is bad
    from roce.families.ib import crc as ibcrc

    bad[w.l4_end:w.l4_end + 2] = ibcrc.vcrc(bytes(bad[:w.l4_end])).to_bytes(2, "big")
    frames[5] = bytes(bad)
    vbad = bytearray(frames[9])
    vbad[-1] ^= 0x10  # the VCRC
    frames[9] = bytes(vbad)
    p = _write(tmp_path / "crc.pcap", [(f, i * 1000) for i, f in enumerate(frames)], IB)
    doc = _stats(p, capsys)
    t = doc["totals"]
    assert (t["bad_icrc"], t["bad_vcrc"]) == (1, 1)
    crc = [(e["frame"], e["kind"]) for e in doc["expert"]["events"]
           if e["kind"] in ("bad_icrc", "bad_vcrc")]
    assert crc == [(6, "bad_icrc"), (10, "bad_vcrc")]
    assert sum(f["packets"] for f in doc["flows"]) == len(frames)


# -- the twins: compiled and reference walk / engine on native InfiniBand frames -------------


@st.composite
def ib_stream(draw: st.DrawFn) -> list[Frame]:
    """Faulty RC traffic (tests/test_stats.traffic) as native InfiniBand, LNH 2 or 3, some
    frames mutated, cut by a snap length, or noise."""
    grh = draw(st.booleans())
    lids: dict[bytes, int] = {}
    rc = traffic(draw(st.integers(0, 2**32 - 1)), n=draw(st.sampled_from([10, 40])),
                 faults=draw(st.sampled_from([0.0, 1.0])))
    out = []
    for i, f in enumerate(rc):
        kind = draw(st.integers(0, 9))
        data = to_ib(f, lids, grh, becn=kind == 2) if locate.walk(f).status == locate.OK \
            else f[14:]
        if kind == 0:
            buf = bytearray(data)
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
            data = bytes(buf)
        origlen = len(data)
        if kind == 1:
            data = data[:draw(st.integers(0, len(data)))]
        out.append(Frame(data, i * 1000, len(data), origlen, IB, 0))
    return out


@compiled
@settings(max_examples=examples(60), deadline=None)
@given(stream=ib_stream())
def test_walk_and_icrc_twins_agree_on_ib(stream: list[Frame]) -> None:
    for fr in stream:
        got = fast.walk(fr.data, WALK)
        ref = locate.walk(fr.data, WALK)
        assert got == ref
        if ref.status == locate.OK:
            assert fast.icrc_of(fr.data, got) == icrc_at(
                fr.data, ref.l3_off, ref.l3_kind, ref.l3_len, ref.bth_off, ref.icrc_off)
            assert fast.icrc_check(fr.data, WALK)[1] == fast.icrc_of(fr.data, got)


@compiled
@settings(max_examples=examples(60), deadline=None)
@given(stream=ib_stream(), batch=st.sampled_from([1, 7, 1024]),
       max_events=st.sampled_from([2, 10_000]))
def test_engines_agree_on_ib(stream: list[Frame], batch: int, max_events: int) -> None:
    ref = analyse(stream, batch=batch, max_events=max_events, engine="reference")
    got = analyse(stream, max_events=max_events, engine="compiled")
    assert got.to_dict() == ref.to_dict()
    assert [e.line() for e in got.events] == [e.line() for e in ref.events]
    assert got.totals["frames"] == len(stream)


def test_walk_reads_lnh_and_says_why_not() -> None:
    lids: dict[bytes, int] = {}
    pkt = to_ib(traffic(1, n=1, faults=0.0)[0], lids)
    w = locate.walk(pkt, WALK)
    assert (w.status, w.l3_kind, w.bth_off) == (locate.OK, locate.L3_LRH, ib.LRH_SIZE)
    assert w.l4_end == len(pkt) - ib.VCRC_SIZE
    raw = bytes([pkt[0], pkt[1] & ~3]) + pkt[2:]  # LNH 0: raw
    w = locate.walk(raw, WALK)
    assert locate.is_not_roce(w.status) and "LNH 0" in str(locate.explain(w))
    cut = locate.walk(pkt[:30], WALK)
    assert cut.status == locate.BAD_L3_LENGTH and "LRH packet length" in str(
        locate.explain(cut))
    rnd = random.Random(5)
    for _ in range(50):  # no crash on noise, twins equal
        noise = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 70)))
        assert fast.walk(noise, WALK) == locate.walk(noise, WALK)


def test_each_link_walks_its_own_cnp() -> None:
    """0x80 is native InfiniBand's CNP and 0x81 RoCE's (docs/protocol.md): each link's walk,
    in both twins, takes its own and calls the other's an unknown opcode, as RoCE always
    did with 0x80; stats counts the IB one as a CNP of its QP."""
    from roce.opcodes import CNP_OPCODE, IB_CNP_OPCODE

    roce_cnp = bytearray(roce.craft("cnp", dqpn=0x33).to_bytes())
    w = locate.walk(bytes(roce_cnp))
    assert w.status == locate.OK and w.opcode == CNP_OPCODE
    roce_cnp[w.bth_off] = IB_CNP_OPCODE  # 0x80 on RoCE: reserved there, as before
    for fn in (locate.walk, fast.walk):
        assert fn(bytes(roce_cnp)).status == locate.BAD_OPCODE
    ib_cnp = craft.to_ib(roce.craft("cnp", dqpn=0x33).to_bytes(),
                         argparse.Namespace(vl=0, sl=0, slid=1, dlid=2))
    ib_roce_cnp = ib.build(bytes([CNP_OPCODE]) + ib_cnp[ib.LRH_SIZE + 1:-6])
    for fn in (locate.walk, fast.walk):
        w = fn(ib_cnp, WALK)
        assert (w.status, w.opcode, w.payload_off - w.bth_off) == (locate.OK, 0x80, 12)
        assert fn(ib_roce_cnp, WALK).status == locate.BAD_OPCODE
    n = len(ib_cnp)
    for engine in ("reference", "compiled") if AVAILABLE else ("reference",):
        rep = analyse([Frame(ib_cnp, t, n, n, IB, 0) for t in (0, 5000)], engine=engine)
        (flow,) = rep.flows
        assert flow.qp == 0x33 and flow.to_dict(0)["cnps"] == 2
        assert rep.totals["cnps"] == 2 and rep.totals["malformed"] == 0
        assert CcReport(rep).rows[0]["cnp_min_gap_ns"] == 5000


def test_timeline_names_ib_qps_by_lid(lossy: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--timeline's second pass walks native InfiniBand as the engines do."""
    def timeline(path: Path) -> dict:
        capsys.readouterr()
        assert main(["stats", "--timeline", "20us", "-T", "json", str(path)]) == 0
        return json.loads(capsys.readouterr().out)["congestion"]["timeline"]

    got = timeline(_converted(lossy, tmp_path / "tl.pcap"))
    want = timeline(lossy)
    def lid(q: str) -> str:
        return q.replace("10.0.0.1", "LID 0x0001").replace("10.0.0.2", "LID 0x0002")

    assert got["qps"] == [lid(q) for q in want["qps"]] and got["qps"]
    assert len(got["rows"]) == len(want["rows"]) > 1
    for g, w in zip(got["rows"], want["rows"]):
        assert sorted(g["qps"]) == sorted(lid(q) for q in w["qps"])


# -- congestion marks: FECN as CE, BECN as a returned notification ---------------------------

CC_KEYS = ("cnps", "cnp_rate_per_s", "cnp_min_gap_ns", "ecn_ce", "data_packets", "ce_fraction")


def _cc_rows(doc: dict) -> dict[int, dict]:
    return {r["qp"]: r for r in doc["congestion"]["flows"]}


def _cc_ib(tmp_path: Path, name: str, becn_acks: bool = False) -> Path:
    """tests/cc_helpers' capture (CE-marked WRITEs, ACKs, CNPs) as native InfiniBand; with
    ``becn_acks`` the CNPs are left out and the ACKs carry BECN instead."""
    from cc_helpers import frames

    lids: dict[bytes, int] = {}
    out = []
    for data, ts in frames():
        w = locate.walk(data)
        if w.status != locate.OK:
            continue  # PFC: no InfiniBand frame
        op = data[w.bth_off]
        cls = OPINFO[op].cls
        if becn_acks and cls == C_CNP:
            continue
        out.append((to_ib(data, lids, becn=becn_acks and cls == C_ACK), ts))
    return _write(tmp_path / name, out, IB)


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_fecn_and_cnps_count_as_ce_and_cnps(tmp_path: Path, engine: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from cc_helpers import write_capture

    if engine == "compiled" and not AVAILABLE:
        pytest.skip("fast path not built")
    roce_doc = _stats_with(Path(write_capture(tmp_path / "roce.pcap")), capsys, engine)
    ib_doc = _stats_with(_cc_ib(tmp_path, "ib.pcap"), capsys, engine)
    want, got = _cc_rows(roce_doc), _cc_rows(ib_doc)
    assert sorted(want) == sorted(got) == [0x11, 0x22]
    assert want[0x22]["ecn_ce"] == 2 and want[0x11]["cnps"] == 3  # cc_helpers' numbers
    for qp in want:
        for key in CC_KEYS:
            assert got[qp][key] == want[qp][key], (qp, key)
        assert got[qp]["becns"] == 0
    assert ib_doc["totals"]["ecn_ce"] == roce_doc["totals"]["ecn_ce"] == 2
    kinds = [e["kind"] for e in ib_doc["expert"]["events"]]
    assert kinds.count("ecn_ce") == 2 and kinds.count("cnp") == 3


def test_ecn_ce_filter_macro_takes_the_fecn(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``-Y ecn_ce`` picks the same frames in a RoCE capture (IP ECN CE) and in its native
    InfiniBand conversion (BTH FECN)."""
    from cc_helpers import write_capture

    def marked(path: Path) -> list[int]:
        capsys.readouterr()
        assert main(["decode", "-Y", "ecn_ce", str(path)]) == 0
        return [int(line.split()[0]) for line in capsys.readouterr().out.splitlines()]

    roce_path = Path(write_capture(tmp_path / "roce.pcap"))
    with open_capture(roce_path) as r:
        ib_numbers = [i for i, f in enumerate(r, 1) if locate.walk(f.data).status == locate.OK]
    want = [ib_numbers.index(n) + 1 for n in marked(roce_path)]  # PFC frames are left out
    assert len(want) == 2
    assert marked(_cc_ib(tmp_path, "ib.pcap")) == want


def _stats_with(path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> dict:
    """What ``roce stats -T json`` reports of the congestion and the totals, by ``engine``
    (the CLI takes the compiled one when it is built)."""
    with open_capture(path) as r:
        rep = analyse(list(r), engine=engine)
    return {"congestion": {"flows": CcReport(rep).rows}, "totals": rep.totals,
            "flows": [f.to_dict(0) for f in rep.flows],
            "expert": {"events": [{"kind": e.kind} for e in rep.events]}}


def _timeline(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["stats", "--timeline", "20us", "-T", "json", str(path)]) == 0
    return json.loads(capsys.readouterr().out)["congestion"]["timeline"]


def _lid_label(q: str) -> str:
    return q.replace("10.0.0.1", "LID 0x0001").replace("10.0.0.2", "LID 0x0002")


def test_timeline_reads_fecn_cnps_and_becns(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--timeline counts what the flow engines count (flowrules' mark tables): the IB
    capture's FECNs as the RoCE one's CE (the plotted CE share), its CNPs (0x80) as the
    RoCE CNPs (0x81), and BECNs on ACKs as notifications of their own."""
    from cc_helpers import ACKS, CNPS, US, frames, write_capture

    from roce.analysis.timeline import collect

    roce_tl = collect(frames())
    with open_capture(_cc_ib(tmp_path, "ib.pcap")) as r:
        ib_tl = collect(list(r))
    (want,), (got,) = roce_tl.series(), ib_tl.series()
    assert got.ce_fraction == want.ce_fraction == pytest.approx(2 / 7)
    assert [d[4] for d in got.data] == [d[4] for d in want.data]
    assert got.cnps == want.cnps == [t * US for t in CNPS] and not got.becns
    with open_capture(_cc_ib(tmp_path, "becn.pcap", becn_acks=True)) as r:
        (back,) = collect(list(r)).series()
    assert back.cnps == [] and back.becns == [t * US for t, _ in ACKS]
    assert len(back.acks) == len(ACKS)  # a BECN-carrying ACK is still an ACK

    want_doc = _timeline(Path(write_capture(tmp_path / "roce.pcap")), capsys)
    got_doc = _timeline(tmp_path / "ib.pcap", capsys)
    assert got_doc["qps"] == [_lid_label(q) for q in want_doc["qps"]]
    for g, w in zip(got_doc["rows"], want_doc["rows"], strict=True):
        assert {k: v["cnps"] for k, v in g["qps"].items()} == {
            _lid_label(k): v["cnps"] for k, v in w["qps"].items()}
    becn_doc = _timeline(tmp_path / "becn.pcap", capsys)
    assert sum(v["becns"] for r in becn_doc["rows"] for v in r["qps"].values()) == len(ACKS)
    assert main(["stats", "--timeline", "20us", str(tmp_path / "becn.pcap")]) == 0
    out = capsys.readouterr().out
    assert any(ln.split() == ["start", "(us)", "QP", "Gb/s", "cnp+becn", "retx", "pauses"]
               for ln in out.splitlines())


def test_becn_on_acks_is_the_returned_notification(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from cc_helpers import ACKS, US

    doc = _stats(_cc_ib(tmp_path, "becn.pcap", becn_acks=True), capsys)
    back = _cc_rows(doc)[0x11]  # the ACKs go to the sender's QP 0x11
    times = [t for t, _ in ACKS]
    assert (back["cnps"], back["becns"]) == (0, len(ACKS))
    assert back["cnp_min_gap_ns"] == min(b - a for a, b in zip(times, times[1:])) * US
    assert back["cnp_rate_per_s"] == pytest.approx(len(ACKS) / ((times[-1] - times[0]) * 1e-6))
    assert doc["totals"]["becns"] == len(ACKS) and doc["totals"]["acks"] == len(ACKS)
    assert _cc_rows(doc)[0x22]["ce_fraction"] == pytest.approx(2 / 7)
    capsys.readouterr()
    assert main(["stats", str(tmp_path / "becn.pcap")]) == 0
    out = capsys.readouterr().out
    assert any(ln.split()[:3] == ["flow", "CNPs", "BECNs"] for ln in out.splitlines())


def test_roce_bth_fecn_and_becn_stay_ignored(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """RoCEv2 marks in IP ECN; a BTH FECN / BECN on RoCE counts as nothing."""
    from cc_helpers import frames

    out = []
    for data, ts in frames():
        w = locate.walk(data)
        if w.status == locate.OK:
            data = _set_bth_flag(_set_bth_flag(data, w.bth_off, "fecn"), w.bth_off, "becn")
        out.append((data, ts))
    doc = _stats(_write(tmp_path / "r.pcap", out, locate.LINKTYPE_ETHERNET), capsys)
    assert doc["totals"]["ecn_ce"] == 2 and doc["totals"]["becns"] == 0
    assert doc["totals"]["cnps"] == 3


# -- snapped frames: the LRH PktLen gives the payload length ----------------------------------


@pytest.mark.parametrize("grh", [False, True])
@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_snapped_ib_capture_counts_the_uncut_payload(lossy: Path, tmp_path: Path, grh: bool,
                                                     engine: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    if engine == "compiled" and not AVAILABLE:
        pytest.skip("fast path not built")
    full = _converted(lossy, tmp_path / "full.pcap", grh=grh)
    snap = 96  # every header of the WRITEs and ACKs, little payload
    with open_capture(full) as r, PcapWriter(tmp_path / "snap.pcap", IB) as w:
        cut = 0
        for fr in r:
            cut += len(fr.data) > snap
            w.write(fr.data[:snap], fr.ts_ns, origlen=len(fr.data))
    assert cut > 10
    want = _stats_with(full, capsys, engine)
    got = _stats_with(tmp_path / "snap.pcap", capsys, engine)
    assert got["totals"]["truncated"] == cut and want["totals"]["truncated"] == 0
    # every frame still in its flow: the cut ones are "truncated", not whole packets
    assert got["totals"]["ib_packets"] + cut == want["totals"]["ib_packets"]
    assert sum(f["packets"] for f in got["flows"]) == sum(f["packets"] for f in want["flows"])
    for key in ("payload_bytes", "request_payload_bytes", "bytes"):
        assert got["totals"][key] == want["totals"][key] > 0, key
    for a, b in zip(want["flows"], got["flows"]):
        assert a["payload_bytes"] == b["payload_bytes"]


def _crafted(tmp_path: Path, name: str, runs: list[list[str]], linktype: int) -> Path:
    """The frames of several ``roce craft`` runs, one after another 1 us apart."""
    frames = []
    for i, argv in enumerate(runs):
        part = tmp_path / f"{name}{i}.pcap"
        assert main(["craft", "-q", *argv, "-w", str(part)]) == 0
        with open_capture(part) as r:
            frames += [fr.data for fr in r]
    return _write(tmp_path / f"{name}.pcap", [(d, i * 1000) for i, d in enumerate(frames)],
                  linktype)


def test_crafted_fecn_and_becn_read_as_crafted_ce_and_cnps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`roce craft --link ib --fecn / --becn` against `roce craft --ecn ce` and CNPs."""
    write = ["rc-write-only", "--payload-size", "64"]
    ib_a, ib_b = ["--link", "ib", "--slid", "1", "--dlid", "2"], [
        "--link", "ib", "--slid", "2", "--dlid", "1"]
    ip_a, ip_b = ["--src", "10.0.0.1", "--dst", "10.0.0.2"], [
        "--src", "10.0.0.2", "--dst", "10.0.0.1"]
    ib = _crafted(tmp_path, "ib", [
        [*ib_a, *write, "--dqpn", "0x22", "--psn", "0", "--count", "5"],
        [*ib_a, *write, "--dqpn", "0x22", "--psn", "5", "--count", "3", "--fecn"],
        [*ib_b, "rc-acknowledge", "--dqpn", "0x11", "--psn", "7", "--count", "2", "--becn"]],
        IB)
    eth = _crafted(tmp_path, "eth", [
        [*ip_a, *write, "--dqpn", "0x22", "--psn", "0", "--count", "5"],
        [*ip_a, *write, "--dqpn", "0x22", "--psn", "5", "--count", "3", "--ecn", "ce"],
        [*ip_b, "cnp", "--dqpn", "0x11", "--count", "2"]], locate.LINKTYPE_ETHERNET)
    got, want = _cc_rows(_stats(ib, capsys)), _cc_rows(_stats(eth, capsys))
    assert got[0x22]["ce_fraction"] == want[0x22]["ce_fraction"] == pytest.approx(3 / 8)
    assert got[0x22]["ecn_ce"] == want[0x22]["ecn_ce"] == 3
    assert (got[0x11]["becns"], got[0x11]["cnps"]) == (2, 0)
    assert (want[0x11]["becns"], want[0x11]["cnps"]) == (0, 2)
    for key in ("cnp_rate_per_s", "cnp_min_gap_ns"):
        assert got[0x11][key] == want[0x11][key], key
