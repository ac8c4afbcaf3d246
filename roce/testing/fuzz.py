"""Fuzz harnesses: the decoder, the emulated responder and (over a raw socket) a device under
test.  All are seeded and reproducible; ``roce fuzz`` (``fuzz_cli``) is their command line.

Decoder (``DecoderFuzzer``): frames are valid ones from a pool crafted from the opcode table,
structure-aware mutants of them (``roce.testing.mutate``) and random bytes, cut into chunks of
``CHUNK`` frames; chunk ``i`` draws from ``random.Random(f"{seed}:{i}")``, so a run is the same
whatever the number of worker processes.  Every frame goes through ``roce.parse`` (only
``DecodeError``/``NotRoCE`` may come out; a parsed frame must rebuild to the same bytes) and
every fast-path function is compared with its reference twin: ``walk``, ``icrc``,
``decode_headers``, and per chunk ``scan`` and the flow analysis (``roce stats``' engine
against ``roce.dissect.flows``).  Every ``DECODE_EVERY`` chunks the chunk is
written to a pcap and decoded by ``roce decode`` in one of its output modes (exit 0, no
exception).

Responder (``ResponderFuzzer``): a device under test (DUT) with RC, UC and UD queue pairs in
every state, next to a real emulated peer whose valid traffic runs over a simulated fabric.
Frames are injected into the DUT between fabric events; the invariants are listed in
``ResponderFuzzer``'s docstring.

Wire (``WireFuzzer``): mutated RC requests to a real device under test over an AF_PACKET
socket, paced, with liveness probes; everything sent and received can go to a pcap.

Verbs programs (``run_program``): the plain-data programs of
``roce.testing.strategies.verbs_programs`` executed between two emulated hosts, with the
exactly-once and memory invariants checked (the property tests use it).

Failures are ``Failure`` records; ``save_failure`` writes each to a corpus directory as a
pcap plus a one-line reason file (``harness/check key=value ...: detail``), and
``replay_all`` runs saved failures again (a responder failure by re-running its seed to its
step).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import tempfile
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import fast, icrc, locate
from ..errors import DecodeError, InputError, NotRoCE
from ..headers import ENCODERS, LAYOUTS, SIZE_OF
from ..locate import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
    OK,
    ROCE_PORT,
)
from ..opcodes import OPCODES, Transport
from ..packet import Packet, craft, decode_headers_reference, parse
from ..pcapio import Frame, PcapWriter, open_capture
from .mutate import Mutator, random_frame

CHUNK = 2048  # frames per decoder chunk: the unit of seeding, scanning and parallel work
DECODE_EVERY = 16  # every this many chunks, one goes through `roce decode`
MAX_FAILURES_PER_CHECK = 25  # failures kept (and saved) per check name; the rest are counted

# -- results ------------------------------------------------------------------------------------


@dataclass
class Failure:
    """One broken invariant and the input that broke it."""

    harness: str  # "decoder", "responder", "wire"
    check: str  # which invariant: "walk-twin", "parse-raised", "write-outside-grant" ...
    detail: str  # one line saying what was seen against what was expected
    frames: list[bytes]  # the input (the last frames sent, for the responder and wire)
    linktype: int = LINKTYPE_ETHERNET
    udp_port: int = ROCE_PORT
    context: dict[str, Any] = field(default_factory=dict)  # seed, step: how to get here again

    def digest(self) -> str:
        h = hashlib.sha1(self.check.encode())
        for f in self.frames:
            h.update(len(f).to_bytes(4, "big") + f)
        return h.hexdigest()[:12]

    def reason(self) -> str:
        """The one-line reason file: ``harness/check key=value ...: detail``."""
        keys = {"linktype": self.linktype, "udp_port": self.udp_port, **self.context}
        detail = " ".join(self.detail.split())
        return f"{self.harness}/{self.check} " + " ".join(
            f"{k}={v}" for k, v in keys.items()) + f": {detail}"


@dataclass
class Summary:
    """What a run did and found; ``lines()`` is deterministic for a seed and a count."""

    harness: str
    seed: int
    inputs: int = 0
    counts: Counter = field(default_factory=Counter)  # category -> count
    failed: Counter = field(default_factory=Counter)  # check -> count
    failures: list[Failure] = field(default_factory=list)  # the first ones per check
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)

    def add_failure(self, f: Failure) -> None:
        self.failed[f.check] += 1
        if self.failed[f.check] <= MAX_FAILURES_PER_CHECK:
            self.failures.append(f)

    def merge(self, other: Summary) -> None:
        self.inputs += other.inputs
        self.counts.update(other.counts)
        for f in other.failures:
            if self.failed[f.check] < MAX_FAILURES_PER_CHECK:
                self.failures.append(f)
            self.failed[f.check] += 1
        # failures the other side counted but did not keep
        for check, n in other.failed.items():
            kept = sum(1 for f in other.failures if f.check == check)
            self.failed[check] += n - kept

    @property
    def ok(self) -> bool:
        return not self.failed

    def lines(self) -> list[str]:
        out = [f"roce fuzz {self.harness}: seed {self.seed}, {self.inputs} inputs, "
               f"{sum(self.failed.values())} failures"]
        for key in sorted(self.counts):
            out.append(f"  {key}: {self.counts[key]}")
        for check in sorted(self.failed):
            out.append(f"  FAILED {check}: {self.failed[check]}")
        for f in self.failures[:10]:
            out.append(f"    {f.check}: {f.detail[:200]}")
        out.extend(f"  note: {n}" for n in self.notes)
        out.append("result: " + ("OK" if self.ok else "FAILED"))
        return out


# -- corpus -------------------------------------------------------------------------------------


def save_failure(directory: str | os.PathLike, f: Failure) -> Path:
    """Write ``f`` as ``<harness>-<check>-<digest>.pcap`` and a ``.txt`` reason line."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"{f.harness}-{f.check}-{f.digest()}"
    with PcapWriter(str(stem) + ".pcap", linktype=f.linktype) as w:
        for i, frame in enumerate(f.frames):
            w.write(frame, ts_ns=i * 1000)
    Path(str(stem) + ".txt").write_text(f.reason() + "\n")
    return Path(str(stem) + ".pcap")


@dataclass
class Saved:
    """A failure read back from a corpus directory."""

    path: Path  # the .pcap
    harness: str
    check: str
    keys: dict[str, str]
    detail: str
    frames: list[bytes]
    linktype: int


def load_corpus(directory: str | os.PathLike) -> list[Saved]:
    out = []
    for txt in sorted(Path(directory).glob("*.txt")):
        line = txt.read_text().strip().splitlines()[0] if txt.read_text().strip() else ""
        head, _, detail = line.partition(": ")
        words = head.split()
        if not words or "/" not in words[0]:
            continue
        harness, _, check = words[0].partition("/")
        keys = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        pcap = txt.with_suffix(".pcap")
        frames: list[bytes] = []
        linktype = int(keys.get("linktype", LINKTYPE_ETHERNET))
        if pcap.exists():
            with open_capture(str(pcap)) as cap:
                frames = [fr.data for fr in cap]
        out.append(Saved(pcap, harness, check, keys, detail, frames, linktype))
    return out


# -- link types ---------------------------------------------------------------------------------


def to_linktype(eth_frame: bytes, linktype: int) -> bytes:
    """Re-wrap an Ethernet frame for another link type (raw IP, Linux SLL, SLL2)."""
    if linktype == LINKTYPE_ETHERNET or len(eth_frame) < SIZE_OF["eth"]:
        return eth_frame
    etype = int.from_bytes(eth_frame[12:14], "big")
    rest = eth_frame[SIZE_OF["eth"]:]
    if linktype == LINKTYPE_RAW:
        return rest[SIZE_OF["vlan"]:] if etype == 0x8100 else rest
    if linktype == LINKTYPE_LINUX_SLL:
        return ENCODERS["sll"]({"pkttype": 0, "hatype": 1, "halen": 6, "src": 0x0200000001,
                                "etype": etype}) + rest
    if linktype == LINKTYPE_LINUX_SLL2:
        return ENCODERS["sll2"]({"etype": etype, "reserved": 0, "ifindex": 2, "hatype": 1,
                                 "pkttype": 0, "halen": 6, "src": 0x0200000001}) + rest
    return eth_frame


# -- the decoder harness ------------------------------------------------------------------------


def seed_pool(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """Valid frames of every opcode in IPv4, IPv6 and RoCEv1, some with a VLAN tag, IPv4
    options or an Ethernet trailer; field values from their layouts."""
    pool = []
    for code, op in OPCODES.items():
        for i in range(per_opcode):
            kw: dict[str, Any] = [{}, {"ipv6": True}, {"roce_version": 1}][i % 3]
            if rng.random() < 0.25:
                kw["vlan"] = rng.randrange(4096)
            values: dict[str, Any] = {}
            for h in ("bth",) + op.headers:
                for f in LAYOUTS[h].fields:
                    if f.name.startswith("reserved") or h == "cnp" or f.name in (
                            "opcode", "padcnt", "tver"):
                        continue
                    values[f"{h}.{f.name}"] = (rng.random() < 0.5 if f.kind == "bool" else
                                               rng.choice((0, 1, f.mask, rng.getrandbits(
                                                   f.bits))))
            if op.payload_len is not None:
                payload = rng.randbytes(op.payload_len)
            elif op.payload:
                payload = rng.randbytes(rng.choice((0, 1, 2, 3, 4, 5, 8, 31, 64, 256,
                                                    rng.randint(0, 1100))))
            else:
                payload = b""
            p = craft(code, payload, **kw, **values)
            if "ip" in p.headers and rng.random() < 0.15:
                p.headers["ip"]["options"] = b"\x01\x01\x01\x00" * rng.randint(1, 3)
            frame = p.to_bytes()
            if rng.random() < 0.1:
                frame += bytes(rng.choice((2, 4, 6)))  # Ethernet trailer after the ICRC
            pool.append(frame)
    return pool


_DECODE_MODES: tuple[tuple[str, ...], ...] = (
    (), ("-V",), ("-T", "json"), ("-T", "fields", "-e", "bth.psn", "-e", "reth.va", "-e",
                                   "aeth.syndrome", "-e", "frame.len"),
    ("-x",), ("-Y", "bth.opcode != 4"), ("-T", "csv", "-e", "bth.opcode", "-e", "icrc"),
)


class DecoderFuzzer:
    """Frames through the parser, the fast path and its twins (see the module docstring)."""

    name = "decoder"

    def __init__(self, seed: int, decode_every: int = DECODE_EVERY,
                 twins: bool = True) -> None:
        self.seed = seed
        self.decode_every = decode_every
        self.ext = fast._ext if twins else None
        self.pool = seed_pool(random.Random(f"pool:{seed}"))
        self._tmp: str | None = None

    # -- frames ---------------------------------------------------------------------------

    def chunk_frames(self, index: int, n: int) -> tuple[list[bytes], list[str], int, int]:
        """Frames of chunk ``index``: (frames, how each was made, linktype, udp port)."""
        rng = random.Random(f"{self.seed}:{index}")
        linktype = LINKTYPE_ETHERNET
        if rng.random() < 0.15:
            linktype = rng.choice((LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2))
        port = ROCE_PORT if rng.random() < 0.95 else rng.choice((4792, 1, 65535))
        mut = Mutator(rng)
        pool = self.pool
        frames, kinds = [], []
        for _ in range(n):
            r = rng.random()
            base = rng.choice(pool)
            if r < 0.08:
                frame, kind = base, "valid"
            elif r < 0.94:
                m = mut.mutate(to_linktype(base, linktype), linktype, port)
                frame, kind = m.frame, "mutant"
                if m.fixed:
                    kind = "mutant-fixed"
                frames.append(frame)
                kinds.append(kind + ":" + m.ops[0])
                continue
            else:
                frame, kind = random_frame(rng), "random"
            frames.append(to_linktype(frame, linktype) if kind == "valid" else frame)
            kinds.append(kind)
        return frames, kinds, linktype, port

    # -- checks ---------------------------------------------------------------------------

    def check_frame(self, frame: bytes, linktype: int = LINKTYPE_ETHERNET,
                    port: int = ROCE_PORT) -> tuple[int, list[tuple[str, str]]]:
        """(walk status, [(check, detail)]) for one frame."""
        bad: list[tuple[str, str]] = []
        ref = locate.walk(frame, linktype, port)
        ext = self.ext
        if ext is not None:
            got = ext.walk(frame, linktype, port)
            if got != ref:
                diff = [f"{k}={a}/{b}" for k, a, b in zip(ref._fields, got, ref) if a != b]
                bad.append(("walk-twin", "fast/reference differ: " + " ".join(diff)))
        try:
            pkt = parse(frame, linktype, port)
        except (DecodeError, NotRoCE):
            pkt = None
        except Exception as exc:  # noqa: BLE001 - any other exception is the finding
            bad.append(("parse-raised", _exc_line(exc)))
            pkt = None
        if pkt is not None:
            bad.extend(self._check_packet(pkt, frame))
        try:
            parse(frame, linktype, port, partial=True)
        except (DecodeError, NotRoCE):
            pass
        except Exception as exc:  # noqa: BLE001
            bad.append(("parse-partial-raised", _exc_line(exc)))
        if ext is not None:
            bad.extend(self._check_twins(frame, ref, linktype, port))
        return ref.status, bad

    def _check_packet(self, pkt: Packet, frame: bytes) -> list[tuple[str, str]]:
        bad = []
        try:
            pkt.fields()
            if pkt.to_bytes() != frame:
                bad.append(("roundtrip", "parse(frame).to_bytes() != frame"))
            rebuilt = pkt.copy().to_bytes()
            if rebuilt != frame:
                at = next((i for i, (a, b) in enumerate(zip(rebuilt, frame)) if a != b),
                          min(len(rebuilt), len(frame)))
                bad.append(("rebuild", f"Packet rebuilt from its decoded fields differs at "
                                       f"byte {at} (len {len(rebuilt)} vs {len(frame)})"))
        except Exception as exc:  # noqa: BLE001
            bad.append(("packet-raised", _exc_line(exc)))
        return bad

    def _check_twins(self, frame: bytes, w: locate.Walk, linktype: int,
                     port: int) -> list[tuple[str, str]]:
        bad = []
        ext = self.ext
        assert ext is not None
        if w.status == OK:
            ref = icrc.icrc_at(frame, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
            got = ext.icrc_at(frame, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
            if got != ref:
                bad.append(("icrc-twin", f"icrc_at fast 0x{got:08x} reference 0x{ref:08x}"))
            stored = int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
            checked = ext.icrc(frame, linktype, port)
            if checked != (OK, ref, stored):
                bad.append(("icrc-twin", f"icrc() {checked} != {(OK, ref, stored)}"))
        if w.bth_off >= 0 and w.bth_off + SIZE_OF["bth"] <= len(frame) and \
                w.opcode in OPCODES:
            try:
                got_h = ext.decode_headers(frame, w, linktype)
            except Exception as exc:  # noqa: BLE001
                return bad + [("decode-headers-raised", "fast: " + _exc_line(exc))]
            try:
                want_h = decode_headers_reference(frame, w, linktype)
            except Exception as exc:  # noqa: BLE001
                return bad + [("decode-headers-raised", "reference: " + _exc_line(exc))]
            if got_h != want_h:
                keys = sorted(k for k in set(got_h) | set(want_h)
                              if got_h.get(k) != want_h.get(k))
                detail = "; ".join(f"{k}: fast {_short(got_h.get(k))} reference "
                                   f"{_short(want_h.get(k))}" for k in keys[:2])
                bad.append(("decode-headers-twin", detail))
        return bad

    def check_scan(self, frames: list[bytes], linktype: int,
                   port: int) -> list[tuple[int, str]]:
        """(frame index, detail) for every frame whose scan columns differ from the
        reference's (with the ICRC check on)."""
        if self.ext is None or not frames:
            return []
        got = fast.scan_columns(len(frames))
        want = fast.scan_columns(len(frames))
        self.ext.scan(frames, linktype, port, True, got)
        fast.scan_reference(frames, linktype, port, True, want)
        bad: dict[int, str] = {}
        for name in fast.SCAN_COLUMNS:
            a, b = got[name], want[name]
            if a != b:
                for i in range(len(frames)):
                    if a[i] != b[i] and i not in bad:
                        bad[i] = f"column {name}: fast {a[i]} reference {b[i]}"
        return sorted(bad.items())

    def check_decode_cli(self, frames: list[bytes], linktype: int, port: int,
                         mode: tuple[str, ...]) -> str | None:
        """Run ``roce decode`` on a pcap of ``frames``; None when it exits 0 without an
        exception, else what went wrong."""
        from .. import cli

        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="roce-fuzz-")
        path = os.path.join(self._tmp, f"batch-{os.getpid()}.pcap")
        with PcapWriter(path, linktype=linktype) as w:
            for i, frame in enumerate(frames):
                w.write(frame, ts_ns=1_700_000_000_000_000_000 + i * 1000)
        argv = ["decode", path, "--color", "never", *mode]
        if port != ROCE_PORT:
            argv += ["--udp-port", str(port)]
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # noqa: BLE001
            return f"`roce {' '.join(argv[:1] + list(mode))}` raised {_exc_line(exc)}"
        if rc != 0:
            return f"`roce {' '.join(argv[:1] + list(mode))}` exited {rc}: " \
                   f"{err.getvalue().strip()[:200]}"
        if "Traceback" in err.getvalue():
            return f"`roce {' '.join(argv[:1] + list(mode))}` printed a traceback"
        return None

    def check_flows(self, frames: list[bytes], linktype: int, port: int) -> str | None:
        """The chunk through the compiled flow analysis and its pure-Python reference: None
        when both run and give the same report, else what went wrong."""
        if self.ext is None or not frames:
            return None
        from ..dissect.flows import analyse

        stream = [Frame(f, 1_700_000_000_000_000_000 + i * 1000, len(f), len(f), linktype, 0)
                  for i, f in enumerate(frames)]
        reports = {}
        for engine in ("compiled", "reference"):
            try:
                reports[engine] = analyse(stream, port, engine=engine).to_dict()
            except Exception as exc:  # noqa: BLE001 - any exception is the finding
                return f"{engine} flow analysis raised {_exc_line(exc)}"
        got, want = reports["compiled"], reports["reference"]
        if got != want:
            keys = [k for k in want if got.get(k) != want.get(k)]
            return f"compiled and reference flow analyses differ in {', '.join(keys)}"
        return None

    def _narrow(self, frames: list[bytes], fails: Callable[[list[bytes]], bool]) -> list[bytes]:
        """Halve a failing batch while the failure stays: usually down to a frame or two."""
        while len(frames) > 1:
            half = len(frames) // 2
            for part in (frames[:half], frames[half:]):
                if fails(part):
                    frames = part
                    break
            else:
                break
        return frames

    # -- a chunk --------------------------------------------------------------------------

    def run_chunk(self, index: int, n: int = CHUNK) -> Summary:
        s = Summary(self.name, self.seed)
        frames, kinds, linktype, port = self.chunk_frames(index, n)
        s.inputs = len(frames)
        counts = s.counts
        for i, frame in enumerate(frames):
            status, bad = self.check_frame(frame, linktype, port)
            counts[f"walk status {status:2d}"] += 1
            counts["made " + kinds[i].split(":")[0]] += 1
            for check, detail in bad:
                s.add_failure(Failure(self.name, check, detail, [frame], linktype, port,
                                      {"seed": self.seed, "chunk": index, "index": i,
                                       "made": kinds[i]}))
        for i, detail in self.check_scan(frames, linktype, port):
            s.add_failure(Failure(self.name, "scan-twin", detail, [frames[i]], linktype, port,
                                  {"seed": self.seed, "chunk": index, "index": i,
                                   "made": kinds[i]}))
        problem = self.check_flows(frames, linktype, port)
        if problem is not None:
            culprit = self._narrow(frames, lambda part: self.check_flows(
                part, linktype, port) is not None)
            s.add_failure(Failure(self.name, "flows-twin", problem, culprit, linktype, port,
                                  {"seed": self.seed, "chunk": index}))
        if self.decode_every and index % self.decode_every == 0:
            mode = _DECODE_MODES[(index // self.decode_every) % len(_DECODE_MODES)]
            counts["roce decode runs"] += 1
            problem = self.check_decode_cli(frames, linktype, port, mode)
            if problem is not None:
                culprit = self._narrow(frames, lambda part: self.check_decode_cli(
                    part, linktype, port, mode) is not None)
                s.add_failure(Failure(self.name, "decode-cli", problem, culprit, linktype,
                                      port, {"seed": self.seed, "chunk": index,
                                             "mode": ",".join(mode) or "lines"}))
        return s

    def replay(self, saved: Saved) -> list[str]:
        """Checks that still fail for a saved decoder failure."""
        port = int(saved.keys.get("udp_port", ROCE_PORT))
        still = []
        if saved.check == "decode-cli":
            mode = tuple(m for m in saved.keys.get("mode", "lines").split(",")
                         if m and m != "lines")
            problem = self.check_decode_cli(saved.frames, saved.linktype, port, mode)
            return [f"decode-cli: {problem}"] if problem else []
        if saved.check == "flows-twin":
            problem = self.check_flows(saved.frames, saved.linktype, port)
            return [f"flows-twin: {problem}"] if problem else []
        for frame in saved.frames:
            _, bad = self.check_frame(frame, saved.linktype, port)
            still.extend(f"{c}: {d}" for c, d in bad)
            still.extend(f"scan-twin: {d}" for _, d in self.check_scan([frame],
                                                                       saved.linktype, port))
        return still


def _exc_line(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


# -- running chunked harnesses, in parallel -----------------------------------------------------

_WORKER: Any = None


def _worker_init(factory: Callable[[], Any]) -> None:
    global _WORKER
    _WORKER = factory()


def _worker_chunk(args: tuple[int, int]) -> Summary:
    return _WORKER.run_chunk(*args)


def run_chunks(factory: Callable[[], Any], seed: int, count: int | None,
               time_limit: float | None, jobs: int = 1, chunk: int = CHUNK,
               progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run ``factory().run_chunk(i, n)`` for chunks 0, 1, ... until ``count`` inputs or
    ``time_limit`` seconds, on ``jobs`` processes; merge in chunk order (deterministic)."""
    start = time.monotonic()
    deadline = None if time_limit is None else start + time_limit
    total: Summary | None = None
    plan: Iterator[tuple[int, int]] = _plan(count, chunk)

    def more() -> bool:
        return deadline is None or time.monotonic() < deadline

    def merge(s: Summary) -> None:
        nonlocal total
        if total is None:
            total = s
        else:
            total.merge(s)
        if progress is not None:
            progress(total)

    if jobs <= 1:
        harness = factory()
        for args in plan:
            if not more():
                break
            merge(harness.run_chunk(*args))
    else:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        with ctx.Pool(jobs, _worker_init, (factory,)) as pool:
            pending: deque = deque()
            exhausted = False
            while True:
                while not exhausted and len(pending) < 2 * jobs and more():
                    args = next(plan, None)
                    if args is None:
                        exhausted = True
                        break
                    pending.append(pool.apply_async(_worker_chunk, (args,)))
                if not pending:
                    break
                merge(pending.popleft().get())
    if total is None:
        total = factory_summary(factory, seed)
    total.elapsed = time.monotonic() - start
    return total


def factory_summary(factory: Callable[[], Any], seed: int) -> Summary:
    return Summary(getattr(factory, "harness_name", "fuzz"), seed)


def _plan(count: int | None, chunk: int) -> Iterator[tuple[int, int]]:
    i = 0
    left = count
    while left is None or left > 0:
        n = chunk if left is None else min(chunk, left)
        yield i, n
        i += 1
        if left is not None:
            left -= n


class DecoderFactory:
    """Builds a DecoderFuzzer in each worker process (picklable)."""

    harness_name = "decoder"

    def __init__(self, seed: int, decode_every: int = DECODE_EVERY) -> None:
        self.seed = seed
        self.decode_every = decode_every

    def __call__(self) -> DecoderFuzzer:
        return DecoderFuzzer(self.seed, self.decode_every)


def fuzz_decoder(seed: int, count: int | None = 10_000, time_limit: float | None = None,
                 jobs: int = 1, decode_every: int = DECODE_EVERY,
                 progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run the decoder harness; see ``DecoderFuzzer``."""
    s = run_chunks(DecoderFactory(seed, decode_every), seed, count, time_limit, jobs,
                   progress=progress)
    if fast._ext is None:
        s.notes.append("compiled fast path missing: twin checks skipped")
    return s


# -- the responder harness ----------------------------------------------------------------------

RESPONDER_CHECKS: tuple[str, ...] = ("exception", "write-outside-grant", "answer", "transition",
                                     "valid-traffic", "emitted-malformed")
SLOT_STATES = ("RESET", "INIT", "RTR", "RTS", "ERR")
TARGET_MTU = 1024
RECV_WQES = (1024, 300)  # each arm posts two receive WQEs of these sizes in one half...
RECV_SLOT = 2 * sum(RECV_WQES)  # ...of the target QP's receive area, the halves by turns
PHANTOM_MAC, PHANTOM_IP, PHANTOM_QPN = "02:00:00:00:00:fe", "10.0.0.254", 0xABCDE
QKEY = 0x11111111
LIVE_DEPTH = 4  # valid work requests the peer keeps outstanding per QP
VALID_DEADLINE_NS = 2_000_000_000  # a valid RC WR not complete after this much virtual time


@dataclass(eq=False)
class _MRInfo:
    """An MR as the harness registered it: what the grant oracle trusts (not the emulator's
    own key checks, which are under test)."""

    name: str
    mr: Any  # roce.emu.verbs.MR
    pd: Any
    access: int
    shadow: bytes = b""


@dataclass(eq=False)
class _Slot:
    """A target QP on the DUT that the harness keeps in one state."""

    name: str  # "RC/RTS"
    qp: Any
    qp_type: Any
    state: str
    cq: Any
    region: int  # offset of its receive buffers in the recv MR
    access: int
    epsn: int = 0  # the harness's model of the responder's expected PSN
    clean: bool = False  # only requests with known outcomes since the last arm
    nak_sent: bool = False
    arms: int = 0  # times armed: the receive buffers alternate halves, so a write into a
    # WQE from before the last RESET lands outside what is posted now
    # wr_id -> (mr index, offset, length) of the receive WQEs posted and not yet completed
    posted: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    write_ctx: list[tuple[int, int, int]] = field(default_factory=list)  # (mr index, off, n)


@dataclass
class _Expect:
    """What a semantic case must produce: answers as tuples, and the QP state after."""

    case: str
    answers: list[tuple]  # ("ack", psn) ("nak", code, psn) ("rnr", psn) ("read", psn, data)
    # ("atomic_ack", psn, orig) ; an empty list: no answer at all
    to_error: bool = False
    optional: bool = False  # the answers may also be absent (a repeated PSN-sequence NAK)
    writes: tuple[int, int, bytes] | None = None  # (mr index, offset, data) that must land


class ResponderFuzzer:
    """Frames injected into an emulated device under test (DUT), next to valid traffic.

    The DUT holds RC, UC and UD queue pairs in each of RESET, INIT, RTR, RTS and ERR (kept
    there: re-armed through RESET when something moves them), an RC QP without remote
    access rights, and one live QP of each type connected to a real emulated peer that
    keeps SEND / WRITE / READ / atomic traffic running over the simulated fabric.

    Each step injects one frame: a *case* with a known expected outcome (a valid request,
    bad rkey, out-of-bounds, misaligned atomic, PSN ahead, duplicate, missing first packet,
    no receive WQE, oversize...), a structure-aware mutant (ICRC fixed up or not) of a
    request aimed at a target QP, random bytes, or one of the harmless kinds (duplicate,
    PSN ahead, bad ICRC, malformed) aimed at a live QP.  Checks (``RESPONDER_CHECKS``):

    - ``exception``: nothing raises out of ``Device.receive`` or the fabric;
    - ``write-outside-grant``: a shadow copy of every DUT MR; bytes may change only inside
      ranges a request legitimately grants (a RETH/AtomicETH range lying wholly inside an
      MR whose rkey, PD and access allow it, on a QP in a receiving state with the right;
      the receive buffers posted to the QP for a SEND);
    - ``answer``: for cases, exactly the frames rxe's error class says (ACK, NAK code and
      PSN, RNR NAK, READ response data, atomic original value) and the state after (ERR
      or unchanged); for any frame, UC/UD QPs and QPs outside RTR/RTS never answer;
    - ``transition``: QP state changes are in ``roce.emu.states.TRANSITIONS`` or to ERR,
      and a received frame moves only an RC QP, only from a receiving state, only to ERR;
    - ``valid-traffic``: every valid work request of the peer completes successfully;
    - ``emitted-malformed``: every frame the DUT sends walks and carries a good ICRC.
    """

    name = "responder"

    def __init__(self, seed: int, skip: Iterable[str] = ()) -> None:
        self.seed = seed
        self.skip = frozenset(skip)
        unknown = self.skip - set(RESPONDER_CHECKS)
        if unknown:
            raise ValueError(f"unknown checks {sorted(unknown)}; known: "
                             f"{', '.join(RESPONDER_CHECKS)}")
        self.rng = random.Random(f"responder:{seed}")
        self.mutator = Mutator(self.rng)
        self.summary = Summary(self.name, seed)
        self.step_no = 0
        self.recent: deque[bytes] = deque(maxlen=8)  # frames delivered lately, for reports
        self.grants: list[tuple[int, int, int]] = []  # (mr index, offset, length)
        self.step_failures: list[tuple[str, str]] = []  # every failure of the current step
        # per live QP: RETH ranges of recent WRITE first packets (Middle/Last continue them)
        self._live_ctx: dict[int, list[tuple[int, int, int]]] = {}
        self._wr = 0
        self._build()

    # -- the world ------------------------------------------------------------------------

    def _build(self) -> None:
        from ..emu import (
            CQ,
            MR,
            PD,
            QP,
            Access,
            Fabric,
            QPAttr,
            QPInitAttr,
            QPType,
            connect,
        )
        from ..emu.constants import QPState

        self.QPState = QPState
        A = Access
        full = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE
                   | A.IBV_ACCESS_REMOTE_READ | A.IBV_ACCESS_REMOTE_ATOMIC)
        self.full = full
        rng = self.rng
        fab = self.fab = Fabric(seed=self.seed)
        peer = self.peer = fab.add_host("peer", "10.0.0.1")
        dut = self.dut = fab.add_host("dut", "10.0.0.2")
        fab.connect(peer, dut)
        fab.record(self)
        self.dev = dut.device
        self.pd, self.pd_other = PD(dut), PD(dut)
        self.mrs: list[_MRInfo] = []

        def reg(name: str, pd: Any, size: int, access: int) -> _MRInfo:
            mr = MR(pd, size, access, key=rng.randrange(256))
            mr.write(rng.randbytes(size))
            info = _MRInfo(name, mr, pd, access, bytes(mr.buf))
            self.mrs.append(info)
            return info

        self.mr_rw = reg("rw", self.pd, 4096, full)
        self.mr_ro = reg("ro", self.pd, 4096,
                         int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_READ))
        self.mr_other = reg("other-pd", self.pd_other, 4096, full)
        self.mr_live = reg("live", self.pd, 4096 + 8 * 1024, full)
        self.mr_recv = reg("recv", self.pd, RECV_SLOT * 24, int(A.IBV_ACCESS_LOCAL_WRITE))
        # the peer: a requester with its own buffers
        ppd = PD(peer)
        self.p_src = MR(ppd, 8192, full)
        self.p_src.write(rng.randbytes(8192))
        self.p_dst = MR(ppd, 8192, full)
        self.p_cq = CQ(peer)
        init = QPInitAttr
        self.live: dict[str, tuple[Any, Any, Any]] = {}  # type -> (peer QP, DUT QP, DUT CQ)
        for qt in (QPType.IBV_QPT_RC, QPType.IBV_QPT_UC, QPType.IBV_QPT_UD):
            cq = CQ(dut)
            pq = QP(ppd, init(qp_type=qt, send_cq=self.p_cq, recv_cq=self.p_cq))
            dq = QP(self.pd, init(qp_type=qt, send_cq=cq, recv_cq=cq))
            if qt == QPType.IBV_QPT_UD:
                for q in (pq, dq):
                    q.to_init(QPAttr(qkey=QKEY))
                    q.to_rtr(QPAttr())
                    q.to_rts(QPAttr(sq_psn=rng.randrange(1 << 24)))
            else:
                connect(pq, dq, path_mtu=TARGET_MTU, psn_a=rng.randrange(1 << 24),
                        psn_b=rng.randrange(1 << 24), timeout=8, retry_cnt=7, rnr_retry=7,
                        min_rnr_timer=1, max_rd_atomic=4)
            self.live[qt.name[-2:]] = (pq, dq, cq)
        self.live_posted: dict[int, dict[int, tuple[int, int, int]]] = {
            dq.qp_num: {} for _, dq, _ in self.live.values()}
        self.outstanding: dict[int, tuple[int, str]] = {}  # peer wr_id -> (posted at, what)
        self.live_recv_next = 0
        # target QPs
        self.slots: list[_Slot] = []
        region = 0
        for qt in (QPType.IBV_QPT_RC, QPType.IBV_QPT_UC, QPType.IBV_QPT_UD):
            for state in SLOT_STATES:
                cq = CQ(dut)
                qp = QP(self.pd, init(qp_type=qt, send_cq=cq, recv_cq=cq))
                self.slots.append(_Slot(f"{qt.name[-2:]}/{state}", qp, qt, state, cq, region,
                                        full))
                region += RECV_SLOT
        cq = CQ(dut)
        qp = QP(self.pd, init(qp_type=QPType.IBV_QPT_RC, send_cq=cq, recv_cq=cq))
        self.slots.append(_Slot("RC/RTS-noaccess", qp, QPType.IBV_QPT_RC, "RTS", cq, region,
                                int(A.IBV_ACCESS_LOCAL_WRITE)))
        self.by_qpn = {s.qp.qp_num: s for s in self.slots}
        self.live_qpns = {dq.qp_num for _, dq, _ in self.live.values()}
        for s in self.slots:
            self._arm(s)
        self._post_live_recvs()
        self._snapshot_states()

    # -- target QPs -------------------------------------------------------------------------

    def _arm(self, s: _Slot) -> None:
        """Bring a target QP to its state through RESET, with a fresh ePSN and two receive
        WQEs; from here on its responder's state is known to the harness."""
        from ..emu import AHAttr, QPAttr, QPAttrMask, QPType, RecvWR

        qp = s.qp
        S = self.QPState
        if qp.qp_state != S.IBV_QPS_RESET:
            qp.modify(QPAttr(qp_state=S.IBV_QPS_RESET), QPAttrMask.IBV_QP_STATE)
        s.posted.clear()
        s.write_ctx.clear()
        s.epsn = self.rng.randrange(1 << 24)
        s.clean = True
        s.nak_sent = False
        if s.state == "RESET":
            self._drain_cq(s)
            return
        ud = s.qp_type == QPType.IBV_QPT_UD
        qp.to_init(QPAttr(qkey=QKEY) if ud else QPAttr(qp_access_flags=s.access))
        if s.state == "ERR":
            qp.modify(QPAttr(qp_state=S.IBV_QPS_ERR), QPAttrMask.IBV_QP_STATE)
            self._drain_cq(s)
            return
        s.arms += 1
        off = s.region + (s.arms % 2) * (RECV_SLOT // 2)
        for size in RECV_WQES:
            self._wr += 1
            qp.post_recv(RecvWR(wr_id=self._wr, sg_list=[self.mr_recv.mr.sge(off, size)]))
            s.posted[self._wr] = (self._index(self.mr_recv), off, size)
            off += size
        if s.state == "INIT":
            return
        if ud:
            qp.to_rtr(QPAttr())
        else:
            qp.to_rtr(QPAttr(path_mtu=TARGET_MTU, dest_qp_num=PHANTOM_QPN, rq_psn=s.epsn,
                             max_dest_rd_atomic=4, min_rnr_timer=1,
                             ah_attr=AHAttr(dmac=PHANTOM_MAC, dip=PHANTOM_IP)))
        if s.state == "RTR":
            return
        if ud:
            qp.to_rts(QPAttr(sq_psn=0))
        else:
            qp.to_rts(QPAttr(sq_psn=0, timeout=8, retry_cnt=1, rnr_retry=1, max_rd_atomic=4))

    def _drain_cq(self, s: _Slot) -> None:
        for wc in s.cq.poll(1 << 20):
            s.posted.pop(wc.wr_id, None)

    def _snapshot_states(self) -> None:
        self.states = {qpn: qp.state for qpn, qp in self.dev.qps.items()}

    # -- granted ranges ---------------------------------------------------------------------

    def write(self, frame: bytes, ts_ns: int | None = None) -> None:
        """The fabric's recorder hook: every delivered frame passes here first."""
        self.recent.append(frame)
        if frame[0:6] == _mac_bytes(self.dut.mac):
            self._grant(frame)

    def _mr_range(self, qp: Any, rkey: int, va: int, length: int,
                  need: int) -> tuple[int, int, int] | None:
        """The (mr index, offset, length) a request may touch, by the harness's own table."""
        if length <= 0 or not int(qp.core.attr.qp_access_flags) & need:
            return None
        for i, m in enumerate(self.mrs):
            mr = m.mr
            if mr.rkey == rkey and m.pd is qp.pd and m.access & need and \
                    mr.addr <= va and va + length <= mr.addr + mr.length:
                return (i, va - mr.addr, length)
        return None

    def _grant(self, frame: bytes) -> None:
        """Add what this frame may legitimately write to the DUT's memory."""
        from ..emu.constants import Access
        from ..emu.states import CAN_RECEIVE

        w = fast.walk(frame)
        if w.status != OK or fast.icrc_of(frame, w) != int.from_bytes(
                frame[w.icrc_off:w.l4_end], "big"):
            return
        qpn = int.from_bytes(frame[w.bth_off + 5:w.bth_off + 8], "big")
        core = self.dev.qps.get(qpn)
        if core is None or core.state not in CAN_RECEIVE:
            return
        op = OPCODES[w.opcode]
        if op.transport is not core.transport:
            return
        qp = self._verbs_qp(qpn)
        if qp is None:
            return
        slot = self.by_qpn.get(qpn)
        posted = slot.posted if slot is not None else self.live_posted.get(qpn, {})
        operation = op.operation.value
        if operation == "send":
            self.grants.extend(posted.values())
            return
        ctx = slot.write_ctx if slot is not None else self._live_ctx.setdefault(qpn, [])
        pos = w.bth_off + SIZE_OF["bth"]
        ext = {}
        for h in op.headers:
            ext[h] = (pos, LAYOUTS[h])
            pos += SIZE_OF[h]
        if operation == "write":
            if "reth" in ext:
                r = _fields(frame, *ext["reth"])
                g = self._mr_range(qp, r["r_key"], r["va"], r["dmalen"],
                                   int(Access.IBV_ACCESS_REMOTE_WRITE))
                if op.position.value == "only" and w.pad_off - w.payload_off != r["dmalen"]:
                    g = None  # rxe check_length: an Only packet carries its whole DMA length
                if g is not None and g not in ctx:
                    ctx.append(g)
                    del ctx[:-8]
            self.grants.extend(ctx)
        elif operation == "atomic":
            a = _fields(frame, *ext["atomiceth"])
            if a["va"] % 8 == 0:
                g = self._mr_range(qp, a["r_key"], a["va"], 8,
                                   int(Access.IBV_ACCESS_REMOTE_ATOMIC))
                if g is not None:
                    self.grants.append(g)

    def _index(self, m: _MRInfo) -> int:
        return self.mrs.index(m)

    def _verbs_qp(self, qpn: int) -> Any:
        slot = self.by_qpn.get(qpn)
        if slot is not None:
            return slot.qp
        for _, dq, _ in self.live.values():
            if dq.qp_num == qpn:
                return dq
        return None

    def _check_memory(self, frames: list[bytes], context: dict[str, Any]) -> None:
        for i, m in enumerate(self.mrs):
            cur = bytes(m.mr.buf)
            if cur == m.shadow:
                continue
            allowed = [(off, off + n) for j, off, n in self.grants if j == i]
            for lo, hi in _changed(m.shadow, cur):
                outside = [(a, b) for a, b in _subtract((lo, hi), allowed)]
                if outside:
                    a, b = outside[0]
                    self._fail("write-outside-grant",
                               f"MR {m.name} bytes {a}..{b - 1} changed; granted "
                               f"{_ranges(allowed)}", frames, context)
                    break
            m.shadow = cur
        self.grants.clear()

    # -- states -------------------------------------------------------------------------------

    def _check_states(self, frames: list[bytes], context: dict[str, Any],
                      by_frame: bool) -> None:
        from ..emu.constants import QPType
        from ..emu.states import CAN_RECEIVE, TRANSITIONS

        S = self.QPState
        for qpn, qp in self.dev.qps.items():
            old, new = self.states.get(qpn, qp.state), qp.state
            if old == new:
                continue
            if (old, new) not in TRANSITIONS and new != S.IBV_QPS_ERR:
                self._fail("transition", f"QP 0x{qpn:x} went {old.name} -> {new.name}: not in "
                           "the transition table", frames, context)
            elif by_frame and not (qp.qp_type == QPType.IBV_QPT_RC and new == S.IBV_QPS_ERR
                                   and old in CAN_RECEIVE):
                self._fail("transition", f"a received frame moved {qp.qp_type.name} QP "
                           f"0x{qpn:x} {old.name} -> {new.name}", frames, context)
        self._snapshot_states()

    # -- failures -----------------------------------------------------------------------------

    def _fail(self, check: str, detail: str, frames: list[bytes],
              context: dict[str, Any]) -> None:
        if check in self.skip:
            return
        self.step_failures.append((check, detail))
        ctx = {"seed": self.seed, "step": self.step_no, **context}
        self.summary.add_failure(Failure(self.name, check, detail, list(frames), context=ctx))

    # -- valid traffic --------------------------------------------------------------------------

    def _post_live_recvs(self) -> None:
        from ..emu import RecvWR

        for key in ("RC", "UC", "UD"):
            _, dq, cq = self.live[key]
            posted = self.live_posted[dq.qp_num]
            for wc in cq.poll(1 << 20):
                posted.pop(wc.wr_id, None)
            while len(posted) < 8 and dq.qp_state in (self.QPState.IBV_QPS_RTS,
                                                      self.QPState.IBV_QPS_RTR):
                self._wr += 1
                off = 4096 + (self.live_recv_next % 8) * 1024
                self.live_recv_next += 1
                dq.post_recv(RecvWR(wr_id=self._wr, sg_list=[self.mr_live.mr.sge(off, 1024)]))
                posted[self._wr] = (self._index(self.mr_live), off, 1024)

    def _post_valid(self) -> None:
        from ..emu import AH, AHAttr, SendWR, WROpcode

        rng = self.rng
        now = self.fab.now
        pending = Counter(what.split()[0] for _, what in self.outstanding.values())
        for key in ("RC", "UC", "UD"):
            pq, dq, _ = self.live[key]
            if pending[key] >= LIVE_DEPTH or rng.random() < 0.5:
                continue
            if pq.qp_state != self.QPState.IBV_QPS_RTS:
                continue
            self._wr += 1
            n = rng.randint(1, 1000 if key != "UD" else TARGET_MTU - 40 - 24)
            sge = self.p_src.sge(rng.randrange(8192 - n), n)
            kinds = ("send", "write", "read", "faa") if key == "RC" else (
                ("send", "write") if key == "UC" else ("send",))
            kind = rng.choice(kinds)
            live = self.mr_live.mr
            if kind == "send":
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_SEND, sg_list=[sge])
                if key == "UD":
                    wr.ah = AH(pq.pd, AHAttr(dip=self.dut.ip))
                    wr.remote_qpn, wr.remote_qkey = dq.qp_num, QKEY
            elif kind == "write":
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_RDMA_WRITE, sg_list=[sge],
                            remote_addr=live.addr + rng.randrange(4096 - n), rkey=live.rkey)
            elif kind == "read":
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_RDMA_READ,
                            sg_list=[self.p_dst.sge(0, n)],
                            remote_addr=live.addr + rng.randrange(4096 - n), rkey=live.rkey)
            else:
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                            sg_list=[self.p_dst.sge(0, 8)],
                            remote_addr=live.addr + rng.randrange(4096 // 8) * 8,
                            rkey=live.rkey, compare_add=rng.getrandbits(64))
            pq.post_send(wr)
            self.outstanding[self._wr] = (now, f"{key} {kind} {n}")

    def _poll_valid(self, final: bool = False) -> None:
        from ..emu import WCStatus

        for wc in self.p_cq.poll(1 << 20):
            what = self.outstanding.pop(wc.wr_id, None)
            if what is None:
                continue  # a receive completion on the peer (none are posted)
            self.summary.counts["valid work completed"] += 1
            if wc.status != WCStatus.IBV_WC_SUCCESS:
                self._fail("valid-traffic", f"valid {what[1]} completed with "
                           f"{WCStatus(wc.status).name}", list(self.recent), {})
        now = self.fab.now
        for wr_id, (t, what) in list(self.outstanding.items()):
            if final or now - t > VALID_DEADLINE_NS:
                self._fail("valid-traffic", f"valid {what} posted at {t} ns never completed "
                           f"(now {now} ns)", list(self.recent), {})
                del self.outstanding[wr_id]

    # -- injection ------------------------------------------------------------------------------

    def _inject(self, frame: bytes, context: dict[str, Any]) -> list[bytes]:
        """Deliver ``frame`` to the DUT now; return what it answered (the fabric sends it)."""
        dev = self.dev
        self.recent.append(frame)
        self._grant(frame)
        start = len(dev.tx)
        try:
            dev.receive(self.fab.now, frame)
        except Exception as exc:  # noqa: BLE001 - the finding
            self._fail("exception", "Device.receive raised " + _exc_line(exc), [frame],
                       context)
        answers = dev.tx[start:]
        if answers:
            dev.kick()
        return answers

    def step(self) -> None:
        self.step_no += 1
        self.step_failures = []
        rng = self.rng
        self._post_live_recvs()
        self._post_valid()
        before = self.fab.now
        try:
            self.fab.run(until=before + rng.choice((500, 2_000, 10_000, 50_000)))
        except Exception as exc:  # noqa: BLE001
            self._fail("exception", "the fabric raised " + _exc_line(exc), list(self.recent),
                       {"phase": "fabric"})
        self._check_states(list(self.recent), {"phase": "fabric"}, by_frame=False)
        self._check_memory(list(self.recent), {"phase": "fabric"})
        self._poll_valid()
        self._check_live()
        r = rng.random()
        if r < 0.40:
            kind = "case"
            slot = self._pick_slot()
            frame, expect = self._case(slot)
        elif r < 0.80:
            kind = "mutant"
            slot, frame = self._mutant()
            expect = None
        elif r < 0.85:
            kind, slot, expect = "random", None, None
            seen = [f for f in self.recent if f]  # frames on the wire lately, either way
            if seen and rng.random() < 0.5:
                frame = self._retarget(self.mutator.mutate(rng.choice(seen)).frame)
            else:
                frame = random_frame(rng)
        else:
            kind = "live"
            frame, expect = self._live_case()
            slot = None
        self.summary.inputs += 1
        self.summary.counts[f"injected {kind}"] += 1
        context = {"kind": kind, "slot": slot.name if slot else "-",
                   "case": expect.case if expect else "-"}
        self._snapshot_states()
        w = fast.walk(frame)
        qpn = int.from_bytes(frame[w.bth_off + 5:w.bth_off + 8], "big") if w.status == OK \
            else -1
        target = self.dev.qps.get(qpn)
        state_before = target.state if target is not None else None
        answers = self._inject(frame, context)
        self._check_generic(frame, answers, target, state_before, context)
        if expect is not None:
            self._check_expect(frame, answers, expect, slot, target, state_before, context)
        self._check_states([frame, *answers], context, by_frame=True)
        self._check_memory([frame, *answers], context)
        for s in self.slots:
            self._drain_cq(s)  # completed receive WQEs no longer grant their buffers
            if s.qp.qp_state.name[8:] != s.state or (not s.clean and rng.random() < 0.2):
                self._arm(s)
        self._snapshot_states()

    # -- expectations ---------------------------------------------------------------------------

    def _check_generic(self, frame: bytes, answers: list[bytes], target: Any,
                       state_before: Any, context: dict[str, Any]) -> None:
        from ..emu.constants import QPType
        from ..emu.states import CAN_RECEIVE

        for a in answers:
            w = fast.walk(a)
            if w.status != OK or fast.icrc_of(a, w) != int.from_bytes(a[w.icrc_off:w.l4_end],
                                                                       "big"):
                self._fail("emitted-malformed", f"the DUT sent a frame that does not walk "
                           f"(status {w.status}) or has a bad ICRC", [frame, a], context)
        if not answers or target is None:
            return
        if target.qp_type != QPType.IBV_QPT_RC:
            self._fail("answer", f"{target.qp_type.name} QP answered a request "
                       f"({len(answers)} frames)", [frame, *answers], context)
        elif state_before not in CAN_RECEIVE:
            self._fail("answer", f"RC QP in {state_before.name} answered "
                       f"({len(answers)} frames)", [frame, *answers], context)

    def _check_expect(self, frame: bytes, answers: list[bytes], e: _Expect, slot: _Slot | None,
                      target: Any, state_before: Any, context: dict[str, Any]) -> None:
        self.summary.counts[f"case {e.case}"] += 1
        got = [_describe(a) for a in answers]
        want = e.answers
        ok = _answers_match(got, want) or (e.optional and not got)
        S = self.QPState
        state_after = target.state if target is not None else None
        if target is not None:
            if e.to_error and state_after != S.IBV_QPS_ERR:
                ok = False
            if not e.to_error and state_after != state_before:
                ok = False
        if not ok:
            self._fail("answer", f"{e.case} on {slot.name if slot else 'live'}: expected "
                       f"{_fmt(want)}{' (or nothing)' if e.optional else ''}"
                       f"{' and ERR' if e.to_error else ''}, got {_fmt(got)} state "
                       f"{state_after.name[8:] if state_after is not None else '-'}",
                       [frame, *answers], context)
            if slot is not None:
                slot.clean = False
        if e.writes is not None and "answer" not in self.skip:
            i, off, data = e.writes
            now = bytes(self.mrs[i].mr.buf[off:off + len(data)])
            if now != data:
                self._fail("answer", f"{e.case}: MR {self.mrs[i].name} at {off} does not "
                           "hold the written data", [frame, *answers], context)

    # -- building requests ----------------------------------------------------------------------

    def _request(self, slot: _Slot, ident: str, psn: int, payload: bytes = b"",
                 ackreq: bool = True, **fields: Any) -> bytes:
        from ..emu.constants import QPType

        prefix = {QPType.IBV_QPT_RC: "RC", QPType.IBV_QPT_UC: "UC",
                  QPType.IBV_QPT_UD: "UD"}[slot.qp_type]
        if prefix == "UD":
            ident = "SEND_ONLY"
            fields = {"deth.q_key": QKEY, "deth.srcqp": 0x77, **{
                k: v for k, v in fields.items() if k.startswith("deth")}}
        name = f"{prefix}_{ident}"
        if name.lower().replace("_", " ") not in _OPCODE_NAMES:
            name = f"RC_{ident}"  # UC has no READ or atomics: the RC row, a wrong transport
        op = OPCODES[_OPCODE_NAMES[name.lower().replace("_", " ")]]
        have = {f"{h}.{f.name}" for h in op.headers for f in LAYOUTS[h].fields} | {
            f.name for h in op.headers for f in LAYOUTS[h].fields}
        have |= {alias for alias in ("rkey", "swap", "compare") if
                 ("reth" in op.headers or "atomiceth" in op.headers)}
        fields = {k: v for k, v in fields.items() if k in have}
        return craft(name, payload, dmac=self.dut.mac, smac="02:00:00:00:00:fe",
                     src=PHANTOM_IP, dst=self.dut.ip, dqpn=slot.qp.qp_num, psn=psn & 0xFFFFFF,
                     ackreq=ackreq, **fields).to_bytes()

    def _bad_rkey(self, mr: Any) -> int:
        rng = self.rng
        if rng.random() < 0.5:
            return mr.rkey ^ rng.randint(1, 255)  # the right MR, the wrong key byte
        return rng.choice((0, 0xFFFFFFFF, (0x7F << 8) | (mr.rkey & 0xFF), rng.getrandbits(32)))

    def _case(self, s: _Slot) -> tuple[bytes, _Expect]:
        """A request with a known outcome for target QP ``s``."""
        from ..emu.constants import QPType

        rng = self.rng
        if not s.clean:
            self._arm(s)
        e = s.epsn
        rc = s.qp_type == QPType.IBV_QPT_RC
        receiving = s.state in ("RTR", "RTS")
        rw = self.mr_rw.mr
        i_rw = self._index(self.mr_rw)
        names = ["send_ok", "write_ok", "read_ok", "atomic_ok", "psn_ahead", "duplicate",
                 "bad_rkey", "oob_write", "ro_write", "other_pd", "misaligned_atomic",
                 "atomic_bad_rkey", "read_bad_rkey", "read_oob", "no_first",
                 "zero_len_bad_rkey", "oversize", "write_len_mismatch", "recv_overflow",
                 "send_first", "dma_beyond"]
        case = rng.choice(names)
        if s.name.endswith("noaccess"):
            case = rng.choice(("write_ok", "read_ok", "atomic_ok"))
        if s.qp_type == QPType.IBV_QPT_UD:
            case = rng.choice(("send_ok", "ud_bad_qkey"))
        posted = len(s.posted)
        wqe_len = next(iter(s.posted.values()))[2] if posted else 0  # the WQE a SEND takes
        mtu = TARGET_MTU
        nak, none = ("nak",), []
        answers: list[tuple] = []
        to_error = optional = False
        writes = None
        if case == "send_ok":
            n = rng.randint(0, min(wqe_len or mtu, mtu) - (
                40 if s.qp_type == QPType.IBV_QPT_UD else 0))
            frame = self._request(s, "SEND_ONLY", e, rng.randbytes(n))
            answers = [("ack", e)] if posted else [("rnr", e)]
            advance = 1 if posted else 0
        elif case == "send_first":
            # a message left unfinished: the slot is re-armed (RESET) before its next case,
            # which must find no message under way (rxe clears resp.opcode on reset)
            frame = self._request(s, "SEND_FIRST", e, rng.randbytes(mtu))
            if not posted:
                answers, advance = [("rnr", e)], 0
            elif wqe_len < mtu:
                answers, advance, to_error = [nak + (1, e)], 0, True
            else:
                answers, advance = [("ack", e)], 1
            s.clean = False
        elif case == "ud_bad_qkey":
            frame = self._request(s, "SEND_ONLY", e, b"x", **{"deth.q_key": QKEY ^ 1})
            answers, advance = none, 0
        elif case == "write_ok":
            n = rng.randint(1, 256)
            off = rng.randrange(rw.length - n + 1)
            data = rng.randbytes(n)
            frame = self._request(s, "RDMA_WRITE_ONLY", e, data, va=rw.addr + off,
                                  rkey=rw.rkey, dmalen=n)
            answers, advance = [("ack", e)], 1
            writes = (i_rw, off, data)
            if s.name.endswith("noaccess"):
                answers, to_error, writes = [nak + (1, e)], True, None
        elif case == "read_ok":
            n = rng.choice((0, 1, rng.randint(1, 3 * mtu)))
            n = min(n, rw.length)
            off = rng.randrange(rw.length - n + 1)
            frame = self._request(s, "RDMA_READ_REQUEST", e, va=rw.addr + off, rkey=rw.rkey,
                                  dmalen=n)
            answers = [("read", e, bytes(rw.buf[off:off + n]))]
            advance = max(1, -(-n // mtu))
            if s.name.endswith("noaccess"):
                answers, to_error, advance = [nak + (1, e)], True, 0
        elif case == "atomic_ok":
            off = rng.randrange(rw.length // 8) * 8
            orig = int.from_bytes(rw.buf[off:off + 8], "little")
            frame = self._request(s, rng.choice(("FETCH_ADD", "COMPARE_SWAP")), e,
                                  va=rw.addr + off, rkey=rw.rkey, swap=rng.getrandbits(64),
                                  compare=rng.choice((orig, rng.getrandbits(64))))
            answers, advance = [("atomic_ack", e, orig)], 1
            if s.name.endswith("noaccess"):
                answers, to_error, advance = [nak + (1, e)], True, 0
        elif case == "psn_ahead":
            k = rng.choice((1, 2, rng.randint(1, 1 << 23)))
            frame = self._request(s, "SEND_ONLY", e + k, b"ahead")
            answers, advance = [nak + (0, e)], 0
            optional = s.nak_sent
            s.nak_sent = True
        elif case == "duplicate":
            k = rng.choice((1, 2, rng.randint(1, (1 << 23) - 1)))
            if rng.random() < 0.5:
                frame = self._request(s, "SEND_ONLY", e - k, b"dup")
            else:
                frame = self._request(s, "RDMA_WRITE_ONLY", e - k, b"dupe", va=rw.addr,
                                      rkey=self._bad_rkey(rw), dmalen=4)
            answers, advance = [("ack", (e - 1) & 0xFFFFFF)], 0
        elif case in ("bad_rkey", "oob_write", "ro_write", "other_pd"):
            n = rng.randint(1, 64)
            mr = {"ro_write": self.mr_ro, "other_pd": self.mr_other}.get(case, self.mr_rw).mr
            va, rkey = mr.addr + rng.randrange(mr.length - n + 1), mr.rkey
            if case == "bad_rkey":
                rkey = self._bad_rkey(mr)
            elif case == "oob_write":
                va = rng.choice((mr.addr - n - rng.randint(1, 64),  # wholly below
                                 mr.addr - rng.randint(1, n),  # straddling the start
                                 mr.addr + mr.length - n + rng.randint(1, n),  # the end
                                 mr.addr + mr.length + rng.randint(0, 4096),  # beyond
                                 (1 << 64) - rng.randint(1, n)))  # wrapping 2^64
                va &= (1 << 64) - 1
            frame = self._request(s, "RDMA_WRITE_ONLY", e, rng.randbytes(n), va=va, rkey=rkey,
                                  dmalen=n)
            answers, advance, to_error = [nak + (2, e)], 0, True
        elif case in ("misaligned_atomic", "atomic_bad_rkey"):
            off = rng.randrange(rw.length // 8 - 1) * 8
            if case == "misaligned_atomic":
                off += rng.randint(1, 7)
                rkey, code = rw.rkey, 1
            else:
                rkey, code = self._bad_rkey(rw), 2
            frame = self._request(s, rng.choice(("FETCH_ADD", "COMPARE_SWAP")), e,
                                  va=rw.addr + off, rkey=rkey, swap=1, compare=0)
            answers, advance, to_error = [nak + (code, e)], 0, True
        elif case in ("read_bad_rkey", "read_oob"):
            n = rng.randint(1, 2 * mtu)
            if case == "read_bad_rkey":
                va, rkey = rw.addr, self._bad_rkey(rw)
            else:
                va, rkey = rw.addr + rw.length - n + rng.randint(1, n), rw.rkey
            frame = self._request(s, "RDMA_READ_REQUEST", e, va=va, rkey=rkey, dmalen=n)
            answers, advance, to_error = [nak + (2, e)], 0, True
        elif case == "no_first":
            ident = rng.choice(("SEND_MIDDLE", "SEND_LAST", "RDMA_WRITE_MIDDLE",
                                "RDMA_WRITE_LAST"))
            size = mtu if ident.endswith("MIDDLE") else rng.randint(1, 64)
            frame = self._request(s, ident, e, rng.randbytes(size))
            answers, advance, to_error = [nak + (1, e)], 0, True
        elif case == "zero_len_bad_rkey":
            frame = self._request(s, "RDMA_WRITE_ONLY", e, b"", va=rng.getrandbits(64),
                                  rkey=self._bad_rkey(rw), dmalen=0)
            answers, advance = [("ack", e)], 1
        elif case == "oversize":
            frame = self._request(s, rng.choice(("SEND_ONLY", "RDMA_WRITE_ONLY")), e,
                                  rng.randbytes(mtu + rng.choice((1, 4, 100))), va=rw.addr,
                                  rkey=rw.rkey, dmalen=mtu + 1)
            is_send = frame[_bth_at(frame)] & 0x1F == 0x04
            if is_send and not posted:
                answers, advance = [("rnr", e)], 0
            else:
                answers, advance, to_error = [nak + (1, e)], 0, True
        elif case == "dma_beyond":
            # a first packet that fits the MR, of a WRITE whose DMA length does not
            frame = self._request(s, "RDMA_WRITE_FIRST", e, rng.randbytes(mtu),
                                  va=rw.addr + rw.length - mtu, rkey=rw.rkey,
                                  dmalen=mtu + rng.randint(1, 4 * mtu))
            answers, advance, to_error = [nak + (2, e)], 0, True
        elif case == "write_len_mismatch":
            n = rng.randint(1, 64)
            frame = self._request(s, "RDMA_WRITE_ONLY", e, rng.randbytes(n), va=rw.addr,
                                  rkey=rw.rkey, dmalen=n + rng.choice((1, 7, 1000)))
            answers, advance, to_error = [nak + (1, e)], 0, True
        else:  # recv_overflow: a SEND longer than the receive buffer, shorter than the MTU
            frame = self._request(s, "SEND_ONLY", e, rng.randbytes(
                rng.randint(min(wqe_len, mtu - 1) + 1, mtu)))
            if posted and wqe_len < mtu:
                answers, advance, to_error = [nak + (1, e)], 0, True
            elif posted:
                answers, advance = [("ack", e)], 1
            else:
                answers, advance = [("rnr", e)], 0
        if not rc or not receiving:
            # UC and UD never answer; QPs outside RTR/RTS drop everything
            answers, to_error, optional = none, False, False
            if not receiving or case not in ("write_ok", "send_ok"):
                writes = None
            s.clean = s.clean and receiving and s.qp_type == QPType.IBV_QPT_UD
        else:
            s.epsn = (e + advance) & 0xFFFFFF
            if advance:
                s.nak_sent = False
            if to_error:
                s.clean = False
        return frame, _Expect(case, answers, to_error, optional, writes)

    def _pick_slot(self) -> _Slot:
        """Target QPs for cases: receiving RC QPs half the time (most outcomes are theirs),
        receiving UC a sixth, any the rest."""
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            pool = [s for s in self.slots if s.name in ("RC/RTS", "RC/RTR")]
        elif r < 0.66:
            pool = [s for s in self.slots if s.name in ("UC/RTS", "UC/RTR")]
        else:
            pool = self.slots
        return rng.choice(pool)

    def _mutant(self) -> tuple[_Slot, bytes]:
        """A mutant of a valid request aimed at a target QP, never at a live one."""
        rng = self.rng
        slot = rng.choice(self.slots)
        slot.clean = False
        saved = slot.epsn
        base, _ = self._case(slot)
        slot.epsn = saved
        slot.clean = False
        m = self.mutator.mutate(base)
        self.summary.counts[f"mutant {'fixed' if m.fixed else 'raw'}"] += 1
        return slot, self._retarget(m.frame)

    def _retarget(self, frame: bytes) -> bytes:
        """Point a frame that would reach a live QP at a target QP instead."""
        w = fast.walk(frame)
        if w.status != OK:
            return frame
        qpn = int.from_bytes(frame[w.bth_off + 5:w.bth_off + 8], "big")
        if qpn not in self.live_qpns:
            return frame
        good = fast.icrc_of(frame, w) == int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
        buf = bytearray(frame)
        buf[w.bth_off + 5:w.bth_off + 8] = self.rng.choice(self.slots).qp.qp_num.to_bytes(
            3, "big")
        out = bytes(buf)
        if good:
            from .mutate import fixup

            out = fixup(out)
        return out

    def _live_case(self) -> tuple[bytes, _Expect]:
        """Something a live RC/UC QP must shrug off: a duplicate, a PSN ahead, a bad ICRC,
        a malformed frame."""
        rng = self.rng
        pq, dq, _ = self.live[rng.choice(("RC", "RC", "UC"))]
        rc = dq.core.transport is Transport.RC
        epsn = dq.core.responder.epsn  # white-box: the live responder's expected PSN
        kind = rng.choice(("dup", "ahead", "bad_icrc", "malformed"))
        prefix = "RC" if rc else "UC"
        live = self.mr_live.mr
        fake = _Slot("live", dq, dq.core.qp_type, "RTS", None, 0, self.full)
        if kind == "dup":
            k = rng.randint(1024, (1 << 23) - 1)  # far behind anything in flight
            frame = self._request(fake, rng.choice(("SEND_ONLY", "RDMA_WRITE_ONLY")),
                                  epsn - k, b"dup!", va=live.addr, rkey=self._bad_rkey(live),
                                  dmalen=4) if rc else b""
            if not rc:  # UC treats any First/Only as a new message: send junk instead
                kind = "malformed"
            else:
                return frame, _Expect(f"live_{kind}", [("ack", (epsn - 1) & 0xFFFFFF)])
        if kind == "ahead" and rc:
            frame = self._request(fake, "RDMA_WRITE_MIDDLE", epsn + rng.randint(1 << 16,
                                                                              1 << 22),
                                  rng.randbytes(TARGET_MTU))
            return frame, _Expect(f"live_{kind}", [("nak", 0, epsn)], optional=True)
        base = craft(f"{prefix}_SEND_ONLY", b"bad", dmac=self.dut.mac, dqpn=dq.qp_num,
                     psn=epsn).to_bytes()
        if kind == "bad_icrc":
            buf = bytearray(base)
            buf[-1 - rng.randrange(4)] ^= 1 << rng.randrange(8)
            return bytes(buf), _Expect(f"live_{kind}", [])
        frame = base
        for _ in range(20):  # a mutant the walk rejects
            frame = self.mutator.mutate(base, fix=False).frame
            if fast.walk(frame).status != OK:
                break
        else:
            frame = base[:30]
        return frame, _Expect("live_malformed", [])

    def _check_live(self) -> None:
        S = self.QPState
        for key, (pq, dq, _) in self.live.items():
            for q, side in ((pq, "peer"), (dq, "DUT")):
                if q.qp_state != S.IBV_QPS_RTS:
                    self._fail("valid-traffic", f"live {key} QP on the {side} is in "
                               f"{q.qp_state.name} with only harmless injections",
                               list(self.recent), {})
                    self._reconnect(key)
                    return

    def _reconnect(self, key: str) -> None:
        """Bring a live pair back after a failure so the run can go on."""
        from ..emu import QPAttr, QPAttrMask, connect
        from ..emu.constants import QPType

        pq, dq, _ = self.live[key]
        for q in (pq, dq):
            q.modify(QPAttr(qp_state=self.QPState.IBV_QPS_RESET), QPAttrMask.IBV_QP_STATE)
        self.live_posted[dq.qp_num].clear()
        for wr_id, (_, what) in list(self.outstanding.items()):
            if what.startswith(key):
                del self.outstanding[wr_id]
        if pq.core.qp_type == QPType.IBV_QPT_UD:
            for q in (pq, dq):
                q.to_init(QPAttr(qkey=QKEY))
                q.to_rtr(QPAttr())
                q.to_rts(QPAttr(sq_psn=0))
        else:
            connect(pq, dq, path_mtu=TARGET_MTU, psn_a=self.rng.randrange(1 << 24),
                    psn_b=self.rng.randrange(1 << 24), timeout=8, min_rnr_timer=1,
                    max_rd_atomic=4)
        self._snapshot_states()

    # -- running --------------------------------------------------------------------------------

    def run(self, count: int | None = 2000, time_limit: float | None = None,
            progress: Callable[[Summary], None] | None = None) -> Summary:
        start = time.monotonic()
        deadline = None if time_limit is None else start + time_limit
        while (count is None or self.step_no < count) and (
                deadline is None or time.monotonic() < deadline):
            self.step()
            if progress is not None and self.step_no % 64 == 0:
                progress(self.summary)
        self.finish()
        self.summary.elapsed = time.monotonic() - start
        return self.summary

    def finish(self) -> None:
        """Let valid traffic drain; everything posted must have completed."""
        try:
            self.fab.run(until=self.fab.now + VALID_DEADLINE_NS)
        except Exception as exc:  # noqa: BLE001
            self._fail("exception", "the fabric raised " + _exc_line(exc), list(self.recent),
                       {"phase": "final"})
        self._poll_valid(final=True)
        self._check_memory(list(self.recent), {"phase": "final"})
        self.summary.counts["DUT frames in"] = self.dev.counters.frames_in
        self.summary.counts["DUT icrc drops"] = self.dev.counters.icrc_drops
        self.summary.counts["DUT malformed"] = self.dev.counters.malformed

    def replay(self, saved: Saved) -> list[str]:
        """Run the same seed to the saved step; the failures of the saved check there."""
        step = int(saved.keys.get("step", 0))
        found: list[tuple[str, str]] = []
        while self.step_no < step:
            self.step()
            if self.step_no == step:
                found = self.step_failures
        if self.step_no == step and not found:
            found = self.step_failures
        return [f"{c}: {d}" for c, d in found if c == saved.check]


def fuzz_responder(seed: int, count: int | None = 2000, time_limit: float | None = None,
                   skip: Iterable[str] = (),
                   progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run the responder harness; see ``ResponderFuzzer``."""
    return ResponderFuzzer(seed, skip).run(count, time_limit, progress)


# -- helpers for the responder harness ----------------------------------------------------------


_OPCODE_NAMES = {op.ident.lower().replace("_", " "): op.code for op in OPCODES.values()}


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def _bth_at(frame: bytes) -> int:
    return fast.walk(frame).bth_off


def _fields(frame: bytes, base: int, layout: Any) -> dict[str, int]:
    from .mutate import get_field

    return {f.name: get_field(frame, base, f) for f in layout.fields}


def _describe(frame: bytes) -> tuple:
    """An answer frame as the tuple ``_Expect`` speaks: ("ack", psn), ("nak", code, psn)..."""
    try:
        p = parse(frame)
    except ValueError:
        return ("malformed",)
    f = p.fields()
    op = p.opcode.operation.value
    psn = f["bth.psn"]
    if op == "ack":
        syn = f["aeth.syndrome"]
        kind = (syn >> 5) & 3
        return {0: ("ack", psn), 1: ("rnr", psn), 3: ("nak", syn & 0x1F, psn)}.get(
            kind, ("reserved-syndrome", syn, psn))
    if op == "read_response":
        return ("read", psn, p.payload)
    if op == "atomic_ack":
        return ("atomic_ack", psn, f["atomicacketh.origremdt"])
    return (p.opcode.ident, psn)


def _answers_match(got: list[tuple], want: list[tuple]) -> bool:
    if len(want) == 1 and want[0][0] == "read":
        # READ responses: consecutive PSNs from the request's, payloads joined = the data
        _, psn, data = want[0]
        if not got or any(g[0] != "read" for g in got):
            return False
        psns = [g[1] for g in got]
        return psns == [(psn + i) & 0xFFFFFF for i in range(len(got))] and \
            b"".join(g[2] for g in got) == data
    return got == want


def _fmt(answers: list[tuple]) -> str:
    if not answers:
        return "no answer"
    parts = []
    for a in answers:
        if a[0] == "read":
            parts.append(f"read psn={a[1]} {len(a[2])}B")
        elif a[0] == "nak":
            parts.append(f"NAK code {a[1]} psn={a[2]}")
        else:
            parts.append(" ".join(str(x) for x in a))
    return ", ".join(parts)


def _changed(old: bytes, new: bytes) -> list[tuple[int, int]]:
    """[lo, hi) runs of differing bytes."""
    out = []
    i, n = 0, min(len(old), len(new))
    while i < n:
        if old[i] != new[i]:
            j = i
            while j < n and old[j] != new[j]:
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _subtract(span: tuple[int, int], allowed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of ``span`` covered by none of ``allowed``."""
    parts = [span]
    for a, b in allowed:
        nxt = []
        for lo, hi in parts:
            if b <= lo or a >= hi:
                nxt.append((lo, hi))
                continue
            if lo < a:
                nxt.append((lo, a))
            if b < hi:
                nxt.append((b, hi))
        parts = nxt
    return parts


def _ranges(allowed: list[tuple[int, int]]) -> str:
    if not allowed:
        return "nothing"
    return ", ".join(f"{a}..{b - 1}" for a, b in sorted(set(allowed))[:4])


# -- replaying saved failures -------------------------------------------------------------------


def replay_one(saved: Saved) -> list[str]:
    """The checks a saved failure still fails (empty: fixed)."""
    return replay_all([saved])[0]


def replay_all(saved: list[Saved]) -> list[list[str]]:
    """``replay_one`` for many: responder failures of one seed share one run, stepped to
    each saved step in turn."""
    out: list[list[str]] = [[] for _ in saved]
    runs: dict[int, ResponderFuzzer] = {}
    order = sorted(range(len(saved)), key=lambda i: int(saved[i].keys.get("step", 0)))
    for i in order:
        s = saved[i]
        seed = int(s.keys.get("seed", 0))
        if s.harness == "decoder":
            out[i] = DecoderFuzzer(seed).replay(s)
        elif s.harness == "responder":
            if seed not in runs:
                runs[seed] = ResponderFuzzer(seed)
            out[i] = runs[seed].replay(s)
        else:
            raise ValueError(f"{s.path.name}: {s.harness} failures are not replayed here; "
                             "send the pcap to the target again with `roce replay`")
    return out


# -- the wire harness ---------------------------------------------------------------------------


class EnvironmentProblem(InputError):
    """What stops a wire run before it starts: no interface, no privilege, no answer to ARP
    (exit status 2)."""


ETH_P_ALL, ETH_P_ARP = 0x0003, 0x0806
PACKET_OUTGOING = 4
_SIOCGIFHWADDR, _SIOCGIFADDR = 0x8927, 0x8915


def _iface_addresses(name: str) -> tuple[bytes, str]:
    """(MAC, IPv4 address) of an interface, by ioctl (right inside a network namespace)."""
    import fcntl
    import socket
    import struct

    try:
        socket.if_nametoindex(name)
    except OSError:
        raise EnvironmentProblem(f"no interface {name!r}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", name.encode()[:15])
        mac = fcntl.ioctl(s.fileno(), _SIOCGIFHWADDR, req)[18:24]
        try:
            ip = socket.inet_ntoa(fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)[20:24])
        except OSError:
            raise EnvironmentProblem(f"interface {name!r} has no IPv4 address") from None
    return mac, ip


class _WireLink:
    """One AF_PACKET socket on an interface, sending and receiving whole frames."""

    def __init__(self, name: str) -> None:
        import socket

        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                      socket.htons(ETH_P_ALL))
        except PermissionError:
            raise EnvironmentProblem("raw sockets need root (CAP_NET_RAW)") from None
        except (AttributeError, OSError) as exc:
            raise EnvironmentProblem(f"cannot open a raw socket: {exc}") from None
        self.sock.bind((name, 0))
        self.sock.setblocking(False)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def receive(self, timeout: float) -> list[bytes]:
        """Frames that arrived (not our own outgoing ones), waiting up to ``timeout``."""
        import select

        out = []
        if timeout > 0:
            select.select([self.sock], [], [], timeout)
        while True:
            try:
                data, addr = self.sock.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return out
            if addr[2] != PACKET_OUTGOING:
                out.append(data)

    def close(self) -> None:
        self.sock.close()


def _arp(link: _WireLink, mac: bytes, ip: str, target: str, timeout: float = 2.0) -> bytes:
    """Resolve ``target`` with ARP requests of our own."""
    import socket

    req = (b"\xff" * 6 + mac + ETH_P_ARP.to_bytes(2, "big") + b"\x00\x01\x08\x00\x06\x04\x00\x01"
           + mac + socket.inet_aton(ip) + bytes(6) + socket.inet_aton(target))
    end = time.monotonic() + timeout
    want = socket.inet_aton(target)
    while time.monotonic() < end:
        link.send(req)
        for f in link.receive(0.2):
            if f[12:14] == ETH_P_ARP.to_bytes(2, "big") and f[20:22] == b"\x00\x02" and \
                    f[28:32] == want:
                return f[22:28]
    raise EnvironmentProblem(f"no ARP answer from {target} (give --target-mac)")


class WireFuzzer:
    """Mutated RC requests to a device under test, with liveness probes.

    Frames go out paced at ``pps``; every ``probe_every`` frames a valid probe (an RDMA READ
    of the target's MR when its rkey is known, else a SEND) is sent at the expected PSN
    learnt from the target's answers (an ACK for PSN p means p+1 is expected next; a
    PSN-sequence NAK carries the expected PSN) and must be answered within
    ``probe_timeout``.  When it is not (twice), the run stops with a ``liveness`` failure
    listing the last frames sent.  Everything sent and received can be recorded to a pcap.
    """

    name = "wire"

    def __init__(self, args: Any) -> None:
        self.args = args
        self.rng = random.Random(f"wire:{args.seed}")
        self.mutator = Mutator(self.rng)
        self.summary = Summary(self.name, args.seed)
        self.mac, self.ip = _iface_addresses(args.interface)
        self.link = _WireLink(args.interface)
        if args.target_mac:
            self.tmac = bytes.fromhex(args.target_mac.replace(":", "").replace("-", ""))
        else:
            self.tmac = _arp(self.link, self.mac, self.ip, args.target)
        self.epsn = args.psn if args.psn is not None else 0
        self.sent: deque[bytes] = deque(maxlen=16)
        self.writer = PcapWriter(args.pcap) if args.pcap else None

    def _craft(self, ident: str, psn: int, payload: bytes = b"", **fields: Any) -> bytes:
        a = self.args
        return craft(ident, payload, dmac=self.tmac.hex(":"), smac=self.mac.hex(":"),
                     src=self.ip, dst=a.target, dqpn=a.qpn, psn=psn & 0xFFFFFF, ackreq=True,
                     **fields).to_bytes()

    def _base(self) -> bytes:
        """A valid-looking request near the expected PSN, for the mutator."""
        rng, a = self.rng, self.args
        psn = self.epsn + rng.choice((0, 0, 1, -1, rng.randint(-1000, 1000)))
        rkey = a.rkey if a.rkey is not None and rng.random() < 0.8 else rng.getrandbits(32)
        n = rng.randint(0, min(a.size, 256))
        va = a.va + rng.randrange(max(a.size - n, 1))
        kind = rng.choice(("send", "write", "read", "atomic"))
        if kind == "send":
            return self._craft("RC_SEND_ONLY", psn, rng.randbytes(n))
        if kind == "write":
            return self._craft("RC_RDMA_WRITE_ONLY", psn, rng.randbytes(n), va=va, rkey=rkey,
                               dmalen=n)
        if kind == "read":
            return self._craft("RC_RDMA_READ_REQUEST", psn, va=va, rkey=rkey, dmalen=n)
        return self._craft(rng.choice(("RC_FETCH_ADD", "RC_COMPARE_SWAP")), psn,
                           va=va & ~7, rkey=rkey, swap=rng.getrandbits(64), compare=0)

    def _record(self, frame: bytes) -> None:
        if self.writer is not None:
            self.writer.write(frame, ts_ns=time.time_ns())

    def _send(self, frame: bytes) -> bool:
        if len(frame) < SIZE_OF["eth"]:
            self.summary.counts["not sent (shorter than Ethernet)"] += 1
            return False
        try:
            self.link.send(frame)
        except OSError as exc:  # longer than the interface MTU, mostly
            self.summary.counts[f"not sent ({exc.strerror or exc})"] += 1
            return False
        self.sent.append(frame)
        self._record(frame)
        return True

    def _answers(self, timeout: float) -> list[tuple]:
        """Answers from the target (recorded, and the expected PSN learnt from them)."""
        out = []
        for f in self.link.receive(timeout):
            if f[6:12] != self.tmac or f[0:6] != self.mac:
                continue
            self._record(f)
            d = _describe(f)
            if d[0] == "malformed":
                continue
            self.summary.counts["answers " + d[0]] += 1
            if d[0] == "ack":
                self.epsn = (d[1] + 1) & 0xFFFFFF
            elif d[0] == "nak":
                self.summary.counts[f"answers nak code {d[1]}"] += 1
                if d[1] == 0:
                    self.epsn = d[2]
            out.append(d)
        return out

    def _probe(self) -> bool:
        a = self.args
        for _attempt in range(3):
            psn = self.epsn
            if a.rkey is not None:
                frame = self._craft("RC_RDMA_READ_REQUEST", psn, va=a.va, rkey=a.rkey,
                                    dmalen=min(a.size, 64))
            else:
                frame = self._craft("RC_SEND_ONLY", psn, b"roce fuzz probe!")
            self.link.send(frame)
            self._record(frame)
            end = time.monotonic() + a.probe_timeout
            while time.monotonic() < end:
                for d in self._answers(min(0.05, max(end - time.monotonic(), 0))):
                    if d[0] in ("ack", "read", "rnr") and d[1] == psn or d[0] == "nak":
                        if d[0] == "nak" and d[1] == 0 and d[2] != psn:
                            break  # out of sequence: try again at the PSN it named
                        self.summary.counts["probes answered"] += 1
                        if d[0] == "read":
                            n = max(1, -(-min(a.size, 64) // 256))
                            self.epsn = (psn + n) & 0xFFFFFF
                        return True
                else:
                    continue
                break
        return False

    def run(self, count: int | None, time_limit: float | None,
            progress: Callable[[Summary], None] | None = None) -> Summary:
        a = self.args
        start = time.monotonic()
        deadline = None if time_limit is None else start + time_limit
        interval = 1.0 / a.pps
        next_at = time.monotonic()
        s = self.summary
        try:
            if a.probe_every and not self._probe():
                s.add_failure(Failure(self.name, "liveness", f"{a.target} QP 0x{a.qpn:x} does "
                                      "not answer a valid probe before fuzzing",
                                      [], context={"seed": a.seed, "sent": 0}))
                return s
            while (count is None or s.inputs < count) and (
                    deadline is None or time.monotonic() < deadline):
                m = self.mutator.mutate(self._base())
                wait = next_at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                next_at = max(next_at + interval, time.monotonic() - 1.0)
                if not self._send(m.frame):
                    continue
                s.inputs += 1
                s.counts["sent " + m.ops[0]] += 1
                self._answers(0)
                if a.probe_every and s.inputs % a.probe_every == 0:
                    if not self._probe():
                        s.add_failure(Failure(
                            self.name, "liveness",
                            f"{a.target} QP 0x{a.qpn:x} stopped answering after {s.inputs} "
                            f"frames; the last {len(self.sent)} sent are attached",
                            list(self.sent), context={"seed": a.seed, "sent": s.inputs}))
                        break
                if progress is not None and s.inputs % 64 == 0:
                    progress(s)
            self._answers(0.2)
        finally:
            s.elapsed = time.monotonic() - start
            self.link.close()
            if self.writer is not None:
                self.writer.close()
        return s


def fuzz_wire(args: Any, count: int | None,
              progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run the wire harness with the parsed ``roce fuzz wire`` arguments."""
    return WireFuzzer(args).run(count, args.time, progress)


# -- verbs programs (roce.testing.strategies.verbs_programs) ------------------------------------


@dataclass
class ProgramResult:
    """What ``run_program`` saw: ``problems`` lists every broken invariant."""

    problems: list[str] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)  # completion status name -> count
    posted: int = 0
    rejected: int = 0  # operations the verbs layer refused (bad state, illegal modify)


def run_program(program: list[tuple], seed: int = 0, auto_recv: bool = False,
                limit_ns: int = 2_000_000_000, **link: Any) -> ProgramResult:
    """Execute a verbs program (see ``roce.testing.strategies``) from host a to host b over
    a seeded fabric (``link``: ``LinkConfig`` fields such as loss=0.05, dup=0.05) and check:

    - nothing raises but the verbs layer's own refusals (QPStateError, ValueError);
    - every send work request completes exactly once, every receive at most once, and no
      completion names a request never posted;
    - b's remote MR changes only inside good, in-bounds WRITE/atomic ranges, its receive
      MR only inside posted receive buffers, and an MR of another PD never;
    - QP states change only through the table (or to ERR);
    - when every send completed successfully: SEND data arrived whole and in order,
      READs returned the remote bytes as they were, atomics the value before, and the
      remote MR holds exactly what the WRITEs and atomics made of it (exactly-once).

    ``auto_recv`` posts a receive before every SEND (valid programs have no RNR waits)."""
    from ..emu import (
        CQ,
        MR,
        PD,
        QP,
        Access,
        Fabric,
        QPAttr,
        QPAttrMask,
        QPInitAttr,
        QPState,
        QPStateError,
        QPType,
        RecvWR,
        SendWR,
        WCStatus,
        WROpcode,
        connect,
    )
    from ..emu.states import TRANSITIONS
    from .strategies import PROGRAM_MR_SIZE, PROGRAM_RECV_SIZE

    res = ProgramResult()
    full = (Access.IBV_ACCESS_LOCAL_WRITE | Access.IBV_ACCESS_REMOTE_WRITE
            | Access.IBV_ACCESS_REMOTE_READ | Access.IBV_ACCESS_REMOTE_ATOMIC)
    rng = random.Random(seed)
    fab = Fabric(seed=seed)
    a, b = fab.add_host("a", "10.0.0.1"), fab.add_host("b", "10.0.0.2")
    fab.connect(a, b, **link)
    pda, pdb, pdo = PD(a), PD(b), PD(b)
    slots = max(len(program), 1)
    src, dst = MR(pda, 1 << 16, full), MR(pda, slots * PROGRAM_MR_SIZE, full)
    src.write(rng.randbytes(1 << 16))
    remote = MR(pdb, PROGRAM_MR_SIZE, full)
    remote.write(rng.randbytes(PROGRAM_MR_SIZE))
    other = MR(pdo, PROGRAM_MR_SIZE, full)
    other.write(rng.randbytes(PROGRAM_MR_SIZE))
    recv = MR(pdb, 2 * slots * PROGRAM_RECV_SIZE, int(Access.IBV_ACCESS_LOCAL_WRITE))
    shadow = {"remote": bytes(remote.buf), "other": bytes(other.buf), "recv": bytes(recv.buf)}
    cqa, cqb = CQ(a), CQ(b)
    qa = QP(pda, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqa, recv_cq=cqa))
    qb = QP(pdb, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqb, recv_cq=cqb))
    connect(qa, qb, path_mtu=256, timeout=6, retry_cnt=7, rnr_retry=7 if auto_recv else 2,
            min_rnr_timer=1, max_rd_atomic=4)
    model = bytearray(remote.buf)  # the remote MR as exactly-once execution leaves it
    snapshots: list[bytes] = [bytes(model)]  # the model after each operation that changed it
    sends: dict[int, tuple[str, Any]] = {}  # wr_id -> (kind, what to check)
    recvs: dict[int, int] = {}  # wr_id -> recv MR offset
    granted: list[tuple[int, int]] = []
    recv_granted: list[tuple[int, int]] = []
    sent_data: list[bytes] = []
    wr = 0
    recv_slot = 0
    states = {"a": qa.qp_state, "b": qb.qp_state}
    may_lose = False
    u64 = (1 << 64) - 1

    def rkey_of(kind: str) -> int:
        return {"good": remote.rkey, "bad_key": remote.rkey ^ 0x5A,
                "bad_index": (0x7FFF << 8) | (remote.rkey & 0xFF),
                "other_pd": other.rkey}[kind]

    def post_recv(n: int) -> None:
        nonlocal wr, recv_slot
        wr += 1
        off = recv_slot * PROGRAM_RECV_SIZE
        recv_slot = (recv_slot + 1) % (2 * slots)
        try:
            qb.post_recv(RecvWR(wr_id=wr, sg_list=[recv.sge(off, n)]))
        except (QPStateError, ValueError):
            res.rejected += 1
            return
        recvs[wr] = off
        recv_granted.append((off, off + n))

    def post_send(kind: str, w: SendWR, check: Any) -> None:
        try:
            qa.post_send(w)
        except (QPStateError, ValueError):
            res.rejected += 1
            return
        res.posted += 1
        sends[w.wr_id] = (kind, check)

    try:
        for i, op in enumerate(program):
            name = op[0]
            dslot = i * PROGRAM_MR_SIZE
            if name == "post_recv":
                post_recv(op[1])
            elif name == "send":
                n, imm = op[1], op[2]
                if auto_recv:
                    post_recv(PROGRAM_RECV_SIZE)
                wr += 1
                off = rng.randrange((1 << 16) - n) if n < (1 << 16) else 0
                code = WROpcode.IBV_WR_SEND if imm is None else WROpcode.IBV_WR_SEND_WITH_IMM
                data = bytes(src.buf[off:off + n])
                post_send("send", SendWR(wr_id=wr, opcode=code, sg_list=[src.sge(off, n)],
                                         imm_data=imm or 0), data)
                if wr in sends:
                    sent_data.append(data)
            elif name in ("write", "read"):
                off, n, kind = op[1], op[2], op[3]
                wr += 1
                good = kind == "good" and n > 0 and off + n <= PROGRAM_MR_SIZE
                if name == "write":
                    soff = rng.randrange((1 << 16) - n) if n < (1 << 16) else 0
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                               sg_list=[src.sge(soff, n)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind))
                    data = bytes(src.buf[soff:soff + n])
                    post_send("write", w, (off, data))
                    if good and wr in sends:
                        granted.append((off, off + n))
                        model[off:off + n] = data
                        snapshots.append(bytes(model))
                else:
                    n_local = min(n, PROGRAM_MR_SIZE)
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_RDMA_READ,
                               sg_list=[dst.sge(dslot, n_local)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind))
                    # a retried READ re-reads remote memory, which later WRITEs may have
                    # changed by then (IBA: no fence): any later state of it is right
                    post_send("read", w, (dslot, off, n if good else 0, len(snapshots) - 1))
            elif name in ("cas", "faa"):
                off, kind = op[1], op[-1]
                wr += 1
                good = kind == "good" and off % 8 == 0 and off + 8 <= PROGRAM_MR_SIZE
                before = int.from_bytes(model[off:off + 8], "little") if good else None
                if name == "cas":
                    cmp_, swap = op[2], op[3]
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_ATOMIC_CMP_AND_SWP,
                               sg_list=[dst.sge(dslot, 8)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind), compare_add=cmp_, swap=swap)
                    after = swap if before == cmp_ else before
                else:
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                               sg_list=[dst.sge(dslot, 8)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind), compare_add=op[2])
                    after = None if before is None else (before + op[2]) & u64
                post_send("atomic", w, (dslot, before))
                if good and wr in sends and after is not None:
                    granted.append((off, off + 8))
                    model[off:off + 8] = after.to_bytes(8, "little")
                    snapshots.append(bytes(model))
            elif name == "modify":
                qp = qa if op[1] == "a" else qb
                try:
                    qp.modify(QPAttr(qp_state=getattr(QPState, "IBV_QPS_" + op[2])),
                              QPAttrMask.IBV_QP_STATE)
                    if op[1] == "a" and op[2] in ("RESET", "SQD"):
                        may_lose = True  # RESET drops work; SQD stops sending it
                except QPStateError:
                    res.rejected += 1
                states[op[1]] = qp.qp_state
            elif name == "run":
                fab.run(until=fab.now + op[1])
            for side, qp in (("a", qa), ("b", qb)):
                if qp.qp_state != states[side] and (states[side], qp.qp_state) not in \
                        TRANSITIONS and qp.qp_state != QPState.IBV_QPS_ERR:
                    res.problems.append(f"QP {side} went {states[side].name} -> "
                                        f"{qp.qp_state.name}")
                states[side] = qp.qp_state
        fab.run(until=fab.now + limit_ns)
    except Exception as exc:  # noqa: BLE001 - the finding
        res.problems.append("raised " + _exc_line(exc))
        return res
    # completions: exactly once
    seen: Counter = Counter()
    ok_all = True
    for wc in cqa.poll(1 << 20):
        seen[wc.wr_id] += 1
        res.statuses[WCStatus(wc.status).name] += 1
        if wc.wr_id not in sends:
            res.problems.append(f"send completion for unknown wr_id {wc.wr_id}")
            continue
        kind, check = sends[wc.wr_id]
        if wc.status != WCStatus.IBV_WC_SUCCESS:
            ok_all = False
            continue
        if kind == "read" and check[2]:
            dslot, off, n, first = check
            for c in range(0, n, 256):  # per response packet (path MTU 256)
                got = bytes(dst.buf[dslot + c:dslot + min(c + 256, n)])
                later = [snap[off + c:off + min(c + 256, n)] for snap in snapshots[first:]]
                # a WRITE lands packet by packet, so a re-read may see it half done: each
                # byte must be one the remote held at or after the READ was posted
                if got not in later and any(all(v[k] != b for v in later)
                                            for k, b in enumerate(got)):
                    res.problems.append(f"READ wr {wc.wr_id} returned bytes the remote MR "
                                        f"never held (at +{c})")
                    break
        if kind == "atomic" and check[1] is not None and \
                int.from_bytes(dst.buf[check[0]:check[0] + 8], "little") != check[1]:
            res.problems.append(f"atomic wr {wc.wr_id} returned another original value")
    for wr_id in sends:
        if seen[wr_id] > 1 or (seen[wr_id] == 0 and not may_lose):
            res.problems.append(f"send wr {wr_id} ({sends[wr_id][0]}) completed "
                                f"{seen[wr_id]} times")
            ok_all = False
    got_data = []
    rseen: Counter = Counter()
    for wc in cqb.poll(1 << 20):
        rseen[wc.wr_id] += 1
        if wc.wr_id not in recvs:
            res.problems.append(f"receive completion for unknown wr_id {wc.wr_id}")
        elif wc.status == WCStatus.IBV_WC_SUCCESS:
            off = recvs[wc.wr_id]
            got_data.append(bytes(recv.buf[off:off + wc.byte_len]))
    for wr_id, n in rseen.items():
        if n > 1:
            res.problems.append(f"receive wr {wr_id} completed {n} times")
    # memory
    for name, mr, allowed in (("remote", remote, granted), ("other", other, []),
                              ("recv", recv, recv_granted)):
        for lo, hi in _changed(shadow[name], bytes(mr.buf)):
            outside = _subtract((lo, hi), allowed)
            if outside:
                res.problems.append(f"{name} MR bytes {outside[0][0]}..{outside[0][1] - 1} "
                                    "changed outside any granted range")
                break
    if ok_all and qa.qp_state == QPState.IBV_QPS_RTS and qb.qp_state == QPState.IBV_QPS_RTS:
        if got_data != sent_data:
            res.problems.append(f"{len(sent_data)} SENDs, {len(got_data)} received; data "
                                f"{'differs' if len(got_data) == len(sent_data) else 'lost'}")
        if bytes(remote.buf) != bytes(model):
            lo, hi = _changed(bytes(model), bytes(remote.buf))[0]
            res.problems.append(f"remote MR differs from exactly-once execution at "
                                f"{lo}..{hi - 1}")
    return res
