"""Hostile and careless options (issue 12): every bad value is refused in a moment, with exit 1
or 2 and one line on stderr naming the option (or the file); never exit 3, never a run that
eats the machine.

Three layers:

* every option of every subcommand, found by walking the real parsers, gets values past its
  bounds, malformed numbers, MACs and addresses (fixed lists, then a hypothesis strategy);
  these stop in the parser, so they run in-process;
* files that are missing, directories, ``/dev/zero`` and FIFOs, and the issue's cases that
  reach a command's body, run as subprocesses under a 1 GB address-space limit and a 10 s
  timeout;
* ``roce craft --count 1000000 -w FILE`` has its peak RSS measured (the child's own
  ``ru_maxrss`` from ``wait4``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import resource
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from profiles import examples

import roce
from roce import options
from roce.cli import COMMANDS, build_parser, main
from roce.cli import _craft_macc as craft_macc
from roce.cli import _emulate_net as emulate_net
from roce.cli import stats as stats_cmd
from roce.emu.net import failures, observe, schema
from roce.pcapio import PcapWriter

MEMORY_LIMIT = 1 << 30
TIME_LIMIT = 10.0
TSHARK = shutil.which("tshark")


# -- the options, from the parsers themselves ----------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.values()


def _walk(command: str) -> Iterator[tuple[list[str], argparse.Action]]:
    """(argv prefix, action) for every option of ``command`` and its sub-commands."""
    top = build_parser(command)
    todo = [([command], p) for p in _subparsers(top) if p.prog.split()[-1] == command]
    while todo:
        prefix, parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [([*prefix, name], sub) for name, sub in action.choices.items()]
            elif action.option_strings and action.nargs != 0 and action.help != "==SUPPRESS==":
                yield prefix, action


def _bounds(action: argparse.Action) -> tuple[int | None, int | None] | None:
    return getattr(action.type, "bounds", None)


def _fixed_bad(action: argparse.Action) -> list[str]:
    """Values ``action`` must refuse: past its bounds, malformed, not finite."""
    t = action.type
    if action.choices is not None:
        return ["zz-not-a-choice", ""]
    bounds = _bounds(action)
    if bounds is not None:
        lo, hi = bounds
        bad = ["zz", "", "1.5", "0x", "1e3", "0x1g", "--1"]
        if lo is not None:
            bad += [str(lo - 1), str(lo - (1 << 70))]
        if hi is not None:
            bad += [str(hi + 1), hex(hi + 1), str(hi * (1 << 64) + 1)]
        return bad
    table: dict[object, list[str]] = {
        options.parse_rate: ["0", "-1", "nan", "inf", "-inf", "x", "1e400", "0G"],
        options.parse_link_rate: ["0", "-1", "nan", "inf", "x", "1e400", "1e300", "1e-300",
                                  "1000001", "1e-10"],
        # what the PFC accounting can represent: b/s finite, 0xFFFF quanta in int64 ns
        stats_cmd.LINK_RATE: ["0", "-1", "nan", "inf", "x", "1e300", "1e308", "1e-300",
                              "1e-13G"],
        options.parse_pps: ["0", "-1", "nan", "inf", "x", "1e400", "1e-308", "1e-11"],
        options.parse_seconds: ["-1", "nan", "inf", "1e300", "x", ""],
        options.parse_positive_seconds: ["0", "-1", "nan", "inf", "1e300", "x", "1e-308"],
        options.parse_probability: ["-0.1", "1.01", "nan", "inf", "x"],
        options.parse_load: ["0", "-0.1", "1.01", "nan", "inf", "x", ""],
        options.parse_oversubscription: ["0", "0.99", "-1", "1e7", "nan", "inf", "x", ""],
        options.parse_size: ["-1", "x", "1e30", "nan", "inf", "-1K", "99999999T"],
        options.parse_time: ["-1", "x", "1e30s", "nan", "infms", "1e300"],
        options.parse_positive_time: ["0", "0ms", "-1", "x", "1e30s", "nan"],
        craft_macc.parse_prio: ["8", "-1", "x", "3=70000", "3=-1", "=5", "3=", "1.5"],
        options.parse_mac: MACS_BAD,
        options.parse_mac_bytes: MACS_BAD,
        options.parse_ip: IPS_BAD,
        options.parse_ip_text: IPS_BAD,
        options.parse_ipv4_text: [*IPS_BAD, "fe80::1"],
        options.parse_ecn: ["4", "-1", "x", ""],
        PARSE_FIELD: ["icrc=0x100000000", "bth.psn=0x1000000", "novalue", "=5",
                              "ip.id=zz", "eth.dst=ff:ff:ff:ff:ff", "reth.va=-1"],
        schema.parse_topology: ["ring:3", "incast:0", "incast:-1", "incast:1e3", "incast:",
                                "leafspine:2,2", "incast:0x10", "dumbbell:1000000",
                                "incast:100000000", "leafspine:33000,33000,1", "fattree:3",
                                "fattree:0", "fattree:128", "fattree:4,4", ""],
        schema.parse_ecn_text: ["1,2", "400K,100K,0.2", "1K,2K,nan", "1K,2K,2", "x", ""],
        failures.parse_spec: ["a-b", "ab@1ms", "a-b@", "a-b@-1", "a-b@2ms,up@1ms",
                              "a-b@1ms,down@2ms", "a-b@1e30s", "a-b@nan", ""],
        observe.parse_tap: ["sw:-1", "sw:+0", "sw: 0", "sw", "sw:0x1", "sw:0=", ":0", ""],
        # bounded by roce.emu.ib.lft.MAX_LMC, read when the option is given
        emulate_net._lmc: ["8", "0x8", "-1", "1.5", "zz", "", str(1 << 70)],
    }
    return table[t]


PARSE_FIELD = next(a.type for _p, a in _walk("craft") if a.dest == "fields")
MACS_BAD = ["ff:ff:ff:ff:ff", "1:2:3:4:5:6:7", "gg:00:00:00:00:00", "", "0102030405",
            "01:02:03-04:05:06", "001:02:03:04:05:06", "ff:ff:ff:ff:ff:ff:"]
IPS_BAD = ["1.2.3", "256.0.0.1", "fe80:::1", "x", "", "10.0.0.1/24", "1.2.3.4.5",
           "fe80::1%\x1b[31m", "fe80::1%a b"]

CASES = [(prefix, action) for command in COMMANDS for prefix, action in _walk(command)
         if action.type is not None or action.choices is not None]
IDS = [f"{' '.join(p)} {a.option_strings[-1]}" for p, a in CASES]


def parse_only(argv: list[str]) -> tuple[int | None, str]:
    """Parse ``argv`` as ``roce`` does, without running anything: (exit code or None if it
    parsed, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser(argv[0]).parse_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0), err.getvalue()
    return None, err.getvalue()


def assert_refused(argv: list[str], action: argparse.Action) -> None:
    code, err = parse_only(argv)
    assert code == 1, (argv, code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, (argv, err)
    assert any(f"argument {'/'.join(action.option_strings)}" in lines[0]
               for _ in [0]), (argv, err)


def test_every_valued_option_is_typed() -> None:
    """No option takes a number as a bare int/float any more: each goes through roce.options
    (or is a fixed set of choices)."""
    assert len(CASES) > 100
    loose = [IDS[i] for i, (_p, a) in enumerate(CASES)
             if a.type in (int, float) and a.choices is None]
    assert loose == []
    for command in COMMANDS:
        for _prefix, action in _walk(command):
            if action.type in (int, float):
                assert action.choices is not None, action.option_strings


@pytest.mark.parametrize(("prefix", "action"), CASES, ids=IDS)
def test_fixed_bad_values_are_refused(prefix: list[str], action: argparse.Action) -> None:
    for bad in _fixed_bad(action):
        # "--opt=VALUE" so that values starting with "-" are values, not options
        assert_refused([*prefix, f"{action.option_strings[-1]}={bad}"], action)


# -- a hypothesis strategy over the same options -------------------------------------------


def _ints_outside(lo: int | None, hi: int | None) -> st.SearchStrategy[int]:
    parts = []
    if lo is not None:
        parts.append(st.integers(max_value=lo - 1, min_value=lo - (1 << 80)))
    if hi is not None:
        parts.append(st.integers(min_value=hi + 1, max_value=hi + (1 << 80)))
    return st.one_of(parts)


def _spelled(n: int) -> st.SearchStrategy[str]:
    return st.sampled_from([str(n), hex(n) if n >= 0 else "-" + hex(-n),
                            f"{n:_}", bin(n) if n >= 0 else str(n)])


_NON_FINITE = st.sampled_from(["nan", "inf", "-inf", "NaN", "Infinity"])


def bad_values(action: argparse.Action) -> st.SearchStrategy[str]:
    t = action.type
    fixed = st.sampled_from(_fixed_bad(action))
    bounds = _bounds(action) if action.choices is None else None
    if bounds is not None:
        lo, hi = bounds
        outside = _ints_outside(lo, hi).flatmap(_spelled) if (lo, hi) != (None, None) \
            else st.nothing()
        non_int = st.floats(allow_nan=False, allow_infinity=False).filter(
            lambda f: not f.is_integer()).map(repr)
        return st.one_of(fixed, outside, non_int, _NON_FINITE)
    if t in (options.parse_rate,):
        return st.one_of(fixed, _NON_FINITE, st.floats(max_value=0).map(repr))
    if t is stats_cmd.LINK_RATE:
        lo, hi = t.span
        return st.one_of(fixed, _NON_FINITE, st.floats(max_value=lo * 0.999).map(repr),
                         st.floats(min_value=hi * 1.001, allow_infinity=False).map(repr))
    if t is options.parse_pps:  # below one frame per 2^63 ns
        return st.one_of(fixed, _NON_FINITE, st.floats(max_value=0).map(repr),
                         st.floats(min_value=0, max_value=options.MIN_PPS,
                                   exclude_max=True).map(repr))
    if t in (options.parse_seconds, options.parse_positive_seconds):
        return st.one_of(fixed, _NON_FINITE, st.floats(max_value=-1e-9).map(repr),
                         st.floats(min_value=options.MAX_SECONDS * 1.01,
                                   allow_infinity=False).map(repr))
    if t is options.parse_probability:
        return st.one_of(fixed, st.floats(min_value=1.0001, allow_infinity=False).map(repr),
                         st.floats(max_value=-1e-9).map(repr))
    if t in (options.parse_mac, options.parse_mac_bytes):
        return st.one_of(fixed, st.lists(st.integers(0, 255), max_size=12)
                         .filter(lambda b: len(b) != 6).map(lambda b: ":".join(
                             f"{x:02x}" for x in b)))
    if t in (options.parse_ip, options.parse_ip_text, options.parse_ipv4_text):
        return st.one_of(fixed, st.lists(st.integers(0, 999), min_size=1, max_size=6)
                         .filter(lambda p: len(p) != 4 or max(p) > 255)
                         .map(lambda p: ".".join(map(str, p))))
    return fixed


@hsettings(max_examples=examples(400))
@given(st.sampled_from(CASES).flatmap(lambda c: st.tuples(st.just(c), bad_values(c[1]))))
def test_generated_bad_values_are_refused(case: tuple[tuple[list[str], argparse.Action],
                                                      str]) -> None:
    (prefix, action), bad = case
    assert_refused([*prefix, f"{action.option_strings[-1]}={bad}"], action)


# -- in a child process: 1 GB of address space, 10 s --------------------------------------


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_limited(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ROCE_DEBUG"}
    return subprocess.run([sys.executable, "-m", "roce", *argv], capture_output=True,
                          text=True, timeout=TIME_LIMIT, preexec_fn=_limit, env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def run_here(*argv: str) -> subprocess.CompletedProcess[str]:
    """``roce`` in this process (for cases that cannot run memory up), as ``run_limited``
    reports it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # the parser refused an option
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def assert_one_line_error(res: subprocess.CompletedProcess[str], codes: tuple[int, ...],
                          *words: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode in codes, (res.returncode, res.stderr)
    assert len(lines) == 1, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    for w in words:
        assert w in lines[0], (w, res.stderr)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "c.pcap"
    with PcapWriter(path) as w:
        for i in range(4):
            w.write(roce.craft("rc-send-only", b"abcd", dqpn=0x48, psn=i).to_bytes(), i)
    return path


@contextlib.contextmanager
def fifo_with_junk(tmp: Path, size: int) -> Iterator[Path]:
    """A FIFO that gives ``size`` junk bytes to whoever opens it, then end of file."""
    path = tmp / "fifo"
    os.mkfifo(path)

    def feed() -> None:
        try:
            with open(path, "wb") as f:  # blocks until the reader opens it
                f.write(b"\x5a" * size)
        except (BrokenPipeError, OSError):
            pass  # the reader had enough

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        yield path
    finally:
        if t.is_alive():  # nobody opened it: let the writer's open() return
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            t.join(5)
            os.close(fd)
        t.join(5)


FILE_OPTIONS = [
    (["decode", "{}"], "decode FILE"),
    (["decode", "-r", "{}"], "decode -r"),
    (["stats", "{}"], "stats FILE"),
    (["replay", "{}", "-w", "{out}"], "replay FILE"),
    (["send", "-r", "{}", "-i", "lo"], "send -r"),
    (["craft", "rc-send-only", "-q", "--payload-file", "{}"], "craft --payload-file"),
]


@pytest.mark.parametrize("kind", ["missing", "directory", "/dev/zero", "fifo"])
@pytest.mark.parametrize(("argv", "what"), FILE_OPTIONS, ids=[w for _a, w in FILE_OPTIONS])
def test_odd_files(tmp_path: Path, argv: list[str], what: str, kind: str) -> None:
    out = str(tmp_path / "out.pcap")
    with contextlib.ExitStack() as stack:
        if kind == "missing":
            path = str(tmp_path / "missing.pcap")
        elif kind == "directory":
            path = str(tmp_path)
        elif kind == "/dev/zero":
            path = "/dev/zero"
        else:  # more junk than one frame carries, so that even a payload is refused
            path = str(stack.enter_context(fifo_with_junk(tmp_path, 70_000)))
        # only what reads without end needs a child with limits
        run = run_limited if kind in ("/dev/zero", "fifo") else run_here
        res = run(*(a.format(path, out=out) for a in argv))
    # a payload file too big for a frame is a usage error (1), an unreadable one input (2)
    codes = (1,) if what.startswith("craft") and kind in ("/dev/zero", "fifo") else (2,)
    if what.startswith("craft") and kind == "directory":
        codes = (2,)
    assert_one_line_error(res, codes)
    word = "--payload-file" if what.startswith("craft") else (
        "" if kind == "/dev/zero" else os.path.basename(path))
    assert word in res.stderr


@pytest.mark.parametrize("argv", [
    ["craft", "rc-send-only", "-q", "-w", "{tmp}"],
    ["craft", "rc-send-only", "-q", "-w", "{tmp}/no/such/dir/x.pcap"],
    ["replay", "{capture}", "-w", "{tmp}"],
    ["emulate", "--size", "4K", "--count", "1", "--no-progress", "-w", "{tmp}"],
])
def test_unwritable_outputs_exit_2(tmp_path: Path, capture: Path, argv: list[str]) -> None:
    res = run_here(*(a.format(tmp=tmp_path, capture=capture) for a in argv))
    assert_one_line_error(res, (2,), str(tmp_path))


# -- the cases of issue 12 ------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "option"), [
    (["craft", "rc-send-only", "--payload-file", "/dev/zero"], "--payload-file"),
    (["craft", "rc-send-only", "--payload-hex", "00", "--payload-size", "4000000000"],
     "--payload-size"),
    (["craft", "rc-send-only", "--payload-size", "0x7fffffffffffffff"], "--payload-size"),
    (["craft", "rc-send-only", "--count", "2", "--interval", "1e300"], "--interval"),
    (["craft", "rc-send-only", "--field", "icrc=0x100000000"], "--field"),
    (["craft", "rc-send-only", "--dmac", "ff:ff:ff:ff:ff"], "--dmac"),
    (["craft", "rc-send-only", "--psn", "0x1000000"], "--psn"),
    (["emulate", "--psn", "0x1000000"], "--psn"),
    (["emulate", "--timeout", "32"], "--timeout"),
    (["emulate", "--retry-cnt", "8"], "--retry-cnt"),
    (["emulate", "--rnr-retry", "8"], "--rnr-retry"),
    (["emulate", "--rate", "0"], "--rate"),
    (["emulate", "--rate", "-1"], "--rate"),
    (["target", "--qpn", "0x1000000"], "--qpn"),
    (["target", "--psn", "-1"], "--psn"),
    (["send", "rc-send-only", "--interval", "1e300"], "--interval"),
    (["replay", "x.pcap", "--pps", "0"], "--pps"),
    (["stats", "x.pcap", "--link-rate", "1e308"], "--link-rate"),
    (["stats", "x.pcap", "--link-rate", "1e300"], "--link-rate"),
])
def test_issue_cases_exit_1_naming_the_option(argv: list[str], option: str) -> None:
    # the first two once ran memory up: in a limited child; the others stop in the parser
    res = (run_limited if "--payload-file" in argv or "--payload-hex" in argv else run_here)(
        *argv)
    assert_one_line_error(res, (1,), option)


@pytest.mark.parametrize("end", [0, 1])
def test_stats_link_rate_bounds_are_representable(tmp_path: Path, end: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The extreme rates --link-rate takes run through the PFC accounting, text and JSON."""
    from roce import macc

    path = tmp_path / "pfc.pcap"
    src = bytes.fromhex("020000000001")
    with PcapWriter(path) as w:
        w.write(macc.build_pfc(src, {3: 0xFFFF}), ts_ns=0)
        w.write(macc.build_pfc(src, {3: 0}), ts_ns=10**9)
    rate = repr(stats_cmd.LINK_RATE.span[end])
    for fmt in ("text", "json"):
        assert main(["stats", "-T", fmt, "--link-rate", rate, str(path)]) == 0
    assert "PFC" in capsys.readouterr().out


def test_smac_octets_are_octets(tmp_path: Path) -> None:
    path = tmp_path / "mac.pcap"
    assert main(["craft", "rc-send-only", "-q", "--smac", "1:2:3:4:5:6", "--dmac",
                 "a-b-c-d-e-f", "-w", str(path)]) == 0
    from roce.pcapio import open_capture

    with open_capture(path) as r:
        p = roce.parse(next(iter(r)).data)
    assert p.headers["eth"]["src"] == "01:02:03:04:05:06"
    assert p.headers["eth"]["dst"] == "0a:0b:0c:0d:0e:0f"


def _peak_rss_mb(proc: subprocess.Popen[bytes]) -> float:
    """The child's peak RSS, from /proc/PID/status VmHWM while it runs.  VmHWM belongs to the
    memory the child has since its exec; ru_maxrss (getrusage, wait4) would also count the
    pages it shared with this big test process between fork and exec."""
    peak = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    return peak / 1024


def test_craft_million_frames_in_flat_memory(tmp_path: Path) -> None:
    """``--count 1000000 -w FILE``: peak RSS under 100 MB."""
    path = tmp_path / "m.pcap"
    proc = subprocess.Popen([sys.executable, "-m", "roce", "craft", "rc-send-only", "-q",
                             "--count", "1000000", "-w", str(path)],
                            stderr=subprocess.PIPE, preexec_fn=_limit)
    peak_mb = _peak_rss_mb(proc)
    assert proc.stderr is not None
    assert proc.returncode == 0, proc.stderr.read()
    proc.stderr.close()
    assert 5 < peak_mb < 100, peak_mb  # (more than 5: the reading is real)
    frame = len(roce.craft("rc-send-only").to_bytes())
    assert path.stat().st_size == 24 + 1_000_000 * (16 + frame)


# -- pcapng timestamps past 2^63 ns ---------------------------------------------------------


def _pcapng(path: Path, tsresol: int, stamps: list[int], linktype: int = 1) -> None:
    def block(kind: int, body: bytes) -> bytes:
        return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    opt = struct.pack("<HH", 9, 1) + bytes([tsresol]) + b"\0" * 3 + b"\0" * 4
    out += block(1, struct.pack("<HHI", linktype, 0, 65535) + opt)
    frame = roce.craft("rc-send-only", b"abcd").to_bytes()
    pad = b"\0" * (-len(frame) % 4)
    for ts in stamps:
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(frame),
                                    len(frame)) + frame + pad)
    path.write_bytes(out)


@pytest.mark.parametrize("tsresol", [0, 3])  # seconds, milliseconds
@pytest.mark.parametrize("argv", [["stats"], ["decode", "-t", "a"], ["decode", "-t", "ad"],
                                  ["decode", "-t", "u"], ["decode", "-t", "ud"],
                                  ["decode", "-V"], ["replay", "-w", "{out}"]])
def test_timestamps_past_int64_warn_once(tmp_path: Path, argv: list[str], tsresol: int) -> None:
    path = tmp_path / "t.pcapng"
    _pcapng(path, tsresol, [1, 1 << 63, (1 << 64) - 1, 5])
    res = run_here(*[a.format(out=tmp_path / "o.pcap") for a in argv], str(path))
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if "out of range" in line]
    assert len(warnings) == 1 and "clamped" in warnings[0], res.stderr
    assert "internal error" not in res.stderr


def test_replayed_timestamps_fit_pcap(tmp_path: Path) -> None:
    """Clamped to 2^63-1 ns, a timestamp still does not fit a classic pcap (2106): the
    writer clamps it to the format's last second and says so once."""
    path = tmp_path / "t.pcapng"
    _pcapng(path, 0, [1, 1 << 40])
    res = run_here("replay", str(path), "-w", str(tmp_path / "o.pcap"))
    assert res.returncode == 0, res.stderr
    assert sum("do not fit" in line for line in res.stderr.splitlines()) == 1
    from roce.pcapio import open_capture

    with open_capture(tmp_path / "o.pcap") as r:
        stamps = [f.ts_ns for f in r]
    assert stamps == [10**9, PcapWriter.MAX_TS_NS]


# -- display filters tshark rejects ---------------------------------------------------------

# (ours, tshark's spelling of the same test)
REJECTED_FILTERS = [
    ("ip.src == 5", "ip.src == 5"),
    ("bth.psn == 10.0.0.1", "infiniband.bth.psn == 10.0.0.1"),
    ('bth.psn == "x"', 'infiniband.bth.psn == "x"'),
    ("bth.psn contains 1", "infiniband.bth.psn contains 1"),
    ("bth.padcnt == 300", "infiniband.bth.padcnt == 300"),
    ("eth.src == 5", "eth.src == 5"),
    ("ip.src contains 10", "ip.src contains 10"),
    # icrc.valid is roce's own field; tshark 4.0 takes any number for a boolean
    ("icrc.valid == 7", None),
]


@pytest.mark.parametrize(("expr", "theirs"), REJECTED_FILTERS)
def test_filters_tshark_rejects_exit_1_with_caret(capture: Path, expr: str,
                                                  theirs: str | None,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", str(capture), "-Y", expr]) == 1
    err = capsys.readouterr().err.splitlines()
    assert "bad filter:" in err[0] and err[-1].strip() == "^"
    if theirs is not None and TSHARK is not None:
        res = subprocess.run([TSHARK, "-r", str(capture), "-Y", theirs], capture_output=True,
                             timeout=60)
        assert res.returncode != 0 and b"^" in res.stderr, res.stderr


# -- a link type roce cannot read ------------------------------------------------------------


def test_stats_names_unsupported_link_type_once(tmp_path: Path) -> None:
    path = tmp_path / "wifi.pcap"
    with PcapWriter(path, linktype=105) as w:
        for i in range(50):
            w.write(roce.craft("rc-send-only").to_bytes(), i)
    res = run_here("stats", str(path))
    assert res.returncode == 0
    lines = [line for line in res.stderr.splitlines() if "link type" in line]
    assert len(lines) == 1 and "105" in lines[0] and "not supported" in lines[0]
    _pcapng(tmp_path / "ok.pcapng", 9, [1, 2])
    assert "link type" not in run_here("stats", str(tmp_path / "ok.pcapng")).stderr


# -- -T fields as tshark prints it -----------------------------------------------------------


def test_fields_destqp_in_tshark_form(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", str(capture), "-T", "fields", "-e", "bth.destqp", "-c", "1"]) == 0
    assert capsys.readouterr().out == "0x000048\n"
    assert main(["decode", str(capture), "-T", "fields", "-e", "bth.destqp", "-c", "1",
                 "-E", "raw=y"]) == 0
    assert capsys.readouterr().out == "72\n"
    if TSHARK is not None:
        res = subprocess.run([TSHARK, "-r", str(capture), "-T", "fields", "-e",
                              "infiniband.bth.destqp", "-c", "1"], capture_output=True,
                             text=True, timeout=60)
        assert res.stdout == "0x000048\n"


def test_option_readers_agree_with_their_parsers() -> None:
    """The readers the filter and the encoders share read what the option parsers read."""
    for text, want in (("0", 0), ("17", 17), ("0x11", 17), ("0b101", 5), ("0o17", 15),
                       ("1_000", 1000), ("010", 10), ("-5", -5), ("+3", 3)):
        assert options.read_int(text) == want
    for text in ("", "0x", "1__0", "1_", "1.0", "1e3", "--1", "0x1g", "٣"):
        with pytest.raises(ValueError):
            options.read_int(text)
    for text in ("1:2:3:4:5:6", "01-02-03-04-05-06", "0102.0304.0506", "01.02.03.04.05.06"):
        assert options.mac_bytes(text) == bytes([1, 2, 3, 4, 5, 6])
    assert math.isclose(options.parse_rate("100Gbps"), 100.0)
