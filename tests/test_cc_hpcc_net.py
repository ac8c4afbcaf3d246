"""HPCC on the switched network, telemetry on the wire (INT-MD over UDP, roce/families/intmd.py):
the switches stamp one record per hop, the receiver echoes them on its ACKs, the sender's HPCC
reacts; the frames decode (read here byte by byte, independently of the codec); and on the same
incast HPCC keeps the bottleneck queue near zero at high utilization where DCQCN does not."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from roce import pcapio
from roce.emu.cc import configure
from roce.emu.net.runner import NetRun, NetScenario
from roce.families import intmd
from roce.packet import craft

US = 1_000
INT_PORT = 9555  # docs/protocol.md, "In-band telemetry (INT-MD)"


class Frames:
    """A recorder (``NetRun(record=...)``): every frame a NIC received, with its time."""

    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []

    def write(self, frame: bytes, ts_ns: int = 0) -> None:
        self.got.append((ts_ns, bytes(frame)))


def read_int(frame: bytes) -> dict | None:
    """The INT of a frame, read from the bytes by the specification's layout (IPv4 of 20
    bytes, UDP to 9555, shim, INT-MD header, 28-byte records), not by roce's codec."""
    if frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    sport, dport, ulen, _ = struct.unpack_from("!HHHH", frame, 34)
    if dport != INT_PORT:
        return None
    b0, length, orig = struct.unpack_from("!BBH", frame, 42)
    md = frame[46:58]
    word = int.from_bytes(md[:4], "big")
    out = {"type": b0 >> 4, "npt": (b0 >> 2) & 3, "words": length, "orig_port": orig,
           "ver": word >> 28, "e": (word >> 26) & 1, "hop_ml": (word >> 8) & 0x1F,
           "rhc": word & 0xFF, "instructions": int.from_bytes(md[4:6], "big"),
           "ds_id": int.from_bytes(md[6:8], "big"),
           "ds_instructions": int.from_bytes(md[8:10], "big"), "ip_len":
           int.from_bytes(frame[16:18], "big"), "udp_len": ulen, "records": []}
    end = 46 + 4 * length
    for at in range(58, end, 28):
        sw, qword, ts, tx, rate = struct.unpack_from("!IIQIQ", frame, at)
        out["records"].append({"switch": sw, "queue": qword >> 24, "qlen": qword & 0xFFFFFF,
                               "ts": ts, "tx": tx, "rate_bps": rate})
    out["bth_opcode"] = frame[end]
    return out


def run(topology: str, cc: str = "hpcc", size: int = 64 << 10, **kw) -> tuple[NetRun, object,
                                                                             Frames]:
    rec = Frames()
    sc = NetScenario(topology=topology, op="write", size=size, count=2, depth=1, mtu=4096,
                     rate_gbps=100.0, pfc=True, cc=configure(cc), **kw)
    r = NetRun(sc, record=rec)
    return r, r.run(), rec


@pytest.mark.parametrize("topology,hops", [("incast:2", 1), ("dumbbell:1", 2)])
def test_switches_stamp_one_record_per_hop_and_the_sender_reacts(topology, hops):
    r, s, rec = run(topology)
    assert s.data_verified and s.retransmitted == 0
    data = acks = 0
    for t, frame in rec.got:
        f = read_int(frame)
        if f is None:
            continue
        assert (f["type"], f["npt"], f["ver"], f["orig_port"]) == (1, 1, 2, 4791)
        assert (f["hop_ml"], f["instructions"], f["ds_id"], f["ds_instructions"]) == \
            (7, 0x9500, 1, 0x8000)
        assert f["udp_len"] == len(frame) - 34 and f["ip_len"] == len(frame) - 14
        recs = f["records"]
        assert len(recs) == hops and f["words"] == 3 + 7 * hops
        if f["bth_opcode"] == 0x11:  # an ACK: the echo, no hop left to stamp on the way back
            acks += 1
            assert f["rhc"] == 0 and f["e"] == 1
            continue
        data += 1
        assert f["rhc"] == intmd.MAX_HOPS - hops and f["e"] == 0
        # the last hop's record first; each hop left later than the one before, and before
        # the receiver got the frame; line rate, the RoCE class's queue (priority 3)
        path = recs[::-1]
        assert all(a["ts"] < b["ts"] for a, b in zip(path, path[1:])) and path[-1]["ts"] < t
        assert len({x["switch"] for x in recs}) == hops
        assert all(x["rate_bps"] == 100_000_000_000 and x["queue"] == 3 for x in recs)
    assert data >= 2 * (64 << 10) // 4096 * len(r.flows) and acks > 0
    for nic in r.net.hosts.values():
        if nic.cc.algos and any(q.requester.high is not None for q in nic.device.qps.values()
                                if getattr(q, "requester", None) is not None):
            assert nic.cc.int_acks > 0  # the sender's HPCC read the echoes


def test_no_telemetry_without_hpcc():
    r, s, rec = run("dumbbell:1", cc="dcqcn")
    assert s.data_verified and rec.got
    assert not any(read_int(f) for _, f in rec.got)
    assert not any(sw.telemetry for sw in r.net.switches.values())


def test_a_path_longer_than_the_hop_count_sets_e():
    p = craft("RC_SEND_ONLY", bytes(64), dqpn=5, psn=7)
    frame = intmd.insert(bytes(p.to_bytes()), 14, 34)
    for i in range(intmd.MAX_HOPS + 2):
        frame = intmd.push(frame, 14, 34, intmd.hop_record(i + 1, 3, 0, i, 0, 100e9))
    f = read_int(frame)
    assert len(f["records"]) == intmd.MAX_HOPS and f["rhc"] == 0 and f["e"] == 1
    assert [x["switch"] for x in f["records"]] == list(range(intmd.MAX_HOPS, 0, -1))
    inner, stack = intmd.strip(frame, 14, 34)
    assert inner == bytes(p.to_bytes()) and len(stack) == 28 * intmd.MAX_HOPS


def test_a_capture_of_an_hpcc_run_decodes_with_int(tmp_path):
    r, s, rec = run("dumbbell:1")
    path = tmp_path / "hpcc.pcap"
    pcapio.write_capture(path, [(f, t) for t, f in rec.got])
    stamped = [(i, read_int(f)) for i, (_, f) in enumerate(rec.got)]
    stamped = [(i, f) for i, f in stamped if f is not None]
    assert stamped
    out = subprocess.run(
        ["python", "-m", "roce", "decode", "-T", "fields", "-e", "int.hops", "-e",
         "int.rhc", "-e", "int.hop.switch_id", "-e", "int.hop.egress_ts", "-e",
         "int.hop.qlen", "-e", "bth.opcode", "-e", "icrc.valid", "-e", "udp.dstport",
         "-e", "outer.udp.dstport", str(path)], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == len(rec.got)
    for i, f in stamped:
        cells = lines[i].split("\t")
        recs = f["records"]
        assert cells[:5] == [str(len(recs)), str(f["rhc"]),
                             ",".join(str(x["switch"]) for x in recs),
                             ",".join(str(x["ts"]) for x in recs),
                             ",".join(str(x["qlen"]) for x in recs)]
        # the frame inside is the sink's view: RoCE to 4791, its ICRC the source's
        assert cells[5:] == [str(f["bth_opcode"]), "1", "4791", "9555"]
    tree = subprocess.run(["python", "-m", "roce", "decode", "-V", "-c", "1", str(path)],
                          capture_output=True, text=True, check=True).stdout
    assert "In-band Network Telemetry (INT-MD over UDP)" in tree
    # columnar output: one column per INT field, the per-hop ones as text
    pq = pytest.importorskip("pyarrow.parquet")
    table = tmp_path / "hpcc.parquet"
    subprocess.run(["python", "-m", "roce", "decode", "-T", "parquet", "-w", str(table),
                    str(path)], capture_output=True, text=True, check=True)
    rows = pq.read_table(table, columns=["int.hops", "int.hop.switch_id"]).to_pylist()
    for i, f in stamped:
        assert rows[i] == {"int.hops": len(f["records"]), "int.hop.switch_id":
                           ",".join(str(x["switch"]) for x in f["records"])}


def test_stats_reads_an_hpcc_capture_through_its_int_headers(tmp_path):
    """``roce stats`` peels INT-MD as it peels tunnels: every frame of an HPCC run is a RoCE
    packet with a good ICRC, and each connection carries the bytes the run wrote."""
    import json

    r, s, rec = run("incast:2")
    path = tmp_path / "hpcc.pcap"
    pcapio.write_capture(path, [(f, t) for t, f in rec.got])
    assert sum(read_int(f) is not None for _, f in rec.got) == len(rec.got)
    out = subprocess.run(["python", "-m", "roce", "stats", "-T", "json", str(path)],
                         capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    totals = report["totals"]
    assert (totals["roce_packets"], totals["not_roce"], totals["bad_icrc"]) == \
        (len(rec.got), 0, 0)
    assert len(report["connections"]) == 2
    data = sorted(f["src"] for f in report["flows"] if f["payload_bytes"])
    assert data == ["10.0.0.1", "10.0.0.2"]
    assert [f["unique_payload_bytes"] for f in report["flows"] if f["payload_bytes"]] == \
        [2 * (64 << 10)] * 2


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_tshark_reads_the_sinks_view_not_the_int_frame(tmp_path):
    """tshark 4.0 has no INT dissector: a frame with INT is UDP to 9555 to it; the frame an
    INT sink hands on (INT removed) is RoCE with the same BTH."""
    p = craft("RC_SEND_ONLY", bytes(64), dqpn=0x12, psn=77)
    plain = bytes(p.to_bytes())
    frame = intmd.push(intmd.insert(plain, 14, 34), 14, 34,
                       intmd.hop_record(1, 3, 100, 5, 6, 100e9))
    inner, _ = intmd.strip(frame, 14, 34)
    assert inner == plain
    path = tmp_path / "t.pcap"
    pcapio.write_capture(path, [(frame, 0), (inner, 1000)])
    out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "udp.dstport",
                          "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].split("\t") == ["9555", "", ""]
    assert out[1].split("\t") == ["4791", "77", "0x000012"]


def incast(cc: str) -> dict:
    """Eight senders WRITE 512 KiB each to one receiver at once (MTU 4096, 100 Gb/s, RED at
    the default thresholds, PFC on), each algorithm at its default profile.  Every 2 us: the
    bytes queued at the port toward the receiver and the bytes it sent; figures from 100 us
    (past the first RTTs, when all start at line rate) to the first completion."""
    sc = NetScenario(topology="incast:8", op="write", size=512 << 10, count=1, depth=1,
                     mtu=4096, rate_gbps=100.0, pfc=True, cc=configure(cc))
    r = NetRun(sc)
    port = next(p for sw in r.net.switches.values() for p in sw.ports
                if p.wire.dst is r.net.hosts["r"])
    samples: list[tuple[int, int, int]] = []

    def tick(now: int, _: object = None) -> None:
        samples.append((now, sum(port.qbytes), port.wire.stats.bytes))
        r.net.at(now + 2 * US, tick)

    r.net.at(0, tick)
    s = r.run()
    first = min(f["fct_ns"]["p50"] for f in s.flows)
    win = [x for x in samples if 100 * US <= x[0] <= first]
    queue = sorted(q for _, q, _ in win)
    (t0, _, b0), (t1, _, b1) = win[0], win[-1]
    return {"ok": s.data_verified, "p95_queue": queue[len(queue) * 95 // 100],
            "util": (b1 - b0) * 8 / ((t1 - t0) * 100.0),  # of 100 Gb/s
            "int_acks": sum(n.cc.int_acks for n in r.net.hosts.values())}


def test_hpcc_keeps_the_queue_near_zero_at_high_utilization_where_dcqcn_does_not():
    """The HPCC paper's claim (Li et al., SIGCOMM 2019): the bottleneck runs near eta (95 %)
    with next to no queue; DCQCN on the same incast keeps a deep one."""
    bdp = 58_000  # bytes: 100 Gb/s x the 4.7 us RTT without a queue
    h, d = incast("hpcc"), incast("dcqcn")
    assert h["ok"] and d["ok"] and h["int_acks"] > 0 and d["int_acks"] == 0
    assert h["util"] >= 0.9 and h["util"] >= d["util"]
    assert h["p95_queue"] <= bdp // 2
    assert d["p95_queue"] >= 10 * bdp


def test_a_fat_tree_path_fills_the_hop_count_and_data_verifies():
    """fattree:4: a flow within an edge switch crosses 1 switch, within a pod 3, between
    pods 5 (edge, aggregation, core, aggregation, edge): the 5 hops a source allows."""
    r, s, rec = run("fattree:4", size=32 << 10)
    assert s.data_verified and s.retransmitted == 0
    seen = set()
    for _, frame in rec.got:
        f = read_int(frame)
        if f is not None and f["bth_opcode"] != 0x11:
            n = len(f["records"])
            seen.add(n)
            assert f["rhc"] == intmd.MAX_HOPS - n and f["e"] == 0
    assert seen <= {1, 3, 5} and 5 in seen


@pytest.mark.parametrize("rate_bps", [1, 999_999, 100e9, 1e15])
def test_every_link_rate_a_topology_takes_is_exact_in_a_record(rate_bps):
    """Links run at 1 b/s to 1 Pb/s (roce.options.parse_link_rate): the record's 64-bit
    bit/s field holds each; the queue saturates at its 24 bits, the counter wraps at 32."""
    rec = intmd.hop_record(7, 3, 1 << 30, 12, (1 << 32) + 5, rate_bps)
    (h,) = intmd.hops(rec)
    assert (h.rate_bps, h.qlen, h.tx_bytes) == (int(rate_bps), (1 << 24) - 1, 5)


def test_cc_hpcc_and_its_knobs_on_the_command_line():
    def emulate(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["python", "-m", "roce", "emulate", "--topology", "dumbbell:1",
                               "--size", "16K", "--count", "1", "--cc", "hpcc", *args],
                              capture_output=True, text=True)

    ok = emulate("--cc-param", "hpcc_eta=0.5", "--cc-param", "hpcc_max_stage=2")
    assert ok.returncode == 0 and "data verified yes" in ok.stdout
    bad = emulate("--cc-param", "hpcc_eta=2")
    assert bad.returncode == 1 and "hpcc_eta" in bad.stderr
    unknown = emulate("--cc-param", "rp_ai_rate=40")
    assert unknown.returncode == 1 and "rp_ai_rate" in unknown.stderr
