"""Tests for ``roce stats``: the flow analysis engine (roce.analysis.flows) and its CLI.

Captures are crafted with known faults (drops, go-back-N retransmissions, NAKs, CNPs, ECN marks,
corruption, truncation, PSN wrap) and the counters and expert lines are checked exactly.  Most
scenarios run through both engines (the compiled one and the pure-Python reference), and
property tests prove the two agree on random faulty traffic at every batch size.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

import roce
from roce import fast, locate
from roce.analysis.cflows import AVAILABLE
from roce.analysis.flowmodel import FRAME_PARTS
from roce.analysis.flows import (
    Analyzer,
    Event,
    EventStore,
    Flow,
    Report,
    analyse,
    make_analyzer,
)
from roce.cli import main as cli_main
from roce.headers import AETH_ACK, AETH_NAK, AETH_RNR_NAK, syndrome
from roce.pcapio import Frame, PcapWriter, open_capture
from roce.testing.fuzz import to_linktype
from roce.testing.mutate import fixup
from roce.testing.strategies import frames, mutations

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
A, B = "10.0.0.1", "10.0.0.2"
QA, QB = 0x12, 0x11  # A's QP (responses go to it) and B's QP (requests go to it)
MTU = 1024


# -- crafting helpers ---------------------------------------------------------------------------


def req(op: str | int, psn: int, payload: bytes = b"", **kw: object) -> bytes:
    """A request A -> B (to QP QB)."""
    return roce.craft(op, payload, dqpn=QB, psn=psn, src=A, dst=B, **kw).to_bytes()


def rsp(op: str | int, psn: int, payload: bytes = b"", **kw: object) -> bytes:
    """A response B -> A (to QP QA)."""
    return roce.craft(op, payload, dqpn=QA, psn=psn, src=B, dst=A, **kw).to_bytes()


def ack(psn: int, kind: int = AETH_ACK, value: int = 31, msn: int = 0) -> bytes:
    return rsp("RC_ACKNOWLEDGE", psn, syndrome=syndrome(kind, value), msn=msn)


def write_only(psn: int, size: int = 100, **kw: object) -> bytes:
    return req("RC_RDMA_WRITE_ONLY", psn, bytes(size), va=0x1000, rkey=0x22, dmalen=size, **kw)


def message(op: str, psn: int, size: int, *, dmalen: int | None = None, imm: bool = False,
            inv: bool = False) -> list[bytes]:
    """One SEND or WRITE message cut into MTU packets, starting at ``psn``."""
    parts = [bytes(size)[i:i + MTU] for i in range(0, size, MTU)] or [b""]
    reth = {"va": 0x1000, "rkey": 0x22, "dmalen": size if dmalen is None else dmalen}
    tail = "_WITH_IMMEDIATE" if imm else "_WITH_INVALIDATE" if inv else ""
    extra = {"imm": 7} if imm else {"inv_rkey": 9} if inv else {}
    if len(parts) == 1:
        first = {**reth, **extra} if op == "WRITE" else extra
        return [req(f"RC_{'RDMA_' if op == 'WRITE' else ''}{op}_ONLY{tail}", psn, parts[0],
                    **first)]
    name = f"RC_{'RDMA_' if op == 'WRITE' else ''}{op}"
    out = [req(f"{name}_FIRST", psn, parts[0], **(reth if op == "WRITE" else {}))]
    out += [req(f"{name}_MIDDLE", psn + i, p) for i, p in enumerate(parts[1:-1], 1)]
    out.append(req(f"{name}_LAST{tail}", psn + len(parts) - 1, parts[-1], **extra))
    return out


def write_capture(path: Path, frames: list[bytes], **kw: object) -> Path:
    with PcapWriter(path, **kw) as w:  # type: ignore[arg-type]
        for i, f in enumerate(frames):
            w.write(f, ts_ns=T0 + i * 1000)
    return path


ENGINES = [pytest.param("compiled", id="compiled",
                        marks=pytest.mark.skipif(not AVAILABLE, reason="fast path not built")),
           pytest.param("reference", id="reference")]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The compiled engine and the pure-Python reference."""
    return request.param


@pytest.fixture
def run(tmp_path: Path, engine: str):
    """Write frames to a pcap and analyse the file: the path ``roce stats`` takes."""

    def go(frames: list[bytes], batch: int = 1024, **kw: object) -> Report:
        path = write_capture(tmp_path / "t.pcap", frames, **kw)
        with open_capture(path) as rd:
            return analyse(rd, batch=batch, engine=engine)

    return go


def lines(r: Report) -> list[str]:
    return [e.line() for e in r.events]


def flow(r: Report, qp: int = QB) -> Flow:
    (f,) = [f for f in r.flows if f.qp == qp]
    return f


# -- clean traffic ---------------------------------------------------------------------------


def test_clean_write_stream(run) -> None:
    frames, psn = [], 0
    for m in range(10):
        frames += message("WRITE", psn, 3000)
        psn += 3
        frames.append(ack(psn - 1, msn=m + 1))
    r = run(frames)
    assert r.events == [] and r.event_counts == {}
    f, back = flow(r), flow(r, QA)
    assert f.req.counts() == {"in_order": 30, "gaps": 0, "missing": 0, "late": 0,
                              "duplicates": 0, "wraps": 0, "still_missing": 0, "next": 30}
    assert f.messages == {"write": {"count": 10, "bytes": 30000, "min": 3000, "max": 3000}}
    assert f.incomplete == 0 and f.mtu == MTU
    assert (f.packets, f.payload, f.req_payload) == (30, 30000, 30000)
    assert f.bytes == sum(len(x) for x in frames if x[42 + 4 + 1:42 + 8] == QB.to_bytes(3, "big"))
    assert back.acks == 10 and back.req is None
    assert r.connections == [(f, back)] and r.lone == []
    t = r.totals
    assert (t["frames"], t["roce_packets"], t["gaps"], t["acks"], t["messages"]) == (
        40, 40, 0, 10, 10)
    assert f.duration_ns == 38 * 1000  # first request frame 1, last frame 39
    assert f.goodput == pytest.approx(30000 * 1e9 / 38000)


def test_batch_boundaries_do_not_matter(run) -> None:
    frames = []
    for m in range(6):
        frames += message("WRITE", m * 4, 4000)
    base = run(frames).to_dict()
    for batch in (1, 2, 3, 5):
        assert run(frames, batch=batch).to_dict() == base


@pytest.mark.parametrize("seed, faults", [(4, 1.0), (11, 0.0), (63, 0.2)])
def test_batch_size_never_changes_the_reference_report(seed: int, faults: float) -> None:
    """Traffic where READs are sequenced and lost packets sized while the path MTU is still
    growing from the other direction's packets (and, with max_events=2, more events than
    are kept): a batch of one frame and bigger batches give the same report."""
    frames = traffic(seed, faults=faults)
    for max_events in (2, 10_000):
        one = analyse(frames, batch=1, max_events=max_events, engine="reference")
        for batch in (5, 1024):
            got = analyse(frames, batch=batch, max_events=max_events, engine="reference")
            assert got.to_dict() == one.to_dict(), (batch, max_events)


def test_event_store_keeps_the_first_events_by_frame() -> None:
    """Past the cap, an event made late for an earlier frame (a READ sequenced when the next
    request came) displaces the latest kept one; a tie goes to the one made first."""
    store = EventStore(2)
    made = [(5, "a"), (3, "b"), (9, "c"), (1, "d"), (3, "e")]
    for frame, text in made:
        assert store.wants("gap", frame) == (text in "abd")
        store.add(Event(frame, 1, "gap", 0, 0x11, text, 0))
    assert [(e.frame, e.text) for e in store.kept()] == [(1, "d"), (3, "b")]
    assert store.counts == {"gap": 5}
    store.skip("gap")
    assert store.counts == {"gap": 6} and len(store.kept()) == 2
    none = EventStore(0)
    none.add(Event(1, 1, "gap", 0, 0x11, "x", 0))
    assert none.kept() == [] and none.counts == {"gap": 1} and not none.wants("gap", 0)


# -- sequence faults ----------------------------------------------------------------------------


def test_one_dropped_packet(run) -> None:
    frames = [write_only(p) for p in range(10) if p != 5]
    r = run(frames)
    c = flow(r).req.counts()
    assert (c["gaps"], c["missing"], c["late"], c["duplicates"], c["still_missing"]) == (
        1, 1, 0, 0, 1)
    assert lines(r) == ["#6 QP 0x000011 PSN gap: expected 0x000005, got 0x000006 (1 missing)"]
    assert r.events[0].severity == 1 and r.events[0].kind == "gap"
    assert flow(r).messages["write"]["count"] == 9


def test_go_back_n_retransmission(run) -> None:
    # 0 1 2 [3 lost] 4 5, NAK (ePSN 3), resend 3 4 5, go on with 6 7.
    frames = [write_only(p) for p in (0, 1, 2, 4, 5)]
    frames.append(ack(3, AETH_NAK, 0, msn=3))
    frames += [write_only(p) for p in (3, 4, 5, 6, 7)]
    r = run(frames)
    c = flow(r).req.counts()
    assert c == {"in_order": 6, "gaps": 1, "missing": 1, "late": 1, "duplicates": 2,
                 "wraps": 0, "still_missing": 0, "next": 8}
    assert lines(r) == [
        "#4 QP 0x000011 PSN gap: expected 0x000003, got 0x000004 (1 missing)",
        "#6 QP 0x000012 NAK PSN sequence error MSN=3 PSN=0x000003",
        "#7 QP 0x000011 PSN 0x000003 out of order (late: fills an earlier gap)",
        "#8-#9 QP 0x000011 retransmission of PSN 0x000004..0x000005, 2 packets",
    ]
    # Each message counted once: the late copy of PSN 3 counts, the repeats do not.
    assert flow(r).messages["write"]["count"] == 8
    t = r.totals
    assert (t["gaps"], t["missing"], t["out_of_order"], t["retransmissions"], t["naks"]) == (
        1, 1, 1, 2, 1)


def test_duplicate(run) -> None:
    r = run([write_only(p) for p in (0, 1, 2, 2, 3)])
    c = flow(r).req.counts()
    assert (c["duplicates"], c["gaps"], c["late"], c["in_order"]) == (1, 0, 0, 4)
    assert lines(r) == ["#4 QP 0x000011 retransmission of PSN 0x000002"]


def test_psn_wrap_is_not_a_gap(run) -> None:
    psns = [0xFFFFFD, 0xFFFFFE, 0xFFFFFF, 0, 1, 2]
    r = run([write_only(p) for p in psns])
    c = flow(r).req.counts()
    assert (c["gaps"], c["wraps"], c["in_order"], c["next"]) == (0, 1, 6, 3)
    assert r.events == [] and r.totals["wraps"] == 1


def test_gap_across_wrap(run) -> None:
    r = run([write_only(p) for p in (0xFFFFFE, 0xFFFFFF, 1)])
    assert lines(r) == ["#3 QP 0x000011 PSN gap: expected 0x000000, got 0x000001 (1 missing)"]


# -- ACK / NAK ---------------------------------------------------------------------------------


def test_selective_nak_names_the_out_of_order_psn_in_the_msn(run) -> None:
    """Selective repeat (flowrules, "selective NAK"): after an ACK, a sequence NAK whose MSN
    lies ahead of its PSN; or a repeat of the last sequence NAK's PSN."""
    frames = [write_only(p) for p in (0, 1, 3, 4)]
    r = run([frames[0], frames[1], ack(1, msn=2), frames[2],
             ack(2, AETH_NAK, 0, msn=3), frames[3], ack(2, AETH_NAK, 0, msn=4)])
    back = flow(r, QA)
    assert back.selective_naks == 2 and back.naks == {}
    assert lines(r)[-2:] == [
        "#5 QP 0x000012 selective NAK: ePSN 0x000002, PSN 0x000003 arrived out of order",
        "#7 QP 0x000012 selective NAK: ePSN 0x000002, PSN 0x000004 arrived out of order"]
    assert r.totals["selective_naks"] == 2


def test_retransmissions_are_selective_alone_go_back_in_runs(run) -> None:
    sr = run([write_only(p) for p in (0, 1, 2, 3, 1, 4, 2)])  # two resent alone
    assert (flow(sr).retx_selective, flow(sr).retx_go_back) == (2, 0)
    gbn = run([write_only(p) for p in (0, 1, 2, 3, 1, 2, 3, 4)])  # one run of three
    assert (flow(gbn).retx_selective, flow(gbn).retx_go_back) == (0, 3)
    assert gbn.totals["go_back_retransmissions"] == 3


@pytest.mark.parametrize(("code", "name", "severity"), [
    (0, "PSN sequence error", "warning"),
    (1, "invalid request", "error"),
    (2, "remote access error", "error"),
    (3, "remote operational error", "error"),
    (4, "invalid RD request", "error"),
])
def test_nak_kinds(run, code: int, name: str, severity: str) -> None:
    r = run([write_only(0), write_only(1), ack(1, AETH_NAK, code, msn=4)])
    back = flow(r, QA)
    assert back.naks == {code: 1} and back.acks == 0
    assert lines(r) == [f"#3 QP 0x000012 NAK {name} MSN=4 PSN=0x000001"]
    assert r.events[0].to_dict()["severity"] == severity
    assert r.to_dict()["flows"][back.id]["naks"] == {name: 1}


@pytest.mark.parametrize(("code", "text"), [(12, "0.64ms"), (14, "1.28ms"), (0, "655.36ms")])
def test_rnr_nak_timer(run, code: int, text: str) -> None:
    r = run([req("RC_SEND_ONLY", 7, b"x"), ack(7, AETH_RNR_NAK, code, msn=0)])
    back = flow(r, QA)
    assert back.rnr == {code: 1} and r.totals["rnr_naks"] == 1
    assert lines(r) == [f"#2 QP 0x000012 RNR NAK {text} PSN=0x000007"]
    assert r.to_dict()["flows"][back.id]["rnr_timers_ms"] == {text[:-2]: 1}


def test_acks_coalesce_without_sequence_events(run) -> None:
    frames = [write_only(p) for p in range(8)] + [ack(3), ack(7), ack(7)]
    r = run(frames)
    assert flow(r, QA).acks == 3 and r.events == [] and flow(r, QA).rsp is None


# -- congestion, corruption, malformed ---------------------------------------------------------


def test_cnps_attributed_to_destination_qp(run) -> None:
    frames = [write_only(0), write_only(1, ecn="ce"), rsp(0x81, 0), write_only(2, ecn="ce"),
              rsp(0x81, 0), rsp(0x81, 0)]
    r = run(frames)
    back, f = flow(r, QA), flow(r)
    assert back.cnps == 3 and f.cnps == 0
    assert f.ecn_ce == 2 and back.ecn_ce == 0
    assert lines(r) == ["#2 QP 0x000011 ECN CE", "#3 QP 0x000012 CNP", "#4 QP 0x000011 ECN CE",
                        "#5 QP 0x000012 CNP", "#6 QP 0x000012 CNP"]
    assert {e.kind: e.severity for e in r.events} == {"ecn_ce": 2, "cnp": 2}
    assert (r.totals["cnps"], r.totals["ecn_ce"]) == (3, 2)
    assert f.req.counts()["gaps"] == 0  # a CNP is not part of any sequence


def test_ecn_on_ipv6(run) -> None:
    r = run([roce.craft("RC_SEND_ONLY", b"x", ipv6=True, dqpn=5, psn=0, ecn="ce").to_bytes()])
    (f,) = r.flows
    assert (f.l3, f.src, f.dst, f.ecn_ce) == (6, "fd00::1", "fd00::2", 1)


def test_corrupted_byte_is_a_bad_icrc(run) -> None:
    frames = [write_only(p) for p in range(5)]
    bad = bytearray(frames[2])
    bad[80] ^= 0x40  # a payload byte
    frames[2] = bytes(bad)
    r = run(frames)
    f = flow(r)
    assert f.bad_icrc == 1 and r.totals["bad_icrc"] == 1
    assert f.req.counts()["gaps"] == 0 and f.messages["write"]["count"] == 5
    _, calc, stored = fast.icrc_check(frames[2])
    assert lines(r) == [f"#3 QP 0x000011 bad ICRC: 0x{stored:08x}, should be 0x{calc:08x}"]
    assert r.events[0].to_dict()["severity"] == "error"


def test_malformed_reth_cut(run) -> None:
    # WRITE Only 0, WRITE First 1 with its RETH cut, Middle 2, Last 3, Only 4.
    msg = message("WRITE", 1, 3000)
    cut = msg[0][:42 + 12 + 8]
    frames = [write_only(0), cut, msg[1], msg[2], write_only(4)]
    r = run(frames)
    f = flow(r)
    expect = str(locate.explain(fast.walk(cut)))
    assert expect == "RETH truncated at byte 54: needs 16 bytes, 8 left"
    assert f.malformed == 1 and r.totals["malformed"] == 1 and f.packets == 5
    # Its PSN still counts: no gap after it, and the packets after it are analysed.
    assert f.req.counts()["gaps"] == 0 and f.req.counts()["in_order"] == 5
    assert f.messages["write"]["count"] == 2 and f.incomplete == 1
    assert lines(r) == [
        f"#2 QP 0x000011 malformed: {expect}",
        "#3 QP 0x000011 incomplete RDMA WRITE message: First not captured (2 packets, "
        "1976 bytes seen)",
    ]
    assert r.events[0].to_dict()["severity"] == "error"


def test_malformed_without_flow(run) -> None:
    frames = [write_only(0), write_only(1)[:48], write_only(1)]
    r = run(frames)
    assert r.totals["malformed"] == 1 and flow(r).malformed == 0 and flow(r).packets == 2
    assert lines(r) == ["#2 malformed: BTH truncated at byte 42: needs 12 bytes, 6 left"]
    assert r.events[0].flow == -1


def test_not_roce_frames_are_skipped(run) -> None:
    other = bytearray(write_only(0))
    other[36:38] = (1234).to_bytes(2, "big")  # UDP destination port
    r = run([write_only(0), bytes(other), write_only(1)])
    assert r.totals["not_roce"] == 1 and r.totals["roce_packets"] == 2 and r.events == []


@pytest.mark.parametrize("batch", [1, 4, 1024])
def test_mixed_link_types(engine: str, batch: int) -> None:
    """pcapng may mix link types: Ethernet, raw IP and Linux cooked frames of one flow."""
    kinds = [1, 101, 101, 113, 1, 276, 1, 101]
    stream = [Frame(to_linktype(write_only(p), lt), T0 + p, 0, 0, lt, 0)
              for p, lt in enumerate(kinds)]
    stream = [f._replace(caplen=len(f.data), origlen=len(f.data)) for f in stream]
    r = analyse(stream, batch=batch, engine=engine)
    f = flow(r)
    assert f.packets == len(kinds) and f.req.counts()["in_order"] == len(kinds)
    assert r.totals["gaps"] == 0 and f.messages["write"]["count"] == len(kinds)


def test_udp_port_option(tmp_path: Path) -> None:
    frame = roce.craft("RC_SEND_ONLY", b"x", dqpn=1, dport=5000).to_bytes()
    path = write_capture(tmp_path / "p.pcap", [frame])
    with open_capture(path) as rd:
        assert analyse(rd).totals["not_roce"] == 1
    with open_capture(path) as rd:
        assert analyse(rd, udp_port=5000).totals["roce_packets"] == 1


def test_snap_length_truncation_is_not_malformed(run) -> None:
    frames = [write_only(p, 500) for p in range(4)]
    r = run(frames, snaplen=80)
    f = flow(r)
    assert (f.truncated, f.malformed, f.bad_icrc) == (4, 0, 0)
    assert r.totals["truncated"] == 4 and r.events == []
    assert f.req.counts()["in_order"] == 4
    assert f.messages["write"] == {"count": 4, "bytes": 2000, "min": 500, "max": 500}
    assert f.bytes == sum(map(len, frames))  # the wire length, not the captured one


# -- READ ---------------------------------------------------------------------------------------


def read_req(psn: int, length: int) -> bytes:
    return req("RC_RDMA_READ_REQUEST", psn, va=0x2000, rkey=0x33, dmalen=length)


def read_resp(psn: int, length: int, msn: int = 1) -> list[bytes]:
    parts = [bytes(length)[i:i + MTU] for i in range(0, length, MTU)] or [b""]
    aeth = {"syndrome": syndrome(AETH_ACK, 31), "msn": msn}
    if len(parts) == 1:
        return [rsp("RC_RDMA_READ_RESPONSE_ONLY", psn, parts[0], **aeth)]
    out = [rsp("RC_RDMA_READ_RESPONSE_FIRST", psn, parts[0], **aeth)]
    out += [rsp("RC_RDMA_READ_RESPONSE_MIDDLE", psn + i, p) for i, p in enumerate(parts[1:-1], 1)]
    out.append(rsp("RC_RDMA_READ_RESPONSE_LAST", psn + len(parts) - 1, parts[-1], **aeth))
    return out


def test_read_request_and_responses(run) -> None:
    frames = [read_req(100, 3000), *read_resp(100, 3000), write_only(103), ack(103)]
    r = run(frames)
    f, back = flow(r), flow(r, QA)
    assert r.events == []
    assert f.req.counts()["next"] == 104 and f.req.counts()["gaps"] == 0
    assert f.messages == {"read": {"count": 1, "bytes": 3000, "min": 3000, "max": 3000},
                          "write": {"count": 1, "bytes": 100, "min": 100, "max": 100}}
    assert back.rsp.counts()["in_order"] == 3 and back.rsp.counts()["gaps"] == 0
    assert back.messages == {"read_response": {"count": 1, "bytes": 3000, "min": 3000,
                                               "max": 3000}}
    assert back.rsp_payload == 3000 and back.acks == 1
    assert f.mtu == back.mtu == MTU
    assert r.connections == [(f, back)]


def test_huge_read_after_a_tiny_inferred_mtu(run) -> None:
    """A 4 GiB READ on a path whose only First carried 4 bytes would take a billion PSNs at
    that MTU: it takes at most half the PSN space, and nothing overflows."""
    frames = [req("RC_SEND_FIRST", 10, b"abcd"), req("RC_SEND_LAST", 11, b"ef"),
              read_req(12, 0xFFFFFFFF)]
    r = run(frames)
    f = flow(r)
    assert f.mtu == 4 and f.messages["read"]["bytes"] == 0xFFFFFFFF
    assert f.req.next == (12 + (1 << 23)) & 0xFFFFFF


def test_pipelined_reads_before_mtu_is_known(run) -> None:
    # Two READs go out before any response: the second READ's PSN tells how many PSNs the
    # first one consumed (3 at MTU 1024), so there is no false gap.
    frames = [read_req(100, 3000), read_req(103, 3000), write_only(106),
              *read_resp(100, 3000), *read_resp(103, 3000), ack(106)]
    r = run(frames)
    f, back = flow(r), flow(r, QA)
    assert r.events == []
    assert f.req.counts()["next"] == 107 and f.req.counts()["in_order"] == 3
    assert back.rsp.counts()["in_order"] == 6
    assert back.messages["read_response"]["count"] == 2


def test_read_responses_skip_psns_of_other_requests(run) -> None:
    frames = [read_req(10, 2048), write_only(12), read_req(13, 100),
              *read_resp(10, 2048), ack(12), *read_resp(13, 100)]
    r = run(frames)
    assert r.events == []
    assert flow(r, QA).rsp.counts()["in_order"] == 3


def test_lost_read_response_middle(run) -> None:
    resp = read_resp(10, 3000)
    r = run([read_req(10, 3000), resp[0], resp[2]])
    back = flow(r, QA)
    assert back.rsp.counts()["gaps"] == 1
    assert lines(r) == ["#3 QP 0x000012 response PSN gap: expected 0x00000b, got 0x00000c "
                        "(1 missing)"]
    assert back.messages["read_response"]["bytes"] == 3000  # the lost Middle filled in


def test_repeated_read_is_a_retransmission(run) -> None:
    r = run([read_req(10, 100), read_req(10, 100), write_only(11)])
    f = flow(r)
    assert f.req.counts()["duplicates"] == 1
    assert f.messages["read"]["count"] == 1
    assert lines(r) == ["#2 QP 0x000011 retransmission of PSN 0x00000a"]


# -- message reassembly ------------------------------------------------------------------------


def test_message_kinds_and_sizes(run) -> None:
    frames, psn = [], 0
    for op, size, kw in (("SEND", 2500, {}), ("SEND", 10, {"imm": True}),
                         ("SEND", 2100, {"inv": True}), ("WRITE", 5000, {}),
                         ("WRITE", 1500, {"imm": True}), ("WRITE", 0, {}),
                         ("SEND", 1024, {})):
        m = message(op, psn, size, **kw)
        frames += m
        psn += len(m)
    r = run(frames)
    f = flow(r)
    assert f.messages == {
        "send": {"count": 2, "bytes": 3524, "min": 1024, "max": 2500},
        "send_imm": {"count": 1, "bytes": 10, "min": 10, "max": 10},
        "send_inv": {"count": 1, "bytes": 2100, "min": 2100, "max": 2100},
        "write": {"count": 2, "bytes": 5000, "min": 0, "max": 5000},
        "write_imm": {"count": 1, "bytes": 1500, "min": 1500, "max": 1500},
    }
    assert f.incomplete == 0 and r.events == []


def test_lost_middle_is_filled_in(run) -> None:
    m = message("WRITE", 0, 4000)
    r = run([m[0], m[1], m[3]])
    f = flow(r)
    assert f.messages["write"] == {"count": 1, "bytes": 4000, "min": 4000, "max": 4000}
    assert [e.kind for e in r.events] == ["gap"]  # no length mismatch: the size is exact


def test_write_length_mismatch(run) -> None:
    r = run(message("WRITE", 0, 3000, dmalen=5000))
    assert lines(r) == ["#1 QP 0x000011 RDMA WRITE length: RETH DMA length 5000, message "
                        "carried 3000 bytes"]


def test_lost_last_completed_by_retransmission(run) -> None:
    m = message("WRITE", 0, 3000)
    frames = [m[0], m[1], write_only(3), m[2], write_only(3)]
    r = run(frames)
    f = flow(r)
    assert f.messages["write"]["count"] == 2 and f.incomplete == 0
    assert f.messages["write"]["max"] == 3000
    assert [e.kind for e in r.events] == ["gap", "out_of_order", "retransmission"]


def test_lost_first_completed_by_retransmission(run) -> None:
    m = message("SEND", 10, 2500)
    r = run([write_only(9), m[1], m[2], m[0], m[1], m[2]])
    f = flow(r)
    assert f.messages["send"] == {"count": 1, "bytes": 2500, "min": 2500, "max": 2500}
    assert f.incomplete == 0
    assert [e.kind for e in r.events] == ["gap", "out_of_order", "retransmission"]
    assert (r.events[2].count, r.event_counts["retransmission"]) == (2, 2)


def test_incomplete_messages_at_capture_edges(run) -> None:
    head = message("WRITE", 0, 3000)
    tail = message("SEND", 3, 3000)
    r = run([*head[1:], *tail[:2]])
    f = flow(r)
    assert f.incomplete == 2 and f.stats == {}
    assert lines(r) == [
        "#1 QP 0x000011 incomplete RDMA WRITE message: First not captured (2 packets, "
        "1976 bytes seen)",
        "#3 QP 0x000011 incomplete SEND message: Last not captured (2 packets, 2048 bytes "
        "seen)",
    ]


def test_atomics_and_ud(run) -> None:
    frames = [req("RC_FETCH_ADD", 5, va=0x3000, rkey=1, add=1),
              rsp("RC_ATOMIC_ACKNOWLEDGE", 5, syndrome=syndrome(AETH_ACK, 31), msn=1),
              roce.craft("UD_SEND_ONLY", b"abc", dqpn=0x44, psn=9, src=A, dst=B).to_bytes(),
              roce.craft("UD_SEND_ONLY", b"abcd", dqpn=0x44, psn=3, src=A, dst=B).to_bytes()]
    r = run(frames)
    assert flow(r).messages["atomic"]["count"] == 1
    assert flow(r, QA).atomic_acks == 1 and flow(r, QA).rsp.counts()["in_order"] == 1
    ud = flow(r, 0x44)
    assert ud.req is None and ud.messages["send"]["bytes"] == 7 and r.events == []


def test_rd_and_xrc_read_reth_and_aeth_after_their_first_header(run) -> None:
    # RD puts RDETH (and DETH) first, XRC puts XRCETH first: the RETH / AETH fields must
    # still be found.
    frames = [
        roce.craft("XRC_RDMA_WRITE_ONLY", b"abc", dqpn=5, psn=1, xrcsrq=9, va=1, rkey=2,
                   dmalen=7).to_bytes(),
        roce.craft("XRC_RDMA_READ_REQUEST", dqpn=5, psn=2, xrcsrq=9, va=1, rkey=2,
                   dmalen=3000).to_bytes(),
        roce.craft("XRC_RDMA_WRITE_ONLY", b"abc", dqpn=5, psn=5, xrcsrq=9, va=1, rkey=2,
                   dmalen=3).to_bytes(),
        roce.craft("RD_ACKNOWLEDGE", dqpn=7, psn=1, syndrome=syndrome(AETH_NAK, 2), msn=5,
                   src=B, dst=A).to_bytes(),
    ]
    r = run(frames)
    assert lines(r) == [
        "#1 QP 0x000005 RDMA WRITE length: RETH DMA length 7, message carried 3 bytes",
        "#4 QP 0x000007 NAK remote access error MSN=5 PSN=0x000001"]
    assert flow(r, 5).messages["read"]["bytes"] == 3000
    assert flow(r, 5).req.counts()["gaps"] == 0  # the READ took 3 PSNs (MTU 1024 fits)
    assert flow(r, 7).naks == {2: 1}


def test_rocev1_flows(run) -> None:
    frames = [roce.craft("RC_SEND_ONLY", b"x", roce_version=1, dqpn=3, psn=p).to_bytes()
              for p in (0, 1, 3)]
    r = run(frames)
    (f,) = r.flows
    assert (f.l3, f.src, f.dst) == (1, "fe80::1", "fe80::2")
    assert f.req.counts()["gaps"] == 1


# -- pairing ----------------------------------------------------------------------------------


def test_pairing_by_psn_range_with_two_connections(run) -> None:
    # Two QP connections between the same hosts: responses pair with the requests whose PSN
    # range they fall in.
    frames = []
    for k in range(3):
        frames.append(roce.craft("RC_SEND_ONLY", b"a", dqpn=0x100, psn=1000 + k, src=A,
                                 dst=B).to_bytes())
        frames.append(roce.craft("RC_SEND_ONLY", b"b", dqpn=0x200, psn=50000 + k, src=A,
                                 dst=B).to_bytes())
    frames.append(roce.craft("RC_ACKNOWLEDGE", dqpn=0x901, psn=50002, src=B, dst=A,
                             syndrome=syndrome(AETH_ACK, 31)).to_bytes())
    frames.append(roce.craft("RC_ACKNOWLEDGE", dqpn=0x902, psn=1002, src=B, dst=A,
                             syndrome=syndrome(AETH_ACK, 31)).to_bytes())
    r = run(frames)
    pairs = {(a.qp, b.qp) for a, b in r.connections}
    assert pairs == {(0x100, 0x902), (0x200, 0x901)}
    assert r.lone == []


def test_unrelated_flows_stay_lone(run) -> None:
    frames = [roce.craft("RC_SEND_ONLY", b"a", dqpn=1, psn=0, src=A, dst=B).to_bytes(),
              roce.craft("RC_SEND_ONLY", b"a", dqpn=2, psn=0, src=A, dst=B).to_bytes(),
              roce.craft("RC_SEND_ONLY", b"a", dqpn=3, psn=0, src="10.9.9.9",
                         dst=B).to_bytes()]
    r = run(frames)
    assert r.connections == [] and len(r.lone) == 3


# -- the engines agree ----------------------------------------------------------------------


def traffic(seed: int, n: int = 60, faults: float = 1.0) -> list[bytes]:
    """Random RC traffic on two connections with drops, repeats, swaps, marks and damage
    (``faults`` scales how often)."""
    rnd = random.Random(seed)
    psn = {QB: rnd.randrange(1 << 24), 0x77: rnd.randrange(1 << 24)}
    out: list[bytes] = []
    while len(out) < n:
        qp = rnd.choice(list(psn))
        kind = rnd.random()
        p = psn[qp]
        if kind < 0.5:
            size = rnd.choice([0, 10, 1024, 2000, 4096, 5000])
            pkts = message(rnd.choice(["WRITE", "SEND"]), p, size)
            pkts = [x if qp == QB else x[:42 + 5] + (0x77).to_bytes(3, "big") + x[42 + 8:]
                    for x in pkts]  # the second connection's QP (bad ICRC there is fine)
            psn[qp] = (p + len(pkts)) & 0xFFFFFF
        elif kind < 0.65:
            pkts = [read_req(p, rnd.choice([1, 1024, 3000]))]
            psn[qp] = (p + 3) & 0xFFFFFF
        elif kind < 0.8:
            pkts = [ack((p - 1) & 0xFFFFFF, rnd.choice([AETH_ACK] * 4 + [AETH_NAK, 1]),
                        rnd.randrange(32), msn=rnd.randrange(100))]
        elif kind < 0.85:  # a selective NAK (ePSN a little behind, the MSN naming a PSN)
            e = (p - rnd.randrange(1, 6)) & 0xFFFFFF
            pkts = [ack(e, AETH_NAK, 0, msn=(e + rnd.randrange(1, 5)) & 0xFFFFFF)]
        else:
            pkts = read_resp((p - 3) & 0xFFFFFF, rnd.choice([100, 3000]))
        for x in pkts:
            r = rnd.random() / max(faults, 1e-9)
            if r < 0.08:
                continue  # dropped
            if r < 0.12:
                x = bytes(bytearray(x[:15]) + bytes([x[15] | 3]) + x[16:])  # ECN CE
            elif r < 0.14:
                x = x[:50]  # malformed
            out.append(x)
            if 0.94 < r < 1:
                out.append(x)  # repeated
        if len(out) > 2 and rnd.random() < 0.1 * faults:
            out[-1], out[-2] = out[-2], out[-1]
    return out


def stamped(frames: list[bytes], seed: int) -> list[Frame]:
    """The frames at random times from T0 (some at the same instant), so that completion
    and round-trip times differ from frame to frame."""
    rnd = random.Random(seed)
    out, t = [], T0
    for x in frames:
        t += rnd.choice((0, 1, 700, 2_000, 90_000))
        out.append(Frame(x, t, len(x), len(x), locate.LINKTYPE_ETHERNET, 0))
    return out


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), batch=st.sampled_from([1, 4, 16, 1024]),
       faults=st.sampled_from([0.0, 0.2, 1.0]))
def test_reference_accounts_every_frame(seed: int, batch: int, faults: float) -> None:
    frames = traffic(seed, faults=faults)
    fast_r = analyse(frames, batch=batch, engine="reference")
    t = fast_r.totals
    assert t["frames"] == len(frames)
    assert sum(t[k] for k in FRAME_PARTS) == t["frames"]
    assert t["roce_packets"] <= sum(f.packets for f in fast_r.flows) <= len(frames)


# -- the totals add up, on fuzzed captures --------------------------------------------------


def _fuzzed(seed: int, n: int = 300) -> list[tuple[bytes, int]]:
    """(frame, link type): RoCE of every shape mutated by the structure-aware mutator
    (roce.testing.mutate), with bytes of no structure, PFC frames and native InfiniBand (whole
    and mutated) among them."""
    from roce import macc
    from roce.families import craft as ibcraft
    from roce.families.ib import native as ib
    from roce.testing.mutate import Mutator, random_frame

    rnd = random.Random(seed)
    mut = Mutator(random.Random(seed + 1))
    base = traffic(seed, n=40, faults=0.5)
    out: list[tuple[bytes, int]] = []
    for i in range(n):
        r = rnd.random()
        f = base[i % len(base)]
        if r < 0.45:
            out.append((mut.mutate(f).frame, locate.LINKTYPE_ETHERNET))
        elif r < 0.55:
            out.append((random_frame(rnd), locate.LINKTYPE_ETHERNET))
        elif r < 0.6:
            out.append((macc.build_pfc(bytes(6), {3: rnd.randrange(1 << 16)}),
                        locate.LINKTYPE_ETHERNET))
        elif r < 0.75:
            w = locate.walk(f)
            if w.status != locate.OK:
                continue
            pkt = ib.build(ibcraft.ib_transport(f, w.bth_off, w.icrc_off))
            if rnd.random() < 0.4:  # cut, or a byte changed
                k = rnd.randrange(len(pkt))
                pkt = pkt[:k] if rnd.random() < 0.5 else (
                    pkt[:k] + bytes([pkt[k] ^ 0x5A]) + pkt[k + 1:])
            out.append((pkt, locate.LINKTYPE_INFINIBAND))
        else:
            out.append((f, locate.LINKTYPE_ETHERNET))
    return out


def _write_fuzzed(path: Path, frames: list[tuple[bytes, int]]) -> Path:
    from roce.pcapio import PcapNgWriter

    with PcapNgWriter(path) as w:
        ifaces: dict[int, int] = {}
        for i, (data, lt) in enumerate(frames):
            if lt not in ifaces:
                ifaces[lt] = w.add_interface(lt)
            w.write(data, ts_ns=T0 + i * 1000, interface=ifaces[lt])
    return path


def _text_totals(out: str) -> dict[str, int]:
    """The frame lines of the text report's totals: ``frames`` and the parts under it."""
    block = out[out.index("Totals:"):]
    lines = block.splitlines()[2:]
    got: dict[str, int] = {}
    for line in lines:
        label, _, value = line.rstrip().rpartition("  ")
        if not line.startswith("  frames") and not line.startswith("    "):
            if got:
                break
            continue
        got[label.strip()] = int(value.replace(",", ""))
    return got


@settings(max_examples=examples(15), deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_totals_add_up_on_fuzzed_captures(seed: int, tmp_path_factory: pytest.TempPathFactory,
                                          ) -> None:
    """Every frame is counted once: the parts under ``frames`` add up to it, in both engines,
    in JSON and in the text, whatever the mutator made of the frames."""
    frames = _fuzzed(seed)
    path = _write_fuzzed(tmp_path_factory.mktemp("fuzzed") / "f.pcapng", frames)
    for engine in ("reference", "compiled") if AVAILABLE else ("reference",):
        with open_capture(path) as r:
            t = analyse(r, engine=engine).totals
        assert t["frames"] == len(frames)
        assert sum(t[k] for k in FRAME_PARTS) == t["frames"], (engine, t)
    out = io.StringIO()
    with open_capture(path) as r:
        report = analyse(r)
    from roce.analysis.statsview import render

    render(report, "f", out, rich=False)
    text = _text_totals(out.getvalue())
    assert text.pop("frames") == len(frames)
    assert sum(text.values()) == len(frames), text
    assert "InfiniBand packets" in text and "RoCE packets" in text


def test_native_infiniband_totals_say_infiniband(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from cm_helpers import cm_frames

    with PcapWriter(tmp_path / "ib.pcap", linktype=locate.LINKTYPE_INFINIBAND) as w:
        for i, f in enumerate(cm_frames()):
            w.write(f, ts_ns=T0 + i)
        w.write(b"\x00", ts_ns=T0 + 99)  # one malformed frame
    assert cli_main(["stats", str(tmp_path / "ib.pcap")]) == 0
    text = _text_totals(capsys.readouterr().out)
    assert text == {"frames": 7, "InfiniBand packets": 6, "malformed": 1,
                    "truncated by capture": 0, "not RoCE or InfiniBand": 0}


def _event_lines(r: Report) -> list[tuple[int, str, str]]:
    return [(e.frame, e.kind, e.line()) for e in r.events]


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
@settings(max_examples=examples(80), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), faults=st.sampled_from([0.0, 0.2, 1.0, 3.0]),
       n=st.sampled_from([20, 60, 200]),
       batch=st.sampled_from([1, 3, 16, 1024]), max_events=st.sampled_from([3, 10_000]))
def test_compiled_engine_is_the_references_twin(seed: int, faults: float, n: int,
                                                batch: int, max_events: int) -> None:
    """The compiled engine handles frames one by one in capture order, the reference a
    batch at a time: both give the same report, event for event (completion and round-trip
    times included: the frames come at random times)."""
    frames = stamped(traffic(seed, n=n, faults=faults), seed)
    ref = analyse(frames, batch=batch, max_events=max_events, engine="reference")
    got = analyse(frames, max_events=max_events, engine="compiled")
    assert got.to_dict() == ref.to_dict()
    assert _event_lines(got) == _event_lines(ref)
    assert got.event_counts == ref.event_counts


@st.composite
def wild_traffic(draw: st.DrawFn) -> list[Frame]:
    """Frames of every opcode (RC, UC, RD, UD, XRC, CNP; IPv4, IPv6, RoCEv1, VLAN) from a
    few templates, so flows build up; PSNs moved about (gaps, repeats, reordering); some
    mutated, some cut by a snap length, some noise."""
    templates = draw(st.lists(frames(roce_version=None, max_payload=300), min_size=1,
                              max_size=6))
    out: list[Frame] = []
    for i in range(draw(st.integers(1, 40))):
        data = draw(st.sampled_from(templates))
        w = fast.walk(data)
        if w.status == 0 and draw(st.booleans()):
            buf = bytearray(data)
            spec = locate.SPECS[("bth", "psn")]
            buf[w.bth_off + spec[0]:w.bth_off + spec[0] + spec[1]] = \
                draw(st.integers(0, 6)).to_bytes(spec[1], "big")
            data = fixup(bytes(buf))
        kind = draw(st.integers(0, 9))
        if kind == 0:
            data = draw(mutations(data))
        elif kind == 1:
            data = draw(st.binary(max_size=90))
        origlen = len(data)
        if kind == 2:
            data = data[:draw(st.integers(0, len(data)))]  # cut by the snap length
        out.append(Frame(data, T0 + i * 1000, len(data), origlen, 1, 0))
    return out


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
@settings(max_examples=examples(150), deadline=None)
@given(stream=wild_traffic(), batch=st.sampled_from([1, 4, 1024]),
       max_events=st.sampled_from([2, 10_000]))
def test_engines_agree_on_wild_traffic(stream: list[Frame], batch: int,
                                       max_events: int) -> None:
    ref = analyse(stream, batch=batch, max_events=max_events, engine="reference")
    got = analyse(stream, max_events=max_events, engine="compiled")
    assert got.to_dict() == ref.to_dict()
    assert got.totals["frames"] == len(stream)


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
@pytest.mark.parametrize("chunked", [False, True], ids=["mapped", "stream"])
def test_compiled_engine_reads_pcap_in_place(tmp_path: Path, chunked: bool) -> None:
    """A classic pcap is analysed in place (mapped file, or a pipe read in chunks), with the
    same result as frame by frame, also when records straddle the reader's steps."""
    frames = traffic(7, n=400, faults=1.0)
    path = write_capture(tmp_path / "t.pcap", frames)
    want = analyse(frames, engine="compiled").to_dict()
    a = make_analyzer(engine="compiled")
    with open_capture(io.BytesIO(path.read_bytes()) if chunked else path) as rd:
        offsets = list(rd.scan_records(a._consume, step=1000))
        assert rd.problems == []
    assert offsets == sorted(offsets) and offsets[-1] == path.stat().st_size
    got = a.finish().to_dict()
    assert got["totals"]["frames"] == len(frames)
    want["totals"]["first_ns"], want["totals"]["last_ns"] = (got["totals"]["first_ns"],
                                                             got["totals"]["last_ns"])
    for w, g in zip(want["flows"], got["flows"]):  # timestamps differ: bytes have none
        for k in ("first_ns", "last_ns", "start", "duration", "goodput_Bps", "throughput_Bps",
                  "completion_ns", "ack_rtt_ns"):
            w[k] = g[k]
    want["latency"] = got["latency"]
    for k in ("duration", "goodput_Bps", "throughput_Bps"):
        want["totals"][k] = got["totals"][k]
    for e in want["expert"]["events"] + got["expert"]["events"]:
        e["ts_ns"] = 0
    assert got == want


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
def test_compiled_engine_refuses_a_negative_position() -> None:
    a = make_analyzer(engine="compiled")
    with pytest.raises(ValueError, match="negative position"):
        a._consume(bytes(64), -16, 64, False, 1000, 1)


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
@pytest.mark.parametrize("chunked", [False, True], ids=["mapped", "stream"])
@pytest.mark.parametrize("damage", ["cut", "absurd"])
def test_compiled_engine_damaged_pcap(tmp_path: Path, chunked: bool, damage: str) -> None:
    """A capture cut mid-record, or with an absurd record length, keeps the good records
    and reports the problem at the right byte, on both read paths."""
    frames = [write_only(p) for p in range(10)]
    data = write_capture(tmp_path / "t.pcap", frames).read_bytes()
    rec = 16 + len(frames[0])
    at = 24 + 6 * rec  # the seventh record
    if damage == "cut":
        data = data[:at + 20]
    else:
        data = data[:at + 8] + (0x7FFFFFFF).to_bytes(4, "little") + data[at + 12:]
    path = tmp_path / "d.pcap"
    path.write_bytes(data)
    with open_capture(io.BytesIO(data) if chunked else path) as rd:
        r = analyse(rd, engine="compiled")
        problems = [(p.offset, p.message) for p in rd.problems]
    assert r.totals["frames"] == 6 and flow(r).packets == 6
    assert len(problems) == 1 and problems[0][0] == at
    assert ("truncated mid-record" if damage == "cut" else "absurd record length") \
        in problems[0][1]


# -- memory and speed ---------------------------------------------------------------------------


def big_capture(path: Path, n: int, payload: int = 64) -> Path:
    """n packets on 8 QPs (WRITE First/Middle/Last + ACK), PSN and ICRC patched in place."""
    tmpl = {}
    for q in range(8):
        for pos, name in enumerate(("RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE",
                                    "RC_RDMA_WRITE_LAST")):
            kw = {"va": 0, "rkey": 1, "dmalen": 3 * payload} if pos == 0 else {}
            tmpl[q, pos] = bytearray(roce.craft(name, bytes(payload), dqpn=0x100 + q, src=A,
                                                dst=f"10.0.1.{q}", **kw).to_bytes())
        tmpl[q, 3] = bytearray(roce.craft("RC_ACKNOWLEDGE", dqpn=0x200 + q, src=f"10.0.1.{q}",
                                          dst=A, syndrome=31).to_bytes())
    psn = [0] * 8
    with PcapWriter(path) as w:
        for i in range(n):
            q, pos = (i // 4) % 8, i % 4
            fr = tmpl[q, pos]
            p = psn[q] if pos < 3 else psn[q] - 1
            fr[51:54] = (p & 0xFFFFFF).to_bytes(3, "big")
            fr[-4:] = fast.icrc_check(bytes(fr))[1].to_bytes(4, "big")
            w.write(bytes(fr), ts_ns=T0 + i * 100)
            if pos < 3:
                psn[q] += 1
    return path


def peak_memory(path: Path) -> tuple[Report, int]:
    tracemalloc.start()
    try:
        with open_capture(path) as rd:
            r = analyse(rd)
        return r, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_stays_flat(tmp_path: Path) -> None:
    # ROCE_SLOW_TESTS=1 runs the full-size variant (200k packets, ~90 MB, ~10 s traced).
    n = 200_000 if os.environ.get("ROCE_SLOW_TESTS") else 40_000
    small = big_capture(tmp_path / "small.pcap", n // 4, payload=512)
    big = big_capture(tmp_path / "big.pcap", n, payload=512)
    _, peak_small = peak_memory(small)
    r, peak_big = peak_memory(big)
    assert r.totals["frames"] == n and r.events == []
    assert r.totals["messages"] == n // 4
    # Frames are not kept: the peak is the reader's buffers plus a batch, whatever the size
    # of the file (the reader alone peaks near 4 MB with its 1 MiB chunks).
    assert peak_big < 8 << 20 and peak_big < big.stat().st_size / 2, peak_big
    assert abs(peak_big - peak_small) < 512 << 10, (peak_small, peak_big)


_RSS_PROBE = """
import resource, sys
from roce.cli import main
sys.stdout = open("/dev/null", "w")
main(["stats", sys.argv[1]])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def peak_rss_kb(path: Path) -> int:
    """Peak RSS of a fresh ``roce stats`` process: the mapped file counts once touched."""
    out = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(path)], capture_output=True,
                         text=True, check=True)
    return int(out.stderr.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in kB is Linux's")
def test_resident_memory_stays_flat(tmp_path: Path) -> None:
    """The capture is read in place from a memory map whose pages are released behind the
    engine: a 64 MB file must not add tens of MB to the process."""
    small = big_capture(tmp_path / "small.pcap", 4_000, payload=1024)
    big = big_capture(tmp_path / "big.pcap", 80_000, payload=1024)
    assert big.stat().st_size > 64e6
    grow_kb = peak_rss_kb(big) - peak_rss_kb(small)
    assert grow_kb < 16 * 1024, grow_kb


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
def test_engines_agree_on_a_big_capture(tmp_path: Path) -> None:
    """40,000 packets on 8 QPs, read in place by the compiled engine and batch by batch by
    the reference: the same report (speed is measured in bench/bench_decode.py)."""
    path = big_capture(tmp_path / "s.pcap", 40_000)
    with open_capture(path) as rd:
        got = analyse(rd, engine="compiled")
    with open_capture(path) as rd:
        ref = analyse(rd, engine="reference")
    assert got.to_dict() == ref.to_dict()
    assert got.totals["frames"] == 40_000 and len(got.flows) == 16


# -- the CLI ------------------------------------------------------------------------------------


def sample(tmp_path: Path) -> Path:
    frames = [write_only(p) for p in (0, 1, 2, 4, 5)]
    frames += [ack(3, AETH_NAK, 0, msn=3), *[write_only(p) for p in (3, 4, 5)]]
    frames += [rsp(0x81, 0), write_only(6, ecn="ce")]
    return write_capture(tmp_path / "s.pcap", frames)


def test_cli_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["stats", str(sample(tmp_path))]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "Connection 1: 10.0.0.1 QP 0x000012 <-> 10.0.0.2 QP 0x000011" in out
    assert "10.0.0.1 -> 10.0.0.2" in out and "Totals" in out
    assert "#4 QP 0x000011 PSN gap: expected 0x000003, got 0x000004 (1 missing)" in out
    assert "#10 QP 0x000012 CNP" in out
    # Errors first, then warnings, then notes.
    sev = [ln.split()[0] for ln in out.splitlines() if ln.strip().startswith(("warning ",
                                                                             "note ", "error "))]
    assert sev == sorted(sev, key=["error", "warning", "note"].index)
    assert "\x1b[" not in out  # plain text when not a terminal


def test_cli_expert_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frames = [write_only(p, ecn="ce") for p in range(30)]
    path = write_capture(tmp_path / "e.pcap", frames)
    assert cli_main(["stats", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("ECN CE\n") == 20 and "20 of 30 shown; --expert lists all" in out
    assert cli_main(["stats", "--expert", str(path)]) == 0
    assert capsys.readouterr().out.count("ECN CE\n") == 30


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["stats", "-T", "json", str(sample(tmp_path))]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"capture", "totals", "connections", "flows", "expert", "problems",
                         "pfc", "congestion", "latency"}
    assert doc["capture"]["format"] == "pcap"
    assert doc["totals"]["gaps"] == 1 and doc["totals"]["retransmissions"] == 2
    assert doc["connections"] == [{"flows": [0, 1], "endpoints": [
        {"address": A, "qp": QA}, {"address": B, "qp": QB}]}]
    f = doc["flows"][0]
    assert (f["src"], f["dst"], f["qp"], f["peer"]) == (A, B, QB, 1)
    assert f["psn"]["gaps"] == 1 and f["psn"]["late"] == 1 and f["ecn_ce"] == 1
    assert doc["flows"][1]["naks"] == {"PSN sequence error": 1} and doc["flows"][1]["cnps"] == 1
    ex = doc["expert"]
    assert ex["counts"] == {"cnp": 1, "ecn_ce": 1, "gap": 1, "nak_sequence": 1,
                            "out_of_order": 1, "retransmission": 2}
    assert ex["by_severity"] == {"error": 0, "warning": 5, "note": 2}
    assert ex["events"][0] == {"frame": 4, "severity": "warning", "kind": "gap", "flow": 0,
                               "qp": QB, "text": "PSN gap: expected 0x000003, got 0x000004 "
                               "(1 missing)", "line": "#4 QP 0x000011 PSN gap: expected "
                               "0x000003, got 0x000004 (1 missing)", "ts_ns": T0 + 3000}


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "roce", "stats", *args], input=stdin,
                          capture_output=True, timeout=60)


def test_cli_stdin(tmp_path: Path) -> None:
    data = sample(tmp_path).read_bytes()
    p = run_cli("-", "-T", "json", stdin=data)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["totals"]["frames"] == 11


@pytest.mark.parametrize(("make", "words"), [
    (lambda d: d / "missing.pcap", "no such file"),
    (lambda d: (d / "bad.pcap", (d / "bad.pcap").write_bytes(b"NOTAPCAPFILE" * 4))[0],
     "not a pcap or pcapng file"),
    (lambda d: (d / "empty.pcap", (d / "empty.pcap").write_bytes(b""))[0], "empty"),
    (lambda d: d, "directory"),
])
def test_cli_unreadable_input_exits_2(tmp_path: Path, make, words: str) -> None:
    p = run_cli(str(make(tmp_path)))
    err = p.stderr.decode()
    assert p.returncode == 2 and p.stdout == b""
    assert len(err.strip().splitlines()) == 1 and words in err and "Traceback" not in err


@pytest.mark.parametrize("args", [[], ["-T", "xml", "f"], ["--udp-port", "x", "f"],
                                  ["--udp-port", "70000", "f"]])
def test_cli_bad_usage_exits_1(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        rc = cli_main(["stats", *args])
    except SystemExit as exc:  # a bad option value: the parser exits
        rc = exc.code
    assert rc == 1
    err = capsys.readouterr().err
    assert err.startswith("roce stats: ") and len(err.strip().splitlines()) == 1


def test_cli_truncated_capture_warns_and_exits_0(tmp_path: Path) -> None:
    path = sample(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-30])
    p = run_cli(str(path))
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert len(err.strip().splitlines()) == 1 and "warning" in err and "truncated" in err
    assert b"Totals" in p.stdout


def test_cli_malformed_frames_exit_0(tmp_path: Path) -> None:
    path = write_capture(tmp_path / "m.pcap", [write_only(0), write_only(1)[:60]])
    p = run_cli(str(path))
    assert p.returncode == 0 and b"malformed: RETH truncated" in p.stdout


def test_rich_rendering(tmp_path: Path) -> None:
    import io

    from roce.analysis.statsview import render

    with open_capture(sample(tmp_path)) as rd:
        r = analyse(rd)
    buf = io.StringIO()
    render(r, "s.pcap", buf, rich=True)
    text = buf.getvalue()
    assert "Connection 1" in text and "PSN gap: expected 0x000003" in text


def test_analyzer_feed_in_pieces() -> None:
    frames = [write_only(p) for p in range(10) if p != 4]
    a = Analyzer(batch=3)
    a.feed(frames[:5])
    a.feed(frames[5:])
    r = a.finish()
    assert r.totals["gaps"] == 1 and r.to_dict() == analyse(frames, batch=3).to_dict()
