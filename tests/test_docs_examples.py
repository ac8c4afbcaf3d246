"""Every sample output in README.md and docs/guide/ is what the code prints now.

docs/examples/make_examples.py writes the samples and, with --check, compares them with a
fresh run.  The first test is that check; the others show that it catches an edited sample,
that the measured-figure placeholders hide the timings and nothing else, and that samples
needing root are skipped rather than faked.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def me():
    spec = importlib.util.spec_from_file_location(
        "make_examples", REPO / "docs" / "examples" / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_examples"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("make_examples", None)


def copy_pages(me, dest: Path) -> None:
    for page in me.pages():
        target = dest / page.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(page, target)


def committed(me, root: Path, name: str) -> tuple[Path, str]:
    return next((page, body) for page, n, body in me.blocks(root) if n == name)


def test_samples_match_the_code(me):
    res = me.check()
    assert res.ok, res.report()
    shown = {name for _, name, _ in me.blocks()}
    assert shown == set(me.EXAMPLES)
    assert len(res.skipped) < len(me.EXAMPLES)


def test_an_edited_sample_fails_the_check(me, tmp_path):
    copy_pages(me, tmp_path)
    assert me.check(["quick-craft"], root=tmp_path).ok
    page, body = committed(me, tmp_path, "quick-craft")
    assert "PSN=100 " in body
    page.write_text(page.read_text().replace(body, body.replace("PSN=100 ", "PSN=101 ")))
    res = me.check(["quick-craft"], root=tmp_path)
    assert not res.ok and res.differ == ["quick-craft"]
    assert "-    1 0.000000000" in res.diffs["quick-craft"]  # the diff shows the edited line
    assert me.main(["--check", "--only", "quick-craft"]) == 0  # the real pages are untouched


def test_placeholders_hide_only_the_measured_figures(me, tmp_path):
    """An edit on a line that holds a placeholder still fails the check."""
    copy_pages(me, tmp_path)
    page, body = committed(me, tmp_path, "quick-emulate")
    lines = body.splitlines(keepends=True)
    cpu = next(i for i, line in enumerate(lines) if line.startswith("CPU ")
               and me.PLACEHOLDER in line)
    hops = next(i for i, line in enumerate(lines) if line.startswith("hops ")
                and me.PLACEHOLDER in line)
    for i, old, new in ((cpu, "emulated packets", "emulated frames"), (hops, "hops", "jumps")):
        edited = lines.copy()
        edited[i] = edited[i].replace(old, new)
        page.write_text(page.read_text().replace(body, "".join(edited)))
        assert me.check(["quick-emulate"], root=tmp_path).differ == ["quick-emulate"], old
        page.write_text(page.read_text().replace("".join(edited), body))
    assert me.check(["quick-emulate"], root=tmp_path).ok


@pytest.mark.parametrize("kind,line,expected", [
    ("cpu", "CPU           0.225 s (47,089 emulated packets per CPU-second)",
     "CPU           [measured] s ([measured] emulated packets per CPU-second)"),
    ("cpu", "hops          5136 (141,279 packet-hops per CPU-second)",
     "hops          5136 ([measured] packet-hops per CPU-second)"),
    ("cpu", "CPU           0.001 s", "CPU           [measured] s"),
    ("fuzz-rate", "roce fuzz decoder: 2000 inputs in 0.3 s (6,142/s)",
     "roce fuzz decoder: 2000 inputs in [measured] s ([measured]/s)"),
    ("send-rate", "sent 3 frames (174 bytes) on veth0 in 0.004 s; 992 pps, 0.46 Mb/s",
     "sent 3 frames (174 bytes) on veth0 in [measured] s; [measured] pps, [measured] Mb/s"),
    ("send-rate", "sent 1 frames (74 bytes) on veth0 in 0.000 s",
     "sent 1 frames (74 bytes) on veth0 in [measured] s"),
    ("live-time", "   12 0.000992556     10.0.0.1 -> 10.0.0.2     RRoCE 58 PSN=6",
     "   12 [measured]      10.0.0.1 -> 10.0.0.2     RRoCE 58 PSN=6"),
    ("live-time", "rx     1 0.000612992     10.0.0.1 -> 10.0.0.2",
     "rx     1 [measured]      10.0.0.1 -> 10.0.0.2"),
    ("wall", "wall time     6.278 ms", "wall time     [measured] ms"),
    ("wall", "goodput       0.334 Gb/s (41.8 MB/s)",
     "goodput       [measured] Gb/s ([measured] MB/s)"),
    ("wall", "latency       post to completion: min 1482.4 us, median 1705.4 us, p99 6008.2 us",
     "latency       post to completion: min [measured] us, median [measured] us, "
     "p99 [measured] us"),
])
def test_each_measured_pattern(me, kind, line, expected):
    assert me.normalise(line, [kind]) == expected
    assert me.normalise(line, [k for k in me.MEASURED if k != kind]) == line


@pytest.mark.parametrize("line", [
    "packets       10605 (5359 retransmitted)",
    "goodput       48.196 Gb/s",  # virtual time: the same on every run, so compared
    "virtual time  3.481 ms",
    "completion    mean 818.0 us, p50 840.0 us, p99 886.8 us",
])
def test_figures_of_virtual_time_are_compared(me, line):
    assert me.normalise(line, me.MEASURED) == line


def test_only_live_captures_hide_their_time_column(me):
    """A capture's time column is compared (it is the capture's, not the clock's), except
    in the samples that capture live on a veth pair."""
    live = [ex.name for ex in me.EXAMPLES.values() if "live-time" in ex.measured]
    assert live and all(me.EXAMPLES[name].root for name in live)
    line = "    4 0.000021000     10.0.0.2 -> 10.0.0.1     RRoCE 62 RC Acknowledge"
    assert me.normalise(line, [k for k in me.MEASURED if k != "live-time"]) == line


def test_root_samples_are_skipped_not_faked(me, monkeypatch, tmp_path):
    copy_pages(me, tmp_path)
    monkeypatch.setattr(me, "root_unavailable", lambda: "needs root on Linux")
    page, body = committed(me, tmp_path, "quick-send")
    page.write_text(page.read_text().replace(body, body.replace("PSN=5", "PSN=9")))
    res = me.check(["quick-send"], root=tmp_path)
    assert res.skipped == ["quick-send"] and not res.differ and res.ok
    assert "not checked (needs root on Linux): quick-send" in res.report()


def test_markers(me):
    page = ("text\n<!-- example: a -->\n```console\n$ roce x\n```\n<!-- /example -->\n"
            "```text\n<!-- example: shown-in-code -->\n<!-- /example -->\n```\n"
            "<!-- example: b -->\nold\n")
    found, problems = me.parse_page(page)
    assert [(b.name, b.body(page)) for b in found] == [("a", "```console\n$ roce x\n```\n")]
    assert problems == ["example 'b' is not closed"]


def test_command_lines(me):
    p = me.parse_command("roce decode -V x.pcap | head -n 56 | tail -n 6")
    assert p.argv[1:] == ["-m", "roce", "decode", "-V", "x.pcap"]
    assert p.filters == [("head", 56), ("tail", 6)]
    p = me.parse_command("ROCE_PURE=1 roce emulate -w run.pcap > /dev/null")
    assert p.env == {"ROCE_PURE": "1"} and p.devnull and p.argv[-1] == "run.pcap"
    for bad in ("rm -rf x", "roce decode x.pcap && rm x", "roce decode x | grep y"):
        with pytest.raises(me.ExampleError):
            me.parse_command(bad)
