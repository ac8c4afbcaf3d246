#!/usr/bin/env python3
"""Write every sample output in README.md and docs/guide/ from what the code prints now.

    python docs/examples/make_examples.py            # rewrite every sample in place
    python docs/examples/make_examples.py --check    # exit 1 listing the samples that differ
    python docs/examples/make_examples.py --only quick-decode --only emulate-lossy

A sample lives in a page between two markers:

    <!-- example: NAME -->
    (anything: this script writes it)
    <!-- /example -->

Markers count on lines of their own outside fenced code (so a page may show one in a code
block).  NAME is one of the examples defined in ``catalogue.py`` beside this script.  An example is
the commands (or Python code) it shows, so a command and its output cannot drift apart: the
block is written from the definition, command lines included.  Each example runs in a fresh
temporary directory holding a copy of ``pcaps/``, as ``sys.executable -m roce ...`` with this
repository first on ``PYTHONPATH``, with fixed seeds, no colour and unbuffered output (so
stdout and stderr interleave as on a terminal).  A command line may end in ``| head -n N``,
``| tail -n N`` or ``> /dev/null``; they mean what the shell makes of them.

Measured figures.  Some outputs print wall-clock or CPU time, or rates derived from them,
which no two runs share.  An example names the kinds of measured figure it prints
(``measured=``) and only those figures, matched by the patterns in ``MEASURED`` below, are
replaced by the placeholder ``[measured]``, in the pages and in what ``--check`` compares.
Nothing else is touched: a changed count, size, rate in virtual time or line of text on the
same line still makes ``--check`` fail.

Examples that need root and network namespaces (``root=True``: send, sniff and target on a
veth pair) run in two namespaces joined by veth0/veth1 when this runs as root, and are
skipped, with a note, otherwise (``--check`` then reports them as not checked, not as
different).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from catalogue import EXAMPLES, Example, Py, Step  # noqa: E402

PAGES = ("README.md", "docs/guide/*.md")
PLACEHOLDER = "[measured]"

# The measured figures, by kind: (pattern, replacement).  Each pattern matches only the
# figure in the phrase that prints it, never the rest of the line.
M = PLACEHOLDER
MEASURED: dict[str, list[tuple[str, str]]] = {
    # roce emulate: "CPU           0.225 s (47,089 emulated packets per CPU-second)",
    # across a real link "CPU           0.001 s"; switched: "(141,279 packet-hops per CPU-second)"
    "cpu": [(r"(?m)^(CPU +)[\d.]+ s\b", rf"\g<1>{M} s"),
            (r"\([\d,]+ (emulated packets|packet-hops) per CPU-second\)",
             rf"({M} \1 per CPU-second)")],
    # roce fuzz: "roce fuzz decoder: 2000 inputs in 0.3 s (6,142/s)"
    "fuzz-rate": [(r"(inputs in )[\d.]+ s \([\d,]+/s\)", rf"\g<1>{M} s ({M}/s)")],
    # roce send: "sent 3 frames (174 bytes) on veth0 in 0.004 s; 992 pps, 0.46 Mb/s"
    "send-rate": [(r"( on \S+ in )[\d.]+ s; [\d,.]+ pps, [\d.]+ ([kMG]?b/s)",
                   rf"\g<1>{M} s; {M} pps, {M} \2"),
                  (r"(?m)( on \S+ in )[\d.]+ s$", rf"\g<1>{M} s")],
    # roce compare: "cpu  roce-pfc-dcqcn  0.021 s, 47,293 packet-hops per CPU-second"
    "compare-cpu": [(r"(?m)^(cpu +\S+ +)[\d.]+ s, [\d,]+ (packet-hops per CPU-second)$",
                     rf"\g<1>{M} s, {M} \2")],
    # a live capture's time column (roce sniff, roce target's rx/tx lines)
    "live-time": [(r"(?m)^((?:rx|tx)? *\d+) \d+\.\d{9} ", rf"\g<1> {M:<11} ")],
    # roce emulate --listen/--connect: wall time, the goodput and latency measured on it
    "wall": [(r"(?m)^(wall time +)[\d.]+ (m?s)$", rf"\g<1>{M} \2"),
             (r"(?m)^(goodput +)[\d.]+ Gb/s \([\d.]+ [kMG]?B/s\)$",
              rf"\g<1>{M} Gb/s ({M} MB/s)"),
             (r"(?m)^(latency +post to completion: )"
              r"min [\d.]+ us, median [\d.]+ us, p99 [\d.]+ us$",
              rf"\g<1>min {M} us, median {M} us, p99 {M} us")],
}


def normalise(text: str, kinds: Iterable[str]) -> str:
    """``text`` with the measured figures of ``kinds`` replaced by the placeholder."""
    for kind in kinds:
        for pattern, replacement in MEASURED[kind]:
            text = re.sub(pattern, replacement, text)
    return text


# ---------------------------------------------------------------------------------------------
# running an example

_serial = itertools.count()


class ExampleError(Exception):
    """A step failed or printed what its definition does not allow."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCE_")}
    path = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(PYTHONPATH=path, PYTHONUNBUFFERED="1", PYTHONHASHSEED="0", NO_COLOR="1",
               TERM="dumb", TZ="UTC", COLUMNS="100", LC_ALL="C.UTF-8",
               PYTHONWARNINGS="default")
    return env


@dataclass
class Parsed:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    devnull: bool = False
    filters: list[tuple[str, int]] = field(default_factory=list)  # ("head"|"tail", N), in order


def parse_command(line: str) -> Parsed:
    """The small shell subset a sample may use: ``[VAR=value ...] roce ARGS`` then optionally
    ``> /dev/null``, or ``| head -n N`` and ``| tail -n N`` filters."""
    words = shlex.split(line)
    p = Parsed(argv=[])
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        k, _, v = words.pop(0).partition("=")
        p.env[k] = v
    if words[-2:] == [">", "/dev/null"]:
        p.devnull, words = True, words[:-2]
    while len(words) >= 4 and words[-4] == "|" and words[-3] in ("head", "tail") \
            and words[-2] == "-n" and words[-1].isdigit():
        p.filters.insert(0, (words[-3], int(words[-1])))
        words = words[:-4]
    if not words or words[0] != "roce" or any(w in ("|", ">", "<", "&&", ";") for w in words):
        raise ExampleError(f"not a command this script runs: {line!r}")
    p.argv = [sys.executable, "-m", "roce", *words[1:]]
    return p


MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"
ADDR_B = "10.0.0.2/24"  # the address crafted frames go to by default: host B is its owner


class Namespaces:
    """Two network namespaces joined by a veth pair, veth0 in A and veth1 in B, with the
    MACs ``MAC_A`` and ``MAC_B``; B's kernel owns ``ADDR_B`` (so it answers ARP for it),
    A has no address (so its kernel sends nothing of its own)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}x{next(_serial)}"
        self.ns = {"A": f"rocedoc{tag}a", "B": f"rocedoc{tag}b"}

    def __enter__(self) -> Namespaces:
        def ip(*args: str) -> None:
            subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)
        try:
            for ns in self.ns.values():
                ip("netns", "add", ns)
            a, b = self.ns["A"], self.ns["B"]
            # fixed MACs, so that samples showing them are the same from run to run
            ip("-n", a, "link", "add", "veth0", "address", MAC_A, "type", "veth", "peer",
               "name", "veth1", "address", MAC_B, "netns", b)
            for ns, dev in ((a, "veth0"), (b, "veth1")):
                for sysctl in ("all", "default", dev):  # no IPv6 chatter on the wire
                    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                                    f"net.ipv6.conf.{sysctl}.disable_ipv6=1"],
                                   capture_output=True, timeout=30)
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "link", "set", dev, "up")
            ip("-n", b, "addr", "add", ADDR_B, "dev", "veth1")
            self._wait_up()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_up(self) -> None:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            states = [subprocess.run(["ip", "-n", ns, "-o", "link", "show", dev],
                                     capture_output=True, text=True, timeout=30).stdout
                      for ns, dev in ((self.ns["A"], "veth0"), (self.ns["B"], "veth1"))]
            if all("LOWER_UP" in s and "state UP" in s for s in states):
                return
            time.sleep(0.05)
        raise ExampleError("veth0/veth1 did not come up")

    def wrap(self, host: str | None, argv: list[str]) -> list[str]:
        return argv if host is None else ["ip", "netns", "exec", self.ns[host], *argv]

    def __exit__(self, *exc: object) -> None:
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def root_unavailable() -> str | None:
    """Why the root-only examples cannot run here (None when they can)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux"
    if shutil.which("ip") is None:
        return "needs iproute2"
    probe = f"rocedocprobe{os.getpid()}x{next(_serial)}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "'ip netns add' does not work here"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run_step(step: Step, cwd: Path, env: dict[str, str], nets: Namespaces | None,
              timeout: float) -> str:
    p = parse_command(step.cmd)
    argv = nets.wrap(step.host, p.argv) if nets else p.argv
    res = subprocess.run(argv, cwd=cwd, env={**env, **p.env}, timeout=timeout, text=True,
                         stdout=subprocess.DEVNULL if p.devnull else subprocess.PIPE,
                         stderr=subprocess.PIPE if p.filters else subprocess.STDOUT)
    if res.returncode != step.rc:
        raise ExampleError(f"{step.cmd!r} exited {res.returncode}, expected {step.rc}:\n"
                           f"{res.stdout or ''}{res.stderr or ''}")
    out = res.stdout or ""
    if p.filters:
        if res.stderr:
            raise ExampleError(f"{step.cmd!r} wrote to stderr through a pipe: {res.stderr}")
        lines = out.splitlines(keepends=True)
        for kind, n in p.filters:
            lines = lines[:n] if kind == "head" else lines[-n:] if n else []
        out = "".join(lines)
    return out


def _start_background(step: Step, cwd: Path, env: dict[str, str], nets: Namespaces | None,
                      log: Path) -> subprocess.Popen:
    p = parse_command(step.cmd)
    argv = nets.wrap(step.host, p.argv) if nets else p.argv
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, cwd=cwd, env={**env, **p.env}, stdout=fh,
                                stderr=subprocess.STDOUT, text=True)
    end = time.monotonic() + 20
    while step.ready not in log.read_text():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            proc.wait()
            raise ExampleError(f"{step.cmd!r} never said {step.ready!r}: {log.read_text()}")
        time.sleep(0.02)
    return proc


def run_example(ex: Example, timeout: float = 120) -> str:
    """The block ``ex`` writes between its markers, measured figures normalised."""
    env = _env()
    with tempfile.TemporaryDirectory(prefix="roce-doc-") as tmp:
        cwd = Path(tmp)
        shutil.copytree(REPO / "pcaps", cwd / "pcaps",
                        ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        for name, text in ex.files.items():  # "dir/" makes a directory
            (cwd / name).parent.mkdir(parents=True, exist_ok=True)
            if name.endswith("/"):
                (cwd / name).mkdir(exist_ok=True)
            else:
                (cwd / name).write_text(text)
        nets_cm = Namespaces() if ex.root else contextlib.nullcontext()
        with nets_cm as nets:
            outputs: list[str | None] = [None] * len(ex.steps)
            background: list[tuple[int, subprocess.Popen, Path]] = []
            try:
                for i, step in enumerate(ex.steps):
                    if isinstance(step, Py):
                        res = subprocess.run([sys.executable, "-c", step.code], cwd=cwd, env=env,
                                             capture_output=True, text=True, timeout=timeout)
                        if res.returncode != 0:
                            raise ExampleError(f"Python sample failed:\n{res.stderr}")
                        outputs[i] = res.stdout + res.stderr
                    elif step.ready:
                        log = cwd / f".background{i}.log"
                        background.append((i, _start_background(step, cwd, env, nets, log), log))
                    else:
                        outputs[i] = _run_step(step, cwd, env, nets, timeout)
                for i, proc, log in background:
                    rc = proc.wait(timeout)
                    if rc != ex.steps[i].rc:
                        raise ExampleError(f"{ex.steps[i].cmd!r} exited {rc}:\n{log.read_text()}")
                    outputs[i] = log.read_text()
            finally:
                for _, proc, _ in background:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
    return render(ex, [normalise(o or "", ex.measured) for o in outputs])


def render(ex: Example, outputs: Sequence[str]) -> str:
    parts: list[str] = []
    console: list[str] = []

    def flush() -> None:
        if console:
            parts.append("```console\n" + "".join(console) + "```\n")
            console.clear()

    for name, text in ex.files.items():
        if ex.show_files and not name.endswith("/"):
            lang = {"toml": "toml", "py": "python"}.get(name.rpartition(".")[2], "text")
            parts.append(f"```{lang}\n# {name}\n{text}```\n")
    for step, out in zip(ex.steps, outputs):
        if isinstance(step, Py):
            flush()
            parts.append("```python\n" + step.code.strip("\n") + "\n```\n")
            if out:
                parts.append("```text\n" + out + ("" if out.endswith("\n") else "\n") + "```\n")
            continue
        if step.label:
            console.append(f"# {step.label}\n")
        console.append(f"$ {step.cmd}\n")
        if out:
            console.append(out if out.endswith("\n") else out + "\n")
    flush()
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# pages

def pages(root: Path = REPO) -> list[Path]:
    found: list[Path] = []
    for pattern in PAGES:
        found.extend(sorted(root.glob(pattern)))
    return found


OPEN = re.compile(r"<!-- example: (?P<name>[\w.-]+) -->")
CLOSE = "<!-- /example -->"


@dataclass
class Block:
    name: str
    start: int  # offset of the body: just after the opening marker's line
    end: int    # offset of the closing marker

    def body(self, text: str) -> str:
        return text[self.start:self.end]


def parse_page(text: str) -> tuple[list[Block], list[str]]:
    """The marker pairs of a page, and what is wrong with its markers.  Markers count only
    outside fenced code, so a page may show one in a code block."""
    found: list[Block] = []
    problems: list[str] = []
    fence = False
    opened: tuple[str, int] | None = None
    offset = 0
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\n")
        if bare.startswith("```"):
            fence = not fence
        elif not fence and (m := OPEN.fullmatch(bare)):
            if opened:
                problems.append(f"example {opened[0]!r} is not closed before {m['name']!r}")
            opened = (m["name"], offset + len(line))
        elif not fence and bare == CLOSE:
            if opened is None:
                problems.append("a closing example marker without an opening one")
            else:
                found.append(Block(opened[0], opened[1], offset))
                opened = None
        offset += len(line)
    if opened:
        problems.append(f"example {opened[0]!r} is not closed")
    return found, problems


def blocks(root: Path = REPO) -> Iterator[tuple[Path, str, str]]:
    """(page, example name, committed body) for every marker pair."""
    for page in pages(root):
        text = page.read_text()
        for block in parse_page(text)[0]:
            yield page, block.name, block.body(text)


def consistency(root: Path = REPO) -> list[str]:
    """Markers without a definition, definitions without a marker, unclosed markers."""
    problems = []
    used = set()
    for page in pages(root):
        found, wrong = parse_page(page.read_text())
        problems += [f"{page.relative_to(root)}: {w}" for w in wrong]
        for block in found:
            used.add(block.name)
            if block.name not in EXAMPLES:
                problems.append(f"{page.relative_to(root)}: no example named {block.name!r}")
    problems += [f"example {name!r} is defined but shown nowhere"
                 for name in EXAMPLES if name not in used]
    return problems


@dataclass
class Generated:
    fresh: dict[str, str] = field(default_factory=dict)   # name -> block
    skipped: list[str] = field(default_factory=list)      # root only, not root here
    errors: dict[str, str] = field(default_factory=dict)  # name -> what went wrong


def _attempt(ex: Example) -> tuple[str | None, str | None]:
    try:
        return run_example(ex), None
    except (ExampleError, subprocess.SubprocessError, OSError) as e:
        return None, str(e)


def generate(names: Iterable[str] | None = None, jobs: int = 2) -> Generated:
    """Fresh blocks for ``names`` (default: all)."""
    wanted = [EXAMPLES[n] for n in (EXAMPLES if names is None else names)]
    gen = Generated()
    no_root = root_unavailable() if any(ex.root for ex in wanted) else None
    gen.skipped = [ex.name for ex in wanted if ex.root and no_root]
    todo = sorted((ex for ex in wanted if ex.name not in gen.skipped), key=lambda ex: -ex.cost)
    with ThreadPoolExecutor(max(1, jobs)) as pool:  # the slowest first: workers end together
        for ex, (block, error) in zip(todo, pool.map(_attempt, todo)):
            if error is None:
                gen.fresh[ex.name] = block  # type: ignore[assignment]
            else:
                gen.errors[ex.name] = error
    return gen


@dataclass
class Result:
    differ: list[str] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)  # write(): the blocks that changed

    @property
    def ok(self) -> bool:
        return not (self.differ or self.errors or self.problems)

    def report(self) -> str:
        out = [f"not checked ({root_unavailable()}): {name}" for name in self.skipped]
        out += self.problems
        out += [f"example {name} failed: {error}" for name, error in self.errors.items()]
        out += [self.diffs[name] for name in self.differ]
        if self.differ:
            out.append(f"samples that differ from what the code prints now: "
                       f"{', '.join(self.differ)}\n"
                       f"regenerate them with: python docs/examples/make_examples.py")
        return "\n".join(s.rstrip("\n") for s in out)


def check(names: Iterable[str] | None = None, root: Path = REPO, jobs: int = 2) -> Result:
    """Compare the blocks committed under ``root`` with what the code prints now."""
    names = list(names) if names is not None else None
    result = Result(problems=consistency(root) if names is None else [])
    committed = [(p, n, b) for p, n, b in blocks(root) if names is None or n in names]
    gen = generate(sorted({n for _, n, _ in committed}), jobs)
    result.skipped, result.errors = gen.skipped, gen.errors
    for page, name, body in committed:
        if name in gen.fresh and body != gen.fresh[name] and name not in result.differ:
            result.differ.append(name)
            result.diffs[name] = "".join(difflib.unified_diff(
                body.splitlines(keepends=True), gen.fresh[name].splitlines(keepends=True),
                f"{page.relative_to(root)}: {name} (committed)", f"{name} (now)"))
    return result


def write(names: Iterable[str] | None = None, root: Path = REPO, jobs: int = 2) -> Result:
    """Rewrite the blocks under ``root``; ``rewritten`` lists those that changed."""
    names = list(names) if names is not None else None
    result = Result(problems=consistency(root))
    present = sorted({n for _, n, _ in blocks(root) if names is None or n in names})
    gen = generate(present, jobs)
    result.skipped, result.errors = gen.skipped, gen.errors
    for page in pages(root):
        text = page.read_text()
        new, done = [], 0
        for block in parse_page(text)[0]:
            fresh = gen.fresh.get(block.name)
            if fresh is None:
                continue
            if block.body(text) != fresh and block.name not in result.rewritten:
                result.rewritten.append(block.name)
            new += [text[done:block.start], fresh]
            done = block.end
        new.append(text[done:])
        if "".join(new) != text:
            page.write_text("".join(new))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 listing the samples that differ from the code")
    ap.add_argument("--only", action="append", metavar="NAME", help="just this example")
    ap.add_argument("--list", action="store_true", help="list the examples and where they are")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="examples run at once (2)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.only or () if n not in EXAMPLES]
    if unknown:
        ap.error(f"no such example: {', '.join(unknown)}")
    if args.list:
        where: dict[str, list[str]] = {}
        for page, name, _ in blocks():
            where.setdefault(name, []).append(str(page.relative_to(REPO)))
        for name, ex in EXAMPLES.items():
            print(f"{name:22} {', '.join(where.get(name, ['(nowhere)']))}"
                  f"{'  [root]' if ex.root else ''}")
        return 0
    if args.check:
        res = check(args.only, jobs=args.jobs)
        if res.report():
            print(res.report())
        print("samples match the code" if res.ok else "samples check FAILED")
        return 0 if res.ok else 1
    res = write(args.only, jobs=args.jobs)
    if res.report():
        print(res.report(), file=sys.stderr)
    print(f"{len(res.rewritten)} sample(s) rewritten"
          f"{': ' + ', '.join(res.rewritten) if res.rewritten else ''}")
    return 0 if not (res.errors or res.problems) else 1


if __name__ == "__main__":
    sys.exit(main())
