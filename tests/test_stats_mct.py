"""Message completion times and ACK round-trip times from captures (roce.analysis.flowrules,
"completion times", "ACK round-trip times", "latency histogram"): hand-built captures with
known timestamps, in both engines; retransmissions (Karn's rule), READs and atomics, selective
NAKs, unacknowledged messages, several flows between the same hosts; native InfiniBand; the
JSON, Parquet and text reports; bounded memory; and the histogram's stated error.
"""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples
from test_stats import (
    ENGINES,
    MTU,
    QA,
    QB,
    T0,
    ack,
    flow,
    message,
    read_req,
    read_resp,
    req,
    rsp,
    write_only,
)

import roce
from roce import locate
from roce.analysis import flowref
from roce.analysis import flowrules as R
from roce.analysis.cflows import AVAILABLE
from roce.analysis.flows import analyse
from roce.cli import main as cli_main
from roce.headers import AETH_ACK, AETH_NAK, AETH_RNR_NAK, NAK_PSN_SEQUENCE_ERROR, syndrome
from roce.pcapio import Frame, PcapWriter, open_capture

A, B = "10.0.0.1", "10.0.0.2"


def write_pcap(path: Path, frames: list[tuple[bytes, int]], linktype: int = 1) -> Path:
    """Frames at ``T0 + t`` ns each."""
    with PcapWriter(path, linktype) as w:
        for data, t in frames:
            w.write(data, ts_ns=T0 + t)
    return path


@pytest.fixture(params=ENGINES)
def run(request: pytest.FixtureRequest, tmp_path: Path):
    """(frame, time in ns from T0) pairs written to a pcap (ns resolution) and analysed."""

    def go(frames: list[tuple[bytes, int]], **kw: object):
        path = write_pcap(tmp_path / "t.pcap", frames)
        with open_capture(path) as rd:
            return analyse(rd, engine=request.param, **kw)

    return go


def close(got: int, exact: int) -> bool:
    """Within the histogram's stated error (flowrules, "latency histogram")."""
    return abs(got - exact) <= exact / (1 << (R.LATENCY_SUB_BITS + 1))


def nak(psn: int, code: int = NAK_PSN_SEQUENCE_ERROR, msn: int = 0) -> bytes:
    return ack(psn, AETH_NAK, code, msn=msn)


def atomic(psn: int) -> bytes:
    return req("RC_FETCH_ADD", psn, va=0x3000, rkey=1, add=1)


def atomic_ack(psn: int) -> bytes:
    return rsp("RC_ATOMIC_ACKNOWLEDGE", psn, syndrome=syndrome(AETH_ACK, 31), msn=1)


# -- completion at the acknowledgement covering the last PSN -----------------------------------


def test_a_message_completes_at_the_ack_covering_its_last_psn(run) -> None:
    w = message("WRITE", 0, 3000)  # PSNs 0, 1, 2
    r = run([(w[0], 0), (w[1], 100), (w[2], 200), (write_only(3), 300),
             (ack(1), 700),  # covers the first two packets only: nothing completes
             (ack(2, msn=1), 1200), (ack(3, msn=2), 1500)])
    f = flow(r)
    assert (f.timed, f.unacked) == (2, 0)
    assert f.completion == {"min": 1200, "p50": 1200, "p99": 1200, "max": 1200}
    # probes: the Last (PSN 2, sent at 200, ACK at 1200) and the Only (300, 1500)
    assert (f.rtt_samples, f.rtt_excluded) == (2, 0)
    assert f.ack_rtt == {"min": 1000, "p50": 1000, "p99": 1200, "max": 1200}
    assert flow(r, QA).timed == 0 and flow(r, QA).completion is None
    assert r.latency == {"completion_ns": f.completion, "ack_rtt_ns": f.ack_rtt}
    assert r.totals["timed_messages"] == 2 and r.totals["ack_rtt_samples"] == 2


def test_a_coalesced_ack_completes_every_message_it_covers(run) -> None:
    r = run([(write_only(p), 100 * p) for p in range(3)] + [(ack(2, msn=3), 1000)])
    f = flow(r)
    assert f.timed == 3 and f.rtt_samples == 3
    assert f.completion == {"min": 800, "p50": 900, "p99": 1000, "max": 1000}
    assert f.ack_rtt == f.completion  # each message one packet, each a probe


def test_an_ackreq_packet_is_a_probe(run) -> None:
    w = message("SEND", 10, 3000)
    mid = req("RC_SEND_MIDDLE", 11, bytes(1024), a=1)
    r = run([(w[0], 0), (mid, 100), (w[2], 200), (ack(11), 400), (ack(12, msn=1), 900)])
    f = flow(r)
    assert f.timed == 1 and f.completion["max"] == 900
    # the Middle with AckReq (100 -> 400) and the Last (200 -> 900)
    assert f.rtt_samples == 2 and (f.ack_rtt["min"], f.ack_rtt["max"]) == (300, 700)


# -- retransmissions ----------------------------------------------------------------------------


def test_a_retransmitted_message_counts_from_its_first_transmission(run) -> None:
    w = message("WRITE", 0, 3000)
    r = run([(w[0], 0), (w[2], 200),  # PSN 1 lost
             (nak(1), 500),  # covers PSN 0, nothing ends there
             (w[1], 600), (w[2], 700),  # go-back-N from 1
             (ack(2, msn=1), 1000)])
    f = flow(r)
    assert f.timed == 1 and f.completion["min"] == f.completion["max"] == 1000
    # Karn: the Last (PSN 2) was sent twice before its ACK: no sample
    assert (f.rtt_samples, f.rtt_excluded) == (0, 1) and f.ack_rtt is None


def test_a_nak_covers_what_lies_before_its_psn(run) -> None:
    w = message("WRITE", 0, 3000)
    first = req("RC_RDMA_WRITE_FIRST", 0, bytes(1024), va=0x1000, rkey=0x22, dmalen=3000, a=1)
    r = run([(first, 0), (w[2], 200), (nak(1), 500), (w[1], 600), (w[2], 700),
             (ack(2, msn=1), 1000)])
    f = flow(r)
    # the First asked for an ACK; the NAK (ePSN 1) answers it: 500 ns
    assert (f.rtt_samples, f.rtt_excluded) == (1, 1) and f.ack_rtt["max"] == 500


def test_a_resend_after_the_ack_changes_nothing(run) -> None:
    r = run([(write_only(0), 0), (ack(0), 400), (write_only(0), 500), (ack(0), 900)])
    f = flow(r)
    assert f.spurious == 1  # the resend was spurious
    assert (f.timed, f.rtt_samples, f.rtt_excluded) == (1, 1, 0)
    assert f.completion["max"] == 400 and f.ack_rtt["max"] == 400


def test_rnr_nak_covers_before_its_psn_and_the_retry_gets_no_sample(run) -> None:
    rnr = ack(1, AETH_RNR_NAK, 1)
    r = run([(write_only(0), 0), (write_only(1), 100), (rnr, 300), (write_only(1), 1300),
             (ack(1, msn=2), 1600)])
    f = flow(r)
    assert f.timed == 2
    assert (f.completion["min"], f.completion["max"]) == (300, 1500)
    assert (f.rtt_samples, f.rtt_excluded) == (1, 1) and f.ack_rtt["max"] == 300


# -- READs and atomics ------------------------------------------------------------------------


def test_a_read_completes_at_its_last_response(run) -> None:
    rs = read_resp(100, 3000)  # PSNs 100, 101, 102
    r = run([(read_req(100, 3000), 0), (rs[0], 300), (rs[1], 400), (rs[2], 500),
             (write_only(103), 600), (ack(103, msn=2), 900)])
    f = flow(r)
    assert f.messages["read"]["count"] == 1 and f.timed == 2
    assert (f.completion["min"], f.completion["max"]) == (300, 500)
    # the READ request's first response (300) and the WRITE's ACK (300)
    assert f.rtt_samples == 2 and f.ack_rtt["min"] == f.ack_rtt["max"] == 300


def test_pipelined_reads_each_complete_at_their_own_last_response(run) -> None:
    r = run([(read_req(0, 2048), 0), (read_req(2, 1024), 50), *[
        (x, 400 + 100 * i) for i, x in enumerate(read_resp(0, 2048) + read_resp(2, 1024))]])
    f = flow(r)
    assert f.timed == 2
    # READ at 0 (PSNs 0-1) ends at its Last at 500; READ at 2 (sent at 50) at 600
    assert (f.completion["min"], f.completion["max"]) == (500, 550)


def test_an_ack_past_a_read_leaves_it_waiting_for_its_response(run) -> None:
    # READ (PSN 10) and WRITE (11) sent; the READ's response is lost and an ACK for 11
    # comes: an implied NAK.  The READ asked again is answered at 900.
    r = run([(read_req(10, 100), 0), (write_only(11), 100), (ack(11, msn=2), 500),
             (read_req(10, 100), 600), (read_resp(10, 100)[0], 900)])
    f = flow(r)
    assert (f.timed, f.unacked) == (2, 0)
    assert (f.completion["min"], f.completion["max"]) == (400, 900)


def test_an_atomic_completes_at_its_atomic_ack(run) -> None:
    r = run([(atomic(5), 0), (atomic_ack(5), 700)])
    f = flow(r)
    assert f.messages["atomic"]["count"] == 1 and f.timed == 1 and f.rtt_samples == 1
    assert f.completion["max"] == 700 and f.ack_rtt["max"] == 700


def test_an_ack_past_an_atomic_without_its_response_leaves_it_unacknowledged(run) -> None:
    r = run([(atomic(5), 0), (write_only(6), 100), (ack(6, msn=2), 500)])
    f = flow(r)
    assert (f.timed, f.unacked) == (1, 1)  # the WRITE timed, the atomic never answered
    assert f.completion["max"] == 400


# -- selective repeat -----------------------------------------------------------------------------


def test_a_selective_nak_completes_only_what_its_cumulative_psn_covers(run) -> None:
    sack = nak(1, msn=2)  # ePSN 1, PSN 2 arrived out of order
    r = run([(write_only(0), 0), (write_only(2), 200), (write_only(3), 300),
             (ack(0, msn=1), 350), (sack, 400), (write_only(1), 500), (ack(3, msn=4), 800)])
    f = flow(r, QA)
    assert f.selective_naks == 1
    f = flow(r)
    # 0 done at 350; the selective NAK names 2 but completes nothing; 1 (sent at 500), 2 and
    # 3 at the ACK (800)
    assert (f.timed, f.unacked) == (4, 0)
    assert (f.completion["min"], f.completion["max"]) == (300, 600)
    assert f.rtt_samples == 4 and f.rtt_excluded == 0


# -- unacknowledged and uncounted -----------------------------------------------------------------


def test_messages_never_acknowledged_are_counted_not_timed(run) -> None:
    w = message("SEND", 5, 2048)  # its Last is acknowledged, the WRITE after it never is
    r = run([(w[0], 0), (w[1], 100), (ack(6, msn=1), 400), (write_only(7), 500),
             (write_only(8), 600)])
    f = flow(r)
    assert (f.timed, f.unacked) == (1, 2)
    assert r.totals["unacknowledged_messages"] == 2


def test_a_message_begun_before_the_capture_is_neither_timed_nor_counted(run) -> None:
    w = message("SEND", 5, 3000)
    r = run([(w[1], 0), (w[2], 100), (write_only(8), 200), (ack(8, msn=2), 600)])
    f = flow(r)
    assert (f.timed, f.unacked) == (1, 0) and f.completion["max"] == 400


def test_a_first_lost_before_the_capture_counts_from_the_first_packet_seen(run) -> None:
    w = message("WRITE", 0, 3000)
    r = run([(w[1], 100), (w[2], 200),  # the First never reached the capture point
             (nak(0), 300), (w[0], 400), (w[1], 500), (w[2], 600), (ack(2, msn=1), 900)])
    f = flow(r)
    assert (f.timed, f.unacked) == (1, 0) and f.completion["max"] == 800


def test_uc_and_ud_have_no_completion_times(run) -> None:
    uc = roce.craft("UC_SEND_ONLY", b"abc", dqpn=0x55, psn=1, src=A, dst=B).to_bytes()
    ud = roce.craft("UD_SEND_ONLY", b"abc", dqpn=0x44, psn=9, src=A, dst=B).to_bytes()
    r = run([(uc, 0), (ud, 100), (ack(1), 500)])
    for qp in (0x55, 0x44):
        f = flow(r, qp)
        assert (f.timed, f.unacked, f.rtt_samples) == (0, 0, 0) and f.completion is None


# -- several flows --------------------------------------------------------------------------------


def to_qp(frame: bytes, qp: int) -> bytes:
    """The frame to another destination QP (ICRC left as it was: fine for the flow
    analysis)."""
    w = locate.walk(frame)
    off, n, _, _ = locate.SPECS[("bth", "destqp")]
    at = w.bth_off + off
    return frame[:at] + qp.to_bytes(n, "big") + frame[at + n:]


def test_two_connections_between_the_same_hosts_keep_their_own_times(run) -> None:
    # Connection 1: requests to QP QB at PSN 0.., its ACKs to QA.  Connection 2: requests to
    # QP 0x77 at PSN 5000.., its ACKs to QP 0x78.  Interleaved.
    frames = []
    for i in range(4):
        frames.append((write_only(i), 1000 * i))
        frames.append((to_qp(write_only(5000 + i), 0x77), 1000 * i + 10))
        frames.append((to_qp(ack(5000 + i), 0x78), 1000 * i + 510))  # 500 ns
        frames.append((ack(i), 1000 * i + 300))  # 300 ns
    frames.sort(key=lambda x: x[1])
    r = run(frames)
    one, two = flow(r), flow(r, 0x77)
    assert one.timed == two.timed == 4
    assert one.completion == {"min": 300, "p50": 300, "p99": 300, "max": 300}
    assert two.completion == {"min": 500, "p50": 500, "p99": 500, "max": 500}
    assert r.latency["completion_ns"]["min"] == 300
    assert r.latency["completion_ns"]["max"] == 500


def test_two_connections_from_the_same_psn_are_told_apart_by_what_waits(run) -> None:
    # both start at PSN 0, one after the other: the first ACK of each finds one candidate
    frames = [(write_only(0), 0), (ack(0), 200), (to_qp(write_only(0), 0x77), 1000),
              (to_qp(ack(0), 0x78), 1400), (write_only(1), 2000), (ack(1), 2200),
              (to_qp(write_only(1), 0x77), 3000), (to_qp(ack(1), 0x78), 3400)]
    r = run(frames)
    assert flow(r).completion["max"] == 200 and flow(r, 0x77).completion["min"] == 400


# -- native InfiniBand --------------------------------------------------------------------------


def test_native_infiniband_gets_the_same_times(tmp_path: Path) -> None:
    from test_ibflows import to_ib

    rs = read_resp(100, 3000)
    frames = [(read_req(100, 3000), 0), (rs[0], 300), (rs[1], 400), (rs[2], 500),
              (write_only(103), 600), (write_only(104), 650), (ack(104, msn=3), 900)]
    lids: dict[bytes, int] = {}
    ib = [(to_ib(d, lids), t) for d, t in frames]
    ib_path = write_pcap(tmp_path / "ib.pcap", ib, locate.LINKTYPE_INFINIBAND)
    roce_path = write_pcap(tmp_path / "roce.pcap", frames)
    for engine in ("reference", "compiled") if AVAILABLE else ("reference",):
        got = []
        for path in (roce_path, ib_path):
            with open_capture(path) as rd:
                f = [x for x in analyse(rd, engine=engine).flows if x.req is not None][0]
            got.append((f.timed, f.unacked, f.rtt_samples, f.completion, f.ack_rtt))
        assert got[0] == got[1]
        assert got[0][:3] == (3, 0, 3) and got[0][3]["max"] == 500


# -- the reports ----------------------------------------------------------------------------------


def _capture(tmp_path: Path) -> Path:
    return write_pcap(tmp_path / "c.pcap", [(write_only(p), 100 * p) for p in range(4)]
                      + [(ack(2, msn=3), 1000), (write_only(4), 1100), (ack(4, msn=5), 13_100)])


def test_json_carries_the_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["stats", "-T", "json", str(_capture(tmp_path))]) == 0
    doc = json.loads(capsys.readouterr().out)
    f = [x for x in doc["flows"] if x["qp"] == QB][0]
    assert (f["timed_messages"], f["unacknowledged_messages"]) == (5, 0)
    assert (f["ack_rtt_samples"], f["ack_rtt_excluded"]) == (5, 0)
    # MCTs 1000, 900, 800, then 12,800 (PSN 3, sent at 300) and 12,000 at the ACK of 4
    assert f["completion_ns"] == {"min": 800, "p50": 1000, "p99": 12_800, "max": 12_800}
    assert f["ack_rtt_ns"] == f["completion_ns"]
    assert doc["latency"] == {"completion_ns": f["completion_ns"],
                              "ack_rtt_ns": f["ack_rtt_ns"]}
    t = doc["totals"]
    assert (t["timed_messages"], t["unacknowledged_messages"], t["ack_rtt_samples"]) == (5, 0, 5)


def test_parquet_carries_the_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    cap = _capture(tmp_path)
    assert cli_main(["stats", "-T", "json", str(cap)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert cli_main(["stats", "-T", "parquet", "-w", str(tmp_path / "t"), str(cap)]) == 0
    t = pq.read_table(tmp_path / "t" / "flows.parquet")
    plain = pa.Table.from_arrays([c.cast(pa.int64()) if pa.types.is_duration(c.type)
                                  or pa.types.is_timestamp(c.type) else c
                                  for c in t.columns], names=t.column_names)
    rows = {r["qp"]: r for r in plain.to_pylist()}
    want = [x for x in doc["flows"] if x["qp"] == QB][0]
    got = rows[QB]
    for key in ("min", "p50", "p99", "max"):
        assert got[f"completion.{key}"] == want["completion_ns"][key]
        assert got[f"ack_rtt.{key}"] == want["ack_rtt_ns"][key]
    for key in ("timed_messages", "unacknowledged_messages", "ack_rtt_samples",
                "ack_rtt_excluded"):
        assert got[key] == want[key]
    assert rows[QA]["completion.p50"] is None and rows[QA]["timed_messages"] == 0
    assert str(t.schema.field("completion.p99").type) == "duration[ns]"
    # the capture's times: one row, as the JSON report's "latency" and totals
    t = pq.read_table(tmp_path / "t" / "latency.parquet")
    (row,) = pa.Table.from_arrays([c.cast(pa.int64()) if pa.types.is_duration(c.type) else c
                                   for c in t.columns], names=t.column_names).to_pylist()
    assert row["capture"] == str(cap)
    for key in ("min", "p50", "p99", "max"):
        assert row[f"completion.{key}"] == doc["latency"]["completion_ns"][key]
        assert row[f"ack_rtt.{key}"] == doc["latency"]["ack_rtt_ns"][key]
    assert (row["completion.p50"], row["completion.max"]) == (1000, 12_800)
    assert (row["timed_messages"], row["unacknowledged_messages"], row["ack_rtt_samples"]) == (
        5, 0, 5)


def test_text_shows_the_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["stats", str(_capture(tmp_path))]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines)) <= 100

    def row(label: str) -> list[str]:
        return [x for x in lines if x.strip().startswith(label)]

    conn, total = row("completion p50 / p99")
    assert "1.000 us / 12.800 us" in conn and "1.000 us / 12.800 us" in total
    assert row("messages timed")[0].split()[-2:] == ["5", "0"]
    assert row("messages timed")[1].split()[-1] == "5"  # the totals
    assert "0.800 us / 12.800 us" in row("ACK RTT min / max")[0]
    conn, total = row("completion min / max")  # the slowest message: PSN 3, 300 -> 13,100
    assert "0.800 us / 12.800 us" in conn and "0.800 us / 12.800 us" in total


# -- memory -----------------------------------------------------------------------------------


def one_way(path: Path, n: int, acks: bool) -> Path:
    """``n`` one-packet WRITEs on one QP; with ``acks`` each is acknowledged after a time
    that changes from message to message (so the histogram meets many buckets)."""
    tmpl = bytearray(write_only(0, 64))
    ack_tmpl = bytearray(ack(0))
    w = locate.walk(bytes(tmpl))
    at = w.bth_off + locate.SPECS[("bth", "psn")][0]
    rnd = random.Random(1)
    with PcapWriter(path) as out:
        t = T0
        for i in range(n):
            tmpl[at:at + 3] = (i & 0xFFFFFF).to_bytes(3, "big")
            out.write(bytes(tmpl), ts_ns=t)
            if acks:
                ack_tmpl[at:at + 3] = (i & 0xFFFFFF).to_bytes(3, "big")
                t += rnd.choice((1, 10, 1000, 10 ** 6, 10 ** 9))
                out.write(bytes(ack_tmpl), ts_ns=t)
            t += 100
    return path


def _peak(path: Path, engine: str):
    tracemalloc.start()
    try:
        with open_capture(path) as rd:
            r = analyse(rd, engine=engine)
        return r, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("acks", [False, True], ids=["never-acked", "acked"])
def test_memory_stays_bounded_on_a_long_capture(tmp_path: Path, acks: bool) -> None:
    """A capture of many messages keeps no completion time: never acknowledged, at most
    MAX_OUTSTANDING wait (the rest are counted); acknowledged, the histogram holds counts."""
    engine = "compiled" if AVAILABLE else "reference"
    big_n = 4 * R.MAX_OUTSTANDING  # both sizes past MAX_OUTSTANDING: the rings are full
    small = one_way(tmp_path / "s.pcap", 3 * R.MAX_OUTSTANDING // 2, acks)
    big = one_way(tmp_path / "b.pcap", big_n, acks)
    _, peak_small = _peak(small, engine)
    r, peak_big = _peak(big, engine)
    f = flow(r)
    if acks:
        assert (f.timed, f.unacked, f.rtt_samples) == (big_n, 0, big_n)
        assert f.completion["max"] == 10 ** 9
    else:
        assert (f.timed, f.unacked) == (0, big_n)
    # what waits is at most MAX_OUTSTANDING per ring in both (16 bytes each): a completion
    # time kept per message would add 8 bytes each, 800 kB here
    assert peak_big - peak_small < 256 << 10, (peak_small, peak_big)


def test_a_histogram_never_holds_more_than_its_buckets() -> None:
    h = flowref._Hist()
    for e in range(63):
        h.add((1 << e) + 12345 % (1 << e), 1)
    h.add((1 << 63) - 1, 1)
    assert h.size <= R.LATENCY_BUCKETS and len(h.b) == h.size
    assert h.n == 64 and h.most == (1 << 63) - 1 and h.least == 1
    assert R.LATENCY_BUCKETS * 8 < 30_000


# -- the histogram's rule and its stated error ----------------------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(v=st.integers(0, (1 << 63) - 1))
def test_a_bucket_holds_its_value_and_is_narrow(v: int) -> None:
    k = flowref._bucket(v)
    low, width = flowref._bucket_low(k), flowref._bucket_width(k)
    assert 0 <= k < R.LATENCY_BUCKETS
    assert low <= v < low + width
    assert width == 1 or width <= low >> R.LATENCY_SUB_BITS
    assert flowref._bucket(low + width - 1) == k and flowref._bucket(low) == k


@settings(max_examples=examples(100), deadline=None)
@given(values=st.lists(st.one_of(st.integers(0, 200), st.integers(0, 10 ** 12)), min_size=1,
                       max_size=300))
def test_quantiles_are_within_the_stated_error(values: list[int]) -> None:
    h = flowref._Hist()
    for v in values:
        h.add(v, 1)
    s = sorted(values)
    exact = {q: s[max(1, -(-q * len(s) // 100)) - 1] for q in (50, 99)}
    got = h.summary()
    assert (got["min"], got["max"]) == (s[0], s[-1])
    for q in (50, 99):
        assert close(got[f"p{q}"], exact[q]), (q, got, exact)
    # merged histograms are the histogram of all the values
    a, b = flowref._Hist(), flowref._Hist()
    for i, v in enumerate(values):
        (a if i % 2 else b).add(v, 1)
    a.merge(b)
    assert a.summary() == got


# -- the twins --------------------------------------------------------------------------------


def set_psn(frame: bytes, psn: int) -> bytes:
    """The frame with another PSN (ICRC left as it was)."""
    off, n, _, _ = locate.SPECS[("bth", "psn")]
    at = locate.walk(frame).bth_off + off
    return frame[:at] + (psn & 0xFFFFFF).to_bytes(n, "big") + frame[at + n:]


def ackreq(frame: bytes) -> bytes:
    """The frame with AckReq set (ICRC left as it was)."""
    off, n, shift, mask = locate.SPECS[("bth", "a")]
    at = locate.walk(frame).bth_off + off
    return frame[:at] + bytes([frame[at] | (mask << shift)]) + frame[at + 1:]


def timed_traffic(seed: int, n: int) -> list[Frame]:
    """Requests of every kind on two connections between the same hosts, with ACKs, NAKs,
    selective NAKs, READ responses and atomic ACKs, losses, resends and reordering, at
    random times."""
    rnd = random.Random(seed)
    nxt = {QB: rnd.choice([0, (1 << 24) - 40, rnd.randrange(1 << 24)]),
           0x77: rnd.choice([0, rnd.randrange(1 << 24)])}
    back = {QB: QA, 0x77: 0x78}
    sent: dict[int, list[bytes]] = {QB: [], 0x77: []}
    out: list[bytes] = []
    while len(out) < n:
        qp = rnd.choice(list(nxt))
        p = nxt[qp]
        k = rnd.random()
        if k < 0.35:
            size = rnd.choice([0, 100, 1024, 3000])
            pkts = [set_psn(x, p + j) for j, x in
                    enumerate(message(rnd.choice(["WRITE", "SEND"]), 0, size))]
            nxt[qp] = (p + len(pkts)) & 0xFFFFFF
        elif k < 0.45:
            size = rnd.choice([100, 2048, 4096])
            pkts = [read_req(p, size)]
            nxt[qp] = (p + max(2, size // MTU)) & 0xFFFFFF
        elif k < 0.5:
            pkts = [atomic(p)]
            nxt[qp] = (p + 1) & 0xFFFFFF
        elif k < 0.7:
            e = (p - rnd.randrange(0, 4)) & 0xFFFFFF
            kind = rnd.choice([AETH_ACK] * 4 + [AETH_NAK, AETH_RNR_NAK])
            pkts = [ack((e - 1) & 0xFFFFFF if kind == AETH_ACK else e, kind,
                        0 if kind == AETH_NAK else 31)]
        elif k < 0.75:
            e = (p - rnd.randrange(1, 6)) & 0xFFFFFF
            pkts = [nak(e, msn=(e + rnd.randrange(1, 4)) & 0xFFFFFF)]
        elif k < 0.85:  # READ responses (with Middles at 4096 bytes) or an atomic ACK
            size = rnd.choice([100, 2048, 4096])
            e = (p - max(2, size // MTU)) & 0xFFFFFF
            if rnd.random() < 0.7:
                rs = read_resp(0, size)
                pkts = [set_psn(x, e + j) for j, x in enumerate(rs)]
            else:
                pkts = [atomic_ack((p - 1) & 0xFFFFFF)]
        else:  # resend what was sent a little before
            pkts = sent[qp][-rnd.randrange(1, 4):]
        if k < 0.5 or k >= 0.85:
            pkts = [to_qp(x, qp) for x in pkts]
            sent[qp] = (sent[qp] + pkts)[-8:]
        else:
            pkts = [to_qp(x, back[qp]) for x in pkts]
        for x in pkts:
            if rnd.random() < 0.05:
                continue  # lost
            if rnd.random() < 0.05:
                x = ackreq(x)
            out.append(x)
        if len(out) > 2 and rnd.random() < 0.1:
            out[-1], out[-2] = out[-2], out[-1]
    t = T0
    frames = []
    for x in out:
        t += rnd.choice([0, 1, 50, 1000, 70_000])
        frames.append(Frame(x, t, len(x), len(x), 1, 0))
    return frames


@pytest.mark.skipif(not AVAILABLE, reason="fast path not built")
@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([30, 120, 400]),
       batch=st.sampled_from([1, 3, 1024]))
def test_engines_agree_on_completion_times(seed: int, n: int, batch: int) -> None:
    frames = timed_traffic(seed, n)
    ref = analyse(frames, batch=batch, engine="reference")
    got = analyse(frames, engine="compiled")
    assert got.to_dict() == ref.to_dict()


def test_the_twin_traffic_times_messages() -> None:
    """So the property test above compares something: timed and unacknowledged messages,
    round-trip samples and Karn exclusions, on both connections."""
    seen = {"timed": 0, "unacked": 0, "rtt_samples": 0, "rtt_excluded": 0}
    for s in range(10):
        r = analyse(timed_traffic(s, 200), engine="reference")
        for f in r.flows:
            for k in seen:
                seen[k] += getattr(f, k) > 0
    assert all(v >= 8 for v in seen.values()), seen


# -- against the emulator's own completion times ----------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_completion_times_at_the_senders_port_match_the_emulators(
        tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Two senders into one receiver, one message outstanding per QP (so the emulator's
    completion time, post to completion, starts when the message's first packet leaves).
    A tap on the first sender's switch port sees every message, each from a little after it
    left to a little before its completion came back: the capture's times are the
    emulator's less the two link crossings, less at most the first frame's and the ACK's
    serialisation."""
    tap = tmp_path / "tap.pcap"
    assert cli_main(["emulate", "--topology", "incast:2", "--size", "64K", "--count", "20",
                     "--depth", "1", "--seed", "1", "--tap", f"sw:0={tap}", "-T", "json",
                     "--no-progress"]) == 0
    emu = json.loads(capsys.readouterr().out)
    delay = emu["scenario"]["delay_ns"]
    with open_capture(tap) as rd:
        r = analyse(rd, engine=engine)
    (f,) = [x for x in r.flows if x.req is not None]
    (sent,) = [x for x in emu["flows"] if x["src"] == "s1"]
    assert f.src == "10.0.0.1" and sent["fct_ns"]["messages"] == 20
    assert (f.timed, f.unacked, f.rtt_samples, f.rtt_excluded) == (20, 0, 20, 0)
    for q in ("p50", "p99"):
        gap = sent["fct_ns"][q] - f.completion[q]
        assert 2 * delay <= gap <= 2 * delay + 500, (q, gap)


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([30, 120, 400]))
def test_the_shortcuts_change_nothing(seed: int, n: int) -> None:
    """The usual request Middle and READ response Middle skip the full accounting
    (flowref._extends, _only_covers): taking the full path for every packet gives the same
    report."""
    frames = timed_traffic(seed, n)
    want = analyse(frames, engine="reference").to_dict()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(flowref, "_extends", lambda f, psn: False)
        mp.setattr(flowref, "_only_covers", lambda y, c: False)
        got = analyse(frames, engine="reference").to_dict()
    assert got == want


def test_the_twin_traffic_takes_the_shortcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """So the test above compares something: both shortcuts are taken."""
    taken = {"_extends": 0, "_only_covers": 0}

    def counted(name: str):
        real = getattr(flowref, name)

        def f(*a: object) -> bool:
            got = real(*a)
            taken[name] += bool(got)
            return got
        return f

    for name in taken:
        monkeypatch.setattr(flowref, name, counted(name))
    for s in range(10):
        analyse(timed_traffic(s, 400), engine="reference")
    assert all(v >= 20 for v in taken.values()), taken


@settings(max_examples=examples(100), deadline=None)
@given(values=st.lists(st.integers(0, 10 ** 12), min_size=1, max_size=R.LATENCY_EXACT))
def test_quantiles_of_few_values_are_exact(values: list[int]) -> None:
    """Up to LATENCY_EXACT values (a flow of a few messages, a crafted capture) the
    quantiles are the values themselves, added one by one or merged."""
    s = sorted(values)
    exact = {f"p{q}": s[max(1, -(-q * len(s) // 100)) - 1] for q in (50, 99)}
    h = flowref._Hist()
    for v in values:
        h.add(v, 1)
    assert h.summary() == {"min": s[0], **exact, "max": s[-1]}
    a, b = flowref._Hist(), flowref._Hist()
    for i, v in enumerate(values):
        (a if i % 3 else b).add(v, 1)
    a.merge(b)
    assert a.summary() == h.summary()


def test_quantiles_past_the_exact_limit_come_from_the_buckets() -> None:
    h = flowref._Hist()
    for _ in range(R.LATENCY_EXACT + 1):
        h.add(1000, 1)
    assert h.summary()["p50"] == 1000  # clamped to the least and the most
    h.add(5000, 1)
    assert h.summary()["p50"] == 1004  # the middle of the bucket 1000..1007
