"""``roce send``, ``roce replay`` and ``roce sniff`` on a real (virtual) wire: two network
namespaces joined by a veth pair (``tests/netns.py``), torn down whatever happens.

Frames go out of namespace A with the CLIs run under ``ip netns exec``; namespace B captures
them twice, with ``roce sniff -w`` and with ``tcpdump -w``, and the tests compare bytes with
what ``roce craft`` builds, check every ICRC, ask tshark to decode the tcpdump file, and
measure replay rates from the receiving side's kernel timestamps.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import netns
import pytest
from test_wire_cli import _reference, opcode_args
from tshark_oracle import FIELDS, TSHARK, TSHARK_CODES, fields_command, our_key, tshark_value

import roce
from roce import OPCODES, ROCE_OPCODES, fast
from roce.cli import main
from roce.cli.replay import Rewrite
from roce.cli.send import CHUNK
from roce.locate import LINKTYPE_LINUX_SLL, OK
from roce.pcapio import PcapWriter, open_capture

TCPDUMP = shutil.which("tcpdump")
ROCE_FILTER = "udp port 4791 or ether proto 0x8915"
DMAC = "02:00:00:00:00:02"  # craft's default destination MAC: no kernel ever sends to it
# send's MACs pinned to craft's defaults, so that what arrives compares with roce craft's
# bytes (left open, send would take the interface's and resolve the peer's)
PINNED = ["--smac", "02:00:00:00:00:01", "--dmac", DMAC]


@pytest.fixture(scope="module")
def wire() -> Iterator[netns.VethPair]:
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if TCPDUMP is None:
        pytest.skip("tcpdump is not installed")
    pair = netns.create()
    try:
        yield pair
    finally:
        pair.close()


class Captures:
    """tcpdump and (optionally) ``roce sniff`` on B's end of the wire, both stopping by
    themselves after ``count`` frames; ``frames()`` waits for them and reads the files."""

    def __init__(self, wire: netns.VethPair, tmp: Path, count: int, expr: str = ROCE_FILTER,
                 sniff: bool = True, sniff_output: list[str] | None = None) -> None:
        self.wire, self.tmp, self.count = wire, tmp, count
        self.td_file, self.sn_file = tmp / "tcpdump.pcap", tmp / "sniff.pcap"
        self.sn_out = tmp / "sniff.out"
        td_err, sn_err = tmp / "tcpdump.err", tmp / "sniff.err"
        # --immediate-mode: a partly filled TPACKET_V3 block is not lost when it stops
        self.procs = [wire.popen(wire.ns_b, [
            TCPDUMP, "-i", wire.if_b, "-w", str(self.td_file), "-U", "--immediate-mode", "-n",
            "-s", "2048", "-B", "32768", "--time-stamp-precision", "nano", "-c", str(count), expr],
            stdout=subprocess.DEVNULL, stderr=td_err.open("w"))]
        netns.wait_for_text(td_err, "listening", self.procs[0])
        if sniff:
            extra = sniff_output if sniff_output is not None else ["-q"]
            self.procs.append(wire.popen(wire.ns_b, wire.roce(
                "sniff", "-i", wire.if_b, "-w", str(self.sn_file), "-c", str(count),
                "--duration", "60", "-f", expr, *extra),
                stdout=self.sn_out.open("w"), stderr=sn_err.open("w")))
            netns.wait_for_text(sn_err, "listening", self.procs[1])
        self.errs = [td_err, sn_err]

    def frames(self, timeout: float = 15) -> list[list[tuple[bytes, int]]]:
        """[(frame, ts_ns)...] of tcpdump, then of roce sniff."""
        out = []
        for proc, err in zip(self.procs, self.errs):
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.wire.stop(proc)
                pytest.fail(f"capture did not see {self.count} frames: "
                            f"{err.read_text(errors='replace')}")
            assert code == 0, err.read_text(errors="replace")
        for path in (self.td_file, self.sn_file)[:len(self.procs)]:
            with open_capture(path) as reader:
                out.append([(f.data, f.ts_ns) for f in reader])
        return out

    def close(self) -> None:
        for proc in self.procs:
            self.wire.stop(proc)


@contextlib.contextmanager
def captures(wire: netns.VethPair, tmp: Path, count: int,
             **kw: object) -> Iterator[Captures]:
    cap = Captures(wire, tmp, count, **kw)  # type: ignore[arg-type]
    try:
        yield cap
    finally:
        cap.close()


def crafted(tmp: Path, argv: list[str]) -> list[bytes]:
    """What ``roce craft ARGV`` builds (in-process)."""
    path = tmp / "expected.pcap"
    assert main(["craft", *argv, "-q", "-w", str(path)]) == 0
    with open_capture(path) as reader:
        return [f.data for f in reader]


# -- send: every opcode --------------------------------------------------------------------------

VARIANTS = (["--ipv6"], ["--vlan", "7", "--vlan-priority", "3"], ["--roce-version", "1"],
            ["--ecn", "ce", "--dscp", "26"])


def every_opcode_commands() -> list[list[str]]:
    """Each opcode once over IPv4, once more over a rotating other encapsulation; one frame
    with a deliberately bad ICRC."""
    out = []
    for i, code in enumerate(sorted(ROCE_OPCODES)):
        argv = opcode_args(code)[0]
        out.append(argv)
        out.append(argv + VARIANTS[i % len(VARIANTS)] + ["--psn", str(5000 + code)])
    # (QP 0 and 1 carry MADs for Wireshark: keep clear of them)
    out.append(["rc-send-only", "--payload-hex", "0badc0de", "--dqpn", "0x77", "--bad-icrc"])
    return out


def tshark_rows(path: Path) -> list[list[str]]:
    cmd = fields_command(path, list(FIELDS))
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [line.split("\t") for line in res.stdout.splitlines()]


def test_send_every_opcode(wire, tmp_path):
    commands = every_opcode_commands()
    expected = [crafted(tmp_path, argv)[0] for argv in commands]
    with captures(wire, tmp_path, len(commands),
                  sniff_output=["-T", "jsonl", "-Y", "roce"]) as cap:
        res = wire.run_many(wire.ns_a, [["send", *argv, *PINNED, "-i", wire.if_a]
                                        for argv in commands])
        assert res.returncode == 0, res.stderr
        assert res.stdout.count("sent 1 frames") == len(commands)
        by_tcpdump, by_sniff = cap.frames()
    assert [f for f, _ in by_tcpdump] == expected
    assert [f for f, _ in by_sniff] == expected
    for frame in expected[:-1]:
        assert roce.parse(frame).icrc_valid
    assert not roce.parse(expected[-1]).icrc_valid  # the --bad-icrc frame arrived as sent
    # roce sniff's live decoding printed one JSON object per frame, fields included
    rows = [json.loads(line) for line in cap.sn_out.read_text().splitlines()]
    assert [r["bth.opcode"] for r in rows] == [roce.parse(f).fields()["bth.opcode"]
                                               for f in expected]
    assert [r["icrc.valid"] for r in rows] == [True] * (len(expected) - 1) + [False]
    assert sum("vlan.id" in r for r in rows) == sum("--vlan" in c for c in commands)

    if TSHARK is None:
        return
    rows = tshark_rows(cap.td_file)
    assert len(rows) == len(expected)
    checked = 0
    for frame, row in zip(expected, rows):
        p = roce.parse(frame)
        if p.opcode.code not in TSHARK_CODES or p.l3 == "grh":
            continue
        ours = p.fields()
        for ws, value in zip(FIELDS, row):
            want = ours.get(our_key(ws, p.opcode.headers))
            assert tshark_value(ws, value) == want, (p, ws, value, want)
        checked += 1
    assert checked >= len(TSHARK_CODES) * 3 // 2


def test_send_command_count_and_pacing(wire, tmp_path):
    """The real ``roce`` command (one process per run), --count with PSN steps, --pps."""
    argv = ["rc-send-first", "--dqpn", "0x42", "--psn", "0xfffff0", "--payload-size", "256",
            "--count", "100"]
    expected = crafted(tmp_path, argv)
    with captures(wire, tmp_path, 100) as cap:
        res = wire.run(wire.ns_a, wire.roce("send", *argv, *PINNED, "--pps", "2000", "-i",
                                            wire.if_a))
        assert res.returncode == 0, res.stderr
        assert re.match(r"sent 100 frames \(\d+ bytes\) on \S+ in [\d.]+ s; \d+ pps",
                        res.stdout)
        by_tcpdump, by_sniff = cap.frames()
    for got in (by_tcpdump, by_sniff):
        assert [f for f, _ in got] == expected
    psns = [roce.parse(f).fields()["bth.psn"] for f, _ in by_tcpdump]
    assert psns == [(0xFFFFF0 + i) & 0xFFFFFF for i in range(100)]
    # 50 ms of sending: a scheduler hiccup of a few ms is already 10%, so the bound is loose
    # here; the replay tests hold rates to 10% over thousands of frames
    rate = _rate([ts for _, ts in by_tcpdump])
    assert 1500 < rate < 2500, rate


def test_send_streams_its_frames_in_chunks(wire, tmp_path):
    """More frames than one chunk (``send_cli.CHUNK``): every frame arrives once, in order,
    with its PSN; -w saves all of them on one schedule; -v numbers them straight through."""
    n = 2 * CHUNK + 17
    argv = ["rc-send-only", "--dqpn", "0x43", "--psn", "0xfffff0", "--payload-size", "32",
            "--count", str(n)]
    saved = tmp_path / "sent.pcap"
    with captures(wire, tmp_path, n, sniff=False) as cap:
        res = wire.run(wire.ns_a, wire.roce("send", *argv, *PINNED, "--pps", "100000", "-v", "-w",
                                            str(saved), "-i", wire.if_a))
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines()[-1].startswith(f"sent {n} frames")
        (got,) = cap.frames()
    psns = [roce.parse(f).fields()["bth.psn"] for f, _ in got]
    assert psns == [(0xFFFFF0 + i) & 0xFFFFFF for i in range(n)]
    with open_capture(saved) as reader:
        kept = [(f.data, f.ts_ns) for f in reader]
    assert [f for f, _ in kept] == [f for f, _ in got]
    assert {b[1] - a[1] for a, b in zip(kept, kept[1:])} == {10_000}  # 100,000 pps
    numbers = [int(line.split()[0]) for line in res.stdout.splitlines()[:-1]]
    assert numbers == list(range(1, n + 1))


def test_send_memory_does_not_follow_count(wire):
    """Peak memory of ``roce send --count N`` is the same for 10,000 and 200,000 frames
    (frames are built, sent and saved a chunk at a time)."""
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
             "stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    peaks = []
    for count in (10_000, 200_000):
        res = wire.run(wire.ns_a, [sys.executable, "-c", probe, *wire.roce(
            "send", "rc-send-only", *PINNED, "--payload-size", "64", "--count", str(count), "-i",
            wire.if_a)], timeout=120)
        assert res.returncode == 0, res.stderr
        peaks.append(int(res.stdout) / 1024)  # MiB
    # all 200,000 frames at once would take ~60 MiB more (bytes, one buffer, iovecs, headers)
    assert peaks[1] - peaks[0] < 8, peaks


@pytest.mark.parametrize("backend", ["packet", "scapy"])
def test_send_from_a_capture(wire, tmp_path, backend):
    """``send -r`` puts a capture's frames out as they are, with either backend."""
    path = tmp_path / "in.pcap"
    frames = []
    for i, code in enumerate((0x04, 0x0A, 0x11, 0x64, 0x81)):
        frames += crafted(tmp_path, [hex(code), "--dqpn", str(0x20 + i), "--count", "2",
                                     "--vlan" if i == 2 else "--psn", "9"])
    with PcapWriter(path) as w:
        for f in frames:
            w.write(f)
    with captures(wire, tmp_path, len(frames) - 2, sniff=False) as cap:
        res = wire.run(wire.ns_a, wire.roce("send", "-r", str(path), "--count",
                                            str(len(frames) - 2), "--backend", backend,
                                            "--interval", "0.001", "-i", wire.if_a))
        assert res.returncode == 0, res.stderr
        (got,) = cap.frames()
    assert [f for f, _ in got] == frames[:-2]


def test_environment_errors(wire):
    """Down interface, no carrier and no privilege: exit 2 with one line; nothing sent."""
    send = wire.roce("send", "rc-send-only", "-i", wire.if_a)
    res = wire.run(wire.ns_a, wire.roce("send", "rc-send-only", "-i", "nosuchif0"))
    assert res.returncode == 2 and "no such interface" in res.stderr
    res = wire.run(wire.ns_b, wire.roce("sniff", "-i", wire.if_b, "-w", "/nonexistent/x.pcap"))
    assert res.returncode == 2 and "cannot write" in res.stderr, res.stderr
    if shutil.which("setpriv"):  # util-linux: drop CAP_NET_RAW while staying root
        res = wire.run(wire.ns_a, ["setpriv", "--bounding-set", "-net_raw", *send])
        assert res.returncode == 2 and "no permission" in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    subprocess.run(["ip", "-n", wire.ns_b, "link", "set", wire.if_b, "down"], check=True)
    try:
        netns.wait_link(wire, up=False)
        res = wire.run(wire.ns_a, send)
        assert res.returncode == 2 and "no carrier" in res.stderr, res.stderr
        res = wire.run(wire.ns_b, wire.roce("sniff", "-i", wire.if_b, "-c", "1"))
        assert res.returncode == 2 and "is down" in res.stderr, res.stderr
    finally:
        subprocess.run(["ip", "-n", wire.ns_b, "link", "set", wire.if_b, "up"], check=True)
        netns.wait_link(wire)


def _count_frames(path: Path) -> int:
    try:
        with open_capture(path) as reader:
            return sum(1 for _ in reader)
    except ValueError:  # not even a header yet
        return 0


@pytest.mark.parametrize("signal_number", [2, 15, 1])  # SIGINT, SIGTERM, SIGHUP alike
def test_sniff_stops_cleanly_on_a_signal(wire, tmp_path, signal_number):
    out, err = tmp_path / "s.pcap", tmp_path / "s.err"
    proc = wire.popen(wire.ns_b, wire.roce("sniff", "-i", wire.if_b, "-w", str(out)),
                      stdout=subprocess.DEVNULL, stderr=err.open("w"))
    netns.wait_for_text(err, "listening", proc)
    res = wire.run(wire.ns_a, wire.roce("send", "rc-send-only", *PINNED, "--count", "3", "-i",
                                        wire.if_a))
    assert res.returncode == 0, res.stderr
    for _ in range(200):
        if _count_frames(out) == 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal_number)
    assert proc.wait(10) == 0
    text = err.read_text()
    assert "3 packets captured, 3 shown, 0 dropped" in text and "Traceback" not in text
    assert _count_frames(out) == 3


def test_sniff_duration_and_direction(wire, tmp_path):
    t0 = time.monotonic()
    res = wire.run(wire.ns_b, wire.roce("sniff", "-i", wire.if_b, "--duration", "0.3", "-q"))
    assert res.returncode == 0 and "0 packets captured" in res.stderr
    assert time.monotonic() - t0 < 5
    # frames sent from A are outgoing there: -Q in hides them, -Q out shows them
    err = tmp_path / "out.err"
    proc = wire.popen(wire.ns_a, wire.roce("sniff", "-i", wire.if_a, "-Q", "out", "-c", "2",
                                           "--duration", "20", "-T", "fields", "-e",
                                           "bth.psn"),
                      stdout=subprocess.PIPE, stderr=err.open("w"), text=True)
    netns.wait_for_text(err, "listening", proc)
    res = wire.run(wire.ns_a, wire.roce("send", "rc-send-only", *PINNED, "--psn", "7",
                                        "--count", "2", "-i", wire.if_a))
    assert res.returncode == 0, res.stderr
    stdout, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0 and stdout.split() == ["7", "8"]


def _tx_packets(wire: netns.VethPair, ns: str, name: str) -> int:
    res = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", "dev", name],
                         capture_output=True, text=True, check=True, timeout=30)
    return json.loads(res.stdout)[0]["stats64"]["tx"]["packets"]


def _wait_sending(wire: netns.VethPair, proc: subprocess.Popen, frames: int = 200) -> None:
    """Until A's end has sent ``frames`` more frames (the command is past its start-up)."""
    start = _tx_packets(wire, wire.ns_a, wire.if_a)
    end = time.monotonic() + 30
    while _tx_packets(wire, wire.ns_a, wire.if_a) - start < frames:
        assert proc.poll() is None and time.monotonic() < end, proc.communicate()
        time.sleep(0.05)


@pytest.mark.parametrize("signal_number", [2, 15, 1])
def test_replay_interrupted_reports(wire, tmp_path, signal_number):
    path = tmp_path / "loop.pcap"
    assert main(["craft", "rc-send-only", "--count", "10", "-q", "-w", str(path)]) == 0
    proc = wire.popen(wire.ns_a, wire.roce("replay", str(path), "-i", wire.if_a, "--pps",
                                           "2000", "--loop", "0"),
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_sending(wire, proc)
    proc.send_signal(signal_number)
    stdout, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 130, stderr
    m = re.search(r"replayed (\d+) frames", stdout)
    assert m and int(m.group(1)) > 100, stdout
    name = signal.Signals(signal_number).name
    assert stderr == f"roce replay: interrupted ({name}) after {int(m.group(1)):,} frames sent\n"


def test_send_interrupted_reports_and_saves_what_went(wire, tmp_path):
    out = tmp_path / "sent.pcap"
    proc = wire.popen(wire.ns_a, wire.roce("send", "rc-send-only", *PINNED, "--count",
                                           "1000000", "--pps", "2000", "-i", wire.if_a, "-w",
                                           str(out)),
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_sending(wire, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 130, stderr
    m = re.search(r"sent (\d+) frames", stdout)
    assert m and int(m.group(1)) > 100, stdout
    sent = int(m.group(1))
    assert stderr == f"roce send: interrupted (SIGTERM) after {sent:,} frames sent\n"
    with open_capture(out) as reader:  # the record of what went out: whole, and only that
        psns = [roce.parse(f.data).fields()["bth.psn"] for f in reader]
        assert reader.problems == []
    assert psns == list(range(sent))


# -- replay --------------------------------------------------------------------------------------

N_FRAMES = 3000
GAP_NS = 100_000  # 10 kpps in the capture


def _arp() -> bytes:
    return bytes.fromhex(DMAC.replace(":", "") + "020000000001" + "0806") + bytes(28)


@pytest.fixture(scope="module")
def replay_capture(tmp_path_factory) -> tuple[Path, list[bytes]]:
    """A few thousand frames: a cycle of opcodes and sizes, IPv4/IPv6/VLAN/RoCEv1, with an
    ARP frame and a UDP frame of another port now and then (all to one unicast MAC)."""
    codes = [0x00, 0x01, 0x02, 0x04, 0x05, 0x06, 0x0A, 0x0C, 0x10, 0x11, 0x13, 0x2A, 0x64,
             0x81, 0xA4]
    frames = []
    for i in range(N_FRAMES):
        if i % 97 == 50:
            frames.append(_arp())
            continue
        code = codes[i % len(codes)]
        op = OPCODES[code]
        size = (i * 37) % 700 if op.payload and op.payload_len is None else None
        kw = [{}, {"ipv6": True}, {"vlan": 5}, {"roce_version": 1}][i % 4 if i % 11 else 0]
        payload = bytes((i + k) & 0xFF for k in range(size)) if size else None
        p = roce.craft(code, payload, dqpn=0x300 + i % 9, psn=(i * 3) & 0xFFFFFF, **kw)
        if i % 89 == 3 and "udp" in p.headers:
            p.headers["udp"]["dstport"] = 9999  # not RoCE: replayed as it is
        frames.append(p.to_bytes())
    path = tmp_path_factory.mktemp("replay") / "replay.pcap"
    with PcapWriter(path) as w:
        for i, f in enumerate(frames):
            w.write(f, 1_700_000_000_000_000_000 + i * GAP_NS)
    return path, frames


def _rate(stamps: list[int]) -> float:
    return (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9)


def _report(text: str) -> dict[str, float]:
    m = re.search(r"replayed (\d+) frames .*?; (\d+) pps, ([\d.]+) Mb/s", text)
    assert m, text
    out = {"frames": float(m.group(1)), "pps": float(m.group(2))}
    t = re.search(r"timing error mean ([\d.]+) us, max ([\d.]+) us", text)
    if t:
        out["mean_us"], out["max_us"] = float(t.group(1)), float(t.group(2))
    return out


@pytest.mark.parametrize(("mode", "rate", "loops"), [
    (["--pps", "10000", "--loop", "2"], 10000, 2),
    (["--speed", "2"], 2e9 / GAP_NS, 1),
])
def test_replay_timing_and_identity(wire, tmp_path, replay_capture, mode, rate, loops):
    path, frames = replay_capture
    n = len(frames) * loops
    with captures(wire, tmp_path, n, expr=f"ether dst {DMAC}", sniff=False) as cap:
        res = wire.run(wire.ns_a, wire.roce("replay", str(path), "-i", wire.if_a, *mode))
        assert res.returncode == 0, res.stderr
        (got,) = cap.frames()
    assert [f for f, _ in got] == frames * loops  # every frame, in order, byte for byte
    measured = _rate([ts for _, ts in got])
    assert abs(measured - rate) / rate < 0.10, (measured, rate)
    rep = _report(res.stdout)
    assert rep["frames"] == n and "mean_us" in rep
    assert abs(rep["pps"] - rate) / rate < 0.10, res.stdout


def test_replay_topspeed_with_rewrites(wire, tmp_path, replay_capture):
    path, frames = replay_capture
    new_dmac = "02:00:00:00:00:bb"
    argv = ["--topspeed", "--rewrite-dqpn", "0x123", "--psn-offset", "100",
            "--rewrite-src", "10.9.9.1", "--rewrite-dst", "fd00::22", "--rewrite-dmac",
            new_dmac, "--rewrite-smac", "02:00:00:00:00:aa", "--rewrite-sport", "0xd00d"]
    rw = Rewrite(smac=bytes.fromhex("0200000000aa"), dmac=bytes.fromhex("0200000000bb"),
                 src4=bytes([10, 9, 9, 1]), dst6=bytes.fromhex("fd00" + "00" * 13 + "22"),
                 sport=0xD00D, dqpn=0x123, psn_offset=100)
    expected = []
    for f in frames:
        try:
            p = roce.parse(f)
        except ValueError:
            expected.append(f)  # not RoCE: untouched
            continue
        v4 = p.l3 == "ip"
        expected.append(_reference(f, rw, "10.9.9.1" if v4 else None,
                                   None if v4 else "fd00::22"))
    expr = f"ether dst {DMAC} or ether dst {new_dmac}"
    with captures(wire, tmp_path, len(frames), expr=expr) as cap:
        res = wire.run(wire.ns_a, wire.roce("replay", str(path), "-i", wire.if_a, *argv))
        assert res.returncode == 0, res.stderr
        by_tcpdump, by_sniff = cap.frames()
    for got in (by_tcpdump, by_sniff):
        assert [f for f, _ in got] == expected
    changed = 0
    for before, after in zip(frames, expected):
        try:
            p = roce.parse(after)
        except ValueError:
            assert after == before
            continue
        assert p.icrc_valid
        f = p.fields()
        assert f["bth.destqp"] == 0x123 and f["eth.dst"] == new_dmac
        changed += 1
    assert changed > len(frames) * 0.9
    assert _report(res.stdout)["pps"] > 0


def test_replay_only_roce(wire, tmp_path, replay_capture):
    path, frames = replay_capture
    keep = []
    for f in frames:
        try:
            roce.parse(f)
            keep.append(f)
        except ValueError:
            pass
    assert len(keep) < len(frames)
    with captures(wire, tmp_path, len(keep), expr=f"ether dst {DMAC}", sniff=False) as cap:
        res = wire.run(wire.ns_a, wire.roce("replay", str(path), "-i", wire.if_a,
                                            "--pps", "50000", "--only-roce"))
        assert res.returncode == 0, res.stderr
        (got,) = cap.frames()
    assert [f for f, _ in got] == keep
    assert f"{len(frames) - len(keep)} frames per loop were not RoCE" in res.stdout


def test_replay_skips_frames_it_cannot_send(wire, tmp_path):
    """Frames shorter than an Ethernet header cannot go on the wire: replay (and send -r)
    leave them out, count them, say so once, and send every other frame."""
    good = [roce.craft("RC_SEND_ONLY", dqpn=0x61, psn=i).to_bytes() for i in range(3)]
    path = tmp_path / "short.pcap"
    with PcapWriter(path) as w:
        for f in (good[0], b"\x01" * 5, good[1], b"", bytes(13), good[2]):
            w.write(f)
    for argv in (["replay", str(path), "--pps", "1000"], ["send", "-r", str(path)]):
        with captures(wire, tmp_path, len(good), expr=f"ether dst {DMAC}", sniff=False) as cap:
            res = wire.run(wire.ns_a, wire.roce(*argv, "-i", wire.if_a))
            assert res.returncode == 0, res.stderr
            (got,) = cap.frames()
        assert [f for f, _ in got] == good
        warnings = [line for line in res.stderr.splitlines() if "14 bytes" in line]
        assert len(warnings) == 1 and "3 frames" in warnings[0], res.stderr
        assert "sent 3 frames" in res.stdout or "replayed 3 frames" in res.stdout


def test_a_frame_the_device_refuses_is_counted_not_fatal(wire):
    """At the socket, a frame the kernel refuses (too short: EINVAL; too long: EMSGSIZE) is
    one refused frame, and the next one still goes."""
    code = ("import sys\nfrom roce import iface\n"
            "s = iface.open_sender(sys.argv[1], sys.argv[2])\n"
            "b = iface.FrameBatch([b'x' * 5, bytes(60), b'y' * 9000, bytes(60)])\n"
            "print([s.send(f) for f in b.frames], s.send_many(b, 0, 4).failed)\n")
    res = wire.run(wire.ns_a, [sys.executable, "-c", code, wire.if_a, "packet"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0] == "[False, True, False, True] [0, 2]", res.stdout
    # Scapy's socket pads a short frame out to a header itself; a long one is refused
    res = wire.run(wire.ns_a, [sys.executable, "-c", code, wire.if_a, "scapy"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[0] == "[True, True, False, True] [2]", res.stdout


# -- talking to real peers: the interface's MAC, the peer's resolved --------------------------


def _mac(wire: netns.VethPair, ns: str, name: str) -> str:
    res = subprocess.run(["ip", "-n", ns, "-j", "link", "show", name], capture_output=True,
                         text=True, check=True, timeout=30)
    return json.loads(res.stdout)[0]["address"]


def _wait_ready(path: Path, proc: subprocess.Popen, timeout: float = 15) -> None:
    end = time.monotonic() + timeout
    while "-- ready" not in path.read_text():
        assert proc.poll() is None and time.monotonic() < end, path.read_text()
        time.sleep(0.02)


def test_send_completes_an_exchange_with_a_target_without_dmac(wire, tmp_path):
    """``roce send`` to ``roce target`` in the other namespace, naming only the target's
    address: the frame leaves from A's MAC to B's (resolved), the target takes it, and its
    ACK goes back to A's MAC."""
    mac_a, mac_b = _mac(wire, wire.ns_a, wire.if_a), _mac(wire, wire.ns_b, wire.if_b)
    out, tpcap, sent = tmp_path / "target.out", tmp_path / "target.pcap", tmp_path / "s.pcap"
    with open(out, "w") as f:
        proc = wire.popen(wire.ns_b, wire.roce("target", "-i", wire.if_b, "--count", "1",
                                               "-w", str(tpcap)),
                          stdout=f, stderr=subprocess.STDOUT)
    _wait_ready(out, proc)
    subprocess.run(["ip", "-n", wire.ns_a, "neigh", "flush", "dev", wire.if_a], timeout=30)
    res = wire.run(wire.ns_a, wire.roce(
        "send", "rc-send-only", "--dst", wire.addr_b, "--src", wire.addr_a, "--dqpn", "0x11",
        "--psn", "0", "--ackreq", "--payload-hex", "68656c6c6f", "-i", wire.if_a, "-w",
        str(sent)))
    assert res.returncode == 0, res.stderr
    assert proc.wait(15) == 0, out.read_text()  # --count 1: the request was taken
    text = out.read_text()
    assert "received 5 bytes: 68 65 6c 6c 6f" in text, text
    assert f"peer is {wire.addr_a} ({mac_a})" in text, text
    (frame,) = [f.data for f in open_capture(sent)]
    assert frame[:12] == bytes.fromhex((mac_b + mac_a).replace(":", ""))
    answers = [f.data for f in open_capture(tpcap) if fast.walk(f.data).status == OK
               and roce.parse(f.data).opcode.code == 0x11]
    assert [a[:6] for a in answers] == [bytes.fromhex(mac_a.replace(":", ""))]


def test_send_takes_the_neighbour_table_and_explicit_macs_win(wire, tmp_path):
    mac_a = _mac(wire, wire.ns_a, wire.if_a)
    far = "192.168.177.77"  # nobody: only the permanent entry knows a MAC for it
    subprocess.run(["ip", "-n", wire.ns_a, "neigh", "replace", far, "lladdr",
                    "02:00:00:00:77:77", "dev", wire.if_a, "nud", "permanent"], check=True,
                   timeout=30)
    try:
        cases = [([], "02:00:00:00:77:77", mac_a),
                 (["--dmac", "02:00:00:00:00:42"], "02:00:00:00:00:42", mac_a),
                 (["--field", "eth.src=02:00:00:00:00:43"], "02:00:00:00:77:77",
                  "02:00:00:00:00:43"),
                 (["--smac", "02:00:00:00:00:44", "--field", "eth.dst=02:00:00:00:00:45"],
                  "02:00:00:00:00:45", "02:00:00:00:00:44")]
        for extra, dst, src in cases:
            sent = tmp_path / "s.pcap"
            t0 = time.monotonic()
            res = wire.run(wire.ns_a, wire.roce("send", "rc-send-only", "--dst", far, *extra,
                                                "-i", wire.if_a, "-w", str(sent)))
            assert res.returncode == 0, res.stderr
            assert time.monotonic() - t0 < 10  # no ARP timeout on the way
            (frame,) = [f.data for f in open_capture(sent)]
            assert frame[:12].hex(":") == f"{dst}:{src}", extra
    finally:
        subprocess.run(["ip", "-n", wire.ns_a, "neigh", "del", far, "dev", wire.if_a],
                       timeout=30)


def test_send_to_nobody_fails_naming_the_address(wire):
    res = wire.run(wire.ns_a, wire.roce("send", "rc-send-only", "--dst", "192.168.177.99",
                                        "-i", wire.if_a))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no ARP reply from 192.168.177.99" in lines[0], res.stderr
    assert "--dmac" in lines[0] and "sent" not in res.stdout


def test_replay_of_a_cooked_capture_goes_to_the_peer(wire, tmp_path):
    """A Linux cooked capture has no MACs: replayed (or sent with send -r), its frames go
    from A's MAC to the MAC of their destination (B, resolved by ARP)."""
    mac_a, mac_b = _mac(wire, wire.ns_a, wire.if_a), _mac(wire, wire.ns_b, wire.if_b)
    frames = [roce.craft("RC_SEND_ONLY", dqpn=0x71, psn=i, src=wire.addr_a,
                         dst=wire.addr_b).to_bytes() for i in range(3)]
    cooked = tmp_path / "cooked.pcap"
    with PcapWriter(cooked, LINKTYPE_LINUX_SLL) as w:
        for f in frames:  # SLL: packet type, ARPHRD_ETHER, 6-byte address, EtherType
            w.write(struct.pack("!HHH8s", 4, 1, 6, bytes(8)) + f[12:])
    macs = bytes.fromhex((mac_b + mac_a).replace(":", ""))
    for argv in (["replay", str(cooked), "--pps", "1000"], ["send", "-r", str(cooked)]):
        subprocess.run(["ip", "-n", wire.ns_a, "neigh", "flush", "dev", wire.if_a],
                       timeout=30)
        with captures(wire, tmp_path, len(frames), expr=f"ether dst {mac_b} and udp port 4791",
                      sniff=False) as cap:
            res = wire.run(wire.ns_a, wire.roce(*argv, "-i", wire.if_a))
            assert res.returncode == 0, res.stderr
            (got,) = cap.frames()
        assert [f for f, _ in got] == [macs + f[12:] for f in frames], argv
