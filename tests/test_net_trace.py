"""The sampled trace: queues, QP rates and progress, pause states, every interval."""

from __future__ import annotations

import csv
import json
from collections import defaultdict

from net_helpers import scenario

from roce.emu.net.observe import COLUMNS, Trace
from roce.emu.net.runner import NetRun

INTERVAL = 2_000


def _run(path, fmt):
    with open(path, "w", newline="") as out:
        r = NetRun(scenario(topology="incast:4", size=1 << 20, buffer=1 << 20),
                   trace=Trace(out, INTERVAL, fmt))
        s = r.run()
    return r, s


def test_trace_json_lines(tmp_path):
    r, s = _run(tmp_path / "t.jsonl", "json")
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    times = sorted({x["time_ns"] for x in rows})
    assert times == list(range(0, times[-1] + 1, INTERVAL))
    assert times[-1] <= s.virtual_ns < times[-1] + INTERVAL
    ports = [p.name for p in r.net.switches["sw"].ports]
    queue = [x for x in rows if x["kind"] == "queue"]
    assert len(queue) == len(times) * len(ports) * 3  # classes 0, 3, 6 are in use
    for p in ports:
        seen = max(x["bytes"] for x in queue if x["node"] == p)
        assert seen <= s.fabric["ports"][p]["max_queue_bytes"]
    assert max(x["bytes"] for x in queue if x["node"] == "sw:4" and x["index"] == 3) > 0
    qp = defaultdict(list)
    for x in rows:
        if x["kind"] == "qp":
            qp[x["node"]].append(x)
    assert sorted(qp) == [f"s{i}->r" for i in range(1, 5)]
    for samples in qp.values():
        assert all(0 <= x["rate_gbps"] <= 100.0 for x in samples)  # never above line rate
        acked = [x["acked_psns"] for x in samples]
        assert acked == sorted(acked) and 0 < acked[-1] <= 256
    pause = [x for x in rows if x["kind"] == "pause"]
    assert any(x["paused"] for x in pause if x["node"] == "s1" and x["index"] == 3)
    assert not any(x["paused"] for x in pause if x["index"] != 3)


def test_trace_csv(tmp_path):
    _run(tmp_path / "t.csv", "csv")
    with open(tmp_path / "t.csv") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS
    assert {r["kind"] for r in rows} == {"queue", "qp", "pause"}
    assert all(r["bytes"] != "" for r in rows if r["kind"] == "queue")
